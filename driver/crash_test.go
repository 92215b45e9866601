package driver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// runChild is a driver process that runs one scenario on a state dir and
// may be SIGKILLed by TETHER_CRASHPOINT on the way. It prints "ack <point>"
// for every append that returned, before the crash hook runs, so the parent
// can check that no acknowledged event was lost (invariant 7).
func runChild(args []string) int {
	scenario, dir := args[0], args[1]
	hooks, err := HooksFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	crash := hooks.Crash
	appended := make(chan struct{}, 64)
	hooks.Crash = func(p, task string) {
		if strings.HasPrefix(p, crashAfterAppend) {
			fmt.Printf("ack %s\n", strings.TrimPrefix(p, crashAfterAppend))
			select {
			case appended <- struct{}{}:
			default:
			}
		}
		if crash != nil {
			crash(p, task)
		}
	}
	cfg := Config{StateDir: dir, ExecutorCommand: []string{os.Args[0], modeExecutor}, KillTimeout: 2 * time.Second, Hooks: hooks}
	var sh *store.Shared
	if scenario == "salvage" || scenario == "gc" {
		// A maintenance beside starts: the driver holds the store only
		// while an operation is in flight (as the CLI does), and the
		// store's own points reach the crash hook.
		if err := PrepareStateDir(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		sh, err = store.OpenShared(statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second, Crash: hooks.StoreCrash()})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		defer sh.Close()
		cfg.Store = sh
	}
	d, err := Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task := func(a ...string) fsm.Spec {
		return fsm.Spec{Driver: "raw_exec", Command: os.Args[0], Args: append(append([]string{modeTask}, a...), dir)}
	}
	// A long-running task leaves a descendant in a session of its own
	// where the host can contain it: only its cgroup finds it.
	sleeper := task("sleep")
	if cgroupsUsable() {
		sleeper = escapingSpecOf(os.Args[0], dir)
	}
	switch scenario {
	case "start":
		_, err = d.StartTask(ctx, "a", sleeper)
	case "start-exit":
		if _, err = d.StartTask(ctx, "a", task("exit", "0")); err == nil || errors.Is(err, ErrStartFailed) {
			_, err = d.WaitTask(ctx, "a")
		}
	case "stop":
		if _, err = d.StartTask(ctx, "a", sleeper); err == nil {
			_, err = d.StopTask(ctx, "a", syscall.SIGTERM, time.Second)
		}
	case "seed":
		d.SkipEarlyChecks()
		spec := task("sleep")
		spec.Driver, spec.CapAdd = "exec", []string{"net_raw"}
		_, err = d.StartTask(ctx, "a", spec)
	case "rejected":
		spec := task("sleep")
		spec.Driver = "bogus"
		_, err = d.StartTask(ctx, "a", spec)
	case "lost":
		var st fsm.Task
		if st, err = d.StartTask(ctx, "a", sleeper); err == nil {
			if err = proc.Kill(ctx, *st.Executor); err == nil {
				_, err = d.WaitTask(ctx, "a")
			}
		}
	case "restart":
		// Exits 1 and is restarted by its executor; the restarted run
		// sleeps (a stable reality for Recover to be idempotent against).
		// The driver folds the restart from the executor's journal.
		spec := task("counted-exit-once", "1", filepath.Join(filepath.Dir(dir), "ran-once"), runsFile(dir))
		spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
		var final fsm.Task
		if _, err = d.StartTask(ctx, "a", spec); err == nil || errors.Is(err, ErrStartFailed) {
			final, err = d.WaitTask(ctx, "a")
		}
		fmt.Println("final", final.State, final.Restarts)
	case "restart-fail":
		// Fails at once, every run (each counted), restarted once by its
		// executor, which then exits.
		spec := task("fail-then-fifo", "1000", runsFile(dir), filepath.Join(filepath.Dir(dir), "no-fifo"))
		spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
		var final fsm.Task
		if _, err = d.StartTask(ctx, "a", spec); err == nil || errors.Is(err, ErrStartFailed) {
			final, err = d.WaitTask(ctx, "a")
		}
		fmt.Println("final", final.State, final.Restarts)
	case "ready-lost":
		// A notify task that says it is ready at once, whose executor
		// dies around its ready entry (TETHER_CRASHPOINT reaches it): the
		// task ends lost, with its ready recorded exactly when journalled.
		spec := task("ready-sleep")
		spec.Readiness = fsm.ReadinessNotify
		var final fsm.Task
		if _, err = d.StartTask(ctx, "a", spec); err == nil || errors.Is(err, ErrStartFailed) {
			if _, rerr := d.WaitReady(ctx, "a"); rerr == nil {
				fmt.Println("ready although its executor died")
			}
			final, err = d.WaitTask(ctx, "a")
		}
		fmt.Println("final", final.State, final.Restarts)
	case "ready":
		// A notify task that says it is ready at once: WaitReady
		// records the ready event.
		spec := task("ready-sleep")
		spec.Readiness = fsm.ReadinessNotify
		if _, err = d.StartTask(ctx, "a", spec); err == nil {
			_, err = d.WaitReady(ctx, "a")
		}
	case "recover":
		_, err = d.Recover(ctx)
	case "salvage", "gc":
		// Two starts beside the maintenance: each is acknowledged (ack
		// lines) as its appends return, whichever store they land in.
		// The maintenance begins once both have had a commit
		// acknowledged, so that what it installs must hold those.
		for len(appended) > 0 {
			<-appended
		}
		var wg sync.WaitGroup
		for _, id := range []string{"b", "c"} {
			wg.Go(func() { _, _ = d.StartTask(ctx, id, sleeper) })
		}
		<-appended
		<-appended
		err = maintain(ctx, scenario, dir, sh, hooks)
		wg.Wait()
	case "launched-log":
		err = launchedLog(ctx, d, task("sleep"))
	default:
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	fmt.Println("done", err)
	return 0
}

// maintain runs the maintenance of a crash scenario on the state dir's
// store: salvage (under a maintenance, with the store's crash points) or
// gc (remove every ended task, then compact).
func maintain(ctx context.Context, scenario, dir string, sh *store.Shared, hooks Hooks) error {
	if scenario == "gc" {
		if _, err := sh.Remove(ctx, time.Now().Add(time.Hour)); err != nil {
			return err
		}
		_, _, err := sh.Compact(ctx)
		return err
	}
	m, err := store.BeginMaintenance(ctx, statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second, Crash: hooks.StoreCrash()})
	if err != nil {
		return err
	}
	defer m.Release()
	world := &executor.Real{StateDir: dir, Command: []string{os.Args[0], modeExecutor}}
	rep, err := SalvageStore(ctx, m, world, hooks)
	if err == nil && !rep.Done() {
		err = fmt.Errorf("salvage not done: %+v", rep)
	}
	return err
}

