package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// LockFile is the file in a task's directory that a process holds locked
// (flock) while it drives the task through a state that owes an effect: a
// start, a stop, the reaping after an exit. Recovery in another process
// leaves a locked task alone (its driver is alive and will finish), and
// takes over an unlocked one (its driver died: the kernel released the
// lock). The holder's pid is written into the file, for messages.
const LockFile = "driver.lock"

// taskLock is a held task lock.
type taskLock struct{ f *os.File }

// tryLockTask takes the task's lock in dir without waiting. It returns
// (nil, holder pid, nil) when another process (or another open file in this
// one) holds it.
func tryLockTask(dir string) (*taskLock, int, error) {
	if err := mkdirDurable(dir); err != nil {
		return nil, 0, fmt.Errorf("driver: task directory: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
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
	writePID(f)
	return &taskLock{f: f}, 0, nil
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

// lockTaskWait waits until it holds the task's lock, or ctx ends. A
// blocking flock cannot be interrupted, so it runs in a goroutine that lets
// go of the lock at once if it gets it after the caller gave up.
func lockTaskWait(ctx context.Context, dir string) (*taskLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
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
		if err != nil {
			f.Close()
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

// LockTask implements Executors.
func (r *Real) LockTask(task string) (func(), int, error) {
	l, holder, err := tryLockTask(r.dir(task))
	if l == nil {
		return nil, holder, err
	}
	return l.release, 0, nil
}

// WaitLockTask implements Executors.
func (r *Real) WaitLockTask(ctx context.Context, task string) (func(), error) {
	l, err := lockTaskWait(ctx, r.dir(task))
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// mkdirDurable creates dir (0700, its parent must exist) and fsyncs the
// parent, so that the directory (and what is written durably into it: the
// executor's identity, the task's exit status) survives a power loss. An
// existing directory is left as it is.
func mkdirDurable(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	d, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
