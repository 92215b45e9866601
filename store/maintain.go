package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// The durable steps of a maintenance, where Options.Crash is called: a
// test kills (or pauses) the process there and checks that what a crash
// leaves is a whole store, the old one or the new one, and that nothing
// acknowledged is lost.
const (
	// PointSalvageCopied: a salvage's new store is written and synced;
	// nothing is installed.
	PointSalvageCopied = "salvage:copied"
	// PointInstallAside: the old store is linked to its new name; the new
	// one is not in place yet.
	PointInstallAside = "install:aside"
	// PointInstallRenamed: the new store is renamed into place; the
	// directory is not synced yet.
	PointInstallRenamed = "install:renamed"
	// PointCompactCopied: the compacted copy is written and synced beside
	// the store.
	PointCompactCopied = "compact:copied"
	// PointCompactRenamed: the compacted copy is renamed into place; the
	// directory is not synced yet.
	PointCompactRenamed = "compact:renamed"
	// PointRemoveCommitted: Remove's deletion is committed.
	PointRemoveCommitted = "remove:committed"
)

// CrashPoints lists the maintenance's points, in the order a salvage and a
// gc reach them.
func CrashPoints() []string {
	return []string{PointSalvageCopied, PointInstallAside, PointInstallRenamed,
		PointRemoveCommitted, PointCompactCopied, PointCompactRenamed}
}

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
	s.opts.crash(PointRemoveCommitted)
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
	m, err := BeginMaintenance(context.Background(), path, opts)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if rerr := m.Release(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return m.Compact()
}

// A Maintenance is the store's lock held exclusively with no store open on
// it: the one way to replace the store's file. While it is held no other
// process reads or writes the store (they wait for the lock, and open the
// file in place once it is let go), so what a maintenance reads is what it
// replaces: an append that returned before the maintenance began is in the
// file it installs, and one that comes after is made to that file. See
// "Maintenance" in doc.go for the contract with a process that holds the
// store open (an agent).
//
// A Maintenance is used by one goroutine at a time.
type Maintenance struct {
	path string
	opts Options
	lk   *fileLock
	// salvaged are the files Salvage wrote under this maintenance: the
	// only ones Install puts in place; with, for each, the readable
	// legal prefix of every lost task's log (for RecordLost).
	salvaged map[string]map[string][]rawRec
	done     bool
}

