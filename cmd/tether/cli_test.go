package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/agentcmd"
)

func TestStartExitCode_DockerConvention(t *testing.T) {
	for _, tc := range []struct {
		err   error
		cause fsm.Cause
		want  int
	}{
		{fmt.Errorf("launch: %w", executor.ErrCommandNotFound), fsm.CauseNone, exitNotFound},
		{errors.New("driver: task failed to start"), fsm.CauseCommandNotFound, exitNotFound},
		{errors.New("driver: task failed to start"), fsm.CauseNotExecutable, exitCannotRun},
		// The text alone says nothing: only the recorded cause does.
		{errors.New("driver: task failed to start: " + executor.ErrCommandNotFound.Error()), fsm.CauseOther, exitStartFail},
		{fmt.Errorf("driver: invalid task spec: %w", executor.ErrCapNotAllowed), fsm.CauseCapNotAllowed, exitStartFail},
		{nil, fsm.CauseSpawn, exitStartFail},
	} {
		if got := startExitCode(tc.err, tc.cause); got != tc.want {
			t.Errorf("startExitCode(%v, %s) = %d, want %d", tc.err, tc.cause, got, tc.want)
		}
	}
}

func TestExitCode_SignalIs128Plus(t *testing.T) {
	for x, want := range map[fsm.ExitStatus]int{{Code: 0}: 0, {Code: 3}: 3, {Code: -1, Signal: 15}: 143, {Code: -1, Signal: 9}: 137, {Code: 300}: exitError} {
		if got := exitCode(x); got != want {
			t.Errorf("exitCode(%+v) = %d, want %d", x, got, want)
		}
	}
}

func TestLifecycle_FromEvents(t *testing.T) {
	evs := []fsm.Event{
		{Type: fsm.EventCreated, Seq: 1, Spec: &fsm.Spec{Driver: "exec", Command: "x"}},
		{Type: fsm.EventSpawnIntent, Seq: 2, Nonce: "n0123456789"},
		{Type: fsm.EventExecutorUp, Seq: 3, Executor: &fsm.Identity{PID: 10}},
		{Type: fsm.EventFault, Seq: 4, Reason: "cap_add net_raw"},
		{Type: fsm.EventExecutorReaped, Seq: 5, Target: fsm.StateFailed},
	}
	if got, want := joinStates(lifecycle(evs)), "created -> spawning -> executor-up -> reaping -> failed"; got != want {
		t.Fatalf("lifecycle = %q, want %q", got, want)
	}
}

func TestStateDir_Precedence(t *testing.T) {
	t.Setenv("TETHER_STATE_DIR", "/from/env")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	for _, tc := range []struct{ flag, env, xdg, want string }{
		{"/from/flag", "/from/env", "/xdg", "/from/flag"},
		{"", "/from/env", "/xdg", "/from/env"},
		{"", "", "/xdg", "/xdg/tether"},
		{"", "", "relative", "/home/u/.local/state/tether"},
		{"", "", "", "/home/u/.local/state/tether"},
	} {
		t.Setenv("TETHER_STATE_DIR", tc.env)
		t.Setenv("XDG_STATE_HOME", tc.xdg)
		got, err := agentcmd.StateDir(tc.flag)
		if err != nil || got != filepath.Clean(tc.want) {
			t.Errorf("stateDir(%q) with env %q, xdg %q = %q, %v; want %q", tc.flag, tc.env, tc.xdg, got, err, tc.want)
		}
	}
}

