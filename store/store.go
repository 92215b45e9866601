package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/tether-fsm/tether/fsm"
)

// Log is the event log the driver uses. Store is its bbolt implementation;
// the interface is small so that a distributed backend can be added later
// without touching fsm or driver.
type Log interface {
	// Append appends events to task's log if its version is expected (0 for
	// a new task, whose first event must be task-created) and returns the
	// new version. It returns only once the events are durable.
	Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error)
	// Load returns task's events in order.
	Load(ctx context.Context, task string) ([]fsm.Event, error)
	// LoadTask returns the fold of task's events, with ID set.
	LoadTask(ctx context.Context, task string) (fsm.Task, error)
	// Live calls fn with the id of every non-terminal task, in order.
	Live(ctx context.Context, fn func(task string) error) error
	// All calls fn with the id of every task, in order.
	All(ctx context.Context, fn func(task string) error) error
	// LoadTasks folds every task of the selection in one read, in id
	// order, and lists those it could not read apart (Scan).
	LoadTasks(ctx context.Context, which Selection) (Scan, error)
	// Close drains pending appends and closes the log.
	Close() error
}

var _ Log = (*Store)(nil)

// schemaVersion is the newest layout of buckets described in doc.go that
// this build understands: 2 adds the desired bucket (desired.go). A store
// is written at 1 until its first desired record; both are read.
const schemaVersion = schemaDesired

// maxTaskID bounds task ids (bbolt allows keys up to 32 KiB).
const maxTaskID = 1024

var (
	bucketMeta  = []byte("meta")
	bucketTasks = []byte("tasks")
	bucketLive  = []byte("live")
	keySchema   = []byte("schema")
	liveMark    = []byte{1}
)

// Options configure Open and Compact.
type Options struct {
	// NoSync skips fsync on commit. Tests only: an acknowledged append may
	// then be lost by a machine crash.
	NoSync bool
	// LockTimeout is how long Open waits for another process to release
	// the file lock before returning ErrLocked. 0 means 1s.
	LockTimeout time.Duration
	// Logger receives the store's logs; nil means none.
	Logger hclog.Logger
	// ReadOnly opens the file with a shared lock; Append and Remove fail.
	ReadOnly bool
	// Crash is called at each durable step of a maintenance (Salvage,
	// Install, Compact, Remove), with its name (CrashPoints), so that a
	// test can kill or pause the process between the steps. nil: none.
	Crash func(point string)
	// Committed, when set, is told how long each group commit of appends
	// took that wrote (its transaction, with its fsync), on the
	// committer's goroutine: it must not block. nil: the clock is not
	// read.
	Committed func(time.Duration)
}

func (o Options) crash(point string) {
	if o.Crash != nil {
		o.Crash(point)
	}
}

