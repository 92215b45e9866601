package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
)

// The node's side of placed jobs. The agent has one feed of desired
// entries from etcd; nodeFeed sets it from two sources, the node's
// desired set (desired/NODE/: `tether cluster start --node`) and its
// placed copies (place/NODE/: the scheduler's), each copy an entry of its
// own (cluster.EntryName: JOB.GROUP[INDEX], which no desired name can
// be), read by the agent through its one job path (package job) with the
// selection of that copy and its placement revision (job.Inputs.Copy):
// the copy runs on its node exactly as `tether start` would run it, under
// the node's host (its name and --meta) and allow lists. It also writes
// the node's verdict on each copy (cluster.Node.WriteVerdict) from the
// agent's standing of its entry, or the reason it refuses the copy.
//
// Its rules:
//   - A copy the node no longer owns (its key gone from place/NODE/, or
//     placed again under a new revision) is stopped before any copy new to
//     the node is declared: a node that comes back stops the copies placed
//     elsewhere meanwhile before it starts anything (stopsFirst).
//   - Until a source has answered (etcd or its local copy), the entries it
//     declared are left as they are, never stopped for want of an answer.
//     For placements only etcd's answer counts: a copy of the local copy
//     may have been placed elsewhere while the node was away, so until
//     etcd answers the node's copies are left as they are (those running
//     run on, none is started or restarted), and --once starts none.
//   - A copy whose group has stop_after_client_disconnect stops once the
//     node has had no proof of its lease for that long
//     (cluster.CopyReader.Plan), and runs again only on a set of
//     placements received after the node regained etcd (the node lists
//     them again then): never on the set it had before it was cut off.

// placedFeed is what nodeFeed reads of the node (a *cluster.Node).
type placedNode interface {
	Desired() <-chan cluster.DesiredSet
	Placements() <-chan cluster.PlacedSet
	Contact() (time.Time, <-chan struct{})
	KeepAliveGap() time.Duration
	WriteVerdict(ctx context.Context, v cluster.Verdict) error
}

// nodeFeed merges the node's two sources into the agent's feed.
type nodeFeed struct {
	feed    *agent.Feed
	set     func(map[string]agent.FeedEntry, map[string]error) // feed.Set
	log     hclog.Logger
	drivers []string
	now     func() time.Time

	logged  map[string]int64 // desired names' revisions already logged
	dKnown  bool
	desired map[string]agent.FeedEntry
	dprobs  map[string]error

	pKnown bool
	placed cluster.PlacedSet
	pAt    time.Time // when placed was received
	reader cluster.CopyReader
	held   map[heldKey]heldCopy
	plan   cluster.CopyPlan

	contact     time.Time
	gap         time.Duration
	sKnown      bool
	status      map[string]agent.Entry
	lastSet     string
	setOnce     bool
	withheld    []string // copies new to the node, waiting on stops
	lastWithold string
}

type heldKey struct {
	id  cluster.CopyID
	rev int64
}

// heldCopy is a copy stopped for stop_after_client_disconnect: when, and
// its group's setting.
type heldCopy struct {
	stopped time.Time
	after   time.Duration
}

func newNodeFeed(feed *agent.Feed, drivers []string, log hclog.Logger) *nodeFeed {
	return &nodeFeed{feed: feed, set: feed.Set, log: log, drivers: drivers, now: time.Now, logged: map[string]int64{},
		held: map[heldKey]heldCopy{}, status: map[string]agent.Entry{}}
}

// isCopyEntry tells a placed copy's entry from a desired task's: a
// desired name follows the task id rule, which has no '['.
func isCopyEntry(name string) bool {
	return strings.HasSuffix(name, "]") && strings.Contains(name, "[")
}

// setDesired takes the node's desired set (see setFeed).
func (nf *nodeFeed) setDesired(ds cluster.DesiredSet) {
	nf.desired, nf.dprobs = parseDesiredSet(nf.feed, ds, nf.log, nf.logged)
	nf.dKnown = true
}

// setPlaced takes the node's placements.
func (nf *nodeFeed) setPlaced(ps cluster.PlacedSet) {
	nf.placed, nf.pKnown, nf.pAt = ps, true, nf.now()
	nf.log.Debug("placements", "revision", ps.Revision, "copies", len(ps.Copies), "refused", len(ps.Refused), "from_copy", ps.FromCopy)
}

// setContact takes the node's last proof of its lease.
func (nf *nodeFeed) setContact(at time.Time, gap time.Duration) {
	nf.contact, nf.gap = at, gap
}

// setStatus takes the agent's status. One of generation 0 is the agent's
// before its first round: its records not yet read, it lists none of
// them, and an entry it does not list would not be left as it is (a name
// the local copy has not declared yet would read as gone, its record
// forgotten, and a new task started once etcd declares it again).
func (nf *nodeFeed) setStatus(st agent.Status) {
	if st.Generation == 0 {
		return
	}
	nf.sKnown = true
	nf.status = map[string]agent.Entry{}
	for _, e := range st.Entries {
		if e.Origin == "etcd" {
			nf.status[e.Name] = e
		}
	}
}

