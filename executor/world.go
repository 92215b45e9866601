//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// World is everything a driver asks of processes: the one contract
// between the driver and the process world. Real is the world of real
// executor processes; proptest's simulation is another, and returns
// ErrUnsupported for what it does not model.
//
// Every method is keyed so that it is safe to repeat after a crash: spawn
// by nonce, kill by proven identity. Every method honours its context's
// deadline: a frozen executor makes the calls about its own task fail,
// nothing else. Identity failures are ErrNotOurs (what the record names
// now belongs to another process, or a side file does not match the log:
// nothing is signalled, nothing believed) and ErrGone (the process is
// gone).
type World interface {
	// Spawn starts an executor for task with nonce and returns a connected
	// Conn once it has answered. On error nothing with that nonce is left
	// alive.
	Spawn(ctx context.Context, task, nonce string) (Conn, error)
	// Reattach connects to the task's running executor after proving its
	// identity.
	Reattach(ctx context.Context, task string, id fsm.Identity) (Conn, error)
	// FindByNonce looks for a live executor spawned with nonce.
	FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error)
	// Alive reports whether the executor with this identity is alive (a
	// pid that now belongs to a stranger is not).
	Alive(ctx context.Context, task string, id fsm.Identity) (bool, error)
	// Kill kills the executor with this identity and waits until it is
	// dead. Already dead: nil. The pid belongs to a stranger: ErrNotOurs,
	// nothing signalled.
	Kill(ctx context.Context, task string, id fsm.Identity) error
	// KillTask kills every process of the task and confirms none is left:
	// the task's cgroup (id.Cgroup, checked to name the task and id.Nonce)
	// where it has one, else the process group led by run (zero: nothing
	// was launched). Nothing left: nil. A task of another boot (id.BootID)
	// is gone: nil, nothing signalled.
	KillTask(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) error
	// ExitStatus returns the exit status the executor left on disk, once it
	// matched the log: id's nonce and boot id, and the task process run
	// when it is not zero. A record that does not match is ErrNotOurs.
	ExitStatus(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) (fsm.ExitStatus, bool, error)
	// LaunchRecord returns the task process the executor recorded on disk
	// when it launched, if it did and the record matches id (else
	// ErrNotOurs).
	LaunchRecord(ctx context.Context, task string, id fsm.Identity) (fsm.Proc, bool, error)
	// Journal returns the restart journal the executor left on disk (the
	// restarts it performed, each an intent and an outcome, in order),
	// once it matches id (else ErrNotOurs); none yet is no entries.
	Journal(ctx context.Context, task string, id fsm.Identity) ([]fsm.Event, error)
	// CheckSpec tells, before anything is spawned, whether this world can
	// run spec as it asks (the user exists, exec's capabilities are
	// allowed, the cgroup controllers its limits need are there).
	CheckSpec(s fsm.Spec) error
	// LockTask takes the task's lock: held by the process that drives the
	// task through a state that owes an effect, and let go of by the
	// kernel when that process dies. When a live process holds it,
	// release is nil and holder is its pid, without waiting. A hold by no
	// live process (a copy of the descriptor a forked child carries to its
	// exec after its holder let go or died) is waited out for a bounded
	// time and the lock taken; one that lasts past that is an error, never
	// reported as a live holder's.
	LockTask(task string) (release func(), holder int, err error)
	// WaitLockTask waits until it holds the task's lock, or ctx ends.
	WaitLockTask(ctx context.Context, task string) (release func(), err error)
	// DiscardTask removes what LockTask made for a task whose start
	// recorded nothing (its first append failed), so that a refused start
	// leaves no trace. The caller holds the task's lock.
	DiscardTask(task string)
}