func (o Options) withDefaults() Options {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Store is a task event log in a bbolt file. It is safe for concurrent
// use; appends from many goroutines share commits and fsyncs.
type Store struct {
	db       *bolt.DB
	file     *os.File  // the file bbolt opened
	lock     *fileLock // the store's lock, released by Close
	path     string
	log      hclog.Logger
	opts     Options // as opened (a Maintenance of it reopens with them)
	readOnly bool

	// mu is held shared by every operation that uses db or sends to reqs,
	// and exclusively by Close, so that Close waits for them.
	mu     sync.RWMutex
	closed bool

	reqs chan *request // to the committer
	quit chan struct{} // closed by Close: drain and stop
	done chan struct{} // closed by the committer when it has stopped

	// broken is set after bbolt panicked in a transaction: the file is
	// damaged and no further writes are attempted. wedged is set when the
	// transaction could not be rolled back: then bbolt's locks are held
	// for ever, and Close lets go of the file without bbolt.
	broken atomic.Pointer[error]
	wedged atomic.Bool
}

// Open opens (creating if needed) the store at path. The parent directory
// is created 0700 and the file 0600. The store is locked through the file
// PATH.lock beside it (see lock.go): exclusively, or shared with
// Options.ReadOnly. A store locked by another process gives ErrLocked after
// opts.LockTimeout; a file that is not a tether store, or is truncated or
// damaged, gives ErrNotStore naming the path; a symbolic link or a special
// file ErrUnsafePath.
func Open(path string, opts Options) (*Store, error) {
	return open(context.Background(), path, opts)
}

// open is Open that also gives up waiting for the lock when ctx is done.
func open(ctx context.Context, path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	path, err := preparePath(path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	lk, err := lockStore(ctx, path, !opts.ReadOnly, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	s, err := openLocked(path, opts, opts.LockTimeout)
	if err != nil {
		_ = lk.release()
		return nil, err
	}
	s.lock = lk
	return s, nil
}

// preparePath makes path absolute, creates its directory for a writer, and
// refuses a store file that is a symbolic link or not a regular file (the
// opens that follow do not follow links either: this is for a clear error).
func preparePath(path string, readOnly bool) (string, error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if !readOnly {
		if err := mkdirAllDurable(filepath.Dir(path)); err != nil {
			return "", fmt.Errorf("store: create directory for %s: %w", path, err)
		}
	}
	st, err := os.Lstat(path)
	switch {
	case err == nil && st.Mode()&os.ModeSymlink != 0:
		return "", unsafePath(path, "it is a symbolic link")
	case err == nil && !st.Mode().IsRegular():
		return "", unsafePath(path, fmt.Sprintf("it is not a regular file (%s)", st.Mode().Type()))
	case err != nil && (readOnly || !errors.Is(err, os.ErrNotExist)):
		return "", fmt.Errorf("store: open %s: %w", path, err)
	}
	return path, nil
}

// mkdirAllDurable is os.MkdirAll (0700) that also makes each directory it
// creates durable: it fsyncs the parent of every one, so a power loss
// cannot take a new store's directory (and the store with it) away.
func mkdirAllDurable(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	return syncDir(parent)
}

// createStore lays out a new store at path durably: the file is made
// whole beside it, synced, renamed into place and its directory synced, so
// a crash during creation leaves no half-made store file (which every
// later open would refuse as damaged).
func createStore(path string, opts Options) error {
	tmp := path + ".new"
	_ = os.Remove(tmp) // a leftover of a creation cut short
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, NoSync: opts.NoSync,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			return openNoFollow(name, flag|os.O_EXCL, mode)
		}})
	if err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrWrite, path, err)
	}
	if err := prepare(db, path, true); err != nil {
		_ = db.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := db.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: create %s: %w", ErrWrite, path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: create %s: %w", ErrWrite, path, err)
	}
	if opts.NoSync {
		return nil
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%w: create %s: %w", ErrWrite, path, err)
	}
	return nil
}

// openLocked opens the store file at path, whose lock the caller holds.
func openLocked(path string, opts Options, boltTimeout time.Duration) (*Store, error) {
	if !opts.ReadOnly {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			if err := createStore(path, opts); err != nil {
				return nil, err
			}
		}
		if err := checkFreelist(path); err != nil {
			return nil, err
		}
	}
	db, file, err := openBolt(path, opts, boltTimeout)
	if err != nil {
		return nil, err
	}
	if err := prepare(db, path, false); err != nil {
		_ = db.Close()
		return nil, err
	}
	s := &Store{db: db, file: file, path: path, log: opts.Logger.With("path", path), opts: opts, readOnly: opts.ReadOnly}
	if !opts.ReadOnly {
		s.reqs = make(chan *request, maxBatch)
		s.quit = make(chan struct{})
		s.done = make(chan struct{})
		go s.run()
	}
	s.log.Debug("store opened", "read_only", opts.ReadOnly)
	return s, nil
}

// openBolt opens the bbolt file and turns its failures into the store's
// errors: a lock timeout into ErrLocked, a damaged file into ErrNotStore.
// It returns the file bbolt opened too, so that a store bbolt cannot close
// (see Store.Close) can still be let go of. The caller holds the store's
// lock, so bbolt's own flock on the file succeeds at once unless a process
// that does not use the lock file holds it; it is given lockTimeout.
func openBolt(path string, opts Options, lockTimeout time.Duration) (db *bolt.DB, file *os.File, err error) {
	// A store file is never empty: createStore makes it whole before it
	// has its name. An empty one is a store cut to nothing, and opening it
	// as a new store would leave its running tasks unknown.
	if st, statErr := os.Stat(path); statErr == nil && st.Size() < 2*int64(os.Getpagesize()) {
		return nil, nil, notStore(path, fmt.Errorf("file is only %d bytes", st.Size()))
	}
	// bbolt may panic (or fault on a page past the end of a file cut short)
	// while opening a damaged file; it then never returns its DB, so keep
	// the file to unlock and close it. (Its mapping is leaked: bbolt gives
	// no way to unmap it.)
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				// The leaked mapping keeps the open file alive, so unlock
				// explicitly rather than trusting Close to.
				_ = syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
				_ = file.Close()
			}
			db, file, err = nil, nil, notStore(path, fmt.Errorf("bbolt panicked: %v", r))
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:  max(lockTimeout, time.Millisecond), // 0 would wait for ever
		ReadOnly: opts.ReadOnly,
		NoSync:   opts.NoSync,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := openNoFollow(name, flag, mode)
			file = f
			return f, err
		},
	})
	switch {
	case err == nil:
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, fmt.Errorf("%w: %s: a process holds the file itself without its lock file (gave up after %s)", ErrLocked, path, opts.LockTimeout)
	case errors.Is(err, ErrUnsafePath):
		return nil, nil, err
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, nil, notStore(path, err)
	default:
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// A file cut short still has valid meta pages that point past its end.
	st, err := os.Stat(path)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := viewSafe(db, path, func(tx *bolt.Tx) error {
		if tx.Size() > st.Size() {
			return notStore(path, fmt.Errorf("truncated: %d bytes, its header says %d", st.Size(), tx.Size()))
		}
		return nil
	}); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, file, nil
}

