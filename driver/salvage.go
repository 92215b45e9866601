package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Settled says what SettleLost did about a lost task.
type Settled struct {
	// Ended: what could be read of the task's log says it had ended;
	// nothing was killed.
	Ended bool
	// Executor is the executor killed by its proven identity, with
	// everything of its task; nil when none with the task's spawn nonce
	// was alive.
	Executor *fsm.Identity
}

// SettleLost kills the processes of a task that a salvage of a damaged
// store could not copy (store.Salvage's LostTask), when what of its log
// could be read proves which they are, so that none runs on unknown to
// the new store. It kills as recovery does: the executor by its proven
// identity (or found by the spawn nonce when no identity was read), the
// task by its recorded cgroup (else its process group) and the latest run
// its executor's launch record names. It asks nothing of a store: the task
// is in none any more.
//
// ErrUnproven: nothing readable proves which processes are the task's,
// and nothing was killed. ErrTaskNotKilled: the executor was killed, and
// not all of its task.
func SettleLost(ctx context.Context, world executor.World, l store.LostTask) (Settled, error) {
	if !l.Live && l.State.Terminal() {
		return Settled{Ended: true}, nil
	}
	if l.Prefix.Executor == nil && l.Nonce == "" {
		return Settled{}, fmt.Errorf("%w: no executor identity and no spawn nonce was readable", ErrUnproven)
	}
	k := recoveryKill{world: world, probe: defaultProbeTimeout, task: l.ID, id: l.Prefix.Executor, nonce: l.Nonce,
		run: l.Prefix.TaskProc(), sig: syscall.SIGKILL}
	_, id, err := k.kill(ctx)
	if err == nil && id == nil && l.Nonce != "" {
		// No executor with the nonce is alive, and the readable log does
		// not say whether it launched: its task may live on in its
		// cgroup. The world completes the identity from what the
		// executor wrote before it answered (its nonce proves it).
		if kerr := world.KillTask(ctx, l.ID, fsm.Identity{Nonce: l.Nonce}, l.Prefix.TaskProc()); kerr != nil && !errors.Is(kerr, ErrNotOurs) {
			err = fmt.Errorf("%w: %w", ErrTaskNotKilled, kerr)
		}
	}
	return Settled{Executor: id}, err
}

// PointSalvageSettled is the crash point between a salvage's kills of the
// lost tasks' processes and its install (SalvageStore).
const PointSalvageSettled = "salvage:settled"

// Salvaged is what SalvageStore did.
type Salvaged struct {
	store.SalvageReport
	// Settled says, for each of Lost in order, what SettleLost did.
	Settled []SettleOutcome
	// Installed: the new store is in place, and the damaged one is kept as
	// Aside.
	Installed bool
	Aside     string
}

// SettleOutcome is SettleLost's answer for one lost task.
type SettleOutcome struct {
	Settled
	Err error
}

// Done reports whether the salvage did everything it set out to: the new
// store is in place, the processes of every lost task are accounted for
// (killed by proven identity, or proven ended or gone), and no damage is
// left that could not be pinned on a task (tasks on such a page may be
// missing from every list). A caller reports anything else as not done
// (the CLI exits 1).
func (s Salvaged) Done() bool {
	if !s.Installed || len(s.Damage) > 0 {
		return false
	}
	for _, o := range s.Settled {
		if o.Err != nil {
			return false
		}
	}
	return true
}

// SalvageStore is the way out of a damaged store that keeps the running
// tasks under control, run under a maintenance of the store (which no
// other process uses meanwhile: store.BeginMaintenance, or an agent's
// store.Store.Suspend), so that the store it installs holds every append
// that was acknowledged before it began:
//
//  1. every readable task is copied into a new store beside the old one
//     (Maintenance.Salvage);
//  2. the live tasks that could not be copied have their processes killed
//     by proven identity (SettleLost), so that none runs on unknown to the
//     new store;
//  3. the new store is put in place and the damaged one kept beside it as
//     Aside (Maintenance.Install).
//
// A crash before 3 leaves the damaged store in place (a salvage again
// finds the same tasks lost, and their kills are idempotent); after it,
// the new one. The maintenance is neither released nor reopened here.
// An error is returned when no new store could be made or put in place;
// what was done by then is in the Salvaged.
func SalvageStore(ctx context.Context, m *store.Maintenance, world executor.World, hooks Hooks) (Salvaged, error) {
	stamp := time.Now().UTC().Format("20060102T150405.000000000")
	dst := m.Path() + ".salvaged-" + stamp
	out := Salvaged{Aside: m.Path() + ".damaged-" + stamp}
	rep, err := m.Salvage(ctx, dst)
	out.SalvageReport = rep
	if err != nil {
		_ = os.Remove(dst)
		_ = os.Remove(dst + ".lock")
		return out, err
	}
	for _, l := range rep.Lost {
		set, err := SettleLost(ctx, world, l)
		out.Settled = append(out.Settled, SettleOutcome{Settled: set, Err: err})
	}
	hooks.crash(PointSalvageSettled, "")
	if err := m.Install(dst, out.Aside); err != nil {
		return out, err
	}
	out.Installed = true
	return out, nil
}
