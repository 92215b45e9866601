//go:build linux

package executor

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// checkTask is a launched testproc.CheckTask and the fifos that drive it.
type checkTask struct {
	c        *Client
	ctl, out *os.File
	dir      string
}

func (k checkTask) say(t *testing.T, line string) string {
	t.Helper()
	if _, err := fmt.Fprintln(k.ctl, line); err != nil {
		t.Fatal(err)
	}
	return readLine(t, k.out)
}

// launchCheck launches a check task (raw_exec or exec) with readiness r
// and check ck, announcing each run ("up PID") when rp restarts it.
func launchCheck(t *testing.T, m marker, driver string, r fsm.Readiness, ck fsm.Check, rp *fsm.RestartPolicy) checkTask {
	t.Helper()
	return launchCheckAs(t, m, driver, "", r, ck, rp)
}

// launchCheckAs is launchCheck of a task run as user ("": the executor's).
func launchCheckAs(t *testing.T, m marker, driver, user string, r fsm.Readiness, ck fsm.Check, rp *fsm.RestartPolicy) checkTask {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "task")
	var spec wire.Launch
	var ctl, out *os.File
	if driver == wire.ModeExec {
		needIsolation(t)
		var ctlPath, outPath string
		_, ctlPath, ctl = execFifo(t, dir, "ctl")
		_, outPath, out = execFifo(t, dir, "out")
		spec = m.execSpec(t, "check", ctlPath, outPath, "announce")
	} else {
		fifos := filepath.Join(t.TempDir(), "f")
		var ctlPath, outPath string
		ctlPath, ctl = fifo(t, fifos, "ctl")
		outPath, out = fifo(t, fifos, "out")
		spec = m.taskSpec(t, "check", ctlPath, outPath, "announce")
	}
	spec.Readiness, spec.Check, spec.Restart, spec.User = r, &ck, rp, user
	if err := spec.Validate(); err != nil {
		t.Fatalf("spec: %v", err)
	}
	c := spawn(t, m, dir)
	if _, err := c.Launch(testCtx(t), spec); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	k := checkTask{c: c, ctl: ctl, out: out, dir: dir}
	if up := readLine(t, out); !strings.HasPrefix(up, "up ") {
		t.Fatalf("first line %q, want up PID", up)
	}
	return k
}

// freePort is a TCP port of 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func httpCheck(port int, path string) fsm.Check {
	return fsm.Check{Address: "127.0.0.1", Port: port, Path: path, Interval: 20 * time.Millisecond, Timeout: 2 * time.Second}
}

// notReady fails the test if the ready request has been answered, or the
// status says ready.
func notReady(t *testing.T, k checkTask, done <-chan readyResult) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("ready before the check could pass: %+v %v", r.st, r.err)
	default:
	}
	if st, err := k.c.Status(testCtx(t)); err != nil || st.Ready {
		t.Fatalf("status before the check could pass: %+v %v", st, err)
	}
}

// A tcp check makes the run ready once the task listens on the port: not
// while nothing does. Its first pass is journalled before it is told, as a
// READY=1 is: the ready answer finds the run's ready entry on disk.
func TestCheck_TCPReadyOnceListening(t *testing.T) {
	m := newMarker(t)
	port := freePort(t)
	k := launchCheck(t, m, wire.ModeRawExec, fsm.ReadinessTCP, httpCheck(port, ""), nil)
	done := waitReadyAsync(testCtx(t), k.c)
	notReady(t, k, done)
	if got := k.say(t, "tcp "+strconv.Itoa(port)); got != "ok" {
		t.Fatal(got)
	}
	r := <-done
	if r.err != nil || !r.st.Ready || r.st.Exited || !r.st.ReadyJournalled || r.st.Journal != 1 {
		t.Fatalf("WaitReady: %+v %v, want ready, journalled", r.st, r.err)
	}
	j, ok, err := SideFiles(filepath.Dir(k.c.Identity().Socket)).Journal()
	if err != nil || !ok || len(j.Entries) != 1 || j.Entries[0].Type != fsm.EventReady || j.Entries[0].TaskPID != r.st.PID {
		t.Fatalf("journal: %+v %v %v, want the run's ready entry", j, ok, err)
	}
	fmt.Fprintln(k.ctl, "exit 0")
}

