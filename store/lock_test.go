package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// holdLock starts a helper process that opens the store at path and holds
// it; the returned function makes it close the store and exit.
func holdLock(t *testing.T, path string) (release func()) {
	t.Helper()
	cmd := helper(t, "hold-lock", path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("lock holder: %v", err)
			}
		})
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q, %v", line, err)
	}
	return release
}

// waitBlockedOn returns once process pid is blocked in flock on the file
// with inode ino, as the kernel's lock table (/proc/locks, "->" lines are
// waiters) shows it: the test synchronises on the kernel's state, not on
// a guess of how long a process takes to get there.
func waitBlockedOn(t *testing.T, pid int, ino uint64) {
	t.Helper()
	want := fmt.Sprintf(" %d ", pid)
	suffix := fmt.Sprintf(":%d", ino)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		b, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Skipf("this test needs /proc/locks to see a blocked flock: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.Contains(line, want) && strings.HasSuffix(f[6], suffix) {
				return
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("process %d never blocked on the lock (inode %d):\n%s", pid, ino, b)
		}
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// acks reads "ack TASK V" lines until the reader ends.
func acks(t *testing.T, r io.Reader, into map[string]uint64, mu *sync.Mutex) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var task string
		var v uint64
		if _, err := fmt.Sscanf(sc.Text(), "ack %s %d", &task, &v); err != nil {
			t.Errorf("helper said %q: %v", sc.Text(), err)
			continue
		}
		mu.Lock()
		into[task] = max(into[task], v)
		mu.Unlock()
	}
}

