package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// restartTask is a task file whose task counts its runs in a file and
// exits code, under the restart block.
func restartTask(t *testing.T, e *env, name, block, code string) (file, counter string) {
	t.Helper()
	counter = filepath.Join(t.TempDir(), "runs")
	return containTask(t, e, name, block, "count", counter, code), counter
}

func runs(t *testing.T, counter string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// statusJSON is one task of `status --json`.
func (e *env) statusOf(id string) taskJSON {
	e.t.Helper()
	var tasks []taskJSON
	r := e.must("status", "--all", "--json", id)
	if err := json.Unmarshal([]byte(r.stdout), &tasks); err != nil || len(tasks) != 1 {
		e.t.Fatalf("status --json %s: %v\n%s", id, err, r)
	}
	return tasks[0]
}

// waitExit blocks until process pid has exited (through its pidfd).
func waitExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((30 * time.Second).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("process %d did not exit: %v", pid, err)
		}
		return
	}
}

// waitJournal blocks until the task's restart journal holds n entries,
// woken by inotify on the task directory.
func waitJournal(t *testing.T, dir string, n int) executor.Journal {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if j, ok, err := executor.SideFiles(dir).Journal(); err == nil && ok && len(j.Entries) >= n {
			return j
		}
		fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}}
		if k, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())); err != nil && err != unix.EINTR || k == 0 && err == nil {
			t.Fatalf("the restart journal in %s did not reach %d entries", dir, n)
		}
		_, _ = unix.Read(in, buf)
	}
}

// TestRun_RestartingTaskStreamsEveryAttempt: `tether run` of a task that
// fails with restart { attempts = 2 } prints the output of all three runs,
// says each restart on stderr, and exits with the last run's code; status
// shows the restarts and events lists each one.
func TestRun_RestartingTaskStreamsEveryAttempt(t *testing.T) {
	e := newEnv(t)
	file, counter := restartTask(t, e, "flaky", `  restart {
    attempts = 2
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }`, "3")
	r := e.tether("run", "-v", file)
	if r.code != 3 {
		t.Fatalf("run: want exit 3 (the last run's code)\n%s", r)
	}
	for _, want := range []string{"run 1", "run 2", "run 3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run's output lacks %q:\n%s", want, r)
		}
	}
	for _, want := range []string{"exit code 3; restart 1 in 0s", "exit code 3; restart 2 in 0s"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("run does not say %q:\n%s", want, r)
		}
	}
	if n := strings.Count(r.stderr, ": restarted, pid "); n != 2 {
		t.Errorf("run says %d relaunches, want 2:\n%s", n, r)
	}
	if n := runs(t, counter); n != 3 {
		t.Errorf("the task ran %d times, want 3", n)
	}
	id := taskID(t, r.stderr)
	st := e.statusOf(id)
	if st.State != "exited" || st.Restarts != 2 || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("status: %+v, want exited 3 after 2 restarts", st)
	}
	if tbl := e.must("status", "--all"); !strings.Contains(tbl.stdout, "RESTARTS") {
		t.Errorf("status table has no RESTARTS column:\n%s", tbl)
	}
	evs := e.must("events", id)
	if n := strings.Count(evs.stdout, "restart-intent"); n != 2 {
		t.Errorf("events list %d restart-intents, want 2:\n%s", n, evs)
	}
	if !strings.Contains(evs.stdout, "restart 2 after 0s") {
		t.Errorf("events do not give the attempt:\n%s", evs)
	}
	checkNoLeak(t, e.dir)
}

