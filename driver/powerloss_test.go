//go:build linux

package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/crashfs"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// Power loss under a real driver. The store and the task directories (the
// executors' side files: identity, launch record, exit record) live on a
// crashfs mount, which keeps every write that is not yet durable apart; a
// real driver with real executors starts a task, stops it, and starts a
// task that exits at once. Then every state the disk may hold after a
// power loss (at each fsync and between each one and the next, unsynced
// writes dropped or kept in subsets) is opened: the store, the side files,
// and a driver that recovers from it. A SIGKILL keeps the page cache, so
// only this finds a commit acknowledged before its fsync, a side file
// written in place, or one made durable before the intent that demanded
// it.

// plAck is an append the driver was told had committed: some task's log
// held an event of type typ more (the crash hook after-append:<typ> ran);
// with task set (one task driven at a time), task's log held its n-th
// event of type typ; or (version > 0) a call returned task at that
// version.
type plAck struct {
	task    string
	typ     fsm.EventType
	n       int
	version uint64
	mark    crashfs.Mark
}

// plWorkload is what the driver did on the mount.
type plWorkload struct {
	fsys  *crashfs.FS
	since crashfs.Mark // the driver was open: the store and tasks/ exist durably
	acks  []plAck
	final map[string][]fsm.Event // every task's log at the end
}

