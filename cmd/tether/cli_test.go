package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
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
		got, err := stateDir(tc.flag)
		if err != nil || got != filepath.Clean(tc.want) {
			t.Errorf("stateDir(%q) with env %q, xdg %q = %q, %v; want %q", tc.flag, tc.env, tc.xdg, got, err, tc.want)
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
