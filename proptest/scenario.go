package proptest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/fsm"
)

// Ops are the operations a Scenario can run, on its tasks at once:
//
//	start:KIND       StartTask of tasks of that kind (see SpecFor)
//	stop, stop:KIND  StopTask of running tasks (of kind run, or KIND)
//	race:KIND        StartTask of tasks of that kind with a Recover beside them
//	recover:launched Recover of tasks whose log ends at launched, their
//	                 executors alive with no driver (Harness.Adopt)
//	salvage:KIND     StartTask of tasks of that kind with a salvage of the
//	                 store beside them (Harness.MaintainCall; Bolt only)
//	gc:KIND          the same with a gc (an ended task to remove first)
var Ops = []string{
	"start:run", "start:exit", "start:netraw", "start:invalid", "start:fork", "start:setsid", "start:daemon",
	"start:restart", "start:service", "start:ready", "stop", "stop:setsid", "stop:daemon", "stop:service", "race:run", "race:exit",
	"race:restart", "recover:launched", "salvage:run", "gc:run",
}

// Scenario is one replayable run: Op on Tasks concurrent tasks under Plan,
// then (DieBetween) the death of every executor or (RebootBetween) a
// reboot of the host, then a Recover under
// Recover, then a Recover with nothing injected on a fresh generation,
// after which the strong invariants must hold. Its String form is its
// seed: ParseScenario reads it back.
type Scenario struct {
	Op    string
	Tasks int
	// NoLease runs the world with the executors' lease off, so that only
	// the log can lead recovery to an executor whose connection dropped.
	NoLease bool
	// Cgroups gives the simulated host cgroups.
	Cgroups bool
	// DieBetween kills every executor between the operation (and its
	// crash) and the first Recover: the windows that only matter once an
	// executor is gone (its launch record, its task's orphaned tree).
	DieBetween bool
	// RebootBetween reboots the host between the operation and the first
	// Recover, with a look-alike of the new boot at every recorded pid
	// (Harness.Reboot).
	RebootBetween bool
	// Bolt runs the scenario on the real bbolt store (the default is the
	// MemLog).
	Bolt    bool
	Plan    Plan
	Recover Plan
}

// The flags of a scenario's head, in String's order.
type scenarioFlag struct {
	name string
	get  func(*Scenario) *bool
}

var scenarioFlags = []scenarioFlag{
	{"nolease", func(s *Scenario) *bool { return &s.NoLease }},
	{"cgroups", func(s *Scenario) *bool { return &s.Cgroups }},
	{"die-between", func(s *Scenario) *bool { return &s.DieBetween }},
	{"reboot-between", func(s *Scenario) *bool { return &s.RebootBetween }},
	{"bolt", func(s *Scenario) *bool { return &s.Bolt }},
}

func (sc Scenario) String() string {
	head := fmt.Sprintf("%s x%d", sc.Op, sc.Tasks)
	for _, f := range scenarioFlags {
		if *f.get(&sc) {
			head += " " + f.name
		}
	}
	return fmt.Sprintf("%s | op %s | recover %s", head, sc.Plan, sc.Recover)
}

// ParseScenario parses Scenario.String's form.
func ParseScenario(s string) (Scenario, error) {
	var sc Scenario
	parts := strings.Split(s, " | ")
	if len(parts) != 3 {
		return sc, fmt.Errorf("%w: scenario %q: want \"op xN [flags] | op PLAN | recover PLAN\"", ErrBadScenario, s)
	}
	head := strings.Fields(parts[0])
	if len(head) < 2 || !strings.HasPrefix(head[1], "x") {
		return sc, fmt.Errorf("%w: scenario %q: bad head", ErrBadScenario, s)
	}
	for _, flag := range head[2:] {
		i := slices.IndexFunc(scenarioFlags, func(f scenarioFlag) bool { return f.name == flag })
		if i < 0 {
			return sc, fmt.Errorf("%w: scenario %q: unknown flag %q", ErrBadScenario, s, flag)
		}
		*scenarioFlags[i].get(&sc) = true
	}
	sc.Op = head[0]
	n, err := strconv.Atoi(head[1][1:])
	if err != nil || n < 1 || !slices.Contains(Ops, sc.Op) {
		return sc, fmt.Errorf("%w: scenario %q: bad op or count (ops: %s)", ErrBadScenario, s, strings.Join(Ops, " "))
	}
	sc.Tasks = n
	if sc.Plan, err = parsePlan(strings.TrimPrefix(parts[1], "op ")); err != nil {
		return sc, err
	}
	sc.Recover, err = parsePlan(strings.TrimPrefix(parts[2], "recover "))
	return sc, err
}

// Result is what a Scenario run did: the crash and fault points its
// operation and its first Recover hit (the next plans to enumerate), and
// which crashes fired.
type Result struct {
	Op, Recover Step
}

