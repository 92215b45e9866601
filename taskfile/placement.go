package taskfile

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Placement is what a job file says of where its copies go and how they
// move: the stanzas a scheduler reads. On one host tether does not act on
// them (each is named once in the file's notices, as a scheduler concern);
// the fleet's scheduler (package cluster, `tether cluster run`) places by
// them. A job, a group and a task each hold their own; Group.Rules merges
// them as Nomad does.
type Placement struct {
	// Affinities are soft preferences for nodes (job, group and task
	// levels; a task's apply to its whole group, as in Nomad).
	Affinities []Affinity
	// Spreads ask copies to spread over a node attribute's values (job and
	// group levels; a task's apply to its group, as Nomad 0.9 allowed).
	Spreads []Spread
	// Update is the update block (job and group levels, the group's fields
	// over the job's).
	Update Update
	// MaxClientDisconnect is a group's max_client_disconnect: how long the
	// copies of a node whose lease lapsed are left to it before they are
	// placed elsewhere (0: placed elsewhere at once).
	MaxClientDisconnect time.Duration
	// StopAfterClientDisconnect is a group's
	// stop_after_client_disconnect: a node cut off from etcd that long
	// stops its copies of the group itself (0: never).
	StopAfterClientDisconnect time.Duration
	// Refusals are what tether's scheduler does not do of these stanzas
	// (an update block's canary, auto_revert...): named, and refused by
	// `tether cluster run`. A run on one host ignores them with the rest.
	Refusals []Refusal
}

// Affinity is an affinity block: a preference for nodes whose Attribute
// compares to Value by Operator, by Weight (-100 to 100, not 0; a
// negative weight is an anti-affinity).
type Affinity struct {
	Attribute string // "${meta.rack}", kept for interpolation against a node
	Operator  string // "=" when unset
	Value     string
	Weight    int // 50 when unset
	Range     hcl.Range
}

// Constraint returns the affinity's test as a constraint, for evaluation
// against a node (Constraint.Check).
func (a Affinity) Constraint() Constraint {
	return Constraint{Attribute: a.Attribute, Operator: a.Operator, Value: a.Value, Range: a.Range}
}

func (a Affinity) String() string {
	return fmt.Sprintf("%s (weight %d)", a.Constraint(), a.Weight)
}

// Spread is a spread block: copies spread over the values of Attribute,
// by Targets' percentages when given (the values no target names share
// what the targets leave), evenly otherwise.
type Spread struct {
	Attribute string
	Weight    int // 0 to 100; 50 when unset
	Targets   []SpreadTarget
	Range     hcl.Range
}

// SpreadTarget is a spread's target block: Percent of the copies on nodes
// whose attribute is Value.
type SpreadTarget struct {
	Value   string
	Percent int
}

// Update is the part of an update block tether's scheduler honours.
type Update struct {
	// MaxParallel is how many copies of a group a changed job replaces at
	// a time (Nomad's default 1); 0 replaces them all at once (Nomad's
	// forced update).
	MaxParallel int
	// Set records that the block gave max_parallel (a group's block
	// overrides the job's only where it says something).
	Set bool
}

// DefaultMaxParallel is Nomad's max_parallel when no update block gives
// one.
const DefaultMaxParallel = 1

// affinityOperators are the operators an affinity may use: a
// constraint's but for distinct_hosts and distinct_property, which are
// not preferences.
var affinityOperators = map[string]bool{
	"=": true, "==": true, "is": true, "!=": true, "not": true, ">": true, ">=": true, "<": true, "<=": true,
	"regexp": true, "set_contains": true, "set_contains_all": true, "set_contains_any": true,
	"version": true, "semver": true, "is_set": true, "is_not_set": true,
}

// placementBlock reads an affinity, spread or update block into pl. On
// one host it is also named as ignored (a scheduler concern).
func (p *parser) placementBlock(c *hclsyntax.Block, pl *Placement) {
	p.ignore(c.Type, "block", c.TypeRange)
	switch c.Type {
	case "affinity":
		if a, ok := p.affinity(c); ok {
			pl.Affinities = append(pl.Affinities, a)
		}
	case "spread":
		if s, ok := p.spread(c); ok {
			pl.Spreads = append(pl.Spreads, s)
		}
	case "update":
		p.update(c, pl)
	}
}

