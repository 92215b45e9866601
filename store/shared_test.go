package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/internal/testproc"
)

// openSharedTest returns a Shared log of a fresh store; at cleanup it is
// closed and the store checked.
func openSharedTest(t *testing.T, opts Options) (*Shared, string) {
	t.Helper()
	path := testPath(t)
	sh, err := OpenShared(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sh.Close(); err != nil {
			t.Errorf("Shared.Close: %v", err)
		}
		if sh.opens == 0 {
			return
		}
		s, err := Open(path, Options{ReadOnly: true, LockTimeout: 5 * time.Second})
		if err != nil {
			t.Errorf("reopen for the cleanup check: %v", err)
			return
		}
		defer s.Close()
		if r, err := s.Check(context.Background()); err != nil || !r.OK() {
			t.Errorf("store check at cleanup: %s %v", r, err)
		}
	})
	return sh, path
}

// lockFree reports whether this process can take the store's lock at once
// (its flock conflicts with one another descriptor of this process holds).
func lockFree(t *testing.T, path string) bool {
	t.Helper()
	// A helper process another parallel test forks holds a copy of every
	// descriptor this process has open, the store's lock among them, from
	// its fork to its exec (close-on-exec): the lock may be seen held for
	// that moment after Shared let it go. Free is what it becomes within
	// a lock timeout.
	return tryLock(t, path, 5*time.Second)
}

// lockHeld reports whether the store's lock is held now.
func lockHeld(t *testing.T, path string) bool {
	t.Helper()
	return !tryLock(t, path, time.Millisecond)
}

func tryLock(t *testing.T, path string, timeout time.Duration) bool {
	t.Helper()
	lk, err := lockStore(context.Background(), path, true, timeout)
	if errors.Is(err, ErrLocked) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.release(); err != nil {
		t.Fatal(err)
	}
	return true
}