// checkFreelist refuses to open for writing a store whose freelist is
// damaged: bbolt reads it only when it opens a file for writing, trusts
// it, and on the first allocation from a damaged one panics inside its
// commit (or, worse, hands out pages in use). The check is cheap (the
// metas, the freelist page and the root page): the free ids are in range,
// in order, and none is the freelist's own page, the root or the root of
// a top-level bucket. Overlap deeper in the tree is Check's to find.
func checkFreelist(path string) error {
	r, err := openRaw(path)
	if err != nil {
		return nil // a new file, or one bbolt will refuse with its own words
	}
	defer r.close()
	if r.size < int64(r.meta.hwm)*int64(r.pageSize) {
		return nil // cut short: openBolt says so
	}
	free, _, err := r.freelist()
	if err == nil {
		err = r.rootsNotFree(free)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w: it can still be read (Check, Salvage, a read-only Open); Compact rebuilds the freelist",
			ErrCorrupt, path, err)
	}
	return nil
}

func notStore(path string, cause error) error {
	return fmt.Errorf("%w: %s (%w): if it is a damaged tether store, run `tether check --salvage` (it keeps the damaged file, "+
		"copies what it can read into a new store, and accounts for every task still running) rather than moving it aside, "+
		"which would leave its running tasks where no command reaches them; if it is not a tether store, move it aside",
		ErrNotStore, path, cause)
}

// prepare checks the schema version of an existing store, or, with
// create, lays out a new one in the new file db (createStore's, not yet
// named path). A file at the store's path that bbolt opens but that holds
// no bucket at all is refused, never laid out: createStore makes a store
// whole before it gives it its name, so such a file is a store that lost
// its content (a copy renamed into place before it was on disk, a file
// written over), and laying it out anew would leave its running tasks
// unknown.
func prepare(db *bolt.DB, path string, create bool) error {
	empty := false
	err := viewSafe(db, path, func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			k, _ := tx.Cursor().First()
			if k != nil {
				return notStore(path, errors.New("no tether meta bucket"))
			}
			empty = true
			return nil
		}
		v := meta.Get(keySchema)
		if len(v) != 4 {
			return notStore(path, errors.New("no schema version"))
		}
		ver := binary.BigEndian.Uint32(v)
		if ver != schemaNoDesired && ver != schemaDesired {
			return &SchemaError{Path: path, Found: ver, Known: schemaVersion}
		}
		if tx.Bucket(bucketTasks) == nil || tx.Bucket(bucketLive) == nil {
			return notStore(path, errors.New("missing tasks or live bucket"))
		}
		if ver == schemaDesired && tx.Bucket(bucketDesired) == nil {
			return notStore(path, errors.New("schema version 2 without its desired bucket"))
		}
		return nil
	})
	if err != nil || !empty {
		return err
	}
	if !create {
		return notStore(path, errors.New("a bbolt file without a single bucket: a store is laid out before it is given its name, so this one lost its content"))
	}
	return updateSafe(db, path, func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaNoDesired)); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketTasks); err != nil {
			return err
		}
		_, err = tx.CreateBucket(bucketLive)
		return err
	})
}

// Path returns the absolute path of the store's file.
func (s *Store) Path() string { return s.path }

// Close waits for queued appends to commit, stops the committer and closes
// the file. Operations after Close return ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	lk, err := s.close(false)
	if lerr := lk.release(); lerr != nil && err == nil {
		err = fmt.Errorf("store: close %s: %w", s.path, lerr)
	}
	return err
}

