package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// notifyFifos makes the control and answer fifos of a notify helper task,
// open read-write here.
func notifyFifos(t *testing.T) (ctlPath, outPath string, ctl, out *os.File) {
	t.Helper()
	dir := t.TempDir()
	open := func(name string) (string, *os.File) {
		p := filepath.Join(dir, name)
		if err := unix.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return p, f
	}
	ctlPath, ctl = open("ctl")
	outPath, out = open("out")
	return
}

// sayTo sends a line to a notify task and returns its answer.
func sayTo(t *testing.T, ctl, out *os.File, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(ctl, line); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, out)
}

// readAnswer reads one line a notify task wrote.
func readAnswer(t *testing.T, out *os.File) string {
	t.Helper()
	if err := out.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := out.Read(one); err != nil {
			t.Fatalf("reading the task's answer: %v", err)
		}
		if one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

type readyResult struct {
	r   ReadyReport
	err error
}

// WaitReady returns only once the task sent READY=1, and records the ready
// event; the status text comes with it.
func TestWaitReady_RecordsReadyAtREADY(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctlPath, outPath, ctl, out := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath)
	spec.Readiness = fsm.ReadinessNotify
	if _, err := d.StartTask(ctx, "svc", spec); err != nil {
		t.Fatal(err)
	}
	done := make(chan readyResult, 1)
	go func() {
		r, err := d.WaitReady(ctx, "svc")
		done <- readyResult{r, err}
	}()
	if got := sayTo(t, ctl, out, "send STATUS=starting"); got != "ok" {
		t.Fatal(got)
	}
	select {
	case r := <-done:
		t.Fatalf("WaitReady returned before READY=1: %+v %v", r.r, r.err)
	default:
	}
	if st, err := d.InspectTask(ctx, "svc"); err != nil || st.Ready {
		t.Fatalf("before READY=1: %+v %v", st.Task, err)
	}
	if got := sayTo(t, ctl, out, `send READY=1\nSTATUS=serving`); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	if r.err != nil || !r.r.Task.Ready || r.r.Status != "serving" || r.r.Task.State != fsm.StateRunning {
		t.Fatalf("WaitReady: %+v %v, want running and ready, status serving", r.r, r.err)
	}
	if evs := eventTypes(t, d, "svc"); evs[len(evs)-1] != "ready" {
		t.Fatalf("events %v, want the last one ready", evs)
	}
	if st, err := d.InspectTask(ctx, "svc"); err != nil || !st.Ready {
		t.Fatalf("after READY=1: %+v %v", st.Task, err)
	}
	// Asked again: ready already, nothing more recorded.
	if _, err := d.WaitReady(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if evs := eventTypes(t, d, "svc"); strings.Count(strings.Join(evs, " "), "ready") != 1 {
		t.Fatalf("events %v, want one ready", evs)
	}
	fmt.Fprintln(ctl, "exit 0")
	if final, err := d.WaitTask(ctx, "svc"); err != nil || final.State != fsm.StateExited {
		t.Fatalf("final %+v %v", final, err)
	}
}

// A task that ends before READY=1 fails WaitReady with ErrNeverReady,
// naming its exit; a task that is not a notify task is ErrNotNotify.
func TestWaitReady_EndBeforeReadyAndNotNotify(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctlPath, outPath, ctl, _ := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath)
	spec.Readiness = fsm.ReadinessNotify
	if _, err := d.StartTask(ctx, "early", spec); err != nil {
		t.Fatal(err)
	}
	done := make(chan readyResult, 1)
	go func() {
		r, err := d.WaitReady(ctx, "early")
		done <- readyResult{r, err}
	}()
	fmt.Fprintln(ctl, "exit 7")
	r := <-done
	if !errors.Is(r.err, ErrNeverReady) || !strings.Contains(r.err.Error(), "exit code 7") {
		t.Fatalf("WaitReady of a task that exited 7 first: %v", r.err)
	}
	// Whichever comes first, the wait or the end, the answer is the same:
	// a wait that comes once the end is recorded (its executor gone) is
	// ErrNeverReady naming the exit too, not an unreachable executor. (The
	// wait above may have reached the executor before the exit, or after
	// it, with the executor closing: issue 36's flake was the latter.)
	if final, err := d.WaitTask(ctx, "early"); err != nil || final.State != fsm.StateExited {
		t.Fatalf("the end: %s %v", final.State, err)
	}
	if _, err := d.WaitReady(ctx, "early"); !errors.Is(err, ErrNeverReady) || !strings.Contains(err.Error(), "exit code 7") {
		t.Fatalf("WaitReady of a task that exited 7, once its end was recorded: %v", err)
	}
	plain := taskSpec(t, dir, "sleep")
	if _, err := d.StartTask(ctx, "plain", plain); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, "plain"); !errors.Is(err, ErrNotNotify) {
		t.Fatalf("WaitReady of a task without readiness: %v, want ErrNotNotify", err)
	}
	if _, err := d.StopTask(ctx, "plain", 0, 0); err != nil {
		t.Fatal(err)
	}
}

// A ready task that misses its watchdog is restarted by its policy: the
// log holds the restart, its reason naming the watchdog, and the task is
// no longer ready until its new run says so.
func TestWaitReady_WatchdogMissRestartIsRecorded(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctlPath, outPath, ctl, out := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath)
	spec.Readiness, spec.Watchdog = fsm.ReadinessNotify, 300*time.Millisecond
	spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	if _, err := d.StartTask(ctx, "dog", spec); err != nil {
		t.Fatal(err)
	}
	if got := sayTo(t, ctl, out, `send READY=1`); got != "ok" {
		t.Fatal(got)
	}
	if r, err := d.WaitReady(ctx, "dog"); err != nil || !r.Task.Ready {
		t.Fatalf("WaitReady: %+v %v", r, err)
	}
	// No ping: the watchdog kills the run, and the policy restarts it.
	// Once the log has the new run, it is told to exit 0, which ends the
	// task (mode fail, attempts used).
	told := false
	final, err := d.FollowTask(ctx, "dog", func(st fsm.Task) {
		if told || st.Restarts != 1 || st.State != fsm.StateRunning && st.State != fsm.StateLaunched {
			return
		}
		told = true
		if st.Ready {
			t.Errorf("the new run is ready before it said so: %+v", st)
		}
		if got := sayTo(t, ctl, out, "env"); !strings.HasPrefix(got, filepath.Join(d.TaskDir("dog"), "secrets", "notify")+" ") ||
			!strings.HasSuffix(got, fmt.Sprint(" ", st.TaskPID)) {
			t.Errorf("env of the new run (pid %d): %q", st.TaskPID, got)
		}
		fmt.Fprintln(ctl, "exit 0")
	})
	if err != nil || final.State != fsm.StateExited || final.Restarts != 1 || final.Ready {
		t.Fatalf("final %s restarts %d ready %v: %v", final.State, final.Restarts, final.Ready, err)
	}
	evs, err := d.TaskEvents(ctx, "dog")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(evs, func(e fsm.Event) bool { return e.Type == fsm.EventRestartIntent })
	if i < 0 || !strings.Contains(evs[i].Reason, "watchdog: no WATCHDOG=1 within 300ms") || evs[i].Exit == nil || evs[i].Exit.Signal != 9 {
		t.Fatalf("events %v: want a restart intent naming the watchdog", evs)
	}
	if evs[i-1].Type != fsm.EventReady {
		t.Fatalf("events %v: want ready before the restart", evs)
	}
}

