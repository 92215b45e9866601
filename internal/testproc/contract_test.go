package testproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A helper whose marker is in its environment only (a task started with
// the test's state directory in TETHER_TASK_DIR, say) is found too.
func TestMarked_FindsAMarkerInTheEnvironment(t *testing.T) {
	marker := t.TempDir()
	cmd := exec.Command(os.Args[0], modeSleep)
	cmd.Env = append(os.Environ(), "TESTPROC_MARK="+marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := Marked(marker); len(got) != 1 || got[0].PID != cmd.Process.Pid {
		t.Fatalf("Marked = %v, want the helper %d marked in its environment", got, cmd.Process.Pid)
	}
}

// CheckNoLeak reports each marked process and kills it, so that one
// failure does not spill into the next test.
func TestCheckNoLeak_ReportsAndKills(t *testing.T) {
	marker := t.TempDir()
	cmd := exec.Command(os.Args[0], modeSleep, marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	CheckNoLeak(r, marker)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], strconv.Itoa(cmd.Process.Pid)) {
		_ = cmd.Process.Kill()
		t.Fatalf("CheckNoLeak of a live helper: %v", r.errs)
	}
	// Killed: its pidfd turns readable (a helper left alive would block a
	// plain Wait for ever; the bound only turns that into a failure).
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 5_000); n != 1 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("CheckNoLeak left the leaked helper alive (%v)", err)
	}
	_ = cmd.Wait()
	if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the leaked helper ended %v, want SIGKILL from CheckNoLeak", ws)
	}
}
