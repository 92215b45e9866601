package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
)

// killFloor is the irreducible work of a kill in tether's design, done by
// hand: the durable record that demands the kill, SIGKILL to everything of
// the task and the wait until it is all gone, the executor's SIGKILL and
// wait, and the durable record of the outcome.
//
// With a task in a cgroup (task non-nil) everything of it is killed the
// cheapest way the host allows: on cgroup2 (here the hybrid host's unified
// hierarchy) one write of cgroup.kill, then a wait on the task's pidfd
// (a member leaves the cgroup when it exits), the reap, and rmdir of the
// cgroup in every hierarchy; where there is no cgroup.kill, the cgroup
// package's freeze-and-kill.
func killFloor(b *testing.B, steps *benchkit.BoltSteps, h *benchkit.Helper, task *benchkit.Contained, unifiedKill string) {
	steps.Append(b) // stop-requested, or launch-failed
	if task != nil {
		if unifiedKill != "" {
			fd, err := unix.PidfdOpen(task.Cmd.Process.Pid, 0)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(unifiedKill, []byte("1"), 0); err != nil {
				b.Fatal(err)
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(pfd, -1); !errors.Is(err, unix.EINTR) {
					break
				}
			}
			unix.Close(fd)
			_ = task.Cmd.Wait()
			if err := task.Cgroup.Remove(); err != nil {
				b.Fatal(err)
			}
		} else {
			task.Kill(b)
		}
	}
	_ = h.Cmd.Process.Kill()
	_ = h.Cmd.Wait()
	h.RPC.Close()
	steps.Append(b) // executor-reaped
}

// BenchmarkKill: tether's kill against killFloor, interleaved, each
// sample after settle (untimed: the start before it).
//
//   - running: StopTask(SIGKILL) of a running raw_exec task in its cgroup
//     (stop-requested appended, the executor's Stop kills the cgroup,
//     confirms it empty and removes it, the executor is dismissed: killed
//     through the pidfd on its proven identity and confirmed dead,
//     executor-reaped appended); against the floor with a task in a cgroup.
//   - after-executor-up: from a fault injected into the launch-task
//     effect (the seed's path: nothing launched, so no cgroup) to
//     StartTask's return after launch-failed, the executor's kill by
//     identity and executor-reaped; against the floor without a task.
//
// Target: ratio <= 2.
func BenchmarkKill(b *testing.B) {
	host, cg := contained()
	exe, helper := bin(b, "tether-executor"), bin(b, "minhelper")
	unifiedKill := func(c *benchkit.Contained) string {
		if u, ok := host.Unified(); ok && u.Kill {
			return c.Cgroup.Dirs()[u.Key] + "/cgroup.kill"
		}
		return ""
	}
	b.Run("running", func(b *testing.B) {
		if !cg {
			b.Skip("needs task cgroups (root and a usable cgroup layout)")
		}
		dir := filepath.Join(b.TempDir(), "state")
		ph := newProbes()
		d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{exe}, KillTimeout: time.Second, Hooks: driver.Hooks{Crash: ph.hit}})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		steps := benchkit.OpenBoltSteps(b, dir, "floor.db")
		spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
		ctx := context.Background()
		tether := func(i int) float64 {
			id := "kill-" + strconv.Itoa(i+2)
			st, err := d.StartTask(ctx, id, spec)
			if err != nil || st.State != fsm.StateRunning || st.Executor == nil || st.Executor.Cgroup == "" {
				b.Fatalf("StartTask: %v (%s), executor %+v", err, st.State, st.Executor)
			}
			settle(b)
			ph.reset()
			t0 := time.Now()
			st, err = d.StopTask(ctx, id, syscall.SIGKILL, time.Second)
			el := since(t0)
			if err != nil || st.State != fsm.StateStopped {
				b.Fatalf("StopTask = %s, %v", st.State, err)
			}
			ph.span("kill-effect", "before-effect:kill-executor", "after-effect:kill-executor")
			return el
		}
		floor := func(i int) float64 {
			hdir := filepath.Join(dir, "floor", strconv.Itoa(i+2))
			if err := os.MkdirAll(hdir, 0o700); err != nil {
				b.Fatal(err)
			}
			h := benchkit.StartHelper(b, helper, hdir)
			task := benchkit.StartContained(b, host, "killfloor-"+strconv.Itoa(i+2), fmt.Sprintf("killfloor%08d", i+2), append([]string{taskBinary}, taskArgs...)...)
			settle(b)
			t0 := time.Now()
			killFloor(b, steps, h, task, unifiedKill(task))
			return since(t0)
		}
		floor(-1)
		tether(-1)
		ph.clear()
		b.ResetTimer()
		p := interleave(b, tether, floor)
		p.reportMs(b, "tether", "floor", true)
		ph.report(b)
	})
	b.Run("after-executor-up", func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "state")
		var faultAt time.Time
		errFault := errors.New("bench: launch fails")
		ph := newProbes()
		d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{exe}, KillTimeout: time.Second,
			Hooks: driver.Hooks{Crash: ph.hit, Fault: func(point, _ string) error {
				if point == "effect:launch-task" {
					faultAt = time.Now()
					return errFault
				}
				return nil
			}}})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		steps := benchkit.OpenBoltSteps(b, dir, "floor.db")
		spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
		ctx := context.Background()
		tether := func(i int) float64 {
			ph.reset()
			st, err := d.StartTask(ctx, "kill-"+strconv.Itoa(i+2), spec)
			el := time.Since(faultAt).Seconds()
			if !errors.Is(err, errFault) || st.State != fsm.StateFailed {
				b.Fatalf("StartTask = %s, %v; want failed with the injected fault", st.State, err)
			}
			ph.span("append-launch-failed", "before-append:launch-failed", "after-append:launch-failed")
			ph.span("kill-effect", "before-effect:kill-executor", "after-effect:kill-executor")
			ph.span("append-executor-reaped", "before-append:executor-reaped", "after-append:executor-reaped")
			return el
		}
		floor := func(i int) float64 {
			hdir := filepath.Join(dir, "floor", strconv.Itoa(i+2))
			if err := os.MkdirAll(hdir, 0o700); err != nil {
				b.Fatal(err)
			}
			h := benchkit.StartHelper(b, helper, hdir)
			t0 := time.Now()
			killFloor(b, steps, h, nil, "")
			return since(t0)
		}
		floor(-1)
		tether(-1)
		ph.clear()
		b.ResetTimer()
		p := interleave(b, tether, floor)
		p.reportMs(b, "tether", "floor", true)
		ph.report(b)
	})
}
