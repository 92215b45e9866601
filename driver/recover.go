package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// TaskReport says what Recover did with one task.
type TaskReport struct {
	ID     string
	From   fsm.State // the state the log held
	To     fsm.State // the state after reconciliation
	Action string
	Err    error
}

// Report is what Recover did, one entry per live task, sorted by id.
type Report struct {
	Tasks []TaskReport
}

// Recover replays every live task from the store and reconciles it with the
// process table, as the design's crash-window table says:
//
//	created        nothing was spawned: recorded failed
//	spawning       the executor is looked up by nonce, killed, reaped
//	executor-up    the executor is killed and reaped (Nomad's leak)
//	launching      reattach and ask: launched -> supervise; else kill, reap
//	launched,      reattach with the identity check and supervise; or
//	running        collect the exit status left on disk; or kill, lost
//	reaping        kill again by identity, confirm dead, record reaped
//
// Recover is idempotent (tasks this driver already supervises are left
// alone) and crash-safe: every step is a durable append, so a Recover
// interrupted anywhere is finished by the next one.
func (d *Driver) Recover(ctx context.Context) (Report, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return Report{}, ErrClosed
	}
	d.loops.Add(1)
	d.mu.Unlock()
	defer d.loops.Done()

	ids, err := d.Tasks(ctx, false)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Tasks = append(rep.Tasks, d.recoverTask(ctx, id))
	}
	var errs []error
	for _, r := range rep.Tasks {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	return rep, errors.Join(errs...)
}

func (d *Driver) recoverTask(ctx context.Context, id string) (r TaskReport) {
	r.ID = id
	t, err := d.runtime(ctx, id)
	if err != nil {
		r.Err = err
		return r
	}
	st := t.snapshot()
	r.From = st.State
	defer func() {
		r.To = t.snapshot().State
		if r.Err != nil {
			r.Err = &TaskError{Task: id, State: r.From, Err: r.Err}
		}
	}()
	t.mu.Lock()
	supervised := t.sup
	t.mu.Unlock()
	if supervised && !t.owes() {
		r.Action = "already supervised"
		return r
	}
	input := func(typ fsm.EventType, reason string) fsm.Event {
		ev := d.event(typ)
		ev.Reason = reason
		return ev
	}
	switch st.State {
	case fsm.StateCreated:
		r.Action = "nothing was spawned; recorded failed"
		_, r.Err = d.apply(ctx, t, input(fsm.EventConfigRejected, "the driver stopped before spawning an executor"))
		return r
	case fsm.StateSpawning:
		r.Action = "spawn interrupted; executor looked up by nonce and killed"
		if _, r.Err = d.apply(ctx, t, input(fsm.EventSpawnFailed, "the driver stopped while spawning the executor")); r.Err != nil {
			return r
		}
	case fsm.StateExecutorUp:
		r.Action = "executor up but task never launched; executor killed"
		if _, r.Err = d.apply(ctx, t, input(fsm.EventFault, "the driver stopped before launching the task")); r.Err != nil {
			return r
		}
	case fsm.StateLaunching:
		r.Action, r.Err = d.recoverLaunching(ctx, t, st)
		if r.Err != nil {
			return r
		}
	case fsm.StateLaunched, fsm.StateRunning:
		r.Action, r.Err = d.recoverRunning(ctx, t, st)
		if r.Err != nil {
			return r
		}
	case fsm.StateReaping:
		r.Action = "reaping resumed; executor killed by identity"
	}
	r.Err = d.drive(t)
	if r.Err == nil && t.snapshot().State == fsm.StateRunning {
		d.startSupervisor(t)
	}
	return r
}

// recoverLaunching: the launch intent is durable, the outcome is not. Ask
// the executor whether it launched.
func (d *Driver) recoverLaunching(ctx context.Context, t *task, st fsm.Task) (string, error) {
	h, err := d.reattach(ctx, t, st)
	if err != nil {
		_, aerr := d.apply(ctx, t, d.lost(fmt.Errorf("after a restart during launch: %w", err)))
		return "launch interrupted; executor unreachable; task group killed", aerr
	}
	s, err := h.Status(ctx)
	switch {
	case err != nil:
		_, aerr := d.apply(ctx, t, d.lost(err))
		return "launch interrupted; executor did not answer; killed", aerr
	case s.Launched:
		ev := d.event(fsm.EventLaunched)
		ev.TaskPID, ev.TaskStartTime = s.PID, s.Start
		_, aerr := d.apply(ctx, t, ev)
		return "launch had happened; reattached", aerr
	default:
		ev := d.event(fsm.EventFault)
		ev.Reason = "the driver stopped before the executor launched the task"
		_, aerr := d.apply(ctx, t, ev)
		return "launch never happened; executor killed", aerr
	}
}

// recoverRunning: reattach by proven identity; else collect the exit
// status left on disk; else the executor is lost.
func (d *Driver) recoverRunning(ctx context.Context, t *task, st fsm.Task) (string, error) {
	h, err := d.reattach(ctx, t, st)
	if err != nil {
		if x, ok, xerr := d.world.ExitStatus(ctx, t.id); xerr == nil && ok {
			ev := d.event(fsm.EventTaskExited)
			ev.Exit = &x
			_, aerr := d.apply(ctx, t, ev)
			return "executor gone; exit status collected from disk (" + x.String() + ")", aerr
		}
		_, aerr := d.apply(ctx, t, d.lost(fmt.Errorf("after a restart: %w", err)))
		return "executor gone and no exit status; task group killed, lost", aerr
	}
	if st.State == fsm.StateLaunched {
		ev := d.event(fsm.EventReattached)
		id := h.Identity()
		ev.Executor = &id
		_, aerr := d.apply(ctx, t, ev)
		return "reattached; supervision attached", aerr
	}
	s, err := h.Status(ctx)
	if err != nil {
		_, aerr := d.apply(ctx, t, d.lost(err))
		return "executor did not answer; killed, lost", aerr
	}
	if s.Exited {
		ev := d.event(fsm.EventTaskExited)
		ev.Exit = &s.Exit
		_, aerr := d.apply(ctx, t, ev)
		return "task had exited (" + s.Exit.String() + "); reaped", aerr
	}
	return "reattached; still running", nil
}

func (d *Driver) reattach(ctx context.Context, t *task, st fsm.Task) (Executor, error) {
	if st.Executor == nil {
		return nil, ErrGone
	}
	h, err := d.world.Reattach(ctx, t.id, *st.Executor)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.h != nil {
		_ = t.h.Close()
	}
	t.h = h
	t.mu.Unlock()
	return h, nil
}
