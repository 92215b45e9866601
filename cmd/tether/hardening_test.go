package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// parallel runs n tether commands at once and returns their results in
// order.
func (e *env) parallel(n int, args func(i int) []string) []result {
	e.t.Helper()
	out := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := e.command(ctx, nil, args(i)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			out[i] = result{stdout: stdout.String(), stderr: stderr.String()}
			if ee, ok := err.(*exec.ExitError); ok {
				out[i].code = ee.ExitCode()
			} else if err != nil {
				out[i].code = -1
				out[i].stderr += err.Error()
			}
		})
	}
	wg.Wait()
	return out
}

// checkStore runs tether check and fails on any problem.
func (e *env) checkStore() {
	e.t.Helper()
	r := e.must("check")
	if !strings.Contains(r.stdout, " 0 problems") {
		e.t.Fatalf("check: %s", r)
	}
}

// Issue 10: 200 `tether start` at once on one store, then 200 `tether
// stop` at once: every one succeeds within the default lock timeout (no
// command holds the store across a spawn, a launch, a grace or a wait),
// nothing is left running, and the store is clean.
func TestParallel_200StartsThen200Stops(t *testing.T) {
	const n = 200
	e := newEnv(t)
	starts := e.parallel(n, func(i int) []string {
		return e.runArgs("start", []string{"--name", fmt.Sprintf("p%03d", i)}, "sleep")
	})
	ids := make([]string, n)
	for i, r := range starts {
		if r.code != 0 {
			t.Fatalf("start %d of %d: %s", i, n, r)
		}
		ids[i] = strings.TrimSpace(r.stdout)
	}
	for _, s := range e.status() {
		if s.State != "running" || !testproc.Alive(s.PID) || !testproc.Alive(s.ExecutorPID) {
			t.Fatalf("after %d parallel starts: %+v", n, s)
		}
	}
	stops := e.parallel(n, func(i int) []string { return []string{"stop", "--timeout", "5s", ids[i]} })
	for i, r := range stops {
		if r.code != 0 || !strings.Contains(r.stdout, "stopped") {
			t.Fatalf("stop %s: %s", ids[i], r)
		}
	}
	if live := e.status(); len(live) != 0 {
		t.Fatalf("%d tasks still live after the stops: %+v", len(live), live)
	}
	if left := testproc.Marked(e.dir); len(left) > 0 {
		t.Fatalf("%d processes left after the stops, e.g. %v", len(left), left[0])
	}
	e.checkStore()
}

// Issue 11, item 1: gc (which compacts the store and renames the new file
// over the old) in a loop beside parallel starts and stops loses no
// acknowledged start and leaks nothing.
func TestGC_BesideParallelStartsAndStopsLosesNothing(t *testing.T) {
	const n = 30
	e := newEnv(t)
	e.must("run", "--", "/bin/true") // something for gc to remove
	stop := make(chan struct{})
	var gcs sync.WaitGroup
	gcs.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r := e.tether("gc"); r.code != 0 {
				t.Errorf("gc: %s", r)
				return
			}
		}
	})
	starts := e.parallel(n, func(i int) []string { return e.runArgs("start", nil, "sleep") })
	var ids []string
	for _, r := range starts {
		if r.code != 0 {
			t.Errorf("start beside gc: %s", r)
			continue
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	// Every acknowledged start is in the store (gc removes only ended
	// tasks), running.
	for _, id := range ids {
		if st := e.status(id); len(st) != 1 || st[0].State != "running" {
			t.Errorf("started task %s: %+v", id, st)
		}
	}
	stops := e.parallel(len(ids), func(i int) []string { return []string{"stop", "--timeout", "5s", ids[i]} })
	close(stop)
	gcs.Wait()
	for i, r := range stops {
		if r.code != 0 {
			t.Errorf("stop %s beside gc: %s", ids[i], r)
		}
	}
	if left := testproc.Marked(e.dir); len(left) > 0 {
		t.Fatalf("%d processes left, e.g. %v", len(left), left[0])
	}
	e.checkStore()
}

// Issue 11, item 3: one stopped (SIGSTOP) executor makes only its own task
// unreachable: the other commands and the other tasks work, in bounded
// time, and the frozen one can still be stopped (killed by identity).
func TestFrozenExecutor_WedgesOnlyItsOwnTask(t *testing.T) {
	e := newEnv(t)
	frozen := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "frozen"}, "sleep")...).stdout)
	other := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "other"}, "sleep")...).stdout)
	st := e.status(frozen)[0]
	if err := syscall.Kill(st.ExecutorPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(st.ExecutorPID, syscall.SIGCONT) })
	if s := e.status(frozen)[0]; s.State != "running" {
		t.Fatalf("status of the frozen task: %+v", s)
	}
	e.must("events", frozen)
	e.must("status")
	e.must("run", "--", "/bin/true")
	third := strings.TrimSpace(e.must(e.runArgs("start", nil, "sleep")...).stdout)
	e.must("stop", other)
	e.must("stop", third)
	// The frozen executor does not answer its Stop; it is killed by its
	// identity after the probe's deadline, and the task recorded stopped.
	r := e.must("stop", "--timeout", "1s", frozen)
	if !strings.Contains(r.stdout, "stopped") || testproc.Alive(st.PID) || testproc.Alive(st.ExecutorPID) {
		t.Fatalf("stop of the frozen task: %s (task alive %v, executor alive %v)", r, testproc.Alive(st.PID), testproc.Alive(st.ExecutorPID))
	}
	e.checkStore()
}

