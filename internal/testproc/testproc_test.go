package testproc

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

const modeSleep = "testproc-sleep"

func TestMain(m *testing.M) {
	Dispatch(map[string]func([]string) int{modeSleep: func([]string) int { select {} }})
	os.Exit(m.Run())
}

// A marked helper is found while it lives, not once it is dead; other
// processes and this one are never listed.
func TestMarked_FindsTheLiveHelperOnly(t *testing.T) {
	marker := t.TempDir()
	if got := Marked(marker); len(got) != 0 {
		t.Fatalf("found %v before anything started", got)
	}
	cmd := exec.Command(os.Args[0], modeSleep, marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := Marked(marker)
	if len(got) != 1 || got[0].PID != cmd.Process.Pid {
		_ = cmd.Process.Kill()
		t.Fatalf("Marked = %v, want the helper %d", got, cmd.Process.Pid)
	}
	if !Alive(cmd.Process.Pid) {
		t.Fatal("the helper is not Alive")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Dead but not reaped (waitid with WNOWAIT leaves the zombie): not
	// alive, not listed.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if Alive(cmd.Process.Pid) || len(Marked(marker)) != 0 {
		t.Fatalf("a zombie is listed: %v", Marked(marker))
	}
	_ = cmd.Wait()
}
