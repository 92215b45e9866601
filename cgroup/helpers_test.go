//go:build linux

package cgroup

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The test binary is also every helper process, dispatched on os.Args[1]
// (os.Args[2] is always the -marker=M the leak check looks for):
//
//	cg-sleep M                 block until killed
//	cg-ready M [loc]           join loc (if given), print "ok", block
//	cg-tree M loc              join loc, then a setsid'd child that double-forks a
//	                           setsid'd sleeper, and a plain sleeper; print the pids, block
//	cg-oom M loc MB            join loc, then touch MB of anonymous memory
//	cg-forker M loc N          join loc, fork N children that block; print counts, block
//	cg-unpriv M task nonce     probe and create as whoever runs it; print JSON
//	cg-deleg M task nonce      print the pid, wait for a line on stdin (moved into a
//	                           delegated cgroup meanwhile), then create a task cgroup
//	                           with limits, fill it, kill and remove it; print JSON
//	cg-oomadj M FROM TO        set oom_score_adj to FROM, then SetOOMScoreAdj(TO); print it
//	cg-spike M loc MB          join loc, touch MB of anonymous memory, unmap it, print "freed", block
//	cg-affinity M loc          join loc, print the CPUs it may run on (sched_getaffinity), block
//	cg-forkloop M loc N        join loc, fork N children that block, print "forked N", then
//	                           fork for ever (each refused fork retried at once)
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && strings.HasPrefix(os.Args[1], "cg-") {
		os.Exit(helper(os.Args[1], os.Args[3:]))
	}
	// Helper processes built with -race would otherwise sleep 1s at exit.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

func helper(mode string, args []string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", mode, err)
		return 2
	}
	join := func(s string) error {
		loc, err := ParseLocation(s)
		if err != nil {
			return err
		}
		h, err := Probe()
		if err != nil {
			return err
		}
		cg, err := Open(h, loc)
		if err != nil {
			return err
		}
		return cg.Join()
	}
	self := func(m string, a ...string) *exec.Cmd {
		return exec.Command("/proc/self/exe", append([]string{m, os.Args[2]}, a...)...)
	}
	switch mode {
	case "cg-sleep":
		block()
	case "cg-ready":
		if len(args) > 0 {
			if err := join(args[0]); err != nil {
				return fail(err)
			}
		}
		fmt.Println("ok")
		block()
	case "cg-tree":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		// The escaper: its own session; it starts a sleeper in yet another
		// session and exits, so the sleeper is an orphan outside our group.
		esc := self("cg-escape")
		esc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, err := esc.Output()
		if err != nil {
			return fail(fmt.Errorf("escaper: %w", err))
		}
		plain := self("cg-sleep")
		if err := plain.Start(); err != nil {
			return fail(err)
		}
		fmt.Printf("%d %s %d\n", os.Getpid(), strings.TrimSpace(string(out)), plain.Process.Pid)
		block()
	case "cg-escape":
		s := self("cg-sleep")
		s.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := s.Start(); err != nil {
			return fail(err)
		}
		fmt.Println(s.Process.Pid)
		return 0
	case "cg-oom":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		mb, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fail(err)
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		fmt.Println("survived")
		return 0
	case "cg-forker":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		n, _ := strconv.Atoi(args[1])
		ok, failed := 0, 0
		var lastErr syscall.Errno
		for range n {
			if _, errno := rawForkBlock(); errno != 0 {
				failed++
				lastErr = errno
			} else {
				ok++
			}
		}
		fmt.Printf("%d %d %d\n", ok, failed, int(lastErr))
		block()
	case "cg-unpriv":
		type result struct {
			UID         int
			Layout      string
			UsableErr   string
			Unavailable bool
			CreateErr   string
			CreateUnav  bool
		}
		h, err := Probe()
		if err != nil {
			return fail(err)
		}
		r := result{UID: os.Geteuid(), Layout: h.Layout.String()}
		if err := h.Usable(); err != nil {
			r.UsableErr, r.Unavailable = err.Error(), errors.Is(err, ErrUnavailable)
		}
		loc, err := LocationFor(h, args[0], args[1])
		if err != nil {
			return fail(err)
		}
		if _, err := Create(h, loc, Limits{Memory: 64}); err != nil {
			r.CreateErr, r.CreateUnav = err.Error(), errors.Is(err, ErrUnavailable)
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return 0
	case "cg-deleg":
		fmt.Println(os.Getpid())
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return fail(err)
		}
		var r struct{ Err, Dir string }
		err := func() error {
			h, err := Probe()
			if err != nil {
				return err
			}
			if err := h.Usable(); err != nil {
				return err
			}
			loc, err := LocationFor(h, args[0], args[1])
			if err != nil {
				return err
			}
			cg, err := Create(h, loc, Limits{Memory: 64, Pids: 10})
			if err != nil {
				return err
			}
			r.Dir = cg.dirs[0].dir
			sleeper := self("cg-ready", loc.String())
			out, err := sleeper.StdoutPipe()
			if err != nil {
				return err
			}
			if err := sleeper.Start(); err != nil {
				return err
			}
			if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
				return fmt.Errorf("sleeper: %w", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cg.Kill(ctx); err != nil {
				return err
			}
			_ = sleeper.Wait()
			return cg.Remove()
		}()
		if err != nil {
			r.Err = err.Error()
		}
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return 0
	case "cg-spike":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		mb, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fail(err)
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		if err := unix.Munmap(mem); err != nil {
			return fail(err)
		}
		fmt.Println("freed")
		block()
	case "cg-affinity":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return fail(err)
		}
		var cpus []string
		for cpu := range 1024 {
			if set.IsSet(cpu) {
				cpus = append(cpus, strconv.Itoa(cpu))
			}
		}
		fmt.Println(strings.Join(cpus, ","))
		block()
	case "cg-forkloop":
		if err := join(args[0]); err != nil {
			return fail(err)
		}
		n, _ := strconv.Atoi(args[1])
		for forked := 0; forked < n; {
			if _, errno := rawForkBlock(); errno == 0 {
				forked++
			} else if errno != syscall.EAGAIN {
				return fail(errno)
			}
		}
		fmt.Printf("forked %d\n", n)
		for {
			_, _ = rawForkBlock()
		}
	case "cg-oomadj":
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(args[0]), 0); err != nil {
			return fail(err)
		}
		v, _ := strconv.Atoi(args[1])
		if err := SetOOMScoreAdj(v); err != nil {
			return fail(err)
		}
		got, err := OOMScoreAdj(0)
		if err != nil {
			return fail(err)
		}
		fmt.Println(got)
		return 0
	}
	return fail(errors.New("unknown helper"))
}

