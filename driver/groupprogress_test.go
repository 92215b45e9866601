package driver

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// A group's driver tells its watcher (an agent's status) of a change of a
// task where the group's step stays the same: a restart its executor made,
// a run that became ready. Without it an agent's status keeps saying
// "running" with no restarts of a task restarted and ready.
func TestRunGroup_ProgressTellsARestartTheStepDoesNotShow(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	allocs := statedir.Layout{Dir: dir}.Alloc("g1")
	spec := taskSpec(t, dir, "exit-once", "3", filepath.Join(t.TempDir(), "once"))
	spec.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Mode: fsm.RestartFail}
	spec.Alloc = &fsm.Alloc{ID: "g1", Dir: allocs.Shared(), TaskDir: allocs.Task("web"), Tasks: []string{"web"}, Hook: fsm.HookMain}
	if _, err := d.CreateTask(ctxT(t), "web", spec); err != nil {
		t.Fatal(err)
	}
	// A restart with no delay shows within moments; 15 s is the bound
	// on a loaded host (not ctxT's minute: a planted bug here costs
	// make mutants its wait, twice).
	ctx, cancel := context.WithTimeout(ctxT(t), 15*time.Second)
	defer cancel()
	var restarted fsm.Task
	_, _ = d.RunGroup(ctx, []string{"web"}, false, func(p GroupProgress) {
		for _, x := range p.Tasks {
			if x.ID == "web" && x.Restarts == 1 && x.State == fsm.StateRunning {
				restarted = x
				cancel()
			}
		}
	})
	if restarted.ID == "" {
		t.Fatal("the group's progress never showed its task restarted once and running")
	}
	if _, err := d.StopTask(ctxT(t), "web", 0, 0); err != nil {
		t.Fatal(err)
	}
}
