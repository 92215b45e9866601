package fsm

import (
	"fmt"
	"math/bits"
	"time"
)

// Task is a task's state as folded from its events. It is a value: Fold
// returns a new one and never changes its argument's data in place.
type Task struct {
	ID      string
	State   State
	Version uint64 // sequence number of the last event folded

	Spec      *Spec
	CreatedAt int64 // Unix ns of task-created
	UpdatedAt int64 // Unix ns of the last event

	Nonce    string    // the spawn nonce, from spawn-intent
	Executor *Identity // from executor-up (or reattached)
	TaskPID  int       // from launched
	// TaskStartTime is the task's start time in clock ticks, from launched.
	TaskStartTime uint64
	Exit          *ExitStatus

	// Target is the terminal state reaping leads to, set by the event that
	// entered reaping (or went straight to a terminal state).
	Target State
	// Reason is the last failure reason recorded, and Cause its category.
	Reason string
	Cause  Cause
	// Warnings are what the last launch did other than what was asked.
	Warnings []Warning
	// StopSignal and StopGrace come from stop-requested.
	StopSignal int
	StopGrace  time.Duration
	// Restarts is the number of restarts so far (the last restart-intent's
	// attempt).
	Restarts int
	// Ready: the current run said it is ready (a ready event since the
	// last launch); a restart clears it.
	Ready bool
	// Readies is how many journalled ready events the log holds (ready
	// events that name their run: see Event.Journalled), over the task's
	// life.
	Readies int
}

// RestartEvents is how many of its executor's journal entries the task's
// log holds: how far into that journal the log is. The executor journals
// each restart as an intent and an outcome (a task in restarting has the
// intent of its last without the outcome), and, from protocol 10, each
// run's readiness as one ready entry; a ready event recorded for an older
// executor (which journals none) names no run and is not counted. So the
// count follows from the task's state alone, and folding a journal is
// idempotent: the entries past it are the ones the log lacks.
func (t Task) RestartEvents() int {
	n := 2*t.Restarts + t.Readies
	if t.State == StateRestarting {
		n--
	}
	return n
}

// TaskProc is the task process of the current run, from its launched event
// (zero before the launch).
func (t Task) TaskProc() Proc { return Proc{PID: t.TaskPID, StartTime: t.TaskStartTime} }

// bare marks the event types FoldInPlace may fold on its fast path when they
// carry no exit status, identity or reason: Validate requires nothing of
// them, FoldInPlace checks nothing of them against the task, and they copy
// nothing else into it.
var bare = [numEventTypes]bool{
	EventConfigRejected: true, EventSpawnFailed: true, EventLaunchIntent: true, EventLaunchFailed: true,
	EventRunning: true, EventReattached: true, EventExecutorLost: true, EventFault: true,
	EventKillFailed: true, EventStartInterrupted: true,
}

// targetOf is the terminal state an event that leaves a live state aims at.
func targetOf(ev EventType) State {
	switch ev {
	case EventTaskExited:
		return StateExited
	case EventStopRequested:
		return StateStopped
	case EventExecutorLost:
		return StateLost
	case EventSpawnFailed, EventLaunchFailed, EventFault, EventConfigRejected, EventStartInterrupted:
		return StateFailed
	}
	return StateNone
}

// Next returns the state event e leads to from s, or a *TransitionError.
// It reads only the compiled table: it is the store's legality check and
// replay's hot path.
func (t *Table) Next(s State, e Event) (State, error) { return t.nextState(s, &e) }

func (t *Table) nextState(s State, e *Event) (State, error) {
	if s == StateNone {
		if e.Type == EventCreated {
			return StateCreated, nil
		}
		return StateNone, &TransitionError{From: s, Event: e.Type}
	}
	if s >= numStates || !e.Type.Valid() {
		return StateNone, &TransitionError{From: s, Event: e.Type}
	}
	m := t.next[s][e.Type]
	switch {
	case m == 0:
		return StateNone, &TransitionError{From: s, Event: e.Type}
	case bits.OnesCount16(m) == 1:
		to := State(bits.TrailingZeros16(m))
		if e.Type == EventExecutorReaped && e.Target != to {
			return StateNone, &TransitionError{From: s, Event: e.Type, To: e.Target}
		}
		return to, nil
	case e.Target < numStates && m&(1<<e.Target) != 0:
		return e.Target, nil
	default:
		return StateNone, &TransitionError{From: s, Event: e.Type, To: e.Target}
	}
}

