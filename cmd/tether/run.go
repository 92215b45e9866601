package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// taskInputs are the flags shared by run and start.
type taskInputs struct {
	name, task, drv, dir, user string
	env, capAdd, capDrop       listFlag
	killSignal                 string
	killTimeout                time.Duration
}

func (in *taskInputs) register(fs *flag.FlagSet) {
	fs.StringVar(&in.name, "name", "", "task `name` (default: the task file's task name, or the command's base name)")
	fs.StringVar(&in.task, "task", "", "the task to run from a task file holding several")
	fs.StringVar(&in.drv, "driver", "", "`exec` or raw_exec (default raw_exec; a task file sets its own)")
	fs.Var(&in.env, "env", "`K=V` environment variable for the task (repeatable)")
	fs.StringVar(&in.dir, "dir", "", "working `directory` of the task")
	fs.StringVar(&in.user, "user", "", "run the task as this `user`")
	fs.Var(&in.capAdd, "cap-add", "`capability` to add (exec driver; repeatable)")
	fs.Var(&in.capDrop, "cap-drop", "`capability` to drop (exec driver; repeatable)")
	fs.StringVar(&in.killSignal, "kill-signal", "", "`signal` a stop sends first (default SIGTERM)")
	fs.DurationVar(&in.killTimeout, "kill-timeout", 0, "grace between the stop signal and SIGKILL (default 5s)")
}

// isTaskFile says whether a positional argument names a task file rather
// than a command.
func isTaskFile(arg string) bool {
	switch filepath.Ext(arg) {
	case ".hcl", ".nomad":
		return true
	}
	return false
}

// taskSpec parses run's and start's arguments into a spec. Flags may
// follow a task file's name; everything after a command is the command's.
func (c *cli) taskSpec(name string, args []string) (fsm.Spec, int, bool) {
	var in taskInputs
	fs := c.flags(name)
	in.register(fs)
	if code, ok := c.parse(fs, args); !ok {
		return fsm.Spec{}, code, false
	}
	rest := fs.Args()
	consumed := len(args) - len(rest)
	dashDash := consumed > 0 && args[consumed-1] == "--"
	if len(rest) == 0 {
		c.errorf("%s needs a task file or a command: tether %s FILE.hcl, or tether %s -- CMD [ARGS...]", name, name, name)
		return fsm.Spec{}, exitUsage, false
	}
	var spec fsm.Spec
	if !dashDash && isTaskFile(rest[0]) {
		file := rest[0]
		// Flags may follow the file name.
		if err := fs.Parse(rest[1:]); err != nil {
			return fsm.Spec{}, exitUsage, false
		}
		if fs.NArg() > 0 {
			c.errorf("unexpected arguments after %s: %s", file, strings.Join(fs.Args(), " "))
			return fsm.Spec{}, exitUsage, false
		}
		if err := c.setup(); err != nil {
			c.errorf("%v", err)
			return fsm.Spec{}, exitUsage, false
		}
		def, ok := c.readTaskFile(file, in.task)
		if !ok {
			return fsm.Spec{}, exitError, false
		}
		spec = def.Spec
		if in.drv != "" {
			spec.Driver = in.drv
		}
	} else {
		if in.task != "" {
			c.errorf("--task picks a task from a task file; with a command, use --name")
			return fsm.Spec{}, exitUsage, false
		}
		spec = fsm.Spec{Driver: "raw_exec", Command: rest[0], Args: rest[1:]}
		if in.drv != "" {
			spec.Driver = in.drv
		}
		spec.Name = filepath.Base(rest[0])
	}
	if in.name != "" {
		spec.Name = in.name
	}
	if spec.Driver != "exec" && spec.Driver != "raw_exec" {
		c.errorf("--driver %q: use exec or raw_exec", spec.Driver)
		return fsm.Spec{}, exitUsage, false
	}
	for _, kv := range in.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			c.errorf("--env %q: use NAME=VALUE", kv)
			return fsm.Spec{}, exitUsage, false
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	if in.dir != "" {
		spec.Dir = in.dir
	}
	if in.user != "" {
		spec.User = in.user
	}
	spec.CapAdd = append(spec.CapAdd, in.capAdd...)
	spec.CapDrop = append(spec.CapDrop, in.capDrop...)
	if in.killSignal != "" {
		sig, err := parseSignal(in.killSignal)
		if err != nil {
			c.errorf("--kill-signal: %v", err)
			return fsm.Spec{}, exitUsage, false
		}
		spec.KillSignal = int(sig)
	}
	if in.killTimeout < 0 {
		c.errorf("--kill-timeout must not be negative")
		return fsm.Spec{}, exitUsage, false
	}
	if in.killTimeout > 0 {
		spec.KillTimeout = in.killTimeout
	}
	return spec, 0, true
}

