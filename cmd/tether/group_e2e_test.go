package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
)

// lifeJob is a group with every lifecycle hook: each task appends its
// name to the group's alloc/data/order (and prints it); the sidecar and
// the main task run until stopped (appending NAME-stopped), or, for main,
// until the fifo var.release names is written.
const lifeJob = `
variable "release" {
  type    = string
  default = ""
}

locals {
  log  = "echo $0 | tee -a $NOMAD_ALLOC_DIR/data/order"
  stay = "trap 'echo $0-stopped >> $NOMAD_ALLOC_DIR/data/order; exit 0' TERM; sleep 100000 & wait"
}

job "life" {
  type = "service"
  group "g" {
    # A service's default restarts main when it ends: here its end is the
    # group's (the lifecycle tasks run to completion whatever the policy).
    restart {
      attempts = 0
    }
    # Its end is its end: no reschedule (the default reschedules a
    # service whose main task ended).
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "init" {
      driver = "raw_exec"
      lifecycle { hook = "prestart" }
      config {
        command = "/bin/sh"
        args    = ["-c", local.log, "init"]
      }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "${local.log}; ${local.stay}", "side"]
      }
    }
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", var.release == "" ? "${local.log}; ${local.stay}" : "${local.log}; read x < ${var.release}; echo web-done >> $NOMAD_ALLOC_DIR/data/order", "web"]
      }
    }
    task "warm" {
      driver = "raw_exec"
      lifecycle { hook = "poststart" }
      config {
        command = "/bin/sh"
        args    = ["-c", local.log, "warm"]
      }
    }
    task "clean" {
      driver = "raw_exec"
      lifecycle { hook = "poststop" }
      config {
        command = "/bin/sh"
        args    = ["-c", local.log, "clean"]
      }
    }
  }
}
`

// orderUntil is the group's order file, read (inotify, bounded) until it
// holds last.
func (e *jobsEnv) orderUntil(t *testing.T, alloc, last string) []string {
	t.Helper()
	path := filepath.Join(e.dir, "allocs", alloc, "alloc", "data", "order")
	return waitFor(t, path, func(lines []string) bool { return slices.Contains(lines, last) })
}

func index(order []string, word string) int { return slices.Index(order, word) }

// groupDriverPID is the pid the group's lock file names (its driver).
func (e *jobsEnv) groupDriverPID(t *testing.T, alloc string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "allocs", alloc, "group.lock"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("group.lock holds %q", b)
	}
	return pid
}

