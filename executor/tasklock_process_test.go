package executor

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
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

// lockHolder is the test binary's "lock-holder" mode (TestMain): a
// process that takes a task's lock and holds it. "lock-holder STATEDIR
// TASK try|wait" prints "locked" once it holds it (or "busy PID" if try
// found it held), then holds it until its stdin closes.
func lockHolder(stateDir, task, how string) int {
	r := &Real{StateDir: stateDir}
	var release func()
	switch how {
	case "try":
		rel, holder, err := r.LockTask(task)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lock holder:", err)
			return 2
		}
		if rel == nil {
			fmt.Printf("busy %d\n", holder)
			return 0
		}
		release = rel
	case "wait":
		rel, err := r.WaitLockTask(context.Background(), task)
		if err != nil {
			fmt.Fprintln(os.Stderr, "lock holder:", err)
			return 2
		}
		release = rel
	default:
		return 2
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	release()
	return 0
}

// lockHolderProc is a running lock holder.
type lockHolderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startLockHolder starts a lock holder for task in stateDir and returns it
// with its first line.
func startLockHolder(t *testing.T, stateDir, task, how string) (*lockHolderProc, string) {
	t.Helper()
	cmd := exec.Command(testBinary(t), "lock-holder", stateDir, task, how)
	cmd.Stderr = os.Stderr
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
	p := &lockHolderProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() { p.release(t) })
	line, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("lock holder: %v", err)
	}
	return p, strings.TrimSpace(line)
}

// release makes the holder let go and exit; idempotent.
func (p *lockHolderProc) release(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("lock holder: %v", err)
	}
}

// taskLockMode returns the flock mode ("READ", "WRITE") process pid holds
// on the file with inode ino, from the kernel's lock table, and whether a
// process other than pid is waiting for it.
func taskLockMode(t *testing.T, pid int, ino uint64) (mode string, waiter bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skipf("needs /proc/locks to see which lock a process holds: %v", err)
	}
	suffix := fmt.Sprintf(":%d", ino)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) && strings.HasSuffix(f[5], suffix):
			mode = f[3]
		case len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], suffix):
			waiter = true
		}
	}
	return mode, waiter
}

// TestTaskLock_ExcludesAnotherProcess: a task's lock (statedir.LockFile, which
// tells recovery in another process that a live process drives the task)
// is exclusive across processes, however either side takes it: the kernel's
// lock table shows the holder's flock as WRITE; a contender's LockTask
// fails at once naming the holder's pid, its WaitLockTask waits (and gives
// up with its context), and gets the lock as soon as the holder lets go.
// Never do both hold it.
func TestTaskLock_ExcludesAnotherProcess(t *testing.T) {
	for _, holderHow := range []string{"try", "wait"} {
		t.Run("holder "+holderHow+"s", func(t *testing.T) {
			testproc.Parallel(t)
			stateDir := t.TempDir()
			// The task's directory, as a start makes it (WaitLockTask is
			// for a task that has one).
			if err := os.MkdirAll(filepath.Join(stateDir, "tasks", "web"), 0o700); err != nil {
				t.Fatal(err)
			}
			r := &Real{StateDir: stateDir}
			holder, line := startLockHolder(t, stateDir, "web", holderHow)
			if line != "locked" {
				t.Fatalf("the holder said %q", line)
			}
			pid := holder.cmd.Process.Pid
			lockPath := filepath.Join(r.dir("web"), statedir.LockFile)
			var st syscall.Stat_t
			if err := syscall.Stat(lockPath, &st); err != nil {
				t.Fatal(err)
			}
			if mode, _ := taskLockMode(t, pid, st.Ino); mode != "WRITE" {
				t.Fatalf("the holder (pid %d) holds %s in mode %q, want WRITE (exclusive)", pid, statedir.LockFile, mode)
			}

			// LockTask: refused at once, naming the holder.
			rel, got, err := r.LockTask("web")
			if rel != nil {
				rel()
				t.Fatalf("LockTask got the lock while process %d holds it", pid)
			}
			if err != nil || got != pid {
				t.Fatalf("LockTask beside a holder: holder %d, %v; want holder %d", got, err, pid)
			}

			// WaitLockTask: waits, and gives up with its context.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			rel, err = r.WaitLockTask(ctx, "web")
			cancel()
			if rel != nil {
				rel()
				t.Fatalf("WaitLockTask got the lock while process %d holds it", pid)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitLockTask beside a holder: %v, want the context's deadline", err)
			}

			// A waiter gets it once the holder lets go, and then holds it
			// against another process.
			got2 := make(chan func(), 1)
			errc := make(chan error, 1)
			go func() {
				rel, err := r.WaitLockTask(context.Background(), "web")
				if err != nil {
					errc <- err
					return
				}
				got2 <- rel
			}()
			waitForWaiter(t, pid, st.Ino)
			holder.release(t)
			var mine func()
			select {
			case mine = <-got2:
			case err := <-errc:
				t.Fatalf("WaitLockTask after the holder let go: %v", err)
			}
			defer mine()
			other, line := startLockHolder(t, stateDir, "web", "try")
			if line != fmt.Sprintf("busy %d", os.Getpid()) {
				t.Fatalf("another process's LockTask while this one holds the lock said %q, want busy %d", line, os.Getpid())
			}
			other.release(t)
		})
	}
}

// waitForWaiter returns once some process waits for the flock on the file
// with inode ino that pid holds (the kernel's lock table shows waiters).
func waitForWaiter(t *testing.T, pid int, ino uint64) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		if _, waiter := taskLockMode(t, pid, ino); waiter {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no process ever waited for the task's lock")
		}
	}
}
