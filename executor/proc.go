//go:build linux

package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
)

// procStat is the part of /proc/PID/stat the executor needs.
type procStat struct {
	State     byte
	PPID      int
	PGID      int
	SID       int
	StartTime uint64
}

// dead reports a zombie or a process being torn down.
func (s procStat) dead() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// readStat parses /proc/PID/stat. A missing process yields an error that
// matches both ErrGone and fs.ErrNotExist.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return procStat{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, fs.ErrNotExist)
		}
		return procStat{}, fmt.Errorf("executor: read stat of pid %d: %w", pid, err)
	}
	return parseStat(b)
}

// parseStat parses the text of /proc/PID/stat. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("%w: malformed /proc stat", ErrProtocol)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("%w: short /proc stat", ErrProtocol)
	}
	var s procStat
	s.State = f[0][0]
	var err error
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("executor: /proc stat ppid: %w", err)
	}
	if s.PGID, err = strconv.Atoi(f[2]); err != nil {
		return procStat{}, fmt.Errorf("executor: /proc stat pgrp: %w", err)
	}
	if s.SID, err = strconv.Atoi(f[3]); err != nil {
		return procStat{}, fmt.Errorf("executor: /proc stat session: %w", err)
	}
	if s.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("executor: /proc stat starttime: %w", err)
	}
	return s, nil
}

// ProcStartTime returns field 22 of /proc/PID/stat: the process start time
// in clock ticks since boot. A missing process yields an error matching
// ErrGone.
func ProcStartTime(pid int) (uint64, error) {
	s, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return s.StartTime, nil
}

var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("executor: read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

// BootID returns /proc/sys/kernel/random/boot_id.
func BootID() (string, error) { return bootID() }

// nonceArg is the argument that carries the nonce on the executor's command
// line; FindByNonce looks for it.
func nonceArg(nonce string) string { return "-nonce=" + nonce }

// cmdlineHas reports whether /proc/PID/cmdline has every one of args as
// a whole argument.
func cmdlineHas(pid int, args ...string) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("executor: read cmdline of pid %d: %w", pid, err)
	}
	found := 0
	for _, want := range args {
		for a := range bytes.SplitSeq(b, []byte{0}) {
			if string(a) == want {
				found++
				break
			}
		}
	}
	return found == len(args), nil
}

// check compares the live process at id.PID with id. It returns nil when the
// process is alive and ours, an error matching ErrGone when it is dead (or a
// zombie, or from another boot), and ErrNotOurs when the pid now belongs to a
// different process.
func checkIdentity(id fsm.Identity) error {
	if id.PID <= 0 {
		return fmt.Errorf("%w: no pid in identity", ErrGone)
	}
	boot, err := BootID()
	if err != nil {
		return err
	}
	if id.BootID != "" && id.BootID != boot {
		return fmt.Errorf("%w: pid %d is from boot %s", ErrGone, id.PID, id.BootID)
	}
	s, err := readStat(id.PID)
	if err != nil {
		return err
	}
	if s.StartTime != id.StartTime {
		return fmt.Errorf("%w: pid %d started at %d, not %d", ErrNotOurs, id.PID, s.StartTime, id.StartTime)
	}
	if s.dead() {
		return fmt.Errorf("%w: pid %d is a zombie", ErrGone, id.PID)
	}
	if id.Nonce != "" {
		ok, err := cmdlineHas(id.PID, nonceArg(id.Nonce))
		if err != nil {
			return err
		}
		if !ok {
			// An empty cmdline also means the process is exiting; check again.
			if s2, err := readStat(id.PID); err != nil || s2.dead() {
				return fmt.Errorf("%w: pid %d exited", ErrGone, id.PID)
			}
			return fmt.Errorf("%w: pid %d has no nonce %s", ErrNotOurs, id.PID, id.Nonce)
		}
	}
	return nil
}

// Alive reports whether the executor with this identity is alive. A zombie
// is dead; a pid whose start time, boot id or nonce differs is not ours, so
// Alive reports false with a nil error.
func Alive(id fsm.Identity) (bool, error) {
	err := checkIdentity(id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrGone), errors.Is(err, ErrNotOurs):
		return false, nil
	default:
		return false, err
	}
}

// pidFD is a pidfd registered with the runtime poller, so waiting on it
// blocks no thread and honours contexts.
type pidFD struct{ f *os.File }

