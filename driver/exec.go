package driver

import (
	"context"
	"os"
	"syscall"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// ExecSpec is a command to run inside a running task: its argv (looked up
// in the task's PATH, inside its root for an exec task), extra
// environment, and either its stdio descriptors or a terminal (see
// executor.ExecSpec).
type ExecSpec = executor.ExecSpec

// ExecProcess is a command ExecTask started inside a task. It holds a
// connection to the task's executor: the command lives no longer than it
// (Close kills a command still running), nor than the task.
type ExecProcess struct {
	id string
	h  executor.Conn
	p  *executor.ExecProcess
}

// ExecTask runs a command inside a running task, as the task itself runs:
// in its cgroup (so it is killed with the task and counts against its
// limits); for an exec task in its PID, mount, IPC and UTS namespaces and
// its root; as its user, with its capabilities and no_new_privs; with its
// environment (spec.Env laid over) and working directory. Like SignalTask
// it needs no owner: it reattaches through the recorded identity, and the
// executor starts and supervises the command. It returns once the command
// runs; Wait gives its exit status.
//
// A task that is not running is ErrNotRunning in a *TaskError naming its
// state; a command that does not exist in the task wraps
// executor.ErrCommandNotFound (executor.ErrNotExecutable for one that
// cannot be run).
//
//	p, err := d.ExecTask(ctx, "web", driver.ExecSpec{Argv: []string{"id", "-u"},
//		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
//	if err != nil { ... }
//	defer p.Close()
//	x, err := p.Wait(ctx) // x.Code, or x.Signal when a signal killed it
func (d *Driver) ExecTask(ctx context.Context, id string, spec ExecSpec) (*ExecProcess, error) {
	h, st, err := d.attachRunning(ctx, id)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.EffectTimeout)
	defer cancel()
	p, err := h.Exec(pctx, spec)
	if err != nil {
		h.Close()
		return nil, runningErr(id, st, err)
	}
	return &ExecProcess{id: id, h: h, p: p}, nil
}

// PID is the command's pid in the host's PID namespace.
func (p *ExecProcess) PID() int { return p.p.PID() }

// Terminal is the master of the command's terminal (ExecSpec.TTY), else
// nil: the caller copies between it and its own terminal, and sets its
// size (TIOCSWINSZ) when its own changes.
func (p *ExecProcess) Terminal() *os.File { return p.p.Terminal() }

// Signal sends sig to the command.
func (p *ExecProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := p.p.Signal(ctx, sig); err != nil {
		return &TaskError{Task: p.id, Err: err}
	}
	return nil
}

// Wait returns the command's exit status once it has exited (killed with
// the task: Signal 9). A lost connection to the executor is an error: the
// executor kills a command whose connection is gone.
func (p *ExecProcess) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	x, err := p.p.Wait(ctx)
	if err != nil {
		return x, &TaskError{Task: p.id, Err: err}
	}
	return x, nil
}

// Close closes the terminal and the connection to the executor, which
// kills the command if it is still running.
func (p *ExecProcess) Close() error {
	p.p.Close()
	return p.h.Close()
}
