package proptest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"
)

var (
	// crashPoints are the points a plan names: every crash point (the
	// executor's on its readiness path among them: a step that starts a
	// notify task reaches them).
	crashPoints = CrashPoints()
	faultDraws  = drawnFaultPoints()
)

// drawPlan draws the faults, the crash and the executor deaths of one step,
// and now and then a switch of the order of its turns. Every draw shrinks
// towards "nothing injected" and the default order. Half the injections
// name their point; the other half are the n-th point of the step whatever
// its name (Any), which fires whenever the step gets that far, where most
// named points are never reached by a given step. n ranges over every
// point a step has reached so far in this check (Harness.Longest), so that
// a crash can land on the last point of the longest start or recovery; a
// switch over every turn (Harness.Turns).
func drawPlan(t *rapid.T, h *Harness) Plan {
	p := drawPlanOf(t, max(18, h.Longest()+2), crashPoints, faultDraws)
	for i, f := range p.Faults {
		// The n-th fault point whatever its name hangs where it can (a
		// world operation), as often as it fails.
		if f.Name == Any && rapid.Bool().Draw(t, "hang where it can?") {
			p.Faults[i].Name = Any + HangSuffix
		}
	}
	if rapid.IntRange(0, 3).Draw(t, "reorder?") == 3 {
		p.Order = drawOrder(t, h)
	}
	return p
}

// turnReach is how far a drawn turn ranges: every turn of the longest
// step so far.
func turnReach(h *Harness) int { return max(24, h.Turns()+2) }

// drawOrder draws one or two switches of the order of a step's turns.
func drawOrder(t *rapid.T, h *Harness) []Switch {
	var out []Switch
	for range rapid.IntRange(1, 2).Draw(t, "switches") {
		out = append(out, Switch{At: rapid.IntRange(1, turnReach(h)).Draw(t, "switch at"), Pick: rapid.IntRange(1, 3).Draw(t, "switch to")})
	}
	return out
}

