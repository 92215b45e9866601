package agent

import (
	"context"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Tasks are the driver's operations a CLI needs, with the driver's
// meanings and errors. *Local serves them in-process (daemonless, and in
// the agent for its clients: one implementation), *Client through an
// agent: a command written against Tasks prints the same and exits the
// same either way.
type Tasks interface {
	StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error)
	// StartNamed is driver.StartNamed: the name rules (one live task a
	// name; Replace stops it first) under the name's lock.
	StartNamed(ctx context.Context, id string, spec fsm.Spec, opts driver.StartOptions) (fsm.Task, []fsm.Task, error)
	// RestartTask is driver.RestartTask: stop, then start the spec again
	// as newID, under the name's lock.
	RestartTask(ctx context.Context, id, newID string) (task, old fsm.Task, err error)
	StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error)
	// SignalTask signals the task's process group, or its main process
	// alone with main (driver.SignalTask, driver.SignalMain).
	SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error
	// Resolve is driver.Resolve: an id, or a name by the name rules.
	Resolve(ctx context.Context, arg string) (driver.TaskInfo, error)
	InspectTask(ctx context.Context, id string) (driver.TaskInfo, error)
	TaskEvents(ctx context.Context, id string) ([]fsm.Event, error)
	LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error)
	FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error)
	WaitTask(ctx context.Context, id string) (fsm.Task, error)
	// WaitReady is driver.WaitReady: a notify task's READY=1, recorded,
	// with its STATUS= text.
	WaitReady(ctx context.Context, id string) (driver.ReadyReport, error)
	Reconcile(ctx context.Context, ids ...string) (driver.Report, error)
	Recover(ctx context.Context) (driver.Report, error)
	TaskStats(ctx context.Context, id string) (cgroup.Stats, error)
	// ExecTask is driver.ExecTask: a command inside the running task, its
	// stdio the caller's (spec.Stdin...) or a terminal. Through an agent
	// the task is resolved there and the command started by the task's
	// executor for this process directly: no descriptor of the caller
	// passes through the agent.
	ExecTask(ctx context.Context, id string, spec driver.ExecSpec) (*driver.ExecProcess, error)
}

// DesiredState is the desired state's operations: what `tether enable`,
// `disable`, a start or restart of a desired task and a status of the
// desired tasks need.
type DesiredState interface {
	// Enable registers spec (read from file by the caller) as a desired
	// task: it is started, and kept running under its restart policy.
	// Enabling a registered task again replaces its spec (its task is
	// replaced if the spec changed) and starts it again if it had settled
	// (stopped on request, or given up by its policy).
	Enable(ctx context.Context, file string, spec fsm.Spec) (Entry, error)
	// Disable unregisters an enabled task; its task is stopped.
	Disable(ctx context.Context, name string) (Entry, error)
	// StartDesired starts a settled desired task again (a fresh restart
	// count); a running one is left as it is.
	StartDesired(ctx context.Context, name string) (Entry, error)
	// RestartDesired stops a desired task's task (if it runs) and starts
	// a new one for it, with a fresh restart count.
	RestartDesired(ctx context.Context, name string) (Entry, error)
	// Status is the desired tasks and the problems of the config dir.
	Status(ctx context.Context) (Status, error)
	// WatchStatus calls fn with the status now and after each change until
	// fn returns true (or ctx ends).
	WatchStatus(ctx context.Context, fn func(Status) bool) error
}

// Maintenance is the store's upkeep. Each works on the store file with
// nothing of the serving process holding it: daemonless, the file's lock
// orders it with other commands; in an agent, its requests wait meanwhile
// (their store operations are paused, none is lost) and the store is
// opened again after.
type Maintenance interface {
	// Check is store.CheckFile of the store: page by page, then bbolt's
	// own check.
	Check(ctx context.Context) (store.Report, error)
	// GC removes the tasks that ended longer than olderThan ago (never a
	// task a desired record names), their directories and the task
	// directories the store does not know, and compacts the store.
	GC(ctx context.Context, olderThan time.Duration) (GCReport, error)
	// Salvage copies every readable task of a damaged store into a new
	// one, kills the processes of the live tasks it could not copy (by
	// proven identity), and puts the new store in place, keeping the
	// damaged file beside it. An error is a salvage that could not be
	// done (nothing changed); the report says what an install left.
	Salvage(ctx context.Context) (SalvageReport, error)
}

