package driver

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// TestRealKillTask_OtherBootSignalsNothing: Real.KillTask killed a task's
// process group by the recorded pid and start time alone, so after a
// reboot a process of the new boot that had the recorded pid and a start
// time no earlier than the recorded one (start times count from boot) was
// SIGKILLed as the task's. The identity carries the boot id: a task of
// another boot is gone, and nothing may be signalled for it. Found by
// proptest's reboot with look-alikes (World.Reboot, Collide):
// TestEnumerate_EveryCrashPoint, scenario "start:run x1 reboot-between | op
// crash=after-append:launched#1 faults=[] | recover crash=- faults=[]".
//
// Fix (driver/real.go KillTask): the boot id is checked first, for the
// process group as it was for the cgroup.
func TestRealKillTask_OtherBootSignalsNothing(t *testing.T) {
	dir := stateDir(t)
	// The stranger: a process of this boot leading its own group, whose
	// pid and start time the (fake) log of another boot records.
	stranger := exec.Command(self(t), modeTask, "sleep", "stranger-"+dir)
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()
	pid := stranger.Process.Pid
	start, err := proc.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	id := fsm.Identity{PID: 1, StartTime: 1, BootID: "a-boot-before-this-one", Nonce: "nonce-of-the-last-boot"}
	r := &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}
	if err := r.KillTask(ctxT(t), "a", id, fsm.Proc{PID: pid, StartTime: start}); err != nil {
		t.Fatalf("KillTask of a task of another boot: %v, want nil (it is gone)", err)
	}
	var ws syscall.WaitStatus
	if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got != 0 {
		t.Fatalf("the process of this boot at the recorded pid and start time was signalled: %v", ws)
	}
}
