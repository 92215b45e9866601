package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// previousRelease is the commit whose tether is upgraded in place: the
// last one before the executor's protocol 6 and the store's record
// version 3.
const previousRelease = "77d2062"

// buildPrevious builds tether as it was at previousRelease (from this
// repository's history, into a temporary directory), static as make build
// makes it. It skips where the history is not here: no git, not a clone,
// or a clone without that commit (a shallow one).
func buildPrevious(t *testing.T) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("upgrade test: no git to take tether %s from its history: %v", previousRelease, err)
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil || len(bytes.TrimSpace(top)) == 0 {
		t.Skipf("upgrade test: not in a git clone of tether, so tether %s cannot be built: %v", previousRelease, err)
	}
	if err := exec.Command(git, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		t.Skipf("upgrade test: commit %s is not in this clone's history (a shallow clone?): %v", previousRelease, err)
	}
	src := filepath.Join(t.TempDir(), "src")
	archive := exec.Command(git, "archive", "--format=tar", previousRelease)
	archive.Dir = string(bytes.TrimSpace(top)) // in a subdirectory, git archive takes that subtree alone
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	out, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, stderr.String())
	}
	untar(t, out, src)
	bin := filepath.Join(t.TempDir(), "tether-"+previousRelease)
	build := exec.Command("go", "build", "-o", bin, "./cmd/tether")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tether %s: %v\n%s", previousRelease, err, out)
	}
	return bin
}

// untar extracts a tar archive of regular files and directories into dir.
func untar(t *testing.T, b []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
}

// TestUpgrade_PreviousReleasesTasksLiveOn: a state directory written by
// the previous release (tether 77d2062: protocol 5, record version 2),
// with live tasks, keeps working with this tether: it lists them, follows
// one to its end (a watch of an executor that speaks protocol 5, its end
// collected and its cgroup killed by this driver, since such an executor
// does not say it emptied it), stops the others, and recovers: one whose
// start the previous release crashed in is ended (its executor killed by
// identity), the running ones reattached; then the store checks clean,
// old records and new beside each other, and nothing is left alive.
func TestUpgrade_PreviousReleasesTasksLiveOn(t *testing.T) {
	needTaskCgroups(t)
	old := buildPrevious(t)
	e := newDaemonlessEnv(t, "the previous release has no agent: the upgrade in place is of a daemonless state directory")
	run := func(bin string, extra []string, args ...string) result {
		t.Helper()
		saved := tetherBin
		tetherBin = bin
		defer func() { tetherBin = saved }()
		return e.tetherEnv(extra, args...)
	}
	oldStart := func(mode ...string) string {
		t.Helper()
		r := run(old, nil, e.runArgs("start", nil, mode...)...)
		if r.code != 0 {
			t.Fatalf("tether %s start: %s", previousRelease, r)
		}
		return strings.TrimSpace(r.stdout)
	}

	// The previous release starts three tasks and crashes in a fourth's
	// start, after its executor is up.
	sleeper := oldStart("sleep")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader := oldStart("fiforead", fifo)
	survivor := oldStart("sleep")
	saved := tetherBin
	tetherBin = old
	crash := e.command(context.Background(), []string{"TETHER_CRASHPOINT=after-append:executor-up"},
		e.runArgs("start", []string{"--name", "crashed"}, "sleep")...)
	tetherBin = saved
	if out, err := crash.CombinedOutput(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("tether %s did not crash at after-append:executor-up: %v\n%s", previousRelease, err, out)
	}

	// This tether recovers: the crashed start is ended (its executor killed
	// by proven identity, whichever way it was found), the running tasks
	// reattached, their executors speaking the previous protocol.
	rec := e.tether("recover")
	if rec.code != 0 {
		t.Fatalf("tether recover: %s", rec)
	}
	reattached := 0
	var crashed bool
	for _, line := range strings.Split(rec.stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "crashed-") && (strings.Contains(line, "-> failed") || strings.Contains(line, "-> lost")):
			crashed = true
		case strings.Contains(line, "running -> running") && strings.Contains(line, "reattached"):
			reattached++
		}
	}
	if !crashed || reattached != 3 {
		t.Errorf("tether recover over the previous release's tasks (want the crashed start ended, 3 running tasks reattached):\n%s", rec)
	}

	// It lists them, with their executors alive.
	byID := map[string]taskStatus{}
	for _, s := range e.status("--all") {
		byID[s.ID] = s
	}
	for _, id := range []string{sleeper, reader, survivor} {
		if s := byID[id]; s.State != "running" || !s.ExecutorAlive {
			t.Errorf("task %s of the previous release listed as %+v, want running with its executor alive", id, s)
		}
	}
	if r := e.must("logs", sleeper); !strings.Contains(r.stdout, "helper up") {
		t.Errorf("logs of a task of the previous release: %s", r)
	}

	// It execs into one (its executor takes the command's stdio with the
	// request): the command gets pipes of this tether's making, never the
	// caller's file.
	victim := writeFile(t, t.TempDir(), "stdin.txt", "through a pipe\n")
	in, err := os.Open(victim)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	xc := e.command(context.Background(), nil, "exec", sleeper, "--", "sh", "-c", "cat; readlink /proc/self/fd/0")
	xc.Stdin = in
	xout, err := xc.Output()
	if err != nil {
		t.Fatalf("tether exec into a task of the previous release: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(string(xout)), "\n"); len(lines) != 2 || lines[0] != "through a pipe" || !strings.HasPrefix(lines[1], "pipe:") {
		t.Errorf("tether exec into a task of the previous release printed %q, want stdin's line and a pipe as its fd 0", xout)
	}

	// It follows one to its end: wait returns the task's own exit code.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := e.command(ctx, nil, "wait", reader)
	var wout bytes.Buffer
	wait.Stdout, wait.Stderr = &wout, &wout
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fifo, []byte("from the new tether\n"), 0); err != nil {
		t.Fatal(err)
	}
	err = wait.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("tether wait on a task of the previous release: %v, want exit 7\n%s", err, wout.String())
	}

	// It stops the others.
	for _, id := range []string{sleeper, survivor} {
		if r := e.must("stop", id); !strings.Contains(r.stdout, "stopped") {
			t.Errorf("tether stop of a task of the previous release: %s", r)
		}
	}
	ended := map[string]bool{"exited": true, "stopped": true, "failed": true, "lost": true}
	for _, s := range e.status("--all") {
		if !ended[s.State] {
			t.Errorf("task %s left %s", s.ID, s.State)
		}
	}
	if r := e.tether("check"); r.code != 0 {
		t.Errorf("tether check of a store both tethers wrote: %s", r)
	}
}
