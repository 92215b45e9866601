package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// TaskReport says what a reconciliation did with one task.
type TaskReport struct {
	ID     string
	From   fsm.State // the state the log held
	To     fsm.State // the state after reconciliation
	Action string
	Err    error
}

// Report is what Recover or Reconcile did, one entry per task, sorted by id.
type Report struct {
	Tasks []TaskReport
}

// Recover reconciles every live task in the store with the process table:
// Reconcile of every live task, their logs read in one read of the store.
// A log that hands its tasks on as it reads them (store.LiveLoader: the
// bbolt store, alone or shared) has the first reconciled while the others
// are still being read; any other is read whole first (LoadTasks). Call
// it once after opening a driver on a state directory that a crashed
// driver used. A task it cannot read is reported with its error, and the
// others are reconciled all the same.
func (d *Driver) Recover(ctx context.Context) (Report, error) {
	f := newFeed()
	var (
		incomplete, err error
		read            = make(chan struct{})
	)
	if l, ok := d.store.(store.LiveLoader); ok {
		go func() {
			defer close(read)
			defer f.close()
			incomplete, err = l.LoadLive(ctx, func(t fsm.Task, err error) {
				if err != nil {
					f.add(recoverItem{id: t.ID, err: err})
					return
				}
				f.add(recoverItem{id: t.ID, st: t, read: true})
			})
		}()
	} else {
		var sc store.Scan
		sc, err = d.store.LoadTasks(ctx, store.LiveTasks)
		for _, t := range sc.Tasks {
			f.add(recoverItem{id: t.ID, st: t, read: true})
		}
		for _, u := range sc.Unreadable {
			f.add(recoverItem{id: u.Task, err: u.Err})
		}
		incomplete = sc.Incomplete
		f.close()
		close(read)
	}
	rep, rerr := d.reconcile(ctx, f, recoverWorkers)
	<-read
	if err != nil && len(rep.Tasks) == 0 {
		return Report{}, err
	}
	return rep, errors.Join(rerr, err, incomplete)
}

// Reconcile replays the given tasks from the store and reconciles each with
// reality, as the crash-window table of docs/DESIGN.md says (see
// owner.reconcile):
//
//	created        nothing was spawned: start-interrupted, failed
//	spawning       start-interrupted; the executor found by nonce is killed
//	executor-up    start-interrupted; the executor is killed (Nomad's leak)
//	launching      reattach and ask: launched -> supervise; else killed
//	launched,      reattach with the identity check and supervise; or
//	running,       collect the exit status left on disk (if it matches the
//	restarting     log); or kill everything of the task, lost
//	reaping        kill again by identity, confirm dead, record reaped
//
// Reconciliation is an input to each task's owner like any other, so it is
// safe beside live calls on the same driver: a task this driver (or another
// live process) is starting, stopping or supervising is left to it, and a
// start in progress is never failed. It is idempotent and crash-safe:
// every step is a durable append, so a reconciliation interrupted anywhere
// is finished by the next one. Tasks are reconciled concurrently.
//
// Each task's log is read once, and a task gets an owner (a goroutine with
// its channels, owner.go) only when it needs one: one this driver has
// already, or one whose state owes an effect or whose probe found
// something to record; that one's log is read again under its lock, so
// that the owner starts on what the log holds. A running task whose
// executor answers with nothing new is reconciled where it stands (its
// identity proven, its executor asked, its lock let go) and gets none:
// its end is noticed by whoever next asks (WaitTask, which supervises it;
// InspectTask and a reconcile of it).
func (d *Driver) Reconcile(ctx context.Context, ids ...string) (Report, error) {
	f := newFeed()
	for _, id := range ids {
		f.add(recoverItem{id: id})
	}
	f.close()
	return d.reconcile(ctx, f, min(len(ids), recoverWorkers))
}

// recoverItem is a task for reconcile: its id, and the state read for it
// (read), or why it could not be read.
type recoverItem struct {
	id   string
	st   fsm.Task
	read bool
	err  error
}

// recoverWorkers bounds how many tasks a reconciliation handles at once:
// a probe waits for an executor's answer (another process), so more than
// the CPUs keeps them busy; each worker takes the next task when it is
// done with one.
const recoverWorkers = 64

// feed hands the tasks of a reconciliation to its workers in the order
// they come, as a read of the store delivers them, and keeps each one's
// report at its place.
type feed struct {
	mu      sync.Mutex
	more    *sync.Cond // signalled when an item comes, broadcast at close
	items   []recoverItem
	reports []TaskReport
	done    []bool // reports[i] is in
	next    int    // the next item to hand out
	closed  bool   // no item comes any more
}

func newFeed() *feed {
	f := &feed{}
	f.more = sync.NewCond(&f.mu)
	return f
}

