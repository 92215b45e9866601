package taskfile

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// A meter charges one file's evaluation against its Limits. Every
// expression is evaluated through a metered copy of its syntax tree
// (wrap), whose nodes charge their evaluation, measure what they made and
// bound what they are about to make: a string template its parts before
// HCL joins them, a for expression each iteration's result before HCL
// collects it. Every function that can make more than it was given is
// wrapped with a cost estimated from its arguments (funccost.go), charged
// before it runs. A limit passed is sticky: the meter fails the
// evaluation under way (unwinding it, so that a for expression does not
// go on with its iterations) and every later one, and Parse reports the
// first limit passed, once, naming the expression.
type meter struct {
	lim Limits
	// srcs are the texts of the files evaluated, by name, to quote the
	// expression a limit names.
	srcs map[string][]byte
	// work is the work charged so far; total the sizes of the evaluated
	// attributes.
	work, total int64
	// call is the range of the function call being evaluated, for a
	// function's cost check to name; root the expression eval was given,
	// which the limit on work names.
	call, root *hcl.Range
	// failed is the first limit passed, and told whether it was given to
	// a caller already.
	failed *hcl.Diagnostic
	told   bool
}

// stepCost is the work charged for each expression evaluated: about what
// HCL allocates to evaluate one (a child context, its diagnostics).
const stepCost = 1024

// errLimit is the error a wrapped function returns for a limit passed
// (the meter holds the diagnostic naming it).
var errLimit = errors.New("tether's parse limits")

// abort is the panic that unwinds an evaluation once a limit is passed.
type abort struct{}

func newMeter(lim Limits) *meter {
	return &meter{lim: lim.withDefaults(), srcs: map[string][]byte{}}
}

// fail records the first limit passed.
func (m *meter) fail(rng *hcl.Range, format string, args ...any) {
	if m.failed != nil {
		return
	}
	detail := fmt.Sprintf(format, args...)
	if q := m.quote(rng); q != "" {
		detail = q + ": " + detail
	}
	m.failed = &hcl.Diagnostic{Severity: hcl.DiagError, Summary: limitSummary, Detail: detail, Subject: rng}
}

// quote is the source text of rng, shortened.
func (m *meter) quote(rng *hcl.Range) string {
	if rng == nil {
		return ""
	}
	src := m.srcs[rng.Filename]
	if rng.Start.Byte < 0 || rng.End.Byte > len(src) || rng.Start.Byte >= rng.End.Byte {
		return ""
	}
	q := strings.Join(strings.Fields(string(src[rng.Start.Byte:rng.End.Byte])), " ")
	if len(q) > 80 {
		q = q[:77] + "..."
	}
	return q
}

// abortIfFailed unwinds the evaluation once a limit is passed.
func (m *meter) abortIfFailed() {
	if m.failed != nil {
		panic(abort{})
	}
}

// charge adds work, failing once the total passes the limit.
func (m *meter) charge(rng *hcl.Range, units float64) {
	if m.failed != nil {
		return
	}
	if units < 0 || math.IsNaN(units) {
		units = math.MaxInt64
	}
	if units > float64(m.lim.Work) || float64(m.work)+units > float64(m.lim.Work) {
		m.work = m.lim.Work + 1
		if m.root != nil {
			rng = m.root
		}
		m.fail(rng, "evaluating the file would take more than %d units of work (tether's limit on the work of evaluating a file: a unit is about a byte made or read)", m.lim.Work)
		return
	}
	m.work += int64(units)
}

// checkSize fails when a value of size bytes and a collection of elems
// elements (the largest it holds) would pass the limits. what names the
// value for the message ("would make", "makes").
func (m *meter) checkSize(rng *hcl.Range, what string, size float64, elems float64) {
	switch {
	case m.failed != nil:
	case size > float64(m.lim.ValueBytes) || math.IsNaN(size):
		m.fail(rng, "%s a value of about %s; a value may be at most %s (tether's limit on one value)", what, byteSize(size), byteSize(float64(m.lim.ValueBytes)))
	case elems > float64(m.lim.Elements):
		m.fail(rng, "%s a collection of %.0f elements; a collection may hold at most %d (tether's limit on one collection)", what, elems, m.lim.Elements)
	}
}

