package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/taskfile"
)

// Placement is a pure function, in the manner of fsm.Step: Place reads a
// Problem (a job's groups, the nodes as etcd says they are, every copy
// that stays where it is) and returns where each copy to place goes, or
// why it cannot go anywhere. No I/O, no clock, no randomness: the same
// problem always gets the same answer, so a scheduler that crashes and
// the one that takes over place alike.
//
// Feasibility first (Nomad's and the Kubernetes scheduler's filter): a
// node is a candidate for a copy when it takes new copies at all
// (Candidate.Ineligible), allows every driver the group's tasks use, meets
// every constraint of the job, the group and its planned tasks against its
// ${attr.*}, ${node.*} and ${meta.*} (taskfile's operators: =, !=, >,
// >=, <, <=, regexp, set_contains, set_contains_all, set_contains_any,
// version, semver, is_set, is_not_set), distinct_hosts and
// distinct_property, and has the copy's cpu, memory and cores left of its
// capacity less what every placed copy holds there.
//
// Then ranking (Nomad's score): the mean of the scores that apply to the
// node:
//   - bin packing (always): how full the node would be, Nomad's BestFit
//     (20 - 10^freeCPU - 10^freeMemory) / 18, from 0 (empty) to 1 (full);
//   - job anti-affinity, when the node already holds copies of the same
//     job and group: -(copies+1)/count, so that equal nodes share them
//     (not when the group has a spread with a weight: the spread then says
//     how its copies spread, and a second pull toward one copy a node
//     would fight its targets; spread over ${node.unique.name} too for
//     both);
//   - a failed copy's previous nodes (Problem.Avoid): -1;
//   - affinities, when the group has any: the weights of those the node
//     matches over the sum of every weight's magnitude;
//   - spreads, when the group has any with a weight: each spread's score
//     for the node's value (targets: (desired-present)/desired; even:
//     from 1 for the least used value to -1 for the most used), weighted.
//
// The best score wins; a tie goes to the node whose name sorts first.

// Candidate is a node as placement sees it.
type Candidate struct {
	Name string
	Info NodeInfo
	// Ineligible, when not "", is why the node takes no new copy now (it
	// came back from being lost and has not held its lease long enough):
	// its copies stay, it gets no others.
	Ineligible string
}

// Problem is one job's placement problem.
type Problem struct {
	Job *Job
	// Nodes are the live nodes (a registered liveness key), any order.
	Nodes []Candidate
	// Placed are the copies that stay where they are, of every job: they
	// hold their resources; this job's count for anti-affinity, distinct
	// constraints and spreads.
	Placed []Placed
	// Place are the copies to place, in order.
	Place []CopyID
	// Avoid are, for a copy placed again after failures, the nodes it
	// failed on: they score -1 for it.
	Avoid map[CopyID][]string
}

// Choice is where Place put a copy.
type Choice struct {
	Copy  CopyID
	Node  string
	Score float64
	Use   Resources
}

// Result is Place's answer: a Choice or an Unplaced for every copy of
// Problem.Place, in order.
type Result struct {
	Placed   []Choice
	Unplaced []Unplaced
}

// Reason says why no node could hold a copy: for each filter, how many of
// the nodes it excluded (a node is counted at the first filter it fails).
type Reason struct {
	Nodes       int
	Ineligible  map[string]int // why -> nodes
	Drivers     map[string]int // a driver no node of these allows -> nodes
	Constraints map[string]int // a constraint -> nodes that do not meet it
	Distinct    map[string]int // distinct_hosts / distinct_property -> nodes
	Exhausted   map[string]int // cpu, memory, cores -> nodes short of it
}

func (r Reason) String() string {
	if r.Nodes == 0 {
		return "no node is up: start `tether agent --node NAME --cluster URLS` on the nodes"
	}
	var parts []string
	add := func(m map[string]int, format string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf(format, k, m[k], plural(m[k], "node")))
		}
	}
	add(r.Ineligible, "%s (%d %s)")
	add(r.Drivers, "driver %q not allowed for remote specs on %d %s (the nodes' --allow-remote-drivers)")
	add(r.Constraints, "constraint %s not met on %d %s")
	add(r.Distinct, "%s excluded %d %s")
	add(r.Exhausted, "%s exhausted on %d %s")
	return fmt.Sprintf("no node of %d can hold it: %s", r.Nodes, strings.Join(parts, "; "))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// node is a candidate during one Place: its host and what is left.
