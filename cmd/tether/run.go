package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (l *listFlag) Type() string       { return "list" }

// taskInputs are the flags shared by run and start.
type taskInputs struct {
	name, task, drv, dir, user string
	env, capAdd, capDrop       listFlag
	killSignal                 string
	killTimeout                time.Duration
	startOptions
	jobInputs
}

// startOptions say how run, start and restart start a task.
type startOptions struct {
	// replace stops a live task of the same name first.
	replace bool
	// named is set when the task's name was given (a task file's task, or
	// --name): such a name has at most one live task. A name that run and
	// start make up from a command's base name is a label, which several
	// live tasks may share (each named by its id).
	named bool
	// verbose prints the states the start went through.
	verbose bool
	// minUptime is how long start waits for the task to stay up (start
	// and restart only); minUptimeSet says it was given.
	minUptime    time.Duration
	minUptimeSet bool
	// readyTimeout is how long start waits for a notify task's READY=1
	// (start and restart only).
	readyTimeout time.Duration
	// batch is set for a task of a batch (or sysbatch) job, by its job
	// file's type: its min-uptime is 0 unless given.
	batch bool
	// bare is start's one argument when it is a bare word (no "--", no
	// path, no arguments): the name of a desired entry, if one has it.
	bare string
	// ofFile is set for a file's task started alone (a group of one).
	ofFile bool
}

func (o *startOptions) register(fs *flagSet, name string) {
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "say more: the states the start went through")
	if name != "restart" {
		fs.BoolVar(&o.replace, "replace", false, "stop the live task of the same name (with its kill signal and grace), then start this one")
	}
	if name != "run" {
		fs.DurationVar(&o.minUptime, "min-uptime", time.Second, "how long the task must stay up for "+name+" to succeed (0: return once it runs; default 0 for a batch job's task)")
		fs.DurationVar(&o.readyTimeout, "ready-timeout", defaultReadyTimeout, "how long a readiness = \"notify\" task has to send READY=1 for "+name+" to succeed (it replaces --min-uptime for such a task)")
	}
}

func (in *taskInputs) register(fs *flagSet, name string) {
	fs.StringVar(&in.name, "name", "", "task `name` (default: the task file's task name, or the command's base name)")
	fs.StringVar(&in.task, "task", "", "the `task` to run from a task file holding several")
	fs.StringVar(&in.drv, "driver", "", "`driver`: exec or raw_exec (default raw_exec; a task file sets its own)")
	fs.Var(&in.env, "env", "`K=V` environment variable for the task (repeatable)")
	fs.StringVar(&in.dir, "dir", "", "working `directory` of the task")
	fs.StringVar(&in.user, "user", "", "run the task as this `user`")
	fs.Var(&in.capAdd, "cap-add", "`capability` to add (exec driver; repeatable)")
	fs.Var(&in.capDrop, "cap-drop", "`capability` to drop (exec driver; repeatable)")
	fs.StringVar(&in.killSignal, "kill-signal", "", "`signal` a stop sends first (default SIGTERM)")
	fs.DurationVar(&in.killTimeout, "kill-timeout", 0, "`grace` between the stop signal and SIGKILL (default: the task file's kill_timeout, else 5s)")
	in.startOptions.register(fs, name)
	in.jobInputs.register(fs)
}

// isTaskFile says whether a positional argument names a task file by its
// extension (classifyFirst also reads a file without one).
func isTaskFile(arg string) bool {
	switch filepath.Ext(arg) {
	case ".hcl", ".nomad":
		return true
	}
	return false
}

// taskRequest is what run's and start's arguments ask for: a command's
// spec, or a task file (file set) with the flags that shape its tasks.
type taskRequest struct {
	spec fsm.Spec
	file string
	in   taskInputs
}