// launchedLog leaves the log of a task that ends at launched, with its
// executor and task alive: what a relaunch recorded by its executor, or a
// driver of an older version, leaves for Recover (this driver records
// launched and running in one commit when the launch reply says running).
func launchedLog(ctx context.Context, d *Driver, spec fsm.Spec) error {
	const id, nonce = "a", "fixture-nonce-1"
	c, err := executor.Spawn(ctx, executor.SpawnConfig{Command: []string{os.Args[0], modeExecutor}, TaskDir: d.TaskDir(id), Nonce: nonce})
	if err != nil {
		return err
	}
	defer c.Close()
	spec.Name = id
	st, err := c.Launch(ctx, executor.Launch{Spec: fsm.Spec{Driver: spec.Driver, Command: spec.Command, Args: spec.Args}})
	if err != nil {
		return err
	}
	x := c.Identity()
	task := fsm.Task{ID: id}
	for _, in := range []fsm.Event{
		{Type: fsm.EventCreated, Spec: &spec}, {Type: fsm.EventSpawnIntent, Nonce: nonce},
		{Type: fsm.EventExecutorUp, Executor: &x},
		{Type: fsm.EventLaunched, TaskPID: st.PID, TaskStartTime: st.StartTime},
	} {
		evs, _, err := fsm.Step(task, in)
		if err != nil {
			return err
		}
		if _, err := d.Store().Append(ctx, id, task.Version, evs...); err != nil {
			return err
		}
		task, _ = fsm.FoldAll(task, evs...)
	}
	return nil
}

