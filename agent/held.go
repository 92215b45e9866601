package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// heldStore is the agent's store: opened once and held for the agent's
// life (one opener, so that every request's appends share commits), with
// a pause for the upkeep that works on the file by its path (a check, a
// compaction, a salvage and its install). Exclusive waits for the
// operations in flight, closes the store, runs the upkeep while every new
// operation waits, and opens the store again: a request is delayed by it,
// never failed or lost.
type heldStore struct {
	path string
	opts store.Options

	mu sync.RWMutex // held shared by each operation, exclusively by Exclusive
	st *store.Store
	// err is why the store could not be opened again after an upkeep (it
	// is tried again at the next operation).
	err    error
	closed bool
}

var _ store.Log = (*heldStore)(nil)

func openHeld(path string, opts store.Options) (*heldStore, error) {
	st, err := store.Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &heldStore{path: st.Path(), opts: opts, st: st}, nil
}

// use returns the open store for one operation, with the shared lock
// held: the caller calls done.
func (h *heldStore) use() (*store.Store, func(), error) {
	h.mu.RLock()
	if h.st != nil {
		return h.st, h.mu.RUnlock, nil
	}
	closed := h.closed
	h.mu.RUnlock()
	if closed {
		return nil, nil, store.ErrClosed
	}
	// The store could not be opened again after an upkeep: try now.
	h.mu.Lock()
	if h.st == nil && !h.closed {
		h.st, h.err = store.Open(h.path, h.opts)
	}
	err := h.err
	if h.closed {
		err = store.ErrClosed
	}
	h.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("agent: the store could not be opened again after its upkeep: %w", err)
	}
	return h.use()
}

// Exclusive runs fn with the store closed; every operation that starts
// meanwhile waits for it. The store is opened again after fn.
func (h *heldStore) Exclusive(ctx context.Context, fn func() error) error {
	locked := make(chan struct{})
	go func() {
		h.mu.Lock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-ctx.Done():
		go func() { <-locked; h.mu.Unlock() }()
		return context.Cause(ctx)
	}
	defer h.mu.Unlock()
	if h.closed {
		return store.ErrClosed
	}
	if h.st != nil {
		if err := h.st.Close(); err != nil && h.opts.Logger != nil {
			h.opts.Logger.Warn("closing the store for its upkeep", "err", err)
		}
		h.st = nil
	}
	ferr := fn()
	h.st, h.err = store.Open(h.path, h.opts)
	if h.err != nil {
		return errors.Join(ferr, fmt.Errorf("agent: opening the store again after its upkeep: %w", h.err))
	}
	return ferr
}

func (h *heldStore) Path() string           { return h.path }
func (h *heldStore) Options() store.Options { return h.opts }

func (h *heldStore) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.st == nil {
		return nil
	}
	err := h.st.Close()
	h.st = nil
	return err
}

func (h *heldStore) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	st, done, err := h.use()
	if err != nil {
		return 0, err
	}
	defer done()
	return st.Append(ctx, task, expected, events...)
}

func (h *heldStore) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.Load(ctx, task)
}

func (h *heldStore) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	st, done, err := h.use()
	if err != nil {
		return fsm.Task{}, err
	}
	defer done()
	return st.LoadTask(ctx, task)
}

func (h *heldStore) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	st, done, err := h.use()
	if err != nil {
		return store.Scan{}, err
	}
	defer done()
	return st.LoadTasks(ctx, which)
}

// Live and All read the ids with the store in use, then call fn with
// nothing held (fn may use the store, and an upkeep may come between).
func (h *heldStore) Live(ctx context.Context, fn func(task string) error) error {
	return h.each(ctx, (*store.Store).Live, fn)
}

func (h *heldStore) All(ctx context.Context, fn func(task string) error) error {
	return h.each(ctx, (*store.Store).All, fn)
}

func (h *heldStore) each(ctx context.Context, list func(*store.Store, context.Context, func(string) error) error, fn func(string) error) error {
	st, done, err := h.use()
	if err != nil {
		return err
	}
	var ids []string
	err = list(st, ctx, func(id string) error { ids = append(ids, id); return nil })
	done()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return nil
}

func (h *heldStore) Remove(ctx context.Context, olderThan time.Time) ([]string, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.Remove(ctx, olderThan)
}

func (h *heldStore) Desired(ctx context.Context) ([]store.Desired, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.Desired(ctx)
}

func (h *heldStore) ChangeDesired(ctx context.Context, changes ...store.DesiredChange) ([]store.Desired, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.ChangeDesired(ctx, changes...)
}

func (h *heldStore) Versions(ctx context.Context) ([]store.TaskVersion, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.Versions(ctx)
}

func (h *heldStore) LoadFrom(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error) {
	st, done, err := h.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return st.LoadFrom(ctx, task, from, limit)
}