// checkAcked opens the store and requires every acknowledged append in it
// and a clean Check.
func checkAcked(t *testing.T, path string, acked map[string]uint64) {
	t.Helper()
	s := openTest(t, path, Options{ReadOnly: true})
	ctx := context.Background()
	for task, v := range acked {
		tk, err := s.LoadTask(ctx, task)
		if err != nil {
			t.Errorf("acknowledged task %s: %v", task, err)
			continue
		}
		if tk.Version < v {
			t.Errorf("task %s has version %d, but %d was acknowledged", task, tk.Version, v)
		}
	}
	if r, err := s.Check(ctx); err != nil || !r.OK() {
		t.Errorf("Check: %s %v", r, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// The bug of issue 11 item 1, made deterministic: a process is blocked
// waiting for the store while Compact renames a new file over it. Once it
// gets the lock it must write into the new file, not the unlinked old
// one, so its acknowledged append is in the store afterwards.
func TestCompact_WaiterOpensTheNewFile(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{})
	mustAppend(t, s, "before", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	oldIno := inode(t, path)

	lk, err := lockStore(context.Background(), path, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cmd := helper(t, "cycle", path, "waiter", "1", "10s")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitBlockedOn(t, cmd.Process.Pid, inode(t, path+lockSuffix))
	if _, _, err := compactLocked(path, Options{}.withDefaults(), time.Second); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) == oldIno {
		t.Fatal("Compact did not replace the file")
	}
	if err := lk.release(); err != nil {
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

// Compact in a loop beside writer processes that each open, append and
// close over and over, as CLI commands do: every acknowledged append is in
// the final file, and it checks clean.
func TestCompact_LoopBesideWriterProcesses(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const writers, cycles = 6, 15
	acked := map[string]uint64{}
	var mu sync.Mutex
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, writers)
	for w := range cmds {
		cmd := helper(t, "cycle", path, fmt.Sprintf("w%d", w), strconv.Itoa(cycles), "10s")
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
	compactions := make(chan int)
	go func() {
		n := 0
		defer func() { compactions <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := Compact(path, Options{LockTimeout: 20 * time.Second}); err != nil {
				t.Errorf("Compact: %v", err)
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
	n := <-compactions
	t.Logf("%d compactions beside %d writers of %d cycles", n, writers, cycles)
	if len(acked) != writers*cycles {
		t.Errorf("%d appends acknowledged, want %d", len(acked), writers*cycles)
	}
	checkAcked(t, path, acked)
}

// Many processes that open, append and close at once all succeed, each
// with a lock timeout shorter than the whole crowd takes to pass, and every
// acknowledged append is there. A load test: the timeout is long enough for
// one hold on a loaded CI machine, so a fixed deadline could pass it too;
// the rule that a moving queue is waited out is checked deterministically
// by TestOpen_WaiterWaitsWhileTheLockMoves (and end to end by the CLI's
// TestParallel_200StartsThen200Stops). It runs with -long (make test-long).
func TestOpen_ManyProcessesAllSucceed(t *testing.T) {
	testproc.Parallel(t)
	testproc.SkipUnlessLong(t, "40 processes opening the store at once, a load test of the lock TestOpen_WaiterWaitsWhileTheLockMoves checks")
	path := testPath(t)
	s := openTest(t, path, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const procs, cycles, timeout = 40, 15, time.Second
	acked := map[string]uint64{}
	begin := time.Now()
	var mu sync.Mutex
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, procs)
	for p := range cmds {
		cmd := helper(t, "cycle", path, fmt.Sprintf("p%02d", p), strconv.Itoa(cycles), timeout.String())
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		readers.Go(func() { acks(t, stdout, acked, &mu) })
		cmds[p] = cmd
	}
	readers.Wait()
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v", p, err)
		}
	}
	if len(acked) != procs*cycles {
		t.Errorf("%d appends acknowledged, want %d", len(acked), procs*cycles)
	}
	checkAcked(t, path, acked)
	t.Logf("%d opens with a %s lock timeout took %s in all", procs*cycles, timeout, time.Since(begin).Round(time.Millisecond))
}

// A waiter whose timeout passes while other processes keep taking the
// lock waits on; once nobody has taken it for a whole timeout, it gives
// up. The other processes' takings are made here, by counting them in the
// lock file as a holder does, while a helper process holds the lock.
func TestOpen_WaiterWaitsWhileTheLockMoves(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, path)
	lf, err := os.OpenFile(path+lockSuffix, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()

	// The lock moves every sixth of the timeout: a taker held up by five
	// sixths of it (a loaded machine, the tests beside this one) does not
	// make the waiter give up early.
	const timeout = 600 * time.Millisecond
	got := make(chan error, 1)
	wait := func() { // an Open that waits for the lock, its outcome on got
		go func() {
			s, err := Open(path, Options{LockTimeout: timeout})
			if err == nil {
				err = s.Close()
			}
			got <- err
		}()
		waitBlockedOn(t, os.Getpid(), inode(t, path+lockSuffix))
	}
	wait()
	// Takings for two and a half timeouts, one every sixth of it.
	tick := time.NewTicker(timeout / 6)
	for range 15 {
		select {
		case err := <-got:
			t.Fatalf("the waiter returned while the lock kept moving: %v", err)
		case <-tick.C:
			taken(lf)
		}
	}
	tick.Stop()
	// Then nothing moves: it gives up, naming the holder.
	err = <-got
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "(store.test)") {
		t.Fatalf("waiter behind a holder that does not move: %v, want ErrLocked naming the holder", err)
	}
	// And one that waits while the lock moves gets it when the holder goes.
	wait()
	taken(lf)
	release()
	if err := <-got; err != nil {
		t.Fatalf("waiter after the holder let go: %v", err)
	}
}

func TestOpen_LockFile(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	st, err := os.Lstat(path + lockSuffix)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v; want a regular file 0600", st, err)
	}
	ino := inode(t, path+lockSuffix)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Compact(path, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if inode(t, path+lockSuffix) != ino {
		t.Error("the lock file was replaced: waiters on the old one would not exclude the new holders")
	}
	// Two read-only opens share the lock; a writer waits for both.
	r1 := openTest(t, path, Options{ReadOnly: true})
	r2 := openTest(t, path, Options{ReadOnly: true})
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("writer beside two readers: %v, want ErrLocked", err)
	}
	r1.Close()
	r2.Close()
}

// An Open that gave up waiting leaves nothing held: once the holder lets
// go, the next Open gets the lock (the abandoned waiter released it).
func TestOpen_TimedOutWaiterLetsGo(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, path)
	const timeout = 100 * time.Millisecond
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: timeout})
	if took := time.Since(start); took < timeout {
		t.Errorf("Open gave up after %v, before its timeout %v", took, timeout)
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), timeout.String()) {
		t.Fatalf("Open of a held store: %v, want ErrLocked naming the path and the timeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := open(ctx, path, Options{LockTimeout: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Errorf("open with a cancelled context: %v", err)
	}
	release()
	r := openTest(t, path, Options{LockTimeout: 10 * time.Second})
	if _, err := r.LoadTask(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
}

// A waiter gets the store as soon as its holder closes it.
func TestOpen_WaiterGetsTheLockWhenReleased(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, path)
	got := make(chan error, 1)
	go func() {
		s, err := Open(path, Options{LockTimeout: time.Minute})
		if err == nil {
			err = s.Close()
		}
		got <- err
	}()
	waitBlockedOn(t, os.Getpid(), inode(t, path+lockSuffix))
	release()
	if err := <-got; err != nil {
		t.Fatalf("Open after the holder let go: %v", err)
	}
}

func TestOpen_SymlinkRefused(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "elsewhere.db")
	s := openTest(t, real, Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(state, "tether.db")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(link, Options{ReadOnly: ro})
		if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("Open (read-only %v) of a linked store: %v, want ErrUnsafePath naming the link", ro, err)
		}
	}
	if _, _, err := Compact(link, Options{}); !errors.Is(err, ErrUnsafePath) {
		t.Errorf("Compact of a linked store: %v, want ErrUnsafePath", err)
	}
	if _, err := os.Lstat(link + lockSuffix); err == nil {
		t.Error("a lock file was made for a refused store")
	}

	// A link planted as the lock file is refused too, and not followed.
	path := filepath.Join(state, "other.db")
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path+lockSuffix); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), path+lockSuffix) {
		t.Errorf("Open with a linked lock file: %v, want ErrUnsafePath naming it", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Errorf("the lock file's link target was touched: %q %v", b, err)
	}
}

func TestOpen_SpecialFileRefused(t *testing.T) {
	testproc.Parallel(t)
	path := filepath.Join(t.TempDir(), "tether.db")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Skipf("this test needs mkfifo: %v", err)
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open of a FIFO: %v, want ErrUnsafePath", err)
	}
}

// A link planted where Compact writes its new file is not followed: its
// target is untouched and the compaction still succeeds.
func TestCompact_PlantedLinkNotFollowed(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	mustAppend(t, s, "a", 0, runningLog(3)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path+".compact"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Compact(path, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Errorf("Compact wrote through the planted link: %q %v", b, err)
	}
	if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the compacted store: %v %v", st, err)
	}
	checkAcked(t, path, map[string]uint64{"a": 9})
}
