package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// Groups.
//
// The tasks of one allocation (a copy of a Nomad group; fsm.Spec.Alloc)
// are recorded together with CreateTask before any is spawned, and run as
// one: fsm.GroupState.Next decides, from their folded states alone, which
// to start, stop or settle next (Nomad's lifecycle hooks, sidecars, leader,
// a failure or a stop ending the group, poststop last). RunGroup is the
// loop that performs those steps until every task is terminal. One process
// at a time drives a group: it holds the group's lock (statedir's
// allocs/ALLOC/group.lock, flock) while RunGroup runs; the tether CLI does
// for run, a detached tether process for start, and an agent could. A
// process that finds the lock held waits for it: when the holder ends (its
// group over, or its process dead: the kernel lets the lock go), the
// waiter takes it and drives what is left, from the log. So a group
// whose driver was killed is finished by whoever next runs it (tether
// recover resumes every group nobody drives), and nothing in its decisions
// depends on memory that died with it.

// GroupStep is one step RunGroup performs (or waits on), for the caller
// to tell: what it settles, stops and starts, and why the group ends.
type GroupStep = fsm.GroupStep

// GroupProgress is what RunGroup (and StopGroup) tell their caller before
// each step: the step, and the tasks' states it was decided from.
type GroupProgress struct {
	Step  GroupStep
	Tasks []fsm.Task
}

// RunGroup drives the group whose tasks are ids (the allocation's tasks,
// Spec.Alloc.Tasks, in start order) until all of them are terminal, and
// returns their final states. It takes the group's lock first, waiting
// while another process holds it (wait false: it returns at once with a
// *GroupDrivenError naming the holder instead). fn, if not nil, is called
// with each step before it is performed (an idle one: before a wait), on
// RunGroup's goroutine. Stops use each task's kill_signal and
// kill_timeout. A ctx that ends leaves the group as it is: RunGroup stops
// nothing on its way out (tether run stops the group on Ctrl-C with
// StopGroup).
func (d *Driver) RunGroup(ctx context.Context, ids []string, wait bool, fn func(GroupProgress)) ([]fsm.Task, error) {
	return d.runGroup(ctx, ids, wait, false, 0, 0, fn)
}

// StopGroup stops the group whose tasks are ids as a stop of any of them
// asks: the tasks that run are stopped (the leader first, the sidecars
// last; sig and grace 0 take each task's own), those that never ran are
// settled, then the poststop tasks run, unless the group was already in
// its poststop phase, whose tasks are then stopped. The first wave is
// recorded at once, whoever drives the group; then StopGroup waits for the
// group's driver to finish it, or finishes it itself when nobody drives it
// (or its driver died). It returns the final states.
func (d *Driver) StopGroup(ctx context.Context, ids []string, sig syscall.Signal, grace time.Duration, fn func(GroupProgress)) ([]fsm.Task, error) {
	tasks, missing, err := d.loadGroup(ctx, ids)
	if err != nil {
		return tasks, err
	}
	step := fsm.GroupState{Tasks: tasks, Missing: missing, Stop: true}.Next()
	if fn != nil {
		fn(GroupProgress{Step: step, Tasks: tasks})
	}
	if err := d.performGroupStep(ctx, step, sig, grace); err != nil {
		return tasks, err
	}
	return d.runGroup(ctx, ids, true, false, sig, grace, fn)
}

// GroupTask is a task of a group to record: its id and spec (whose Alloc
// lists the group's ids), and the task it replaces (a later copy of the
// allocation: its task-created's Replaces), if any.
type GroupTask struct {
	ID       string
	Spec     fsm.Spec
	Replaces string `json:",omitempty"`
}