// readyEvents are the ready events of task id's log.
func readyEvents(t *testing.T, d *Driver, id string) []fsm.Event {
	t.Helper()
	evs, err := d.TaskEvents(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []fsm.Event
	for _, e := range evs {
		if e.Type == fsm.EventReady {
			out = append(out, e)
		}
	}
	return out
}

// journalReadies are the ready entries of task id's executor's journal on
// disk.
func journalReadies(t *testing.T, d *Driver, id string) []fsm.Event {
	t.Helper()
	j, ok, err := executor.SideFiles(d.TaskDir(id)).Journal()
	if err != nil || !ok {
		t.Fatalf("journal of %s: ok %v, %v", id, ok, err)
	}
	var out []fsm.Event
	for _, e := range j.Entries {
		if e.Type == fsm.EventReady {
			out = append(out, e)
		}
	}
	return out
}

// sameReadies checks that the log's ready events are the journal's entries,
// one for one: the run, its place and the time it was ready.
func sameReadies(t *testing.T, log, journal []fsm.Event) {
	t.Helper()
	if len(log) != len(journal) {
		t.Fatalf("%d ready events in the log, %d in the journal:\nlog %v\njournal %v", len(log), len(journal), log, journal)
	}
	for i, e := range log {
		j := journal[i]
		if e.Time != j.Time || e.TaskProc() != j.TaskProc() || e.Attempt != j.Attempt || !e.Journalled() {
			t.Errorf("ready %d: the log has %v at %d (place %d), the journal %v at %d (place %d)", i, e.TaskProc(), e.Time, e.Attempt, j.TaskProc(), j.Time, j.Attempt)
		}
	}
}

// TestReady_JournalledWithoutARestartPolicy: a notify task with no
// restart policy keeps its readiness in its executor's journal too (its
// executor journals for readiness alone): a ready sent while no driver
// watched is counted unfolded, and the next Recover records it.
func TestReady_JournalledWithoutARestartPolicy(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	ctlPath, outPath, ctl, out := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath, "announce")
	spec.Readiness = fsm.ReadinessNotify
	st, err := d1.StartTask(ctx, "svc", spec)
	if err != nil {
		t.Fatal(err)
	}
	if up := readAnswer(t, out); up != fmt.Sprint("up ", st.TaskPID) {
		t.Fatalf("the run said %q", up)
	}
	if err := d1.Close(); err != nil { // nobody supervises it now
		t.Fatal(err)
	}
	if got := sayTo(t, ctl, out, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if info, err := d2.InspectTask(ctx, "svc"); err != nil || info.Ready || info.Unfolded != 1 {
		t.Fatalf("before a fold: ready %v, unfolded %d, %v; want not ready, 1 unfolded", info.Ready, info.Unfolded, err)
	}
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := d2.InspectTask(ctx, "svc"); err != nil || !info.Ready || info.Unfolded != 0 {
		t.Fatalf("after Recover: ready %v, unfolded %d, %v; want ready, nothing unfolded", info.Ready, info.Unfolded, err)
	}
	if _, err := d2.StopTask(ctx, "svc", unix.SIGKILL, time.Second); err != nil {
		t.Fatal(err)
	}
}

// Readiness is a fact of a run, journalled by its executor: with no
// driver watching and nobody waiting, the next Recover records each run's
// ready, restarts included, with the time the run was ready, once
// (Recover again, and two drivers folding at once, add nothing).
func TestReady_RecordedFromTheJournalWithNobodyWaiting(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	ctlPath, outPath, ctl, out := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath, "announce") // each run says "up PID" first
	spec.Readiness = fsm.ReadinessNotify
	spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail, OnSuccess: true}
	st, err := d1.StartTask(ctx, "svc", spec)
	if err != nil {
		t.Fatal(err)
	}
	if up := readAnswer(t, out); up != fmt.Sprint("up ", st.TaskPID) {
		t.Fatalf("the first run said %q", up)
	}
	if err := d1.Close(); err != nil { // nobody supervises it now
		t.Fatal(err)
	}
	if got := sayTo(t, ctl, out, "send READY=1"); got != "ok" { // handled (and journalled) once answered
		t.Fatal(got)
	}
	d2 := newDriver(t, dir, Hooks{})
	info, err := d2.InspectTask(ctx, "svc")
	if err != nil || info.Ready || info.Unfolded != 1 {
		t.Fatalf("before a fold: ready %v, unfolded %d, %v; want not ready, 1 unfolded", info.Ready, info.Unfolded, err)
	}
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := d2.InspectTask(ctx, "svc"); err != nil || !info.Ready || info.Unfolded != 0 {
		t.Fatalf("after Recover: ready %v, unfolded %d, %v; want ready, nothing unfolded", info.Ready, info.Unfolded, err)
	}
	sameReadies(t, readyEvents(t, d2, "svc"), journalReadies(t, d2, "svc"))
	if r := readyEvents(t, d2, "svc"); r[0].TaskPID != st.TaskPID {
		t.Fatalf("the ready names pid %d, the first run is %d", r[0].TaskPID, st.TaskPID)
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}

	// The run ends; its policy restarts it; the new run (once it says it
	// is up: a line sent sooner could be read by the run that exits) is
	// ready. Two drivers fold at once.
	fmt.Fprintln(ctl, "exit 1")
	if up := readAnswer(t, out); !strings.HasPrefix(up, "up ") || up == fmt.Sprint("up ", st.TaskPID) {
		t.Fatalf("the restarted run said %q", up)
	}
	if got := sayTo(t, ctl, out, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	shared := func() *Driver {
		sh, err := store.OpenShared(statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sh.Close() })
		d, err := Open(Config{StateDir: dir, Store: sh, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	da, db := shared(), shared()
	var wg sync.WaitGroup
	for _, d := range []*Driver{da, db} {
		wg.Go(func() {
			if _, err := d.Reconcile(ctx, "svc"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, d := range []*Driver{da, db} {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	d3 := newDriver(t, dir, Hooks{})
	defer d3.Close()
	if _, err := d3.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	log := readyEvents(t, d3, "svc")
	sameReadies(t, log, journalReadies(t, d3, "svc"))
	now, err := d3.InspectTask(ctx, "svc")
	if err != nil || len(log) != 2 || !now.Ready || now.Restarts != 1 || log[1].TaskPID != now.TaskPID || log[0].TaskPID == now.TaskPID {
		t.Fatalf("after the restart: %d readies %v, task ready %v restarts %d pid %d, %v; want 2, one per run, the last the current one",
			len(log), log, now.Ready, now.Restarts, now.TaskPID, err)
	}
	if _, err := d3.StopTask(ctx, "svc", 0, 0); err != nil {
		t.Fatal(err)
	}
}

// The process that supervises a task records its runs' readiness as they
// happen, without anyone waiting: the log has the ready while the run
// lives, with the time it became ready.
func TestReady_TheSupervisorRecordsIt(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctlPath, outPath, ctl, out := notifyFifos(t)
	spec := taskSpec(t, dir, "notify", ctlPath, outPath)
	spec.Readiness = fsm.ReadinessNotify
	if _, err := d.StartTask(ctx, "svc", spec); err != nil {
		t.Fatal(err)
	}
	progress := make(chan fsm.Task, 16)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = d.FollowTask(fctx, "svc", func(st fsm.Task) { progress <- st })
	}()
	if got := sayTo(t, ctl, out, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	for st := range progress {
		if st.Ready {
			break
		}
	}
	sameReadies(t, readyEvents(t, d, "svc"), journalReadies(t, d, "svc"))
	fmt.Fprintln(ctl, "exit 0")
	if final, err := d.WaitTask(ctx, "svc"); err != nil || final.State != fsm.StateExited || len(readyEvents(t, d, "svc")) != 1 {
		t.Fatalf("final %s %v, readies %v", final.State, err, readyEvents(t, d, "svc"))
	}
}

// A driver killed between a run's ready and its record (the append of the
// ready, before it and after it) loses nothing and records nothing twice:
// the next Recover has exactly the journal's ready, with the time the run
// was ready, and a second Recover appends nothing.
func TestReady_DriverCrashBetweenTheReadyAndItsRecord(t *testing.T) {
	for _, point := range []string{crashBeforeAppend + "ready", crashAfterAppend + "ready"} {
		t.Run(point, func(t *testing.T) {
			dir := stateDir(t)
			if r := runCrashChild(t, dir, "ready", point, ""); !r.killed {
				t.Fatalf("crash point %s not reached:\n%s", point, r.out)
			}
			ctx := ctxT(t)
			d := newDriver(t, dir, Hooks{})
			defer d.Close()
			if _, err := d.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			log := readyEvents(t, d, "a")
			sameReadies(t, log, journalReadies(t, d, "a"))
			if len(log) != 1 {
				t.Fatalf("%d readies after the crash at %s, want 1", len(log), point)
			}
			before := eventTypes(t, d, "a")
			if _, err := d.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if after := eventTypes(t, d, "a"); !slices.Equal(before, after) {
				t.Fatalf("a second Recover changed the log: %v -> %v", before, after)
			}
			if _, err := d.StopTask(ctx, "a", 0, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An executor killed just before it journals a run's ready, or just after
// (before anyone is told): the driver finds it gone, and the log has the
// run's ready exactly when the journal on disk does (it is a fact only
// once journalled), then the task lost, with nothing of it left alive.
func TestReady_ExecutorCrashAroundTheReadyEntry(t *testing.T) {
	for _, point := range []string{executor.CrashBeforeReadyEntry, executor.CrashAfterReadyEntry} {
		t.Run(point, func(t *testing.T) {
			t.Setenv(EnvCrashPoint, point) // the executor's environment: it kills itself there
			dir := stateDir(t)
			ctx := ctxT(t)
			d := newDriver(t, dir, Hooks{})
			defer d.Close()
			ctlPath, outPath, ctl, out := notifyFifos(t)
			spec := taskSpec(t, dir, "notify", ctlPath, outPath)
			spec.Readiness = fsm.ReadinessNotify
			if _, err := d.StartTask(ctx, "a", spec); err != nil {
				t.Fatal(err)
			}
			// READY=1 once the start is recorded: the executor dies as it
			// handles it. (Its answer is not waited for: the barrier the
			// task waits on after it ends only when the kernel collects
			// the dead socket's queue.)
			fmt.Fprintln(ctl, "send READY=1")
			_ = out
			if _, err := d.WaitReady(ctx, "a"); err == nil {
				t.Fatal("WaitReady succeeded although the executor died at", point)
			}
			final, err := d.WaitTask(ctx, "a")
			if err != nil || final.State != fsm.StateLost {
				t.Fatalf("final %s %v, want lost", final.State, err)
			}
			log := readyEvents(t, d, "a")
			want := 0
			if point == executor.CrashAfterReadyEntry {
				want = 1
			}
			sameReadies(t, log, journalReadies(t, d, "a"))
			if len(log) != want {
				t.Fatalf("%d readies, want %d", len(log), want)
			}
			before := eventTypes(t, d, "a")
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d2 := newDriver(t, dir, Hooks{})
			defer d2.Close()
			if _, err := d2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if after := eventTypes(t, d2, "a"); !slices.Equal(before, after) {
				t.Fatalf("Recover changed the log of a lost task: %v -> %v", before, after)
			}
		})
	}
}
