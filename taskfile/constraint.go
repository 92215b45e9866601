package taskfile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Constraint is a constraint block: Attribute Operator Value, evaluated
// against this host.
type Constraint struct {
	Attribute string // "${attr.kernel.name}", kept for interpolation
	Operator  string // "=" when unset
	Value     string
	Range     hcl.Range
}

func (c Constraint) String() string {
	switch c.Operator {
	case "is_set", "is_not_set", "distinct_hosts":
		return fmt.Sprintf("%s %s", Unescape(c.Attribute), c.Operator)
	}
	return fmt.Sprintf("%s %s %q", Unescape(c.Attribute), c.Operator, Unescape(c.Value))
}

// operators are Nomad's constraint operators.
var operators = map[string]bool{
	"=": true, "==": true, "is": true, "!=": true, "not": true, ">": true, ">=": true, "<": true, "<=": true,
	"regexp": true, "set_contains": true, "set_contains_all": true, "set_contains_any": true,
	"version": true, "semver": true, "is_set": true, "is_not_set": true,
	"distinct_hosts": true, "distinct_property": true,
}

// constraint reads a constraint block, with Nomad's shorthands
// (version = ">= 1.2", regexp = "...", distinct_hosts = true...).
func (p *parser) constraint(b *hclsyntax.Block) (Constraint, bool) {
	p.noLabels(b)
	p.noBlocks(b)
	c := Constraint{Operator: "=", Range: b.TypeRange}
	for _, a := range sortedAttrs(b.Body) {
		switch a.Name {
		case "attribute":
			c.Attribute, _ = p.str(a)
		case "operator":
			if v, ok := p.lit(a); ok {
				if !operators[v] {
					p.errorf(a.Expr.Range(), "Bad operator", "operator %q is not one of Nomad's (=, !=, >, >=, <, <=, regexp, set_contains, set_contains_any, version, semver, is_set, is_not_set, distinct_hosts, distinct_property).", v)
					return c, false
				}
				c.Operator = v
			}
		case "value":
			c.Value, _ = p.str(a)
		case "version", "semver", "regexp", "set_contains", "set_contains_all", "set_contains_any":
			c.Operator = a.Name
			c.Value, _ = p.str(a)
		case "distinct_hosts":
			if v, ok := p.bool(a); ok && v {
				c.Operator = "distinct_hosts"
			}
		case "distinct_property":
			c.Operator = "distinct_property"
			c.Attribute, _ = p.str(a)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a constraint block.", a.Name)
		}
	}
	switch c.Operator {
	case "distinct_hosts", "distinct_property":
		p.notices.add(NoticeIgnored, c.Operator, "constraint", "a scheduler concern: one host runs all copies", b.TypeRange)
		return c, true
	}
	if c.Attribute == "" {
		p.errorf(b.TypeRange, "Bad constraint", "A constraint needs an attribute, such as \"${attr.kernel.name}\".")
		return c, false
	}
	return c, true
}

// Check evaluates the constraint against host; an unmet one is an
// ErrConstraint naming it, where it is, and what the host has.
func (c Constraint) Check(host *Host) error {
	sc := &Scope{Host: host, NoEnv: true}
	switch c.Operator {
	case "distinct_hosts", "distinct_property":
		return nil
	}
	l, lerr := sc.Interpolate(c.Attribute)
	lset := lerr == nil
	r, rerr := sc.Interpolate(c.Value)
	if rerr != nil {
		return fmt.Errorf("%w: %s (%s): its value: %w", ErrConstraint, pos(c.Range), c, rerr)
	}
	fail := func(why string) error {
		return fmt.Errorf("%w: %s: %s: %s", ErrConstraint, pos(c.Range), c, why)
	}
	has := func() string {
		if !lset {
			return fmt.Sprintf("this host has no %s", Unescape(c.Attribute))
		}
		return fmt.Sprintf("this host has %q", l)
	}
	switch c.Operator {
	case "is_set":
		if !lset {
			return fail(has())
		}
		return nil
	case "is_not_set":
		if lset {
			return fail(has())
		}
		return nil
	case "!=", "not":
		if lset && l == r {
			return fail(has())
		}
		return nil
	}
	if !lset {
		return fail(has())
	}
	ok := false
	switch c.Operator {
	case "=", "==", "is":
		ok = l == r
	case "<", "<=", ">", ">=":
		ok = compare(l, r, c.Operator)
	case "regexp":
		re, err := compilePattern(r)
		if err != nil {
			return fail(fmt.Sprintf("bad regexp: %v", err))
		}
		ok = re.MatchString(l)
	case "set_contains", "set_contains_all", "set_contains_any":
		have := map[string]bool{}
		for _, x := range strings.Split(l, ",") {
			have[strings.TrimSpace(x)] = true
		}
		want := strings.Split(r, ",")
		hit := 0
		for _, x := range want {
			if have[strings.TrimSpace(x)] {
				hit++
			}
		}
		ok = hit == len(want)
		if c.Operator == "set_contains_any" {
			ok = hit > 0
		}
	case "version", "semver":
		var v *version.Version
		var err error
		if c.Operator == "semver" {
			v, err = version.NewSemver(l)
		} else {
			v, err = version.NewVersion(l)
		}
		if err != nil {
			return fail(fmt.Sprintf("%s: %q is not a version", has(), l))
		}
		cs, err := version.NewConstraint(r)
		if err != nil {
			return fail(fmt.Sprintf("bad version constraint: %v", err))
		}
		ok = cs.Check(v)
	}
	if !ok {
		return fail(has())
	}
	return nil
}

// compare orders numbers as numbers and anything else lexically.
func compare(l, r, op string) bool {
	lf, err1 := strconv.ParseFloat(l, 64)
	rf, err2 := strconv.ParseFloat(r, 64)
	var c int
	if err1 == nil && err2 == nil {
		switch {
		case lf < rf:
			c = -1
		case lf > rf:
			c = 1
		}
	} else {
		c = strings.Compare(l, r)
	}
	switch op {
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}
