package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/taskfile"
)

// A task or job file runs as Nomad runs its groups on one node, through
// the one path from a file to tasks (package job), run by the process
// that serves the state directory (agent.Service.PlanJob: the agent's own
// allow lists and port allocator when an agent serves, this process's
// daemonless). Every group of the file tether can run (or the one --group
// or --task names) runs count copies; each copy is an allocation with an
// id of its own, its ports, its shared alloc directory and its tasks'
// directories (statedir's allocs/ALLOC), and every task of every copy is
// recorded (CreateGroup) before any is spawned. Then each copy's tasks
// run in their turn (RunGroup: prestart, main, poststart, poststop). run
// drives the groups itself and streams their output; start has them
// started and driven by a driver that outlives it (StartGroup: the agent,
// or daemonless a detached tether drive-group), which also starts the
// copies that follow one that failed, by its reschedule block; and
// returns. A stop of any task of a group stops the group.

// jobInputs are run's and start's flags for a job file.
type jobInputs struct {
	vars, varFiles, meta listFlag
	group                string
}

func (j *jobInputs) register(fs *flagSet) {
	fs.Var(&j.vars, "var", "`NAME=VALUE` for a job file's variable (repeatable; as nomad job run -var)")
	fs.Var(&j.varFiles, "var-file", "`file` of variable values, HCL (repeatable, a later one wins; as nomad job run -var-file)")
	fs.Var(&j.meta, "meta", "`KEY=VALUE` dispatch meta of a parameterized job (repeatable; as nomad job dispatch -meta)")
	fs.StringVar(&j.group, "group", "", "run this `group` of a job file (default: every group tether can run)")
}

// jobRun is what run or start of a file starts.
type jobRun struct {
	file   string
	allocs []*allocRun
	// batch: every job of it runs to completion (start's min-uptime is 0).
	batch bool
}

// allocRun is one copy of a group: an allocation.
type allocRun struct {
	id, group string
	index     int
	members   []groupMember // in start order
}

// groupMember is a task of an allocation.
type groupMember struct {
	id   string
	spec fsm.Spec
}

func (a *allocRun) ids() []string {
	var ids []string
	for _, m := range a.members {
		ids = append(ids, m.id)
	}
	return ids
}

func (r *jobRun) tasks() []groupMember {
	var out []groupMember
	for _, a := range r.allocs {
		out = append(out, a.members...)
	}
	return out
}

// environ is the process's environment as a map (for NOMAD_VAR_ inputs).
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// readJobInputs reads what a file is read with from the command line
// (-var, -var-file: read here, -meta, --task, --group) and the
// environment (NOMAD_VAR_).
func (c *cli) readJobInputs(in jobInputs, task string) (job.Inputs, bool) {
	out := job.Inputs{Env: job.VarEnv(environ()), Task: task, Group: in.group}
	for _, kv := range in.vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			c.errorf("--var %q: use NAME=VALUE", kv)
			return out, false
		}
		if out.Vars == nil {
			out.Vars = map[string]string{}
		}
		out.Vars[k] = v
	}
	for _, p := range in.varFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			c.errorf("--var-file: %v", err)
			return out, false
		}
		out.VarFiles = append(out.VarFiles, job.VarFile{Name: p, Text: b})
	}
	for _, kv := range in.meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			c.errorf("--meta %q: use KEY=VALUE", kv)
			return out, false
		}
		if out.Meta == nil {
			out.Meta = map[string]string{}
		}
		out.Meta[k] = v
	}
	return out, true
}

// overrides are the command line's changes to a file's tasks.
func (in *taskInputs) overrides() (job.Overrides, error) {
	ov := job.Overrides{Name: in.name, Dir: in.dir, User: in.user, Driver: in.drv, Env: in.env, CapAdd: in.capAdd, CapDrop: in.capDrop,
		KillTimeout: in.killTimeout}
	if in.killSignal != "" {
		sig, err := parseSignal(in.killSignal)
		if err != nil {
			return ov, fmt.Errorf("--kill-signal: %w", err)
		}
		ov.KillSignal = int(sig)
	}
	return ov, nil
}

