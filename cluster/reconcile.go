package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// The scheduler's decisions are a pure function too: Reconcile reads a
// World (what one etcd read said, and the scheduler's clock) and returns
// what to write, job by job; the scheduler's loop (scheduler.go) reads,
// calls it, and writes each job's decision in guarded transactions.

// World is the fleet as one read of etcd saw it, with the scheduler's
// clock.
type World struct {
	Now time.Time
	// Jobs by name.
	Jobs map[string]*JobState
	// Nodes by name: every node with a liveness key, a registration, a
	// lost record or a placement.
	Nodes map[string]*NodeState
	// Placed are every copy's placement, by copy.
	Placed map[CopyID]Placed
	// Verdicts are each node's verdicts, by node, then copy.
	Verdicts map[string]map[CopyID]Verdict
	// Lost are the scheduler's lost records, by node.
	Lost map[string]Lost
}

// JobState is a job as the scheduler read it.
type JobState struct {
	Head JobHead
	// HeadRev is the head key's ModRevision: every write for the job is
	// guarded by it.
	HeadRev int64
	// Job is the current version parsed; nil when stopped or when it did
	// not parse (Err says why).
	Job *Job
	Err error
	// Eval is the scheduler's last eval of the job, if any.
	Eval *Eval
	// Versions are the versions of the job's spec in etcd.
	Versions []uint64
}

// NodeState is a node as the scheduler read it.
type NodeState struct {
	Name string
	// Alive: its liveness key exists, under Lease.
	Alive bool
	Lease int64
	// Info is its registration under that lease (nil: none, or one of an
	// earlier lease).
	Info *NodeInfo
}

// ReschedulePolicy is a group's reschedule policy as the scheduler uses
// it: GroupReschedule (the job file's reschedule block, with Nomad's
// rules: fsm.ReschedulePolicy) unless a test gives another.
type ReschedulePolicy interface {
	// Next says how long after the last of failures (their times, oldest
	// first, the one just seen last) a copy of g is placed again, or
	// false when the policy allows no more attempts.
	Next(g *GroupAsk, failures []time.Time) (time.Duration, bool)
}

// GroupReschedule is each group's own reschedule policy (GroupAsk's, the
// job file's block over its type's defaults), decided by
// fsm.ReschedulePolicy.Next: the copy's past failures, each placed again
// after its delay, make the history the next delay and the attempts in
// the policy's interval are counted from.
type GroupReschedule struct{}

var _ ReschedulePolicy = GroupReschedule{}

// Next implements ReschedulePolicy.
func (GroupReschedule) Next(g *GroupAsk, failures []time.Time) (time.Duration, bool) {
	if len(failures) == 0 {
		return 0, true
	}
	var hist []fsm.RescheduleEvent
	var d fsm.RescheduleDecision
	for _, f := range failures {
		d = g.Reschedule.Next(hist, f.UnixNano())
		if !d.Reschedule {
			return d.Delay, false
		}
		hist = d.History
	}
	return d.Delay, true
}

// NomadDefaultReschedule is Nomad's default reschedule policy whatever the
// group says: for a service job unlimited attempts, each after 30s
// doubling to at most 1h; for a batch job one attempt in 24h, after 5s.
type NomadDefaultReschedule struct{}

var _ ReschedulePolicy = NomadDefaultReschedule{}

// Next implements ReschedulePolicy.
func (NomadDefaultReschedule) Next(g *GroupAsk, failures []time.Time) (time.Duration, bool) {
	if len(failures) == 0 {
		return 0, true
	}
	if g.Batch {
		last := failures[len(failures)-1]
		n := 0
		for _, f := range failures[:len(failures)-1] {
			if last.Sub(f) < 24*time.Hour {
				n++
			}
		}
		return 5 * time.Second, n < 1
	}
	d := 30 * time.Second
	for range len(failures) - 1 {
		d *= 2
		if d >= time.Hour {
			return time.Hour, true
		}
	}
	return d, true
}

// Policy is what Reconcile decides by besides the world.
type Policy struct {
	// ReturnHoldoff is how long a node that was lost must hold its lease
	// again before it takes new copies; 0 is 3 times its lease TTL.
	ReturnHoldoff time.Duration
	// Reschedule is the reschedule policy of failed copies.
	Reschedule ReschedulePolicy
}