// crashCase says how to reach a crash point: optionally a first child that
// runs prep (crashing at prepPoint when set), leaving a log for Recover to
// work on, then a child that runs scenario with the point armed, and a
// fault to inject.
type crashCase struct {
	prep, prepPoint string
	scenario        string
	fault           string
	// executorCrash: the point is the executor's; the driver child runs
	// to its end and must see the task lost.
	executorCrash bool
}

func crashCases() map[string]crashCase {
	cases := map[string]crashCase{}
	both := func(kind string) []string {
		return []string{crashBeforeAppend + kind, crashAfterAppend + kind}
	}
	set := func(c crashCase, points ...string) {
		for _, p := range points {
			cases[p] = c
		}
	}
	start := crashCase{scenario: "start"}
	for _, e := range []string{"task-created", "spawn-intent", "executor-up", "launch-intent", "launched", "running"} {
		set(start, both(e)...)
	}
	for _, e := range []string{"spawn-executor", "launch-task"} {
		set(start, crashBeforeEffect+e, crashAfterEffect+e)
	}
	set(crashCase{scenario: "start-exit"}, both("task-exited")...)
	stop := crashCase{scenario: "stop"}
	set(stop, both("stop-requested")...)
	set(stop, both("executor-reaped")...)
	set(stop, crashBeforeEffect+"kill-executor", crashAfterEffect+"kill-executor")
	set(crashCase{scenario: "rejected"}, both("config-rejected")...)
	set(crashCase{scenario: "start", fault: "effect:spawn-executor"}, both("spawn-failed")...)
	set(crashCase{scenario: "seed"}, both("launch-failed")...)
	set(crashCase{scenario: "lost"}, both("executor-lost")...)
	set(crashCase{scenario: "stop", fault: "effect:kill-executor"}, both("kill-failed")...)
	set(crashCase{prep: "start", prepPoint: crashAfterAppend + "spawn-intent", scenario: "recover"}, both("start-interrupted")...)
	launched := crashCase{prep: "launched-log", scenario: "recover"}
	set(launched, both("reattached")...)
	set(launched, crashBeforeEffect+"attach", crashAfterEffect+"attach")
	set(crashCase{scenario: "restart"}, both("restart-intent")...)
	set(crashCase{scenario: "ready"}, both("ready")...)
	// A maintenance's durable steps, beside two starts: a salvage of a
	// store with a running task, a gc of one with an ended task.
	for _, p := range []string{store.PointSalvageCopied, PointSalvageSettled, store.PointInstallAside, store.PointInstallRenamed} {
		cases[p] = crashCase{prep: "start", scenario: "salvage"}
	}
	for _, p := range []string{store.PointRemoveCommitted, store.PointCompactCopied, store.PointCompactRenamed} {
		cases[p] = crashCase{prep: "start-exit", scenario: "gc"}
	}
	// The executor's own points: it SIGKILLs itself on its restart path;
	// the driver (not killed) finds it gone, folds what it journalled and
	// kills everything of the task with its cgroup.
	for _, p := range executor.CrashPoints() {
		cases[p] = crashCase{scenario: "restart", executorCrash: true}
	}
	// And its readiness path: it SIGKILLs itself around a run's ready
	// entry; the ready is in the log exactly when it is in the journal.
	for _, p := range []string{executor.CrashBeforeReadyEntry, executor.CrashAfterReadyEntry} {
		cases[p] = crashCase{scenario: "ready-lost", executorCrash: true}
	}
	return cases
}

type childResult struct {
	killed bool
	acks   map[string]int
	out    string
}