// sayNotes prints what the path says of a file beside its tasks: the
// parser's warnings and notices, and the groups it does not run.
func (c *cli) sayNotes(file string, notes, skipped []string) {
	for _, n := range notes {
		fmt.Fprintln(c.stderr, n)
	}
	for _, r := range skipped {
		fmt.Fprintf(c.stderr, "%s: does not run %s\n", file, clikit.UserText(r))
	}
}

// jobFailed says why a file was refused and picks the exit code: a file
// that does not parse, a selection that names nothing or nothing
// runnable (1), a bad input (2), anything else the host or its policy
// refused (125: nothing was started).
func (c *cli) jobFailed(file string, err error, nothing string) int {
	var pe *job.ParseError
	switch {
	case errors.As(err, &pe):
		for _, l := range pe.Lines {
			fmt.Fprintln(c.stderr, l)
		}
		c.errorf("%s is not a valid task file; fix the errors above", file)
		return exitError
	case errors.Is(err, job.ErrBadInput):
		c.errorf("%v", trimJob(err))
		return exitUsage
	case errors.Is(err, taskfile.ErrNoTask), errors.Is(err, taskfile.ErrNotRunnable), errors.Is(err, job.ErrNothingToRun):
		c.errorf("%v", trimJob(err))
		return exitError
	}
	c.errorf("%v; %s", err, nothing)
	if errors.Is(err, job.ErrNotAllowed) {
		fmt.Fprintln(c.stderr, "  the process that runs the task applies its own allow lists: through an agent, the agent's apply")
	} else if h := hint(err); h != "" {
		fmt.Fprintf(c.stderr, "  %s\n", h)
	}
	return exitStartFail
}

// tooLargeForAgent refuses a file larger than an agent reads, saying what
// makes it so where the file itself says (a task's spec past its bounds:
// a 10 MB argument) by reading it here, the node's checks aside, as
// daemonless the job path would refuse it; else its size.
func (c *cli) tooLargeForAgent(file string, text []byte, inputs job.Inputs) int {
	j, err := job.Parse(job.Source{File: file, Text: text}, inputs)
	if err != nil {
		return c.jobFailed(file, err, "nothing was started")
	}
	for _, g := range j.Groups {
		for _, t := range g.Tasks {
			spec := t.Spec
			if err := spec.Validate(); err != nil {
				c.errorf("%v; nothing was started", err)
				return exitStartFail
			}
		}
	}
	c.errorf("%s is %d bytes, more than an agent reads (at most %d); nothing was started", file, len(text), agent.MaxFileText)
	return exitStartFail
}

// trimJob drops the package prefix a message of package job starts with.
func trimJob(err error) string { return job.Describe(err) }

// planJob reads file through the job path of the process that serves the
// state directory and makes its allocations ready to record: each task
// instantiated (its run-time references resolved, Nomad's variables, its
// directories and ports) with the command line's overrides. once: a run's
// tasks run once (no reschedule).
func (c *cli) planJob(ctx context.Context, s *session, file string, in taskInputs, once bool) (*jobRun, int, bool) {
	text, err := os.ReadFile(file)
	if err != nil {
		c.errorf("%v", err)
		return nil, exitError, false
	}
	inputs, ok := c.readJobInputs(in.jobInputs, in.task)
	if !ok {
		return nil, exitError, false
	}
	ov, err := in.overrides()
	if err != nil {
		c.errorf("%v", err)
		return nil, exitUsage, false
	}
	if s.agent != nil && len(text) > agent.MaxFileText {
		return nil, c.tooLargeForAgent(file, text, inputs), false
	}
	plan, err := s.svc.PlanJob(ctx, agent.JobRequest{Source: job.Source{File: file, Text: text}, Inputs: inputs, Overrides: ov, Once: once})
	c.sayNotes(file, plan.Notes, plan.Skipped)
	if err != nil {
		return nil, c.jobFailed(file, err, "nothing was started"), false
	}
	run := &jobRun{file: file, batch: plan.Run.Batch}
	for _, a := range plan.Run.Allocs {
		ar := &allocRun{id: a.ID, group: a.Group, index: a.Index}
		for _, t := range a.Tasks {
			ar.members = append(ar.members, groupMember{id: t.ID, spec: t.Spec})
		}
		run.allocs = append(run.allocs, ar)
	}
	return run, 0, true
}