// Issue 11, item 4: a stop interrupted during its grace leaves the grace
// with it: later commands do not sit it out (status answers at once), and
// a new stop's --timeout overrides the recorded one (kill_timeout 999999h
// here) and ends the task.
func TestInterruptedStop_GraceBelongsToTheStopThatAskedForIt(t *testing.T) {
	e := newEnv(t)
	fifo := filepath.Join(t.TempDir(), "sigterm")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	up := make(chan []byte, 1)
	go func() { b, _ := os.ReadFile(fifo); up <- b }()
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--kill-timeout", "999999h"}, "ignore-term", fifo)...).stdout)
	if b := <-up; string(b) != "up\n" {
		t.Fatalf("the task did not report its SIGTERM handler: %q", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopper := e.command(ctx, nil, "stop", id)
	if err := stopper.Start(); err != nil {
		t.Fatal(err)
	}
	// The task got the stop's SIGTERM (and ignores it): the stop is now in
	// its grace. Kill it there.
	if b, err := os.ReadFile(fifo); err != nil || !strings.Contains(string(b), "SIGTERM") {
		t.Fatalf("reading the task's SIGTERM note: %q %v", b, err)
	}
	if err := stopper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = stopper.Wait()
	if s := e.status(id); len(s) != 1 || s[0].State != "reaping" {
		t.Fatalf("status after the interrupted stop: %+v", s)
	}
	r := e.must("stop", "--timeout", "1s", id)
	if !strings.Contains(r.stdout, "stopped") {
		t.Fatalf("second stop: %s", r)
	}
	if left := testproc.Marked(e.dir); len(left) > 0 {
		t.Fatalf("left after the second stop: %v", left)
	}
	e.checkStore()
}

// Issue 11, item 6: a state directory that is shared (here 1777, as /tmp)
// is refused with a clear error by every command, and never chmodded.
func TestStateDir_SharedIsRefusedNeverChmodded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir}
	for _, args := range [][]string{{"status"}, {"run", "--", "/bin/true"}, {"recover"}} {
		r := e.tether(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "must be private") {
			t.Errorf("tether %v on a 1777 state dir: %s", args, r)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
		t.Fatalf("mode after the commands: %v %v; want drwxrwxrwt unchanged", fi.Mode(), err)
	}
	if r := (&env{t: t, dir: ""}).tether("status"); r.code != exitUsage || !strings.Contains(r.stderr, "--state-dir is empty") {
		t.Errorf(`--state-dir "": %s`, r)
	}
}

// Issue 11, item 8: bad input is refused before anything is spawned, with
// an error that says what is wrong; names with control characters are not
// printed raw; run's own failures exit 125.
func TestBadInput_RefusedBeforeSpawnClearly(t *testing.T) {
	e := newEnv(t)
	// A 900 KB argument (from a task file, within the parse limits on a
	// file's size: execve refuses one that long on a command line).
	huge := writeFile(t, t.TempDir(), "huge.hcl", fmt.Sprintf("task \"huge\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"/bin/echo\"\n    args = [%q]\n  }\n}\n", strings.Repeat("x", 900<<10)))
	began := time.Now()
	r := e.tether("run", huge)
	if r.code != exitStartFail || !strings.Contains(r.stderr, "argument 1 is") || !strings.Contains(r.stderr, "at most") {
		t.Errorf("a 900 KB argument: exit %d, stderr %.500s", r.code, r.stderr)
	}
	t.Logf("a 900 KB argument refused in %s", time.Since(began).Round(time.Millisecond))
	nul := writeFile(t, t.TempDir(), "nul.hcl", "task \"nul\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  env { K = \"a\\u0000b\" }\n}\n")
	if r := e.tether("run", nul); r.code != exitStartFail || !strings.Contains(r.stderr, "NUL") {
		t.Errorf("NUL in env: %s", r)
	}
	if fi, err := os.Stat(e.dir + "/tether.db"); err == nil && fi.Size() > 1<<20 {
		t.Errorf("the refused specs grew the store to %d bytes", fi.Size())
	}
	for _, st := range e.status("--all") {
		if st.State != "failed" {
			t.Errorf("a refused spec's task is %s, want failed (nothing spawned): %+v", st.State, st)
		}
	}
	// A name with an escape sequence is shown escaped.
	e.must("run", "--name", "evil\x1b[31mred", "--", "/bin/true")
	if r := e.must("status", "--all"); strings.Contains(r.stdout, "\x1b") {
		t.Errorf("status printed a raw escape sequence:\n%q", r.stdout)
	}
	// A store that cannot be opened is tether's own failure: 125.
	bad := &env{t: t, dir: filepath.Join(t.TempDir(), "missing-parent", "x")}
	if err := os.WriteFile(filepath.Dir(bad.dir), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := bad.tether("run", "--", "/bin/true"); r.code != exitStartFail {
		t.Errorf("run with an unusable state dir: %s, want exit %d", r, exitStartFail)
	}
}

// Issue 11, item 8: tether logs does not follow a symlink planted as a
// task's stdout.log out of the state directory.
func TestLogs_DoesNotFollowAPlantedSymlink(t *testing.T) {
	e := newEnv(t)
	r := e.must("run", "-v", "--name", "sym", "--", "/bin/true")
	id := taskID(t, r.stderr)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("TOP SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "tasks", id, stdoutFile)
	_ = os.Remove(out)
	if err := os.Symlink(secret, out); err != nil {
		t.Fatal(err)
	}
	if r := e.tether("logs", id); strings.Contains(r.stdout, "TOP SECRET") {
		t.Fatalf("tether logs followed a symlink out of the state directory: %s", r)
	}
}

// damageRecord flips a byte of one record of a task's log in the store
// file, as a bad sector would (the checksum no longer matches).
func damageRecord(t *testing.T, dbPath, id string, seq uint64) {
	t.Helper()
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := binary.BigEndian.AppendUint64(nil, seq)
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("tasks")).Bucket([]byte(id))
		v := bytes.Clone(b.Get(key))
		if v == nil {
			return fmt.Errorf("task %s has no record %d", id, seq)
		}
		v[len(v)/2] ^= 0xff
		return b.Put(key, v)
	}); err != nil {
		t.Fatal(err)
	}
}

