//go:build linux

package executor

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// findByNonce finds a live executor started with nonce: first through the
// identity file in taskDir, then by scanning /proc command lines for the
// nonce argument. ok is false when none is alive.
func findByNonce(taskDir, nonce string) (fsm.Identity, bool, error) {
	if nonce == "" {
		return fsm.Identity{}, false, fmt.Errorf("%w: empty nonce", wire.ErrBadConfig)
	}
	if id, err := wire.ReadIdentity(taskDir); err == nil && id.Nonce == nonce {
		alive, err := proc.Alive(id)
		if err != nil {
			return fsm.Identity{}, false, err
		}
		if alive {
			return id, true, nil
		}
	}
	boot, err := proc.BootID()
	if err != nil {
		return fsm.Identity{}, false, err
	}
	dir, err := filepath.Abs(taskDir)
	if err != nil {
		return fsm.Identity{}, false, fmt.Errorf("%w: task dir: %w", wire.ErrBadConfig, err)
	}
	// An executor is a session leader (Spawn's Setsid) whose argv carries
	// both its task dir and its nonce as whole arguments: a process that
	// merely mentions the nonce (a grep, a log viewer) is not taken for it.
	args := []string{"-dir=" + dir, proc.NonceArg(nonce)}
	var found fsm.Identity
	var ok bool
	self := os.Getpid()
	err = proc.Each(func(pid int, s proc.Stat) {
		if ok || s.Dead() || pid == self || s.SID != pid {
			return
		}
		if has, _ := proc.CmdlineHas(pid, args...); has {
			found = fsm.Identity{PID: pid, StartTime: s.StartTime, BootID: boot, Nonce: nonce, Socket: wire.SocketPath(taskDir)}
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
