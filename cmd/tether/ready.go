package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
// code is start's exit code then. A run that ends before it is ready and
// that the task's restart policy restarts does not fail the start: the
// wait goes on with the next run, until one is ready, or the policy gives
// up (or waits out its interval), or timeout passes.
func (c *cli) readyOrFail(ctx context.Context, s *session, t fsm.Task, timeout time.Duration, sigs <-chan os.Signal) (code int, ok bool) {
	type result struct {
		r    driver.ReadyReport
		next nextRun
		err  error
	}
	wctx, cancel := context.WithTimeoutCause(ctx, timeout, errReadyTimeout)
	defer cancel()
	// wait runs fn in the background, and stops the task on a signal
	// meanwhile.
	wait := func(fn func() result) (result, int, bool) {
		done := make(chan result, 1)
		go func() { done <- fn() }()
		select {
		case r := <-done:
			return r, 0, true
		case sig := <-sigs:
			cancel()
			<-done
			fmt.Fprintf(c.stderr, "tether: %s: got %v before the task was ready, stopping it\n", t.ID, sig)
			c.stopOnSignals(ctx, s, t.ID, sigs)
			_, _ = s.svc.StopTask(ctx, t.ID, 0, 0)
			return result{}, 128 + int(sig.(syscall.Signal)), false
		}
	}
	for {
		r, code, ok := wait(func() result {
			rr, err := s.svc.WaitReady(wctx, t.ID)
			return result{r: rr, err: err}
		})
		if !ok {
			return code, false
		}
		switch {
		case r.err == nil:
			if r.r.Status != "" {
				fmt.Fprintf(c.stderr, "tether: %s: ready: %s\n", t.ID, clikit.Printable(r.r.Status))
			}
			return exitOK, true
		case errors.Is(r.err, errReadyTimeout):
			return c.readyTimedOut(t, timeout, r.r.Status), false
		case errors.Is(r.err, driver.ErrNeverReady), errors.Is(r.err, driver.ErrNotRunning), errors.Is(r.err, driver.ErrUnreachable):
			// That run ended first (an executor that closed the wait's
			// connection as its task ended reads as unreachable): a
			// restart under its policy gets another run, else its end,
			// recorded within a bound, says how it ended.
			n, code, ok := wait(func() result { return result{next: c.awaitNextRun(wctx, s, t.ID, r.r.Task.TaskPID)} })
			if !ok {
				return code, false
			}
			switch nr := n.next; {
			case nr.run:
				continue
			case nr.task.State.Terminal():
				return c.endedBeforeReady(ctx, s, nr.task, 0), false
			case nr.later:
				return c.endedBeforeReady(ctx, s, nr.task, nr.next), false
			case errors.Is(nr.err, errReadyTimeout):
				return c.readyTimedOut(t, timeout, r.r.Status), false
			}
			c.errorf("task %s ended before it was ready: %v", t.ID, r.err)
			fmt.Fprintf(c.stderr, "  'tether events %s' has its history, 'tether logs %s' its output\n", t.ID, t.ID)
			return exitError, false
		}
		c.errorf("task %s started, but waiting for it to be ready failed: %v", t.ID, r.err)
		fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", t.ID)
		return exitError, false
	}
}

// readyTimedOut reports a task not ready within --ready-timeout and
// returns start's exit code.
func (c *cli) readyTimedOut(t fsm.Task, timeout time.Duration, status string) int {
	c.errorf("task %s did not say it is ready (%s) within --ready-timeout %s", t.ID, readyHow(t), clikit.DurationText(timeout))
	if status != "" {
		fmt.Fprintf(c.stderr, "  its last status: %s\n", clikit.Printable(status))
	}
	fmt.Fprintf(c.stderr, "  it is still running: 'tether stop %s' stops it, 'tether logs %s' has its output\n", t.ID, t.ID)
	return exitError
}

// nextRun is what awaitNextRun saw.
type nextRun struct {
	task  fsm.Task
	run   bool          // a new run is running
	later bool          // the policy starts the next run only past ctx's deadline (see restartLater)
	next  time.Duration // in how long
	err   error
}

// errNextRun ends awaitNextRun's follow.
var errNextRun = errors.New("the task's next run, or its end, is recorded")

// awaitNextRun follows task id after its run of task process after ended:
// until another run is running, the task is over, or its restart policy
// waits out its interval, within ctx.
func (c *cli) awaitNextRun(ctx context.Context, s *session, id string, after int) nextRun {
	fctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var out nextRun
	final, err := s.svc.FollowTask(fctx, id, func(st fsm.Task) {
		out.task = st
		switch {
		case st.State == fsm.StateRunning && st.TaskPID != after && st.TaskPID != 0:
			out.run = true
			stop(errNextRun)
		case st.State == fsm.StateRestarting:
			if dl, ok := ctx.Deadline(); ok {
				if next, later := c.restartLater(ctx, s, st, dl); later {
					out.later, out.next = true, next
					stop(errNextRun)
				}
			}
		}
	})
	switch {
	case err == nil:
		return nextRun{task: final}
	case out.run || out.later:
		return out
	case ctx.Err() != nil:
		out.err = context.Cause(ctx)
	default:
		out.err = err
	}
	return out
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

// endedBeforeReady reports a notify task none of whose runs said it is
// ready before it ended, until its restart policy gave up (or, with next,
// starts its next run only in next, past --ready-timeout), with its runs'
// ends and its last output, and returns start's exit code.
func (c *cli) endedBeforeReady(ctx context.Context, s *session, t fsm.Task, next time.Duration) int {
	evs, _ := s.svc.TaskEvents(ctx, t.ID)
	runs := runsOf(evs)
	spent := next > 0
	if len(runs) <= 1 && !spent {
		c.errorf("task %s ended before it said it is ready (%s): %s", t.ID, readyHow(t), endSummary(t, true))
	} else {
		ends := make([]string, len(runs))
		for i, r := range runs {
			ends[i] = clikit.DescribeExit(r.exit)
		}
		c.errorf("task %s ended before it said it is ready (%s) in each of its %d runs: %s", t.ID, readyHow(t), len(runs), strings.Join(ends, "; "))
		if spent {
			fmt.Fprintf(c.stderr, "  its restart policy starts its next run in %s, past --ready-timeout (%s)\n", clikit.DurationText(next), clikit.Printable(t.Reason))
			fmt.Fprintf(c.stderr, "  it is left restarting: 'tether stop %s' stops it\n", t.ID)
		} else {
			fmt.Fprintf(c.stderr, "  its restart policy gave up: %s\n", endSummary(t, true))
		}
	}
	c.printLastOutput(t.ID)
	fmt.Fprintf(c.stderr, "  'tether logs %s' has its output, 'tether events %s' its history\n", t.ID, t.ID)
	if spent && len(runs) > 0 {
		if x := exitCode(runs[len(runs)-1].exit); x != 0 {
			return x
		}
		return exitError
	}
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
