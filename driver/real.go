package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/logs"
)

// Real is the process world of real executor processes, one per task,
// each in its task's private directory under stateDir/tasks. Each task is
// contained in the cgroup its executor announced (fsm.Identity.Cgroup),
// which KillTask kills and removes.
type Real struct {
	stateDir string
	command  []string
	log      hclog.Logger
	chroot   []string

	// The host's cgroup layout, probed once (0.4 ms a probe here, and a
	// start and a kill each needed one) and again when a recorded cgroup
	// names a hierarchy it lacks.
	hostMu   sync.Mutex
	host     cgroup.Host
	hostErr  error
	hostDone bool
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

var _ Executors = (*Real)(nil)

// RealOption configures NewReal.
type RealOption func(*Real)

// WithChroot sets what an exec task's root is built from: entries "SRC" or
// "SRC:DST", each bound read-only (see executor.LaunchSpec.Chroot); nil
// means executor.DefaultChroot (Nomad's chroot_env).
func WithChroot(entries []string) RealOption {
	return func(r *Real) { r.chroot = slices.Clone(entries) }
}

// NewReal returns the real process world. command is the argv prefix that
// starts a binary in executor mode (for tether's own binary, {path,
// "executor"}); nil uses the executor package's default.
func NewReal(stateDir string, command []string, log hclog.Logger, opts ...RealOption) *Real {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	r := &Real{stateDir: stateDir, command: command, log: log}
	for _, o := range opts {
		o(r)
	}
	return r
}

func (r *Real) dir(task string) string { return filepath.Join(r.stateDir, "tasks", task) }

// Spawn implements Executors.
func (r *Real) Spawn(ctx context.Context, task, nonce string) (Executor, error) {
	c, err := executor.Spawn(ctx, executor.SpawnConfig{
		Command: r.command, TaskDir: r.dir(task), Nonce: nonce,
		ReadyTimeout: deadlineOr(ctx, 10*time.Second), Logger: r.log.With("task_id", task),
	})
	if err != nil {
		return nil, err
	}
	return realExecutor{c, r}, nil
}

func deadlineOr(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return d
}

// Reattach implements Executors.
func (r *Real) Reattach(ctx context.Context, task string, id fsm.Identity) (Executor, error) {
	c, err := executor.Reattach(ctx, r.dir(task), id)
	if err != nil {
		return nil, worldErr(err)
	}
	return realExecutor{c, r}, nil
}

// FindByNonce implements Executors.
func (r *Real) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	return executor.FindByNonce(r.dir(task), nonce)
}

// Alive implements Executors.
func (r *Real) Alive(ctx context.Context, task string, id fsm.Identity) (bool, error) {
	return proc.Alive(id)
}

// Kill implements Executors.
func (r *Real) Kill(ctx context.Context, task string, id fsm.Identity) error {
	return worldErr(proc.Kill(ctx, id))
}

// KillTask implements Executors: the cgroup named by id.Cgroup, once
// cgroup.OpenRecorded has proved it is this task's (it names the task and
// id.Nonce), is killed, confirmed empty and removed, whether or not a
// launch was recorded (pid 0: the launch may have happened unrecorded).
// Only a task without a cgroup falls back to its process group, by pid and
// start time. A task of another boot (id.BootID) is gone: nothing is
// signalled, whatever now has its pid and start time (they count from
// boot).
func (r *Real) KillTask(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) error {
	if boot, err := proc.BootID(); err == nil && id.BootID != "" && id.BootID != boot {
		return nil // neither processes nor cgroups outlive a boot
	}
	if id.Cgroup == "" {
		if pid == 0 {
			return nil
		}
		return worldErr(proc.KillGroup(ctx, fsm.Proc{PID: pid, StartTime: start}))
	}
	h, err := r.cgroupHost(false)
	if err != nil {
		return err
	}
	cg, err := cgroup.OpenRecorded(h, id.Cgroup, task, id.Nonce)
	if errors.Is(err, cgroup.ErrNoHierarchy) { // mounted since the probe?
		if h, err = r.cgroupHost(true); err == nil {
			cg, err = cgroup.OpenRecorded(h, id.Cgroup, task, id.Nonce)
		}
	}
	if err != nil {
		if errors.Is(err, cgroup.ErrNotOurs) || errors.Is(err, cgroup.ErrBadLocation) {
			return fmt.Errorf("%w: the recorded cgroup: %w", ErrNotOurs, err)
		}
		return err
	}
	if err := cg.Kill(ctx); err != nil {
		return err
	}
	return cg.Remove()
}

// CheckSpec is the host-dependent check of a spec, for the driver to run
// before it spawns anything: the user (exec: nobody by default) exists,
// exec's capabilities are in allowed and its chroot entries exist, and the
// host can contain the task as it asks (task cgroups for exec and for any
// limit; each limit's controller, named in the error). See
// executor.CheckSpec.
func (r *Real) CheckSpec(spec fsm.Spec, allowed []string) error {
	h, err := r.cgroupHost(false)
	return executor.CheckSpecOn(r.launchSpec(spec, allowed), h, err)
}

