// Package proptest is tether's property-test harness: a deterministic
// simulated process world, fault and crash injection at every named point of
// the driver, the store boundary and the world, and the design's
// invariants, checked after every step.
//
// # Pieces
//
//   - World: processes with pids, start times and a boot id; executors with
//     a lease (an executor whose connection drops before launch exits by
//     itself) that are child subreapers (a live one kills its task's whole
//     tree); tasks with descendants, some of which escape the task's
//     process group (setsid, a daemonized grandchild); on a host with
//     cgroups, a cgroup per task named for the task and the nonce; tasks
//     that exit; executors that die behind the driver's back (their task
//     trees live on), or relaunched their task with no driver (Relaunched);
//     pid reuse by strangers; reboots (every process dies, the boot id
//     changes, pids and start times count again, so a process of the new
//     boot can look like one of the last by everything but the boot id).
//     Identity checks are pid, start time, boot id and nonce; a cgroup is
//     killed only when its path names the task and the nonce; every signal
//     is logged, so "never a stranger signalled" is a query. World
//     operations (kill, kill-task, reattach, stop, status, shutdown) can be
//     made to fail or to hang until their context ends.
//   - Generation: one life of a driver process. A crash (Hooks.Crash at a
//     drawn crash point) kills it as SIGKILL would: the goroutine that hit
//     the point exits (runtime.Goexit), every other goroutine of that
//     generation stops at its next contact with the world or the store, its
//     connections drop, and its store writes stop: what was committed stays,
//     nothing else lands, no acknowledgement reaches it.
//   - The log: the real bbolt store (Options.Bolt), closed and reopened by
//     every generation, or MemLog, a simulated log with store.Log's
//     contract, the way a deterministic simulation replaces a disk. At its
//     boundary the plan can fail an Append before it commits
//     (store:fail:<event>) or after (store:lost-ack:<event>).
//   - Harness: a driver over a World and a log, run step by step under a
//     Plan (the crash point, the point where every executor dies, and the
//     fault points of the step), with Check and CheckRecovered holding the
//     invariants: no process of a task outlives its terminal state (an
//     escaped descendant on a host without cgroups excepted, and listed by
//     Escapes: the host's limit, not the driver's), no leak, never a
//     stranger signalled, no acknowledged event lost, every log a legal
//     path, fold(log) == live state; write-ahead is checked as each effect
//     reaches the world.
//   - Scenario: one replayable run (its String is its seed), and Enumerate,
//     which runs every crash point x {crash, executors' death, fault}
//     nested once inside the following Recover, with executors killed
//     between a crash and its Recover.
//   - package proptest/linearize: History and Model, concurrent driver
//     calls (Recover among them) recorded for porcupine's
//     linearizability check.
//
// # Determinism
//
// The harness runs inside a testing/synctest bubble (rapid.SyncTest, or
// synctest.Test): a step returns when every goroutine is durably blocked,
// after the bubble's fake clock has run past any back-off or timeout the
// driver waits out (a hanging world operation ends with its context), so
// nothing waits on real time. The driver's clock and nonces are counters;
// every listing is sorted. The calls of a step and the driver's own
// goroutines (an owner per task, the effect in flight, the supervisors,
// Recover's one per task) run concurrently, but their contacts with the
// outside (every world operation, every append and read of the log, every
// crash and fault hook) take turns: a goroutine parks at each, and once
// the bubble is idle the harness lets one go, the one parked last unless
// the plan says otherwise (sched.go). Which goroutine a fault at the n-th
// point hits, which pid a spawn gets, where a Recover lands in a start:
// all follow from the plan, whose Delays (a call held back to a drawn
// turn) and Order (a switch at a drawn turn) are drawn like its faults.
// A step is thus a function of the drawn inputs (TestHarness_StepIsAFunctionOfItsPlan),
// and rapid replays and shrinks a failing sequence, and keeps it under
// testdata/rapid.
//
// # Usage
//
// An agent author embedding tether's driver runs the same properties over
// their own scenario:
//
//	func TestMyAgent_Lifecycle(t *testing.T) {
//		dir := t.TempDir()
//		synctest.Test(t, func(t *testing.T) {
//			h := proptest.Open(t, proptest.Options{Dir: dir, Cgroups: true})
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
// this test binary serving executor and task modes (where the host gives
// tasks cgroups, tasks with an escaped setsid child among them), and finds
// leaks by scanning /proc for each check's marker;
// TestDriver_RealPropertiesRepeated runs it 20 times in a row, and
// TestDriver_RealRecoverRacesStartsAndStops races Recover with starts and
// stops on one driver.
//
// # Throughput
//
// TestDriver_Properties runs 1,000 checks by default, about 31 steps each:
// some 1,250 to 1,400 checks/s (40,000 steps/s) here without -race. It
// runs on one P (runProperty sets GOMAXPROCS to 1 for the run): its
// goroutines hand over to each other at every turn, a switch on one P and
// a futex wake-up of another thread on two, which cost half the time. The
// log is a MemLog; the checks re-prove only what changed since the last
// step (a MemLog only appends) and read the log in place, without copies;
// the calls of a step run on workers kept from step to step. A profile
// (-rapid.checks=5000 -cpuprofile) puts about 30% of the time in the
// driver (6% of it the state directory's system calls at each
// generation's Open), 36% in the harness (the scheduler's turns 9% of it),
// 7% in the log, 10% in rapid, 16% in the Go runtime.
//
// A check on the MemLog runs the same draws, faults (the store boundary's
// are genLog's, on either log), crashes and invariants as one on the real
// store. The MemLog holds the store's contract: every event checked
// against the lifecycle (fsm.Fold) before anything is written, optimistic
// appends at an expected version (store.ConflictError), unknown tasks,
// sequence numbers, all or nothing, no aliasing. What it cannot find is a
// bug of the store itself or one that needs its bytes: an encoding that
// loses a field, a head or live index out of step with the log, a commit
// lost across a close and reopen, Check's own findings. TestDriver_PropertiesBolt
// (a tenth of the checks, about 65 checks/s) and Enumerate's bbolt
// configurations run the same property on store.Store for those, and the
// store's own tests (damage, power loss) go further.
//
// testdata/mutants holds planted bugs as find/replace data; `make
// mutants` (cmd/mutants) applies each one through go test -overlay and
// fails if the suite lets one survive.
//
// The simulated World stands in for the real executor; the driver's table is
// fsm.Lifecycle (the log checks every append against it).
package proptest