// BeginMaintenance takes the lock of the store at path exclusively,
// waiting for the processes that use it (as Open does: ErrLocked once its
// holder has not let go for opts.LockTimeout, or ctx's error).
func BeginMaintenance(ctx context.Context, path string, opts Options) (*Maintenance, error) {
	opts = opts.withDefaults()
	if opts.ReadOnly {
		return nil, fmt.Errorf("%w: a maintenance writes the store: %s", ErrReadOnly, path)
	}
	path, err := preparePath(path, true)
	if err != nil {
		return nil, fmt.Errorf("store: maintenance: %w", err)
	}
	lk, err := lockStore(ctx, path, true, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	return &Maintenance{path: path, opts: opts, lk: lk}, nil
}

// Suspend closes the store, once the appends in flight have committed, and
// hands its lock, still held, to a Maintenance: what a process that holds
// the store open (an agent) does to salvage or compact it. Operations on
// s after Suspend fail with ErrClosed; Maintenance.Reopen gives the store
// back. A store opened read-only holds the lock shared and cannot be
// suspended.
func (s *Store) Suspend() (*Maintenance, error) {
	if s.readOnly {
		return nil, fmt.Errorf("%w: %s: a read-only store cannot be suspended for maintenance", ErrReadOnly, s.path)
	}
	lk, err := s.close(true)
	if err != nil {
		_ = lk.release()
		return nil, err
	}
	if lk == nil {
		return nil, ErrClosed
	}
	return &Maintenance{path: s.path, opts: s.opts, lk: lk}, nil
}

// Path is the store file's path.
func (m *Maintenance) Path() string { return m.path }

func (m *Maintenance) check() error {
	if m.done {
		return fmt.Errorf("%w: the maintenance of %s has ended", ErrClosed, m.path)
	}
	return nil
}

// Salvage is the package's Salvage of the store under maintenance into
// dst. Since no other process uses the store meanwhile, what it copies is
// the whole store as it stands: Install puts it in place.
//
// claims are the tasks known outside the store (their executors'
// directories): where the store's structure is damaged, the tasks its
// walk cannot reach are looked for by a scan of the file's pages and taken
// only as their claims prove them, and a live claim found nowhere is
// reported lost with its nonce (see Claim).
func (m *Maintenance) Salvage(ctx context.Context, dst string, claims ...Claim) (SalvageReport, error) {
	if err := m.check(); err != nil {
		return SalvageReport{Src: m.path, Dst: dst}, err
	}
	src, ddst, rep, err := salvagePaths(m.path, dst)
	if err != nil {
		return rep, err
	}
	prefixes, err := salvageLocked(ctx, src, ddst, m.opts, &rep, claims)
	if err != nil {
		return rep, err
	}
	if m.salvaged == nil {
		m.salvaged = map[string]map[string][]rawRec{}
	}
	m.salvaged[ddst] = prefixes
	m.opts.crash(PointSalvageCopied)
	return rep, nil
}

// Loss is a lost task whose processes are accounted for (killed by their
// proven identity, or proven gone), to be recorded in the salvaged store:
// Executor is the identity it was killed by, if known, and Reason says
// what happened.
type Loss struct {
	ID       string
	Nonce    string
	Executor *fsm.Identity
	Reason   string
}

// RecordLost writes into the store Salvage wrote at dst, under this
// maintenance, each of losses as a task that ended lost: what could be
// read of its log (its legal prefix), then the events that take it from
// there to lost (its spawn, with the nonce, and its executor, when the
// prefix does not have them; executor-lost with the reason; and
// executor-reaped), so that `tether status --all` and `tether events` say
// what became of it. A task the new store already holds, or whose prefix
// ended already, is left as it is. Every write is synced before
// RecordLost returns, and Install is what puts them in place: a crash
// before leaves the damaged store, and the salvage is run again.
func (m *Maintenance) RecordLost(dst string, losses []Loss, now time.Time) error {
	if err := m.check(); err != nil {
		return err
	}
	ddst, err := preparePath(dst, true)
	if err != nil {
		return fmt.Errorf("store: record lost tasks: %w", err)
	}
	prefixes, ok := m.salvaged[ddst]
	if !ok {
		return fmt.Errorf("store: record lost tasks in %s: it was not salvaged under this maintenance", ddst)
	}
	if len(losses) == 0 {
		return nil
	}
	out, err := Open(ddst, m.opts)
	if err != nil {
		return err
	}
	var recs []salvaged
	for _, l := range losses {
		if _, err := out.LoadTask(context.Background(), l.ID); !errors.Is(err, ErrUnknownTask) {
			if err != nil {
				_ = out.Close()
				return err
			}
			continue // copied after all
		}
		s, ok := lostLog(l, prefixes[l.ID], now.UnixNano())
		if ok {
			recs = append(recs, s)
		}
	}
	werr := out.importTasks(recs)
	if cerr := out.Close(); cerr != nil && werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("store: record lost tasks in %s: %w", ddst, werr)
	}
	return nil
}

