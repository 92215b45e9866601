package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readiness = "notify" end to end: start holds until the task's READY=1
// (the ordering proven through fifos the test drives), prints the task's
// STATUS=, and records the ready event that status and events show; a
// task that never says it is ready fails start at --ready-timeout, one
// that ends first fails it with its exit; a watchdog miss restarts the
// task, the restart's reason naming the watchdog.

// notifyHelper is a notify helper task's task file and the fifos that drive
// it.
type notifyHelper struct {
	file     string
	ctl, out *os.File
}

func (n notifyHelper) say(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(n.ctl, line); err != nil {
		t.Fatal(err)
	}
	return n.read(t)
}

// read reads one line the task wrote.
func (n notifyHelper) read(t *testing.T) string {
	t.Helper()
	if err := n.out.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := n.out.Read(one); err != nil {
			t.Fatalf("reading the task's answer: %v", err)
		}
		if one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

// newNotifyHelper writes the task file of a raw_exec notify helper task
// named name, with extra lines in its task block.
func newNotifyHelper(t *testing.T, e *env, name, extra string) notifyHelper {
	t.Helper()
	dir := t.TempDir()
	var files [2]*os.File
	var paths [2]string
	for i, f := range []string{"ctl", "out"} {
		paths[i] = filepath.Join(dir, f)
		if err := unix.Mkfifo(paths[i], 0o600); err != nil {
			t.Fatal(err)
		}
		h, err := os.OpenFile(paths[i], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		files[i] = h
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, dir, name+".hcl", fmt.Sprintf(`task %q {
  driver    = "raw_exec"
  readiness = "notify"
%s
  config {
    command = %q
    args    = [%q, "notify", %q, %q, "announce", %q]
  }
}
`, name, extra, self, helperArg, paths[0], paths[1], e.dir))
	return notifyHelper{file: file, ctl: files[0], out: files[1]}
}

// tetherAsync starts a tether command and returns a channel of its result.
func (e *env) tetherAsync(args ...string) <-chan result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := e.command(ctx, nil, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		err := cmd.Wait()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
			r.stderr += err.Error()
		}
		done <- r
	}()
	return done
}

// readyStatus is the readiness part of status --json.
type readyStatus struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Readiness string `json:"readiness"`
	Ready     *bool  `json:"ready"`
	Restarts  int    `json:"restarts"`
}

func (e *env) readyStatus(id string) readyStatus {
	e.t.Helper()
	var out []readyStatus
	if err := json.Unmarshal([]byte(e.must("status", "--json", id).stdout), &out); err != nil || len(out) != 1 {
		e.t.Fatalf("status --json %s: %v %v", id, out, err)
	}
	return out[0]
}

func TestStart_NotifyHoldsUntilReady(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "svc", "")
	done := e.tetherAsync("start", n.file)
	up := n.read(t) // the task runs: start has launched it
	if !strings.HasPrefix(up, "up ") {
		t.Fatalf("first line %q", up)
	}
	if got := n.say(t, "send STATUS=warming up"); got != "ok" {
		t.Fatal(got)
	}
	select {
	case r := <-done:
		t.Fatalf("start returned before the task sent READY=1: %s", r)
	default:
	}
	if got := n.say(t, `send READY=1\nSTATUS=listening on :8080`); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "svc-") || !strings.Contains(r.stderr, "ready: listening on :8080") {
		t.Fatalf("start of a notify task: want its id, and its status on stderr\n%s", r)
	}
	st := e.readyStatus(id)
	if st.State != "running" || st.Readiness != "notify" || st.Ready == nil || !*st.Ready {
		t.Fatalf("status --json: %+v, want running, readiness notify, ready", st)
	}
	if out := e.must("status").stdout; !strings.Contains(out, "running (ready)") {
		t.Errorf("status lacks running (ready):\n%s", out)
	}
	if out := e.must("events", id).stdout; !strings.Contains(out, "ready") {
		t.Errorf("events lack the ready event:\n%s", out)
	}
	fmt.Fprintln(n.ctl, "exit 0")
	if r := e.tether("wait", id); r.code != 0 {
		t.Fatalf("wait: %s", r)
	}
}

