package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

func TestAppend_LoadRoundTrip(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	log := runningLog(3)
	v := mustAppend(t, s, "web", 0, log[:1]...)
	v = mustAppend(t, s, "web", v, withSeq(2, log[1:4])...) // Seq set by the caller
	v = mustAppend(t, s, "web", v, log[4:]...)              // Seq assigned
	got, err := s.Load(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if want := withSeq(1, log); !reflect.DeepEqual(got, want) {
		t.Fatalf("Load:\n got %v\nwant %v", got, want)
	}
	task, err := s.LoadTask(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fsm.FoldAll(fsm.Task{ID: "web"}, withSeq(1, log)...)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(task, want) || task.State != fsm.StateRunning || task.Version != v {
		t.Fatalf("LoadTask = %+v, want %+v", task, want)
	}
}

func TestAppend_SameExpectedVersionOneWins(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	for round := range 20 {
		task := fmt.Sprintf("t%d", round)
		v := mustAppend(t, s, task, 0, runningLog(0)...)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = s.Append(ctx, task, v, fsm.Event{Type: fsm.EventReattached, Time: at(10 + i)})
			})
		}
		wg.Wait()
		var wins, conflicts int
		for _, err := range errs {
			var ce *ConflictError
			switch {
			case err == nil:
				wins++
			case errors.As(err, &ce) && errors.Is(err, ErrConflict):
				conflicts++
				if ce.Task != task || ce.Expected != v || ce.Actual != v+1 {
					t.Errorf("conflict %+v, want task %s expected %d actual %d", ce, task, v, v+1)
				}
			default:
				t.Fatalf("append: %v", err)
			}
		}
		if wins != 1 || conflicts != 1 {
			t.Fatalf("round %d: %d wins and %d conflicts, want exactly one of each", round, wins, conflicts)
		}
	}
}

func TestAppend_NewTaskThatExistsConflicts(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)[:1]...)
	_, err := s.Append(context.Background(), "a", 0, runningLog(0)[:1]...)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Actual != 1 {
		t.Fatalf("re-create: %v, want a conflict at version 1", err)
	}
}

// An append's expected version against the task's, both ways: a caller
// behind the log (another writer got there first) and one ahead of it (it
// folded events the log does not hold) both get a *ConflictError naming
// the two versions and write nothing (an append ahead would leave a gap in
// the sequence numbers); an event whose Seq is not the next one, behind or
// ahead, is refused as ErrSequence. At the task's version it goes in.
func TestAppend_ExpectedVersionBothWays(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	v := mustAppend(t, s, "a", 0, runningLog(0)...)
	next := fsm.Event{Type: fsm.EventReattached, Time: at(20)}
	for _, expected := range []uint64{v - 1, v + 1, v + 5} {
		_, err := s.Append(ctx, "a", expected, next)
		var ce *ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Task != "a" || ce.Expected != expected || ce.Actual != v {
			t.Errorf("Append at version %d to a task at %d: %v, want a ConflictError naming both", expected, v, err)
		}
	}
	for _, seq := range []uint64{v, v + 2} {
		e := next
		e.Seq = seq
		if _, err := s.Append(ctx, "a", v, e); !errors.Is(err, ErrSequence) {
			t.Errorf("an event of seq %d appended at version %d: %v, want ErrSequence", seq, v, err)
		}
	}
	if got, err := s.Load(ctx, "a"); err != nil || len(got) != int(v) {
		t.Fatalf("after refused appends: %d events (%v), want %d", len(got), err, v)
	}
	mustAppend(t, s, "a", v, next)
}

func TestAppend_UnknownTask(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	_, err := s.Append(ctx, "ghost", 3, fsm.Event{Type: fsm.EventReattached})
	if !errors.Is(err, ErrUnknownTask) || !strings.Contains(err.Error(), "ghost") {
		t.Errorf("Append to an unknown task: %v", err)
	}
	if _, err := s.Load(ctx, "ghost"); !errors.Is(err, ErrUnknownTask) || !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("Load of an unknown task: %v", err)
	}
	if _, err := s.LoadTask(ctx, "ghost"); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("LoadTask of an unknown task: %v", err)
	}
}