// An http check passes on a 2xx answer alone: a server answering 500 has
// had tries and the run is not ready; once it answers 204 it is.
func TestCheck_HTTP2xxReady500Not(t *testing.T) {
	m := newMarker(t)
	port := freePort(t)
	k := launchCheck(t, m, wire.ModeRawExec, fsm.ReadinessHTTP, httpCheck(port, "/health"), nil)
	done := waitReadyAsync(testCtx(t), k.c)
	for _, line := range []string{"status 500", "http " + strconv.Itoa(port)} {
		if got := k.say(t, line); got != "ok" {
			t.Fatal(got)
		}
	}
	if got := k.say(t, "hits 3"); got != "hits 3" {
		t.Fatal(got)
	}
	notReady(t, k, done)
	if got := k.say(t, "status 204"); got != "ok" {
		t.Fatal(got)
	}
	if r := <-done; r.err != nil || !r.st.Ready {
		t.Fatalf("WaitReady: %+v %v, want ready", r.st, r.err)
	}
	fmt.Fprintln(k.ctl, "exit 0")
}

// An exec check runs inside the task's sandbox: its command sees the
// task's root, mount and PID namespaces and user (what it writes to
// /local/seen, read from the host, is the task's own view), and passes
// once /local/ready (in the task's root: no such path on the host) exists.
// A task of another user (nobody) has its check run as that user.
func TestCheck_ExecRunsInTheSandbox(t *testing.T) {
	for _, user := range []string{"", "nobody"} {
		t.Run("user="+user, func(t *testing.T) { testExecCheck(t, user) })
	}
}

func testExecCheck(t *testing.T, user string) {
	m := newMarker(t)
	bin := "/testbin/" + filepath.Base(testBinary(t))
	ck := fsm.Check{Command: bin, Args: []string{"task", m.arg(), "probe", "/local/ready", "/local/seen"},
		Interval: 20 * time.Millisecond, Timeout: 5 * time.Second}
	k := launchCheckAs(t, m, wire.ModeExec, user, fsm.ReadinessExec, ck, nil)
	done := waitReadyAsync(testCtx(t), k.c)
	// A try ran (it wrote /local/seen) and failed: not ready.
	if got := k.say(t, "wait /local/seen"); got != "ok" {
		t.Fatal(got)
	}
	notReady(t, k, done)
	if _, err := os.Stat("/local/ready"); err == nil {
		t.Skip("the host has a /local/ready: the probe's pass would prove nothing")
	}
	if got := k.say(t, "touch /local/ready"); got != "ok" {
		t.Fatal(got)
	}
	if r := <-done; r.err != nil || !r.st.Ready {
		t.Fatalf("WaitReady: %+v %v, want ready", r.st, r.err)
	}
	seen, err := os.ReadFile(filepath.Join(k.dir, "local", "seen"))
	if err != nil {
		t.Fatal(err)
	}
	own := k.say(t, "id")
	if string(seen) != own {
		t.Fatalf("the check's command saw %q, the task is %q: not the task's sandbox", seen, own)
	}
	if host := testproc.CheckID(); strings.Fields(own)[1] == strings.Fields(host)[1] {
		t.Fatalf("the task's root %q is the host's (%q): the comparison proves nothing", own, host)
	}
	if user == "nobody" && strings.Fields(own)[0] == "0" {
		t.Fatalf("the task of user nobody runs as uid 0: %q", own)
	}
	fmt.Fprintln(k.ctl, "exit 0")
}

// An exec check's command that outlives its timeout is killed, and the
// try is a failure (here check_restart's limit of 1: the run is killed and
// restarted, the reason naming the timeout; the second run likewise, and
// then the policy gives up); nothing of the checks is left behind.
func TestCheck_ExecTimeoutKillsTheCommand(t *testing.T) {
	m := newMarker(t)
	bin := "/testbin/" + filepath.Base(testBinary(t))
	ck := fsm.Check{Name: "hangs", Command: bin, Args: []string{"task", m.arg(), "probe", "-block", "/local/seen"},
		Interval: 20 * time.Millisecond, Timeout: 300 * time.Millisecond, Restart: &fsm.CheckRestart{Limit: 1}}
	rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	k := launchCheck(t, m, wire.ModeExec, fsm.ReadinessExec, ck, rp)
	entries := watchUntil(t, k.c, 2)
	checkJournalShape(t, entries)
	if in := entries[0]; !strings.Contains(in.Reason, `check_restart: check "hangs" failed 1 times in a row (timed out after 300ms)`) {
		t.Fatalf("restart intent: %+v", in)
	}
	x, err := k.c.Wait(testCtx(t))
	if err != nil || x.Signal != 9 {
		t.Fatalf("Wait: %+v %v, want the second run killed too", x, err)
	}
	checkLeaks(t, m)
}

