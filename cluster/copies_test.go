package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

const copiesJob = `job "web" {
  group "front" {
    count = 3
    task "server" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
`

// placedCopyOf is copy index of web.front placed at rev with the given
// stop_after_client_disconnect.
func placedCopyOf(index int, rev int64, stopAfter time.Duration) PlacedCopy {
	return PlacedCopy{
		Placed: Placed{Job: "web", Group: "front", Index: index, Node: "n1", Version: 1, Revision: rev, StopAfterClientDisconnect: stopAfter},
		Spec:   JobSpec{Job: "web", Version: 1, File: "web.nomad", Text: copiesJob},
	}
}

func setOf(copies ...PlacedCopy) PlacedSet {
	s := PlacedSet{Node: "n1", Revision: 100, Copies: map[CopyID]PlacedCopy{}, Refused: map[CopyID]Refusal{}}
	for _, c := range copies {
		s.Copies[c.Placed.ID()] = c
	}
	return s
}

// A placed copy is read as one copy of its group: its index, its task's
// name as the agent names it, its placement in its inputs (so that a new
// placement is a new declaration).
func TestReadCopy_IsOneCopyOfItsGroupAtItsPlacement(t *testing.T) {
	e, err := ReadCopy(placedCopyOf(2, 7, 0), DefaultRemoteDrivers)
	if err != nil {
		t.Fatal(err)
	}
	if e.Copy != (CopyID{Job: "web", Group: "front", Index: 2}) || e.Revision != 7 || len(e.Names) != 1 || e.Names[0] != "server[2]" ||
		e.Inputs.Group != "front" || e.Inputs.Copy == nil || e.Inputs.Copy.Index != 2 || e.Inputs.Copy.Placement != 7 {
		t.Errorf("copy entry %+v", e)
	}
	again, _ := ReadCopy(placedCopyOf(2, 8, 0), DefaultRemoteDrivers)
	if again.Digest() == e.Digest() {
		t.Error("a new placement of the copy has the same digest: its tasks would not be replaced")
	}
	other, _ := ReadCopy(placedCopyOf(1, 7, 0), DefaultRemoteDrivers)
	if other.Digest() == e.Digest() {
		t.Error("two copies of one placement revision share a digest")
	}
}

// A copy whose driver the node does not allow for a spec from etcd, or a
// copy index past the group's count, is refused with why.
func TestReadCopy_RefusesADriverNotAllowedAndACopyPastTheCount(t *testing.T) {
	if _, err := ReadCopy(placedCopyOf(0, 7, 0), []string{"raw_exec"}); err == nil || !strings.Contains(err.Error(), `driver "exec" is not allowed`) ||
		!strings.Contains(err.Error(), "--allow-remote-drivers") {
		t.Errorf("exec on a node allowing raw_exec only: %v", err)
	}
	if _, err := ReadCopy(placedCopyOf(3, 7, 0), DefaultRemoteDrivers); err == nil || !strings.Contains(err.Error(), "no copy 3") {
		t.Errorf("copy 3 of a group of 3: %v", err)
	}
	c := placedCopyOf(0, 7, 0)
	c.Spec.Text = strings.Replace(copiesJob, `job "web"`, `job "api"`, 1)
	if _, err := ReadCopy(c, DefaultRemoteDrivers); err == nil || !strings.Contains(err.Error(), "not job web") {
		t.Errorf("a spec of another job: %v", err)
	}
}

