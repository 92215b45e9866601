package taskfile

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// A cost is what a function call will make and the work it will do,
// estimated from its arguments before it runs: size is the result's size
// (as Limits counts sizes), elems the length of the largest collection it
// makes, work the units of work beyond making the result (a sort's
// comparisons, a regular expression's steps).
type cost struct {
	size, elems, work float64
}

// estimator estimates a call's cost from its arguments (converted to the
// function's parameter types, possibly unknown).
type estimator func(m *meter, args []cty.Value) cost

// bounded wraps f so that each call's cost is estimated, charged and
// checked against the limits before f runs: in the wrapper's type check,
// which cty runs before the function's own (jsondecode's reads its whole
// argument) and before its implementation.
func (m *meter) bounded(f function.Function, est estimator) function.Function {
	return function.New(&function.Spec{
		Description: f.Description(),
		Params:      f.Params(),
		VarParam:    f.VarParam(),
		Type: func(args []cty.Value) (cty.Type, error) {
			if err := m.cost(args, est); err != nil {
				return cty.NilType, err
			}
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) { return f.Call(args) },
	})
}

// cost charges and checks a call's estimated cost.
func (m *meter) cost(args []cty.Value, est estimator) error {
	if m.failed != nil {
		return errLimit
	}
	for _, a := range args {
		if !a.IsWhollyKnown() {
			return nil // nothing is made of an unknown value
		}
	}
	if est == nil {
		est = linearCost
	}
	c := est(m, args)
	m.checkSize(m.call, "this would make", c.size, c.elems)
	m.charge(m.call, c.size+c.work)
	if m.failed != nil {
		return errLimit
	}
	return nil
}

// linearCost is the cost of a function whose result is no larger than
// its arguments together (plus a little) and whose work is a pass over
// them: concat, merge, zipmap, and any function not listed elsewhere.
func linearCost(m *meter, args []cty.Value) cost {
	var c cost
	for _, a := range args {
		c.size += m.size(a)
		c.elems += float64(length(a))
	}
	c.size += 64
	return c
}

// partCost is the cost of a function whose result is at most its largest
// argument (a part of one, or one rearranged): a pass over them.
func partCost(m *meter, args []cty.Value) cost {
	var c cost
	for _, a := range args {
		s := m.size(a)
		c.size = max(c.size, s)
		c.work += s
		c.elems = max(c.elems, float64(length(a)))
	}
	return c
}

// smallCost is the cost of a function whose result is a number, a bool
// or a short string (a length, a hash): a pass over its arguments.
func smallCost(m *meter, args []cty.Value) cost {
	c := cost{size: 64}
	for _, a := range args {
		c.work += m.size(a)
	}
	return c
}

// length is the number of elements of a known collection (0 otherwise).
func length(v cty.Value) int {
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() || !v.CanIterateElements() {
		return 0
	}
	return v.LengthInt()
}

