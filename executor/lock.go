package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// The task's lock is the file statedir.LockFile in a task's directory:
// a process holds it locked (flock) while it drives the task through a
// state that owes an effect (a start, a stop, the reaping after an exit).
// Recovery in another process leaves a locked task alone (its driver is
// alive and will finish), and takes over an unlocked one (its driver died:
// the kernel released the lock).
//
// The holder names itself in the file: its pid and its start time
// ("PID START\n"), written once it holds the lock and truncated away
// before it lets go. A flock belongs to the open file, not to a process:
// a child forked while the lock is held carries a copy of the descriptor
// until its exec closes it (O_CLOEXEC), so for that instant the lock stays
// held after its holder let go of it, or died (a SIGKILLed driver's
// executor in the middle of its spawn). So a hold is a live driver's only
// when the process the file names is alive with that start time; any other
// hold (its holder gone, no holder named) is waited out for up to the lock
// timeout (LockTask).

// taskLock is a held task lock.
type taskLock struct{ f *os.File }

// taskLockHolder is the process a task's lock file names as its holder.
type taskLockHolder struct {
	pid   int
	start uint64 // its start time; 0: not named (a file an older tether wrote)
}

// parseHolder reads a lock file's content: "PID START" (or "PID", as an
// older tether wrote it). Anything else names no holder.
func parseHolder(b []byte) taskLockHolder {
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f) > 2 {
		return taskLockHolder{}
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return taskLockHolder{}
	}
	h := taskLockHolder{pid: pid}
	if len(f) == 2 {
		start, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil || start == 0 {
			return taskLockHolder{}
		}
		h.start = start
	}
	return h
}

// live reports whether the named holder is a live process: its pid alive
// (not a zombie: a zombie holds no descriptor) and, when the file names
// its start time, started then (a pid reused since is not the holder).
func (h taskLockHolder) live() bool {
	if h.pid <= 0 {
		return false
	}
	s, err := proc.ReadStat(h.pid)
	if err != nil || s.Dead() {
		return false
	}
	return h.start == 0 || s.StartTime == h.start
}

// tryLockTask takes the task's lock in dir without waiting. It returns
// (nil, holder, nil) when another open file holds it: another process, a
// child carrying a copy of a descriptor to its exec, or another open file
// in this process.
func tryLockTask(dir string) (*taskLock, taskLockHolder, error) {
	for attempt := 0; ; attempt++ {
		l, holder, err := tryLockOnce(dir)
		if errors.Is(err, errLockMoved) && attempt < 8 {
			continue // the directory was removed under us (gc): again
		}
		return l, holder, err
	}
}

// discardTaskDir removes the directory of a task whose start recorded
// nothing (its first append failed: a damaged store, a full disk), so a
// refused start leaves no trace: the lock file, then the directory if that
// emptied it. The caller holds the task's lock; a process waiting on the
// unlinked file finds it moved and starts over (errLockMoved).
func discardTaskDir(dir string) {
	if err := os.Remove(filepath.Join(dir, statedir.LockFile)); err == nil {
		_ = os.Remove(dir) // only if nothing else is in it
	}
}

// errLockMoved: the lock file locked is no longer the one at its path.
var errLockMoved = errors.New("driver: the task lock file was removed while it was being locked")

// errLockHeld: a task's lock stayed held past the lock timeout by no live
// process (its holder is gone, or never named itself): a descriptor some
// other process inherited. (Not a named error of the package: nothing
// decides on it; its text says what holds the task.)
var errLockHeld = errors.New("executor: task lock held by no live process")

// maxHolderLine bounds what is read of a lock file's holder line.
const maxHolderLine = 64