func TestAppend_IllegalEventWritesNothing(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	log := runningLog(0)
	// A new task must start with task-created.
	if _, err := s.Append(ctx, "a", 0, log[1]); !errors.Is(err, fsm.ErrIllegalTransition) {
		t.Fatalf("first event spawn-intent: %v, want ErrIllegalTransition", err)
	}
	if _, err := s.Load(ctx, "a"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("after a refused create: %v, want ErrUnknownTask", err)
	}
	v := mustAppend(t, s, "a", 0, log[:2]...)
	// Legal then illegal in one call: nothing of it is written.
	_, err := s.Append(ctx, "a", v, log[2], fsm.Event{Type: fsm.EventRunning, Time: at(9)})
	if !errors.Is(err, fsm.ErrIllegalTransition) {
		t.Fatalf("executor-up then running: %v, want ErrIllegalTransition", err)
	}
	// A payload the table's fold refuses (a nonce that is not the intent's).
	bad := log[2]
	bad.Executor = &fsm.Identity{PID: 5, Nonce: "other"}
	if _, err := s.Append(ctx, "a", v, bad); !errors.Is(err, fsm.ErrInvalidEvent) {
		t.Fatalf("executor-up with a foreign nonce: %v, want ErrInvalidEvent", err)
	}
	got, err := s.Load(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("after refused appends the log has %d events, want 2", len(got))
	}
	mustAppend(t, s, "a", v, log[2:]...)
}

func TestAppend_BadInput(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	if _, err := s.Append(ctx, "a", 0, withSeq(2, runningLog(0)[:1])...); !errors.Is(err, ErrSequence) {
		t.Errorf("seq 2 for a new task: %v, want ErrSequence", err)
	}
	if _, err := s.Append(ctx, "a", 0); !errors.Is(err, ErrNoEvents) {
		t.Errorf("no events: %v, want ErrNoEvents", err)
	}
	if _, err := s.Append(ctx, "", 0, runningLog(0)[:1]...); !errors.Is(err, ErrTaskID) {
		t.Errorf("empty task id: %v, want ErrTaskID", err)
	}
}

func TestAppend_CancelledContextWritesNothing(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Append(ctx, "a", 0, runningLog(0)[:1]...); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
	}
	if _, err := s.Load(context.Background(), "a"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("a cancelled append was written: %v", err)
	}
}

