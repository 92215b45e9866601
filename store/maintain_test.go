package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// salvageInPlace salvages the store at path into a new file and installs
// it, under one maintenance.
func salvageInPlace(t *testing.T, m *Maintenance, n int) SalvageReport {
	t.Helper()
	dir := filepath.Dir(m.Path())
	dst := filepath.Join(dir, fmt.Sprintf("salvaged-%d.db", n))
	rep, err := m.Salvage(context.Background(), dst)
	if err != nil {
		t.Fatalf("Salvage: %v", err)
	}
	if err := m.Install(dst, filepath.Join(dir, fmt.Sprintf("aside-%d.db", n))); err != nil {
		t.Fatalf("Install: %v", err)
	}
	return rep
}

// Salvage and install in a loop beside writer processes that open,
// append and close over and over (as CLI commands do): every acknowledged
// append is in the store in place at the end. Before the Maintenance, a
// salvage read under a shared lock and installed later: what the writers
// appended in between was in the file it replaced.
func TestMaintenance_SalvageLoopBesideWriterProcesses(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const writers, cycles = 4, 12
	acked := map[string]uint64{}
	var mu sync.Mutex
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, writers)
	for w := range cmds {
		cmd := helper(t, "cycle", path, fmt.Sprintf("w%d", w), strconv.Itoa(cycles), "20s")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		readers.Go(func() { acks(t, stdout, acked, &mu) })
		cmds[w] = cmd
	}
	stop := make(chan struct{})
	salvages := make(chan int)
	go func() {
		n := 0
		defer func() { salvages <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			m, err := BeginMaintenance(context.Background(), path, Options{LockTimeout: 20 * time.Second})
			if err != nil {
				t.Errorf("BeginMaintenance: %v", err)
				return
			}
			salvageInPlace(t, m, n)
			if err := m.Release(); err != nil {
				t.Errorf("Release: %v", err)
				return
			}
			n++
		}
	}()
	readers.Wait()
	for w, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer %d: %v", w, err)
		}
	}
	close(stop)
	n := <-salvages
	t.Logf("%d salvages beside %d writers of %d cycles", n, writers, cycles)
	if n == 0 {
		t.Fatal("no salvage ran beside the writers")
	}
	if len(acked) != writers*cycles {
		t.Errorf("%d appends acknowledged, want %d", len(acked), writers*cycles)
	}
	checkAcked(t, path, acked)
}

