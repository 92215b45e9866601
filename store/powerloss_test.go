package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/crashfs"
	"github.com/tether-fsm/tether/store"

	"github.com/tether-fsm/tether/internal/testproc"
)

// Power loss: the store runs on a crashfs mount, which keeps every write
// that is not yet durable apart; then every state the disk may hold after a
// power loss (at each fsync and between each one and the next, with unsynced
// writes dropped or kept in subsets) is opened as a store. Each must open,
// pass Check (invariant 8: every log a legal walk) and hold every append
// acknowledged before that crash (invariant 7). A SIGKILL keeps the page
// cache, so only this finds a commit acknowledged before its fsync.

// plLifecycle is a task's legal walk: created to exited, with reattached
// self-loops in the middle so a task's log spans several pages.
func plLifecycle(task string, reattached int) []fsm.Event {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	at := func(i int) int64 { return t0 + int64(i)*int64(time.Second) }
	evs := []fsm.Event{
		{Type: fsm.EventCreated, Time: at(0), Spec: &fsm.Spec{Name: task, Driver: "raw_exec", Command: "/bin/true", KillSignal: 15, KillTimeout: time.Second}},
		{Type: fsm.EventSpawnIntent, Time: at(1), Nonce: "nonce-" + task},
		{Type: fsm.EventExecutorUp, Time: at(2), Executor: &fsm.Identity{PID: 100, StartTime: 7, BootID: "boot", Nonce: "nonce-" + task, Socket: "/s"}},
		{Type: fsm.EventLaunchIntent, Time: at(3)},
		{Type: fsm.EventLaunched, Time: at(4), TaskPID: 101, TaskStartTime: 8},
		{Type: fsm.EventRunning, Time: at(5)},
	}
	for i := range reattached {
		evs = append(evs, fsm.Event{Type: fsm.EventReattached, Time: at(6 + i)})
	}
	return append(evs,
		fsm.Event{Type: fsm.EventTaskExited, Time: at(6 + reattached), Exit: &fsm.ExitStatus{Code: 0}},
		fsm.Event{Type: fsm.EventExecutorReaped, Time: at(7 + reattached), Target: fsm.StateExited},
	)
}

// plAck is one acknowledged append: task reached version at mark.
type plAck struct {
	task    string
	version uint64
	mark    crashfs.Mark
}

// plRun is a workload on the mount and what it was acknowledged.
type plRun struct {
	fs     *crashfs.FS
	db     string // relative to the mount
	logs   map[string][]fsm.Event
	acks   []plAck
	mu     sync.Mutex
	since  crashfs.Mark // the store exists durably from here
	before int          // ops logged before the workload

	// removals are the tasks Remove took (gc), each between two marks.
	removals []plRemoval
	// kept are the files a maintenance promised to keep beside the store
	// (an install's aside).
	kept []plKept
	// lost are the tasks damaged on purpose, which a salvage loses and
	// records as ended lost (RecordLost), each with the mark of the
	// Install that put that record in place: until then the damaged store
	// may be in place (their damage is no problem), from then on each must
	// read as ended lost.
	lost map[string]crashfs.Mark
	// again, if set, is run on each crash state's copy of the store once
	// it has been checked (the maintenance run again, as the next gc or
	// salvage would), and the store is checked once more.
	again func(path string) error
}

// plRemoval is a Remove that took ids: it began at begun and returned at
// done.
type plRemoval struct {
	ids         []string
	begun, done crashfs.Mark
}

// plKept is a file a maintenance promised to keep: in every state after
// the mark from, file (relative to the mount) must be there and hold the
// acknowledgements acks.
type plKept struct {
	file string
	from crashfs.Mark
	acks []plAck
}

// plOpen makes the store on a fresh mount, its directory too: once Open has
// returned, the store (its file, its directory) must survive a power loss
// (Open creates both durably; it once fsynced neither, and the whole file
// could vanish with every acknowledged append in it).
func plOpen(t *testing.T, opts crashfs.Options) (*plRun, *store.Store) {
	t.Helper()
	fsys := crashfs.Mount(t, "", opts)
	run := &plRun{fs: fsys, db: "state/tether.db", logs: map[string][]fsm.Event{}}
	s, err := store.Open(fsys.Path(run.db), store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("store.Open on the mount: %v", err)
	}
	run.since = fsys.Mark("store.Open returned")
	run.before = len(fsys.Ops())
	return run, s
}

