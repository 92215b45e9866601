//go:build linux

package executor

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// TestKillTask_UnlaunchedCompleteByItsCgroup: KillTask of a task that
// launched nothing (run zero) is complete by the task's cgroup alone once
// its executor is dead, and never otherwise:
//   - the executor dead and its cgroup never made: nothing to kill, nil;
//   - the executor dead and its cgroup there but empty: removed, nil;
//   - the executor dead and its cgroup holding a process (a launch
//     nobody recorded): that process is killed and the cgroup removed;
//   - the executor alive: it is killed, and KillTask returns once it is
//     dead (its cgroup's absence proves nothing while it can still fork).
func TestKillTask_UnlaunchedCompleteByItsCgroup(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	defer checkLeaks(t, m)
	// An executor that launched nothing: its identity (and the cgroup it
	// announced, not made) as a driver records it.
	unlaunched := func(t *testing.T) (*Real, string, *Client, fsm.Identity) {
		stateDir := t.TempDir()
		r := &Real{StateDir: stateDir}
		if err := os.MkdirAll(filepath.Dir(r.dir("web")), 0o700); err != nil {
			t.Fatal(err)
		}
		c := spawn(t, m, r.dir("web"))
		id := c.Identity()
		if id.Cgroup == "" {
			t.Fatalf("the executor announced no cgroup: %+v", id)
		}
		return r, "web", c, id
	}
	dismissed := func(t *testing.T) (*Real, string, fsm.Identity) {
		r, task, c, id := unlaunched(t)
		if err := c.Dismiss(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		return r, task, id
	}
	makeCgroup := func(t *testing.T, id fsm.Identity) *cgroup.Cgroup {
		loc, err := cgroup.ParseLocation(id.Cgroup)
		if err != nil {
			t.Fatal(err)
		}
		cg, err := cgroup.Create(h, loc, cgroup.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return cg
	}

	t.Run("executor dead, no cgroup", func(t *testing.T) {
		r, task, id := dismissed(t)
		if err := r.KillTask(testCtx(t), task, id, fsm.Proc{}); err != nil {
			t.Fatalf("KillTask: %v", err)
		}
	})
	t.Run("executor dead, empty cgroup", func(t *testing.T) {
		r, task, id := dismissed(t)
		cg := makeCgroup(t, id)
		if err := r.KillTask(testCtx(t), task, id, fsm.Proc{}); err != nil {
			t.Fatalf("KillTask: %v", err)
		}
		checkGone(t, cg)
	})
	t.Run("executor dead, a process in the cgroup", func(t *testing.T) {
		r, task, id := dismissed(t)
		cg := makeCgroup(t, id)
		stray := exec.Command(testBinary(t), "task", m.arg(), "sleep")
		if err := stray.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = stray.Process.Kill(); _ = stray.Wait() }()
		if err := cg.Add(stray.Process.Pid); err != nil {
			t.Fatal(err)
		}
		start, err := proc.StartTime(stray.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.KillTask(testCtx(t), task, id, fsm.Proc{}); err != nil {
			t.Fatalf("KillTask: %v", err)
		}
		_ = stray.Wait() // reaped: it is dead, or the test times out
		if alivePID(stray.Process.Pid, start) {
			t.Fatal("the process in the task's cgroup outlived KillTask")
		}
		checkGone(t, cg)
	})
	t.Run("executor alive", func(t *testing.T) {
		r, task, c, id := unlaunched(t)
		defer c.Close()
		if err := r.KillTask(testCtx(t), task, id, fsm.Proc{}); err != nil {
			t.Fatalf("KillTask: %v", err)
		}
		if alive, err := proc.Alive(id); err != nil || alive {
			t.Fatalf("the executor is alive (%v) after KillTask of its task: %v", alive, err)
		}
	})
}
