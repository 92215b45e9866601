package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
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
