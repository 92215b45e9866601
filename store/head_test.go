package store

import (
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

// TestHead_RoundTripsAndStaysReadableByTheTetherBefore: a task's head
// carries every field of fsm.Task that decides whether an event folds,
// the count of journalled ready events among them; a head without one is
// written in version 2, as the tether before journalled readiness wrote
// it (which reads it), and a version-2 head reads as no readies.
func TestHead_RoundTripsAndStaysReadableByTheTetherBefore(t *testing.T) {
	for _, h := range []head{
		{version: 7, state: fsm.StateRunning, nonce: "n1", restarts: 2},
		{version: 9, state: fsm.StateRestarting, target: fsm.StateNone, nonce: "n2", restarts: 3, readies: 4},
		{version: 12, state: fsm.StateReaping, target: fsm.StateStopped, nonce: "n3", readies: 1},
	} {
		b := encodeHead(h)
		if want := byte(headVersion2); h.readies > 0 {
			if b[0] != headVersion {
				t.Errorf("%+v written in version %d, want %d", h, b[0], headVersion)
			}
		} else if b[0] != want {
			t.Errorf("%+v written in version %d, want %d (readable by the tether before)", h, b[0], want)
		}
		got, err := decodeHead("a", b)
		if err != nil || got != h {
			t.Errorf("%+v read back as %+v, %v", h, got, err)
		}
		if d := got.disagrees(&fsm.Task{State: h.state, Target: h.target, Nonce: h.nonce, Restarts: h.restarts, Readies: h.readies + 1}); d == "" {
			t.Errorf("%+v: a log with one ready more does not disagree", h)
		}
	}
	b := encodeHead(head{version: 1, state: fsm.StateRunning, nonce: "n", readies: 1})
	b[0] = 4
	if _, err := decodeHead("a", b); err == nil {
		t.Error("a head of version 4 was read")
	}
}