// placementAttr reads a group's max_client_disconnect or
// stop_after_client_disconnect into pl; on one host it is named as
// ignored.
func (p *parser) placementAttr(a *hclsyntax.Attribute, pl *Placement) {
	p.ignore(a.Name, "attribute", a.NameRange)
	s, ok := p.lit(a)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s = %q: use a positive duration such as \"5m\".", a.Name, s)
		return
	}
	switch a.Name {
	case "max_client_disconnect":
		pl.MaxClientDisconnect = d
	case "stop_after_client_disconnect":
		pl.StopAfterClientDisconnect = d
	}
}

// affinity reads an affinity block.
func (p *parser) affinity(b *hclsyntax.Block) (Affinity, bool) {
	p.noLabels(b)
	p.noBlocks(b)
	a := Affinity{Operator: "=", Weight: 50, Range: b.TypeRange}
	ok := true
	for _, at := range sortedAttrs(b.Body) {
		switch at.Name {
		case "attribute":
			a.Attribute, _ = p.str(at)
		case "operator":
			if v, good := p.lit(at); good {
				if !affinityOperators[v] {
					p.errorf(at.Expr.Range(), "Bad operator", "affinity operator %q is not one of Nomad's (=, !=, >, >=, <, <=, regexp, set_contains, set_contains_all, set_contains_any, version, semver, is_set, is_not_set).", v)
					ok = false
				}
				a.Operator = v
			}
		case "value":
			a.Value, _ = p.str(at)
		case "version", "semver", "regexp", "set_contains", "set_contains_all", "set_contains_any":
			a.Operator = at.Name
			a.Value, _ = p.str(at)
		case "weight":
			if w, good := p.int(at); good {
				if w == 0 || w < -100 || w > 100 {
					p.errorf(at.Expr.Range(), "Bad weight", "affinity weight is %d; use -100 to 100, not 0 (a negative weight avoids the nodes it matches).", w)
					ok = false
				}
				a.Weight = w
			}
		default:
			p.warnf(at.NameRange, "Unsupported attribute", "tether ignores the attribute %q in an affinity block.", at.Name)
		}
	}
	if a.Attribute == "" {
		p.errorf(b.TypeRange, "Bad affinity", "An affinity needs an attribute, such as \"${meta.rack}\".")
		return a, false
	}
	return a, ok
}