// Groups are the driver's operations on a job file's groups (driver's
// CreateGroup, RunGroup, StopGroup, Groups, GroupDriven), with their
// meanings. Through an agent, the agent's driver drives the group for as
// long as the caller's request lasts (a detached `tether drive-group`
// keeps one open), holding the group's lock as any driver does.
type Groups interface {
	CreateGroup(ctx context.Context, tasks []driver.GroupTask, opts driver.StartOptions) ([]fsm.Task, error)
	RunGroup(ctx context.Context, ids []string, wait bool, fn func(driver.GroupProgress)) ([]fsm.Task, error)
	StopGroup(ctx context.Context, ids []string, sig syscall.Signal, grace time.Duration, fn func(driver.GroupProgress)) ([]fsm.Task, error)
	Groups(ctx context.Context) (map[string][]string, error)
	GroupDriven(alloc string) (bool, int, error)
}

// Service is everything a CLI asks of tether.
type Service interface {
	Tasks
	Groups
	DesiredState
	Maintenance
}

// GCReport is what a GC did.
type GCReport struct {
	// Removed are the tasks removed from the store; Orphans the task
	// directories the store did not know, removed.
	Removed []string `json:"removed,omitempty"`
	Orphans []string `json:"orphans,omitempty"`
	// Allocs are the group directories (allocs/) no task had, removed.
	Allocs []string `json:"allocs,omitempty"`
	// Before and After are the store file's sizes around its compaction.
	Before int64 `json:"before"`
	After  int64 `json:"after"`
	// Warnings are problems on the way, in order (a directory that could
	// not be removed, one kept busy); Failed is set when one of them makes
	// the gc incomplete.
	Warnings []string `json:"warnings,omitempty"`
	Failed   bool     `json:"failed,omitempty"`
}

// SalvageReport is what a Salvage did (driver.Salvaged, as text).
type SalvageReport struct {
	Copied       int      `json:"copied"`
	HeadsRebuilt int      `json:"heads_rebuilt,omitempty"`
	Damage       []string `json:"damage,omitempty"`
	Lost         []Lost   `json:"lost,omitempty"`
	// Killed: the processes of the lost tasks were dealt with (Lost says
	// how), whatever came after.
	Killed bool `json:"killed,omitempty"`
	// Installed: the salvaged store is in place, the damaged one kept as
	// Aside. Done: everything was done (driver.Salvaged.Done).
	Installed bool   `json:"installed"`
	Aside     string `json:"aside,omitempty"`
	Done      bool   `json:"done"`
	// Warnings are problems after the salvage (its lock's release).
	Warnings []string `json:"warnings,omitempty"`
}

// Lost is a task a salvage could not copy, and what was done about its
// processes.
type Lost struct {
	ID    string    `json:"id"`
	State fsm.State `json:"state"`
	What  string    `json:"what"`
	Why   string    `json:"why"`
	// Settled: nothing of it is left running unknown to the store.
	Settled bool `json:"settled"`
}

// Entry is the state of one desired task.
type Entry struct {
	Name   string              `json:"name"`
	Source store.DesiredSource `json:"source"`
	File   string              `json:"file,omitempty"`
	// Task is its current task (empty before the first start) and State
	// that task's state (none: its start is owed, at NotBefore if set).
	Task      string    `json:"task,omitempty"`
	State     fsm.State `json:"state"`
	NotBefore time.Time `json:"not_before,omitzero"`
	// Restarts is how many times the agent started it again after its task
	// was gone.
	Restarts int `json:"restarts,omitempty"`
	// Settled: it is not restarted (its policy gave up, or it was stopped
	// on request); Reason says why.
	Settled bool   `json:"settled,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Disabled: a disable is under way.
	Disabled bool `json:"disabled,omitempty"`
	// Problem is what keeps the agent from converging it (its file
	// refused or not parsable, its name declared twice).
	Problem string `json:"problem,omitempty"`
	// Pending: the agent has work to do for it (a start owed, a stop under
	// way, a record to write).
	Pending bool `json:"pending,omitempty"`
}

// Status is the desired state as the agent sees it.
type Status struct {
	Entries []Entry `json:"entries,omitempty"`
	// Problems are the config dir's files the agent refused (with the file
	// and why) that name no desired task it knows.
	Problems []string `json:"problems,omitempty"`
	// Converged: nothing is pending (a start delayed by a restart policy
	// is pending).
	Converged bool `json:"converged"`
	// Generation counts the changes the agent has published.
	Generation uint64 `json:"generation"`
}

// Entry returns the entry named name.
func (s Status) Entry(name string) (Entry, bool) {
	for _, e := range s.Entries {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}
