package agent

import (
	"testing"
	"time"
)

// TestHostFacts_OneDetectionSharedAsCopies: within hostTTL the job path
// is given the same detection, each time as a copy of its own (what one
// caller adds to its maps reaches no other), and a detection older than
// hostTTL is made again.
func TestHostFacts_OneDetectionSharedAsCopies(t *testing.T) {
	l := &Local{}
	a := l.hostFacts()
	if a.Attrs["kernel.name"] == "" || a.IP == "" {
		t.Fatalf("the host was not detected: %+v", a)
	}
	first := l.host
	a.Attrs["kernel.name"] = "changed"
	a.Node["x"], a.Meta["y"] = "1", "2"
	b := l.hostFacts()
	if l.host != first {
		t.Error("the host was detected again within hostTTL")
	}
	if b.Attrs["kernel.name"] == "changed" || b.Node["x"] != "" || b.Meta["y"] != "" {
		t.Errorf("a caller's change reached the next caller: %+v", b)
	}
	l.hostMu.Lock()
	l.hostAt = time.Now().Add(-hostTTL)
	l.hostMu.Unlock()
	_ = l.hostFacts()
	if l.host == first {
		t.Error("a detection hostTTL old served again")
	}
	l.hostMu.Lock()
	l.hostAt = time.Now().Add(time.Hour) // the clock went back
	l.hostMu.Unlock()
	second := l.host
	_ = l.hostFacts()
	if l.host == second {
		t.Error("a detection from the future (the clock went back) served again")
	}
}