// taskSpec parses run's and start's arguments. Flags may come anywhere
// before the command line (after "--", or from a first argument that is
// not a task file); a task file's name may be followed by flags.
func (c *cli) taskSpec(name string, args []string) (taskRequest, int, bool) {
	var in taskInputs
	fs := c.flags(name)
	in.register(fs, name)
	if code, ok := c.parse(fs, args); !ok {
		return taskRequest{}, code, false
	}
	in.minUptimeSet = fs.Changed("min-uptime")
	in.named = in.name != "" || in.replace || fs.NArg() == 1
	usage := func(format string, args ...any) (taskRequest, int, bool) {
		c.errorf(format, args...)
		return taskRequest{}, exitUsage, false
	}
	switch {
	case fs.NArg() == 0 && len(fs.CommandLine()) == 0:
		return usage("%s needs a task file or a command: tether %s FILE.hcl, or tether %s -- CMD [ARGS...]", name, name, name)
	case fs.NArg() > 0 && len(fs.CommandLine()) > 0:
		return usage("%s takes a task file or a command, not both: tether %s FILE.hcl, or tether %s -- CMD [ARGS...]", name, name, name)
	case fs.NArg() > 1:
		return usage("unexpected arguments after %s: %s", clikit.Printable(fs.Arg(0)), clikit.Printable(strings.Join(fs.Args()[1:], " ")))
	case fs.NArg() == 1:
		file := fs.Arg(0)
		if classifyFirst(file) == argDataFile {
			c.errorf("%s", dataFileError(name, file))
			return taskRequest{}, exitUsage, false
		}
		if in.drv != "" && in.drv != "exec" && in.drv != "raw_exec" {
			return usage("--driver %q: use exec or raw_exec", in.drv)
		}
		if in.killSignal != "" {
			if _, err := parseSignal(in.killSignal); err != nil {
				return usage("--kill-signal: %v", err)
			}
		}
		return taskRequest{file: file, in: in}, 0, true
	}
	if in.task != "" || in.group != "" {
		return usage("--task and --group pick tasks of a task file; with a command, use --name")
	}
	if len(in.vars)+len(in.varFiles)+len(in.meta) > 0 {
		return usage("--var, --var-file and --meta are a job file's inputs; with a command, use --env")
	}
	spec := fsm.Spec{Driver: "raw_exec", Command: fs.CommandLine()[0], Args: fs.CommandLine()[1:]}
	if len(fs.CommandLine()) == 1 && !fs.Dashed() && !strings.Contains(fs.CommandLine()[0], "/") {
		in.bare = fs.CommandLine()[0]
	}
	if in.drv != "" {
		spec.Driver = in.drv
	}
	spec.Name = filepath.Base(fs.CommandLine()[0])
	if in.name != "" {
		spec.Name = in.name
	}
	if spec.Driver != "exec" && spec.Driver != "raw_exec" {
		return usage("--driver %q: use exec or raw_exec", spec.Driver)
	}
	ov, err := in.overrides()
	if err == nil {
		err = ov.Apply(&spec, true)
	}
	if err != nil {
		return usage("%v", strings.TrimPrefix(err.Error(), "job: bad input: "))
	}
	return taskRequest{spec: spec, in: in}, 0, true
}

func (c *cli) cmdRun(args []string) int   { return c.runTask("run", args, false) }
func (c *cli) cmdStart(args []string) int { return c.runTask("start", args, true) }