func TestAppend_AbandonedRequestNotWritten(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	// Drive the committer by hand: a request abandoned before it is claimed
	// is skipped, and its caller's cancellation is what it reports.
	r := &request{task: "a", expected: 0, done: make(chan struct{})}
	r.events = withSeq(1, runningLog(0)[:1])
	r.recs = [][]byte{encodeRecord(nil, 1, &r.events[0])}
	if !r.state.CompareAndSwap(reqQueued, reqAbandoned) {
		t.Fatal("could not abandon a fresh request")
	}
	s.commit([]*request{r})
	select {
	case <-r.done:
		t.Fatal("the committer answered an abandoned request")
	default:
	}
	if _, err := s.Load(context.Background(), "a"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("an abandoned request was written: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		<-tick.C
	}
}

// TestAppend_ContextEndsAroundTheClaim: an append whose context ends is
// told the truth on both sides of the moment the committer claims it.
// Before the claim (queued behind a commit that cannot finish, bbolt's
// writer lock held by the test), it is abandoned: ctx.Err(), nothing
// written, even once the committer reaches it; a retry at the same version
// commits it once. After the claim (the committer blocked in its commit),
// it waits for the commit and returns the new version, not ctx.Err(); a
// retry conflicts, and the log holds the events once.
func TestAppend_ContextEndsAroundTheClaim(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	bg := context.Background()
	v := mustAppend(t, s, "a", 0, runningLog(0)...)
	mustAppend(t, s, "b", 0, runningLog(0)...)
	reattach := func(task string, v uint64, sec int) *request {
		r, err := newRequest(task, v, []fsm.Event{{Type: fsm.EventReattached, Time: at(sec)}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	type outcome struct {
		v   uint64
		err error
	}
	submit := func(ctx context.Context, r *request) chan outcome {
		out := make(chan outcome, 1)
		go func() {
			v, err := s.submit(ctx, r)
			out <- outcome{v, err}
		}()
		return out
	}

	// Hold bbolt's writer lock: the committer claims what it takes, then
	// blocks in its commit.
	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	claimedCtx, endClaimed := context.WithCancel(bg)
	claimed := reattach("a", v, 10)
	claimedOut := submit(claimedCtx, claimed)
	waitFor(t, "the committer claims the first request", func() bool { return claimed.state.Load() == reqClaimed })
	queuedCtx, endQueued := context.WithCancel(bg)
	queued := reattach("b", 6, 11)
	queuedOut := submit(queuedCtx, queued)
	waitFor(t, "the second request is queued", func() bool { return len(s.reqs) == 1 })

	endQueued()
	if got := <-queuedOut; !errors.Is(got.err, context.Canceled) || got.v != 0 {
		t.Errorf("a queued append whose context ended: version %d, %v; want context.Canceled", got.v, got.err)
	}
	if st := queued.state.Load(); st != reqAbandoned {
		t.Errorf("the queued request is in state %d, want abandoned (%d)", st, reqAbandoned)
	}
	endClaimed()
	select {
	case got := <-claimedOut:
		t.Fatalf("a claimed append returned while its commit could not run: version %d, %v", got.v, got.err)
	default:
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := <-claimedOut; got.err != nil || got.v != v+1 {
		t.Errorf("a claimed append whose context ended: version %d, %v; want version %d, no error (it was committed)", got.v, got.err, v+1)
	}
	// The committer has passed the abandoned request once this append,
	// queued after it, returns.
	mustAppend(t, s, "c", 0, runningLog(0)[:1]...)

	if _, err := s.Append(bg, "a", v, fsm.Event{Type: fsm.EventReattached, Time: at(10)}); !errors.Is(err, ErrConflict) {
		t.Errorf("a retry of the committed append: %v, want ErrConflict (never a second commit)", err)
	}
	if evs, err := s.Load(bg, "a"); err != nil || len(evs) != int(v)+1 {
		t.Errorf("task a holds %d events (%v), want %d: the claimed append once", len(evs), err, v+1)
	}
	if evs, err := s.Load(bg, "b"); err != nil || len(evs) != 6 {
		t.Errorf("task b holds %d events (%v), want 6: the abandoned append written", len(evs), err)
	}
	mustAppend(t, s, "b", 6, fsm.Event{Type: fsm.EventReattached, Time: at(11)})
	if evs, err := s.Load(bg, "b"); err != nil || len(evs) != 7 {
		t.Errorf("task b holds %d events (%v) after the retry, want 7", len(evs), err)
	}
}

func TestAppend_AfterClose(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Append(context.Background(), "a", 6, fsm.Event{Type: fsm.EventReattached}); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Load(context.Background(), "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v, want ErrClosed", err)
	}
}

func TestAppend_CloseDrainsQueue(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	var wg sync.WaitGroup
	results := make([]error, 64)
	for i := range results {
		wg.Go(func() {
			_, results[i] = s.Append(context.Background(), fmt.Sprintf("t%02d", i), 0, runningLog(0)...)
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, path, Options{ReadOnly: true})
	got := ids(t, r.All)
	for i, err := range results {
		id := fmt.Sprintf("t%02d", i)
		if (err == nil) != slices.Contains(got, id) {
			t.Errorf("task %s: Append said %v, store holds it: %v", id, err, slices.Contains(got, id))
		}
	}
}

func TestAppend_256Writers(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{})
	ctx := context.Background()
	const writers, each = 256, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			task := fmt.Sprintf("w%03d", w)
			log := runningLog(each)
			v := uint64(0)
			for i := range log {
				var err error
				if v, err = s.Append(ctx, task, v, log[i]); err != nil {
					errs <- fmt.Errorf("%s: %w", task, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all := ids(t, s.All)
	if len(all) != writers || !slices.IsSorted(all) {
		t.Fatalf("All listed %d tasks (sorted %v), want %d", len(all), slices.IsSorted(all), writers)
	}
	for _, id := range all {
		evs, err := s.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := withSeq(1, runningLog(each)); !reflect.DeepEqual(evs, want) {
			t.Fatalf("task %s: %d events, not the %d appended", id, len(evs), len(want))
		}
	}
}

func TestLive_TerminalTasksLeaveIndex(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	for _, id := range []string{"c", "a", "b", "d"} {
		mustAppend(t, s, id, 0, runningLog(0)...)
	}
	mustAppend(t, s, "b", 6, finishLog(20)...)
	// Created and rejected in one append: never live.
	mustAppend(t, s, "e", 0, fsm.Event{Type: fsm.EventCreated, Spec: testSpec()},
		fsm.Event{Type: fsm.EventConfigRejected, Reason: "cap_add net_raw not allowed"})
	if got, want := ids(t, s.Live), []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("Live = %v, want %v", got, want)
	}
	if got, want := ids(t, s.All), []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
	task, err := s.LoadTask(context.Background(), "b")
	if err != nil || task.State != fsm.StateExited {
		t.Errorf("LoadTask(b) = %s, %v; want exited", task.State, err)
	}
}

func TestRemove_OldTerminalTasksOnly(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	mustAppend(t, s, "old-done", 0, runningLog(0)...)
	mustAppend(t, s, "old-done", 6, finishLog(10)...) // last event at 11s
	mustAppend(t, s, "new-done", 0, runningLog(0)...)
	mustAppend(t, s, "new-done", 6, finishLog(100)...) // last event at 101s
	mustAppend(t, s, "old-live", 0, runningLog(0)...)  // last event at 5s
	removed, err := s.Remove(context.Background(), baseTime.Add(50*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old-done"}; !slices.Equal(removed, want) {
		t.Fatalf("Remove = %v, want %v", removed, want)
	}
	if got, want := ids(t, s.All), []string{"new-done", "old-live"}; !slices.Equal(got, want) {
		t.Fatalf("All after Remove = %v, want %v", got, want)
	}
	// The id can be used again.
	mustAppend(t, s, "old-done", 0, runningLog(0)[:1]...)
}

func TestCompact_ShrinksAndKeepsData(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	for i := range 200 {
		id := fmt.Sprintf("t%03d", i)
		mustAppend(t, s, id, 0, runningLog(20)...)
		if i%10 != 0 {
			mustAppend(t, s, id, 26, finishLog(100)...)
		}
	}
	if _, err := s.Remove(context.Background(), baseTime.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, after, err := Compact(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if after >= before {
		t.Errorf("Compact: %d bytes before, %d after; want smaller", before, after)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("compacted file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	r := openTest(t, path, Options{})
	if got := ids(t, r.Live); len(got) != 20 {
		t.Fatalf("after Compact %d live tasks, want 20", len(got))
	}
	evs, err := r.Load(context.Background(), "t190")
	if err != nil || len(evs) != 26 {
		t.Fatalf("after Compact: %d events, %v", len(evs), err)
	}
	mustAppend(t, r, "t190", 26, finishLog(200)...)
}

func TestOpen_PrivateModes(t *testing.T) {
	testproc.Parallel(t)
	path := filepath.Join(t.TempDir(), "a", "b", "tether.db")
	openTest(t, path, Options{NoSync: true})
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700, filepath.Dir(filepath.Dir(path)): 0o700} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", p, got, want)
		}
	}
}

func TestOpen_ReadOnlyRefusesWrites(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, path, Options{ReadOnly: true})
	if _, err := r.Append(context.Background(), "a", 6, fsm.Event{Type: fsm.EventReattached}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Append on a read-only store: %v", err)
	}
	if _, err := r.LoadTask(context.Background(), "a"); err != nil {
		t.Errorf("LoadTask on a read-only store: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.db"), Options{ReadOnly: true}); err == nil {
		t.Error("read-only Open of a missing file succeeded")
	}
}

// notStoreError asserts err is a clear ErrNotStore naming path and what to
// do.
func notStoreError(t *testing.T, path string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotStore) {
		t.Fatalf("Open: %v, want ErrNotStore", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "move it aside") {
		t.Errorf("error %q does not name the path and what to do", msg)
	}
}

func TestOpen_TruncatedFile(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	for i := range 50 {
		mustAppend(t, s, fmt.Sprintf("t%02d", i), 0, runningLog(50)...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{st.Size() / 2, 3 * 4096, 100} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{LockTimeout: time.Second})
		notStoreError(t, path, err)
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpen_GarbageFile(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"text":  []byte(strings.Repeat("this is not a database\n", 2000)),
		"small": []byte("hello"),
		"zeros": make([]byte, 64<<10),
	} {
		path := filepath.Join(dir, name+".db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path, Options{LockTimeout: time.Second})
		notStoreError(t, path, err)
	}
}

func TestOpen_ForeignBoltFile(t *testing.T) {
	testproc.Parallel(t)
	path := filepath.Join(t.TempDir(), "other.db")
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("someone-elses"))
		return err
	})
	_, err := Open(path, Options{})
	notStoreError(t, path, err)
}

// A bbolt file without a single bucket under the store's name (what a copy
// renamed into place before its pages reached the disk leaves after a
// power loss) is refused by every open and by Compact, and left as it is:
// laying it out as a new store would leave its running tasks unknown.
func TestOpen_EmptyBoltFileRefused(t *testing.T) {
	testproc.Parallel(t)
	path := filepath.Join(t.TempDir(), "tether.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() error{
		"Open": func() error {
			s, err := Open(path, Options{})
			if err == nil {
				s.Close()
			}
			return err
		},
		"read-only Open": func() error {
			s, err := Open(path, Options{ReadOnly: true})
			if err == nil {
				s.Close()
			}
			return err
		},
		"Compact": func() error {
			_, _, err := Compact(path, Options{})
			return err
		},
	} {
		err := open()
		if !errors.Is(err, ErrNotStore) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "check --salvage") {
			t.Errorf("%s of a bbolt file without buckets: %v, want ErrNotStore naming it and the salvage", name, err)
		}
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the refused file was changed (%v)", err)
	}
}

func TestOpen_UnknownSchemaVersion(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, 99))
	})
	_, err := Open(path, Options{})
	var se *SchemaError
	if !errors.As(err, &se) || !errors.Is(err, ErrSchema) || se.Found != 99 || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open of a schema-99 store: %v", err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error { // restore, for the cleanup check
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaNoDesired))
	})
}

