//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// Exec: a command run inside the running task.
//
// The client sends an exec request with the command. The executor makes
// the command's stdin, stdout and stderr pipes (without a terminal) and
// starts the init shim in join mode (see shim.JoinFlag) with their
// command ends; the shim joins the task's run as the task itself was set
// up (cgroup, oom_score_adj, namespaces through a pidfd of the task,
// session keyring, user, capabilities, no_new_privs, working directory,
// seccomp filter, environment), and starts the command as a child of the
// executor (CLONE_PARENT), in a session of its own. The answer carries the
// pipes' other ends, which the client relays to and from the caller's
// Stdin, Stdout and Stderr: nothing of the caller's (a file, a socket, a
// terminal) is ever a descriptor of the command's. (To an executor of a
// previous version, which takes the command's stdio with the request, the
// client sends pipes of its own making, relayed the same way.) The
// executor supervises the command like anything of the task: its single
// loop reaps it, answers exec-wait with its exit status, and kills it
// when the connection that asked for it closes (the exec's lease), when
// the task ends (it is in the task's cgroup, and for exec tasks in its PID
// namespace), or when the task is stopped. With a terminal, the shim
// opens the pseudo-terminal inside the task (its own devpts, for exec
// tasks), as the task's user, and hands the master back; the executor
// passes it on to the client.

// ExecProcess is a command running inside the task, started by
// Client.Exec. It lives no longer than the Client's connection: closing
// the Client (or losing it) kills the command.
type ExecProcess struct {
	c     *Client
	pid   int
	start uint64
	term  *os.File
	io    *relay
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
	req := wire.Request{Op: wire.OpExec, Exec: &spec}
	var ours []*os.File
	ownPipes := !spec.TTY && c.version < wire.ExecPipesVersion
	if ownPipes {
		theirs, mine, err := stdioPipes()
		if err != nil {
			return nil, fmt.Errorf("%w: the command's pipes: %w", wire.ErrExec, err)
		}
		defer wire.CloseFiles(theirs) // the executor has its own copies once sent
		req.Files, ours = theirs, mine
	}
	r, err := c.call(ctx, req)
	if err != nil {
		wire.CloseFiles(ours)
		return nil, err
	}
	want := 0
	switch {
	case spec.TTY:
		want = 1
	case !ownPipes:
		want, ours = 3, r.Files
	}
	if r.Exec == nil || r.Exec.PID <= 0 || len(r.Files) != want {
		wire.CloseFiles(r.Files)
		wire.CloseFiles(ours)
		return nil, fmt.Errorf("%w: exec answered without its process, its pipes or its terminal", wire.ErrProtocol)
	}
	p := &ExecProcess{c: c, pid: r.Exec.PID, start: r.Exec.StartTime}
	if spec.TTY {
		if p.term, err = pollable(r.Files[0], "pty"); err != nil {
			return nil, fmt.Errorf("%w: the terminal: %w", wire.ErrExec, err)
		}
		return p, nil
	}
	if p.io, err = startRelay(spec, ours); err != nil {
		return nil, fmt.Errorf("%w: the command's pipes: %w", wire.ErrExec, err)
	}
	return p, nil
}

// stdioPipes makes a command's three pipes: its ends (stdin's read end,
// stdout's and stderr's write ends) and the relay's.
func stdioPipes() (theirs, ours []*os.File, err error) {
	for i := range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			wire.CloseFiles(theirs)
			wire.CloseFiles(ours)
			return nil, nil, err
		}
		if i == 0 {
			theirs, ours = append(theirs, r), append(ours, w)
		} else {
			theirs, ours = append(theirs, w), append(ours, r)
		}
	}
	return theirs, ours, nil
}

// relay copies the caller's Stdin into the command's stdin pipe, and its
// stdout and stderr pipes out to the caller's writers, each in a
// goroutine, on descriptors on the runtime poller (so that a deadline or
// a Close interrupts them).
type relay struct {
	stdin *os.File
	outs  [2]*os.File
	done  [2]chan struct{}
}

// startRelay starts the copies over pipes (stdin's write end, stdout's
// and stderr's read ends), which it owns from here on.
func startRelay(spec wire.ExecSpec, pipes []*os.File) (*relay, error) {
	r := &relay{}
	var err error
	for i, f := range pipes {
		p, perr := pollable(f, f.Name())
		if perr != nil && err == nil {
			err = perr
		}
		if i == 0 {
			r.stdin = p
		} else {
			r.outs[i-1] = p
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	if spec.Stdin == nil {
		r.stdin.Close() // an empty input
	} else {
		go func() {
			_, _ = io.Copy(r.stdin, spec.Stdin)
			r.stdin.Close()
		}()
	}
	for i, w := range []io.Writer{spec.Stdout, spec.Stderr} {
		if w == nil {
			w = io.Discard
		}
		r.done[i] = make(chan struct{})
		go copyOut(w, r.outs[i], r.done[i])
	}
	return r, nil
}

// copyOut copies src to dst until src ends, or, once finish set a
// deadline on src (the command has exited), until src holds nothing more:
// everything the command wrote before it exited is in the pipe by then,
// and a descendant that still holds the pipe does not keep the caller
// waiting. A dst that fails is dropped (the pipe is still drained, so the
// command never blocks on it).
func copyOut(dst io.Writer, src *os.File, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 32<<10)
	write := func(b []byte) {
		if _, err := dst.Write(b); err != nil {
			dst = io.Discard
		}
	}
	for {
		n, err := src.Read(buf)
		write(buf[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return
		}
	}
	// The rest, without waiting: read until the pipe is empty or ended.
	rc, err := src.SyscallConn()
	if err != nil || src.SetReadDeadline(time.Time{}) != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), buf)
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return true // empty (EAGAIN), ended, or failed: done either way
			}
			write(buf[:n])
		}
	})
}

// finish lets the output copies take what the command wrote and end.
func (r *relay) finish() {
	now := time.Now()
	for _, f := range r.outs {
		_ = f.SetReadDeadline(now)
	}
	for _, d := range r.done {
		<-d
	}
	r.close()
}

// close stops every copy (the copy of Stdin ends at its next write).
func (r *relay) close() {
	for _, f := range append([]*os.File{r.stdin}, r.outs[:]...) {
		if f != nil {
			f.Close()
		}
	}
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
// when a signal killed it) and what it wrote has reached Stdout and
// Stderr. If the connection is lost, the command is killed by the
// executor, and Wait returns ErrClosed.
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
	if p.io != nil {
		p.io.finish()
	}
	return r.Exec.Exit, nil
}

// Signal sends sig to the command (through the executor's pidfd of it). A
// command that has exited is not an error.
func (p *ExecProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.c.call(ctx, wire.Request{Op: wire.OpExecSignal, PID: p.pid, Signal: int(sig)})
	return err
}

// Close closes the terminal, if any, and stops relaying the command's
// stdio (its pipes are closed: a command still writing gets EPIPE). The
// command runs on until it exits, is killed with the task, or the Client
// is closed.
func (p *ExecProcess) Close() error {
	if p.io != nil {
		p.io.close()
	}
	if p.term != nil {
		return p.term.Close()
	}
	return nil
}

// ---- the executor's side ----
