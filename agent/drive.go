package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// Driving a group to its end, and what follows it.
//
// A group's copy (an allocation) is driven by whoever holds its lock
// (driver.RunGroup). Once every task of it has ended, what follows is a
// pure function of how it ended (fsm.GroupState.End, fsm.NextCopy): a new
// copy of the group, restarted (an executor was lost), rescheduled (a
// task failed once its restart policy gave up) or started again (its
// start was interrupted, a reboot), or nothing. DriveGroup is the loop
// that does it, for whoever drives the group: the agent (every group it
// starts, adopts or keeps for a desired entry), else the detached
// `tether drive-group` of a daemonless `tether start`. It holds the
// group's lock across copies, and records each new copy (every task of
// it created, each linked to the task it replaces, due at its delay's
// end) before it drives it: written ahead, so that whoever drives the
// group next finishes the same decision from the log alone. The new
// copy's task ids are derived from the allocation and the copy's number
// (job.CopyTaskID), so that a decision made twice (a crash between the
// decision and its record, two drivers one after the other) records one
// copy, never two.

// DriveOptions say how DriveGroup drives a group.
type DriveOptions struct {
	// Wait waits for the group's lock while another process holds it;
	// without it, a held lock is a *driver.GroupDrivenError at once.
	Wait bool
	// Progress is told each step of each copy before it is performed
	// (driver.RunGroup's fn).
	Progress func(driver.GroupProgress)
	// Next is told each new copy before it is recorded (a caller that
	// keeps its own record of it writes it ahead there: the agent's
	// desired entries). An error stops the drive with nothing of the copy
	// recorded.
	Next func(Copy) error
}

// Copy is a new copy of an allocation that DriveGroup records: its tasks
// (in start order), the tasks they replace, when it is due, and why.
type Copy struct {
	Alloc      string
	Generation int
	Tasks      []string
	Replaces   []string
	NotBefore  time.Time
	// Kind is what made it: restart (a lost executor, under the restart
	// policy), reschedule (a failure, under the reschedule policy) or
	// again (an interrupted start, a reboot: nothing counted).
	Kind   CopyKind
	Reason string
}

// CopyKind is what made a new copy.
type CopyKind string

// The kinds of copies.
const (
	CopyRestart    CopyKind = "restart"
	CopyReschedule CopyKind = "reschedule"
	CopyAgain      CopyKind = "again"
)

// Driven is how DriveGroup ended: the last copy's tasks as they ended, how
// that copy ended and why nothing follows it.
type Driven struct {
	Tasks  []fsm.Task
	End    fsm.CopyEnd
	Reason string
}

// Crash points of DriveGroup: just before and just after a new copy is
// recorded, by its kind.
const (
	crashBeforeCopy = "agent-before-copy:"
	crashAfterCopy  = "agent-after-copy:"
)

var copyKinds = []CopyKind{CopyRestart, CopyReschedule, CopyAgain}

// DriveGroup drives the group of ids (a copy's tasks, in start order)
// until it is over and nothing follows it, recording and driving each
// copy that follows (see the top of this file). It returns when ctx ends
// too, leaving the group as it is (the next driver carries on). The
// group's ports are let go of once nothing follows.
func (l *Local) DriveGroup(ctx context.Context, ids []string, opts DriveOptions) (Driven, error) {
	tasks, _, err := l.loadCopy(ctx, ids)
	if err != nil {
		return Driven{Tasks: tasks}, err
	}
	alloc := allocIDOf(tasks)
	lock, holder, err := l.D.LockGroup(ctx, alloc, opts.Wait)
	if err != nil {
		return Driven{Tasks: tasks}, err
	}
	if lock == nil {
		return Driven{Tasks: tasks}, &driver.GroupDrivenError{Alloc: alloc, Holder: holder}
	}
	defer lock.Unlock()
	for {
		tasks, err := l.D.RunGroupLocked(ctx, lock, ids, opts.Progress)
		if err != nil {
			return Driven{Tasks: tasks}, err
		}
		tasks, missing, err := l.loadCopy(ctx, ids)
		if err != nil {
			return Driven{Tasks: tasks}, err
		}
		end := fsm.GroupState{Tasks: tasks, Missing: missing}.End(l.bootID())
		from := tasks
		a := allocOf(tasks)
		if end.Kind == fsm.EndInterrupted && a.Generation > 0 {
			// A copy whose recording was interrupted: the one it replaces
			// says what it is, and recording it again completes it.
			if from, err = l.replaced(ctx, tasks); err != nil {
				return Driven{Tasks: tasks, End: end}, err
			}
		}
		next := fsm.NextCopy(end, a, restartOf(tasks, end.Task))
		if !next.Again {
			l.releasePorts(alloc)
			return Driven{Tasks: tasks, End: end, Reason: next.Reason}, nil
		}
		if end.Kind == fsm.EndInterrupted && a.Generation > 0 {
			next.Alloc = a // the same copy, completed
		}
		group, c, err := copyOf(from, next, end)
		if err != nil {
			l.releasePorts(alloc)
			return Driven{Tasks: tasks, End: end, Reason: err.Error()}, nil
		}
		if opts.Next != nil {
			if err := opts.Next(c); err != nil {
				return Driven{Tasks: tasks, End: end}, err
			}
		}
		l.Points.crash(crashBeforeCopy+string(c.Kind), alloc)
		if _, err := l.D.CreateGroup(ctx, group, driver.StartOptions{}); err != nil {
			return Driven{Tasks: tasks, End: end}, fmt.Errorf("recording the next copy of group %s: %w", alloc, err)
		}
		l.Points.crash(crashAfterCopy+string(c.Kind), alloc)
		l.logger().Info("group: next copy recorded", "alloc", alloc, "kind", string(c.Kind), "generation", c.Generation,
			"not_before", c.NotBefore, "reason", c.Reason)
		ids = c.Tasks
	}
}

