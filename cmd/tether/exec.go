package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// outputDrain is how long the command's output may stay idle, once the
// command has exited, before exec stops copying it: what the command
// wrote is already buffered and flows on, and only a descendant that
// still holds its output (a background job) could make exec wait longer.
const outputDrain = 250 * time.Millisecond

// drainCopy copies src to dst until src ends or, once exited is set, until
// src has been idle for outputDrain (a read deadline renewed by every
// read). The caller sets exited and the first deadline when the command
// exits.
func drainCopy(dst io.Writer, src *os.File, exited *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		if exited.Load() {
			_ = src.SetReadDeadline(time.Now().Add(outputDrain))
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cmdExec runs a command inside a running task and exits with its code:
//
//	tether exec web -- cat /local/config.json
//	tether exec -t web -- sh
//
// The command runs in the task's cgroup, as its user with its
// capabilities, environment and working directory, and for an exec task
// in its namespaces, root, session keyring and seccomp filter. Without -t
// its stdin, stdout and stderr are pipes that exec relays to and from its
// own, whatever they are (a file, a socket, a pipe, a terminal): nothing
// in the task ever holds a descriptor of yours (which it could reopen
// through /proc/PID/fd or take with pidfd_getfd); with -t it gets a
// terminal of its own, opened inside the task, and yours is in raw mode
// while it runs. Signals that exec gets (SIGINT, SIGTERM, SIGHUP,
// SIGQUIT) are passed on to the command; with -t, window size changes too.
// The exit code is the command's (128+signal when a signal killed it),
// 127 when it does not exist in the task, 126 when it cannot be executed,
// 125 when tether could not run it (the task is not running, its
// executor cannot be reached).
func (c *cli) cmdExec(args []string) int {
	fs := c.flags("exec")
	tty := fs.BoolP("tty", "t", false, "run the command on a terminal of its own (yours is put in raw mode while it runs)")
	var env listFlag
	fs.Var(&env, "env", "`K=V` environment variable for the command, over the task's (repeatable)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	// Flags may come anywhere up to the command (or a "--"); the
	// command's own arguments are never parsed.
	if fs.NArg() == 0 {
		c.errorf("exec takes a task id or name and a command: tether exec [-t] ID [--] CMD [ARGS...]")
		return exitUsage
	}
	id, rest := fs.Arg(0), fs.CommandLine()
	if len(rest) == 0 {
		c.errorf("exec needs a command after the task: tether exec [-t] ID [--] CMD [ARGS...]")
		return exitUsage
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			c.errorf("--env %q: use NAME=VALUE", kv)
			return exitUsage
		}
	}
	ctx := context.Background()
	s, info, _, ok := c.openTask(ctx, id)
	if !ok {
		return exitStartFail // as for a command that could not start
	}
	defer c.closeSession(s)
	info = c.reconcileIfGone(ctx, s, info)
	spec := driver.ExecSpec{Argv: rest, Env: env}
	if *tty {
		return c.execTTY(ctx, s, info.ID, spec)
	}
	return c.execPlain(ctx, s, info.ID, spec)
}

// execFailed reports an exec that did not start and picks its exit code:
// 127 not found, 126 not executable, else 125.
func (c *cli) execFailed(id string, err error) int {
	code := startExitCode(err, fsm.CauseNone)
	switch code {
	case exitNotFound:
		c.errorf("%v", err)
		fmt.Fprintln(c.stderr, "  the command is looked up in the task's PATH, inside the task's root for an exec task; give its path in the task")
	case exitCannotRun:
		c.errorf("%v", err)
		fmt.Fprintln(c.stderr, "  check that the command is an executable file inside the task")
	default:
		c.taskCallFailed(id, err)
	}
	return code
}

// relayed are the signals exec passes on to the command.
var relayed = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// execPlain runs the command with exec's own stdin, stdout and stderr
// relayed through pipes (see executor.ExecSpec).
func (c *cli) execPlain(ctx context.Context, s *session, id string, spec driver.ExecSpec) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, relayed...)
	defer signal.Stop(sigs)
	spec.Stdin, spec.Stdout, spec.Stderr = os.Stdin, c.stdout, c.stderr
	p, err := s.svc.ExecTask(ctx, id, spec)
	if err != nil {
		return c.execFailed(id, err)
	}
	defer p.Close()
	x, err := c.waitExec(ctx, p, sigs) // returns once the output is relayed
	if err != nil {
		c.errorf("%v", err)
		return exitStartFail
	}
	return exitCode(x)
}

// waitExec waits for the command's end, passing on the signals exec gets.
func (c *cli) waitExec(ctx context.Context, p *driver.ExecProcess, sigs <-chan os.Signal) (fsm.ExitStatus, error) {
	type result struct {
		x   fsm.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		x, err := p.Wait(ctx)
		done <- result{x, err}
	}()
	for {
		select {
		case r := <-done:
			return r.x, r.err
		case sig := <-sigs:
			if err := p.Signal(ctx, sig.(syscall.Signal)); err != nil {
				c.errorf("warning: passing %v on to the command: %v", sig, err)
			}
		}
	}
}

// execTTY runs the command on a terminal of its own, relaying between it
// and exec's terminal (in raw mode meanwhile).
func (c *cli) execTTY(ctx context.Context, s *session, id string, spec driver.ExecSpec) int {
	spec.TTY = true
	if ws, err := pty.GetsizeFull(os.Stdin); err == nil {
		spec.Rows, spec.Cols = ws.Rows, ws.Cols
	}
	if term := os.Getenv("TERM"); term != "" && !slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") }) {
		spec.Env = append(spec.Env, "TERM="+term)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, relayed...)
	defer signal.Stop(sigs)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	p, err := s.svc.ExecTask(ctx, id, spec)
	if err != nil {
		return c.execFailed(id, err)
	}
	defer p.Close()
	term := p.Terminal()
	if isTerminal(os.Stdin) { // before the relay starts reading it
		restore, err := makeRaw(int(os.Stdin.Fd()))
		if err != nil {
			c.errorf("warning: cannot put your terminal in raw mode: %v", err)
		} else {
			defer restore()
		}
	}
	interactive := isTerminal(os.Stdin)
	go func() {
		_, _ = io.Copy(term, os.Stdin)
		if !interactive {
			_, _ = term.Write([]byte{4}) // ^D: the end of a piped stdin is the terminal's EOF
		}
	}()
	copied := make(chan struct{})
	var exited atomic.Bool
	go func() {
		defer close(copied)
		drainCopy(c.stdout, term, &exited) // to EIO: the terminal's last holder is gone
	}()
	go func() {
		for range winch {
			if ws, err := pty.GetsizeFull(os.Stdin); err == nil {
				_ = pty.Setsize(term, ws)
			}
		}
	}()
	x, err := c.waitExec(ctx, p, sigs)
	exited.Store(true)
	_ = term.SetReadDeadline(time.Now().Add(outputDrain))
	<-copied
	if err != nil {
		c.errorf("%v", err)
		return exitStartFail
	}
	return exitCode(x)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal fd in raw mode (as cfmakeraw does) and returns
// the function that restores it.
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
