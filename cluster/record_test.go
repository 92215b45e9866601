package cluster

import (
	"reflect"
	"slices"
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

// TestWireEvent_CoversEveryEventField fails when fsm.Event gains a field
// the mirror does not carry: add it to wireEvent, encodeEvent and
// decodeEvent, then here.
func TestWireEvent_CoversEveryEventField(t *testing.T) {
	carried := []string{"Type", "Seq", "Time", "Recorded", "Spec", "Nonce", "Executor", "TaskPID", "TaskStartTime", "Exit", "Signal", "Grace", "Delay", "Reason", "Cause", "Warnings", "Target", "Attempt", "Replaces", "ReplacedBy"}
	var fields []string
	for f := range reflect.TypeFor[fsm.Event]().Fields() {
		fields = append(fields, f.Name)
	}
	for _, f := range fields {
		if !slices.Contains(carried, f) {
			t.Errorf("fsm.Event.%s is not mirrored", f)
		}
	}
}

func TestEncodeEvent_RoundTripsEveryEventWithEnvRedacted(t *testing.T) {
	oom := 7
	evs := append(lifecycle("web", 0, 1),
		fsm.Event{Type: fsm.EventRestartIntent, Seq: 9, Time: 5, Attempt: 2, Exit: &fsm.ExitStatus{Code: -1, Signal: 9, OOM: true}, Grace: 3},
		fsm.Event{Type: fsm.EventTaskExited, Seq: 16, Time: 4, Recorded: 6, Exit: &fsm.ExitStatus{Code: 0, OOM: true, At: 4, PeakMemory: 1 << 20}},
		fsm.Event{Type: fsm.EventStopRequested, Seq: 10, Time: 6, Signal: 15, Grace: 5e9},
		fsm.Event{Type: fsm.EventExecutorReaped, Seq: 11, Time: 7, Target: fsm.StateStopped, Reason: "stopped"},
		fsm.Event{Type: fsm.EventRestartIntent, Seq: 12, Time: 8, Attempt: 3, Delay: 15e9},
		fsm.Event{Type: fsm.EventLaunched, Seq: 13, Time: 9, TaskPID: 42, TaskStartTime: 4200,
			Warnings: []fsm.Warning{{Kind: fsm.WarnUncontained, Text: "runs uncontained"}, {Kind: fsm.WarnOther, Text: "x"}}},
		fsm.Event{Type: fsm.EventLaunchFailed, Seq: 14, Time: 10, Reason: "no such command", Cause: fsm.CauseCommandNotFound},
		fsm.Event{Type: fsm.EventStopRequested, Seq: 15, Time: 11, Signal: 15, Grace: 5e9, ReplacedBy: "web-2b3c"},
		fsm.Event{Type: fsm.EventCreated, Seq: 1, Time: 12, Spec: &fsm.Spec{Name: "web", Driver: "raw_exec", Command: "/bin/true"}, Replaces: "web-1a2b"},
	)
	evs[0].Spec.OOMScoreAdj = &oom
	evs[0].Spec.Restart = &fsm.RestartPolicy{Attempts: 3}
	for i := range evs {
		if evs[i].Seq == 0 {
			evs[i].Seq = uint64(i + 1)
		}
		b, err := encodeEvent(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeEvent("k", b)
		if err != nil {
			t.Fatal(err)
		}
		want := evs[i]
		want.Spec = redact(want.Spec)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip of %v:\n got %+v\nwant %+v", evs[i], got, want)
		}
	}
	if evs[0].Spec.Env["TOKEN"] == Redacted {
		t.Error("redact changed the caller's spec")
	}
}

func TestDecodeEvent_RefusesWhatItCannotRead(t *testing.T) {
	for _, b := range []string{`{`, `{"seq":1,"type":"no-such-event"}`, `{"seq":0,"type":"running"}`, `{"seq":1,"type":"executor-reaped","target":"nowhere"}`} {
		if _, err := decodeEvent("k", []byte(b)); err == nil {
			t.Errorf("decoded %s", b)
		}
	}
}
