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
// the kernel released the lock). The holder's pid is written into the
// file, for messages.

// taskLock is a held task lock.
type taskLock struct{ f *os.File }

// tryLockTask takes the task's lock in dir without waiting. It returns
// (nil, holder pid, nil) when another process (or another open file in this
// one) holds it.
func tryLockTask(dir string) (*taskLock, int, error) {
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

func tryLockOnce(dir string) (*taskLock, int, error) {
	if err := statedir.MkdirDurable(dir); err != nil {
		return nil, 0, fmt.Errorf("driver: task directory: %w", err)
	}
	path := filepath.Join(dir, statedir.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, errLockMoved // the directory went between the mkdir and the open
	}
	if err != nil {
		return nil, 0, fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 24)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, pid, nil
		}
		return nil, 0, fmt.Errorf("driver: task lock %s: %w", path, err)
	}
	if err := stillAt(f, path); err != nil {
		f.Close()
		return nil, 0, err
	}
	writePID(f)
	return &taskLock{f: f}, 0, nil
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

// writePID records the holder's pid in the lock file, for messages (best
// effort).
func writePID(f *os.File) {
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
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
		writePID(f)
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

// LockTask implements World.
func (r *Real) LockTask(task string) (func(), int, error) {
	l, holder, err := tryLockTask(r.dir(task))
	if l == nil {
		return nil, holder, err
	}
	return l.release, 0, nil
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