// close is Close; the lock is returned, not released, for the caller to
// release or keep (Suspend). A store closed already returns a nil lock.
func (s *Store) close(keepLock bool) (*fileLock, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.quit != nil {
		close(s.quit)
		<-s.done
	}
	var err error
	if s.wedged.Load() {
		// bbolt's Close would wait for ever for the locks the damaged
		// transaction holds. Let go of the file (and its flock) directly;
		// the mapping stays until the process exits.
		_ = syscall.Flock(int(s.file.Fd()), syscall.LOCK_UN)
		_ = s.file.Close()
		s.log.Warn("store closed without bbolt: a transaction on the damaged file could not be rolled back")
		if keepLock {
			err = fmt.Errorf("%w: %s: a transaction on the damaged file could not be rolled back; close the store and salvage it from its file", ErrCorrupt, s.path)
		}
	} else {
		err = s.db.Close()
	}
	lk := s.lock
	s.lock = nil
	if err != nil {
		return lk, fmt.Errorf("store: close %s: %w", s.path, err)
	}
	s.log.Debug("store closed", "lock_kept", keepLock)
	return lk, nil
}

// view runs fn in a read transaction, guarded against Close and bbolt
// panics.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.wedged.Load() {
		return *s.broken.Load()
	}
	return s.noteDamage(viewSafe(s.db, s.path, fn))
}

// noteDamage records a panic that left bbolt's locks held (see wedged)
// and returns err.
func (s *Store) noteDamage(err error) error {
	var pe panicError
	if errors.As(err, &pe) && pe.wedged {
		s.broken.CompareAndSwap(nil, &err)
		s.wedged.Store(true)
		s.log.Error("store damaged: a transaction could not be rolled back; refusing every further use", "err", err)
	}
	return err
}

// viewSafe runs fn in a read transaction. A bbolt panic (or a memory fault
// on a file cut short under it) becomes an ErrCorrupt error naming path.
func viewSafe(db *bolt.DB, path string, fn func(tx *bolt.Tx) error) (err error) {
	return readSafe(db, path, false, fn)
}

// readSafe runs fn in a transaction that is always rolled back. With
// exclusive, it is a write transaction: it holds bbolt's writer lock, so no
// commit runs beside it (bbolt's page check reads the shared freelist, which
// a concurrent commit changes under a read transaction).
//
// Begin is inside the recovery too: it reads the meta pages, and panics on
// a file damaged under an open store (another program wrote over it), with
// no transaction to roll back and bbolt's locks for it still held: the
// store is wedged then.
func readSafe(db *bolt.DB, path string, exclusive bool, fn func(tx *bolt.Tx) error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	var tx *bolt.Tx
	defer func() {
		r := recover()
		released := tx != nil && rollback(tx)
		if r != nil {
			err = panicked(path, r, !released)
		}
	}()
	tx, err = db.Begin(exclusive)
	if err != nil {
		return fmt.Errorf("store: read %s: %w", path, err)
	}
	return fn(tx)
}

// updateSafe runs fn in a write transaction and commits it (with an fsync
// unless NoSync). Errors from fn pass through; a failed commit wraps
// ErrWrite; a bbolt panic becomes an ErrCorrupt error naming path (a
// panicError, wedged if bbolt could not even roll the transaction back).
func updateSafe(db *bolt.DB, path string, fn func(tx *bolt.Tx) error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	var tx *bolt.Tx
	done := false // Commit returned: it releases the transaction even when it fails
	defer func() {
		r := recover()
		released := done || tx != nil && rollback(tx)
		if r != nil {
			err = panicked(path, r, !released)
		}
	}()
	tx, err = db.Begin(true)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWrite, path, err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	err = tx.Commit()
	done = true
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrWrite, path, err)
	}
	return nil
}

// panicError marks an error made from a bbolt panic. wedged is set when
// the transaction could not be rolled back either: bbolt then still holds
// its writer lock (or its mapping's read lock), so the DB must never be
// used or closed through bbolt again (bbolt's Close would wait for ever).
type panicError struct {
	error
	wedged bool
}

func (e panicError) Unwrap() error { return e.error }

func panicked(path string, r any, wedged bool) error {
	return panicError{fmt.Errorf("%w: %s: bbolt panicked (%v): the file is damaged; stop, and run `tether check` on it (then `tether check --salvage`)",
		ErrCorrupt, path, r), wedged}
}

