package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// start (and restart) return once the task is up: running, and still up
// --min-uptime later (supervisord's startsecs), so that a task that dies
// at once (a bad flag, a port in use) fails the start instead of passing
// it. A task that its restart policy is restarting at that moment counts
// as up: its policy is doing what was asked of it.

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

// started finishes a start: it waits out the minimum uptime (nothing when
// min is 0; a notify task's READY=1 instead, within readyTimeout: see
// awaitReady), then prints the task's id on stdout. A task that ended sooner
// fails the start: its end and its last output are printed instead, and
// the exit code is its own (1 if that was 0). Ctrl-C meanwhile stops the
// task.
func (c *cli) started(ctx context.Context, s *session, t fsm.Task, min, readyTimeout time.Duration, sigs <-chan os.Signal) int {
	if notifyTask(t) && t.State == fsm.StateRunning {
		return c.awaitReady(ctx, s, t, readyTimeout, sigs) // its READY=1 stands for --min-uptime
	}
	if min > 0 && t.State.Terminal() {
		return c.endedEarly(t, min)
	}
	if min > 0 {
		type result struct {
			task fsm.Task
			err  error
		}
		wctx, cancel := context.WithTimeout(ctx, min)
		defer cancel()
		done := make(chan result, 1)
		go func() {
			final, err := s.svc.WaitTask(wctx, t.ID)
			done <- result{final, err}
		}()
		select {
		case r := <-done:
			switch {
			case r.err == nil && r.task.State.Terminal():
				t = r.task
			case errors.Is(r.err, context.DeadlineExceeded):
				// Up all along (or restarting under its policy now).
			case r.err != nil:
				c.errorf("task %s started, but watching it failed: %v", t.ID, r.err)
				fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", t.ID)
				return exitError
			}
		case sig := <-sigs:
			cancel()
			<-done
			fmt.Fprintf(c.stderr, "tether: %s: got %v before the task was up, stopping it\n", t.ID, sig)
			c.stopOnSignals(ctx, s, t.ID, sigs)
			_, _ = s.svc.StopTask(ctx, t.ID, 0, 0)
			return 128 + int(sig.(syscall.Signal))
		}
		if t.State.Terminal() {
			return c.endedEarly(t, min)
		}
	}
	fmt.Fprintln(c.stdout, t.ID)
	if t.State.Terminal() {
		fmt.Fprintf(c.stderr, "tether: %s: already %s\n", t.ID, describeEnd(t))
	}
	return exitOK
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
