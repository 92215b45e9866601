package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// start (and restart) return once the task is up: one of its runs has
// stayed up --min-uptime (supervisord's startsecs), so that a task that
// dies at once (a bad flag, a port in use) fails the start instead of
// passing it. A run that ends sooner and that the task's restart policy
// restarts does not pass it: the start waits for a later run to stay up,
// and fails once the policy gives up first (supervisord's startretries),
// with the runs' exits and the last output. The wait is bounded by
// --ready-timeout (a start is a command someone waits on): a restart the
// policy delays past it (a long delay, or mode "delay" waiting out its
// interval) fails the start at once, and so does the bound itself, the
// task left to its policy.

// lastLines is how many lines of each output stream a failed start shows.
const lastLines = 5

// minUptime is how long start waits for the task to stay up: --min-uptime
// when given, else none for a batch job's task (it is meant to end) and
// the flag's default (1s) for any other.
func (c *cli) minUptime(opts startOptions) time.Duration {
	if !opts.minUptimeSet && opts.batch {
		return 0
	}
	return opts.minUptime
}

// batchSpec reports whether a recorded spec is a task of a batch (or
// sysbatch) job, for a restart, which has the log's spec and not the job
// file: the spec records the job's name, not its type, but the restart
// policy a job file gives a task restarts a successful exit exactly when
// the job is not a batch (Nomad's defaults by job type, which a restart
// block in the file keeps: it has no on-success setting).
func batchSpec(spec fsm.Spec) bool {
	return spec.Job != "" && spec.Restart != nil && !spec.Restart.OnSuccess
}

// started finishes a start: it waits until a run of the task has stayed up
// the minimum uptime (nothing when min is 0; a notify task's READY=1
// instead, within readyTimeout: see awaitReady), then prints the task's id
// on stdout. A task whose runs all ended sooner, until its restart policy
// gave up, fails the start: its runs' ends and its last output are printed
// instead, and the exit code is its last run's own (1 if that was 0).
// Ctrl-C meanwhile stops the task.
func (c *cli) started(ctx context.Context, s *session, t fsm.Task, min, readyTimeout time.Duration, sigs <-chan os.Signal) int {
	if notifyTask(t) {
		// Its READY=1 stands for --min-uptime; one that ended before its
		// start could wait for it (it ended before it was ready) is said
		// the same way, whichever came first.
		if t.State.Terminal() {
			return c.endedBeforeReady(ctx, s, t, 0)
		}
		return c.awaitReady(ctx, s, t, readyTimeout, sigs)
	}
	if min > 0 {
		// The bound: --ready-timeout for the crash loop, and min more for
		// a run that starts just before it to prove itself.
		up := c.stayUp(ctx, s, t, min, time.Now().Add(readyTimeout+min), sigs)
		switch {
		case up.sig != nil:
			fmt.Fprintf(c.stderr, "tether: %s: got %v before the task was up, stopping it\n", t.ID, up.sig)
			c.stopOnSignals(ctx, s, t.ID, sigs)
			_, _ = s.svc.StopTask(ctx, t.ID, 0, 0)
			return 128 + int(up.sig.(syscall.Signal))
		case up.err != nil:
			c.errorf("task %s started, but watching it failed: %v", t.ID, up.err)
			fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", t.ID)
			return exitError
		case !up.up:
			return c.neverUp(ctx, s, up.task, min, readyTimeout, up)
		}
		t = up.task
	}
	fmt.Fprintln(c.stdout, t.ID)
	if t.State.Terminal() {
		fmt.Fprintf(c.stderr, "tether: %s: already %s\n", t.ID, describeEnd(t))
	}
	return exitOK
}

// upOutcome is what stayUp saw.
type upOutcome struct {
	task fsm.Task
	up   bool // a run stayed up min
	// later: the run ended and the restart policy starts the next only
	// after the start's bound (next: in how long); timedOut: the bound
	// passed. The task is left to its policy either way.
	later    bool
	next     time.Duration
	timedOut bool
	sig      os.Signal // the start was interrupted
	err      error
}