// update decides what the feed declares now, sets it when it changed, and
// returns the verdicts the node owes and when to look again (zero: on the
// next change).
func (nf *nodeFeed) update() (map[cluster.CopyID]cluster.Verdict, time.Time) {
	if !nf.dKnown && !nf.pKnown || !nf.sKnown {
		return nil, time.Time{} // nothing to say yet, or not knowing what to leave as it is
	}
	now := nf.now()
	entries := map[string]agent.FeedEntry{}
	probs := map[string]error{}
	for n, e := range nf.desired {
		entries[n] = e
	}
	for n, err := range nf.dprobs {
		probs[n] = err
	}
	var copies map[string]cluster.CopyEntry
	var wake time.Time
	fresh := nf.pKnown && !nf.placed.FromCopy
	if fresh {
		nf.plan = nf.reader.Plan(nf.placed, nf.drivers, nf.contact, now, nf.gap)
		wake = nf.plan.Wake
		copies = nf.heldBack(now)
		for n, c := range copies {
			entries[n] = agent.FeedEntry{File: c.File, Text: c.Text, Inputs: c.Inputs}
		}
	}
	// A source that has not answered leaves its entries as they are.
	for n := range nf.status {
		if _, ok := entries[n]; ok {
			continue
		}
		switch {
		case isCopyEntry(n) && !fresh:
			probs[n] = errors.New("etcd has not said yet what is placed on the node (a copy may have been placed elsewhere meanwhile): left as it is")
		case !isCopyEntry(n) && !nf.dKnown:
			probs[n] = errors.New("the node's desired state is not known yet (no answer from etcd, no local copy): left as they are")
		}
	}
	nf.stopsFirst(entries)
	if fp := fingerprint(entries, probs); fp != nf.lastSet || !nf.setOnce {
		nf.lastSet, nf.setOnce = fp, true
		nf.set(entries, probs)
	}
	if !fresh {
		return nil, wake
	}
	return nf.verdicts(copies, now), wake
}

// heldBack returns the copies the node runs: the plan's, less those
// stopped for stop_after_client_disconnect that wait for a set of
// placements received after the node regained etcd.
func (nf *nodeFeed) heldBack(now time.Time) map[string]cluster.CopyEntry {
	for _, id := range nf.plan.Disconnected {
		c := nf.placed.Copies[id]
		k := heldKey{id, c.Placed.Revision}
		if _, ok := nf.held[k]; !ok {
			nf.held[k] = heldCopy{stopped: now, after: c.Placed.StopAfterClientDisconnect}
			nf.log.Warn("no contact with etcd for the copy's stop_after_client_disconnect: stopping it", "copy", id.String(),
				"stop_after_client_disconnect", c.Placed.StopAfterClientDisconnect, "last_contact", nf.contact)
		}
	}
	run := maps.Clone(nf.plan.Run)
	for k, h := range nf.held {
		c, ok := nf.placed.Copies[k.id]
		if !ok || c.Placed.Revision != k.rev {
			delete(nf.held, k) // placed elsewhere, or again: not this copy any more
			continue
		}
		// A set received after the stop came from etcd after it (none
		// arrives while etcd is away); the node lists again when it
		// regains etcd, so one does arrive.
		if nf.contact.After(h.stopped) && nf.pAt.After(h.stopped) && !nf.placed.FromCopy {
			if _, ok := run[cluster.EntryName(k.id)]; ok {
				delete(nf.held, k)
				nf.log.Info("etcd answers again and still places the copy here: running it again", "copy", k.id.String())
				continue
			}
		}
		delete(run, cluster.EntryName(k.id))
	}
	return run
}

// stopsFirst withholds the copies new to the node while a copy it no
// longer owns is still among the agent's entries (stopping): they are
// declared once those are gone.
func (nf *nodeFeed) stopsFirst(entries map[string]agent.FeedEntry) {
	nf.withheld = nil
	var leaving []string
	for n := range nf.status {
		if _, ok := entries[n]; !ok && isCopyEntry(n) {
			leaving = append(leaving, n)
		}
	}
	for n := range entries {
		if _, ok := nf.status[n]; !ok && isCopyEntry(n) && len(leaving) > 0 {
			nf.withheld = append(nf.withheld, n)
			delete(entries, n)
		}
	}
	slices.Sort(nf.withheld)
	slices.Sort(leaving)
	if w := strings.Join(nf.withheld, ","); w != nf.lastWithold && w != "" {
		nf.log.Info("copies new to the node wait until the copies it no longer owns have stopped", "new", nf.withheld, "stopping", leaving)
	}
	nf.lastWithold = strings.Join(nf.withheld, ",")
}