// measure measures v (walking it only until it passes the limits),
// charges the walk and checks the limits.
func (m *meter) measure(rng *hcl.Range, what string, v cty.Value) int64 {
	s := sizer{limit: m.lim.ValueBytes, elems: m.lim.Elements}
	s.walk(v)
	m.checkSize(rng, what, float64(s.size), float64(s.maxLen))
	m.charge(rng, s.work())
	return s.size
}

// size measures v for a cost estimate: its size (capped just past the
// limit), charging the walk.
func (m *meter) size(v cty.Value) float64 {
	s := sizer{limit: m.lim.ValueBytes, elems: m.lim.Elements}
	s.walk(v)
	m.charge(m.call, s.work())
	return float64(s.size)
}

// eval evaluates e in ctx through the meter, and measures its value
// against the limits on one value and on the whole file. Once a limit is
// passed it evaluates nothing more: the diagnostic naming the limit is
// returned once, and afterwards an unknown value (which the parser takes
// for a value already reported).
func (m *meter) eval(e hcl.Expression, ctx *hcl.EvalContext) (v cty.Value, diags hcl.Diagnostics) {
	if m.failed != nil {
		return cty.DynamicVal, m.tell()
	}
	se, ok := e.(hclsyntax.Expression)
	if !ok { // every expression of a parsed file is hclsyntax's
		return cty.DynamicVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unexpected expression", Subject: e.Range().Ptr()}}
	}
	if m.root == nil {
		root := e.Range()
		m.root = &root
		defer func() { m.root = nil }()
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(abort); !ok {
				panic(r)
			}
			v, diags = cty.DynamicVal, m.tell()
		}
	}()
	v, diags = m.wrap(se).Value(ctx)
	if m.failed == nil {
		rng := e.Range()
		n := m.measure(&rng, "this makes", v)
		m.total += n
		if m.failed == nil && m.total > m.lim.TotalBytes {
			m.fail(&rng, "the file's evaluated values come to more than %s here (tether's limit on a whole file)", byteSize(float64(m.lim.TotalBytes)))
		}
	}
	if m.failed != nil {
		return cty.DynamicVal, m.tell()
	}
	return v, diags
}

// tell returns the limit's diagnostic the first time it is asked for.
func (m *meter) tell() hcl.Diagnostics {
	if m.told || m.failed == nil {
		return nil
	}
	m.told = true
	return hcl.Diagnostics{m.failed}
}

// report is the limit's diagnostic for diags, when a caller of eval
// dropped it (a value it read only for a message): the file must not pass
// with a limit passed.
func (m *meter) report(diags hcl.Diagnostics) hcl.Diagnostics {
	if m.failed == nil {
		return diags
	}
	for _, d := range diags {
		if d == m.failed {
			return diags
		}
	}
	return append(diags, m.failed)
}

