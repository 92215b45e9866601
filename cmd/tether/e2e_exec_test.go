package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/testproc"
)

// helper returns the argv of a helper task: the test binary, the mode and
// its arguments, and the state directory as the leak check's marker.
func (e *env) helper(mode ...string) []string {
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	return append(append([]string{self, helperArg}, mode...), e.dir)
}

// runArgs is `run`/`start` of a helper task.
func (e *env) runArgs(cmd string, flags []string, mode ...string) []string {
	args := append([]string{cmd}, flags...)
	return append(append(args, "--"), e.helper(mode...)...)
}

type taskStatus struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	State         string `json:"state"`
	PID           int    `json:"pid"`
	ExecutorPID   int    `json:"executor_pid"`
	ExecutorAlive bool   `json:"executor_alive"`
	ExitCode      *int   `json:"exit_code"`
	CreatedAt     string `json:"created_at"`
}

func (e *env) status(args ...string) []taskStatus {
	e.t.Helper()
	r := e.must(append([]string{"status", "--json"}, args...)...)
	var out []taskStatus
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		e.t.Fatalf("status --json: %v\n%s", err, r)
	}
	return out
}

type eventRow struct {
	Event  string          `json:"event"`
	Reason string          `json:"reason"`
	Target string          `json:"target"`
	Signal int             `json:"signal"`
	Spec   json.RawMessage `json:"spec"`
	// Replaces and ReplacedBy link a task and the one that replaced it.
	Replaces   string `json:"replaces"`
	ReplacedBy string `json:"replaced_by"`
}

func (e *env) events(id string) []eventRow {
	e.t.Helper()
	r := e.must("events", "--json", id)
	var out []eventRow
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		e.t.Fatalf("events --json: %v\n%s", err, r)
	}
	return out
}

func eventNames(evs []eventRow) string {
	var names []string
	for _, ev := range evs {
		names = append(names, ev.Event)
	}
	return strings.Join(names, " ")
}

// taskID reads the task id from run's lifecycle line ("tether: ID: ...").
func taskID(t *testing.T, stderr string) string {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if rest, ok := strings.CutPrefix(line, "tether: "); ok {
			if id, states, ok := strings.Cut(rest, ": "); ok && strings.HasPrefix(states, "created") {
				return id
			}
		}
	}
	t.Fatalf("no lifecycle line in:\n%s", stderr)
	return ""
}

func TestRun_HelloExample(t *testing.T) {
	e := newEnv(t)
	r := e.must("run", "../../examples/hello.hcl", "-v")
	if r.stdout != "hello from tether\n" {
		t.Fatalf("stdout = %q, want the greeting\n%s", r.stdout, r)
	}
	// A task as quick as echo may exit before it is seen running.
	if !regexp.MustCompile(`: created -> spawning -> executor-up -> launching -> launched -> (running|reaping -> exited)\n`).MatchString(r.stderr) {
		t.Fatalf("no lifecycle line:\n%s", r)
	}
	id := taskID(t, r.stderr)
	st := e.status("--all")
	if len(st) != 1 || st[0].ID != id || st[0].State != "exited" || st[0].ExitCode == nil || *st[0].ExitCode != 0 || st[0].ExecutorAlive {
		t.Fatalf("status after run: %+v", st)
	}
	if got := eventNames(e.events("hello")); !strings.HasSuffix(got, "task-exited executor-reaped") {
		t.Fatalf("events: %s", got)
	}
	e.must("check")
}

func TestRun_ExitCodePassesThrough(t *testing.T) {
	e := newEnv(t)
	r := e.tether(e.runArgs("run", []string{"--name", "three"}, "exit", "3")...)
	if r.code != 3 || !strings.Contains(r.stdout, "helper exiting with 3") {
		t.Fatalf("want exit 3 and the task's output: %s", r)
	}
}

func TestRun_MissingCommand127(t *testing.T) {
	e := newEnv(t)
	r := e.tether("run", "-v", "--", filepath.Join(e.dir, "no-such-command"))
	if r.code != exitNotFound || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("want exit 127 naming the missing command: %s", r)
	}
	id := taskID(t, r.stderr)
	if got := eventNames(e.events(id)); !strings.Contains(got, "launch-failed") || !strings.HasSuffix(got, "executor-reaped") {
		t.Fatalf("events: %s", got)
	}
	// A file that is not executable: 126.
	script := writeFile(t, t.TempDir(), "script.sh", "echo hi\n")
	if r := e.tether("run", "--", script); r.code != exitCannotRun {
		t.Fatalf("want exit 126 for a non-executable file: %s", r)
	}
}