// openPidfd opens a pidfd for pid. A missing process yields an error
// matching ErrGone.
func openPidfd(pid int) (*pidFD, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%w: pid %d", ErrGone, pid)
		}
		return nil, fmt.Errorf("executor: pidfd_open %d: %w", pid, err)
	}
	return &pidFD{f: os.NewFile(uintptr(fd), "pidfd")}, nil
}

// newPidFD wraps a pidfd obtained elsewhere (clone's CLONE_PIDFD).
func newPidFD(fd int) (*pidFD, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("executor: pidfd nonblock: %w", err)
	}
	return &pidFD{f: os.NewFile(uintptr(fd), "pidfd")}, nil
}

func (p *pidFD) Close() error { return p.f.Close() }

// signal sends sig through the pidfd. A process that already exited is not
// an error.
func (p *pidFD) signal(sig syscall.Signal) error {
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
		return fmt.Errorf("executor: pidfd_send_signal: %w", serr)
	}
	return nil
}

// exited reports, without blocking, whether the process has exited.
func (p *pidFD) exited() bool {
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

// wait blocks until the process exited (the pidfd is readable) or ctx ends.
func (p *pidFD) wait(ctx context.Context) error {
	rc, err := p.f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = p.f.SetReadDeadline(time.Now()) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool { return pollIn(int(fd)) })
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("executor: waiting for process exit: %w", context.Cause(ctx))
		}
		return fmt.Errorf("executor: waiting on pidfd: %w", err)
	}
	return nil
}

