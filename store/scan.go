package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

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
		ids, incomplete := listTasks(tx, s.path, which)
		sc = loadIDs(ctx, tx, s.path, which, ids)
		sc.Incomplete = incomplete
		return ctx.Err()
	})
	if err != nil || sc.Incomplete == nil || which != AllTasks {
		return sc, err
	}
	// bbolt's cursor cannot step past a damaged page of the task index:
	// list it page by page with the store's own reader, which goes on
	// past the damage, and fold what it lists through bbolt (a task's own
	// pages are reached by a search that may avoid the damaged one). The
	// file must not change under the reader: hold off commits.
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return sc, ErrClosed
	}
	if s.wedged.Load() {
		return sc, nil
	}
	exclusive := !s.readOnly && s.broken.Load() == nil
	err = s.noteDamage(readSafe(s.db, s.path, exclusive, func(tx *bolt.Tx) error {
		ids, incomplete, err := rawTaskIDs(s.path)
		if err != nil {
			return nil // keep what bbolt listed
		}
		live, _ := bucketKeys(tx, s.path, bucketLive)
		ids = mergeIDs(ids, live)
		full := loadIDs(ctx, tx, s.path, which, ids)
		full.Incomplete = incomplete
		sc = full
		return ctx.Err()
	}))
	return sc, err
}

// loadIDs folds the tasks ids names, in one transaction, sorting them
// into the readable and the unreadable.
func loadIDs(ctx context.Context, tx *bolt.Tx, path string, which Selection, ids []string) Scan {
	var sc Scan
	for _, id := range ids {
		if ctx.Err() != nil {
			return sc
		}
		t, err := foldTaskSafe(tx, path, id)
		if which == LiveTasks && errors.Is(err, ErrUnknownTask) {
			err = &CorruptError{Task: id, Reason: "in the live index but not in the store"}
		}
		if err != nil {
			sc.Unreadable = append(sc.Unreadable, TaskError{Task: id, Err: err})
			continue
		}
		sc.Tasks = append(sc.Tasks, t)
	}
	return sc
}

// rawTaskIDs lists the task index page by page. incomplete, when set, says
// which pages it could not read (and which tasks their parents say they
// held).
func rawTaskIDs(path string) (ids []string, incomplete error, err error) {
	raw, err := openRaw(path)
	if err != nil {
		return nil, nil, err
	}
	defer raw.close()
	w := newRawWalk(raw)
	var tasks []byte
	w.root(func(e rawElem) bool {
		if e.bucket && string(e.key) == string(bucketTasks) {
			tasks = e.value
		}
		return true
	}, func(rawDamage) {})
	if tasks == nil {
		return nil, nil, fmt.Errorf("%w: %s: no task index", ErrCorrupt, path)
	}
	var holes []string
	w.bucket(tasks, "the task index", func(e rawElem) bool {
		ids = append(ids, string(e.key))
		return true
	}, func(d rawDamage) {
		switch {
		case d.from != nil && d.to != nil:
			holes = append(holes, fmt.Sprintf("page %d (tasks from %q up to %q)", d.page, d.from, d.to))
		case d.from != nil:
			holes = append(holes, fmt.Sprintf("page %d (tasks from %q on)", d.page, d.from))
		default:
			holes = append(holes, fmt.Sprintf("page %d", d.page))
		}
	})
	if len(holes) > 0 {
		incomplete = fmt.Errorf("%w: %s: the task index could not be read on %s: the live tasks there are listed as unreadable, the others are missing; run `tether check` on it, and `tether check --salvage` to get past it",
			ErrCorrupt, path, strings.Join(holes, ", "))
	}
	return ids, incomplete, nil
}

// mergeIDs merges two sorted id lists without duplicates.
func mergeIDs(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// listTasks returns the ids of the selection, in order: every task is the
// task index's ids and the live index's (an entry of the live index
// without its task is listed, to be read as unreadable: it may name a
// running task whose log is gone). Where the index cannot be read to its
// end it returns what it read, and the live ids past that point (so no
// live task goes unlisted while the live index is readable), and an error
// saying where it stopped.
func listTasks(tx *bolt.Tx, path string, which Selection) (ids []string, incomplete error) {
	index, name := bucketTasks, "task index"
	if which == LiveTasks {
		index, name = bucketLive, "live index"
	}
	ids, err := bucketKeys(tx, path, index)
	if err == nil {
		if which == AllTasks {
			live, _ := bucketKeys(tx, path, bucketLive)
			ids = mergeIDs(ids, live)
		}
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
			err = &CorruptError{Task: task, Reason: fmt.Sprintf("%s: the pages holding it are damaged (bbolt panicked: %v): run `tether check` on it, and `tether check --salvage` to get past it", path, r)}
		}
	}()
	return fn()
}
