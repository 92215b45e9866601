package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/store"
)

// Issue 11, item 8: `tether run` whose store cannot record the task (not a
// tether store, locked by another holder, a state directory that cannot
// be made) says that nothing was started or recorded, names the store's
// problem and what to do, and exits 125; it never points at 'tether
// events ID' for a task the store does not have (events would say unknown
// task).
func TestRun_UnrecordedTaskIsNotSentToEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env) []string // returns extra global flags
		say   []string                            // what stderr must name
	}{
		{"not a store", func(t *testing.T, e *env) []string {
			junk := bytes.Repeat([]byte("this is not a bbolt file. "), 2000)
			e.offline(func() { // an agent refuses to serve it, and stays away
				if err := os.WriteFile(filepath.Join(e.dir, "tether.db"), junk, 0o600); err != nil {
					t.Fatal(err)
				}
			})
			return nil
		}, []string{"tether.db", "not a tether store", "tether check"}},
		{"locked", func(t *testing.T, e *env) []string {
			if e.agent != nil {
				t.Skip("daemonless only: the store's file lock between processes (an agent holds the store for good)")
			}
			st, err := store.Open(filepath.Join(e.dir, "tether.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return []string{"--lock-timeout", "200ms"}
		}, []string{"tether.db", "locked", "retry"}},
		{"state dir unusable", func(t *testing.T, e *env) []string {
			// The state directory's parent is a file: nothing can be made.
			e.dir = filepath.Join(t.TempDir(), "a-file", "state")
			if err := os.WriteFile(filepath.Dir(e.dir), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"a-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			flags := tc.setup(t, e)
			r := e.tether(append(flags, "run", "--name", "never", "--", "/bin/true")...)
			if r.code != exitStartFail {
				t.Errorf("exit %d, want %d: %s", r.code, exitStartFail, r)
			}
			if strings.Contains(r.stderr, "tether events") || strings.Contains(r.stderr, "(none)") {
				t.Errorf("points at the events of a task that was never recorded:\n%s", r)
			}
			for _, s := range tc.say {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r)
				}
			}
			if !regexp.MustCompile(`(?i)nothing (was )?(started|ran)|was not started`).MatchString(r.stderr) {
				t.Errorf("stderr does not say that nothing was started:\n%s", r)
			}
		})
	}
}

// restartFile writes a task file running script under /bin/sh with the
// restart block policy.
func restartFile(t *testing.T, e *env, name, script, policy string) string {
	t.Helper()
	return writeFile(t, t.TempDir(), name+".hcl", `task "`+name+`" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", `+strconv.Quote(script)+`, "sh", "`+e.dir+`"]
  }
  restart {
`+policy+`
  }
}
`)
}

// Issue 31: start succeeds only once a run has stayed up --min-uptime; a
// task that crash-loops within it while restarts remain fails the start
// once its restart policy gives up (supervisord's startretries), with
// each run's exit and the last output, and the last run's exit code.
func TestStart_CrashLoopWithinMinUptimeFails(t *testing.T) {
	e := newEnv(t)
	file := restartFile(t, e, "crashloop", "echo starting; echo 'bad config' >&2; exit 3", `    attempts = 2
    interval = "1h"
    delay    = "50ms"
    mode     = "fail"`)
	r := e.tether("start", file)
	if r.code != 3 || r.stdout != "" {
		t.Fatalf("start of a task that crash-loops: want exit 3 and no id\n%s", r)
	}
	for _, want := range []string{"did not stay up --min-uptime 1s in any of its 3 runs: exit code 3", "; exit code 3 after", // (the first run's time is known when it ran longer than its record took)
		"its restart policy gave up: exited with code 3, after 2 restarts", "its last stderr:\n    bad config"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r)
		}
	}
}