// launchSpec is what the executor is asked to launch for spec.
func (r *Real) launchSpec(spec fsm.Spec, allowed []string) executor.LaunchSpec {
	res := spec.Resources
	ls := executor.LaunchSpec{
		Mode: spec.Driver, Command: spec.Command, Args: spec.Args, Env: spec.Env, Dir: spec.Dir,
		User: spec.User, CapAdd: spec.CapAdd, CapDrop: spec.CapDrop, AllowedCaps: allowed,
		Limits: cgroup.Limits{Memory: int64(res.MemoryMB), MemoryMax: int64(res.MemoryMaxMB),
			CPU: int64(res.CPU), Cores: res.Cores, Pids: int64(res.PIDs)},
		OOMScoreAdj: spec.OOMScoreAdj,
		PIDMode:     spec.PIDMode, IPCMode: spec.IPCMode,
		Logs: logs.Config{MaxFiles: spec.Logs.MaxFiles, MaxFileSizeMB: spec.Logs.MaxFileSizeMB, Disabled: spec.Logs.Disabled},
		Name: spec.Name, Job: spec.Job, Group: spec.Group,
		Restart: spec.Restart,
	}
	if spec.Driver == executor.ModeExec {
		ls.Chroot = r.chroot
	}
	return ls
}

// ExitStatus implements Executors.
func (r *Real) ExitStatus(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) (fsm.ExitStatus, bool, error) {
	rec, ok, err := executor.ReadExitRecord(r.dir(task))
	if err != nil || !ok {
		return fsm.ExitStatus{}, false, worldErr(err)
	}
	if err := rec.Match(id, pid, start); err != nil {
		return fsm.ExitStatus{}, false, worldErr(err)
	}
	return rec.Exit, true, nil
}

// LaunchRecord implements Executors.
func (r *Real) LaunchRecord(ctx context.Context, task string, id fsm.Identity) (int, uint64, bool, error) {
	rec, ok, err := executor.ReadLaunchRecord(r.dir(task))
	if err != nil || !ok {
		return 0, 0, false, worldErr(err)
	}
	if err := rec.Match(id); err != nil {
		return 0, 0, false, worldErr(err)
	}
	return rec.PID, rec.StartTime, true, nil
}

func worldErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, executor.ErrNotOurs), errors.Is(err, executor.ErrSideFileMismatch):
		return fmt.Errorf("%w: %w", ErrNotOurs, err)
	case errors.Is(err, executor.ErrGone):
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

type realExecutor struct {
	c *executor.Client
	r *Real
}

func (e realExecutor) Identity() fsm.Identity { return e.c.Identity() }

func (e realExecutor) Launch(ctx context.Context, spec fsm.Spec, allowed []string) (Status, error) {
	st, err := e.c.Launch(ctx, e.r.launchSpec(spec, allowed))
	return st, worldErr(err)
}

// Stats reads the task cgroup's figures through the executor.
func (e realExecutor) Stats(ctx context.Context) (cgroup.Stats, error) {
	st, err := e.c.Stats(ctx)
	return st, worldErr(err)
}

func (e realExecutor) Status(ctx context.Context) (Status, error) {
	s, err := e.c.Status(ctx)
	return s, worldErr(err)
}

func (e realExecutor) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	x, err := e.c.Wait(ctx)
	return x, worldErr(err)
}

func (e realExecutor) Signal(ctx context.Context, sig syscall.Signal) error {
	return worldErr(e.c.Signal(ctx, sig))
}

// SignalMain sends sig to the task's main process alone.
func (e realExecutor) SignalMain(ctx context.Context, sig syscall.Signal) error {
	return worldErr(e.c.SignalMain(ctx, sig))
}

// Exec starts a command inside the task (see executor.Client.Exec).
func (e realExecutor) Exec(ctx context.Context, spec executor.ExecSpec) (*executor.ExecProcess, error) {
	p, err := e.c.Exec(ctx, spec)
	return p, worldErr(err)
}

func (e realExecutor) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (fsm.ExitStatus, error) {
	x, err := e.c.Stop(ctx, sig, grace)
	return x, worldErr(err)
}

func (e realExecutor) Watch(ctx context.Context, since int) (Status, []fsm.Event, error) {
	st, evs, err := e.c.Watch(ctx, since)
	return st, evs, worldErr(err)
}

func (e realExecutor) Shutdown(ctx context.Context) error { return worldErr(e.c.Shutdown(ctx)) }
func (e realExecutor) Close() error                       { return e.c.Close() }

// validateCaps is the capability check run before anything is spawned.
func validateCaps(add, drop, allowed []string) error {
	return executor.ValidateCaps(add, drop, allowed)
}

var _ SpecChecker = (*Real)(nil)

// Journal implements JournalReader.
func (r *Real) Journal(ctx context.Context, task string, id fsm.Identity) ([]fsm.Event, error) {
	j, ok, err := executor.ReadJournal(r.dir(task))
	if err != nil || !ok {
		return nil, worldErr(err)
	}
	if err := j.Match(id); err != nil {
		return nil, worldErr(err)
	}
	return j.Entries, nil
}

var (
	_ Watcher       = realExecutor{}
	_ JournalReader = (*Real)(nil)
	_ mainSignaller = realExecutor{}
	_ execer        = realExecutor{}
)