// damageRecord flips one byte of task's record seq on disk.
func damageRecord(t *testing.T, path, task string, seq uint64) {
	t.Helper()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b, err := rawTask(tx, task)
		if err != nil {
			return err
		}
		v := slices.Clone(b.Get(seqKey(seq)))
		v[len(v)-1] ^= 0x40
		return b.Put(seqKey(seq), v)
	})
}

func TestLoad_CorruptRecordNamesTaskAndSeq(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openDamaged(t, path, Options{NoSync: true}, func(t testing.TB, r Report) {
		if len(r.Problems) != 1 || r.Problems[0].Task != "web" || r.Problems[0].Seq != 4 {
			t.Errorf("cleanup check of the damaged store: %s", r)
		}
	})
	mustAppend(t, s, "web", 0, runningLog(3)...)
	mustAppend(t, s, "db", 0, runningLog(3)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageRecord(t, path, "web", 4)

	r := openDamaged(t, path, Options{NoSync: true}, func(testing.TB, Report) {})
	ctx := context.Background()
	for name, load := range map[string]func() error{
		"Load":     func() error { _, err := r.Load(ctx, "web"); return err },
		"LoadTask": func() error { _, err := r.LoadTask(ctx, "web"); return err },
	} {
		err := load()
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s of a damaged task: %v, want a CorruptError", name, err)
		}
		if ce.Task != "web" || ce.Seq != 4 || !strings.Contains(err.Error(), `"web" seq 4`) {
			t.Errorf("%s: %v names task %q seq %d, want web seq 4", name, err, ce.Task, ce.Seq)
		}
	}
	if _, err := r.Load(ctx, "db"); err != nil {
		t.Errorf("the undamaged task: %v", err)
	}
	// Appending to the damaged task still works: the head is intact and
	// validation does not read the log.
	rep, err := r.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Task != "web" || rep.Problems[0].Seq != 4 || !errors.Is(rep.Problems[0].Err, ErrCorrupt) {
		t.Fatalf("Check of the damaged store: %s", rep)
	}
	if !strings.Contains(rep.String(), `task "web" seq 4`) {
		t.Errorf("report %q does not name the record", rep)
	}
}