type node struct {
	c    Candidate
	host *taskfile.Host
	// attrs memoizes lookup on host.
	attrs map[string]attrValue
	used  Resources
	// copies counts this job's copies on it by group, and jobCopies all of
	// this job's.
	copies    map[string]int
	jobCopies int
}

type attrValue struct {
	v  string
	ok bool
}

// attr is lookup(n.host, expr), memoized.
func (n *node) attr(expr string) (string, bool) {
	if a, ok := n.attrs[expr]; ok {
		return a.v, a.ok
	}
	v, ok := lookup(n.host, expr)
	n.attrs[expr] = attrValue{v, ok}
	return v, ok
}

// fit is a node's static feasibility for a group: ok, or the filter
// (a driver or a constraint) that excludes it.
type fit struct {
	ok     bool
	filter string
	kind   int
}

// Place solves p. See the comment at the top of this file.
func Place(p Problem) Result {
	nodes := make([]*node, 0, len(p.Nodes))
	byName := map[string]*node{}
	for _, c := range p.Nodes {
		n := &node{c: c, host: c.Info.Host(), copies: map[string]int{}, attrs: map[string]attrValue{}}
		nodes = append(nodes, n)
		byName[c.Name] = n
	}
	slices.SortFunc(nodes, func(a, b *node) int { return strings.Compare(a.c.Name, b.c.Name) })
	job := p.Job
	// present counts this job's copies by group and spread value, for
	// spreads: group -> spread index -> value -> copies.
	present := map[string][]map[string]int{}
	for _, g := range job.Groups {
		present[g.Group] = make([]map[string]int, len(g.Spreads))
		for i := range g.Spreads {
			present[g.Group][i] = map[string]int{}
		}
	}
	// distinct_property counts: constraint scope key -> value -> copies.
	props := map[string]map[string]int{}
	count := func(n *node, group string, delta int) {
		n.copies[group] += delta
		n.jobCopies += delta
		g := job.Group(group)
		if g == nil {
			return
		}
		for i, s := range g.Spreads {
			if v, ok := n.attr(s.Attribute); ok {
				present[group][i][v] += delta
			}
		}
		for _, c := range distinctProperties(g) {
			if v, ok := n.attr(c.c.Attribute); ok {
				k := c.scope(group)
				if props[k] == nil {
					props[k] = map[string]int{}
				}
				props[k][v] += delta
			}
		}
	}
	for _, pl := range p.Placed {
		n := byName[pl.Node]
		if n == nil {
			continue // a lost node's copies hold nothing on a live one
		}
		n.used = n.used.Add(pl.Use)
		if pl.Job == job.Name {
			count(n, pl.Group, 1)
		}
	}
	// Static feasibility (drivers, constraints) per group and node.
	static := map[string][]fit{}
	for _, g := range job.Groups {
		vs := make([]fit, len(nodes))
		for i, n := range nodes {
			vs[i] = staticFit(g, n)
		}
		static[g.Group] = vs
	}
	var res Result
	for _, id := range p.Place {
		g := job.Group(id.Group)
		if g == nil {
			res.Unplaced = append(res.Unplaced, Unplaced{Copy: id, Reason: fmt.Sprintf("group %q is not in the job", id.Group)})
			continue
		}
		reason := Reason{Nodes: len(nodes)}
		var best *node
		var bestScore float64
		var bestUse Resources
		for i, n := range nodes {
			if n.c.Ineligible != "" {
				bump(&reason.Ineligible, n.c.Ineligible)
				continue
			}
			if v := static[g.Group][i]; !v.ok {
				switch v.kind {
				case filterDriver:
					bump(&reason.Drivers, v.filter)
				default:
					bump(&reason.Constraints, v.filter)
				}
				continue
			}
			if why := distinctFit(job, g, n, props); why != "" {
				bump(&reason.Distinct, why)
				continue
			}
			use := g.Ask
			if c := n.c.Info.Capacity; use.Cores > 0 && c.Cores > 0 {
				// Reserved cores are their share of the node's CPU too.
				use.CPU += use.Cores * c.CPU / c.Cores
			}
			if short := exhausted(n.c.Info.Capacity, n.used, use); len(short) > 0 {
				for _, d := range short {
					bump(&reason.Exhausted, d)
				}
				continue
			}
			s := score(g, n, use, present[g.Group], nodes, p.Avoid[id])
			if best == nil || s > bestScore {
				best, bestScore, bestUse = n, s, use
			}
		}
		if best == nil {
			res.Unplaced = append(res.Unplaced, Unplaced{Copy: id, Reason: reason.String()})
			continue
		}
		best.used = best.used.Add(bestUse)
		count(best, g.Group, 1)
		res.Placed = append(res.Placed, Choice{Copy: id, Node: best.c.Name, Score: bestScore, Use: bestUse})
	}
	return res
}