// recordJob records every task of run before any is spawned.
func (c *cli) recordJob(ctx context.Context, s *session, run *jobRun, opts startOptions) (int, bool) {
	var tasks []driver.GroupTask
	for _, m := range run.tasks() {
		tasks = append(tasks, driver.GroupTask{ID: m.id, Spec: m.spec})
	}
	_, err := s.svc.CreateGroup(ctx, tasks, driver.StartOptions{Replace: opts.replace, Stopping: func(old fsm.Task) {
		if opts.verbose {
			fmt.Fprintf(c.stderr, "tether: stopping %s (%s), which this run replaces\n", old.ID, old.State)
		}
	}})
	switch {
	case errors.Is(err, driver.ErrNameTaken):
		return c.nameTaken(err, false), false
	case err != nil:
		c.errorf("%v; nothing was started", err)
		if errors.Is(err, driver.ErrInvalidSpec) {
			fmt.Fprintln(c.stderr, "  fix the task's spec and run it again")
		} else if h := hint(err); h != "" {
			fmt.Fprintf(c.stderr, "  %s\n", h)
		}
		return exitStartFail, false
	}
	return 0, true
}

// sayStep tells a group's step on stderr: with -v every step, else the
// group's end when a task of it failed.
func (c *cli) sayStep(a *allocRun, p driver.GroupProgress, verbose bool, told *string) {
	step := p.Step
	label := a.group
	if a.index > 0 || strings.Contains(a.members[0].spec.Name, "[") {
		label = fmt.Sprintf("%s[%d]", a.group, a.index)
	}
	if verbose && !step.Idle() {
		fmt.Fprintf(c.stderr, "tether: group %s: %s\n", label, step)
	}
	if step.Ending != "" && step.Ending != *told {
		*told = step.Ending
		if verbose {
			fmt.Fprintf(c.stderr, "tether: group %s ends: %s\n", label, clikit.UserText(step.Ending))
		}
	}
}