// CreateGroup records the tasks of one or more groups (each task's spec
// has an Alloc) before any is spawned, under the name rules: it holds the
// lock of every name among them while it checks that none is live (or,
// with opts.Replace, stops the live ones, each with its group), checks
// every spec (CheckSpec: one that is refused records nothing), then
// records each task with CreateTask. The tasks then wait for their group
// to start them (RunGroup). A failure part way records no more; the tasks
// recorded so far are settled by the next driver of their group (their
// group lists tasks the log does not hold), or the create is done again
// to complete it: a task among tasks that is recorded already, in the
// same allocation, is not recorded twice (its name is not taken by it),
// and is returned as it is.
func (d *Driver) CreateGroup(ctx context.Context, tasks []GroupTask, opts StartOptions) ([]fsm.Task, error) {
	var names []string
	ours := map[string]string{} // id -> alloc, of the tasks to record
	for _, t := range tasks {
		if t.Spec.Alloc != nil {
			ours[t.ID] = t.Spec.Alloc.ID
		}
	}
	for _, t := range tasks {
		if t.Spec.Alloc == nil {
			return nil, fmt.Errorf("%w: task %s has no alloc", ErrNotGroup, t.ID)
		}
		if err := ValidateTaskID(t.ID); err != nil {
			return nil, err
		}
		names = append(names, cmp.Or(t.Spec.Name, t.ID))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, name := range names { // in one order, so two creates cannot each hold a name the other waits for
		unlock, err := d.lockName(ctx, name)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	for _, name := range names {
		live, err := d.LiveNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		live = slices.DeleteFunc(live, func(t fsm.Task) bool {
			return t.Spec != nil && t.Spec.Alloc != nil && ours[t.ID] == t.Spec.Alloc.ID // this create's own, recorded before
		})
		if len(live) > 0 && !opts.Replace {
			return nil, &NameError{Name: name, Tasks: live, Err: ErrNameTaken}
		}
		for _, t := range live {
			if opts.Stopping != nil {
				opts.Stopping(t)
			}
			if a := t.Spec.Alloc; a != nil {
				_, err = d.StopGroup(ctx, a.Tasks, 0, 0, nil)
			} else {
				_, err = d.StopTask(ctx, t.ID, 0, 0)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	for _, t := range tasks {
		if err := d.CheckSpec(t.Spec); err != nil {
			return nil, &TaskError{Task: t.ID, Err: err}
		}
	}
	var out []fsm.Task
	for _, t := range tasks {
		st, err := d.begin(context.WithoutCancel(ctx), t.ID, request{kind: inCreate, spec: t.Spec, link: t.Replaces})
		if errors.Is(err, ErrTaskExists) {
			if info, ierr := d.InspectTask(ctx, t.ID); ierr == nil && info.Spec != nil && info.Spec.Alloc != nil && info.Spec.Alloc.ID == ours[t.ID] {
				out = append(out, info.Task) // recorded by an earlier create of the same copy
				continue
			}
		}
		if err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

// GroupDrivenError: another live process drives the group (it holds the
// group's lock).
type GroupDrivenError struct {
	Alloc  string
	Holder int // its pid, when the lock file names it
}

func (e *GroupDrivenError) Error() string {
	if e.Holder > 0 {
		return fmt.Sprintf("driver: group %s is driven by process %d", e.Alloc, e.Holder)
	}
	return fmt.Sprintf("driver: group %s is driven by another process", e.Alloc)
}

func (d *Driver) runGroup(ctx context.Context, ids []string, wait, stop bool, sig syscall.Signal, grace time.Duration, fn func(GroupProgress)) ([]fsm.Task, error) {
	tasks, _, err := d.loadGroup(ctx, ids)
	if err != nil {
		return tasks, err
	}
	alloc := allocOf(tasks)
	l, holder, err := d.lockGroup(ctx, alloc, wait)
	if err != nil {
		return tasks, err
	}
	if l == nil {
		return tasks, &GroupDrivenError{Alloc: alloc, Holder: holder}
	}
	defer l.Unlock()
	return d.driveGroup(ctx, l, ids, stop, sig, grace, fn)
}

// LockGroup takes the lock of the group alloc, as RunGroup does: at once,
// or (wait) once its holder lets go or ctx ends; without wait, a held
// lock returns nil and the holder's pid. A caller that drives several
// copies of an allocation in turn (agent.Local.DriveGroup) holds it
// across them, and drives each with RunGroupLocked.
func (d *Driver) LockGroup(ctx context.Context, alloc string, wait bool) (*GroupLock, int, error) {
	return d.lockGroup(ctx, alloc, wait)
}

// RunGroupLocked is RunGroup under the group's lock, held already by l
// (LockGroup): ids must be tasks of l's allocation.
func (d *Driver) RunGroupLocked(ctx context.Context, l *GroupLock, ids []string, fn func(GroupProgress)) ([]fsm.Task, error) {
	tasks, _, err := d.loadGroup(ctx, ids)
	if err != nil {
		return tasks, err
	}
	if a := allocOf(tasks); a != l.alloc {
		return tasks, fmt.Errorf("%w: the tasks are of group %s, the lock held is %s's", ErrNotGroup, a, l.alloc)
	}
	return d.driveGroup(ctx, l, ids, false, 0, 0, fn)
}

// driveGroup performs the group's steps under its lock l until every
// task is terminal. A copy due later (Alloc.NotBefore) is waited for,
// woken early when another process opens the group's lock (a stop that
// settled it, a driver that wants to take over): the log is read again.
func (d *Driver) driveGroup(ctx context.Context, l *GroupLock, ids []string, stop bool, sig syscall.Signal, grace time.Duration, fn func(GroupProgress)) ([]fsm.Task, error) {
	var tasks []fsm.Task
	var err error

	// Followers watch the group's live tasks (each a FollowTask, which
	// supervises the task here when nobody else does) and say when one
	// changed.
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	followed := map[string]bool{}

	var last GroupStep
	var lastErr error
	var seen string
	for first := true; ; first = false {
		var missing []string
		if tasks, missing, err = d.loadGroup(ctx, ids); err != nil {
			return tasks, err
		}
		step := fsm.GroupState{Tasks: tasks, Missing: missing, Stop: stop, Now: d.cfg.Now().UnixNano()}.Next()
		stop = false
		// A task that changed where the step did not (a run that became
		// ready, a restart its executor made) is progress too: whoever
		// shows the group (an agent's status) must see it.
		now := progressKey(tasks)
		if fn != nil && (first || !step.Idle() || step.String() != last.String() || now != seen) {
			fn(GroupProgress{Step: step, Tasks: tasks})
		}
		seen = now
		if step.Over {
			return tasks, nil
		}
		if !step.Idle() {
			if lastErr != nil && slices.Equal(step.Start, last.Start) && slices.Equal(step.Stop, last.Stop) && slices.Equal(step.Settle, last.Settle) {
				// The same step again after it failed: the log did not
				// move, so it would fail again. Leave the rest to the next
				// driver of the group (tether recover).
				return tasks, lastErr
			}
			last, lastErr = step, d.performGroupStep(ctx, step, sig, grace)
			if err := ctx.Err(); err != nil {
				return tasks, err
			}
			continue
		}
		last, lastErr = step, nil
		for _, t := range tasks {
			if followed[t.ID] || t.State.Terminal() || t.State == fsm.StateCreated {
				continue
			}
			followed[t.ID] = true
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				_, _ = d.FollowTask(fctx, id, func(fsm.Task) { poke() })
				poke()
			}(t.ID)
		}
		var timer *time.Timer
		var due <-chan time.Time
		var woken <-chan struct{}
		if step.Wake != 0 {
			timer = time.NewTimer(time.Duration(step.Wake - d.cfg.Now().UnixNano()))
			due, woken = timer.C, l.wakeups(d.log)
		}
		select {
		case <-changed:
		case <-due:
		case <-woken:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if timer != nil {
			timer.Stop()
		}
		if err != nil {
			return tasks, err
		}
	}
}

// progressKey sums up what a group's progress shows of its tasks: each
// one's state, readiness and restarts.
func progressKey(tasks []fsm.Task) string {
	var b strings.Builder
	for _, t := range tasks {
		fmt.Fprintf(&b, "%s:%s:%t:%d;", t.ID, t.State, t.Ready, t.RestartEvents())
	}
	return b.String()
}

// performGroupStep settles, stops and starts what step says, each set
// together, and returns what failed (a start that failed is the group's
// to decide on: its task is recorded failed; only errors that left a task
// as it was are returned).
func (d *Driver) performGroupStep(ctx context.Context, step GroupStep, sig syscall.Signal, grace time.Duration) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	do := func(ids []string, f func(string) (fsm.Task, error)) {
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := f(id)
				if err != nil && !st.State.Terminal() && !errors.Is(err, ErrNotWaiting) && !errors.Is(err, ErrStartFailed) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	do(step.Settle, func(id string) (fsm.Task, error) { return d.StopTask(ctx, id, sig, grace) })
	do(step.Stop, func(id string) (fsm.Task, error) { return d.StopTask(ctx, id, sig, grace) })
	wg.Wait()
	do(step.Start, func(id string) (fsm.Task, error) { return d.StartCreated(ctx, id) })
	wg.Wait()
	return errors.Join(errs...)
}

// loadGroup reads the group's tasks from the log, in the order of ids,
// and the ids the log does not hold. Every task it holds must name the
// same allocation, whose task list is ids.
func (d *Driver) loadGroup(ctx context.Context, ids []string) ([]fsm.Task, []string, error) {
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("%w: no task", ErrNotGroup)
	}
	var tasks []fsm.Task
	var missing []string
	alloc := ""
	for _, id := range ids {
		info, err := d.InspectTask(ctx, id)
		if errors.Is(err, ErrUnknownTask) {
			missing = append(missing, id)
			continue
		}
		if err != nil {
			return tasks, missing, err
		}
		if info.Spec == nil || info.Spec.Alloc == nil {
			return tasks, missing, fmt.Errorf("%w: task %s has no alloc", ErrNotGroup, id)
		}
		a := info.Spec.Alloc
		switch {
		case alloc != "" && a.ID != alloc:
			return tasks, missing, fmt.Errorf("%w: task %s is of group %s, not %s", ErrNotGroup, id, a.ID, alloc)
		case !slices.Equal(a.Tasks, ids):
			return tasks, missing, fmt.Errorf("%w: task %s's group lists %s, not %s", ErrNotGroup, id, strings.Join(a.Tasks, ","), strings.Join(ids, ","))
		}
		alloc = a.ID
		tasks = append(tasks, info.Task)
	}
	if alloc == "" {
		return tasks, missing, fmt.Errorf("%w: none of %s is recorded", ErrUnknownTask, strings.Join(ids, ", "))
	}
	return tasks, missing, nil
}

func allocOf(tasks []fsm.Task) string {
	for _, t := range tasks {
		if t.Spec != nil && t.Spec.Alloc != nil {
			return t.Spec.Alloc.ID
		}
	}
	return ""
}

// GroupLock is a group's lock, held (LockGroup).
type GroupLock struct {
	alloc string
	path  string
	f     *os.File

	mu     sync.Mutex
	wake   chan struct{}
	notify *os.File // the inotify instance watching the lock file, once wakeups is asked for
	done   bool
}

// Alloc is the group's allocation id.
func (l *GroupLock) Alloc() string { return l.alloc }

// Unlock lets go of the lock.
func (l *GroupLock) Unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	if l.notify != nil {
		l.notify.Close()
	}
	_ = l.f.Truncate(0)
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}

// wakeups receives whenever a process opens the group's lock file (a
// stop of the group waits for the lock after it settled the tasks, a
// driver that wants the group opens it to take it over): the holder,
// waiting out a copy's delay, reads the log again. Without inotify it
// never receives (the delay's timer still ends the wait).
func (l *GroupLock) wakeups(log hclog.Logger) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wake != nil || l.done {
		return l.wake
	}
	l.wake = make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err == nil {
		if _, err = unix.InotifyAddWatch(fd, l.path, unix.IN_OPEN); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		log.Warn("no wake-up when another process opens the group's lock; the delay's end wakes the driver", "alloc", l.alloc, "err", err)
		return l.wake
	}
	l.notify = os.NewFile(uintptr(fd), "inotify")
	go func(f *os.File, wake chan struct{}) {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return // closed by Unlock
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}(l.notify, l.wake)
	return l.wake
}

// lockGroup takes the group's lock: at once, or (wait) once its holder
// lets go or ctx ends. Without wait, a held lock returns a nil lock and
// the holder's pid.
func (d *Driver) lockGroup(ctx context.Context, alloc string, wait bool) (*GroupLock, int, error) {
	if err := statedir.ValidateTaskID(alloc); err != nil {
		return nil, 0, fmt.Errorf("driver: group id: %w", err)
	}
	a := statedir.Layout{Dir: d.cfg.StateDir}.Alloc(alloc)
	if err := os.MkdirAll(a.Dir(), 0o711); err != nil {
		return nil, 0, fmt.Errorf("driver: group %s: %w", alloc, err)
	}
	f, err := os.OpenFile(a.Lock(), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("driver: group lock: %w", err)
	}
	fd := int(f.Fd())
	taken := func() (*GroupLock, int, error) {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &GroupLock{alloc: alloc, path: a.Lock(), f: f}, 0, nil
	}
	switch err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return taken()
	case !errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, 0, fmt.Errorf("driver: group lock %s: %w", a.Lock(), err)
	case !wait:
		b := make([]byte, 24)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
		return nil, pid, nil
	}
	got := make(chan error, 1)
	go func() { got <- flock(fd, unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("driver: group lock %s: %w", a.Lock(), err)
		}
		return taken()
	case <-ctx.Done():
		// The waiter owns f from here: it lets go of whatever it gets.
		go func() {
			if err := <-got; err == nil {
				_ = unix.Flock(fd, unix.LOCK_UN)
			}
			f.Close()
		}()
		return nil, 0, ctx.Err()
	}
}

// flock is flock(2), retried when a signal interrupts it.
func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// GroupDriven reports whether a live process drives the group alloc (holds
// its lock), and its pid when the lock file names it.
func (d *Driver) GroupDriven(alloc string) (bool, int, error) {
	if err := statedir.ValidateTaskID(alloc); err != nil {
		return false, 0, fmt.Errorf("driver: group id: %w", err)
	}
	if _, err := os.Stat(statedir.Layout{Dir: d.cfg.StateDir}.Alloc(alloc).Dir()); errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	l, holder, err := d.lockGroup(context.Background(), alloc, false)
	if err != nil {
		return false, 0, err
	}
	if l != nil {
		l.Unlock()
		return false, 0, nil
	}
	return true, holder, nil
}

// Groups lists the groups with a live task in the store: each group's
// task ids (its alloc's list), by alloc id.
func (d *Driver) Groups(ctx context.Context) (map[string][]string, error) {
	ids, err := d.Tasks(ctx, false)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, id := range ids {
		st, err := d.store.LoadTask(ctx, id)
		if err != nil {
			continue // a damaged task is Recover's (and check's) to report
		}
		if st.Spec != nil && st.Spec.Alloc != nil {
			out[st.Spec.Alloc.ID] = st.Spec.Alloc.Tasks
		}
	}
	return out, nil
}
