//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/proc"
)

// Kill kills every process in the cgroup, wherever it went (a member that
// called setsid or double-forked is still a member), and returns once the
// cgroup has no live process:
//
//   - with cgroup.kill (cgroup2, kernel 5.14): write 1 to it, then wait for
//     "populated 0" in cgroup.events, woken by the members' pidfds and by
//     POLLPRI on cgroup.events;
//   - then, and without cgroup.kill: freeze (the v1 freezer, else
//     cgroup.freeze), SIGKILL every member through a pidfd opened before its
//     membership was checked in /proc/PID/cgroup, thaw, and wait for those
//     pidfds; again until cgroup.procs is empty in every hierarchy.
//
// It is bounded by ctx: when ctx ends first it thaws and returns a
// *KillError listing the members still alive (a process in uninterruptible
// sleep outlives any signal); when ctx had already ended it signals
// nothing. A cgroup that is gone is empty. Kill does not remove the cgroup
// (Remove does), nor reap the processes (their parent does: zombies are no
// members).
func (c *Cgroup) Kill(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if d, ok := c.byKey(UnifiedKey); ok {
			return c.gaveUp(ctx, d.dir, err)
		}
		return c.gaveUp(ctx, c.dirs[0].dir, err)
	}
	if d, ok := c.byKey(UnifiedKey); ok && d.kill {
		// Pidfds of the members, opened before the kill: a member stops
		// being listed in cgroup.procs as soon as it starts exiting, but
		// leaves the cgroup only later, when its pidfd turns readable.
		pids, err := procsBelow(d.dir)
		if err != nil {
			return err
		}
		early := proc.OpenRaw(pids)
		switch err := writeFile(d.dir, "cgroup.kill", "1"); {
		case isNotExist(err):
			closeAll(early)
		case err != nil:
			closeAll(early)
			return err
		default:
			if err := waitUnpopulated(ctx, d.dir, early); err != nil {
				return c.gaveUp(ctx, d.dir, err)
			}
		}
	}
	return c.killEach(ctx)
}

// freezer freezes and thaws the cgroup's members: the v1 freezer, else
// cgroup2's cgroup.freeze, else nothing.
type freezer struct{ dir, file, frozen, thawed string }

func (c *Cgroup) freezer() freezer {
	for _, d := range c.dirs {
		if d.version == V1 && slices.Contains(strings.Split(d.key, ","), string(Freezer)) {
			return freezer{d.dir, "freezer.state", "FROZEN", "THAWED"}
		}
	}
	if d, ok := c.byKey(UnifiedKey); ok && d.freeze {
		return freezer{d.dir, "cgroup.freeze", "1", "0"}
	}
	return freezer{}
}

// set writes the freezer state. A member that is still FREEZING when it is
// signalled is no harm: SIGKILL stays pending until the thaw, and whatever
// it forked in between is a member the next round finds.
func (f freezer) set(state string) error {
	if f.dir == "" {
		return nil
	}
	if err := writeFile(f.dir, f.file, state); err != nil && !isNotExist(err) {
		return err
	}
	return nil
}

// killEach is the freeze, signal, thaw, wait loop.
func (c *Cgroup) killEach(ctx context.Context) error {
	fr := c.freezer()
	for {
		members, err := c.members()
		if err != nil {
			return err
		}
		if len(members) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return c.gaveUp(ctx, members[0].dir, ctx.Err())
		}
		if err := fr.set(fr.frozen); err != nil {
			return err
		}
		var fds []int
		var strangers []int
		for _, m := range members {
			fd, err := openMember(m)
			switch {
			case errors.Is(err, errNotMember):
				strangers = append(strangers, m.pid)
				continue
			case err != nil:
				continue // gone
			}
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				unix.Close(fd)
				closeAll(fds)
				_ = fr.set(fr.thawed)
				return fmt.Errorf("cgroup: SIGKILL pid %d: %w", m.pid, err)
			}
			fds = append(fds, fd)
		}
		if err := fr.set(fr.thawed); err != nil {
			closeAll(fds)
			return err
		}
		if len(strangers) > 0 {
			closeAll(fds)
			return &KillError{Dir: members[0].dir, Alive: describe(strangers),
				Err: errors.New("listed in cgroup.procs but not shown in this cgroup by /proc/PID/cgroup (another pid namespace?); not signalled")}
		}
		err = proc.WaitAll(ctx, fds)
		closeAll(fds)
		if err != nil {
			return c.gaveUp(ctx, members[0].dir, err)
		}
	}
}

// member is a pid found in one hierarchy's cgroup.procs of the cgroup (or
// below it).
type member struct {
	pid       int
	key, path string // the hierarchy and the cgroup's path in it
	dir       string
}