func TestStart_NotifyNeverReadyTimesOut(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "mute", "")
	r := e.tether("start", "--ready-timeout", "500ms", n.file)
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "did not say it is ready (READY=1 on NOTIFY_SOCKET) within --ready-timeout 500ms") ||
		!strings.Contains(r.stderr, "it is still running") {
		t.Fatalf("start of a task that never sends READY=1: want exit 1 naming the timeout\n%s", r)
	}
	st := e.status("mute")
	if len(st) != 1 || st[0].State != "running" {
		t.Fatalf("status: %+v", st)
	}
	if rs := e.readyStatus(st[0].ID); rs.Ready == nil || *rs.Ready {
		t.Fatalf("status --json: %+v, want not ready", rs)
	}
	if out := e.must("status").stdout; !strings.Contains(out, "running (not ready)") {
		t.Errorf("status lacks running (not ready):\n%s", out)
	}
	e.must("stop", st[0].ID)
}

func TestStart_NotifyEndsBeforeReady(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "dies", "")
	done := e.tetherAsync("start", n.file)
	n.read(t) // up
	fmt.Fprintln(n.ctl, "exit 3")
	r := <-done
	if r.code != 3 || r.stdout != "" || !strings.Contains(r.stderr, "ended before it said it is ready") || !strings.Contains(r.stderr, "exited with code 3") {
		t.Fatalf("start of a task that exits 3 before READY=1: want exit 3 naming its exit\n%s", r)
	}
}

func TestStart_NotifyWatchdogMissRestarts(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "dog", `  watchdog  = "300ms"
  restart {
    attempts = 1
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }`)
	done := e.tetherAsync("start", n.file)
	first := n.read(t)
	if got := n.say(t, `send READY=1`); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	// No ping: the watchdog kills the run, and its policy starts another,
	// which says so.
	second := n.read(t)
	if !strings.HasPrefix(second, "up ") || second == first {
		t.Fatalf("after the watchdog: %q (first run %q)", second, first)
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(second, "up "))
	fmt.Fprintln(n.ctl, "exit 0")
	if r := e.tether("wait", id); r.code != 0 {
		t.Fatalf("wait: %s", r)
	}
	st := e.readyStatus(id)
	if st.State != "exited" || st.Restarts != 1 {
		t.Fatalf("status: %+v, want exited after 1 restart", st)
	}
	ev := e.must("events", id).stdout
	if !strings.Contains(ev, "watchdog: no WATCHDOG=1 within 300ms") || !strings.Contains(ev, fmt.Sprint("task pid ", pid)) {
		t.Fatalf("events lack the watchdog's restart of pid %d:\n%s", pid, ev)
	}
}

// A job file's start waits for the READY=1 of its notify main task too.
func TestStart_JobWaitsForItsNotifyTask(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "api", "")
	src, err := os.ReadFile(n.file)
	if err != nil {
		t.Fatal(err)
	}
	job := writeFile(t, t.TempDir(), "web.nomad", "job \"web\" {\n  group \"g\" {\n"+string(src)+"  }\n}\n")
	done := e.tetherAsync("start", "--min-uptime", "0", job)
	n.read(t) // up
	if got := n.say(t, "send STATUS=loading"); got != "ok" {
		t.Fatal(got)
	}
	select {
	case r := <-done:
		t.Fatalf("the job's start returned before its notify task sent READY=1: %s", r)
	default:
	}
	if got := n.say(t, `send READY=1\nSTATUS=serving`); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.stderr, "ready: serving") {
		t.Fatalf("start of the job: %s", r)
	}
	id := strings.TrimSpace(r.stdout)
	if st := e.readyStatus(id); st.Ready == nil || !*st.Ready {
		t.Fatalf("status: %+v", st)
	}
	e.must("stop", id) // a service job's task: its policy would restart an exit
}

// run records the ready event of the run it follows (and says nothing
// more of it): status shows it ready while run is attached.
func TestRun_RecordsReady(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "attached", "")
	done := e.tetherAsync("run", n.file)
	n.read(t) // up
	if got := n.say(t, `send READY=1\nSTATUS=serving`); got != "ok" {
		t.Fatal(got)
	}
	// run's driver records the event after the executor's answer: wait
	// for the log to have it (each status a read of the store), bounded.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := e.status("attached")
		if len(st) == 1 {
			if rs := e.readyStatus(st[0].ID); rs.Ready != nil && *rs.Ready {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run never recorded the task ready: %+v", st)
		}
	}
	fmt.Fprintln(n.ctl, "exit 0")
	r := <-done
	if r.code != 0 || strings.Contains(r.stderr, "ready") {
		t.Fatalf("run: want exit 0 and nothing said of readiness\n%s", r)
	}
}
