package clikit

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// EventDetails describes what an event carries, in words.
func EventDetails(e fsm.Event) string {
	var parts []string
	if e.Spec != nil {
		parts = append(parts, fmt.Sprintf("%s: %s", e.Spec.Driver, strings.Join(append([]string{e.Spec.Command}, e.Spec.Args...), " ")))
	}
	if e.Nonce != "" {
		parts = append(parts, "nonce "+e.Nonce)
	}
	if e.Executor != nil {
		parts = append(parts, fmt.Sprintf("executor pid %d", e.Executor.PID))
	}
	if e.TaskPID != 0 {
		parts = append(parts, fmt.Sprintf("task pid %d", e.TaskPID))
	}
	if e.Signal != 0 {
		s := "signal " + SignalName(e.Signal)
		if e.Grace > 0 {
			s += ", grace " + e.Grace.String()
		}
		parts = append(parts, s)
	}
	if e.Exit != nil {
		parts = append(parts, DescribeExit(*e.Exit))
	}
	if e.Type == fsm.EventRestartIntent {
		parts = append(parts, fmt.Sprintf("restart %d after %s", e.Attempt, e.Delay))
	}
	if e.Target != fsm.StateNone {
		parts = append(parts, "-> "+e.Target.String())
	}
	if e.Replaces != "" {
		parts = append(parts, "replaces "+e.Replaces)
	}
	if e.ReplacedBy != "" {
		parts = append(parts, "to be replaced by "+e.ReplacedBy)
	}
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	for _, w := range e.Warnings {
		parts = append(parts, "warning: "+w.Text)
	}
	return strings.Join(parts, "; ")
}

// EventJSON is an event as `events --json` prints it (docs/cli.md lists
// its fields).
type EventJSON struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"` // when it happened (a task-exited's: when the task exited)
	// Recorded is when the event was appended, where that was later than
	// Time.
	Recorded    *time.Time `json:"recorded,omitempty"`
	Event       string     `json:"event"`
	Details     string     `json:"details,omitempty"`
	Nonce       string     `json:"nonce,omitempty"`
	ExecutorPID int        `json:"executor_pid,omitempty"`
	TaskPID     int        `json:"task_pid,omitempty"`
	ExitCode    *int       `json:"exit_code,omitempty"`
	ExitSignal  int        `json:"exit_signal,omitempty"`
	Signal      int        `json:"signal,omitempty"`
	Grace       string     `json:"grace,omitempty"`
	Delay       string     `json:"delay,omitempty"`
	Target      string     `json:"target,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Cause       string     `json:"cause,omitempty"`
	Warnings    []string   `json:"warnings,omitempty"`
	PeakMemory  uint64     `json:"peak_memory_bytes,omitempty"`
	Spec        *fsm.Spec  `json:"spec,omitempty"`
	Replaces    string     `json:"replaces,omitempty"`
	ReplacedBy  string     `json:"replaced_by,omitempty"`
}

// TaskEventJSON is an event as `events --json` prints it (and `tether
// cluster events`): the task's id, then the event.
type TaskEventJSON struct {
	Task string `json:"task"`
	EventJSON
}

// NewEventJSON is e as `events --json` prints it, but for its task's id.
func NewEventJSON(e fsm.Event) EventJSON {
	j := EventJSON{Seq: e.Seq, Time: time.Unix(0, e.Time).UTC(), Event: e.Type.String(), Details: EventDetails(e),
		Nonce: e.Nonce, TaskPID: e.TaskPID, Signal: e.Signal, Reason: e.Reason, Spec: e.Spec, Replaces: e.Replaces, ReplacedBy: e.ReplacedBy}
	if e.Recorded != 0 {
		r := time.Unix(0, e.Recorded).UTC()
		j.Recorded = &r
	}
	if e.Executor != nil {
		j.ExecutorPID = e.Executor.PID
	}
	if e.Exit != nil {
		if e.Exit.Signal > 0 {
			j.ExitSignal = e.Exit.Signal
		} else {
			code := e.Exit.Code
			j.ExitCode = &code
		}
		j.PeakMemory = e.Exit.PeakMemory
	}
	if e.Grace > 0 {
		j.Grace = e.Grace.String()
	}
	if e.Delay > 0 {
		j.Delay = e.Delay.String()
	}
	if e.Cause != fsm.CauseNone {
		j.Cause = e.Cause.String()
	}
	for _, w := range e.Warnings {
		j.Warnings = append(j.Warnings, w.Text)
	}
	if e.Target != fsm.StateNone {
		j.Target = e.Target.String()
	}
	return j
}

// EventTimeLayout is how an event's time is printed, in local time.
const EventTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// EventTable prints events as `tether events` does: TIME (when what the
// event records happened: a task-exited's, when the task exited), EVENT
// and DETAILS, one event a line, the details ending with when the event
// was recorded where that was later. Its columns have fixed widths (the time's in
// the local zone, the longest event name's), so that a line can be
// printed as soon as its event is known: `tether cluster events -f`
// prints the same lines as they come.
type EventTable struct {
	w          io.Writer
	timeWidth  int
	eventWidth int
	loc        *time.Location
}

// NewEventTable returns a table printing to w in the local zone.
func NewEventTable(w io.Writer) *EventTable { return newEventTable(w, time.Local) }

func newEventTable(w io.Writer, loc *time.Location) *EventTable {
	t := &EventTable{w: w, loc: loc, eventWidth: len("EVENT")}
	for typ := fsm.EventNone + 1; typ.Valid(); typ++ {
		t.eventWidth = max(t.eventWidth, len(typ.String()))
	}
	// The zone's offset may change over a year (summer time), and a zero
	// offset prints as "Z": the widest of the year's forms.
	year := time.Now().In(loc).Year()
	for _, m := range []time.Month{time.January, time.July} {
		t.timeWidth = max(t.timeWidth, len(time.Date(year, m, 1, 0, 0, 0, 0, loc).Format(EventTimeLayout)))
	}
	return t
}

// Header prints the column names.
func (t *EventTable) Header() error {
	_, err := fmt.Fprintf(t.w, "%-*s  %-*s  %s\n", t.timeWidth, "TIME", t.eventWidth, "EVENT", "DETAILS")
	return err
}

// Line prints one event.
func (t *EventTable) Line(e fsm.Event) error {
	details := Printable(EventDetails(e))
	if e.Recorded != 0 {
		details += " (recorded " + time.Unix(0, e.Recorded).In(t.loc).Format(EventTimeLayout) + ")"
	}
	line := fmt.Sprintf("%-*s  %-*s  %s", t.timeWidth, time.Unix(0, e.Time).In(t.loc).Format(EventTimeLayout),
		t.eventWidth, e.Type, details)
	_, err := fmt.Fprintln(t.w, strings.TrimRight(line, " "))
	return err
}