// Kill SIGKILLs the executor through a pidfd opened before its identity is
// verified, and waits until it is dead (the pidfd is readable). A process
// that is already dead (or a zombie, or from an earlier boot) yields nil. If
// the pid now belongs to another process, Kill returns ErrNotOurs and sends
// nothing.
func Kill(ctx context.Context, id fsm.Identity) error {
	p, err := openPidfd(id.PID)
	if err != nil {
		if errors.Is(err, ErrGone) {
			return nil
		}
		return err
	}
	defer p.Close()
	if err := checkIdentity(id); err != nil {
		if errors.Is(err, ErrGone) {
			return nil
		}
		return err
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.wait(ctx)
}

// forEachProc calls fn for every process in /proc whose stat parses.
func forEachProc(fn func(pid int, s procStat)) error {
	d, err := os.Open("/proc")
	if err != nil {
		return fmt.Errorf("executor: open /proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("executor: read /proc: %w", err)
	}
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		fn(pid, s)
	}
	return nil
}

// signalMatching signals, through its own pidfd, every live process for which
// match holds, re-checking match and the start time after opening the pidfd.
// It returns the pidfds of the processes it signalled (the caller closes them).
func signalMatching(sig syscall.Signal, match func(pid int, s procStat) bool) ([]*pidFD, error) {
	return signalAmong(sig, nil, match)
}

// signalAmong is signalMatching over the processes pids names (nil: every
// process in /proc): a task with a cgroup names its few members rather
// than have every process on the host read.
func signalAmong(sig syscall.Signal, pids []int, match func(pid int, s procStat) bool) ([]*pidFD, error) {
	type cand struct {
		pid   int
		start uint64
	}
	var cands []cand
	consider := func(pid int, s procStat) {
		if !s.dead() && match(pid, s) {
			cands = append(cands, cand{pid, s.StartTime})
		}
	}
	if pids == nil {
		if err := forEachProc(consider); err != nil {
			return nil, err
		}
	}
	for _, pid := range pids {
		if s, err := readStat(pid); err == nil {
			consider(pid, s)
		}
	}
	var fds []*pidFD
	var firstErr error
	for _, c := range cands {
		p, err := openPidfd(c.pid)
		if err != nil {
			continue // gone
		}
		s, err := readStat(c.pid)
		if err != nil || s.StartTime != c.start || s.dead() || !match(c.pid, s) {
			p.Close()
			continue
		}
		if err := p.signal(sig); err != nil && firstErr == nil {
			firstErr = err
		}
		fds = append(fds, p)
	}
	return fds, firstErr
}

// childrenOf lists the children of process pid, from each of its threads'
// /proc/PID/task/TID/children (a child belongs to the thread that forked
// it). It fails where the kernel does not list children
// (CONFIG_PROC_CHILDREN) or pid is gone.
func childrenOf(pid int) ([]int, error) {
	base := "/proc/" + strconv.Itoa(pid) + "/task/"
	if _, err := os.Stat(base + strconv.Itoa(pid) + "/children"); err != nil {
		return nil, fmt.Errorf("executor: the children of pid %d cannot be listed: %w", pid, err)
	}
	tids, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("executor: list the threads of pid %d: %w", pid, err)
	}
	out := []int{}
	for _, t := range tids {
		b, err := os.ReadFile(base + t.Name() + "/children")
		if err != nil {
			continue // the thread ended meanwhile
		}
		for f := range strings.FieldsSeq(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func closeAll(fds []*pidFD) {
	for _, p := range fds {
		p.Close()
	}
}

// KillGroup kills a task's whole process group when its executor is gone.
// The leader (pid pgid) is verified by its start time first: a leader pid
// that now belongs to another process yields ErrNotOurs and nothing is sent
// (the group it led is gone: the pid could not have been reused otherwise).
// Every member found in /proc with that pgid is SIGKILLed through its own
// pidfd, and KillGroup returns once no live member is left.
//
// If the leader was already reaped, members are accepted when they started
// no earlier than the leader; the kernel keeps the pgid number reserved while
// any member lives, so only a new group led by a reused pid could match.
func KillGroup(ctx context.Context, pgid int, leaderStart uint64) error {
	if pgid <= 1 {
		return fmt.Errorf("%w: refusing process group %d", ErrNotOurs, pgid)
	}
	if s, err := readStat(pgid); err == nil && s.StartTime != leaderStart {
		return fmt.Errorf("%w: pid %d started at %d, not %d", ErrNotOurs, pgid, s.StartTime, leaderStart)
	}
	match := func(_ int, s procStat) bool { return s.PGID == pgid && s.StartTime >= leaderStart }
	for {
		fds, err := signalMatching(syscall.SIGKILL, match)
		if len(fds) == 0 {
			return err
		}
		for _, p := range fds {
			if werr := p.wait(ctx); werr != nil {
				closeAll(fds)
				return werr
			}
		}
		closeAll(fds)
		if err != nil {
			return err
		}
	}
}

// FindByNonce finds a live executor started with nonce: first through the
// identity file in taskDir, then by scanning /proc command lines for the
// nonce argument. ok is false when none is alive.
func FindByNonce(taskDir, nonce string) (fsm.Identity, bool, error) {
	if nonce == "" {
		return fsm.Identity{}, false, fmt.Errorf("%w: empty nonce", ErrBadConfig)
	}
	if id, err := ReadIdentity(taskDir); err == nil && id.Nonce == nonce {
		alive, err := Alive(id)
		if err != nil {
			return fsm.Identity{}, false, err
		}
		if alive {
			return id, true, nil
		}
	}
	boot, err := BootID()
	if err != nil {
		return fsm.Identity{}, false, err
	}
	dir, err := filepath.Abs(taskDir)
	if err != nil {
		return fsm.Identity{}, false, fmt.Errorf("%w: task dir: %w", ErrBadConfig, err)
	}
	// An executor is a session leader (Spawn's Setsid) whose argv carries
	// both its task dir and its nonce as whole arguments: a process that
	// merely mentions the nonce (a grep, a log viewer) is not taken for it.
	args := []string{"-dir=" + dir, nonceArg(nonce)}
	var found fsm.Identity
	var ok bool
	self := os.Getpid()
	err = forEachProc(func(pid int, s procStat) {
		if ok || s.dead() || pid == self || s.SID != pid {
			return
		}
		if has, _ := cmdlineHas(pid, args...); has {
			found = fsm.Identity{PID: pid, StartTime: s.StartTime, BootID: boot, Nonce: nonce, Socket: socketPath(taskDir)}
			ok = true
		}
	})
	if err != nil {
		return fsm.Identity{}, false, err
	}
	if ok {
		// The cgroup the executor announced, as it computed it (its own
		// cgroups, the task and the nonce), so that its task can be
		// killed by cgroup too.
		if h, err := cgroup.ProbeFor(found.PID); err == nil && h.Usable() == nil {
			if loc, err := cgroup.LocationFor(h, filepath.Base(dir), nonce); err == nil {
				found.Cgroup = loc.String()
			}
		}
	}
	return found, ok, nil
}