// readTaskFile parses a task file, printing its warnings and errors.
func (c *cli) readTaskFile(file, task string) (TaskDef, bool) {
	src, err := os.ReadFile(file)
	if err != nil {
		c.errorf("%v", err)
		return TaskDef{}, false
	}
	tf, diags := ParseTaskFile(file, src)
	for _, d := range diags {
		fmt.Fprintln(c.stderr, formatDiag(d))
	}
	if diags.HasErrors() {
		c.errorf("%s is not a valid task file; fix the errors above", file)
		return TaskDef{}, false
	}
	def, err := tf.Find(file, task)
	if err != nil {
		c.errorf("%v", err)
		return TaskDef{}, false
	}
	return def, true
}

func (c *cli) cmdRun(args []string) int   { return c.runTask("run", args, false) }
func (c *cli) cmdStart(args []string) int { return c.runTask("start", args, true) }

// runTask starts a task and, unless detach, streams its output and waits
// for it without holding the store, then records its exit.
func (c *cli) runTask(name string, args []string, detach bool) int {
	spec, code, ok := c.taskSpec(name, args)
	if !ok {
		return code
	}
	ctx := context.Background()
	// Ctrl-C and SIGTERM stop the task with its kill signal and timeout.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	id := newTaskID(spec.Name)
	s, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	task, startErr := s.d.StartTask(ctx, id, spec)
	if evs, err := s.d.TaskEvents(ctx, id); err == nil {
		fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, joinStates(lifecycle(evs)))
	}
	if startErr != nil && task.State == fsm.StateExited && task.Exit != nil {
		// The task ran and exited before it could be seen running: that
		// is a start that worked, for a quick task.
		if err := s.Close(); err != nil {
			c.errorf("warning: closing the store: %v", err)
		}
		if detach {
			fmt.Fprintf(c.stderr, "tether: %s: already %s\n", id, describeEnd(task))
			fmt.Fprintln(c.stdout, id)
			return exitOK
		}
		c.copyOutput(id)
		return exitCode(*task.Exit)
	}
	if startErr != nil {
		if err := s.Close(); err != nil {
			c.errorf("warning: closing the store: %v", err)
		}
		if !detach {
			// A task that launched and then failed may have said why.
			c.copyOutput(id)
		}
		return c.startFailed(id, task, startErr)
	}
	select {
	case sig := <-sigs:
		// Interrupted while starting: the task is running; stop it.
		code := c.stopInterrupted(ctx, s, id, sig)
		if err := s.Close(); err != nil {
			c.errorf("warning: closing the store: %v", err)
		}
		return code
	default:
	}
	if err := s.Close(); err != nil {
		return c.fail(err)
	}
	if detach {
		fmt.Fprintln(c.stdout, id)
		return exitOK
	}
	return c.await(ctx, task, sigs, true)
}

// copyOutput prints whatever the task wrote, if anything.
func (c *cli) copyOutput(id string) {
	startTail(c.log, c.taskDir(id), []tailStream{
		{name: stdoutFile, out: c.stdout},
		{name: stderrFile, out: c.stderr},
	}).stop()
}

