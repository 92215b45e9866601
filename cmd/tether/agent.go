package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/agentcmd"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/taskfile"
)

// The agent's commands: tether agent serves a state directory; enable and
// disable register desired tasks with it (or, with no agent, in the store,
// for the next agent to start).

// cmdAgent runs the agent in the foreground until SIGTERM or SIGINT
// (SIGHUP reads the config dir again); --once converges and exits. Its
// setup is internal/agentcmd's, which tether-fleet's fleet mode of the
// agent shares.
func (c *cli) cmdAgent(args []string) int {
	if c.logLevel == "warn" { // the global default: an agent says what it does
		c.logLevel = "info"
	}
	fs := c.flags("agent")
	var af agentcmd.Flags
	af.Register(fs.FlagSet)
	// An agent crash point is the agent's to arm: the CLI's own setup
	// would refuse the name (it knows the driver's points only).
	cp := os.Getenv(driver.EnvCrashPoint)
	if agent.IsCrashPoint(cp) {
		os.Unsetenv(driver.EnvCrashPoint)
	}
	code, ok := c.parse(fs, args)
	if cp != "" {
		os.Setenv(driver.EnvCrashPoint, cp)
	}
	if !ok {
		return code
	}
	if fs.NArg() > 0 {
		c.errorf("agent takes no arguments (got %s)", strings.Join(fs.Args(), " "))
		return exitUsage
	}
	remote := agentcmd.Settings{AllowDrivers: c.allowDrivers}
	if err := af.Resolve(&remote); err != nil {
		c.errorf("%v", err)
		return exitUsage
	}
	hooks, dhooks, err := agent.HooksFromEnv()
	if err != nil {
		c.errorf("%v; unset the variable or pick a listed point", err)
		return exitUsage
	}
	cmd, err := executorCommand()
	if err != nil {
		return c.fail(err)
	}
	met, err := af.OpenMetrics(c.log.Named("agent"))
	if err != nil {
		c.errorf("%v", err)
		return exitUsage
	}
	defer met.Close()
	a, err := agent.Open(agent.Config{
		StateDir: c.stateDir, ConfigDir: af.ConfigDir,
		Logger: c.log.Named("agent"), ExecutorCommand: cmd, AllowedCaps: c.allowedCaps, ChrootEnv: c.chroot,
		AllowSeccomp: c.allowSeccomp, AllowMissing: c.allowMissing, AllowRead: c.allowRead,
		AllowDrivers: c.allowDrivers, AllowRemoteDrivers: remote.AllowRemoteDrivers, AllowHostNamespaces: c.allowHostNS, MaxCount: c.maxCount,
		ReleasePorts: c.releasePorts, StoreOptions: c.storeOptions(), Hooks: hooks, DriverHooks: dhooks,
		Metrics: met.Registry(),
	})
	if err != nil {
		var re *agent.RunningError
		if errors.As(err, &re) {
			c.errorf("%v", err)
			fmt.Fprintf(c.stderr, "  one agent serves a state directory; stop it first, or use another --state-dir\n")
			return exitError
		}
		return c.fail(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			c.errorf("warning: closing: %v", err)
		}
	}()
	if err := agentcmd.Serve(context.Background(), a, af.Once, c.log); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// cmdEnable registers a task or job file (the job, or the task or group
// --task or --group selects) as a desired entry: the file's text and the
// inputs it is read with (-var, -var-file, NOMAD_VAR_, -meta) are kept in
// the store, and the process that serves the state directory reads it
// (its own allow lists: a file it could not run is refused now).
func (c *cli) cmdEnable(args []string) int {
	fs := c.flags("enable")
	task := fs.String("task", "", "the `task` to enable alone from a file holding several (GROUP.TASK where names repeat)")
	var in jobInputs
	in.register(fs)
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("enable takes one task or job file: tether enable FILE.hcl")
		return exitUsage
	}
	file := fs.Arg(0)
	text, err := os.ReadFile(file)
	if err != nil {
		c.errorf("%v", err)
		return exitError
	}
	inputs, ok := c.readJobInputs(in, *task)
	if !ok {
		return exitError
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	svc := s.svc
	e, err := svc.Enable(ctx, agent.EnableRequest{File: file, Text: text, Inputs: inputs})
	if err != nil {
		var pe *job.ParseError
		if errors.As(err, &pe) || errors.Is(err, job.ErrNotAllowed) || errors.Is(err, job.ErrNothingToRun) || errors.Is(err, job.ErrBadInput) ||
			errors.Is(err, taskfile.ErrNoTask) || errors.Is(err, taskfile.ErrNotRunnable) {
			code := c.jobFailed(file, err, "nothing was enabled")
			if !errors.Is(err, job.ErrNotAllowed) {
				fmt.Fprintln(c.stderr, "  nothing was enabled")
			}
			return code
		}
		return c.fail(err)
	}
	if s.local != nil {
		fmt.Fprintf(c.stdout, "enabled %s\n", clikit.Printable(e.Name))
		c.errorf("no agent serves %s: %s starts when one does (tether agent)", c.stateDir, clikit.Printable(e.Name))
		return exitOK
	}
	e = c.awaitEntry(ctx, svc, e.Name, func(e agent.Entry, ok bool) bool { return ok && !e.Pending })
	fmt.Fprintf(c.stdout, "enabled %s\n", clikit.Printable(e.Name))
	c.describeEntry(e)
	return exitOK
}

// cmdDisable unregisters a desired task; its task is stopped.
func (c *cli) cmdDisable(args []string) int {
	fs := c.flags("disable")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("disable takes one desired task's name: tether disable NAME")
		return exitUsage
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	svc := s.svc
	e, err := svc.Disable(ctx, fs.Arg(0))
	if err != nil {
		return c.fail(err)
	}
	if s.agent != nil {
		c.awaitEntry(ctx, svc, e.Name, func(_ agent.Entry, ok bool) bool { return !ok })
	}
	fmt.Fprintf(c.stdout, "disabled %s\n", clikit.Printable(e.Name))
	if e.Task != "" {
		c.errorf("%s: task %s stopped", clikit.Printable(e.Name), e.Task)
	}
	return exitOK
}

// awaitEntry watches the agent's status until done says the entry is
// where the command wants it, and returns it.
func (c *cli) awaitEntry(ctx context.Context, svc agent.Service, name string, done func(agent.Entry, bool) bool) agent.Entry {
	var last agent.Entry
	err := svc.WatchStatus(ctx, func(s agent.Status) bool {
		e, ok := s.Entry(name)
		if ok {
			last = e
		}
		return done(e, ok)
	})
	if err != nil {
		c.errorf("warning: following %s: %v", clikit.Printable(name), err)
	}
	return last
}

// describeEntry says on stderr where a desired entry stands.
func (c *cli) describeEntry(e agent.Entry) {
	switch {
	case e.Problem != "":
		c.errorf("%s: %s", clikit.Printable(e.Name), clikit.Printable(e.Problem))
	case e.Standing == agent.StandingDown || e.Standing == agent.StandingRefused || e.Standing == agent.StandingStopped:
		c.errorf("%s: %s (task %s %s): %s", clikit.Printable(e.Name), e.Standing, e.Task, e.State, clikit.Printable(e.Reason))
	case e.Task != "":
		c.errorf("%s: task %s %s", clikit.Printable(e.Name), e.Task, e.State)
	}
}

// startIfDesired is `tether start NAME` for the name of a desired task:
// it is started again through the desired state (agent.StartDesired: a
// fresh restart count, and the agent keeps it running), and awaited as
// start awaits a task. ok is false when no desired task has the name: the
// word is a command to run.
func (c *cli) startIfDesired(ctx context.Context, s *session, opts startOptions, sigs <-chan os.Signal) (int, bool) {
	st, err := s.svc.Status(ctx)
	if err != nil {
		return 0, false // the start says what is wrong with the store
	}
	e, ok := st.Entry(opts.bare)
	if !ok {
		return 0, false
	}
	e, err = s.svc.StartDesired(ctx, e.Name)
	if err != nil {
		return c.fail(err), true
	}
	return c.awaitDesired(ctx, s, e, c.minUptime(opts), opts.readyTimeout, sigs), true
}

// restartDesired is `tether restart` of a desired task's task: the agent
// stops it and starts a new one for the desired task
// (agent.RestartDesired), awaited as start awaits a task.
func (c *cli) restartDesired(ctx context.Context, s *session, name string, old driver.TaskInfo, opts startOptions, sigs <-chan os.Signal) int {
	e, err := s.svc.RestartDesired(ctx, name)
	if err != nil {
		return c.fail(err)
	}
	if opts.verbose {
		if t, err := s.svc.InspectTask(ctx, old.ID); err == nil {
			fmt.Fprintf(c.stderr, "tether: %s: %s; started again as %s (desired task %s)\n", old.ID, describeEnd(t.Task), e.Task, clikit.Printable(name))
		}
	}
	return c.awaitDesired(ctx, s, e, c.minUptime(opts), opts.readyTimeout, sigs)
}

// desiredOf returns the desired task whose current task is id, if any.
func (c *cli) desiredOf(ctx context.Context, s *session, id string) (string, bool) {
	st, err := s.svc.Status(ctx)
	if err != nil {
		return "", false
	}
	for _, e := range st.Entries {
		if e.Task == id {
			return e.Name, true
		}
	}
	return "", false
}

// awaitDesired waits until the task the agent recorded for a desired task
// (e.Task) runs or has ended, then finishes as start does (its minimum
// uptime, its id on stdout).
func (c *cli) awaitDesired(ctx context.Context, s *session, e agent.Entry, min, readyTimeout time.Duration, sigs <-chan os.Signal) int {
	target := e.Task
	err := s.svc.WatchStatus(ctx, func(st agent.Status) bool {
		now, ok := st.Entry(e.Name)
		return !ok || now.Problem != "" || now.Task != target ||
			now.State != fsm.StateNone && (now.State == fsm.StateRunning || now.State.Terminal())
	})
	if err != nil {
		return c.fail(err)
	}
	info, err := s.svc.InspectTask(ctx, target)
	if err != nil {
		if st, serr := s.svc.Status(ctx); serr == nil {
			if now, ok := st.Entry(e.Name); ok {
				c.describeEntry(now)
			}
		}
		return c.fail(err)
	}
	return c.started(ctx, s, info.Task, min, readyTimeout, sigs)
}
