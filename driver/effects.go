package driver

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// Jobs: the effects and probes an owner runs, one at a time, each in a
// goroutine that reads only what it was given and reports its outcome as
// input events (which the owner steps and appends) on the owner's channel.

type jobKind uint8

const (
	jobNone jobKind = iota
	jobSpawn
	jobLaunch
	jobAttach
	jobKill
	jobProbeLaunch // recovery of a task in launching: ask the executor
	jobProbe       // recovery or supervision of a launched, running or restarting task
	jobLockWait    // wait for another process to finish driving the task
)

// jobResult is what a job reports.
type jobResult struct {
	kind   jobKind
	inputs []fsm.Event   // to step and append in one commit
	h      executor.Conn // a connection the job opened (spawn, reattach)
	closed bool          // the job closed the owner's connection (the executor is dead)
	err    error         // a start effect's failure, for StartTask's caller
	// supervise: the task is running and h reaches its executor.
	supervise bool
	action    string // what a recovery did, for the report
	unlock    func() // jobLockWait: lets go of the lock, now held
	retry     bool   // a probe could not reach a live executor: try again later
	delay     time.Duration
}

// job is what a job goroutine may read: copies, and the concurrency-safe
// connection and world.
type job struct {
	d     *Driver
	id    string
	st    fsm.Task
	eff   fsm.Effect
	h     executor.Conn
	final *executor.Status // the executor on h reported the task over (owner.final)
	kill  *killOverride
}

func effectJob(t fsm.EffectType) jobKind {
	switch t {
	case fsm.EffectSpawnExecutor:
		return jobSpawn
	case fsm.EffectLaunchTask:
		return jobLaunch
	case fsm.EffectAttach:
		return jobAttach
	case fsm.EffectKillExecutor:
		return jobKill
	}
	panic(fmt.Sprintf("driver: effect %s has no implementation", t))
}

// perform starts the job that performs eff.
func (o *owner) perform(eff fsm.Effect) {
	kind := effectJob(eff.Type)
	timeout := o.d.cfg.EffectTimeout
	switch kind {
	case jobSpawn:
		timeout = o.d.cfg.SpawnTimeout
	case jobLaunch:
		if s := eff.Spec; s != nil && len(s.Artifacts)+len(s.Templates) > 0 {
			timeout += o.d.cfg.PrepareTimeout // the executor fetches and renders first
		}
	case jobKill:
		sig, grace := eff.Signal, eff.Grace
		if o.kill != nil {
			sig, grace = int(o.kill.sig), o.kill.grace
		}
		eff.Signal, eff.Grace = sig, grace
		timeout += grace
	}
	o.startJob(kind, timeout, &eff)
}

// startJob runs a job of kind in a goroutine, bounded by timeout.
func (o *owner) startJob(kind jobKind, timeout time.Duration, eff *fsm.Effect) {
	// The driver keeps no context: each job has its own, which the owner
	// cancels (a stop overtaking a start, the owner's exit).
	ctx, cancel := context.WithCancelCause(context.Background())
	j := job{d: o.d, id: o.t.id, st: o.st, h: o.h, final: o.final, kill: o.kill}
	if eff != nil {
		j.eff = *eff
	}
	o.job, o.cancelJob = kind, cancel
	go func() {
		tctx, stop := context.WithTimeout(ctx, timeout)
		defer stop()
		r := j.run(tctx, kind)
		r.kind = kind
		o.jobC <- r
	}()
}

func (j job) run(ctx context.Context, kind jobKind) jobResult {
	switch kind {
	case jobProbeLaunch:
		return j.probeLaunch(ctx)
	case jobProbe:
		return j.probe(ctx)
	case jobLockWait:
		return j.lockWait(ctx)
	}
	name := j.eff.Type.String()
	j.d.hooks.crash(crashBeforeEffect+name, j.id)
	defer j.d.hooks.crash(crashAfterEffect+name, j.id)
	if err := j.d.hooks.fault("effect:"+name, j.id); err != nil {
		return j.failed(kind, err)
	}
	switch kind {
	case jobSpawn:
		return j.spawn(ctx)
	case jobLaunch:
		return j.launch(ctx)
	case jobAttach:
		return j.attach(ctx)
	case jobKill:
		return j.killExecutor(ctx)
	}
	panic("unreachable")
}

