package driver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// countingLog is a store.Log that counts its reads.
type countingLog struct {
	store.Log
	loadTask, load, loadTasks, lists atomic.Int32
}

func (l *countingLog) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	l.loadTask.Add(1)
	return l.Log.LoadTask(ctx, task)
}

func (l *countingLog) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	l.load.Add(1)
	return l.Log.Load(ctx, task)
}

func (l *countingLog) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	l.loadTasks.Add(1)
	return l.Log.LoadTasks(ctx, which)
}

func (l *countingLog) Live(ctx context.Context, fn func(string) error) error {
	l.lists.Add(1)
	return l.Log.Live(ctx, fn)
}

func (l *countingLog) All(ctx context.Context, fn func(string) error) error {
	l.lists.Add(1)
	return l.Log.All(ctx, fn)
}

// countingLiveLog is a countingLog that hands its live tasks on as it
// reads them (store.LiveLoader), counted as a read of every log.
type countingLiveLog struct {
	*countingLog
	live store.LiveLoader
}

func (l countingLiveLog) LoadLive(ctx context.Context, fn func(fsm.Task, error)) (error, error) {
	l.loadTasks.Add(1)
	return l.live.LoadLive(ctx, fn)
}

// TestRecover_ReadsEachLogOnceAndOwnsOnlyWhatNeedsIt: Recover reads every
// live task's log in one read of the store (handed on as it is read, or
// read whole first by a log that cannot), and again only the log of a
// task that needs an owner (under its lock, which it took after the read:
// TestRecover_StartsNoOwnerOnAStateTheLogMovedPast); a running task whose
// executor answers with nothing new is reconciled without an owner (no
// goroutine or channels left for it), and one whose executor is gone gets
// the owner that records its end and kills what is left of it.
func TestRecover_ReadsEachLogOnceAndOwnsOnlyWhatNeedsIt(t *testing.T) {
	for _, streamed := range []bool{true, false} {
		t.Run(fmt.Sprintf("streamed=%v", streamed), func(t *testing.T) { recoverReadsOnce(t, streamed) })
	}
}

