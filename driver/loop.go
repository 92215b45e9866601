package driver

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// maxKillAttempts bounds how often one effect loop retries a failed kill
// before it leaves the task in reaping for a later loop or Recover.
const maxKillAttempts = 3

// drive runs the task's owed effects until none is owed. Only one
// goroutine runs a task's effects at a time; a caller that finds the loop
// taken returns at once, and the loop's owner picks up what it applied
// (it checks again after letting go of the loop, so no wake-up is lost).
func (d *Driver) drive(t *task) error {
	for {
		select {
		case t.loop <- struct{}{}:
		default:
			return nil
		}
		err := d.runEffects(t)
		<-t.loop
		if err != nil || !t.owes() {
			return err
		}
	}
}

// driveWait is drive for a caller that needs the outcome (StartTask,
// StopTask): if another goroutine runs the loop, it waits for the loop
// (or the task's end, or ctx) and then runs what is still owed itself, so
// a loop that gave up on a failing kill is retried and its error returned.
func (d *Driver) driveWait(ctx context.Context, t *task) error {
	for {
		select {
		case t.loop <- struct{}{}:
		case <-t.done:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		err := d.runEffects(t)
		<-t.loop
		if err != nil || !t.owes() {
			return err
		}
	}
}

func (d *Driver) runEffects(t *task) error {
	kills := 0
	for {
		st := t.snapshot()
		effects := fsm.Pending(st)
		if len(effects) == 0 {
			if !t.owes() {
				return nil
			}
			// A start in progress: the launch intent is the next input.
			if _, err := d.apply(context.Background(), t, d.event(fsm.EventLaunchIntent)); err != nil {
				return err
			}
			continue
		}
		eff := effects[0]
		if eff.Type == fsm.EffectKillExecutor {
			if kills == maxKillAttempts {
				return &TaskError{Task: t.id, State: st.State, Err: fmt.Errorf("kill-executor failed %d times: %s", kills, st.Reason)}
			}
			if kills > 0 {
				time.Sleep(time.Duration(kills*kills) * 50 * time.Millisecond) // back off before retrying a kill
			}
			kills++
		}
		outcome := d.perform(t, st, eff)
		ok, err := d.apply(context.Background(), t, outcome)
		if err != nil {
			// The outcome is not durable. Do not guess: leave the task
			// as the log has it; Recover reconciles it with reality.
			// An executor spawned but not recorded must not live on.
			if outcome.Type == fsm.EventExecutorUp {
				d.abandon(t)
			}
			return err
		}
		if ok && outcome.Type == fsm.EventRunning {
			d.startSupervisor(t)
		}
	}
}

// owes reports whether the task's loop has work: an effect owed by its
// state, or the launch intent of a start in progress.
func (t *task) owes() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(fsm.Pending(t.state)) > 0 || t.starting && t.state.State == fsm.StateExecutorUp
}

