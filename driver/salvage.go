package driver

import (
	"context"
	"fmt"
	"syscall"

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
	return Settled{Executor: id}, err
}
