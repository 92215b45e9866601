package proptest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
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

// TestDriver_AppendCommittedThenFailedKeepsTheDurableState: an append
// that committed and then reported failure (its acknowledgement lost: a
// context cancelled once the commit was claimed) left the driver holding
// the state before it, while the log held the events: InspectTask
// answered a state the log had left behind (fold(log) != live state), and
// the driver's next decisions started from it. Found by the store-boundary
// fault store:lost-ack:<event> (TestEnumerate_EveryCrashPoint, and
// TestDriver_Properties at its first check).
//
// Fix (driver/owner.go apply): an append that fails for any reason but a
// conflict has an unknown outcome; the owner reloads the task from the log
// before it reports the error, so it holds what is durable.
func TestDriver_AppendCommittedThenFailedKeepsTheDurableState(t *testing.T) {
	for _, ev := range []string{"task-created", "executor-up", "launched", "stop-requested", "executor-reaped"} {
		t.Run(ev, func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				plan := Plan{Faults: []Point{{Name: storeLostAck + ev, Nth: 1}}}
				if ev == "stop-requested" || ev == "executor-reaped" {
					h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
					if s := h.Stop(plan, "a"); len(s.Fired) != 1 {
						t.Fatalf("the fault did not fire: %+v", s)
					}
				} else if s := h.Start(plan, []string{"a"}, []fsm.Spec{SpecFor("run")}); len(s.Fired) != 1 {
					t.Fatalf("the fault did not fire: %+v", s)
				}
				h.Check(t) // fold(log) == live state
				if _, err := h.Recover(Plan{}); err != nil {
					t.Fatal(err)
				}
				h.CheckRecovered(t)
			})
		})
	}
}

// TestDriver_StartReturnsRunningWhenAStopFollows is the deterministic
// regression test of the race TestDriver_Linearizable found in the old
// driver: StartTask read its result after its effect loop returned,
// without holding the task, so a StopTask landing in between made a start
// that had reached running return "ended reaping". Here the start is held
// just after running is durable, a stop is queued behind it, and only
// then is the start let go: it must return running, and the stop stopped.
//
// Fix (driver/owner.go, the task owner): the owner answers the starter in
// the same turn that records running, before it takes the next input.
func TestDriver_StartReturnsRunningWhenAStopFollows(t *testing.T) {
	dir := scratch(t)
	synctest.Test(t, func(t *testing.T) {
		w := NewWorld()
		reached, release := make(chan struct{}), make(chan struct{})
		hooks := driver.Hooks{Crash: func(point, _ string) {
			if point == "after-append:running" {
				close(reached)
				<-release
			}
		}}
		d, err := driver.Open(driver.Config{StateDir: dir, Store: NewMemLog(), World: w.View(w.NewGeneration(1)), Hooks: hooks})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		ctx := context.Background()
		type result struct {
			st  fsm.Task
			err error
		}
		started, stopped := make(chan result, 1), make(chan result, 1)
		go func() {
			st, err := d.StartTask(ctx, "a", SpecFor("run"))
			started <- result{st, err}
		}()
		<-reached
		go func() {
			st, err := d.StopTask(ctx, "a", 0, 0)
			stopped <- result{st, err}
		}()
		synctest.Wait() // the stop is queued behind the start's turn
		close(release)
		if r := <-started; r.err != nil || r.st.State != fsm.StateRunning {
			t.Errorf("StartTask with a stop queued behind it: %v, %s; want running", r.err, r.st.State)
		}
		if r := <-stopped; r.err != nil || r.st.State != fsm.StateStopped {
			t.Errorf("StopTask: %v, %s; want stopped", r.err, r.st.State)
		}
	})
}