// runTask starts a task and, unless detach, streams its output, waits for
// it and records its end itself. The store is held only while an event is
// read or appended. Ctrl-C (or SIGTERM) stops the task with its kill signal
// and timeout; a second one kills it at once.
func (c *cli) runTask(name string, args []string, detach bool) int {
	req, code, ok := c.taskSpec(name, args)
	if !ok {
		return code
	}
	spec, opts := req.spec, req.in.startOptions
	ctx := context.Background()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	id := newTaskID(spec.Name)
	s, err := c.open()
	if err != nil {
		c.errorf("nothing was started: %v", err)
		if h := hint(err); h != "" {
			fmt.Fprintf(c.stderr, "  %s\n", h)
		} else if !agentError(err) {
			fmt.Fprintf(c.stderr, "  make %s usable (or pick another with --state-dir) and run the task again\n", c.stateDir)
		}
		return exitStartFail
	}
	defer c.closeSession(s)
	if detach && opts.bare != "" {
		if code, ok := c.startIfDesired(ctx, s, opts, sigs); ok {
			return code
		}
	}
	if req.file != "" {
		run, code, ok := c.planJob(ctx, s, req.file, req.in, !detach)
		if !ok {
			return code
		}
		if ts := run.tasks(); len(ts) > 1 {
			return c.runJob(ctx, s, run, opts, detach, sigs)
		}
		// One task (a task file's, a job's only one, or --task): a group
		// of one, which starts, runs and ends as a lone task does; its
		// ports are let go of with it (run), or by its driver once nothing
		// follows it (start: its reschedule block).
		m := run.tasks()[0]
		spec, id, opts.named, opts.batch, opts.ofFile = m.spec, m.id, true, run.batch, true
		if detach && s.agent == nil && spec.Alloc != nil {
			// Daemonless, a lone task has no group driver to follow it
			// (its executor's restart block is all it has): nothing
			// follows its copy, whoever drives it later (recover, an
			// agent that adopts it).
			a := spec.Alloc.Copy()
			a.Reschedule = nil
			spec.Alloc = a
		}
		if !detach {
			defer c.releasePorts(run.allocs[0].id)
		}
	}

	var tail *tailer
	if !detach {
		tail = startTail(c.log, c.taskDir(id), []tailStream{
			{name: stdoutFile, out: c.stdout},
			{name: stderrFile, out: c.stderr},
		})
	}
	type result struct {
		task fsm.Task
		err  error
	}
	started := make(chan result, 1)
	sctx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	go func() {
		if !opts.named {
			t, err := s.svc.StartTask(ctx, id, spec)
			started <- result{t, err}
			return
		}
		t, _, err := s.svc.StartNamed(sctx, id, spec, driver.StartOptions{Replace: opts.replace, Stopping: func(old fsm.Task) {
			if opts.verbose {
				fmt.Fprintf(c.stderr, "tether: %s: stopping %s (%s), which it replaces\n", id, old.ID, old.State)
			}
		}})
		started <- result{t, err}
	}()
	var r result
	var interrupted os.Signal
	select {
	case r = <-started:
	case interrupted = <-sigs:
		// Interrupted while starting: the stop cancels the start (and a
		// replacement that has not begun it yet).
		fmt.Fprintf(c.stderr, "tether: %s: got %v while starting, stopping the task\n", id, interrupted)
		cancelStart()
		c.stopOnSignals(ctx, s, id, sigs)
		r = <-started
		if r.err == nil && !r.task.State.Terminal() {
			// The stop came before the start had claimed the id.
			r.task, _ = s.svc.StopTask(ctx, id, 0, 0)
			r.err = errInterrupted
		}
	}
	if errors.Is(r.err, driver.ErrNameTaken) {
		tail.stop()
		return c.nameTaken(r.err, false)
	}
	seen := -1 // events of the log already looked at, when known
	if r.err == nil && r.task.State == fsm.StateRunning && r.task.Version == uint64(len(straightStart)) {
		// A start that went straight through: its three commits hold
		// these six events, so the log need not be read again to say so
		// (one store session fewer for every start).
		seen = len(straightStart)
		if opts.verbose {
			fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, joinStates(straightStart))
		}
		c.sayWarnings(id, r.task.Warnings) // the launch's, folded into the state
	} else if evs, err := s.svc.TaskEvents(ctx, id); err == nil {
		seen = len(evs)
		if opts.verbose {
			fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, joinStates(lifecycle(evs)))
		}
		for _, e := range evs {
			if e.Type == fsm.EventLaunched {
				c.sayWarnings(id, e.Warnings)
			}
		}
	}
	if r.err != nil {
		tail.stop()
		if interrupted != nil {
			return 128 + int(interrupted.(syscall.Signal))
		}
		if r.task.State == fsm.StateNone {
			return c.notRecorded(id, r.err)
		}
		return c.startFailed(id, r.task, r.err)
	}
	if detach {
		if opts.ofFile && r.task.Spec != nil && r.task.Spec.Alloc != nil && r.task.Spec.Alloc.Reschedule != nil {
			// A file's task under an agent: the agent follows it from now
			// on, and starts it again by its reschedule block once it has
			// failed. Daemonless, a lone task has no driver but its
			// executor (its restart block); a job's groups have their
			// detached tether drive-group.
			if _, err := s.svc.StartGroup(ctx, []string{id}, nil); err != nil {
				c.errorf("warning: task %s has no driver to reschedule it: %v", id, err)
			}
		}
		return c.started(ctx, s, r.task, c.minUptime(opts), opts.readyTimeout, sigs)
	}
	final, werr := c.waitTask(ctx, s, id, seen, sigs, &interrupted)
	tail.stop()
	return c.endCode(final, werr, interrupted)
}

// errInterrupted: a start was interrupted (Ctrl-C) and the task stopped.
var errInterrupted = errors.New("interrupted")

