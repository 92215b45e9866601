package proptest

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

var (
	crashPoints = driver.CrashPoints()
	faultPoints = driver.FaultPoints()
)

// drawPlan draws the faults and the crash of one step. Every draw shrinks
// towards "nothing injected". Half the injections name their point; the
// other half are the n-th point of the step whatever its name (Any), which
// fires whenever the step gets that far, where most named points are never
// reached by a given step.
func drawPlan(t *rapid.T) Plan {
	var p Plan
	point := func(names []string, label string) Point {
		if rapid.Bool().Draw(t, label+" named?") {
			return Point{rapid.SampledFrom(names).Draw(t, label), rapid.IntRange(1, 2).Draw(t, label+"#")}
		}
		return Point{Any, rapid.IntRange(1, 10).Draw(t, label+" at")}
	}
	if rapid.IntRange(0, 3).Draw(t, "crash?") == 3 {
		p.Crash = point(crashPoints, "crash")
	}
	for range rapid.IntRange(0, 2).Draw(t, "faults") {
		p.Faults = append(p.Faults, point(faultPoints, "fault"))
	}
	return p
}

// machine is the rapid state machine over a harness: a model of which
// tasks exist, and expectations of clean steps.
type machine struct {
	h     *Harness
	next  int
	steps *int
}

const maxTasks = 5

func (m *machine) tasks(t *rapid.T) string {
	ids := m.h.Tasks()
	if len(ids) == 0 {
		t.Skip("no task")
	}
	return rapid.SampledFrom(ids).Draw(t, "task")
}

func (m *machine) needAlive(t *rapid.T) {
	if !m.h.Alive() {
		t.Skip("agent is down")
	}
}

func (m *machine) stateOf(t *rapid.T, id string) fsm.State {
	info, err := m.h.Driver().InspectTask(t.Context(), id)
	if err != nil {
		t.Fatalf("inspect %q: %v", id, err)
	}
	return info.State
}

func (m *machine) kinds() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"start": func(t *rapid.T) {
			m.needAlive(t)
			if m.next >= maxTasks {
				t.Skip("enough tasks")
			}
			id := fmt.Sprintf("t%d", m.next)
			m.next++
			kind := rapid.SampledFrom([]string{"run", "run", "exit", "netraw", "invalid"}).Draw(t, "kind")
			s := m.h.Start(drawPlan(t), []string{id}, []fsm.Spec{SpecFor(kind)})
			t.Logf("start %s (%s): %+v", id, kind, s.Outcomes[0])
			if s.Clean() {
				err, st := s.Outcomes[0].Err, m.stateOf(t, id)
				switch {
				case kind == "run" && (err != nil || st != fsm.StateRunning):
					t.Fatalf("clean start of %s: %v, state %s; want running", id, err, st)
				case kind == "exit" && (err != nil || st != fsm.StateExited):
					// A quick task ran and exited before the start returned: a success.
					t.Fatalf("clean start of %s (exits at once): %v, state %s; want success, exited", id, err, st)
				case (kind == "netraw" || kind == "invalid") && (err == nil || st != fsm.StateFailed):
					t.Fatalf("clean start of %s (%s): %v, state %s; want an error, failed", id, kind, err, st)
				}
			}
		},
		"stop": func(t *rapid.T) {
			m.needAlive(t)
			id := m.tasks(t)
			s := m.h.Stop(drawPlan(t), id)
			t.Logf("stop %s: %+v", id, s.Outcomes[0])
			if s.Clean() {
				if err, st := s.Outcomes[0].Err, m.stateOf(t, id); err != nil || !st.Terminal() {
					t.Fatalf("clean stop of %s: %v, state %s; want terminal", id, err, st)
				}
			}
		},
		"destroy": func(t *rapid.T) {
			m.needAlive(t)
			id := m.tasks(t)
			s := m.h.Destroy(drawPlan(t), id)
			t.Logf("destroy %s: %+v", id, s.Outcomes[0])
			if s.Clean() {
				if err, st := s.Outcomes[0].Err, m.stateOf(t, id); err != nil || !st.Terminal() {
					t.Fatalf("clean destroy of %s: %v, state %s; want terminal", id, err, st)
				}
			}
		},
		"signal": func(t *rapid.T) {
			m.needAlive(t)
			id := m.tasks(t)
			sig := rapid.SampledFrom([]syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM}).Draw(t, "sig")
			s := m.h.Signal(drawPlan(t), id, sig)
			t.Logf("signal %s %s: %+v", id, sig, s.Outcomes[0])
		},
		"task exits": func(t *rapid.T) {
			var tasks []string
			for _, p := range m.h.World.Live() {
				if p.Kind == KindTask {
					tasks = append(tasks, p.Task)
				}
			}
			if len(tasks) == 0 {
				t.Skip("no live task process")
			}
			id := rapid.SampledFrom(tasks).Draw(t, "task")
			code := rapid.IntRange(0, 2).Draw(t, "code")
			m.h.Behind(drawPlan(t), func(w *World) { w.ExitTask(id, code) })
			t.Logf("task %s exits %d", id, code)
		},
		"executor dies": func(t *rapid.T) {
			var pids []int
			for _, p := range m.h.World.Live() {
				if p.Kind == KindExecutor {
					pids = append(pids, p.PID)
				}
			}
			if len(pids) == 0 {
				t.Skip("no live executor")
			}
			pid := rapid.SampledFrom(pids).Draw(t, "pid")
			m.h.Behind(drawPlan(t), func(w *World) { w.KillProc(pid) })
			t.Logf("executor pid %d killed behind the driver's back", pid)
		},
		"pid reuse": func(t *rapid.T) {
			pids := m.h.World.ReusablePIDs()
			if len(pids) == 0 {
				t.Skip("no dead pid")
			}
			pid := rapid.SampledFrom(pids).Draw(t, "pid")
			if rapid.Bool().Draw(t, "look-alike") {
				m.h.World.ReusePIDLookAlike(pid)
				t.Logf("pid %d reused by a look-alike stranger (same nonce, new start time)", pid)
			} else {
				m.h.World.ReusePID(pid)
				t.Logf("pid %d reused by a stranger", pid)
			}
		},
		"crash": func(t *rapid.T) {
			m.needAlive(t)
			m.h.Crash()
			t.Logf("agent crashed while idle")
		},
		"restart": func(t *rapid.T) {
			m.needAlive(t)
			if err := m.h.Restart(); err != nil {
				t.Fatalf("restart: %v", err)
			}
			m.recover(t)
		},
		"recover": func(t *rapid.T) {
			m.recover(t)
		},
	}
}