// Conn is a connection to one live executor. Its methods are safe for
// concurrent use.
type Conn interface {
	Identity() fsm.Identity
	// Launch starts the task and returns its status right after (not
	// exited: running and supervised); idempotent (a second call reports
	// the task already launched).
	Launch(ctx context.Context, s fsm.Spec) (Status, error)
	// Status asks the executor about its task.
	Status(ctx context.Context) (Status, error)
	// Watch returns as soon as the executor's restart journal holds
	// entries past since (restart-intent, then launched or launch-failed,
	// for each restart, in order) or the task is over for good
	// (Status.Over).
	Watch(ctx context.Context, since int) (Status, []fsm.Event, error)
	// WaitReady returns once the current run of a notify task (its spec's
	// Readiness) said it is ready (Status.Ready, with its STATUS= text in
	// Status.NotifyStatus), or ended first (Status.Exited). A world
	// without notify sockets answers ErrUnsupported.
	WaitReady(ctx context.Context) (Status, error)
	// Signal sends sig to the task's process group, or with main to its
	// main process alone.
	Signal(ctx context.Context, sig syscall.Signal, main bool) error
	// Stop sends sig, waits grace, SIGKILLs the group and confirms it gone,
	// and returns the task's final status: its exit, and whether the
	// executor confirmed its cgroup empty (Status.Emptied). A second Stop
	// with an earlier deadline (or SIGKILL) escalates.
	Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (Status, error)
	// Shutdown makes the executor kill what is left and exit; returns once
	// it is dead.
	Shutdown(ctx context.Context) error
	// Dismiss ends an executor that reported its task over for good
	// (Status.Over), or that launched nothing (the error edges out of
	// spawning and executor-up): it is killed at once, through a handle on
	// the process whose identity was proven, and Dismiss returns once it
	// is dead; the exit record it would write is for a driver that is
	// away.
	Dismiss(ctx context.Context) error
	// Stats reads the task cgroup's figures.
	Stats(ctx context.Context) (cgroup.Stats, error)
	// Exec starts a command inside the running task.
	Exec(ctx context.Context, es ExecSpec) (*ExecProcess, error)
	// Close drops the connection without stopping anything (after launch
	// the executor outlives it).
	Close() error
}

var (
	_ World = (*Real)(nil)
	_ Conn  = realConn{}
)

// Real is the World of real executor processes, one per task, each in its
// task's private directory under StateDir/tasks. Each task is contained in
// the cgroup its executor announced (fsm.Identity.Cgroup), which KillTask
// kills and removes. Set its fields before its first use.
type Real struct {
	// StateDir holds one private directory per task, under tasks/.
	StateDir string
	// Command is the argv prefix that starts a binary in executor mode
	// (SpawnConfig.Command); nil: the calling binary with "executor".
	Command []string
	// Logger receives the spawns' logs; nil discards them.
	Logger hclog.Logger
	// Policy is sent with every launch: the capability allow list for
	// exec tasks (nil: DefaultAllowedCaps), what an exec task's root is
	// built from, entries "SRC" or "SRC:DST" each bound read-only (nil:
	// DefaultChroot, Nomad's chroot_env), the seccomp allow list and the
	// sandbox parts exec tasks may run without where the host lacks them.
	Policy Policy
	// Env, when set, gives the environment of the executor spawned for a
	// task (see SpawnConfig.Env); nil (or a nil answer) is this process's.
	Env func(task string) []string
	// LockTimeout bounds LockTask's wait for a task lock held by no live
	// process (a descriptor a forked child carries to its exec); 0: 1 s,
	// the store's lock timeout's default.
	LockTimeout time.Duration

	// The host's cgroup layout, probed once (0.4 ms a probe here, and a
	// start and a kill each needed one) and again when a recorded cgroup
	// names a hierarchy it lacks, or after a probe that failed.
	hostMu   sync.Mutex
	host     cgroup.Host
	hostErr  error
	hostDone bool
	// The sandbox features the host lacks, probed once: a kernel's do not
	// change while it runs.
	featuresOnce sync.Once
	features     spec.Features
}

