package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// Readiness.
//
// A task whose spec says when it is ready (readiness = "notify": the
// sd_notify protocol's READY=1 on NOTIFY_SOCKET; or a check its executor
// runs: see package executor/server) becomes ready once per run. Its
// readiness is a fact of the run, like its exit: an executor of protocol
// 10 journals it ("run N ready at T", fsynced before it tells anyone), and
// whoever supervises the task records the ready event from the journal,
// with the time it happened: the owner's supervisor as it watches the
// executor (see restart.go; WaitReady, like WaitTask, makes sure the task
// has one), the next command or Recover that folds the journal. Every run that was ready,
// restarts included, is recorded ready once: the fold is cut by how far
// into the journal the log is (fsm.Task.RestartEvents), and a journalled
// ready folds only at its place there (fsm: a second process's copy of it
// no longer applies and is dropped).
//
// An executor of an earlier protocol journals no readiness: WaitReady
// records the ready event itself, as before, for the run its executor
// names and only while that run is the log's, with no place in the
// journal (fsm.Event.Journalled is false, and the journal's count is
// unchanged).

// ReadyReport is what WaitReady learnt.
type ReadyReport struct {
	// Task is the task's state after the ready event was recorded.
	Task fsm.Task
	// Status is the last STATUS= text the task sent ("" for none).
	Status string
}

// errFolded ends WaitReady's follow of the log once it holds the ready.
var errFolded = errors.New("the log holds the journal's ready")

// WaitReady waits until the running task id (one whose spec's readiness
// waits: notify or a check) says it is ready, records it (from its
// executor's journal, or itself for an executor that journals none), and
// returns the task and its status text. A run that ended first is
// ErrNeverReady in a *TaskError (with the exit in the error's text; the
// end itself is recorded by whoever follows the task); a task that is not
// a notify task is ErrNotNotify; ctx's end (a start's deadline) is its
// cause.
func (d *Driver) WaitReady(ctx context.Context, id string) (ReadyReport, error) {
	h, st, err := d.attachRunning(ctx, id)
	if st.Spec != nil && !st.Spec.Readiness.Waits() {
		if h != nil {
			h.Close()
		}
		return ReadyReport{Task: st}, &TaskError{Task: id, State: st.State, Err: ErrNotNotify}
	}
	if err != nil {
		return d.missedRun(ctx, id, st, err)
	}
	defer h.Close()
	if st.Spec == nil {
		return ReadyReport{Task: st}, &TaskError{Task: id, State: st.State, Err: ErrNotNotify}
	}
	xs, err := h.WaitReady(ctx)
	if err != nil {
		return d.missedRun(ctx, id, st, runningErr(id, st, err))
	}
	if !xs.Ready {
		err := fmt.Errorf("%w (%s)", ErrNeverReady, xs.Exit)
		if xs.Restarting {
			err = fmt.Errorf("%w (%s; its restart policy may start it again)", ErrNeverReady, xs.Exit)
		}
		return ReadyReport{Task: st, Status: xs.NotifyStatus}, &TaskError{Task: id, State: st.State, Err: err}
	}
	if !xs.ReadyJournalled {
		// An executor that journals no readiness (before protocol 10, or
		// whose journal failed): the ready is this wait's to record.
		r, err := d.ask(ctx, id, request{kind: inReady, pid: xs.PID})
		if err != nil {
			return ReadyReport{Task: r.task, Status: xs.NotifyStatus}, err
		}
		return ReadyReport{Task: r.task, Status: xs.NotifyStatus}, r.err
	}
	// The ready is in the journal, among its first xs.Journal entries:
	// the task's supervisor folds them (a follow makes sure the task has
	// one here, as WaitTask does), and this waits until the log holds them.
	cur, err := d.followJournal(ctx, id, xs.Journal)
	switch {
	case err != nil:
		return ReadyReport{Task: cur, Status: xs.NotifyStatus}, err
	case cur.State == fsm.StateRunning && cur.TaskPID == xs.PID && cur.Ready:
		return ReadyReport{Task: cur, Status: xs.NotifyStatus}, nil
	}
	return ReadyReport{Task: cur, Status: xs.NotifyStatus}, &TaskError{Task: id, State: cur.State,
		Err: fmt.Errorf("%w: the run that said it is ready (pid %d) is no longer the log's (pid %d)", ErrNotRunning, xs.PID, cur.TaskPID)}
}

// missedRun answers a wait that could not reach the run it waits for: the
// log is past it already (reaping, ended, restarting), or its executor
// closed as its task ended (an executor exits once its task is over, so a
// wait that comes a moment late finds it gone). What the log records of
// the task's end, once it does (within twice ProbeTimeout), is the
// answer: a run that ended before it was ready is ErrNeverReady with its
// end, as for a wait that was there when it ended. Anything else is
// cause.
func (d *Driver) missedRun(ctx context.Context, id string, st fsm.Task, cause error) (ReadyReport, error) {
	if ctx.Err() != nil || errors.Is(cause, ErrUnknownTask) {
		return ReadyReport{Task: st}, cause
	}
	if st.State == fsm.StateRestarting && !st.Ready {
		return ReadyReport{Task: st}, &TaskError{Task: id, State: st.State,
			Err: fmt.Errorf("%w (%s; its restart policy may start it again)", ErrNeverReady, exitText(st))}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*d.cfg.ProbeTimeout)
	defer cancel()
	final, err := d.WaitTask(wctx, id)
	if err != nil || !final.State.Terminal() || final.Ready || final.Exit == nil {
		return ReadyReport{Task: st}, cause
	}
	return ReadyReport{Task: final}, &TaskError{Task: id, State: final.State, Err: fmt.Errorf("%w (%s)", ErrNeverReady, exitText(final))}
}

// exitText is the last run's exit as the log has it.
func exitText(st fsm.Task) string {
	if st.Exit == nil {
		return "its exit is not known"
	}
	return st.Exit.String()
}

// followJournal follows task id until its log holds n entries of its
// executor's journal, or it no longer follows the task's runs (reaping, or
// terminal), and returns the task as it is then. A running task nobody
// here supervises gets a supervisor (FollowTask), which folds the
// journal.
func (d *Driver) followJournal(ctx context.Context, id string, n int) (fsm.Task, error) {
	fctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var cur fsm.Task
	final, err := d.FollowTask(fctx, id, func(st fsm.Task) {
		cur = st
		if st.RestartEvents() >= n || st.State == fsm.StateReaping || st.State.Terminal() {
			stop(errFolded)
		}
	})
	switch {
	case err == nil:
		return final, nil // terminal
	case errors.Is(err, errFolded) && ctx.Err() == nil:
		return cur, nil
	}
	return cur, err
}

// ready records the ready event of the run of task process req.pid (of an
// executor that journals no readiness: WaitReady), when that is the log's
// running run and it is not recorded ready yet.
func (o *owner) ready(req request) {
	switch {
	case o.st.State != fsm.StateRunning:
		req.reply <- reply{task: o.st, err: o.taskErr(ErrNotRunning)}
		return
	case o.st.TaskPID != req.pid:
		req.reply <- reply{task: o.st, err: o.taskErr(fmt.Errorf("%w: the run that said it is ready (pid %d) is no longer the log's (pid %d)", ErrNotRunning, req.pid, o.st.TaskPID))}
		return
	case o.st.Ready:
		req.reply <- reply{task: o.st}
		return
	}
	if _, err := o.record(o.d.event(fsm.EventReady)); err != nil {
		req.reply <- reply{task: o.st, err: err}
		return
	}
	req.reply <- reply{task: o.st}
}