// runJob runs (detach false) or starts a file's groups: see the top of
// this file.
func (c *cli) runJob(ctx context.Context, s *session, run *jobRun, opts startOptions, detach bool, sigs <-chan os.Signal) int {
	if code, ok := c.recordJob(ctx, s, run, opts); !ok {
		for _, a := range run.allocs {
			c.releasePorts(a.id)
		}
		return code
	}
	if detach {
		return c.startJob(ctx, s, run, opts, sigs)
	}
	members := run.tasks()
	var tails []*tailer
	var prefixed []*prefixWriter
	for _, m := range members {
		out, errw := c.stdout, c.stderr
		if len(members) > 1 {
			po, pe := newPrefixWriter(c.stdout, m.spec.Name), newPrefixWriter(c.stderr, m.spec.Name)
			prefixed = append(prefixed, po, pe)
			out, errw = po, pe
		}
		tails = append(tails, startTail(c.log, c.taskDir(m.id), []tailStream{{name: stdoutFile, out: out}, {name: stderrFile, out: errw}}))
	}
	var interrupted os.Signal
	stopped := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			interrupted = sig
			fmt.Fprintf(c.stderr, "tether: got %v, stopping the job's tasks\n", sig)
		case <-stopped:
			return
		}
		// A second request escalates only once the first one's stop has
		// begun (see stopOnSignals): the same signal delivered to this
		// process and to its group (timeout, a terminal's Ctrl-C) is one.
		var ids []string
		for _, a := range run.allocs {
			ids = append(ids, a.ids()...)
		}
		gate := newGroupSignalGate(ctx, s, ids)
		defer gate.close()
		for _, a := range run.allocs {
			go func() { _, _ = s.svc.StopGroup(ctx, a.ids(), 0, 0, nil) }()
		}
		for {
			select {
			case sig := <-sigs:
				if !gate.began() {
					c.log.Debug("the same request delivered again before the stop began: counted once", "signal", sig)
					continue
				}
				fmt.Fprintf(c.stderr, "tether: got %v again, killing the job's tasks now\n", sig)
				go c.killStarted(ctx, s, ids)
			case <-stopped:
			}
			return
		}
	}()
	finals := make([][]fsm.Task, len(run.allocs))
	errs := make([]error, len(run.allocs))
	var wg sync.WaitGroup
	for i, a := range run.allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			told := ""
			finals[i], errs[i] = s.svc.RunGroup(ctx, a.ids(), true, func(p driver.GroupProgress) { c.sayStep(a, p, opts.verbose, &told) })
			c.releasePorts(a.id)
		}()
	}
	wg.Wait()
	close(stopped)
	for _, t := range tails {
		t.stop()
	}
	for _, p := range prefixed {
		_ = p.Flush()
	}
	for _, err := range errs {
		if err != nil {
			c.errorf("lost track of the job's tasks: %v", err)
			fmt.Fprintln(c.stderr, "  'tether recover' finishes what is left; 'tether status' shows the tasks")
			return exitError
		}
	}
	if len(members) == 1 {
		return c.endCode(finals[0][0], nil, interrupted)
	}
	return c.jobEndCode(finals, interrupted)
}

// jobEndCode is run's exit code for a job's tasks: 128+sig when it was
// interrupted, else the first failed task's (by its start order), else 0.
// Every task that did not end as asked is told.
func (c *cli) jobEndCode(finals [][]fsm.Task, interrupted os.Signal) int {
	code := exitOK
	for _, tasks := range finals {
		for _, t := range tasks {
			switch {
			case t.State == fsm.StateStopped:
				// stopped as its group ended (or never run): the group's
				// end, which a failure below names, says why
			case t.State == fsm.StateFailed:
				fmt.Fprintf(c.stderr, "tether: %s: failed to start: %s\n", t.ID, clikit.UserText(clikit.Printable(t.Reason)))
			default:
				if s := endSummary(t, false); s != "" {
					fmt.Fprintf(c.stderr, "tether: %s: %s\n", t.ID, clikit.UserText(s))
				}
			}
			if code != exitOK || !failedEnd(t) {
				continue
			}
			switch {
			case t.Exit != nil && t.Exit.OOM:
				code = 128 + int(syscall.SIGKILL)
			case t.Exit != nil:
				code = exitCode(*t.Exit)
			case t.State == fsm.StateFailed:
				code = startExitCode(nil, t.Cause)
			default:
				code = exitError
			}
		}
	}
	if interrupted != nil {
		return 128 + int(interrupted.(syscall.Signal))
	}
	return code
}