// stayUp follows task t until one of its runs has been running min (the
// same task process, from when this saw it running), or the task has
// ended, or deadline comes, or its restart policy starts its next run only
// after deadline (upOutcome.later). A run that ends sooner, restarted by
// the policy, starts the wait again.
func (c *cli) stayUp(ctx context.Context, s *session, t fsm.Task, min time.Duration, deadline time.Time, sigs <-chan os.Signal) upOutcome {
	if t.State.Terminal() {
		return upOutcome{task: t}
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := make(chan fsm.Task, 1)
	type followed struct {
		task fsm.Task
		err  error
	}
	done := make(chan followed, 1)
	go func() {
		final, err := s.svc.FollowTask(fctx, t.ID, func(st fsm.Task) {
			select { // the latest replaces one not yet read
			case <-changes:
			default:
			}
			changes <- st
		})
		done <- followed{final, err}
	}()
	cur, run := t, 0
	bound := time.NewTimer(time.Until(deadline))
	defer bound.Stop()
	var timer *time.Timer
	var timerC <-chan time.Time
	stop := func() {
		if timer != nil {
			timer.Stop()
		}
		timer, timerC, run = nil, nil, 0
	}
	defer stop()
	seen := func(st fsm.Task) *upOutcome {
		cur = st
		switch {
		case st.State.Terminal():
			return &upOutcome{task: st}
		case st.State == fsm.StateRunning && st.TaskPID != run:
			stop()
			run = st.TaskPID
			timer = time.NewTimer(min)
			timerC = timer.C
		case st.State == fsm.StateRestarting && run != 0:
			stop()
			if next, later := c.restartLater(ctx, s, st, deadline); later {
				return &upOutcome{task: st, later: true, next: next}
			}
		}
		return nil
	}
	if o := seen(t); o != nil {
		return *o
	}
	for {
		select {
		case st := <-changes:
			if o := seen(st); o != nil {
				return *o
			}
		case <-timerC:
			return upOutcome{task: cur, up: true}
		case <-bound.C:
			return upOutcome{task: cur, timedOut: true}
		case f := <-done:
			if f.err == nil && f.task.State.Terminal() {
				return upOutcome{task: f.task}
			}
			if ctx.Err() != nil {
				return upOutcome{task: cur, err: context.Cause(ctx)}
			}
			return upOutcome{task: cur, err: f.err}
		case sig := <-sigs:
			cancel()
			<-done
			return upOutcome{task: cur, sig: sig}
		}
	}
}

// restartLater reports whether the restart task st is in starts its next
// run only after deadline (a long delay, or mode "delay" waiting out its
// interval), and in how long.
func (c *cli) restartLater(ctx context.Context, s *session, st fsm.Task, deadline time.Time) (time.Duration, bool) {
	evs, err := s.svc.TaskEvents(ctx, st.ID)
	if err != nil {
		return 0, false
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Type == fsm.EventRestartIntent {
			at := time.Unix(0, e.Time).Add(e.Delay)
			return time.Until(at).Round(time.Second), at.After(deadline)
		}
	}
	return 0, false
}

// runEnd is how one run of a task ended, and how long it ran.
type runEnd struct {
	exit fsm.ExitStatus
	ran  time.Duration // 0: not known
}

// runsOf are the ends of the runs a task's events record, in order: each
// restart's (its restart-intent carries the exit of the run it follows),
// then the last run's (task-exited).
func runsOf(evs []fsm.Event) []runEnd {
	var out []runEnd
	var began int64
	for _, e := range evs {
		switch {
		case e.Type == fsm.EventLaunched:
			began = e.Time
		case (e.Type == fsm.EventRestartIntent || e.Type == fsm.EventTaskExited) && e.Exit != nil:
			r := runEnd{exit: *e.Exit}
			end := e.Exit.At
			if end == 0 {
				end = e.Time
			}
			if began > 0 && end > began {
				r.ran = time.Duration(end - began)
			}
			out = append(out, r)
			began = 0
		}
	}
	return out
}

// neverUp reports a task none of whose runs stayed up min, until its
// restart policy gave up (or its next run comes after the start's bound,
// or the bound passed: up), with its runs' ends and its last output, and
// returns start's exit code: its last run's own (1 if that was 0). A task
// that ran once and ended is an endedEarly.
func (c *cli) neverUp(ctx context.Context, s *session, t fsm.Task, min, bound time.Duration, up upOutcome) int {
	evs, _ := s.svc.TaskEvents(ctx, t.ID)
	runs := runsOf(evs)
	if len(runs) <= 1 && t.State.Terminal() {
		return c.endedEarly(t, min)
	}
	ends := make([]string, len(runs))
	for i, r := range runs {
		ends[i] = clikit.DescribeExit(r.exit)
		if r.ran > 0 {
			ends[i] += " after " + clikit.DurationText(r.ran.Round(time.Millisecond))
		}
	}
	c.errorf("task %s did not stay up --min-uptime %s in any of its %d runs: %s", t.ID, clikit.DurationText(min), len(runs), strings.Join(ends, "; "))
	code := exitError
	if len(runs) > 0 {
		if x := exitCode(runs[len(runs)-1].exit); x != 0 {
			code = x
		}
	}
	switch {
	case up.later:
		fmt.Fprintf(c.stderr, "  its restart policy starts its next run in %s, past --ready-timeout %s (%s)\n", clikit.DurationText(up.next), clikit.DurationText(bound), clikit.Printable(t.Reason))
		fmt.Fprintf(c.stderr, "  it is left restarting: 'tether stop %s' stops it\n", t.ID)
	case up.timedOut:
		fmt.Fprintf(c.stderr, "  and --ready-timeout %s passed: it is left %s under its restart policy: 'tether stop %s' stops it\n", clikit.DurationText(bound), t.State, t.ID)
	default:
		fmt.Fprintf(c.stderr, "  its restart policy gave up: %s\n", endSummary(t, true))
		code = endExitCode(t)
	}
	c.printLastOutput(t.ID)
	fmt.Fprintf(c.stderr, "  'tether logs %s' has its output, 'tether events %s' its history; --min-uptime 0 returns once it runs\n", t.ID, t.ID)
	return code
}

// endedEarly reports a task that ended before its minimum uptime, with its
// last output, and returns start's exit code.
func (c *cli) endedEarly(t fsm.Task, min time.Duration) int {
	c.errorf("task %s ended within --min-uptime %s of its start: %s", t.ID, clikit.DurationText(min), endSummary(t, true))
	c.printLastOutput(t.ID)
	fmt.Fprintf(c.stderr, "  'tether logs %s' has its output, 'tether events %s' its history; --min-uptime 0 returns once it runs\n", t.ID, t.ID)
	return endExitCode(t)
}

// printLastOutput prints the last lines of a task's stderr and stdout, for
// a start that failed.
func (c *cli) printLastOutput(id string) {
	for _, stream := range []string{stderrFile, stdoutFile} {
		lines := c.lastOutput(id, stream, lastLines)
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(c.stderr, "  its last %s:\n", streamName(stream))
		for _, l := range lines {
			fmt.Fprintf(c.stderr, "    %s\n", clikit.Printable(l))
		}
	}
}

// endExitCode is a failed start's exit code for a task that ended: its
// own (1 if that was 0), or a failure's by its cause.
func endExitCode(t fsm.Task) int {
	code := exitError
	switch {
	case t.Exit != nil && exitCode(*t.Exit) != 0:
		code = exitCode(*t.Exit)
	case t.Exit == nil && t.State == fsm.StateFailed:
		code = startExitCode(nil, t.Cause)
	}
	return code
}

func streamName(file string) string {
	if file == stderrFile {
		return "stderr"
	}
	return "stdout"
}

// lastOutput returns the last n lines a task wrote to one of its streams.
func (c *cli) lastOutput(id, stream string, n int) []string {
	var buf bytes.Buffer
	if err := printStream(c.log, c.taskDir(id), tailStream{name: stream, out: &buf, last: n}); err != nil {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// spawnedText says what a failed start left behind. A start the driver
// gave up on before its end was recorded (the store failed under it: a
// full disk) leaves the task in the state it reached, its executor not
// confirmed dead, for recovery.
func spawnedText(t fsm.Task) string {
	switch {
	case t.Nonce == "":
		return "nothing was spawned"
	case t.State.Terminal():
		return "its executor was stopped and confirmed dead"
	}
	return fmt.Sprintf("it is left %s and its executor may be alive: 'tether recover' reconciles it", t.State)
}

// endSummary says how a task ended, for run's last line and a failed
// start: its exit code or signal, an OOM kill and the memory limit it
// hit, its restarts, the reason of a failure. It is "" for a plain
// success (exit 0, no restart), unless always.
func endSummary(t fsm.Task, always bool) string {
	if x := t.Exit; !always && t.State == fsm.StateExited && x != nil && x.Code == 0 && x.Signal == 0 && !x.OOM && t.Restarts == 0 {
		return ""
	}
	var s string
	switch {
	case t.State == fsm.StateExited && t.Exit != nil && t.Exit.Signal > 0:
		s = "killed by " + clikit.SignalName(t.Exit.Signal)
	case t.State == fsm.StateExited && t.Exit != nil:
		s = fmt.Sprintf("exited with code %d", t.Exit.Code)
	default:
		s = t.State.String()
		if t.Exit != nil {
			x := *t.Exit
			x.OOM = false // said below
			s += " (" + clikit.DescribeExit(x) + ")"
		}
		if t.Reason != "" && t.State != fsm.StateStopped {
			s += ": " + clikit.Printable(t.Reason)
		}
	}
	if t.Exit != nil && t.Exit.OOM {
		// The exit is the main process's: an OOM kill of another process
		// of the task is said beside it, and changes no exit code.
		if t.Exit.OOMKilledMain() {
			s += ", OOM killed"
		} else {
			s += ", another process of the task OOM killed"
		}
		if t.Spec != nil {
			if mb := max(t.Spec.Resources.MemoryMaxMB, t.Spec.Resources.MemoryMB); mb > 0 {
				s += fmt.Sprintf(" (memory limit %d MB)", mb)
			}
		}
	}
	switch t.Restarts {
	case 0:
	case 1:
		s += ", after 1 restart"
	default:
		s += fmt.Sprintf(", after %d restarts", t.Restarts)
	}
	if t.Exit != nil && t.Exit.PeakMemory > 0 {
		s += ", peak memory " + mib(t.Exit.PeakMemory)
	}
	return s
}