func recoverReadsOnce(t *testing.T, streamed bool) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	started := map[string]fsm.Task{}
	for _, id := range []string{"a", "b", "gone"} {
		st, err := d1.StartTask(ctx, id, taskSpec(t, dir, "sleep"))
		if err != nil {
			t.Fatal(err)
		}
		started[id] = st
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	// Behind any driver's back, the executor of "gone" dies (its task
	// lives on in its cgroup, or its group).
	if err := proc.Kill(ctx, *started["gone"].Executor); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(statedir.Layout{Dir: dir}.Store(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	log := &countingLog{Log: s}
	var l store.Log = log
	if streamed {
		l = countingLiveLog{log, s}
	}
	d2, err := Open(Config{StateDir: dir, Store: l, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	rep, err := d2.Recover(ctx)
	if err != nil {
		t.Fatalf("Recover: %v (%+v)", err, rep)
	}
	if n, m, l := log.loadTasks.Load(), log.loadTask.Load()+log.load.Load(), log.lists.Load(); n != 1 || m != 1 || l != 0 {
		t.Errorf("Recover of 3 live tasks read the store %d times in one read of every log, %d times one task's log, listed ids %d times; want 1, 1 (the task that needs an owner, again under its lock), 0", n, m, l)
	}
	got := map[string]TaskReport{}
	for _, r := range rep.Tasks {
		got[r.ID] = r
	}
	for _, id := range []string{"a", "b"} {
		if r := got[id]; r.From != fsm.StateRunning || r.To != fsm.StateRunning || r.Err != nil || !strings.HasPrefix(r.Action, "reattached") {
			t.Errorf("task %s: %+v, want reattached, still running", id, r)
		}
		if d2.hasOwner(id) {
			t.Errorf("task %s, running and reattached with nothing to record, has an owner after Recover", id)
		}
	}
	if r := got["gone"]; r.To != fsm.StateLost || r.Err != nil {
		t.Errorf("task gone (its executor dead): %+v, want lost", r)
	}
	final, err := d2.WaitTask(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d2, final)
	for _, id := range []string{"a", "b"} {
		final, err := d2.StopTask(ctx, id, syscall.SIGKILL, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		checkReaped(t, d2, final)
	}
}

// waitLockWaiter returns once some process waits for a flock on the file
// with inode ino (the kernel's lock table lists waiters with "->").
func waitLockWaiter(t *testing.T, ino uint64) {
	t.Helper()
	suffix := fmt.Sprintf(":%d", ino)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		b, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Skipf("needs /proc/locks to see a lock's waiters: %v", err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], suffix) {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("nobody ever waited for the task's lock")
		}
	}
}

// TestRecover_LeavesATaskOnlyToALiveDriver: a task whose lock is held by
// no live driver is not "left to it". Its driver crashed while spawning
// (so the lock file names that driver, now gone), and a descriptor of the
// lock lives on elsewhere (a child forked while the driver held it,
// carrying it to its exec): Recover waits for it and, once it is let go
// of, recovers the task; past the lock timeout it says it could not (held
// by no live process), and changes nothing. A lock the file says a live process
// holds is that process's: the task is left to it, at once.
func TestRecover_LeavesATaskOnlyToALiveDriver(t *testing.T) {
	// A log that ends in spawning, its driver dead.
	crashed := func(t *testing.T) (dir string, carrier *os.File, ino uint64) {
		dir = stateDir(t)
		if r := runCrashChild(t, dir, "start", crashAfterAppend+"spawn-intent", ""); !r.killed {
			t.Fatalf("the driver child did not crash after spawn-intent:\n%s", r.out)
		}
		// A descriptor of the lock, held (the child carrying it).
		f, err := os.OpenFile(filepath.Join(statedir.Layout{Dir: dir}.Task("a").Dir(), statedir.LockFile), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return dir, f, st.Ino
	}
	open := func(t *testing.T, dir string, lockTimeout time.Duration) *Driver {
		d, err := Open(Config{StateDir: dir, KillTimeout: 2 * time.Second,
			World: &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}, LockTimeout: lockTimeout}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	t.Run("its holder gone: taken once let go of", func(t *testing.T) {
		dir, carrier, ino := crashed(t)
		d := open(t, dir, time.Minute)
		type result struct {
			rep Report
			err error
		}
		c := make(chan result, 1)
		go func() {
			rep, err := d.Recover(ctxT(t))
			c <- result{rep, err}
		}()
		waitLockWaiter(t, ino)
		carrier.Close() // its exec
		r := <-c
		if r.err != nil || len(r.rep.Tasks) != 1 {
			t.Fatalf("Recover: %v (%+v)", r.err, r.rep)
		}
		if tr := r.rep.Tasks[0]; tr.From != fsm.StateSpawning || !tr.To.Terminal() || strings.Contains(tr.Action, "left to it") {
			t.Fatalf("Recover of a task whose lock no live driver held: %+v, want it recovered", tr)
		}
		info, err := d.InspectTask(ctxT(t), "a")
		if err != nil {
			t.Fatal(err)
		}
		checkReaped(t, d, info.Task)
	})
	t.Run("held past the lock timeout", func(t *testing.T) {
		dir, carrier, _ := crashed(t)
		d := open(t, dir, 20*time.Millisecond)
		rep, err := d.Recover(ctxT(t))
		if len(rep.Tasks) != 1 {
			t.Fatalf("Recover: %v (%+v)", err, rep)
		}
		tr := rep.Tasks[0]
		if err == nil || tr.Err == nil || !strings.Contains(tr.Err.Error(), "held by no live process") || strings.Contains(tr.Action, "left to it") || tr.To != fsm.StateSpawning {
			t.Fatalf("Recover past the lock timeout: %+v, %v; want an error saying no live process holds the lock, nothing done, not left to anyone", tr, err)
		}
		carrier.Close()
		rep, err = d.Recover(ctxT(t))
		if err != nil || len(rep.Tasks) != 1 || !rep.Tasks[0].To.Terminal() {
			t.Fatalf("Recover once the lock was let go of: %v (%+v)", err, rep)
		}
	})
	t.Run("a live holder", func(t *testing.T) {
		dir, carrier, _ := crashed(t)
		start, err := proc.StartTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if err := carrier.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := carrier.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+strconv.FormatUint(start, 10)+"\n"), 0); err != nil {
			t.Fatal(err)
		}
		d := open(t, dir, time.Minute)
		rep, err := d.Recover(ctxT(t))
		if err != nil || len(rep.Tasks) != 1 {
			t.Fatalf("Recover: %v (%+v)", err, rep)
		}
		if tr := rep.Tasks[0]; tr.Action != leftTo(os.Getpid()) || tr.To != fsm.StateSpawning {
			t.Fatalf("Recover beside a live holder: %+v, want left to process %d", tr, os.Getpid())
		}
		carrier.Close()
		if rep, err := d.Recover(ctxT(t)); err != nil || len(rep.Tasks) != 1 || !rep.Tasks[0].To.Terminal() {
			t.Fatalf("Recover once the holder let go: %v (%+v)", err, rep)
		}
	})
}

// countingWorld is the real world, counting the kills by identity and the
// executors ended through their connection's pidfd.
type countingWorld struct {
	*executor.Real
	kills, dismisses, killTasks, finds atomic.Int32
}

func (w *countingWorld) KillTask(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) error {
	w.killTasks.Add(1)
	return w.Real.KillTask(ctx, task, id, run)
}

func (w *countingWorld) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	w.finds.Add(1)
	return w.Real.FindByNonce(ctx, task, nonce)
}

type countingConn struct {
	executor.Conn
	w *countingWorld
}

func (w *countingWorld) Spawn(ctx context.Context, task, nonce string) (executor.Conn, error) {
	c, err := w.Real.Spawn(ctx, task, nonce)
	if err != nil {
		return nil, err
	}
	return countingConn{c, w}, nil
}

func (w *countingWorld) Kill(ctx context.Context, task string, id fsm.Identity) error {
	w.kills.Add(1)
	return w.Real.Kill(ctx, task, id)
}

func (c countingConn) Dismiss(ctx context.Context) error {
	c.w.dismisses.Add(1)
	return c.Conn.Dismiss(ctx)
}

// TestStartTask_SeedKillEndsTheExecutorThroughItsPidfd: the kill of an
// executor that holds no launched task (a failure after executor-up, the
// seed's path) ends it through the pidfd its connection holds, opened on
// the process whose identity was proven, and confirms it dead, with no
// kill by identity (whose walk of the process tree is for a task's
// descendants); the task is failed and nothing of it is left.
func TestStartTask_SeedKillEndsTheExecutorThroughItsPidfd(t *testing.T) {
	dir := stateDir(t)
	errFault := errors.New("test: the launch fails")
	w := &countingWorld{Real: &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}}
	d, err := Open(Config{StateDir: dir, World: w, KillTimeout: 2 * time.Second, Hooks: Hooks{Fault: func(point, _ string) error {
		if point == "effect:launch-task" {
			return errFault
		}
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := d.StartTask(ctxT(t), "seed", taskSpec(t, dir, "sleep"))
	if !errors.Is(err, errFault) || st.State != fsm.StateFailed || st.Executor == nil {
		t.Fatalf("StartTask = %s, %v; want failed after its executor was up", st.State, err)
	}
	checkReaped(t, d, st)
	if k, dm := w.kills.Load(), w.dismisses.Load(); k != 0 || dm != 1 {
		t.Errorf("the seed's kill: %d kills by identity, %d ends through the connection's pidfd; want 0 and 1", k, dm)
	}
}

// TestRecover_ReportsADamagedTaskAndRecoversTheOthers: a live task whose
// log cannot be read (a damaged record) is in Recover's report with the
// store's error naming it, Recover's error says so, and every other live
// task is recovered all the same.
func TestRecover_ReportsADamagedTaskAndRecoversTheOthers(t *testing.T) {
	for _, streamed := range []bool{true, false} {
		t.Run(fmt.Sprintf("streamed=%v", streamed), func(t *testing.T) { recoverReportsDamage(t, streamed) })
	}
}

func recoverReportsDamage(t *testing.T, streamed bool) {
	dir := stateDir(t)
	ctx := ctxT(t)
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	path := statedir.Layout{Dir: dir}.Store()
	s, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := taskSpec(t, dir, "sleep")
	for i, id := range []string{"a", "b", "c"} {
		nonce := fmt.Sprintf("nonce-of-%d-0123456789", i)
		if _, err := s.Append(ctx, id, 0, fsm.Event{Type: fsm.EventCreated, Time: 1, Spec: &spec}, fsm.Event{Type: fsm.EventSpawnIntent, Time: 2, Nonce: nonce}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("tasks")).Bucket([]byte("b")).Put(binary.BigEndian.AppendUint64(nil, 2), []byte("not a record"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var l store.Log = s
	if !streamed {
		l = &countingLog{Log: s} // no LoadLive: read whole
	}
	d, err := Open(Config{StateDir: dir, Store: l, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rep, err := d.Recover(ctx)
	var ce *store.CorruptError
	if !errors.As(err, &ce) || ce.Task != "b" {
		t.Errorf("Recover's error %v does not name the damaged task b", err)
	}
	got := map[string]TaskReport{}
	for _, r := range rep.Tasks {
		got[r.ID] = r
	}
	if r, ok := got["b"]; !ok || !errors.As(r.Err, &ce) || ce.Task != "b" {
		t.Errorf("the damaged task's report: %+v (in it: %v), want its CorruptError", r, ok)
	}
	for _, id := range []string{"a", "c"} {
		if r := got[id]; r.Err != nil || r.From != fsm.StateSpawning || !r.To.Terminal() {
			t.Errorf("task %s beside a damaged one: %+v, want recovered from spawning", id, r)
		}
	}
}

// TestRecover_SupervisesATaskItFindsRestarting: a task its executor is
// restarting when Recover comes (its restart-intent recorded, its
// relaunch waiting out the policy's delay) is reattached and supervised:
// the relaunch is recorded when it happens, with nobody asking, and the
// task runs again. (Recover left such a task restarting; a check right
// after it found the crash-point test's task "left in restarting".)
func TestRecover_SupervisesATaskItFindsRestarting(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	appended := func(point, task string) (Hooks, <-chan struct{}) {
		c := make(chan struct{})
		var once atomic.Bool
		return Hooks{Crash: func(p, tk string) {
			if p == point && tk == task && once.CompareAndSwap(false, true) {
				close(c)
			}
		}}, c
	}
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(30 * time.Second): // the policy's delay is 2 s
			t.Fatalf("%s never happened", what)
		}
	}
	h1, intent := appended(crashAfterAppend+"restart-intent", "r")
	d1 := newDriver(t, dir, h1)
	spec := taskSpec(t, dir, "exit-once", "1", filepath.Join(filepath.Dir(dir), "ran-once"))
	spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 2 * time.Second, Mode: fsm.RestartFail}
	if _, err := d1.StartTask(ctx, "r", spec); err != nil && !errors.Is(err, ErrStartFailed) {
		t.Fatal(err)
	}
	wait(intent, "the restart-intent's append (d1 supervises the task it started)")
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	h2, relaunched := appended(crashAfterAppend+"launched", "r")
	d2 := newDriver(t, dir, h2)
	defer d2.Close()
	rep, err := d2.Recover(ctx)
	if err != nil || len(rep.Tasks) != 1 || rep.Tasks[0].To != fsm.StateRestarting {
		t.Fatalf("Recover of a task waiting for its relaunch: %v (%+v), want it left restarting", err, rep)
	}
	wait(relaunched, "the relaunch's record, with nobody asking")
	info, err := d2.InspectTask(ctx, "r")
	if err != nil || info.State != fsm.StateRunning || info.Restarts != 1 || !info.ExecutorAlive {
		t.Fatalf("after the relaunch: %s, %d restarts, executor alive %v, %v; want running after 1 restart", info.State, info.Restarts, info.ExecutorAlive, err)
	}
	final, err := d2.StopTask(ctx, "r", syscall.SIGKILL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d2, final)
}

// staleLog hands on the live tasks as they were before moved appended to
// them: what a recovery read before another process, which then let go of
// the task's lock, moved the task on.
type staleLog struct {
	*store.Store
	moved func()
}

func (l staleLog) LoadLive(ctx context.Context, fn func(fsm.Task, error)) (error, error) {
	type read struct {
		t   fsm.Task
		err error
	}
	var got []read
	inc, err := l.Store.LoadLive(ctx, func(t fsm.Task, err error) { got = append(got, read{t, err}) })
	l.moved()
	for _, r := range got {
		fn(r.t, r.err)
	}
	return inc, err
}

// TestRecover_StartsNoOwnerOnAStateTheLogMovedPast: a task Recover read in
// reaping, which another process then reaped (its executor-reaped
// appended, its lock let go of) before Recover took its lock, is read
// again under the lock: Recover finds it ended and says so; it starts no
// owner on the state it read (which would publish a state older than one
// already acknowledged) and kills nothing again. (The linearizability
// property found an inspect answering "reaping" after a stop had answered
// "stopped".)
func TestRecover_StartsNoOwnerOnAStateTheLogMovedPast(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(statedir.Layout{Dir: dir}.Store(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spec := taskSpec(t, dir, "sleep")
	v, err := s.Append(ctx, "a", 0, fsm.Event{Type: fsm.EventCreated, Time: 1, Spec: &spec},
		fsm.Event{Type: fsm.EventSpawnIntent, Time: 2, Nonce: "nonce-of-a-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err = s.Append(ctx, "a", v, fsm.Event{Type: fsm.EventStartInterrupted, Time: 3, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	moved := func() {
		if _, err := s.Append(ctx, "a", v, fsm.Event{Type: fsm.EventExecutorReaped, Time: 4, Target: fsm.StateFailed}); err != nil {
			t.Error(err)
		}
	}
	w := &countingWorld{Real: &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}}
	d, err := Open(Config{StateDir: dir, Store: staleLog{s, moved}, World: w})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rep, err := d.Recover(ctx)
	if err != nil || len(rep.Tasks) != 1 {
		t.Fatalf("Recover: %v (%+v)", err, rep)
	}
	if r := rep.Tasks[0]; r.From != fsm.StateReaping || r.To != fsm.StateFailed || r.Action != "already failed" {
		t.Errorf("Recover of a task reaped after it was read: %+v, want from reaping, already failed", r)
	}
	if n := w.kills.Load() + w.killTasks.Load() + w.finds.Load(); n != 0 {
		t.Errorf("Recover killed (or looked for) what was already reaped: %d calls", n)
	}
	if got := eventTypes(t, d, "a"); len(got) != 4 {
		t.Errorf("the log after Recover: %v, want the 4 events it had", got)
	}
}