// A ready task whose check starts failing is killed after check_restart's
// limit of consecutive failures (past its grace) and restarted by its
// policy, the restart's reason naming the check; the new run starts not
// ready and its first pass makes it ready again.
func TestCheck_RestartAfterLimit(t *testing.T) {
	m := newMarker(t)
	port := freePort(t)
	ck := httpCheck(port, "/")
	ck.Name = "api-health"
	// The grace covers the new run's start: it listens only once the
	// test tells it to, after its "up" (without it, a run slower to start
	// than 3 intervals would be killed again before it could listen).
	ck.Restart = &fsm.CheckRestart{Limit: 3, Grace: 3 * time.Second}
	rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	k := launchCheck(t, m, wire.ModeRawExec, fsm.ReadinessHTTP, ck, rp)
	if got := k.say(t, "http "+strconv.Itoa(port)); got != "ok" {
		t.Fatal(got)
	}
	if st, err := k.c.WaitReady(testCtx(t)); err != nil || !st.Ready {
		t.Fatalf("WaitReady: %+v %v", st, err)
	}
	if got := k.say(t, "status 503"); got != "ok" {
		t.Fatal(got)
	}
	entries := watchUntil(t, k.c, 2)
	checkJournalShape(t, entries)
	in := entries[0]
	if !strings.Contains(in.Reason, `check_restart: check "api-health" failed 3 times in a row (HTTP 503`) || in.Exit == nil || in.Exit.Signal != 9 {
		t.Fatalf("restart intent: %+v (exit %+v), want the check named and SIGKILL", in, in.Exit)
	}
	if entries[1].Type != fsm.EventLaunched {
		t.Fatalf("the restart: %+v, want launched", entries[1])
	}
	// The new run: its own listener (the old one died with its task).
	if up := readLine(t, k.out); up != fmt.Sprintf("up %d", entries[1].TaskPID) {
		t.Fatalf("new run said %q, want up %d", up, entries[1].TaskPID)
	}
	st, err := k.c.Status(testCtx(t))
	if err != nil || st.Ready || st.PID != entries[1].TaskPID {
		t.Fatalf("after the restart: %+v %v, want the new run, not ready", st, err)
	}
	if got := k.say(t, "http "+strconv.Itoa(port)); got != "ok" {
		t.Fatal(got)
	}
	if st, err := k.c.WaitReady(testCtx(t)); err != nil || !st.Ready || st.PID != entries[1].TaskPID {
		t.Fatalf("WaitReady of the new run: %+v %v", st, err)
	}
	fmt.Fprintln(k.ctl, "exit 0")
}

// No failure counts before check_restart's grace: a task whose check
// fails from its start has had tries (and is not killed by them) within
// the grace, and is killed once grace has passed since its launch, not
// before.
func TestCheck_RestartNotBeforeGrace(t *testing.T) {
	m := newMarker(t)
	port := freePort(t)
	ck := httpCheck(port, "/")
	const grace = 3 * time.Second
	ck.Restart = &fsm.CheckRestart{Limit: 1, Grace: grace}
	rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	before := time.Now()
	k := launchCheck(t, m, wire.ModeRawExec, fsm.ReadinessHTTP, ck, rp)
	for _, line := range []string{"status 500", "http " + strconv.Itoa(port)} {
		if got := k.say(t, line); got != "ok" {
			t.Fatal(got)
		}
	}
	if got := k.say(t, "hits 3"); got != "hits 3" {
		t.Fatal(got)
	}
	st, err := k.c.Status(testCtx(t))
	// A loaded host may take past the grace for the 3 tries: then the
	// restart may be under way, and its time below is what holds the grace.
	if (err != nil || st.Exited || st.Journal != 0) && time.Since(before) < grace {
		t.Fatalf("3 failing tries within the grace: %+v %v, want the run untouched", st, err)
	}
	entries := watchUntil(t, k.c, 2)
	in := entries[0]
	if at := time.Unix(0, in.Time); at.Sub(before) < grace {
		t.Fatalf("restarted %s after the launch, within the %s grace: %+v", at.Sub(before), grace, in)
	}
	if !strings.Contains(in.Reason, `check_restart: check "http check" failed 1 times in a row`) {
		t.Fatalf("restart intent: %+v", in)
	}
	if up := readLine(t, k.out); !strings.HasPrefix(up, "up ") {
		t.Fatal(up)
	}
	fmt.Fprintln(k.ctl, "exit 0")
}