// str is a known string's text ("" otherwise).
func str(v cty.Value) string {
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

// estimators are the costs of the functions that can make more than they
// are given, or work more than a pass over it; every other function of
// the table costs linearCost.
var estimators = map[string]estimator{
	"length": smallCost, "contains": smallCost, "index": smallCost, "md5": smallCost, "sha1": smallCost,
	"sha256": smallCost, "sha512": smallCost, "abs": smallCost, "ceil": smallCost, "floor": smallCost,
	"log": smallCost, "pow": smallCost, "signum": smallCost, "max": smallCost, "min": smallCost,
	"timeadd": smallCost,
	"keys":    partCost, "values": partCost, "reverse": partCost, "compact": partCost, "element": partCost,
	"lookup": partCost, "coalesce": partCost, "coalescelist": partCost, "slice": partCost, "substr": partCost,
	"trim": partCost, "trimprefix": partCost, "trimsuffix": partCost, "trimspace": partCost, "chomp": partCost,
	"strrev": partCost, "base64decode": partCost, "flatten": partCost, "parseint": partCost,
	"range": func(m *meter, args []cty.Value) cost {
		// cty stops a range at 1,024 values.
		return cost{size: 24 + 1024*(8+64+8), elems: 1024}
	},
	"setproduct": func(m *meter, args []cty.Value) cost {
		product, per := 1.0, 24.0
		var work float64
		for _, a := range args {
			n := float64(length(a))
			s := m.size(a)
			product *= n
			per += 8 + s/math.Max(n, 1)
			work += s + n*n/8 // a set's elements hashed, compared
		}
		return cost{size: 24 + product*(8+per), elems: product, work: work}
	},
	"format":     func(m *meter, args []cty.Value) cost { return formatCost(m, args, false) },
	"formatlist": func(m *meter, args []cty.Value) cost { return formatCost(m, args, true) },
	"join": func(m *meter, args []cty.Value) cost {
		sep := float64(len(str(args[0])))
		var n, s float64
		for _, l := range args[1:] {
			n += float64(length(l))
			s += m.size(l)
		}
		return cost{size: 16 + s + math.Max(n-1, 0)*sep}
	},
	"split": func(m *meter, args []cty.Value) cost {
		sep, s := str(args[0]), str(args[1])
		n := float64(utf8.RuneCountInString(s)) + 1
		if sep != "" {
			n = float64(strings.Count(s, sep)) + 1
		}
		return cost{size: 24 + n*(8+16) + float64(len(s)), elems: n, work: float64(len(s))}
	},
	"replace": func(m *meter, args []cty.Value) cost {
		s, sub, repl := str(args[0]), str(args[1]), str(args[2])
		n := float64(utf8.RuneCountInString(s)) + 1
		if sub != "" {
			n = float64(strings.Count(s, sub))
		}
		grow := math.Max(float64(len(repl)-len(sub)), 0)
		return cost{size: 16 + float64(len(s)) + n*grow, work: float64(len(s))}
	},
	"indent": func(m *meter, args []cty.Value) cost {
		spaces, _ := args[0].AsBigFloat().Float64()
		s := str(args[1])
		return cost{size: 16 + float64(len(s)) + math.Max(spaces, 0)*float64(strings.Count(s, "\n")), work: float64(len(s))}
	},
	"chunklist": func(m *meter, args []cty.Value) cost {
		n := float64(length(args[0]))
		size, _ := args[1].AsBigFloat().Float64()
		chunks := n/math.Max(size, 1) + 1
		return cost{size: m.size(args[0]) + chunks*32, elems: math.Max(chunks, math.Min(n, math.Max(size, 1)))}
	},
	"distinct": func(m *meter, args []cty.Value) cost {
		// Each element is compared with those kept before it.
		n := float64(length(args[0]))
		return cost{size: m.size(args[0]), elems: n, work: n * n / 2 * 4}
	},
	"sort": func(m *meter, args []cty.Value) cost {
		n := float64(length(args[0]))
		return cost{size: m.size(args[0]), elems: n, work: n * math.Log2(n+2) * 64}
	},
	"setunion":        setCost(false),
	"setintersection": setCost(true),
	"setsubtract":     setCost(true),
	"jsondecode": func(m *meter, args []cty.Value) cost {
		s := str(args[0])
		if d := jsonDepth(s); d > m.lim.Nesting {
			m.fail(m.call, "this document nests %d deep; tether decodes at most %d levels (its limit on nesting)", d, m.lim.Nesting)
			return cost{}
		}
		// Every value but the first follows a '[', ',' or ':'; cty
		// infers a type for each before it decodes it.
		vals := float64(strings.Count(s, "[") + strings.Count(s, ",") + strings.Count(s, ":") + 1)
		return cost{size: 24 + float64(len(s)) + vals*96, elems: vals, work: float64(len(s))*4 + vals*1024}
	},
	"csvdecode": func(m *meter, args []cty.Value) cost {
		s := str(args[0])
		rows := float64(strings.Count(s, "\n") + 1)
		fields := float64(strings.Count(s, ",")) + rows
		cols := float64(strings.Count(strings.SplitN(s, "\n", 2)[0], ",") + 1)
		return cost{size: 24 + float64(len(s)) + fields*48 + rows*(32+cols*32), elems: math.Max(rows, cols), work: float64(len(s)) * 2}
	},
	"upper": caseCost,
	"lower": caseCost,
	"title": caseCost,
	"formatdate": func(m *meter, args []cty.Value) cost {
		// "EEEE" is "Wednesday".
		return cost{size: 16 + 4*float64(len(str(args[0]))) + m.size(args[1])}
	},
	"base64encode": func(m *meter, args []cty.Value) cost {
		return cost{size: 16 + float64(len(str(args[0])))*4/3 + 4}
	},
	"jsonencode": func(m *meter, args []cty.Value) cost {
		return cost{size: 16 + renderLen(m, args[0])}
	},
	"regex":         regexCost(false),
	"regexall":      regexCost(true),
	"regex_replace": regexReplaceCost,
}

// caseCost is a change of case's: a character's new case may take half
// as many bytes again.
func caseCost(m *meter, args []cty.Value) cost {
	return cost{size: 16 + 1.5*float64(len(str(args[0])))}
}

// setCost is the cost of a set operation: every element hashed (cty
// renders each to hash it), sorted and compared (a set of values whose
// hashes collide compares each with each); a union is as large as its
// sets together, an intersection or a difference at most its largest.
func setCost(part bool) estimator {
	return func(m *meter, args []cty.Value) cost {
		var c cost
		var n float64
		for _, a := range args {
			s := m.size(a)
			if part {
				c.size = max(c.size, s)
			} else {
				c.size += s
			}
			n += float64(length(a))
		}
		c.elems, c.work = n, n*4096+n*n/8
		return c
	}
}

// formatCost is format's or formatlist's: the format's text, its widths
// and precisions, and each argument as %v or %q renders it (each as many
// times as a verb can name it).
func formatCost(m *meter, args []cty.Value, list bool) cost {
	f := str(args[0])
	verbs, widths := formatVerbs(f)
	rows := 1.0
	var lists, scalars float64
	for _, a := range args[1:] {
		r := renderLen(m, a)
		ty := a.Type()
		if list && (ty.IsListType() || ty.IsTupleType()) {
			rows = math.Max(rows, float64(length(a)))
			lists += r
		} else {
			scalars += r
		}
	}
	per := float64(len(f)) + widths
	args1 := lists + rows*scalars
	if !list && !strings.ContainsAny(f, "[*") {
		verbs = 1 // each argument rendered once
	}
	c := cost{size: 16 + rows*(24+per) + verbs*args1}
	if list {
		c.elems = rows
	}
	return c
}

// formatVerbs counts the verbs of a format and adds up the numbers in
// them (widths, precisions, argument indexes: more than the padding they
// ask for), saturating: a width of a billion is a gigabyte of padding.
func formatVerbs(f string) (verbs, widths float64) {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		verbs++
		num := 0.0
		for ; i < len(f); i++ {
			c := f[i]
			if c >= '0' && c <= '9' {
				num = math.Min(num*10+float64(c-'0'), 1e15)
				continue
			}
			widths += num
			num = 0
			if !strings.ContainsRune(".[]#+- *", rune(c)) {
				break // the verb
			}
		}
		widths += num
	}
	return verbs, widths
}

