package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Remove deletes every task in a terminal state whose last event is older
// than olderThan, and returns their ids in order. Live tasks are never
// removed, nor the task a desired record names (its current one, or the
// one after whose end it settled): the agent tells a start it still owes
// from a start it made by the task's presence. The space is reused by later appends; Compact returns it to the
// file system.
func (s *Store) Remove(ctx context.Context, olderThan time.Time) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, fmt.Errorf("%w: %s", ErrReadOnly, s.path)
	}
	cutoff := olderThan.UnixNano()
	var old []string
	err := s.view(func(tx *bolt.Tx) error {
		tasks := tx.Bucket(bucketTasks)
		if tasks == nil {
			return fmt.Errorf("%w: %s: no tasks bucket", ErrCorrupt, s.path)
		}
		keep, err := desiredTasks(tx)
		if err != nil {
			return err
		}
		return tasks.ForEachBucket(func(k []byte) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if keep[string(k)] {
				return nil
			}
			ok, err := removable(tx, string(k), cutoff)
			if ok {
				old = append(old, string(k))
			}
			return err
		})
	})
	if err != nil || len(old) == 0 {
		return nil, err
	}

	var removed []string
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if broken := s.broken.Load(); broken != nil {
		return nil, *broken
	}
	err = updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
		removed = removed[:0]
		tasks, live := tx.Bucket(bucketTasks), tx.Bucket(bucketLive)
		keep, err := desiredTasks(tx)
		if err != nil {
			return err
		}
		for _, id := range old {
			// Terminal is final, but the task may have been removed (and
			// created anew) since the scan, or named by a desired record.
			if ok, err := removable(tx, id, cutoff); err != nil || !ok || keep[id] {
				continue
			}
			if err := tasks.DeleteBucket([]byte(id)); err != nil {
				return fmt.Errorf("%w: %s: remove task %q: %w", ErrWrite, s.path, id, err)
			}
			if err := live.Delete([]byte(id)); err != nil {
				return fmt.Errorf("%w: %s: remove task %q: %w", ErrWrite, s.path, id, err)
			}
			removed = append(removed, id)
		}
		return nil
	})
	if err != nil {
		var pe panicError
		if errors.As(err, &pe) {
			s.broken.CompareAndSwap(nil, &err)
			s.wedged.Store(s.wedged.Load() || pe.wedged)
		}
		return nil, err
	}
	s.log.Info("removed terminal tasks", "count", len(removed), "older_than", olderThan)
	return removed, nil
}

// removable reports whether task is terminal and its last event is older
// than cutoff (Unix ns).
func removable(tx *bolt.Tx, task string, cutoff int64) (bool, error) {
	b, h, err := taskBucket(tx, task)
	if errors.Is(err, ErrUnknownTask) {
		return false, nil
	}
	if err != nil || !h.state.Terminal() {
		return false, err
	}
	var e fsm.Event
	if err := decodeAt(task, h.version, b.Get(seqKey(h.version)), &e); err != nil {
		return false, err
	}
	return e.Time < cutoff, nil
}

// Compact rewrites the store at path into a fresh, densely packed file and
// returns the sizes before and after. It takes the store's lock
// exclusively (waiting up to opts.LockTimeout, then ErrLocked) and holds it
// across the rename, so it is safe beside any other tether process: those
// waiting for the lock open the new file once it is done (they open the
// store by its path only once they hold the lock). The new file is written
// beside the old one, synced, and renamed over it: a crash leaves either
// the old file or the new one. The old file is only read (bbolt's
// freelist is not consulted), so Compact also rebuilds a store whose
// freelist is damaged.
func Compact(path string, opts Options) (before, after int64, err error) {
	opts = opts.withDefaults()
	path, err = preparePath(path, true)
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact: %w", err)
	}
	lk, err := lockStore(context.Background(), path, true, opts.LockTimeout)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if lerr := lk.release(); lerr != nil && err == nil {
			err = fmt.Errorf("store: compact %s: %w", path, lerr)
		}
	}()
	return compactLocked(path, opts, opts.LockTimeout)
}

// compactLocked is Compact once the caller holds the store's lock
// exclusively.
func compactLocked(path string, opts Options, boltTimeout time.Duration) (before, after int64, err error) {
	ro := opts
	ro.ReadOnly = true // nobody else writes: the lock is exclusive
	src, _, err := openBolt(path, ro, boltTimeout)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := src.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: compact %s: %w", path, cerr)
		}
	}()
	if err := prepare(src, path, true); err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s: %w", path, err)
	}
	before = st.Size()

	tmp := path + ".compact"
	_ = os.Remove(tmp) // a leftover of an interrupted compaction (a link is removed, not followed)
	if err := compactInto(src, path, tmp, opts.NoSync); err != nil {
		_ = os.Remove(tmp)
		return before, 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return before, 0, fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
	}
	if !opts.NoSync {
		if err := syncDir(filepath.Dir(path)); err != nil {
			return before, 0, fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
		}
	}
	if st, err = os.Stat(path); err != nil {
		return before, 0, fmt.Errorf("store: compact %s: %w", path, err)
	}
	opts.Logger.Info("store compacted", "path", path, "before", before, "after", st.Size())
	return before, st.Size(), nil
}

// compactInto copies src into a new file tmp, created exclusively (never
// through a link planted at its name).
func compactInto(src *bolt.DB, path, tmp string, noSync bool) (err error) {
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{
		NoSync: noSync,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			return openNoFollow(name, flag|os.O_EXCL, mode)
		},
	})
	if err != nil {
		return fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
	}
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = panicked(path, r, false)
		}
		if cerr := dst.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%w: compact %s: %w", ErrWrite, path, cerr)
		}
	}()
	if err := bolt.Compact(dst, src, 64<<20); err != nil {
		return fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
