package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/fsm"
)

// The node's feed decisions, without a process: what it declares to the
// agent and which verdicts it owes, from the node's desired set, its
// placements, its contact with etcd and the agent's status.

const feedJob = `job "web" {
  group "front" {
    count = 3
    task "server" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
`

// testFeed is a nodeFeed whose Sets are recorded, on a clock the test
// moves.
type testFeed struct {
	*nodeFeed
	now      time.Time
	entries  map[string]agent.FeedEntry
	problems map[string]error
	sets     int
}

func newTestFeed(t *testing.T) *testFeed {
	feed, err := agent.NewFeed("etcd:/tether/desired/n1")
	if err != nil {
		t.Fatal(err)
	}
	tf := &testFeed{now: time.Unix(1000, 0)}
	tf.nodeFeed = newNodeFeed(feed, cluster.DefaultRemoteDrivers, hclog.NewNullLogger())
	tf.nodeFeed.now = func() time.Time { return tf.now }
	tf.nodeFeed.set = func(e map[string]agent.FeedEntry, p map[string]error) {
		tf.entries, tf.problems, tf.sets = e, p, tf.sets+1
	}
	tf.setDesired(cluster.DesiredSet{Node: "n1"})
	tf.setContact(tf.now, time.Second)
	return tf
}

func placedAt(rev int64, stopAfter time.Duration, indexes ...int) cluster.PlacedSet {
	s := cluster.PlacedSet{Node: "n1", Revision: rev, Copies: map[cluster.CopyID]cluster.PlacedCopy{}, Refused: map[cluster.CopyID]cluster.Refusal{}}
	for _, i := range indexes {
		pl := cluster.Placed{Job: "web", Group: "front", Index: i, Node: "n1", Version: 1, Revision: rev, StopAfterClientDisconnect: stopAfter}
		s.Copies[pl.ID()] = cluster.PlacedCopy{Placed: pl, Spec: cluster.JobSpec{Job: "web", Version: 1, File: "web.nomad", Text: feedJob}}
	}
	return s
}

