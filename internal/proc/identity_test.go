//go:build linux

package proc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The test binary is also its helper process: "hang MARKER" never exits.
func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{
		"hang": func([]string) int {
			for {
				_ = unix.Pause()
			}
		},
		// tree DEPTH MARKER: a chain of DEPTH processes below this one,
		// each in a session of its own, the last writing its pid to stdout
		// of the first; every one hangs.
		"tree": func(args []string) int {
			depth, _ := strconv.Atoi(args[0])
			if depth > 0 {
				c := exec.Command(os.Args[0], "tree", strconv.Itoa(depth-1), args[1])
				c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				c.Stdout = os.Stdout
				if err := c.Start(); err != nil {
					return 2
				}
			} else {
				fmt.Println(os.Getpid())
			}
			for {
				_ = unix.Pause()
			}
		},
	})
	os.Exit(m.Run())
}

func testBinary(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newMarker is the test's marker: every process it starts carries it, and
// none may outlive the test.
func newMarker(t *testing.T) string {
	m := "tetherproctest" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { testproc.CheckGone(t, m, 5*time.Second) })
	return m
}

// hang starts a marked process that never exits.
func hang(t *testing.T, m string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testBinary(t), "hang", m)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// needPIDControl skips a test where the next pid cannot be chosen
// (/proc/sys/kernel/ns_last_pid needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE).
func needPIDControl(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/proc/sys/kernel/ns_last_pid", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("needs a writable /proc/sys/kernel/ns_last_pid (root) to recycle a pid: %v", err)
	}
	f.Close()
}

// startAtPID starts a marked process that never exits at pid (which must be
// free), by setting the pid namespace's last pid just below it, with a start
// time other than notStart (start times count clock ticks, 10 ms here: a
// pid recycled within one tick is indistinguishable by it, so it tries
// again until the tick has passed). Other processes and threads of the
// machine take pids too, so it retries; a pid it cannot get is a skip
// naming why, not a failure.
func startAtPID(t *testing.T, m string, pid int, notStart uint64) *exec.Cmd {
	t.Helper()
	return startAtPIDWith(t, m, pid, func(st uint64) bool { return st != notStart }, "a start time other than the first's")
}

// startAtPIDWith is startAtPID for a start time that wantStart accepts.
func startAtPIDWith(t *testing.T, m string, pid int, wantStart func(uint64) bool, what string) *exec.Cmd {
	t.Helper()
	for range 2000 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot set ns_last_pid: %v", err)
		}
		cmd := hang(t, m)
		if cmd.Process.Pid == pid {
			if st, err := proc.StartTime(pid); err == nil && wantStart(st) {
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				return cmd
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Skipf("could not start a process at pid %d with %s: other processes took the pid, or the clock ticked, on every try", pid, what)
	return nil
}

// childAlive reports whether the test's child cmd is alive and has no
// SIGKILL on its way: a kill(2) queues SIGKILL before it returns, but the
// target dies a moment later, so "not dead yet" alone would miss it.
func childAlive(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if err != nil {
		t.Fatalf("wait4 %d: %v", pid, err)
	}
	if got != 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	const sigkill = uint64(1) << (syscall.SIGKILL - 1)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return false
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&sigkill != 0 {
				return false
			}
		}
	}
	return true
}