// Fold applies one event to a task and returns the new task. It checks the
// event's payload, its sequence number (when set) and its legality; it
// performs no effect.
func (t *Table) Fold(task Task, e Event) (Task, error) {
	err := t.FoldInPlace(&task, &e)
	return task, err
}

// FoldInPlace is Fold in place, for replay's hot path: it folds e into *task, or
// returns an error and leaves *task unchanged.
func (t *Table) FoldInPlace(task *Task, e *Event) error {
	// Most of a long log is events that carry nothing and lead to one
	// state (self-loops, intents): fold those without the checks and
	// copies below, which would all find nothing to do for them.
	if s := task.State; s != StateNone && s < numStates && e.Type < numEventTypes && bare[e.Type] &&
		e.Exit == nil && e.Executor == nil && e.Reason == "" && len(e.Warnings) == 0 && (e.Seq == 0 || e.Seq == task.Version+1) {
		if m := t.next[s][e.Type]; m != 0 && m&(m-1) == 0 {
			if task.Target == StateNone {
				task.Target = targetOf(e.Type)
			}
			task.State = State(bits.TrailingZeros16(m))
			task.Version++
			task.UpdatedAt = e.Time
			return nil
		}
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("task %q seq %d: %w", task.ID, task.Version+1, err)
	}
	if e.Seq != 0 && e.Seq != task.Version+1 {
		return fmt.Errorf("%w: task %q: event %s has seq %d, expected %d",
			ErrInvalidEvent, task.ID, e.Type, e.Seq, task.Version+1)
	}
	to, err := t.nextState(task.State, e)
	if err != nil {
		if te, ok := err.(*TransitionError); ok {
			te.Task = task.ID
		}
		return err
	}
	switch e.Type {
	case EventExecutorUp:
		if e.Executor.Nonce != "" && e.Executor.Nonce != task.Nonce {
			return fmt.Errorf("%w: task %q: executor nonce %q does not match the spawn intent's %q",
				ErrInvalidEvent, task.ID, e.Executor.Nonce, task.Nonce)
		}
	case EventRestartIntent:
		if e.Attempt != task.Restarts+1 {
			return fmt.Errorf("%w: task %q: restart attempt %d follows attempt %d",
				ErrInvalidEvent, task.ID, e.Attempt, task.Restarts)
		}
	case EventReady:
		// A journalled ready folds only at its place in the journal: the
		// log holds the entries before it and not it. Elsewhere it is no
		// transition of this log (one folded already, recorded again by a
		// second process that read the journal too), so a driver drops
		// it as an input that no longer applies.
		if e.Journalled() && e.Attempt != task.RestartEvents()+1 {
			return fmt.Errorf("%w: it is journal entry %d, and the log holds %d entries",
				&TransitionError{Task: task.ID, From: task.State, Event: e.Type}, e.Attempt, task.RestartEvents())
		}
	case EventExecutorReaped:
		if task.Target != StateNone && e.Target != task.Target {
			return &TransitionError{Task: task.ID, From: task.State, Event: e.Type, To: e.Target}
		}
	}
	// Checked: from here on nothing fails.
	switch e.Type {
	case EventCreated:
		spec := *e.Spec
		task.Spec = &spec
		task.CreatedAt = e.Time
	case EventSpawnIntent:
		task.Nonce = e.Nonce
	case EventExecutorUp, EventReattached:
		if e.Executor != nil && (task.Executor == nil || *task.Executor != *e.Executor) {
			id := *e.Executor
			task.Executor = &id
		}
	case EventLaunched:
		task.TaskPID, task.TaskStartTime = e.TaskPID, e.TaskStartTime
		task.Ready = false
	case EventStopRequested:
		task.StopSignal, task.StopGrace = e.Signal, e.Grace
	case EventRestartIntent:
		task.Restarts = e.Attempt
		task.Ready = false
	case EventReady:
		task.Ready = true
		if e.Journalled() {
			task.Readies++
		}
	}
	if e.Exit != nil {
		x := *e.Exit
		task.Exit = &x
	}
	if e.Reason != "" {
		task.Reason, task.Cause = e.Reason, e.Cause
	}
	if len(e.Warnings) > 0 {
		task.Warnings = e.Warnings
	}
	if task.Target == StateNone {
		task.Target = targetOf(e.Type)
	}
	task.State = to
	task.Version++
	task.UpdatedAt = e.Time
	return nil
}

// FoldAll folds events in order, stopping at the first error.
func (t *Table) FoldAll(task Task, events ...Event) (Task, error) {
	for _, e := range events {
		var err error
		if task, err = t.Fold(task, e); err != nil {
			return task, err
		}
	}
	return task, nil
}

