package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/store"
)

// checkReaped asserts invariant 2 for a terminal task: its executor and its
// task are confirmed dead.
func checkReaped(t *testing.T, d *Driver, st fsm.Task) {
	t.Helper()
	if !st.State.Terminal() {
		t.Fatalf("task %s is %s, want terminal", st.ID, st.State)
	}
	if st.Executor != nil {
		if alive, err := proc.Alive(*st.Executor); err != nil || alive {
			t.Errorf("task %s is %s but its executor %d is alive (%v)", st.ID, st.State, st.Executor.PID, err)
		}
	}
	if st.TaskPID != 0 {
		if alive, err := proc.Alive(fsm.Identity{PID: st.TaskPID, StartTime: st.TaskStartTime}); err == nil && alive {
			t.Errorf("task %s is %s but its process %d is alive", st.ID, st.State, st.TaskPID)
		}
	}
}

func eventTypes(t *testing.T, d *Driver, id string) []string {
	t.Helper()
	evs, err := d.TaskEvents(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type.String())
	}
	return out
}

func TestStartTask_RunsUntilExit(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	st, err := d.StartTask(ctx, "three", taskSpec(t, dir, "exit", "3"))
	if err != nil {
		// A task this short may exit before supervision attaches.
		if st.State != fsm.StateRunning && !st.State.OwnsExecutor() && st.State != fsm.StateExited {
			t.Fatalf("start: %v", err)
		}
	}
	final, err := d.WaitTask(ctx, "three")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit == nil || final.Exit.Code != 3 {
		t.Fatalf("final %s exit %v, want exited with code 3", final.State, final.Exit)
	}
	checkReaped(t, d, final)
	evs := eventTypes(t, d, "three")
	if evs[len(evs)-1] != "executor-reaped" {
		t.Errorf("log does not end with executor-reaped: %v", evs)
	}
}