func TestLoad_UnknownRecordVersionRefused(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openDamaged(t, path, Options{NoSync: true}, func(t testing.TB, r Report) {
		var ve *VersionError
		if len(r.Problems) != 1 || !errors.As(r.Problems[0].Err, &ve) || ve.Seq != 2 {
			t.Errorf("cleanup check: %s", r)
		}
	})
	mustAppend(t, s, "web", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b, err := rawTask(tx, "web")
		if err != nil {
			return err
		}
		v := slices.Clone(b.Get(seqKey(2)))
		v[4] = recordVersion + 1
		binary.LittleEndian.PutUint32(v, checksum(v))
		return b.Put(seqKey(2), v)
	})
	r := openDamaged(t, path, Options{ReadOnly: true}, func(testing.TB, Report) {})
	_, err := r.Load(context.Background(), "web")
	var ve *VersionError
	if !errors.As(err, &ve) || !errors.Is(err, ErrVersion) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load: %v, want a VersionError (and not corruption)", err)
	}
	if ve.Task != "web" || ve.Seq != 2 || ve.Version != recordVersion+1 || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("VersionError %v", err)
	}
}

func TestCheck_GoodStore(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(2)...)
	mustAppend(t, s, "b", 0, runningLog(0)...)
	mustAppend(t, s, "b", 6, finishLog(9)...)
	r, err := s.Check(context.Background())
	if err != nil || !r.OK() {
		t.Fatalf("Check: %s, %v", r, err)
	}
	if r.Tasks != 2 || r.Live != 1 || r.Events != 16 {
		t.Errorf("Check counted %d tasks, %d live, %d events; want 2, 1, 16", r.Tasks, r.Live, r.Events)
	}
}

