package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
)

// The copy that follows an ended copy (copyOf): the same tasks by name in
// the same allocation, each linked to the task it replaces, with ids
// derived from the allocation and the new generation, so that deciding it
// again (a driver killed between the decision and the start, or between
// two of its tasks' records) makes the same copy, never a second one.
func TestCopyOf_IDsDeriveFromTheAllocationAndGeneration(t *testing.T) {
	const alloc = "3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
	r := fsm.ReschedulePolicy{Attempts: 3, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: fsm.DelayConstant}
	restart := fsm.RestartPolicy{Attempts: 0, Interval: time.Hour, Mode: fsm.RestartFail}
	ids := []string{"init-1", "web-1"}
	mk := func(id, name string, hook fsm.Hook, exit int) fsm.Task {
		return fsm.Task{ID: id, State: fsm.StateExited, Exit: &fsm.ExitStatus{Code: exit}, UpdatedAt: now, Nonce: "n",
			Executor: &fsm.Identity{PID: 10, BootID: boot},
			Spec:     &fsm.Spec{Name: name, Restart: &restart, Alloc: &fsm.Alloc{ID: alloc, Tasks: ids, Hook: hook, Generation: 2, Reschedule: &r}}}
	}
	from := []fsm.Task{mk("init-1", "init", fsm.HookPrestart, 0), mk("web-1", "web", fsm.HookMain, 3)}
	end := fsm.GroupState{Tasks: from}.End(boot)
	next := fsm.NextCopy(end, allocOf(from), restartOf(from, end.Task))
	if !next.Again || !next.Rescheduled {
		t.Fatalf("a failed copy under a reschedule policy: %+v (end %+v)", next, end)
	}
	group, c, err := copyOf(from, next, end)
	if err != nil {
		t.Fatal(err)
	}
	again, c2, err := copyOf(from, next, end)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{job.CopyTaskID("init", alloc, 3), job.CopyTaskID("web", alloc, 3)}
	if !slices.Equal(c.Tasks, want) || !slices.Equal(c2.Tasks, want) {
		t.Errorf("the next copy's ids: %v, then %v; want %v (derived, the same each time)", c.Tasks, c2.Tasks, want)
	}
	if c.Kind != CopyReschedule || c.Generation != 3 || c.NotBefore.UnixNano() != next.Alloc.NotBefore || !slices.Equal(c.Replaces, ids) {
		t.Errorf("the copy: %+v", c)
	}
	for i, g := range group {
		if g.ID != want[i] || g.Replaces != ids[i] || g.Spec.Name != from[i].Spec.Name || g.Spec.Alloc.ID != alloc ||
			g.Spec.Alloc.Generation != 3 || !slices.Equal(g.Spec.Alloc.Tasks, want) || len(g.Spec.Alloc.Rescheduled) != 1 {
			t.Errorf("task %d of the copy: %+v", i, g)
		}
		if g.Spec.Alloc == from[i].Spec.Alloc || g.Spec.Alloc.Hook != from[i].Spec.Alloc.Hook {
			t.Errorf("task %d: its allocation is the old task's, or another hook", i)
		}
		if again[i].ID != g.ID {
			t.Errorf("task %d: %s, then %s", i, g.ID, again[i].ID)
		}
	}
	// A copy missing some of its tasks (gc) cannot be copied.
	if _, _, err := copyOf(from[1:], next, end); err == nil {
		t.Errorf("a copy with a task gone was copied")
	}
}