// members lists the live members of every hierarchy, each pid once.
func (c *Cgroup) members() ([]member, error) {
	var out []member
	seen := map[int]bool{}
	for _, d := range c.dirs {
		pids, err := procsBelow(d.dir)
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, member{pid: pid, key: d.key, path: d.path, dir: d.dir})
			}
		}
	}
	return out, nil
}

var errNotMember = errors.New("cgroup: not a member")

// openMember opens a pidfd for m.pid and then proves through
// /proc/PID/cgroup that the process it names is in the cgroup (or below
// it). The pidfd pins the process: if it is still alive when signalled, it
// is the one whose membership was read.
func openMember(m member) (int, error) {
	fd, err := unix.PidfdOpen(m.pid, 0)
	if err != nil {
		return -1, err
	}
	cgs, err := ProcCgroups(m.pid)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	if p, ok := cgs[m.key]; !ok || p != m.path && !strings.HasPrefix(p, m.path+"/") {
		unix.Close(fd)
		return -1, errNotMember
	}
	return fd, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// gaveUp is the error when ctx ended (or waiting failed) before the
// cgroup was empty: the members still alive, and why.
func (c *Cgroup) gaveUp(ctx context.Context, dir string, err error) error {
	if ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	pids, perr := c.Procs()
	if perr == nil && len(pids) == 0 {
		return nil // emptied after all
	}
	return &KillError{Dir: dir, Alive: describe(pids), Err: err}
}

// waitUnpopulated returns when cgroup.events in dir says "populated 0" (or
// dir is gone), and closes the pidfds in early. It wakes when cgroup.events
// changes (poll's POLLPRI on the open file, which the kernel raises on a
// change, at most once per 10 ms) and, sooner, when every member it knows
// of has exited: those of early and those listed in cgroup.procs since,
// whose pidfds turn readable once they have left the cgroup. No signal
// goes through those pidfds; cgroup.kill sent it. (Not inotify: closing an
// inotify instance waits for an SRCU grace period, 5 to 20 ms here.)
func waitUnpopulated(ctx context.Context, dir string, early []int) error {
	pending := early
	defer func() { closeAll(pending) }()
	efd, err := unix.Open(dir+"/cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("cgroup: open %s/cgroup.events: %w", dir, err)
	}
	defer unix.Close(efd)
	buf := make([]byte, 512)
	for {
		// Reading re-arms POLLPRI.
		n, err := unix.Pread(efd, buf, 0)
		if err != nil {
			if isNotExist(err) {
				return nil
			}
			return fmt.Errorf("cgroup: read %s/cgroup.events: %w", dir, err)
		}
		pop, ok := kvValue(buf[:n], "populated")
		if !ok {
			return fmt.Errorf("cgroup: %s/cgroup.events has no populated key", dir)
		}
		if pop == 0 {
			return nil
		}
		pids, err := procsBelow(dir)
		if err != nil {
			return err
		}
		fresh := proc.OpenRaw(pids)
		left, err := waitAllOr(ctx, efd, append(slices.Clone(pending), fresh...))
		closeAll(fresh)
		if err != nil {
			return err
		}
		var still []int
		for _, fd := range pending {
			if slices.Contains(left, fd) {
				still = append(still, fd)
			} else {
				unix.Close(fd)
			}
		}
		pending = still
	}
}

// waitAllOr returns when the kernfs file open as wake has changed
// (POLLPRI) or every pidfd of fds is readable, with the fds not yet
// readable.
func waitAllOr(ctx context.Context, wake int, fds []int) ([]int, error) {
	left := fds
	for {
		pfds := []unix.PollFd{{Fd: int32(wake), Events: unix.POLLPRI}}
		for _, fd := range left {
			pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		if err := proc.Poll(ctx, pfds); err != nil {
			return left, err
		}
		var next []int
		for i, fd := range left {
			if pfds[i+1].Revents == 0 {
				next = append(next, fd)
			}
		}
		left = next
		if pfds[0].Revents != 0 || len(left) == 0 && len(fds) > 0 {
			return left, nil
		}
	}
}

// kvValue finds key's number in a flat-keyed file's text.
func kvValue(b []byte, key string) (uint64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// describe names each pid's process for an error: comm and state.
func describe(pids []int) []Member {
	out := make([]Member, 0, len(pids))
	for _, pid := range pids {
		m := Member{PID: pid, Comm: proc.Comm(pid)}
		if st, err := proc.ReadStat(pid); err == nil {
			m.State = string(st.State)
		}
		out = append(out, m)
	}
	return out
}