const (
	filterConstraint = iota
	filterDriver
)

func bump(m *map[string]int, k string) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[k]++
}

// staticFit checks what does not change as copies are placed: the
// drivers and the constraints (but distinct_*).
func staticFit(g *GroupAsk, n *node) (v fit) {
	for _, d := range g.Drivers {
		if !slices.Contains(n.c.Info.Drivers, d) {
			v.filter, v.kind = d, filterDriver
			return v
		}
	}
	for _, c := range slices.Concat(g.JobConstraints, g.Constraints) {
		switch c.Operator {
		case "distinct_hosts", "distinct_property":
			continue
		}
		if c.Check(n.host) != nil {
			v.filter, v.kind = c.String(), filterConstraint
			return v
		}
	}
	v.ok = true
	return v
}

// distinctConstraint is a distinct_property constraint with its scope.
type distinctConstraint struct {
	c     taskfile.Constraint
	onJob bool
}

// scope is the key its counts are kept under.
func (d distinctConstraint) scope(group string) string {
	if d.onJob {
		return "job\x00" + d.c.Attribute
	}
	return "group\x00" + group + "\x00" + d.c.Attribute
}

// limit is how many copies may share a value (the constraint's value,
// default 1).
func (d distinctConstraint) limit() int {
	if n, err := strconv.Atoi(taskfile.Unescape(d.c.Value)); err == nil && n > 0 {
		return n
	}
	return 1
}

func distinctProperties(g *GroupAsk) []distinctConstraint {
	var out []distinctConstraint
	for _, c := range g.JobConstraints {
		if c.Operator == "distinct_property" {
			out = append(out, distinctConstraint{c: c, onJob: true})
		}
	}
	for _, c := range g.Constraints {
		if c.Operator == "distinct_property" {
			out = append(out, distinctConstraint{c: c})
		}
	}
	return out
}

// distinctFit says which distinct constraint keeps a copy of g off n, or
// "". distinct_hosts at the job's level counts every group's copies; at
// the group's or a task's, the group's.
func distinctFit(job *Job, g *GroupAsk, n *node, props map[string]map[string]int) string {
	for _, c := range g.JobConstraints {
		if c.Operator == "distinct_hosts" && n.jobCopies > 0 {
			return "distinct_hosts (job " + job.Name + ")"
		}
	}
	for _, c := range g.Constraints {
		if c.Operator == "distinct_hosts" && n.copies[g.Group] > 0 {
			return "distinct_hosts (group " + g.Group + ")"
		}
	}
	for _, d := range distinctProperties(g) {
		v, ok := n.attr(d.c.Attribute)
		if !ok {
			return "distinct_property " + taskfile.Unescape(d.c.Attribute) + " (not set)"
		}
		if props[d.scope(g.Group)][v] >= d.limit() {
			return "distinct_property " + taskfile.Unescape(d.c.Attribute)
		}
	}
	return ""
}

// exhausted lists the dimensions in which capacity less used cannot hold
// ask.
func exhausted(capacity, used, ask Resources) []string {
	var out []string
	if used.CPU+ask.CPU > capacity.CPU {
		out = append(out, "cpu")
	}
	if used.MemoryMB+ask.MemoryMB > capacity.MemoryMB {
		out = append(out, "memory")
	}
	if ask.Cores > 0 && used.Cores+ask.Cores > capacity.Cores {
		out = append(out, "cores")
	}
	return out
}

