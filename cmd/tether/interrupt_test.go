package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
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

// Issue 31, one signal counted once: `timeout 5 tether run` of a task that
// traps SIGTERM. timeout signals tether and then its process group: one
// request, delivered twice at once. The task gets its kill signal once,
// runs its trap through its grace and exits by it (not SIGKILLed), and
// run exits 128+SIGTERM.
func TestRun_TimeoutSignalsProcessAndGroupAsOneRequest(t *testing.T) {
	timeout, err := exec.LookPath("timeout")
	if err != nil {
		t.Skipf("no timeout(1) (coreutils): %v", err)
	}
	e := newEnv(t)
	notes := newTermNotes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The trap takes a while (its own sleep) before it exits 7: a SIGKILL
	// within the grace would end the task by signal 9, without "trapped".
	script := `trap 'echo got TERM > "$1"; sleep 0.5; echo trapped; exit 7' TERM; echo up > "$1"; while :; do sleep 0.05; done`
	args := append([]string{"5", tetherBin, "--state-dir", e.dir}, "run", "--name", "trapper", "--kill-timeout", "30s", "--", "/bin/sh", "-c", script, "sh", notes.path, e.dir)
	run := exec.CommandContext(ctx, timeout, args...)
	run.Env = e.command(ctx, nil).Env
	var stdout, stderr strings.Builder
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the task did not start its loop: %q", s)
	}
	if s := notes.next(); s != "got TERM\n" {
		t.Fatalf("the task's note after timeout's signals: %q", s)
	}
	code := 0
	if err := run.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatal(err)
		}
		code = exit.ExitCode()
	}
	// timeout exits 124 when it had to signal; tether's own code is
	// 128+SIGTERM (the task was stopped because tether was).
	if code != 124 || !strings.Contains(stdout.String(), "trapped") || strings.Contains(stderr.String(), "killing the task now") {
		t.Fatalf("timeout 5 tether run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	st := e.status("--all", "trapper")
	if len(st) != 1 || st[0].State != "stopped" || st[0].ExitCode == nil || *st[0].ExitCode != 7 {
		t.Fatalf("the task after timeout: %+v, want stopped with its trap's exit code 7 (not SIGKILLed)", st)
	}
	if evs := eventNames(e.events(st[0].ID)); strings.Count(evs, "stop-requested") != 1 {
		t.Errorf("want one stop: %s", evs)
	}
}

// The rule itself, with a task that ignores SIGTERM (999999h grace): two
// signals delivered at the same moment, before the stop began, are one
// request (the task lives on in its grace); one more once the stop is
// recorded escalates (the task is killed at once). tether is held
// stopped (SIGSTOP) while the two are sent, so that they reach it
// together whatever the test's own scheduling.
func TestRun_SignalsBeforeTheStopBeganCountOnce(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := e.command(ctx, nil, e.runArgs("run", []string{"-v", "--name", "stubborn", "--kill-timeout", "999999h"}, "ignore-term", notes.path)...)
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
	for line := range lines { // run follows the task once it says so
		stderr.WriteString(line + "\n")
		if strings.HasSuffix(line, "-> running") {
			break
		}
	}
	pid := e.status("stubborn")[0].PID
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCONT} {
		if err := run.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if s := notes.next(); !strings.Contains(s, "SIGTERM") {
		t.Fatalf("the task's note after the stop: %q", s)
	}
	id := e.status("stubborn")[0].ID
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("no stop-requested once the task got its SIGTERM: %s", evs)
	}
	// The stop is recorded, after both signals: the task must still be
	// in its grace.
	if !testproc.Alive(pid) {
		t.Fatalf("two signals delivered at once escalated to SIGKILL")
	}
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest := make(chan struct{})
	go func() {
		defer close(rest)
		for line := range lines {
			stderr.WriteString(line + "\n")
		}
	}()
	code := exitOf(t, run, "tether run after a second request")
	<-rest // the pipe ends with the process
	if code != 128+int(syscall.SIGINT) && code != 128+int(syscall.SIGTERM) {
		t.Fatalf("run: exit %d\n%s", code, stderr.String())
	}
	if testproc.Alive(pid) || strings.Count(stderr.String(), "killing the task now") != 1 {
		t.Fatalf("the request after the stop began did not escalate, once (pid %d alive: %v)\n%s", pid, testproc.Alive(pid), stderr.String())
	}
}

// The gate of a second request: while the task runs it is shut (a signal
// then is the first request again); once a stop is recorded it opens. The
// gate follows the task in this process (a daemonless session on the
// test's state directory), the stop is this session's.
func TestSignalGate_OpensOnceTheStopIsRecorded(t *testing.T) {
	e := newDaemonlessEnv(t, "the gate follows the task from this process's own driver")
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "gated"}, "sleep")...).stdout)
	t.Cleanup(func() { e.tether("stop", id) }) // a failure below leaves nothing running
	c := &cli{stdout: io.Discard, stderr: io.Discard, logLevel: "warn", lockTimeout: 10 * time.Second}
	c.g.StateDir, c.g.StateDirSet = e.dir, true
	if err := c.setup(); err != nil {
		t.Fatal(err)
	}
	s, err := c.open()
	if err != nil {
		t.Fatal(err)
	}
	defer c.closeSession(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := newSignalGate(ctx, s, id)
	defer g.close()
	select {
	case <-g.following:
	case <-ctx.Done():
		t.Fatal("the gate never saw the task")
	}
	if g.began() {
		t.Fatal("the gate is open while the task runs and nothing stops it")
	}
	stopped := make(chan error, 1)
	go func() { _, err := s.svc.StopTask(ctx, id, 0, 0); stopped <- err }()
	select {
	case <-g.done:
	case <-ctx.Done():
		t.Fatal("the gate did not open once the stop began")
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("the gate opened without a stop recorded: %s", evs)
	}
	// stopBegan, row by row: running, restarting (no stop), the stop
	// recorded while reaping, ended.
	for _, c := range []struct {
		t    fsm.Task
		want bool
	}{
		{fsm.Task{State: fsm.StateRunning}, false},
		{fsm.Task{State: fsm.StateRestarting}, false},
		{fsm.Task{State: fsm.StateRunning, StopSignal: 15}, true},
		{fsm.Task{State: fsm.StateReaping, StopSignal: 15}, true},
		{fsm.Task{State: fsm.StateExited}, true},
	} {
		if got := stopBegan(c.t); got != c.want {
			t.Errorf("stopBegan(%v, signal %d) = %v, want %v", c.t.State, c.t.StopSignal, got, c.want)
		}
	}
}

