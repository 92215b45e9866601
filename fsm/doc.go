// Package fsm is tether's task lifecycle: typed states, events and effects,
// the transition table, and the pure functions that step and fold a task.
//
// fsm does no I/O. It has no clock, no goroutines and no files; time, nonces
// and process identities arrive inside events. Everything the lifecycle wants
// done comes back as data (an [Effect]), in the manner of etcd raft's Ready.
//
// # The write-ahead contract
//
// A caller that drives a task (tether's driver, or an embedding agent) must:
//
//  1. Call [Table.Step] with the task's folded state and the next input
//     event. Step validates the event against the table and returns the
//     events to persist and the effects they demand; it changes nothing.
//  2. Persist the returned events durably (store.Append) before anything
//     else. An effect must never run before the event that demands it is on
//     disk: that is what lets recovery know which effects may have happened.
//  3. Fold the persisted events into the task ([Table.Fold]).
//  4. Perform the effects. Each effect is idempotent or keyed: a spawn by its
//     nonce, a kill by the executor's proven identity, a launch by asking the
//     executor whether it already launched.
//  5. Record each effect's outcome as a new input event (go to step 1):
//     executor-up or spawn-failed after a spawn, launched or launch-failed
//     after a launch, running after supervision is attached,
//     executor-reaped or kill-failed after a kill.
//
// After a crash, folding the log yields the state; [Pending] gives the
// effects still owed, and the crash-window table in docs/DESIGN.md says how to
// reconcile each against the process table. Replay runs no effects.
//
// # The table
//
// [Lifecycle] is the table, declared once in [Edges]. [NewTable] refuses a
// table in which an edge out of a state that may own an executor reaches
// reaping or a terminal state without the kill-executor effect, or in which
// a terminal state can be reached from such a state without passing through
// reaping. The table is compiled into an array for [Table.Fold] and
// [Table.Next] (replay's hot path) and mirrored into a looplab/fsm machine
// for [Table.Can] and graph export ([Table.Graph]).
//
// # Usage
//
//	t := fsm.Task{ID: "web"}
//	evs, effs, err := fsm.Lifecycle.Step(t, fsm.Event{Type: fsm.EventCreated, Spec: &spec})
//	// append evs to the store, then:
//	t, err = fsm.Lifecycle.FoldAll(t, evs...)
//	// perform effs, then step their outcomes.
package fsm