// rollback rolls tx back, and reports whether it could: on a damaged file
// the rollback can panic too, leaving bbolt's locks for the transaction
// held.
func rollback(tx *bolt.Tx) (released bool) {
	defer func() {
		if recover() != nil {
			released = false
		}
	}()
	_ = tx.Rollback()
	return true
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

func checkTaskID(task string) error {
	if task == "" || len(task) > maxTaskID {
		return fmt.Errorf("%w: %q (want 1 to %d bytes)", ErrTaskID, task, maxTaskID)
	}
	return nil
}

// Load returns task's events in order. A damaged record gives a
// *CorruptError naming the task and seq; a record from a newer tether a
// *VersionError; an unknown task ErrUnknownTask.
func (s *Store) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []fsm.Event
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0]
		return taskSafe(s.path, task, func() error {
			_, err := scanTask(tx, task, func(e *fsm.Event) error {
				out = append(out, *e)
				return nil
			})
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LoadTask returns the fold of task's events (fsm.Task.ID set). A log that
// is not a legal walk gives a *CorruptError.
func (s *Store) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	if err := ctx.Err(); err != nil {
		return fsm.Task{}, err
	}
	var t fsm.Task
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		t, err = foldTaskSafe(tx, s.path, task)
		return err
	})
	return t, err
}

// foldTask folds task's log, checking each record, the walk, the head,
// and the task's entry in the live index (one lookup): a log that does not
// agree with its index is as damaged as one that does not agree with its
// head, and is reported, not skipped.
func foldTask(tx *bolt.Tx, task string) (fsm.Task, error) {
	b, h, err := taskBucket(tx, task)
	if err != nil {
		return fsm.Task{}, err
	}
	// Replay's hot path: one reused event, the records checked and folded
	// in one loop. (records does the same for Load and scanTask.)
	t := fsm.Task{ID: task}
	table := fsm.Lifecycle
	want := uint64(1)
	var e fsm.Event
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			if string(k) == string(headKey) {
				continue
			}
			return fsm.Task{}, &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("stray key %x", k)}
		}
		if got := binary.BigEndian.Uint64(k); got != want {
			return fsm.Task{}, &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("missing record (next key is seq %d)", got)}
		}
		seq, derr := decodeRecord(v, &e)
		if derr != nil || seq != want {
			return fsm.Task{}, decodeFailure(task, want, seq, derr)
		}
		e.Seq = want
		if err := table.FoldInPlace(&t, &e); err != nil {
			return fsm.Task{}, &CorruptError{Task: task, Seq: want, Reason: "not a legal walk", Err: err}
		}
		want++
	}
	if last := want - 1; last != h.version {
		return fsm.Task{}, &CorruptError{Task: task, Seq: min(last, h.version) + 1, Reason: fmt.Sprintf("log ends at seq %d, head says %d", last, h.version)}
	}
	if why := h.disagrees(&t); why != "" {
		return fsm.Task{}, &CorruptError{Task: task, Reason: why}
	}
	inLive := tx.Bucket(bucketLive).Get([]byte(task)) != nil
	switch {
	case t.State.Terminal() && inLive:
		return fsm.Task{}, &CorruptError{Task: task, Reason: fmt.Sprintf("in the live index but %s", t.State)}
	case !t.State.Terminal() && !inLive:
		return fsm.Task{}, &CorruptError{Task: task, Reason: fmt.Sprintf("%s but missing from the live index", t.State)}
	}
	return t, nil
}

// scanTask decodes task's records in order into one reused event and
// calls fn with each.
func scanTask(tx *bolt.Tx, task string, fn func(e *fsm.Event) error) (head, error) {
	b, h, err := taskBucket(tx, task)
	if err != nil {
		return h, err
	}
	var e fsm.Event
	it := newRecords(b, task)
	for it.next(&e) {
		if err := fn(&e); err != nil {
			return h, err
		}
	}
	return h, it.end(h)
}

// records iterates a task's records in order. It checks each record's
// checksum, version and key, the contiguity of sequence numbers, and (in
// end) that the log stops where the task's head says it does.
type records struct {
	task string
	c    *bolt.Cursor
	k, v []byte
	want uint64 // the next seq
	err  error
}

func newRecords(b *bolt.Bucket, task string) *records {
	it := &records{task: task, c: b.Cursor(), want: 1}
	it.k, it.v = it.c.First()
	return it
}

