package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const modeSleep = "testproc-sleep"

func TestMain(m *testing.M) {
	Dispatch(map[string]func([]string) int{modeSleep: func([]string) int {
		for {
			_ = unix.Pause() // until killed (select{} alone is a deadlock the runtime ends)
		}
	}})
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

// recorder is a testing.TB that keeps the errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// CheckGone waits for a process on its way out, and reports (and kills)
// one that stays.
func TestCheckGone_WaitsForTheExitingReportsTheStaying(t *testing.T) {
	marker := t.TempDir()
	stays := exec.Command(os.Args[0], modeSleep, marker)
	if err := stays.Start(); err != nil {
		t.Fatal(err)
	}
	defer stays.Wait()
	r := &recorder{TB: t}
	CheckGone(r, marker, 50*time.Millisecond)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], strconv.Itoa(stays.Process.Pid)) {
		t.Fatalf("CheckGone of a process that stays: %v", r.errs)
	}
	// It was killed: reaping it ends, and nothing is left to report.
	_ = stays.Wait()
	r2 := &recorder{TB: t}
	CheckGone(r2, marker, time.Second)
	if len(r2.errs) != 0 {
		t.Fatalf("CheckGone after the kill: %v", r2.errs)
	}
}
