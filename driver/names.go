package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// Names. A task's id is unique and never reused; its name (Spec.Name) is
// what a person calls it, and tasks share a name over time: a task that
// ended and the one started after it. A name stands for a task by these
// rules, which the CLI and the agent both follow:
//
//  1. an argument that is a task's id stands for that task;
//  2. else a name stands for its one live task (not terminal);
//  3. several live tasks of one name are ambiguous (ErrAmbiguous): an id
//     must say which;
//  4. with none live, a name stands for its most recent task (the one
//     created last), so that `tether logs web` shows the run that just
//     ended.
//
// And a name has one live task: StartNamed refuses a start while a task
// of its name is live (ErrNameTaken), or stops that task first when asked
// to replace it; RestartTask stops a task and starts its spec again as a
// new task. A per-name lock file orders these across processes, so two
// starts of one name at once cannot both find it free.

// NameError is a name that stands for no task, for several, or that a
// live task holds.
type NameError struct {
	Name string
	// Tasks are the live tasks of the name (ErrAmbiguous, ErrNameTaken).
	Tasks []fsm.Task
	Err   error
	// Targets: the name was looked up as a task, a group and a job
	// (PickTarget), not as a task alone.
	Targets bool
	// Why says what is ambiguous when Tasks does not (a JOB.GROUP that
	// splits two ways).
	Why string
}

func (e *NameError) Error() string {
	switch {
	case errors.Is(e.Err, ErrUnknownTask) && e.Targets:
		return fmt.Sprintf("%v: no task, group (JOB.GROUP) or job has the id or name %q", e.Err, e.Name)
	case errors.Is(e.Err, ErrUnknownTask):
		return fmt.Sprintf("%v: no task has the id or name %q", e.Err, e.Name)
	case e.Why != "":
		return fmt.Sprintf("%v: %q %s", e.Err, e.Name, e.Why)
	case len(e.Tasks) == 0:
		return fmt.Sprintf("task name %q: %v", e.Name, e.Err)
	}
	s := fmt.Sprintf("%v: %q is the name of ", e.Err, e.Name)
	for i, t := range e.Tasks {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (%s)", t.ID, t.State)
	}
	return s
}

func (e *NameError) Unwrap() error { return e.Err }

// loadTasks folds the tasks of a selection in one read of the store. A
// task it cannot read is left out: status and check name it.
func (d *Driver) loadTasks(ctx context.Context, which store.Selection) ([]fsm.Task, error) {
	sc, err := d.store.LoadTasks(ctx, which)
	return sc.Tasks, err
}

// PickNamed applies rules 2 to 4 to tasks: the one live task named name,
// else the most recent one; ErrAmbiguous (in a *NameError listing them)
// for several live, ErrUnknownTask for none at all.
func PickNamed(tasks []fsm.Task, name string) (fsm.Task, error) {
	var live []fsm.Task
	var recent fsm.Task
	found := false
	for _, t := range tasks {
		if t.Spec == nil || t.Spec.Name != name {
			continue
		}
		if !t.State.Terminal() {
			live = append(live, t)
		}
		if !found || t.CreatedAt > recent.CreatedAt || t.CreatedAt == recent.CreatedAt && t.ID > recent.ID {
			recent, found = t, true
		}
	}
	switch {
	case len(live) == 1:
		return live[0], nil
	case len(live) > 1:
		sortByCreation(live)
		return fsm.Task{}, &NameError{Name: name, Tasks: live, Err: ErrAmbiguous}
	case found:
		return recent, nil
	}
	return fsm.Task{}, &NameError{Name: name, Err: ErrUnknownTask}
}