// block never returns (a blocked syscall, so the runtime sees no deadlock).
func block() {
	for {
		_ = unix.Pause()
	}
}

// rawForkBlock forks a child that only ever blocks in ppoll: one task, no
// Go runtime in it (it runs no Go code after the fork). The parent gets its
// pid, or the errno of a refused fork.
//
//go:nosplit
//go:norace
func rawForkBlock() (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
	if e != 0 {
		return 0, e
	}
	if r == 0 {
		for {
			syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	}
	return int(r), 0
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testCtx is a context that ends with the test (or after 30s).
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// needCgroups skips a test that must create cgroups when this process cannot.
func needCgroups(t testing.TB) Host {
	t.Helper()
	h, err := Probe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Usable(); err != nil {
		t.Skipf("needs cgroups this process may create (root or delegation): %v", err)
	}
	return h
}

// marker tags every helper a test starts, so the leak check can find
// survivors. newMarker registers the check first, so it runs after every
// other cleanup.
type marker string

func newMarker(t *testing.T) marker {
	t.Helper()
	m := marker("cgtest" + randHex(t, 6))
	t.Cleanup(func() { checkLeaks(t, m) })
	return m
}

func (m marker) arg() string { return "-marker=" + string(m) }

// cmd returns the test binary as helper mode with args.
func (m marker) cmd(t testing.TB, mode string, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{mode, m.arg()}, args...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

// started is a helper process whose first output line was read.
type started struct {
	cmd  *exec.Cmd
	line string
	out  *bufio.Reader
}

// start starts cmd and reads its first line of output (the helper's
// report that it is ready): the synchronisation point, no sleep. The
// helper is killed and reaped at cleanup if the test did not.
func start(t testing.TB, cmd *exec.Cmd) *started {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, out: bufio.NewReader(out)}
	t.Cleanup(func() { s.reap() })
	line, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper %v: no ready line: %v", cmd.Args[1], err)
	}
	s.line = strings.TrimSpace(line)
	return s
}

// reap kills and waits for the helper; idempotent.
func (s *started) reap() error {
	if s.cmd.ProcessState != nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	_, _ = io.Copy(io.Discard, s.out)
	return s.cmd.Wait()
}

// wait waits for the helper to end (it was killed) and returns how.
func (s *started) wait(t testing.TB) *os.ProcessState {
	t.Helper()
	_, _ = io.Copy(io.Discard, s.out)
	_ = s.cmd.Wait()
	return s.cmd.ProcessState
}

// checkLeaks fails the test if a live process carries marker m.
func checkLeaks(t *testing.T, m marker) {
	t.Helper()
	if live := markedLive(m); len(live) > 0 {
		t.Errorf("leaked processes with marker %s: %v", m, describe(live))
		for _, pid := range live {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// markedLive returns the pids of live processes carrying marker m.
func markedLive(m marker) []int {
	var out []int
	for _, p := range testproc.Marked(m.arg()) {
		out = append(out, p.PID)
	}
	return out
}

// newCgroup creates a task cgroup on h with lim for a fresh task and
// nonce, removed (after a kill) at cleanup.
func newCgroup(t *testing.T, h Host, lim Limits) *Cgroup {
	t.Helper()
	loc, err := LocationFor(h, "t"+randHex(t, 4), "n"+randHex(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	cg, err := Create(h, loc, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cg.Kill(ctx); err != nil {
			t.Errorf("cleanup kill: %v", err)
		}
		if err := cg.Remove(); err != nil {
			t.Errorf("cleanup remove: %v", err)
		}
		for _, d := range cg.Dirs() {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cleanup: %s still there (%v)", d, err)
			}
		}
	})
	return cg
}

// readFileT reads a cgroup file of cg's hierarchy key.
func readFileT(t *testing.T, cg *Cgroup, key, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.Dirs()[key], file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