// appendAll appends task's log, n events per call, marking each
// acknowledgement.
func (run *plRun) appendAll(t *testing.T, s *store.Store, task string, evs []fsm.Event, n int) error {
	run.mu.Lock()
	run.logs[task] = evs
	run.mu.Unlock()
	_, err := run.appendTo(s, task, 0, len(evs), n)
	return err
}

// appendTo appends the events of task's log (set already) from version v
// up to version to, n events per call, marking each acknowledgement. It
// returns the version reached; an error (the version before it) stops it.
func (run *plRun) appendTo(s store.Log, task string, v uint64, to, n int) (uint64, error) {
	run.mu.Lock()
	evs := run.logs[task]
	run.mu.Unlock()
	ctx := context.Background()
	for i := int(v); i < to; i += n {
		batch := evs[i:min(i+n, to)]
		nv, err := s.Append(ctx, task, v, batch...)
		if err != nil {
			return v, fmt.Errorf("Append(%s, %d): %w", task, v, err)
		}
		run.ack(task, nv)
		v = nv
	}
	return v, nil
}

// ack marks task's version v acknowledged, now.
func (run *plRun) ack(task string, v uint64) {
	m := run.fs.Mark(fmt.Sprintf("%s v%d", task, v))
	run.mu.Lock()
	run.acks = append(run.acks, plAck{task, v, m})
	run.mu.Unlock()
}

// acked returns the acknowledgements so far.
func (run *plRun) acked() []plAck {
	run.mu.Lock()
	defer run.mu.Unlock()
	return slices.Clone(run.acks)
}

// commits counts the bbolt commits of the workload: each writes one meta
// page (page 0 or 1) whole.
func (run *plRun) commits() int {
	n := 0
	page := int64(os.Getpagesize())
	for _, op := range run.fs.Ops()[run.before:] {
		if op.Kind == crashfs.OpWrite && op.Path == run.db && op.Off%page == 0 && op.Off < 2*page && int64(op.Len) == page {
			n++
		}
	}
	return n
}

