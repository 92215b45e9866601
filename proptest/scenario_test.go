package proptest

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// within runs fn with a fresh harness inside a synctest bubble.
func within(t *testing.T, fn func(t *testing.T, h *Harness)) {
	t.Helper()
	dir := scratch(t)
	synctest.Test(t, func(t *testing.T) {
		h := New(t, dir)
		defer func() {
			if err := h.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}()
		fn(t, h)
	})
}

func state(t *testing.T, h *Harness, id string) fsm.State {
	t.Helper()
	info, err := h.Driver().InspectTask(t.Context(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return info.State
}

func TestHarness_StartStop(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		s := h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		if err := s.Outcomes[0].Err; err != nil {
			t.Fatalf("start: %v", err)
		}
		h.Check(t)
		if got := state(t, h, "a"); got != fsm.StateRunning {
			t.Fatalf("state %s, want running", got)
		}
		if n := len(h.World.Live()); n != 2 {
			t.Fatalf("%d live processes, want executor and task", n)
		}
		s = h.Stop(Plan{}, "a")
		if err := s.Outcomes[0].Err; err != nil {
			t.Fatalf("stop: %v", err)
		}
		h.Check(t)
		if got := state(t, h, "a"); got != fsm.StateStopped {
			t.Fatalf("state %s, want stopped", got)
		}
		if n := len(h.World.Live()); n != 0 {
			t.Fatalf("%d live processes after stop", n)
		}
	})
}

// The seed of the design (Nomad issue 11958): the executor is spawned, then
// refuses cap_add net_raw; it must not be leaked.
func TestHarness_SeedCapRefusedLeavesNothing(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		s := h.Start(Plan{}, []string{"seed"}, []fsm.Spec{SpecFor("netraw")})
		if err := s.Outcomes[0].Err; !errors.Is(err, driver.ErrStartFailed) {
			t.Fatalf("start: %v, want ErrStartFailed", err)
		}
		h.Check(t)
		if got := state(t, h, "seed"); got != fsm.StateFailed {
			t.Fatalf("state %s, want failed", got)
		}
		if live := h.World.Live(); len(live) != 0 {
			t.Fatalf("leaked: %+v", live)
		}
	})
}

// A crash right after executor-up (recorded with its launch intent) leaves
// a task in launching. Without the lease its executor lives on, has not
// launched, and is killed: the start was interrupted (failed). With the
// lease it has exited by itself, so nobody can say whether it launched:
// the task is lost, its group killed.
func TestHarness_CrashAfterExecutorUpRecovers(t *testing.T) {
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				h.World.SetLease(lease)
				s := h.Start(Plan{Crash: Point{"after-append:executor-up", 1}}, []string{"a"}, []fsm.Spec{SpecFor("run")})
				if !s.Crashed || !s.Outcomes[0].Died {
					t.Fatalf("crash did not fire: %+v", s)
				}
				h.Check(t)
				r, err := h.Recover(Plan{})
				if err != nil || r.Outcomes[0].Err != nil {
					t.Fatalf("recover: %v %v", err, r.Outcomes[0].Err)
				}
				h.CheckRecovered(t)
				want := fsm.StateFailed
				if lease {
					want = fsm.StateLost
				}
				if got := state(t, h, "a"); got != want {
					t.Fatalf("state %s, want %s", got, want)
				}
			})
		})
	}
}
