//go:build linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/tether-fsm/tether/fsm"
)

// NonceArg is the argument that carries the spawn nonce on an executor's
// command line, where Check and a search by nonce look for it.
func NonceArg(nonce string) string { return "-nonce=" + nonce }

// Check compares the live process at id.PID with id. It returns nil when
// the process is alive and ours, an error matching ErrGone when it is dead
// (or a zombie, or from another boot), and ErrNotOurs when the pid now
// belongs to a different process (start time, or the nonce on its command
// line when id has one).
func Check(id fsm.Identity) error {
	if id.PID <= 0 {
		return fmt.Errorf("%w: no pid in the identity", ErrGone)
	}
	boot, err := BootID()
	if err != nil {
		return err
	}
	if id.BootID != "" && id.BootID != boot {
		return fmt.Errorf("%w: pid %d is from boot %s", ErrGone, id.PID, id.BootID)
	}
	s, err := ReadStat(id.PID)
	if err != nil {
		return err
	}
	if s.StartTime != id.StartTime {
		return fmt.Errorf("%w: pid %d started at %d, not %d", ErrNotOurs, id.PID, s.StartTime, id.StartTime)
	}
	if s.Dead() {
		return fmt.Errorf("%w: pid %d is a zombie", ErrGone, id.PID)
	}
	if id.Nonce != "" {
		ok, err := CmdlineHas(id.PID, NonceArg(id.Nonce))
		if err != nil {
			return err
		}
		if !ok {
			// An empty cmdline also means the process is exiting; check again.
			if s2, err := ReadStat(id.PID); err != nil || s2.Dead() {
				return fmt.Errorf("%w: pid %d exited", ErrGone, id.PID)
			}
			return fmt.Errorf("%w: pid %d has no nonce %s", ErrNotOurs, id.PID, id.Nonce)
		}
	}
	return nil
}

// Alive reports whether the process with this identity is alive. A zombie
// is dead; a pid whose start time, boot id or nonce differs is not ours,
// so Alive reports false with a nil error.
func Alive(id fsm.Identity) (bool, error) {
	err := Check(id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrGone), errors.Is(err, ErrNotOurs):
		return false, nil
	default:
		return false, err
	}
}

// Kill SIGKILLs the process with this identity through a pidfd opened
// before the identity is checked, and waits until it is dead (the pidfd is
// readable). A process already dead (or a zombie, or of an earlier boot)
// is nil. If the pid now belongs to another process, Kill returns
// ErrNotOurs and sends nothing.
func Kill(ctx context.Context, id fsm.Identity) error {
	p, err := Open(id.PID)
	if err != nil {
		if errors.Is(err, ErrGone) {
			return nil
		}
		return err
	}
	defer p.Close()
	if err := Check(id); err != nil {
		if errors.Is(err, ErrGone) {
			return nil
		}
		return err
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.Wait(ctx)
}

// SignalAmong signals, each through its own pidfd, every live process among
// pids (nil: every process in /proc) for which match holds, checking match
// and the start time again after the pidfd is open. It returns the pidfds
// of the processes it signalled (the caller closes them, after waiting on
// them if it likes).
func SignalAmong(sig syscall.Signal, pids []int, match func(pid int, s Stat) bool) ([]*PidFD, error) {
	var cands []fsm.Proc
	consider := func(pid int, s Stat) {
		if !s.Dead() && match(pid, s) {
			cands = append(cands, fsm.Proc{PID: pid, StartTime: s.StartTime})
		}
	}
	if pids == nil {
		if err := Each(consider); err != nil {
			return nil, err
		}
	}
	for _, pid := range pids {
		if s, err := ReadStat(pid); err == nil {
			consider(pid, s)
		}
	}
	var fds []*PidFD
	var firstErr error
	for _, c := range cands {
		p, err := Open(c.PID)
		if err != nil {
			continue // gone
		}
		s, err := ReadStat(c.PID)
		if err != nil || s.StartTime != c.StartTime || s.Dead() || !match(c.PID, s) {
			p.Close()
			continue
		}
		if err := p.Signal(sig); err != nil && firstErr == nil {
			firstErr = err
		}
		fds = append(fds, p)
	}
	return fds, firstErr
}

// KillGroup kills the process group led by leader when nothing else will
// (its executor is gone). The leader's pid is checked against its start
// time first: a pid that now belongs to another process is ErrNotOurs and
// nothing is sent (the group it led is gone: the pid could not have been
// reused otherwise). Every member found in /proc with that pgid is
// SIGKILLed through its own pidfd, and KillGroup returns once no live
// member is left.
//
// If the leader was already reaped, members are accepted when they started
// no earlier than the leader; the kernel keeps the pgid number reserved
// while any member lives, so only a new group led by a reused pid could
// match.
func KillGroup(ctx context.Context, leader fsm.Proc) error {
	return killLed(ctx, leader, "process group", func(s Stat) int { return s.PGID })
}

// KillSession is KillGroup for the session led by leader (every process
// whose session id is leader's pid and which started no earlier than it):
// what a session leader that is gone (an executor: Spawn makes it one)
// left in its session.
func KillSession(ctx context.Context, leader fsm.Proc) error {
	return killLed(ctx, leader, "session", func(s Stat) int { return s.SID })
}

// killLed kills the processes whose group or session (led) is led by
// leader.
func killLed(ctx context.Context, leader fsm.Proc, what string, led func(Stat) int) error {
	id := leader.PID
	if id <= 1 {
		return fmt.Errorf("%w: refusing %s %d", ErrNotOurs, what, id)
	}
	if s, err := ReadStat(id); err == nil && s.StartTime != leader.StartTime {
		return fmt.Errorf("%w: pid %d started at %d, not %d", ErrNotOurs, id, s.StartTime, leader.StartTime)
	}
	match := func(_ int, s Stat) bool { return led(s) == id && s.StartTime >= leader.StartTime }
	for {
		fds, err := SignalAmong(syscall.SIGKILL, nil, match)
		if len(fds) == 0 {
			return err
		}
		for _, p := range fds {
			if werr := p.Wait(ctx); werr != nil {
				CloseAll(fds)
				return werr
			}
		}
		CloseAll(fds)
		if err != nil {
			return err
		}
	}
}