// failed is the outcome of an effect that failed with err.
func (j job) failed(kind jobKind, err error) jobResult {
	var ev fsm.Event
	switch kind {
	case jobSpawn:
		ev = j.d.event(fsm.EventSpawnFailed)
	case jobLaunch:
		ev = j.d.event(fsm.EventLaunchFailed)
	case jobAttach:
		return jobResult{inputs: []fsm.Event{j.d.lost(err)}, err: err}
	default:
		ev = j.d.event(fsm.EventKillFailed)
	}
	ev.Reason, ev.Cause = err.Error(), causeOf(err)
	return jobResult{inputs: []fsm.Event{ev}, err: err}
}

func (d *Driver) lost(err error) fsm.Event {
	ev := d.event(fsm.EventExecutorLost)
	ev.Reason, ev.Cause = err.Error(), causeOf(err)
	return ev
}

func (j job) spawn(ctx context.Context) jobResult {
	h, err := j.d.world.Spawn(ctx, j.id, j.eff.Nonce)
	if err != nil {
		return j.failed(jobSpawn, err)
	}
	ev := j.d.event(fsm.EventExecutorUp)
	id := h.Identity()
	ev.Executor = &id
	return jobResult{inputs: []fsm.Event{ev}, h: h}
}

// conn is the owner's connection, or a new one through the recorded
// identity (bounded by ProbeTimeout).
func (j job) conn(ctx context.Context) (executor.Conn, bool, error) {
	if j.h != nil {
		return j.h, false, nil
	}
	if j.st.Executor == nil {
		return nil, false, ErrGone
	}
	pctx, cancel := context.WithTimeout(ctx, j.d.cfg.ProbeTimeout)
	defer cancel()
	h, err := j.d.world.Reattach(pctx, j.id, *j.st.Executor)
	return h, err == nil, err
}

// launch asks the executor to launch the task. Its answer is the task's
// status right after: running (and supervised by the executor from its
// first instruction) is recorded with launched in one append.
func (j job) launch(ctx context.Context) jobResult {
	h, opened, err := j.conn(ctx)
	if err != nil {
		return j.failed(jobLaunch, err)
	}
	var own executor.Conn
	if opened {
		own = h
	}
	s, err := h.Launch(ctx, *j.eff.Spec)
	if err != nil {
		r := j.failed(jobLaunch, err)
		r.h = own
		return r
	}
	launched := j.d.event(fsm.EventLaunched)
	launched.TaskPID, launched.TaskStartTime = s.PID, s.StartTime
	if len(s.Warnings) > 0 {
		// What the launch did differently from what was asked (a raw_exec
		// task uncontained on a host without cgroups): in the log, for
		// the caller and 'tether events' to show.
		launched.Warnings = s.Warnings
		j.d.log.Info("the launch did not do all that was asked", "task_id", j.id, "warnings", fmt.Sprint(s.Warnings))
	}
	if s.Over() {
		ex := j.d.exited(s.Exit)
		return jobResult{inputs: []fsm.Event{launched, ex}, h: h}
	}
	return jobResult{inputs: []fsm.Event{launched, j.d.event(fsm.EventRunning)}, h: h, supervise: true}
}

// attach confirms a launched task alive and attaches supervision; a
// connection it had to open through the recorded identity is recorded as
// reattached. Restarts its executor journalled meanwhile are folded first.
func (j job) attach(ctx context.Context) jobResult {
	rd := j.d.endOf(ctx, j.st, j.h)
	switch {
	case rd.alive:
		var inputs []fsm.Event
		if j.h == nil {
			re := j.d.event(fsm.EventReattached)
			id := rd.h.Identity()
			re.Executor = &id
			inputs = append(inputs, re)
		}
		if caught := j.d.inputs(j.st, rd.r); len(caught) > 0 {
			inputs = append(inputs, caught...) // a relaunch in them brings its own running
		} else {
			inputs = append(inputs, j.d.event(fsm.EventRunning))
		}
		return jobResult{inputs: inputs, h: rd.h, supervise: true}
	case rd.unreachable:
		return jobResult{h: rd.h, retry: true, delay: j.d.cfg.ProbeTimeout}
	}
	return jobResult{inputs: j.d.inputs(j.st, rd.r), h: rd.h}
}