// Run runs the scenario with a fresh harness in dir and checks the
// invariants after every step; it fails t on the first violation. It must
// run inside a testing/synctest bubble.
func (sc Scenario) Run(t TestingT, dir string) Result {
	t.Helper()
	h := Open(t, Options{Dir: dir, Bolt: sc.Bolt, Cgroups: sc.Cgroups, NoLease: sc.NoLease})
	defer func() {
		if err := h.Close(); err != nil {
			t.Fatalf("%s: close: %v", sc, err)
		}
	}()
	verb, kind, _ := strings.Cut(sc.Op, ":")
	if kind == "" {
		kind = "run"
	}
	ids := make([]string, sc.Tasks)
	specs := make([]fsm.Spec, sc.Tasks)
	for i := range ids {
		ids[i], specs[i] = fmt.Sprintf("t%d", i+1), SpecFor(kind)
	}
	var res Result
	switch verb {
	case "stop":
		s := h.Start(Plan{}, ids, specs)
		for i, o := range s.Outcomes {
			if o.Err != nil {
				t.Fatalf("%s: setup: start %s: %v", sc, ids[i], o.Err)
			}
		}
		res.Op = h.Stop(sc.Plan, ids...)
	case "race":
		calls := []Call{RecoverCall()}
		for i := range ids {
			calls = append(calls, StartCall(ids[i], specs[i]))
		}
		res.Op = h.Run(sc.Plan, calls...)
		res.Op.Outcomes = res.Op.Outcomes[1:] // the starts', in order of ids
	case MaintainSalvage, MaintainGC:
		if verb == MaintainGC {
			if s := h.Start(Plan{}, []string{"ended"}, []fsm.Spec{SpecFor("exit")}); s.Outcomes[0].Err != nil {
				t.Fatalf("%s: setup: a task that ends: %v", sc, s.Outcomes[0].Err)
			}
		}
		calls := []Call{h.MaintainCall(verb)}
		for i := range ids {
			calls = append(calls, StartCall(ids[i], specs[i]))
		}
		res.Op = h.Run(sc.Plan, calls...)
		if o := res.Op.Outcomes[0]; res.Op.Clean() && o.Err != nil {
			t.Fatalf("scenario %q: a clean %s failed: %v", sc, verb, o.Err)
		}
		res.Op.Outcomes = res.Op.Outcomes[1:] // the starts', in order of ids
	case "recover":
		for _, id := range ids {
			if err := h.Adopt(id, SpecFor("run")); err != nil {
				t.Fatalf("%s: setup: adopt %s: %v", sc, id, err)
			}
		}
		res.Op = h.Run(sc.Plan, RecoverCall())
	case "start":
		if kind != "ready" {
			res.Op = h.Start(sc.Plan, ids, specs)
			break
		}
		calls := make([]Call, len(ids))
		for i := range ids {
			calls[i] = StartReadyCall(ids[i], specs[i])
		}
		res.Op = h.Run(sc.Plan, calls...)
	default:
		res.Op = h.Start(sc.Plan, ids, specs)
	}
	fail := func(when string, v []string) {
		t.Helper()
		if len(v) > 0 {
			t.Fatalf("scenario %q: %s:\n  %s", sc, when, strings.Join(v, "\n  "))
		}
	}
	fail("after the operation", h.check())

	if h.Alive() {
		if err := h.Restart(); err != nil {
			t.Fatalf("%s: restart: %v", sc, err)
		}
	}
	if sc.DieBetween {
		h.World.KillExecutors()
	}
	if sc.RebootBetween {
		h.Reboot(true)
	}
	var err error
	if res.Recover, err = h.Recover(sc.Recover); err != nil {
		t.Fatalf("%s: recover: %v", sc, err)
	}
	fail("after the first Recover", h.check())

	if h.Alive() {
		if err := h.Restart(); err != nil {
			t.Fatalf("%s: restart: %v", sc, err)
		}
	}
	final, err := h.Recover(Plan{})
	if err != nil || final.Outcomes[0].Err != nil {
		t.Fatalf("%s: the clean Recover failed: %v %v", sc, err, final.Outcomes[0].Err)
	}
	h.CheckRecovered(t)

	// No acknowledged operation lost: a start that returned success is
	// still running (unless its executor was killed since), a stop that
	// did is terminal.
	for i, o := range res.Op.Outcomes {
		if o.Died || o.Err != nil || verb == "recover" {
			continue
		}
		info, err := h.Driver().InspectTask(context.Background(), ids[i])
		if err != nil {
			t.Fatalf("%s: inspect %s: %v", sc, ids[i], err)
		}
		deaths := sc.DieBetween || sc.RebootBetween || res.Op.Died
		switch {
		case verb == "stop" && !info.State.Terminal():
			t.Fatalf("scenario %q: StopTask(%s) succeeded, yet after recovery the task is %s", sc, ids[i], info.State)
		case verb != "stop" && !deaths && slices.Contains([]string{"run", "fork", "setsid", "daemon", "service", "ready"}, kind) && info.State != fsm.StateRunning:
			t.Fatalf("scenario %q: StartTask(%s) succeeded, yet after recovery the task is %s", sc, ids[i], info.State)
		}
	}
	return res
}

