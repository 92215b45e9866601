package fsm

import (
	"fmt"
	"slices"
)

// State is a task's lifecycle state. Its String form is part of tether's
// user interface (status tables, graphs) and of looplab/fsm's table.
type State uint8

// The states. created and the terminal states own no process; every other
// state may own an executor, so every edge out of it into reaping carries
// the kill-executor effect.
const (
	StateNone State = iota // before the task-created event
	// StateCreated: the task is recorded; nothing has been spawned.
	StateCreated
	// StateSpawning: the spawn intent (with its nonce) is durable; an
	// executor with that nonce may exist.
	StateSpawning
	// StateExecutorUp: the executor answered and its identity is recorded.
	StateExecutorUp
	// StateLaunching: the launch intent is durable; the task may have been
	// launched by the executor.
	StateLaunching
	// StateLaunched: the executor confirmed the launch and the task's pid.
	StateLaunched
	// StateRunning: the task is alive and supervision is attached.
	StateRunning
	// StateReaping: the one gate to the terminal states for a task that may
	// own a process. The kill-executor effect is owed until the executor and
	// the task's process group are confirmed dead.
	StateReaping
	// StateFailed: terminal; the task could not be started or broke.
	StateFailed
	// StateExited: terminal; the task exited by itself.
	StateExited
	// StateStopped: terminal; the task was stopped on request.
	StateStopped
	// StateLost: terminal; the executor or the task vanished, or could not
	// be reached after a crash, and was killed.
	StateLost
	// StateRestarting: the task exited and its executor, following the
	// task's restart policy, has journalled a restart (waiting out the
	// delay, or relaunching). It owns the executor. (Declared last so that
	// the numbers of the states above, which are on disk, do not change.)
	StateRestarting

	numStates
)

var stateNames = [numStates]string{
	StateNone:       "none",
	StateCreated:    "created",
	StateSpawning:   "spawning",
	StateExecutorUp: "executor-up",
	StateLaunching:  "launching",
	StateLaunched:   "launched",
	StateRunning:    "running",
	StateReaping:    "reaping",
	StateFailed:     "failed",
	StateExited:     "exited",
	StateStopped:    "stopped",
	StateLost:       "lost",
	StateRestarting: "restarting",
}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ParseState returns the state named s, as String prints it.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s && State(i) != StateNone {
			return State(i), nil
		}
	}
	return StateNone, fmt.Errorf("fsm: unknown state %q", s)
}

// Valid reports whether s is one of the declared states (not StateNone).
func (s State) Valid() bool { return s > StateNone && s < numStates }

// Terminal reports whether s is a terminal state: failed, exited, stopped
// or lost. A task in a terminal state owns no process.
func (s State) Terminal() bool {
	return s == StateFailed || s == StateExited || s == StateStopped || s == StateLost
}

// OwnsExecutor reports whether a task in state s may own an executor
// process (or, in spawning, an executor not yet confirmed). Invariant 1 of
// docs/DESIGN.md: the live executors are exactly those of tasks in such states.
func (s State) OwnsExecutor() bool {
	return s >= StateSpawning && s <= StateReaping || s == StateRestarting
}

// lifecycleOrder lists the states in the order a task meets them, for
// listings and graphs (the numbers are in the order they were declared).
var lifecycleOrder = []State{
	StateCreated, StateSpawning, StateExecutorUp, StateLaunching, StateLaunched,
	StateRunning, StateRestarting, StateReaping,
	StateFailed, StateExited, StateStopped, StateLost,
}

// States lists every declared state in lifecycle order.
func States() []State { return slices.Clone(lifecycleOrder) }
