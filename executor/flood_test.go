//go:build linux

package executor

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
)

// cpuTime is the user and system CPU time process pid has used
// (/proc/PID/stat fields 14 and 15, in clock ticks of 1/100 s: Linux's
// USER_HZ).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // from field 3 (state) on
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// floodWindow is how long the flood runs, and the window its cost is
// measured over.
const floodWindow = 3 * time.Second

// A task that floods its notify socket (STATUS=x, WATCHDOG=1 as fast as
// the socket takes them) costs its executor under 5% of one CPU over the
// flood: the executor reads a bounded number of datagrams a second and
// leaves the rest queued, so the task's sends block, and each datagram's
// sender check is bounded. The task is still served: its READY=1 after
// the flood makes it ready, and its STATUS= is the last it sent.
func TestNotify_FloodCostsTheTaskNotTheExecutor(t *testing.T) {
	m := newMarker(t)
	n := launchNotify(t, m, wire.ModeRawExec, time.Minute, nil)
	exe := n.c.Identity().PID
	if got := n.say(t, "send READY=1"); got != "ok" { // the watchdog armed: WATCHDOG=1 re-arms it
		t.Fatal(got)
	}
	before := cpuTime(t, exe)
	// The window is the measurement, not a wait for something: the task
	// floods for floodWindow and then answers.
	got := n.say(t, fmt.Sprintf(`flood %s STATUS=x\nWATCHDOG=1`, floodWindow))
	used := cpuTime(t, exe) - before
	sent, err := strconv.Atoi(strings.TrimPrefix(got, "flooded "))
	if err != nil {
		t.Fatalf("flood: %q", got)
	}
	share := float64(used) / float64(floodWindow)
	t.Logf("the task sent %d datagrams in %s; its executor used %s of CPU: %.1f%% of one CPU", sent, floodWindow, used, 100*share)
	if share >= 0.05 {
		t.Errorf("a notify flood cost its executor %.1f%% of one CPU over %s (%s), want under 5%%", 100*share, floodWindow, used)
	}
	if got := n.say(t, `send STATUS=after the flood`); got != "ok" {
		t.Fatal(got)
	}
	if st := waitStatus(t, n.c, "after the flood"); !st.Ready || st.Exited {
		t.Fatalf("after the flood: %+v, want the task running and ready", st)
	}
}