// reading is what endOf found.
type reading struct {
	r     report        // restart journal entries the log lacks, and the end if the task is over
	h     executor.Conn // a connection to the executor, if one was made
	alive bool          // the task lives (between restarts too)
	// unreachable: the executor is alive but does not answer (frozen);
	// nothing is concluded from that.
	unreachable bool
}

// endOf asks the executor about its task: alive (with a connection), or
// how it ended. It is the one place that collects a task's end: the
// executor's answer, else the exit status it left on disk (matched against
// the log), else lost; with the restarts its journal holds that the log
// lacks, in order, before the end.
func (d *Driver) endOf(ctx context.Context, st fsm.Task, h executor.Conn) reading {
	var err error
	if h == nil && st.Executor == nil {
		return reading{r: d.collectEnd(ctx, st, ErrGone)}
	}
	// One question to the executor: its hello (when reattaching) and its
	// status, within one ProbeTimeout.
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProbeTimeout)
	if h == nil {
		h, err = d.world.Reattach(pctx, st.ID, *st.Executor)
	}
	if err == nil {
		var s executor.Status
		s, err = h.Status(pctx)
		cancel()
		if err == nil {
			r := d.catchUp(ctx, st, h, s)
			if !s.Over() {
				return reading{r: r, h: h, alive: true}
			}
			if cur := foldReport(st, r, d); cur.State != fsm.StateReaping && !cur.State.Terminal() {
				ev := d.exited(s.Exit)
				r.end = []fsm.Event{ev}
			}
			return reading{r: r, h: h}
		}
	}
	cancel()
	if st.Executor != nil && !errors.Is(err, ErrNotOurs) && !errors.Is(err, ErrGone) {
		if live, aerr := d.world.Alive(ctx, st.ID, *st.Executor); aerr == nil && live {
			// An executor on its way out (its task over, its socket
			// closed) no longer answers: what it left on disk says the
			// end. Anything else alive that does not answer is left
			// alone.
			if r := d.collectEnd(ctx, st, err); !lostEnd(r) {
				return reading{r: r, h: h}
			}
			return reading{h: h, unreachable: true}
		}
	}
	return reading{r: d.collectEnd(ctx, st, err), h: h}
}

// lostEnd reports whether r ends the task lost (no exit status found).
func lostEnd(r report) bool {
	return len(r.end) > 0 && r.end[0].Type == fsm.EventExecutorLost
}

// collectEnd is the end of a task whose executor cannot be asked: the
// restarts its journal on disk holds that the log lacks, then the exit
// status it left on disk, once matched against the log, else lost.
func (d *Driver) collectEnd(ctx context.Context, st fsm.Task, cause error) report {
	r, jerr := d.journalReport(ctx, st)
	if jerr != nil {
		if errors.Is(jerr, ErrNotOurs) {
			r.end = []fsm.Event{d.lost(fmt.Errorf("the restart journal did not match the log, so it was not believed: %w", jerr))}
			return r
		}
		cause = errors.Join(cause, jerr)
	}
	cur := foldReport(st, r, d) // the process of the last relaunch, if any
	if cur.State == fsm.StateReaping || cur.State.Terminal() {
		return r // a failed relaunch ended it
	}
	if st.Executor != nil {
		x, ok, err := d.world.ExitStatus(ctx, st.ID, *st.Executor, cur.TaskProc())
		switch {
		case err == nil && ok:
			ev := d.exited(x)
			r.end = []fsm.Event{ev}
			return r
		case errors.Is(err, ErrNotOurs):
			r.end = []fsm.Event{d.lost(fmt.Errorf("the exit status file did not match the log, so it was not believed: %w", err))}
			r.refused = true
			return r
		case err != nil:
			cause = errors.Join(cause, err)
		}
	}
	if cause == nil {
		cause = ErrGone
	}
	r.end = []fsm.Event{d.lost(fmt.Errorf("executor gone without leaving an exit status: %w", cause))}
	return r
}

