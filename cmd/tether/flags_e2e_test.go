package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFlags_AnywhereForEveryCommand runs every command with its flags
// (a global one and one of its own) before the command's name, between
// the name and the arguments, and after the arguments: each placement
// must do the same.
func TestFlags_AnywhereForEveryCommand(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "svc"}, "sleep")...).stdout)
	g := []string{"--log-level", "error"} // a global flag, with a value
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	hello := filepath.Join(repoRoot, "examples", "hello.hcl")
	for _, c := range []struct {
		name  string
		forms [][]string
		// check, when set, holds each form's stdout to it.
		check func(stdout string) bool
	}{
		{"run", [][]string{
			cat(g, []string{"run", "--name", "hi", hello}),
			cat([]string{"run"}, g, []string{"--name", "hi", hello}),
			cat([]string{"run", hello, "--name", "hi"}, g),
			cat([]string{"run", "--name=hi"}, g, []string{"--", "/bin/echo", "--name", "hello from tether"}),
		}, func(out string) bool { return strings.HasSuffix(out, "hello from tether\n") }},
		{"start", [][]string{
			cat(g, []string{"--min-uptime", "0", "start", "--name", "once1", "--", "/bin/true"}),
			cat([]string{"start"}, g, []string{"--min-uptime=0", "--name", "once2", "--", "/bin/true"}),
			cat([]string{"start", "--name", "once3", "--min-uptime", "0"}, g, []string{"--", "/bin/true"}),
		}, func(out string) bool { return strings.HasPrefix(out, "once") }},
		{"status", [][]string{
			cat(g, []string{"--json", "status", "svc"}),
			cat([]string{"status"}, g, []string{"--json", "svc"}),
			cat([]string{"status", "svc", "--json"}, g),
			cat([]string{"ps", "svc"}, g, []string{"--json"}),
		}, func(out string) bool { return strings.Contains(out, `"id": "`+id+`"`) }},
		{"events", [][]string{
			cat(g, []string{"--json", "events", "svc"}),
			cat([]string{"events"}, g, []string{"--json", "svc"}),
			cat([]string{"events", "svc", "--json"}, g),
		}, func(out string) bool { return strings.Contains(out, `"event": "task-created"`) }},
		{"logs", [][]string{
			cat(g, []string{"-n", "1", "logs", "svc"}),
			cat([]string{"logs"}, g, []string{"--tail", "1", "svc"}),
			cat([]string{"logs", "svc", "-n1"}, g),
			cat([]string{"logs", "svc", "--stderr"}, g),
		}, func(out string) bool { return out == "helper up\n" || out == "helper stderr\n" }},
		{"stats", [][]string{
			cat(g, []string{"--json", "stats", "svc"}),
			cat([]string{"stats"}, g, []string{"--json", "svc"}),
			cat([]string{"stats", "svc", "--json"}, g),
		}, func(out string) bool { return strings.Contains(out, `"memory_bytes"`) }},
		{"signal", [][]string{
			cat(g, []string{"--main", "signal", "svc", "SIGCONT"}),
			cat([]string{"signal"}, g, []string{"--main", "svc", "SIGCONT"}),
			cat([]string{"signal", "svc", "--main", "SIGCONT"}, g),
			cat([]string{"signal", "svc", "SIGCONT", "--main"}, g),
		}, nil},
		{"exec", [][]string{
			cat(g, []string{"--env", "X=1", "exec", "svc", "--", "/bin/sh", "-c", "echo $X"}),
			cat([]string{"exec"}, g, []string{"--env=X=1", "svc", "/bin/sh", "-c", "echo $X"}),
			cat([]string{"exec", "svc", "--env", "X=1"}, g, []string{"--", "/bin/sh", "-c", "echo $X"}),
		}, func(out string) bool { return out == "1\n" }},
		{"graph", [][]string{
			cat(g, []string{"--format", "dot", "graph"}),
			cat([]string{"graph"}, g, []string{"--format", "dot"}),
			cat([]string{"graph", "--format=dot"}, g),
		}, func(out string) bool { return strings.HasPrefix(out, "digraph") }},
		{"check", [][]string{cat(g, []string{"check"}), cat([]string{"check"}, g)}, nil},
		{"recover", [][]string{cat(g, []string{"recover"}), cat([]string{"recover"}, g)}, nil},
		{"gc", [][]string{
			cat(g, []string{"--older-than", "1h", "gc"}),
			cat([]string{"gc"}, g, []string{"--older-than", "1h"}),
			cat([]string{"gc", "--older-than=7d"}, g),
		}, func(out string) bool { return strings.Contains(out, "store compacted") }},
		{"debug", [][]string{cat(g, []string{"debug", "crashpoints"}), cat([]string{"debug"}, g, []string{"crashpoints"}), cat([]string{"debug", "crashpoints"}, g)},
			func(out string) bool { return strings.Contains(out, "after-append:executor-up") }},
		{"version", [][]string{cat(g, []string{"version"}), cat([]string{"version"}, g), {"--version"}},
			func(out string) bool { return strings.HasPrefix(out, "tether ") }},
		{"help", [][]string{cat(g, []string{"help", "logs"}), cat([]string{"help"}, g, []string{"logs"}), cat([]string{"logs"}, g, []string{"--help"}), {"logs", "svc", "-h"}},
			func(out string) bool { return strings.HasPrefix(out, "Usage: tether logs") }},
		{"wait", [][]string{cat(g, []string{"wait", "once1"}), cat([]string{"wait"}, g, []string{"once2"}), cat([]string{"wait", "once3"}, g)}, nil},
		{"restart", [][]string{
			cat(g, []string{"--min-uptime", "0", "restart", "svc"}),
			cat([]string{"restart"}, g, []string{"--min-uptime", "0", "svc"}),
			cat([]string{"restart", "svc", "--min-uptime", "0"}, g),
		}, func(out string) bool { return strings.HasPrefix(out, "svc-") }},
		{"stop", [][]string{
			cat(g, []string{"--timeout", "5s", "stop", "svc"}),
			cat([]string{"stop"}, g, []string{"--signal", "SIGTERM", "svc"}),
			cat([]string{"stop", "svc", "--timeout", "5s", "--signal=SIGINT"}, g),
		}, nil},
	} {
		for _, args := range c.forms {
			r := e.tether(args...)
			if r.code != 0 {
				t.Errorf("%s: tether %s: %s", c.name, strings.Join(args, " "), r)
				continue
			}
			if c.check != nil && !c.check(r.stdout) {
				t.Errorf("%s: tether %s: unexpected stdout\n%s", c.name, strings.Join(args, " "), r)
			}
		}
	}
	e.must("stop", "svc")
}