// lookup interpolates a constraint's attribute ("${meta.rack}") on host.
func lookup(host *taskfile.Host, attr string) (string, bool) {
	v, err := (&taskfile.Scope{Host: host, NoEnv: true}).Interpolate(attr)
	return v, err == nil
}

// score ranks n for one copy of g that would use use there.
func score(g *GroupAsk, n *node, use Resources, present []map[string]int, nodes []*node, avoid []string) float64 {
	var scores []float64
	// Bin packing: how full the node would be.
	c := n.c.Info.Capacity
	free := func(capacity, used int) float64 {
		if capacity <= 0 {
			return 0
		}
		return math.Max(0, 1-float64(used)/float64(capacity))
	}
	after := n.used.Add(use)
	fit := (20 - (math.Pow(10, free(c.CPU, after.CPU)) + math.Pow(10, free(c.MemoryMB, after.MemoryMB)))) / 18
	scores = append(scores, fit)
	// Job anti-affinity, unless a spread says how the copies spread.
	if k := n.copies[g.Group]; k > 0 && !weightedSpread(g) {
		scores = append(scores, -float64(k+1)/float64(max(g.Count, 1)))
	}
	// A failed copy's previous nodes.
	if slices.Contains(avoid, n.c.Name) {
		scores = append(scores, -1)
	}
	// Affinities.
	if len(g.Affinities) > 0 {
		var sum, total float64
		for _, a := range g.Affinities {
			total += math.Abs(float64(a.Weight))
			if a.Constraint().Check(n.host) == nil {
				sum += float64(a.Weight)
			}
		}
		if total > 0 {
			scores = append(scores, sum/total)
		}
	}
	// Spreads.
	var sum, total float64
	for i, s := range g.Spreads {
		if s.Weight == 0 {
			continue
		}
		total += float64(s.Weight)
		sum += float64(s.Weight) * spreadScore(s, g.Count, n, present[i], nodes)
	}
	if total > 0 {
		scores = append(scores, sum/total)
	}
	var all float64
	for _, s := range scores {
		all += s
	}
	return all / float64(len(scores))
}

// weightedSpread reports whether g has a spread with a weight.
func weightedSpread(g *GroupAsk) bool {
	return slices.ContainsFunc(g.Spreads, func(s taskfile.Spread) bool { return s.Weight > 0 })
}

// spreadScore is one spread's score for a copy on n: with targets, how far
// the node's value is below its desired share of count ((desired -
// present) / desired, -1 for a value that should get none); without, from
// 1 for the least used value among the nodes' to -1 for the most used
// (0 when all are equal). A node without the attribute scores -1.
func spreadScore(s taskfile.Spread, count int, n *node, present map[string]int, nodes []*node) float64 {
	v, ok := n.attr(s.Attribute)
	if !ok {
		return -1
	}
	if len(s.Targets) > 0 {
		pct, targeted := -1, 0
		for _, t := range s.Targets {
			targeted += t.Percent
			if t.Value == v {
				pct = t.Percent
			}
		}
		desired := 0.0
		if pct >= 0 {
			desired = float64(pct) * float64(count) / 100
		} else {
			// The values no target names share what the targets leave.
			others := map[string]bool{}
			for _, m := range nodes {
				if x, ok := m.attr(s.Attribute); ok && !slices.ContainsFunc(s.Targets, func(t taskfile.SpreadTarget) bool { return t.Value == x }) {
					others[x] = true
				}
			}
			desired = float64(100-targeted) * float64(count) / 100 / float64(max(1, len(others)))
		}
		if desired <= 0 {
			return -1
		}
		return math.Max(-1, math.Min(1, (desired-float64(present[v]))/desired))
	}
	lo, hi := math.MaxInt, 0
	for _, m := range nodes {
		if x, ok := m.attr(s.Attribute); ok {
			k := present[x]
			lo, hi = min(lo, k), max(hi, k)
		}
	}
	if hi == lo {
		return 0
	}
	return 1 - 2*float64(present[v]-lo)/float64(hi-lo)
}

// sortCopies orders copy ids by job, group, then index as numbers.
func sortCopies(ids []CopyID) {
	slices.SortFunc(ids, func(a, b CopyID) int {
		return cmp.Or(strings.Compare(a.Job, b.Job), strings.Compare(a.Group, b.Group), cmp.Compare(a.Index, b.Index))
	})
}
