package proptest

import (
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

// Regression tests for bugs the property tests found in driver/. Each
// names the bug; the fix is described in its comment.

// TestDriver_StartAppendsLaunchIntent: no code in driver/ ever appends
// launch-intent. fsm owes no effect in executor-up (the design's table: the
// launch intent comes next), so runEffects finds nothing pending after
// executor-up, StartTask returns ErrStartFailed "ended executor-up", and the
// spawned executor stays alive with the task in executor-up (an executor
// the caller was told failed, alive until Close drops its lease).
// Shrunk counterexample: one step, start.
//
// Fix (driver/loop.go): in runEffects, when fsm.Pending(st) is empty and
// st.State == fsm.StateExecutorUp, apply d.event(fsm.EventLaunchIntent) and
// continue; in drive, keep looping while the state is executor-up.
func TestDriver_StartAppendsLaunchIntent(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		s := h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		if err := s.Outcomes[0].Err; err != nil {
			t.Errorf("StartTask: %v", err)
		}
		if got := state(t, h, "a"); got != fsm.StateRunning {
			t.Errorf("state %s after a clean start, want running", got)
		}
		h.Check(t)
	})
}

// TestDriver_InspectReportsTaskID: a task started by this driver has an
// empty ID in InspectTask (and in StartTask's result), while the store's
// fold has it: fold(log) != live state. Shrunk counterexample: one step,
// start (any outcome).
//
// Fix (driver/driver.go newTask): initialise state to fsm.Task{ID: id}.
func TestDriver_InspectReportsTaskID(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("invalid")})
		info, err := h.Driver().InspectTask(t.Context(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if info.ID != "a" {
			t.Errorf("InspectTask(%q).ID = %q", "a", info.ID)
		}
	})
}

// TestDriver_RecoverDrivesASupervisedTaskThatOwesAKill: a stop whose kill
// effect faults, and whose kill-failed append faults too, leaves the task
// in reaping with its supervisor still waiting; Recover on the same driver
// skipped it as "already supervised", so its executor lived on. Shrunk
// counterexample (5,000 checks): start, stop with both faults, recover.
//
// Fix (driver/recover.go recoverTask): skip a supervised task only when it
// owes nothing.
func TestDriver_RecoverDrivesASupervisedTaskThatOwesAKill(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		h.Stop(Plan{Faults: []Point{{Name: "effect:kill-executor", Nth: 1}, {Name: "append:kill-failed", Nth: 1}}}, "a")
		if got := state(t, h, "a"); got != fsm.StateReaping {
			t.Fatalf("state %s after the faulted stop, want reaping", got)
		}
		if _, err := h.Recover(Plan{}); err != nil {
			t.Fatal(err)
		}
		if got := state(t, h, "a"); !got.Terminal() {
			t.Errorf("state %s after Recover, want terminal", got)
		}
		h.CheckRecovered(t)
	})
}
