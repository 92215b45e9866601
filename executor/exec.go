//go:build linux

package executor

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// Exec: a command run inside the running task.
//
// The client sends an exec request with the command and, without a
// terminal, its stdin, stdout and stderr as descriptors (SCM_RIGHTS). The
// executor starts the init shim in join mode (see joinFlag) with those
// descriptors, the shim joins the task's run as the task itself was set up
// (cgroup, oom_score_adj, namespaces through a pidfd of the task, working
// directory, user, capabilities, no_new_privs, environment), and starts
// the command as a child of the executor (CLONE_PARENT), in a session of
// its own. The executor supervises it like anything of the task: its
// single loop reaps it, answers exec-wait with its exit status, and kills
// it when the connection that asked for it closes (the exec's lease), when
// the task ends (it is in the task's cgroup, and for exec tasks in its PID
// namespace), or when the task is stopped. With a terminal, the shim opens
// the pseudo-terminal inside the task (its own devpts, for exec tasks) and
// hands the master back; the executor passes it on to the client.

// ExecProcess is a command running inside the task, started by
// Client.Exec. It lives no longer than the Client's connection: closing
// the Client (or losing it) kills the command.
type ExecProcess struct {
	c     *Client
	pid   int
	start uint64
	term  *os.File
}

// Exec starts spec's command inside the running task and returns once it
// runs. A task that is not running is ErrNotLaunched, ErrRestarting or
// ErrTaskExited; a command that does not exist in the task is
// ErrCommandNotFound, one that cannot be executed ErrNotExecutable; a step
// of joining the task that failed is ErrExec naming it.
func (c *Client) Exec(ctx context.Context, spec wire.ExecSpec) (*ExecProcess, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	var files []*os.File
	if !spec.TTY {
		for _, f := range []*os.File{spec.Stdin, spec.Stdout, spec.Stderr} {
			if f == nil {
				null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
				if err != nil {
					return nil, fmt.Errorf("%w: %w", wire.ErrExec, err)
				}
				defer null.Close()
				f = null
			}
			files = append(files, f)
		}
	}
	r, err := c.call(ctx, wire.Request{Op: wire.OpExec, Exec: &spec, Files: files})
	if err != nil {
		return nil, err
	}
	if r.Exec == nil || r.Exec.PID <= 0 || spec.TTY != (len(r.Files) == 1) {
		wire.CloseFiles(r.Files)
		return nil, fmt.Errorf("%w: exec answered without its process or terminal", wire.ErrProtocol)
	}
	p := &ExecProcess{c: c, pid: r.Exec.PID, start: r.Exec.StartTime}
	if spec.TTY {
		if p.term, err = pollable(r.Files[0], "pty"); err != nil {
			return nil, fmt.Errorf("%w: the terminal: %w", wire.ErrExec, err)
		}
	}
	return p, nil
}

// pollable returns f as a non-blocking file on the runtime poller (so
// reads honour deadlines and Close interrupts them), closing f. f must be
// this process's alone: the flag is on the open file description.
func pollable(f *os.File, name string) (*os.File, error) {
	defer f.Close()
	fd, err := proc.RawFD(f)
	if err != nil {
		return nil, err
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, err
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// PID is the command's pid (in the host's PID namespace).
func (p *ExecProcess) PID() int { return p.pid }

// StartTime is the command's start time (field 22 of /proc/PID/stat).
func (p *ExecProcess) StartTime() uint64 { return p.start }

// Terminal is the master of the command's pseudo-terminal (ExecSpec.TTY),
// else nil. Its reads end (EIO) once every holder of the terminal has
// closed it; setting its size (TIOCSWINSZ) resizes the command's terminal.
func (p *ExecProcess) Terminal() *os.File { return p.term }

// Wait returns the command's exit status once it has exited (Signal > 0
// when a signal killed it). If the connection is lost, the command is
// killed by the executor, and Wait returns ErrClosed.
func (p *ExecProcess) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	r, err := p.c.call(ctx, wire.Request{Op: wire.OpExecWait, PID: p.pid})
	if err != nil {
		return fsm.ExitStatus{}, err
	}
	switch {
	case r.Exec == nil || !r.Exec.Exited:
		return fsm.ExitStatus{}, fmt.Errorf("%w: exec-wait answered without an exit status", wire.ErrProtocol)
	case r.Exec.PID != p.pid || r.Exec.StartTime != p.start:
		// Never another process's status for this one's.
		return fsm.ExitStatus{}, fmt.Errorf("%w: exec-wait for pid %d (start %d) answered for pid %d (start %d)",
			wire.ErrProtocol, p.pid, p.start, r.Exec.PID, r.Exec.StartTime)
	}
	return r.Exec.Exit, nil
}

// Signal sends sig to the command (through the executor's pidfd of it). A
// command that has exited is not an error.
func (p *ExecProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.c.call(ctx, wire.Request{Op: wire.OpExecSignal, PID: p.pid, Signal: int(sig)})
	return err
}

// Close closes the terminal, if any. The command runs on until it exits,
// is killed with the task, or the Client is closed.
func (p *ExecProcess) Close() error {
	if p.term != nil {
		return p.term.Close()
	}
	return nil
}

// ---- the executor's side ----