// A process that waits for the store while a maintenance holds it opens
// the store the maintenance installed, and appends there.
func TestMaintenance_WaiterAppendsToTheInstalledStore(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	mustAppend(t, s, "before", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := BeginMaintenance(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := helper(t, "cycle", path, "waiter", "1", "20s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitBlockedOn(t, cmd.Process.Pid, inode(t, path+lockSuffix))
	old := inode(t, path)
	rep := salvageInPlace(t, m, 0)
	if !slices.Equal(rep.Copied, []string{"before"}) {
		t.Fatalf("copied %v", rep.Copied)
	}
	if inode(t, path) == old {
		t.Fatal("Install did not replace the file")
	}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	var mu sync.Mutex
	acks(t, stdout, acked, &mu)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if acked["waiter-000"] != 6 {
		t.Fatalf("the waiter acknowledged %v", acked)
	}
	acked["before"] = 6
	checkAcked(t, path, acked)
}

// Install takes only a file salvaged under the same maintenance: any
// other may lack what was appended before the maintenance began.
func TestMaintenance_InstallRefusesAFileNotSalvagedUnderIt(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	stale := filepath.Join(dir, "stale.db")
	if _, err := Salvage(context.Background(), path, stale, Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := BeginMaintenance(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	if err := m.Install(stale, filepath.Join(dir, "aside.db")); err == nil {
		t.Fatal("Install put in place a copy made before the maintenance began")
	}
	if _, err := os.Stat(filepath.Join(dir, "aside.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Install touched the store: %v", err)
	}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(stale, filepath.Join(dir, "aside.db")); !errors.Is(err, ErrClosed) {
		t.Errorf("Install after Release: %v, want ErrClosed", err)
	}
}

// An agent holds the store open: Suspend waits for the appends in flight,
// keeps the lock across the salvage and install, and Reopen gives back a
// store on the installed file with the lock still held; every append that
// returned before Suspend is in it, and appends go on after.
func TestStore_SuspendSalvageReopen(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	const writers = 8
	acked := make([]uint64, writers)
	var wg sync.WaitGroup
	started := make(chan struct{}, writers)
	for w := range writers {
		wg.Go(func() {
			task := fmt.Sprintf("w%d", w)
			v := uint64(0)
			for i, e := range append(runningLog(0), fsm.Event{Type: fsm.EventReattached, Time: at(20)}) {
				if i == 1 {
					started <- struct{}{}
				}
				nv, err := s.Append(context.Background(), task, v, e)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				v = nv
				acked[w] = v
			}
		})
	}
	for range writers {
		<-started
	}
	m, err := s.Suspend()
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Nobody else gets the store meanwhile.
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open during the maintenance: %v, want ErrLocked", err)
	}
	rep := salvageInPlace(t, m, 0)
	if len(rep.Copied) != writers || len(rep.Lost) != 0 {
		t.Fatalf("salvage: %+v", rep)
	}
	s2, err := m.Reopen()
	if err != nil {
		t.Fatal(err)
	}
	for w, v := range acked {
		task := fmt.Sprintf("w%d", w)
		tk, err := s2.LoadTask(context.Background(), task)
		if err != nil || tk.Version < v {
			t.Errorf("task %s after the salvage: version %d (%v), %d acknowledged", task, tk.Version, err, v)
		}
		if tk.Version < uint64(len(runningLog(0))) {
			continue // not yet running: nothing more to append
		}
		if _, err := s2.Append(context.Background(), task, tk.Version, fsm.Event{Type: fsm.EventReattached, Time: at(30)}); err != nil {
			t.Errorf("append to the reopened store: %v", err)
		}
	}
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open beside the reopened store: %v, want ErrLocked (it holds the lock)", err)
	}
	if r, err := s2.Check(context.Background()); err != nil || !r.OK() {
		t.Errorf("check: %s %v", r, err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(context.Background(), "late", 0, runningLog(0)[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("append to the suspended store: %v, want ErrClosed", err)
	}
}

// maintStore is a store of n tasks of 8 events (a running task's six, a
// task-exited and an executor-reaped: what gc and salvage walk), synced.
func maintStore(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "state", "tether.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	log := append(runningLog(0), finishLog(10)...)
	for i := range n {
		if _, err := s.Append(context.Background(), fmt.Sprintf("task-%05d", i), 0, log...); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkMaintenance_SalvageInstall is how long a salvage and its
// install hold the store (every other command waits that long): a
// durable salvage of a store of 1,000 and of 10,000 ended tasks, then its
// install. BenchmarkMaintenance_Compact is the same store compacted, the
// hold gc has always had.
func BenchmarkMaintenance_SalvageInstall(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			path := maintStore(b, n)
			dir := filepath.Dir(path)
			b.ResetTimer()
			for i := range b.N {
				m, err := BeginMaintenance(context.Background(), path, Options{})
				if err != nil {
					b.Fatal(err)
				}
				dst, aside := filepath.Join(dir, fmt.Sprintf("s%d.db", i)), filepath.Join(dir, fmt.Sprintf("a%d.db", i))
				if _, err := m.Salvage(context.Background(), dst); err != nil {
					b.Fatal(err)
				}
				if err := m.Install(dst, aside); err != nil {
					b.Fatal(err)
				}
				if err := m.Release(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = os.Remove(aside)
				b.StartTimer()
			}
		})
	}
}

func BenchmarkMaintenance_Compact(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			path := maintStore(b, n)
			b.ResetTimer()
			for range b.N {
				if _, _, err := Compact(path, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// crashImage is the store's directory as a SIGKILL at a crash point leaves
// it (every write done so far kept): a copy of its files, and the inode
// each name had at that moment.
type crashImage struct {
	point string
	dir   string
	inos  map[string]uint64
}

// snapshotAt copies the regular files of dir into a new directory.
func snapshotAt(t *testing.T, point, dir string) crashImage {
	t.Helper()
	img := crashImage{point: point, dir: t.TempDir(), inos: map[string]uint64{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(img.dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
		img.inos[e.Name()] = inode(t, filepath.Join(dir, e.Name()))
	}
	return img
}

// wholeStore opens the store at path and requires it to check clean and to
// hold exactly the tasks of want, each with its whole log.
func wholeStore(t *testing.T, what, path string, want map[string][]fsm.Event) {
	t.Helper()
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	if r, err := s.Check(ctx); err != nil || !r.OK() {
		t.Errorf("%s: Check: %s %v", what, r, err)
	}
	got := ids(t, s.All)
	if len(got) != len(want) {
		t.Errorf("%s holds tasks %v, want %d of them", what, got, len(want))
	}
	for id, evs := range want {
		if l, err := s.Load(ctx, id); err != nil || len(l) != len(evs) {
			t.Errorf("%s: task %s has %d events (%v), want %d", what, id, len(l), err, len(evs))
		}
	}
}

// Every crash point of a maintenance, with the process killed there (a
// SIGKILL keeps every write made so far: the image is the directory at
// that moment): the store's name holds a whole store with every task
// (the old file or the new one, as the steps so far say), the file that
// the next step needs is there (a compaction's synced copy, a salvage's new
// store, an install's aside holding the old store), and the maintenance
// runs again on what the crash left. Both ways a maintenance comes: a
// command's (BeginMaintenance, Compact), and an agent's (Suspend, then
// Reopen).
func TestMaintenance_EveryCrashPointLeavesAWholeStore(t *testing.T) {
	testproc.Parallel(t)
	for _, agent := range []bool{false, true} {
		for _, how := range []string{"gc", "salvage"} {
			name := how
			if agent {
				name = "suspend-" + how
			}
			t.Run(name, func(t *testing.T) {
				testproc.Parallel(t)
				maintenanceCrashPoints(t, how, agent)
			})
		}
	}
}

func maintenanceCrashPoints(t *testing.T, how string, agent bool) {
	path := testPath(t)
	dir := filepath.Dir(path)
	base := filepath.Base(path)
	var images []crashImage
	opts := Options{Crash: func(p string) { images = append(images, snapshotAt(t, p, dir)) }}
	s := openTest(t, path, opts)
	all := map[string][]fsm.Event{}
	add := func(id string, evs []fsm.Event) {
		mustAppend(t, s, id, 0, evs...)
		all[id] = evs
	}
	add("live-a", runningLog(3))
	add("live-b", runningLog(0))
	add("ended", append(runningLog(0), finishLog(10)...))
	oldIno := inode(t, path)
	ctx := context.Background()

	var m *Maintenance
	var err error
	if how == "gc" {
		removed, err := s.Remove(ctx, baseTime.Add(time.Hour))
		if err != nil || !slices.Equal(removed, []string{"ended"}) {
			t.Fatalf("Remove: %v, %v", removed, err)
		}
	}
	kept := maps.Clone(all)
	if how == "gc" {
		delete(kept, "ended")
	}
	if agent {
		m, err = s.Suspend()
	} else {
		if err = s.Close(); err == nil {
			m, err = BeginMaintenance(ctx, path, opts)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	dst, aside := filepath.Join(dir, "salvaged.db"), filepath.Join(dir, "aside.db")
	switch how {
	case "gc":
		if _, _, err := m.Compact(); err != nil {
			t.Fatal(err)
		}
	case "salvage":
		if _, err := m.Salvage(ctx, dst); err != nil {
			t.Fatal(err)
		}
		if err := m.Install(dst, aside); err != nil {
			t.Fatal(err)
		}
	}
	if agent {
		s2, err := m.Reopen()
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	} else if err := m.Release(); err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, p := range CrashPoints() {
		if how == "gc" && (p == PointRemoveCommitted || p == PointCompactCopied || p == PointCompactRenamed) ||
			how == "salvage" && (p == PointSalvageCopied || p == PointInstallAside || p == PointInstallRenamed) {
			want = append(want, p)
		}
	}
	var got []string
	for _, img := range images {
		got = append(got, img.point)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("crash points reached %v, want %v in that order", got, want)
	}
	newIno := uint64(0) // the new file's inode, once it is made
	for _, img := range images {
		t.Run(strings.ReplaceAll(img.point, ":", "_"), func(t *testing.T) {
			at := func(name string) uint64 { return img.inos[name] }
			p := filepath.Join(img.dir, base)
			switch img.point {
			case PointRemoveCommitted:
				wholeStore(t, "the store after Remove's commit", p, kept)
			case PointCompactCopied, PointSalvageCopied:
				copyName := base + ".compact"
				if img.point == PointSalvageCopied {
					copyName = filepath.Base(dst)
				}
				newIno = at(copyName)
				if at(base) != oldIno || newIno == 0 {
					t.Errorf("the store is inode %d (was %d), its copy %s inode %d: the store must be the old file, the copy made", at(base), oldIno, copyName, newIno)
				}
				wholeStore(t, "the old store", p, kept)
				wholeStore(t, "the copy "+copyName, filepath.Join(img.dir, copyName), kept)
			case PointInstallAside:
				if at(base) != oldIno || at(filepath.Base(aside)) != oldIno || at(filepath.Base(dst)) != newIno {
					t.Errorf("store inode %d, aside %d, new store %d; want the old file %d under both names, the new one %d beside", at(base), at(filepath.Base(aside)), at(filepath.Base(dst)), oldIno, newIno)
				}
				wholeStore(t, "the store", p, kept)
			case PointInstallRenamed, PointCompactRenamed:
				if at(base) != newIno || newIno == 0 {
					t.Errorf("the store is inode %d, want the new file %d", at(base), newIno)
				}
				for _, gone := range []string{base + ".compact", filepath.Base(dst)} {
					if at(gone) != 0 {
						t.Errorf("%s is still there after the rename", gone)
					}
				}
				if img.point == PointInstallRenamed {
					if at(filepath.Base(aside)) != oldIno {
						t.Errorf("aside is inode %d, want the old store %d", at(filepath.Base(aside)), oldIno)
					}
					wholeStore(t, "the old store aside", filepath.Join(img.dir, filepath.Base(aside)), kept)
				}
				wholeStore(t, "the new store", p, kept)
			}
			// The maintenance runs again on what the crash left, as the
			// next gc or salvage would.
			switch how {
			case "gc":
				if _, _, err := Compact(p, Options{}); err != nil {
					t.Errorf("Compact again: %v", err)
				}
			case "salvage":
				m, err := BeginMaintenance(ctx, p, Options{})
				if err != nil {
					t.Fatal(err)
				}
				d2, a2 := filepath.Join(img.dir, "again.db"), filepath.Join(img.dir, "aside-again.db")
				if _, err := m.Salvage(ctx, d2); err != nil {
					t.Errorf("Salvage again: %v", err)
				} else if err := m.Install(d2, a2); err != nil {
					t.Errorf("Install again: %v", err)
				}
				if err := m.Release(); err != nil {
					t.Error(err)
				}
			}
			wholeStore(t, "the store after the maintenance ran again", p, kept)
		})
	}
}

// Reopen after a maintenance that failed opens the file in place (the old
// one: a refused Install changed nothing) and keeps the lock; Reopen that
// fails (the file in place is no store) lets the lock go, so that the
// commands waiting for the store are not held for ever by an agent that
// has no store left. A Maintenance once reopened answers ErrClosed.
func TestMaintenance_ReopenAfterAFailureBothWays(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	m, err := s.Suspend()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	if err := m.Install(filepath.Join(dir, "never-salvaged.db"), filepath.Join(dir, "aside.db")); err == nil {
		t.Fatal("Install of a file this maintenance did not salvage succeeded")
	}
	s2, err := m.Reopen()
	if err != nil {
		t.Fatalf("Reopen after a refused Install: %v", err)
	}
	if tk, err := s2.LoadTask(context.Background(), "a"); err != nil || tk.Version != 6 {
		t.Errorf("the reopened store: task a at version %d (%v), want 6", tk.Version, err)
	}
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("Open beside the reopened store: %v, want ErrLocked", err)
	}
	if _, err := m.Reopen(); !errors.Is(err, ErrClosed) {
		t.Errorf("a second Reopen: %v, want ErrClosed", err)
	}

	m2, err := s2.Suspend()
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not a store"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Reopen(); !errors.Is(err, ErrNotStore) {
		t.Fatalf("Reopen of a file that is no store: %v, want ErrNotStore", err)
	}
	// The lock is let go: an Open gets past it at once and meets the file.
	if _, err := Open(path, Options{LockTimeout: time.Second}); !errors.Is(err, ErrNotStore) {
		t.Errorf("Open after a failed Reopen: %v, want ErrNotStore (the lock let go)", err)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil { // for the cleanup's check
		t.Fatal(err)
	}
}
