//go:build linux

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// execProc is a command the executor started in the task.
type execProc struct {
	c       *sconn // the connection it lives for; nil once that closed
	pid     int
	start   uint64
	proc    *proc.PidFD
	exited  bool
	exit    fsm.ExitStatus
	waiters []uint64 // exec-wait requests on c
	check   bool     // a readiness check's try (see checks.go)
}

func (e *execProc) status() *wire.ExecStatus {
	return &wire.ExecStatus{PID: e.pid, StartTime: e.start, Exited: e.exited, Exit: e.exit}
}

// canExec says why no command can join the task now, if it cannot.
func (s *server) canExec() error {
	if err := s.checkRunning(); err != nil {
		return err
	}
	if s.ending != endNone {
		return fmt.Errorf("%w: the task is being stopped", wire.ErrTaskExited)
	}
	if s.prefix == nil {
		return fmt.Errorf("%w: the init shim needs Serve called with a tail of os.Args", wire.ErrExec)
	}
	return nil
}

// execute handles an exec request: start the command, register it for
// the connection, answer with its process (and terminal).
func (s *server) execute(sc *sconn, req wire.Request) {
	fail := func(err error) { s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)}) }
	if req.Exec == nil {
		fail(fmt.Errorf("%w: exec without a command", wire.ErrBadSpec))
		return
	}
	spec := *req.Exec
	if err := spec.Validate(); err != nil {
		fail(err)
		return
	}
	if len(req.Files) != 0 {
		// Version 7: the command's stdio are pipes the executor makes;
		// no descriptor of the caller's is taken, let alone passed on.
		wire.CloseFiles(req.Files)
		fail(fmt.Errorf("%w: exec with %d descriptors (the executor makes the command's pipes itself)", wire.ErrProtocol, len(req.Files)))
		return
	}
	if err := s.canExec(); err != nil {
		fail(err)
		return
	}
	e, files, err := s.startExec(spec)
	if err != nil {
		s.log.Warn("exec failed", "err", err)
		fail(s.atLimit(err))
		return
	}
	e.c = sc
	s.execs[e.pid] = e
	s.log.Info("exec started", "exec_pid", e.pid, "command", spec.Argv[0], "tty", spec.TTY)
	s.send(sc, wire.Response{ID: req.ID, Exec: e.status(), Files: files})
	s.reap() // it may have exited already
}

// atLimit names the task's pids limit as the reason an exec could not
// start, when the task's cgroup is at it (the command, or the shim that
// joins the task to start it, could not be forked there): err otherwise.
func (s *server) atLimit(err error) error {
	limit := s.task.join.pids
	if limit <= 0 || s.cg == nil {
		return err
	}
	st, serr := s.cg.Stats()
	if serr != nil || st.Pids < uint64(limit) {
		return err
	}
	return fmt.Errorf("%w: the task is at its pids limit (%d processes and threads of pids = %d), so no command can start in it: "+
		"raise resources.pids, or end something in the task (%v)", wire.ErrAtLimit, st.Pids, limit, err)
}

// execWait answers when the connection's exec pid has exited.
func (s *server) execWait(sc *sconn, id uint64, pid int) {
	e := s.execs[pid]
	if e == nil || e.c != sc {
		s.send(sc, wire.Response{ID: id, Err: wire.FailureOf(fmt.Errorf("%w: pid %d", wire.ErrUnknownExec, pid))})
		return
	}
	if e.exited {
		s.send(sc, wire.Response{ID: id, Exec: e.status()})
		delete(s.execs, pid)
		return
	}
	e.waiters = append(e.waiters, id)
}

// execSignal signals the connection's exec pid through its pidfd.
func (s *server) execSignal(sc *sconn, req wire.Request) {
	e := s.execs[req.PID]
	switch {
	case e == nil || e.c != sc:
		s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: pid %d", wire.ErrUnknownExec, req.PID))})
		return
	case req.Signal < 0 || req.Signal > 64:
		s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: signal %d", wire.ErrBadSpec, req.Signal))})
		return
	}
	if !e.exited {
		if err := e.proc.Signal(syscall.Signal(req.Signal)); err != nil {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)})
			return
		}
	}
	s.send(sc, wire.Response{ID: req.ID})
}

// reapExecs collects the execs that have exited, each through the pidfd
// that pins its command: the status an exec-wait is answered with is that
// process's own, never one taken from a pid.
func (s *server) reapExecs() {
	for _, e := range s.execs {
		if e.exited {
			continue
		}
		x, ok, err := e.proc.Reap()
		if err != nil {
			s.log.Warn("reaping an exec through its pidfd", "exec_pid", e.pid, "err", err)
			continue
		}
		if ok {
			s.execReaped(e, x)
		}
	}
}

// execReaped records the exit of an exec and answers its waiters.
func (s *server) execReaped(e *execProc, x fsm.ExitStatus) {
	e.exited, e.exit = true, x
	e.exit.At = time.Now().UnixNano()
	e.proc.Close()
	if e.check {
		delete(s.execs, e.pid)
		s.checkExecReaped(e)
		return
	}
	s.log.Info("exec exited", "exec_pid", e.pid, "code", e.exit.Code, "signal", e.exit.Signal)
	if e.c == nil || len(e.waiters) > 0 {
		for _, id := range e.waiters {
			s.send(e.c, wire.Response{ID: id, Exec: e.status()})
		}
		delete(s.execs, e.pid)
	}
}