// perform runs one effect and returns its outcome as the next input.
func (d *Driver) perform(t *task, st fsm.Task, eff fsm.Effect) fsm.Event {
	name := eff.Type.String()
	d.hooks.crash(crashBeforeEffect + name)
	defer d.hooks.crash(crashAfterEffect + name)
	timeout := d.cfg.EffectTimeout
	if eff.Type == fsm.EffectSpawnExecutor {
		timeout = d.cfg.SpawnTimeout
	}
	if eff.Type == fsm.EffectKillExecutor {
		timeout += eff.Grace
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if eff.Type != fsm.EffectKillExecutor {
		// A stop cancels a start effect in flight.
		var cancelCause context.CancelCauseFunc
		ctx, cancelCause = context.WithCancelCause(ctx)
		t.mu.Lock()
		t.cancel = cancelCause
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.cancel = nil
			t.mu.Unlock()
			cancelCause(nil)
		}()
	}
	if err := d.hooks.fault("effect:" + name); err != nil {
		return d.failure(t, eff, err)
	}
	switch eff.Type {
	case fsm.EffectSpawnExecutor:
		h, err := d.world.Spawn(ctx, t.id, eff.Nonce)
		if err != nil {
			return d.failure(t, eff, err)
		}
		t.mu.Lock()
		t.h = h
		t.mu.Unlock()
		ev := d.event(fsm.EventExecutorUp)
		id := h.Identity()
		ev.Executor = &id
		return ev
	case fsm.EffectLaunchTask:
		h, err := d.handle(ctx, t)
		if err != nil {
			return d.failure(t, eff, err)
		}
		pid, start, err := h.Launch(ctx, *eff.Spec, d.cfg.AllowedCaps)
		if err != nil {
			return d.failure(t, eff, err)
		}
		t.mu.Lock()
		t.pid, t.pidStart = pid, start
		t.mu.Unlock()
		ev := d.event(fsm.EventLaunched)
		ev.TaskPID, ev.TaskStartTime = pid, start
		return ev
	case fsm.EffectAttach:
		h, err := d.handle(ctx, t)
		if err != nil {
			return d.exitedOrLost(ctx, t, err)
		}
		s, err := h.Status(ctx)
		if err != nil {
			// A quick task: its executor may have recorded the exit and
			// gone already.
			return d.exitedOrLost(ctx, t, err)
		}
		if s.Exited {
			ev := d.event(fsm.EventTaskExited)
			ev.Exit = &s.Exit
			return ev
		}
		return d.event(fsm.EventRunning)
	case fsm.EffectKillExecutor:
		exit, err := d.reap(ctx, t, eff)
		if err != nil {
			ev := d.event(fsm.EventKillFailed)
			ev.Reason = err.Error()
			return ev
		}
		ev := d.event(fsm.EventExecutorReaped)
		ev.Target, ev.Exit = eff.Target, exit
		return ev
	}
	panic(fmt.Sprintf("driver: effect %s has no implementation", eff.Type))
}

// exitedOrLost is the outcome when the executor cannot be reached: the
// task's exit if the executor left one on disk, else executor-lost.
func (d *Driver) exitedOrLost(ctx context.Context, t *task, err error) fsm.Event {
	if x, ok, xerr := d.world.ExitStatus(ctx, t.id); xerr == nil && ok {
		ev := d.event(fsm.EventTaskExited)
		ev.Exit = &x
		return ev
	}
	return d.lost(err)
}

// failure is the outcome of a start effect that failed. The error is kept
// for StartTask's caller, so errors.Is works across the effect.
func (d *Driver) failure(t *task, eff fsm.Effect, err error) fsm.Event {
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
	var ev fsm.Event
	switch eff.Type {
	case fsm.EffectSpawnExecutor:
		ev = d.event(fsm.EventSpawnFailed)
	case fsm.EffectLaunchTask:
		ev = d.event(fsm.EventLaunchFailed)
	case fsm.EffectAttach:
		return d.lost(err)
	default:
		ev = d.event(fsm.EventKillFailed)
	}
	ev.Reason = err.Error()
	return ev
}

func (d *Driver) lost(err error) fsm.Event {
	ev := d.event(fsm.EventExecutorLost)
	ev.Reason = err.Error()
	return ev
}