// lostLog is the log that records l lost: prefix, then the events from its
// state to lost. ok is false when the prefix ended already.
func lostLog(l Loss, prefix []rawRec, now int64) (salvaged, bool) {
	t, n := foldPrefix(l.ID, prefix)
	recs := slices.Clone(prefix[:n])
	if t.State.Terminal() {
		return salvaged{}, false
	}
	reason := "salvage: " + l.Reason
	var evs []fsm.Event
	if t.State == fsm.StateNone {
		evs = append(evs, fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{},
			Reason: "salvage: none of its records could be read; the task is known by its executor's directory"})
	}
	if t.State == fsm.StateNone || t.State == fsm.StateCreated {
		if l.Nonce == "" {
			evs = append(evs, fsm.Event{Type: fsm.EventStopRequested, Reason: reason})
		} else {
			evs = append(evs, fsm.Event{Type: fsm.EventSpawnIntent, Nonce: l.Nonce})
			if l.Executor != nil && l.Executor.PID > 0 {
				x := *l.Executor
				evs = append(evs, fsm.Event{Type: fsm.EventExecutorUp, Executor: &x})
			}
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != fsm.EventStopRequested {
		if t.State != fsm.StateReaping {
			evs = append(evs, fsm.Event{Type: fsm.EventExecutorLost, Reason: reason})
		}
		evs = append(evs, fsm.Event{Type: fsm.EventExecutorReaped, Target: fsm.StateLost, Reason: reason})
	}
	for i := range evs {
		e := &evs[i]
		e.Time = now
		if err := fsm.Lifecycle.FoldInPlace(&t, e); err != nil {
			return salvaged{}, false // not a legal way to lost from here: leave it
		}
		recs = append(recs, rawRec{seq: t.Version, v: encodeRecord(nil, t.Version, e)})
	}
	return salvaged{task: t, recs: recs}, true
}

// Install puts the store Salvage wrote at newPath, under this maintenance,
// in the place of the store, keeping the old file as aside: it links the
// old file to aside, renames the new one over the store's path and syncs
// the directory. A crash leaves the old store in place or the new one, and
// aside either way. aside must not exist, and both must be in the store's
// directory. A file this maintenance did not salvage is refused: it could
// lack what was appended before the maintenance began.
func (m *Maintenance) Install(newPath, aside string) error {
	if err := m.check(); err != nil {
		return err
	}
	newPath, err := preparePath(newPath, true)
	if err != nil {
		return fmt.Errorf("store: install: %w", err)
	}
	if _, ok := m.salvaged[newPath]; !ok {
		return fmt.Errorf("store: install %s over %s: it was not salvaged under this maintenance, so it may lack what was appended since it was made", newPath, m.path)
	}
	if aside, err = filepath.Abs(aside); err != nil {
		return fmt.Errorf("store: install: %w", err)
	}
	if filepath.Dir(newPath) != filepath.Dir(m.path) || filepath.Dir(aside) != filepath.Dir(m.path) {
		return fmt.Errorf("store: install %s: the new store and the old one's new name must be in its directory", m.path)
	}
	if err := os.Link(m.path, aside); err != nil {
		return fmt.Errorf("%w: install: keep the old store as %s: %w", ErrWrite, aside, err)
	}
	m.opts.crash(PointInstallAside)
	if err := os.Rename(newPath, m.path); err != nil {
		return fmt.Errorf("%w: install %s over %s: %w", ErrWrite, newPath, m.path, err)
	}
	delete(m.salvaged, newPath)
	m.opts.crash(PointInstallRenamed)
	if err := syncDir(filepath.Dir(m.path)); err != nil {
		return fmt.Errorf("%w: install: %w", ErrWrite, err)
	}
	// The salvage's own lock file; nobody else ever took it.
	_ = os.Remove(newPath + lockSuffix)
	m.opts.Logger.Info("salvaged store installed", "path", m.path, "aside", aside)
	return nil
}

// Compact is the package's Compact of the store under maintenance.
func (m *Maintenance) Compact() (before, after int64, err error) {
	if err := m.check(); err != nil {
		return 0, 0, err
	}
	return compactLocked(m.path, m.opts, m.opts.LockTimeout)
}

// Reopen ends the maintenance and opens the store in place (the one
// Install put there, or the one that was there) with the lock it holds:
// the Store holds the lock from here, and lets it go when it is closed.
// On error the lock is let go.
func (m *Maintenance) Reopen() (*Store, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	m.done = true
	s, err := openLocked(m.path, m.opts, m.opts.LockTimeout)
	if err != nil {
		_ = m.lk.release()
		return nil, err
	}
	s.lock = m.lk
	return s, nil
}

// Release ends the maintenance and lets the lock go: the processes that
// wait for it open what is in place. It is idempotent.
func (m *Maintenance) Release() error {
	if m.done {
		return nil
	}
	m.done = true
	for p := range m.salvaged {
		m.opts.Logger.Debug("salvaged store not installed", "path", p)
	}
	if err := m.lk.release(); err != nil {
		return fmt.Errorf("store: maintenance of %s: %w", m.path, err)
	}
	return nil
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
	if err := prepare(src, path, false); err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("store: compact %s: %w", path, err)
	}
	before = st.Size()

	// The steps, in this order (each must be durable before the next: a
	// power loss between any two leaves the old store or the whole new
	// one at path, never a file whose name came before its content):
	//  1. write the copy beside the store;
	//  2. fsync it (its content: bbolt writes it unsynced);
	//  3. rename it over the store;
	//  4. fsync the directory (the new name: the caller lets the lock go
	//     next, and an append acknowledged in the new file after that is
	//     lost with it if the rename is not durable).
	tmp := path + ".compact"
	_ = os.Remove(tmp) // a leftover of an interrupted compaction (a link is removed, not followed)
	if err := compactInto(src, path, tmp); err != nil {
		_ = os.Remove(tmp)
		return before, 0, err
	}
	if !opts.NoSync {
		if err := syncFile(tmp); err != nil {
			_ = os.Remove(tmp)
			return before, 0, fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
		}
	}
	opts.crash(PointCompactCopied)
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return before, 0, fmt.Errorf("%w: compact %s: %w", ErrWrite, path, err)
	}
	opts.crash(PointCompactRenamed)
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
// through a link planted at its name). The copy is not synced: the caller
// syncs it once, whole, before it gives it the store's name (bbolt would
// sync each of its transactions, and nothing reads the copy before then).
func compactInto(src *bolt.DB, path, tmp string) (err error) {
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{
		NoSync: true,
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

// syncFile fsyncs the regular file at path (never through a link).
func syncFile(path string) error {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
