package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tether-fsm/tether/internal/clikit"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/taskfile"
)

// A task or job file runs as Nomad runs its groups on one node. Every
// group of the file tether can run (or the one --group or --task names)
// runs count copies; each copy is an allocation with an id of its own, its
// ports, its shared alloc directory and its tasks' directories
// (statedir's allocs/ALLOC), and every task of every copy is recorded
// (driver.CreateGroup) before any is spawned. Then each copy's tasks run in
// their turn (driver.RunGroup: prestart, main, poststart, poststop). run
// drives the groups itself and streams their output; start drives them
// until their main tasks run, then hands each group over to a detached
// tether (drive-group) that drives it to its end, and returns. A stop of
// any task of a group stops the group.

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

// newAllocID makes an allocation id as Nomad's look: a random UUID.
func newAllocID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
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

// parseJobFile reads a task or job file with run's inputs, printing its
// diagnostics and notices.
func (c *cli) parseJobFile(file string, in jobInputs) (*taskfile.File, bool) {
	src, err := os.ReadFile(file)
	if err != nil {
		c.errorf("%v", err)
		return nil, false
	}
	opts := taskfile.Options{Env: environ()}
	for _, kv := range in.vars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			c.errorf("--var %q: use NAME=VALUE", kv)
			return nil, false
		}
		if opts.Vars == nil {
			opts.Vars = map[string]string{}
		}
		opts.Vars[k] = v
	}
	for _, p := range in.varFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			c.errorf("--var-file: %v", err)
			return nil, false
		}
		opts.VarFiles = append(opts.VarFiles, taskfile.VarFile{Name: p, Src: b})
	}
	for _, kv := range in.meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			c.errorf("--meta %q: use KEY=VALUE", kv)
			return nil, false
		}
		if opts.DispatchMeta == nil {
			opts.DispatchMeta = map[string]string{}
		}
		opts.DispatchMeta[k] = v
	}
	tf, diags := taskfile.Parse(file, src, opts)
	for _, d := range diags {
		fmt.Fprintln(c.stderr, taskfile.FormatDiag(d))
	}
	if diags.HasErrors() {
		c.errorf("%s is not a valid task file; fix the errors above", file)
		return nil, false
	}
	for _, n := range tf.Notices {
		fmt.Fprintf(c.stderr, "%s: %s\n", file, n)
	}
	return tf, true
}

// planGroups picks the groups to run: the one task --task names (a group
// of its own), the group --group names, or every group tether can run
// (the others named, one line each).
func (c *cli) planGroups(tf *taskfile.File, task, group string) ([]*taskfile.GroupPlan, bool) {
	switch {
	case task != "" && group != "":
		c.errorf("--task and --group both pick what to run: give one")
		return nil, false
	case task != "":
		t, err := tf.Find(task)
		if err != nil {
			c.errorf("%v", err)
			return nil, false
		}
		return []*taskfile.GroupPlan{{Group: t.Group, Main: []*taskfile.Task{t}}}, true
	case group != "":
		gp, err := tf.PlanGroup(group)
		if err != nil {
			c.errorf("%v", err)
			return nil, false
		}
		return []*taskfile.GroupPlan{gp}, true
	}
	var plans []*taskfile.GroupPlan
	var refused []string
	for _, g := range tf.Groups {
		gp, err := tf.PlanGroup(g.Name)
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		plans = append(plans, gp)
	}
	if len(plans) == 0 {
		c.errorf("%s holds no group tether can run: %s", tf.Filename, strings.Join(refused, "; "))
		return nil, false
	}
	if len(plans) > 1 || len(refused) > 0 {
		for _, r := range refused {
			fmt.Fprintf(c.stderr, "%s: does not run %s\n", tf.Filename, clikit.UserText(r))
		}
	}
	return plans, true
}