// probeLaunch reconciles a launch whose outcome was never recorded: the
// executor says whether it launched.
func (j job) probeLaunch(ctx context.Context) jobResult {
	h, _, err := j.conn(ctx)
	var s executor.Status
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, j.d.cfg.ProbeTimeout)
		s, err = h.Status(pctx)
		cancel()
	}
	if err != nil {
		// Gone, or alive and not answering (on its way out after its
		// lease ended, or frozen): either way it cannot say whether it
		// launched, and nothing of the task may be left running
		// unrecorded, so everything of it is killed (by identity, and its
		// cgroup) and the task recorded lost, as the crash-window table
		// says. A running task's frozen executor is left alone instead
		// (probe): there the log knows what runs.
		cause := fmt.Errorf("after a restart during launch: %w", err)
		if j.st.Executor != nil {
			// The executor is gone: its launch record says whether it
			// launched, once it matches the log; one that does not is
			// believed in nothing (and nothing is signalled because of it).
			if rec, ok, lerr := j.d.world.LaunchRecord(ctx, j.id, *j.st.Executor); errors.Is(lerr, ErrNotOurs) {
				cause = fmt.Errorf("%w; the launch record did not match the log, so it was not believed: %w", cause, lerr)
			} else if ok {
				cause = fmt.Errorf("%w; its launch record says it launched the task, which is killed with everything of it", cause)
				// The executor may have restarted the task since (each
				// restart journalled ahead of its relaunch): the launch
				// is recorded, then what the journal holds, then the end
				// (collectEnd), so that no run goes unrecorded.
				launched, cur, ok := j.launchedAt(rec)
				if r := j.d.collectEnd(ctx, cur, cause); ok && len(r.entries) > 0 {
					inputs := append(launched, j.d.inputs(cur, r)...)
					return jobResult{h: h, inputs: inputs, action: fmt.Sprintf("launch interrupted; executor gone; %d restart journal entries folded; task killed", len(r.entries))}
				}
			}
		}
		return jobResult{h: h, inputs: []fsm.Event{j.d.lost(cause)}, action: "launch interrupted; executor unreachable; task killed"}
	}
	if !s.Launched {
		ev := j.d.event(fsm.EventStartInterrupted)
		ev.Reason, ev.Cause = "the driver stopped before the executor launched the task", fsm.CauseOther
		return jobResult{h: h, inputs: []fsm.Event{ev}, action: "launch never happened; executor killed"}
	}
	// The launch, then the restarts (and readies) its executor journalled
	// since, in order, as attach folds them for a launched task.
	inputs, cur, ok := j.launchedAt(fsm.Proc{PID: s.PID, StartTime: s.StartTime})
	var r report
	if ok {
		r = j.d.catchUp(ctx, cur, h, s)
		inputs = append(inputs, j.d.inputs(cur, r)...)
	}
	if s.Over() {
		action := "launch had happened and the task has exited (" + s.Exit.String() + "); reaped"
		if len(r.entries) == 0 {
			inputs = inputs[:1] // launched, then the exit: it was never seen running
		}
		if end := foldReport(cur, r, j.d); end.State != fsm.StateReaping && !end.State.Terminal() {
			inputs = append(inputs, j.d.exited(s.Exit))
		} else {
			action = "launch had happened; its last relaunch failed"
		}
		return jobResult{h: h, inputs: inputs, action: action}
	}
	return jobResult{h: h, inputs: inputs, supervise: true, action: "launch had happened; reattached"}
}

// launchedAt is a launch found by probing, of the task process p: launched
// and running, and the task with them folded (false: they do not fold).
func (j job) launchedAt(p fsm.Proc) ([]fsm.Event, fsm.Task, bool) {
	launched := j.d.event(fsm.EventLaunched)
	launched.TaskPID, launched.TaskStartTime = p.PID, p.StartTime
	inputs := []fsm.Event{launched, j.d.event(fsm.EventRunning)}
	cur, err := fsm.FoldAll(j.st, inputs...)
	return inputs, cur, err == nil
}

