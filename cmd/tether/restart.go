package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// cmdRestart stops a task with its kill signal and grace, then starts its
// spec again as a new task, and prints the new task's id once it is up
// (as start does, --min-uptime included):
//
//	tether restart web
//	tether restart web db       # one after the other, each id on a line
//	tether restart app.web      # each task of a group (a group of one task each)
//
// A task that has ended is started again without a stop. The stop and the
// start are two durable steps: a tether that dies between them (a crash,
// a SIGKILL) leaves the old task stopped and no new one, and running the
// restart again starts it (see driver.RestartTask). Ctrl-C during the
// stop leaves the stop to finish and starts nothing (nor any task after
// it). The exit code is the worst of the restarts'.
func (c *cli) cmdRestart(args []string) int {
	var opts startOptions
	fs := c.flags("restart")
	opts.register(fs, "restart")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	opts.minUptimeSet = fs.Changed("min-uptime")
	if fs.NArg() == 0 {
		c.errorf("restart takes task ids or names (a group's JOB.GROUP, a job's name): tether restart NAME...")
		return exitUsage
	}
	ctx := context.Background()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s, err := c.open()
	if err != nil {
		c.fail(err)
		return exitStartFail // as for a start that could not happen
	}
	defer c.closeSession(s)
	// A signal seen by any step (the stop, the start's wait) ends the
	// restarts: what follows is not started.
	var signalled atomic.Bool
	fwd := make(chan os.Signal, 2)
	go func() {
		for sig := range sigs {
			signalled.Store(true)
			fwd <- sig
		}
	}()
	code := exitOK
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, fs.Args()) {
		if t.err != nil {
			c.fail(t.err)
			code = worst(code, exitStartFail)
			continue
		}
		for _, info := range t.tasks {
			if seen[info.ID] {
				continue
			}
			seen[info.ID] = true
			rc := c.restartOne(ctx, s, info, opts, fwd)
			code = worst(code, rc)
			if signalled.Load() {
				return code // nothing more is started
			}
		}
	}
	return code
}

// restartOne restarts one task (cmdRestart).
func (c *cli) restartOne(ctx context.Context, s *session, info driver.TaskInfo, opts startOptions, sigs <-chan os.Signal) int {
	if info.Spec == nil {
		c.errorf("task %s has no spec in its log to start again", info.ID)
		return exitStartFail
	}
	if name, ok := c.desiredOf(ctx, s, info.ID); ok {
		opts.batch = batchSpec(*info.Spec)
		return c.restartDesired(ctx, s, name, info, opts, sigs)
	}
	spec := *info.Spec
	opts.batch = batchSpec(spec)
	newID := newTaskID(spec.Name)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		task, old fsm.Task
		err       error
	}
	done := make(chan result, 1)
	go func() {
		t, old, err := s.svc.RestartTask(rctx, info.ID, newID)
		done <- result{t, old, err}
	}()
	var r result
	select {
	case r = <-done:
	case sig := <-sigs:
		cancel()
		fmt.Fprintf(c.stderr, "tether: got %v; %s is left to stop, and nothing is started\n", sig, info.ID)
		r = <-done
		if r.err == nil && !r.task.State.Terminal() {
			_, _ = s.svc.StopTask(ctx, r.task.ID, 0, 0) // the start had begun
		}
		return 128 + int(sig.(syscall.Signal))
	}
	switch {
	case errors.Is(r.err, driver.ErrNameTaken):
		return c.nameTaken(r.err, true)
	case r.err != nil && r.task.State == fsm.StateNone && r.old.State.Terminal():
		return c.notRecorded(newID, r.err)
	case r.err != nil && r.task.State == fsm.StateNone:
		c.errorf("restart of %s: stopping it failed: %v; nothing was started", info.ID, r.err)
		if h := hint(r.err); h != "" {
			fmt.Fprintf(c.stderr, "  %s\n", h)
		} else {
			fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", info.ID)
		}
		return exitError
	case r.err != nil:
		return c.startFailed(newID, r.task, r.err)
	}
	if opts.verbose {
		fmt.Fprintf(c.stderr, "tether: %s: %s; started again as %s\n", info.ID, describeEnd(r.old), newID)
	}
	return c.started(ctx, s, r.task, c.minUptime(opts), opts.readyTimeout, sigs)
}
