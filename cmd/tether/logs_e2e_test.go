package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/agent"
)

// Issue 34: tether logs prints both streams, merged in the order their
// lines were read; --stdout and --stderr pick one; -n is the last lines of
// the merge; --timestamps, --since and --until go by each line's time.
func TestLogs_BothStreamsMergedInTimeOrder(t *testing.T) {
	e := newEnv(t)
	e.must("run", "--name", "x", "--", "/bin/sh", "-c",
		`echo 1 out; sleep 0.05; echo 2 err >&2; sleep 0.05; echo 3 out; sleep 0.05; printf '4 err, not ended' >&2`, "sh", e.dir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "1 out\n2 err\n3 out\n4 err, not ended\n"},
		{[]string{"--stdout"}, "1 out\n3 out\n"},
		{[]string{"--stderr"}, "2 err\n4 err, not ended\n"},
		{[]string{"--stdout", "--stderr"}, "1 out\n2 err\n3 out\n4 err, not ended\n"},
		{[]string{"-n", "2"}, "3 out\n4 err, not ended\n"},
		{[]string{"-n", "0"}, ""},
		{[]string{"--since", "1h"}, "1 out\n2 err\n3 out\n4 err, not ended\n"},
		{[]string{"--until", "1h"}, ""},
		{[]string{"--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, ""},
	} {
		r := e.must(append([]string{"logs", "x"}, c.args...)...)
		if r.stdout != c.want {
			t.Errorf("logs x %v:\n%q\nwant\n%q", c.args, r.stdout, c.want)
		}
	}
	r := e.must("logs", "x", "--timestamps")
	stamped := regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)) (\d) `)
	var last time.Time
	for i, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := stamped.FindStringSubmatch(l)
		if m == nil || m[3] != string(rune('1'+i)) {
			t.Fatalf("line %d of logs --timestamps: %q\n%s", i, l, r)
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", m[1])
		if err != nil || at.Before(last) || time.Since(at) > time.Hour {
			t.Fatalf("line %q: time %v (%v), after %v", l, at, err, last)
		}
		last = at
	}
	if r := e.tether("logs", "x", "--since", "yesterday"); r.code != exitUsage || !strings.Contains(r.stderr, "RFC 3339") {
		t.Errorf("--since yesterday: want a usage error naming the forms\n%s", r)
	}
}

// The logs of a job (every task of it) or of several names: each line
// prefixed by its task's name, followed (-f) as printed.
func TestLogs_SeveralTasksEachLinePrefixed(t *testing.T) {
	e := newEnv(t)
	e.must("start", "--min-uptime", "0", twoGroupJob(t, e))
	want := []string{"server: helper up", "server: helper stderr", "pg: helper up", "pg: helper stderr"}
	// Follow until every line is in (the tasks write them once started).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := e.command(ctx, nil, "logs", "-f", "app")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(out)
	for len(seen) < len(want) && sc.Scan() {
		if slices.Contains(want, sc.Text()) {
			seen[sc.Text()] = true
		}
	}
	if err := follow.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	if err := follow.Wait(); err != nil || len(seen) != len(want) {
		t.Fatalf("logs -f app: saw %v of %v (%v)", seen, want, err)
	}
	for _, args := range [][]string{{"app"}, {"server", "pg"}, {"app.web", "app.db"}} {
		r := e.must(append([]string{"logs"}, args...)...)
		for _, w := range want {
			if !strings.Contains(r.stdout, w+"\n") {
				t.Errorf("logs %v: no line %q\n%s", args, w, r)
			}
		}
	}
	if r := e.must("logs", "server"); r.stdout != "helper stderr\nhelper up\n" && r.stdout != "helper up\nhelper stderr\n" {
		t.Errorf("logs of one task: its lines without a prefix\n%s", r)
	}
	e.must("stop", "app")
}

// -f follows a desired service's name through the agent: its executor and
// task killed, the agent starts a new task for it (not linked to the lost
// one: its desired entry names it), and logs -f says so and goes on with
// it; once the service's file is removed (the entry gone, its task
// stopped) logs -f ends by itself.
func TestLogs_FollowsADesiredServiceAcrossTheAgentsRestart(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := e.command(ctx, nil, "logs", "-f", "--stdout", "svc")
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	follow.Stderr = &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "helper up" {
		t.Fatalf("logs -f svc: first line %q, %v", lines.Text(), lines.Err())
	}
	info, err := c.InspectTask(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(info.Executor.PID, syscall.SIGKILL)
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	second := awaitEntry(t, c, "svc", "back", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	if !lines.Scan() || lines.Text() != "helper up" {
		t.Fatalf("logs -f svc after the restart: %q, %v\nstderr:\n%s", lines.Text(), lines.Err(), stderr.String())
	}
	if err := os.Remove(filepath.Join(dir, "svc.hcl")); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		t.Errorf("logs -f printed more: %q", lines.Text())
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f once the service is gone: %v\nstderr:\n%s", err, stderr.String())
	}
	if want := "following " + second.Task; !strings.Contains(stderr.String(), want) {
		t.Fatalf("logs -f did not say %q:\n%s", want, stderr.String())
	}
}

// A Ctrl-C ends `logs -f` with 0 from its first line on: while it still
// prints the history (here blocked on a full pipe, 30,000 lines behind),
// not only once it follows.
func TestLogs_FollowEndsOnCtrlCDuringTheHistory(t *testing.T) {
	e := newEnv(t)
	e.must("run", "--name", "x", "--", "/bin/sh", "-c", "seq 1 30000", "sh", e.dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, "logs", "-f", "x")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || first != "1\n" {
		t.Fatalf("first line %q, %v", first, err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("logs -f after a Ctrl-C during its history: %v, want exit 0", err)
	}
}

// logs -f of a task that waits for its turn in its group (recorded, not
// started: its prestart task runs) follows it until it starts, then
// streams its output until it ends.
func TestLogs_FollowOfAWaitingTaskStreamsOnceItStarts(t *testing.T) {
	e := newEnv(t)
	notes := newTermNotes(t)
	gate := filepath.Join(t.TempDir(), "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, t.TempDir(), "waits.nomad", fmt.Sprintf(`job "waits" {
  group "g" {
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "setup" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo up > \"$1\"; cat \"$2\" > /dev/null", "sh", %q, %q, %q]
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello-main; echo oops-main >&2", "sh", %q]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
`, notes.path, gate, e.dir, e.dir))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := e.command(ctx, nil, "start", "--min-uptime", "0", file)
	if err := start.Start(); err != nil {
		t.Fatal(err)
	}
	if s := notes.next(); s != "up\n" {
		t.Fatalf("the prestart task did not start: %q", s)
	}
	var main string
	for _, st := range e.status("--all") {
		if st.Name == "main" {
			if st.State != "created" {
				t.Fatalf("main is %s while its prestart task runs, want created", st.State)
			}
			main = st.ID
		}
	}
	// Its debug line says when it waits (the gate opens only then: a task
	// that started first would not test the wait).
	logs := e.command(ctx, nil, "--log-level", "debug", "logs", "-f", main)
	var out strings.Builder
	logs.Stdout = &out
	errPipe, err := logs.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	stderrDone := make(chan struct{})
	var stderr strings.Builder
	go func() {
		defer close(stderrDone)
		sc := bufio.NewScanner(errPipe)
		said := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "waits for its turn") {
				said = true
				close(waiting)
			}
		}
	}()
	select {
	case <-waiting:
	case <-stderrDone:
		t.Fatalf("logs -f of a waiting task ended before the task started:\n%s\n%s", out.String(), stderr.String())
	case <-ctx.Done():
		t.Fatal("logs -f never said it waits for the task's turn")
	}
	if err := os.WriteFile(gate, nil, 0); err != nil { // the prestart task ends: main starts
		t.Fatal(err)
	}
	<-stderrDone // the pipe ends with the process
	if code := exitOf(t, logs, "tether logs -f of a waiting task"); code != 0 {
		t.Fatalf("logs -f: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "hello-main") || !strings.Contains(out.String(), "oops-main") {
		t.Fatalf("logs -f of a task that waited did not stream its output once it started:\n%s", out.String())
	}
	_ = exitOf(t, start, "tether start")
}