// cgroupHost returns the host's cgroup layout, probing it the first time,
// after a probe that failed, or when fresh is set.
func (r *Real) cgroupHost(fresh bool) (cgroup.Host, error) {
	r.hostMu.Lock()
	defer r.hostMu.Unlock()
	if !r.hostDone || r.hostErr != nil || fresh {
		r.host, r.hostErr = cgroup.Probe()
		r.hostDone = true
	}
	return r.host, r.hostErr
}

func (r *Real) dir(task string) string { return statedir.Layout{Dir: r.StateDir}.Task(task).Dir() }

func (r *Real) logger() hclog.Logger {
	if r.Logger == nil {
		return hclog.NewNullLogger()
	}
	return r.Logger
}

// Spawn implements World.
func (r *Real) Spawn(ctx context.Context, task, nonce string) (Conn, error) {
	c, err := Spawn(ctx, SpawnConfig{
		Command: r.Command, TaskDir: r.dir(task), Nonce: nonce,
		ReadyTimeout: deadlineOr(ctx, DefaultReadyTimeout), Logger: r.logger().With("task_id", task),
		Env: r.env(task),
	})
	if err != nil {
		return nil, err
	}
	return realConn{c, r}, nil
}

func (r *Real) env(task string) []string {
	if r.Env == nil {
		return nil
	}
	return r.Env(task)
}

func deadlineOr(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return d
}

// Reattach implements World.
func (r *Real) Reattach(ctx context.Context, task string, id fsm.Identity) (Conn, error) {
	c, err := Reattach(ctx, r.dir(task), id)
	if err != nil {
		return nil, err
	}
	return realConn{c, r}, nil
}

// FindByNonce implements World.
func (r *Real) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	return findByNonce(r.dir(task), nonce)
}

// Alive implements World.
func (r *Real) Alive(ctx context.Context, task string, id fsm.Identity) (bool, error) {
	return proc.Alive(id)
}

// Kill implements World: the executor, once its identity is proven, is
// stopped, and everything descended from it (its task, and every orphan
// the subreaper had adopted, wherever they moved: another session,
// another cgroup) found and killed with it (proc.KillTree), so that its
// death cannot hand a descendant to init.
func (r *Real) Kill(ctx context.Context, task string, id fsm.Identity) error {
	if err := proc.Check(id); errors.Is(err, proc.ErrNotOurs) {
		return err // nothing signalled
	}
	return proc.KillTree(ctx, proc.IdentityRoot(id))
}

