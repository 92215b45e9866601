package driver

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// The task owner.
//
// Every task the driver touches has one owner: a goroutine (owner.run) that
// receives every input about the task on channels — a caller's request
// (start, stop, wait, recover) on the task's inbox, the outcome of the one
// effect or probe in flight, the supervisor's report of the task's end —
// and is the only writer of the task's state and the only runner of its
// effects, in the manner of raft's node.run. For each input it steps the
// pure lifecycle (fsm.StepAll), appends the resulting events (write-ahead),
// folds them, and performs the effects Step returned, one at a time, each
// in a goroutine whose outcome comes back as the next input. A nil channel
// turns a case of its select off.
//
// Across processes (the CLI opens the store per command), the task's lock
// (LockFile) says that a live process is driving the task through a state
// that owes an effect; recovery elsewhere leaves such a task alone.
// Appends are optimistic (the expected version), so two processes acting
// on one task at once converge: the second's append conflicts, it reloads
// the log and re-steps its input, and every effect is idempotent or keyed.

// inputKind is what a caller asks of an owner.
type inputKind uint8

const (
	inStart        inputKind = iota + 1 // record and start a new task
	inStop                              // stop it (or escalate a stop under way)
	inWatch                             // reply when it is terminal; make sure someone notices its end
	inRecover                           // reconcile it with reality, unless someone is driving it
	inInspect                           // reply with the state (after a start that claimed the id has recorded it)
	inCreate                            // record a new task that waits for its turn (a task of a group)
	inStartCreated                      // start a task that waits for its turn
	inReady                             // record that the run of task process pid is ready (see ready.go)
)

type request struct {
	kind  inputKind
	spec  fsm.Spec       // start
	sig   syscall.Signal // stop
	grace time.Duration  // stop
	// link is the task a start replaces (its task-created's Replaces), or
	// the one a stop makes way for (its stop-requested's ReplacedBy).
	link  string
	pid   int        // ready: the task process of the run that said it is ready
	reply chan reply // buffered: the owner never blocks on a caller
	// held (recover, from Recover) lets go of the task's lock, which
	// Recover took after it read the state the owner starts on; probed is
	// what Recover's probe of its executor found (a running task).
	held   func()
	probed *jobResult
	// cancel is closed when the caller has given up (its context ended):
	// a watch then no longer keeps the owner at work.
	cancel <-chan struct{}
	// progress (watch, optional; capacity 1) receives the task's state
	// after each durable change while the watch waits, the latest
	// replacing one not yet read.
	progress chan fsm.Task
}

type reply struct {
	task   fsm.Task
	report TaskReport // recover
	err    error
}

// killOverride replaces the signal and grace a stop recorded, for the next
// kill: a later stop that asked for sooner, or a recovery (the stop that
// asked for a grace is gone with its process).
type killOverride struct {
	sig   syscall.Signal
	grace time.Duration
}

// recovering is a recover request being answered.
type recovering struct {
	reply  chan reply
	from   fsm.State
	action string
}

// phase is what an owner is doing with its task. The inputs it takes and
// when it may end follow from it (run, finished, advance); what is in
// flight beside it (an effect or probe: job; a kill's back-off: retryC)
// and who waits for it (starters, stoppers, watchers, a recovery) are
// data, not modes.
type phase uint8

const (
	// phaseFresh: started for a request it has not served yet; it serves
	// that first.
	phaseFresh phase = iota
	// phaseIdle: it owes nothing here and follows nothing; it answers and
	// waits for input.
	phaseIdle
	// phaseDriving: it performs what the task owes, one effect at a time,
	// holding the task's lock when it could take it.
	phaseDriving
	// phaseSupervising: the task runs, and a supervisor follows its
	// executor (supC): its restarts and its end.
	phaseSupervising
	// phaseClosing: the driver is closing; it drove what it was driving
	// to a stable state, and ends once no caller waits on it.
	phaseClosing
	// phaseEnded: its loop ended by itself (not by a simulated crash), so
	// the watchers still waiting are told why.
	phaseEnded
)