// planJob reads file and makes its allocations ready to record: each
// task instantiated (its run-time references resolved, Nomad's
// variables, its directories and ports) with the command line's
// overrides.
func (c *cli) planJob(ctx context.Context, s *session, file string, in taskInputs) (*jobRun, int, bool) {
	tf, ok := c.parseJobFile(file, in.jobInputs)
	if !ok {
		return nil, exitError, false
	}
	plans, ok := c.planGroups(tf, in.task, in.group)
	if !ok {
		return nil, exitError, false
	}
	host := taskfile.DetectHost(taskfile.HostConfig{})
	for _, gp := range plans {
		if err := gp.Check(host); err != nil {
			c.errorf("%v; nothing was started", err)
			return nil, exitStartFail, false
		}
	}
	run := &jobRun{file: file, batch: true}
	total := 0
	for _, gp := range plans {
		total += max(gp.Group.Count, 1) * len(gp.Tasks())
	}
	single := total == 1 // the command line's --name and --dir apply to it
	real := &executor.Real{StateDir: c.stateDir}
	ports := c.portAllocator(ctx, s, host.IP)
	layout := c.layout()
	fail := func(err error) (*jobRun, int, bool) {
		c.errorf("%v; nothing was started", err)
		for _, a := range run.allocs {
			_ = ports.Release(a.id)
		}
		return nil, exitStartFail, false
	}
	for _, gp := range plans {
		if j := gp.Group.Job; j == nil || !j.Type.Batch() {
			run.batch = false
		}
		alone := in.task != ""
		tasks := gp.Tasks()
		for i := range max(gp.Group.Count, 1) {
			a := &allocRun{id: newAllocID(), group: gp.Group.Name, index: i}
			run.allocs = append(run.allocs, a)
			held, err := ports.Allocate(ctx, a.id, gp.PortRequests())
			if err != nil {
				return fail(err)
			}
			dirs := layout.Alloc(a.id)
			var ids []string
			for _, t := range tasks {
				ids = append(ids, newTaskID(tf.InstanceName(t, i)))
			}
			for j, t := range tasks {
				if in.drv != "" {
					x := *t
					x.Driver, x.Spec.Driver = in.drv, in.drv
					t = &x
				}
				name := t.Name
				if statedir.ValidateTaskDirName(name) != nil {
					name = fmt.Sprintf("task-%d", j)
				}
				l := taskdir.Layout{TaskDir: dirs.Task(name), AllocDir: dirs.Shared(), Chroot: t.Driver == executor.ModeExec}
				probe := t.Spec
				probe.Alloc = &fsm.Alloc{ID: a.id, Dir: l.AllocDir, TaskDir: l.TaskDir}
				base, err := real.BaseEnv(probe, ids[j])
				if err != nil {
					return fail(fmt.Errorf("task %q: %w", t.Address(), err))
				}
				inst, err := tf.Instantiate(t, taskfile.Alloc{ID: a.id, Index: i, Host: host, Ports: held, BaseEnv: base}, l)
				if err != nil {
					return fail(err)
				}
				spec := inst.Spec
				spec.Alloc.Tasks = ids
				if alone {
					// A task run alone is its group's only task: nothing
					// to wait for, nothing to wait for it.
					spec.Alloc.Hook, spec.Alloc.Sidecar, spec.Alloc.Leader = fsm.HookMain, false, false
				}
				if err := in.override(&spec, single); err != nil {
					c.errorf("%v", err)
					return nil, exitUsage, false
				}
				a.members = append(a.members, groupMember{id: ids[j], spec: spec})
			}
		}
	}
	return run, 0, true
}

// override applies the command line's task flags to a spec of a file:
// --env, --user, --cap-add, --cap-drop, --kill-signal, --kill-timeout and
// --driver to every task; --name and --dir to the run's one task.
func (in *taskInputs) override(spec *fsm.Spec, single bool) error {
	if !single && (in.name != "" || in.dir != "") {
		return errors.New("--name and --dir apply to one task: pick it with --task GROUP.TASK")
	}
	if in.name != "" {
		spec.Name = in.name
	}
	if in.dir != "" {
		spec.Dir = in.dir
	}
	for _, kv := range in.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--env %q: use NAME=VALUE", kv)
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	if in.user != "" {
		spec.User = in.user
	}
	spec.CapAdd = append(spec.CapAdd, in.capAdd...)
	spec.CapDrop = append(spec.CapDrop, in.capDrop...)
	if in.killSignal != "" {
		sig, err := parseSignal(in.killSignal)
		if err != nil {
			return fmt.Errorf("--kill-signal: %w", err)
		}
		spec.KillSignal = int(sig)
	}
	if in.killTimeout > 0 {
		spec.KillTimeout = in.killTimeout
	}
	return nil
}