// wrap returns a metered copy of e's syntax tree. Leaves that name a
// value (a variable, a for expression's symbol) are kept as they are:
// what they name was measured when it was made, and HCL tells some of
// them by their type.
func (m *meter) wrap(e hclsyntax.Expression) hclsyntax.Expression {
	switch e := e.(type) {
	case nil:
		return nil
	case *hclsyntax.ScopeTraversalExpr, *hclsyntax.AnonSymbolExpr:
		return e
	case *hclsyntax.LiteralValueExpr:
		return &metered{Expression: e, m: m}
	case *hclsyntax.FunctionCallExpr:
		c := *e
		c.Args = make([]hclsyntax.Expression, len(e.Args))
		for i, a := range e.Args {
			c.Args[i] = m.wrap(a)
			if _, ok := c.Args[i].(*hclsyntax.ScopeTraversalExpr); ok {
				// HCL converts an argument to its parameter's type
				// before the function's cost is checked: measure it
				// first.
				c.Args[i] = &metered{Expression: c.Args[i], m: m}
			}
		}
		rng := e.Range()
		return &metered{Expression: &c, m: m, call: &rng}
	case *hclsyntax.ConditionalExpr:
		c := *e
		c.Condition, c.TrueResult, c.FalseResult = m.wrap(e.Condition), m.wrap(e.TrueResult), m.wrap(e.FalseResult)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.IndexExpr:
		c := *e
		c.Collection, c.Key = m.wrap(e.Collection), m.wrap(e.Key)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.TupleConsExpr:
		c := *e
		c.Exprs = make([]hclsyntax.Expression, len(e.Exprs))
		for i, x := range e.Exprs {
			c.Exprs[i] = m.wrap(x)
		}
		return &metered{Expression: &c, m: m}
	case *hclsyntax.ObjectConsExpr:
		c := *e
		c.Items = make([]hclsyntax.ObjectConsItem, len(e.Items))
		for i, it := range e.Items {
			c.Items[i] = hclsyntax.ObjectConsItem{KeyExpr: m.wrap(it.KeyExpr), ValueExpr: m.wrap(it.ValueExpr)}
		}
		return &metered{Expression: &c, m: m}
	case *hclsyntax.ObjectConsKeyExpr:
		// HCL reads a bare name as a literal key by the wrapped
		// expression's type: a traversal stays one.
		c := *e
		c.Wrapped = m.wrap(e.Wrapped)
		return &c
	case *hclsyntax.ForExpr:
		c := *e
		st := &forState{}
		c.CollExpr = m.wrap(e.CollExpr)
		if e.KeyExpr != nil {
			c.KeyExpr = &forItem{Expression: m.wrap(e.KeyExpr), m: m, st: st}
		}
		c.ValExpr = &forItem{Expression: m.wrap(e.ValExpr), m: m, st: st, counts: true}
		if e.CondExpr != nil {
			c.CondExpr = m.wrap(e.CondExpr)
		}
		return &metered{Expression: &c, m: m, reset: st.reset}
	case *hclsyntax.SplatExpr:
		c := *e // Item, the symbol Each names, stays the same pointer
		c.Source, c.Each = m.wrap(e.Source), m.wrap(e.Each)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.RelativeTraversalExpr:
		c := *e
		c.Source = m.wrap(e.Source)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.BinaryOpExpr:
		c := *e
		c.LHS, c.RHS = m.wrap(e.LHS), m.wrap(e.RHS)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.UnaryOpExpr:
		c := *e
		c.Val = m.wrap(e.Val)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.ParenthesesExpr:
		c := *e
		c.Expression = m.wrap(e.Expression)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.TemplateWrapExpr:
		c := *e
		c.Wrapped = m.wrap(e.Wrapped)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.TemplateJoinExpr:
		c := *e
		c.Tuple = m.wrap(e.Tuple)
		return &metered{Expression: &c, m: m}
	case *hclsyntax.TemplateExpr:
		c := *e
		st := &forState{}
		c.Parts = make([]hclsyntax.Expression, len(e.Parts))
		for i, p := range e.Parts {
			c.Parts[i] = &templatePart{Expression: m.wrap(p), m: m, st: st, tmpl: e.SrcRange}
		}
		return &metered{Expression: &c, m: m, reset: st.reset}
	}
	return &metered{Expression: e, m: m}
}

// metered is an expression evaluated through the meter: its evaluation
// charged, its value measured.
type metered struct {
	hclsyntax.Expression
	m *meter
	// call is set on a function call: its range, for its function's cost
	// check to name.
	call *hcl.Range
	// reset, when set, starts the node's running total (a for
	// expression's, a template's) and returns what puts the outer one
	// back.
	reset func() func()
}

func (w *metered) Value(ctx *hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	m := w.m
	m.abortIfFailed()
	rng := w.Range()
	m.charge(&rng, stepCost)
	m.abortIfFailed()
	if w.reset != nil {
		defer w.reset()()
	}
	if w.call != nil {
		outer := m.call
		m.call = w.call
		defer func() { m.call = outer }()
	}
	v, diags := w.Expression.Value(ctx)
	m.abortIfFailed()
	m.measure(&rng, "this makes", v)
	m.abortIfFailed()
	return v, diags
}

// forState is the running total of a for expression's iterations (or a
// template's parts) while it is evaluated.
type forState struct {
	size  int64
	count int64
}

func (st *forState) reset() func() {
	outer := *st
	*st = forState{}
	return func() { *st = outer }
}

// forItem is a for expression's key or value: each iteration's result is
// added to the running total, which must stay within one value, before
// HCL collects it.
type forItem struct {
	hclsyntax.Expression
	m  *meter
	st *forState
	// counts: each result is an element (the value's, not the key's).
	counts bool
}

func (f *forItem) Value(ctx *hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	m := f.m
	v, diags := f.Expression.Value(ctx)
	m.abortIfFailed()
	rng := f.Range()
	f.st.size += m.measure(&rng, "this makes", v) + 8
	if f.counts {
		f.st.count++
	}
	m.checkSize(&rng, "this for expression would make", float64(f.st.size), float64(f.st.count))
	m.abortIfFailed()
	return v, diags
}

