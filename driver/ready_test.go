package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
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
	if _, err := d.WaitTask(ctx, "early"); err != nil {
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
