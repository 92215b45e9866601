package fsm

import (
	"fmt"
	"slices"
	"time"
)

// EventType is the type of a lifecycle event. Its String form is the
// event's name in the table, the logs and the user interface.
type EventType uint8

// The events. Intent events come before an effect, outcome events after it.
const (
	EventNone EventType = iota
	// EventCreated records the task and its spec. none -> created.
	EventCreated
	// EventConfigRejected: validation failed before any spawn intent.
	// created -> failed, nothing to kill.
	EventConfigRejected
	// EventSpawnIntent carries the fresh nonce the executor will be
	// spawned with. created -> spawning; effect spawn-executor.
	EventSpawnIntent
	// EventExecutorUp carries the executor's proven identity.
	// spawning -> executor-up.
	EventExecutorUp
	// EventSpawnFailed: the spawn failed or timed out after the intent.
	// spawning -> reaping; kill-executor by nonce.
	EventSpawnFailed
	// EventLaunchIntent: the task is about to be launched.
	// executor-up -> launching; effect launch-task.
	EventLaunchIntent
	// EventLaunched carries the task's pid. launching -> launched; effect
	// attach.
	EventLaunched
	// EventLaunchFailed: the executor refused or failed the launch.
	// launching -> reaping; kill-executor.
	EventLaunchFailed
	// EventRunning: the task is confirmed alive and supervised.
	// launched -> running.
	EventRunning
	// EventReattached: after a restart, the executor was reached through a
	// verified identity. launched/running -> same state.
	EventReattached
	// EventTaskExited carries the task's exit status.
	// launched/running -> reaping (target exited); kill-executor.
	EventTaskExited
	// EventStopRequested carries the stop signal and grace.
	// created -> stopped; any owning state -> reaping (target stopped).
	EventStopRequested
	// EventExecutorLost: the executor or the task vanished, or could not be
	// reached after a crash. owning states -> reaping (target lost).
	EventExecutorLost
	// EventFault: any other error while the executor may be alive (the
	// seed: cap_add net_raw). owning states -> reaping (target failed).
	EventFault
	// EventKillFailed: the kill-executor effect failed; it is owed again.
	// reaping -> reaping.
	EventKillFailed
	// EventExecutorReaped: the executor and the task's group are confirmed
	// dead. reaping -> the target terminal state the event carries.
	EventExecutorReaped
	// EventStartInterrupted: recovery found a start whose driver stopped
	// (crashed, or was killed) before the outcome of its last effect was
	// recorded, and no live process is driving it. created -> failed
	// (nothing was spawned); spawning, executor-up, launching -> reaping
	// (target failed); kill-executor. (The events from here on are declared
	// last so that the numbers of those above, which are on disk, do not
	// change.)
	EventStartInterrupted
	// EventRestartIntent: the task exited and its restart policy restarts
	// it; the executor journalled the intent (Attempt, the previous run's
	// Exit, the Grace it waits first) before relaunching.
	// launched/running -> restarting.
	EventRestartIntent
	// EventReady: the task said it is ready (the sd_notify protocol's
	// READY=1 on its notify socket, a task whose spec's Readiness is
	// ReadinessNotify), or its readiness check passed (ReadinessTCP,
	// ReadinessHTTP, ReadinessExec). running -> running; Task.Ready is
	// set until the next restart. Its Time is when the run became ready,
	// as its executor saw it; one its executor journalled names the run
	// (TaskPID, TaskStartTime: see Journalled).
	EventReady

	numEventTypes
)

var eventNames = [numEventTypes]string{
	EventNone:             "none",
	EventCreated:          "task-created",
	EventConfigRejected:   "config-rejected",
	EventSpawnIntent:      "spawn-intent",
	EventExecutorUp:       "executor-up",
	EventSpawnFailed:      "spawn-failed",
	EventLaunchIntent:     "launch-intent",
	EventLaunched:         "launched",
	EventLaunchFailed:     "launch-failed",
	EventRunning:          "running",
	EventReattached:       "reattached",
	EventTaskExited:       "task-exited",
	EventStopRequested:    "stop-requested",
	EventExecutorLost:     "executor-lost",
	EventFault:            "fault",
	EventKillFailed:       "kill-failed",
	EventExecutorReaped:   "executor-reaped",
	EventStartInterrupted: "start-interrupted",
	EventRestartIntent:    "restart-intent",
	EventReady:            "ready",
}

