package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Selection says which tasks LoadTasks reads.
type Selection uint8

const (
	// AllTasks is every task of the store.
	AllTasks Selection = iota
	// LiveTasks is the tasks of the live index (not in a terminal state).
	LiveTasks
)

// Scan is what LoadTasks read: every task it could fold, and every task it
// knows of but could not.
type Scan struct {
	// Tasks are the tasks folded from their logs, in id order.
	Tasks []fsm.Task
	// Unreadable are the tasks whose log (or head, or pages) is damaged,
	// in id order, each with the error LoadTask gives for it.
	Unreadable []TaskError
	// Incomplete is set when the index of tasks itself could not be read
	// to its end, so that tasks past the damage may be in neither list (a
	// live one is still listed, from the live index, when that is
	// readable). It wraps ErrCorrupt and says where the reading stopped.
	Incomplete error
}

// TaskError is a task that could not be read, and why.
type TaskError struct {
	Task string
	Err  error
}

func (e TaskError) Error() string { return fmt.Sprintf("task %q: %v", e.Task, e.Err) }

func (e TaskError) Unwrap() error { return e.Err }

// LoadTasks folds every task of the selection in one read of the store and
// keeps going past the ones it cannot read: a status listing shows every
// readable task and marks the others, rather than failing on the first
// damaged one. The error is for a read that could not happen at all (the
// store closed, the context done, the file unreadable).
func (s *Store) LoadTasks(ctx context.Context, which Selection) (Scan, error) {
	if err := ctx.Err(); err != nil {
		return Scan{}, err
	}
	var sc Scan
	err := s.view(func(tx *bolt.Tx) error {
		sc = Scan{}
		ids, incomplete := listTasks(tx, s.path, which)
		sc.Incomplete = incomplete
		for _, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			t, err := foldTaskSafe(tx, s.path, id)
			if which == LiveTasks && errors.Is(err, ErrUnknownTask) {
				err = &CorruptError{Task: id, Reason: "in the live index but not in the store"}
			}
			if err != nil {
				sc.Unreadable = append(sc.Unreadable, TaskError{Task: id, Err: err})
				continue
			}
			sc.Tasks = append(sc.Tasks, t)
		}
		return nil
	})
	return sc, err
}

// listTasks returns the ids of the selection, in order. Where the index
// cannot be read to its end it returns what it read, and the live ids past
// that point (so no live task goes unlisted while the live index is
// readable), and an error saying where it stopped.
func listTasks(tx *bolt.Tx, path string, which Selection) (ids []string, incomplete error) {
	index, name := bucketTasks, "task index"
	if which == LiveTasks {
		index, name = bucketLive, "live index"
	}
	ids, err := bucketKeys(tx, path, index)
	if err == nil {
		return ids, nil
	}
	after := "its start"
	if len(ids) > 0 {
		after = fmt.Sprintf("task %q", ids[len(ids)-1])
	}
	incomplete = fmt.Errorf("%w: %s: the %s could not be read past %s: %w", ErrCorrupt, path, name, after, err)
	if which == LiveTasks {
		return ids, incomplete
	}
	live, _ := bucketKeys(tx, path, bucketLive)
	for _, id := range live {
		if len(ids) == 0 || id > ids[len(ids)-1] {
			ids = append(ids, id)
		}
	}
	return ids, incomplete
}

// bucketKeys returns the keys of a top-level bucket, in order, as far as
// it can read them: on damage, the keys read so far and an error.
func bucketKeys(tx *bolt.Tx, path string, bucket []byte) (keys []string, err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked (%v)", r)
		}
	}()
	b := tx.Bucket(bucket)
	if b == nil {
		return nil, fmt.Errorf("no %s bucket", bucket)
	}
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, string(k))
	}
	return keys, nil
}

// foldTaskSafe is foldTask that turns a bbolt panic (a damaged page on the
// way to the task's records) into a *CorruptError naming the task and the
// file.
func foldTaskSafe(tx *bolt.Tx, path, task string) (t fsm.Task, err error) {
	err = taskSafe(path, task, func() error {
		var err error
		t, err = foldTask(tx, task)
		return err
	})
	if err != nil {
		return fsm.Task{}, err
	}
	return t, nil
}

// taskSafe runs fn, which reads task, turning a bbolt panic into a
// *CorruptError naming the task and the file. The transaction stays
// usable for other tasks: a read transaction keeps no state a panic could
// leave half-changed.
func taskSafe(path, task string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = &CorruptError{Task: task, Reason: fmt.Sprintf("%s: the pages holding it are damaged (bbolt panicked: %v): run `tether check` on it", path, r)}
		}
	}()
	return fn()
}
