package proptest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// Ops are the operations a Scenario can run: a start of tasks of one kind
// (see SpecFor), or a stop of running tasks.
var Ops = []string{"start:run", "start:exit", "start:netraw", "start:invalid", "stop"}

// Scenario is one replayable run: Op on Tasks concurrent tasks under Plan,
// then a Recover under Recover, then a Recover with nothing injected on a
// fresh generation, after which the strong invariants must hold. Its String
// form is its seed: ParseScenario reads it back.
type Scenario struct {
	Op    string
	Tasks int
	// NoLease runs the world with the executors' lease off, so that only
	// the log can lead recovery to an executor whose connection dropped.
	NoLease bool
	Plan    Plan
	Recover Plan
}

func (sc Scenario) String() string {
	lease := ""
	if sc.NoLease {
		lease = " nolease"
	}
	return fmt.Sprintf("%s x%d%s | op %s | recover %s", sc.Op, sc.Tasks, lease, sc.Plan, sc.Recover)
}

// ParseScenario parses Scenario.String's form.
func ParseScenario(s string) (Scenario, error) {
	var sc Scenario
	parts := strings.Split(s, " | ")
	if len(parts) != 3 {
		return sc, fmt.Errorf("proptest: scenario %q: want \"op xN | op PLAN | recover PLAN\"", s)
	}
	head := strings.Fields(parts[0])
	if len(head) == 3 && head[2] == "nolease" {
		sc.NoLease, head = true, head[:2]
	}
	if len(head) != 2 || !strings.HasPrefix(head[1], "x") {
		return sc, fmt.Errorf("proptest: scenario %q: bad head", s)
	}
	sc.Op = head[0]
	n, err := strconv.Atoi(head[1][1:])
	if err != nil || n < 1 || !slices.Contains(Ops, sc.Op) {
		return sc, fmt.Errorf("proptest: scenario %q: bad op or count", s)
	}
	sc.Tasks = n
	if sc.Plan, err = parsePlan(strings.TrimPrefix(parts[1], "op ")); err != nil {
		return sc, err
	}
	sc.Recover, err = parsePlan(strings.TrimPrefix(parts[2], "recover "))
	return sc, err
}

func parsePlan(s string) (Plan, error) {
	var p Plan
	var crash, faults string
	i := strings.Index(s, " faults=[")
	if !strings.HasPrefix(s, "crash=") || i < 0 || !strings.HasSuffix(s, "]") {
		return p, fmt.Errorf("proptest: plan %q: want crash=P faults=[P ...]", s)
	}
	crash, faults = s[len("crash="):i], s[i+len(" faults=["):len(s)-1]
	var err error
	if p.Crash, err = ParsePoint(crash); err != nil {
		return p, err
	}
	for _, f := range strings.Fields(faults) {
		pt, err := ParsePoint(f)
		if err != nil {
			return p, err
		}
		p.Faults = append(p.Faults, pt)
	}
	return p, nil
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
	h := New(t, dir)
	defer func() {
		if err := h.Close(); err != nil {
			t.Fatalf("%s: close: %v", sc, err)
		}
	}()
	h.World.SetLease(!sc.NoLease)
	ids := make([]string, sc.Tasks)
	specs := make([]fsm.Spec, sc.Tasks)
	kind, _ := strings.CutPrefix(sc.Op, "start:")
	if sc.Op == "stop" {
		kind = "run"
	}
	for i := range ids {
		ids[i], specs[i] = fmt.Sprintf("t%d", i+1), SpecFor(kind)
	}
	var res Result
	if sc.Op == "stop" {
		s := h.Start(Plan{}, ids, specs)
		for i, o := range s.Outcomes {
			if o.Err != nil {
				t.Fatalf("%s: setup: start %s: %v", sc, ids[i], o.Err)
			}
		}
		res.Op = h.Stop(sc.Plan, ids...)
	} else {
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
	// still running, a stop that did is terminal.
	for i, o := range res.Op.Outcomes {
		if o.Died || o.Err != nil {
			continue
		}
		info, err := h.Driver().InspectTask(context.Background(), ids[i])
		if err != nil {
			t.Fatalf("%s: inspect %s: %v", sc, ids[i], err)
		}
		switch {
		case sc.Op == "stop" && !info.State.Terminal():
			t.Fatalf("scenario %q: StopTask(%s) succeeded, yet after recovery the task is %s", sc, ids[i], info.State)
		case sc.Op == "start:run" && info.State != fsm.StateRunning:
			t.Fatalf("scenario %q: StartTask(%s) succeeded, yet after recovery the task is %s", sc, ids[i], info.State)
		}
	}
	return res
}

// Coverage accumulates, over many scenarios, the crash points that were
// hit and those at which a crash fired.
type Coverage struct {
	Runs    int
	Hit     map[string]int
	Crashed map[string]int
}

// NewCoverage returns an empty coverage.
func NewCoverage() *Coverage {
	return &Coverage{Hit: map[string]int{}, Crashed: map[string]int{}}
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
	}
}

// Missing lists the registered crash points (driver.CrashPoints) at which
// no crash fired.
func (c *Coverage) Missing() []string {
	var out []string
	for _, p := range driver.CrashPoints() {
		if c.Crashed[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Enumerate runs, for base's op on its tasks, every scenario reachable from a clean
// run: a crash at every crash-point hit (each occurrence), a fault at every
// fault-point hit, a fault followed by a crash at every later crash-point
// hit; and nested in the following Recover, a crash at every crash-point
// hit of that Recover. Each run gets a directory under dir. It must run
// inside a testing/synctest bubble.
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
	base.Plan, base.Recover = Plan{}, Plan{}
	clean := run(base)
	for _, c := range clean.Op.Trace {
		sc := base
		sc.Plan = Plan{Crash: c}
		nest(sc, run(sc))
	}
	for _, f := range clean.Op.Faults {
		sc := base
		sc.Plan = Plan{Faults: []Point{f}}
		r := run(sc)
		nest(sc, r)
		for _, c := range r.Op.Trace {
			sc := sc
			sc.Plan.Crash = c
			run(sc)
		}
	}
}