// renderLen is the length of v rendered as format's %v or %q, or as JSON,
// renders it, at most: every byte a string may have to escape counted six.
func renderLen(m *meter, v cty.Value) float64 {
	var n float64
	budget := float64(m.lim.ValueBytes) + 1
	var walk func(v cty.Value)
	nodes := 0.0
	walk = func(v cty.Value) {
		if n > budget {
			return
		}
		nodes++
		v, _ = v.Unmark()
		ty := v.Type()
		switch {
		case v.IsNull() || !v.IsKnown():
			n += 4
		case ty == cty.String:
			s := v.AsString()
			n += 2 + float64(len(s))
			for i := 0; i < len(s); i++ {
				if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
					n += 5
				}
			}
		case ty == cty.Number:
			n += float64(numberSize(v) - 64)
		case ty == cty.Bool:
			n += 5
		case v.CanIterateElements():
			n += 2
			for it := v.ElementIterator(); it.Next() && n <= budget; {
				k, e := it.Element()
				if ty.IsMapType() || ty.IsObjectType() {
					n += 3 + float64(len(k.AsString()))*6
				}
				n++
				walk(e)
			}
		default:
			n += 16
		}
	}
	walk(v)
	m.charge(m.call, nodes*16+math.Min(n, budget))
	return n
}