// TestDriver_WaitTaskCollectsTheEndOfAnExecutorOnItsWayOut: a driver that
// reattached while the executor was on its way out (its task ended, its
// exit status on disk, its socket closed, the process not yet dead) took
// it for a frozen executor, "alive but does not answer", and left the task
// alone: running in the log, with nobody to notice its end, so WaitTask
// waited forever. Found by TestDriver_RealPropertiesRepeated under load (a
// task that exits right after Recover reattached to it): 1 in ~30 runs.
//
// Fix (driver/effects.go endOf): an executor that is alive but does not
// answer has its exit record read before anything is concluded; a record
// that matches the log is the task's end.
func TestDriver_WaitTaskCollectsTheEndOfAnExecutorOnItsWayOut(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		h.Crash()
		h.World.ExitTask("a", 3) // its executor records the exit, then stops answering
		if err := h.newGeneration(); err != nil {
			t.Fatal(err)
		}
		s := h.Run(Plan{Faults: []Point{{Name: "world:reattach", Nth: 1}}}, WaitCall("a"))
		if err := s.Outcomes[0].Err; err != nil || len(s.Fired) != 1 {
			t.Fatalf("WaitTask beside an executor that stopped answering: %v (fired %v); want the task's end", err, s.Fired)
		}
		if got := state(t, h, "a"); got != fsm.StateExited {
			t.Fatalf("state %s, want exited", got)
		}
		h.Check(t)
	})
}

// TestDriver_WaitTaskKeepsWatchingATaskLeftAlone: a WaitTask on a task
// whose executor did not answer once (alive, no exit record yet: its
// connection refused for a moment) left the task alone and never asked again, so when the task
// ended later nobody noticed and the wait never returned, although the
// executor answered again. WaitTask must not hang on a task whose end
// nobody would notice.
//
// Fix (driver/owner.go, driver/effects.go): a probe that concluded nothing
// while a watcher waits is retried after the probe timeout.
func TestDriver_WaitTaskKeepsWatchingATaskLeftAlone(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		h.Crash()
		if err := h.newGeneration(); err != nil {
			t.Fatal(err)
		}
		statuses := 0
		h.World.Fault = func(op string) WorldFault {
			if op == OpReattach {
				if statuses++; statuses == 1 {
					return FaultFail // the first connection is refused
				}
			}
			return NoFault
		}
		done := make(chan error, 1)
		go func() {
			_, err := h.Driver().WaitTask(context.Background(), "a")
			done <- err
		}()
		synctest.Wait() // the wait has asked once, unanswered
		h.World.ExitTask("a", 0)
		timeout := time.NewTimer(time.Hour) // fake time: the driver's retries run first
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WaitTask: %v", err)
			}
		case <-timeout.C:
			t.Fatalf("WaitTask did not return within an hour of the task's end (the executor answered again after %d questions)", statuses)
		}
		if got := state(t, h, "a"); got != fsm.StateExited {
			t.Fatalf("state %s, want exited", got)
		}
		h.Check(t)
	})
}

// TestDriver_RestartReportedWhileItsAppendFailedIsRecordedLater: the
// supervisor follows the executor's restart journal and reports each
// restart; when the append of a reported restart-intent failed, the
// supervisor went on from past it, so the relaunch it reported next no
// longer applied (launched from running) and was dropped: the log kept
// the first run's pid while the executor ran a second one, and nothing
// asked again (a Recover beside leaves a supervised task alone). Found by
// TestDriver_Properties (a service task exits, with a fault at the first
// fault point of the step).
//
// Fix (driver/owner.go supervised): a report that starts past what the log
// holds restarts the supervision from the log, so the entries in between
// are reported again; a report whose append fails stops the supervision,
// so that the next Recover reconciles the task from the journal instead
// of leaving it to a supervisor that is past what the log holds.
func TestDriver_RestartReportedWhileItsAppendFailedIsRecordedLater(t *testing.T) {
	for _, fault := range []string{"append:restart-intent", storeFail + "restart-intent", storeLostAck + "restart-intent"} {
		t.Run(fault, func(t *testing.T) {
			within(t, func(t *testing.T, h *Harness) {
				h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("service")})
				s := h.Behind(Plan{Faults: []Point{{Name: fault, Nth: 1}}}, func(w *World) { w.ExitTask("a", 0) })
				if len(s.Fired) != 1 {
					t.Fatalf("the fault did not fire: %+v", s)
				}
				h.Check(t)
				if r, err := h.Recover(Plan{}); err != nil || r.Outcomes[0].Err != nil {
					t.Fatalf("recover: %v %+v", err, r.Outcomes)
				}
				h.CheckRecovered(t) // the log follows the relaunched run
				info := h.Driver()
				st, err := info.InspectTask(t.Context(), "a")
				if err != nil || st.Restarts != 1 {
					t.Fatalf("after the restart: %v, %d restarts recorded; want 1", err, st.Restarts)
				}
			})
		})
	}
}

