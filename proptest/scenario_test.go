package proptest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

// The simulated identity check refuses a wrong pid start time, nonce or
// boot id, each alone: nothing is signalled, nothing reattached, and the
// executor is not alive by that identity.
func TestWorld_IdentityCheckedOnEveryField(t *testing.T) {
	ctx := context.Background()
	w := NewWorld()
	g := w.NewGeneration(1)
	ex := w.View(g)
	defer g.Kill()
	h, err := ex.Spawn(ctx, "web", "nonce-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Launch(ctx, SpecFor("run")); err != nil {
		t.Fatal(err)
	}
	id := h.Identity()
	for name, fake := range map[string]fsm.Identity{
		"start time": {PID: id.PID, StartTime: id.StartTime + 1, BootID: id.BootID, Nonce: id.Nonce},
		"nonce":      {PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, Nonce: "nonce-2"},
		"boot id":    {PID: id.PID, StartTime: id.StartTime, BootID: "boot-0", Nonce: id.Nonce},
	} {
		if alive, err := ex.Alive(ctx, "web", fake); alive || err != nil {
			t.Errorf("%s: Alive = %v %v, want false", name, alive, err)
		}
		if _, err := ex.Reattach(ctx, "web", fake); err == nil {
			t.Errorf("%s: Reattach succeeded", name)
		}
		if err := ex.Kill(ctx, "web", fake); err != nil && !errors.Is(err, driver.ErrNotOurs) {
			t.Errorf("%s: Kill = %v", name, err)
		}
	}
	if n := len(w.Signals()); n != 0 {
		t.Fatalf("%d signals sent on identities that are not the executor's: %+v", n, w.Signals())
	}
	if err := ex.Kill(ctx, "web", id); err != nil || len(w.Signals()) != 1 {
		t.Fatalf("Kill by the real identity: %v, %d signals", err, len(w.Signals()))
	}
}

// After a reboot, a process of the new boot at every pid the log records,
// with the recorded start time and nonce, is told apart by the boot id
// alone: recovery signals none of them (see
// TestRealKillTask_OtherBootSignalsNothing for the bug this found).
func TestHarness_RebootLookAlikesAreNeverSignalled(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cg), func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				h.World.SetCgroups(cg)
				h.Start(Plan{}, []string{"a", "b"}, []fsm.Spec{SpecFor("run"), SpecFor("setsid")})
				h.Reboot(true)
				if _, err := h.Recover(Plan{}); err != nil {
					t.Fatal(err)
				}
				h.CheckRecovered(t)
				for _, id := range []string{"a", "b"} {
					if got := state(t, h, id); got != fsm.StateLost {
						t.Errorf("task %s is %s after the reboot, want lost", id, got)
					}
				}
			})
		})
	}
}

// A host without cgroups cannot contain a descendant that left its task's
// process group once the executor is gone: it outlives the task, and the
// harness says so (Escapes) rather than blaming the driver. With cgroups,
// nothing of the task is left.
func TestHarness_EscapesOutliveTheirTaskOnlyWithoutCgroups(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cg), func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				h.World.SetCgroups(cg)
				h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("setsid")})
				h.Behind(Plan{}, func(w *World) { w.KillExecutors() })
				h.Check(t)
				if got := state(t, h, "a"); got != fsm.StateLost {
					t.Fatalf("state %s after its executor died, want lost", got)
				}
				var alive []string
				for _, p := range h.World.Live() {
					alive = append(alive, describe(p))
				}
				switch {
				case cg && len(alive) > 0:
					t.Errorf("with cgroups, alive after the task was lost: %v", alive)
				case !cg && (len(alive) != 1 || len(h.Escapes()) != 1):
					t.Errorf("without cgroups: alive %v, escapes reported %v; want the setsid child in both", alive, h.Escapes())
				}
			})
		})
	}
}

// Every scenario prints as a seed that parses back to it: its flags, its
// executors' death point, its hanging and store faults.
func TestScenario_RoundTrip(t *testing.T) {
	for _, sc := range []Scenario{
		{Op: "start:setsid", Tasks: 2, Cgroups: true, DieBetween: true,
			Plan:    Plan{Crash: Point{"after-effect:launch-task", 1}, Die: Point{Any, 7}, Faults: []Point{{"world:stop" + HangSuffix, 1}}},
			Recover: Plan{Faults: []Point{{"store:lost-ack:executor-reaped", 2}}}},
		{Op: "recover:launched", Tasks: 1, NoLease: true, RebootBetween: true, Bolt: true},
		{Op: "race:run", Tasks: 3, Plan: Plan{Faults: []Point{{"store:fail:launched", 1}, {Any, 3}, {Any + HangSuffix, 4}}}},
		{Op: "race:exit", Tasks: 2, Plan: Plan{Delays: []int{7, 0}, Order: []Switch{{At: 3, Pick: 1}, {At: 9, Pick: 2}}},
			Recover: Plan{Die: Point{Any, 2}, Order: []Switch{{At: 1, Pick: 0}}}},
	} {
		got, err := ParseScenario(sc.String())
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		if got.String() != sc.String() || !reflect.DeepEqual(got, sc) {
			t.Errorf("round trip: %q -> %+v, want %+v", sc, got, sc)
		}
	}
	for _, bad := range []string{"start:run x1 nolaese | op crash=- faults=[] | recover crash=- faults=[]", "fly x1 | op crash=- faults=[] | recover crash=- faults=[]",
		"race:run x1 | op crash=- faults=[] order=[3] | recover crash=- faults=[]", "race:run x1 | op crash=- faults=[] delays=[x] | recover crash=- faults=[]"} {
		if _, err := ParseScenario(bad); !errors.Is(err, ErrBadScenario) {
			t.Errorf("ParseScenario(%q) = %v, want ErrBadScenario", bad, err)
		}
	}
}

// An executor that dies right after it relaunched its task
// (executor:after-relaunch) leaves a run whose pid nothing recorded: the
// executor writes its launch record and journals it only after that point.
// Where the host has cgroups the task's cgroup still holds the run and the
// driver kills it; without cgroups it outlives the task, and the harness
// says so (Escapes). (An executor that recorded the run before letting it
// run its first instruction, as the launch's init shim could, would leave
// nothing behind on either host.)
func TestHarness_UnrecordedRelaunchOutlivesItsTaskOnlyWithoutCgroups(t *testing.T) {
	for _, cg := range []bool{false, true} {
		t.Run(fmt.Sprintf("cgroups=%v", cg), func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				h.World.SetCgroups(cg)
				s := h.Start(Plan{Crash: Point{"executor:after-relaunch", 1}}, []string{"a"}, []fsm.Spec{SpecFor("restart")})
				if !s.Crashed {
					t.Fatalf("the executor's crash did not fire: %+v", s)
				}
				h.Check(t)
				if got := state(t, h, "a"); !got.Terminal() {
					t.Fatalf("state %s after its executor died, want terminal", got)
				}
				live := h.World.Live()
				switch {
				case cg && len(live) > 0:
					t.Errorf("with cgroups, alive after the task ended: %v", live)
				case !cg && (len(live) != 1 || len(h.Escapes()) != 1):
					t.Errorf("without cgroups: alive %v, reported %v; want the unrecorded run in both", live, h.Escapes())
				}
			})
		})
	}
}