func TestParseAnywhere_FlagsAroundArgumentsUpToTheCommandLine(t *testing.T) {
	c := &cli{stdout: io.Discard, stderr: io.Discard, logLevel: "warn", lockTimeout: time.Second}
	for _, tc := range []struct {
		cmd        string
		args       []string
		pos, line  []string
		flag, want string
	}{
		{"logs", []string{"web", "-f", "--tail", "3"}, []string{"web"}, nil, "tail", "3"},
		{"logs", []string{"--tail=3", "--", "-web"}, []string{"-web"}, nil, "tail", "3"},
		{"signal", []string{"web", "--main", "SIGHUP", "--log-level", "debug"}, []string{"web", "SIGHUP"}, nil, "main", "true"},
		{"exec", []string{"web", "-t", "sh", "-c", "echo -t"}, []string{"web"}, []string{"sh", "-c", "echo -t"}, "tty", "true"},
		{"exec", []string{"--env", "A=1", "web", "--", "ls", "--env"}, []string{"web"}, []string{"ls", "--env"}, "env", "A=1"},
		{"exec", []string{"--", "web", "ls", "-l"}, []string{"web"}, []string{"ls", "-l"}, "tty", "false"},
		{"run", []string{"--name", "x", "--", "/bin/echo", "--name", "y"}, nil, []string{"/bin/echo", "--name", "y"}, "name", "x"},
		{"run", []string{"/bin/echo", "--name", "y"}, nil, []string{"/bin/echo", "--name", "y"}, "name", ""},
		{"run", []string{"job.hcl", "--name", "y"}, []string{"job.hcl"}, nil, "name", "y"},
	} {
		fs := c.flags(tc.cmd)
		fs.BoolP("follow", "f", false, "")
		fs.IntP("tail", "n", -1, "")
		fs.Bool("main", false, "")
		fs.BoolP("tty", "t", false, "")
		fs.String("env", "", "")
		fs.String("name", "", "")
		if err := fs.ParseAnywhere(tc.args); err != nil {
			t.Errorf("%s %v: %v", tc.cmd, tc.args, err)
			continue
		}
		if got := fs.Lookup(tc.flag).Value.String(); !slices.Equal(fs.Args(), tc.pos) || !slices.Equal(fs.CommandLine(), tc.line) || got != tc.want {
			t.Errorf("%s %v: positionals %q, line %q, --%s %q; want %q, %q, %q", tc.cmd, tc.args, fs.Args(), fs.CommandLine(), tc.flag, got, tc.pos, tc.line, tc.want)
		}
	}
}

func TestFindCommand_AmongFlagsBeforeIt(t *testing.T) {
	c := &cli{stdout: io.Discard, stderr: io.Discard}
	for _, tc := range []struct {
		args []string
		at   int
		name string
	}{
		{[]string{"status"}, 0, "status"},
		{[]string{"--state-dir", "run", "status"}, 2, "status"},
		{[]string{"--state-dir=x", "-v", "run", "f.hcl"}, 2, "run"},
		{[]string{"--name", "web", "run", "f.hcl"}, 2, "run"},
		{[]string{"--json", "ps"}, 1, "ps"},
		{[]string{"stauts"}, 0, ""},
		{[]string{"--", "status"}, -1, ""},
	} {
		at, cmd, _ := findCommand(tc.args, c.flags("help"))
		if at != tc.at || cmd.name != tc.name && !(cmd.alias == tc.name && tc.name != "") {
			t.Errorf("findCommand(%q) = %d %q, want %d %q", tc.args, at, cmd.name, tc.at, tc.name)
		}
	}
}

func TestNewTaskID_Valid(t *testing.T) {
	for _, name := range []string{"hello", "", "...", "a b/c", strings.Repeat("x", 200), "日本", "g.t[2]"} {
		id := newTaskID(name)
		if err := validateID(id); err != nil {
			t.Errorf("newTaskID(%q) = %q: %v", name, id, err)
		}
	}
	if a, b := newTaskID("x"), newTaskID("x"); a == b {
		t.Errorf("two ids for the same name are equal: %s", a)
	}
}

// TestSpawnedText_SaysWhatAFailedStartLeft: a failed start's message says
// "confirmed dead" only of a task whose end is recorded; a start the
// driver gave up on mid-way names its state and recover.
func TestSpawnedText_SaysWhatAFailedStartLeft(t *testing.T) {
	for _, tc := range []struct {
		task fsm.Task
		want string
	}{
		{fsm.Task{State: fsm.StateFailed}, "nothing was spawned"},
		{fsm.Task{State: fsm.StateFailed, Nonce: "n"}, "its executor was stopped and confirmed dead"},
		{fsm.Task{State: fsm.StateLaunching, Nonce: "n"}, "it is left launching and its executor may be alive: 'tether recover' reconciles it"},
	} {
		if got := spawnedText(tc.task); got != tc.want {
			t.Errorf("spawnedText(%s, nonce %q) = %q, want %q", tc.task.State, tc.task.Nonce, got, tc.want)
		}
	}
}
