package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// TestOptionsCommitted_ToldEachCommitThatWrote: Options.Committed is told
// each group commit of appends, with how long its transaction took (the
// agent's tether_store_commit_seconds); an append refused by its version
// is a commit that wrote nothing, and is not told.
func TestOptionsCommitted_ToldEachCommitThatWrote(t *testing.T) {
	testproc.Parallel(t)
	var mu sync.Mutex
	var took []time.Duration
	s := openTest(t, testPath(t), Options{Committed: func(d time.Duration) {
		mu.Lock()
		took = append(took, d)
		mu.Unlock()
	}})
	told := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Duration(nil), took...)
	}
	ctx := context.Background()
	v := mustAppend(t, s, "c", 0, runningLog(0)...)
	if got := told(); len(got) != 1 || got[0] <= 0 {
		t.Fatalf("after one append: told %v, want one positive duration", got)
	}
	for i := 0; i < 3; i++ {
		v = mustAppend(t, s, "c", v, fsm.Event{Type: fsm.EventReattached, Time: at(20 + i), Executor: &fsm.Identity{PID: 10, StartTime: 1, BootID: "b", Nonce: "n"}})
	}
	if got := told(); len(got) != 4 {
		t.Fatalf("after four sequential appends: told %d commits (%v), want 4", len(got), got)
	}
	if _, err := s.Append(ctx, "c", v-1, fsm.Event{Type: fsm.EventReattached, Time: at(30), Executor: &fsm.Identity{PID: 10, StartTime: 1, BootID: "b", Nonce: "n"}}); err == nil {
		t.Fatal("an append at a stale version was accepted")
	}
	if got := told(); len(got) != 4 {
		t.Errorf("a refused append was told as a commit: %v", got)
	}
}
