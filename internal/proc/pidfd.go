//go:build linux

package proc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
)

// PidFD is a pidfd registered with the runtime poller, so waiting on it
// blocks no thread and honours contexts. It pins its process: a signal
// through it reaches that process or none, never a later one with the same
// pid.
type PidFD struct{ f *os.File }

// Open opens a pidfd for pid. A missing process is an error matching
// ErrGone.
func Open(pid int) (*PidFD, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%w: pid %d", ErrGone, pid)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return &PidFD{f: os.NewFile(uintptr(fd), "pidfd")}, nil
}

// FromFD wraps a pidfd obtained elsewhere (clone's CLONE_PIDFD); it owns
// fd from then on, on error too.
func FromFD(fd int) (*PidFD, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pidfd nonblock: %w", err)
	}
	return &PidFD{f: os.NewFile(uintptr(fd), "pidfd")}, nil
}

// Close closes the pidfd.
func (p *PidFD) Close() error { return p.f.Close() }

// Raw is the pidfd's descriptor (to pass on to a child), valid until
// Close.
func (p *PidFD) Raw() (int, error) { return RawFD(p.f) }

// Signal sends sig through the pidfd. A process that already exited is not
// an error.
func (p *PidFD) Signal(sig syscall.Signal) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.PidfdSendSignal(int(fd), sig, nil, 0)
	}); err != nil {
		return err
	}
	if serr != nil && !errors.Is(serr, unix.ESRCH) {
		return fmt.Errorf("pidfd_send_signal: %w", serr)
	}
	return nil
}

// Exited reports, without blocking, whether the process has exited.
func (p *PidFD) Exited() bool {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return true
	}
	var done bool
	_ = rc.Control(func(fd uintptr) { done = pollIn(int(fd)) })
	return done
}

func pollIn(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents != 0
	}
}

// Wait blocks until the process exited (the pidfd is readable) or ctx
// ends.
func (p *PidFD) Wait(ctx context.Context) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = p.f.SetReadDeadline(time.Now()) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool { return pollIn(int(fd)) })
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("waiting for the process to exit: %w", context.Cause(ctx))
		}
		return fmt.Errorf("waiting on a pidfd: %w", err)
	}
	return nil
}

// CloseAll closes every pidfd of fds.
func CloseAll(fds []*PidFD) {
	for _, p := range fds {
		p.Close()
	}
}

// RawFD is f's descriptor, without Fd's side effect of making it blocking
// (its flags are shared with whoever else holds it).
func RawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// OpenRaw opens a plain pidfd for each pid still there, for waiting only
// (WaitAll, Poll); the caller closes them with unix.Close.
func OpenRaw(pids []int) []int {
	var fds []int
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}

// WaitAll returns when every pidfd of fds is readable (its process
// exited), or ctx ends.
func WaitAll(ctx context.Context, fds []int) error {
	left := slices.Clone(fds)
	for len(left) > 0 {
		pfds := make([]unix.PollFd, len(left))
		for i, fd := range left {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		if err := Poll(ctx, pfds); err != nil {
			return err
		}
		var next []int
		for i, fd := range left {
			if pfds[i].Revents == 0 {
				next = append(next, fd)
			}
		}
		left = next
	}
	return nil
}

// Poll polls pfds until at least one has an event (their Revents say
// which) or ctx ends (ctx.Err()); ctx wakes the poll through an eventfd,
// so no thread is left blocked.
func Poll(ctx context.Context, pfds []unix.PollFd) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	woke := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(woke)
		_, _ = unix.Write(efd, binary.NativeEndian.AppendUint64(nil, 1))
	})
	defer func() {
		if !stop() {
			<-woke
		}
		unix.Close(efd)
	}()
	all := append(pfds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
	for {
		_, err := unix.Poll(all, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		break
	}
	copy(pfds, all) // all may be a new array
	if all[len(all)-1].Revents != 0 {
		return ctx.Err()
	}
	return nil
}

// si_code values of a SIGCHLD siginfo (waitid), for how a child ended.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// Reap collects, without blocking, the exit status of the process the
// pidfd pins, which must be a child of the caller: ok is false while it
// runs. The status is that process's and no other's (waitid through the
// pidfd, not by pid), so it cannot be taken for another process's.
func (p *PidFD) Reap() (x fsm.ExitStatus, ok bool, err error) {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return x, false, err
	}
	var info unix.Siginfo
	var werr error
	if cerr := rc.Control(func(fd uintptr) {
		for {
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
			if !errors.Is(werr, unix.EINTR) {
				return
			}
		}
	}); cerr != nil {
		return x, false, cerr
	}
	if werr != nil {
		return x, false, fmt.Errorf("waitid through a pidfd: %w", werr)
	}
	// The SIGCHLD fields follow signo, errno and code (and their padding):
	// si_pid (int32) at 16, si_uid at 20, si_status (int32) at 24.
	raw := (*[128]byte)(unsafe.Pointer(&info))
	pid := int32(binary.NativeEndian.Uint32(raw[16:]))
	status := int(int32(binary.NativeEndian.Uint32(raw[24:])))
	if pid == 0 {
		return x, false, nil // still running
	}
	switch info.Code {
	case cldExited:
		return fsm.ExitStatus{Code: status}, true, nil
	case cldKilled, cldDumped:
		return fsm.ExitStatus{Code: -1, Signal: status}, true, nil
	}
	return x, false, fmt.Errorf("waitid through a pidfd: an exit of unknown kind (si_code %d)", info.Code)
}
