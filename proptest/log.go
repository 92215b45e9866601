package proptest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// genLog is the event log as one driver generation sees it: the harness's
// log (a real store.Store, or the simulated MemLog) that refuses every call
// of a dead generation, and where the plan's store faults fire. A commit
// that was under way when its generation died stands, as it would in
// bbolt; its acknowledgement never reaches the driver, and nothing the dead
// process had not yet committed lands afterwards. Every acknowledged append
// is entered in the harness's ledger, so that "no acknowledged event lost"
// can be checked after the next open.
type genLog struct {
	h *Harness
	g *Generation
	s store.Log // the MemLog; nil: the harness's bbolt store (Harness.store)
}

// log is the log to use now: the MemLog, or the harness's store once no
// maintenance is under way (an agent's requests wait out its maintenance:
// Harness.MaintainCall). A generation that died meanwhile ends here.
func (l *genLog) log() store.Log {
	if l.s != nil {
		return l.s
	}
	st := l.h.store()
	l.g.exitIfDead()
	if st == nil {
		runtime.Goexit() // the store was let go of: its generation is dead
	}
	return st
}

var _ store.Log = (*genLog)(nil)

func (l *genLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	l.g.enter("append", task)
	l.h.checkAppend(task, expected, events)
	// The store's fault points: one of each kind per event of the batch.
	fail, lostAck := false, false
	for _, e := range events {
		f, _ := storeFaultOf(e.Type)
		if hit, _ := l.h.hitFault(f); hit {
			fail = true
		}
	}
	if !fail {
		for _, e := range events {
			_, la := storeFaultOf(e.Type)
			if hit, _ := l.h.hitFault(la); hit {
				lostAck = true
			}
		}
	}
	if fail {
		return 0, fmt.Errorf("%w: task %q at version %d", ErrStoreFault, task, expected)
	}
	s := l.log()        // after a maintenance under way, if any
	l.h.commits.RLock() // a crash waits for commits in flight: a process dies between writes, never inside one
	if l.g.Dead() {
		// Died before this commit began: nothing of it lands.
		l.h.commits.RUnlock()
		runtime.Goexit()
	}
	v, err := s.Append(ctx, task, expected, events...)
	l.h.commits.RUnlock()
	l.g.exitIfDead() // died while committing: the commit stands, no acknowledgement
	if err != nil {
		return v, err
	}
	l.h.committed(s, task, v)
	if lostAck {
		return 0, fmt.Errorf("%w: task %q committed at version %d", ErrLostAck, task, v)
	}
	l.h.acknowledge(task, expected, events)
	return v, nil
}

func (l *genLog) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	l.g.enter("load", task)
	return l.log().Load(ctx, task)
}

func (l *genLog) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	l.g.enter("load-task", task)
	return l.log().LoadTask(ctx, task)
}

func (l *genLog) Live(ctx context.Context, fn func(task string) error) error {
	l.g.enter("live", "")
	return l.log().Live(ctx, fn)
}

func (l *genLog) All(ctx context.Context, fn func(task string) error) error {
	l.g.enter("all", "")
	return l.log().All(ctx, fn)
}

func (l *genLog) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	l.g.enter("load-tasks", "")
	return l.log().LoadTasks(ctx, which)
}

// Close does nothing: the harness owns the log and closes it when the
// generation is over.
func (l *genLog) Close() error { return nil }

// MemLog is a simulated event log: store.Log's contract (optimistic
// appends at an expected version, every event checked against the
// lifecycle before anything is written, an append that fails writes
// nothing, a live index) held in memory, the way a deterministic
// simulation replaces a disk. An append is atomic: it happens entirely or
// not at all, and once it returned it is durable for every later reader.
// The property runs on it for speed; Enumerate and TestDriver_PropertiesBolt
// run the same harness on the real bbolt store.
type MemLog struct {
	mu    sync.Mutex
	logs  map[string][]fsm.Event
	tasks map[string]fsm.Task
	// ids lists every task, sorted. A new task replaces the slice (it is
	// never changed in place), so a reader may keep the one it took.
	ids []string
}

var _ store.Log = (*MemLog)(nil)

// NewMemLog returns an empty log.
func NewMemLog() *MemLog {
	return &MemLog{logs: map[string][]fsm.Event{}, tasks: map[string]fsm.Task{}}
}