// holdoff is the return holdoff of a node.
func (p Policy) holdoff(ns *NodeState) time.Duration {
	if p.ReturnHoldoff > 0 {
		return p.ReturnHoldoff
	}
	ttl := DefaultLeaseTTL
	if ns != nil && ns.Info != nil && ns.Info.LeaseTTL > 0 {
		ttl = ns.Info.LeaseTTL
	}
	return 3 * ttl
}

// NodeDecision is what Reconcile decides of the nodes: lost records to
// write and to delete.
type NodeDecision struct {
	PutLost    []Lost
	DeleteLost []string
}

// JobDecision is what Reconcile decides for one job: placements to
// write (each replaces its copy's current one, if any) and to delete,
// and the job's eval.
type JobDecision struct {
	Job     string
	HeadRev int64
	Put     []Placed
	Delete  []Placed
	// Prev are the placements the copies of Put had, as read.
	Prev map[CopyID]Placed
	Eval *Eval
	// DeleteSpecs are versions of the job's spec that neither the head nor
	// any placement names any more.
	DeleteSpecs []uint64
}

// Empty reports whether the decision changes nothing but, perhaps, the
// eval.
func (d JobDecision) Empty() bool {
	return len(d.Put) == 0 && len(d.Delete) == 0 && len(d.DeleteSpecs) == 0
}

