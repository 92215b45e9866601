package driver

import (
	"context"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// Readiness.
//
// A task whose spec says readiness = "notify" tells its executor when it is
// ready (the sd_notify protocol's READY=1 on NOTIFY_SOCKET; see package
// executor/server). WaitReady asks the executor, waits for its answer, and
// records the ready event in the task's log (running -> running, setting
// fsm.Task.Ready until the next restart): a process that waits for
// readiness (tether start) is the one that records it. The executor says
// which run was ready (its task process), and the event is recorded only
// while the log's run is that one: a restart the log has folded since makes
// it stale, and it is dropped.

// ReadyReport is what WaitReady learnt.
type ReadyReport struct {
	// Task is the task's state after the ready event was recorded.
	Task fsm.Task
	// Status is the last STATUS= text the task sent ("" for none).
	Status string
}

// WaitReady waits until the running notify task id says it is ready
// (READY=1), records it, and returns the task and its status text. A run
// that ended first is ErrNeverReady in a *TaskError (with the exit in the
// error's text; the end itself is recorded by whoever follows the task);
// a task that is not a notify task is ErrNotNotify; ctx's end (a start's
// deadline) is its cause.
func (d *Driver) WaitReady(ctx context.Context, id string) (ReadyReport, error) {
	h, st, err := d.attachRunning(ctx, id)
	if err != nil {
		return ReadyReport{Task: st}, err
	}
	defer h.Close()
	if st.Spec == nil || !st.Spec.Readiness.Waits() {
		return ReadyReport{Task: st}, &TaskError{Task: id, State: st.State, Err: ErrNotNotify}
	}
	xs, err := h.WaitReady(ctx)
	if err != nil {
		return ReadyReport{Task: st}, runningErr(id, st, err)
	}
	if !xs.Ready {
		err := fmt.Errorf("%w (%s)", ErrNeverReady, xs.Exit)
		if xs.Restarting {
			err = fmt.Errorf("%w (%s; its restart policy may start it again)", ErrNeverReady, xs.Exit)
		}
		return ReadyReport{Task: st, Status: xs.NotifyStatus}, &TaskError{Task: id, State: st.State, Err: err}
	}
	r, err := d.ask(ctx, id, request{kind: inReady, pid: xs.PID})
	if err != nil {
		return ReadyReport{Task: r.task, Status: xs.NotifyStatus}, err
	}
	return ReadyReport{Task: r.task, Status: xs.NotifyStatus}, r.err
}

// ready records the ready event of the run of task process req.pid, when
// that is the log's running run and it is not recorded ready yet.
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