// withHangs is faults with every world fault point also in its hanging
// form.
func withHangs(faults []Point) []Point {
	var out []Point
	for _, f := range faults {
		out = append(out, f)
		if strings.HasPrefix(f.Name, worldPrefix) {
			out = append(out, Point{f.Name + HangSuffix, f.Nth})
		}
	}
	return out
}

// Coverage accumulates, over many scenarios, the crash points that were
// hit, those at which a crash fired and those at which executors died, and
// the fault points that fired.
type Coverage struct {
	Runs    int
	Hit     map[string]int
	Crashed map[string]int
	Died    map[string]int
	Fired   map[string]int
}

// NewCoverage returns an empty coverage.
func NewCoverage() *Coverage {
	return &Coverage{Hit: map[string]int{}, Crashed: map[string]int{}, Died: map[string]int{}, Fired: map[string]int{}}
}

func (c *Coverage) add(r Result) {
	c.Runs++
	for _, s := range []Step{r.Op, r.Recover} {
		for _, p := range s.Trace {
			c.Hit[p.Name]++
		}
		if s.Crashed {
			c.Crashed[s.CrashAt.Name]++
		}
		if s.Died {
			c.Died[s.Plan.Die.Name]++
		}
		for _, f := range s.Fired {
			if p, err := ParsePoint(f); err == nil {
				c.Fired[p.Name]++
			}
		}
	}
}

// Missing lists the registered crash points (CrashPoints) at which no
// crash fired.
func (c *Coverage) Missing() []string {
	var out []string
	for _, p := range CrashPoints() {
		if c.Crashed[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

// MissingFaults lists the fault points (FaultPoints) that never fired.
func (c *Coverage) MissingFaults() []string {
	var out []string
	for _, p := range FaultPoints() {
		if c.Fired[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Enumerate runs, for base's op on its tasks, every scenario reachable from
// a clean run:
//
//   - for a race op, the Recover held back to every turn of the clean run;
//   - a crash at every crash-point hit (each occurrence), nested with a
//     crash at every crash-point hit of the following Recover;
//   - the same crash with every executor dead before the Recover (with a
//     fault at every fault point of that Recover), and with the host
//     rebooted before it (look-alikes at every recorded pid);
//   - every executor's death at every crash-point hit (no crash);
//   - a fault at every fault-point hit (a world operation's both failing
//     and hanging), nested likewise, followed by a crash at every later
//     crash-point hit, and by a second fault at every fault point that
//     only the first one reached.
//
// Each run gets a directory under dir. It must run inside a
// testing/synctest bubble.
func Enumerate(t TestingT, dir string, base Scenario, cov *Coverage) {
	t.Helper()
	run := func(sc Scenario) Result {
		t.Helper()
		sub, err := os.MkdirTemp(dir, "run")
		if err != nil {
			t.Fatalf("%v", err)
		}
		defer os.RemoveAll(sub)
		r := sc.Run(t, sub)
		cov.add(r)
		return r
	}
	// nest enumerates a crash at every point the first Recover hits.
	nest := func(sc Scenario, r Result) {
		for _, q := range r.Recover.Trace {
			sc.Recover = Plan{Crash: q}
			run(sc)
		}
	}
	// nestFaults enumerates a fault at every fault point the first
	// Recover hits (a world operation's both failing and hanging).
	nestFaults := func(sc Scenario, r Result) {
		for _, f := range withHangs(r.Recover.Faults) {
			sc.Recover = Plan{Faults: []Point{f}}
			run(sc)
		}
	}
	base.Plan, base.Recover = Plan{}, Plan{}
	clean := run(base)
	if strings.HasPrefix(base.Op, "race:") {
		// The Recover held back to every turn of the clean run: it lands
		// at every contact of the starts beside it.
		for turn := 1; turn <= clean.Op.Turns; turn++ {
			sc := base
			sc.Plan = Plan{Delays: []int{turn}}
			run(sc)
		}
	}
	for _, c := range clean.Op.Trace {
		sc := base
		sc.Plan = Plan{Crash: c}
		nest(sc, run(sc))
		sc.DieBetween = true
		nestFaults(sc, run(sc))
		sc.DieBetween, sc.RebootBetween = false, true
		run(sc)
		sc = base
		sc.Plan = Plan{Die: c}
		run(sc)
	}
	faults := withHangs(clean.Op.Faults)
	clean1 := map[Point]bool{}
	for _, f := range clean.Op.Faults {
		clean1[f] = true
	}
	for _, f := range faults {
		sc := base
		sc.Plan = Plan{Faults: []Point{f}}
		r := run(sc)
		nest(sc, r)
		for _, c := range r.Op.Trace {
			sc := sc
			sc.Plan.Crash = c
			run(sc)
		}
		// A second fault at every point only the first one reached (the
		// append of a failure's outcome, the kill after it).
		for _, g := range r.Op.Faults {
			if !clean1[g] {
				sc := sc
				sc.Plan.Faults = []Point{f, g}
				run(sc)
			}
		}
	}
}