// copyOf is the new copy next makes of the copy from (every task of it
// recorded): each task again under the same name, in the same allocation,
// with the new copy's fields and a derived id, replacing the task it
// follows.
func copyOf(from []fsm.Task, next fsm.CopyNext, end fsm.CopyEnd) ([]driver.GroupTask, Copy, error) {
	a := next.Alloc
	c := Copy{Generation: a.Generation, NotBefore: time.Unix(0, a.NotBefore), Reason: next.Reason, Kind: CopyAgain}
	switch {
	case next.Rescheduled:
		c.Kind = CopyReschedule
	case end.Kind == fsm.EndLost:
		c.Kind = CopyRestart
	}
	var ids []string
	for _, t := range from {
		if t.Spec == nil || t.Spec.Alloc == nil {
			return nil, c, fmt.Errorf("task %s has no allocation: its group cannot be copied", t.ID)
		}
		if len(from) != len(t.Spec.Alloc.Tasks) {
			return nil, c, fmt.Errorf("group %s lists %d tasks and the store holds %d of them: it cannot be copied (gc removed some)", t.Spec.Alloc.ID, len(t.Spec.Alloc.Tasks), len(from))
		}
		c.Alloc = t.Spec.Alloc.ID
		ids = append(ids, job.CopyTaskID(t.Spec.Name, c.Alloc, a.Generation))
	}
	var group []driver.GroupTask
	for i, t := range from {
		spec := *t.Spec
		x := spec.Alloc.Copy()
		x.Tasks, x.Generation, x.NotBefore, x.Reschedule, x.Rescheduled, x.Restarts = ids, a.Generation, a.NotBefore, a.Reschedule, a.Rescheduled, a.Restarts
		spec.Alloc = x
		group = append(group, driver.GroupTask{ID: ids[i], Spec: spec, Replaces: t.ID})
		c.Replaces = append(c.Replaces, t.ID)
	}
	c.Tasks = ids
	return group, c, nil
}

// loadCopy reads a copy's tasks (those the store holds, in the order of
// ids) and the ids it does not hold.
func (l *Local) loadCopy(ctx context.Context, ids []string) ([]fsm.Task, []string, error) {
	var tasks []fsm.Task
	var missing []string
	for _, id := range ids {
		info, err := l.D.InspectTask(ctx, id)
		if errors.Is(err, driver.ErrUnknownTask) {
			missing = append(missing, id)
			continue
		}
		if err != nil {
			return tasks, missing, err
		}
		tasks = append(tasks, info.Task)
	}
	if len(tasks) == 0 {
		return nil, missing, fmt.Errorf("%w: none of %v is recorded", driver.ErrUnknownTask, ids)
	}
	return tasks, missing, nil
}

// replaced is the copy that tasks (a copy whose recording was
// interrupted) replace: the tasks their task-created names.
func (l *Local) replaced(ctx context.Context, tasks []fsm.Task) ([]fsm.Task, error) {
	evs, err := l.D.TaskEvents(ctx, tasks[0].ID)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 || evs[0].Replaces == "" {
		return nil, fmt.Errorf("task %s of a later copy names no task it replaces: its copy cannot be completed", tasks[0].ID)
	}
	prev, err := l.D.InspectTask(ctx, evs[0].Replaces)
	if err != nil {
		return nil, err
	}
	from, missing, err := l.loadCopy(ctx, prev.Spec.Alloc.Tasks)
	if err == nil && len(missing) > 0 {
		err = fmt.Errorf("the copy %s replaces lacks %v: its copy cannot be completed", tasks[0].ID, missing)
	}
	return from, err
}

func allocOf(tasks []fsm.Task) fsm.Alloc {
	for _, t := range tasks {
		if t.Spec != nil && t.Spec.Alloc != nil {
			return *t.Spec.Alloc
		}
	}
	return fsm.Alloc{}
}

