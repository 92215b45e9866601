package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// ever gets the lock, releases it at once and closes the file. A waiter
// gets the lock the moment its holder lets go. The cost of giving up is one
// blocked thread until the holder lets go.
//
// The timeout is for a holder that does not let go, not for a queue: the
// first 8 bytes of the lock file count the times the lock was taken (each
// holder adds one when it gets it; nothing is synced, the count only
// matters while processes wait). A waiter gives up only once that count
// has not moved for a whole timeout. Hundreds of commands queued on one
// store (each holds it for a read or an append) all get their turn however
// long the queue takes to drain, since the flock hands the lock to one
// waiter at a time in no particular order; a holder that keeps it for the
// timeout (stopped, wedged, or a long gc) makes the waiters give up, naming
// it. The count is read when the timer fires (a quarter of the timeout),
// never polled faster.

// lockSuffix names the lock file beside the store file.
const lockSuffix = ".lock"

// fileLock is a held lock on a store's lock file. A nil *fileLock is a
// read-only open of a store whose directory has no lock file and cannot
// take one; its release does nothing.
type fileLock struct {
	f *os.File
}

// lockStore takes the lock of the store at path: exclusive, or shared. It
// gives up with ErrLocked once no process has taken the lock for timeout
// (see above), or with ctx's error.
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
		return taken(f), nil
	case !errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("store: lock %s: %w", lockPath, err)
	}

	got := make(chan error, 1)
	go func() { got <- flockRetry(fd, how) }()
	check := max(timeout/4, time.Millisecond)
	tick := time.NewTicker(check)
	defer tick.Stop()
	seen, moved := takings(f), time.Now()
	var giveUp error
wait:
	for {
		select {
		case err := <-got:
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("store: lock %s: %w", lockPath, err)
			}
			return taken(f), nil
		case now := <-tick.C:
			if n := takings(f); n != seen {
				seen, moved = n, now
				continue
			}
			if held := now.Sub(moved); held >= timeout {
				giveUp = fmt.Errorf("%w: %s: %s has held it for %s without letting go (gave up after %s)",
					ErrLocked, path, lockHolder(f), held.Round(time.Millisecond), timeout)
				break wait
			}
		case <-ctx.Done():
			giveUp = ctx.Err()
			break wait
		}
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

// taken counts one more taking of the lock, held on f, and returns it.
func taken(f *os.File) *fileLock {
	b := binary.LittleEndian.AppendUint64(nil, takings(f)+1)
	_, _ = f.WriteAt(b, 0) // a read-only lock file cannot count: its waiters see no progress
	return &fileLock{f: f}
}

// takings is the count of times the lock was taken, as the lock file says.
func takings(f *os.File) uint64 {
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// lockHolder names the process holding the flock on f, from the kernel's
// lock table, for an error message: "process 1234 (tether)", or "another
// process" when it cannot be told.
func lockHolder(f *os.File) string {
	const unknown = "another process"
	st, err := f.Stat()
	if err != nil {
		return unknown
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return unknown
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return unknown
	}
	suffix := fmt.Sprintf(":%d", sys.Ino)
	for _, line := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->" after the number.
		fl := strings.Fields(line)
		if len(fl) < 6 || fl[1] != "FLOCK" || !strings.HasSuffix(fl[5], suffix) {
			continue
		}
		pid, err := strconv.Atoi(fl[4])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
			return fmt.Sprintf("process %d (%s)", pid, strings.TrimSpace(string(comm)))
		}
		return fmt.Sprintf("process %d", pid)
	}
	return unknown
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
