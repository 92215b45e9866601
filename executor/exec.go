//go:build linux

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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

// ExecSpec is a command to run inside the running task.
type ExecSpec struct {
	// Argv is the command and its arguments. Argv[0] is looked up in the
	// task's PATH, inside the task's root for an exec task.
	Argv []string `json:"argv"`
	// Env holds "KEY=VALUE" entries laid over the task's environment.
	Env []string `json:"env,omitempty"`
	// TTY runs the command on a new pseudo-terminal (its controlling
	// terminal, and its stdin, stdout and stderr), of Rows by Cols when
	// they are set. ExecProcess.Terminal is its master.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Stdin, Stdout and Stderr are the command's own descriptors without
	// TTY (nil: /dev/null). The executor gets copies; the caller keeps
	// its own.
	Stdin  *os.File `json:"-"`
	Stdout *os.File `json:"-"`
	Stderr *os.File `json:"-"`
}

// maxExecArgs bounds an exec's argv and env (each entry, and all together:
// a frame is at most maxFrame).
const maxExecArgs = 4096

func (s ExecSpec) validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return fmt.Errorf("%w: exec needs a command", ErrBadSpec)
	}
	if len(s.Argv)+len(s.Env) > maxExecArgs {
		return fmt.Errorf("%w: exec of %d arguments and variables, at most %d", ErrBadSpec, len(s.Argv)+len(s.Env), maxExecArgs)
	}
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: exec argument %d holds a NUL byte", ErrBadSpec, i)
		}
	}
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("%w: exec environment entry %q: want KEY=VALUE without NUL", ErrBadSpec, kv)
		}
	}
	return nil
}