// The seed (Nomad issue 11958): the start fails after the executor is up,
// in the executor itself. The task must end failed with its executor
// confirmed dead and nothing left running.
func TestStartTask_SeedNetRawFailsInExecutorAndIsReaped(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	d.SkipEarlyChecks()
	spec := taskSpec(t, dir, "sleep")
	spec.Driver, spec.CapAdd = "exec", []string{"net_raw"}
	began := time.Now()
	st, err := d.StartTask(ctxT(t), "seed", spec)
	t.Logf("seed scenario: start to reaped in %s", time.Since(began))
	if !errors.Is(err, ErrStartFailed) {
		t.Fatalf("start: %v, want ErrStartFailed", err)
	}
	if !strings.Contains(err.Error(), "net_raw") {
		t.Errorf("error %q does not name net_raw", err)
	}
	if st.State != fsm.StateFailed || st.Executor == nil {
		t.Fatalf("state %s executor %v, want failed after an executor was up", st.State, st.Executor)
	}
	checkReaped(t, d, st)
	want := []string{"task-created", "spawn-intent", "executor-up", "launch-intent", "launch-failed", "executor-reaped"}
	if got := eventTypes(t, d, "seed"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestStartTask_RefusesDisallowedCapBeforeSpawning(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	spec := taskSpec(t, dir, "sleep")
	spec.Driver, spec.CapAdd = "exec", []string{"net_raw"}
	st, err := d.StartTask(ctxT(t), "early", spec)
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "net_raw") {
		t.Fatalf("start: %v, want ErrInvalidSpec naming net_raw", err)
	}
	if st.State != fsm.StateFailed || st.Nonce != "" {
		t.Fatalf("state %s nonce %q: want failed with nothing spawned", st.State, st.Nonce)
	}
	if got := eventTypes(t, d, "early"); !slices.Equal(got, []string{"task-created", "config-rejected"}) {
		t.Errorf("events %v", got)
	}
}

func TestStartTask_MissingCommandIsReaped(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	spec := fsm.Spec{Driver: "raw_exec", Command: "/nonexistent/tether-no-such-binary"}
	st, err := d.StartTask(ctxT(t), "missing", spec)
	if !errors.Is(err, ErrStartFailed) || !errors.Is(err, executor.ErrCommandNotFound) && !strings.Contains(err.Error(), "not found") {
		t.Fatalf("start: %v, want a failed start saying the command was not found", err)
	}
	checkReaped(t, d, st)
}

func TestValidateTaskID_Rules(t *testing.T) {
	for id, ok := range map[string]bool{
		"web": true, "a": true, "A9": true, "web-1.2_x": true, "a..b": true, "x-": true, strings.Repeat("x", 63): true,
		"": false, ".": false, "..": false, ".hidden": false, "-x": false, "_x": false, "a/b": false, "../escape": false,
		strings.Repeat("x", 64): false, "héllo": false, "a b": false, "a\x00": false, "a\n": false,
	} {
		if err := ValidateTaskID(id); (err == nil) != ok {
			t.Errorf("ValidateTaskID(%q) = %v, want ok %v", id, err, ok)
		}
	}
}

func TestStartTask_RefusesBadIDs(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	for _, id := range []string{"", "..", "../escape", "a/b", ".hidden", strings.Repeat("x", 64)} {
		if _, err := d.StartTask(ctxT(t), id, taskSpec(t, dir, "sleep")); !errors.Is(err, ErrInvalidTaskID) {
			t.Errorf("id %q: %v, want ErrInvalidTaskID", id, err)
		}
	}
	ents, _ := os.ReadDir(dir + "/tasks")
	if len(ents) != 0 {
		t.Errorf("task dirs created for refused ids: %v", ents)
	}
}

func TestStartTask_RefusesDuplicateID(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "dup", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartTask(ctx, "dup", taskSpec(t, dir, "sleep")); !errors.Is(err, ErrTaskExists) {
		t.Errorf("second start: %v, want ErrTaskExists", err)
	}
	st, err := d.StopTask(ctx, "dup", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, st)
	// A driver that has not seen the id learns it from the append's
	// conflict: refused, with the log untouched and nothing spawned.
	before, err := d.TaskEvents(ctx, "dup")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, Hooks{Crash: func(point, _ string) {
		if strings.HasPrefix(point, "before-effect:") {
			t.Errorf("an effect ran for a duplicate start: %s", point)
		}
	}})
	defer d2.Close()
	got, err := d2.StartTask(ctx, "dup", taskSpec(t, dir, "sleep"))
	if !errors.Is(err, ErrTaskExists) || got.State != fsm.StateStopped {
		t.Errorf("start of an id another driver recorded: %s, %v; want ErrTaskExists and the stopped task", got.State, err)
	}
	if after, err := d2.TaskEvents(ctx, "dup"); err != nil || len(after) != len(before) {
		t.Errorf("the log went from %d to %d events (%v)", len(before), len(after), err)
	}
}