func (f *feed) add(it recoverItem) {
	f.mu.Lock()
	f.items = append(f.items, it)
	f.reports = append(f.reports, TaskReport{})
	f.done = append(f.done, false)
	f.mu.Unlock()
	f.more.Signal()
}

func (f *feed) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.more.Broadcast()
}

// take waits for the next item; ok is false once none will come.
func (f *feed) take() (i int, it recoverItem, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.next == len(f.items) && !f.closed {
		f.more.Wait()
	}
	if f.next == len(f.items) {
		return 0, recoverItem{}, false
	}
	i = f.next
	f.next++
	return i, f.items[i], true
}

func (f *feed) put(i int, r TaskReport) {
	f.mu.Lock()
	f.reports[i], f.done[i] = r, true
	f.mu.Unlock()
}

// reconcile reconciles the tasks f delivers, workers at a time, and
// reports them sorted by id (those the context's end left out are not in
// the report; its error is).
func (d *Driver) reconcile(ctx context.Context, f *feed, workers int) (Report, error) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i, it, ok := f.take()
				if !ok {
					return
				}
				f.put(i, d.recoverOne(ctx, it))
			}
		})
	}
	wg.Wait()
	var rep Report
	f.mu.Lock()
	for i, r := range f.reports {
		if f.done[i] {
			rep.Tasks = append(rep.Tasks, r)
		}
	}
	f.mu.Unlock()
	sort.Slice(rep.Tasks, func(i, j int) bool { return rep.Tasks[i].ID < rep.Tasks[j].ID })
	var errs []error
	for _, r := range rep.Tasks {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

// recoverOne reconciles one task. A task with a live owner here is asked
// through it. Any other is claimed (claim), read unless Recover read it,
// and locked (LockTask: a task a live process drives is left to it); then
// a task in created that waits for its group is left to it, a running one
// is probed here (its executor's identity proven, reattached and asked),
// and an owner is started only for what needs one: a state that owes an
// effect, or a probe that found something to record (handOver).
func (d *Driver) recoverOne(ctx context.Context, it recoverItem) TaskReport {
	id := it.id
	if it.err != nil {
		return TaskReport{ID: id, Err: &TaskError{Task: id, Err: it.err}}
	}
	if err := ValidateTaskID(id); err != nil {
		return TaskReport{ID: id, Err: err}
	}
	owned, claimed, err := d.claim(id)
	switch {
	case err != nil:
		return TaskReport{ID: id, From: it.st.State, To: it.st.State, Err: err}
	case owned:
		return d.reconcileOne(ctx, id)
	case !claimed:
		return TaskReport{ID: id, From: it.st.State, To: it.st.State, Action: "in progress in this driver; left to it"}
	}
	handed := false
	defer func() {
		if !handed {
			d.unclaim(id)
		}
	}()
	st := it.st
	if !it.read {
		if st, err = d.store.LoadTask(ctx, id); err != nil {
			if errors.Is(err, store.ErrUnknownTask) {
				err = ErrUnknownTask
			}
			return TaskReport{ID: id, Err: &TaskError{Task: id, Err: err}}
		}
	}
	rep := TaskReport{ID: id, From: st.State, To: st.State}
	if st.State.Terminal() {
		rep.Action = "already " + st.State.String()
		return rep
	}
	unlock, holder, err := d.world.LockTask(id)
	if err != nil {
		rep.Err = &TaskError{Task: id, State: st.State, Err: err}
		return rep
	}
	if unlock == nil {
		rep.Action = leftTo(holder)
		return rep
	}
	var probed *jobResult
	switch {
	case st.State == fsm.StateCreated && st.Spec != nil && st.Spec.Alloc != nil:
		unlock()
		rep.Action = "waits for its turn in group " + st.Spec.Alloc.ID + "; left to its group"
		return rep
	case st.State == fsm.StateRunning:
		// Asked here, without an owner: the probe the owner would run.
		// Not under the caller's context (a caller that gives up must not
		// make a live task look lost); the questions to the executor are
		// bounded by ProbeTimeout in endOf, and the rest reads the process
		// table and the files the executor left.
		r := job{d: d, id: id, st: st}.probe(context.Background())
		r.kind = jobProbe
		if len(r.inputs) == 0 {
			// Alive with nothing new (or alive and not answering: left
			// alone, as the owner would): nothing to record, no owner.
			if r.h != nil {
				_ = r.h.Close()
			}
			unlock()
			rep.Action = r.action
			return rep
		}
		probed = &r
	}
	// An owner starts on what the log holds under the lock: the read
	// above came before it, and another process may have moved the task
	// on and let go of it in between (its owner would publish a state
	// older than one already acknowledged). So a task that needs an owner
	// is read again; a probe of a state the log has moved past is
	// dropped, and the owner asks again from where the log is.
	now, err := d.store.LoadTask(ctx, id)
	if err == nil && now.Version != st.Version {
		if probed != nil && probed.h != nil {
			_ = probed.h.Close()
		}
		probed = nil
		switch {
		case now.State.Terminal():
			unlock()
			rep.To, rep.Action = now.State, "already "+now.State.String()
			return rep
		case now.State == fsm.StateCreated && now.Spec != nil && now.Spec.Alloc != nil:
			unlock()
			rep.To, rep.Action = now.State, "waits for its turn in group "+now.Spec.Alloc.ID+"; left to its group"
			return rep
		}
	}
	if err != nil {
		if probed != nil && probed.h != nil {
			_ = probed.h.Close()
		}
		unlock()
		rep.Err = &TaskError{Task: id, State: st.State, Err: err}
		return rep
	}
	st = now
	req := request{kind: inRecover, reply: make(chan reply, 1), held: unlock, probed: probed}
	if !d.handOver(st, req) {
		// Abandoned meanwhile (a simulated crash): nothing more happens,
		// and what the process held is let go of.
		if r := req.probed; r != nil && r.h != nil {
			_ = r.h.Close()
		}
		unlock()
		return rep
	}
	handed = true
	select {
	case r := <-req.reply:
		if r.err != nil {
			return TaskReport{ID: id, From: st.State, To: r.task.State, Err: r.err}
		}
		return r.report
	case <-ctx.Done():
		return TaskReport{ID: id, From: st.State, To: st.State, Err: context.Cause(ctx)}
	}
}

// claim marks task id as being reconciled without an owner (claimed),
// unless it has a live owner here (owned) or another reconciliation here
// has claimed it (neither), or the driver is closed (ErrClosed). A claim
// counts as an owner for Close, which waits for it.
func (d *Driver) claim(id string) (owned, claimed bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return false, false, ErrClosed
	case d.tasks[id] != nil:
		return true, false, nil
	}
	if _, ok := d.claims[id]; ok {
		return false, false, nil
	}
	d.claims[id] = nil // a channel is made for the first caller that waits (lookup)
	d.owners.Add(1)
	return false, true, nil
}

