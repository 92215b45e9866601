package fsm

import (
	"errors"
	"fmt"
)

// Errors returned when building a table.
var (
	// ErrMissingKill is returned by NewTable for an edge out of a state that
	// may own an executor into reaping or a terminal state without the
	// kill-executor effect.
	ErrMissingKill = errors.New("fsm: edge lacks the mandatory kill-executor effect")
	// ErrBypassesReaping is returned by NewTable when a terminal state is
	// reachable from a state that may own an executor without passing
	// through reaping.
	ErrBypassesReaping = errors.New("fsm: terminal state reachable without passing reaping")
	// ErrBadTable is returned by NewTable for any other malformed table:
	// unknown states or events, duplicate edges, edges out of a terminal.
	ErrBadTable = errors.New("fsm: malformed table")
)

// Errors returned when stepping or folding a task.
var (
	// ErrIllegalTransition is wrapped by TransitionError: the table has no
	// edge for this event from this state.
	ErrIllegalTransition = errors.New("fsm: illegal transition")
	// ErrInvalidEvent is returned for an event whose payload is missing a
	// field its type requires (a spawn intent without a nonce, say).
	ErrInvalidEvent = errors.New("fsm: invalid event")
	// ErrInvalidSpec is returned by Spec.Validate for a spec that must be
	// refused before anything is spawned.
	ErrInvalidSpec = errors.New("fsm: invalid task spec")
)

// EdgeError names the edge that made NewTable refuse a table.
type EdgeError struct {
	Edge Edge
	Err  error
}

func (e *EdgeError) Error() string {
	return fmt.Sprintf("%v: %s", e.Err, e.Edge)
}

func (e *EdgeError) Unwrap() error { return e.Err }

// TransitionError reports an event that the table does not allow from the
// task's current state.
type TransitionError struct {
	Task  string
	From  State
	Event EventType
	// To is set for executor-reaped, whose destination is data.
	To State
}

func (e *TransitionError) Error() string {
	if e.To != StateNone {
		return fmt.Sprintf("fsm: task %q: illegal transition %s --%s--> %s", e.Task, e.From, e.Event, e.To)
	}
	return fmt.Sprintf("fsm: task %q: illegal transition: no %s edge out of %s", e.Task, e.Event, e.From)
}

func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }
