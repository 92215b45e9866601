package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/internal/testproc"
)

// Maintenance beside commands (issue 27): a maintenance that reads the
// store and then writes it (check --salvage, gc) loses nothing another
// command had acknowledged. Each test holds the maintenance at one of its
// named points (TETHER_PAUSEPOINT: the process stops itself there) while
// 25 `tether start`s run, and lets it go on only once every start has
// either finished or is waiting for the store's lock.

// paused is a tether command that stopped itself at a pause point.
type paused struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startPaused starts a tether command with TETHER_PAUSEPOINT=point.
func (e *env) startPaused(ctx context.Context, point string, args ...string) *paused {
	e.t.Helper()
	p := &paused{cmd: e.command(ctx, []string{driver.EnvPausePoint + "=" + point}, args...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// waitStopped waits until the command has stopped itself at its point (a
// waitid for the stop, leaving it waitable), and fails if it exits
// instead.
func (p *paused) waitStopped(t *testing.T) {
	t.Helper()
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("waiting for tether %v to reach its pause point: %v", p.cmd.Args, err)
		}
		break
	}
	const cldStopped = 5 // si_code of a child stopped by a signal
	if info.Code != cldStopped {
		_ = p.cmd.Wait()
		t.Fatalf("tether %v ended before its pause point (si_code %d):\nstdout:\n%s\nstderr:\n%s", p.cmd.Args, info.Code, &p.stdout, &p.stderr)
	}
}

// resume continues the command and waits for its end.
func (p *paused) resume(t *testing.T) result {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := p.cmd.Wait()
	r := result{stdout: p.stdout.String(), stderr: p.stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("tether %v: %v\n%s", p.cmd.Args, err, r)
	}
	return r
}

// lockWaiters counts the processes blocked on the store's lock.
func (e *env) lockWaiters() int { return len(e.waitersOn("tether.db.lock")) }

// waitersOn lists the pids blocked on a flock of the file name in the
// state directory (the kernel's lock table lists each waiter with "->").
func (e *env) waitersOn(name string) map[string]bool {
	e.t.Helper()
	st, err := os.Stat(filepath.Join(e.dir, name))
	if err != nil {
		return nil
	}
	ino := ":" + strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		e.t.Fatal(err)
	}
	pids := map[string]bool{} // a waiter may be listed under more than one lock it waits behind
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 6 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], ino) {
			pids[f[5]] = true
		}
	}
	return pids
}

// startsBeside runs n `tether start`s of a sleeping helper and, once the
// first of them has finished (the others are then at their first, second
// or third commit), the maintenance that begin starts, paused at its
// point: once every start has either finished or waits for the store's
// lock, the maintenance goes on. It returns the starts' results and the
// maintenance's.
func (e *env) startsBeside(n int, begin func(ctx context.Context) *paused) ([]result, result) {
	e.t.Helper()
	out := make([]result, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	first := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range n {
		cmd := e.command(ctx, nil, e.runArgs("start", []string{"--name", fmt.Sprintf("s%02d", i)}, "sleep")...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			e.t.Fatal(err)
		}
		wg.Go(func() {
			err := cmd.Wait()
			r := result{stdout: stdout.String(), stderr: stderr.String()}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				r.code = ee.ExitCode()
			} else if err != nil {
				r.code, r.stderr = -1, r.stderr+err.Error()
			}
			mu.Lock()
			out[i] = r
			if done++; done == 1 {
				close(first)
			}
			mu.Unlock()
		})
	}
	select {
	case <-first:
	case <-ctx.Done():
		e.t.Fatal("no start finished")
	}
	maintenance := begin(ctx)
	maintenance.waitStopped(e.t)
	// Every start has either finished or is blocked on the lock that the
	// paused maintenance holds (or would take next, on a build that let
	// go of it): nothing but the maintenance can move now. The kernel's
	// lock table gives no wake-up, so it is read until that holds.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		d := done
		mu.Unlock()
		if d+e.lockWaiters() >= n {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			e.t.Fatalf("the starts neither finished nor waited for the lock: %d of %d done, %d waiting", d, n, e.lockWaiters())
		}
	}
	mu.Lock()
	e.t.Logf("maintenance paused: %d starts done, %d waiting for the store", done, n-done)
	mu.Unlock()
	m := maintenance.resume(e.t)
	wg.Wait()
	return out, m
}

// checkStartsKept requires every start that printed an id to be in the
// store, running, and stoppable; then nothing of any task may be left.
func (e *env) checkStartsKept(starts []result) {
	e.t.Helper()
	listed := map[string]string{}
	for _, s := range e.statusAll() {
		listed[s.ID] = s.State
	}
	var ids []string
	for i, r := range starts {
		if r.code != 0 {
			// Refused before it acknowledged: it must say why, and must
			// not claim a recovery that cannot happen.
			e.t.Logf("start %d failed (allowed, before it acknowledged): %s", i, r)
			if strings.Contains(r.stderr, "Recover will reconcile") {
				e.t.Errorf("start %d says Recover will reconcile a task: %s", i, r)
			}
			continue
		}
		id := strings.TrimSpace(r.stdout)
		ids = append(ids, id)
		if state, ok := listed[id]; !ok || state != "running" {
			e.t.Errorf("start %d acknowledged %s; the store lists it as %q (listed: %v)", i, id, state, ok)
		}
	}
	if len(ids) == 0 {
		e.t.Fatalf("no start succeeded beside the maintenance")
	}
	stops := e.parallel(len(ids), func(i int) []string { return []string{"stop", "--timeout", "5s", ids[i]} })
	for i, r := range stops {
		if r.code != 0 || !strings.Contains(r.stdout, "stopped") {
			e.t.Errorf("stop of acknowledged task %s: %s", ids[i], r)
		}
	}
	e.must("stop", "--timeout", "5s", "pre")
	if live := e.status(); len(live) != 0 {
		e.t.Errorf("%d tasks still live after the stops: %+v", len(live), live)
	}
	for _, p := range testproc.Marked(e.dir) {
		if testproc.Alive(p.PID) {
			e.t.Errorf("left after every acknowledged task was stopped: %s", p)
		}
	}
	e.checkStore()
}

// statusAll lists every task in the store.
func (e *env) statusAll() []taskStatus { return e.status("--all") }

// TestSalvage_BesideConcurrentStartsLosesNothing: check --salvage held
// after its copy is written (salvage:copied) while 25 starts run. Before
// the fix the salvage read the store under a shared lock, let it go, and
// later renamed its copy over the store: the starts acknowledged in
// between were gone (status did not list them, stop said unknown task,
// their executors ran on). Now the salvage holds the store from its read
// to its install: a start either commits before the read (and is copied)
// or after the install (into the new store).
func TestSalvage_BesideConcurrentStartsLosesNothing(t *testing.T) {
	e := newDaemonlessEnv(t, "a maintenance held at a crash point or beside concurrent daemonless commands on the store's file lock (an agent holds the store: its maintenance pauses its own requests)")
	e.must(e.runArgs("start", []string{"--name", "pre"}, "sleep")...)
	starts, sr := e.startsBeside(25, func(ctx context.Context) *paused {
		return e.startPaused(ctx, "salvage:copied", "check", "--salvage")
	})
	if sr.code != exitOK || !strings.Contains(sr.stdout, "the salvaged store is in place") {
		t.Fatalf("salvage beside the starts: %s", sr)
	}
	e.checkStartsKept(starts)
}

// TestGC_HeldAtEachStepBesideConcurrentStartsLosesNothing: gc held at
// each of its durable steps (its removal committed, its compacted copy
// written, renamed into place) while 25 starts run: every acknowledged
// start is listed, running and stoppable afterwards.
func TestGC_HeldAtEachStepBesideConcurrentStartsLosesNothing(t *testing.T) {
	for _, point := range []string{"remove:committed", "compact:copied", "compact:renamed"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			e := newDaemonlessEnv(t, "a maintenance held at a crash point or beside concurrent daemonless commands on the store's file lock (an agent holds the store: its maintenance pauses its own requests)")
			e.must("run", "--", "/bin/true") // an ended task for gc to remove
			e.must(e.runArgs("start", []string{"--name", "pre"}, "sleep")...)
			starts, gr := e.startsBeside(25, func(ctx context.Context) *paused {
				return e.startPaused(ctx, point, "gc")
			})
			if gr.code != exitOK || !strings.Contains(gr.stdout, "store compacted") {
				t.Fatalf("gc beside the starts: %s", gr)
			}
			e.checkStartsKept(starts)
		})
	}
}

