package taskfile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tether-fsm/tether/fsm"
)

// Parse reads a task file or a Nomad job file. Errors and warnings both
// come back as diagnostics, each with its file:line:column; the file is
// usable only if none is an error. Parsing evaluates var.* and local.*
// and HCL's functions; run-time references stay in the strings for
// Instantiate. Parse touches nothing outside src and opts.
//
// Reading a file is bounded (opts.Limits, and opts.MaxCount copies of a
// group): a file past a limit is refused with a diagnostic naming where
// and which limit (IsLimit), before the memory or the time it would take
// is spent.
func Parse(filename string, src []byte, opts Options) (*File, hcl.Diagnostics) {
	lim := opts.Limits.withDefaults()
	file, diags := parseBounded(filename, src, lim)
	if diags.HasErrors() {
		return nil, diags
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok { // hclsyntax always returns its own body
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unexpected file body"})
	}
	m := newMeter(lim)
	m.srcs[filename] = src
	p := &parser{
		file: &File{Filename: filename, maxCount: opts.maxCount(), limits: lim},
		ctx:  &hcl.EvalContext{Variables: map[string]cty.Value{}, Functions: functions(m)},
		opts: opts,
		m:    m,
	}
	p.ctx.Variables["var"] = cty.EmptyObjectVal
	p.ctx.Variables["local"] = cty.EmptyObjectVal
	p.variables(body, opts)
	p.top(body)
	p.checkCounts()
	diags = m.report(append(diags, p.diags...))
	if diags.HasErrors() {
		return nil, diags
	}
	if len(p.file.Tasks) == 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "No task in file",
			Detail:   `Declare at least one task "name" { ... } block, at the top level, in a job, or inside job > group.`,
			Subject:  body.SrcRange.Ptr(),
		})
		return nil, diags
	}
	p.file.Notices = p.notices.list()
	return p.file, diags
}

// Sniff reports whether src is a task file or a job file by its form:
// HCL with a task or a job block at its top level, whether or not what
// is in them is valid (Parse says that). It is for a file without a
// .hcl or .nomad name, so that a caller can tell one that is meant as a
// task file (and show Parse's errors for it) from any other file.
func Sniff(filename string, src []byte) bool {
	file, diags := parseBounded(filename, src, DefaultLimits)
	if diags.HasErrors() {
		return false
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return false
	}
	for _, b := range body.Blocks {
		if b.Type == "task" || b.Type == "job" {
			return true
		}
	}
	return false
}

type parser struct {
	file    *File
	diags   hcl.Diagnostics
	notices notices
	ctx     *hcl.EvalContext
	opts    Options
	vars    map[string]cty.Value
	locals  map[string]cty.Value
	// declared are the variable names, set or not.
	declared map[string]bool
	// seen are a task file's top-level task names.
	seen map[string]hcl.Range
	// m bounds the evaluation (Options.Limits).
	m *meter
}

// ephemeralDisk reads a group's ephemeral_disk block: its size (MB), which
// bounds what each artifact of the group may place; sticky and migrate
// are a scheduler's (a notice).
func (p *parser) ephemeralDisk(c *hclsyntax.Block) int {
	p.noLabels(c)
	p.noBlocks(c)
	size := 0
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "size":
			if n, ok := p.int(a); ok {
				if n <= 0 {
					p.errorf(a.Expr.Range(), "Bad size", "ephemeral_disk size is %d MB; it must be positive.", n)
					continue
				}
				size = n
			}
		case "sticky", "migrate":
			p.ignore("ephemeral_disk", "block's "+a.Name, a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in an ephemeral_disk block.", a.Name)
		}
	}
	return size
}

// checkCounts refuses a group whose count is past Options.MaxCount.
func (p *parser) checkCounts() {
	for _, g := range p.file.Groups {
		if g.Count > p.file.maxCount {
			p.errorf(g.Range, limitSummary, "group %q has count = %d; tether runs at most %d copies of a group (its bound on count: --max-count, TETHER_MAX_COUNT).", g.Name, g.Count, p.file.maxCount)
		}
	}
}

func (p *parser) errorf(rng hcl.Range, summary, format string, args ...any) {
	p.diags = append(p.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(format, args...), Subject: rng.Ptr()})
}