func TestRun_NetRawFailsCleanly(t *testing.T) {
	e := newEnv(t)
	r := e.tether("run", "../../examples/net_raw.hcl")
	if r.code == 0 || !strings.Contains(r.stderr, "net_raw") {
		t.Fatalf("want a failure naming net_raw: %s", r)
	}
	st := e.status("--all", "net_raw")
	if len(st) != 1 || st[0].State != "failed" || st[0].ExecutorAlive {
		t.Fatalf("status: %+v", st)
	}
	evs := e.events("net_raw")
	last := evs[len(evs)-1]
	// The capability is refused before anything is spawned
	// (config-rejected), or, if the executor refused it, the executor was
	// reaped before the task was recorded failed.
	switch last.Event {
	case "config-rejected":
		if strings.Contains(eventNames(evs), "spawn-intent") || !strings.Contains(last.Reason, "net_raw") {
			t.Fatalf("events: %+v", evs)
		}
	case "executor-reaped":
		if last.Target != "failed" || !strings.Contains(eventNames(evs), "executor-up") {
			t.Fatalf("events: %+v", evs)
		}
	default:
		t.Fatalf("events end with %s: %+v", last.Event, evs)
	}
}

// The seed's case, forced: a failure after the executor is up must kill
// and reap it before the task is recorded failed.
func TestRun_FailureAfterExecutorUpReapsIt(t *testing.T) {
	e := newEnv(t)
	fault := []string{"TETHER_FAULT=effect:launch-task"}
	var r result
	if e.agent != nil {
		// The fault is armed where the driver runs: in the agent.
		e.restartAgent(fault)
		r = e.tether(e.runArgs("run", []string{"--name", "seed"}, "sleep")...)
	} else {
		r = e.tetherEnv(fault, e.runArgs("run", []string{"--name", "seed"}, "sleep")...)
	}
	if r.code != exitStartFail || !strings.Contains(r.stderr, "injected") {
		t.Fatalf("want exit 125 with the injected fault: %s", r)
	}
	evs := e.events("seed")
	got := eventNames(evs)
	if !strings.Contains(got, "executor-up launch-intent launch-failed executor-reaped") || evs[len(evs)-1].Target != "failed" {
		t.Fatalf("events: %s", got)
	}
}

func TestStart_StatusLogsStop(t *testing.T) {
	e := newEnv(t)
	r := e.must(e.runArgs("start", []string{"--name", "svc", "--verbose"}, "sleep")...)
	id := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(id, "svc-") || !strings.Contains(r.stderr, "-> running") {
		t.Fatalf("start: %s", r)
	}
	st := e.status()
	if len(st) != 1 || st[0].ID != id || st[0].Name != "svc" || st[0].State != "running" || !st[0].ExecutorAlive || st[0].PID <= 0 || st[0].CreatedAt == "" {
		t.Fatalf("status: %+v", st)
	}
	if r := e.must("status"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "running") {
		t.Fatalf("status table: %s", r)
	}

	// logs -f follows until the task ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := e.command(ctx, nil, "logs", "-f", "--stdout", "svc")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followed := bufio.NewReader(out)
	if line, err := followed.ReadString('\n'); line != "helper up\n" {
		t.Fatalf("logs -f printed %q, %v", line, err)
	}

	r = e.must("stop", "svc")
	if !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("stop: %s", r)
	}
	// The task has ended: logs -f stops following.
	if rest, err := io.ReadAll(followed); err != nil || len(rest) != 0 {
		t.Fatalf("logs -f printed %q more, %v", rest, err)
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	if r := e.must("logs", "--stdout", id); r.stdout != "helper up\n" {
		t.Fatalf("logs: %s", r)
	}
	if r := e.must("logs", "--stderr", id); r.stdout != "helper stderr\n" {
		t.Fatalf("logs --stderr: %s", r)
	}
	if st := e.status(); len(st) != 0 {
		t.Fatalf("status without --all lists ended tasks: %+v", st)
	}
	st = e.status("--all")
	if len(st) != 1 || st[0].State != "stopped" || st[0].ExecutorAlive || testproc.Alive(st[0].PID) {
		t.Fatalf("status --all after stop: %+v", st)
	}
	if got := eventNames(e.events(id)); !strings.HasSuffix(got, "stop-requested executor-reaped") {
		t.Fatalf("events: %s", got)
	}
	// Stopping again is harmless.
	if r := e.must("stop", id); !strings.Contains(r.stderr, "already stopped") {
		t.Fatalf("second stop: %s", r)
	}
}

func TestStart_TaskOutlivesTheCLI(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", nil, "sleep")...).stdout)
	// The start command has exited; a new process sees the task running.
	st := e.status(id)
	if len(st) != 1 || st[0].State != "running" || !st[0].ExecutorAlive || !testproc.Alive(st[0].PID) || !testproc.Alive(st[0].ExecutorPID) {
		t.Fatalf("status from a new process: %+v", st)
	}
	// And the next command reattaches to it rather than losing it.
	if r := e.must("recover"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "running -> running") {
		t.Fatalf("recover: %s", r)
	}
	r := e.must("stop", "--signal", "SIGKILL", "--timeout", "1s", id)
	if !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("stop: %s", r)
	}
	if testproc.Alive(st[0].PID) || testproc.Alive(st[0].ExecutorPID) {
		t.Fatalf("task or executor alive after stop")
	}
}