func runCrashChild(t *testing.T, dir, scenario, point, fault string) childResult {
	t.Helper()
	cmd := exec.Command(self(t), modeChild, scenario, dir)
	cmd.Env = append(os.Environ(), EnvCrashPoint+"="+point)
	if fault != "" {
		cmd.Env = append(cmd.Env, EnvFault+"="+fault)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := childResult{acks: map[string]int{}, out: out.String() + errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	}
	if err != nil && !r.killed {
		t.Fatalf("child %s (%s): %v\n%s", scenario, point, err, r.out)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			r.acks[ev]++
		}
	}
	return r
}

// TestCrashPoints_EveryPointRecovers runs, for every registered crash
// point, a real driver in a child process that SIGKILLs itself at that
// point, then recovers with a new driver on the same state dir and checks
// the design's invariants against the real process table:
//  1. no leak: the live processes are exactly the executors and tasks of
//     running tasks;
//  2. terminal means dead;
//  6. a stranger (a process of ours the driver does not own) is untouched;
//  7. every append the child saw acknowledged is in the store.
//
// It also checks that Recover is idempotent. It fails if a crash point
// has no case here.
func TestCrashPoints_EveryPointRecovers(t *testing.T) {
	cases := crashCases()
	for _, p := range CrashPoints() {
		if _, ok := cases[p]; !ok {
			t.Errorf("crash point %s has no crash test case", p)
		}
	}
	for _, point := range CrashPoints() {
		c, ok := cases[point]
		if !ok {
			continue
		}
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			dir := stateDir(t)
			stranger := exec.Command(self(t), modeTask, "sleep", "stranger-"+dir)
			if err := stranger.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()

			if c.prep != "" {
				if r := runCrashChild(t, dir, c.prep, c.prepPoint, ""); r.killed != (c.prepPoint != "") {
					t.Fatalf("preparing child %s (crash point %q) killed=%v:\n%s", c.prep, c.prepPoint, r.killed, r.out)
				}
			}
			r := runCrashChild(t, dir, c.scenario, point, c.fault)
			// The executor dies at its point, and the driver child sees
			// it gone: the task lost. Or, when the task's first run ended
			// before the executor answered the launch (a loaded host),
			// the executor's restart path (and its crash) came first: the
			// launch went unanswered, and the child recorded it failed
			// and reaped it. Either way what recovery finds is checked.
			endedRight := strings.Contains(r.out, "final lost") ||
				r.acks["launch-failed"] > 0 && strings.Contains(r.out, "final failed")
			switch {
			case c.executorCrash && (r.killed || !endedRight):
				t.Fatalf("executor crash point %s: the driver child should end, with the task lost (or failed, its launch unanswered):\n%s", point, r.out)
			case !c.executorCrash && !r.killed:
				t.Fatalf("crash point %s was not reached by scenario %s:\n%s", point, c.scenario, r.out)
			}
			t.Logf("acknowledged before the crash: %v", r.acks)
			checkRecovery(t, dir, r.acks)
			if c.scenario == "restart" {
				checkNoDoubleStart(t, dir)
			}
			if c.scenario == "ready-lost" {
				// A run's ready is a fact once journalled: in the log
				// exactly when in the journal, whichever side of the
				// entry the executor died.
				d := newDriver(t, dir, Hooks{})
				sameReadies(t, readyEvents(t, d, "a"), journalReadies(t, d, "a"))
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
			}
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(stranger.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
				t.Fatalf("the stranger was signalled: %v", ws)
			}
		})
	}
}

