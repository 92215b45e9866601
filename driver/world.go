package driver

import (
	"context"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// Executors is the process world the driver acts on: the real one spawns
// executor processes (see Real), proptest's simulates them. Every method is
// keyed so that it is safe to repeat after a crash: spawn by nonce, kill by
// proven identity. Every method honours its context's deadline: a frozen
// executor makes the calls about its own task fail, nothing else.
type Executors interface {
	// Spawn starts an executor for task with nonce and returns a connected
	// handle once it has answered. On error nothing with that nonce is left
	// alive.
	Spawn(ctx context.Context, task, nonce string) (Executor, error)
	// Reattach connects to the task's running executor after proving its
	// identity. ErrNotOurs or ErrGone when it cannot be proven.
	Reattach(ctx context.Context, task string, id fsm.Identity) (Executor, error)
	// FindByNonce looks for a live executor spawned with nonce.
	FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error)
	// Kill kills the executor with this identity and waits until it is dead.
	// Already dead: nil. The pid belongs to a stranger: ErrNotOurs, nothing
	// signalled.
	Kill(ctx context.Context, task string, id fsm.Identity) error
	// KillTask kills every process of the task and confirms none is left:
	// the task's cgroup (id.Cgroup, checked to name the task and id.Nonce)
	// where it has one, else the process group led by pid (started at
	// start; pid 0: nothing was launched). Nothing left: nil. A task of
	// another boot (id.BootID) is gone: nil, nothing signalled.
	KillTask(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) error
	// Alive reports whether the executor with this identity is alive (a
	// pid that now belongs to a stranger is not).
	Alive(ctx context.Context, task string, id fsm.Identity) (bool, error)
	// ExitStatus returns the exit status the executor left on disk, once it
	// matched the log: id's nonce and boot id, and the task process when
	// pid > 0. A record that does not match is ErrNotOurs (and believed in
	// nothing).
	ExitStatus(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) (fsm.ExitStatus, bool, error)
	// LaunchRecord returns the task process the executor recorded on disk
	// when it launched, if it did and the record matches id (else
	// ErrNotOurs).
	LaunchRecord(ctx context.Context, task string, id fsm.Identity) (pid int, start uint64, ok bool, err error)
	// LockTask takes, without waiting, the task's lock: held by the process
	// that drives the task through a state that owes an effect, and let go
	// of by the kernel when that process dies (see LockFile). When another
	// holder has it, release is nil and holder is its pid (0 if unknown).
	LockTask(task string) (release func(), holder int, err error)
	// WaitLockTask waits until it holds the task's lock, or ctx ends.
	WaitLockTask(ctx context.Context, task string) (release func(), err error)
}

// Executor is a connection to one live executor. Its methods are safe for
// concurrent use.
type Executor interface {
	Identity() fsm.Identity
	// Launch starts the task and returns its status right after (not
	// exited: running and supervised); idempotent (a second call reports
	// the task already launched).
	Launch(ctx context.Context, spec fsm.Spec, allowedCaps []string) (Status, error)
	// Status asks the executor about its task.
	Status(ctx context.Context) (Status, error)
	// Wait blocks until the task has exited and its group is gone.
	Wait(ctx context.Context) (fsm.ExitStatus, error)
	// Signal sends sig to the task's process group.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Stop sends sig, waits grace, SIGKILLs the group and confirms it gone.
	// A second Stop with an earlier deadline (or SIGKILL) escalates.
	Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (fsm.ExitStatus, error)
	// Shutdown makes the executor kill what is left and exit; returns once
	// it is dead.
	Shutdown(ctx context.Context) error
	// Close drops the connection without stopping anything (after launch
	// the executor outlives it).
	Close() error
}

// Status is what an executor says about its task.
type Status = executor.Status

// Watcher is implemented by an Executor whose executor restarts its task
// itself (the task's restart policy): Watch returns as soon as the
// executor's restart journal holds entries past since (restart-intent,
// then launched or launch-failed, for each restart, in order) or the task
// is over for good (Status.Exited and not Restarting). An Executor without
// it is supervised through Wait.
type Watcher interface {
	Watch(ctx context.Context, since int) (Status, []fsm.Event, error)
}

// JournalReader is implemented by a process world whose executors leave a
// restart journal on disk: Journal returns its entries once it matches the
// log's executor identity (ErrNotOurs otherwise), for the driver to fold
// the restarts that happened while no driver watched.
type JournalReader interface {
	Journal(ctx context.Context, task string, id fsm.Identity) ([]fsm.Event, error)
}