// startJob starts a file's groups: each is started and driven by a driver
// that outlives this process (StartGroup: the agent that serves the state
// directory, or a detached tether drive-group), this process waiting until
// its main tasks have started (and what comes with them: poststart); then
// waits --min-uptime for the main tasks to stay up, and prints every
// task's id, each group's main tasks first.
func (c *cli) startJob(ctx context.Context, s *session, run *jobRun, opts startOptions, sigs <-chan os.Signal) int {
	outs := make([]groupOutcome, len(run.allocs))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, a := range run.allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			told := ""
			tasks, err := s.svc.StartGroup(sctx, a.ids(), func(p driver.GroupProgress) { c.sayStep(a, p, opts.verbose, &told) })
			outs[i] = groupOutcome{tasks, err}
		}()
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case sig := <-sigs:
		cancel()
		<-waited
		fmt.Fprintf(c.stderr, "tether: got %v while starting, stopping the job's tasks\n", sig)
		for _, a := range run.allocs {
			_, _ = s.svc.StopGroup(ctx, a.ids(), 0, 0, nil)
		}
		return 128 + int(sig.(syscall.Signal))
	}
	for i, o := range outs {
		if o.err != nil {
			c.errorf("group %s: %v", run.allocs[i].group, o.err)
			for _, a := range run.allocs {
				_, _ = s.svc.StopGroup(ctx, a.ids(), 0, 0, nil)
			}
			return exitStartFail
		}
	}
	var started []fsm.Task
	for _, o := range outs {
		for _, t := range o.tasks {
			if t.State == fsm.StateFailed && t.Nonce != "" {
				// A task that failed to start ends its group (its driver
				// stops the rest): say why, as a start of one task does.
				return c.startFailed(t.ID, t, fmt.Errorf("%w: %s", driver.ErrStartFailed, t.Reason))
			}
		}
		started = append(started, o.tasks...)
	}
	opts.batch = run.batch
	if min := c.minUptime(opts); min > 0 {
		if code, ok := c.mainsStayUp(ctx, s, started, min, opts.readyTimeout, sigs); !ok {
			return code
		}
	}
	for _, t := range started {
		if !isMain(t) || !notifyTask(t) {
			continue
		}
		if info, err := s.svc.InspectTask(ctx, t.ID); err == nil && info.State == fsm.StateRunning {
			if code, ok := c.readyOrFail(ctx, s, info.Task, opts.readyTimeout, sigs); !ok {
				return code
			}
		}
	}
	for _, a := range run.allocs {
		for _, m := range a.members {
			if m.spec.Alloc.Hook == fsm.HookMain {
				fmt.Fprintln(c.stdout, m.id)
			}
		}
		for _, m := range a.members {
			if m.spec.Alloc.Hook != fsm.HookMain {
				fmt.Fprintln(c.stdout, m.id)
			}
		}
	}
	return exitOK
}

// groupOutcome is how the start of one group went: its tasks' states
// when its driver took it over, or why it did not start.
type groupOutcome struct {
	tasks []fsm.Task
	err   error
}

func isMain(t fsm.Task) bool {
	return t.Spec != nil && t.Spec.Alloc != nil && t.Spec.Alloc.Hook == fsm.HookMain
}

// mainsStayUp waits for each main task to have a run that stayed up min,
// as start of one task does (stayUp): a main task that ends sooner, or
// whose runs its restart policy keeps restarting within min until it
// gives up (or until --ready-timeout), fails the start with its runs'
// ends and last output, its group ending as its rules say.
func (c *cli) mainsStayUp(ctx context.Context, s *session, tasks []fsm.Task, min, readyTimeout time.Duration, sigs <-chan os.Signal) (int, bool) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(readyTimeout + min)
	outs := make(chan upOutcome, len(tasks))
	n := 0
	for _, t := range tasks {
		if !isMain(t) {
			continue
		}
		n++
		go func() { outs <- c.stayUp(wctx, s, t, min, deadline, nil) }()
	}
	for ; n > 0; n-- {
		select {
		case up := <-outs:
			switch {
			case up.up:
				continue
			case up.err != nil:
				cancel()
				c.errorf("task %s started, but watching it failed: %v", up.task.ID, up.err)
				fmt.Fprintf(c.stderr, "  'tether status %s' shows how it is\n", up.task.ID)
				return exitError, false
			}
			cancel()
			return c.neverUp(ctx, s, up.task, min, readyTimeout, up), false
		case sig := <-sigs:
			cancel()
			return 128 + int(sig.(syscall.Signal)), false
		}
	}
	return 0, true
}

// releasePorts lets go of an allocation's ports (its group is over).
func (c *cli) releasePorts(alloc string) {
	a := &taskfile.Allocator{Dir: c.stateDir, IP: "0.0.0.0"}
	if err := a.Release(alloc); err != nil {
		c.log.Warn("could not release the group's ports", "alloc", alloc, "err", err)
	}
}

