package clikit

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// Every line of the event table has its columns where the header has
// them, whatever the event, so that a line printed as it comes lines up
// with those printed before it; in a zone with summer time, winter and
// summer times are as wide.
func TestEventTable_FixedColumnsForEveryEventAndSeason(t *testing.T) {
	for _, zone := range []string{"UTC", "Europe/London", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skipf("time zone %s not installed (package tzdata): %v", zone, err)
		}
		var b bytes.Buffer
		tab := newEventTable(&b, loc)
		if err := tab.Header(); err != nil {
			t.Fatal(err)
		}
		year := time.Now().Year()
		for typ := fsm.EventNone + 1; typ.Valid(); typ++ {
			for _, m := range []time.Month{time.January, time.July} {
				at := time.Date(year, m, 2, 3, 4, 5, 6e6, time.UTC).UnixNano()
				if err := tab.Line(fsm.Event{Type: typ, Time: at, Reason: "why"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		head := lines[0]
		evCol, detCol := strings.Index(head, "EVENT"), strings.Index(head, "DETAILS")
		for _, l := range lines[1:] {
			if l[evCol-1] != ' ' || l[evCol] == ' ' || l[detCol-1] != ' ' || l[detCol] == ' ' || !strings.HasSuffix(l[detCol:], "why") {
				t.Errorf("%s: line %q does not line up with %q", zone, l, head)
			}
		}
	}
}

func TestEventTable_LineIsTheEventInWords(t *testing.T) {
	var b bytes.Buffer
	tab := newEventTable(&b, time.UTC)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC).UnixNano()
	_ = tab.Line(fsm.Event{Type: fsm.EventExecutorReaped, Time: at, Exit: &fsm.ExitStatus{Code: -1, Signal: 15}, Target: fsm.StateStopped})
	_ = tab.Line(fsm.Event{Type: fsm.EventRunning, Time: at})
	_ = tab.Line(fsm.Event{Type: fsm.EventFault, Time: at, Reason: "evil\u202eelif"})
	want := "2026-01-02T03:04:05.006Z  executor-reaped    killed by SIGTERM; -> stopped\n" +
		"2026-01-02T03:04:05.006Z  running\n" +
		`2026-01-02T03:04:05.006Z  fault              evil\u202eelif` + "\n"
	if b.String() != want {
		t.Errorf("lines:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestNewEventJSON_CarriesWhatTheEventSays(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := NewEventJSON(fsm.Event{Seq: 7, Type: fsm.EventTaskExited, Time: at.UnixNano(), Exit: &fsm.ExitStatus{Code: 3},
		Grace: time.Second, Cause: fsm.CauseOther, Warnings: []fsm.Warning{{Text: "w"}}, Executor: &fsm.Identity{PID: 9}})
	if j.Seq != 7 || !j.Time.Equal(at) || j.Event != "task-exited" || j.ExitCode == nil || *j.ExitCode != 3 ||
		j.Grace != "1s" || j.Cause == "" || len(j.Warnings) != 1 || j.ExecutorPID != 9 || j.Details == "" {
		t.Errorf("NewEventJSON = %+v", j)
	}
}

// An event recorded later than it happened (a task-exited recorded after
// the task ended) keeps its own time first, and ends its line with when
// it was recorded; its JSON has both, and the run's peak memory.
func TestEventTable_RecordedLaterSaysWhenAfterTheDetails(t *testing.T) {
	var b bytes.Buffer
	tab := newEventTable(&b, time.UTC)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	e := fsm.Event{Type: fsm.EventTaskExited, Time: at.UnixNano(), Recorded: at.Add(90 * time.Second).UnixNano(),
		Exit: &fsm.ExitStatus{Code: 3, PeakMemory: 5 << 20}}
	_ = tab.Line(e)
	want := "2026-01-02T03:04:05.006Z  task-exited        exit code 3 (recorded 2026-01-02T03:05:35.006Z)\n"
	if b.String() != want {
		t.Errorf("line:\n%q\nwant:\n%q", b.String(), want)
	}
	j := NewEventJSON(e)
	if !j.Time.Equal(at) || j.Recorded == nil || !j.Recorded.Equal(at.Add(90*time.Second)) || j.PeakMemory != 5<<20 {
		t.Errorf("JSON: time %v, recorded %v, peak %d", j.Time, j.Recorded, j.PeakMemory)
	}
}