func tryLockOnce(dir string) (*taskLock, taskLockHolder, error) {
	if err := statedir.MkdirDurable(dir); err != nil {
		return nil, taskLockHolder{}, fmt.Errorf("driver: task directory: %w", err)
	}
	path := filepath.Join(dir, statedir.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, taskLockHolder{}, errLockMoved // the directory went between the mkdir and the open
	}
	if err != nil {
		return nil, taskLockHolder{}, fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		h := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, h, nil
		}
		return nil, taskLockHolder{}, fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if err := stillAt(f, path); err != nil {
		f.Close()
		return nil, taskLockHolder{}, err
	}
	writeHolder(f)
	return &taskLock{f: f}, taskLockHolder{}, nil
}

// readHolder reads the holder a lock file names.
func readHolder(f *os.File) taskLockHolder {
	b := make([]byte, maxHolderLine)
	n, _ := f.ReadAt(b, 0)
	return parseHolder(b[:n])
}

// readHolderAt reads the holder the lock file in dir names.
func readHolderAt(dir string) taskLockHolder {
	f, err := os.OpenFile(filepath.Join(dir, statedir.LockFile), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return taskLockHolder{}
	}
	defer f.Close()
	return readHolder(f)
}

// stillAt checks that the locked file f is still the one at path: a task
// directory removed while its lock was being taken (RemoveOrphanDir holds
// the lock while it removes) leaves the lock on an unlinked file that
// guards nothing.
func stillAt(f *os.File, path string) error {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if err := unix.Lstat(path, &now); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errLockMoved
		}
		return fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if held.Dev != now.Dev || held.Ino != now.Ino {
		return errLockMoved
	}
	return nil
}

// holderLine is what this process writes into a lock it holds: its pid
// and start time (its pid alone if its start time cannot be read).
var holderLine = sync.OnceValue(func() []byte {
	pid := os.Getpid()
	if start, err := proc.StartTime(pid); err == nil {
		return []byte(strconv.Itoa(pid) + " " + strconv.FormatUint(start, 10) + "\n")
	}
	return []byte(strconv.Itoa(pid) + "\n")
})

// writeHolder names this process as the lock's holder (best effort: a
// lock whose holder is not named is waited out, not taken).
func writeHolder(f *os.File) {
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(holderLine(), 0)
	}
}

// release lets go of the lock. Safe on nil.
func (l *taskLock) release() {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing the descriptor releases the flock
}

// lockTaskWait waits until it holds the task's lock, or ctx ends.
func lockTaskWait(ctx context.Context, dir string) (*taskLock, error) {
	for attempt := 0; ; attempt++ {
		l, err := lockWaitOnce(ctx, dir)
		if errors.Is(err, errLockMoved) && attempt < 8 {
			continue
		}
		return l, err
	}
}