// TestStart_RestartsWithNoCommandRunningAreFoldedLater: a detached task's
// executor restarts it while no tether command runs; the next command
// finds the restarts in the executor's journal and folds them into the log.
func TestStart_RestartsWithNoCommandRunningAreFoldedLater(t *testing.T) {
	e := newEnv(t)
	file, counter := restartTask(t, e, "alone", `  restart {
    attempts = 2
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }
  reschedule {
    attempts  = 0
    unlimited = false
  }`, "5")
	// --min-uptime 0: start returns at once, and the restarts happen
	// with no command running.
	id := strings.TrimSpace(e.must("start", "--min-uptime", "0", file).stdout)
	// Read the store directly (a command would fold): the executor is the
	// only one at work now.
	before := e.statusOfRaw(id)
	if before.Executor == nil {
		t.Fatalf("no executor recorded: %+v", before)
	}
	waitExit(t, before.Executor.PID) // three runs, then the executor ends
	if n := runs(t, counter); n != 3 {
		t.Fatalf("the executor ran the task %d times with no command running, want 3", n)
	}
	j, ok, err := executor.SideFiles(filepath.Join(e.dir, "tasks", id)).Journal()
	if err != nil || !ok || len(j.Entries) != 4 {
		t.Fatalf("journal: %v %v %v, want 2 restart-intents and 2 launches", j.Entries, ok, err)
	}
	st := e.statusOf(id) // the next command folds them
	if st.State != "exited" || st.Restarts != 2 || st.ExitCode == nil || *st.ExitCode != 5 {
		t.Fatalf("status after restarts with nobody watching: %+v, want exited 5 after 2 restarts", st)
	}
	evs := e.events(id)
	if got := eventNames(evs); strings.Count(got, "restart-intent launched running") != 2 {
		t.Errorf("events %s: want each restart folded (restart-intent launched running, twice)", got)
	}
	again := e.events(id)
	if len(again) != len(evs) {
		t.Errorf("a second command changed the log: %d -> %d events", len(evs), len(again))
	}
	checkNoLeak(t, e.dir)
}

// TestStop_DuringTheRestartDelayStopsForGood: a task waiting out a long
// restart delay is `restarting`; `tether stop` ends it stopped, and it is
// never relaunched.
func TestStop_DuringTheRestartDelayStopsForGood(t *testing.T) {
	e := newEnv(t)
	file, counter := restartTask(t, e, "slow", `  restart {
    attempts = 3
    interval = "3h"
    delay    = "1h"
    mode     = "fail"
  }`, "4")
	id := strings.TrimSpace(e.must("start", "--min-uptime", "0", file).stdout) // (it never stays up: issue 31)
	dir := filepath.Join(e.dir, "tasks", id)
	waitJournal(t, dir, 1)
	st := e.statusOf(id)
	if st.State != "restarting" || st.Restarts != 1 {
		t.Fatalf("status during the delay: %+v, want restarting after 1 restart", st)
	}
	if r := e.must("status", id); !strings.Contains(r.stdout, "1 (policy: attempts 3 in 3h0m0s, delay 1h0m0s, mode fail)") {
		t.Errorf("status does not show the attempt and the policy:\n%s", r)
	}
	e.must("stop", id)
	st = e.statusOf(id)
	if st.State != "stopped" {
		t.Fatalf("after stop: %+v, want stopped", st)
	}
	if n := runs(t, counter); n != 1 {
		t.Errorf("the task ran %d times, want 1 (the stop ends it for good)", n)
	}
	j, _, _ := executor.SideFiles(dir).Journal()
	if len(j.Entries) != 1 {
		t.Errorf("journal after the stop: %v, want only the one intent", j.Entries)
	}
	checkNoLeak(t, e.dir)
}

// statusOfRaw reads a task's state from the store itself, as no command
// would leave it (a command reconciles what it shows).
//
// Through an agent (which holds the store) it is the agent's InspectTask:
// the store's state, and nothing reconciled.
func (e *env) statusOfRaw(id string) fsm.Task {
	e.t.Helper()
	if e.agent != nil {
		info, err := e.client().InspectTask(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		return info.Task
	}
	s, err := store.OpenShared(filepath.Join(e.dir, "tether.db"), store.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	st, err := s.LoadTask(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}