func (e EventType) String() string {
	if e < numEventTypes {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// Valid reports whether e is one of the declared event types.
func (e EventType) Valid() bool { return e > EventNone && e < numEventTypes }

// ParseEventType returns the event type named s.
func ParseEventType(s string) (EventType, error) {
	for i, n := range eventNames {
		if n == s && EventType(i) != EventNone {
			return EventType(i), nil
		}
	}
	return EventNone, fmt.Errorf("fsm: unknown event %q", s)
}

// eventOrder lists the event types in lifecycle order (their numbers are
// in the order they were declared).
var eventOrder = []EventType{
	EventCreated, EventConfigRejected, EventSpawnIntent, EventExecutorUp, EventSpawnFailed,
	EventLaunchIntent, EventLaunched, EventLaunchFailed, EventRunning, EventReady, EventReattached,
	EventRestartIntent, EventTaskExited, EventStopRequested, EventExecutorLost, EventFault,
	EventStartInterrupted, EventKillFailed, EventExecutorReaped,
}

// EventTypes lists every declared event type, in lifecycle order.
func EventTypes() []EventType { return slices.Clone(eventOrder) }

// Identity proves which process is an executor: the pid alone is not enough
// (pids are reused), so the start time from /proc/PID/stat, the boot id and
// the spawn nonce are recorded with it.
type Identity struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // clock ticks since boot, /proc/PID/stat field 22
	BootID    string `json:"boot_id"`
	Nonce     string `json:"nonce"`
	Socket    string `json:"socket"` // control socket path
	// Cgroup is where the executor contains its task: the task's cgroup
	// in every hierarchy (the cgroup package's encoding), named for the
	// task and the nonce. It is announced before executor-up is recorded
	// and created at launch, so it is written ahead of its creation. Empty
	// where the host has no usable cgroups.
	Cgroup string `json:"cgroup,omitempty"`
}

// Proc is one process as the log records it: its pid, and its start time
// (clock ticks since boot, field 22 of /proc/PID/stat), which tells it from
// a later process that reuses the pid. It is the one value for a (pid,
// start time) pair in every package.
type Proc struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// IsZero reports whether p names no process.
func (p Proc) IsZero() bool { return p.PID == 0 }

func (p Proc) String() string { return fmt.Sprintf("pid %d (start %d)", p.PID, p.StartTime) }

// Proc is the executor process the identity names.
func (id Identity) Proc() Proc { return Proc{PID: id.PID, StartTime: id.StartTime} }

// ExitStatus is how a task ended: an exit code, or the signal that killed
// it (Signal > 0, Code -1).
//
// The exit is the task's main process's (the one its executor launched);
// OOM says the kernel's OOM killer killed a process of the task's cgroup
// during the run, the main process or another: a task whose child was OOM
// killed and whose main process exited 0 exited 0, with OOM set.
type ExitStatus struct {
	Code   int `json:"code"`
	Signal int `json:"signal"`
	// OOM is set when the kernel's OOM killer killed a process of the
	// task's cgroup during this run.
	OOM bool `json:"oom,omitempty"`
	// At is when the main process exited (Unix ns), as its executor saw
	// it; 0 when not known (a record of an earlier tether).
	At int64 `json:"at,omitempty"`
	// PeakMemory is the most memory the task's cgroup held during the
	// run, in bytes, read before the cgroup was removed; 0 when not
	// known (no memory controller, an earlier tether).
	PeakMemory uint64 `json:"peak_memory,omitempty"`
}

// OOMKilledMain reports whether the OOM killer killed the main process
// itself (its exit is SIGKILL's), rather than another process of the task.
func (x ExitStatus) OOMKilledMain() bool { return x.OOM && x.Signal == 9 }

func (x ExitStatus) String() string {
	s := fmt.Sprintf("exit code %d", x.Code)
	if x.Signal > 0 {
		s = fmt.Sprintf("signal %d", x.Signal)
	}
	switch {
	case x.OOMKilledMain():
		s += ", OOM killed"
	case x.OOM:
		s += ", another process of the task OOM killed"
	}
	return s
}

// Event is one record of a task's log. Which fields are set depends on Type;
// Validate says which are required.
type Event struct {
	Type EventType
	// Seq is the event's sequence number in its task's log, from 1. Step
	// sets it; the store checks it.
	Seq uint64
	// Time is the wall-clock time of the event in Unix nanoseconds, given
	// by the caller (fsm has no clock): when what it records happened (a
	// task-exited's is when the task exited, as its executor saw it).
	Time int64
	// Recorded is when the event was appended, when that is later than
	// Time (a task-exited recorded after the task exited); 0 otherwise.
	Recorded int64

	Spec     *Spec     // task-created
	Nonce    string    // spawn-intent
	Executor *Identity // executor-up, reattached
	TaskPID  int       // launched; a journalled ready (the run that was ready)
	// TaskStartTime is the task's start time (clock ticks since boot,
	// from /proc/PID/stat) so that the task group can be killed by proven
	// identity even if its executor is gone.
	TaskStartTime uint64        // launched
	Exit          *ExitStatus   // task-exited, restart-intent; executor-reaped when collected
	Signal        int           // stop-requested: the stop's first signal
	Grace         time.Duration // stop-requested: the stop's grace before SIGKILL
	Delay         time.Duration // restart-intent: the restart's delay before the relaunch
	Reason        string        // config-rejected, spawn-failed, launch-failed, executor-lost, fault, kill-failed, start-interrupted
	// Cause is the category of the failure Reason describes (CauseNone
	// where no reason is recorded, or an earlier tether's reason names
	// none).
	Cause    Cause
	Warnings []Warning // launched: what the launch did other than asked
	Target   State     // executor-reaped: the terminal state reached
	Attempt  int       // restart-intent: the restart's number, from 1; a journalled ready: its entry's number in the journal, from 1
	// Replaces (task-created) is the id of the task this one replaces (a
	// restart, or a start that replaced a live task of its name), and
	// ReplacedBy (stop-requested) the id of the task that replaces this
	// one, written ahead of that task's creation: a process that dies
	// between the stop and the start leaves a ReplacedBy no task has.
	Replaces   string
	ReplacedBy string
}

// TaskProc is the task process a launched event records (and the run a
// journalled ready event is of).
func (e Event) TaskProc() Proc { return Proc{PID: e.TaskPID, StartTime: e.TaskStartTime} }

// Journalled reports whether e is a ready event its executor journalled (an
// entry of the executor's journal, as every restart is): it carries its
// place in the journal (Attempt: the entry's number, from 1) and names
// the run that was ready (TaskPID, TaskStartTime). An executor before
// protocol 10 journals no readiness; the ready event a driver records for
// it has neither, and is not one of the journal's entries
// (Task.RestartEvents does not count it).
func (e Event) Journalled() bool { return e.Type == EventReady && e.Attempt != 0 }

// Validate checks that the event carries what its type requires.
func (e *Event) Validate() error {
	bad := func(what string) error {
		return fmt.Errorf("%w: %s needs %s", ErrInvalidEvent, e.Type, what)
	}
	if !e.Cause.Valid() {
		return fmt.Errorf("%w: %s has an unknown cause %d", ErrInvalidEvent, e.Type, uint8(e.Cause))
	}
	for _, w := range e.Warnings {
		if !w.Kind.Valid() {
			return fmt.Errorf("%w: %s has a warning of unknown kind %d", ErrInvalidEvent, e.Type, uint8(w.Kind))
		}
	}
	switch e.Type {
	case EventCreated:
		if e.Spec == nil {
			return bad("a spec")
		}
	case EventSpawnIntent:
		if e.Nonce == "" {
			return bad("a nonce")
		}
	case EventExecutorUp:
		if e.Executor == nil || e.Executor.PID <= 0 {
			return bad("an executor identity with a pid")
		}
	case EventLaunched:
		if e.TaskPID <= 0 {
			return bad("a task pid")
		}
	case EventReady:
		if e.Attempt < 0 || e.Attempt > 0 && e.TaskPID <= 0 || e.Attempt == 0 && e.TaskPID != 0 {
			return bad("its place in the journal (attempt) and the run's task pid together, or neither")
		}
	case EventTaskExited:
		if e.Exit == nil {
			return bad("an exit status")
		}
	case EventExecutorReaped:
		if !e.Target.Terminal() {
			return bad("a terminal target state")
		}
	case EventRestartIntent:
		if e.Attempt <= 0 || e.Exit == nil {
			return bad("an attempt number and the exit status of the run that ended")
		}
	default:
		if !e.Type.Valid() {
			return fmt.Errorf("%w: unknown event type %d", ErrInvalidEvent, uint8(e.Type))
		}
	}
	return nil
}

func (e Event) String() string {
	s := fmt.Sprintf("#%d %s", e.Seq, e.Type)
	switch {
	case e.Nonce != "":
		s += " nonce=" + e.Nonce
	case e.Executor != nil:
		s += fmt.Sprintf(" executor_pid=%d", e.Executor.PID)
	case e.TaskPID != 0:
		s += fmt.Sprintf(" pid=%d", e.TaskPID)
	}
	if e.Exit != nil {
		s += " " + e.Exit.String()
	}
	if e.Attempt != 0 {
		s += fmt.Sprintf(" attempt=%d", e.Attempt)
	}
	if e.Target != StateNone {
		s += " target=" + e.Target.String()
	}
	if e.Reason != "" {
		s += fmt.Sprintf(" reason=%q", e.Reason)
	}
	return s
}
