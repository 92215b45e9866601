package main

import (
	"os"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/logs"
)

// A task file's logs { journald = true } on a host without a journal: the
// task runs, its output in its files (tether run streams it, tether logs
// reads it), and its start says once that the journal is not there,
// naming the socket. disabled with journald is refused before anything is
// spawned.
func TestJournald_NoJournalTheTaskRunsAndItIsSaid(t *testing.T) {
	if _, err := os.Stat(logs.JournalSocket); err == nil {
		t.Skipf("this host has a journal (%s): the no-journal warning is not shown here; logs and executor tests cover the forwarding", logs.JournalSocket)
	}
	e := newEnv(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "j.hcl", `task "jw" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "echo to-the-files"]
  }
  logs { journald = true }
}
`)
	r := e.tether("run", file)
	if r.code != 0 || !strings.Contains(r.stdout, "to-the-files") {
		t.Fatalf("run of a journald task without a journal: %s", r)
	}
	if strings.Count(r.stderr, logs.JournalSocket) != 1 || !strings.Contains(r.stderr, "journald") {
		t.Errorf("run's stderr: want the missing journal said once, naming %s\n%s", logs.JournalSocket, r)
	}
	if got := e.must("logs", "jw"); !strings.Contains(got.stdout, "to-the-files") {
		t.Errorf("logs jw: %s", got)
	}
	bad := writeFile(t, dir, "bad.hcl", `task "jb" {
  driver = "raw_exec"
  config { command = "/bin/true" }
  logs {
    journald = true
    disabled = true
  }
}
`)
	if r := e.tether("run", bad); r.code == 0 || !strings.Contains(r.stderr, "leave one out") {
		t.Errorf("run of disabled with journald: %s", r)
	}
	if r := e.tether("status", "--all", "jb"); r.code != exitError || !strings.Contains(r.stderr, `"jb"`) {
		t.Errorf("a refused file recorded a task: %s", r)
	}
}