// One signal counted once for a job too: `tether run` of a job's group (a
// task that ignores SIGTERM with a 999999h grace, beside one that
// sleeps). Two signals delivered at the same moment (tether held stopped
// while they are sent, as timeout's to the process and then its group
// reach it), before the stop began, are one request: the task lives on in
// its grace. One more once its stop is recorded escalates: it is killed
// at once.
func TestRunJob_SignalsBeforeTheStopBeganCountOnce(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	file := stubbornJob(t, e, notes)
	run := e.command(ctx, nil, "--log-level", "debug", "run", file) // debug: says a signal counted once
	var stderr strings.Builder
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("tether run's stderr:\n%s", stderr.String())
		}
	})
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the task did not report its SIGTERM handler: %q", s)
	}
	var pid int
	var id string
	for _, st := range e.status() {
		if st.Name == "stubborn" {
			pid, id = st.PID, st.ID
		}
	}
	if pid == 0 {
		t.Fatalf("the stubborn task is not running: %+v", e.status("--all"))
	}
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCONT} {
		if err := run.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	if s := notes.next(); !strings.Contains(s, "SIGTERM") {
		t.Fatalf("the task's note after the stop: %q", s)
	}
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("no stop-requested once the task got its SIGTERM: %s", evs)
	}
	if !testproc.Alive(pid) {
		t.Fatalf("two signals delivered at once escalated to SIGKILL:\n%s", stderr.String())
	}
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := exitOf(t, run, "tether run JOB after a second request")
	if code != 128+int(syscall.SIGINT) && code != 128+int(syscall.SIGTERM) {
		t.Fatalf("run: exit %d\n%s", code, stderr.String())
	}
	if testproc.Alive(pid) || strings.Count(stderr.String(), "killing the job's tasks now") != 1 {
		t.Fatalf("the request after the stop began did not escalate, once (pid %d alive: %v)\n%s", pid, testproc.Alive(pid), stderr.String())
	}
}

// stubbornJob is a job file of one group: a task that ignores SIGTERM
// (its notes on notes) with a 999999h grace, beside one that sleeps.
func stubbornJob(t *testing.T, e *env, notes *termNotes) string {
	t.Helper()
	h := e.helper("ignore-term", notes.path)
	quoted := func(ss []string) string {
		var q []string
		for _, s := range ss {
			q = append(q, fmt.Sprintf("%q", s))
		}
		return strings.Join(q, ", ")
	}
	job := fmt.Sprintf(`job "stubborn" {
  group "g" {
    task "stubborn" {
      driver       = "raw_exec"
      kill_timeout = "999999h"
      config {
        command = %q
        args    = [%s]
      }
    }
    task "other" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["1000"]
      }
      env {
        TETHER_TEST_MARKER = %q
      }
    }
  }
}
`, h[0], quoted(h[1:]), e.dir)
	file := writeFile(t, t.TempDir(), "stubborn.nomad", job)
	return file
}

// Ctrl-C to `tether stop` of a group whose task ignores SIGTERM with a
// 999999h grace escalates: its started tasks are killed at once (each
// stopped again: a second stop of the group would wait for the group's
// lock the first holds), and the stop returns with them stopped.
func TestStopGroup_InterruptEscalatesALongRecordedGrace(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	file := stubbornJob(t, e, notes)
	e.must("start", "--min-uptime", "0", file)
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the task did not report its SIGTERM handler: %q", s)
	}
	var pid int
	var id string
	for _, st := range e.status() {
		if st.Name == "stubborn" {
			pid, id = st.PID, st.ID
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := e.command(ctx, nil, "stop", id)
	var stdout, stderr strings.Builder
	stop.Stdout, stop.Stderr = &stdout, &stderr
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	if s := notes.next(); !strings.Contains(s, "SIGTERM") {
		t.Fatalf("the task's note after the stop: %q", s)
	}
	if evs := eventNames(e.events(id)); !strings.Contains(evs, "stop-requested") {
		t.Fatalf("no stop-requested in the log while the stop is in its grace: %s", evs)
	}
	if err := stop.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code := exitOf(t, stop, "tether stop of a group after Ctrl-C")
	if code != 0 || !strings.Contains(stdout.String(), "stopped") {
		t.Fatalf("stop after Ctrl-C: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	if testproc.Alive(pid) {
		t.Fatalf("the task (pid %d) outlived the escalated stop", pid)
	}
	for _, st := range e.status("--all") {
		if st.State != "stopped" {
			t.Errorf("after the escalated stop: %+v, want every task stopped", st)
		}
	}
}