// sayWarnings tells, on stderr, what a launch did other than what was
// asked.
func (c *cli) sayWarnings(id string, ws []fsm.Warning) {
	for _, w := range ws {
		fmt.Fprintf(c.stderr, "tether: %s: warning: %s\n", id, clikit.Printable(w.Text))
	}
}

// straightStart is the states a start passes through when nothing goes
// wrong: task-created and spawn-intent, executor-up and launch-intent,
// launched and running, one state change an event.
var straightStart = []fsm.State{fsm.StateCreated, fsm.StateSpawning, fsm.StateExecutorUp, fsm.StateLaunching, fsm.StateLaunched, fsm.StateRunning}

// waitTask waits for the task's end (recorded by this process's driver:
// exit, then reaping), stopping it on Ctrl-C, and tells each restart on
// the way. seen is how many of the task's events were shown already (-1:
// unknown, read them now). The log is read again only for a task that has
// restarted: the restarts are the only events it tells.
func (c *cli) waitTask(ctx context.Context, s *session, id string, seen int, sigs <-chan os.Signal, interrupted *os.Signal) (fsm.Task, error) {
	type result struct {
		task fsm.Task
		err  error
	}
	done := make(chan result, 1)
	go func() {
		if seen < 0 {
			seen = 0
			if evs, err := s.svc.TaskEvents(ctx, id); err == nil {
				seen = len(evs)
			}
		}
		ready := newReadyRecorder(ctx)
		t, err := s.svc.FollowTask(ctx, id, func(st fsm.Task) {
			if st.Restarts > 0 && st.Version > uint64(seen) {
				seen = c.sayRestarts(ctx, s, id, seen)
			}
			ready.follow(s, st)
		})
		ready.stop()
		done <- result{t, err}
	}()
	select {
	case r := <-done:
		return r.task, r.err
	case sig := <-sigs:
		*interrupted = sig
		fmt.Fprintf(c.stderr, "tether: %s: got %v, stopping the task\n", id, sig)
		c.stopOnSignals(ctx, s, id, sigs)
		r := <-done
		return r.task, r.err
	}
}

// sayRestarts tells, on stderr, the restarts recorded in the task's log
// past its first seen events, and returns how many events it has now.
func (c *cli) sayRestarts(ctx context.Context, s *session, id string, seen int) int {
	evs, err := s.svc.TaskEvents(ctx, id)
	if err != nil || len(evs) <= seen {
		return seen
	}
	for _, e := range evs[seen:] { // past the start: every launch is a restart's
		switch e.Type {
		case fsm.EventRestartIntent:
			what := "exited"
			if e.Exit != nil {
				what = clikit.DescribeExit(*e.Exit)
			}
			fmt.Fprintf(c.stderr, "tether: %s: %s; restart %d in %s\n", id, what, e.Attempt, e.Delay)
		case fsm.EventLaunched:
			fmt.Fprintf(c.stderr, "tether: %s: restarted, pid %d\n", id, e.TaskPID)
		case fsm.EventLaunchFailed:
			fmt.Fprintf(c.stderr, "tether: %s: restart failed: %s\n", id, clikit.Printable(e.Reason))
		}
	}
	return len(evs)
}

// stopOnSignals stops the task in the background with its kill signal and
// grace, and kills it at once on a second request: a signal that arrives
// once the first one's stop has begun (its stop-requested is recorded).
// One that arrives before is the first request delivered twice, counted
// once: timeout(1) signals the process it runs and then its process
// group, a terminal's Ctrl-C goes to the foreground group, a control
// group's kill to every process of it, and each delivery comes within
// moments of the other, long before the stop is recorded (a commit, and a
// round trip to the task's executor). A person's second Ctrl-C, or a
// second timeout, comes later and escalates (see signalGate).
func (c *cli) stopOnSignals(ctx context.Context, s *session, id string, sigs <-chan os.Signal) {
	gate := newSignalGate(ctx, s, id)
	go func() { _, _ = s.svc.StopTask(ctx, id, 0, 0) }()
	go func() {
		defer gate.close()
		for {
			sig, ok := <-sigs
			if !ok {
				return
			}
			if !gate.began() {
				c.log.Debug("the same request delivered again before the stop began: counted once", "task_id", id, "signal", sig)
				continue
			}
			fmt.Fprintf(c.stderr, "tether: %s: got %v again, killing the task now\n", id, sig)
			_, _ = s.svc.StopTask(ctx, id, syscall.SIGKILL, time.Nanosecond)
			return
		}
	}()
}

