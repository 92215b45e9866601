package fsm

import (
	"errors"
	"slices"
	"testing"
)

// TestState_TerminalAndOwnership pins, state by state, the two predicates
// the invariants are stated in: which states are terminal (a task there
// owns no process: invariant 2) and which may own an executor (the live
// executors are exactly those of tasks in such states: invariant 1; every
// edge from one into reaping carries the kill: invariant 3). A state added
// to the lifecycle must be added here.
func TestState_TerminalAndOwnership(t *testing.T) {
	want := map[State]struct{ terminal, owns bool }{
		StateCreated:    {false, false},
		StateSpawning:   {false, true},
		StateExecutorUp: {false, true},
		StateLaunching:  {false, true},
		StateLaunched:   {false, true},
		StateRunning:    {false, true},
		StateRestarting: {false, true},
		StateReaping:    {false, true},
		StateFailed:     {true, false},
		StateExited:     {true, false},
		StateStopped:    {true, false},
		StateLost:       {true, false},
	}
	if len(want) != len(States()) {
		t.Fatalf("%d states pinned, the package declares %d: pin the new one", len(want), len(States()))
	}
	for _, s := range States() {
		w, ok := want[s]
		if !ok {
			t.Errorf("state %s is not pinned", s)
			continue
		}
		if s.Terminal() != w.terminal || s.OwnsExecutor() != w.owns {
			t.Errorf("%s: Terminal %v, OwnsExecutor %v; want %v, %v", s, s.Terminal(), s.OwnsExecutor(), w.terminal, w.owns)
		}
	}
	if StateNone.Terminal() || StateNone.OwnsExecutor() {
		t.Error("the state before task-created is terminal or owns an executor")
	}
}

// TestNewTable_RefusesMissingKillOutOfEveryOwningState: for every state
// that may own an executor, an error edge into reaping without the kill is
// refused, restarting included.
func TestNewTable_RefusesMissingKillOutOfEveryOwningState(t *testing.T) {
	for _, s := range States() {
		if !s.OwnsExecutor() || s == StateReaping {
			continue
		}
		i := slices.IndexFunc(Edges, func(e Edge) bool { return e.From == s && e.On == EventFault })
		if i < 0 {
			t.Errorf("%s has no fault edge", s)
			continue
		}
		edges := slices.Clone(Edges)
		edges[i].Effects = nil
		if _, err := NewTable(edges); !errors.Is(err, ErrMissingKill) {
			t.Errorf("fault out of %s without the kill: %v, want ErrMissingKill", s, err)
		}
	}
}
