//go:build linux

package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// notifyTask is a launched notify task (testproc.NotifyTask) and the
// fifos that drive it.
type notifyTask struct {
	c        *Client
	ctl, out *os.File
	dir      string // the task's directory
}

// say sends one line to the task and returns its answer.
func (n notifyTask) say(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(n.ctl, line); err != nil {
		t.Fatal(err)
	}
	return readLine(t, n.out)
}

// launchNotify launches a notify task, raw_exec or exec, with watchdog wd
// and restart policy rp.
func launchNotify(t *testing.T, m marker, driver string, wd time.Duration, rp *fsm.RestartPolicy) notifyTask {
	t.Helper()
	return launchNotifyIn(t, m, filepath.Join(t.TempDir(), "task"), driver, wd, rp)
}

// launchNotifyIn is launchNotify with the task directory dir.
func launchNotifyIn(t *testing.T, m marker, dir, driver string, wd time.Duration, rp *fsm.RestartPolicy) notifyTask {
	t.Helper()
	var spec wire.Launch
	var ctl, out *os.File
	if driver == wire.ModeExec {
		needIsolation(t)
		var ctlPath, outPath string
		_, ctlPath, ctl = execFifo(t, dir, "ctl")
		_, outPath, out = execFifo(t, dir, "out")
		spec = m.execSpec(t, "notify", ctlPath, outPath)
	} else {
		fifos := filepath.Join(t.TempDir(), "f")
		var ctlPath, outPath string
		ctlPath, ctl = fifo(t, fifos, "ctl")
		outPath, out = fifo(t, fifos, "out")
		spec = m.taskSpec(t, "notify", ctlPath, outPath)
	}
	spec.Readiness, spec.Watchdog, spec.Restart = fsm.ReadinessNotify, wd, rp
	c := spawn(t, m, dir)
	if _, err := c.Launch(testCtx(t), spec); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return notifyTask{c: c, ctl: ctl, out: out, dir: dir}
}

// readyResult is what a WaitReady gave.
type readyResult struct {
	st  wire.Status
	err error
}

func waitReadyAsync(ctx context.Context, c *Client) <-chan readyResult {
	done := make(chan readyResult, 1)
	go func() {
		st, err := c.WaitReady(ctx)
		done <- readyResult{st, err}
	}()
	return done
}

func bothDrivers(t *testing.T, f func(t *testing.T, driver string)) {
	for _, d := range []string{wire.ModeRawExec, wire.ModeExec} {
		t.Run(d, func(t *testing.T) { f(t, d) })
	}
}

// A notify task's ready request is answered once the task sends READY=1,
// not before, with the STATUS= it sent; the task has NOTIFY_SOCKET (inside
// an exec task's root: /secrets/notify) and, with a watchdog,
// WATCHDOG_USEC and its own pid as WATCHDOG_PID.
func TestNotify_ReadyAnsweredAtReady(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		m := newMarker(t)
		n := launchNotify(t, m, driver, 10*time.Second, nil)
		env := strings.Fields(n.say(t, "env"))
		if len(env) != 4 {
			t.Fatalf("env: %q", env)
		}
		want := filepath.Join(n.dir, "secrets", "notify")
		if driver == wire.ModeExec {
			want = "/secrets/notify"
		}
		if env[0] != want || env[1] != "10000000" || env[2] != env[3] {
			t.Fatalf("NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID pid = %q, want %s 10000000 and WATCHDOG_PID the task's pid", env, want)
		}
		fi, err := os.Lstat(filepath.Join(n.dir, "secrets", "notify"))
		if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("the notify socket: %v %v, want a socket only its owner may use", fi.Mode(), err)
		}
		done := waitReadyAsync(testCtx(t), n.c)
		if got := n.say(t, `send STATUS=warming up`); got != "ok" {
			t.Fatal(got)
		}
		// The task's STATUS= was handled (the executor reads its socket in
		// order), and no READY=1 came: the ready request still waits.
		waitStatus(t, n.c, "warming up")
		select {
		case r := <-done:
			t.Fatalf("ready answered before READY=1: %+v %v", r.st, r.err)
		default:
		}
		if got := n.say(t, `send READY=1\nSTATUS=serving`); got != "ok" {
			t.Fatal(got)
		}
		r := <-done
		if r.err != nil || !r.st.Ready || r.st.NotifyStatus != "serving" || r.st.Exited {
			t.Fatalf("WaitReady: %+v %v, want ready with status serving", r.st, r.err)
		}
		// Asked again, it answers at once.
		if st, err := n.c.WaitReady(testCtx(t)); err != nil || !st.Ready {
			t.Fatalf("WaitReady again: %+v %v", st, err)
		}
	})
}