// probe reconciles a running or restarting task: reattach by proven
// identity and supervise, or collect its end (with the restarts the log
// lacks, first).
func (j job) probe(ctx context.Context) jobResult {
	rd := j.d.endOf(ctx, j.st, j.h)
	inputs := j.d.inputs(j.st, rd.r)
	restarts := ""
	if n := len(rd.r.entries); n > 0 {
		restarts = fmt.Sprintf("; %d restart journal entries folded", n)
	}
	switch {
	case rd.alive:
		return jobResult{h: rd.h, inputs: inputs, supervise: true, action: "reattached; still " + j.st.State.String() + restarts}
	case rd.unreachable:
		return jobResult{h: rd.h, action: "the executor is alive but does not answer; left alone"}
	case len(rd.r.end) > 0 && rd.r.end[0].Type == fsm.EventTaskExited:
		return jobResult{h: rd.h, inputs: inputs, action: "task had exited (" + rd.r.end[0].Exit.String() + "); reaped" + restarts}
	case len(rd.r.end) == 0:
		return jobResult{h: rd.h, inputs: inputs, action: "its last relaunch failed" + restarts}
	}
	action := "executor gone and no exit status; task killed, lost"
	if rd.r.refused {
		action = "executor gone; the exit status it left did not match the log (not believed); task killed, lost"
	}
	return jobResult{h: rd.h, inputs: inputs, action: action + restarts}
}

// lockWait waits for another process to let go of the task's lock.
func (j job) lockWait(ctx context.Context) jobResult {
	unlock, err := j.d.world.WaitLockTask(ctx, j.id)
	return jobResult{unlock: unlock, err: err}
}

// killExecutor is the kill-executor effect: stop everything of the task
// (with the stop's signal and grace when it is being stopped), collect its
// exit status, and confirm that nothing of it is alive. The normal end, an
// executor this owner is connected to that reported the task over or
// answered the stop, is endWithExecutor; anything else is recovery's kill:
// the executor killed by its proven identity (or found by nonce when none
// was recorded), the task by its recorded cgroup and its launch record.
func (j job) killExecutor(ctx context.Context) jobResult {
	eff := j.eff
	if j.h != nil && (j.final != nil || !eff.TaskProc().IsZero()) {
		if r, ok := j.endWithExecutor(ctx); ok {
			return r
		}
	}
	k := recoveryKill{world: j.d.world, probe: j.d.cfg.ProbeTimeout, task: j.id, id: eff.Executor, nonce: eff.Nonce,
		run: eff.TaskProc(), sig: syscall.Signal(eff.Signal), grace: eff.Grace, conn: j.h}
	exit, _, err := k.kill(ctx)
	closed := j.h != nil // the kill closed the owner's connection: the executor is dead
	if err != nil {
		r := j.failed(jobKill, err)
		r.closed = closed
		return r
	}
	if exit == nil && eff.Target == fsm.StateExited {
		exit = j.st.Exit
	}
	ev := j.d.event(fsm.EventExecutorReaped)
	ev.Target, ev.Exit = eff.Target, exit
	return jobResult{inputs: []fsm.Event{ev}, closed: closed}
}

// recoveryKill is the kill of a task's processes from what its log
// records, when its executor did not (or could not) tell of its end: the
// executor by its proven identity (or found by its spawn nonce when none
// was recorded), the task by its recorded cgroup (or process group), and
// the latest run its launch record names.
type recoveryKill struct {
	world executor.World
	probe time.Duration // bounds each question to the executor
	task  string
	id    *fsm.Identity // the executor, as recorded; nil: look it up by nonce
	nonce string
	run   fsm.Proc       // the task process the log knows (zero: none)
	sig   syscall.Signal // the stop's first signal (0: SIGKILL at once)
	grace time.Duration
	conn  executor.Conn // a connection to the executor the caller holds (closed by kill), if any
}