var phaseNames = [...]string{"fresh", "idle", "driving", "supervising", "closing", "ended"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

type owner struct {
	d   *Driver
	t   *task
	log hclog.Logger

	phase  phase
	st     fsm.Task     // the durable state: the fold of the log
	owed   []fsm.Effect // what st owes, as Step returned it (Pending after a load)
	unlock func()       // lets go of the task's lock, held while driving when it could be taken

	h executor.Conn // a connection to the task's executor, when there is one
	// final is what the executor on h said when it reported the task over
	// (its supervisor's last watch): the normal end, which needs no
	// recovery (see job.endReported).
	final *executor.Status

	job       jobKind // the effect or probe in flight (jobNone: none)
	jobC      chan jobResult
	cancelJob context.CancelCauseFunc

	supC    chan report // the supervisor's reports: restarts, and the task's end; nil: none
	supStop context.CancelCauseFunc

	retryC <-chan time.Time // a kill's back-off; nil: none
	kills  int
	kill   *killOverride

	starters []chan reply
	stoppers []chan reply
	watchers []chan reply
	// followers are the progress channels of watchers that asked for
	// them, and cancels the channels that say a watcher gave up, by its
	// reply channel.
	followers map[chan reply]chan fsm.Task
	cancels   map[chan reply]<-chan struct{}
	recovery  *recovering
	lastErr   error // the last start effect's error, for the starters
}

// startOwner registers a task and starts its owner on st, serving first
// (if any) before anything else. d.mu is held.
func (d *Driver) startOwner(st fsm.Task, first *request) *task {
	t := &task{id: st.ID, in: make(chan request), done: make(chan struct{}), gone: make(chan struct{})}
	t.view.Store(&st)
	if st.State.Terminal() {
		close(t.done)
	}
	d.tasks[st.ID] = t
	d.owners.Add(1)
	o := &owner{d: d, t: t, log: d.log.With("task_id", st.ID), st: st, owed: fsm.Pending(st), jobC: make(chan jobResult, 1),
		phase: phaseFresh}
	go o.run(first)
	return t
}

func (o *owner) run(first *request) {
	defer o.exit()
	if first != nil {
		o.serve(*first)
	}
	closing := o.d.closing
	for {
		o.advance()
		if o.finished() {
			o.phase = phaseEnded
			return
		}
		var jobC chan jobResult
		if o.job != jobNone {
			jobC = o.jobC
		}
		var in chan request
		if o.phase != phaseClosing || o.job != jobNone {
			in = o.t.in // while closing, callers are refused by the driver already
		}
		select {
		case req := <-in:
			o.serve(req)
		case r := <-jobC:
			o.jobDone(r)
		case r := <-o.supC:
			o.supervised(r)
		case <-o.retryC:
			o.retryC = nil
			o.pruneWatchers()
			if len(o.watchers) > 0 && o.phase == phaseIdle && o.job == jobNone && !o.st.State.Terminal() {
				o.reconcile() // a watcher waits on a task nobody watches: ask again
			}
		case <-closing:
			closing = nil
			o.stopSupervising()
			if o.phase != phaseDriving {
				o.phase = phaseClosing
			}
		case <-o.d.abandoned:
			return
		}
	}
}

// finished reports whether the owner has nothing left to do.
func (o *owner) finished() bool {
	if o.job != jobNone {
		return false
	}
	o.pruneWatchers()
	waiting := len(o.starters)+len(o.stoppers)+len(o.watchers) > 0 || o.recovery != nil
	switch {
	case o.phase == phaseFresh:
		return false // an owner is started for a request: it serves that first
	case o.st.State == fsm.StateNone:
		return !waiting // a start that recorded nothing
	case o.st.State.Terminal():
		return !waiting
	case o.phase == phaseClosing:
		return len(o.starters)+len(o.stoppers) == 0 && o.recovery == nil
	}
	return false
}

// exit ends the owner. After a simulated crash (runtime.Goexit in a crash
// hook, or Abandon) the process is gone: nothing is answered; what the
// kernel would let go of (connections, the lock) is let go of.
func (o *owner) exit() {
	o.stopSupervising()
	if o.h != nil {
		_ = o.h.Close()
	}
	o.release()
	if o.cancelJob != nil {
		o.cancelJob(ErrClosed)
	}
	if o.phase == phaseEnded {
		for _, w := range o.watchers {
			w <- reply{task: o.st, err: &TaskError{Task: o.st.ID, State: o.st.State, Err: ErrClosed}}
		}
	}
	o.d.mu.Lock()
	if o.d.tasks[o.t.id] == o.t {
		delete(o.d.tasks, o.t.id)
	}
	o.d.mu.Unlock()
	close(o.t.gone)
	o.d.owners.Done()
}

func (o *owner) serve(req request) {
	if o.phase == phaseFresh {
		o.phase = phaseIdle
	}
	switch req.kind {
	case inStart, inCreate:
		o.start(req)
	case inStartCreated:
		o.startCreated(req)
	case inStop:
		o.stop(req)
	case inWatch:
		o.watch(req)
	case inRecover:
		o.recover(req)
	case inReady:
		o.ready(req)
	case inInspect:
		if o.st.State == fsm.StateNone {
			req.reply <- reply{err: &TaskError{Task: o.t.id, Err: ErrUnknownTask}}
			return
		}
		req.reply <- reply{task: o.st}
	}
}

func (o *owner) taskErr(err error) error {
	return &TaskError{Task: o.st.ID, State: o.st.State, Err: err}
}

// start records a new task and starts driving it: task-created with the
// spawn intent in one append (or with config-rejected, when the spec is
// refused before anything is spawned). The append expects a task that does
// not exist yet: one the log already holds conflicts, and is answered
// ErrTaskExists (no read of the log first: a start is one commit fewer).
// A create (inCreate) records task-created alone: the task waits.
func (o *owner) start(req request) {
	id := o.t.id
	if o.st.State != fsm.StateNone {
		req.reply <- reply{task: o.st, err: o.taskErr(ErrTaskExists)}
		return
	}
	exists := func() {
		o.release()
		req.reply <- reply{task: o.st, err: o.taskErr(ErrTaskExists)}
	}
	unlock, holder, err := o.d.world.LockTask(id)
	if err != nil {
		req.reply <- reply{err: &TaskError{Task: id, Err: err}}
		return
	}
	if unlock == nil {
		req.reply <- reply{err: &TaskError{Task: id, Err: fmt.Errorf("%w: process %d is starting a task with this id", ErrTaskExists, holder)}}
		return
	}
	o.unlock = unlock
	created := o.d.event(fsm.EventCreated)
	created.Spec, created.Replaces = &req.spec, req.link
	if verr := o.d.validateSpec(req.spec); verr != nil {
		rej := o.d.event(fsm.EventConfigRejected)
		rej.Reason, rej.Cause = verr.Error(), causeOf(verr)
		recorded, aerr := o.record(created, rej)
		if aerr == nil && !recorded {
			exists()
			return
		}
		o.discardIfUnrecorded()
		o.release()
		req.reply <- reply{task: o.st, err: &TaskError{Task: id, State: o.st.State, Err: errors.Join(verr, aerr)}}
		return
	}
	inputs := []fsm.Event{created}
	if req.kind == inStart {
		intent := o.d.event(fsm.EventSpawnIntent)
		intent.Nonce = o.d.cfg.NewNonce()
		inputs = append(inputs, intent)
	}
	recorded, err := o.record(inputs...)
	if err != nil {
		o.discardIfUnrecorded()
		o.release()
		req.reply <- reply{task: o.st, err: err}
		return
	}
	if !recorded {
		exists()
		return
	}
	if req.kind == inCreate {
		o.release()
		req.reply <- reply{task: o.st}
		return
	}
	o.phase = phaseDriving
	o.starters = append(o.starters, req.reply)
}

// startCreated starts a task that waits for its turn: the spawn intent,
// then the start's effects, as start does for a new task. A task that no
// longer waits (another process started or settled it) is answered
// ErrNotWaiting with its state.
func (o *owner) startCreated(req request) {
	notWaiting := func() {
		req.reply <- reply{task: o.st, err: o.taskErr(fmt.Errorf("%w: it is %s", ErrNotWaiting, o.st.State))}
	}
	switch {
	case o.st.State == fsm.StateNone:
		req.reply <- reply{err: &TaskError{Task: o.t.id, Err: ErrUnknownTask}}
		return
	case o.st.State != fsm.StateCreated || o.phase == phaseDriving || o.job != jobNone:
		notWaiting()
		return
	}
	unlock, holder, err := o.d.world.LockTask(o.t.id)
	if err != nil {
		req.reply <- reply{task: o.st, err: o.taskErr(err)}
		return
	}
	if unlock == nil {
		req.reply <- reply{task: o.st, err: o.taskErr(fmt.Errorf("%w: process %d is driving it", ErrNotWaiting, holder))}
		return
	}
	o.unlock = unlock
	if err := o.reload(); err != nil { // another process may have moved it
		o.release()
		req.reply <- reply{task: o.st, err: err}
		return
	}
	if o.st.State != fsm.StateCreated {
		o.release()
		notWaiting()
		return
	}
	intent := o.d.event(fsm.EventSpawnIntent)
	intent.Nonce = o.d.cfg.NewNonce()
	recorded, err := o.record(intent)
	switch {
	case err != nil:
		o.release()
		req.reply <- reply{task: o.st, err: err}
		return
	case !recorded:
		o.release()
		notWaiting()
		return
	}
	o.phase = phaseDriving
	o.starters = append(o.starters, req.reply)
}

// waits reports whether the task is a task of a group that waits for its
// turn: recorded, nothing spawned, left to its group.
func (o *owner) waits() bool {
	return o.st.State == fsm.StateCreated && o.st.Spec != nil && o.st.Spec.Alloc != nil
}

// discardIfUnrecorded removes the task's directory when the start's
// first append recorded nothing (as far as the log can be read), while the
// task's lock is still held: the start read nothing before it appended,
// so the directory its lock made is all it left.
func (o *owner) discardIfUnrecorded() {
	if o.st.State == fsm.StateNone && o.unlock != nil {
		o.d.world.DiscardTask(o.t.id)
	}
}

// stop records the stop request, cancels a start effect in flight, and
// drives the kill. A task already reaping gets this stop's signal and grace
// when they are sooner.
func (o *owner) stop(req request) {
	switch {
	case o.st.State == fsm.StateNone:
		req.reply <- reply{err: &TaskError{Task: o.t.id, Err: ErrUnknownTask}}
		return
	case o.st.State.Terminal():
		req.reply <- reply{task: o.st}
		return
	}
	sig, grace := o.d.stopDefaults(o.st.Spec, req.sig, req.grace)
	if o.st.State == fsm.StateReaping {
		o.escalate(sig, grace)
		o.drive()
		o.stoppers = append(o.stoppers, req.reply)
		return
	}
	in := o.d.event(fsm.EventStopRequested)
	in.Signal, in.Grace, in.ReplacedBy = int(sig), grace, req.link
	if _, err := o.record(in); err != nil {
		req.reply <- reply{task: o.st, err: err}
		return
	}
	if o.st.State.Terminal() { // a task that was only created
		req.reply <- reply{task: o.st}
		return
	}
	o.cancelStart(errStopRequested)
	o.drive()
	o.stoppers = append(o.stoppers, req.reply)
}

var errStopRequested = errors.New("stop requested")

// escalate makes the kill under way (or the next one) use sig and grace.
// The executor keeps the earliest deadline, so a later stop can only make
// the kill sooner.
func (o *owner) escalate(sig syscall.Signal, grace time.Duration) {
	o.kill = &killOverride{sig: sig, grace: grace}
	if o.job != jobKill {
		return
	}
	h, timeout := o.h, o.d.cfg.EffectTimeout+grace
	id := o.st.Executor
	if h == nil && id == nil {
		return // no executor known: the kill in flight looks it up by nonce
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if h == nil {
			// The kill in flight reattached on its own connection (a
			// task this driver did not start): reach the executor on
			// another, through the proven identity.
			r, err := o.d.world.Reattach(ctx, o.t.id, *id)
			if err != nil {
				return // gone or not ours: the kill in flight sees to it
			}
			defer r.Close()
			h = r
		}
		_, _ = h.Stop(ctx, sig, grace) // the kill in flight collects the outcome
	}()
}

// drive makes this owner perform what the task owes, holding the task's
// lock when it can be had (another live process may be driving it too;
// both are idempotent, and their appends are ordered by version).
func (o *owner) drive() {
	o.phase = phaseDriving
	if o.unlock == nil {
		if unlock, _, err := o.d.world.LockTask(o.t.id); err == nil {
			o.unlock = unlock
		}
	}
}

// rest lets go of the task's lock and ends driving: the owner supervises
// the task if a supervisor follows it, closes if the driver is closing,
// else idles. An owner that was not driving keeps its phase.
func (o *owner) rest() {
	o.release()
	if o.phase != phaseDriving {
		return
	}
	switch {
	case o.d.isClosing():
		o.stopSupervising()
		o.phase = phaseClosing
	case o.supC != nil:
		o.phase = phaseSupervising
	default:
		o.phase = phaseIdle
	}
}

func (o *owner) release() {
	if o.unlock != nil {
		o.unlock()
		o.unlock = nil
	}
}

// watch answers when the task is terminal, and makes sure its end will be
// noticed: a running task nobody here supervises gets a supervisor, a task
// nobody drives is reconciled.
func (o *owner) watch(req request) {
	switch {
	case o.st.State == fsm.StateNone:
		req.reply <- reply{err: &TaskError{Task: o.t.id, Err: ErrUnknownTask}}
		return
	case o.st.State.Terminal():
		req.reply <- reply{task: o.st}
		return
	case o.waits() && o.phase != phaseDriving && o.job == jobNone:
		req.reply <- reply{task: o.st, err: o.taskErr(fmt.Errorf("%w (group %s)", ErrWaiting, o.st.Spec.Alloc.ID))}
		return
	}
	o.watchers = append(o.watchers, req.reply)
	if req.cancel != nil {
		if o.cancels == nil {
			o.cancels = map[chan reply]<-chan struct{}{}
		}
		o.cancels[req.reply] = req.cancel
	}
	if req.progress != nil {
		if o.followers == nil {
			o.followers = map[chan reply]chan fsm.Task{}
		}
		o.followers[req.reply] = req.progress
		req.progress <- o.st // where the follow begins
	}
	if o.phase == phaseDriving || o.phase == phaseSupervising || o.job != jobNone {
		return
	}
	o.reconcile()
}

// recover reconciles the task with reality, unless it is being driven
// here or in another live process.
//
// A request that holds the task's lock (req.held) comes from Recover,
// which read the state this owner was started on, took the lock and, for
// a running task, asked its executor (req.probed): the owner goes on from
// there, with no read and no lock of its own.
func (o *owner) recover(req request) {
	from := o.st.State
	if req.held != nil {
		o.recovery = &recovering{reply: req.reply, from: from}
		o.unlock = req.held
		if r := req.probed; r != nil {
			o.phase = phaseDriving
			o.job = r.kind
			o.jobDone(*r)
			return
		}
		o.decide()
		return
	}
	done := func(action string) {
		req.reply <- reply{task: o.st, report: TaskReport{ID: o.t.id, From: from, To: o.st.State, Action: action}}
	}
	switch {
	case o.st.State == fsm.StateNone:
		req.reply <- reply{err: &TaskError{Task: o.t.id, Err: ErrUnknownTask}}
		return
	case o.st.State.Terminal():
		done("already " + o.st.State.String())
		return
	case o.phase == phaseDriving || o.job != jobNone || o.recovery != nil:
		done("in progress in this driver; left to it")
		return
	case o.phase == phaseSupervising && o.h != nil:
		// A task this driver supervises is asked about as a recovery in
		// another process would ask: its executor now, so that an end (or
		// a restart) its supervisor has not reported yet is recorded
		// before the answer. A name check or a status in a long-lived
		// driver (an agent's) then sees what a daemonless command sees.
		o.recovery = &recovering{reply: req.reply, from: from}
		o.drive()
		o.startJob(jobProbe, o.d.cfg.ProbeTimeout, nil)
		return
	case o.phase == phaseSupervising:
		done("supervised by this driver")
		return
	}
	o.recovery = &recovering{reply: req.reply, from: from}
	o.reconcile()
}

// reconcile decides, from the log and reality, what happened to a task
// nobody here is driving (the crash-window table of docs/DESIGN.md):
//
//	created        nothing was spawned: start-interrupted, failed
//	spawning       start-interrupted; the executor is found by nonce, killed
//	executor-up    start-interrupted; the executor is killed (Nomad's leak)
//	launching      reattach and ask: launched -> supervise; else interrupted
//	launched       the attach effect it owes: reattach, confirm, supervise
//	running,       reattach with the identity check and supervise; or the
//	restarting     exit status left on disk; or lost and killed; an
//	               executor alive but not answering is left alone
//	reaping        kill again by identity (at once: the stop that asked for
//	               a grace is gone), confirm dead, record reaped
func (o *owner) reconcile() {
	unlock, holder, err := o.d.world.LockTask(o.t.id)
	if err != nil {
		o.concludeRecovery("", err)
		o.failWatchers(err)
		return
	}
	if unlock == nil {
		o.concludeRecovery(leftTo(holder), nil)
		if len(o.watchers) > 0 {
			o.startJob(jobLockWait, o.d.cfg.EffectTimeout, nil) // wait for it to finish
		}
		return
	}
	o.unlock = unlock
	if err := o.reload(); err != nil { // the log may have moved while nobody here held the lock
		o.release()
		o.concludeRecovery("", err)
		o.failWatchers(err)
		return
	}
	o.decide()
}

// leftTo is a recovery's report of a task a live process drives.
func leftTo(holder int) string {
	return fmt.Sprintf("being driven by process %d; left to it", holder)
}

// decide acts on the state the owner holds, with the task's lock held:
// the switch of reconcile (whose table says what each state gets).
func (o *owner) decide() {
	interrupted := func(reason, action string) {
		ev := o.d.event(fsm.EventStartInterrupted)
		ev.Reason, ev.Cause = reason, fsm.CauseOther
		o.setAction(action)
		o.kill = &killOverride{sig: syscall.SIGKILL}
		o.phase = phaseDriving
		if _, err := o.record(ev); err != nil {
			o.giveUp(err)
		}
	}
	switch o.st.State {
	case fsm.StateCreated:
		if o.waits() {
			// A task of a group waits for its turn: its group (RunGroup)
			// starts it, or settles it, when the group's other tasks say.
			o.release()
			o.concludeRecovery("waits for its turn in group "+o.st.Spec.Alloc.ID+"; left to its group", nil)
			o.failWatchers(fmt.Errorf("%w (group %s)", ErrWaiting, o.st.Spec.Alloc.ID))
			return
		}
		interrupted("the driver stopped before spawning an executor; nothing was spawned", "nothing was spawned; recorded failed")
	case fsm.StateSpawning:
		interrupted("the driver stopped while spawning the executor", "spawn interrupted; executor looked up by nonce and killed")
	case fsm.StateExecutorUp:
		interrupted("the driver stopped before launching the task", "executor up but task never launched; executor killed")
	case fsm.StateLaunching:
		o.phase = phaseDriving
		o.startJob(jobProbeLaunch, o.d.cfg.ProbeTimeout*2, nil)
	case fsm.StateLaunched:
		o.setAction("reattached; supervision attached")
		o.phase = phaseDriving // it owes the attach effect
	case fsm.StateRunning, fsm.StateRestarting:
		o.phase = phaseDriving
		o.startJob(jobProbe, o.d.cfg.ProbeTimeout*2, nil)
	case fsm.StateReaping:
		o.setAction("reaping resumed; executor killed by identity")
		o.kill = &killOverride{sig: syscall.SIGKILL}
		o.phase = phaseDriving
	default:
		o.release()
		o.concludeRecovery("nothing to do in state "+o.st.State.String(), nil)
	}
}

func (o *owner) setAction(a string) {
	if o.recovery != nil && a != "" {
		o.recovery.action = a
	}
}

func (o *owner) concludeRecovery(action string, err error) {
	if o.recovery == nil {
		return
	}
	r := o.recovery
	o.recovery = nil
	if action == "" {
		action = r.action
	}
	rep := TaskReport{ID: o.t.id, From: r.from, To: o.st.State, Action: action}
	if err != nil {
		rep.Err = &TaskError{Task: o.t.id, State: r.from, Err: err}
	}
	r.reply <- reply{task: o.st, report: rep}
}

func (o *owner) failWatchers(err error) {
	for _, w := range o.watchers {
		w <- reply{task: o.st, err: o.taskErr(err)}
	}
	o.watchers = nil
}

// advance answers the callers whose condition is met, lets go of the lock
// once the task is stable, and starts the next owed effect.
func (o *owner) advance() {
	st := o.st.State
	switch {
	case st.Terminal():
		if o.job == jobNone {
			o.rest()
		}
		for _, s := range o.starters {
			s <- o.startReply()
		}
		o.starters = nil
		for _, w := range append(o.stoppers, o.watchers...) {
			w <- reply{task: o.st}
		}
		o.stoppers, o.watchers = nil, nil
		o.concludeRecovery("", nil)
	case (st == fsm.StateRunning || st == fsm.StateRestarting) && o.job == jobNone && len(o.owed) == 0:
		for _, s := range o.starters {
			s <- o.startReply()
		}
		o.starters = nil
		o.concludeRecovery("", nil)
		if o.phase == phaseDriving {
			o.rest()
		}
		if o.supC == nil && o.h != nil && o.phase != phaseClosing {
			o.supervise()
		}
	}
	if o.job == jobNone && o.phase == phaseDriving && o.retryC == nil && len(o.owed) > 0 {
		o.perform(o.owed[0])
	}
}

// startReply is StartTask's answer once the start is over.
func (o *owner) startReply() reply {
	st := o.st
	switch {
	case st.State == fsm.StateRunning || st.State == fsm.StateRestarting:
		return reply{task: st}
	case st.State == fsm.StateExited:
		return reply{task: st} // a quick task: it ran, and exited before the start returned
	case o.lastErr != nil:
		return reply{task: st, err: o.taskErr(fmt.Errorf("%w: %w", ErrStartFailed, o.lastErr))}
	}
	reason := st.Reason
	if reason == "" {
		reason = "ended " + st.State.String()
	}
	return reply{task: st, err: o.taskErr(fmt.Errorf("%w: %s", ErrStartFailed, reason))}
}

// giveUp stops driving after an error the owner cannot get past (an append
// that failed, a kill that kept failing): the log keeps what is durable and
// a later Recover reconciles it. Everyone waiting is told why.
//
// A task that is no longer in the store at all (a maintenance replaced the
// store with one that lacks it, or removed it) is in no log that a Recover
// could reconcile: its processes are killed here, by what this owner knows
// of them, and the error says so (ErrVanished).
func (o *owner) giveUp(err error) {
	if errors.Is(err, store.ErrUnknownTask) && o.st.Version > 0 {
		err = o.vanished(err)
	} else {
		o.log.Error("giving up on the task for now; Recover will reconcile it", "err", err, "state", o.st.State.String())
	}
	o.retryC = nil
	o.rest()
	for _, s := range append(append(o.starters, o.stoppers...), o.watchers...) {
		s <- reply{task: o.st, err: err}
	}
	o.starters, o.stoppers, o.watchers = nil, nil, nil
	o.concludeRecovery("", err)
}

// vanished kills everything this owner knows of a task that the store no
// longer holds (its executor by its proven identity or its spawn nonce,
// its cgroup, its process group), and returns the error that says so.
func (o *owner) vanished(cause error) error {
	o.stopSupervising()
	ctx, cancel := context.WithTimeout(context.Background(), o.d.cfg.EffectTimeout)
	defer cancel()
	k := recoveryKill{world: o.d.world, probe: o.d.cfg.ProbeTimeout, task: o.t.id, id: o.st.Executor, nonce: o.st.Nonce,
		run: o.st.TaskProc(), sig: syscall.SIGKILL, conn: o.h}
	o.h, o.final = nil, nil
	_, id, kerr := k.kill(ctx)
	what := "nothing of it was alive"
	switch {
	case kerr != nil:
		what = fmt.Sprintf("killing what was spawned for it failed (%v); look at %s", kerr, o.d.TaskDir(o.t.id))
	case id != nil:
		what = fmt.Sprintf("its executor (pid %d) and its task were killed", id.PID)
	}
	o.log.Error("the task is no longer in the store; nothing can reconcile it, so what was spawned for it is killed", "err", cause, "state", o.st.State.String(), "kill", what)
	return o.taskErr(fmt.Errorf("%w (%w): %s", ErrVanished, cause, what))
}

// record steps the task with inputs and appends the resulting events in one
// commit before anything else (write-ahead), then folds them. It returns
// false, nil when the inputs no longer apply because the task moved on (a
// late outcome of an effect that a stop overtook, or a stop of a task
// already reaping). A conflict with another process's append reloads the
// log and steps the inputs again.
func (o *owner) record(inputs ...fsm.Event) (bool, error) {
	reread := false
	for attempt := 0; ; attempt++ {
		events, effects, err := fsm.StepAll(o.st, inputs...)
		if errors.Is(err, fsm.ErrIllegalTransition) && o.st.Version > 0 {
			if !reread {
				// Another process may have moved the log (a stop of a
				// task in its restart delay recorded there, whose end
				// this owner's supervisor reports): step again on what
				// the log holds, once. Without this, the owner kept a
				// stale state and its supervisor the same end, in a loop.
				reread = true
				if moved, rerr := o.logMoved(); rerr != nil {
					return false, rerr
				} else if moved {
					continue
				}
			}
			o.log.Debug("dropping input that no longer applies", "event", inputs[0].Type.String(), "state", o.st.State.String())
			return false, nil
		}
		if err != nil {
			return false, o.taskErr(err)
		}
		if len(events) == 0 {
			return false, nil
		}
		for _, e := range events { // a fault named for any event of the commit fails it
			if err := o.d.hooks.fault("append:"+e.Type.String(), o.t.id); err != nil {
				return false, o.taskErr(err)
			}
		}
		for _, e := range events {
			o.d.hooks.crash(crashBeforeAppend+e.Type.String(), o.t.id)
		}
		_, err = o.d.store.Append(context.Background(), o.st.ID, o.st.Version, events...)
		if errors.Is(err, store.ErrConflict) && attempt < 8 {
			o.log.Debug("another process appended first; reloading", "err", err)
			if rerr := o.reload(); rerr != nil {
				return false, rerr
			}
			continue
		}
		if err != nil {
			// The outcome is unknown: the append may have committed before
			// it failed (its acknowledgement lost). Hold what the log holds.
			if rerr := o.reload(); rerr != nil && o.st.Version > 0 {
				o.log.Warn("could not reload the task after a failed append", "err", rerr)
			}
			return false, o.taskErr(err)
		}
		for _, e := range events {
			o.d.hooks.crash(crashAfterAppend+e.Type.String(), o.t.id)
		}
		next, err := fsm.FoldAll(o.st, events...)
		if err != nil {
			// StepAll just validated these events: a failure here is a bug.
			panic(fmt.Sprintf("driver: fold of stepped events failed: %v", err))
		}
		o.setState(next)
		o.owed = effects
		return true, nil
	}
}

// logMoved reloads the state when the log holds more than the owner does
// (another process appended), and reports whether it did.
func (o *owner) logMoved() (bool, error) {
	st, err := o.d.store.LoadTask(context.Background(), o.t.id)
	if err != nil {
		return false, o.taskErr(err)
	}
	if st.Version == o.st.Version {
		return false, nil
	}
	o.setState(st)
	o.owed = fsm.Pending(st)
	return true, nil
}

// reload replaces the state with the log's.
func (o *owner) reload() error {
	st, err := o.d.store.LoadTask(context.Background(), o.t.id)
	if err != nil {
		return o.taskErr(err)
	}
	o.setState(st)
	o.owed = fsm.Pending(st)
	return nil
}

// setState makes next the task's state: published to readers, logged, and
// the task's end announced once it is durably terminal.
func (o *owner) setState(next fsm.Task) {
	from := o.st.State
	o.st = next
	o.t.view.Store(&next)
	if next.State != from {
		o.log.Info("transition", "state", next.State.String(), "from", from.String())
	}
	if next.State != fsm.StateRunning && next.State != fsm.StateLaunched && next.State != fsm.StateRestarting {
		o.stopSupervising()
	}
	if next.State.Terminal() && !from.Terminal() {
		close(o.t.done)
	}
	o.notifyFollowers()
}

// pruneWatchers forgets the watchers whose caller gave up, so that an
// abandoned WaitTask neither keeps a task's owner alive nor has a task
// left alone probed again and again.
func (o *owner) pruneWatchers() {
	if len(o.cancels) == 0 {
		return
	}
	keep := o.watchers[:0]
	for _, w := range o.watchers {
		if c := o.cancels[w]; c != nil {
			select {
			case <-c:
				delete(o.cancels, w)
				delete(o.followers, w)
				continue
			default:
			}
		}
		keep = append(keep, w)
	}
	o.watchers = keep
	if len(o.cancels) > len(keep) { // answered watchers: forget them too
		live := make(map[chan reply]<-chan struct{}, len(keep))
		for _, w := range keep {
			if c, ok := o.cancels[w]; ok {
				live[w] = c
			}
		}
		o.cancels = live
	}
}

// notifyFollowers hands the state to every watcher that follows the task
// (never blocking: a state not yet read is replaced by this one), and
// forgets the followers whose watch has been answered.
func (o *owner) notifyFollowers() {
	if len(o.followers) == 0 {
		return
	}
	live := make(map[chan reply]chan fsm.Task, len(o.followers))
	for _, w := range o.watchers {
		if p, ok := o.followers[w]; ok {
			live[w] = p
			select {
			case <-p:
			default:
			}
			p <- o.st
		}
	}
	o.followers = live
}

// cancelStart cancels a start effect or probe in flight (a stop overtook
// it); its outcome still comes back and is dropped if it no longer applies.
func (o *owner) cancelStart(cause error) {
	if o.job != jobNone && o.job != jobKill && o.cancelJob != nil {
		o.cancelJob(cause)
	}
}

// supervise follows the running task in the background: the restarts
// its executor performs and its end. Closing the driver ends supervision
// without touching the task.
func (o *owner) supervise() {
	if o.supC != nil || o.h == nil {
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background()) // stopSupervising (at the owner's exit too) cancels it
	c := make(chan report, 1)
	go o.d.superviseLoop(ctx, o.h, o.st, c)
	o.supC, o.supStop = c, cancel
	if o.phase == phaseIdle {
		o.phase = phaseSupervising
	}
}

func (o *owner) stopSupervising() {
	if o.supStop != nil {
		o.supStop(nil)
	}
	o.supC, o.supStop = nil, nil
	if o.phase == phaseSupervising {
		o.phase = phaseIdle
	}
}

// supervised records what the supervisor reported: restarts the log
// lacks, and the task's end, whose reaping it then drives.
func (o *owner) supervised(r report) {
	if r.from > o.st.RestartEvents() && o.h != nil {
		// Entries before this report were reported and not recorded (an
		// append that failed): follow the journal again from the log.
		o.stopSupervising()
		o.supervise()
		return
	}
	if len(r.end) > 0 {
		o.stopSupervising() // the supervisor has ended
		o.final = r.final
		o.drive()
	}
	inputs := o.d.inputs(o.st, r)
	if len(inputs) == 0 {
		return
	}
	if _, err := o.record(inputs...); err != nil {
		// The supervisor is past what the log holds: stop it, so that a
		// Recover reconciles the task (from the journal) rather than
		// leave it to a supervision that will not report it again.
		o.stopSupervising()
		o.giveUp(err)
		return
	}
	if len(o.owed) > 0 {
		o.drive() // a failed relaunch: reaping
	}
}

// killUnrecorded kills an executor whose spawn the log does not (or no longer)
// say is alive: an executor-up that could not be recorded, or a spawn that
// a stop overtook and reaped without it.
func (o *owner) killUnrecorded() {
	h := o.h
	o.h = nil
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.d.cfg.EffectTimeout)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		_ = o.d.world.Kill(ctx, o.t.id, h.Identity())
	}
	_ = h.Close()
}
