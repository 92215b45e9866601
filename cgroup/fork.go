//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ForkExec starts path in the cgroup: from its first instruction the new
// process is a member in every hierarchy, without a helper process that
// joins the cgroup and then execs (a Go program's start costs more than
// the rest of a launch on the hosts measured), and without the RCU grace
// period a migration of a whole process can wait for.
//
//   - In each v1 hierarchy an OS thread of this process, locked to the
//     goroutine, moves itself into the cgroup by writing "0" to its tasks
//     file (the kernel moves the current thread alone, taking no
//     process-wide lock), forks, and moves itself back before it serves
//     anything else. A child is born in its parent thread's cgroups.
//   - In the cgroup2 hierarchy the child is cloned into the cgroup
//     (CLONE_INTO_CGROUP, through SysProcAttr.UseCgroupFD): a thread alone
//     cannot move there.
//
// The thread is never the thread group leader (which stands for the
// process in /proc/PID/cgroup, so a kill of the cgroup that reads it could
// take this process for a member). While the thread is in the cgroup it is
// a member too: it counts against pids.max (a limit below 2 leaves no room
// for the fork: ErrThreadMove) and is charged for the kernel memory the
// fork allocates, which is the child's. If it cannot move back, the thread
// is ended (its goroutine exits locked) and ForkExec fails wrapping
// ErrThreadMove with the child's pid: a child started with
// SysProcAttr.Pdeathsig dies with the thread, and the caller reaps it.
//
// h is the caller's own layout (Probe): where its threads return. attr is
// not modified.
func (c *Cgroup) ForkExec(h Host, path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == os.Getpid() {
			// Keep the leader locked here while another goroutine, which
			// cannot land on it, does the work.
			run2 := make(chan struct{})
			go func() { run(); close(run2) }()
			<-run2
			runtime.UnlockOSThread()
			return
		}
		pid, tainted, err := c.forkFromThread(h, path, argv, attr)
		done <- result{pid, err}
		if !tainted {
			runtime.UnlockOSThread()
		} // else the thread ends with the goroutine, and leaves the cgroup
	}
	go run()
	r := <-done
	return r.pid, r.err
}

// forkFromThread is ForkExec on the locked, non-leader calling thread. It
// reports whether the thread is left in the cgroup.
func (c *Cgroup) forkFromThread(h Host, path string, argv []string, attr *syscall.ProcAttr) (pid int, tainted bool, err error) {
	type move struct{ into, back string }
	var moves []move
	var unified string
	for _, d := range c.dirs {
		if d.version == V2 {
			unified = d.dir
			continue
		}
		back, ok := h.ownDir(d.key)
		if !ok {
			return 0, false, fmt.Errorf("%w: this process's own cgroup in the %s hierarchy is unknown", ErrThreadMove, d.key)
		}
		moves = append(moves, move{d.dir, back})
	}
	var moved []move
	goBack := func() bool {
		ok := true
		for i := len(moved) - 1; i >= 0; i-- {
			if err := writeFile(moved[i].back, "tasks", "0"); err != nil {
				ok = false
			}
		}
		return ok
	}
	for _, m := range moves {
		if err := writeFile(m.into, "tasks", "0"); err != nil {
			if !goBack() {
				return 0, true, fmt.Errorf("%w: %w (and the thread could not move back)", ErrThreadMove, err)
			}
			return 0, false, fmt.Errorf("%w: %w", ErrThreadMove, err)
		}
		moved = append(moved, m)
	}
	a := *attr
	sys := syscall.SysProcAttr{}
	if attr.Sys != nil {
		sys = *attr.Sys
	}
	a.Sys = &sys
	if unified != "" {
		fd, err := unix.Open(unified, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			if !goBack() {
				return 0, true, fmt.Errorf("%w: open %s: %w (and the thread could not move back)", ErrThreadMove, unified, err)
			}
			return 0, false, fmt.Errorf("%w: open %s: %w", ErrThreadMove, unified, err)
		}
		defer unix.Close(fd)
		sys.UseCgroupFD, sys.CgroupFD = true, fd
	}
	pid, err = syscall.ForkExec(path, argv, &a)
	if !goBack() {
		if err == nil {
			err = fmt.Errorf("%w: the thread that forked pid %d could not leave the cgroup", ErrThreadMove, pid)
		}
		return pid, true, err
	}
	if err != nil && (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.E2BIG)) {
		// pids.max left no room for the thread and the child, or the
		// kernel has no CLONE_INTO_CGROUP.
		err = fmt.Errorf("%w: %w", ErrThreadMove, err)
	}
	return pid, false, err
}

// ownDir is the directory of this process's own cgroup in the hierarchy
// key (where Probe found it).
func (h Host) ownDir(key string) (string, bool) {
	for _, hi := range h.Hierarchies {
		if hi.Key != key {
			continue
		}
		rel, ok := strings.CutPrefix(hi.Path, hi.Root)
		if !ok {
			return "", false
		}
		return strings.TrimSuffix(hi.Mount+"/"+strings.Trim(rel, "/"), "/"), true
	}
	return "", false
}
