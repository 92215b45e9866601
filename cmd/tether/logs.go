package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func (c *cli) cmdLogs(args []string) int {
	fs := c.flags("logs")
	stderr := fs.Bool("stderr", false, "print the task's stderr instead of its stdout")
	follow := fs.BoolP("follow", "f", false, "follow the output until the task ends")
	lines := fs.IntP("tail", "n", -1, "print only the last `N` lines (0: none, with -f only what comes next)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("logs takes one task id or name")
		return exitUsage
	}
	ctx := context.Background()
	s, info, code, ok := c.openTask(ctx, fs.Arg(0))
	if !ok {
		return code
	}
	defer c.closeSession(s)
	name := stdoutFile
	if *stderr {
		name = stderrFile
	}
	stream := tailStream{name: name, out: c.stdout, warn: c.stderr, last: *lines, fromEnd: *lines == 0}
	if !*follow || info.State.Terminal() {
		if *lines == 0 {
			return exitOK
		}
		if err := printStream(c.log, c.taskDir(info.ID), stream); err != nil && !errors.Is(err, os.ErrNotExist) {
			return c.fail(err)
		}
		return exitOK
	}
	// Follow until the task has ended (its end is recorded by this
	// command's driver if nobody else does), without holding the store.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if _, ok := <-sigs; ok {
			cancel()
		}
	}()
	tail := startTail(c.log, c.taskDir(info.ID), []tailStream{stream})
	_, err := s.svc.WaitTask(wctx, info.ID)
	tail.stop()
	if err != nil && wctx.Err() == nil {
		c.log.Debug("stopped following", "task_id", info.ID, "err", err)
	}
	return exitOK
}