func (p *parser) warnf(rng hcl.Range, summary, format string, args ...any) {
	p.diags = append(p.diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: summary, Detail: fmt.Sprintf(format, args...), Subject: rng.Ptr()})
}

// ignore records a notice for a Nomad stanza tether does not act on.
func (p *parser) ignore(name, what string, rng hcl.Range) {
	reason, ok := ignoredStanzas[name]
	if !ok {
		reason = "tether does not act on it"
	}
	p.notices.add(NoticeIgnored, name, what, reason, rng)
}

// attrs returns the attributes of body in known, in source order. An
// attribute tether ignores as a Nomad stanza becomes a notice; any other
// becomes a warning naming it.
func (p *parser) attrs(body *hclsyntax.Body, where string, known ...string) []*hclsyntax.Attribute {
	var out []*hclsyntax.Attribute
	for _, a := range sortedAttrs(body) {
		if contains(known, a.Name) {
			out = append(out, a)
			continue
		}
		p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in %s.", a.Name, where)
	}
	return out
}

func sortedAttrs(body *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SrcRange.Start.Byte < out[j].SrcRange.Start.Byte })
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// label checks that block has exactly one label and returns it.
func (p *parser) label(b *hclsyntax.Block) (string, bool) {
	if len(b.Labels) != 1 {
		p.errorf(b.TypeRange, fmt.Sprintf("Bad %s block", b.Type), `A %s block needs exactly one name label: %s "name" { ... }.`, b.Type, b.Type)
		return "", false
	}
	if b.Labels[0] == "" {
		p.errorf(b.LabelRanges[0], fmt.Sprintf("Bad %s block", b.Type), "The %s name is empty.", b.Type)
		return "", false
	}
	return b.Labels[0], true
}

func (p *parser) top(body *hclsyntax.Body) {
	p.attrs(body, "the file")
	for _, b := range body.Blocks {
		switch b.Type {
		case "task":
			name, ok := p.label(b)
			if !ok {
				continue
			}
			if p.seen == nil {
				p.seen = map[string]hcl.Range{}
			}
			if prev, dup := p.seen[name]; dup {
				p.errorf(b.LabelRanges[0], "Duplicate task", "A task named %q is already declared at %s.", name, pos(prev))
				continue
			}
			p.seen[name] = b.LabelRanges[0]
			g := &Group{Name: name, Implicit: true, Count: 1, Range: b.TypeRange}
			if t := p.task(b, g, nil); t != nil {
				p.checkReadiness(t)
				p.addGroup(g)
			}
		case "job":
			if p.file.Job != nil {
				p.errorf(b.TypeRange, "Duplicate job", "A file holds one job; one is already declared at %s.", pos(p.file.Job.Range))
				continue
			}
			p.job(b)
		case "variable", "variables", "locals":
		default:
			p.warnf(b.TypeRange, "Unsupported block", "tether ignores the %q block at the top level; it reads task blocks, or a job.", b.Type)
		}
	}
}

func (p *parser) addGroup(g *Group) {
	for _, t := range g.Tasks {
		t.networkMode()
	}
	p.file.Groups = append(p.file.Groups, g)
	p.file.Tasks = append(p.file.Tasks, g.Tasks...)
}

// value evaluates an attribute (see eval) and converts it to want.
func (p *parser) value(a *hclsyntax.Attribute, want cty.Type) (cty.Value, bool) {
	v, diags := p.eval(a.Expr)
	p.diags = append(p.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		return cty.NilVal, false // a variable or local that failed, reported where it failed
	}
	if v.IsNull() {
		p.errorf(a.Expr.Range(), "Missing value", "%s must have a value.", a.Name)
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, want)
	if err != nil {
		p.errorf(a.Expr.Range(), "Wrong type", "%s must be a %s: %v.", a.Name, want.FriendlyName(), err)
		return cty.NilVal, false
	}
	return cv, true
}

