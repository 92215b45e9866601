package fsm

import (
	"fmt"
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

	numEventTypes
)

var eventNames = [numEventTypes]string{
	EventNone:           "none",
	EventCreated:        "task-created",
	EventConfigRejected: "config-rejected",
	EventSpawnIntent:    "spawn-intent",
	EventExecutorUp:     "executor-up",
	EventSpawnFailed:    "spawn-failed",
	EventLaunchIntent:   "launch-intent",
	EventLaunched:       "launched",
	EventLaunchFailed:   "launch-failed",
	EventRunning:        "running",
	EventReattached:     "reattached",
	EventTaskExited:     "task-exited",
	EventStopRequested:  "stop-requested",
	EventExecutorLost:   "executor-lost",
	EventFault:          "fault",
	EventKillFailed:     "kill-failed",
	EventExecutorReaped: "executor-reaped",
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

// EventTypes lists every declared event type.
func EventTypes() []EventType {
	out := make([]EventType, 0, numEventTypes-1)
	for e := EventCreated; e < numEventTypes; e++ {
		out = append(out, e)
	}
	return out
}

// Spec is what a task runs. It is recorded once, in the task-created event.
type Spec struct {
	Name    string            // human name; defaults to the task id
	Driver  string            // "exec" or "raw_exec"
	Command string            // path or name of the program
	Args    []string          // arguments, never interpreted by a shell
	Env     map[string]string // environment of the task
	Dir     string            // working directory
	User    string            // user name or uid; empty for the executor's
	CapAdd  []string          // capabilities to add (exec mode)
	CapDrop []string          // capabilities to drop (exec mode)
	// KillSignal is the signal a stop sends first (0: SIGTERM).
	KillSignal int
	// KillTimeout is the grace before SIGKILL (0: the driver's default).
	KillTimeout time.Duration
}

// Identity proves which process is an executor: the pid alone is not enough
// (pids are reused), so the start time from /proc/PID/stat, the boot id and
// the spawn nonce are recorded with it.
type Identity struct {
	PID       int
	StartTime uint64 // clock ticks since boot, /proc/PID/stat field 22
	BootID    string
	Nonce     string
	Socket    string // control socket path
}

// ExitStatus is how a task ended: an exit code, or the signal that killed
// it (Signal > 0, Code -1).
type ExitStatus struct {
	Code   int
	Signal int
}

func (x ExitStatus) String() string {
	if x.Signal > 0 {
		return fmt.Sprintf("signal %d", x.Signal)
	}
	return fmt.Sprintf("exit code %d", x.Code)
}

// Event is one record of a task's log. Which fields are set depends on Type;
// Validate says which are required.
type Event struct {
	Type EventType
	// Seq is the event's sequence number in its task's log, from 1. Step
	// sets it; the store checks it.
	Seq uint64
	// Time is the wall-clock time of the event in Unix nanoseconds, given
	// by the caller (fsm has no clock).
	Time int64

	Spec     *Spec     // task-created
	Nonce    string    // spawn-intent
	Executor *Identity // executor-up, reattached
	TaskPID  int       // launched
	// TaskStart is the task's start time (clock ticks since boot, from
	// /proc/PID/stat) so that the task group can be killed by proven
	// identity even if its executor is gone.
	TaskStart uint64      // launched
	Exit      *ExitStatus // task-exited; executor-reaped when collected
	Signal    int         // stop-requested
	Grace     time.Duration
	Reason    string // config-rejected, spawn-failed, launch-failed, executor-lost, fault, kill-failed
	Target    State  // executor-reaped: the terminal state reached
}

// Validate checks that the event carries what its type requires.
func (e *Event) Validate() error {
	bad := func(what string) error {
		return fmt.Errorf("%w: %s needs %s", ErrInvalidEvent, e.Type, what)
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
	case EventTaskExited:
		if e.Exit == nil {
			return bad("an exit status")
		}
	case EventExecutorReaped:
		if !e.Target.Terminal() {
			return bad("a terminal target state")
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
	if e.Target != StateNone {
		s += " target=" + e.Target.String()
	}
	if e.Reason != "" {
		s += fmt.Sprintf(" reason=%q", e.Reason)
	}
	return s
}