// Issue 11, item 5: a damaged record is named by check (task and
// sequence, exit 1); status lists every readable task and marks the
// unreadable one; check --salvage copies the readable tasks into a new
// store, kills the processes of the live task it cannot keep (by the
// identity its readable prefix proves), keeps the damaged file, and the
// surviving task stays under control.
func TestSalvage_DamagedStoreKeepsRunningTasksUnderControl(t *testing.T) {
	e := newEnv(t)
	hurt := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "hurt"}, "sleep")...).stdout)
	fine := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "fine"}, "sleep")...).stdout)
	hurtSt := e.status(hurt)[0]
	// Record 5 is the launch: the prefix before it names the executor.
	// (Under an agent, the damage is done with the agent stopped, as a bad
	// sector is found by the next open; the next agent serves the
	// damaged store, and check and the salvage run in it.)
	e.offline(func() { damageRecord(t, filepath.Join(e.dir, "tether.db"), hurt, 5) })

	r := e.tether("check")
	if r.code != exitError || !strings.Contains(r.stdout, fmt.Sprintf("task %q seq 5", hurt)) {
		t.Fatalf("check of a damaged store: %s", r)
	}
	r = e.tether("status")
	if r.code != exitOK || !strings.Contains(r.stdout, fine) || !strings.Contains(r.stderr, hurt) || !strings.Contains(r.stderr, "cannot be read") {
		t.Fatalf("status of a damaged store must list %s and mark %s: %s", fine, hurt, r)
	}
	r = e.tether("check", "--salvage")
	if r.code != exitOK || !strings.Contains(r.stdout, "copied 1 tasks") || !strings.Contains(r.stdout, "killed by proven identity") {
		t.Fatalf("salvage: %s", r)
	}
	if testproc.Alive(hurtSt.ExecutorPID) || testproc.Alive(hurtSt.PID) {
		t.Fatalf("the lost task's processes live on after the salvage (executor %v, task %v)", testproc.Alive(hurtSt.ExecutorPID), testproc.Alive(hurtSt.PID))
	}
	if damaged, _ := filepath.Glob(filepath.Join(e.dir, "tether.db.damaged-*")); len(damaged) != 1 {
		t.Fatalf("the damaged store was not kept: %v", damaged)
	}
	e.checkStore()
	if s := e.status(fine); len(s) != 1 || s[0].State != "running" || !testproc.Alive(s[0].PID) {
		t.Fatalf("the readable task after the salvage: %+v", s)
	}
	e.must("stop", fine)
	// gc removes the lost task's directory, which the new store does not
	// know and no live process uses.
	if r := e.must("gc"); !strings.Contains(r.stdout, hurt) {
		t.Fatalf("gc kept the orphaned directory of %s: %s", hurt, r)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "tasks", hurt)); !os.IsNotExist(err) {
		t.Fatalf("task directory of %s after gc: %v", hurt, err)
	}
}