// reap is the kill-executor effect: stop the task group (with the stop's
// signal and grace when the task is being stopped), collect the exit
// status, kill the executor by its proven identity (or find it by nonce
// when none was recorded), and confirm that both are dead.
func (d *Driver) reap(ctx context.Context, t *task, eff fsm.Effect) (*fsm.ExitStatus, error) {
	t.mu.Lock()
	h, pid, pidStart := t.h, t.pid, t.pidStart
	t.mu.Unlock()
	if eff.TaskPID != 0 {
		pid, pidStart = eff.TaskPID, eff.TaskStartTime
	}
	var exit *fsm.ExitStatus
	id := eff.Executor
	if id == nil && eff.Nonce != "" {
		found, ok, err := d.world.FindByNonce(ctx, t.id, eff.Nonce)
		if err != nil {
			return nil, err
		}
		if ok {
			id = &found
		}
	}
	if pid == 0 {
		// The executor may have launched a task whose launch was never
		// recorded (a crash, or a stop that overtook the launch).
		if rpid, rstart, ok, err := d.world.LaunchRecord(ctx, t.id); err == nil && ok {
			pid, pidStart = rpid, rstart
		}
	}
	if pid != 0 && h == nil && id != nil {
		if r, err := d.world.Reattach(ctx, t.id, *id); err == nil {
			h = r
		}
	}
	if h != nil {
		if pid != 0 {
			// A task was launched: stop it through its executor (signal,
			// grace, SIGKILL to the group), which collects its exit.
			sig := syscall.Signal(eff.Signal)
			if sig == 0 {
				sig = syscall.SIGKILL
			}
			if x, err := h.Stop(ctx, sig, eff.Grace); err == nil {
				exit = &x
			} else {
				t.log.Debug("stop through the executor failed; killing by identity", "err", err)
			}
			if err := h.Shutdown(ctx); err != nil {
				t.log.Debug("executor shutdown failed; killing by identity", "err", err)
			}
		}
		// Before any launch the executor holds nothing worth an orderly
		// exit: the kill by identity below is all it needs.
		_ = h.Close()
		t.mu.Lock()
		if t.h == h {
			t.h = nil
		}
		t.mu.Unlock()
	}
	if id != nil {
		if err := d.world.Kill(ctx, t.id, *id); err != nil && !errors.Is(err, ErrNotOurs) {
			return nil, err
		}
		// ErrNotOurs: the pid now belongs to a stranger, so ours is dead;
		// nothing was signalled.
	}
	if pid != 0 {
		if err := d.world.KillGroup(ctx, t.id, pid, pidStart); err != nil && !errors.Is(err, ErrNotOurs) {
			return nil, err
		}
	}
	if exit == nil {
		if x, ok, err := d.world.ExitStatus(ctx, t.id); err == nil && ok {
			exit = &x
		}
	}
	if exit == nil && eff.Target == fsm.StateExited {
		exit = t.snapshot().Exit
	}
	return exit, nil
}

// abandon kills an executor whose executor-up event could not be recorded:
// the log still says spawning, which Recover reconciles by nonce.
func (d *Driver) abandon(t *task) {
	t.mu.Lock()
	h := t.h
	t.h = nil
	t.mu.Unlock()
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.EffectTimeout)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		_ = d.world.Kill(ctx, t.id, h.Identity())
	}
	_ = h.Close()
}

// startSupervisor waits for the running task's exit in the background and
// records it. Closing the driver ends supervision without touching the task.
func (d *Driver) startSupervisor(t *task) {
	t.mu.Lock()
	if t.sup || t.h == nil {
		t.mu.Unlock()
		return
	}
	t.sup = true
	h := t.h
	t.mu.Unlock()
	d.sups.Add(1)
	go func() {
		defer d.sups.Done()
		defer func() {
			t.mu.Lock()
			t.sup = false
			t.mu.Unlock()
		}()
		exit, err := h.Wait(d.supCtx)
		if d.supCtx.Err() != nil {
			return
		}
		var in fsm.Event
		if err == nil {
			in = d.event(fsm.EventTaskExited)
			in.Exit = &exit
		} else if x, ok, xerr := d.world.ExitStatus(d.supCtx, t.id); xerr == nil && ok {
			in = d.event(fsm.EventTaskExited)
			in.Exit = &x
		} else {
			in = d.lost(fmt.Errorf("executor connection lost: %w", err))
		}
		if _, err := d.apply(context.Background(), t, in); err != nil {
			t.log.Error("recording the task's end failed; Recover will reconcile it", "err", err)
			return
		}
		d.mu.Lock()
		closed := d.closed
		if !closed {
			d.loops.Add(1)
		}
		d.mu.Unlock()
		if closed {
			return
		}
		defer d.loops.Done()
		if err := d.drive(t); err != nil {
			t.log.Error("reaping failed; Recover will retry", "err", err)
		}
	}()
}