// templatePart is a part of a string template: the parts' sizes are
// added up, and must stay within one value, before HCL joins them.
type templatePart struct {
	hclsyntax.Expression
	m    *meter
	st   *forState
	tmpl hcl.Range
}

func (p *templatePart) Value(ctx *hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	m := p.m
	v, diags := p.Expression.Value(ctx)
	m.abortIfFailed()
	rng := p.Range()
	p.st.size += m.measure(&rng, "this makes", v)
	m.checkSize(&p.tmpl, "this string template would make", float64(p.st.size), 0)
	m.abortIfFailed()
	return v, diags
}

// sizer measures a value as Limits counts sizes, walking it until it
// passes limit or holds a collection of more than elems elements.
type sizer struct {
	limit  int64
	elems  int
	size   int64 // past limit when the walk stopped early
	nodes  int64 // values visited
	maxLen int   // the largest collection's length
	// convert is the work of converting the value's tuples and objects
	// to lists and maps, which cty does (for a function's argument, an
	// attribute's type) by comparing each element's type with each
	// other's: n*n/2 for n elements.
	convert float64
}

func (s *sizer) over() bool { return s.size > s.limit || s.maxLen > s.elems }

// work is the work of the walk and of the conversions it foresees.
func (s *sizer) work() float64 { return float64(s.nodes)*128 + s.convert }

func (s *sizer) walk(v cty.Value) {
	if s.over() {
		return
	}
	s.nodes++
	v, _ = v.Unmark()
	ty := v.Type()
	switch {
	case v.IsNull() || !v.IsKnown():
		s.size += 16
	case ty == cty.String:
		s.size += 16 + int64(len(v.AsString()))
	case ty == cty.Number:
		s.size += numberSize(v)
	case ty == cty.Bool:
		s.size += 16
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType():
		n := v.LengthInt()
		s.maxLen = max(s.maxLen, n)
		s.size += 24 + 8*int64(n)
		if ty.IsTupleType() {
			s.convert += float64(n) * float64(n) / 2
		}
		if s.over() {
			return
		}
		if ty.IsSetType() {
			// Iterating a set sorts it, and its elements are hashed
			// wherever it is converted.
			s.convert += float64(n) * 256
			for it := v.ElementIterator(); it.Next() && !s.over(); {
				_, e := it.Element()
				s.walk(e)
			}
			return
		}
		// Indexed with keys made once, not iterated: a list's iterator
		// makes a number for each index.
		for i := 0; i < n && !s.over(); i++ {
			s.walk(v.Index(indexKey(i)))
		}
	case ty.IsObjectType():
		attrs := ty.AttributeTypes()
		n := len(attrs)
		s.maxLen = max(s.maxLen, n)
		s.size += 24 + 16*int64(n)
		s.convert += float64(n) * float64(n) / 2
		for name := range attrs {
			if s.over() {
				return
			}
			s.size += int64(len(name))
			s.walk(v.GetAttr(name))
		}
	case ty.IsMapType():
		n := v.LengthInt()
		s.maxLen = max(s.maxLen, n)
		s.size += 24 + 16*int64(n)
		if s.over() {
			return
		}
		for it := v.ElementIterator(); it.Next() && !s.over(); {
			k, e := it.Element()
			s.size += int64(len(k.AsString()))
			s.walk(e)
		}
	default:
		s.size += 16
	}
}

// indexKeys are the numbers 0 to DefaultLimits.Elements-1, made once.
var indexKeys = sync.OnceValue(func() []cty.Value {
	keys := make([]cty.Value, DefaultLimits.Elements)
	for i := range keys {
		keys[i] = cty.NumberIntVal(int64(i))
	}
	return keys
})

// indexKey is the number i as an index.
func indexKey(i int) cty.Value {
	if keys := indexKeys(); i < len(keys) {
		return keys[i]
	}
	return cty.NumberIntVal(int64(i))
}

// numberSize is a number's size: 64 and its decimal digits as a string
// would spell them (1e999999999 is a billion digits).
func numberSize(v cty.Value) int64 {
	bf := v.AsBigFloat()
	if bf.IsInf() || bf.Sign() == 0 {
		return 64 + 4
	}
	exp := bf.MantExp(nil)
	if exp < 0 {
		exp = -exp
	}
	return 64 + 3 + int64(float64(int64(exp)+int64(bf.MinPrec()))*0.30103)
}
