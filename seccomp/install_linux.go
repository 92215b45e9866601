//go:build linux

package seccomp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccomp(2) operations (linux/seccomp.h).
const (
	setModeFilter   = 1
	getActionAvail  = 2
	statusSeccompOK = "Seccomp:"
)

// Install sets no_new_privs and installs the filter on every thread of
// the calling process (SECCOMP_FILTER_FLAG_TSYNC). It is the last thing
// the shim does before exec: from here on every syscall of the process,
// and of what it execs, goes through the filter, and nothing can remove
// it.
//
// Why every thread: a filter belongs to a thread, and execve keeps the
// calling thread's. A Go program's goroutine may move to another thread
// between Install and exec unless it is locked to its thread; with
// TSYNC, the thread that execs is filtered whichever it is, so the
// guarantee does not rest on the caller's runtime.LockOSThread. The
// other threads of a Go process (the runtime's) need only what Docker's
// profile allows (futex, mmap, madvise, nanosleep, clone of a thread...).
func (f *Filter) Install() error {
	raw, err := bpf.Assemble(f.prog)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInstall, err)
	}
	sf := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		sf[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(sf)), Filter: &sf[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("%w: set no_new_privs: %w", ErrInstall, err)
	}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, setModeFilter, filterFlagTSync|f.flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(sf)
	switch {
	case e == unix.ENOSYS:
		return fmt.Errorf("%w (seccomp(2): %w)", ErrUnsupported, e)
	case e != 0:
		return fmt.Errorf("%w: seccomp(2): %w", ErrInstall, e)
	case r != 0:
		// TSYNC names the thread it could not synchronise: one with a
		// filter of its own, which this process never installs.
		return fmt.Errorf("%w: thread %d has another seccomp filter", ErrInstall, r)
	}
	return nil
}

// CheckHost reports whether this kernel can filter syscalls:
// /proc/self/status has a Seccomp field (CONFIG_SECCOMP), and seccomp(2)
// knows the filter mode and the errno action (SECCOMP_GET_ACTION_AVAIL).
// Its error wraps ErrUnsupported, whose text tells the operator what to
// do; `tether debug host` can print it as is.
func CheckHost() error {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("%w (read /proc/self/status: %w)", ErrUnsupported, err)
	}
	if !hasSeccompField(status) {
		return fmt.Errorf("%w (/proc/self/status has no Seccomp field: a kernel without CONFIG_SECCOMP)", ErrUnsupported)
	}
	action := retErrno
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, getActionAvail, 0, uintptr(unsafe.Pointer(&action)))
	if e != 0 {
		return fmt.Errorf("%w (seccomp(SECCOMP_GET_ACTION_AVAIL): %w)", ErrUnsupported, e)
	}
	return nil
}

// Mode reads the calling thread's seccomp mode from /proc/thread-self/status:
// 0 none, 1 strict, 2 filter.
func Mode() (int, error) {
	status, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return 0, err
	}
	s := bufio.NewScanner(bytes.NewReader(status))
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte(statusSeccompOK)); ok {
			var m int
			if _, err := fmt.Sscan(string(v), &m); err != nil {
				return 0, fmt.Errorf("seccomp: /proc/thread-self/status: %q: %w", s.Text(), err)
			}
			return m, nil
		}
	}
	return 0, errors.New("seccomp: /proc/thread-self/status has no Seccomp field")
}

func hasSeccompField(status []byte) bool {
	for line := range bytes.Lines(status) {
		if bytes.HasPrefix(line, []byte(statusSeccompOK)) {
			return true
		}
	}
	return false
}
