package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Terminal sessions: tether run as a person types it, on a terminal (a
// pty whose slave is the command's controlling terminal, so that Ctrl-C is
// the line discipline's SIGINT to the foreground process group), the
// screen read from the pty's master.

// term is a tether command on a terminal of its own.
type term struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	slave  *os.File

	mu     sync.Mutex
	screen bytes.Buffer
	wrote  chan struct{} // a token after each read from the master
}

// onTerm starts a tether command on a new terminal (rows x cols).
func (e *env) onTerm(ctx context.Context, args ...string) *term {
	e.t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		e.t.Skipf("no pseudo-terminal on this host (%v)", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		e.t.Fatal(err)
	}
	cmd := e.command(ctx, []string{"TERM=xterm"}, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	tm := &term{t: e.t, cmd: cmd, master: master, slave: slave, wrote: make(chan struct{}, 1)}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go tm.read()
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		master.Close()
		slave.Close()
	})
	return tm
}

// read copies what the terminal shows into the screen until the master is
// closed (the test holds the slave open, so the master never reads EOF
// before).
func (tm *term) read() {
	buf := make([]byte, 4096)
	for {
		n, err := tm.master.Read(buf)
		tm.mu.Lock()
		tm.screen.Write(buf[:n])
		tm.mu.Unlock()
		select {
		case tm.wrote <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// text is what the terminal has shown so far, its lines ended by "\r\n"
// as a terminal's output processing writes them.
func (tm *term) text() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.screen.String()
}

// waitFor waits until the screen shows s (failing the test after a
// minute: a deadline for a hung command, not a synchronisation).
func (tm *term) waitFor(s string) {
	tm.t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for !strings.Contains(tm.text(), s) {
		select {
		case <-tm.wrote:
		case <-deadline.C:
			tm.t.Fatalf("the screen never showed %q:\n%s", s, tm.text())
		}
	}
}

// typeIn types s on the terminal's keyboard.
func (tm *term) typeIn(s string) {
	tm.t.Helper()
	if _, err := tm.master.WriteString(s); err != nil {
		tm.t.Fatal(err)
	}
}

// wait waits for the command's end and returns its exit code.
func (tm *term) wait() int {
	tm.t.Helper()
	err := tm.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	tm.t.Fatalf("%v\n%s", err, tm.text())
	return 0
}

// termModes are the terminal's line discipline flags a raw mode clears.
func (tm *term) termModes() uint32 {
	tm.t.Helper()
	tio, err := unix.IoctlGetTermios(int(tm.slave.Fd()), unix.TCGETS)
	if err != nil {
		tm.t.Fatal(err)
	}
	return tio.Lflag & (unix.ECHO | unix.ICANON | unix.ISIG)
}

func TestTerminal_LogsFollowShowsLinesAsWritten(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(t.TempDir(), "lines")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The task echoes each line written into the FIFO.
	id := strings.TrimSpace(e.must("start", "--name", "echoer", "--", "/bin/sh", "-c",
		`while :; do while read l; do echo "got $l"; done < "$1"; done`, "sh", fifo, e.dir).stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm := e.onTerm(ctx, "logs", "echoer", "-f")
	for _, word := range []string{"one", "two", "three"} {
		if err := os.WriteFile(fifo, []byte(word+"\n"), 0); err != nil {
			t.Fatal(err)
		}
		tm.waitFor("got " + word + "\r\n")
	}
	tm.typeIn("\x03") // Ctrl-C: stop following, not the task
	if code := tm.wait(); code != 0 {
		t.Fatalf("logs -f after Ctrl-C: exit %d\n%s", code, tm.text())
	}
	if got := tm.text(); strings.Count(got, "got ") != 3 || strings.Contains(got, "tether:") {
		t.Fatalf("the screen should show the three lines and nothing else:\n%q", got)
	}
	if st := e.status(id); len(st) != 1 || st[0].State != "running" {
		t.Fatalf("the task after Ctrl-C on logs -f: %+v", st)
	}
	e.must("stop", id)
}

func TestTerminal_RunCtrlCStopsTheTask(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm := e.onTerm(ctx, e.runArgs("run", []string{"--name", "fg"}, "sleep")...)
	tm.waitFor("helper up\r\n")
	before := tm.text()
	if strings.Contains(before, "tether:") {
		t.Fatalf("run printed more than the task's output before Ctrl-C:\n%q", before)
	}
	tm.typeIn("\x03")
	code := tm.wait()
	if code != 128+int(syscall.SIGINT) {
		t.Fatalf("run after Ctrl-C: exit %d, want %d\n%s", code, 128+int(syscall.SIGINT), tm.text())
	}
	// What tether wrote before it exited is on the terminal, for the
	// reader to take (the end line goes on with the peak memory where the
	// host has a memory controller).
	for _, want := range []string{"helper stderr\r\n", "got interrupt, stopping the task\r\n", ": stopped (killed by SIGTERM)"} {
		tm.waitFor(want)
	}
	st := e.status("--all")
	if len(st) != 1 || st[0].State != "stopped" {
		t.Fatalf("the task after Ctrl-C: %+v", st)
	}
}

func TestTerminal_ExecTTYIsAShellInTheTask(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "box"}, "sleep")...).stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm := e.onTerm(ctx, "exec", "box", "-t", "--", "/bin/sh")
	modes := tm.termModes()
	if modes&(unix.ECHO|unix.ICANON|unix.ISIG) != unix.ECHO|unix.ICANON|unix.ISIG {
		t.Fatalf("the test's terminal starts in an unexpected mode: %#x", modes)
	}
	tm.typeIn("echo $((6*7)) $(cat /proc/self/cgroup | grep -c " + id + ")\r")
	tm.waitFor("42 ")
	// The shell's own terminal is inside the task; the caller's is raw
	// meanwhile (no echo, no signals of its own: Ctrl-C goes through).
	if m := tm.termModes(); m&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("the caller's terminal is not raw while exec -t runs: %#x", m)
	}
	tm.typeIn("exit 3\r")
	if code := tm.wait(); code != 3 {
		t.Fatalf("exec -t: exit %d, want the shell's 3\n%s", code, tm.text())
	}
	if m := tm.termModes(); m != modes {
		t.Errorf("exec -t left the terminal in mode %#x, want %#x back", m, modes)
	}
	// Each cgroup hierarchy of the shell names the task's cgroup.
	if screen := tm.text(); !regexp.MustCompile(`(^|\s)42 [1-9]\d*\r\n`).MatchString(screen) {
		t.Errorf("the shell did not run in the task's cgroup (want 42 and a count of its cgroups naming %s):\n%s", id, screen)
	}
	e.must("stop", id)
}

