package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

func restartSpec(t *testing.T, dir string, p fsm.RestartPolicy, args ...string) fsm.Spec {
	spec := taskSpec(t, dir, args...)
	spec.Restart = &p
	return spec
}

// A task that keeps failing is restarted by its executor until the policy's
// attempts are used; each restart is in the log (the intent with its
// attempt, then the relaunch), and the task ends with its last exit.
func TestRestart_AttemptsAreRecordedThenTheTaskEnds(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	p := fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	if _, err := d.StartTask(ctx, "flaky", restartSpec(t, dir, p, "exit", "4")); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, "flaky")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit == nil || final.Exit.Code != 4 || final.Restarts != 2 {
		t.Fatalf("final %s %v restarts %d; want exited 4 after 2 restarts", final.State, final.Exit, final.Restarts)
	}
	evs := eventTypes(t, d, "flaky")
	want := []string{"restart-intent", "launched", "running", "restart-intent", "launched", "running", "task-exited", "executor-reaped"}
	if got := evs[len(evs)-len(want):]; !slices.Equal(got, want) {
		t.Fatalf("events %v, want them to end with %v", evs, want)
	}
	checkReaped(t, d, final)
}

// Restarts that happen while no driver is attached are folded into the
// log on the next contact (here a new driver's Recover, once the executor
// has gone after its last restart), in order, once each.
func TestRestart_FoldedFromTheJournalAfterTheDriverWasAway(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	p := fsm.RestartPolicy{Attempts: 3, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	st, err := d1.StartTask(ctx, "away", restartSpec(t, dir, p, "exit", "5"))
	if err != nil && st.Executor == nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, *st.Executor) // three restarts, then the executor exits
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := d2.WaitTask(ctx, "away")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit.Code != 5 || final.Restarts != 3 {
		t.Fatalf("final %s %v restarts %d; want exited 5 after 3 restarts", final.State, final.Exit, final.Restarts)
	}
	evs := eventTypes(t, d2, "away")
	if n := strings.Count(strings.Join(evs, " "), "restart-intent"); n != 3 {
		t.Fatalf("%d restart-intents in %v, want 3", n, evs)
	}
	// Idempotent: another driver's Recover appends nothing.
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	d3 := newDriver(t, dir, Hooks{})
	defer d3.Close()
	if _, err := d3.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if again := eventTypes(t, d3, "away"); !slices.Equal(again, evs) {
		t.Fatalf("a second Recover changed the log: %v -> %v", evs, again)
	}
}

// A stop during a restart's delay stops the task for good: it is recorded
// stopped and never relaunched.
func TestRestart_StopDuringTheDelayEndsIt(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	folded := make(chan struct{})
	var once sync.Once
	d := newDriver(t, dir, Hooks{Crash: func(p, _ string) {
		if p == crashAfterAppend+"restart-intent" {
			once.Do(func() { close(folded) })
		}
	}})
	defer d.Close()
	p := fsm.RestartPolicy{Attempts: 5, Interval: 5 * time.Hour, Delay: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	st, err := d.StartTask(ctx, "slow", restartSpec(t, dir, p, "exit", "6"))
	if err != nil {
		t.Fatal(err)
	}
	// The executor journals the restart; the driver folds it: restarting.
	<-folded
	info, err := d.InspectTask(ctx, "slow")
	if err != nil || info.State != fsm.StateRestarting || info.Restarts != 1 || info.Exit == nil || info.Exit.Code != 6 {
		t.Fatalf("restarting: %+v %v", info.Task, err)
	}
	final, err := d.StopTask(ctx, "slow", syscall.SIGTERM, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateStopped {
		t.Fatalf("stop during the delay: %s", final.State)
	}
	checkReaped(t, d, final)
	j, _, _ := executor.SideFiles(d.TaskDir("slow")).Journal()
	if len(j.Entries) != 1 || st.TaskPID == 0 {
		t.Fatalf("journal after the stop: %v, want the one intent (no relaunch)", j.Entries)
	}
}

// FollowTask sees the task's states as they change, in version order,
// through each restart, and returns the final state as WaitTask does.
func TestFollowTask_SeesEveryRestart(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	p := fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	// Runs 1 and 2 fail at once; run 3 waits on a FIFO that the follower
	// opens once it has seen the second restart running.
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartTask(ctx, "followed", restartSpec(t, dir, p, "fail-then-fifo", "3", filepath.Join(tmp, "runs"), fifo)); err != nil {
		t.Fatal(err)
	}
	var seen []fsm.Task
	released := false
	final, err := d.FollowTask(ctx, "followed", func(st fsm.Task) {
		seen = append(seen, st)
		if st.Restarts == 2 && st.State == fsm.StateRunning && !released {
			released = true
			if err := os.WriteFile(fifo, nil, 0); err != nil {
				t.Error(err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Restarts != 2 {
		t.Fatalf("final %s restarts %d", final.State, final.Restarts)
	}
	if len(seen) == 0 || seen[len(seen)-1].Version != final.Version {
		t.Fatalf("FollowTask's last state is not the final one: %d states seen", len(seen))
	}
	maxRestarts := 0
	for i, st := range seen {
		if i > 0 && st.Version <= seen[i-1].Version {
			t.Fatalf("states out of order: v%d after v%d", st.Version, seen[i-1].Version)
		}
		maxRestarts = max(maxRestarts, st.Restarts)
	}
	if maxRestarts != 2 {
		t.Errorf("followed states reached %d restarts, want 2", maxRestarts)
	}
	// A terminal task is answered at once, with no state to follow.
	calls := 0
	again, err := d.FollowTask(ctx, "followed", func(fsm.Task) { calls++ })
	if err != nil || again.Version != final.Version || calls != 0 {
		t.Fatalf("FollowTask of a terminal task: v%d %v, %d calls", again.Version, err, calls)
	}
	if _, err := d.FollowTask(ctx, "nosuch", func(fsm.Task) {}); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("FollowTask of an unknown task: %v", err)
	}
}

// A stop from another driver during a restart's delay, while this driver
// follows the task (as a group's driver does): the stop returns, the
// follower sees the task stopped and returns, and nothing is relaunched.
func TestRestart_StopFromAnotherDriverDuringTheDelay(t *testing.T) {
	dir, d1, d2 := sharedDrivers(t)
	ctx := ctxT(t)
	p := fsm.RestartPolicy{Attempts: 5, Interval: 5 * time.Hour, Delay: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	if _, err := d1.StartTask(ctx, "slow", restartSpec(t, dir, p, "exit", "6")); err != nil {
		t.Fatal(err)
	}
	restarting := make(chan struct{})
	var once sync.Once
	type followed struct {
		st  fsm.Task
		err error
	}
	done := make(chan followed, 1)
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second) // a follower that never sees the stop fails here
	defer cancel()
	go func() {
		st, err := d1.FollowTask(fctx, "slow", func(st fsm.Task) {
			if st.State == fsm.StateRestarting {
				once.Do(func() { close(restarting) })
			}
		})
		done <- followed{st, err}
	}()
	<-restarting
	final, err := d2.StopTask(ctx, "slow", syscall.SIGTERM, time.Second)
	if err != nil || final.State != fsm.StateStopped {
		t.Fatalf("stop during the delay from another driver: %s %v", final.State, err)
	}
	f := <-done
	if f.err != nil || f.st.State != fsm.StateStopped {
		t.Fatalf("the follower: %s %v, want stopped", f.st.State, f.err)
	}
	checkReaped(t, d2, final)
}