// KillTask implements World, in the order stop's kill has it (the
// executor's own: everything it can see descends from it):
//
//  1. everything descended from the task process run, and from the
//     executor if it still lives, is stopped, found and killed
//     (proc.KillTree): a root task's descendant that moved itself out of
//     the task's cgroup, session and group is found by its parent, as long
//     as one lives;
//  2. the cgroup named by id.Cgroup, once cgroup.OpenRecorded has proved it
//     is this task's (it names the task and id.Nonce), is killed,
//     confirmed empty and removed, whether or not a launch was recorded
//     (run zero: the launch may have happened unrecorded);
//  3. what is left in the executor's session (proc.KillSession) and the
//     task's process group (proc.KillGroup), each by its leader's pid and
//     start time.
//
// A task of another boot (id.BootID) is gone: nothing is signalled,
// whatever now has its pid and start time (they count from boot). An id
// with only a nonce is completed from the executor's identity file when
// that names the nonce. Every step is tried; the first failure is returned (ErrNotOurs only when
// nothing else failed).
func (r *Real) KillTask(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) error {
	if id.PID == 0 && id.Cgroup == "" && id.Nonce != "" {
		// Only the spawn nonce is known (a task a salvage lost, whose
		// executor-up could not be read): the identity the executor
		// wrote before it answered, once it names that nonce, says
		// where its task's cgroup is.
		if x, err := wire.ReadIdentity(r.dir(task)); err == nil && x.Nonce == id.Nonce {
			id = x
		}
	}
	if boot, err := proc.BootID(); err == nil && id.BootID != "" && id.BootID != boot {
		return nil // neither processes nor cgroups outlive a boot
	}
	if done, err := r.killUnlaunched(task, id, run); done {
		return err
	}
	var failed, notOurs error
	note := func(err error) {
		switch {
		case err == nil:
		case errors.Is(err, ErrNotOurs):
			if notOurs == nil {
				notOurs = err
			}
		case failed == nil:
			failed = err
		}
	}
	var roots []proc.Root
	if !run.IsZero() {
		roots = append(roots, proc.IdentityRoot(fsm.Identity{PID: run.PID, StartTime: run.StartTime, BootID: id.BootID}))
	}
	if id.PID > 0 {
		roots = append(roots, proc.IdentityRoot(id))
	}
	var cg *cgroup.Cgroup
	if id.Cgroup != "" {
		var err error
		if cg, err = r.openCgroup(task, id); err != nil {
			note(err)
		} else if members, err := cg.Procs(); err == nil {
			// Every member is the task's (the cgroup is proven its), and
			// so are their descendants, wherever they went: a member is
			// proven by being one still once its pid is pinned.
			for _, pid := range members {
				roots = append(roots, proc.Root{PID: pid, Proven: func() error {
					if now, err := cg.Procs(); err != nil || !slices.Contains(now, pid) {
						return fmt.Errorf("%w: pid %d left the task's cgroup", ErrGone, pid)
					}
					return nil
				}})
			}
		}
	}
	note(proc.KillTree(ctx, roots...))
	if cg != nil {
		if err := cg.Kill(ctx); err != nil {
			note(err)
		} else {
			note(cg.Remove())
		}
	}
	if id.PID > 1 {
		if err := proc.KillSession(ctx, fsm.Proc{PID: id.PID, StartTime: id.StartTime}); !errors.Is(err, ErrNotOurs) {
			note(err) // a pid that now leads another session: the session is gone
		}
	}
	if !run.IsZero() {
		note(proc.KillGroup(ctx, run))
	}
	if failed != nil {
		return failed
	}
	return notOurs
}

// killUnlaunched is KillTask of a task that launched nothing, as far as
// its log knows (run zero), once its executor is dead: then what proves
// the kill complete is the task's cgroup, with no walk of /proc. The
// executor makes the cgroup before anything of a task exists, and a task
// is born in it (or its shim joins it before the task's first
// instruction), so a cgroup that holds no process, in any hierarchy,
// means no process of the task lives: it is removed, and that is all.
// done is false (the caller kills as for a launched task: the walk from
// what is there, the cgroup, the session) when it cannot say so: a run
// is known, the executor lives (or its death cannot be read), the host
// records no cgroup for the task, the cgroup is not proven the task's or
// cannot be read, or it holds a process (a launch nobody recorded).
func (r *Real) killUnlaunched(task string, id fsm.Identity, run fsm.Proc) (done bool, err error) {
	if !run.IsZero() || id.PID <= 0 || id.Cgroup == "" {
		return false, nil
	}
	if err := proc.Check(id); !errors.Is(err, ErrGone) && !errors.Is(err, ErrNotOurs) {
		return false, nil // alive (nil), or unreadable
	}
	cg, err := r.openCgroup(task, id)
	if err != nil {
		return false, nil
	}
	members, err := cg.Procs()
	if err != nil || len(members) > 0 {
		return false, nil
	}
	return true, cg.Remove()
}

// openCgroup opens the task's recorded cgroup, once proven the task's.
func (r *Real) openCgroup(task string, id fsm.Identity) (*cgroup.Cgroup, error) {
	h, err := r.cgroupHost(false)
	if err != nil {
		return nil, err
	}
	cg, err := cgroup.OpenRecorded(h, id.Cgroup, task, id.Nonce)
	if errors.Is(err, cgroup.ErrNoHierarchy) { // mounted since the probe?
		if h, err = r.cgroupHost(true); err == nil {
			cg, err = cgroup.OpenRecorded(h, id.Cgroup, task, id.Nonce)
		}
	}
	if err != nil {
		if errors.Is(err, cgroup.ErrBadLocation) {
			return nil, fmt.Errorf("%w: the recorded cgroup: %w", ErrNotOurs, err)
		}
		return nil, err // ErrNotOurs (the same error as cgroup's) or another failure
	}
	return cg, nil
}

