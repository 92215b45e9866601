//go:build linux

package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// Containment: the executor contains its task in a cgroup of its own,
// named for the task (its directory's name) and the spawn nonce. The
// location is computed at startup and announced in the executor's identity
// (so the driver records it, write-ahead, in executor-up), the cgroup is
// created with the task's limits at launch, killed and confirmed empty when
// the task has ended (or is stopped), and removed before the exit status
// is written.

const (
	// cgroupKillTimeout bounds one kill of the task's cgroup; a member in
	// uninterruptible sleep outlives any signal.
	cgroupKillTimeout = 10 * time.Second
	// cgroupKillTries is how often the executor tries to empty the
	// cgroup before it gives up (leaving the cgroup to the driver's kill).
	cgroupKillTries = 3
	// reserveSize is how much room statedir.ReserveFile holds for the exit
	// status on a full disk.
	reserveSize = 16 << 10
)

// probeContainment computes where the executor of taskDir with nonce
// contains its task, or why it cannot.
func probeContainment(taskDir, nonce string) (cgroup.Host, cgroup.Location, error) {
	h, err := cgroup.Probe()
	if err != nil {
		return cgroup.Host{}, cgroup.Location{}, err
	}
	if err := h.Usable(); err != nil {
		return h, cgroup.Location{}, err
	}
	loc, err := cgroup.LocationFor(h, filepath.Base(taskDir), nonce)
	return h, loc, err
}

// killCgroup starts killing the task's cgroup in a goroutine, so the loop
// goes on reaping and answering; the outcome arrives on cgKilled.
func (s *server) killCgroup() {
	if s.cg == nil || s.cgKill == cgKilling || s.cgKill == cgEmpty {
		return // none, under way, or done: nothing of the task is left to join it
	}
	s.cgKill = cgKilling
	cg := s.cg
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cgroupKillTimeout)
		defer cancel()
		s.cgKilled <- cg.Kill(ctx)
	}()
}

// cgroupKilled takes the outcome of a kill of the task's cgroup.
func (s *server) cgroupKilled(err error) {
	if err == nil {
		s.cgKill = cgEmpty
		s.log.Debug("task cgroup empty")
	} else {
		s.cgTries++
		s.log.Error("killing the task's cgroup", "err", err, "try", s.cgTries)
		s.cgKill = cgLive
		if s.cgTries >= cgroupKillTries {
			s.cgKill = cgGaveUp
			s.log.Error("giving up on emptying the task's cgroup; it is left for the driver's kill", "cgroup", s.loc.String())
		}
	}
	s.reap()
}

// removeCgroup removes the task's cgroup (after a failed launch, or once
// it is confirmed empty).
func (s *server) removeCgroup() {
	if s.cg == nil {
		return
	}
	if err := s.cg.Remove(); err != nil {
		s.log.Warn("removing the task's cgroup", "err", err)
	} else if s.cgKill == cgEmpty {
		s.cgKill = cgGone
	}
	s.cg = nil
}

// oomKilled reads whether the kernel's OOM killer killed a process of the
// task's cgroup (the cgroup is fresh for this launch: its count is this
// run's).
func (s *server) oomKilled() bool {
	if s.cg == nil {
		return false
	}
	n, err := s.cg.OOMKills()
	if err != nil {
		s.log.Warn("reading the task cgroup's OOM kill count", "err", err)
		return false
	}
	if n > 0 {
		s.log.Warn("the OOM killer killed processes of the task", "oom_kills", n)
	}
	return n > 0
}

// memoryPeak reads the most memory the task's cgroup held during this run
// (its cgroup is fresh for each launch), 0 when it cannot be read.
func (s *server) memoryPeak() uint64 {
	if s.cg == nil {
		return 0
	}
	st, err := s.cg.Stats()
	if err != nil {
		s.log.Debug("reading the task cgroup's memory peak", "err", err)
	}
	return st.MemoryPeakBytes
}

// reserve holds room in the task directory for the exit status, so a task
// that fills the disk with its output does not cost its exit status.
func (s *server) reserve() error {
	f, err := os.OpenFile(filepath.Join(s.taskDir, statedir.ReserveFile), os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, reserveSize); err != nil {
		return fmt.Errorf("fallocate: %w", err)
	}
	return nil
}

func (s *server) release() {
	if err := os.Remove(filepath.Join(s.taskDir, statedir.ReserveFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing the reserve file", "err", err)
	}
}

// undeliverable reports whether sig cannot reach any process of the task:
// it is the init of a PID namespace of its own, which the kernel shields
// from every signal it has no handler for, it does not catch sig, and it is
// alone in its cgroup. Waiting a grace for such a signal to work is
// pointless.
func (s *server) undeliverable(sig syscall.Signal) bool {
	if !s.task.nsInit || s.cg == nil || sig == syscall.SIGKILL {
		return false
	}
	caught, err := proc.CaughtSignals(s.task.pid)
	if err != nil || caught&(1<<(uint(sig)-1)) != 0 {
		return false
	}
	procs, err := s.cg.Procs()
	return err == nil && len(procs) == 1 && procs[0] == s.task.pid
}