// TestPidfd_SignalAfterPIDRecycledMissesTheNewProcess: a pidfd opened on a
// process that then dies, is reaped, and has its pid taken by another
// process signals nothing: the new process at the same pid lives. This is
// what Kill and signalMatching rely on when the pid is recycled between
// their identity check and their signal (a kill(2) by pid would hit the
// stranger: shown below by signal 0).
func TestPidfd_SignalAfterPIDRecycledMissesTheNewProcess(t *testing.T) {
	needPIDControl(t)
	m := newMarker(t)
	first := hang(t, m)
	pid := first.Process.Pid
	firstStart, err := proc.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The identity check passes here; then the process dies and is reaped.
	if err := proc.Check(fsm.Identity{PID: pid, StartTime: firstStart}); err != nil {
		t.Fatal(err)
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	stranger := startAtPID(t, m, pid, firstStart)
	if st, err := proc.StartTime(pid); err != nil || st == firstStart {
		t.Fatalf("pid %d was not recycled: start %d (first %d) %v", pid, st, firstStart, err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the recycled pid is not signallable by number: %v", err)
	}
	// The signal goes through the pidfd of the first process: nowhere.
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("pidfd signal to a reaped process = %v, want nil", err)
	}
	if !childAlive(t, stranger) {
		t.Fatal("the process that took the recycled pid was killed through the first one's pidfd")
	}
}

// TestKill_PIDRecycledAfterItsPidfdOpenedSignalsNothing recycles the
// executor's pid inside Kill, after its pidfd is open and before its
// identity check reads /proc (through the boot id it reads first): the
// check sees the stranger's start time and refuses, and the pidfd, open
// on the dead executor, could not have reached the stranger anyway.
func TestKill_PIDRecycledAfterItsPidfdOpenedSignalsNothing(t *testing.T) {
	needPIDControl(t)
	m := newMarker(t)
	ctx := testCtx(t)
	first := hang(t, m)
	pid := first.Process.Pid
	start, err := proc.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	var stranger *exec.Cmd
	var real func() (string, error)
	real = proc.SwapBootID(func() (string, error) {
		if stranger == nil { // inside Kill: its pidfd on the first process is open
			_ = first.Process.Kill()
			_ = first.Wait()
			stranger = startAtPID(t, m, pid, start)
		}
		return real()
	})
	defer func() { proc.SwapBootID(real) }()
	err = proc.Kill(ctx, fsm.Identity{PID: pid, StartTime: start, BootID: boot})
	if stranger == nil {
		t.Fatal("Kill did not read the boot id: the pid was never recycled")
	}
	if !errors.Is(err, proc.ErrNotOurs) {
		t.Errorf("Kill of a recycled pid = %v, want proc.ErrNotOurs", err)
	}
	if !childAlive(t, stranger) {
		t.Fatalf("Kill signalled the process that took pid %d", pid)
	}
}

// TestKill_PIDRecycledWithinATickSignalsThroughThePidfd: a pid recycled
// within one clock tick gets the dead process's start time, so an identity
// without a nonce cannot tell the stranger from it: the check passes. The
// kill must still not reach the stranger: it goes through the pidfd Kill
// opened before its check, on the process that is now dead. (A kill by
// pid number would SIGKILL the stranger.) The recycle has to fit in one
// 10 ms tick: each try starts at the beginning of a tick, and a try that
// misses it is made again.
func TestKill_PIDRecycledWithinATickSignalsThroughThePidfd(t *testing.T) {
	needPIDControl(t)
	m := newMarker(t)
	ctx := testCtx(t)
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	// A small process to start: the recycle is a race with the clock.
	bin, args := testBinary(t), []string{"hang", m}
	if p, err := exec.LookPath("sleep"); err == nil {
		bin, args = p, []string{"1000"}
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TETHER_TEST_MARKER="+m)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	real := proc.SwapBootID(nil)
	proc.SwapBootID(real)
	defer func() { proc.SwapBootID(real) }()
	for try := 0; try < 50; try++ {
		atTickStart()
		first := start()
		pid := first.Process.Pid
		firstStart, err := proc.StartTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		var stranger *exec.Cmd
		proc.SwapBootID(func() (string, error) {
			if stranger == nil { // inside Kill, its pidfd open on the first process
				_ = first.Process.Kill()
				_ = first.Wait()
				for range 20 {
					if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
						break
					}
					c := start()
					if c.Process.Pid == pid {
						stranger = c
						break
					}
					_ = c.Process.Kill()
					_ = c.Wait()
				}
			}
			return real()
		})
		err = proc.Kill(ctx, fsm.Identity{PID: pid, StartTime: firstStart, BootID: boot})
		proc.SwapBootID(real)
		if stranger == nil {
			continue // the pid was taken by another process
		}
		st, serr := proc.StartTime(pid)
		if serr != nil || st != firstStart {
			_ = stranger.Process.Kill()
			_ = stranger.Wait()
			continue // the clock ticked: the check told them apart
		}
		defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()
		if err != nil {
			t.Errorf("Kill of a process whose pid was recycled within its tick = %v, want nil (it is dead)", err)
		}
		if !childAlive(t, stranger) {
			t.Fatalf("Kill signalled the process that took pid %d: the kill went by pid, not through the pidfd", pid)
		}
		return
	}
	t.Skip("could not recycle a pid within one clock tick in 50 tries (the machine is too loaded to fit a kill, a reap and a fork in 10 ms)")
}

// atTickStart returns just after the boot clock crossed into a new 10 ms
// clock tick (the unit of /proc/PID/stat's start time), so that what
// follows has most of a tick before the next one.
func atTickStart() {
	const tick = 10 * time.Millisecond
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	was := ts.Nano() / int64(tick)
	for {
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
		if ts.Nano()/int64(tick) != was {
			return
		}
	}
}

// TestReadStat_CommThatLooksLikeFields: a process whose name holds ")",
// spaces and digits (the task picks its own name) is read by its real
// fields: its parent, its group, a start time that Check proves and Kill
// acts on. A parse from the first ")" would read the name's digits as
// the fields that identify the process.
func TestReadStat_CommThatLooksLikeFields(t *testing.T) {
	for _, comm := range []string{"a) R 1 2 3", "x (y) 0 0"} {
		b := []byte("4242 (" + comm + ") S 77 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0 0 0 0 0")
		s, err := proc.ParseStat(b)
		if err != nil || s.State != 'S' || s.PPID != 77 || s.PGID != 4242 || s.SID != 4242 || s.StartTime != 987654 {
			t.Errorf("ParseStat of a process named %q = %+v, %v; want state S, ppid 77, pgid and sid 4242, start time 987654", comm, s, err)
		}
	}
	m := newMarker(t)
	named := t.TempDir() + "/a) R 1 2 3"
	bin, err := os.ReadFile(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(named, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(named, "hang", m)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	s, err := proc.ReadStat(pid)
	if err != nil || s.PPID != os.Getpid() || s.PGID != pid {
		t.Fatalf("ReadStat of pid %d named %q = %+v, %v; want ppid %d, pgid %d", pid, "a) R 1 2 3", s, err, os.Getpid(), pid)
	}
	id := identityOf(t, pid)
	if err := proc.Check(id); err != nil {
		t.Fatalf("Check of its own identity: %v", err)
	}
	if err := proc.Kill(testCtx(t), id); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if childAlive(t, cmd) {
		t.Errorf("pid %d is alive after Kill", pid)
	}
}

// TestCheck_NonceAndZombie: an identity with a nonce is ours only while
// the process at its pid and start time carries "-nonce=" and the nonce
// on its command line (a pid reused within one clock tick has the pid and
// start time, never the nonce): Check says ErrNotOurs and Kill signals
// nothing. A process that exited and is not reaped is gone, not ours.
func TestCheck_NonceAndZombie(t *testing.T) {
	m := newMarker(t)
	cmd := exec.Command(testBinary(t), "hang", m, proc.NonceArg("n0nce"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	id := identityOf(t, cmd.Process.Pid)
	id.Nonce = "n0nce"
	if err := proc.Check(id); err != nil {
		t.Fatalf("Check with the process's own nonce: %v", err)
	}
	other := id
	other.Nonce = "another"
	if err := proc.Check(other); !errors.Is(err, proc.ErrNotOurs) {
		t.Errorf("Check with a nonce the process lacks = %v, want ErrNotOurs", err)
	}
	if alive, err := proc.Alive(other); alive || err != nil {
		t.Errorf("Alive with a nonce the process lacks = %v, %v; want false", alive, err)
	}
	if err := proc.Kill(testCtx(t), other); !errors.Is(err, proc.ErrNotOurs) {
		t.Errorf("Kill with a nonce the process lacks = %v, want ErrNotOurs", err)
	}
	if !childAlive(t, cmd) {
		t.Fatal("Kill with the wrong nonce killed the process")
	}

	// Dead and not reaped: a zombie until cmd.Wait.
	p, err := proc.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	for _, nonce := range []string{"", "n0nce"} { // a zombie's command line is empty: the nonce alone would say so
		zid := id
		zid.Nonce = nonce
		if err := proc.Check(zid); !errors.Is(err, proc.ErrGone) {
			t.Errorf("Check of a zombie (nonce %q) = %v, want ErrGone", nonce, err)
		}
		if alive, err := proc.Alive(zid); alive || err != nil {
			t.Errorf("Alive of a zombie (nonce %q) = %v, %v; want false", nonce, alive, err)
		}
	}
}

// TestKillGroup_LeaderRecycledSignalsNothing: a group whose recorded
// leader started before the process now at its pid (the pid was reused)
// is a stranger's: KillGroup and KillSession refuse with ErrNotOurs and
// signal nothing.
func TestKillGroup_LeaderRecycledSignalsNothing(t *testing.T) {
	m := newMarker(t)
	cmd := exec.Command(testBinary(t), "hang", m)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	start, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	recorded := fsm.Proc{PID: cmd.Process.Pid, StartTime: start - 1}
	if err := proc.KillGroup(testCtx(t), recorded); !errors.Is(err, proc.ErrNotOurs) {
		t.Errorf("KillGroup of a recycled leader = %v, want ErrNotOurs", err)
	}
	if err := proc.KillSession(testCtx(t), recorded); !errors.Is(err, proc.ErrNotOurs) {
		t.Errorf("KillSession of a recycled leader = %v, want ErrNotOurs", err)
	}
	if !childAlive(t, cmd) {
		t.Fatal("the stranger's group was killed")
	}
	if err := proc.KillGroup(testCtx(t), fsm.Proc{PID: cmd.Process.Pid, StartTime: start}); err != nil {
		t.Fatalf("KillGroup of the real leader: %v", err)
	}
	if childAlive(t, cmd) {
		t.Error("KillGroup of the real leader left it alive")
	}
}