// spread reads a spread block.
func (p *parser) spread(b *hclsyntax.Block) (Spread, bool) {
	p.noLabels(b)
	s := Spread{Weight: 50, Range: b.TypeRange}
	ok := true
	for _, at := range sortedAttrs(b.Body) {
		switch at.Name {
		case "attribute":
			s.Attribute, _ = p.str(at)
		case "weight":
			if w, good := p.int(at); good {
				if w < 0 || w > 100 {
					p.errorf(at.Expr.Range(), "Bad weight", "spread weight is %d; use 0 to 100.", w)
					ok = false
				}
				s.Weight = w
			}
		default:
			p.warnf(at.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a spread block.", at.Name)
		}
	}
	sum := 0
	seen := map[string]bool{}
	for _, tb := range b.Body.Blocks {
		if tb.Type != "target" {
			p.warnf(tb.TypeRange, "Unsupported block", "tether ignores the %q block in a spread block.", tb.Type)
			continue
		}
		label, good := p.label(tb)
		if !good {
			ok = false
			continue
		}
		p.noBlocks(tb)
		t := SpreadTarget{Value: label}
		for _, at := range p.attrs(tb.Body, fmt.Sprintf("spread target %q", label), "value", "percent") {
			switch at.Name {
			case "value":
				t.Value, _ = p.lit(at)
			case "percent":
				if v, good := p.int(at); good {
					if v < 0 || v > 100 {
						p.errorf(at.Expr.Range(), "Bad percent", "spread target %q has percent %d; use 0 to 100.", label, v)
						ok = false
					}
					t.Percent = v
				}
			}
		}
		if seen[t.Value] {
			p.errorf(tb.TypeRange, "Duplicate spread target", "The spread over %s already has a target for %q.", Unescape(s.Attribute), t.Value)
			ok = false
		}
		seen[t.Value] = true
		sum += t.Percent
		s.Targets = append(s.Targets, t)
	}
	if sum > 100 {
		p.errorf(b.TypeRange, "Bad spread", "The targets of the spread over %s add up to %d%%; they may add up to 100%% at most.", Unescape(s.Attribute), sum)
		ok = false
	}
	if s.Attribute == "" {
		p.errorf(b.TypeRange, "Bad spread", "A spread needs an attribute, such as \"${node.datacenter}\".")
		return s, false
	}
	return s, ok
}

// update reads an update block: max_parallel is honoured; the rest of
// Nomad's deployment settings are refused by name for a placed job (and
// ignored on one host), but for their values that ask for nothing.
func (p *parser) update(b *hclsyntax.Block, pl *Placement) {
	p.noLabels(b)
	p.noBlocks(b)
	refuse := func(a *hclsyntax.Attribute, why string) {
		pl.Refusals = append(pl.Refusals, Refusal{What: fmt.Sprintf("update %s", a.Name), Why: why, Range: a.NameRange})
	}
	for _, a := range sortedAttrs(b.Body) {
		switch a.Name {
		case "max_parallel":
			if v, ok := p.int(a); ok {
				if v < 0 {
					p.errorf(a.Expr.Range(), "Bad max_parallel", "max_parallel is %d; use 1 or more (copies replaced at a time), or 0 to replace them all at once.", v)
					continue
				}
				pl.Update = Update{MaxParallel: v, Set: true}
			}
		case "canary":
			if v, ok := p.int(a); ok && v != 0 {
				refuse(a, "tether's scheduler runs no canaries: a changed job replaces its copies max_parallel at a time")
			}
		case "auto_revert", "auto_promote":
			if v, ok := p.bool(a); ok && v {
				refuse(a, "tether's scheduler keeps no deployments to revert or promote")
			}
		case "health_check", "min_healthy_time", "healthy_deadline", "progress_deadline", "stagger":
			refuse(a, "tether's scheduler counts a replaced copy done once its node says it runs (or is ready, where the task has readiness); remove it")
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in an update block.", a.Name)
		}
	}
}

// Rules is what a scheduler places g's copies by: the job's, the group's
// and its tasks' placement stanzas merged as Nomad merges them (the
// group's update fields over the job's; affinities and spreads of every
// level together), and every constraint of the job, the group and its
// tasks that a scheduler evaluates against a node.
func (g *Group) Rules() Placement {
	var out Placement
	add := func(pl *Placement) {
		out.Affinities = append(out.Affinities, pl.Affinities...)
		out.Spreads = append(out.Spreads, pl.Spreads...)
		out.Refusals = append(out.Refusals, pl.Refusals...)
	}
	out.Update = Update{MaxParallel: DefaultMaxParallel}
	if g.Job != nil {
		add(&g.Job.Placement)
		if g.Job.Placement.Update.Set {
			out.Update = g.Job.Placement.Update
		}
	}
	add(&g.Placement)
	if g.Placement.Update.Set {
		out.Update = g.Placement.Update
	}
	out.MaxClientDisconnect = g.Placement.MaxClientDisconnect
	out.StopAfterClientDisconnect = g.Placement.StopAfterClientDisconnect
	for _, t := range g.Tasks {
		add(&t.Placement)
	}
	out.Refusals = slices.Clip(out.Refusals)
	return out
}

// Constraints are the constraints that hold for every copy of the group
// as gp plans it: the job's, the group's and each planned task's, in
// that order.
func (gp *GroupPlan) Constraints() []Constraint {
	var cs []Constraint
	g := gp.Group
	if g.Job != nil {
		cs = append(cs, g.Job.Constraints...)
	}
	cs = append(cs, g.Constraints...)
	for _, t := range gp.Tasks() {
		cs = append(cs, t.Constraints...)
	}
	return cs
}