func TestFlags_MistypedCommandOrFlagSuggestsInAFewLines(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts"}, "did you mean status?"},
		{[]string{"rn", "x"}, "did you mean run?"},
		{[]string{"logs", "--folow", "x"}, "did you mean --follow?"},
		{[]string{"status", "-all"}, "did you mean --all?"},
		{[]string{"stop", "--timout", "5s", "x"}, "did you mean --timeout?"},
		{[]string{"--stat-dir", "/tmp", "status"}, "did you mean --state-dir?"},
		{[]string{filepath.Join(repoRoot, "examples", "hello.hcl")}, "to run the task file, tether run " + filepath.Join(repoRoot, "examples", "hello.hcl")},
	} {
		r := e.tether(c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("tether %s: want exit 2 and %q:\n%s", strings.Join(c.args, " "), c.want, r)
		}
		if n := strings.Count(r.stderr, "\n"); n > 5 {
			t.Errorf("tether %s: %d lines, want at most 5:\n%s", strings.Join(c.args, " "), n, r.stderr)
		}
	}
	if r := e.tether("frobnicate"); r.code != exitUsage || strings.Contains(r.stderr, "did you mean") || strings.Count(r.stderr, "\n") > 5 {
		t.Errorf("a command nothing is near: %s", r)
	}
}