// endCode is run's and wait's exit code for a task that ended: its main
// process's code (128+signal: 137 when the OOM killer killed it), 128+sig
// when tether stopped it because it was interrupted. An OOM kill of
// another process of the task is said on stderr and leaves the code
// alone.
func (c *cli) endCode(final fsm.Task, err error, interrupted os.Signal) int {
	if err != nil {
		c.errorf("lost track of task %s: %v", final.ID, err)
		fmt.Fprintf(c.stderr, "  'tether recover' reconciles it; 'tether events %s' shows what happened\n", final.ID)
		return exitError
	}
	if s := endSummary(final, false); s != "" {
		fmt.Fprintf(c.stderr, "tether: %s: %s\n", final.ID, s)
	}
	c.capNote(final)
	switch {
	case interrupted != nil && final.State == fsm.StateStopped:
		return 128 + int(interrupted.(syscall.Signal))
	case final.Exit != nil:
		return exitCode(*final.Exit) // 137 for a main process the OOM killer killed
	case final.State == fsm.StateFailed:
		return startExitCode(nil, final.Cause)
	}
	return exitError
}

// startFailed reports a task that did not start and picks the exit code:
// 127 not found, 126 not executable, else 125.
func (c *cli) startFailed(id string, task fsm.Task, err error) int {
	// Say the reason once, without the wrapping that names the task again.
	why := err.Error()
	var te *driver.TaskError
	switch {
	case task.Reason != "" && errors.Is(err, driver.ErrStartFailed):
		why = task.Reason // the failure the driver recorded, which err repeats
	case errors.As(err, &te):
		why = te.Err.Error()
	}
	c.errorf("task %s failed to start: %s; %s", id, why, spawnedText(task))
	code := startExitCode(err, task.Cause)
	switch {
	case code == exitNotFound:
		fmt.Fprintln(c.stderr, "  check the command's name and PATH, or give its absolute path")
	case code == exitCannotRun:
		fmt.Fprintln(c.stderr, "  check that the command is an executable file (chmod +x)")
	case task.Cause == fsm.CauseUnknownCap || errors.Is(err, executor.ErrUnknownCap) && !errors.Is(err, executor.ErrCapNotAllowed):
		fmt.Fprintln(c.stderr, "  remove the capability from cap_add, or use driver raw_exec")
	case task.Cause == fsm.CauseCapNotAllowed || errors.Is(err, executor.ErrCapNotAllowed):
		fmt.Fprintf(c.stderr, "  remove the capability from cap_add, use driver raw_exec, or allow it with --allow-caps LIST\n"+
			"  (or TETHER_ALLOW_CAPS=LIST): the allow list with it added; the default is %s\n",
			strings.ToLower(strings.Join(executor.DefaultAllowedCaps, ",")))
	case errors.Is(err, driver.ErrInvalidSpec):
		fmt.Fprintln(c.stderr, "  fix the task's spec and run it again")
	default:
		if h := hint(err); h != "" {
			fmt.Fprintf(c.stderr, "  %s\n", h)
		} else {
			fmt.Fprintf(c.stderr, "  'tether events %s' shows what happened\n", id)
		}
	}
	return code
}

// notRecorded reports a start whose task the store never recorded (its
// first append failed: the store is locked, damaged, not a store, on a
// full disk): nothing was spawned (every effect is written ahead), and
// 'tether events' would not know the task, so the message names the
// store's problem and what to do about it instead.
func (c *cli) notRecorded(id string, err error) int {
	var te *driver.TaskError
	why := err
	if errors.As(err, &te) {
		why = te.Err
	}
	c.errorf("task %s was not started: the store could not record it: %v", id, why)
	if h := hint(err); h != "" {
		fmt.Fprintf(c.stderr, "  nothing ran; %s\n", h)
	} else {
		fmt.Fprintln(c.stderr, "  nothing ran; deal with the store's problem above and run the task again")
	}
	return exitStartFail
}

// startExitCode follows docker run: 127 when the command is not found,
// 126 when it cannot be executed, 125 for any other failure to start. The
// cause is the one the driver recorded with the failure (fsm.Cause), or
// the error's own when the failure happened in this process.
func startExitCode(err error, cause fsm.Cause) int {
	switch {
	case cause == fsm.CauseCommandNotFound || errors.Is(err, executor.ErrCommandNotFound):
		return exitNotFound
	case cause == fsm.CauseNotExecutable || errors.Is(err, executor.ErrNotExecutable):
		return exitCannotRun
	}
	return exitStartFail
}