// ExecStatus is what the executor says of a command started by Exec: its
// process (in the host's PID namespace) and, once it has exited, how.
type ExecStatus struct {
	PID       int            `json:"pid"`
	StartTime uint64         `json:"start_time"`
	Exited    bool           `json:"exited,omitempty"`
	Exit      fsm.ExitStatus `json:"exit"`
}

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
func (c *Client) Exec(ctx context.Context, spec ExecSpec) (*ExecProcess, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	var files []*os.File
	if !spec.TTY {
		for _, f := range []*os.File{spec.Stdin, spec.Stdout, spec.Stderr} {
			if f == nil {
				null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
				if err != nil {
					return nil, fmt.Errorf("%w: %w", ErrExec, err)
				}
				defer null.Close()
				f = null
			}
			files = append(files, f)
		}
	}
	r, err := c.call(ctx, request{Op: opExec, Exec: &spec, files: files})
	if err != nil {
		return nil, err
	}
	if r.Exec == nil || r.Exec.PID <= 0 || spec.TTY != (len(r.files) == 1) {
		closeFiles(r.files)
		return nil, fmt.Errorf("%w: exec answered without its process or terminal", ErrProtocol)
	}
	p := &ExecProcess{c: c, pid: r.Exec.PID, start: r.Exec.StartTime}
	if spec.TTY {
		if p.term, err = pollable(r.files[0], "pty"); err != nil {
			return nil, fmt.Errorf("%w: the terminal: %w", ErrExec, err)
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
	r, err := p.c.call(ctx, request{Op: opExecWait, PID: p.pid})
	if err != nil {
		return fsm.ExitStatus{}, err
	}
	if r.Exec == nil || !r.Exec.Exited {
		return fsm.ExitStatus{}, fmt.Errorf("%w: exec-wait answered without an exit status", ErrProtocol)
	}
	return r.Exec.Exit, nil
}

// Signal sends sig to the command (through the executor's pidfd of it). A
// command that has exited is not an error.
func (p *ExecProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.c.call(ctx, request{Op: opExecSignal, PID: p.pid, Signal: int(sig)})
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

// execProc is a command the executor started in the task.
type execProc struct {
	c       *sconn // the connection it lives for; nil once that closed
	pid     int
	start   uint64
	proc    *proc.PidFD
	exited  bool
	exit    fsm.ExitStatus
	waiters []uint64 // exec-wait requests on c
}

func (e *execProc) status() *ExecStatus {
	return &ExecStatus{PID: e.pid, StartTime: e.start, Exited: e.exited, Exit: e.exit}
}

// canExec says why no command can join the task now, if it cannot.
func (s *server) canExec() error {
	if err := s.checkRunning(); err != nil {
		return err
	}
	if s.shutdown || s.stopping {
		return fmt.Errorf("%w: the task is being stopped", ErrTaskExited)
	}
	if s.prefix == nil {
		return fmt.Errorf("%w: the init shim needs Serve called with a tail of os.Args", ErrExec)
	}
	return nil
}

// execute handles an exec request: start the command, register it for
// the connection, answer with its process (and terminal).
func (s *server) execute(sc *sconn, req request) {
	fail := func(err error) { s.send(sc, response{ID: req.ID, Err: toWire(err)}) }
	if req.Exec == nil {
		fail(fmt.Errorf("%w: exec without a command", ErrBadSpec))
		return
	}
	spec := *req.Exec
	if err := spec.validate(); err != nil {
		fail(err)
		return
	}
	if want := 3; !spec.TTY && len(req.files) != want || spec.TTY && len(req.files) != 0 {
		fail(fmt.Errorf("%w: exec with %d descriptors (want 3 without a terminal, none with one)", ErrProtocol, len(req.files)))
		return
	}
	if err := s.canExec(); err != nil {
		fail(err)
		return
	}
	e, term, err := s.startExec(spec, req.files)
	if err != nil {
		s.log.Warn("exec failed", "err", err)
		fail(err)
		return
	}
	e.c = sc
	s.execs[e.pid] = e
	s.log.Info("exec started", "exec_pid", e.pid, "command", spec.Argv[0], "tty", spec.TTY)
	r := response{ID: req.ID, Exec: e.status()}
	if term != nil {
		r.files = []*os.File{term}
	}
	s.send(sc, r)
	s.reap() // it may have exited already
}

// execWait answers when the connection's exec pid has exited.
func (s *server) execWait(sc *sconn, id uint64, pid int) {
	e := s.execs[pid]
	if e == nil || e.c != sc {
		s.send(sc, response{ID: id, Err: toWire(fmt.Errorf("%w: pid %d", ErrUnknownExec, pid))})
		return
	}
	if e.exited {
		s.send(sc, response{ID: id, Exec: e.status()})
		delete(s.execs, pid)
		return
	}
	e.waiters = append(e.waiters, id)
}

// execSignal signals the connection's exec pid through its pidfd.
func (s *server) execSignal(sc *sconn, req request) {
	e := s.execs[req.PID]
	switch {
	case e == nil || e.c != sc:
		s.send(sc, response{ID: req.ID, Err: toWire(fmt.Errorf("%w: pid %d", ErrUnknownExec, req.PID))})
		return
	case req.Signal < 0 || req.Signal > 64:
		s.send(sc, response{ID: req.ID, Err: toWire(fmt.Errorf("%w: signal %d", ErrBadSpec, req.Signal))})
		return
	}
	if !e.exited {
		if err := e.proc.Signal(syscall.Signal(req.Signal)); err != nil {
			s.send(sc, response{ID: req.ID, Err: toWire(err)})
			return
		}
	}
	s.send(sc, response{ID: req.ID})
}

// execReaped records the exit of an exec and answers its waiters.
func (s *server) execReaped(e *execProc, ws unix.WaitStatus) {
	e.exited, e.exit = true, exitOf(ws)
	e.proc.Close()
	s.log.Info("exec exited", "exec_pid", e.pid, "code", e.exit.Code, "signal", e.exit.Signal)
	if e.c == nil || len(e.waiters) > 0 {
		for _, id := range e.waiters {
			s.send(e.c, response{ID: id, Exec: e.status()})
		}
		delete(s.execs, e.pid)
	}
}

// dropExecs kills the execs that lived for a connection that closed.
func (s *server) dropExecs(sc *sconn) {
	for pid, e := range s.execs {
		if e.c != sc {
			continue
		}
		e.c, e.waiters = nil, nil
		if e.exited {
			delete(s.execs, pid)
			continue
		}
		s.log.Info("exec's connection closed, killing it", "exec_pid", pid)
		if err := e.proc.Signal(syscall.SIGKILL); err != nil {
			s.log.Warn("killing an exec", "exec_pid", pid, "err", err)
		}
	}
}

// joinTimeout bounds the wait for the join shim's report.
const joinTimeout = 10 * time.Second

// startExec starts spec's command through the init shim in join mode, with
// stdio (three descriptors) unless it has a terminal, and returns it once
// it runs (with the terminal's master).
func (s *server) startExec(spec ExecSpec, stdio []*os.File) (*execProc, *os.File, error) {
	run := s.task.join
	env := make(map[string]string, len(run.env)+len(spec.Env))
	for k, v := range run.env {
		env[k] = v
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg := joinConfig{shimConfig: run.cfg, NS: run.ns, Env: envList(env), TTY: spec.TTY, Rows: spec.Rows, Cols: spec.Cols}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: encode the shim's config: %w", ErrExec, err)
	}
	argv := append(append(append([]string{}, s.prefix...), joinFlag, string(b)), spec.Argv...)

	var files []uintptr
	if spec.TTY {
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrExec, err)
		}
		defer null.Close()
		files = []uintptr{null.Fd(), null.Fd(), uintptr(2)} // the shim's own errors go to the executor's log
	} else {
		for _, f := range stdio {
			fd, err := proc.RawFD(f)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: exec's descriptors: %w", ErrExec, err)
			}
			files = append(files, uintptr(fd))
		}
	}
	// The report channel: a datagram per report, so the terminal's
	// master travels with its report.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrExec, err)
	}
	defer unix.Close(pair[0])
	files = append(files, uintptr(pair[1]))
	if run.ns != 0 {
		// The task is the executor's unreaped child (only this loop
		// reaps): its pid is its own, and the pidfd pins it, so the
		// namespaces joined through it are the task's.
		task, err := proc.Open(s.task.pid)
		if err != nil {
			unix.Close(pair[1])
			return nil, nil, fmt.Errorf("%w: %w", ErrTaskExited, err)
		}
		defer task.Close()
		fd, err := task.Raw()
		if err != nil {
			unix.Close(pair[1])
			return nil, nil, fmt.Errorf("%w: %w", ErrExec, err)
		}
		files = append(files, uintptr(fd))
	}
	shim, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Dir: s.taskDir, Env: os.Environ(), Files: files,
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	unix.Close(pair[1]) // or the read never sees the shim's end
	if err != nil {
		return nil, nil, fmt.Errorf("%w: start the init shim: %w", ErrExec, err)
	}
	rep, term, err := joinResult(pair[0])
	if err != nil {
		if ws, ok := s.reapShim(shim); ok && errors.Is(err, errShimDied) {
			err = fmt.Errorf("%w (%s)", err, exitOf(ws))
		}
		return nil, nil, err
	}
	fail := func(err error) (*execProc, *os.File, error) {
		if term != nil {
			term.Close()
		}
		_ = unix.Kill(rep.PID, unix.SIGKILL) // our unreaped child (CLONE_PARENT)
		return nil, nil, fmt.Errorf("%w: %w", ErrExec, err)
	}
	// The command is the executor's child, unreaped: its pid is its own.
	start, err := proc.StartTime(rep.PID)
	if err != nil {
		return fail(err)
	}
	proc, err := proc.Open(rep.PID)
	if err != nil {
		return fail(err)
	}
	return &execProc{pid: rep.PID, start: start, proc: proc}, term, nil
}