// verdicts are the node's words on its copies now: a refused placement's
// reason, a stopped copy's, or the agent's standing of the copy's entry
// when that standing is about the copy's current placement (its digest).
func (nf *nodeFeed) verdicts(run map[string]cluster.CopyEntry, now time.Time) map[cluster.CopyID]cluster.Verdict {
	out := map[cluster.CopyID]cluster.Verdict{}
	mk := func(id cluster.CopyID, rev int64, st cluster.VerdictState, reason string) cluster.Verdict {
		return cluster.Verdict{Job: id.Job, Group: id.Group, Index: id.Index, Revision: rev, State: st, Reason: reason, At: now.UnixNano()}
	}
	for _, r := range nf.plan.Refused {
		out[r.Copy] = mk(r.Copy, r.Revision, cluster.VerdictRefused, r.Err.Error())
	}
	for k, h := range nf.held {
		out[k.id] = mk(k.id, k.rev, cluster.VerdictStopped,
			fmt.Sprintf("stopped by its node: no contact with etcd for its stop_after_client_disconnect (%s)", h.after))
	}
	for name, c := range run {
		e, ok := nf.status[name]
		nf.log.Trace("standing", "copy", name, "known", ok, "standing", e.Standing, "digest", e.Digest, "want", c.Digest())
		if !ok || e.Digest != c.Digest() {
			continue // not declared yet, or the standing is of an older placement
		}
		st, ok := cluster.VerdictOf(string(e.Standing))
		if !ok {
			continue
		}
		v := mk(c.Copy, c.Revision, st, cmpOr(e.Reason, e.Problem))
		for i, tn := range c.Names {
			vt := cluster.VerdictTask{Name: tn}
			if i < len(e.Tasks) {
				vt.ID = e.Tasks[i]
				if vt.ID == e.Task {
					vt.State = e.State.String()
				}
			}
			v.Tasks = append(v.Tasks, vt)
		}
		out[c.Copy] = v
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fingerprint says what a feed.Set would declare, to skip a Set that
// changes nothing.
func fingerprint(entries map[string]agent.FeedEntry, probs map[string]error) string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(entries)) {
		e := entries[n]
		fmt.Fprintf(&b, "e %s %s %d %d %q %q %v %v %v %v|", n, e.File, len(e.Text), len(e.Inputs.VarFiles), e.Inputs.Task, e.Inputs.Group,
			e.Inputs.Copy, e.Inputs.Vars, e.Inputs.Env, e.Inputs.Meta)
		b.Write(e.Text)
	}
	for _, n := range slices.Sorted(maps.Keys(probs)) {
		fmt.Fprintf(&b, "p %s %v|", n, probs[n])
	}
	return b.String()
}

// followNode runs the node's feed until ctx ends: it takes every desired
// set, placement set, contact and agent status the node and its agent
// deliver, sets the feed, and hands the verdicts to the writer.
func (nf *nodeFeed) followNode(ctx context.Context, n placedNode, a *agent.Agent) {
	statuses := make(chan agent.Status, 1)
	go func() {
		_ = a.WatchStatus(ctx, func(st agent.Status) bool {
			select {
			case <-statuses:
			default:
			}
			statuses <- st
			return ctx.Err() != nil
		})
	}()
	verdicts := make(chan map[cluster.CopyID]cluster.Verdict, 1)
	go writeVerdicts(ctx, n, verdicts, nf.log)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		at, changed := n.Contact()
		nf.setContact(at, n.KeepAliveGap())
		vs, wake := nf.update()
		if vs != nil {
			select {
			case <-verdicts:
			default:
			}
			verdicts <- vs
		}
		timer.Stop()
		if !wake.IsZero() {
			timer.Reset(max(0, time.Until(wake)) + time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case ds := <-n.Desired():
			nf.setDesired(ds)
		case ps := <-n.Placements():
			nf.setPlaced(ps)
		case st := <-statuses:
			nf.setStatus(st)
		case <-changed:
		case <-timer.C:
		}
	}
}

// writeVerdicts writes each verdict that differs from the one last
// written for its copy's placement (fenced by the node's lease, guarded
// by the placement), retrying what failed for want of etcd.
func writeVerdicts(ctx context.Context, n placedNode, in <-chan map[cluster.CopyID]cluster.Verdict, log hclog.Logger) {
	written := map[cluster.CopyID]cluster.Verdict{}
	var want map[cluster.CopyID]cluster.Verdict
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	same := func(a, b cluster.Verdict) bool {
		a.At, b.At = 0, 0
		return a.Revision == b.Revision && a.State == b.State && a.Reason == b.Reason && slices.Equal(a.Tasks, b.Tasks)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case want = <-in:
		case <-retry.C:
		}
		failed := false
		for _, id := range slices.SortedFunc(maps.Keys(want), func(a, b cluster.CopyID) int { return strings.Compare(a.String(), b.String()) }) {
			v := want[id]
			if w, ok := written[id]; ok && same(w, v) {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.WriteVerdict(wctx, v)
			cancel()
			switch {
			case err == nil, errors.Is(err, cluster.ErrPlacementGone):
				log.Debug("verdict", "copy", id.String(), "revision", v.Revision, "state", v.State, "reason", v.Reason, "err", err)
				written[id] = v
			case ctx.Err() != nil:
				return
			default:
				failed = true
				log.Debug("verdict not written; trying again", "copy", id.String(), "err", err)
			}
		}
		for id := range written {
			if _, ok := want[id]; !ok {
				delete(written, id)
			}
		}
		retry.Stop()
		if failed {
			retry.Reset(time.Second)
		}
	}
}