func TestRun_TwoConcurrentRuns(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Each task blocks until the other one is running: the first run's
	// task cannot end before the second run has started its own, so the
	// first run must not hold the store while it waits.
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i, mode := range [][]string{{"fiforead", fifo}, {"fifowrite", fifo}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := e.command(ctx, nil, e.runArgs("run", []string{"--lock-timeout", "20s"}, mode...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			results[i] = result{stdout: stdout.String(), stderr: stderr.String()}
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				results[i].code = exit.ExitCode()
			} else if err != nil {
				results[i].code = -1
				results[i].stderr += err.Error()
			}
		}()
	}
	wg.Wait()
	if results[0].code != 7 || !strings.Contains(results[0].stdout, "hello through the fifo") {
		t.Errorf("reader: %s", results[0])
	}
	if results[1].code != 0 {
		t.Errorf("writer: %s", results[1])
	}
	if st := e.status("--all"); len(st) != 2 || st[0].State != "exited" || st[1].State != "exited" {
		t.Errorf("status: %+v", st)
	}
}

func TestWait_ExitsWithTheTaskCode(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "reader"}, "fiforead", fifo)...).stdout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := e.command(ctx, nil, "wait", "reader")
	var stderr bytes.Buffer
	wait.Stderr = &stderr
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	// wait must not hold the store: another command runs meanwhile.
	e.must(e.runArgs("run", nil, "fifowrite", fifo)...)
	err := wait.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("wait: %v\n%s", err, stderr.String())
	}
	// A task that has already ended: wait returns its code at once.
	if r := e.tether("wait", id); r.code != 7 {
		t.Fatalf("wait on an ended task: %s", r)
	}
}

func TestRun_InterruptStopsTheTask(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, e.runArgs("run", []string{"-v", "--name", "ctrlc", "--kill-timeout", "2s"}, "sleep")...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	sc := bufio.NewScanner(errPipe)
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
		if strings.HasSuffix(sc.Text(), "-> running") {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		stderr.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("want exit 130 after Ctrl-C: %v\n%s", err, stderr.String())
	}
	st := e.status("--all")
	if len(st) != 1 || st[0].State != "stopped" || testproc.Alive(st[0].PID) {
		t.Fatalf("status after Ctrl-C: %+v\n%s", st, stderr.String())
	}
}

func TestCrash_RecoverReapsTheExecutor(t *testing.T) {
	e := newDaemonlessEnv(t, "a crash point armed in the CLI, whose driver spawned the executor (the agent's crash points: TestAgent_CrashPoints)")
	// The CLI SIGKILLs itself right after the executor is recorded up
	// (with the launch intent): no task was launched, and the executor,
	// whose lease was the CLI's connection, exits by itself.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, []string{"TETHER_CRASHPOINT=after-append:executor-up"}, e.runArgs("run", []string{"--name", "crashed"}, "sleep")...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the crash point did not fire: %v\n%s", err, out)
	}
	// The executor's lease ends with the CLI's connection: it exits by
	// itself (a stayer fails the test here).
	testproc.CheckGone(t, e.dir, 10*time.Second)
	r := e.must("recover")
	if !strings.Contains(r.stdout, "launching -> lost") {
		t.Fatalf("recover: %s", r)
	}
	if got := eventNames(e.events("crashed")); !strings.HasSuffix(got, "launch-intent executor-lost executor-reaped") {
		t.Fatalf("events: %s", got)
	}
}

func TestNames_EndedNameIsItsLatestTaskAndGC(t *testing.T) {
	e := newEnv(t)
	first := taskID(t, e.must("run", "-v", "../../examples/hello.hcl").stderr)
	second := taskID(t, e.must("run", "-v", "../../examples/hello.hcl").stderr)
	if st := e.status("hello"); len(st) != 1 || st[0].ID != second {
		t.Fatalf("with none live, the name hello stands for the latest task, %s: %+v", second, st)
	}
	e.must("events", "hello")
	e.must("events", first)
	r := e.must("gc")
	if !strings.Contains(r.stdout, "removed 2 tasks") {
		t.Fatalf("gc: %s", r)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "tasks", first)); !os.IsNotExist(err) {
		t.Fatalf("gc left the task directory: %v", err)
	}
	if st := e.status("--all"); len(st) != 0 {
		t.Fatalf("status after gc: %+v", st)
	}
	e.must("check")
}