// Check while appends commit beside it: no false "reachable freed" (a
// read transaction's page check would see the freelist move under it).
func TestCheck_WhileAppending(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	done := make(chan error, 8)
	for w := range 8 {
		go func() {
			var err error
			for i := 0; i < 40 && err == nil; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err = s.Append(ctx, id, 0, runningLog(3)...)
				if err == nil {
					_, err = s.Append(ctx, id, 9, withSeq(10, finishLog(20))...)
				}
			}
			done <- err
		}()
	}
	for running := 8; running > 0; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running--
		default:
			r, err := s.Check(ctx)
			if err != nil || !r.OK() {
				t.Fatalf("Check during appends: %s %v", r, err)
			}
		}
	}
}

func TestCheck_DamagedStore(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	type where struct {
		task string
		seq  uint64
	}
	want := []where{
		{"corrupt", 3},   // flipped byte
		{"ghost", 0},     // live index entry without a task
		{"illegal", 7},   // running after running: not a legal walk
		{"unindexed", 0}, // live task missing from the index
	}
	verify := func(t testing.TB, r Report) {
		var got []where
		for _, p := range r.Problems {
			got = append(got, where{p.Task, p.Seq})
			if !errors.Is(p.Err, ErrCorrupt) {
				t.Errorf("problem %s is not ErrCorrupt", p)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("Check problems:\n got %v\nwant %v\n%s", got, want, r)
		}
	}
	s := openDamaged(t, path, Options{NoSync: true}, verify)
	for _, id := range []string{"corrupt", "illegal", "unindexed", "fine"} {
		mustAppend(t, s, id, 0, runningLog(2)...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageRecord(t, path, "corrupt", 3)
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b, err := rawTask(tx, "illegal")
		if err != nil {
			return err
		}
		e := fsm.Event{Type: fsm.EventRunning, Time: at(50)}
		if err := b.Put(seqKey(7), encodeRecord(nil, 7, &e)); err != nil {
			return err
		}
		live := tx.Bucket(bucketLive)
		if err := live.Delete([]byte("unindexed")); err != nil {
			return err
		}
		return live.Put([]byte("ghost"), liveMark)
	})
	r := openDamaged(t, path, Options{NoSync: true}, verify)
	rep, err := r.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	verify(t, rep)
	if _, err := r.LoadTask(context.Background(), "illegal"); !errors.Is(err, fsm.ErrIllegalTransition) || !errors.Is(err, ErrCorrupt) {
		t.Errorf("LoadTask of an illegal log: %v", err)
	}
}

func TestCheck_CancelledContext(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a cancelled context: %v", err)
	}
}