// joinResult reads the join shim's report: the command's pid (and the
// terminal's master), or why it did not start. A shim that closed its end
// without a report died on the way.
func joinResult(fd int) (joinReport, *os.File, error) {
	var rep joinReport
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(joinTimeout)
	for {
		n, err := unix.Poll(pfd, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return rep, nil, fmt.Errorf("%w: waiting for the init shim: %w", ErrExec, err)
		}
		if n == 0 {
			return rep, nil, fmt.Errorf("%w: the init shim gave no verdict within %v", ErrExec, joinTimeout)
		}
		break
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return rep, nil, fmt.Errorf("%w: reading the init shim's report: %w", ErrExec, err)
	}
	var term *os.File
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, f := range fds {
					if term == nil {
						term = os.NewFile(uintptr(f), "pty")
					} else {
						unix.Close(f)
					}
				}
			}
		}
	}
	if n == 0 {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: %w (see %s)", ErrExec, errShimDied, LogFile)
	}
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: the init shim's report: %w", ErrProtocol, err)
	}
	if rep.Err != nil {
		if term != nil {
			term.Close()
		}
		return rep, nil, rep.Err.err()
	}
	if rep.PID <= 0 {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: the init shim reported no pid", ErrProtocol)
	}
	return rep, term, nil
}