// stop_after_client_disconnect at its edges: a copy runs while the node's
// last proof of its lease is younger than max(setting, the keep-alive
// gap), and stops from then on; a copy without the setting never stops
// for it; Wake says when the next falls due.
func TestCopyPlan_StopAfterClientDisconnectAtItsEdges(t *testing.T) {
	contact := time.Unix(1000, 0)
	gap := 2 * time.Second
	set := setOf(placedCopyOf(0, 7, 5*time.Second), placedCopyOf(1, 7, time.Second), placedCopyOf(2, 7, 0))
	var r CopyReader
	for _, c := range []struct {
		after   time.Duration
		stopped []int
	}{
		{0, nil},
		{2*time.Second - 1, nil},         // the 1s copy waits for the gap
		{2 * time.Second, []int{1}},      // the gap passed: the 1s copy stops
		{5*time.Second - 1, []int{1}},    // the 5s copy not yet
		{5 * time.Second, []int{0, 1}},   // now it does
		{time.Hour, []int{0, 1}},         // the copy without the setting never
		{-time.Second, nil},              // a contact after now: none
		{5*time.Second + 1, []int{0, 1}}, // past it
	} {
		p := r.Plan(set, DefaultRemoteDrivers, contact, contact.Add(c.after), gap)
		var got []int
		for _, id := range p.Disconnected {
			got = append(got, id.Index)
		}
		if len(got) != len(c.stopped) || (len(got) > 0 && (got[0] != c.stopped[0] || got[len(got)-1] != c.stopped[len(c.stopped)-1])) {
			t.Errorf("%v after the last contact: stopped %v, want %v", c.after, got, c.stopped)
		}
		if len(p.Run)+len(p.Disconnected) != 3 {
			t.Errorf("%v: run %d + stopped %d, want 3", c.after, len(p.Run), len(p.Disconnected))
		}
		if _, ok := p.Run["web.front[2]"]; !ok {
			t.Errorf("%v: the copy without stop_after_client_disconnect does not run", c.after)
		}
	}
	p := r.Plan(set, DefaultRemoteDrivers, contact, contact, gap)
	if want := contact.Add(2 * time.Second); !p.Wake.Equal(want) {
		t.Errorf("wake %v, want %v (the 1s copy, at the gap)", p.Wake, want)
	}
}

// A placement the node refused before reading it, and one it cannot run,
// are refused with their revision and why; neither runs.
func TestCopyPlan_RefusedPlacementsAreNamedWithTheirRevision(t *testing.T) {
	set := setOf(placedCopyOf(0, 7, 0), placedCopyOf(5, 9, 0))
	set.Refused[CopyID{Job: "web", Group: "front", Index: 1}] = Refusal{Revision: 8, Err: errors.New("job web has no version 4 in etcd")}
	var r CopyReader
	p := r.Plan(set, DefaultRemoteDrivers, time.Unix(0, 0), time.Unix(0, 0), time.Second)
	if len(p.Run) != 1 || len(p.Refused) != 2 {
		t.Fatalf("run %v, refused %v: want copy 0 run, 1 and 5 refused", p.Run, p.Refused)
	}
	if rf := p.Refused["web.front[1]"]; rf.Revision != 8 || !strings.Contains(rf.Err.Error(), "no version 4") {
		t.Errorf("copy 1: %+v", rf)
	}
	if rf := p.Refused["web.front[5]"]; rf.Revision != 9 || !strings.Contains(rf.Err.Error(), "no copy 5") {
		t.Errorf("copy 5: %+v", rf)
	}
}

// Every standing of the agent's is a verdict or says nothing (stopping).
func TestVerdictOf_EveryStanding(t *testing.T) {
	for standing, want := range map[string]VerdictState{
		"starting": VerdictStarting, "restarting": VerdictStarting, "running": VerdictRunning, "ready": VerdictReady,
		"down": VerdictFailed, "refused": VerdictRefused, "stopped": VerdictStopped, "completed": VerdictComplete, "stopping": "", "": "",
	} {
		got, ok := VerdictOf(standing)
		if got != want || ok != (want != "") {
			t.Errorf("VerdictOf(%q) = %q, %v; want %q", standing, got, ok, want)
		}
	}
}

// A node that regains etcd after a gap longer than a connected node sees
// lists its placements again, so that a set read after it came back is
// delivered (what a copy stopped for stop_after_client_disconnect waits
// for), change or none; each proof moves the contact forward, never back.
func TestNode_ContactRegainedAfterAGapListsThePlacementsAgain(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir), func(c *NodeConfig) { c.NoScheduler = true })
	runNode(t, n)
	ctx := ctxT(t)
	var first PlacedSet
	select {
	case first = <-n.Placements():
	case <-ctx.Done():
		t.Fatal("no placements delivered")
	}
	at, changed := n.Contact()
	n.touchContact(at.Add(-time.Second))
	if again, _ := n.Contact(); !again.Equal(at) {
		t.Errorf("a proof older than the contact moved it back: %v, was %v", again, at)
	}
	back := at.Add(n.KeepAliveGap() + time.Second)
	n.touchContact(back)
	select {
	case <-changed:
	default:
		t.Error("the contact moved without a word on its channel")
	}
	// The list is one read of etcd, at once: 15 s bounds a node that
	// never lists again (the test's own minute is for its setup).
	listed, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	select {
	case s := <-n.Placements():
		if s.FromCopy || s.Revision < first.Revision {
			t.Errorf("after the gap: %+v, want etcd's set as of now", s)
		}
	case <-listed.Done():
		t.Fatal("contact regained after a gap: the placements were not listed again within 15 s")
	}
}
