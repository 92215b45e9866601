package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The CLI through an agent: every command goes through the agent that
// serves the state directory, and prints and exits as it does daemonless.
// (The whole suite runs through an agent with TETHER_E2E_AGENT=1: see
// newEnv. These tests hold the CLI's own rules in the default run.)

// cliScript runs the same commands on e and returns their transcript, task
// ids and the state directory replaced by stable words and every other
// number by N (pids, times, sizes differ from run to run).
func cliScript(t *testing.T, e *env) string {
	t.Helper()
	var out strings.Builder
	ids := map[string]string{}
	step := func(args ...string) result {
		t.Helper()
		r := e.tether(args...)
		fmt.Fprintf(&out, "$ tether %s\nexit %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		return r
	}
	web := strings.TrimSpace(step(e.runArgs("start", []string{"--name", "web"}, "sleep")...).stdout)
	ids[web] = "<web>"
	step(e.runArgs("start", []string{"--name", "web"}, "sleep")...) // the name is taken: 125
	step("stop", "nosuch")                                          // unknown: 1
	step("signal", "web", "NOSUCHSIG")                              // usage: 2
	step(e.runArgs("run", []string{"--name", "three"}, "exit", "3")...)
	step("wait", "three") // ended: its code (a start racing its own exit would say it either way)
	step("stop", "web")
	step("wait", "web")
	step("logs", "--stdout", "web") // each stream alone: merged, two lines read within
	step("logs", "--stderr", "web") // a millisecond of each other may come either way
	step("logs", "three")
	step("status", "--all", "--json")
	for _, s := range e.status("--all") {
		if _, ok := ids[s.ID]; !ok {
			ids[s.ID] = "<" + s.Name + ">"
		}
	}
	step("status", "--all")
	step("status", "web")
	step("events", "three")
	step("gc")
	step("check")
	step("status", "--all")

	text := strings.ReplaceAll(out.String(), e.dir, "<state>")
	for id, word := range ids {
		text = strings.ReplaceAll(text, id, word)
	}
	// What varies from run to run: pids, times, sizes, a spawn nonce.
	text = regexp.MustCompile(`nonce [0-9a-f]{32}`).ReplaceAllString(text, "nonce <nonce>")
	// A task that exits at once may do so before its running is recorded
	// (launched, then task-exited), and an event is said recorded later
	// than it happened when it was by enough: both are the timing of one
	// run, not the CLI's words.
	text = regexp.MustCompile(` \(recorded [^)]*\)`).ReplaceAllString(text, "")
	text = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\S+ +running *\n`).ReplaceAllString(text, "")
	text = regexp.MustCompile(`(exit |code |with )?[0-9]+`).ReplaceAllStringFunc(text, func(m string) string {
		if m[0] >= '0' && m[0] <= '9' {
			return "N"
		}
		return m
	})
	return regexp.MustCompile(` +`).ReplaceAllString(text, " ") // columns widen with the numbers
}

// The same commands print the same words and exit with the same codes
// daemonless and through an agent (which holds the store: a command that
// did not go through it could not open the store at all).
func TestAgent_CLIPrintsAndExitsAsDaemonless(t *testing.T) {
	alone := newDaemonlessEnv(t, "the daemonless side of the comparison")
	want := cliScript(t, alone)

	e := newAgentEnv(t)
	a := e.startAgent(nil, true)
	got := cliScript(t, e)
	if got != want {
		t.Fatalf("through the agent (pid %d) the CLI says:\n%s\n\ndaemonless:\n%s\n\nfirst difference near:\n%s", a.pid(), got, want, firstDiff(got, want))
	}
	select {
	case <-a.exited:
		t.Fatalf("the agent exited during the commands: %v\n%s", a.err, a.logs)
	default:
	}
	if !strings.Contains(want, "exit 125") || !strings.Contains(want, "a task named web is live") ||
		!strings.Contains(want, "exit 3\n") || !strings.Contains(want, "helper exiting with 3") {
		t.Fatalf("the script did not do what it is for:\n%s", want)
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  agent:      %q\n  daemonless: %q", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("one is longer (%d lines vs %d)", len(la), len(lb))
}

// A killed agent leaves its socket; a socket file can also be left by
// anything else. Either way nothing answers on it, and the CLI works
// daemonless at once, with no word about an agent.
func TestAgent_CLIFallsBackAtOnceOnADeadSocket(t *testing.T) {
	e := newAgentEnv(t)
	a := e.startAgent(nil, true)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "web"}, "sleep")...).stdout)
	a.kill()
	if _, err := os.Lstat(agent.SocketPath(e.dir)); err != nil {
		t.Fatalf("the killed agent's socket: %v; want it left behind (the case under test)", err)
	}
	r := e.must("status", "web")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "running") || r.stderr != "" {
		t.Fatalf("status after the agent's SIGKILL: want %s running, daemonless and silent: %s", id, r)
	}
	if r := e.must("stop", "web"); !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("stop after the agent's SIGKILL: %s", r)
	}

	// A socket file nobody listens on, not an agent's.
	if err := os.Remove(agent.SocketPath(e.dir)); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: agent.SocketPath(e.dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if r := e.must(e.runArgs("run", []string{"--name", "two"}, "exit", "0")...); !strings.Contains(r.stdout, "helper exiting with 0") {
		t.Fatalf("run beside a dead socket: %s", r)
	}
}

// --no-agent works daemonless; while an agent holds the store it fails at
// once naming the agent's pid, and starts nothing.
func TestAgent_NoAgentRefusedWhileOneHoldsTheStore(t *testing.T) {
	e := newAgentEnv(t)
	if r := e.must(e.runArgs("run", []string{"--no-agent"}, "exit", "0")...); !strings.Contains(r.stdout, "helper exiting with 0") {
		t.Fatalf("--no-agent with no agent: %s", r)
	}
	a := e.startAgent(nil, true)
	for _, args := range [][]string{
		{"--no-agent", "status"},
		e.runArgs("start", []string{"--no-agent", "--name", "web"}, "sleep"),
		{"gc", "--no-agent"},
	} {
		r := e.tether(args...)
		if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("an agent (pid %d) serves %s", a.pid(), e.dir)) ||
			!strings.Contains(r.stderr, "drop --no-agent") {
			t.Fatalf("tether %s with an agent: want a refusal naming pid %d: %s", strings.Join(args, " "), a.pid(), r)
		}
	}
	if procs := testproc.Marked(e.dir); len(procs) != 1 || procs[0].PID != a.pid() {
		t.Fatalf("after the refused commands: %v; want the agent alone", procs)
	}
	if got := e.status("--all"); len(got) != 1 {
		t.Fatalf("tasks after the refused start: %+v; want the first run's alone", got)
	}
}

// The agent starts every task with its own allow lists: a command that
// gives other ones is refused (not run with lists other than asked),
// naming the agent's; the same list in another spelling is the agent's.
// A crash point or fault in the CLI's environment would arm nothing (the
// agent's driver runs the command): refused, naming where it goes.
func TestAgent_CLIPolicyAndInjectionRefusedThroughTheAgent(t *testing.T) {
	e := newAgentEnv(t)
	a := e.startAgent(nil, true)
	r := e.tether(append([]string{"--allow-caps", "chown"}, e.runArgs("run", nil, "exit", "0")...)...)
	if r.code != exitStartFail || !strings.Contains(r.stderr, fmt.Sprintf("the agent (pid %d)", a.pid())) ||
		!strings.Contains(r.stderr, "its own capability allow list") || !strings.Contains(r.stderr, "kill") ||
		strings.Contains(r.stdout, "helper exiting") {
		t.Fatalf("--allow-caps other than the agent's: %s", r)
	}
	same := make([]string, len(executor.DefaultAllowedCaps))
	for i, c := range executor.DefaultAllowedCaps {
		same[len(same)-1-i] = "CAP_" + strings.ToUpper(c)
	}
	if r := e.must(append([]string{"--allow-caps", strings.Join(same, ",")}, e.runArgs("run", nil, "exit", "0")...)...); !strings.Contains(r.stdout, "helper exiting with 0") {
		t.Fatalf("the agent's own list, spelled otherwise: %s", r)
	}
	if r := e.must("--allow-caps", "chown", "status", "--all"); r.stderr != "" {
		t.Fatalf("a command that starts nothing is not refused for its lists: %s", r)
	}
	for _, v := range []string{"TETHER_CRASHPOINT=after-append:executor-up", "TETHER_FAULT=effect:launch-task"} {
		r := e.tetherEnv([]string{v}, e.runArgs("run", nil, "exit", "0")...)
		if r.code != exitStartFail || !strings.Contains(r.stderr, "give the variable to tether agent") || strings.Contains(r.stdout, "helper exiting") {
			t.Fatalf("%s through the agent: %s", v, r)
		}
	}
	var tasks []json.RawMessage
	if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &tasks); err != nil || len(tasks) != 1 {
		t.Fatalf("tasks: %d, %v; want the one run the agent's list allowed", len(tasks), err)
	}
}

// The agent's NOTIFY_SOCKET is its service manager's: a task it starts
// does not inherit it (it could say READY=1 or MAINPID= for the agent).
// The client's PATH is the task's, as daemonless.
func TestAgent_TaskInheritsNeitherTheAgentsNotifySocketNorItsPath(t *testing.T) {
	e := newAgentEnv(t)
	e.startAgent([]string{"PATH=/agent/only:/usr/bin:/bin"}, true)
	r := e.must("run", "--", "env")
	if strings.Contains(r.stdout, "NOTIFY_SOCKET") {
		t.Fatalf("a task of the agent sees its NOTIFY_SOCKET:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "PATH="+os.Getenv("PATH")+"\n") || strings.Contains(r.stdout, "/agent/only") {
		t.Fatalf("a task of the agent: want the client's PATH %q:\n%s", os.Getenv("PATH"), r.stdout)
	}
}
