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
// meanings and errors. *Local serves them in-process (daemonless), *Client
// through an agent, *Agent to its clients: a command written against Tasks
// prints the same and exits the same either way.
type Tasks interface {
	StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error)
	StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error)
	// SignalTask signals the task's process group, or its main process
	// alone with main (driver.SignalTask, driver.SignalMain).
	SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error
	InspectTask(ctx context.Context, id string) (driver.TaskInfo, error)
	TaskEvents(ctx context.Context, id string) ([]fsm.Event, error)
	LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error)
	FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error)
	WaitTask(ctx context.Context, id string) (fsm.Task, error)
	Reconcile(ctx context.Context, ids ...string) (driver.Report, error)
	Recover(ctx context.Context) (driver.Report, error)
	TaskStats(ctx context.Context, id string) (cgroup.Stats, error)
}

// DesiredState is the desired state's operations: what `tether enable`,
// `disable` and a status of the desired tasks need.
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
	// Status is the desired tasks and the problems of the config dir.
	Status(ctx context.Context) (Status, error)
	// WatchStatus calls fn with the status now and after each change until
	// fn returns true (or ctx ends).
	WatchStatus(ctx context.Context, fn func(Status) bool) error
}

// Maintenance is the store's upkeep.
type Maintenance interface {
	Check(ctx context.Context) (store.Report, error)
	// GC and Salvage need the store closed; an agent does not serve them
	// yet (ErrUnsupported: stop the agent and run them daemonless).
	GC(ctx context.Context, olderThan time.Duration) ([]string, error)
	Salvage(ctx context.Context) error
}

// Service is everything a CLI asks of tether.
type Service interface {
	Tasks
	DesiredState
	Maintenance
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
