package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// start --min-uptime (supervisord's startsecs): a task that ends sooner
// fails the start with its code and its last output; a batch job's task is
// not waited for. (A task whose runs end sooner while its restart policy
// restarts them: startfail_test.go, issue 31.)

func TestStart_MinUptimeFailsATaskThatEndsSooner(t *testing.T) {
	e := newEnv(t)
	r := e.tether("start", "--name", "crashy", "--", "/bin/sh", "-c", "echo starting; echo 'bad flag --port' >&2; exit 2", "sh", e.dir)
	if r.code != 2 || r.stdout != "" {
		t.Fatalf("start of a task that exits 2 at once: want exit 2 and no id on stdout\n%s", r)
	}
	for _, want := range []string{"ended within --min-uptime 1s", "exited with code 2", "its last stderr:\n    bad flag --port", "its last stdout:\n    starting", "--min-uptime 0"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r)
		}
	}
	if st := e.status("crashy"); len(st) != 1 || st[0].State != "exited" {
		t.Errorf("status: %+v", st)
	}
	// A task that exits 0 that soon fails the start too (1), and 0 turns
	// the wait off.
	if r := e.tether("start", "--name", "quick", "--", "/bin/true"); r.code != exitError || !strings.Contains(r.stderr, "exited with code 0") {
		t.Errorf("start of /bin/true: want exit 1\n%s", r)
	}
	r = e.tether("start", "--min-uptime", "0", "--name", "quick", "--", "/bin/true")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "quick-") {
		t.Errorf("start --min-uptime 0 of /bin/true: %s", r)
	}
	e.tether("wait", strings.TrimSpace(r.stdout)) // its end recorded, its executor reaped
}

func TestStart_MinUptimeReturnsWhileTheTaskRuns(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The task blocks on the FIFO until the test writes it, after start
	// has returned: start must not wait for the task's end.
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "reader", "--min-uptime", "300ms"}, "fiforead", fifo)...).stdout)
	if st := e.status(id); st[0].State != "running" {
		t.Fatalf("after start: %+v", st)
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	if r := e.tether("wait", id); r.code != 7 {
		t.Fatalf("wait: %s", r)
	}
}

func TestStart_MinUptimeIsZeroForABatchJobsTask(t *testing.T) {
	e := newEnv(t)
	file := writeFile(t, t.TempDir(), "batch.nomad", `job "nightly" {
  type = "batch"
  group "g" {
    task "report" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo done", "sh", "`+e.dir+`"]
      }
    }
  }
}
`)
	r := e.must("start", file)
	if !strings.HasPrefix(r.stdout, "report-") {
		t.Fatalf("start of a batch task that ends at once: %s", r)
	}
	// Given, the flag applies to a batch task too.
	if r := e.tether("start", "--min-uptime", "1s", file); r.code != exitError || !strings.Contains(r.stderr, "ended within --min-uptime 1s") {
		t.Errorf("start --min-uptime 1s of the batch task: %s", r)
	}
}