// ReconcileNodes decides the lost records: a node whose liveness key is
// gone gets one (when it was seen down); a node back under a new lease
// has its return noted, and its record dropped once it has held the lease
// for the holdoff. It returns the decision and when a holdoff ends (zero:
// none pending). It also applies the decision to w, so that the jobs are
// reconciled against it.
func ReconcileNodes(w *World, p Policy) (NodeDecision, time.Time) {
	var d NodeDecision
	var wake time.Time
	now := w.Now.UnixNano()
	for _, name := range slices.Sorted(maps.Keys(w.Nodes)) {
		ns := w.Nodes[name]
		l, lost := w.Lost[name]
		switch {
		case !ns.Alive && !lost:
			l = Lost{Node: name, Since: now}
			d.PutLost = append(d.PutLost, l)
			w.Lost[name] = l
		case !ns.Alive && lost && l.Back != 0:
			// Lost again before its holdoff ended: down since now.
			l = Lost{Node: name, Since: now}
			d.PutLost = append(d.PutLost, l)
			w.Lost[name] = l
		case ns.Alive && lost && (l.Back == 0 || l.BackLease != ns.Lease):
			l.Back, l.BackLease = now, ns.Lease
			d.PutLost = append(d.PutLost, l)
			w.Lost[name] = l
			wake = earliest(wake, w.Now.Add(p.holdoff(ns)))
		case ns.Alive && lost:
			end := time.Unix(0, l.Back).Add(p.holdoff(ns))
			if !w.Now.Before(end) {
				d.DeleteLost = append(d.DeleteLost, name)
				delete(w.Lost, name)
			} else {
				wake = earliest(wake, end)
			}
		}
	}
	return d, wake
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// candidates are the nodes that may take copies: alive and registered
// under their current lease; a node back from lost within its holdoff is
// a candidate marked ineligible (it keeps its copies, gets no new one).
func candidates(w *World, p Policy) []Candidate {
	var out []Candidate
	for _, name := range slices.Sorted(maps.Keys(w.Nodes)) {
		ns := w.Nodes[name]
		if !ns.Alive || ns.Info == nil {
			continue
		}
		c := Candidate{Name: name, Info: *ns.Info}
		if _, lost := w.Lost[name]; lost {
			c.Ineligible = "back after its lease lapsed, held off for " + p.holdoff(ns).String()
		}
		out = append(out, c)
	}
	return out
}

// Reasons a copy is placed.
const (
	ReasonNew     = "new"
	ReasonChanged = "job changed"
)

// ReconcileJob decides one job against w (after ReconcileNodes), and
// applies the decision to w so that the next job sees it. It returns the
// decision and when something of the job falls due (zero: nothing).
//
// For each copy the job wants (every group's count): none placed, it is
// placed; placed on a node whose lease lapsed, it is placed elsewhere at
// once, or once the group's max_client_disconnect has passed since the
// node was seen down; failed or refused on a live node (its verdict about
// the current placement), it is placed again when the reschedule policy
// allows, after its delay, preferring other nodes; of an older version,
// it is replaced, max_parallel at a time (copies of the current version
// that do not yet run count against it). A copy the job no longer wants
// (a group gone, a lower count, the job stopped) is deleted. A copy that
// cannot be placed is named in the eval with why; where it has a
// placement (a lost node's, an older version's), that stays.
func ReconcileJob(w *World, name string, p Policy) (JobDecision, time.Time) {
	js := w.Jobs[name]
	d := JobDecision{Job: name, HeadRev: js.HeadRev}
	var wake time.Time
	mine := map[CopyID]Placed{}
	for id, pl := range w.Placed {
		if id.Job == name {
			mine[id] = pl
		}
	}
	ev := &Eval{Job: name, Version: js.Head.Version, At: w.Now.UnixNano()}
	if js.Head.Stopped || js.Job == nil {
		if js.Job == nil && !js.Head.Stopped {
			// A version this scheduler cannot parse: leave its copies.
			ev.Unplaced = nil
			ev.Waiting = []Unplaced{{Reason: fmt.Sprintf("the job's version %d does not parse here: %v", js.Head.Version, js.Err)}}
			d.Eval = ev
			return d, wake
		}
		for _, id := range sortedIDs(mine) {
			d.Delete = append(d.Delete, mine[id])
		}
		d.Eval = ev
		apply(w, d)
		d.DeleteSpecs = unusedSpecs(w, js)
		return d, wake
	}
	job := js.Job
	var place []CopyID
	avoid := map[CopyID][]string{}
	reason := map[CopyID]Placed{} // the copy's new placement, less its node
	wait := func(id CopyID, why string) { ev.Waiting = append(ev.Waiting, Unplaced{Copy: id, Reason: why}) }
	wanted := map[CopyID]bool{}
	for _, g := range job.Groups {
		var outdated []CopyID
		inflight := 0
		for i := range g.Count {
			id := CopyID{Job: name, Group: g.Group, Index: i}
			wanted[id] = true
			pl, ok := mine[id]
			base := Placed{Job: name, Group: g.Group, Index: i, Version: js.Head.Version, At: w.Now.UnixNano(), Batch: g.Batch,
				StopAfterClientDisconnect: g.StopAfterClientDisconnect}
			if !ok {
				base.Reason = ReasonNew
				place, reason[id] = append(place, id), base
				continue
			}
			v, hasVerdict := w.Verdicts[pl.Node][id]
			if hasVerdict && v.Revision != pl.Revision {
				hasVerdict = false // about an earlier placement on this node
			}
			if pl.Batch && hasVerdict && v.State == VerdictComplete {
				continue // a batch copy's end
			}
			ns := w.Nodes[pl.Node]
			if ns == nil || !ns.Alive {
				since := w.Now
				if l, ok := w.Lost[pl.Node]; ok {
					since = time.Unix(0, l.Since)
				}
				if until := since.Add(g.MaxClientDisconnect); g.MaxClientDisconnect > 0 && w.Now.Before(until) {
					wait(id, fmt.Sprintf("node %s lost; max_client_disconnect keeps the copy there until %s", pl.Node, until.UTC().Format(time.RFC3339)))
					wake = earliest(wake, until)
					continue
				}
				base.Reason, base.Previous, base.Failures = "node "+pl.Node+" lost", pl.Node, pl.Failures
				if pl.Version != js.Head.Version {
					base.Reason += "; " + ReasonChanged
				}
				place, reason[id] = append(place, id), base
				continue
			}
			if hasVerdict && v.State.Failed() {
				failures := append(timesOf(pl.Failures), time.Unix(0, min(v.At, w.Now.UnixNano())))
				delay, again := p.Reschedule.Next(g, failures)
				if !again {
					wait(id, fmt.Sprintf("%s on %s (%s); its reschedule policy allows no more attempts", v.State, pl.Node, v.Reason))
					continue
				}
				due := failures[len(failures)-1].Add(delay)
				if w.Now.Before(due) {
					wait(id, fmt.Sprintf("%s on %s (%s); placed again at %s (reschedule delay %s)", v.State, pl.Node, v.Reason, due.UTC().Format(time.RFC3339), delay))
					wake = earliest(wake, due)
					continue
				}
				base.Reason, base.Previous = fmt.Sprintf("%s on %s", v.State, pl.Node), pl.Node
				base.Failures = lastN(append(slices.Clone(pl.Failures), failures[len(failures)-1].UnixNano()), 20)
				avoid[id] = failedNodes(pl)
				place, reason[id] = append(place, id), base
				continue
			}
			if pl.Version != js.Head.Version {
				outdated = append(outdated, id)
				continue
			}
			if !(hasVerdict && v.State.Up()) && !(pl.Batch && hasVerdict && v.State == VerdictComplete) {
				inflight++
			}
		}
		// Rolling update: max_parallel at a time, counting the current
		// version's copies that do not run yet.
		room := len(outdated)
		if g.MaxParallel > 0 {
			room = max(0, g.MaxParallel-inflight-countPlacing(place, g.Group))
		}
		for k, id := range outdated {
			if k >= room {
				wait(id, fmt.Sprintf("%s: waiting to be replaced, max_parallel %d at a time (%d of the new version not running yet)", ReasonChanged, g.MaxParallel, inflight))
				continue
			}
			pl := mine[id]
			base := Placed{Job: name, Group: g.Group, Index: id.Index, Version: js.Head.Version, At: w.Now.UnixNano(), Batch: g.Batch,
				StopAfterClientDisconnect: g.StopAfterClientDisconnect, Reason: ReasonChanged, Previous: pl.Node}
			place, reason[id] = append(place, id), base
		}
	}
	for _, id := range sortedIDs(mine) {
		if !wanted[id] {
			d.Delete = append(d.Delete, mine[id])
		}
	}
	// Place against every placement that stays: all jobs' but the copies
	// deleted or being placed again.
	moving := map[CopyID]bool{}
	for _, id := range place {
		moving[id] = true
	}
	for _, pl := range d.Delete {
		moving[pl.ID()] = true
	}
	var stay []Placed
	for _, id := range sortedIDs(w.Placed) {
		if !moving[id] {
			stay = append(stay, w.Placed[id])
		}
	}
	sortCopies(place)
	res := Place(Problem{Job: job, Nodes: candidates(w, p), Placed: stay, Place: place, Avoid: avoid})
	d.Prev = map[CopyID]Placed{}
	for _, c := range res.Placed {
		pl := reason[c.Copy]
		pl.Node, pl.Use = c.Node, c.Use
		d.Put = append(d.Put, pl)
		if old, ok := mine[c.Copy]; ok {
			d.Prev[c.Copy] = old
		}
	}
	for _, u := range res.Unplaced {
		if pl, ok := mine[u.Copy]; ok {
			u.Reason += fmt.Sprintf(" (it stays placed on %s)", pl.Node)
		}
		ev.Unplaced = append(ev.Unplaced, u)
	}
	d.Eval = ev
	apply(w, d)
	d.DeleteSpecs = unusedSpecs(w, js)
	return d, wake
}

// unusedSpecs are the versions of js's spec that neither its head nor a
// placement (as w is once the decision is written) names.
func unusedSpecs(w *World, js *JobState) []uint64 {
	used := map[uint64]bool{js.Head.Version: true}
	for id, pl := range w.Placed {
		if id.Job == js.Head.Job {
			used[pl.Version] = true
		}
	}
	var out []uint64
	for _, v := range js.Versions {
		if !used[v] {
			out = append(out, v)
		}
	}
	return out
}

// countPlacing counts the copies of group among place (placed at the
// current version in this pass: they do not run yet).
func countPlacing(place []CopyID, group string) int {
	n := 0
	for _, id := range place {
		if id.Group == group {
			n++
		}
	}
	return n
}

// failedNodes are the nodes a copy failed on: its current one, and the
// one before when it was placed there after failing on it.
func failedNodes(pl Placed) []string {
	out := []string{pl.Node}
	if pl.Previous != "" && pl.Previous != pl.Node && (strings.HasPrefix(pl.Reason, string(VerdictFailed)+" on ") || strings.HasPrefix(pl.Reason, string(VerdictRefused)+" on ")) {
		out = append(out, pl.Previous)
	}
	return out
}

func timesOf(ns []int64) []time.Time {
	out := make([]time.Time, 0, len(ns)+1)
	for _, n := range ns {
		out = append(out, time.Unix(0, n))
	}
	return out
}

func lastN(s []int64, n int) []int64 {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func sortedIDs[V any](m map[CopyID]V) []CopyID {
	ids := slices.Collect(maps.Keys(m))
	sortCopies(ids)
	return ids
}

// apply makes w what it is once d is written.
func apply(w *World, d JobDecision) {
	for _, pl := range d.Delete {
		delete(w.Placed, pl.ID())
	}
	for _, pl := range d.Put {
		w.Placed[pl.ID()] = pl
	}
}
