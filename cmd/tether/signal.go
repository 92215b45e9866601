package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/clikit"
)

// cmdSignal sends a signal to a running task through its executor (which
// holds the task's pidfd): to the task's process group, or with --main to
// its main process alone.
//
//	tether signal web SIGHUP
//	tether signal web USR1 --main
func (c *cli) cmdSignal(args []string) int {
	fs := c.flags("signal")
	main := fs.Bool("main", false, "signal only the task's main process, not the rest of its process group")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	pos := fs.Args()
	if len(pos) != 2 {
		c.errorf("signal takes a task id or name and a signal: tether signal ID SIGNAL [--main]")
		return exitUsage
	}
	sig, err := parseSignal(pos[1])
	if err != nil {
		c.errorf("%v", err)
		return exitUsage
	}
	ctx := context.Background()
	s, info, code, ok := c.openTask(ctx, pos[0])
	if !ok {
		return code
	}
	defer c.closeSession(s)
	info = c.reconcileIfGone(ctx, s, info)
	err = s.svc.SignalTask(ctx, info.ID, sig, *main)
	if err != nil {
		return c.taskCallFailed(info.ID, err)
	}
	target := "process group"
	if *main {
		target = "main process"
	}
	fmt.Fprintf(c.stderr, "tether: %s: sent %s to the task's %s\n", info.ID, clikit.SignalName(int(sig)), target)
	return exitOK
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
