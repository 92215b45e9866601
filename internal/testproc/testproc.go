// Package testproc is what tether's tests share: the test binary serving
// as its own helper processes (Dispatch), the /proc scan that finds what a
// test leaked (Marked, CheckNoLeak), and the -long flag (Long).
//
// Every helper process a test starts carries a marker in its command line
// (the test's state directory, usually), so that a scan for the marker
// finds exactly that test's processes:
//
//	func TestMain(m *testing.M) {
//		testproc.Dispatch(map[string]func([]string) int{
//			"executor": server.Serve,
//			"task":     runTask,
//		})
//		os.Exit(m.Run())
//	}
//
//	func TestX(t *testing.T) {
//		dir := t.TempDir()
//		// ... start processes with dir in their arguments ...
//		testproc.CheckNoLeak(t, dir)
//	}
package testproc

import (
	"bytes"
	"flag"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// long is the -long flag of every test binary that links this package.
var long = flag.Bool("long", false, "also run the repetitions: tests that repeat what the default suite checks once (make test-long)")

// Long reports whether the test binary was given -long: run the
// repetitions too (many runs of a property, hundreds of processes at once,
// more data through the same path). Every contract keeps a test that runs
// without it.
func Long() bool { return *long }

// SkipUnlessLong skips a test that only repeats what the default suite
// checks, unless the binary was given -long, naming what it repeats.
func SkipUnlessLong(t testing.TB, what string) {
	t.Helper()
	if !*long {
		t.Skipf("a repetition (%s): runs with -long (make test-long)", what)
	}
}

// Parallel marks t as a test to run in parallel with the others (t.Parallel),
// unless the binary runs with -failfast. -failfast only keeps tests from
// starting after a failure, and a parallel test has started when it pauses,
// so every paused one would still run to its end (a hang in one under a
// planted bug waits out the timeout). Under -failfast (make mutants, a
// bisection) the tests therefore run one at a time, and the first failure
// is the last.
func Parallel(t *testing.T) {
	t.Helper()
	if f := flag.Lookup("test.failfast"); f != nil && f.Value.String() == "true" {
		return
	}
	t.Parallel()
}

// Dispatch runs the helper mode named by the binary's first argument, if
// modes has it, and exits with its code; otherwise it returns (the binary
// is running its tests).
func Dispatch(modes map[string]func(args []string) int) {
	if len(os.Args) < 2 {
		return
	}
	if run, ok := modes[os.Args[1]]; ok {
		os.Exit(run(os.Args[2:]))
	}
}

// Proc is a live process found by Marked.
type Proc struct {
	fsm.Proc
	Args    []string
	Cmdline string // Args joined by spaces
}

func (p Proc) String() string { return strconv.Itoa(p.PID) + " " + p.Cmdline }

// Marked lists the live processes (not zombies, not this one) whose
// command line or environment contains marker.
func Marked(marker string) []Proc {
	ents, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if !bytes.Contains(raw, []byte(marker)) {
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil || !bytes.Contains(env, []byte(marker)) {
				continue
			}
		}
		start, ok := proc.Live(pid)
		if !ok {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		out = append(out, Proc{Proc: fsm.Proc{PID: pid, StartTime: start}, Args: args, Cmdline: strings.Join(args, " ")})
	}
	return out
}

// Alive reports whether pid is a live process: it exists and is neither a
// zombie nor dead.
func Alive(pid int) bool {
	_, ok := proc.Live(pid)
	return ok
}

// CheckGone is CheckNoLeak for processes that may be on their way out (an
// executor told to exit, a task whose kill is under way): each one found
// is waited for through its pidfd, up to within in all, before it counts
// as leaked.
func CheckGone(t testing.TB, marker string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, p := range Marked(marker) {
		fd, err := unix.PidfdOpen(p.PID, 0)
		if err != nil {
			continue // gone already
		}
		ms := max(int(time.Until(deadline).Milliseconds()), 0)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		for err == unix.EINTR {
			n, err = unix.Poll(fds, max(int(time.Until(deadline).Milliseconds()), 0))
		}
		if n == 0 && Alive(p.PID) {
			t.Errorf("leaked process: %s", p)
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
}

// CheckNoLeak fails the test for every live process whose command line
// contains marker, and SIGKILLs it, so that one failure does not spill
// into other tests.
func CheckNoLeak(t testing.TB, marker string) {
	t.Helper()
	for _, p := range Marked(marker) {
		t.Errorf("leaked process: %s", p)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}