// groupDriverArg is the hidden command of the detached tether that drives
// a started group to its end (see startJob and cmdRecover).
const groupDriverArg = "drive-group"

// spawnGroupDriver starts a detached tether that drives the group alloc
// (of task id) to its end and past it (what its reschedule block starts
// after a failure): in a session of its own, its output in the
// allocation's group.log. It waits for the group's lock, so it takes over
// once whoever holds it lets go (or dies). It is agent.Local's HandOff
// daemonless.
func (c *cli) spawnGroupDriver(alloc, id string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find tether's own binary to drive the group: %w", err)
	}
	args := []string{self, groupDriverArg, "--state-dir", c.stateDir, "--log-level", "info", "--lock-timeout", c.lockTimeout.String()}
	if len(c.allowedCaps) > 0 {
		args = append(args, "--allow-caps", strings.Join(c.allowedCaps, ","))
	}
	if len(c.chroot) > 0 {
		args = append(args, "--chroot-env", strings.Join(c.chroot, ","))
	}
	if len(c.allowSeccomp) > 0 {
		args = append(args, "--allow-seccomp", strings.Join(c.allowSeccomp, ","))
	}
	if len(c.allowMissing) > 0 {
		args = append(args, "--allow-missing", strings.Join(c.allowMissing, ","))
	}
	if len(c.allowRead) > 0 {
		args = append(args, "--allow-read", strings.Join(c.allowRead, ","))
	}
	if len(c.allowDrivers) > 0 {
		args = append(args, "--allow-drivers", strings.Join(c.allowDrivers, ","))
	}
	if len(c.allowHostNS) > 0 {
		args = append(args, "--allow-host-namespaces", strings.Join(c.allowHostNS, ","))
	}
	args = append(args, id)
	dir := c.layout().Alloc(alloc)
	if err := os.MkdirAll(dir.Dir(), 0o711); err != nil {
		return err
	}
	logf, err := os.OpenFile(dir.Log(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	p, err := os.StartProcess(self, args, &os.ProcAttr{Files: []*os.File{null, null, logf}, Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		return fmt.Errorf("start the group's driver: %w", err)
	}
	c.log.Info("group handed to a driver of its own", "alloc", alloc, "pid", p.Pid)
	return p.Release()
}

// cmdDriveGroup is the detached driver of a started group: it drives the
// group of its task argument to its end and past it (agent.Local's
// DriveGroup: the copies its restart and reschedule policies start after
// one that ended), lets go of its ports and exits. SIGTERM ends it without
// stopping anything (tether recover resumes the group). Should an agent
// serve the state directory by then, it hands the group to the agent.
func (c *cli) cmdDriveGroup(args []string) int {
	fs := c.flags(groupDriverArg)
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("%s takes one task id", groupDriverArg)
		return exitUsage
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	signal.Ignore(syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			cancel()
		}
	}()
	s, info, code, ok := c.openTask(ctx, fs.Arg(0))
	if !ok {
		return code
	}
	defer c.closeSession(s)
	a := info.Spec.Alloc
	if a == nil {
		c.errorf("task %s is of no group", info.ID)
		return exitUsage
	}
	if s.local == nil {
		// An agent serves the state directory: it drives every group
		// nobody drives, this one among them once this process is gone.
		if _, err := s.svc.AdoptGroups(ctx); err != nil {
			c.log.Error("handing the group to the agent", "alloc", a.ID, "err", err)
			return exitError
		}
		return exitOK
	}
	last := ""
	res, err := s.local.DriveGroup(ctx, a.Tasks, agent.DriveOptions{Wait: true, Progress: func(p driver.GroupProgress) {
		if s := p.Step.String(); s != last {
			c.log.Info("group step", "alloc", a.ID, "step", s)
			last = s
		}
	}})
	if err != nil {
		c.log.Error("the group's driver stops; tether recover resumes it", "alloc", a.ID, "err", err)
		return exitError
	}
	c.log.Info("the group is over", "alloc", a.ID, "end", res.End.Kind.String(), "reason", res.Reason)
	return exitOK
}

// resumeGroups hands every group nobody drives (its driver died, or its
// last copy ended with a copy owed and nobody to start it) to a driver
// that outlives this process: the agent, or a detached tether drive-group
// each (tether recover), and says so.
func (c *cli) resumeGroups(ctx context.Context, s *session) {
	allocs, err := s.svc.AdoptGroups(ctx)
	if err != nil {
		c.errorf("warning: handing the groups nobody drives to a driver: %v", err)
	}
	for _, alloc := range allocs {
		fmt.Fprintf(c.stdout, "group %s: nobody drove it; handed to a new driver\n", alloc)
	}
}

// stopGroup stops the group of a task (tether stop of any task of a group
// stops the group, as Nomad stops an allocation): its running tasks with
// sig and grace (0: each its own), the leader first and the sidecars
// last, then its poststop tasks run. It prints each task's end, in the
// group's order. A second Ctrl-C kills what is left at once.
func (c *cli) stopGroup(ctx context.Context, s *session, info driver.TaskInfo, sig syscall.Signal, grace time.Duration, sigs <-chan os.Signal) int {
	ids := info.Spec.Alloc.Tasks
	driverGone := c.watchGroupDriver(s, info.Spec.Alloc.ID)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			fmt.Fprintf(c.stderr, "tether: interrupted, killing the group's tasks now\n")
			c.killStarted(ctx, s, ids)
		case <-done:
		}
	}()
	final, err := s.svc.StopGroup(ctx, ids, sig, grace, nil)
	if err != nil {
		return c.fail(err)
	}
	driverGone()
	c.releasePorts(info.Spec.Alloc.ID)
	for _, t := range final {
		fmt.Fprintf(c.stdout, "%s %s\n", t.ID, describeEnd(t))
	}
	return exitOK
}