// TestRecover_TwoAtOnceTheSecondWaitsAndSaysWhy: a recover held after it
// recorded a task lost and before its kill (before-effect:kill-executor),
// and a second recover: the second says which process is recovering the
// state directory, waits for it (rather than leave the tasks "being
// driven" by it, or say there is nothing to recover while the first is at
// work), and says what became of the tasks once it is done. Before, the
// second returned at once.
func TestRecover_TwoAtOnceTheSecondWaitsAndSaysWhy(t *testing.T) {
	e := newDaemonlessEnv(t, "two daemonless recoveries at once, one held at a crash point in its own process")
	var execs []int
	for i := range 3 {
		e.must(e.runArgs("start", []string{"--name", fmt.Sprintf("r%d", i)}, "sleep")...)
	}
	for _, s := range e.status() {
		execs = append(execs, s.ExecutorPID)
	}
	for _, pid := range execs {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitExit(t, pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := e.startPaused(ctx, "before-effect:kill-executor", "recover")
	first.waitStopped(t)

	second := e.command(ctx, nil, "recover")
	var out, errb bytes.Buffer
	second.Stdout, second.Stderr = &out, &errb
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- second.Wait() }()
	pid := strconv.Itoa(second.Process.Pid)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !e.waitersOn("recover.lock")[pid] {
		select {
		case err := <-ended:
			_ = first.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("the second recover returned while the first was at work (%v):\nstdout:\n%s\nstderr:\n%s\nstatus: %+v", err, &out, &errb, e.status())
		case <-tick.C:
		}
	}
	r1 := first.resume(t)
	if r1.code != exitOK {
		t.Fatalf("first recover: %s", r1)
	}
	if err := <-ended; err != nil {
		t.Fatalf("second recover: %v\n%s\n%s", err, &out, &errb)
	}
	firstPID := fmt.Sprintf("process %d (tether", first.cmd.Process.Pid)
	if !strings.Contains(errb.String(), firstPID) || !strings.Contains(errb.String(), "recovering this state directory") {
		t.Errorf("the second recover does not say the first is recovering: %s", &errb)
	}
	if !strings.Contains(out.String(), "no live tasks left") || !strings.Contains(out.String(), firstPID) {
		t.Errorf("the second recover does not say the first recovered the tasks: %s", &out)
	}
	for _, s := range e.statusAll() {
		if s.State != "lost" {
			t.Errorf("task %s is %s after both recovers, want lost", s.ID, s.State)
		}
	}
}

// TestSalvage_ExitsOneWhenNotAllDone: a live task whose log is damaged
// from its spawn intent on, whose head is damaged too, and whose
// executor's directory is gone (moved aside), cannot be proven to own any
// process: the salvage puts the readable store in place and says the
// task's processes were NOT killed, and exits 1 (a salvage that reported
// something not done exited 0).
func TestSalvage_ExitsOneWhenNotAllDone(t *testing.T) {
	e := newDaemonlessEnv(t, "a maintenance held at a crash point or beside concurrent daemonless commands on the store's file lock (an agent holds the store: its maintenance pauses its own requests)")
	hurt := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "hurt"}, "sleep")...).stdout)
	st := e.status(hurt)[0]
	t.Cleanup(func() { // what the salvage could not prove its own
		for _, pid := range []int{st.ExecutorPID, st.PID} {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitExit(t, pid)
		}
	})
	db := filepath.Join(e.dir, "tether.db")
	damageRecord(t, db, hurt, 2) // the spawn intent: the nonce
	plantInTask(t, db, hurt, func(b *bolt.Bucket) error {
		key := []byte("\xffhead") // the head: the nonce again
		v := bytes.Clone(b.Get(key))
		v[len(v)/2] ^= 0xff
		return b.Put(key, v)
	})
	// Its directory holds the executor's identity, which would prove it.
	if err := os.Rename(filepath.Join(e.dir, "tasks", hurt), filepath.Join(t.TempDir(), hurt)); err != nil {
		t.Fatal(err)
	}
	r := e.tether("check", "--salvage")
	if r.code != exitError || !strings.Contains(r.stdout, "NOT killed") || !strings.Contains(r.stdout, "the salvaged store is in place") ||
		!strings.Contains(r.stderr, "not complete") {
		t.Fatalf("salvage that could not kill a lost task's processes: want exit 1, the store in place, NOT killed said\n%s", r)
	}
}