// next decodes the next record into *e; false at the end or on an error.
func (it *records) next(e *fsm.Event) bool {
	for it.k != nil && len(it.k) != 8 {
		if string(it.k) != string(headKey) {
			it.err = &CorruptError{Task: it.task, Seq: it.want, Reason: fmt.Sprintf("stray key %x", it.k)}
			return false
		}
		it.k, it.v = it.c.Next()
	}
	if it.k == nil || it.err != nil {
		return false
	}
	if got := binary.BigEndian.Uint64(it.k); got != it.want {
		it.err = &CorruptError{Task: it.task, Seq: it.want, Reason: fmt.Sprintf("missing record (next key is seq %d)", got)}
		return false
	}
	if it.err = decodeAt(it.task, it.want, it.v, e); it.err != nil {
		return false
	}
	it.want++
	it.k, it.v = it.c.Next()
	return true
}

// end returns the iteration's error, or an error if the log does not end
// at the head's version.
func (it *records) end(h head) error {
	if it.err != nil {
		return it.err
	}
	if last := it.want - 1; last != h.version {
		return &CorruptError{Task: it.task, Seq: min(last, h.version) + 1, Reason: fmt.Sprintf("log ends at seq %d, head says %d", last, h.version)}
	}
	return nil
}

// decodeAt decodes the record stored under seq, naming task and seq in any
// error.
func decodeAt(task string, seq uint64, v []byte, e *fsm.Event) error {
	got, derr := decodeRecord(v, e)
	if derr != nil || got != seq {
		return decodeFailure(task, seq, got, derr)
	}
	e.Seq = seq
	return nil
}

// decodeFailure is the error for a record under seq that did not decode
// (derr) or says it is another seq (got).
func decodeFailure(task string, seq, got uint64, derr *decodeError) error {
	switch {
	case derr == nil:
		return &CorruptError{Task: task, Seq: seq, Reason: fmt.Sprintf("record says seq %d", got)}
	case derr.version != 0:
		return &VersionError{Task: task, Seq: seq, Version: derr.version, Known: recordVersion}
	default:
		return &CorruptError{Task: task, Seq: seq, Reason: derr.reason}
	}
}

// taskBucket returns task's bucket and decoded head.
func taskBucket(tx *bolt.Tx, task string) (*bolt.Bucket, head, error) {
	tasks := tx.Bucket(bucketTasks)
	if tasks == nil {
		return nil, head{}, &CorruptError{Task: task, Reason: "no tasks bucket"}
	}
	b := tasks.Bucket([]byte(task))
	if b == nil {
		if tasks.Get([]byte(task)) != nil {
			return nil, head{}, &CorruptError{Task: task, Reason: "task key is not a bucket"}
		}
		if live := tx.Bucket(bucketLive); live != nil && live.Get([]byte(task)) != nil {
			return nil, head{}, &CorruptError{Task: task, Reason: "in the live index but not in the store"}
		}
		return nil, head{}, fmt.Errorf("%w: %q", ErrUnknownTask, task)
	}
	v := b.Get(headKey)
	if v == nil {
		return nil, head{}, &CorruptError{Task: task, Reason: "missing head"}
	}
	h, err := decodeHead(task, v)
	return b, h, err
}

// Live calls fn with the id of every task not in a terminal state, in
// order. It reads the live index only. fn runs outside any transaction, so
// it may append.
func (s *Store) Live(ctx context.Context, fn func(task string) error) error {
	return s.each(ctx, bucketLive, fn)
}

// All calls fn with the id of every task, in order. fn runs outside any
// transaction.
func (s *Store) All(ctx context.Context, fn func(task string) error) error {
	return s.each(ctx, bucketTasks, fn)
}

func (s *Store) each(ctx context.Context, bucket []byte, fn func(string) error) error {
	ids, err := s.ids(ctx, bucket)
	if err != nil {
		return err
	}
	return callEach(ctx, ids, fn)
}

// ids returns the keys of a top-level bucket (the task ids of tasks or
// live), in order.
func (s *Store) ids(ctx context.Context, bucket []byte) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ids []string
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return fmt.Errorf("%w: %s: no %s bucket", ErrCorrupt, s.path, bucket)
		}
		return b.ForEach(func(k, _ []byte) error {
			ids = append(ids, string(k))
			return nil
		})
	})
	return ids, err
}

// callEach calls fn with each id, stopping at its first error or when ctx
// is done.
func callEach(ctx context.Context, ids []string, fn func(string) error) error {
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
