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
// removed. The space is reused by later appends; Compact returns it to the
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
		return tasks.ForEachBucket(func(k []byte) error {
			if err := ctx.Err(); err != nil {
				return err
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
	err = updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
		removed = removed[:0]
		tasks, live := tx.Bucket(bucketTasks), tx.Bucket(bucketLive)
		for _, id := range old {
			// Terminal is final, but the task may have been removed (and
			// created anew) since the scan.
			if ok, err := removable(tx, id, cutoff); err != nil || !ok {
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
// returns the sizes before and after. It takes the store's lock (waiting up
// to opts.LockTimeout, then ErrLocked), so the store must not be open
// elsewhere. The new file is written beside the old one, synced, and
// renamed over it: a crash leaves either the old file or the new one.
func Compact(path string, opts Options) (before, after int64, err error) {
	opts = opts.withDefaults()
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("store: compact %s: %w", path, err)
	}
	opts.ReadOnly = false // exclusive lock: nobody writes while we copy
	src, err := openBolt(path, opts)
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
	_ = os.Remove(tmp) // a leftover of an interrupted compaction
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

func compactInto(src *bolt.DB, path, tmp string, noSync bool) (err error) {
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoSync: noSync})
	if err != nil {
		return fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
	}
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = panicked(path, r)
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