// Append implements store.Log with the store's errors: *store.ConflictError
// at a version other than the task's, store.ErrUnknownTask for an unknown
// task at a version above 0, fsm.ErrIllegalTransition (wrapped) for an
// event the table does not allow, store.ErrSequence for a bad Seq.
func (m *MemLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if len(events) == 0 {
		return 0, store.ErrNoEvents
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, known := m.tasks[task]
	switch {
	case !known && expected != 0:
		return 0, fmt.Errorf("%w: %q (appending at version %d)", store.ErrUnknownTask, task, expected)
	case known && t.Version != expected:
		return 0, &store.ConflictError{Task: task, Expected: expected, Actual: t.Version}
	case !known:
		t = fsm.Task{ID: task}
	}
	evs := make([]fsm.Event, len(events))
	for i, e := range events {
		seq := expected + uint64(i) + 1
		switch e.Seq {
		case 0:
			e.Seq = seq
		case seq:
		default:
			return 0, fmt.Errorf("%w: task %q: event %s has seq %d, expected %d", store.ErrSequence, task, e.Type, e.Seq, seq)
		}
		var err error
		if t, err = fsm.Fold(t, e); err != nil {
			return 0, fmt.Errorf("store: append to task %q: %w", task, err)
		}
		evs[i] = copyEvent(e)
	}
	if !known {
		i, _ := slices.BinarySearch(m.ids, task)
		m.ids = slices.Insert(slices.Clip(m.ids), i, task)
	}
	m.logs[task] = append(m.logs[task], evs...)
	m.tasks[task] = t
	return t.Version, nil
}

// copyEvent copies what an event points to, as an encode and a decode
// would: a stored event shares nothing with its caller's.
func copyEvent(e fsm.Event) fsm.Event {
	if e.Spec != nil {
		s := *e.Spec
		e.Spec = &s
	}
	if e.Executor != nil {
		x := *e.Executor
		e.Executor = &x
	}
	if e.Exit != nil {
		x := *e.Exit
		e.Exit = &x
	}
	return e
}

// copyTask copies what a task points to, but its spec (see LoadTask).
func copyTask(t fsm.Task) fsm.Task {
	if t.Executor != nil {
		x := *t.Executor
		t.Executor = &x
	}
	if t.Exit != nil {
		x := *t.Exit
		t.Exit = &x
	}
	return t
}

// Load implements store.Log.
func (m *MemLog) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logs[task]
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrUnknownTask, task)
	}
	out := make([]fsm.Event, len(l))
	for i, e := range l {
		out[i] = copyEvent(e)
	}
	return out, nil
}

// LoadTask implements store.Log. The task's spec is the log's own (a
// spec is never changed once recorded: read it, do not write it); the rest
// is the caller's.
func (m *MemLog) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[task]
	if !ok {
		return fsm.Task{}, fmt.Errorf("%w: %q", store.ErrUnknownTask, task)
	}
	return copyTask(t), nil
}

// Live implements store.Log: the tasks not in a terminal state, by id.
func (m *MemLog) Live(ctx context.Context, fn func(task string) error) error {
	return m.each(fn, func(t fsm.Task) bool { return !t.State.Terminal() })
}

// All implements store.Log.
func (m *MemLog) All(ctx context.Context, fn func(task string) error) error {
	return m.each(fn, func(fsm.Task) bool { return true })
}

// LoadTasks implements store.Log: the tasks of the selection as they are
// when it begins, folded, in id order (a simulated log has no damage to
// list apart).
func (m *MemLog) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	if err := ctx.Err(); err != nil {
		return store.Scan{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var sc store.Scan
	for _, id := range m.ids {
		t := m.tasks[id]
		if which == store.LiveTasks && t.State.Terminal() {
			continue
		}
		sc.Tasks = append(sc.Tasks, copyTask(t))
	}
	return sc, nil
}

// each calls fn for every task, in order, that keep holds for when the
// listing begins.
func (m *MemLog) each(fn func(string) error, keep func(fsm.Task) bool) error {
	m.mu.Lock()
	ids := m.ids
	var drop []bool // the tasks keep refuses, by index; nil: none
	for i, id := range ids {
		if !keep(m.tasks[id]) {
			if drop == nil {
				drop = make([]bool, len(ids))
			}
			drop[i] = true
		}
	}
	m.mu.Unlock()
	for i, id := range ids {
		if drop != nil && drop[i] {
			continue
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

// IDs lists every task of the log, sorted (read-only: the log's own).
func (m *MemLog) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids
}

// Close implements store.Log.
func (m *MemLog) Close() error { return nil }

// entry returns a task's log and folded state for the harness's checks,
// without copying: the log as it is (it is only ever appended to, so the
// slice stays valid), the state as a value (its spec and identity shared
// with the log's: not to be changed).
func (m *MemLog) entry(id string) ([]fsm.Event, fsm.Task, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.logs[id]
	t, ok := m.tasks[id]
	return l[:len(l):len(l)], t, ok
}
