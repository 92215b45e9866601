//go:build linux

package executor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// watchUntil watches the executor until its journal holds n restart
// entries (its runs' ready entries are not counted), checks the whole
// journal's shape (checkJournalShape), and returns the restart entries.
func watchUntil(t *testing.T, c *Client, n int) []fsm.Event {
	t.Helper()
	var all []fsm.Event
	for len(restartEntries(all)) < n {
		st, evs, err := c.Watch(testCtx(t), len(all))
		if err != nil {
			t.Fatalf("Watch(%d): %v", len(all), err)
		}
		all = append(all, evs...)
		if len(evs) == 0 && st.Exited && !st.Restarting {
			t.Fatalf("the task ended with %d journal entries, want %d restart entries: %v", len(all), n, all)
		}
	}
	checkJournalShape(t, all)
	return restartEntries(all)
}

// restartEntries are a journal's restart entries (its ready entries left
// out).
func restartEntries(entries []fsm.Event) []fsm.Event {
	var out []fsm.Event
	for _, e := range entries {
		if e.Type != fsm.EventReady {
			out = append(out, e)
		}
	}
	return out
}

// checkJournalShape checks a journal's entries: each restart an intent
// (numbered from 1) then its outcome (launched, or launch-failed), and at
// most one ready entry per run, at its place (its number in the journal)
// and naming its run (the last relaunch's task process, or for the first
// run any).
func checkJournalShape(t *testing.T, entries []fsm.Event) {
	t.Helper()
	restarts, run, ready := 0, 0, false
	for i, e := range entries {
		if e.Type == fsm.EventReady {
			switch {
			case ready:
				t.Fatalf("journal entry %d: a second ready of one run: %v", i+1, entries)
			case e.Attempt != i+1 || e.TaskPID <= 0 || run != 0 && e.TaskPID != run:
				t.Fatalf("journal entry %d: ready at place %d naming pid %d, the run is %d: %v", i+1, e.Attempt, e.TaskPID, run, entries)
			}
			ready = true
			continue
		}
		want := fsm.EventRestartIntent
		if restarts%2 == 1 {
			want = fsm.EventLaunched
		}
		if e.Type != want && !(restarts%2 == 1 && e.Type == fsm.EventLaunchFailed) {
			t.Fatalf("journal entry %d is %s, want %s: %v", i+1, e.Type, want, entries)
		}
		if e.Type == fsm.EventRestartIntent && e.Attempt != restarts/2+1 {
			t.Fatalf("journal entry %d has attempt %d, want %d", i+1, e.Attempt, restarts/2+1)
		}
		if e.Type == fsm.EventRestartIntent && ready && i > 0 && entries[i-1].Type == fsm.EventReady && entries[i-1].Time > e.Time {
			t.Fatalf("journal entry %d: a restart before the ready it follows", i+1)
		}
		if e.Type == fsm.EventLaunched {
			run, ready = e.TaskPID, false
		}
		restarts++
	}
}

// Mode fail: the task is restarted attempts times, then ends with its last
// exit; every restart is journalled (intent, then the relaunch), and the
// journal on disk says the same as the watch.
func TestRestart_FailModeExhaustsTheAttempts(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	spec := m.taskSpec(t, "exit", "3")
	spec.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Mode: fsm.RestartFail}
	first, err := c.Launch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	entries := watchUntil(t, c, 4)
	checkJournalShape(t, entries)
	if entries[0].Exit == nil || entries[0].Exit.Code != 3 || entries[1].TaskPID == first.PID {
		t.Fatalf("first restart: %v (first run pid %d)", entries[:2], first.PID)
	}
	x, err := c.Wait(ctx)
	if err != nil || x.Code != 3 {
		t.Fatalf("Wait: %+v %v, want the last run's exit code 3", x, err)
	}
	dir := filepath.Dir(c.Identity().Socket)
	j, ok, err := wire.ReadJournal(dir)
	if err != nil || !ok || len(j.Entries) != 4 || j.Match(c.Identity()) != nil {
		t.Fatalf("journal on disk: %+v %v %v", j, ok, err)
	}
	waitDead(t, c.Identity()) // the record is written after the waiters are answered
	if got, ok, _ := readExitStatus(dir); !ok || got.Code != 3 {
		t.Fatalf("exit.json: %+v %v", got, ok)
	}
}

// Mode delay: once the attempts of the interval are used, the executor
// waits for the next interval instead of failing; a stop during that delay
// ends the task for good (no relaunch).
func TestRestart_DelayModeWaitsAndAStopEndsIt(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	spec := m.taskSpec(t, "exit", "1")
	spec.Restart = &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartDelay}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	entries := watchUntil(t, c, 3)
	checkJournalShape(t, entries)
	if d := entries[2].Delay; d < 59*time.Minute || d > time.Hour {
		t.Fatalf("the second restart waits %s, want the rest of the hour's interval", d)
	}
	if st, err := c.Status(ctx); err != nil || !st.Restarting || st.Journal != 3 {
		t.Fatalf("status during the delay: %+v %v", st, err)
	}
	x, err := c.Stop(ctx, 15, time.Second)
	if err != nil || x.Code != 1 {
		t.Fatalf("Stop during the delay: %+v %v", x, err)
	}
	j, _, _ := wire.ReadJournal(filepath.Dir(c.Identity().Socket))
	if len(j.Entries) != 3 {
		t.Fatalf("the stopped task was relaunched: journal %v", j.Entries)
	}
}

// A relaunch that fails (the command is gone) is journalled as
// launch-failed, and the task ends with the last run's exit.
func TestRestart_FailedRelaunchIsJournalled(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "task-binary")
	src, err := os.ReadFile(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(tmp, "ctl")
	if err := unix.Mkfifo(ctl, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := m.taskSpec(t, "serve", "-ctl", ctl)
	spec.Command = bin
	spec.Restart = &fsm.RestartPolicy{Attempts: 3, Interval: time.Hour, Mode: fsm.RestartFail}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil { // the running task keeps its image
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, []byte("exit 2\n"), 0); err != nil {
		t.Fatal(err)
	}
	entries := watchUntil(t, c, 2)
	if entries[0].Type != fsm.EventRestartIntent || entries[1].Type != fsm.EventLaunchFailed || entries[1].Reason == "" {
		t.Fatalf("journal %v, want the intent then launch-failed with its reason", entries)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 2 {
		t.Fatalf("Wait: %+v %v, want the last run's exit 2", x, err)
	}
}
