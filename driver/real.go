package driver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// Real is the process world of real executor processes, one per task,
// each in its task's private directory under stateDir/tasks.
type Real struct {
	stateDir string
	command  []string
	log      hclog.Logger
}

var _ Executors = (*Real)(nil)

// NewReal returns the real process world. command is the argv prefix that
// starts a binary in executor mode (for tether's own binary, {path,
// "executor"}); nil uses the executor package's default.
func NewReal(stateDir string, command []string, log hclog.Logger) *Real {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Real{stateDir: stateDir, command: command, log: log}
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
	return realExecutor{c}, nil
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
	return realExecutor{c}, nil
}

// FindByNonce implements Executors.
func (r *Real) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	return executor.FindByNonce(r.dir(task), nonce)
}

// Alive implements Executors.
func (r *Real) Alive(ctx context.Context, task string, id fsm.Identity) (bool, error) {
	return executor.Alive(id)
}

// Kill implements Executors.
func (r *Real) Kill(ctx context.Context, task string, id fsm.Identity) error {
	return worldErr(executor.Kill(ctx, id))
}

// KillTask implements Executors.
func (r *Real) KillTask(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) error {
	if pid == 0 {
		return nil
	}
	return worldErr(executor.KillGroup(ctx, pid, start))
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

type realExecutor struct{ c *executor.Client }

func (e realExecutor) Identity() fsm.Identity { return e.c.Identity() }

func (e realExecutor) Launch(ctx context.Context, spec fsm.Spec, allowed []string) (Status, error) {
	st, err := e.c.Launch(ctx, executor.LaunchSpec{
		Mode: spec.Driver, Command: spec.Command, Args: spec.Args, Env: spec.Env, Dir: spec.Dir,
		User: spec.User, CapAdd: spec.CapAdd, CapDrop: spec.CapDrop, AllowedCaps: allowed,
	})
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

func (e realExecutor) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (fsm.ExitStatus, error) {
	x, err := e.c.Stop(ctx, sig, grace)
	return x, worldErr(err)
}

func (e realExecutor) Shutdown(ctx context.Context) error { return worldErr(e.c.Shutdown(ctx)) }
func (e realExecutor) Close() error                       { return e.c.Close() }

// validateCaps is the capability check run before anything is spawned.
func validateCaps(add, drop, allowed []string) error {
	return executor.ValidateCaps(add, drop, allowed)
}
