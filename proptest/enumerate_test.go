package proptest

import (
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-fsm/tether/internal/testproc"
)

// TestEnumerate_EveryCrashPoint runs every crash point x {crash, fault}
// (each occurrence), nested once inside the following Recover, for a start
// and a stop of 1 and 2 concurrent tasks (and of 3 with -long: the same
// points and owners again, a fifth of the runs and nearly half the time,
// reaching no point the others miss), and for the single-task starts that
// reach the other paths (a task that exits at once, the seed's refused
// capability, an invalid spec). It fails if a registered crash point is
// never crashed at or a fault point never fires.
func TestEnumerate_EveryCrashPoint(t *testing.T) {
	began := time.Now()
	var cfgs []Scenario
	most := 2
	if testproc.Long() {
		most = 3
	}
	for n := 1; n <= most; n++ {
		cfgs = append(cfgs, Scenario{Op: "start:run", Tasks: n}, Scenario{Op: "stop", Tasks: n})
	}
	cfgs = append(cfgs, Scenario{Op: "start:exit", Tasks: 1}, Scenario{Op: "start:netraw", Tasks: 1}, Scenario{Op: "start:invalid", Tasks: 1})
	// Without the lease, only the log leads recovery to an executor whose
	// connection dropped before launch.
	cfgs = append(cfgs, Scenario{Op: "start:run", Tasks: 1, NoLease: true}, Scenario{Op: "start:netraw", Tasks: 1, NoLease: true})
	// A log that ends at launched (an executor's relaunch, an older
	// driver): the attach effect and reattached.
	cfgs = append(cfgs, Scenario{Op: "recover:launched", Tasks: 1}, Scenario{Op: "recover:launched", Tasks: 2})
	// Recover beside starts on the same driver.
	cfgs = append(cfgs, Scenario{Op: "race:run", Tasks: 1}, Scenario{Op: "race:run", Tasks: 2}, Scenario{Op: "race:exit", Tasks: 1})
	// Descendants that escape the task's group, on hosts with and without
	// cgroups.
	for _, cg := range []bool{false, true} {
		for _, op := range []string{"start:fork", "start:setsid", "start:daemon", "stop:setsid"} {
			cfgs = append(cfgs, Scenario{Op: op, Tasks: 1, Cgroups: cg})
		}
	}
	// Restarts by the executor (the task's restart policy): its journal,
	// its own crash points, the driver's restart-intent.
	cfgs = append(cfgs, Scenario{Op: "start:restart", Tasks: 1}, Scenario{Op: "start:restart", Tasks: 1, Cgroups: true},
		Scenario{Op: "stop:service", Tasks: 1})
	// A notify task's start: the ready event WaitReady records.
	cfgs = append(cfgs, Scenario{Op: "start:ready", Tasks: 1})
	// The real bbolt store under the same enumeration (its commits, its
	// acknowledgements, its reopen by every generation).
	cfgs = append(cfgs, Scenario{Op: "start:run", Tasks: 1, Bolt: true}, Scenario{Op: "stop", Tasks: 2, Bolt: true},
		Scenario{Op: "recover:launched", Tasks: 1, Bolt: true})
	// A maintenance (salvage, gc) beside starts, on the real store: every
	// one of its durable steps crashed at.
	cfgs = append(cfgs, Scenario{Op: "salvage:run", Tasks: 1, Bolt: true}, Scenario{Op: "salvage:run", Tasks: 2, Bolt: true},
		Scenario{Op: "gc:run", Tasks: 1, Bolt: true})
	// The scenarios share nothing (each runs in a synctest bubble of its
	// own, on a directory of its own, with a coverage of its own), so they
	// run in parallel; the coverage is summed and checked once every one
	// has ended (a cleanup runs after the parallel subtests).
	covs := make([]*Coverage, len(cfgs))
	for i, c := range cfgs {
		name := strings.ReplaceAll(strings.ReplaceAll(strings.Split(c.String(), " | ")[0], ":", "_"), " ", "_")
		t.Run(name, func(t *testing.T) {
			testproc.Parallel(t)
			dir := scratch(t)
			cov := NewCoverage()
			synctest.Test(t, func(t *testing.T) { Enumerate(t, dir, c, cov) })
			t.Logf("%d runs", cov.Runs)
			covs[i] = cov
		})
	}
	t.Cleanup(func() { checkCoverage(t, covs, began) })
}

// checkCoverage sums the enumeration's coverages and fails unless every
// registered crash point was crashed at and every fault point fired (when
// every scenario ran: not under a -run that selects some).
func checkCoverage(t *testing.T, covs []*Coverage, began time.Time) {
	cov := NewCoverage()
	ran := 0
	for _, c := range covs {
		if c == nil {
			continue
		}
		ran++
		cov.Runs += c.Runs
		for _, m := range [][2]map[string]int{{cov.Hit, c.Hit}, {cov.Crashed, c.Crashed}, {cov.Died, c.Died}, {cov.Fired, c.Fired}} {
			for k, n := range m[1] {
				m[0][k] += n
			}
		}
	}
	el := time.Since(began)
	t.Logf("%d enumerated runs in %s (%.0f runs/s); %d crash points registered, %d crashed at, executors killed at %d",
		cov.Runs, el.Round(time.Millisecond), float64(cov.Runs)/el.Seconds(), len(crashPoints), len(crashPoints)-len(cov.Missing()), len(cov.Died))
	t.Logf("fault points fired: %d of %d; never: %v", len(FaultPoints())-len(cov.MissingFaults()), len(FaultPoints()), cov.MissingFaults())
	if cov.Runs == 0 || ran < len(covs) {
		return
	}
	if missing := cov.Missing(); len(missing) > 0 {
		var hit []string
		for _, p := range missing {
			if cov.Hit[p] > 0 {
				hit = append(hit, p)
			}
		}
		sort.Strings(hit)
		t.Errorf("registered crash points never crashed at by the enumeration: %v (of which hit but not crashed at: %v)", missing, hit)
	}
	if missing := cov.MissingFaults(); len(missing) > 0 {
		t.Errorf("fault points never fired by the enumeration: %v", missing)
	}
}

// TestScenario_Replay replays one enumerated scenario from its seed, as a
// failure message prints it. Set PROPTEST_SCENARIO to replay another.
func TestScenario_Replay(t *testing.T) {
	seed := "stop x2 | op crash=after-append:stop-requested#1 faults=[] | recover crash=before-effect:kill-executor#1 faults=[]"
	if s := getenv("PROPTEST_SCENARIO"); s != "" {
		seed = s
	}
	sc, err := ParseScenario(seed)
	if err != nil {
		t.Fatal(err)
	}
	if sc.String() != seed {
		t.Fatalf("round trip: %q != %q", sc.String(), seed)
	}
	dir := scratch(t)
	synctest.Test(t, func(t *testing.T) {
		r := sc.Run(t, dir)
		if !r.Op.Crashed || !r.Recover.Crashed {
			t.Errorf("the scenario's crashes did not both fire: op %v, recover %v", r.Op.Crashed, r.Recover.Crashed)
		}
	})
}
