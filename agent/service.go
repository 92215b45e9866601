package agent

import (
	"context"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
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
// `disable`, a start or restart of a desired entry and a status of the
// desired entries need.
type DesiredState interface {
	// Enable registers a file (its text, read by the caller, and the
	// inputs it is read with) as a desired entry, named as its job: it is
	// read by the serving process (its own allow lists: a file it could
	// not run is refused now, nothing written), started, and kept running
	// under its restart and reschedule policies. Enabling a registered
	// entry again replaces its file (its tasks are replaced if it changed).
	Enable(ctx context.Context, req EnableRequest) (Entry, error)
	// Disable unregisters an enabled entry; its tasks are stopped.
	Disable(ctx context.Context, name string) (Entry, error)
	// StartDesired starts a desired entry that does not run again (new
	// allocations: fresh restart and reschedule counts); a running one is
	// left as it is.
	StartDesired(ctx context.Context, name string) (Entry, error)
	// RestartDesired stops a desired entry's tasks (if they run) and
	// starts it again, with fresh counts.
	RestartDesired(ctx context.Context, name string) (Entry, error)
	// Status is the desired entries and the problems of the config dir.
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

// Jobs are a file's way to its tasks: package job's path, run by the
// serving process with its own node (its allow lists: a template is read
// with the agent's --allow-read, never the caller's; its port allocator;
// its host), and the driving of a group that outlives the caller.
type Jobs interface {
	// PlanJob reads a file and makes its allocations ready to record
	// (job.Read, then Instantiate with fresh ids): nothing is recorded
	// (ports are allocated for the allocations).
	PlanJob(ctx context.Context, req JobRequest) (JobPlan, error)
	// StartGroup starts a recorded group, returns once its main tasks
	// have started (or it is over), and leaves it to a driver that
	// outlives the call: the agent itself, or daemonless a detached
	// process (see Local.StartGroup).
	StartGroup(ctx context.Context, ids []string, fn func(driver.GroupProgress)) ([]fsm.Task, error)
	// AdoptGroups gives every group nobody drives (a driver that died)
	// to such a driver, and returns their allocation ids.
	AdoptGroups(ctx context.Context) ([]string, error)
}

// Service is everything a CLI asks of tether.
type Service interface {
	Tasks
	Groups
	Jobs
	DesiredState
	Maintenance
}

// JobRequest is a file to plan (tether run and start): its name and
// text, the inputs it is read with, the command line's overrides.
type JobRequest struct {
	Source    job.Source    `json:"source"`
	Inputs    job.Inputs    `json:"inputs"`
	Overrides job.Overrides `json:"overrides"`
	// Once: its tasks run once (tether run): its copies carry no
	// reschedule policy, and nothing follows them.
	Once bool `json:"once,omitempty"`
}

// JobPlan is a file planned: its name, its allocations ready to record,
// the parser's notes and the groups it does not run.
type JobPlan struct {
	Name    string   `json:"name"`
	Run     job.Run  `json:"run"`
	Notes   []string `json:"notes,omitempty"`
	Skipped []string `json:"skipped,omitempty"`
}

// EnableRequest is a file to register (tether enable): its name (an
// absolute path: the client resolves it), its text, and its inputs.
type EnableRequest struct {
	File   string     `json:"file"`
	Text   []byte     `json:"text"`
	Inputs job.Inputs `json:"inputs"`
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

// Entry is the state of one desired entry.
type Entry struct {
	Name   string              `json:"name"`
	Source store.DesiredSource `json:"source"`
	File   string              `json:"file,omitempty"`
	// Origin is where it was declared, as status says it: "dir" (the
	// config dir), "enable" or "etcd".
	Origin string `json:"origin"`
	// Tasks are the task ids of its allocations' current copies, in order;
	// Task the first main task among them and State that task's state
	// (none: not recorded yet).
	Tasks []string  `json:"tasks,omitempty"`
	Task  string    `json:"task,omitempty"`
	State fsm.State `json:"state"`
	// Standing is where it stands, Reason why (down, refused, restarting,
	// stopped), Since since when (down), NextAttempt when its next copy is
	// due (restarting).
	Standing    Standing  `json:"standing"`
	Reason      string    `json:"reason,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	NextAttempt time.Time `json:"next_attempt_at,omitzero"`
	// Restarts and Reschedules count the copies made so far of each kind.
	Restarts    int `json:"restarts,omitempty"`
	Reschedules int `json:"reschedules,omitempty"`
	// Disabled: a disable is under way.
	Disabled bool `json:"disabled,omitempty"`
	// Problem is what keeps the agent from converging it (its file
	// refused or not readable, its name declared twice).
	Problem string `json:"problem,omitempty"`
	// Pending: the agent has work to do for it (a start owed, a stop under
	// way, a record to write).
	Pending bool `json:"pending,omitempty"`
	// Digest is the declaration its standing is of (job.Digest of its file
	// and inputs: its record's, or its file's before it is recorded), so
	// that a feed tells a standing of its current declaration from one of
	// the declaration it replaces. In-process only (Agent.WatchStatus).
	Digest string `json:"-"`
}

// Standing is where a desired entry stands.
type Standing string

// The standings.
const (
	StandingStarting   Standing = "starting"   // recorded, its tasks starting
	StandingRunning    Standing = "running"    // its main tasks run
	StandingReady      Standing = "ready"      // they run and every one that says it is ready has
	StandingRestarting Standing = "restarting" // a copy is due later (a restart's or a reschedule's delay)
	StandingDown       Standing = "down"       // given up: its restart and reschedule policies are spent
	StandingRefused    Standing = "refused"    // its file, or its tasks' specs, refused
	StandingStopped    Standing = "stopped"    // stopped on request: it starts again when its file changes or when started
	StandingCompleted  Standing = "completed"  // a batch job's tasks completed
	StandingStopping   Standing = "stopping"   // disabled, or its file gone: its tasks are being stopped
)

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