// str reads a string Nomad interpolates at run time: it keeps its
// references and escapes.
func (p *parser) str(a *hclsyntax.Attribute) (string, bool) {
	v, ok := p.value(a, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// lit reads a string Nomad does not interpolate at run time: a reference
// in it is an error naming it, and its escapes are undone.
func (p *parser) lit(a *hclsyntax.Attribute) (string, bool) {
	s, ok := p.str(a)
	if !ok {
		return "", false
	}
	if ref, has := firstRef(s); has {
		p.errorf(a.Expr.Range(), "Run-time value not allowed here", "%s is not interpolated when the task runs, so ${%s} cannot be used in it: give a literal value, or a var.* computed while parsing.", a.Name, ref)
		return "", false
	}
	return Unescape(s), true
}

func (p *parser) bool(a *hclsyntax.Attribute) (bool, bool) {
	v, ok := p.value(a, cty.Bool)
	if !ok {
		return false, false
	}
	return v.True(), true
}

// int reads a whole number.
func (p *parser) int(a *hclsyntax.Attribute) (int, bool) {
	v, ok := p.value(a, cty.Number)
	if !ok {
		return 0, false
	}
	bf := v.AsBigFloat()
	if !bf.IsInt() {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s = %s: it must be a whole number.", a.Name, bf.Text('g', -1))
		return 0, false
	}
	i, acc := bf.Int64()
	if acc != 0 || i < -1<<31 || i > 1<<31-1 {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s = %s is out of range: it must be between %d and %d.", a.Name, bf.Text('f', 0), -1<<31, 1<<31-1)
		return 0, false
	}
	return int(i), true
}

// list reads a list of strings (interpolated at run time).
func (p *parser) list(a *hclsyntax.Attribute) []string {
	v, ok := p.value(a, cty.List(cty.String))
	if !ok {
		return nil
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			p.errorf(a.Expr.Range(), "Missing value", "%s must not hold null.", a.Name)
			return nil
		}
		out = append(out, e.AsString())
	}
	return out
}

// litList reads a list of strings that is not interpolated at run time.
func (p *parser) litList(a *hclsyntax.Attribute) []string {
	l := p.list(a)
	for i, s := range l {
		if ref, has := firstRef(s); has {
			p.errorf(a.Expr.Range(), "Run-time value not allowed here", "%s is not interpolated when the task runs, so ${%s} cannot be used in it.", a.Name, ref)
			return nil
		}
		l[i] = Unescape(s)
	}
	return l
}

// stringMap reads a block of NAME = value attributes (env, meta, headers):
// every value is converted to a string, as Nomad does.
func (p *parser) stringMap(b *hclsyntax.Block, what string) map[string]string {
	p.noLabels(b)
	out := map[string]string{}
	for _, a := range sortedAttrs(b.Body) {
		v, ok := p.value(a, cty.String)
		if ok {
			out[a.Name] = v.AsString()
		}
	}
	_ = what
	return out
}

// mapAttr reads an attribute holding a map of strings (meta = {...}).
func (p *parser) mapAttr(a *hclsyntax.Attribute) map[string]string {
	v, ok := p.value(a, cty.Map(cty.String))
	if !ok {
		return nil
	}
	out := map[string]string{}
	for k, e := range v.AsValueMap() {
		if !e.IsNull() {
			out[k] = e.AsString()
		}
	}
	return out
}

func (p *parser) noLabels(c *hclsyntax.Block) {
	if len(c.Labels) > 0 {
		p.errorf(c.LabelRanges[0], fmt.Sprintf("Bad %s block", c.Type), "A %s block takes no label.", c.Type)
	}
}

// noBlocks warns about every block inside c.
func (p *parser) noBlocks(c *hclsyntax.Block) {
	for _, nb := range c.Body.Blocks {
		p.warnf(nb.TypeRange, "Unsupported block", "tether ignores the %q block in a %s block.", nb.Type, c.Type)
	}
}

// pos prints where a range starts as file:line:column.
func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// FormatDiag prints a diagnostic as "file:line:col: error: summary: detail".
func FormatDiag(d *hcl.Diagnostic) string {
	sev := "error"
	if d.Severity == hcl.DiagWarning {
		sev = "warning"
	}
	var b strings.Builder
	if d.Subject != nil {
		b.WriteString(pos(*d.Subject))
		b.WriteString(": ")
	}
	b.WriteString(sev)
	b.WriteString(": ")
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString(": ")
		b.WriteString(d.Detail)
	}
	return b.String()
}

// restartDefault is Nomad's restart policy for a job type.
func restartDefault(job *Job) fsm.RestartPolicy {
	if job != nil && job.Type.Batch() {
		return fsm.DefaultBatchRestart
	}
	return fsm.DefaultServiceRestart
}