func sortByCreation(ts []fsm.Task) {
	slices.SortFunc(ts, func(a, b fsm.Task) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

// Targets. A command that acts on tasks (stop, restart, signal, logs,
// events, wait) takes words that each stand for one task or several, by
// these rules, in order:
//
//  5. a word that stands for a task by rules 1 to 4 stands for it;
//  6. else JOB.GROUP stands for the tasks of group GROUP of job JOB (the
//     job file's names: Spec.Job, Spec.Group);
//  7. else JOB stands for the tasks of every group of job JOB.
//
// A group or a job stands for the tasks of its live allocations (an
// allocation with a task not ended: all its tasks, a prestart task that
// has completed among them), and with none live, for the most recent
// task of each of its task names (rule 4, name by name). Within an
// allocation a name stands for its live task, else its most recent one
// (a task restarted in its allocation leaves its ended predecessor).

// TargetKind is what a word stands for: a task, a group or a job.
type TargetKind uint8

// The kinds of target, in the order the rules try them.
const (
	TargetTask TargetKind = iota + 1
	TargetGroup
	TargetJob
)

func (k TargetKind) String() string {
	switch k {
	case TargetTask:
		return "task"
	case TargetGroup:
		return "group"
	case TargetJob:
		return "job"
	}
	return "target(" + strconv.Itoa(int(k)) + ")"
}

// Target is what a word stands for.
type Target struct {
	Kind TargetKind
	// Job and Group name a group (both) or a job (Job alone).
	Job, Group string
	// Tasks are the tasks it stands for, oldest first: one for a task.
	Tasks []fsm.Task
}

// PickTarget applies rules 1 to 7 to tasks (every task of the store, ended
// ones included): the task with the id arg, else the task named arg, else
// the group JOB.GROUP, else the job arg. An ambiguous task name is an
// error (ErrAmbiguous) as for PickNamed, and so is a JOB.GROUP that names
// two groups (job "a" group "b.c", and job "a.b" group "c"); a word that
// stands for nothing is ErrUnknownTask, in a *NameError whose message
// says that no task, group or job has it.
func PickTarget(tasks []fsm.Task, arg string) (Target, error) {
	if arg == "" {
		return Target{}, &NameError{Name: arg, Err: ErrUnknownTask, Targets: true}
	}
	for _, t := range tasks {
		if t.ID == arg {
			return Target{Kind: TargetTask, Tasks: []fsm.Task{t}}, nil
		}
	}
	t, err := PickNamed(tasks, arg)
	if err == nil {
		return Target{Kind: TargetTask, Tasks: []fsm.Task{t}}, nil
	}
	if !errors.Is(err, ErrUnknownTask) {
		return Target{}, err
	}
	var groups []Target
	for i := 0; i < len(arg); i++ {
		if arg[i] != '.' {
			continue
		}
		job, group := arg[:i], arg[i+1:]
		var of []fsm.Task
		for _, t := range tasks {
			if t.Spec != nil && t.Spec.Job == job && t.Spec.Group == group && job != "" {
				of = append(of, t)
			}
		}
		if len(of) > 0 {
			groups = append(groups, Target{Kind: TargetGroup, Job: job, Group: group, Tasks: of})
		}
	}
	switch len(groups) {
	case 1:
		g := groups[0]
		g.Tasks, err = members(g.Tasks)
		return g, err
	case 0:
	default:
		why := "splits into several JOB.GROUP:"
		for _, g := range groups {
			why += fmt.Sprintf(" job %q group %q", g.Job, g.Group)
		}
		return Target{}, &NameError{Name: arg, Err: ErrAmbiguous, Why: why + "; give a task's name or id"}
	}
	var of []fsm.Task
	for _, t := range tasks {
		if t.Spec != nil && t.Spec.Job == arg {
			of = append(of, t)
		}
	}
	if len(of) == 0 {
		return Target{}, &NameError{Name: arg, Err: ErrUnknownTask, Targets: true}
	}
	ts, err := members(of)
	return Target{Kind: TargetJob, Job: arg, Tasks: ts}, err
}

// members picks the tasks a group's or a job's tasks stand for (rules 6
// and 7): those of its live allocations, else the most recent of each
// name; oldest first.
func members(tasks []fsm.Task) ([]fsm.Task, error) {
	allocOf := func(t fsm.Task) string {
		if t.Spec != nil && t.Spec.Alloc != nil {
			return t.Spec.Alloc.ID
		}
		return t.ID // a task of no allocation is one of its own
	}
	live := map[string]bool{}
	for _, t := range tasks {
		if !t.State.Terminal() {
			live[allocOf(t)] = true
		}
	}
	// The tasks to pick among, by the name rules: each live allocation's
	// apart, or all of them when none is live.
	pools := map[string][]fsm.Task{}
	for _, t := range tasks {
		switch a := allocOf(t); {
		case len(live) == 0:
			pools[""] = append(pools[""], t)
		case live[a]:
			pools[a] = append(pools[a], t)
		}
	}
	var out []fsm.Task
	for _, pool := range pools {
		seen := map[string]bool{}
		for _, t := range pool {
			name := t.Spec.Name
			if seen[name] {
				continue
			}
			seen[name] = true
			picked, err := PickNamed(pool, name)
			if err != nil {
				return nil, err
			}
			out = append(out, picked)
		}
	}
	sortByCreation(out)
	return out, nil
}

// Resolve returns the task that arg stands for: the task with that id,
// else by its name (see the rules above). A name costs a read of the live
// tasks, and of all the tasks when none of the live ones has it.
func (d *Driver) Resolve(ctx context.Context, arg string) (TaskInfo, error) {
	if arg == "" {
		return TaskInfo{}, &NameError{Name: arg, Err: ErrUnknownTask}
	}
	if ValidateTaskID(arg) == nil {
		info, err := d.InspectTask(ctx, arg)
		if err == nil || !errors.Is(err, ErrUnknownTask) {
			return info, err
		}
	}
	for _, which := range []store.Selection{store.LiveTasks, store.AllTasks} {
		ts, err := d.loadTasks(ctx, which)
		if err != nil {
			return TaskInfo{}, err
		}
		t, err := PickNamed(ts, arg)
		if errors.Is(err, ErrUnknownTask) && which == store.LiveTasks {
			continue
		}
		if err != nil {
			return TaskInfo{}, err
		}
		return d.InspectTask(ctx, t.ID)
	}
	return TaskInfo{}, &NameError{Name: arg, Err: ErrUnknownTask}
}

// LiveNamed returns the live tasks named name, oldest first. Each is
// reconciled first (as Reconcile does: a task whose executor is gone, or
// whose task ended while no process watched it, has its end recorded), so
// that a task that ended behind the log's back does not hold its name. A
// task another live process drives is left to it, and counts; one whose
// end is being recorded (reaping) is waited for.
func (d *Driver) LiveNamed(ctx context.Context, name string) ([]fsm.Task, error) {
	ts, err := d.loadTasks(ctx, store.LiveTasks)
	if err != nil {
		return nil, err
	}
	var live []fsm.Task
	for _, t := range ts {
		if t.Spec == nil || t.Spec.Name != name || t.State.Terminal() {
			continue
		}
		if _, err := d.Reconcile(ctx, t.ID); err != nil && ctx.Err() != nil {
			return nil, err
		}
		info, err := d.InspectTask(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		if info.State == fsm.StateReaping {
			// Its end is being recorded (by this driver's supervision, in
			// a long-lived driver such as an agent's, or by another
			// process): reaping is bounded by the kill's effect timeout,
			// and a task on its way out does not hold its name.
			wctx, cancel := context.WithTimeout(ctx, d.cfg.EffectTimeout)
			if final, err := d.WaitTask(wctx, t.ID); err == nil || final.State.Terminal() {
				info.Task = final
			}
			cancel()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if !info.State.Terminal() {
			live = append(live, info.Task)
		}
	}
	sortByCreation(live)
	return live, nil
}

// StartOptions say how StartNamed treats a live task of the same name.
type StartOptions struct {
	// Replace stops the live tasks of the name (each with its kill signal
	// and grace, the stop recorded) before the start; without it, a live
	// task of the name refuses the start with ErrNameTaken.
	Replace bool
	// Stopping, when set, is called before each such stop.
	Stopping func(fsm.Task)
}

// StartNamed is StartTask under the name rules: it holds the name's lock
// while it checks that no task of spec.Name is live (or stops those that
// are, with Replace) and starts the task, so that two starts of one name
// at once cannot both find it free. The log links a replaced task and its
// replacement (the stop's ReplacedBy, the new task's Replaces). ctx bounds
// the wait for the lock and the stops; once begun, the start is not
// cancelled by it (stop the task instead). It returns the tasks it
// replaced, as they ended.
func (d *Driver) StartNamed(ctx context.Context, id string, spec fsm.Spec, opts StartOptions) (fsm.Task, []fsm.Task, error) {
	name := spec.Name
	if name == "" {
		name = id
	}
	unlock, err := d.lockName(ctx, name)
	if err != nil {
		return fsm.Task{}, nil, err
	}
	defer unlock()
	live, err := d.LiveNamed(ctx, name)
	if err != nil {
		return fsm.Task{}, nil, err
	}
	if len(live) > 0 && !opts.Replace {
		return fsm.Task{}, nil, &NameError{Name: name, Tasks: live, Err: ErrNameTaken}
	}
	replaced, err := d.stopFor(ctx, live, id, opts.Stopping)
	if err != nil {
		return fsm.Task{}, replaced, err
	}
	if err := ctx.Err(); err != nil {
		return fsm.Task{}, replaced, context.Cause(ctx)
	}
	link := ""
	if len(replaced) > 0 {
		link = replaced[len(replaced)-1].ID // the newest
	}
	t, err := d.startTask(context.WithoutCancel(ctx), id, spec, link)
	return t, replaced, err
}

// stopFor stops each task with its kill signal and grace, to make way for
// the task successor.
func (d *Driver) stopFor(ctx context.Context, ts []fsm.Task, successor string, stopping func(fsm.Task)) ([]fsm.Task, error) {
	var out []fsm.Task
	for _, t := range ts {
		if stopping != nil {
			stopping(t)
		}
		r, err := d.ask(ctx, t.ID, request{kind: inStop, link: successor})
		if err == nil {
			err = r.err
		}
		if err != nil {
			return out, err
		}
		out = append(out, r.task)
	}
	return out, nil
}

// RestartTask stops the task id with its kill signal and grace (unless it
// has ended already) and starts its spec again as the new task newID,
// under the name's lock; the log links the two (the stop's ReplacedBy,
// the new task's Replaces). The restart of an ended task is refused while
// another task of its name is live (ErrNameTaken): restart that one. It
// returns the new task and the old one as it ended.
//
// The stop and the start are two durable steps, not one: a process that
// dies between them leaves the old task stopped, its stop naming a
// successor that was never created. Running the restart again (by the
// name or the old id) starts the spec as that successor, so that the
// link the log holds comes true.
func (d *Driver) RestartTask(ctx context.Context, id, newID string) (fsm.Task, fsm.Task, error) {
	info, err := d.InspectTask(ctx, id)
	if err != nil {
		return fsm.Task{}, fsm.Task{}, err
	}
	if info.Spec == nil {
		return fsm.Task{}, info.Task, &TaskError{Task: id, State: info.State, Err: errors.New("its log holds no spec to start again")}
	}
	spec := *info.Spec
	if a := spec.Alloc; a != nil {
		if len(a.Tasks) > 1 {
			return fsm.Task{}, info.Task, &TaskError{Task: id, State: info.State,
				Err: fmt.Errorf("%w: it is one of the %d tasks of group %s, which run and end together: stop the group and start its file again", ErrNotGroup, len(a.Tasks), a.ID)}
		}
	}
	unlock, err := d.lockName(ctx, spec.Name)
	if err != nil {
		return fsm.Task{}, info.Task, err
	}
	defer unlock()
	live, err := d.LiveNamed(ctx, spec.Name)
	if err != nil {
		return fsm.Task{}, info.Task, err
	}
	isLive := slices.ContainsFunc(live, func(t fsm.Task) bool { return t.ID == id })
	if !isLive && len(live) > 0 {
		return fsm.Task{}, info.Task, &NameError{Name: spec.Name, Tasks: live, Err: ErrNameTaken}
	}
	old := info.Task
	if isLive {
		stopped, err := d.stopFor(ctx, []fsm.Task{info.Task}, newID, nil)
		if err != nil {
			return fsm.Task{}, old, err
		}
		old = stopped[0]
	} else if promised, err := d.promisedSuccessor(ctx, id); err != nil {
		return fsm.Task{}, old, err
	} else if promised != "" {
		newID = promised
	}
	if a := spec.Alloc; a != nil {
		// A group of one: the new task is its only task, in the same
		// allocation (its directories stay, as across Nomad's restarts).
		x := *a
		x.Tasks = []string{newID}
		spec.Alloc = &x
	}
	if err := ctx.Err(); err != nil {
		return fsm.Task{}, old, context.Cause(ctx)
	}
	t, err := d.startTask(context.WithoutCancel(ctx), newID, spec, id)
	return t, old, err
}

// promisedSuccessor returns the successor an ended task's stop named that
// was never created (a restart or a replacement interrupted between its
// stop and its start), or "".
func (d *Driver) promisedSuccessor(ctx context.Context, id string) (string, error) {
	evs, err := d.TaskEvents(ctx, id)
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type != fsm.EventStopRequested || evs[i].ReplacedBy == "" {
			continue
		}
		next := evs[i].ReplacedBy
		if ValidateTaskID(next) != nil {
			return "", nil
		}
		if _, err := d.InspectTask(ctx, next); errors.Is(err, ErrUnknownTask) {
			return next, nil
		} else if err != nil {
			return "", err
		}
		return "", nil
	}
	return "", nil
}

// lockName takes the name's lock, waiting while another start or restart
// of the name (in this process or another: flock's locks belong to open
// files) holds it, or until ctx ends. A blocking flock cannot be
// interrupted, so it runs in a goroutine that lets go of the lock at once
// if it gets it after the caller gave up.
func (d *Driver) lockName(ctx context.Context, name string) (func(), error) {
	return lockName(ctx, d.cfg.StateDir, name)
}

// WaitNameFree waits until no start, restart or replacement of the task
// name (in any process: the agent's, a CLI's) holds the name's lock, or
// until ctx ends. Those hold it from before they stop the task they
// replace until the new task is recorded, so a reader that saw a task of
// the name end and then gets past WaitNameFree finds the task that
// replaced it in the store, if one did (tether logs -f follows a name
// across a restart so).
func WaitNameFree(ctx context.Context, stateDir, name string) error {
	unlock, err := lockName(ctx, stateDir, name)
	if err != nil {
		return err
	}
	unlock()
	return nil
}

// lockName takes the lock of name in the state directory stateDir (see
// Driver.lockName).
func lockName(ctx context.Context, stateDir, name string) (func(), error) {
	l := statedir.Layout{Dir: stateDir}
	if err := os.Mkdir(l.Names(), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("driver: name locks: %w", err)
	}
	path := l.NameLock(name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("driver: name lock %s: %w", path, err)
	}
	got := make(chan error, 1)
	var mu sync.Mutex
	abandoned := false
	go func() {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			f.Close()
			return
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("driver: name lock %s: %w", path, err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		select {
		case <-got:
			f.Close()
		default:
		}
		mu.Unlock()
		return nil, fmt.Errorf("driver: waiting for the lock of task name %q: %w", name, context.Cause(ctx))
	}
}
