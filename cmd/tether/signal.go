package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/clikit"
)

// cmdSignal sends a signal to running tasks through their executors (which
// hold the tasks' pidfds): to each task's process group, or with --main to
// its main process alone. The signal is the last argument:
//
//	tether signal web SIGHUP
//	tether signal web db USR1 --main
//	tether signal app.web HUP     # every running task of a group (or job)
//
// Each task is signalled in turn and said on a line of its own; the exit
// code is the worst (1 if any could not be signalled). A group or job
// signals its running tasks (one of its tasks that has ended, a prestart
// task that completed, is left out); a task named alone must be running.
func (c *cli) cmdSignal(args []string) int {
	fs := c.flags("signal")
	main := fs.Bool("main", false, "signal only the task's main process, not the rest of its process group")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	pos := fs.Args()
	if len(pos) < 2 {
		c.errorf("signal takes task ids or names and then a signal: tether signal NAME... SIGNAL [--main]")
		return exitUsage
	}
	sig, err := parseSignal(pos[len(pos)-1])
	if err != nil {
		c.errorf("%v (the signal is the last argument: tether signal NAME... SIGNAL)", err)
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	target := "process group"
	if *main {
		target = "main process"
	}
	code := exitOK
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, pos[:len(pos)-1]) {
		if t.err != nil {
			code = worst(code, c.fail(t.err))
			continue
		}
		running := 0
		for _, info := range t.tasks {
			info = c.reconcileIfGone(ctx, s, info)
			if t.kind != driver.TargetTask && info.State.Terminal() {
				continue // a group's task that has ended: nothing to signal
			}
			running++
			if seen[info.ID] {
				continue // named twice: signalled once
			}
			seen[info.ID] = true
			if err := s.svc.SignalTask(ctx, info.ID, sig, *main); err != nil {
				code = worst(code, c.taskCallFailed(info.ID, err))
				continue
			}
			fmt.Fprintf(c.stderr, "tether: %s: sent %s to the task's %s\n", info.ID, clikit.SignalName(int(sig)), target)
		}
		if t.kind != driver.TargetTask && running == 0 {
			c.errorf("%s: none of its tasks is running; nothing was sent", t.label())
			code = worst(code, exitError)
		}
	}
	return code
}

// taskCallFailed reports a failed call into a running task (signal, exec)
// with what to do about it, and returns exitError.
func (c *cli) taskCallFailed(id string, err error) int {
	c.errorf("%v", err)
	var te *driver.TaskError
	switch {
	case errors.Is(err, driver.ErrNotRunning) && errors.As(err, &te) && te.State.Terminal():
		fmt.Fprintf(c.stderr, "  the task has ended; 'tether status --all %s' shows how\n", id)
	case errors.Is(err, executor.ErrRestarting):
		fmt.Fprintf(c.stderr, "  the task is waiting out a restart's delay; retry once it runs again ('tether status %s')\n", id)
	case errors.Is(err, driver.ErrNotRunning):
		fmt.Fprintf(c.stderr, "  'tether status %s' shows its state\n", id)
	case errors.Is(err, executor.ErrPeerNotExecutor):
		fmt.Fprintf(c.stderr, "  something other than the task's executor listens on its socket; nothing was sent to it\n")
	case errors.Is(err, executor.ErrAtLimit):
		fmt.Fprintf(c.stderr, "  the task is at its limit of processes (resources.pids): nothing more can start in it until something in it ends\n")
	case errors.Is(err, driver.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(c.stderr, "  the task's executor did not answer; 'tether status %s' checks on it\n", id)
	default:
		if h := hint(err); h != "" {
			fmt.Fprintf(c.stderr, "  %s\n", h)
		}
	}
	return exitError
}
