package store

import (
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// LiveLoader is a Log that hands its live tasks on as it reads them
// (Store and Shared do): a reader that acts on each task (a driver's
// Recover) starts on the first while the others are still being folded,
// in the same one read of the store. A Log without it is read with
// LoadTasks(LiveTasks), which gives the same tasks once all are read.
type LiveLoader interface {
	// LoadLive folds the tasks of the live index in one read transaction,
	// in id order, and calls fn with each as soon as it is folded: its
	// fold, or (with only ID set) the error LoadTask gives for it, as
	// LoadTasks(LiveTasks) sorts them into Tasks and Unreadable. fn runs
	// inside the read: it must not use the store, and should hand the task
	// on and return. incomplete is Scan.Incomplete's (the live index could
	// not be read to its end); err is for a read that could not happen at
	// all (the store closed, the context done).
	LoadLive(ctx context.Context, fn func(t fsm.Task, err error)) (incomplete, err error)
}

var (
	_ LiveLoader = (*Store)(nil)
	_ LiveLoader = (*Shared)(nil)
)

// LoadLive implements LiveLoader.
func (s *Store) LoadLive(ctx context.Context, fn func(t fsm.Task, err error)) (incomplete, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	err = s.view(func(tx *bolt.Tx) error {
		var ids []string
		ids, incomplete = listTasks(tx, s.path, LiveTasks)
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			t, err := foldTaskSafe(tx, s.path, id)
			if errors.Is(err, ErrUnknownTask) {
				err = &CorruptError{Task: id, Reason: "in the live index but not in the store"}
			}
			if err != nil {
				t = fsm.Task{ID: id}
			}
			fn(t, err)
		}
		return nil
	})
	return incomplete, err
}

// LoadLive is Store.LoadLive with the store open for the call.
func (s *Shared) LoadLive(ctx context.Context, fn func(t fsm.Task, err error)) (incomplete, err error) {
	st, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer s.release()
	return st.LoadLive(ctx, fn)
}