// status is the agent's status with an entry from etcd for each name,
// running, each of the copy's declaration at rev.
func status(rev int64, names ...string) agent.Status {
	st := agent.Status{Generation: 1}
	for _, n := range names {
		e := agent.Entry{Name: n, Origin: "etcd", Standing: agent.StandingRunning, State: fsm.StateRunning, Tasks: []string{"t-" + n}, Task: "t-" + n}
		if isCopyEntry(n) {
			var idx int
			for i := range 3 {
				if strings.HasSuffix(n, "["+string(rune('0'+i))+"]") {
					idx = i
				}
			}
			c, err := cluster.ReadCopy(placedAt(rev, 0, idx).Copies[cluster.CopyID{Job: "web", Group: "front", Index: idx}], cluster.DefaultRemoteDrivers)
			if err == nil {
				e.Digest = c.Digest()
			}
		}
		st.Entries = append(st.Entries, e)
	}
	return st
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Nothing is declared before the agent's status is known (what to leave
// as it is would not be known).
func TestNodeFeed_DeclaresNothingBeforeTheAgentsStatus(t *testing.T) {
	tf := newTestFeed(t)
	tf.setPlaced(placedAt(10, 0, 0))
	tf.update()
	if tf.sets != 0 {
		t.Errorf("declared %v before the agent's status was known", tf.entries)
	}
	tf.setStatus(agent.Status{}) // generation 0: the agent before its first round
	tf.update()
	if tf.sets != 0 {
		t.Errorf("declared %v on the agent's status before its first round (its records not read yet)", tf.entries)
	}
	tf.setStatus(agent.Status{Generation: 1})
	tf.update()
	if tf.sets != 1 || len(tf.entries) != 1 {
		t.Errorf("after the status: %d sets, entries %v", tf.sets, keys(tf.entries))
	}
}

// A copy the node no longer owns is stopped before a copy new to it is
// declared.
func TestNodeFeed_StopsWhatItNoLongerOwnsBeforeItStartsAnything(t *testing.T) {
	tf := newTestFeed(t)
	tf.setStatus(status(10, "web.front[0]", "web.front[1]"))
	tf.setPlaced(placedAt(20, 0, 1, 2)) // 0 moved away, 2 new
	tf.update()
	if got := keys(tf.entries); !slices.Equal(got, []string{"web.front[1]"}) {
		t.Fatalf("while web.front[0] stops: declared %v, want only web.front[1] (web.front[2] waits)", got)
	}
	tf.setStatus(status(10, "web.front[1]")) // web.front[0] is gone
	tf.update()
	if got := keys(tf.entries); !slices.Equal(got, []string{"web.front[1]", "web.front[2]"}) {
		t.Errorf("once web.front[0] stopped: declared %v", got)
	}
}

// Placements from the local copy start and stop nothing: the copies the
// agent has are left as they are until etcd answers.
func TestNodeFeed_LocalCopysPlacementsLeaveCopiesAsTheyAre(t *testing.T) {
	tf := newTestFeed(t)
	tf.setStatus(status(10, "web.front[0]"))
	local := placedAt(10, 0, 0, 1)
	local.FromCopy = true
	tf.setPlaced(local)
	vs, _ := tf.update()
	if len(tf.entries) != 0 || tf.problems["web.front[0]"] == nil || tf.problems["web.front[1]"] != nil || vs != nil {
		t.Errorf("from the local copy: entries %v, problems %v, verdicts %v; want web.front[0] left as it is, nothing started, no verdict",
			keys(tf.entries), tf.problems, vs)
	}
	tf.setPlaced(placedAt(30, 0)) // etcd: nothing here any more
	tf.update()
	if len(tf.entries)+len(tf.problems) != 0 {
		t.Errorf("etcd places nothing here: entries %v, problems %v; want none (web.front[0] stops)", keys(tf.entries), tf.problems)
	}
}

// The verdict is the agent's standing of the copy's entry, only when that
// standing is of the copy's current placement (its digest).
func TestNodeFeed_VerdictIsTheStandingOfTheCurrentPlacement(t *testing.T) {
	tf := newTestFeed(t)
	tf.setStatus(status(10, "web.front[0]"))
	tf.setPlaced(placedAt(10, 0, 0))
	vs, _ := tf.update()
	v, ok := vs[cluster.CopyID{Job: "web", Group: "front", Index: 0}]
	if !ok || v.State != cluster.VerdictRunning || v.Revision != 10 || len(v.Tasks) != 1 || v.Tasks[0].Name != "server[0]" ||
		v.Tasks[0].ID != "t-web.front[0]" || v.Tasks[0].State != "running" {
		t.Errorf("verdict %+v (%v), want running at revision 10 with its task", v, ok)
	}
	tf.setPlaced(placedAt(11, 0, 0)) // placed again: the standing is of revision 10
	vs, _ = tf.update()
	if v, ok := vs[cluster.CopyID{Job: "web", Group: "front", Index: 0}]; ok {
		t.Errorf("a standing of the old placement gave a verdict on the new: %+v", v)
	}
}

// A copy with stop_after_client_disconnect stops once etcd has been away
// that long, and runs again only on placements received after the node
// regained etcd.
func TestNodeFeed_StopAfterClientDisconnectStopsAndWaitsForFreshPlacements(t *testing.T) {
	tf := newTestFeed(t)
	tf.setStatus(status(10, "web.front[0]"))
	tf.setPlaced(placedAt(10, 3*time.Second, 0))
	contact := tf.now
	if _, wake := tf.update(); len(tf.entries) != 1 || !wake.Equal(contact.Add(3*time.Second)) {
		t.Fatalf("connected: entries %v, wake %v", keys(tf.entries), wake)
	}
	tf.now = contact.Add(3*time.Second - 1)
	tf.update()
	if len(tf.entries) != 1 {
		t.Fatalf("just under the setting: entries %v, want it running", keys(tf.entries))
	}
	tf.now = contact.Add(3 * time.Second)
	vs, _ := tf.update()
	if len(tf.entries) != 0 || vs[cluster.CopyID{Job: "web", Group: "front", Index: 0}].State != cluster.VerdictStopped {
		t.Fatalf("at the setting: entries %v, verdicts %v; want it stopped", keys(tf.entries), vs)
	}
	// etcd answers again: the set the node had is not enough.
	tf.now = tf.now.Add(time.Second)
	tf.setContact(tf.now, time.Second)
	tf.update()
	if len(tf.entries) != 0 {
		t.Errorf("contact regained, placements not read again: entries %v, want still stopped", keys(tf.entries))
	}
	tf.now = tf.now.Add(time.Millisecond)
	tf.setPlaced(placedAt(10, 3*time.Second, 0))
	tf.update()
	if len(tf.entries) != 1 {
		t.Errorf("placements read after contact regained still place it here: entries %v, want it running", keys(tf.entries))
	}
}
