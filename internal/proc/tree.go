//go:build linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// stopWait bounds how long KillTree waits for the processes it stopped to
// be seen stopped (a process in uninterruptible sleep stops only once it
// leaves it; one not yet scheduled, once it runs); past it, what was found
// is killed anyway. The kernel gives no wake-up for another process's
// stop, so the wait reads their state every stopTick.
const (
	stopWait = time.Second
	stopTick = time.Millisecond
)

// A Root is a process KillTree kills with its descendants: its pid, and
// the check that proves, once a pidfd pins the pid, that the process is
// the one meant (a pid reused before the pin fails it, and one reused
// after it is not what the pidfd signals).
type Root struct {
	PID    int
	Proven func() error
}

// IdentityRoot is the root of the process with identity id (Check).
func IdentityRoot(id fsm.Identity) Root {
	return Root{PID: id.PID, Proven: func() error { return Check(id) }}
}

// KillTree kills the processes roots and every descendant of theirs, and returns once each of them is dead: what a
// process tree's parent (a subreaper executor, say) would have killed,
// for when that parent is gone or cannot be trusted to.
//
// Each root is pinned by a pidfd, proven (Root.Proven: an identity's
// Check of start time, boot id and nonce, or a membership), and stopped (SIGSTOP through the pidfd), so that it forks no more. Then
// its children are found by parent pid, each pinned, checked again to be
// that parent's child and to have started no earlier than it, and
// stopped; then theirs, until a round finds no new process and every one
// found is seen stopped. A stopped process cannot fork, so no descendant
// is missed, whatever session, process group or cgroup it moved to. Then
// every one is SIGKILLed through its pidfd, and waited for.
//
// A root that is gone is skipped; one whose pid now belongs to another
// process is skipped without a signal (its descendants are not ours to
// find). A descendant whose parent died before it was found has been
// reparented, and is out of reach: the caller kills what else it can prove
// (a cgroup, a session, a process group).
func KillTree(ctx context.Context, roots ...Root) error {
	var (
		pinned []*PidFD
		seen   = map[int]uint64{} // pid -> start time, of everything pinned
		stat   = map[int]Stat{}
		first  error
	)
	defer func() { CloseAll(pinned) }()
	pin := func(pid int, check func() error) {
		if _, ok := seen[pid]; ok {
			return
		}
		p, err := Open(pid)
		if err != nil {
			return // gone
		}
		if err := check(); err != nil {
			p.Close()
			if !errors.Is(err, ErrGone) && !errors.Is(err, ErrNotOurs) && first == nil {
				first = err
			}
			return
		}
		s, err := ReadStat(pid)
		if err != nil || s.Dead() {
			p.Close()
			return
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil && first == nil {
			first = err
		}
		pinned = append(pinned, p)
		seen[pid], stat[pid] = s.StartTime, s
	}
	for _, r := range roots {
		if r.PID <= 1 {
			continue
		}
		pin(r.PID, r.Proven)
	}
	// Descend until a round finds nothing new and every process found is
	// stopped (or dead): only then are the children lists complete.
	var tick *time.Ticker
	deadline := time.Now().Add(stopWait)
	for ctx.Err() == nil {
		grew, running := false, false
		// The states first, then the children lists: a process seen
		// stopped was stopped before its list was read, so no child of it
		// can be missing from the list (the scan of /proc, where the
		// kernel keeps no lists, is made once a round, after every state).
		type alive struct {
			pid   int
			start uint64
		}
		var live []alive
		for pid, start := range seen {
			s, err := ReadStat(pid)
			if err != nil || s.Dead() || s.StartTime != start {
				continue
			}
			// Stopped ('T', 't'), or in uninterruptible sleep ('D': in the
			// kernel, it forks nothing until it returns, and then stops on
			// the SIGSTOP it has pending): no child can appear after its
			// list is read.
			if s.State != 'T' && s.State != 't' && s.State != 'D' {
				running = true
			}
			live = append(live, alive{pid, start})
		}
		var scan map[int][]int // this round's children lists, from one scan of /proc
		for _, p := range live {
			kids, err := childrenOf(p.pid, &scan)
			if err != nil {
				if first == nil {
					first = err
				}
				continue
			}
			for _, kid := range kids {
				if _, ok := seen[kid]; ok {
					continue
				}
				pin(kid, func() error { return childOf(kid, p.pid, p.start) })
				if _, ok := seen[kid]; ok {
					grew = true
				}
			}
		}
		if grew {
			continue
		}
		if !running || time.Now().After(deadline) {
			break
		}
		if tick == nil {
			tick = time.NewTicker(stopTick)
			defer tick.Stop()
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	for _, p := range pinned {
		if err := p.Signal(syscall.SIGKILL); err != nil && first == nil {
			first = err
		}
	}
	for _, p := range pinned {
		if err := p.Wait(ctx); err != nil {
			return err
		}
	}
	return first
}

// childOf checks that kid is a child of parent (pinned, started at
// parentStart) that started no earlier than it, with parent still alive:
// then kid's pid cannot have been reused since it was listed as parent's
// child.
func childOf(kid, parent int, parentStart uint64) error {
	ks, err := ReadStat(kid)
	switch {
	case err != nil:
		return err
	case ks.PPID != parent || ks.StartTime < parentStart:
		return fmt.Errorf("%w: pid %d is no longer a child of %d", ErrNotOurs, kid, parent)
	}
	if ps, err := ReadStat(parent); err != nil || ps.StartTime != parentStart || ps.Dead() {
		return fmt.Errorf("%w: the parent %d of pid %d is gone", ErrGone, parent, kid)
	}
	return nil
}

// childrenOf lists the children of pid: from the kernel's children lists
// where it keeps them (CONFIG_PROC_CHILDREN), else from a scan of /proc
// for its pid as parent, made once for every pid of a round (*scan, nil
// until then): a scan reads every process's stat, and a round asks for
// each process found so far.
func childrenOf(pid int, scan *map[int][]int) ([]int, error) {
	if kids, err := Children(pid); err == nil {
		return kids, nil
	}
	if *scan == nil {
		byParent := map[int][]int{}
		if err := Each(func(p int, s Stat) { byParent[s.PPID] = append(byParent[s.PPID], p) }); err != nil {
			return nil, err
		}
		*scan = byParent
	}
	return (*scan)[pid], nil
}