// execLinger bounds how long an executor whose task is over waits for
// the connections of its exited execs to ask for their exit statuses.
const execLinger = time.Second

// execsOwed says whether a connection that exec'd a command is owed its
// exit status: the command exited and its connection, still open, has
// not asked for it yet.
func (s *server) execsOwed() bool {
	for _, e := range s.execs {
		if e.c != nil && !e.check {
			return true
		}
	}
	return false
}

// lingerForExecs runs once the executor's loop has ended: a command
// exec'd into the task dies with it, and the connection that started it
// may ask for its exit status (exec-wait) only after the task's end was
// answered. Before the executor closes its connections it answers those
// requests, until every such connection has asked or closed, or
// execLinger passes. Nothing else is served meanwhile (it is exiting).
func (s *server) lingerForExecs() {
	if !s.execsOwed() {
		return
	}
	t := time.NewTimer(execLinger)
	defer t.Stop()
	for s.execsOwed() {
		select {
		case m := <-s.inbox:
			wire.CloseFiles(m.req.Files)
			if m.req.Op == wire.OpExecWait {
				s.execWait(m.c, m.req.ID, m.req.PID)
			}
		case sc := <-s.gone:
			s.dropConn(sc)
		case <-t.C:
			s.log.Warn("exiting with an exec's exit status unasked for", "within", execLinger)
			return
		}
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

// startExec starts spec's command through the init shim in join mode and
// returns it once it runs, with the descriptors the client relays: the
// terminal's master, or the caller's ends of the three pipes the command
// got as its stdin, stdout and stderr (the write end of the first, the
// read ends of the others). The command never holds a descriptor of the
// caller's: a task that opens /proc/PID/fd/0 of the command reaches a
// pipe, never the caller's file, socket or terminal.
func (s *server) startExec(es wire.ExecSpec) (*execProc, []*os.File, error) {
	run := s.task.join
	env := make(map[string]string, len(run.env)+len(es.Env))
	for k, v := range run.env {
		env[k] = v
	}
	for _, kv := range es.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg := shim.JoinConfig{Config: run.cfg, NS: run.ns, Env: spec.EnvList(env), TTY: es.TTY, Rows: es.Rows, Cols: es.Cols}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: encode the shim's config: %w", wire.ErrExec, err)
	}
	argv := append(append(append([]string{}, s.prefix...), shim.JoinFlag, string(b)), es.Argv...)

	var files []uintptr
	var theirs, ours []*os.File // the command's ends, and the client's
	defer func() { wire.CloseFiles(theirs) }()
	failed := func(err error) (*execProc, []*os.File, error) {
		wire.CloseFiles(ours)
		return nil, nil, err
	}
	if es.TTY {
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", wire.ErrExec, err)
		}
		theirs = append(theirs, null)
		files = []uintptr{null.Fd(), null.Fd(), uintptr(2)} // the shim's own errors go to the executor's log
	} else {
		for i := range 3 {
			r, w, err := os.Pipe()
			if err != nil {
				return failed(fmt.Errorf("%w: the command's pipes: %w", wire.ErrExec, err))
			}
			if i == 0 {
				theirs, ours = append(theirs, r), append(ours, w)
			} else {
				theirs, ours = append(theirs, w), append(ours, r)
			}
			files = append(files, theirs[i].Fd())
		}
	}
	// The report channel: a datagram per report, so the terminal's
	// master travels with its report.
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return failed(fmt.Errorf("%w: %w", wire.ErrExec, err))
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
			return failed(fmt.Errorf("%w: %w", wire.ErrTaskExited, err))
		}
		defer task.Close()
		fd, err := task.Raw()
		if err != nil {
			unix.Close(pair[1])
			return failed(fmt.Errorf("%w: %w", wire.ErrExec, err))
		}
		files = append(files, uintptr(fd))
	}
	pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Dir: s.taskDir, Env: cfg.Env, Files: files, // nothing of the executor's environment (the operator's)
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	unix.Close(pair[1]) // or the read never sees the shim's end
	if err != nil {
		return failed(fmt.Errorf("%w: start the init shim: %w", wire.ErrExec, err))
	}
	rep, term, err := shim.JoinResult(pair[0])
	if err != nil {
		if ws, ok := s.reapShim(pid); ok && errors.Is(err, shim.ErrDied) {
			err = fmt.Errorf("%w (%s)", err, exitOf(ws))
		}
		return failed(err)
	}
	if term != nil {
		ours = append(ours, term)
	}
	fail := func(err error) (*execProc, []*os.File, error) {
		_ = unix.Kill(rep.PID, unix.SIGKILL) // our unreaped child (CLONE_PARENT)
		return failed(fmt.Errorf("%w: %w", wire.ErrExec, err))
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
	return &execProc{pid: rep.PID, start: start, proc: proc}, ours, nil
}