// portAllocator gives ports in the state directory so that two tasks never
// hold one at once: a group's ports are held until its last task ends (an
// owner none of whose tasks is live is let go of).
func (c *cli) portAllocator(ctx context.Context, s *session, ip string) *taskfile.Allocator {
	var once sync.Once
	var live map[string][]string
	return &taskfile.Allocator{Dir: c.stateDir, IP: ip, Live: func(owner string) bool {
		once.Do(func() {
			var err error
			if live, err = s.svc.Groups(ctx); err != nil {
				live = nil
			}
		})
		if live == nil {
			return true // unknown: keep it
		}
		_, ok := live[owner]
		return ok
	}}
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
		for _, a := range run.allocs {
			go func() { _, _ = s.svc.StopGroup(ctx, a.ids(), 0, 0, nil) }()
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(c.stderr, "tether: got %v again, killing the job's tasks now\n", sig)
			for _, a := range run.allocs {
				go func() { _, _ = s.svc.StopGroup(ctx, a.ids(), syscall.SIGKILL, time.Nanosecond, nil) }()
			}
		case <-stopped:
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

// startJob starts a file's groups: it drives each until its main tasks
// have started (and what comes with them: poststart), with a detached
// tether (drive-group) waiting for the group's lock to take the group over
// from there; then waits --min-uptime for the main tasks to stay up, and
// prints every task's id, each group's main tasks first.
func (c *cli) startJob(ctx context.Context, s *session, run *jobRun, opts startOptions, sigs <-chan os.Signal) int {
	outs := make([]groupOutcome, len(run.allocs))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, a := range run.allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, done := context.WithCancel(sctx)
			defer done()
			handed := false
			told := ""
			var spawnErr error
			tasks, err := s.svc.RunGroup(gctx, a.ids(), false, func(p driver.GroupProgress) {
				c.sayStep(a, p, opts.verbose, &told)
				if !handed {
					// The group's lock is ours: the driver that will take
					// the group over waits for it from now on.
					handed = true
					if spawnErr = c.spawnGroupDriver(a, a.members[0].id); spawnErr != nil {
						done()
						return
					}
				}
				if p.Step.Idle() && mainsStarted(p.Tasks) {
					outs[i].tasks = p.Tasks
					done() // up: the group's driver takes it from here
				}
			})
			if spawnErr != nil {
				err = spawnErr
			} else if errors.Is(err, context.Canceled) && sctx.Err() == nil {
				err = nil
				if len(outs[i].tasks) > 0 {
					tasks = outs[i].tasks
				}
			}
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
		if code, ok := c.mainsStayUp(ctx, s, started, min, sigs); !ok {
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

// mainsStarted reports whether every main task of a group has started (or
// ended).
func mainsStarted(tasks []fsm.Task) bool {
	for _, t := range tasks {
		if isMain(t) && t.TaskPID == 0 && !t.State.Terminal() {
			return false
		}
	}
	return true
}

// mainsStayUp waits min for the main tasks to stay up: one that ends
// sooner fails the start as start of one task does (its end and last
// output), its group ending as its rules say.
func (c *cli) mainsStayUp(ctx context.Context, s *session, tasks []fsm.Task, min time.Duration, sigs <-chan os.Signal) (int, bool) {
	wctx, cancel := context.WithTimeout(ctx, min)
	defer cancel()
	ended := make(chan fsm.Task, len(tasks))
	var wg sync.WaitGroup
	for _, t := range tasks {
		if !isMain(t) {
			continue
		}
		if t.State.Terminal() {
			ended <- t
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if final, err := s.svc.WaitTask(wctx, t.ID); err == nil && final.State.Terminal() {
				ended <- final
			}
		}()
	}
	go func() { wg.Wait(); close(ended) }()
	select {
	case t, ok := <-ended:
		if ok {
			cancel()
			return c.endedEarly(t, min), false
		}
	case sig := <-sigs:
		cancel()
		return 128 + int(sig.(syscall.Signal)), false
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

// spawnGroupDriver starts a detached tether that drives the group of task
// id to its end: in a session of its own, its output in the allocation's
// group.log. It waits for the group's lock, so it takes over once whoever
// holds it lets go (or dies).
func (c *cli) spawnGroupDriver(a *allocRun, id string) error {
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
	if len(c.allowRead) > 0 {
		args = append(args, "--allow-read", strings.Join(c.allowRead, ","))
	}
	args = append(args, id)
	dir := c.layout().Alloc(a.id)
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
	c.log.Info("group handed to a driver of its own", "alloc", a.id, "pid", p.Pid)
	return p.Release()
}

// cmdDriveGroup is the detached driver of a started group: it drives the
// group of its task argument to its end (RunGroup, waiting for the
// group's lock), lets go of its ports and exits. SIGTERM ends it without
// stopping anything (tether recover resumes the group).
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
	last := ""
	_, err := s.svc.RunGroup(ctx, a.Tasks, true, func(p driver.GroupProgress) {
		if s := p.Step.String(); s != last {
			c.log.Info("group step", "alloc", a.ID, "step", s)
			last = s
		}
	})
	if err != nil {
		c.log.Error("the group's driver stops; tether recover resumes it", "alloc", a.ID, "err", err)
		return exitError
	}
	c.releasePorts(a.ID)
	c.log.Info("the group is over", "alloc", a.ID)
	return exitOK
}

// resumeGroups hands every live group nobody drives (its driver died) to
// a new detached driver (tether recover), and says so.
func (c *cli) resumeGroups(ctx context.Context, s *session) {
	groups, err := s.svc.Groups(ctx)
	if err != nil {
		c.errorf("warning: listing the groups: %v", err)
		return
	}
	for _, alloc := range slices.Sorted(maps.Keys(groups)) {
		ids := groups[alloc]
		driven, _, err := s.svc.GroupDriven(alloc)
		if err != nil || driven || len(ids) == 0 {
			continue
		}
		if err := c.spawnGroupDriver(&allocRun{id: alloc}, ids[0]); err != nil {
			c.errorf("warning: group %s: %v", alloc, err)
			continue
		}
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
			_, _ = s.svc.StopGroup(ctx, ids, syscall.SIGKILL, time.Nanosecond, nil)
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