// lockWaitOnce waits for the lock file at its path now. A blocking flock
// cannot be interrupted, so it runs in a goroutine that lets go of the
// lock at once if it gets it after the caller gave up.
func lockWaitOnce(ctx context.Context, dir string) (*taskLock, error) {
	path := filepath.Join(dir, statedir.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("driver: task lock %s: the task's directory is gone: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	got := make(chan error, 1)
	var mu sync.Mutex
	abandoned := false
	go func() {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			f.Close()
			return
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err == nil {
			err = stillAt(f, path)
		}
		if err != nil {
			f.Close()
			if errors.Is(err, errLockMoved) {
				return nil, err
			}
			return nil, fmt.Errorf("driver: task lock %s: %w", path, err)
		}
		writeHolder(f)
		return &taskLock{f: f}, nil
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		select { // it may have got the lock just now
		case err := <-got:
			if err == nil {
				f.Close()
			}
		default:
		}
		mu.Unlock()
		return nil, fmt.Errorf("driver: waiting for the task lock %s: %w", path, context.Cause(ctx))
	}
}

// DiscardTask implements World: the lock file, then the task's directory
// if that emptied it (a process waiting on the unlinked lock file finds it
// moved and starts over).
func (r *Real) DiscardTask(task string) { discardTaskDir(r.dir(task)) }

// defaultLockTimeout is Real.LockTimeout's default: the store's lock
// timeout's (store.Options.LockTimeout).
const defaultLockTimeout = time.Second

// LockTask implements World. A lock whose holder is a live process (the
// process its file names, alive with the start time it names) is that
// process's: release is nil and holder its pid, at once. Any other hold
// is no live driver's (its holder died, or let go, while a child forked
// meanwhile still carries the descriptor to its exec; or it has not named
// itself yet): LockTask waits for it, up to r.LockTimeout, and takes it.
// Still held then, it is a live holder's if the file names one by now,
// else an error saying it is held by no live process: never taken for a
// live driver's.
func (r *Real) LockTask(task string) (func(), int, error) {
	dir := r.dir(task)
	l, h, err := tryLockTask(dir)
	switch {
	case err != nil:
		return nil, 0, err
	case l != nil:
		return l.release, 0, nil
	case h.live():
		return nil, h.pid, nil
	}
	timeout := r.LockTimeout
	if timeout <= 0 {
		timeout = defaultLockTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err = lockTaskWait(ctx, dir)
	if err == nil {
		return l.release, 0, nil
	}
	if ctx.Err() == nil {
		return nil, 0, err
	}
	if now := readHolderAt(dir); now.live() {
		return nil, now.pid, nil // a live driver took it meanwhile
	}
	named := "no holder is named"
	if h.pid > 0 {
		named = fmt.Sprintf("its holder, process %d, is gone", h.pid)
	}
	return nil, 0, fmt.Errorf("%w: %s held for %s by no live process (%s): a process that inherited its descriptor has not let go",
		errLockHeld, filepath.Join(dir, statedir.LockFile), timeout, named)
}

// WaitLockTask implements World.
func (r *Real) WaitLockTask(ctx context.Context, task string) (func(), error) {
	l, err := lockTaskWait(ctx, r.dir(task))
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// orphanMinAge is how old a task directory without a lock file must be
// before RemoveOrphanDir removes it: younger, a start may be between
// creating the directory and creating its lock file.
const orphanMinAge = 10 * time.Minute

// RemoveOrphanDir removes the directory of a task the store does not know
// (left by a start that crashed before it recorded the task, or by a
// salvage). It holds the task's lock while it decides and removes, and
// keeps the directory when another process holds the lock, when unknown
// (asked under the lock) says the store knows the task after all, when an
// executor whose identity file is there is alive, or when it has no lock
// file and is younger than orphanMinAge; kept says why (ErrBusy for a live
// executor). It never creates anything: a
// start that locks the directory while it is removed finds its lock file
// gone and starts over in a new directory.
func (r *Real) RemoveOrphanDir(task string, unknown func() (bool, error)) (removed bool, kept error, err error) {
	if err := statedir.ValidateTaskID(task); err != nil {
		return false, nil, err
	}
	dir := r.dir(task)
	path := filepath.Join(dir, statedir.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fi, serr := os.Lstat(dir)
		if serr != nil {
			return false, nil, nil // gone already
		}
		if time.Since(fi.ModTime()) < orphanMinAge {
			return false, errors.New("no lock file yet (a start may be creating it)"), nil
		}
	case err != nil:
		return false, nil, fmt.Errorf("driver: task lock %s: %w", path, err)
	default:
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return false, errors.New("a process holds its lock"), nil
			}
			return false, nil, fmt.Errorf("driver: task lock %s: %w", path, err)
		}
	}
	still, err := unknown()
	if err != nil || !still {
		return false, errors.New("the store knows the task"), err
	}
	if x, err := wire.ReadIdentity(dir); err == nil {
		if alive, _ := proc.Alive(x); alive {
			return false, fmt.Errorf("%w: its executor (pid %d) is alive", ErrBusy, x.PID), nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, nil, fmt.Errorf("driver: removing task directory %s: %w", dir, err)
	}
	return true, nil, nil
}