// check opens every crash state since the store was made and checks
// invariants 7 and 8 in it. It returns the number of states checked.
func (run *plRun) check(t *testing.T) int {
	t.Helper()
	sts := run.fs.CrashStates(crashfs.StateOptions{Since: run.since, Seed: 15})
	root := t.TempDir()
	ctx := context.Background()
	failed := 0
	for i, st := range sts {
		if failed >= 5 {
			t.Errorf("... stopping after %d failing crash states of %d", failed, len(sts))
			break
		}
		dir := filepath.Join(root, fmt.Sprint(i))
		if err := st.Materialize(dir); err != nil {
			t.Fatal(err)
		}
		problems := run.checkState(ctx, st, dir)
		if len(problems) == 0 && run.again != nil {
			db := filepath.Join(dir, filepath.FromSlash(run.db))
			if err := run.again(db); err != nil {
				problems = append(problems, fmt.Sprintf("the maintenance run again after the crash: %v", err))
			} else {
				for _, p := range run.checkStore(ctx, st, db, run.acks, true) {
					problems = append(problems, "after the maintenance ran again: "+p)
				}
			}
		}
		if len(problems) > 0 {
			failed++
			for _, p := range problems {
				t.Errorf("crash state %s: %s", st, p)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	return len(sts)
}

// checkState checks the crash state materialised at dir: the store, and
// each file a maintenance promised to keep.
func (run *plRun) checkState(ctx context.Context, st *crashfs.CrashState, dir string) []string {
	problems := run.checkStore(ctx, st, filepath.Join(dir, filepath.FromSlash(run.db)), run.acks, true)
	for _, k := range run.kept {
		if !st.Before(k.from) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(k.file))
		if _, err := os.Lstat(p); err != nil {
			problems = append(problems, fmt.Sprintf("%s, kept from %s on: %v", k.file, k.from, err))
			continue
		}
		for _, pr := range run.checkStore(ctx, st, p, k.acks, false) {
			problems = append(problems, k.file+": "+pr)
		}
	}
	return problems
}

// checkStore opens the store at path in crash state st and checks that it
// passes Check (invariant 8), that each log in it is a prefix of the one
// appended, and that it holds every acknowledgement of acks made before
// the crash (invariant 7). main is the store under its own name (not a
// copy kept aside): a task Remove took is gone once Remove returned before
// the crash, and may be gone once it began; a lost task reads as ended
// lost once its Install returned before the crash. A lost task's damage is
// no problem anywhere else.
func (run *plRun) checkStore(ctx context.Context, st *crashfs.CrashState, path string, acks []plAck, main bool) []string {
	var problems []string
	gone, mayBeGone := map[string]bool{}, map[string]bool{}
	if main {
		for _, r := range run.removals {
			for _, id := range r.ids {
				gone[id] = gone[id] || st.Before(r.done)
				mayBeGone[id] = mayBeGone[id] || st.Before(r.begun)
			}
		}
	}
	s, err := store.Open(path, store.Options{LockTimeout: time.Second})
	if err != nil {
		// After its creation the store must always open: a torn commit
		// is bbolt's to roll back, and nothing acknowledged may need
		// moving aside.
		return []string{fmt.Sprintf("store.Open: %v", err)}
	}
	defer func() {
		if err := s.Close(); err != nil {
			problems = append(problems, fmt.Sprintf("Close: %v", err))
		}
	}()
	recorded := func(task string) bool { m, ok := run.lost[task]; return ok && main && st.Before(m) }
	rep, err := s.Check(ctx)
	if err != nil {
		problems = append(problems, fmt.Sprintf("Check: %v", err))
	}
	for _, p := range rep.Problems {
		if _, ok := run.lost[p.Task]; !ok || recorded(p.Task) {
			problems = append(problems, fmt.Sprintf("invariant 8: Check: %s", p))
		}
	}
	held := map[string][]fsm.Event{}
	for task, want := range run.logs {
		if _, ok := run.lost[task]; ok {
			if !recorded(task) {
				continue // the damaged store may still be in place
			}
			if tk, err := s.LoadTask(ctx, task); err != nil || tk.State != fsm.StateLost {
				problems = append(problems, fmt.Sprintf("task %s, recorded lost by the install that returned before the crash: %s (%v)", task, tk.State, err))
			}
			continue
		}
		got, err := s.Load(ctx, task)
		if errors.Is(err, store.ErrUnknownTask) {
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("Load(%s): %v", task, err))
			continue
		}
		if gone[task] {
			problems = append(problems, fmt.Sprintf("task %s is there (%d events), but Remove took it and returned before the crash", task, len(got)))
		}
		if len(got) > len(want) {
			problems = append(problems, fmt.Sprintf("task %s has %d events, only %d were appended", task, len(got), len(want)))
			continue
		}
		for i := range got {
			if got[i].Type != want[i].Type || got[i].Seq != uint64(i+1) || got[i].Time != want[i].Time {
				problems = append(problems, fmt.Sprintf("task %s event %d is %s seq %d, appended %s seq %d", task, i+1, got[i].Type, got[i].Seq, want[i].Type, i+1))
				break
			}
		}
		held[task] = got
	}
	for _, a := range acks {
		if _, ok := held[a.task]; !ok && mayBeGone[a.task] {
			continue // removed
		}
		if _, ok := run.lost[a.task]; ok {
			continue // lost by its damage: the salvage's report says so
		}
		if st.Before(a.mark) && uint64(len(held[a.task])) < a.version {
			problems = append(problems, fmt.Sprintf("invariant 7: task %s has %d events, but version %d was acknowledged at %s, before the crash", a.task, len(held[a.task]), a.version, a.mark))
		}
	}
	return problems
}

func TestPowerLoss_SingleWriter(t *testing.T) {
	testproc.Parallel(t)
	run, s := plOpen(t, crashfs.Options{})
	for i := range 3 {
		task := fmt.Sprintf("t%d", i)
		// One event per append for the first task, then two and three:
		// commits of one record and of several.
		if err := run.appendAll(t, s, task, plLifecycle(task, 4), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n := run.check(t)
	t.Logf("%d appends in %d commits; %d crash states over %d boundaries", len(run.acks), run.commits(), n, len(run.fs.Boundaries()))
}

// Many writers at once, so group commit puts several requests in one
// bbolt transaction and one fsync; each of them must survive.
func TestPowerLoss_ConcurrentWriters(t *testing.T) {
	testproc.Parallel(t)
	// Each fsync takes a millisecond, as a disk's would, so that writers
	// queue behind a commit and the next one batches them.
	run, s := plOpen(t, crashfs.Options{SyncLatency: time.Millisecond})
	const writers = 12
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := fmt.Sprintf("w%02d", w)
			errs <- run.appendAll(t, s, task, plLifecycle(task, 0), 2)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	commits := run.commits()
	if commits >= len(run.acks) {
		t.Fatalf("%d appends took %d commits: group commit never batched, so this test cannot check batched commits", len(run.acks), commits)
	}
	n := run.check(t)
	t.Logf("%d appends by %d writers in %d commits; %d crash states over %d boundaries", len(run.acks), writers, commits, n, len(run.fs.Boundaries()))
}