func TestFlags_BareNumberDurationRefusedWithAHint(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stop", "x", "--timeout", "5"}, "--timeout 5: a duration needs a unit: did you mean 5s?"},
		{[]string{"gc", "--older-than", "24"}, "did you mean 24s?"},
		{[]string{"--lock-timeout", "2.5", "status"}, "did you mean 2.5s?"},
		{[]string{"start", "--min-uptime", "3", "--", "/bin/true"}, "did you mean 3s?"},
		{[]string{"run", "--kill-timeout", "ten", "--", "/bin/true"}, "not a duration"},
		{[]string{"gc", "--older-than", "-1h"}, "must not be negative"},
	} {
		r := e.tether(c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tether %s: want exit 2 and %q:\n%s", strings.Join(c.args, " "), c.want, r)
		}
	}
	if st := e.status("--all"); len(st) != 0 {
		t.Errorf("a refused flag started something: %+v", st)
	}
	for _, args := range [][]string{{"gc", "--older-than", "0"}, {"gc", "--older-than", "7d"}, {"gc", "--older-than", "1h30m"}} {
		e.must(args...)
	}
}

func TestHelp_PerCommandListsOnlyItsFlagsAndTheGlobalOnesApart(t *testing.T) {
	e := newEnv(t)
	r := e.must("help")
	for _, want := range []string{"\n  version ", "--version", "\n  restart ", "status, ps"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tether help lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, cmd := range commands() {
		if cmd.name == "cluster" {
			continue // tether-fleet's help (cmd/tether-fleet's tests)
		}
		r := e.must(cmd.name, "-h")
		own, global, ok := strings.Cut(r.stdout, "\nGlobal flags:\n")
		if !ok {
			t.Errorf("%s -h has no global section:\n%s", cmd.name, r.stdout)
			continue
		}
		if strings.Contains(own, "--state-dir") || strings.Contains(own, "--allow-caps") || strings.Contains(own, "--chroot-env") || strings.Contains(own, "--log-level") {
			t.Errorf("%s -h lists a global flag among its own:\n%s", cmd.name, own)
		}
		if !strings.Contains(global, "--state-dir") {
			t.Errorf("%s -h: the global section lacks --state-dir:\n%s", cmd.name, global)
		}
		if starts := cmd.startsTasks; strings.Contains(global, "--allow-caps") != starts {
			t.Errorf("%s -h: --allow-caps listed %v, want %v (only where tasks start)", cmd.name, !starts, starts)
		}
		if r.stderr != "" {
			t.Errorf("%s -h wrote to stderr: %s", cmd.name, r.stderr)
		}
	}
	// The flags still work where they are not listed.
	e.must("--allow-caps", "chown", "status")
}

func TestVersion_CommandAndFlag(t *testing.T) {
	e := newEnv(t)
	a, b := e.must("version"), e.must("--version")
	if a.stdout != b.stdout || !regexp.MustCompile(`^tether \S.*\(go1\.\d+`).MatchString(a.stdout) {
		t.Fatalf("version %q, --version %q", a.stdout, b.stdout)
	}
}

func TestQuiet_RunPrintsOnlyTheTaskOutputAndStartOnlyTheID(t *testing.T) {
	e := newEnv(t)
	r := e.must("run", "--", "/bin/echo", "only this")
	if r.stdout != "only this\n" || r.stderr != "" {
		t.Fatalf("run of a task that succeeds: want its output alone:\n%s", r)
	}
	r = e.must(e.runArgs("start", []string{"--name", "quiet"}, "sleep")...)
	if !regexp.MustCompile(`^quiet-[0-9a-f]{6}\n$`).MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("start: want the id alone:\n%s", r)
	}
	r = e.must("stop", "quiet")
	if !strings.HasPrefix(r.stdout, "quiet-") || r.stderr != "" {
		t.Fatalf("stop: %s", r)
	}
	// -v says the states; failures say what went wrong without the
	// packages' prefixes, whose chain --log-level debug keeps.
	if r := e.must("run", "-v", "--", "/bin/true"); !strings.Contains(r.stderr, "created -> spawning -> executor-up") {
		t.Fatalf("run -v: %s", r)
	}
	r = e.tether("run", "--", "/no/such/command")
	for _, prefix := range []string{"driver: ", "executor: ", "fsm: ", "store: "} {
		if strings.Contains(r.stderr, prefix) {
			t.Errorf("a user-facing error carries the package prefix %q:\n%s", prefix, r)
		}
	}
	if r.code != exitNotFound || !strings.Contains(r.stderr, "command not found") {
		t.Errorf("missing command: %s", r)
	}
	if d := e.tether("--log-level", "debug", "run", "--", "/no/such/command"); !strings.Contains(d.stderr, "executor: command not found") {
		t.Errorf("--log-level debug does not keep the error's chain:\n%s", d)
	}
}

