//go:build linux

package server

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestLimiter_BurstThenRate: the notify reader reads a burst at once, then
// at most rate a second: the datagram past the burst waits 1/rate, and a
// long idle refills the bucket to the burst and no further.
func TestLimiter_BurstThenRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLimiter(100, 100, t0)
	for i := range 100 {
		if w := l.take(t0); w != 0 {
			t.Fatalf("take %d of the burst waits %s", i+1, w)
		}
	}
	if w := l.take(t0); w != 10*time.Millisecond {
		t.Fatalf("the first take past the burst waits %s, want 10ms (1/rate)", w)
	}
	// Read after that wait: the next one waits a period again.
	if w := l.take(t0.Add(10 * time.Millisecond)); w != 10*time.Millisecond {
		t.Fatalf("at the rate, the next take waits %s, want 10ms", w)
	}
	// A second at the rate is 100 reads, never more.
	l = newLimiter(100, 100, t0)
	now, reads := t0, 0
	for now.Before(t0.Add(time.Second)) {
		now = now.Add(l.take(now))
		reads++
	}
	if reads < 195 || reads > 201 {
		t.Fatalf("%d reads in the first second, want the burst (100) and a second's rate (100)", reads)
	}
	// Ten idle seconds refill the burst, not ten seconds' worth.
	later := now.Add(10 * time.Second)
	n := 0
	for l.take(later) == 0 {
		n++
	}
	if n != 100 {
		t.Fatalf("%d reads at once after 10s idle, want the burst of 100", n)
	}
}

// TestRateLog_OncePerPeriodWithTheCount: what may happen often is logged
// the first time, then at most once every notifyLogEvery, with how many
// times it happened since the last log.
func TestRateLog_OncePerPeriodWithTheCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var r rateLog
	if n, ok := r.note(t0); !ok || n != 1 {
		t.Fatalf("first: %d %v, want logged with 1", n, ok)
	}
	for i := range 5 {
		if _, ok := r.note(t0.Add(time.Duration(i+1) * 10 * time.Second)); ok {
			t.Fatalf("logged again %ds after, within the period", (i+1)*10)
		}
	}
	if _, ok := r.note(t0.Add(notifyLogEvery - time.Millisecond)); ok {
		t.Fatal("logged again just before the period is over")
	}
	if n, ok := r.note(t0.Add(notifyLogEvery)); !ok || n != 7 {
		t.Fatalf("a period later: %d %v, want logged with the 7 since", n, ok)
	}
}

// startTree starts a process that has a child of its own (sh, then sleep
// in the background), and returns it and its child's pid.
func startTree(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	kid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, kid
}

// TestFromTask_VerdictKeptWhileTheSenderLives: a datagram counts from the
// run's main process and from its descendants (here, a task without a
// cgroup), never from a stranger; a sender's verdict is kept while its
// pidfd says it lives (a second datagram of it is not judged again), and
// dropped when it dies (a pid that may be another's is judged afresh); a
// relaunch forgets every verdict.
func TestFromTask_VerdictKeptWhileTheSenderLives(t *testing.T) {
	task, kid := startTree(t)
	stranger := exec.Command("sleep", "1000")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	s := &server{log: hclog.NewNullLogger(), task: &taskState{pid: task.Process.Pid}}
	defer s.dropSenders(true)
	if !s.fromTask(task.Process.Pid) {
		t.Fatal("the main process's datagram does not count")
	}
	if len(s.rd.senders) != 0 {
		t.Fatal("the main process was judged and kept: it is known")
	}
	for i := range 2 {
		if !s.fromTask(kid) {
			t.Fatalf("datagram %d of the task's child does not count", i+1)
		}
		if s.fromTask(stranger.Process.Pid) {
			t.Fatalf("datagram %d of a stranger counts", i+1)
		}
	}
	if len(s.rd.senders) != 2 || !s.rd.senders[kid].ok || s.rd.senders[stranger.Process.Pid].ok {
		t.Fatalf("kept verdicts %v, want the child's (yes) and the stranger's (no)", s.rd.senders)
	}
	kept := s.rd.senders[kid]
	if !s.fromTask(kid) || s.rd.senders[kid] != kept {
		t.Fatal("the child's second datagram was judged again")
	}
	// The child dies: its verdict is not believed for its pid any more.
	if err := syscall.Kill(kid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := kept.fd.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.fromTask(kid) {
		t.Fatal("a datagram from the dead child's pid counts on its old verdict")
	}
	if _, ok := s.rd.senders[kid]; ok {
		t.Fatal("the dead child's verdict is still kept")
	}
	// A run that ended counts nothing; a relaunch judges afresh.
	s.task.exited = true
	if s.fromTask(task.Process.Pid) {
		t.Fatal("a datagram of an ended run counts")
	}
	s.resetReadiness()
	if len(s.rd.senders) != 0 {
		t.Fatalf("a relaunch kept %d verdicts", len(s.rd.senders))
	}
}

// TestFromTask_KeepsAtMostMaxSenders: the verdicts kept are bounded; past
// the bound those of senders that ended go first, then all.
func TestFromTask_KeepsAtMostMaxSenders(t *testing.T) {
	task, _ := startTree(t)
	s := &server{log: hclog.NewNullLogger(), task: &taskState{pid: task.Process.Pid}}
	defer s.dropSenders(true)
	var procs []*exec.Cmd
	for range maxSenders + 3 {
		p := exec.Command("sleep", "1000")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
		if s.fromTask(p.Process.Pid) {
			t.Fatal("a stranger counts")
		}
		if len(s.rd.senders) > maxSenders {
			t.Fatalf("%d verdicts kept, want at most %d", len(s.rd.senders), maxSenders)
		}
	}
	if _, ok := s.rd.senders[procs[len(procs)-1].Process.Pid]; !ok {
		t.Fatal("the last sender's verdict was not kept")
	}
}

// TestParseNotice_WhichLinesCount: of a datagram's lines only the exact
// values count: READY=1 (not READY=0, READY=10, or a key that only ends
// in READY), the last STATUS= (an empty one too), STOPPING=1, WATCHDOG=1
// and WATCHDOG=trigger; anything else is nothing.
func TestParseNotice_WhichLinesCount(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		data string
		want notice
	}{
		{"READY=1", notice{ready: true}},
		{"READY=0", notice{}},
		{"READY=10", notice{}},
		{"READY=", notice{}},
		{"READY", notice{}},
		{"XREADY=1", notice{}},
		{"READY=1\nREADY=0", notice{ready: true}},
		{"STATUS=warming up\nREADY=1\n", notice{ready: true, status: str("warming up")}},
		{"STATUS=a\nSTATUS=b", notice{status: str("b")}},
		{"STATUS=", notice{status: str("")}},
		{"STOPPING=1", notice{stopping: true}},
		{"STOPPING=0", notice{}},
		{"WATCHDOG=1", notice{ping: true}},
		{"WATCHDOG=trigger", notice{trigger: true}},
		{"WATCHDOG=0", notice{}},
		{"MAINPID=42\nERRNO=2\nBARRIER=1", notice{}},
	} {
		got := parseNotice([]byte(tc.data))
		if got.ready != tc.want.ready || got.stopping != tc.want.stopping || got.ping != tc.want.ping || got.trigger != tc.want.trigger ||
			(got.status == nil) != (tc.want.status == nil) || got.status != nil && *got.status != *tc.want.status {
			t.Errorf("%q: %+v, want %+v", tc.data, got, tc.want)
		}
	}
}