// kill kills everything of the task and confirms it dead. It returns the
// exit status when one was collected (the executor's answer to a stop, or
// its exit record), and the executor's identity when one was known or
// found (nil: nothing with the nonce was alive).
func (k recoveryKill) kill(ctx context.Context) (*fsm.ExitStatus, *fsm.Identity, error) {
	id := k.id
	switch {
	case id != nil:
	case k.conn != nil: // spawned, but the spawn's outcome was not recorded
		x := k.conn.Identity()
		id = &x
	case k.nonce != "":
		found, ok, err := k.world.FindByNonce(ctx, k.task, k.nonce)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			id = &found
		}
	}
	run := k.run
	var last fsm.Proc // a run the log does not know, to kill too
	if id != nil {
		// The executor may have launched a task whose launch was never
		// recorded (a crash, or a stop that overtook the launch), or
		// relaunched it since (its restart policy): its launch record
		// names the latest run.
		if rec, ok, err := k.world.LaunchRecord(ctx, k.task, *id); err == nil && ok {
			switch {
			case run.IsZero():
				run = rec
			case rec != run:
				last = rec
			}
		}
	}
	h := k.conn
	if h == nil && id != nil && !run.IsZero() {
		pctx, cancel := context.WithTimeout(ctx, k.probe)
		if r, err := k.world.Reattach(pctx, k.task, *id); err == nil {
			h = r
		}
		cancel()
	}
	var exit *fsm.ExitStatus
	dismissed := false // the executor is dead, through the pidfd of h
	if h != nil {
		if !run.IsZero() {
			// A task was launched: stop it through its executor (signal,
			// grace, SIGKILL to everything of it), which collects its exit.
			sig := k.sig
			if sig == 0 {
				sig = syscall.SIGKILL
			}
			// Bounded by the grace and a probe: a frozen executor does not
			// hold the kill up; it is killed by identity below.
			sctx, cancel := context.WithTimeout(ctx, k.grace+k.probe)
			if x, err := h.Stop(sctx, sig, k.grace); err == nil {
				exit = &x.Exit
			}
			cancel()
			if exit == nil {
				// The Stop did not end it: ask for an orderly exit
				// (after a stop that answered, the executor is on its
				// way out already). The kill by identity follows.
				sctx, cancel = context.WithTimeout(ctx, k.probe)
				_ = h.Shutdown(sctx)
				cancel()
			}
		}
		if run.IsZero() {
			// Nothing launched, as far as the log and the launch record
			// say: the executor holds nothing worth an orderly exit, and
			// the pidfd of h (opened on the process whose identity was
			// proven) ends it, confirmed dead, with nothing to walk;
			// KillTask then finds whatever a launch nobody recorded left
			// by the task's cgroup. Without it, the kill by identity.
			dctx, cancel := context.WithTimeout(ctx, k.probe)
			dismissed = h.Dismiss(dctx) == nil
			cancel()
		}
		_ = h.Close()
	}
	if id == nil {
		return exit, nil, nil
	}
	if !dismissed {
		// ErrNotOurs: the pid now belongs to a stranger, so ours is dead;
		// nothing was signalled.
		if err := k.world.Kill(ctx, k.task, *id); err != nil && !errors.Is(err, ErrNotOurs) {
			return exit, id, err
		}
	}
	if err := k.world.KillTask(ctx, k.task, *id, run); err != nil && !errors.Is(err, ErrNotOurs) {
		return exit, id, fmt.Errorf("%w: %w", ErrTaskNotKilled, err)
	}
	if !last.IsZero() {
		if err := k.world.KillTask(ctx, k.task, *id, last); err != nil && !errors.Is(err, ErrNotOurs) {
			return exit, id, fmt.Errorf("%w: %w", ErrTaskNotKilled, err)
		}
	}
	if exit == nil {
		if x, ok, err := k.world.ExitStatus(ctx, k.task, *id, run); err == nil && ok {
			exit = &x
		}
	}
	return exit, id, nil
}

