package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// readiness = "tcp" and "http" end to end: start holds until the task's
// check passes on its allocated port (the ordering proven through fifos
// the test drives), status shows the ready task and its check; a check
// that never passes fails start at --ready-timeout naming the check.

// newCheckHelper writes the task file of a raw_exec check helper task
// (testproc.CheckTask) named name with readiness r, its port "web" and a
// service whose check block is check. With r "", the task sets no
// readiness and its service is of provider "nomad" (whose checks run as
// Nomad runs them).
func newCheckHelper(t *testing.T, e *env, name, r, check string) notifyHelper {
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
	readiness, provider := fmt.Sprintf("readiness = %q", r), ""
	if r == "" {
		readiness, provider = "", `provider = "nomad"`
	}
	file := writeFile(t, dir, name+".hcl", fmt.Sprintf(`task %q {
  driver    = "raw_exec"
  %s
  network {
    port "web" {}
  }
  service {
    port = "web"
    %s
    %s
  }
  config {
    command = %q
    args    = [%q, "check", %q, %q, "announce", %q]
  }
}
`, name, readiness, provider, check, self, helperArg, paths[0], paths[1], e.dir))
	return notifyHelper{file: file, ctl: files[0], out: files[1]}
}

func TestStart_TCPCheckHoldsUntilListening(t *testing.T) {
	e := newEnv(t)
	n := newCheckHelper(t, e, "web", "tcp", `check {
      type     = "tcp"
      interval = "50ms"
      timeout  = "1s"
    }`)
	done := e.tetherAsync("start", n.file)
	if up := n.read(t); !strings.HasPrefix(up, "up ") {
		t.Fatalf("first line %q", up)
	}
	select {
	case r := <-done:
		t.Fatalf("start returned before the task listened: %s", r)
	default:
	}
	if got := n.say(t, "tcp env:NOMAD_ADDR_web"); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "web-") {
		t.Fatalf("start of a tcp-checked task: want its id\n%s", r)
	}
	st := e.readyStatus(id)
	if st.State != "running" || st.Readiness != "tcp" || st.Ready == nil || !*st.Ready {
		t.Fatalf("status --json: %+v, want running, readiness tcp, ready", st)
	}
	if out := e.must("status", id).stdout; !strings.Contains(out, "running (ready)") || !strings.Contains(out, "Readiness  tcp check ") || !strings.Contains(out, "(port web)") {
		t.Errorf("status lacks running (ready) and the check:\n%s", out)
	}
	if out := e.must("events", id).stdout; !strings.Contains(out, "ready") {
		t.Errorf("events lack the ready event:\n%s", out)
	}
	fmt.Fprintln(n.ctl, "exit 0")
	if r := e.tether("wait", id); r.code != 0 {
		t.Fatalf("wait: %s", r)
	}
}

func TestStart_HTTPCheckNeverPassingTimesOut(t *testing.T) {
	e := newEnv(t)
	n := newCheckHelper(t, e, "api", "http", `check {
      type     = "http"
      path     = "/health"
      interval = "50ms"
      timeout  = "1s"
    }`)
	done := e.tetherAsync("start", "--ready-timeout", "1s", n.file)
	if up := n.read(t); !strings.HasPrefix(up, "up ") {
		t.Fatalf("first line %q", up)
	}
	for _, line := range []string{"status 500", "http env:NOMAD_ADDR_web"} {
		if got := n.say(t, line); got != "ok" {
			t.Fatal(got)
		}
	}
	r := <-done
	if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "did not say it is ready (its check passing: http check GET http://") ||
		!strings.Contains(r.stderr, "/health (port web)") {
		t.Fatalf("start of a task whose check answers 500: want exit 1 naming the check\n%s", r)
	}
	if got := n.say(t, "hits 1"); got != "hits 1" {
		t.Fatal(got)
	}
	st := e.status("api")
	if len(st) != 1 || st[0].State != "running" {
		t.Fatalf("status: %+v", st)
	}
	e.must("stop", st[0].ID)
}

// Issue 31: the http check of a service of provider "nomad" runs without
// any tether-only attribute, as Nomad runs it: start holds until it
// passes; its check_restart restarts a run whose check fails (the
// restart journalled and recorded with the check's reason), and the new
// run's readiness is recorded when its check passes, with nobody waiting.
func TestStart_NomadProviderCheckRunsWithCheckRestart(t *testing.T) {
	e := newEnv(t)
	n := newCheckHelper(t, e, "svc", "", `check {
      name     = "alive"
      type     = "http"
      path     = "/health"
      interval = "50ms"
      timeout  = "1s"
      check_restart {
        limit = 2
        grace = "100ms"
      }
    }
  }
  restart {
    attempts = 1
    interval = "1h"
    delay    = "50ms"
    mode     = "fail"`)
	done := e.tetherAsync("start", n.file)
	if up := n.read(t); !strings.HasPrefix(up, "up ") {
		t.Fatalf("first line %q", up)
	}
	if got := n.say(t, "http env:NOMAD_ADDR_web"); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(id, "svc-") {
		t.Fatalf("start of a task with a nomad-provider check: want its id\n%s", r)
	}
	if st := e.readyStatus(id); st.Readiness != "http" || st.Ready == nil || !*st.Ready {
		t.Fatalf("status: %+v, want ready by its http check", st)
	}
	// Its check fails twice past its grace: check_restart kills the run,
	// and its policy restarts it.
	if got := n.say(t, "status 503"); got != "ok" {
		t.Fatal(got)
	}
	if up := n.read(t); !strings.HasPrefix(up, "up ") {
		t.Fatalf("the restarted run said %q", up)
	}
	if got := n.say(t, "http env:NOMAD_ADDR_web"); got != "ok" {
		t.Fatal(got)
	}
	// Two passes: the first made the run ready (journalled before the
	// check's next try), the second followed it.
	if got := n.say(t, "hits 2"); got != "hits 2" {
		t.Fatal(got)
	}
	st := e.readyStatus(id)
	if st.State != "running" || st.Restarts != 1 || st.Ready == nil || !*st.Ready {
		t.Fatalf("after the check's restart: %+v, want running, 1 restart, ready again", st)
	}
	ev := e.must("events", id).stdout
	if !strings.Contains(ev, `check_restart: check "alive" failed 2 times in a row (HTTP 503)`) || strings.Count(ev, "ready") < 2 {
		t.Fatalf("events lack the check's restart with its reason, or a ready of each run:\n%s", ev)
	}
	e.must("stop", id)
}
