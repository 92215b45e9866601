package cluster

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Head is a task of the local log and the sequence number of its last
// committed event.
type Head struct {
	Task string
	Seq  uint64
}

// Source is the node's local log as the mirror reads it: the agent's open
// store. Only committed (durable) events may be returned: the mirror is
// never ahead of the local log.
type Source interface {
	// Heads lists every task of the local log with its head, in id order.
	Heads(ctx context.Context) ([]Head, error)
	// Events returns up to limit of task's committed events from seq from
	// on, in order. A task the log does not have gives an error wrapping
	// store.ErrUnknownTask (it was removed: the mirror prunes it too).
	Events(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error)
}

// Changes is the set of tasks whose logs grew since the mirror last
// looked, and a wake-up for it. The agent notes each commit (StoreSource
// does it in Append); Note never blocks and costs one map insert, so it
// can sit on the commit path. Notes coalesce: a task noted ten times
// before the mirror wakes is read once, from its mirrored head on.
type Changes struct {
	mu    sync.Mutex
	dirty map[string]struct{}
	all   bool
	c     chan struct{}
}

// NewChanges returns an empty set.
func NewChanges() *Changes {
	return &Changes{dirty: map[string]struct{}{}, c: make(chan struct{}, 1)}
}

// Note records that task's log grew (or that it was removed).
func (c *Changes) Note(task string) {
	c.mu.Lock()
	c.dirty[task] = struct{}{}
	c.mu.Unlock()
	c.wake()
}

// NoteAll records that any task may have changed (a restore, a
// compaction, a salvage): the mirror lists every head again.
func (c *Changes) NoteAll() {
	c.mu.Lock()
	c.all = true
	c.mu.Unlock()
	c.wake()
}

func (c *Changes) wake() {
	select {
	case c.c <- struct{}{}:
	default:
	}
}

// C receives after a Note or NoteAll that the mirror has not taken yet.
func (c *Changes) C() <-chan struct{} { return c.c }

// take empties the set and returns it, sorted, with whether everything
// must be listed again.
func (c *Changes) take() (tasks []string, all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.dirty {
		tasks = append(tasks, t)
	}
	clear(c.dirty)
	all, c.all = c.all, false
	slices.Sort(tasks)
	return tasks, all
}

// StoreSource is the agent's open store as the mirror's Source. It is the
// store too (every method of *store.Store is promoted), with Append and
// Remove noting the tasks they touch in Changes: the agent hands it to its
// driver as the driver's store.Log, and the mirror hears of every commit
// without polling.
type StoreSource struct {
	*store.Store
	changes *Changes
}

var (
	_ Source    = (*StoreSource)(nil)
	_ store.Log = (*StoreSource)(nil)
)

// NewStoreSource wraps s. The caller keeps ownership of s (Close closes
// it, as a store.Log does).
func NewStoreSource(s *store.Store) *StoreSource {
	return &StoreSource{Store: s, changes: NewChanges()}
}

// Changes returns the set the mirror follows.
func (s *StoreSource) Changes() *Changes { return s.changes }

// Append appends to the store and notes the task. A failed append is
// noted too: its outcome may be unknown, and the mirror reads the truth.
func (s *StoreSource) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	v, err := s.Store.Append(ctx, task, expected, events...)
	s.changes.Note(task)
	return v, err
}

// Remove removes old terminal tasks from the store and notes them, so
// the mirror prunes them too.
func (s *StoreSource) Remove(ctx context.Context, olderThan time.Time) ([]string, error) {
	ids, err := s.Store.Remove(ctx, olderThan)
	for _, id := range ids {
		s.changes.Note(id)
	}
	if err != nil {
		s.changes.NoteAll()
	}
	return ids, err
}

// Heads lists every task with its version, reading heads only.
func (s *StoreSource) Heads(ctx context.Context) ([]Head, error) {
	vs, err := s.Store.Versions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Head, len(vs))
	for i, v := range vs {
		out[i] = Head{Task: v.Task, Seq: v.Version}
	}
	return out, nil
}

// Events reads task's log from seq from on.
func (s *StoreSource) Events(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error) {
	return s.Store.LoadFrom(ctx, task, from, limit)
}