func allocIDOf(tasks []fsm.Task) string { return allocOf(tasks).ID }

// restartOf is the restart policy of the task id among tasks (nil when it
// has none, or is not there).
func restartOf(tasks []fsm.Task, id string) *fsm.RestartPolicy {
	for _, t := range tasks {
		if t.ID == id && t.Spec != nil {
			return t.Spec.Restart
		}
	}
	return nil
}

// StartGroup starts the group of ids (recorded: CreateGroup, or a group
// of one started already) and returns once its main tasks have started
// (or it is over), its tasks as they were then. It leaves the group to a
// driver that outlives the call: daemonless, the process HandOff starts,
// which waits for the group's lock and takes the group over from this
// one (Local.HandOff; nil: nobody drives it after the call); in an agent,
// the agent itself (Agent.StartGroup). fn is told each step.
func (l *Local) StartGroup(ctx context.Context, ids []string, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	gctx, done := context.WithCancel(ctx)
	defer done()
	handed := false
	var started []fsm.Task
	var herr error
	tasks, err := l.D.RunGroup(gctx, ids, false, func(p driver.GroupProgress) {
		if fn != nil {
			fn(p)
		}
		if !handed {
			// The group's lock is ours: the driver that will take it over
			// waits for it from now on.
			handed = true
			if l.HandOff != nil {
				if herr = l.HandOff(allocIDOf(p.Tasks), ids); herr != nil {
					done()
					return
				}
			}
		}
		if p.Step.Idle() && MainsStarted(p.Tasks) {
			started = p.Tasks
			done() // up: the group's driver takes it from here
		}
	})
	switch {
	case herr != nil:
		return tasks, herr
	case errors.Is(err, context.Canceled) && ctx.Err() == nil:
		if started != nil {
			return started, nil
		}
		return tasks, nil
	}
	return tasks, err
}

// MainsStarted reports whether every main task of a group has started (or
// ended).
func MainsStarted(tasks []fsm.Task) bool {
	for _, t := range tasks {
		if t.Spec != nil && t.Spec.Alloc != nil && t.Spec.Alloc.Hook == fsm.HookMain && t.TaskPID == 0 && !t.State.Terminal() {
			return false
		}
	}
	return true
}

// Adoptable lists the groups nobody drives that a driver should take up
// (each as the ids of its current copy): every live group whose lock no
// process holds (its driver died, or a crashed agent's), and every group
// whose last copy ended without a driver to record what follows it (the
// driver died between the two) while its copies' policies say something
// does.
func (l *Local) Adoptable(ctx context.Context) ([][]string, error) {
	scan, err := l.Store.LoadTasks(ctx, store.AllTasks)
	if err != nil {
		return nil, err
	}
	type copyOfAlloc struct {
		gen  int
		ids  []string
		live bool
		all  []fsm.Task
	}
	latest := map[string]*copyOfAlloc{}
	for _, t := range scan.Tasks {
		if t.Spec == nil || t.Spec.Alloc == nil {
			continue
		}
		a := t.Spec.Alloc
		c := latest[a.ID]
		if c == nil || a.Generation > c.gen {
			c = &copyOfAlloc{gen: a.Generation, ids: a.Tasks}
			latest[a.ID] = c
		}
		if a.Generation == c.gen {
			c.live = c.live || !t.State.Terminal()
			c.all = append(c.all, t)
		}
	}
	var out [][]string
	for _, alloc := range slices.Sorted(maps.Keys(latest)) {
		c := latest[alloc]
		if driven, _, err := l.D.GroupDriven(alloc); err != nil || driven {
			continue
		}
		if !c.live {
			var missing []string
			for _, id := range c.ids {
				if !slices.ContainsFunc(c.all, func(t fsm.Task) bool { return t.ID == id }) {
					missing = append(missing, id)
				}
			}
			end := fsm.GroupState{Tasks: c.all, Missing: missing}.End(l.bootID())
			if a := allocOf(c.all); !fsm.NextCopy(end, a, restartOf(c.all, end.Task)).Again || end.Kind == fsm.EndInterrupted && a.Generation == 0 {
				continue
			}
		}
		out = append(out, c.ids)
	}
	return out, nil
}

// AdoptGroups hands every group nobody drives (Adoptable) to a driver that
// outlives the call (HandOff; in an agent, the agent) and returns their
// allocation ids.
func (l *Local) AdoptGroups(ctx context.Context) ([]string, error) {
	groups, err := l.Adoptable(ctx)
	if err != nil {
		return nil, err
	}
	if l.HandOff == nil {
		return nil, nil
	}
	var out []string
	var errs []error
	for _, ids := range groups {
		tasks, _, err := l.loadCopy(ctx, ids)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		alloc := allocIDOf(tasks)
		if err := l.HandOff(alloc, ids); err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", alloc, err))
			continue
		}
		out = append(out, alloc)
	}
	return out, errors.Join(errs...)
}