// jsonDepth is the deepest nesting of arrays and objects in a JSON text.
func jsonDepth(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// maxPattern bounds a regular expression's text, and maxProgram the
// instructions it compiles to (Go's regexp takes about 40 bytes each, and a
// short pattern of repeats compiles to millions).
const (
	maxPattern = 16 << 10
	maxProgram = 1 << 16
)

// compileBounded compiles a regular expression once its text and its
// program's size are within bounds (compilePattern), charging the work. A
// pattern that does not parse is left to the function to report (nil, no
// failure).
func compileBounded(m *meter, pattern string) *regexp.Regexp {
	m.charge(m.call, float64(min(len(pattern), maxPattern+1))*64)
	if m.failed != nil {
		return nil
	}
	re, err := compilePattern(pattern)
	if errors.Is(err, ErrLimit) {
		m.fail(m.call, "%s", strings.TrimPrefix(err.Error(), ErrLimit.Error()+": "))
	}
	if err != nil {
		return nil
	}
	return re
}

// compilePattern compiles a regular expression of a file (a function's, a
// constraint's) once its text is at most maxPattern bytes and it compiles
// to at most maxProgram instructions: Go's compiler makes millions of a
// short pattern of repeats. Past either it is an ErrLimit.
func compilePattern(pattern string) (*regexp.Regexp, error) {
	if len(pattern) > maxPattern {
		return nil, fmt.Errorf("%w: this regular expression is %s; tether compiles at most %s (its limit on a pattern)", ErrLimit, byteSize(float64(len(pattern))), byteSize(maxPattern))
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	if n := programSize(re); n > maxProgram {
		return nil, fmt.Errorf("%w: this regular expression compiles to about %.3g instructions; tether compiles at most %d (its limit on a pattern)", ErrLimit, n, maxProgram)
	}
	return regexp.Compile(pattern)
}

// programSize estimates the instructions re compiles to: its repeats
// copied out, as Go's compiler does.
func programSize(re *syntax.Regexp) float64 {
	var n float64
	for _, s := range re.Sub {
		n += programSize(s)
	}
	switch re.Op {
	case syntax.OpLiteral:
		return float64(len(re.Rune)) + 1
	case syntax.OpRepeat:
		times := float64(re.Max)
		if re.Max < 0 {
			times = float64(re.Min) + 1
		}
		return (n + 2) * math.Max(times, 1)
	}
	return n + 2
}

// regexScan is the work of matching pattern against s: Go's engine steps
// through the pattern's program for each byte, a few units a step.
func regexScan(s, pattern string) float64 {
	steps := float64(len(pattern))
	if re, err := syntax.Parse(pattern, syntax.Perl); err == nil {
		steps = programSize(re)
	}
	return float64(len(s)+1) * math.Max(steps, 1) * 4
}

// regexCost is regex's or regexall's: the pattern compiled within bounds,
// the matches counted (a bounded number of them) to size the result.
func regexCost(all bool) estimator {
	return func(m *meter, args []cty.Value) cost {
		pattern, s := str(args[0]), str(args[1])
		re := compileBounded(m, pattern)
		if re == nil {
			return cost{}
		}
		groups := float64(re.NumSubexp() + 1)
		scan := regexScan(s, pattern)
		var c cost
		m.charge(m.call, scan) // before the matches are counted
		if m.failed != nil {
			return cost{}
		}
		perMatch := 24 + groups*24
		limit := int(math.Min(float64(m.lim.Elements), float64(m.lim.ValueBytes)/perMatch)) + 1
		if !all {
			limit = 1
		}
		matches := re.FindAllStringSubmatchIndex(s, limit)
		if all && len(matches) >= limit {
			return cost{size: float64(limit) * perMatch, elems: float64(limit)}
		}
		c.size = 24
		for _, mt := range matches {
			c.size += perMatch
			for g := 0; g+1 < len(mt); g += 2 {
				c.size += float64(max(mt[g+1]-mt[g], 0))
			}
		}
		c.elems = math.Max(float64(len(matches)), groups)
		return c
	}
}

// regexReplaceCost is regex_replace's: each match replaced by the
// replacement, whose $ references add at most the whole string each.
func regexReplaceCost(m *meter, args []cty.Value) cost {
	s, pattern, repl := str(args[0]), str(args[1]), str(args[2])
	re := compileBounded(m, pattern)
	if re == nil {
		return cost{}
	}
	scan := regexScan(s, pattern)
	m.charge(m.call, scan) // before the matches are counted
	if m.failed != nil {
		return cost{}
	}
	limit := int(float64(m.lim.ValueBytes)/64) + 1
	matches := float64(len(re.FindAllStringIndex(s, limit)))
	if matches >= float64(limit) {
		matches = float64(len(s)) + 1 // at most one a byte, and one at the end
	}
	refs := float64(strings.Count(repl, "$"))
	return cost{size: 16 + float64(len(s)) + matches*float64(len(repl)) + refs*float64(len(s))}
}