// TestRun_NotATaskFileIsRefusedBeforeAnythingRuns: `tether run README.md`
// names a file that is neither a task file nor executable: refused with
// the way to run it as a command, with nothing spawned or recorded. A file
// without a task file's extension that parses as one is one; an
// executable is a command.
func TestRun_NotATaskFileIsRefusedBeforeAnythingRuns(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	notes := writeFile(t, dir, "README.md", "# not a task\n\nsome text { with braces }\n")
	for _, cmd := range []string{"run", "start"} {
		r := e.tether(cmd, notes)
		if r.code != exitUsage || !strings.Contains(r.stderr, "is not a task file") || !strings.Contains(r.stderr, "tether "+cmd+" -- "+notes) {
			t.Errorf("%s README.md: %s", cmd, r)
		}
	}
	if st := e.status("--all"); len(st) != 0 {
		t.Errorf("the refused file recorded a task: %+v", st)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "tasks")); len(ents) != 0 {
		t.Errorf("the refused file left task directories: %v", ents)
	}
	// An HCL task file without the extension is a task file.
	job := writeFile(t, dir, "hello.job", "task \"sniffed\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"/bin/echo\"\n    args = [\"sniffed\"]\n  }\n}\n")
	if r := e.must("run", job); r.stdout != "sniffed\n" {
		t.Errorf("run of a task file without .hcl: %s", r)
	}
	// An executable file is a command.
	script := writeFile(t, dir, "script", "#!/bin/sh\necho from the script\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := e.must("run", script); r.stdout != "from the script\n" {
		t.Errorf("run of an executable: %s", r)
	}
	// After "--", any file is the command (and a non-executable one is 126).
	if r := e.tether("run", "--", notes); r.code != exitCannotRun {
		t.Errorf("run -- README.md: want 126\n%s", r)
	}
}

// TestStatus_SortedWithUptimeEndedAndTotals: status sorts by name
// naturally (svc2 before svc10), shows UPTIME and MEM for a running task,
// ENDED and REASON for an ended one, and a totals line; --json keeps its
// fields and adds started_at, ended_at and memory_bytes.
func TestStatus_SortedWithUptimeEndedAndTotals(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"svc10", "svc2", "svc1"} {
		e.must(e.runArgs("start", []string{"--name", n, "--min-uptime", "0"}, "sleep")...)
	}
	e.tether("run", "--name", "bad", "--", "/bin/sh", "-c", "exit 4")
	e.must("stop", "svc1")
	r := e.must("status", "--all")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 6 {
		t.Fatalf("status --all: want a header, 5 tasks and a totals line:\n%s", r.stdout)
	}
	var names []string
	for _, l := range lines[1:5] {
		names = append(names, strings.Fields(l)[1])
	}
	if got := strings.Join(names, " "); got != "bad svc1 svc2 svc10" {
		t.Errorf("names in order %q, want bad svc1 svc2 svc10\n%s", got, r.stdout)
	}
	for _, col := range []string{"MEM", "UPTIME", "ENDED", "REASON"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("no %s column:\n%s", col, r.stdout)
		}
	}
	if !strings.Contains(lines[3], " MiB ") || !regexp.MustCompile(` \d+s `).MatchString(lines[3]) {
		t.Errorf("svc2's row lacks its memory or uptime: %q", lines[3])
	}
	if !strings.Contains(lines[2], "ago") || !strings.Contains(lines[2], "stopped with SIGTERM") {
		t.Errorf("svc1's row lacks when and how it ended: %q", lines[2])
	}
	if lines[5] != "2 running, 2 ended (1 failed)" {
		t.Errorf("totals %q, want \"2 running, 2 ended (1 failed)\"", lines[5])
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, j := range raw {
		switch j["name"] {
		case "svc2":
			if j["started_at"] == nil || j["memory_bytes"] == nil || j["ended_at"] != nil {
				t.Errorf("running task's JSON: %v", j)
			}
		case "svc1":
			if j["ended_at"] == nil || j["memory_bytes"] != nil {
				t.Errorf("ended task's JSON: %v", j)
			}
		}
	}
	e.must("stop", "svc2")
	e.must("stop", "svc10")
}
