package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// termNotes is the FIFO through which an ignore-term helper says it is up
// and each time it gets (and ignores) SIGTERM.
type termNotes struct {
	t    *testing.T
	path string
}

func newTermNotes(t *testing.T) *termNotes {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notes")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return &termNotes{t: t, path: path}
}

// next reads the helper's next note, failing the test if none comes
// within a minute (a deadline, not a synchronisation: the read returns as
// soon as the helper writes).
func (n *termNotes) next() string {
	n.t.Helper()
	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(n.path)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b)
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(time.Minute):
		// Unblock the reader (a writer that opens and closes), then fail.
		if fd, err := unix.Open(n.path, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
		n.t.Fatal("the helper task wrote no note within a minute")
		return ""
	}
}

// exitOf waits for cmd (with a deadline) and returns its exit code.
func exitOf(t *testing.T, cmd *exec.Cmd, what string) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &exit) && exit.Exited():
			return exit.ExitCode()
		}
		t.Fatalf("%s: %v", what, err)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%s did not return within a minute of its escalation", what)
	}
	return -1
}

// Issue 11, item 4: Ctrl-C to `tether stop` of a task that ignores
// SIGTERM, with a grace of 999999h recorded (kill_timeout), escalates: the
// task is killed at once, the stop returns, and the task is recorded
// stopped.
func TestStop_InterruptEscalatesALongRecordedGrace(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	// The task blocks on its note until it is read; start returns at once.
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--kill-timeout", "999999h"}, "ignore-term", notes.path)...).stdout)
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the task did not report its SIGTERM handler: %q", s)
	}
	pid := e.status(id)[0].PID

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := e.command(ctx, nil, "stop", id)
	var stdout, stderr strings.Builder
	stop.Stdout, stop.Stderr = &stdout, &stderr
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	// The task got the stop's SIGTERM and ignores it: the stop is in its
	// 999999h grace, and the log says so.
	if s := notes.next(); !strings.Contains(s, "SIGTERM") {
		t.Fatalf("the task's note after the stop: %q", s)
	}
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("no stop-requested in the log while the stop is in its grace: %s", evs)
	}
	if !testproc.Alive(pid) {
		t.Fatal("the task died before the Ctrl-C: it was meant to ignore SIGTERM")
	}
	if err := stop.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := exitOf(t, stop, "tether stop after Ctrl-C")
	if code != 0 || !strings.Contains(stdout.String(), "stopped") {
		t.Fatalf("stop after Ctrl-C: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if testproc.Alive(pid) {
		t.Fatalf("the task (pid %d) outlived the escalated stop", pid)
	}
	if st := e.status(id); len(st) != 1 || st[0].State != "stopped" {
		t.Fatalf("status after the escalated stop: %+v", st)
	}
	e.checkStore()
}

// Issue 11, item 4: `tether run` of a task that ignores SIGTERM, with a
// grace of 999999h: the first Ctrl-C starts the stop (the task gets
// SIGTERM, the log records the stop, the task lives on through its
// grace), the second escalates (the task is killed at once, run returns
// 130, the task is recorded stopped).
func TestRun_SecondInterruptEscalatesALongRecordedGrace(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := e.command(ctx, nil, e.runArgs("run", []string{"-v", "--kill-timeout", "999999h"}, "ignore-term", notes.path)...)
	errPipe, err := run.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the task did not report its SIGTERM handler: %q", s)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var stderr strings.Builder
	var id string
	for line := range lines {
		stderr.WriteString(line + "\n")
		if strings.HasSuffix(line, "-> running") {
			id = taskID(t, line)
			break
		}
	}
	if id == "" {
		t.Fatalf("run never said its task is running:\n%s", stderr.String())
	}
	pid := e.status(id)[0].PID

	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if s := notes.next(); !strings.Contains(s, "SIGTERM") {
		t.Fatalf("the task's note after the first Ctrl-C: %q", s)
	}
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("no stop-requested in the log after the first Ctrl-C: %s", evs)
	}
	if !testproc.Alive(pid) {
		t.Fatal("the task died at the first Ctrl-C: it was meant to ignore SIGTERM and sit in its grace")
	}
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() {
		for line := range lines {
			stderr.WriteString(line + "\n")
		}
	}()
	if code := exitOf(t, run, "tether run after the second Ctrl-C"); code != 128+int(syscall.SIGINT) {
		t.Fatalf("run after two Ctrl-C: exit %d, want %d\n%s", code, 128+int(syscall.SIGINT), stderr.String())
	}
	if testproc.Alive(pid) {
		t.Fatalf("the task (pid %d) outlived the escalated stop", pid)
	}
	if st := e.status(id); len(st) != 1 || st[0].State != "stopped" {
		t.Fatalf("status after the escalated stop: %+v", st)
	}
	e.checkStore()
}