// waitGroupUndriven waits until nobody holds the group's lock: its driver
// has let go (it empties the file as it does, so its pid may already be
// gone from it) and ends.
func (e *jobsEnv) waitGroupUndriven(t *testing.T, alloc string) {
	t.Helper()
	f, err := os.Open(filepath.Join(e.dir, "allocs", alloc, "group.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make(chan error, 1)
	go func() { got <- unix.Flock(int(f.Fd()), unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	case <-time.After(2 * time.Minute):
		t.Fatal("the group's driver still holds its lock after 2 minutes")
	}
	// A driver that let go of the lock is on its way out: wait for it.
	for _, p := range testproc.Marked(e.dir) {
		if !strings.Contains(p.Cmdline, "drive-group") {
			continue
		}
		fd, err := unix.PidfdOpen(p.PID, 0)
		if err != nil {
			continue // gone already
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int((2 * time.Minute).Milliseconds()))
		for err == unix.EINTR {
			n, err = unix.Poll(fds, int((2 * time.Minute).Milliseconds()))
		}
		unix.Close(fd)
		if n == 0 {
			t.Fatalf("the group's driver %s still runs 2 minutes after it let go of the lock", p)
		}
	}
}

// TestGroup_StartThenStopAnyTask: start runs the group in Nomad's order
// (prestart, the sidecar started, main, poststart) and prints one id a
// line, main first; a stop of any task (here the sidecar) stops the group:
// main then the sidecar, then poststop runs; the group's driver exits and
// nothing is left.
func TestGroup_StartThenStopAnyTask(t *testing.T) {
	e := newJobsEnv(t)
	job := writeFile(t, t.TempDir(), "life.nomad", lifeJob)
	r := e.must("start", job)
	ids := strings.Fields(r.stdout)
	ts := e.statusOf()
	if len(ids) != 5 || ts[ids[0]].Name != "web" {
		t.Fatalf("start printed %q: want 5 ids, web's first", r.stdout)
	}
	web := ts[ids[0]]
	order := e.orderUntil(t, web.Alloc, "warm")
	for _, p := range [][2]string{{"init", "web"}, {"side", "web"}, {"web", "warm"}} {
		if index(order, p[0]) > index(order, p[1]) {
			t.Errorf("%s after %s: %v", p[0], p[1], order)
		}
	}
	want := map[string]string{"init": "exited", "side": "running", "web": "running", "warm": "exited", "clean": "created"}
	for _, id := range ids {
		if st := e.statusOf()[id]; st.State != want[st.Name] && !(st.Name == "warm" && st.State == "running") {
			t.Errorf("%s: %s, want %s", st.Name, st.State, want[st.Name])
		}
	}
	driver := e.groupDriverPID(t, web.Alloc)
	side := byName(e.statusOf(), "side")[0].ID
	stop := e.must("stop", side)
	for _, id := range ids {
		if !strings.Contains(stop.stdout, id) {
			t.Errorf("stop does not tell %s's end:\n%s", id, stop.stdout)
		}
	}
	order = e.orderUntil(t, web.Alloc, "clean")
	if i, j, k := index(order, "web-stopped"), index(order, "side-stopped"), index(order, "clean"); i < 0 || j < i || k < j {
		t.Errorf("want web stopped, then the sidecar, then poststop: %v", order)
	}
	if e.agent != nil && driver == e.agent.pid() {
		// Through an agent, the agent drives the group (for the detached
		// drive-group's request) and lives on: the group's lock is let go
		// of once it is over.
		if driven, pid := groupLockHeld(t, e.dir, web.Alloc); driven {
			t.Errorf("the group's lock is held by %d after the stop returned", pid)
		}
	} else if testAlive(driver) {
		t.Errorf("the group's driver %d is alive after the stop returned", driver)
	}
	for _, st := range e.statusOf() {
		want := map[string]string{"init": "exited", "side": "stopped", "web": "stopped", "warm": "exited", "clean": "exited"}[st.Name]
		if st.State != want {
			t.Errorf("%s ended %s, want %s", st.Name, st.State, want)
		}
	}
}

// groupLockHeld reports whether a process holds the group's lock, and
// the pid its lock file names.
func groupLockHeld(t *testing.T, stateDir, alloc string) (bool, int) {
	t.Helper()
	path := filepath.Join(stateDir, "allocs", alloc, "group.lock")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true, pid
	}
	return false, pid
}

func testAlive(pid int) bool {
	_, ok := proc.Live(pid)
	return ok
}

// TestGroup_DriverKilledThenRecover: the detached driver of a started
// group is SIGKILLed; main then ends with nobody driving the group, and
// the sidecar runs on. tether recover hands the group to a new driver,
// which finishes it from the log: the sidecar stopped, poststop run.
func TestGroup_DriverKilledThenRecover(t *testing.T) {
	e := newDaemonlessJobsEnv(t, "the detached group driver a daemonless start leaves, SIGKILLed (through an agent the agent drives the group)")
	release := filepath.Join(t.TempDir(), "release")
	if err := unix.Mkfifo(release, 0o600); err != nil {
		t.Fatal(err)
	}
	job := writeFile(t, t.TempDir(), "life.nomad", lifeJob)
	ids := strings.Fields(e.must("start", "--var", "release="+release, job).stdout)
	web := e.statusOf()[ids[0]]
	e.orderUntil(t, web.Alloc, "warm")
	driver := e.groupDriverPID(t, web.Alloc)
	if err := syscall.Kill(driver, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExit(t, driver)
	if err := os.WriteFile(release, []byte("go\n"), 0); err != nil { // main ends
		t.Fatal(err)
	}
	e.orderUntil(t, web.Alloc, "web-done")
	if st := byName(e.statusOf(), "side")[0]; st.State != "running" {
		t.Fatalf("with nobody driving the group the sidecar is %s; want it still running (the test's premise)", st.State)
	}
	rec := e.must("recover")
	if !strings.Contains(rec.stdout, "group "+web.Alloc+": nobody drove it; handed to a new driver") {
		t.Errorf("recover does not hand the group over:\n%s", rec.stdout)
	}
	order := e.orderUntil(t, web.Alloc, "clean")
	if i, j := index(order, "side-stopped"), index(order, "clean"); i < 0 || j < i {
		t.Errorf("want the sidecar stopped, then poststop: %v", order)
	}
	e.waitGroupUndriven(t, web.Alloc)
	for _, st := range e.statusOf() {
		want := map[string]string{"init": "exited", "side": "stopped", "web": "exited", "warm": "exited", "clean": "exited"}[st.Name]
		if st.State != want {
			t.Errorf("%s ended %s, want %s", st.Name, st.State, want)
		}
	}
}

// TestGroup_RunInterrupted: run streams each task's output with its name
// and drives the group; Ctrl-C stops the group (poststop runs) and run
// exits 130.
func TestGroup_RunInterrupted(t *testing.T) {
	e := newJobsEnv(t)
	job := writeFile(t, t.TempDir(), "life.nomad", lifeJob)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.command(ctx, e.net.env(), "run", job, "--env", "TETHER_TEST_MARKER="+e.dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "warm: warm" {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("run after Ctrl-C: exit %d (%v), want 130\nstdout %q\nstderr %s", code, err, lines, stderr.String())
	}
	for _, want := range []string{"init: init", "side: side", "web: web", "warm: warm", "clean: clean"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no %q in run's output %q", want, lines)
		}
	}
	for _, st := range e.statusOf() {
		want := map[string]string{"init": "exited", "side": "stopped", "web": "stopped", "warm": "exited", "clean": "exited"}[st.Name]
		if st.Name == "warm" && st.State == "stopped" {
			continue // Ctrl-C came as it printed, before it exited: stopped with its group
		}
		if st.State != want {
			t.Errorf("%s ended %s, want %s", st.Name, st.State, want)
		}
	}
}