// TestDriver_ReapingKillsTheRunItsExecutorRelaunched: a task left in
// reaping (its stop recorded, the kill not yet done) whose executor then
// restarted it by its restart policy (the stop never reached the executor)
// was killed by the log's task pid, the first run's: on a host without
// cgroups, once the executor was gone, the relaunched run (its own process
// group) outlived the task recorded stopped. The executor's launch record
// names the latest run. Found by TestDriver_Properties (a service task, a
// stop whose append committed and then failed, the task exiting, its
// executor killed).
//
// Fix (driver/effects.go killExecutor): the launch record is read whenever
// the executor is known, and a run it names that the log does not is
// killed too.
func TestDriver_ReapingKillsTheRunItsExecutorRelaunched(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("service")})
		// The stop is recorded, its kill left for a later Recover.
		h.Stop(Plan{Faults: []Point{{Name: storeLostAck + "stop-requested", Nth: 1}}}, "a")
		if got := state(t, h, "a"); got != fsm.StateReaping {
			t.Fatalf("state %s after the stop's lost acknowledgement, want reaping", got)
		}
		h.World.ExitTask("a", 0) // the executor, never told to stop, restarts it
		h.Behind(Plan{}, func(w *World) {})
		h.Behind(Plan{}, func(w *World) { w.KillExecutors() })
		if _, err := h.Recover(Plan{}); err != nil {
			t.Fatal(err)
		}
		h.CheckRecovered(t) // nothing of the task outlives its stop
		if got := state(t, h, "a"); got != fsm.StateStopped {
			t.Fatalf("state %s, want stopped", got)
		}
	})
}

// TestDriver_AbandonedWaitStopsTheProbes: a WaitTask on a task whose
// executor does not answer has the task probed again after each probe
// timeout, for as long as it waits; once its caller gives up (its context
// ends), the owner forgets the watch and the probes stop, instead of
// going on until the task ends.
func TestDriver_AbandonedWaitStopsTheProbes(t *testing.T) {
	within(t, func(t *testing.T, h *Harness) {
		h.Start(Plan{}, []string{"a"}, []fsm.Spec{SpecFor("run")})
		h.Crash()
		if err := h.newGeneration(); err != nil {
			t.Fatal(err)
		}
		var probes atomic.Int64
		h.World.Fault = func(op string) WorldFault {
			if op == OpReattach {
				probes.Add(1)
				return FaultFail // never answers
			}
			return NoFault
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := h.Driver().WaitTask(ctx, "a")
			done <- err
		}()
		// Fake time: an hour of probe timeouts passes while it waits.
		time.Sleep(time.Hour)
		synctest.Wait()
		waiting := probes.Load()
		if waiting < 2 {
			t.Fatalf("%d probes in an hour of waiting; want the task asked again while a watcher waits", waiting)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitTask after its context ended: %v", err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if after := probes.Load() - waiting; after > 1 {
			t.Fatalf("%d more probes in the hour after the wait was given up; want at most the one in flight", after)
		}
		h.World.Fault = nil
	})
}

