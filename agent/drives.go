package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// drives are the groups the agent drives: one goroutine each, running
// DriveGroup (the group's copies to their end, and what follows them) for
// as long as the agent runs. Every group the agent starts, adopts or
// keeps for a desired entry is driven here, in the agent's process,
// holding the group's lock: no process per group.
type drives struct {
	l   *Local
	log hclog.Logger

	mu     sync.Mutex
	ctx    context.Context // the agent's life, from begin; nil before
	active map[string]*drive
	wg     sync.WaitGroup
	// changed is told the allocation of a drive at each of its steps and
	// when it returns (a round of the convergence reads it again).
	changed func(alloc string)
	// copied is told each copy a drive records, once its hook let it
	// (the metrics; nil: none).
	copied func(Copy)
}

// drive is one group being driven.
type drive struct {
	alloc string
	// next is the hook told each new copy before it is recorded (a
	// desired entry's record; nil: none). It may be set after the drive
	// began (a group adopted before its entry's record claimed it).
	mu   sync.Mutex
	next func(Copy) error
	// last is the last progress (the tasks and the step), changed is
	// closed and replaced at each one, done closed when the drive returns
	// (result and err set).
	last    driver.GroupProgress
	seen    bool
	changed chan struct{}
	done    chan struct{}
	result  Driven
	err     error
}

func newDrives(l *Local, log hclog.Logger) *drives {
	return &drives{l: l, log: log.Named("drive"), active: map[string]*drive{}}
}

// begin lets drives start, each under ctx (the agent's life), until ctx
// ends.
func (ds *drives) begin(ctx context.Context, changed func(alloc string)) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.ctx, ds.changed = ctx, changed
}

// wait returns once every drive has returned (their ctx ended).
func (ds *drives) wait() { ds.wg.Wait() }

// up reports whether every group driven has its current copy up or
// waiting (its main tasks started, or a copy due later), or is over:
// what Once waits for before it leaves the groups to the next agent.
func (ds *drives) up() bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, dr := range ds.active {
		if !dr.up() {
			return false
		}
	}
	return true
}

func (dr *drive) up() bool {
	select {
	case <-dr.done:
		return true
	default:
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	st := dr.last.Step
	return dr.seen && !st.Over && st.Idle() && (st.Wake > 0 || MainsStarted(dr.last.Tasks))
}

// driving reports whether the agent drives the group alloc.
func (ds *drives) driving(alloc string) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	_, ok := ds.active[alloc]
	return ok
}

// start drives the group of ids (alloc's current copy), unless the agent
// drives it already; next, if set, becomes the drive's hook. It returns
// the drive.
func (ds *drives) start(alloc string, ids []string, next func(Copy) error) (*drive, error) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.ctx == nil || ds.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if dr, ok := ds.active[alloc]; ok {
		if next != nil {
			dr.setNext(next)
		}
		return dr, nil
	}
	dr := &drive{alloc: alloc, next: next, changed: make(chan struct{}), done: make(chan struct{})}
	ds.active[alloc] = dr
	ds.wg.Add(1)
	ctx, changed := ds.ctx, ds.changed
	progress := func(p driver.GroupProgress) {
		dr.progress(p)
		if changed != nil {
			changed(alloc)
		}
	}
	go func() {
		defer ds.wg.Done()
		next := dr.callNext
		if ds.copied != nil {
			next = func(c Copy) error {
				err := dr.callNext(c)
				if err == nil {
					ds.copied(c)
				}
				return err
			}
		}
		dr.result, dr.err = ds.l.DriveGroup(ctx, ids, DriveOptions{Wait: true, Progress: progress, Next: next})
		switch {
		case dr.err != nil && ctx.Err() == nil:
			ds.log.Error("driving the group stopped; it is driven again by the next decision or agent", "alloc", alloc, "err", dr.err)
		case dr.err == nil:
			ds.log.Info("group over", "alloc", alloc, "end", dr.result.End.Kind.String(), "reason", dr.result.Reason)
		}
		ds.mu.Lock()
		delete(ds.active, alloc)
		ds.mu.Unlock()
		close(dr.done)
		if changed != nil && ctx.Err() == nil {
			changed(alloc)
		}
	}()
	return dr, nil
}

func (dr *drive) setNext(next func(Copy) error) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.next = next
}

func (dr *drive) callNext(c Copy) error {
	dr.mu.Lock()
	next := dr.next
	dr.mu.Unlock()
	if next == nil {
		return nil
	}
	return next(c)
}

func (dr *drive) progress(p driver.GroupProgress) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.last, dr.seen = p, true
	close(dr.changed)
	dr.changed = make(chan struct{})
}

// started waits until the drive's copy has its main tasks started (its
// step idle: nothing left to start before them), or the drive returned,
// or ctx ends; it returns the tasks as they were then, telling fn each
// step it saw on the way.
func (dr *drive) started(ctx context.Context, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	var told driver.GroupStep
	for {
		dr.mu.Lock()
		last, seen, changed := dr.last, dr.seen, dr.changed
		dr.mu.Unlock()
		if seen {
			if fn != nil && last.Step.String() != told.String() {
				fn(last)
				told = last.Step
			}
			if last.Step.Over || last.Step.Idle() && last.Step.Wake == 0 && MainsStarted(last.Tasks) {
				return last.Tasks, nil
			}
		}
		select {
		case <-changed:
		case <-dr.done:
			if dr.err != nil {
				return dr.result.Tasks, dr.err
			}
			if !seen {
				return dr.result.Tasks, nil
			}
			dr.mu.Lock()
			last = dr.last
			dr.mu.Unlock()
			if fn != nil && last.Step.String() != told.String() {
				fn(last)
			}
			return last.Tasks, nil
		case <-ctx.Done():
			return last.Tasks, context.Cause(ctx)
		}
	}
}

// StartGroup is Local's (the group started and left to a driver that
// outlives the call), with the agent as that driver: it drives the group
// itself, in its own process, to its end and past it (DriveGroup), and
// answers once the group's main tasks have started.
func (a *Agent) StartGroup(ctx context.Context, ids []string, fn func(driver.GroupProgress)) (ts []fsm.Task, err error) {
	tasks, _, err := a.Local.loadCopy(ctx, ids)
	if err != nil {
		return tasks, err
	}
	run := func() {
		var dr *drive
		if dr, err = a.drives.start(allocIDOf(tasks), ids, a.conv.copyHook(allocIDOf(tasks))); err == nil {
			ts, err = dr.started(ctx, fn)
		}
	}
	for _, id := range ids {
		inner, id := run, id
		run = func() { a.env.with(id, clientPath(ctx), inner) }
	}
	run()
	return ts, err
}

// AdoptGroups is Local's with the agent as the driver: every group nobody
// drives is driven by the agent from now on.
func (a *Agent) AdoptGroups(ctx context.Context) ([]string, error) {
	groups, err := a.Local.Adoptable(ctx)
	var out []string
	for _, ids := range groups {
		tasks, _, lerr := a.Local.loadCopy(ctx, ids)
		if lerr != nil {
			err = errors.Join(err, lerr)
			continue
		}
		alloc := allocIDOf(tasks)
		if _, serr := a.drives.start(alloc, ids, a.conv.copyHook(alloc)); serr != nil {
			err = errors.Join(err, serr)
			continue
		}
		out = append(out, alloc)
	}
	return out, err
}