func TestTx_PanicBecomesCorruptNamingFile(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	err := s.view(func(*bolt.Tx) error { panic("invalid page type: 0") })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "invalid page type") {
		t.Fatalf("panic in a read transaction: %v", err)
	}
	err = updateSafe(s.db, s.path, func(*bolt.Tx) error { panic("freelist broken") })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("panic in a write transaction: %v", err)
	}
	// The write lock was released: appends still work.
	mustAppend(t, s, "a", 0, runningLog(0)...)
}

func TestOpen_DamagedPagesNeverPanic(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	for i := range 40 {
		mustAppend(t, s, fmt.Sprintf("t%02d", i), 0, runningLog(40)...)
		if i%4 == 0 {
			mustAppend(t, s, fmt.Sprintf("t%02d", i), 46, finishLog(100)...)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	// Scribble over one page at a time past the two meta pages: every
	// outcome, reading and writing, is a clean open or an error in the
	// corruption categories naming the file, never a panic or a hang.
	flagged, scribbled := 0, 0
	for p := 2; p*page < len(good); p += 2 {
		bad := bytes.Clone(good)
		for i := p * page; i < (p+1)*page; i++ {
			bad[i] = byte(i*7 + p)
		}
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		// Check first: exercise may write.
		rep, err := CheckFile(context.Background(), path, Options{})
		if err != nil {
			t.Errorf("page %d: CheckFile: %v", p, err)
		}
		if !rep.OK() {
			flagged++
		}
		exercise(t, path, []string{"t00", "t01", "t20", "t39"})
		scribbled++
	}
	// A free page may take garbage unseen; the rest are in use.
	t.Logf("Check found damage in %d of %d scribbled pages", flagged, scribbled)
	if flagged == 0 {
		t.Error("Check found none of the damage")
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
}