func TestStopTask_GracefulSignal(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "svc", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	st, err := d.StopTask(ctx, "svc", syscall.SIGTERM, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != fsm.StateStopped || st.Exit == nil || st.Exit.Signal != int(syscall.SIGTERM) {
		t.Fatalf("stop: %s exit %v, want stopped by SIGTERM", st.State, st.Exit)
	}
	checkReaped(t, d, st)
	// Stopping again is not an error.
	if again, err := d.StopTask(ctx, "svc", 0, 0); err != nil || again.State != fsm.StateStopped {
		t.Errorf("second stop: %s %v", again.State, err)
	}
}

func TestStopTask_ForcedKillAfterGrace(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	st, err := d.StartTask(ctx, "stubborn", taskSpec(t, dir, "ignore-term"))
	if err != nil {
		t.Fatal(err)
	}
	waitIgnoring(t, st.TaskPID, syscall.SIGTERM)
	st, err = d.StopTask(ctx, "stubborn", syscall.SIGTERM, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != fsm.StateStopped || st.Exit == nil || st.Exit.Signal != int(syscall.SIGKILL) {
		t.Fatalf("stop: %s exit %v, want stopped by SIGKILL after the grace", st.State, st.Exit)
	}
	checkReaped(t, d, st)
}

// A stop with a long grace of a task this driver did not start (its kill
// effect reattaches to the executor on a connection of its own) is
// escalated by a later StopTask with SIGKILL: the driver reaches the
// executor through the proven identity and the task dies at once, rather
// than after the hour.
func TestStopTask_EscalatesAKillThatReattached(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	first := newDriver(t, dir, Hooks{})
	st, err := first.StartTask(ctx, "stubborn", taskSpec(t, dir, "ignore-term"))
	if err != nil {
		t.Fatal(err)
	}
	waitIgnoring(t, st.TaskPID, syscall.SIGTERM)
	if err := first.Close(); err != nil { // the task runs on
		t.Fatal(err)
	}
	killing := make(chan struct{})
	var once sync.Once
	d := newDriver(t, dir, Hooks{Crash: func(point, _ string) {
		if point == "before-effect:kill-executor" {
			once.Do(func() { close(killing) })
		}
	}})
	defer d.Close()
	slow := make(chan error, 1)
	go func() {
		st, err := d.StopTask(ctx, "stubborn", syscall.SIGTERM, time.Hour)
		if err == nil && st.State != fsm.StateStopped {
			err = fmt.Errorf("state %s", st.State)
		}
		slow <- err
	}()
	<-killing
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	pid := st.TaskPID
	st, err = d.StopTask(sctx, "stubborn", syscall.SIGKILL, 0)
	if err != nil || st.State != fsm.StateStopped || st.Exit == nil || st.Exit.Signal != int(syscall.SIGKILL) {
		_ = syscall.Kill(pid, syscall.SIGKILL) // end the hour's wait, so the driver can close
		t.Fatalf("escalating stop: %s exit %v, %v; want stopped by SIGKILL at once", st.State, st.Exit, err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("the stop with the hour's grace: %v", err)
	}
	checkReaped(t, d, st)
}

func TestStopTask_KillsGrandchildren(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "family", taskSpec(t, dir, "grandchildren")); err != nil {
		t.Fatal(err)
	}
	st, err := d.StopTask(ctx, "family", syscall.SIGTERM, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, st)
	// The stateDir cleanup fails the test on any grandchild left.
}

func TestSignalTask_ReachesTheTask(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	st, err := d.StartTask(ctx, "sig", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	// The task starts with no standard signal ignored (an ignored
	// disposition of the executor's would survive exec). Signals 32 and 33
	// are libc's own (a -race binary's runtime may ignore them).
	if mask := sigIgnored(t, st.TaskPID) & (1<<31 - 1); mask != 0 {
		t.Fatalf("the task starts with signals ignored: mask %#x", mask)
	}
	// A Go task without handlers exits on SIGHUP, by the signal.
	if err := d.SignalTask(ctx, "sig", syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, "sig")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit == nil || final.Exit.Signal != int(syscall.SIGHUP) {
		t.Fatalf("after SIGHUP: %s %v, want exited by signal 1", final.State, final.Exit)
	}
	checkReaped(t, d, final)
}

func TestInspectTask_UnknownTask(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	if _, err := d.InspectTask(ctxT(t), "nope"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("inspect: %v, want ErrUnknownTask", err)
	}
}

// The task outlives its driver; a new driver reattaches to it through the
// identity check and can stop it.
func TestRecover_ReattachesRunningTask(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	st, err := d1.StartTask(ctx, "long", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if alive, _ := proc.Alive(*st.Executor); !alive {
		t.Fatal("executor died with its driver after launch")
	}
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	rep, err := d2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tasks) != 1 || rep.Tasks[0].To != fsm.StateRunning {
		t.Fatalf("recover: %+v", rep)
	}
	before := eventTypes(t, d2, "long")
	// Idempotent: a second Recover changes nothing.
	rep2, err := d2.Recover(ctx)
	if err != nil || len(rep2.Tasks) != 1 || rep2.Tasks[0].To != fsm.StateRunning {
		t.Fatalf("second recover: %+v %v", rep2, err)
	}
	if after := eventTypes(t, d2, "long"); !slices.Equal(before, after) {
		t.Errorf("second Recover appended events: %v -> %v", before, after)
	}
	final, err := d2.StopTask(ctx, "long", syscall.SIGTERM, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d2, final)
}

// A task that exits while no driver is attached leaves its exit status on
// disk; Recover collects it.
func TestRecover_CollectsExitStatusLeftOnDisk(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	st, err := d1.StartTask(ctx, "away", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	// The task ends while nobody watches; wait for its executor to exit.
	if err := syscall.Kill(st.TaskPID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDead(t, *st.Executor)
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := d2.WaitTask(ctx, "away")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit == nil || final.Exit.Signal != int(syscall.SIGTERM) {
		t.Fatalf("recovered %s %v, want exited by SIGTERM", final.State, final.Exit)
	}
	checkReaped(t, d2, final)
}

// waitDead blocks until the process with this identity has exited, on its
// pidfd.
func waitDead(t *testing.T, id fsm.Identity) {
	t.Helper()
	for {
		if alive, err := proc.Alive(id); err != nil || !alive {
			return
		}
		if err := waitPidfd(id.PID); err != nil {
			return
		}
	}
}

// A recorded identity whose pid now belongs to a stranger (same pid, other
// start time) is never signalled, and the task is marked lost.
func TestRecover_PIDReuseNeverSignalsTheStranger(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	stranger := exec.Command(self(t), modeTask, "sleep", dir+"-stranger")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	start, err := proc.StartTime(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(dir+"/tether.db", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The log of a task whose executor and task had the stranger's pid but
	// started one tick earlier: they are gone, and the pid was reused.
	forged := &fsm.Identity{PID: stranger.Process.Pid, StartTime: start - 1, BootID: boot, Nonce: "abcd"}
	spec := taskSpec(t, dir, "sleep")
	task := fsm.Task{ID: "old"}
	for _, in := range []fsm.Event{
		{Type: fsm.EventCreated, Spec: &spec}, {Type: fsm.EventSpawnIntent, Nonce: "abcd"},
		{Type: fsm.EventExecutorUp, Executor: forged}, // followed by the launch intent by the table
		{Type: fsm.EventLaunched, TaskPID: stranger.Process.Pid, TaskStartTime: start - 1}, {Type: fsm.EventRunning},
	} {
		evs, _, err := fsm.Step(task, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, "old", task.Version, evs...); err != nil {
			t.Fatal(err)
		}
		task, _ = fsm.FoldAll(task, evs...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	if _, err := d.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateLost {
		t.Fatalf("state %s, want lost", final.State)
	}
	if alive, err := proc.Alive(fsm.Identity{PID: stranger.Process.Pid, StartTime: start}); err != nil || !alive {
		t.Fatalf("the stranger was killed (alive=%v, %v)", alive, err)
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(stranger.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
		t.Fatalf("the stranger exited: %v", ws)
	}
}

// waitIgnoring waits until process pid ignores sig (its SigIgn mask in
// /proc/PID/status), so that a test does not race the task's setup. The
// kernel offers no event for this; the poll is bounded.
func waitIgnoring(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if sigIgnored(t, pid)&(1<<(uint(sig)-1)) != 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("process %d never ignored %s", pid, sig)
		}
	}
}

// sigIgnored returns process pid's mask of ignored signals.
func sigIgnored(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask
		}
	}
	t.Fatalf("no SigIgn line for process %d", pid)
	return 0
}

// Many tasks started and stopped at once from many goroutines: every one
// ends stopped and reaped, and the store's log of each is a legal walk.
func TestDriver_ConcurrentStartsAndStops(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id := fmt.Sprintf("c%02d", i)
			if _, err := d.StartTask(ctx, id, taskSpec(t, dir, "sleep")); err != nil {
				errs <- err
				return
			}
			st, err := d.StopTask(ctx, id, syscall.SIGTERM, 5*time.Second)
			if err == nil && st.State != fsm.StateStopped {
				err = fmt.Errorf("task %s ended %s", id, st.State)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	rep, err := d.Store().(*store.Store).Check(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("store check: %v %v", rep, err)
	}
	for i := range n {
		st, err := d.InspectTask(ctx, fmt.Sprintf("c%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		checkReaped(t, d, st.Task)
	}
}

// A driver that did not run Recover still notices, when asked to wait,
// that a running task's executor is gone: the task ends lost, reaped.
func TestWaitTask_ExecutorGoneWithoutRecover(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	st, err := d1.StartTask(ctx, "orphan", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(ctx, *st.Executor); err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	final, err := d2.WaitTask(ctx, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateLost {
		t.Fatalf("state %s, want lost", final.State)
	}
	checkReaped(t, d2, final)
}
