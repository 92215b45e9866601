package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// Readiness. start (and restart) of a task whose readiness is "notify"
// returns once the task says it is ready (READY=1 on NOTIFY_SOCKET), the
// ready event recorded, instead of waiting out --min-uptime: the task's
// own word is the proof that it is up (a job file's start waits for the
// READY=1 of each notify main task after --min-uptime). --ready-timeout
// bounds the wait; a
// task that ends first fails the start as one that ended within
// --min-uptime does (its end, its last output, its exit code). run records
// the ready event of each run of a notify task it follows, and says
// nothing more.

// defaultReadyTimeout is --ready-timeout's default: systemd's
// DefaultTimeoutStartSec.
const defaultReadyTimeout = 90 * time.Second

// notifyTask reports whether t says when it is ready: by sd_notify, or by
// the readiness check its executor runs.
func notifyTask(t fsm.Task) bool { return t.Spec != nil && t.Spec.Readiness.Waits() }

// awaitReady finishes the start of a notify task: it waits for READY=1 (at
// most timeout), then prints the task's id on stdout and its STATUS= text,
// if any, on stderr. Ctrl-C meanwhile stops the task.
func (c *cli) awaitReady(ctx context.Context, s *session, t fsm.Task, timeout time.Duration, sigs <-chan os.Signal) int {
	code, ok := c.readyOrFail(ctx, s, t, timeout, sigs)
	if ok {
		fmt.Fprintln(c.stdout, t.ID)
	}
	return code
}

// readyOrFail waits for a notify task's READY=1 (at most timeout) and says
// its STATUS= text on stderr; ok is false when the start failed, said, and
// code is start's exit code then.
func (c *cli) readyOrFail(ctx context.Context, s *session, t fsm.Task, timeout time.Duration, sigs <-chan os.Signal) (code int, ok bool) {
	type result struct {
		r   driver.ReadyReport
		err error
	}
	wctx, cancel := context.WithTimeoutCause(ctx, timeout, errReadyTimeout)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		r, err := s.svc.WaitReady(wctx, t.ID)
		done <- result{r, err}
	}()
	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		<-done
		fmt.Fprintf(c.stderr, "tether: %s: got %v before the task was ready, stopping it\n", t.ID, sig)
		c.stopOnSignals(ctx, s, t.ID, sigs)
		_, _ = s.svc.StopTask(ctx, t.ID, 0, 0)
		return 128 + int(sig.(syscall.Signal)), false
	}
	switch {
	case r.err == nil:
		if r.r.Status != "" {
			fmt.Fprintf(c.stderr, "tether: %s: ready: %s\n", t.ID, clikit.Printable(r.r.Status))
		}
		return exitOK, true
	case errors.Is(r.err, errReadyTimeout):
		c.errorf("task %s did not say it is ready (%s) within --ready-timeout %s", t.ID, readyHow(t), clikit.DurationText(timeout))
		if r.r.Status != "" {
			fmt.Fprintf(c.stderr, "  its last status: %s\n", clikit.Printable(r.r.Status))
		}
		fmt.Fprintf(c.stderr, "  it is still running: 'tether stop %s' stops it, 'tether logs %s' has its output\n", t.ID, t.ID)
		return exitError, false
	case errors.Is(r.err, driver.ErrNeverReady), errors.Is(r.err, driver.ErrNotRunning), errors.Is(r.err, driver.ErrUnreachable):
		// It ended first: its end is recorded once its executor is done
		// with it (a restart may follow, under its policy). An executor
		// that closed the wait's connection as its task ended reads as
		// unreachable: its end, recorded within a bound, says which.
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		final, err := s.svc.WaitTask(ectx, t.ID)
		if err == nil && final.State.Terminal() {
			return c.endedBeforeReady(final), false
		}
		c.errorf("task %s ended before it was ready: %v", t.ID, r.err)
		fmt.Fprintf(c.stderr, "  'tether events %s' has its history, 'tether logs %s' its output\n", t.ID, t.ID)
		return exitError, false
	}
	c.errorf("task %s started, but waiting for it to be ready failed: %v", t.ID, r.err)
	fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", t.ID)
	return exitError, false
}

// readyHow says how task t says it is ready.
func readyHow(t fsm.Task) string {
	if t.Spec == nil || !t.Spec.Readiness.Checked() || t.Spec.Check == nil {
		return "READY=1 on NOTIFY_SOCKET"
	}
	return "its check passing: " + checkText(t.Spec.Readiness, t.Spec.Check)
}

// errReadyTimeout is the cause of a ready wait's deadline.
var errReadyTimeout = errors.New("the ready timeout passed")

// endedBeforeReady reports a notify task that ended before READY=1, with
// its last output, and returns start's exit code.
func (c *cli) endedBeforeReady(t fsm.Task) int {
	c.errorf("task %s ended before it said it is ready (%s): %s", t.ID, readyHow(t), endSummary(t, true))
	c.printLastOutput(t.ID)
	fmt.Fprintf(c.stderr, "  'tether logs %s' has its output, 'tether events %s' its history\n", t.ID, t.ID)
	return endExitCode(t)
}

// readyRecorder records the ready event of each run of a notify task that
// run follows: one WaitReady per run (by its task process), all ended by
// stop.
type readyRecorder struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seen   map[int]bool
}

func newReadyRecorder(ctx context.Context) *readyRecorder {
	ctx, cancel := context.WithCancel(ctx)
	return &readyRecorder{ctx: ctx, cancel: cancel, seen: map[int]bool{}}
}

// follow starts waiting for the readiness of st's run, once per run, when
// st is a running notify task not recorded ready.
func (r *readyRecorder) follow(s *session, st fsm.Task) {
	if !notifyTask(st) || st.State != fsm.StateRunning || st.Ready || r.seen[st.TaskPID] {
		return
	}
	r.seen[st.TaskPID] = true
	r.wg.Go(func() { _, _ = s.svc.WaitReady(r.ctx, st.ID) })
}

func (r *readyRecorder) stop() {
	r.cancel()
	r.wg.Wait()
}