// TestDriver_NormalEndCollectsWithoutRecoveryKill: a task that exits (or
// is stopped) while its driver is connected to its executor ends without
// recovery's kill: the exit the executor reported is recorded, the
// executor's death is confirmed through the connection (its shutdown),
// and nothing is read or killed by identity: no launch record, no exit
// record, no kill of the executor by identity, and (its cgroup emptied by
// the executor, as it says) no kill of the task's cgroup. Without a
// cgroup, the executor cannot say its task is gone, and the driver kills
// the task's group itself.
func TestDriver_NormalEndCollectsWithoutRecoveryKill(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cgroups  bool
		stop     bool
		killTask int // the kill-task calls wanted
		dismiss  int // the executor killed at once (it said Emptied), else shut down
	}{
		{"exit", true, false, 0, 1},
		{"stop", true, true, 0, 1},
		{"exit without cgroups", false, false, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := scratch(t)
			w := NewWorld()
			w.SetCgroups(tc.cgroups)
			d, err := driver.Open(driver.Config{StateDir: dir, Store: NewMemLog(), World: w.View(w.NewGeneration(1))})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			ctx := context.Background()
			if st, err := d.StartTask(ctx, "a", SpecFor("run")); err != nil || st.State != fsm.StateRunning {
				t.Fatalf("StartTask: %v %s", err, st.State)
			}
			var final fsm.Task
			if tc.stop {
				final, err = d.StopTask(ctx, "a", 0, 0)
			} else {
				if !w.ExitTask("a", 3) {
					t.Fatal("no task to exit")
				}
				final, err = d.WaitTask(ctx, "a")
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.stop && final.State != fsm.StateStopped:
				t.Fatalf("stopped task ended %s", final.State)
			case !tc.stop && (final.State != fsm.StateExited || final.Exit == nil || final.Exit.Code != 3):
				t.Fatalf("exited task ended %s %+v", final.State, final.Exit)
			}
			for op, want := range map[string]int{OpKill: 0, "launch-record": 0, "exit-status": 0, OpKillTask: tc.killTask, OpDismiss: tc.dismiss, OpShutdown: 1 - tc.dismiss} {
				if got := w.Calls(op); got != want {
					t.Errorf("the normal end asked the world for %s %d times, want %d", op, got, want)
				}
			}
			if live := w.Live(); len(live) != 0 {
				t.Errorf("alive after the end: %v", live)
			}
		})
	}
}

// TestSettleLost_KillsWhatTheReadablePrefixProves: a task a salvage lost
// is killed by what could be read of its log (driver.SettleLost): its
// executor by proven identity, its task with it; one whose readable prefix
// proves nothing is refused (ErrUnproven) and nothing is signalled; one
// that had ended is left alone.
func TestSettleLost_KillsWhatTheReadablePrefixProves(t *testing.T) {
	dir := scratch(t)
	w := NewWorld()
	w.SetCgroups(true)
	d, err := driver.Open(driver.Config{StateDir: dir, Store: NewMemLog(), World: w.View(w.NewGeneration(1))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := d.StartTask(ctx, "a", SpecFor("fork"))
	if err != nil || st.State != fsm.StateRunning {
		t.Fatalf("StartTask: %v %s", err, st.State)
	}
	d.Abandon() // the driver is gone; its store is beyond repair
	other := w.View(w.NewGeneration(2))
	if _, err := driver.SettleLost(ctx, other, store.LostTask{ID: "a", Live: true, State: st.State}); !errors.Is(err, driver.ErrUnproven) {
		t.Fatalf("SettleLost with nothing readable: %v, want ErrUnproven", err)
	}
	if len(w.Live()) == 0 || len(w.Signals()) != 0 {
		t.Fatalf("an unproven lost task had processes signalled: %v", w.Signals())
	}
	if set, err := driver.SettleLost(ctx, other, store.LostTask{ID: "a", State: fsm.StateExited}); err != nil || !set.Ended {
		t.Fatalf("SettleLost of an ended task: %+v %v", set, err)
	}
	set, err := driver.SettleLost(ctx, other, store.LostTask{ID: "a", Live: true, State: st.State, Nonce: st.Nonce, Prefix: st})
	if err != nil || set.Executor == nil || *set.Executor != *st.Executor {
		t.Fatalf("SettleLost: %+v %v, want the executor %+v killed", set, err, st.Executor)
	}
	if live := w.Live(); len(live) != 0 {
		t.Errorf("alive after SettleLost: %v", live)
	}
}