// killStarted stops each task of ids that has started and not ended
// again, with SIGKILL at once: a stop of a task already stopping escalates
// it (a second stop of its group would wait for the group's lock, which
// the first one holds). A task that waits for its turn is left to its
// group's stop.
func (c *cli) killStarted(ctx context.Context, s *session, ids []string) {
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if t, err := s.svc.InspectTask(ctx, id); err == nil && t.State != fsm.StateCreated && !t.State.Terminal() {
				_, _ = s.svc.StopTask(ctx, id, syscall.SIGKILL, time.Nanosecond)
			}
		})
	}
	wg.Wait()
}

// groupOver reports whether every task of info's group has ended.
func (c *cli) groupOver(ctx context.Context, s *session, info driver.TaskInfo) bool {
	for _, id := range info.Spec.Alloc.Tasks {
		t, err := s.svc.InspectTask(ctx, id)
		if err == nil && !t.State.Terminal() {
			return false
		}
	}
	return true
}

// watchGroupDriver notes the detached driver of group alloc, if one holds
// its lock (the lock file names its pid; its command line says it is
// tether drive-group of this state directory), and returns a function
// that waits (bounded) until that process has exited: once the group is
// over, its driver lets go of the lock and exits, and a stop returns when
// nothing of the group is left running. Nothing is ever signalled.
func (c *cli) watchGroupDriver(s *session, alloc string) func() {
	driven, pid, err := s.svc.GroupDriven(alloc)
	if err != nil || !driven || pid <= 0 {
		return func() {}
	}
	p, err := proc.Open(pid)
	if err != nil {
		return func() {}
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("\x00"+groupDriverArg+"\x00")) || !bytes.Contains(cmdline, []byte("\x00"+c.stateDir+"\x00")) {
		p.Close()
		return func() {}
	}
	return func() {
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Wait(ctx); err != nil {
			c.log.Warn("the group's driver has not exited yet", "pid", pid, "err", err)
		}
	}
}