// endWithExecutor is the normal end of a task whose executor this owner
// is connected to: the end it reported (its watch said the task is over),
// else its answer to a stop with the kill's signal and grace. Either way
// the executor has the exit status, has emptied and removed the task's
// cgroup (or says it could not: Status.Emptied) and is ended through the
// pidfd the connection holds (opened on the process whose identity was
// proven when it was spawned or reattached: Conn.Dismiss, or Conn.Shutdown
// when it did not say Emptied), with no read of the launch record and no
// kill by identity of a process known to be dead, and the cgroup is killed
// only when the executor could not confirm it empty. ok is false when the executor did not answer, or its
// death could not be confirmed: the recovery's kill follows.
func (j job) endWithExecutor(ctx context.Context) (jobResult, bool) {
	eff, h := j.eff, j.h
	var st executor.Status
	if j.final != nil {
		st = *j.final
	} else {
		sig := syscall.Signal(eff.Signal)
		if sig == 0 {
			sig = syscall.SIGKILL
		}
		// Bounded by the grace and a probe: a frozen executor does not
		// hold the kill up; recovery's kill by identity follows.
		sctx, cancel := context.WithTimeout(ctx, eff.Grace+j.d.cfg.ProbeTimeout)
		s, err := h.Stop(sctx, sig, eff.Grace)
		cancel()
		if err != nil || !s.Over() {
			return jobResult{}, false
		}
		st = s
	}
	// Its death. One that drained the task and removed its cgroup
	// (Emptied) has told all it knows and is killed at once (its exit
	// record is for a driver that is away), unless a command exec'd
	// into the task is owed its exit status (ExecsOwed: the executor
	// answers it before it exits); any other is asked to kill what is
	// left and exit.
	dctx, cancel := context.WithTimeout(ctx, j.d.cfg.ProbeTimeout)
	end := h.Shutdown
	if st.Emptied && !st.ExecsOwed {
		end = h.Dismiss
	}
	err := end(dctx)
	cancel()
	if err != nil {
		return jobResult{}, false
	}
	_ = h.Close()
	if !st.Emptied {
		id := h.Identity()
		if err := j.d.world.KillTask(ctx, j.id, id, fsm.Proc{PID: st.PID, StartTime: st.StartTime}); err != nil && !errors.Is(err, ErrNotOurs) {
			r := j.failed(jobKill, err)
			r.closed = true
			return r, true
		}
	}
	exit := st.Exit
	ev := j.d.event(fsm.EventExecutorReaped)
	ev.Target, ev.Exit = eff.Target, &exit
	return jobResult{inputs: []fsm.Event{ev}, closed: true}, true
}

// maxKillAttempts bounds how often one owner retries a failed kill before
// it leaves the task in reaping for a later Recover.
const maxKillAttempts = 3

// jobDone takes a job's outcome: adopt its connection, record its
// inputs, and schedule what follows.
func (o *owner) jobDone(r jobResult) {
	o.job, o.cancelJob = jobNone, nil
	if r.closed {
		o.h, o.final = nil, nil
	}
	if r.h != nil && r.h != o.h {
		if o.h != nil {
			_ = o.h.Close()
		}
		o.h = r.h
	}
	switch r.kind {
	case jobSpawn, jobLaunch:
		if r.err != nil {
			o.lastErr = r.err
		}
	case jobLockWait:
		o.lockWaited(r)
		return
	}
	if len(r.inputs) > 0 {
		ok, err := o.record(r.inputs...)
		if err != nil {
			if r.kind == jobSpawn && o.st.Executor == nil {
				o.killUnrecorded() // an executor spawned but not recorded must not live on
			}
			o.giveUp(err)
			return
		}
		if !ok && o.st.State.Terminal() && o.h != nil {
			o.killUnrecorded() // a late outcome of a task that ended meanwhile
		}
	}
	o.setAction(r.action)
	switch {
	case r.kind == jobKill && o.st.State == fsm.StateReaping:
		o.kills++
		if o.kills >= maxKillAttempts {
			o.giveUp(o.taskErr(fmt.Errorf("kill-executor failed %d times: %s", o.kills, o.st.Reason)))
			return
		}
		o.retryC = time.After(time.Duration(o.kills*o.kills) * 50 * time.Millisecond) // back off before retrying a kill
	case r.kind == jobKill:
		o.kills = 0
	case r.retry:
		o.retryC = time.After(r.delay) // then the attach is owed again
	}
	if r.supervise && o.st.State != fsm.StateReaping && !o.st.State.Terminal() {
		o.supervise()
	}
	if (r.kind == jobProbe || r.kind == jobProbeLaunch) && len(r.inputs) == 0 && len(o.owed) == 0 {
		o.rest() // nothing to do: alive, supervised or left alone
		o.concludeRecovery("", nil)
		if o.supC == nil && len(o.watchers) > 0 {
			o.retryC = time.After(o.d.cfg.ProbeTimeout) // left alone while a watcher waits: ask again
		}
	}
}

// lockWaited continues a watch once the process that was driving the task
// has finished: the log says what it did.
func (o *owner) lockWaited(r jobResult) {
	if r.err != nil {
		o.failWatchers(r.err)
		return
	}
	r.unlock()
	if err := o.reload(); err != nil {
		o.failWatchers(err)
		return
	}
	if !o.st.State.Terminal() && len(o.watchers) > 0 {
		o.reconcile()
	}
}
