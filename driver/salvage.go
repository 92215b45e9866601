package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
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
	// Unspawned: no executor of the task ever answered (a salvage that
	// listed the task directories found no identity in its own), so
	// nothing of it can run; nothing was killed.
	Unspawned bool
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

// lossOf is what is recorded of a lost task whose processes SettleLost
// accounted for.
func lossOf(l store.LostTask, set Settled) store.Loss {
	loss := store.Loss{ID: l.ID, Nonce: l.Nonce, Executor: set.Executor}
	if loss.Executor == nil {
		loss.Executor = l.Prefix.Executor
	}
	if loss.Nonce == "" && loss.Executor != nil {
		loss.Nonce = loss.Executor.Nonce
	}
	why := "its log could not be read"
	if l.Err != nil {
		why = l.Err.Error()
	}
	switch {
	case set.Unspawned:
		loss.Reason = fmt.Sprintf("the store was damaged (%s); no executor of it ever answered, and nothing of it ran", why)
	case set.Executor != nil:
		loss.Reason = fmt.Sprintf("the store was damaged (%s); its executor (pid %d) and everything of its task were killed by proven identity", why, set.Executor.PID)
	default:
		loss.Reason = fmt.Sprintf("the store was damaged (%s); no executor of it was alive, and whatever was left of its task was killed", why)
	}
	return loss
}

// TaskClaims lists the task directories of world (executor.Real's
// StateDir/tasks; dirs is nil for a world that keeps none, and holds the
// id of every task directory otherwise) and claims each whose executor
// wrote its identity: its spawn nonce, and whether an executor with that
// nonce is alive, proven as recovery proves it (World.FindByNonce: the
// pid, its start time and boot, and the nonce on its command line). A
// salvage gives these to the store (store.Maintenance.Salvage) so that no
// live executor is left out of the new store unaccounted for.
func TaskClaims(ctx context.Context, world executor.World) (claims []store.Claim, dirs map[string]bool, err error) {
	r, ok := world.(*executor.Real)
	if !ok || r.StateDir == "" {
		return nil, nil, nil
	}
	layout := statedir.Layout{Dir: r.StateDir}
	ents, err := os.ReadDir(layout.Tasks())
	dirs = map[string]bool{}
	if errors.Is(err, os.ErrNotExist) {
		return nil, dirs, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || statedir.ValidateTaskID(id) != nil {
			continue // never a path outside the state directory
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		x, ok, err := readIdentity(layout.Task(id).File(statedir.IdentityFile))
		if err != nil {
			continue // not an executor's (a link, a huge file): neither claimed nor taken for unspawned
		}
		if !ok {
			dirs[id] = true // no executor answered from it
			continue
		}
		if x.Nonce == "" {
			continue // not an executor's: neither claimed nor taken for unspawned
		}
		dirs[id] = true
		_, alive, err := world.FindByNonce(ctx, id, x.Nonce)
		if err != nil {
			return nil, nil, fmt.Errorf("task %s: %w", id, err)
		}
		claims = append(claims, store.Claim{ID: id, Nonce: x.Nonce, Live: alive})
	}
	return claims, dirs, nil
}

// maxIdentityFile bounds what is read of an identity file (a task may
// write in its own directory).
const maxIdentityFile = 64 << 10

// readIdentity reads an executor's identity file: never through a link,
// only a regular file, at most maxIdentityFile bytes. ok is false when
// there is none.
func readIdentity(path string) (x fsm.Identity, ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return x, false, nil
	}
	if err != nil {
		return x, false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return x, false, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxIdentityFile+1))
	if err != nil {
		return x, false, err
	}
	if len(b) > maxIdentityFile {
		return x, false, fmt.Errorf("%s is larger than %d bytes", path, maxIdentityFile)
	}
	if err := json.Unmarshal(b, &x); err != nil {
		return x, false, fmt.Errorf("%s: %w", path, err)
	}
	return x, true, nil
}

// PointSalvageSettled is the crash point between a salvage's kills of the
// lost tasks' processes and its install (SalvageStore).
const PointSalvageSettled = "salvage:settled"