// waitStatus waits until the executor has handled the STATUS= text (each
// Status is a round trip to the executor's loop, which handles the
// notify socket's datagrams in order).
func waitStatus(t *testing.T, c *Client, text string) wire.Status {
	t.Helper()
	ctx := testCtx(t)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if st.NotifyStatus == text {
			return st
		}
		if ctx.Err() != nil {
			t.Fatalf("the executor never had STATUS=%s (has %q)", text, st.NotifyStatus)
		}
	}
}

// A datagram from a process that is not the task's (this test, as root
// too, so only the sender's pid tells it) is dropped: it makes nothing
// ready. One from a child of the task counts.
func TestNotify_StrangerIgnoredChildAccepted(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		m := newMarker(t)
		n := launchNotify(t, m, driver, 0, nil)
		sock := filepath.Join(n.dir, "secrets", "notify")
		if err := testproc.Notify(sock, "READY=1\nSTATUS=stranger"); err != nil {
			t.Fatalf("sending as a stranger: %v", err)
		}
		if got := n.say(t, "send STATUS=after the stranger"); got != "ok" {
			t.Fatal(got)
		}
		if st := waitStatus(t, n.c, "after the stranger"); st.Ready {
			t.Fatalf("a stranger's READY=1 made the task ready: %+v", st)
		}
		if got := n.say(t, `child READY=1\nSTATUS=from a child`); got != "ok" {
			t.Fatal(got)
		}
		st, err := n.c.WaitReady(testCtx(t))
		if err != nil || !st.Ready || st.NotifyStatus != "from a child" {
			t.Fatalf("WaitReady after the child's READY=1: %+v %v", st, err)
		}
	})
}

// A task that ends before READY=1 answers the ready request with its end.
func TestNotify_ExitBeforeReadyAnswers(t *testing.T) {
	m := newMarker(t)
	n := launchNotify(t, m, wire.ModeRawExec, 0, nil)
	done := waitReadyAsync(testCtx(t), n.c)
	fmt.Fprintln(n.ctl, "exit 3")
	r := <-done
	if r.err != nil || r.st.Ready || !r.st.Exited || r.st.Exit.Code != 3 {
		t.Fatalf("WaitReady: %+v %v, want the exit (code 3), not ready", r.st, r.err)
	}
}

// A ready task that stops pinging its watchdog is killed and restarted by
// its restart policy, the restart's reason naming the watchdog; the new
// run starts not ready, and its READY=1 makes it ready again.
func TestWatchdog_MissRestarts(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		m := newMarker(t)
		rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
		n := launchNotify(t, m, driver, 300*time.Millisecond, rp)
		if got := n.say(t, `send READY=1`); got != "ok" {
			t.Fatal(got)
		}
		if st, err := n.c.WaitReady(testCtx(t)); err != nil || !st.Ready {
			t.Fatalf("WaitReady: %+v %v", st, err)
		}
		entries := watchUntil(t, n.c, 2)
		checkJournalShape(t, entries)
		in := entries[0]
		if !strings.Contains(in.Reason, "watchdog: no WATCHDOG=1 within 300ms") || in.Exit == nil || in.Exit.Signal != 9 {
			t.Fatalf("restart intent: %+v (exit %+v), want the watchdog's reason and SIGKILL", in, in.Exit)
		}
		st, err := n.c.Status(testCtx(t))
		if err != nil || st.Ready || st.PID != entries[1].TaskPID {
			t.Fatalf("after the restart: %+v %v, want the new run, not ready", st, err)
		}
		if got := n.say(t, `send READY=1\nSTATUS=again`); got != "ok" {
			t.Fatal(got)
		}
		if st, err := n.c.WaitReady(testCtx(t)); err != nil || !st.Ready || st.NotifyStatus != "again" {
			t.Fatalf("WaitReady of the new run: %+v %v", st, err)
		}
		fmt.Fprintln(n.ctl, "exit 0")
	})
}

// A task that pings within its watchdog interval keeps running: three
// intervals' worth of pings later it runs, ready, never restarted.
func TestWatchdog_PingsKeepTheTask(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		m := newMarker(t)
		rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
		n := launchNotify(t, m, driver, time.Second, rp)
		if got := n.say(t, `send READY=1`); got != "ok" {
			t.Fatal(got)
		}
		if got := n.say(t, "ping 12"); got != "pinged 12" {
			t.Fatal(got)
		}
		st, err := n.c.Status(testCtx(t))
		if err != nil || !st.Ready || st.Exited || st.Journal != 1 || !st.ReadyJournalled {
			t.Fatalf("after 3 intervals of pings: %+v %v, want running, ready (journalled: 1 entry), never restarted", st, err)
		}
	})
}