// applicable lists the actions that apply now, most basic first (rapid
// shrinks towards the first), starts and recoveries weighted up. Drawing
// among applicable actions, rather than skipping inapplicable ones, keeps
// every step useful and counterexamples short.
func (m *machine) applicable() []string {
	var out []string
	alive := m.h.Alive()
	if alive && m.next < maxTasks {
		out = append(out, "start", "start", "start")
	}
	if !alive {
		out = append(out, "recover", "recover", "recover")
	}
	if alive && len(m.h.Tasks()) > 0 {
		out = append(out, "stop", "destroy", "signal")
	}
	var tasks, execs bool
	for _, p := range m.h.World.Live() {
		tasks = tasks || p.Kind == KindTask
		execs = execs || p.Kind == KindExecutor
	}
	if tasks {
		out = append(out, "task exits")
	}
	if execs {
		out = append(out, "executor dies")
	}
	if len(m.h.World.ReusablePIDs()) > 0 {
		out = append(out, "pid reuse")
	}
	if alive {
		out = append(out, "crash", "recover", "restart")
	}
	return out
}

func (m *machine) actions() map[string]func(*rapid.T) {
	kinds := m.kinds()
	return map[string]func(*rapid.T){
		"step": func(t *rapid.T) {
			kinds[rapid.SampledFrom(m.applicable()).Draw(t, "action")](t)
		},
		"": func(t *rapid.T) {
			*m.steps++
			m.h.Check(t)
		},
	}
}

func (m *machine) recover(t *rapid.T) {
	s, err := m.h.Recover(drawPlan(t))
	if err != nil {
		t.Fatalf("open a new generation: %v", err)
	}
	t.Logf("recover (generation %d): %+v crashed=%v fired=%v", m.h.Generation(), s.Outcomes[0], s.Crashed, s.Fired)
	if s.Clean() {
		if err := s.Outcomes[0].Err; err != nil {
			t.Fatalf("clean Recover failed: %v", err)
		}
		m.h.CheckRecovered(t)
	}
}

// TestDriver_Properties is the state-machine property test of the driver
// over the simulated world: random starts, stops, destroys, signals, task
// exits, executor deaths, pid reuse, crashes (idle, at a drawn crash point,
// during Recover) and faults at every effect and append, with the design's
// invariants checked after every step. RAPID_CHECKS / -rapid.checks sets
// the number of checks; failures are kept under testdata/rapid.
func TestDriver_Properties(t *testing.T) {
	dir := scratch(t)
	checks, steps := 0, 0
	began := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		sub, err := os.MkdirTemp(dir, "case")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(sub)
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := &machine{h: New(rt, sub), steps: &steps}
			m.h.World.SetLease(rapid.Bool().Draw(rt, "lease"))
			defer func() {
				if err := m.h.Close(); err != nil {
					rt.Errorf("close: %v", err)
				}
			}()
			rt.Repeat(m.actions())
		})
	})
	el := time.Since(began)
	t.Logf("%d checks, %d steps in %s: %.0f checks/s, %.0f steps/s", checks, steps, el.Round(time.Millisecond),
		float64(checks)/el.Seconds(), float64(steps)/el.Seconds())
}