// startFailed reports a task that did not start and picks the exit code:
// 127 not found, 126 not executable, else 125.
func (c *cli) startFailed(id string, task fsm.Task, err error) int {
	// Say the reason once, without the wrapping that names the task again.
	why := err.Error()
	var te *driver.TaskError
	switch {
	case task.Reason != "" && strings.Contains(why, task.Reason):
		why = task.Reason
	case errors.As(err, &te):
		why = te.Err.Error()
	}
	c.errorf("task %s failed to start (%s): %s", id, task.State, why)
	code := startExitCode(err, task.Reason)
	switch {
	case code == exitNotFound:
		fmt.Fprintln(c.stderr, "  check the command's name and PATH, or give its absolute path")
	case code == exitCannotRun:
		fmt.Fprintln(c.stderr, "  check that the command is an executable file (chmod +x)")
	case strings.Contains(err.Error(), "capabilit") || strings.Contains(task.Reason, "capabilit"):
		fmt.Fprintln(c.stderr, "  remove the capability from cap_add, or use driver raw_exec")
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

// startExitCode follows docker run: 127 when the command is not found,
// 126 when it cannot be executed, 125 for any other failure to start. The
// driver records the executor's error as the task's reason, so the reason
// is matched as well as the error chain.
func startExitCode(err error, reason string) int {
	text := reason
	if err != nil {
		text = err.Error() + "\n" + reason
	}
	switch {
	case errors.Is(err, errCommandNotFound) || strings.Contains(text, errCommandNotFound.Error()):
		return exitNotFound
	case errors.Is(err, errNotExecutable) || strings.Contains(text, errNotExecutable.Error()):
		return exitCannotRun
	}
	return exitStartFail
}

// stopInterrupted stops a task after the CLI got sig, on an open session,
// and returns 128+sig.
func (c *cli) stopInterrupted(ctx context.Context, s *session, id string, sig os.Signal) int {
	fmt.Fprintf(c.stderr, "tether: %s: got %v, stopping the task\n", id, sig)
	final, err := s.d.StopTask(ctx, id, 0, 0)
	if err != nil {
		c.errorf("stopping task %s: %v", id, err)
		fmt.Fprintf(c.stderr, "  run 'tether stop %s' to retry\n", id)
	} else {
		fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, describeEnd(final))
	}
	return 128 + int(sig.(syscall.Signal))
}

// await waits for a launched task without holding the store, streaming
// its output when stream is set, then reopens the store so that Recover
// records the exit and reaps the executor. It returns the task's exit
// code.
func (c *cli) await(ctx context.Context, task fsm.Task, sigs <-chan os.Signal, stream bool) int {
	id := task.ID
	world, err := c.world()
	if err != nil {
		return c.fail(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		exit fsm.ExitStatus
		err  error
	}
	done := make(chan result, 1)
	go func() {
		x, err := driver.AwaitExit(wctx, world, task)
		done <- result{x, err}
	}()
	var tail *tailer
	if stream {
		tail = startTail(c.log, c.taskDir(id), []tailStream{
			{name: stdoutFile, out: c.stdout},
			{name: stderrFile, out: c.stderr},
		})
	}
	var (
		res         result
		interrupted os.Signal
	)
	select {
	case res = <-done:
	case interrupted = <-sigs:
		cancel()
		res = <-done
	}
	if interrupted != nil {
		s, err := c.open(ctx)
		if err != nil {
			c.errorf("cannot stop task %s: %v", id, err)
			fmt.Fprintf(c.stderr, "  the task is still running; run 'tether stop %s'\n", id)
			tail.stop()
			return 128 + int(interrupted.(syscall.Signal))
		}
		code := c.stopInterrupted(ctx, s, id, interrupted)
		if err := s.Close(); err != nil {
			c.errorf("warning: closing the store: %v", err)
		}
		tail.stop()
		return code
	}
	tail.stop()

	// Record the exit: Recover collects it and reaps the executor.
	final := task
	s, err := c.open(ctx)
	if err == nil {
		var info driver.TaskInfo
		info, err = s.d.InspectTask(ctx, id)
		final = info.Task
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.errorf("warning: recording the end of task %s: %v; the next tether command records it", id, err)
	}
	switch {
	case final.State.Terminal() && final.Exit != nil:
		c.log.Debug("task ended", "task_id", id, "state", final.State.String())
		if final.State != fsm.StateExited {
			fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, describeEnd(final))
		}
		return exitCode(*final.Exit)
	case res.err == nil:
		if final.State.Terminal() {
			fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, describeEnd(final))
		}
		return exitCode(res.exit)
	case final.State.Terminal():
		fmt.Fprintf(c.stderr, "tether: %s: %s\n", id, describeEnd(final))
		return exitError
	default:
		c.errorf("lost track of task %s: %v", id, res.err)
		fmt.Fprintf(c.stderr, "  'tether recover' reconciles it; 'tether events %s' shows what happened\n", id)
		return exitError
	}
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
func describeEnd(t fsm.Task) string {
	s := t.State.String()
	if t.Exit != nil {
		s += " (" + describeExit(*t.Exit) + ")"
	}
	if t.Reason != "" && t.State != fsm.StateExited && t.State != fsm.StateStopped {
		s += ": " + t.Reason
	}
	return s
}

func describeExit(x fsm.ExitStatus) string {
	if x.Signal > 0 {
		return "killed by " + signalName(x.Signal)
	}
	return fmt.Sprintf("exit code %d", x.Code)
}

func (c *cli) cmdWait(args []string) int {
	fs := c.flags("wait")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("wait takes one task id or name")
		return exitUsage
	}
	ctx := context.Background()
	info, err := c.lookup(ctx, fs.Arg(0))
	if err != nil {
		return c.fail(err)
	}
	if info.State.Terminal() {
		return c.terminalCode(info.Task)
	}
	if info.State != fsm.StateRunning && info.State != fsm.StateLaunched {
		c.errorf("task %s is %s and cannot be waited for; 'tether recover' reconciles it", info.ID, info.State)
		return exitError
	}
	return c.await(ctx, info.Task, nil, false)
}

// terminalCode is wait's exit code for a task that has already ended.
func (c *cli) terminalCode(t fsm.Task) int {
	if t.State != fsm.StateExited {
		fmt.Fprintf(c.stderr, "tether: %s: %s\n", t.ID, describeEnd(t))
	}
	if t.Exit != nil {
		return exitCode(*t.Exit)
	}
	if t.State == fsm.StateFailed {
		return startExitCode(nil, t.Reason)
	}
	return exitError
}