// The notify socket of a task run as another user is that user's, mode
// 0700: only the task's user (and root) may send to it. (A task of
// another user that is not the task's is dropped by the sender check as
// well: TestNotify_StrangerIgnoredChildAccepted.)
func TestNotify_SocketIsTheTaskUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a task as another user needs root")
	}
	m := newMarker(t)
	dir := filepath.Join(t.TempDir(), "task")
	c := spawn(t, m, dir)
	spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "sleep", Args: []string{"1000"}, User: "65534", Dir: "/",
		Readiness: fsm.ReadinessNotify, Env: map[string]string{"TETHER_TEST_MARKER": string(m), "PATH": "/usr/bin:/bin"}}}
	if _, err := c.Launch(testCtx(t), spec); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "secrets", "notify"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != 65534 || st.Mode&0o077 != 0 {
		t.Fatalf("notify socket: mode %o uid %d, want a socket of uid 65534 with no group or other access", st.Mode, st.Uid)
	}
	if _, err := c.Stop(testCtx(t), unix.SIGKILL, time.Second); err != nil {
		t.Fatal(err)
	}
}

// A raw_exec task whose socket path would not fit a sockaddr_un gets an
// abstract socket, which anyone on the host can reach: the sender check
// alone keeps a stranger's READY=1 out.
func TestNotify_AbstractFallbackStrangerIgnored(t *testing.T) {
	m := newMarker(t)
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	n := launchNotifyIn(t, m, filepath.Join(deep, "task"), wire.ModeRawExec, 0, nil)
	env := strings.Fields(n.say(t, "env"))
	if len(env) != 4 || !strings.HasPrefix(env[0], "@tether-notify-") {
		t.Fatalf("NOTIFY_SOCKET of a task in a deep directory: %q, want an abstract @tether-notify-... name", env)
	}
	if err := testproc.Notify(env[0], "READY=1\nSTATUS=stranger"); err != nil {
		t.Fatalf("sending as a stranger: %v", err)
	}
	if got := n.say(t, "send STATUS=after the stranger"); got != "ok" {
		t.Fatal(got)
	}
	if st := waitStatus(t, n.c, "after the stranger"); st.Ready {
		t.Fatalf("a stranger's READY=1 made the task ready: %+v", st)
	}
	if got := n.say(t, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	if st, err := n.c.WaitReady(testCtx(t)); err != nil || !st.Ready {
		t.Fatalf("WaitReady: %+v %v", st, err)
	}
}

// Each run's readiness is journalled (protocol 10) before anyone is told:
// once a ready request is answered, the journal on disk holds the run's
// ready entry, at its place, naming the run, and the status says so
// (Status.ReadyJournalled, counted in Status.Journal); a watch returns it
// among the restarts. A relaunched run's readiness is its own entry.
func TestNotify_EachRunsReadinessJournalledBeforeItIsTold(t *testing.T) {
	m := newMarker(t)
	rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	n := launchNotify(t, m, wire.ModeRawExec, 0, rp)
	onDisk := func() []fsm.Event {
		t.Helper()
		j, ok, err := SideFiles(n.dir).Journal()
		if err != nil || !ok || j.Version != wire.JournalVersion {
			t.Fatalf("journal: %+v %v %v", j, ok, err)
		}
		return j.Entries
	}
	if st, err := n.c.Status(testCtx(t)); err != nil || st.Journal != 0 || st.ReadyJournalled || len(onDisk()) != 0 {
		t.Fatalf("before READY=1: %+v %v", st, err)
	}
	done := waitReadyAsync(testCtx(t), n.c)
	if got := n.say(t, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	first := onDisk() // read once the answer came: it was on disk before
	if r.err != nil || !r.st.Ready || !r.st.ReadyJournalled || r.st.Journal != 1 || len(first) != 1 ||
		first[0].Type != fsm.EventReady || first[0].Attempt != 1 || first[0].TaskPID != r.st.PID || first[0].TaskStartTime != r.st.StartTime {
		t.Fatalf("ready answered: %+v %v; journal %v; want the run's ready entry 1 on disk", r.st, r.err, first)
	}
	_, watched, err := n.c.Watch(testCtx(t), 0)
	if err != nil || len(watched) != 1 || !reflect.DeepEqual(watched[0], first[0]) {
		t.Fatalf("watch from 0: %v %v, want the ready entry", watched, err)
	}
	fmt.Fprintln(n.ctl, "exit 1") // restarted by its policy
	restarts := watchUntil(t, n.c, 2)
	if got := n.say(t, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	st, err := n.c.WaitReady(testCtx(t))
	all := onDisk()
	if err != nil || !st.ReadyJournalled || st.PID != restarts[1].TaskPID || st.Journal != 4 || len(all) != 4 {
		t.Fatalf("the relaunched run ready: %+v %v; journal %v", st, err, all)
	}
	checkJournalShape(t, all)
	if last := all[3]; last.Type != fsm.EventReady || last.TaskPID != st.PID || last.Time < restarts[1].Time {
		t.Fatalf("the second run's ready entry: %+v, want after its launch (%d) naming pid %d", last, restarts[1].Time, st.PID)
	}
	fmt.Fprintln(n.ctl, "exit 0")
}