// CheckSpec implements World: the one host check of a launch (package
// executor/internal/spec's Check), run before anything is spawned; the
// executor runs the same at launch.
func (r *Real) CheckSpec(s fsm.Spec) error {
	r.featuresOnce.Do(func() { r.features = spec.ProbeFeatures() })
	h, err := r.cgroupHost(false)
	if err != nil {
		_, err = spec.Check(r.launch(s), cgroup.Host{}, err, r.features)
		return err
	}
	_, err = spec.Check(r.launch(s), h, h.Usable(), r.features)
	return err
}

// BaseEnv is the environment an executor of this world gives a task of
// spec s and id task before the spec's own env: PATH, HOME, TETHER_* and,
// for a task with an Alloc, Nomad's directory variables. It is what a
// job file's ${env["PATH"]} reads where the file sets none.
func (r *Real) BaseEnv(s fsm.Spec, task string) (map[string]string, error) {
	tu, err := spec.UserOf(s)
	if err != nil {
		return nil, err
	}
	s.Env = nil
	return spec.TaskEnv(s, spec.DirsOf(s, r.dir(task)), tu.Home), nil
}

// launch is what the executor is asked to launch for s.
func (r *Real) launch(s fsm.Spec) Launch { return Launch{Spec: s, Policy: r.Policy} }

// ExitStatus implements World.
func (r *Real) ExitStatus(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) (fsm.ExitStatus, bool, error) {
	rec, ok, err := wire.ReadExitRecord(r.dir(task))
	if err != nil || !ok {
		return fsm.ExitStatus{}, false, err
	}
	if err := rec.Match(id, run); err != nil {
		return fsm.ExitStatus{}, false, err
	}
	return rec.Exit, true, nil
}

// LaunchRecord implements World.
func (r *Real) LaunchRecord(ctx context.Context, task string, id fsm.Identity) (fsm.Proc, bool, error) {
	rec, ok, err := wire.ReadLaunchRecord(r.dir(task))
	if err != nil || !ok {
		return fsm.Proc{}, false, err
	}
	if err := rec.Match(id); err != nil {
		return fsm.Proc{}, false, err
	}
	return rec.Proc(), true, nil
}

// Journal implements World.
func (r *Real) Journal(ctx context.Context, task string, id fsm.Identity) ([]fsm.Event, error) {
	j, ok, err := wire.ReadJournal(r.dir(task))
	if err != nil || !ok {
		return nil, err
	}
	if err := j.Match(id); err != nil {
		return nil, err
	}
	return j.Entries, nil
}

// realConn is a Conn of the real world: a Client, and the world that
// turns an fsm.Spec into what the executor launches.
type realConn struct {
	*Client
	r *Real
}

func (c realConn) Launch(ctx context.Context, s fsm.Spec) (Status, error) {
	return c.Client.Launch(ctx, c.r.launch(s))
}

func (c realConn) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (Status, error) {
	return c.Client.stop(ctx, sig, grace)
}

func (c realConn) Signal(ctx context.Context, sig syscall.Signal, main bool) error {
	if main {
		return c.Client.SignalMain(ctx, sig)
	}
	return c.Client.Signal(ctx, sig)
}

// ValidateCaps checks cap_add and cap_drop against allowed (nil means
// DefaultAllowedCaps). Names are case-insensitive, with or without the CAP_
// prefix; "all" is accepted in both. Unknown names and added names outside
// allowed are refused with a *CapError naming them (lower case, no prefix):
// adding "all" needs an allow list of every capability. It is pure: a
// driver runs it before spawning anything.
func ValidateCaps(add, drop, allowed []string) error { return spec.ValidateCaps(add, drop, allowed) }