// runPowerLossWorkload runs the driver on the mount: tasks "a", "c" and
// "d" (sleepers) started at once (their appends share commits: group commit),
// then stopped one after the other, then task "b" (exits 0 at once)
// started and waited for. Every acknowledgement is marked: while one task
// is driven at a time, each append's (the driver's crash hook after each
// append, in the task's own order); for the starts at once, the version
// each StartTask returned.
func runPowerLossWorkload(t *testing.T, fsys *crashfs.FS, dir string) *plWorkload {
	t.Helper()
	w := &plWorkload{fsys: fsys, final: map[string][]fsm.Event{}}
	var mu sync.Mutex
	current := ""
	counts := map[string]int{}
	hooks := Hooks{Crash: func(p, _ string) {
		name, ok := strings.CutPrefix(p, crashAfterAppend)
		if !ok {
			return
		}
		typ, err := fsm.ParseEventType(name)
		if err != nil {
			t.Errorf("crash point %s: %v", p, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		a := plAck{task: current, typ: typ, mark: fsys.Mark(current + " " + p)}
		if current != "" {
			key := current + " " + name
			counts[key]++
			a.n = counts[key]
		}
		w.acks = append(w.acks, a)
	}}
	d, err := Open(Config{StateDir: dir, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second, Hooks: hooks})
	if err != nil {
		t.Fatalf("Open on the mount: %v", err)
	}
	w.since = fsys.Mark("driver open")
	ctx := ctxT(t)
	phase := func(id string) {
		mu.Lock()
		current = id
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "c", "d"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := d.StartTask(ctx, id, taskSpec(t, dir, "sleep"))
			if err != nil || st.State != fsm.StateRunning {
				t.Errorf("StartTask(%s) on the mount: %v, %s", id, err, st.State)
				return
			}
			m := fsys.Mark(fmt.Sprintf("StartTask(%s) returned v%d", id, st.Version))
			mu.Lock()
			defer mu.Unlock()
			w.acks = append(w.acks, plAck{task: id, version: st.Version, mark: m})
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range []string{"a", "c", "d"} {
		phase(id)
		if st, err := d.StopTask(ctx, id, syscall.SIGTERM, time.Second); err != nil || st.State != fsm.StateStopped {
			t.Fatalf("StopTask(%s): %v, %s", id, err, st.State)
		}
	}
	phase("b")
	if _, err := d.StartTask(ctx, "b", taskSpec(t, dir, "exit", "0")); err != nil && !errors.Is(err, ErrStartFailed) {
		t.Fatalf("StartTask(b): %v", err)
	}
	if st, err := d.WaitTask(ctx, "b"); err != nil || st.State != fsm.StateExited {
		t.Fatalf("WaitTask(b): %v, %s", err, st.State)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	testproc.CheckGone(t, dir, 10*time.Second) // every executor has exited: nothing of the run lives on
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"a", "b", "c", "d"} {
		if w.final[id], err = s.Load(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// version is the version task's log had reached at ack: the position of
// the ack's event in the final log.
func (w *plWorkload) version(a plAck) (uint64, error) {
	if a.version > 0 {
		return a.version, nil
	}
	n := 0
	for i, e := range w.final[a.task] {
		if e.Type == a.typ {
			if n++; n == a.n {
				return uint64(i + 1), nil
			}
		}
	}
	return 0, fmt.Errorf("task %s: no %d-th %s in its final log", a.task, a.n, a.typ)
}

// checkImage checks one crash state, materialised with its state
// directory at dir: invariant 8 (the store opens, Check is clean, every
// log a prefix of the one written), 7 (every append acknowledged before
// the crash is there), 4 (no side file an effect leaves is durable without
// the intent that demanded the effect durable in the log).
func (w *plWorkload) checkImage(ctx context.Context, st *crashfs.CrashState, dir string) []string {
	var problems []string
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{LockTimeout: time.Second})
	if err != nil {
		return []string{fmt.Sprintf("invariant 8: store.Open: %v", err)}
	}
	defer s.Close()
	if rep, err := s.Check(ctx); err != nil || !rep.OK() {
		problems = append(problems, fmt.Sprintf("invariant 8: Check: %s %v", rep, err))
	}
	logs := map[string][]fsm.Event{}
	for id, want := range w.final {
		got, err := s.Load(ctx, id)
		switch {
		case errors.Is(err, store.ErrUnknownTask):
			continue
		case err != nil:
			problems = append(problems, fmt.Sprintf("invariant 8: Load(%s): %v", id, err))
			continue
		case len(got) > len(want):
			problems = append(problems, fmt.Sprintf("task %s holds %d events; %d were appended", id, len(got), len(want)))
			continue
		}
		for i := range got {
			if got[i].Type != want[i].Type || got[i].Seq != want[i].Seq || got[i].Time != want[i].Time {
				problems = append(problems, fmt.Sprintf("task %s event %d is %s, the driver appended %s", id, i+1, got[i].Type, want[i].Type))
				break
			}
		}
		logs[id] = got
	}
	acked, held := map[fsm.EventType]int{}, map[fsm.EventType]int{}
	for _, l := range logs {
		for _, e := range l {
			held[e.Type]++
		}
	}
	for _, a := range w.acks {
		if !st.Before(a.mark) {
			continue
		}
		if a.typ != fsm.EventNone {
			acked[a.typ]++
		}
		if a.task == "" {
			continue
		}
		v, err := w.version(a)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if got := uint64(len(logs[a.task])); got < v {
			problems = append(problems, fmt.Sprintf("invariant 7: task %s holds %d events; v%d was acknowledged (%s) before the crash", a.task, got, v, a.mark))
		}
	}
	for _, typ := range fsm.EventTypes() {
		if held[typ] < acked[typ] {
			problems = append(problems, fmt.Sprintf("invariant 7: the logs hold %d %s events; %d appends of one were acknowledged before the crash", held[typ], typ, acked[typ]))
		}
	}
	for id := range w.final {
		problems = append(problems, sideFilesAhead(filepath.Join(dir, "tasks", id), id, logs[id])...)
	}
	return problems
}

// sideFilesAhead holds invariant 4 for one task directory of an image:
// an identity file needs the spawn intent with its nonce in the log, a
// launch record or an exit record the launch intent of that executor.
//
// The identity and exit files are written atomically and durably (a
// temporary file, fsync, rename, fsync of the directory): one that is
// there must read whole. The launch record is written by a rename without
// an fsync, on purpose (it only matters while the boot lasts, and a power
// loss is a reboot): its name may be durable with its content lost, an
// empty file. Such a torn record still says that a launch happened, so it
// too needs a launch intent in the log; what it is worth is Recover's to
// judge (it must not trip over it).
func sideFilesAhead(taskDir, id string, log []fsm.Event) []string {
	var problems []string
	has := func(typ fsm.EventType, nonce string, anyNonce bool) bool {
		spawned := ""
		for _, e := range log {
			if e.Type == fsm.EventSpawnIntent {
				spawned = e.Nonce
			}
			if e.Type == typ && (anyNonce || spawned == nonce) {
				return true
			}
		}
		return false
	}
	if ident, err := executor.SideFiles(taskDir).Identity(); err == nil {
		if !has(fsm.EventSpawnIntent, ident.Nonce, false) {
			problems = append(problems, fmt.Sprintf("invariant 4: task %s: identity file of nonce %q durable, its spawn intent is not in the log (%d events)", id, ident.Nonce, len(log)))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		problems = append(problems, fmt.Sprintf("task %s: identity file: %v", id, err))
	}
	for _, f := range []struct {
		name     string
		read     func() (string, bool, error)
		mayTear  bool
		ofEffect string
	}{
		{statedir.LaunchFile, func() (string, bool, error) {
			r, ok, err := executor.SideFiles(taskDir).LaunchRecord()
			return r.Nonce, ok, err
		}, true, "launch"},
		{statedir.ExitStatusFile, func() (string, bool, error) {
			r, ok, err := executor.SideFiles(taskDir).ExitRecord()
			return r.Nonce, ok, err
		}, false, "launch (the task it records ran)"},
	} {
		nonce, ok, err := f.read()
		_, serr := os.Lstat(filepath.Join(taskDir, f.name))
		switch {
		case err != nil && !f.mayTear:
			problems = append(problems, fmt.Sprintf("task %s: %s: %v", id, f.name, err))
		case err != nil && !has(fsm.EventLaunchIntent, "", true):
			problems = append(problems, fmt.Sprintf("invariant 4: task %s: %s durable (torn: %v), no launch intent in the log (%d events)", id, f.name, err, len(log)))
		case ok && !has(fsm.EventLaunchIntent, nonce, false):
			problems = append(problems, fmt.Sprintf("invariant 4: task %s: %s of nonce %q durable, the %s intent of that executor is not in the log (%d events)", id, f.name, nonce, f.ofEffect, len(log)))
		case err == nil && !ok && serr == nil && !has(fsm.EventLaunchIntent, "", true):
			problems = append(problems, fmt.Sprintf("invariant 4: task %s: %s durable (no task in it), no launch intent in the log (%d events)", id, f.name, len(log)))
		}
	}
	return problems
}

// recoverImage opens a driver on the image (real executors; none of the
// run's processes lives: a power loss takes them all) and recovers it:
// Recover must succeed, leave every task terminal (nothing runs to own
// anything), the store clean, and no process behind.
func recoverImage(t *testing.T, dir string) []string {
	t.Helper()
	d, err := Open(Config{StateDir: dir, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second})
	if err != nil {
		return []string{fmt.Sprintf("Open on the image: %v", err)}
	}
	ctx := ctxT(t)
	var problems []string
	rep, err := d.Recover(ctx)
	if err != nil {
		problems = append(problems, fmt.Sprintf("Recover: %v", err))
	}
	ids, err := d.Tasks(ctx, true)
	if err != nil {
		problems = append(problems, fmt.Sprintf("Tasks: %v", err))
	}
	for _, id := range ids {
		info, err := d.InspectTask(ctx, id)
		if err != nil || !info.State.Terminal() {
			problems = append(problems, fmt.Sprintf("after Recover task %s is %s (%v); want terminal: nothing of the run survives a power loss (report %+v)", id, info.State, err, rep.Tasks))
		}
	}
	if err := d.Close(); err != nil {
		problems = append(problems, fmt.Sprintf("Close: %v", err))
	}
	if rep, err := store.CheckFile(ctx, filepath.Join(dir, "tether.db"), store.Options{}); err != nil || !rep.OK() {
		problems = append(problems, fmt.Sprintf("invariant 8 after Recover: %s %v", rep, err))
	}
	for _, p := range testproc.Marked(dir) {
		problems = append(problems, fmt.Sprintf("leak after Recover: %s", p))
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	return problems
}

// TestPowerLoss_DriverStartStopAndQuickExit is the driver under power
// loss (see above): every crash state of a start, a stop and a quick
// task's exit holds invariants 4, 7 and 8, and recovers to nothing
// leaked.
func TestPowerLoss_DriverStartStopAndQuickExit(t *testing.T) {
	// Each fsync takes a moment, as a disk's cache flush does, so that the
	// appends of the two starts queue behind one and share a commit.
	fsys := crashfs.Mount(t, "", crashfs.Options{SyncLatency: 2 * time.Millisecond}) // skips, naming FUSE, where it cannot mount
	dir := fsys.Path("state")
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	began := time.Now()
	w := runPowerLossWorkload(t, fsys, dir)
	ran := time.Since(began)
	if err := fsys.Unmount(); err != nil {
		t.Fatal(err)
	}
	sts := fsys.CrashStates(crashfs.StateOptions{Since: w.since, Seed: 15})
	root := t.TempDir()
	ctx := ctxT(t)
	failed, recovered := 0, 0
	for i, st := range sts {
		img := filepath.Join(root, fmt.Sprint(i))
		if err := st.Materialize(img); err != nil {
			t.Fatal(err)
		}
		sdir := filepath.Join(img, "state")
		problems := w.checkImage(ctx, st, sdir)
		if len(problems) == 0 {
			problems = recoverImage(t, sdir)
			recovered++
		}
		for _, p := range problems {
			t.Errorf("crash state %s: %s", st, p)
		}
		if len(problems) > 0 {
			if failed++; failed == 5 {
				t.Errorf("... stopping after %d failing crash states of %d", failed, len(sts))
				break
			}
		}
		if err := os.RemoveAll(img); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("workload %s, %d appends acknowledged, %d boundaries; %d crash states checked, %d recovered, in %s",
		ran.Round(time.Millisecond), len(w.acks), len(fsys.Boundaries()), len(sts), recovered, time.Since(began).Round(time.Millisecond))
}
