// Package proptest is tether's property-test harness: a deterministic
// simulated process world, fault and crash injection at every named point of
// the driver, and the design's invariants, checked after every step.
//
// # Pieces
//
//   - World: processes with pids, start times and a boot id; executors with
//     a lease (an executor whose connection drops before launch exits by
//     itself); tasks that exit; executors that die behind the driver's back;
//     pid reuse by strangers. Identity checks are pid, start time, boot id
//     and nonce; every signal is logged, so "never a stranger signalled" is
//     a query.
//   - Generation: one life of a driver process. A crash (Hooks.Crash at a
//     drawn crash point) kills it as SIGKILL would: the goroutine that hit
//     the point exits (runtime.Goexit), every other goroutine of that
//     generation stops at its next contact with the world or the store, its
//     connections drop, and its store writes stop: what was committed stays,
//     nothing else lands, no acknowledgement reaches it.
//   - Harness: a driver over a World and a real bbolt store, run step by
//     step under a Plan (the crash point and the fault points of the step),
//     with Check and CheckRecovered holding the invariants.
//   - Scenario: one replayable run (its String is its seed), and Enumerate,
//     which runs every crash point x {crash, fault} nested once inside the
//     following Recover.
//
// # Determinism
//
// The harness runs inside a testing/synctest bubble (rapid.SyncTest, or
// synctest.Test): a step returns when every goroutine is durably blocked,
// after the bubble's fake clock has run past any back-off the driver sleeps,
// so nothing waits on real time. The driver's clock and nonces are
// counters; every listing is sorted. rapid can therefore replay and shrink a
// failing sequence, and keeps it under testdata/rapid.
//
// # Usage
//
// An agent author embedding tether's driver runs the same properties over
// their own scenario:
//
//	func TestMyAgent_Lifecycle(t *testing.T) {
//		dir := t.TempDir()
//		synctest.Test(t, func(t *testing.T) {
//			h := proptest.New(t, dir)
//			defer h.Close()
//			h.Start(proptest.Plan{Crash: proptest.Point{Name: "after-append:executor-up", Nth: 1}},
//				[]string{"web"}, []fsm.Spec{mySpec})
//			h.Check(t)
//			h.Recover(proptest.Plan{})
//			h.CheckRecovered(t) // no leak: live executors == running tasks
//		})
//	}
//
// or enumerates every crash point for it with Enumerate, or replays a seed
// printed by a failure with ParseScenario and Scenario.Run. The TestingT
// they take is the narrow part of *testing.T and *rapid.T the harness uses.
//
// # Real processes and planted bugs
//
// TestDriver_RealProperties runs the same state machine (without crash
// points, which a test process cannot survive) against driver.NewReal and
// this test binary serving executor and task modes, and finds leaks by
// scanning /proc for each check's marker. testdata/mutants holds planted
// bugs as find/replace data; `make mutants` (cmd/mutants) applies each one
// through go test -overlay and fails if the suite lets one survive.
//
// The simulated World stands in for the real executor; the driver's table is
// fsm.Lifecycle (the store checks every append against it).
package proptest