// drawPlanOf draws a plan over the given points, the n-th of a step
// ranging up to reach.
func drawPlanOf(t *rapid.T, reach int, crashPoints, faultDraws []string) Plan {
	var p Plan
	point := func(names []string, label string, reach int) Point {
		if rapid.Bool().Draw(t, label+" named?") {
			return Point{rapid.SampledFrom(names).Draw(t, label), rapid.IntRange(1, 3).Draw(t, label+"#")}
		}
		return Point{Any, rapid.IntRange(1, reach).Draw(t, label+" at")}
	}
	if len(crashPoints) > 0 {
		if rapid.IntRange(0, 3).Draw(t, "crash?") == 3 {
			p.Crash = point(crashPoints, "crash", reach)
		}
		if rapid.IntRange(0, 7).Draw(t, "executors die?") == 7 {
			p.Die = point(crashPoints, "die", reach)
		}
	}
	for range rapid.IntRange(0, 2).Draw(t, "faults") {
		p.Faults = append(p.Faults, point(faultDraws, "fault", 12))
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

// startKinds are the task kinds a start draws from.
var startKinds = []string{"run", "run", "exit", "netraw", "invalid", "fork", "setsid", "daemon", "restart", "service", "ready", "ready service"}

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

func (m *machine) info(t *rapid.T, id string) fsm.Task {
	info, err := m.h.Driver().InspectTask(t.Context(), id)
	if err != nil {
		t.Fatalf("inspect %q: %v", id, err)
	}
	return info.Task
}

func (m *machine) newID() string {
	id := fmt.Sprintf("t%d", m.next)
	m.next++
	return id
}

// startCallFor is the start of a task of kind as tether start makes it: a
// notify task's waits for its readiness (StartReadyCall).
func startCallFor(id, kind string) Call {
	if strings.HasPrefix(kind, "ready") {
		return StartReadyCall(id, SpecFor(kind))
	}
	return StartCall(id, SpecFor(kind))
}

// expectStart holds what a clean start of kind must do.
func (m *machine) expectStart(t *rapid.T, id, kind string, err error) {
	st := m.stateOf(t, id)
	switch kind {
	case "run", "fork", "setsid", "daemon", "service":
		if err != nil || st != fsm.StateRunning {
			t.Fatalf("clean start of %s (%s): %v, state %s; want running", id, kind, err, st)
		}
	case "ready", "ready service":
		// A notify task's start returns once its run is recorded ready.
		if info := m.info(t, id); err != nil || info.State != fsm.StateRunning || !info.Ready {
			evs, _ := m.h.Driver().TaskEvents(t.Context(), id)
			j, _ := m.h.World.JournalOf(id)
			t.Fatalf("clean start of %s (%s): %v, state %s ready %v; want running and ready\nlog %v\njournal %v", id, kind, err, info.State, info.Ready, evs, j)
		}
	case "restart":
		// It failed at once; its executor restarted it twice (the
		// delays pass within the step), then it ended for good.
		if info := m.info(t, id); err != nil || info.State != fsm.StateExited || info.Restarts != 2 {
			t.Fatalf("clean start of %s (fails, restarted twice): %v, state %s after %d restarts; want success, exited after 2", id, err, info.State, info.Restarts)
		}
	case "exit":
		// A quick task ran and exited before the start returned: a success.
		if err != nil || st != fsm.StateExited {
			t.Fatalf("clean start of %s (exits at once): %v, state %s; want success, exited", id, err, st)
		}
	case "netraw", "invalid":
		if err == nil || st != fsm.StateFailed {
			t.Fatalf("clean start of %s (%s): %v, state %s; want an error, failed", id, kind, err, st)
		}
	}
}

func (m *machine) kinds() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"start": func(t *rapid.T) {
			m.needAlive(t)
			if m.next >= maxTasks {
				t.Skip("enough tasks")
			}
			id := m.newID()
			kind := rapid.SampledFrom(startKinds).Draw(t, "kind")
			s := m.h.Run(drawPlan(t, m.h), startCallFor(id, kind))
			t.Logf("start %s (%s): %+v fired=%v", id, kind, s.Outcomes[0], s.Fired)
			if s.Clean() {
				m.expectStart(t, id, kind, s.Outcomes[0].Err)
			}
		},
		"adopt": func(t *rapid.T) {
			if m.next >= maxTasks {
				t.Skip("enough tasks")
			}
			id := m.newID()
			kind := rapid.SampledFrom([]string{"run", "setsid", "ready"}).Draw(t, "kind")
			if err := m.h.Adopt(id, SpecFor(kind)); err != nil {
				t.Fatalf("adopt %s: %v", id, err)
			}
			t.Logf("task %s (%s) relaunched by its executor, no driver: its log ends at launched", id, kind)
		},
		"stop": func(t *rapid.T) {
			m.needAlive(t)
			id := m.tasks(t)
			s := m.h.Stop(drawPlan(t, m.h), id)
			t.Logf("stop %s: %+v fired=%v", id, s.Outcomes[0], s.Fired)
			if s.Clean() {
				if err, st := s.Outcomes[0].Err, m.stateOf(t, id); err != nil || !st.Terminal() {
					t.Fatalf("clean stop of %s: %v, state %s; want terminal", id, err, st)
				}
			}
		},
		"destroy": func(t *rapid.T) {
			m.needAlive(t)
			id := m.tasks(t)
			s := m.h.Destroy(drawPlan(t, m.h), id)
			t.Logf("destroy %s: %+v fired=%v", id, s.Outcomes[0], s.Fired)
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
			s := m.h.Signal(drawPlan(t, m.h), id, sig)
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
			m.h.Behind(drawPlan(t, m.h), func(w *World) { w.ExitTask(id, code) })
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
			m.h.Behind(drawPlan(t, m.h), func(w *World) { w.KillProc(pid) })
			t.Logf("executor pid %d killed behind the driver's back (agent alive: %v)", pid, m.h.Alive())
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
		"reboot": func(t *rapid.T) {
			collide := rapid.Bool().Draw(t, "look-alikes")
			m.h.Reboot(collide)
			cg := rapid.Bool().Draw(t, "cgroups after the reboot")
			m.h.World.SetCgroups(cg)
			t.Logf("host rebooted (look-alikes of the new boot at every recorded pid: %v; cgroups: %v)", collide, cg)
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
		"recover beside calls": func(t *rapid.T) {
			m.needAlive(t)
			m.recoverBeside(t)
		},
		"maintain beside calls": func(t *rapid.T) {
			m.needAlive(t)
			m.maintainBeside(t)
		},
	}
}

// maintainBeside runs a maintenance of the store (a salvage, or a gc) in
// one step with a start of a new task and a stop of a task, as an agent
// runs it beside the requests it serves: the invariants after the step
// (no acknowledged event lost, no leak, terminal means dead) hold whatever
// turn it lands on and wherever a crash lands in it; a clean step does
// what each call would alone.
func (m *machine) maintainBeside(t *rapid.T) {
	kind := rapid.SampledFrom([]string{MaintainSalvage, MaintainGC}).Draw(t, "maintenance")
	calls := []Call{m.h.MaintainCall(kind)}
	what := []string{kind}
	startID, startKind := "", ""
	if m.next < maxTasks && rapid.Bool().Draw(t, "start beside?") {
		startID, startKind = m.newID(), rapid.SampledFrom(startKinds).Draw(t, "kind")
		calls = append(calls, startCallFor(startID, startKind))
		what = append(what, "start "+startID+" ("+startKind+")")
	}
	stopID := ""
	if ids := m.h.Tasks(); len(ids) > 0 && rapid.Bool().Draw(t, "stop beside?") {
		stopID = rapid.SampledFrom(ids).Draw(t, "stop task")
		calls = append(calls, StopCall(stopID))
		what = append(what, "stop "+stopID)
	}
	plan := drawPlan(t, m.h)
	if len(calls) > 1 && rapid.Bool().Draw(t, "maintain later?") {
		plan.Delays = []int{rapid.IntRange(1, turnReach(m.h)).Draw(t, "maintain at turn")}
	}
	s := m.h.Run(plan, calls...)
	t.Logf("%v under %s: %+v fired=%v", what, plan, s.Outcomes, s.Fired)
	if !s.Clean() {
		return
	}
	if err := s.Outcomes[0].Err; err != nil {
		t.Fatalf("clean %s beside %v: %v", kind, what, err)
	}
	if startID != "" && !m.h.removedByGC(startID) { // a task that ended at once may be gc's to remove
		m.expectStart(t, startID, startKind, s.Outcomes[1].Err)
	}
	if stopID != "" {
		if info, err := m.h.Driver().InspectTask(t.Context(), stopID); err == nil && !info.State.Terminal() {
			t.Fatalf("clean stop of %s beside a %s: state %s; want terminal", stopID, kind, info.State)
		}
	}
}

// recoverBeside runs Recover in one step with other calls on the same
// driver: a start of a new task, a stop of a task (and a wait for it), an
// inspect. Recover is an input like any other: a clean step must do what
// each call would do alone (a start in progress is never failed), and
// leave the strong invariant.
func (m *machine) recoverBeside(t *rapid.T) {
	calls := []Call{RecoverCall()}
	var what []string
	startID, kind := "", ""
	if m.next < maxTasks && rapid.Bool().Draw(t, "start beside?") {
		startID, kind = m.newID(), rapid.SampledFrom(startKinds).Draw(t, "kind")
		calls = append(calls, startCallFor(startID, kind))
		what = append(what, "start "+startID+" ("+kind+")")
	}
	stopID := ""
	ids := m.h.Tasks()
	if len(ids) > 0 && rapid.Bool().Draw(t, "stop beside?") {
		stopID = rapid.SampledFrom(ids).Draw(t, "stop task")
		calls = append(calls, StopCall(stopID))
		what = append(what, "stop "+stopID)
		if rapid.Bool().Draw(t, "wait beside?") {
			calls = append(calls, WaitCall(stopID))
			what = append(what, "wait "+stopID)
		}
	}
	if len(ids) > 0 && rapid.Bool().Draw(t, "inspect beside?") {
		id := rapid.SampledFrom(ids).Draw(t, "inspect task")
		calls = append(calls, InspectCall(id))
		what = append(what, "inspect "+id)
	}
	plan := drawPlan(t, m.h)
	// Which call begins when: the Recover now and then held back until a
	// drawn turn, so that it lands in the middle of the others.
	if len(calls) > 1 && rapid.Bool().Draw(t, "recover later?") {
		plan.Delays = []int{rapid.IntRange(1, turnReach(m.h)).Draw(t, "recover at turn")}
	}
	s := m.h.Run(plan, calls...)
	t.Logf("recover beside %v under %s: %+v fired=%v", what, plan, s.Outcomes, s.Fired)
	if !s.Clean() {
		return
	}
	for i, o := range s.Outcomes {
		if o.Err != nil && (startID == "" || i != 1) {
			t.Fatalf("clean recover beside %v: call %d failed: %v", what, i, o.Err)
		}
	}
	if startID != "" {
		m.expectStart(t, startID, kind, s.Outcomes[1].Err)
	}
	if stopID != "" {
		if st := m.stateOf(t, stopID); !st.Terminal() {
			t.Fatalf("clean stop of %s beside Recover: state %s; want terminal", stopID, st)
		}
	}
	m.h.CheckRecovered(t)
	m.h.CheckReadies(t, true)
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
	tasks, execs, reusable := m.h.World.Census()
	if tasks {
		out = append(out, "task exits")
	}
	if execs {
		out = append(out, "executor dies")
	}
	if reusable {
		out = append(out, "pid reuse")
	}
	if m.next < maxTasks {
		out = append(out, "adopt")
	}
	out = append(out, "reboot")
	if alive {
		out = append(out, "crash", "recover", "restart", "recover beside calls", "recover beside calls")
		if m.h.opts.Bolt {
			out = append(out, "maintain beside calls", "maintain beside calls")
		}
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
			m.h.CheckReadies(t, false)
		},
	}
}

func (m *machine) recover(t *rapid.T) {
	s, err := m.h.Recover(drawPlan(t, m.h))
	if err != nil {
		t.Fatalf("open a new generation: %v", err)
	}
	t.Logf("recover (generation %d): %+v crashed=%v died=%v fired=%v", m.h.Generation(), s.Outcomes[0], s.Crashed, s.Died, s.Fired)
	if s.Clean() {
		if err := s.Outcomes[0].Err; err != nil {
			t.Fatalf("clean Recover failed: %v", err)
		}
		m.h.CheckRecovered(t)
		m.h.CheckReadies(t, true)
	}
}

// propertyRun is one run of the property: its counts and time, and the
// check at which it first failed (0: none), which rapid reports only when
// it can replay the failure (a step's concurrent calls may interleave
// differently in the replay).
type propertyRun struct {
	checks, steps int
	firstFailure  int
	took          time.Duration
}

func (r propertyRun) String() string {
	s := fmt.Sprintf("%d checks, %d steps in %s: %.0f checks/s, %.0f steps/s", r.checks, r.steps, r.took.Round(time.Millisecond),
		float64(r.checks)/r.took.Seconds(), float64(r.steps)/r.took.Seconds())
	if r.firstFailure > 0 {
		s += fmt.Sprintf("; first failure at check %d", r.firstFailure)
	}
	return s
}

// noteFailure records, once the check is over, whether it was the first to
// fail.
func (r *propertyRun) noteFailure(t *rapid.T) {
	if t.Failed() && r.firstFailure == 0 {
		r.firstFailure = r.checks
	}
}

// runProperty runs the state machine over harnesses made by opts.
//
// It runs on one P (GOMAXPROCS 1): the simulation is one turn at a time
// anyway (see the scheduler), and its goroutines hand over to each other
// at every turn, which on one P is a switch and on two a wake-up of
// another thread (futex) each time: twice the time a check here.
func runProperty(t *testing.T, bolt bool) propertyRun {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	dir := scratch(t)
	var r propertyRun
	began := time.Now()
	defer func() {
		if r.took == 0 {
			r.took = time.Since(began)
		}
		t.Logf("property: %s", r)
	}()
	rapid.Check(t, func(rt *rapid.T) {
		r.checks++
		defer r.noteFailure(rt)
		sub := dir
		if bolt {
			var err error
			if sub, err = os.MkdirTemp(dir, "case"); err != nil {
				rt.Fatal(err)
			}
			defer os.RemoveAll(sub)
		}
		rapid.SyncTest(rt, func(rt *rapid.T) {
			o := Options{Dir: sub, Bolt: bolt}
			o.NoLease = !rapid.Bool().Draw(rt, "lease")
			o.Cgroups = rapid.Bool().Draw(rt, "cgroups")
			o.OldExecutors = rapid.IntRange(0, 3).Draw(rt, "executors of protocol 9?") == 3
			m := &machine{h: Open(rt, o), steps: &r.steps}
			defer func() {
				if err := m.h.Close(); err != nil {
					rt.Errorf("close: %v", err)
				}
			}()
			rt.Repeat(m.actions())
		})
	})
	r.took = time.Since(began)
	return r
}

// TestDriver_Properties is the state-machine property test of the driver
// over the simulated world and the simulated log: random starts (of tasks
// that run, exit, are refused, fork, escape their group), stops, destroys,
// signals, task exits, executor deaths, pid reuse, tasks relaunched by
// their executors, crashes (idle, at a drawn crash point, during Recover),
// Recover beside other calls, executor deaths at a drawn point, and faults
// at every effect, every store append (failing, or committing and then
// failing) and every world operation (failing, or hanging), on hosts with
// and without cgroups, with the design's invariants checked after every
// step. RAPID_CHECKS / -rapid.checks sets the number of checks; failures
// are kept under testdata/rapid.
func TestDriver_Properties(t *testing.T) {
	defer setFlag(t, "rapid.checks", fmt.Sprint(propertyChecks()))()
	t.Logf("simulated log: %s", runProperty(t, false))
}

// propertyChecks is the number of checks of TestDriver_Properties: the
// -rapid.checks given, else 1,000 (ten times rapid's default: a check costs
// about a millisecond, five to ten with -race).
func propertyChecks() int {
	if rapidChecksGiven {
		return rapidChecks()
	}
	return 1000
}

// TestDriver_PropertiesBolt is TestDriver_Properties on the real bbolt
// store (closed and reopened by every driver generation), with a tenth of
// the checks: the store's own behaviour under the driver (its legality
// check, its conflicts, its acknowledgements) stays inside the property.
func TestDriver_PropertiesBolt(t *testing.T) {
	defer setFlag(t, "rapid.checks", fmt.Sprint(max(propertyChecks()/10, 20)))()
	t.Logf("bbolt store: %s", runProperty(t, true))
}
