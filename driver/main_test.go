package driver

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The test binary is also the executor, the task and the crashing driver:
// TestMain dispatches on its first argument.
const (
	modeExecutor = "executor"
	modeTask     = "tether-test-task"
	modeChild    = "tether-test-driver"
)

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{modeExecutor: server.Serve, modeTask: runTask, modeChild: runChild})
	// Helper processes of a -race binary would each sleep 1 s at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	goleak.VerifyTestMain(m)
}

// runTask is the user's task: "exit N", "sleep", "ignore-term",
// "grandchildren" (forks two sleeping grandchildren, then sleeps), or
// "exit-once N FILE" (exits N if it can create FILE, else sleeps: a task
// whose restart runs on). Every task carries its test's marker as its last
// argument.
func runTask(args []string) int {
	switch args[0] {
	case "notify": // notify CTL OUT MARKER
		return testproc.NotifyTask(args[1 : len(args)-1])
	case "ready-sleep": // say READY=1 at once, then sleep
		if err := testproc.Notify(os.Getenv("NOTIFY_SOCKET"), "READY=1"); err != nil {
			return 5
		}
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "fail-then-fifo":
		// fail-then-fifo N FILE FIFO: runs before the Nth exit 4; the Nth
		// reads FIFO to its end, then exits 4.
		f, err := os.OpenFile(args[2], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 2
		}
		_, _ = f.WriteString("ran\n")
		f.Close()
		b, _ := os.ReadFile(args[2])
		if n, _ := strconv.Atoi(args[1]); strings.Count(string(b), "\n") >= n {
			_, _ = os.ReadFile(args[3])
		}
		return 4
	case "exit-once", "counted-exit-once":
		if args[0] == "counted-exit-once" {
			// counted-exit-once N FILE RUNS: exit-once that first appends a
			// line to RUNS, so a test can count the runs that started.
			f, err := os.OpenFile(args[3], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return 2
			}
			_, _ = f.WriteString("ran\n")
			f.Close()
		}
		if f, err := os.OpenFile(args[2], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			f.Close()
			n, _ := strconv.Atoi(args[1])
			return n
		}
	case "log":
		// log FILE WORD exit N | log FILE WORD sleep: appends WORD to
		// FILE, then exits N, or sleeps until SIGTERM, which appends
		// WORD-stopped and exits 0 (the order of a group's tasks, read
		// from one file they all append to).
		logWord := func(w string) {
			f, err := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o666)
			if err == nil {
				_, _ = f.WriteString(w + "\n")
				f.Close()
			}
		}
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		logWord(args[2])
		if args[3] == "exit" {
			n, _ := strconv.Atoi(args[4])
			return n
		}
		<-term
		logWord(args[2] + "-stopped")
		return 0
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	case "grandchildren":
		for range 2 {
			c := exec.Command(os.Args[0], modeTask, "sleep", args[len(args)-1])
			if err := c.Start(); err != nil {
				return 2
			}
		}
	}
	select {}
}

func self(t testing.TB) string {
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newDriver opens a driver on dir with real executors served by this test
// binary.
func newDriver(t testing.TB, dir string, hooks Hooks) *Driver {
	t.Helper()
	d, err := Open(Config{
		StateDir:        dir,
		ExecutorCommand: []string{self(t), modeExecutor},
		KillTimeout:     2 * time.Second,
		Hooks:           hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func taskSpec(t testing.TB, marker string, args ...string) fsm.Spec {
	return fsm.Spec{Driver: "raw_exec", Command: self(t), Args: append(append([]string{modeTask}, args...), marker)}
}

// stateDir makes a state directory whose path is the marker found in the
// command line of every executor and task of the test.
func stateDir(t testing.TB) string {
	dir := filepath.Join(t.TempDir(), "state") // created private by Open; TempDir's own is 0755

	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	return dir
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitPidfd blocks until the process pid exits, polling its pidfd.
func waitPidfd(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	_, err = unix.Poll(fds, 30_000)
	return err
}