// Step validates input against the task and returns the events to persist
// (input with its sequence number set) and the effects they demand once
// persisted. It changes nothing: the caller persists the events, folds
// them, then performs the effects (see the package documentation).
//
// A stop requested of a task already reaping or terminal is not an error:
// Step returns no events and no effects, so stopping is idempotent.
//
// When the matched edge names a follow-on input (Edge.Then: executor-up is
// followed by the launch intent), Step returns that event too, with the
// same time, and the effects owed after it: the caller appends both in one
// commit.
func (t *Table) Step(task Task, input Event) ([]Event, []Effect, error) {
	_, events, effects, err := t.step(task, input, nil)
	return events, effects, err
}

// StepAll steps several inputs in order, as if each were stepped after the
// previous one was persisted, and returns all their events (to append in
// one commit) and the effects owed after the last. An effect owed between
// two inputs is one the later input reports the outcome of (a launch reply
// that says the task is already running and supervised yields launched
// then running: the attach effect is done). A stop of a task already
// reaping or terminal is skipped, as in Step.
func (t *Table) StepAll(task Task, inputs ...Event) ([]Event, []Effect, error) {
	var events []Event
	var effects []Effect
	for _, in := range inputs {
		var err error
		var evs []Event
		var effs []Effect
		task, evs, effs, err = t.step(task, in, nil)
		if err != nil {
			return nil, nil, err
		}
		if len(evs) > 0 {
			events, effects = append(events, evs...), effs
		}
	}
	return events, effects, nil
}

// step is Step returning the folded task too; events is appended to.
func (t *Table) step(task Task, input Event, events []Event) (Task, []Event, []Effect, error) {
	if input.Type == EventStopRequested && (task.State == StateReaping || task.State.Terminal()) {
		return task, events, nil, nil
	}
	from := task.State
	input.Seq = task.Version + 1
	next, err := t.Fold(task, input)
	if err != nil {
		return task, nil, nil, err
	}
	events = append(events, input)
	if follow := t.followOn(from, input.Type); follow != EventNone {
		return t.step(next, Event{Type: follow, Time: input.Time}, events)
	}
	var effects []Effect
	if next.State != from || input.Type == EventKillFailed || input.Type == EventReattached {
		effects = t.Pending(next)
	}
	return next, events, effects, nil
}

// followOn is the input that follows the edge (from, ev) at once, if any.
func (t *Table) followOn(from State, ev EventType) EventType {
	if from >= numStates || ev >= numEventTypes {
		return EventNone
	}
	return t.then[from][ev]
}

// FollowOn returns the input the table makes follow the edge (from, ev) at
// once, or EventNone.
func (t *Table) FollowOn(from State, ev EventType) EventType { return t.followOn(from, ev) }

// Pending returns the effects still owed by a task in its current state: a
// pure function of the folded state, so recovery knows what may be
// unfinished without running anything.
func (t *Table) Pending(task Task) []Effect {
	owed := t.owed[task.State]
	if len(owed) == 0 {
		return nil
	}
	out := make([]Effect, 0, len(owed))
	for _, typ := range owed {
		out = append(out, effectFor(typ, task))
	}
	return out
}

func effectFor(typ EffectType, task Task) Effect {
	e := Effect{Type: typ, Executor: task.Executor, TaskPID: task.TaskPID, TaskStartTime: task.TaskStartTime, Nonce: task.Nonce}
	switch typ {
	case EffectLaunchTask:
		e.Spec = task.Spec
	case EffectKillExecutor:
		e.Target = task.Target
		if task.Target == StateStopped {
			e.Signal, e.Grace = task.StopSignal, task.StopGrace
		}
	}
	return e
}

// Package-level shorthands for the Lifecycle table.

// Step is Lifecycle.Step.
func Step(task Task, input Event) ([]Event, []Effect, error) { return Lifecycle.Step(task, input) }

// StepAll is Lifecycle.StepAll.
func StepAll(task Task, inputs ...Event) ([]Event, []Effect, error) {
	return Lifecycle.StepAll(task, inputs...)
}

// Fold is Lifecycle.Fold.
func Fold(task Task, e Event) (Task, error) { return Lifecycle.Fold(task, e) }

// FoldAll is Lifecycle.FoldAll.
func FoldAll(task Task, events ...Event) (Task, error) { return Lifecycle.FoldAll(task, events...) }

// Pending is Lifecycle.Pending.
func Pending(task Task) []Effect { return Lifecycle.Pending(task) }

// Next is Lifecycle.Next.
func Next(s State, e Event) (State, error) { return Lifecycle.Next(s, e) }