// A driver killed between a launch and its record (the log ends at
// launching) while its executor goes on: the task fails, is restarted by
// its executor, fails again, and the executor exits. Recover finds the
// executor gone; what its journal holds (the restart, written ahead of the
// relaunch) is recorded before the task's end, so that the log has every
// run the task had: recovery of a launch reads the journal as recovery of
// a running task does.
func TestCrashPoints_ProbedLaunchFoldsTheJournal(t *testing.T) {
	dir := stateDir(t)
	r := runCrashChild(t, dir, "restart-fail", crashBeforeAppend+"launched", "")
	if !r.killed {
		t.Fatalf("the child did not crash before recording the launch:\n%s", r.out)
	}
	d := newDriver(t, dir, Hooks{})
	taskDir := d.TaskDir("a")
	st, err := d.Store().LoadTask(ctxT(t), "a")
	if err != nil || st.State != fsm.StateLaunching || st.Executor == nil {
		t.Fatalf("after the crash: %s %v, want launching with its executor", st.State, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, *st.Executor) // two runs, one restart, then the executor exits
	j, _, err := executor.SideFiles(taskDir).Journal()
	if err != nil || len(j.Entries) != 2 {
		t.Fatalf("the executor's journal: %v %v, want its restart and relaunch", j.Entries, err)
	}
	checkRecovery(t, dir, r.acks)
	checkNoDoubleStart(t, dir)
}

// runsFile is where the restart scenario's task counts its runs.
func runsFile(dir string) string { return filepath.Join(filepath.Dir(dir), "runs") }

// checkNoDoubleStart: a crash at any point of a restart never starts the
// task more often than its log allows: every run but the first follows a
// restart intent, written ahead (the executor journals it before it
// relaunches, the driver folds the journal), so the runs that started are
// at least one and at most one more than the restart-intent events.
func checkNoDoubleStart(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(runsFile(dir))
	if err != nil {
		t.Fatalf("the restart scenario's task never ran: %v", err)
	}
	runs := strings.Count(string(b), "\n")
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	intents := 0
	for _, ev := range eventTypes(t, d, "a") {
		if ev == fsm.EventRestartIntent.String() {
			intents++
		}
	}
	t.Logf("runs %d, restart intents %d", runs, intents)
	if runs < 1 || runs > 1+intents {
		t.Errorf("the task started %d times with %d restart intents in its log: a run without its intent written ahead", runs, intents)
	}
}

// TestRecover_CrashDuringRecoverThenRecoverAgain crashes a driver at each
// step of a Recover of a start interrupted while spawning, then recovers
// again.
func TestRecover_CrashDuringRecoverThenRecoverAgain(t *testing.T) {
	for _, point := range []string{crashAfterAppend + "start-interrupted", crashBeforeEffect + "kill-executor", crashAfterEffect + "kill-executor", crashBeforeAppend + "executor-reaped"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			dir := stateDir(t)
			if r := runCrashChild(t, dir, "start", crashAfterAppend+"spawn-intent", ""); !r.killed {
				t.Fatalf("first child did not crash:\n%s", r.out)
			}
			r := runCrashChild(t, dir, "recover", point, "")
			if !r.killed {
				t.Fatalf("recovering child did not crash at %s:\n%s", point, r.out)
			}
			checkRecovery(t, dir, r.acks)
		})
	}
}

