package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// Values a task file may hold (issue 27): the restart rules of Nomad and
// the limits' values are refused before anything is spawned, naming what
// is wrong; a memory limit above the host's RAM is run with a warning that
// names the host's figure.

// taskFile writes a raw_exec task file running a helper mode with extra
// lines (a restart or resources block) in its task.
func (e *env) taskFile(name, extra string, mode ...string) string {
	e.t.Helper()
	args := e.helper(mode...)
	quoted := make([]string, len(args)-1)
	for i, a := range args[1:] {
		quoted[i] = strconv.Quote(a)
	}
	return writeFile(e.t, e.t.TempDir(), name+".hcl", fmt.Sprintf(`task %q {
  driver = "raw_exec"
  config {
    command = %q
    args    = [%s]
  }
%s
}
`, name, args[0], strings.Join(quoted, ", "), extra))
}

// refusedBeforeSpawn runs tether run FILE and requires it refused, saying
// want, with nothing spawned: nothing recorded (the file was refused), or
// the task recorded failed before any executor (the host refused it).
func (e *env) refusedBeforeSpawn(file, want string) {
	e.t.Helper()
	r := e.tether("run", file)
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		e.t.Errorf("run of %s: %s\nwant refused saying %q", file, r, want)
	}
	for _, s := range e.statusAll() {
		if s.State != "failed" || s.ExecutorPID != 0 {
			e.t.Errorf("a refused file left a task that is not failed before its spawn: %+v", s)
		}
	}
	if left := testproc.Marked(e.dir); len(left) != 0 {
		e.t.Errorf("a refused file spawned %v", left)
	}
}

// TestRun_RestartRulesRefusedBeforeSpawn: the restart blocks issue 27 saw
// restart 25 times in 3 s (interval 1ns) and 10 times in 6 s and on
// (interval 1s, delay 600ms) are refused, as Nomad refuses them, before
// anything runs; a block with only attempts and delay takes the default
// interval and runs.
func TestRun_RestartRulesRefusedBeforeSpawn(t *testing.T) {
	e := newEnv(t)
	e.refusedBeforeSpawn(e.taskFile("fast", `  restart {
    attempts = 2
    mode     = "fail"
    interval = "1ns"
    delay    = "100ms"
  }`, "exit", "3"), "interval can not be less than 5s (got 1ns)")
	e.refusedBeforeSpawn(e.taskFile("tight", `  restart {
    attempts = 2
    interval = "6s"
    delay    = "4s"
  }`, "exit", "3"), "can't restart the task 2 times in an interval of 6s with a delay of 4s")
	r := e.tether("run", e.taskFile("ok", `  restart {
    attempts = 1
    delay    = "0s"
  }`, "exit", "3"))
	if r.code != 3 || !strings.Contains(r.stderr, "restart") {
		t.Errorf("a block of attempts and delay (default interval): %s", r)
	}
}

// TestRun_ResourceValues: a value past the parser's range, an explicit 0,
// more cores than the host has: refused before anything runs, saying what
// and why. A memory limit of 2 TB on this host runs, with a warning that
// names the host's RAM.
func TestRun_ResourceValues(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ res, want string }{
		{"memory = 1000000000000", "memory = 1000000000000 is out of range"},
		{"memory = 0", "memory = 0 is below Nomad's minimum of 10 MB; leave memory out for no limit"},
		{"cpu = 0", "cpu = 0 is below Nomad's minimum of 1 MHz"},
		{"pids = 0", "pids = 0 would let the task run no process"},
		{"cores = 0", "cores = 0 would pin the task to no CPU"},
	} {
		e.refusedBeforeSpawn(e.taskFile("res", "  resources {\n    "+tc.res+"\n  }", "exit", "0"), tc.want)
	}
	needTaskCgroups(t) // the host checks of cores and memory
	e.refusedBeforeSpawn(e.taskFile("cores", "  resources {\n    cores = 4096\n  }", "exit", "0"), "cores = 4096, but this host gives tasks")
	ram := hostRAMMB(t)
	r := e.tether("run", e.taskFile("big", "  resources {\n    memory = 2000000\n  }", "exit", "0"))
	want := fmt.Sprintf("memory = 2000000 MB is more than this host's %d MB of RAM", ram)
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("memory = 2000000 on a host of %d MB: %s\nwant it run, warning %q", ram, r, want)
	}
}

// hostRAMMB is MemTotal in MB.
func hostRAMMB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb >> 10
		}
	}
	t.Fatal("no MemTotal")
	return 0
}

// TestExec_AtThePidsLimitSaysSo: tether exec into a task that holds all
// the processes its pids limit allows says that the task is at its pids
// limit, with the count; it said the executor did not answer.
func TestExec_AtThePidsLimitSaysSo(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	dir := t.TempDir()
	fifo, gate := filepath.Join(dir, "up"), filepath.Join(dir, "go")
	for _, f := range []string{fifo, gate} {
		if err := unix.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The task fills its pids only once told to, after its start: while
	// its executor launches it on a host with a v1 pids hierarchy, the
	// executor's forking thread counts in the task's cgroup for an
	// instant (cgroup.ForkExec), and a task that filled its limit at
	// once could be refused its last fork by it (see the closing note of
	// issue 36: noticed and left).
	file := writeFile(t, t.TempDir(), "full.hcl", fmt.Sprintf(`task "full" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "read x < \"$1\"; sleep 1000 & sleep 1000 & sleep 1000 & sleep 1000 & echo up > \"$0\"; wait", %q, %q, %q]
  }
  resources {
    pids = 5
  }
}
`, fifo, gate, e.dir))
	id := strings.TrimSpace(e.must("start", "--min-uptime", "0", file).stdout)
	if err := os.WriteFile(gate, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(fifo); err != nil || string(b) != "up\n" { // the shell and its four sleeps: 5 of 5
		t.Fatalf("the task did not fill its pids: %q %v", b, err)
	}
	r := e.tether("exec", id, "--", "/bin/true")
	if r.code == 0 || !strings.Contains(r.stderr, "the task is at its pids limit (5 processes and threads of pids = 5)") ||
		strings.Contains(r.stderr, "did not answer") {
		t.Errorf("exec into a task at its pids limit: %s", r)
	}
	e.must("stop", "--timeout", "1s", id)
}

// TestRun_EnvironmentStringsUpToTheKernelsLimit: an environment string of
// 120 KiB (over the 64 KiB tether took before, under the kernel's 128 KiB
// MAX_ARG_STRLEN) reaches the task whole; one past the kernel's limit is
// refused before anything runs, naming the kernel's figure.
func TestRun_EnvironmentStringsUpToTheKernelsLimit(t *testing.T) {
	e := newEnv(t)
	file := func(name string, n int) string {
		return writeFile(t, t.TempDir(), name+".hcl", fmt.Sprintf(`task %q {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "echo $${#BIG}", %q]
  }
  env {
    BIG = %q
  }
}
`, name, e.dir, strings.Repeat("x", n)))
	}
	r := e.tether("run", file("big", 120<<10))
	if r.code != 0 || !strings.Contains(r.stdout, strconv.Itoa(120<<10)) {
		t.Errorf("a 120 KiB environment string: %s", r)
	}
	e = newEnv(t) // a store with nothing in it, for the refusal
	e.refusedBeforeSpawn(file("huge", 131072), "the kernel takes at most 131071 bytes per argument or environment string (MAX_ARG_STRLEN, 131072 with its NUL)")
}