// A task whose first run ends within --min-uptime and whose next, under
// its restart policy, stays up, is up: start prints its id once that run
// has stayed up.
func TestStart_UpOnceARunStaysUp(t *testing.T) {
	e := newEnv(t)
	mark := filepath.Join(t.TempDir(), "ran-once")
	file := restartFile(t, e, "second", "[ -e "+mark+" ] || { touch "+mark+"; exit 1; }; exec sleep 1000", `    attempts = 2
    interval = "1h"
    delay    = "50ms"
    mode     = "fail"`)
	r := e.must("start", "--min-uptime", "300ms", file)
	id := strings.TrimSpace(r.stdout)
	if st := e.readyStatus(id); st.State != "running" || st.Restarts != 1 {
		t.Fatalf("after start: %+v, want running after 1 restart", st)
	}
	e.must("stop", id)
}

// A policy of mode "delay" that has used its attempts in its interval
// waits for the next one, past the start's bound (--ready-timeout): the
// start fails then, saying so, and leaves the task restarting. (So does a
// restart delayed past it: a start is a command someone waits on.)
func TestStart_CrashLoopUntilTheIntervalWaitFails(t *testing.T) {
	e := newEnv(t)
	file := restartFile(t, e, "delayed", "exit 4", `    attempts = 1
    interval = "1h"
    delay    = "50ms"
    mode     = "delay"`)
	r := e.tether("start", file)
	if r.code != 4 || r.stdout != "" || !strings.Contains(r.stderr, "in any of its 2 runs") || !strings.Contains(r.stderr, "its restart policy starts its next run in ") ||
		!strings.Contains(r.stderr, "past --ready-timeout 1m30s") || !strings.Contains(r.stderr, "left restarting") {
		t.Fatalf("start of a task whose delay policy waits out its interval: want exit 4 naming the wait\n%s", r)
	}
	st := e.status("delayed")
	if len(st) != 1 || st[0].State != "restarting" {
		t.Fatalf("status: %+v, want restarting", st)
	}
	e.must("stop", st[0].ID)
}

// A notify task's start waits for readiness across restarts: a run that
// ends before READY=1 and that its policy restarts leaves the wait to the
// next run, which says it is ready.
func TestStart_NotifyReadyOnALaterRun(t *testing.T) {
	e := newEnv(t)
	n := newNotifyHelper(t, e, "later", `  restart {
    attempts = 2
    interval = "1h"
    delay    = "50ms"
    mode     = "fail"
  }`)
	done := e.tetherAsync("start", n.file)
	first := n.read(t)
	fmt.Fprintln(n.ctl, "exit 3") // the first run ends before it is ready
	if second := n.read(t); second == first || !strings.HasPrefix(second, "up ") {
		t.Fatalf("the restarted run said %q (the first %q)", second, first)
	}
	if got := n.say(t, `send READY=1`); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("start: %s", r)
	}
	if st := e.readyStatus(id); st.Ready == nil || !*st.Ready || st.Restarts != 1 {
		t.Fatalf("status: %+v, want ready after 1 restart", st)
	}
	e.must("stop", id)
}

// The same for a job's main task (start of a file of several tasks): one
// that crash-loops while restarts remain, each restart delayed so that the
// task is restarting when --min-uptime has passed, did not stay up: the
// start fails once its policy gives up, with its runs and last output.
func TestStartJob_MainCrashLoopWithinMinUptimeFails(t *testing.T) {
	e := newEnv(t)
	file := writeFile(t, t.TempDir(), "crashjob.nomad", `job "crashjob" {
  group "g" {
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo 'bad config' >&2; exit 3", "sh", "`+e.dir+`"]
      }
      restart {
        attempts = 2
        interval = "1h"
        delay    = "400ms"
        mode     = "fail"
      }
    }
    task "side" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["1000"]
      }
      env {
        TETHER_TEST_MARKER = "`+e.dir+`"
      }
    }
  }
}
`)
	r := e.tether("start", "--min-uptime", "500ms", file)
	if r.code != 3 || r.stdout != "" {
		t.Fatalf("start of a job whose main task crash-loops: want exit 3 and no ids\n%s", r)
	}
	for _, want := range []string{"did not stay up --min-uptime 500ms in any of its 3 runs", "its restart policy gave up", "its last stderr:\n    bad config"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r)
		}
	}
}