func checkRecovery(t *testing.T, dir string, acks map[string]int) {
	t.Helper()
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	rep, err := d.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v (%+v)", err, rep)
	}
	ids, err := d.Tasks(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	// A task its executor is relaunching (its restart-intent folded, its
	// relaunch not yet: a loaded host) is followed until the relaunch is
	// recorded too: Recover reattached to it and supervises it, and what
	// is checked below is the task once it runs again (or has ended).
	for _, r := range rep.Tasks {
		if r.To != fsm.StateRestarting {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		_, err := d.FollowTask(fctx, r.ID, func(st fsm.Task) {
			if st.State != fsm.StateRestarting {
				cancel()
			}
		})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("following task %s through its relaunch: %v", r.ID, err)
		}
	}
	// Invariant 7: acknowledged appends survived.
	have := map[string]int{}
	logs := map[string][]string{}
	for _, id := range ids {
		for _, ev := range eventTypes(t, d, id) {
			have[ev]++
			logs[id] = append(logs[id], ev)
		}
	}
	for ev, n := range acks {
		if have[ev] < n {
			t.Errorf("%d %s appends were acknowledged, the store holds %d", n, ev, have[ev])
		}
	}
	// Invariants 1 and 2. The process table is read first: a running
	// task's descendant forked after the scan is not in it, and one forked
	// before is in the cgroup when its members are read next.
	live := testproc.Marked(dir)
	var owned []int
	for _, id := range ids {
		info, err := d.InspectTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case info.State == fsm.StateRunning:
			if !info.ExecutorAlive {
				t.Errorf("task %s running but its executor is dead", id)
			}
			owned = append(owned, info.Executor.PID, info.TaskPID)
			owned = append(owned, cgroupMembers(t, info.Task)...)
		case info.State.Terminal():
			checkReaped(t, d, info.Task)
			checkCgroupGone(t, info.Task)
		default:
			t.Errorf("task %s left in %s after Recover (log %v)", id, info.State, logs[id])
		}
	}
	for _, p := range live {
		if !slices.Contains(owned, p.PID) && !strings.Contains(p.Cmdline, "stranger-") && testproc.Alive(p.PID) {
			t.Errorf("leak after recovery: %s (tasks %v)", p, logs)
		}
	}
	// Idempotence: a second Recover by a new driver appends nothing.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := eventTypes(t, d2, id); !slices.Equal(got, logs[id]) {
			t.Errorf("second Recover changed task %s: %v -> %v (first Recover: %+v)", id, logs[id], got, rep)
		}
		if st, _ := d2.InspectTask(ctx, id); st.State == fsm.StateRunning {
			final, err := d2.StopTask(ctx, id, syscall.SIGKILL, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			checkReaped(t, d2, final)
		}
	}
}

// A run's ready journalled by the executor of a task whose log ends at
// launched (a relaunch it journalled, or an older driver's log) folds
// after the running it implies, and the entries after it fold too: a
// crash between the ready and its record loses nothing.
func TestInputs_ReadyOfALaunchedTaskFoldsAfterItsRunning(t *testing.T) {
	spec := fsm.Spec{Driver: "raw_exec", Command: "/bin/true", Readiness: fsm.ReadinessNotify,
		Restart: &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}}
	x := fsm.Identity{PID: 10, StartTime: 1, BootID: "b", Nonce: "n"}
	var st fsm.Task
	st.ID = "a"
	for _, in := range []fsm.Event{
		{Type: fsm.EventCreated, Time: 1, Spec: &spec}, {Type: fsm.EventSpawnIntent, Time: 2, Nonce: "n"},
		{Type: fsm.EventExecutorUp, Time: 3, Executor: &x},
		{Type: fsm.EventLaunched, Time: 4, TaskPID: 11, TaskStartTime: 5},
	} {
		evs, _, err := fsm.Step(st, in)
		if err != nil {
			t.Fatal(err)
		}
		if st, err = fsm.FoldAll(st, evs...); err != nil {
			t.Fatal(err)
		}
	}
	if st.State != fsm.StateLaunched {
		t.Fatalf("fixture: %s, want launched", st.State)
	}
	exit := fsm.ExitStatus{Code: 1}
	r := report{entries: []fsm.Event{
		{Type: fsm.EventReady, Time: 6, Attempt: 1, TaskPID: 11, TaskStartTime: 5},
		{Type: fsm.EventRestartIntent, Time: 7, Attempt: 1, Exit: &exit},
	}}
	var got []string
	cur := st
	for _, e := range (&Driver{}).inputs(st, r) {
		got = append(got, e.Type.String())
		next, err := fsm.Fold(cur, e)
		if err != nil {
			t.Fatalf("%v does not fold on %s: %v", e.Type, cur.State, err)
		}
		cur = next
	}
	if want := []string{"running", "ready", "restart-intent"}; !slices.Equal(got, want) {
		t.Fatalf("inputs %v, want %v", got, want)
	}
	if cur.Readies != 1 || cur.State != fsm.StateRestarting {
		t.Fatalf("after the fold: %s, readies %d", cur.State, cur.Readies)
	}
}
