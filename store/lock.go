package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The store's lock.
//
// bbolt locks its own file, but it polls a non-blocking flock every 50 ms
// until its timeout, so that a crowd of short-lived processes (every CLI
// command opens the store only while it reads or appends) wastes up to
// 50 ms per hand-over and the unlucky ones time out; and the lock is on the
// file that Compact renames a new file over, so that a process waiting on
// the old file's lock would get it, and write into the unlinked file, once
// Compact is done (acknowledged appends lost).
//
// So the store is locked through a separate file beside it, PATH.lock
// (0600), which is never renamed or removed: a blocking flock, exclusive
// for writers and Compact, shared for read-only opens. Only once it is held
// is the store file opened, by its path, so a process that waited out a
// compaction opens the new file. bbolt's own flock on the store file then
// succeeds at once (it still guards against a process that uses the file
// without the lock file).
//
// A blocking flock cannot be interrupted, so the wait runs in a goroutine
// that owns the lock file's descriptor: if the caller gives up (the
// timeout, or its context), the goroutine stays blocked in flock and, if it
// ever gets the lock, releases it at once and closes the file. Nothing is
// polled, and a waiter gets the lock the moment its holder lets go. The
// cost of giving up is one blocked thread until the holder lets go.

// lockSuffix names the lock file beside the store file.
const lockSuffix = ".lock"

// fileLock is a held lock on a store's lock file. A nil *fileLock is a
// read-only open of a store whose directory has no lock file and cannot
// take one; its release does nothing.
type fileLock struct {
	f *os.File
}

// lockStore takes the lock of the store at path: exclusive, or shared. It
// gives up with ErrLocked after timeout, or with ctx's error.
func lockStore(ctx context.Context, path string, exclusive bool, timeout time.Duration) (*fileLock, error) {
	lockPath := path + lockSuffix
	f, err := openNoFollow(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil && !exclusive && (errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		// A read-only open of a store in a directory this process may
		// not write: use the lock file if it is there, else rely on
		// bbolt's shared lock on the store file alone.
		f, err = openNoFollow(lockPath, os.O_RDONLY, 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	fd := int(f.Fd())
	switch err := flockRetry(fd, how|unix.LOCK_NB); {
	case err == nil:
		return &fileLock{f: f}, nil
	case !errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", lockPath, err)
	}

	got := make(chan error, 1)
	go func() { got <- flockRetry(fd, how) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var giveUp error
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("store: lock %s: %w", lockPath, err)
		}
		return &fileLock{f: f}, nil
	case <-timer.C:
		giveUp = fmt.Errorf("%w: %s: another tether process holds it (gave up after %s)", ErrLocked, path, timeout)
	case <-ctx.Done():
		giveUp = ctx.Err()
	}
	// The waiter owns f from here: it releases whatever it gets.
	go func() {
		if err := <-got; err == nil {
			_ = unix.Flock(fd, unix.LOCK_UN)
		}
		f.Close()
	}()
	return nil, giveUp
}

// flockRetry is flock(2), retried when a signal interrupts it.
func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// release lets the lock go. Closing the file releases the flock (it is
// the only descriptor of its open file); unlock first all the same, so
// that a descriptor inherited by a child could not keep it.
func (l *fileLock) release() error {
	if l == nil {
		return nil
	}
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	return l.f.Close()
}

// openNoFollow opens name without following a symbolic link in its last
// component, and refuses anything but a regular file: a store's files are
// never links (a link could lead the store's writes out of its directory,
// or its reads to a file of another user's choosing).
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, unsafePath(name, "it is a symbolic link")
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, unsafePath(name, fmt.Sprintf("it is not a regular file (%s)", st.Mode().Type()))
	}
	// O_NONBLOCK only kept a FIFO from blocking the open; a regular file
	// ignores it, but clear it for the file's later users all the same.
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func unsafePath(name, why string) error {
	return fmt.Errorf("%w: %s: %s; tether does not follow links or open special files for its store: give it the real path",
		ErrUnsafePath, name, why)
}