// Between operations Shared holds nothing: not the lock, not the file.
func TestShared_HoldsNothingBetweenOperations(t *testing.T) {
	testproc.Parallel(t)
	sh, path := openSharedTest(t, Options{NoSync: true})
	ctx := context.Background()
	if _, err := sh.Append(ctx, "a", 0, runningLog(0)...); err != nil {
		t.Fatal(err)
	}
	if !lockFree(t, path) {
		t.Fatal("the lock is held after Append returned")
	}
	// Failing operations release too.
	if _, err := sh.Append(ctx, "a", 0, runningLog(0)...); !errors.Is(err, ErrConflict) {
		t.Fatalf("re-create: %v", err)
	}
	if _, err := sh.LoadTask(ctx, "ghost"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("LoadTask(ghost): %v", err)
	}
	if !lockFree(t, path) {
		t.Fatal("the lock is held after failed operations")
	}
	// Live's callback runs with nothing held, so it can do anything.
	var seen []string
	if err := sh.Live(ctx, func(id string) error {
		if !lockFree(t, path) {
			t.Error("the lock is held inside Live's callback")
		}
		task, err := sh.LoadTask(ctx, id)
		seen = append(seen, fmt.Sprintf("%s:%s", id, task.State))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"a:running"}) {
		t.Errorf("Live saw %v", seen)
	}
	// Another process's view: a command elsewhere can open the store now.
	s, err := Open(path, Options{LockTimeout: time.Millisecond, NoSync: true})
	if err != nil {
		t.Fatalf("Open beside an idle Shared: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Operations in flight at once share one open store (and its group
// commit); the last one to end closes it.
func TestShared_OverlappingOperationsShareOneOpen(t *testing.T) {
	testproc.Parallel(t)
	sh, path := openSharedTest(t, Options{NoSync: true})
	ctx := context.Background()
	held, err := sh.acquire(ctx) // an operation in flight
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = sh.Append(ctx, fmt.Sprintf("t%02d", i), 0, runningLog(2)...)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	sh.mu.Lock()
	opens, users := sh.opens, sh.users
	sh.mu.Unlock()
	if opens != 1 || users != 1 {
		t.Fatalf("%d opens and %d users with one operation held throughout; want 1 and 1", opens, users)
	}
	if !lockHeld(t, path) {
		t.Fatal("the lock is free while an operation is in flight")
	}
	if got := len(ids(t, held.All)); got != 32 {
		t.Fatalf("%d tasks", got)
	}
	sh.release()
	if !lockFree(t, path) {
		t.Fatal("the lock is held after the last operation ended")
	}
}

// A store that cannot be opened fails every caller waiting for that open
// with its error, once: they do not each wait out the lock timeout in
// turn.
func TestShared_OpenFailureSharedByWaiters(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	holdLock(t, path)
	sh, err := OpenShared(path, Options{LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = sh.LoadTask(context.Background(), "a") })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrLocked) {
			t.Errorf("caller %d: %v, want ErrLocked", i, err)
		}
	}
	sh.mu.Lock()
	opens := sh.opens
	sh.mu.Unlock()
	if opens > len(errs) || opens < 1 {
		t.Errorf("%d open attempts for %d callers", opens, len(errs))
	}
	t.Logf("%d open attempts for %d concurrent callers", opens, len(errs))
}

func TestShared_CloseWaitsAndRefuses(t *testing.T) {
	testproc.Parallel(t)
	sh, _ := openSharedTest(t, Options{NoSync: true})
	ctx := context.Background()
	st, err := sh.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- sh.Close() }()
	// The operation in flight still works while Close waits for it.
	if _, err := st.Append(ctx, "a", 0, runningLog(0)...); err != nil {
		t.Fatal(err)
	}
	sh.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := sh.LoadTask(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("LoadTask after Close: %v, want ErrClosed", err)
	}
	if err := sh.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Compact through Shared waits for the operations in flight and holds off
// new ones; appends beside it all land.
func TestShared_CompactBesideAppends(t *testing.T) {
	testproc.Parallel(t)
	sh, path := openSharedTest(t, Options{NoSync: true})
	ctx := context.Background()
	if _, err := sh.Append(ctx, "first", 0, runningLog(0)...); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := sh.Append(ctx, fmt.Sprintf("w%d-%d", w, i), 0, runningLog(1)...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 5 {
		if _, _, err := sh.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	scan, err := sh.LoadTasks(ctx, AllTasks)
	if err != nil || len(scan.Tasks) != 81 || len(scan.Unreadable) != 0 {
		t.Fatalf("after compactions beside appends: %d tasks, %v unreadable, %v", len(scan.Tasks), scan.Unreadable, err)
	}
	if !lockFree(t, path) {
		t.Fatal("the lock is held after everything ended")
	}
}

func TestShared_BadPath(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	if _, err := OpenShared(filepath.Join(dir, "none", "tether.db"), Options{ReadOnly: true}); err == nil {
		t.Error("a read-only Shared of a missing store was made")
	}
	path := filepath.Join(dir, "tether.db")
	sh, err := OpenShared(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err == nil {
		defer sh.Close()
		if _, err := sh.LoadTask(context.Background(), "a"); err == nil {
			t.Error("read-only Shared of a missing store read a task")
		}
	}
}

// LoadTasks reads every task in one go and lists the unreadable ones
// beside the readable ones.
func TestLoadTasks_KeepsGoingPastDamage(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openDamaged(t, path, Options{NoSync: true}, func(testing.TB, Report) {})
	for _, id := range []string{"a", "b", "c", "d"} {
		mustAppend(t, s, id, 0, runningLog(2)...)
	}
	mustAppend(t, s, "d", 8, finishLog(20)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageRecord(t, path, "b", 3)
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketLive).Put([]byte("ghost"), liveMark) })
	r := openDamaged(t, path, Options{ReadOnly: true}, func(testing.TB, Report) {})
	ctx := context.Background()
	all, err := r.LoadTasks(ctx, AllTasks)
	if err != nil || all.Incomplete != nil {
		t.Fatal(err, all.Incomplete)
	}
	var got []string
	for _, tk := range all.Tasks {
		got = append(got, tk.ID+":"+tk.State.String())
	}
	if want := []string{"a:running", "c:running", "d:exited"}; !slices.Equal(got, want) {
		t.Errorf("readable tasks %v, want %v", got, want)
	}
	// Every task is a superset of the live ones: the live index's entry
	// without a task is unreadable in both.
	var ce, ghost *CorruptError
	if len(all.Unreadable) != 2 || all.Unreadable[0].Task != "b" || !errors.As(all.Unreadable[0].Err, &ce) || ce.Seq != 3 ||
		all.Unreadable[1].Task != "ghost" || !errors.As(all.Unreadable[1].Err, &ghost) {
		t.Errorf("unreadable: %v, want task b seq 3, and ghost", all.Unreadable)
	}
	live, err := r.LoadTasks(ctx, LiveTasks)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, tk := range live.Tasks {
		got = append(got, tk.ID)
	}
	for _, u := range live.Unreadable {
		got = append(got, "!"+u.Task)
		if !errors.Is(u.Err, ErrCorrupt) {
			t.Errorf("unreadable live task %s: %v is not ErrCorrupt", u.Task, u.Err)
		}
	}
	if want := []string{"a", "c", "!b", "!ghost"}; !slices.Equal(got, want) {
		t.Errorf("live: %v, want %v", got, want)
	}
}