// unclaim ends a claim without an owner.
func (d *Driver) unclaim(id string) {
	d.mu.Lock()
	c := d.claims[id]
	delete(d.claims, id)
	d.mu.Unlock()
	if c != nil {
		close(c)
	}
	d.owners.Done()
}

// handOver ends the claim on st's task by starting its owner on st, to
// serve req first. It reports false, starting nothing and keeping the
// claim, once the driver was abandoned. (A driver closing starts it: Close
// waits for the recovery it finishes.)
func (d *Driver) handOver(st fsm.Task, req request) bool {
	d.mu.Lock()
	select {
	case <-d.abandoned: // closed under d.mu
		d.mu.Unlock()
		return false
	default:
	}
	c := d.claims[st.ID]
	delete(d.claims, st.ID)
	d.startOwner(st, &req)
	d.mu.Unlock()
	if c != nil {
		close(c)
	}
	d.owners.Done()
	return true
}

func (d *Driver) reconcileOne(ctx context.Context, id string) TaskReport {
	r, err := d.ask(ctx, id, request{kind: inRecover})
	if err != nil {
		return TaskReport{ID: id, From: r.task.State, To: r.task.State, Err: err}
	}
	if r.err != nil {
		return TaskReport{ID: id, From: r.task.State, To: r.task.State, Err: r.err}
	}
	return r.report
}

// LockRecovery takes the state directory's recovery lock
// (statedir.Layout.RecoverLock), held for the length of a recovery of
// every live task, so that one runs at a time: a second Recover in
// another process would find the tasks locked by the first and leave them
// to it, and say nothing of what became of them. When another process
// holds it, busy is called with that process's pid (0 if unknown) before
// the wait, which ends when the holder lets go (its process ends, at the
// latest) or ctx ends. The lock file names its holder's pid.
func LockRecovery(ctx context.Context, stateDir string, busy func(holder int)) (release func(), err error) {
	path := statedir.Layout{Dir: stateDir}.RecoverLock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("driver: recovery lock: %w", err)
	}
	fd := int(f.Fd())
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		holder := 0
		if b, rerr := os.ReadFile(path); rerr == nil {
			holder, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		busy(holder)
		got := make(chan error, 1)
		go func() {
			for {
				err := unix.Flock(fd, unix.LOCK_EX)
				if !errors.Is(err, unix.EINTR) {
					got <- err
					return
				}
			}
		}()
		select {
		case err = <-got:
		case <-ctx.Done():
			go func() { // owns f from here: lets go of whatever it gets
				if <-got == nil {
					_ = unix.Flock(fd, unix.LOCK_UN)
				}
				f.Close()
			}()
			return nil, ctx.Err()
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("driver: recovery lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = unix.Flock(fd, unix.LOCK_UN)
		f.Close()
	}, nil
}