// Issue 34: `tether logs web clock -f --timestamps` on a terminal shows
// both tasks' lines, each prefixed by its task's name and its time, in
// time order, and follows web across `tether restart web` (saying so)
// until both have ended.
func TestTerminal_LogsOfTwoFollowAcrossARestart(t *testing.T) {
	e := newEnv(t)
	// web prints to stdout and stderr both, clock to stdout: each line
	// names its process, so that the new web's lines are told apart.
	e.must("start", "--min-uptime", "0", "--name", "web", "--", "/bin/sh", "-c",
		`i=0; while :; do i=$((i+1)); echo "out $$ $i"; echo "err $$ $i" >&2; sleep 0.05; done`, "sh", e.dir)
	e.must("start", "--min-uptime", "0", "--name", "clock", "--", "/bin/sh", "-c",
		`i=0; while :; do i=$((i+1)); echo "tick $$ $i"; sleep 0.07; done`, "sh", e.dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm := e.onTerm(ctx, "logs", "web", "clock", "-f", "--timestamps")
	first := e.status("web")[0]
	tm.waitFor(fmt.Sprintf(" err %d 3\r\n", first.PID))
	tm.waitFor(" tick ")
	second := strings.TrimSpace(e.must("restart", "web").stdout)
	tm.waitFor("; following ")
	if !strings.Contains(tm.text(), "; following "+second+",") {
		t.Fatalf("logs -f followed something else than the restart's new task %s:\n%s", second, tm.text())
	}
	pid := e.status("web")[0].PID
	tm.waitFor(fmt.Sprintf(" out %d 3\r\n", pid))
	e.must("stop", "web", "clock")
	if code := tm.wait(); code != 0 {
		t.Fatalf("logs -f after its tasks were stopped: exit %d\n%s", code, tm.text())
	}
	line := regexp.MustCompile(`^(web|clock): (\S+) (out|err|tick) (\d+) \d+$`)
	var last time.Time
	seen := map[string]bool{}
	for _, l := range strings.Split(tm.text(), "\r\n") {
		if l == "" || strings.HasPrefix(l, "tether: ") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("a line that is no task's prefixed and timed line: %q\n%s", l, tm.text())
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", m[2])
		if err != nil {
			t.Fatalf("line %q: its time: %v", l, err)
		}
		if at.Before(last) {
			t.Fatalf("line %q is older than the line before it (%s): not in time order\n%s", l, last.Format(time.RFC3339Nano), tm.text())
		}
		last = at
		seen[m[1]+" "+m[3]+" "+m[4]] = true
	}
	for _, want := range []string{
		fmt.Sprintf("web out %d", first.PID), fmt.Sprintf("web err %d", first.PID),
		fmt.Sprintf("web out %d", pid), fmt.Sprintf("web err %d", pid), "clock tick " + fmt.Sprint(e.status("--all", "clock")[0].PID),
	} {
		if !seen[want] {
			t.Errorf("no %q line on the screen:\n%s", want, tm.text())
		}
	}
	if n := strings.Count(tm.text(), "tether: "); n != 1 {
		t.Errorf("want exactly one line from tether (the move to %s), got %d:\n%s", second, n, tm.text())
	}
}