// Salvaged is what SalvageStore did.
type Salvaged struct {
	store.SalvageReport
	// Settled says, for each of Lost in order, what SettleLost did.
	Settled []SettleOutcome
	// Listed: the world's task directories were listed, and each whose
	// executor's identity proves it alive was claimed (store.Claim): then
	// every live executor is carried into the new store or among Lost.
	// Claims is how many were proven alive.
	Listed bool
	Claims int
	// Recorded are the lost tasks recorded in the new store as lost
	// (store.Maintenance.RecordLost): their processes accounted for.
	Recorded []string
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
// store is in place, and the processes of every lost task are accounted
// for (killed by proven identity, or proven ended or gone). Where the
// world's task directories could not be listed, damage that could not be
// pinned on a task is not done either (tasks on such a page may be missing
// from every list); where they were, every live executor is carried or
// among the lost, and that damage leaves none unaccounted. A caller
// reports anything else as not done (the CLI exits 1).
func (s Salvaged) Done() bool {
	if !s.Installed || (!s.Listed && len(s.Damage) > 0) {
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
//  3. the new store is put in place and the old one kept beside it as
//     Aside (Maintenance.Install): STORE.damaged-STAMP, or STORE.sound-STAMP
//     when nothing was damaged or lost.
//
// A crash before 3 leaves the damaged store in place (a salvage again
// finds the same tasks lost, and their kills are idempotent); after it,
// the new one. The maintenance is neither released nor reopened here.
// An error is returned when no new store could be made or put in place;
// what was done by then is in the Salvaged.
func SalvageStore(ctx context.Context, m *store.Maintenance, world executor.World, hooks Hooks) (Salvaged, error) {
	stamp := time.Now().UTC().Format("20060102T150405.000000000")
	dst := m.Path() + ".salvaged-" + stamp
	out := Salvaged{}
	claims, dirs, err := TaskClaims(ctx, world)
	if err != nil {
		return out, fmt.Errorf("salvage: list the task directories: %w", err)
	}
	out.Listed = dirs != nil
	live := map[string]store.Claim{}
	for _, c := range claims {
		if c.Live {
			out.Claims++
			live[c.ID] = c
		}
	}
	rep, err := m.Salvage(ctx, dst, claims...)
	out.SalvageReport = rep
	// The old file is kept under a name that says what it was.
	out.Aside = m.Path() + ".damaged-" + stamp
	if len(rep.Damage) == 0 && len(rep.Lost) == 0 && len(rep.HeadsRebuilt) == 0 {
		out.Aside = m.Path() + ".sound-" + stamp
	}
	if err != nil {
		_ = os.Remove(dst)
		_ = os.Remove(dst + ".lock")
		return out, err
	}
	var losses []store.Loss
	for _, l := range rep.Lost {
		var set Settled
		var err error
		if dirs[l.ID] && l.Nonce == "" && l.Prefix.Executor == nil {
			// Its directory is there and holds no executor's identity
			// (every one that does is claimed, and the store gave such
			// a task its claim's nonce): no executor of it ever
			// answered, and nothing of it can run.
			set.Unspawned = true
		} else {
			set, err = SettleLost(ctx, world, l)
			if c, ok := live[l.ID]; ok && err != nil && (errors.Is(err, ErrUnproven) || errors.Is(err, ErrNotOurs)) {
				// What could be read of its log does not prove its
				// processes, but its live executor proves itself:
				// killed by that.
				l.Nonce, l.Prefix.Executor = c.Nonce, nil
				set, err = SettleLost(ctx, world, l)
			}
		}
		out.Settled = append(out.Settled, SettleOutcome{Settled: set, Err: err})
		if err == nil && !set.Ended && (l.Live || !l.State.Terminal()) {
			losses = append(losses, lossOf(l, set))
		}
	}
	if err := m.RecordLost(dst, losses, time.Now()); err != nil {
		return out, err
	}
	for _, l := range losses {
		out.Recorded = append(out.Recorded, l.ID)
	}
	hooks.crash(PointSalvageSettled, "")
	if err := m.Install(dst, out.Aside); err != nil {
		return out, err
	}
	out.Installed = true
	return out, nil
}