// exitCode is the code a shell would see: the task's code, or 128+signal.
func exitCode(x fsm.ExitStatus) int {
	if x.Signal > 0 {
		return 128 + x.Signal
	}
	if x.Code < 0 || x.Code > 255 {
		return exitError
	}
	return x.Code
}

// describeEnd says how a terminal task ended.
// capNote reminds, when a non-root exec task that named no capability
// ended badly, that it held none: an exec task of any user but root gets
// exactly the capabilities its cap_add names (Docker's rule, not Nomad's
// default set), and a failure to bind a low port or chown a file is often
// that.
func (c *cli) capNote(t fsm.Task) {
	s := t.Spec
	failed := t.State == fsm.StateFailed || t.Exit != nil && (t.Exit.Code != 0 || t.Exit.Signal != 0)
	if s == nil || s.Driver != "exec" || len(s.CapAdd) > 0 || !failed || isRoot(s.User) {
		return
	}
	fmt.Fprintf(c.stderr, "tether: %s: note: it ran as %s with no capability; if it needed one, name it in its config's cap_add\n"+
		"  (cap_add = [\"net_bind_service\"] to bind a port below 1024), within the allow list (--allow-caps)\n", t.ID, userName(s.User))
}

// isRoot reports whether an exec task's user (a name or a uid; "" is
// nobody) is root.
func isRoot(name string) bool {
	if name == "" {
		return false
	}
	if name == "0" || name == "root" {
		return true
	}
	u, err := user.Lookup(name)
	return err == nil && u.Uid == "0"
}

func userName(name string) string {
	if name == "" {
		return "nobody"
	}
	return name
}

func describeEnd(t fsm.Task) string {
	s := t.State.String()
	if t.Exit != nil {
		s += " (" + clikit.DescribeExit(*t.Exit) + ")"
	}
	if t.Reason != "" && t.State != fsm.StateExited && t.State != fsm.StateStopped {
		s += ": " + t.Reason
	}
	return s
}

// cmdWait waits for tasks to end (supervising each meanwhile: its end is
// recorded by this process if by no other) and exits with the task's
// code, or with several the largest of their codes:
//
//	tether wait web
//	tether wait job1 job2 app.batch
//
// Each task's end is said on stderr as it comes, in the order of the
// arguments. Ctrl-C stops waiting, not the tasks (they were not started
// here).
func (c *cli) cmdWait(args []string) int {
	fs := c.flags("wait")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		c.errorf("wait takes task ids or names (a group's JOB.GROUP, a job's name): tether wait NAME...")
		return exitUsage
	}
	ctx := context.Background()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	defer c.closeSession(s)
	code := exitOK
	var infos []driver.TaskInfo
	seen := map[string]bool{}
	for _, t := range c.resolveTargets(ctx, s, fs.Args()) {
		if t.err != nil {
			code = worst(code, c.fail(t.err))
			continue
		}
		for _, info := range t.tasks {
			if !seen[info.ID] {
				seen[info.ID] = true
				infos = append(infos, info)
			}
		}
	}
	// wait supervises the tasks until their end; Ctrl-C stops waiting, not
	// the tasks (they were not started here).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if _, ok := <-sigs; ok {
			cancel()
		}
	}()
	type result struct {
		task fsm.Task
		err  error
	}
	done := make([]chan result, len(infos))
	for i, info := range infos {
		done[i] = make(chan result, 1)
		go func() {
			if info.State.Terminal() {
				done[i] <- result{task: info.Task}
				return
			}
			final, err := s.svc.WaitTask(wctx, info.ID)
			done[i] <- result{final, err}
		}()
	}
	for i, info := range infos {
		r := <-done[i]
		if r.task.ID == "" {
			r.task.ID = info.ID
		}
		if wctx.Err() != nil && !r.task.State.Terminal() {
			state := r.task.State
			if state == fsm.StateNone {
				state = info.State
			}
			fmt.Fprintf(c.stderr, "tether: stopped waiting; task %s is still %s\n", info.ID, state)
			code = worst(code, 128+int(syscall.SIGINT))
			continue
		}
		code = worst(code, c.endCode(r.task, r.err, nil))
	}
	return code
}
