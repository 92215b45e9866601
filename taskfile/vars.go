package taskfile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// VarFile is the content of a -var-file: NAME = value lines.
type VarFile struct {
	Name string
	Src  []byte
}

// Options are a parse's inputs beside the file itself.
type Options struct {
	// Vars are -var NAME=VALUE inputs (the text after '='): a string
	// variable takes it as is, another type parses it as an HCL value.
	Vars map[string]string
	// VarFiles are -var-file contents, applied in order (a later one wins).
	VarFiles []VarFile
	// Env is the environment NOMAD_VAR_<name> inputs are read from (the
	// caller's own, if it wants Nomad's behaviour; nil reads none). -var
	// files override them and -var overrides both.
	Env map[string]string
	// DispatchMeta is the meta of a dispatch of a parameterized job
	// (nomad job dispatch -meta KEY=VALUE): it must hold every
	// meta_required key and nothing outside meta_required and
	// meta_optional.
	DispatchMeta map[string]string
	// Limits bound what reading the file may cost (zero fields:
	// DefaultLimits).
	Limits Limits
	// MaxCount bounds a group's count (0: DefaultMaxCount, 1,000): a file
	// asking for more copies is refused while it is parsed, and PlanGroup
	// refuses it too.
	MaxCount int
}

// varDecl is a variable block.
type varDecl struct {
	name   string
	typ    cty.Type
	def    *cty.Value
	rng    hcl.Range
	checks []*hclsyntax.Block
}

// variables reads the file's variable, variables and locals blocks and
// sets var.* and local.* for the rest of the parse.
func (p *parser) variables(body *hclsyntax.Body, opts Options) {
	decls := map[string]*varDecl{}
	var order []string
	declare := func(d *varDecl) {
		if prev, dup := decls[d.name]; dup {
			p.errorf(d.rng, "Duplicate variable", "Variable %q is already declared at %s.", d.name, pos(prev.rng))
			return
		}
		decls[d.name] = d
		order = append(order, d.name)
	}
	var localBlocks []*hclsyntax.Block
	for _, b := range body.Blocks {
		switch b.Type {
		case "variable":
			name, ok := p.label(b)
			if !ok {
				continue
			}
			if !hclsyntax.ValidIdentifier(name) {
				p.errorf(b.LabelRanges[0], "Bad variable name", "%q is not a valid name: use letters, digits, '_' and '-', starting with a letter.", name)
				continue
			}
			d := &varDecl{name: name, typ: cty.DynamicPseudoType, rng: b.LabelRanges[0]}
			for _, a := range p.attrs(b.Body, fmt.Sprintf("variable %q", name), "type", "default", "description", "sensitive", "nullable") {
				switch a.Name {
				case "type":
					t, diags := typeexpr.TypeConstraint(a.Expr)
					p.diags = append(p.diags, diags...)
					if !diags.HasErrors() {
						d.typ = t
					}
				case "default":
					v, diags := p.m.eval(a.Expr, nil)
					p.diags = append(p.diags, diags...)
					if !diags.HasErrors() {
						d.def = &v
					}
				}
			}
			for _, vb := range b.Body.Blocks {
				if vb.Type == "validation" {
					d.checks = append(d.checks, vb)
				} else {
					p.warnf(vb.TypeRange, "Unsupported block", "tether ignores the %q block in a variable.", vb.Type)
				}
			}
			if d.def != nil && d.typ != cty.DynamicPseudoType {
				cv, err := convert.Convert(*d.def, d.typ)
				if err != nil {
					p.errorf(b.LabelRanges[0], "Bad default", "The default of variable %q is not a %s: %v.", name, d.typ.FriendlyName(), err)
				} else {
					d.def = &cv
				}
			}
			declare(d)
		case "variables":
			p.noLabels(b)
			for _, a := range sortedAttrs(b.Body) {
				v, diags := p.m.eval(a.Expr, nil)
				p.diags = append(p.diags, diags...)
				if !diags.HasErrors() && v.IsWhollyKnown() {
					declare(&varDecl{name: a.Name, typ: cty.DynamicPseudoType, def: &v, rng: a.NameRange})
				}
			}
		case "locals":
			localBlocks = append(localBlocks, b)
		}
	}

	values := map[string]cty.Value{}
	failed := map[string]bool{}
	set := func(name, raw string, from string, rng *hcl.Range) {
		d, ok := decls[name]
		if !ok {
			if from == "-var" {
				p.diags = append(p.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Undeclared variable",
					Detail: fmt.Sprintf("-var %s=...: the file declares no variable %q (it declares: %s).", name, name, listOr(order, "none")), Subject: rng})
			}
			return
		}
		v, err := varValue(p.m, raw, d.typ, from)
		if err != nil {
			p.errorf(d.rng, "Bad variable value", "Variable %q must be a %s; %s gave %q (%v).", name, d.typ.FriendlyName(), from, raw, err)
			failed[name] = true
			return
		}
		values[name] = v
	}
	setValue := func(name string, v cty.Value, rng hcl.Range) {
		if _, ok := decls[name]; !ok {
			p.warnf(rng, "Undeclared variable", "The var file sets %q, which the job file does not declare.", name)
			return
		}
		values[name] = v
	}
	for _, k := range sortedKeys(opts.Env) {
		if name, ok := strings.CutPrefix(k, "NOMAD_VAR_"); ok {
			set(name, opts.Env[k], "NOMAD_VAR_"+name, nil)
		}
	}
	for _, vf := range opts.VarFiles {
		p.m.srcs[vf.Name] = vf.Src
		f, diags := parseBounded(vf.Name, vf.Src, p.m.lim)
		p.diags = append(p.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		fb := f.Body.(*hclsyntax.Body)
		for _, b := range fb.Blocks {
			p.errorf(b.TypeRange, "Bad var file", "A var file holds only NAME = value lines, not a %q block.", b.Type)
		}
		for _, a := range sortedAttrs(fb) {
			v, diags := p.m.eval(a.Expr, nil)
			p.diags = append(p.diags, diags...)
			if !diags.HasErrors() && v.IsWhollyKnown() {
				setValue(a.Name, v, a.NameRange)
			}
		}
	}
	for _, k := range sortedKeys(opts.Vars) {
		set(k, opts.Vars[k], "-var", nil)
	}

	p.vars = map[string]cty.Value{}
	p.declared = map[string]bool{}
	for _, name := range order {
		p.declared[name] = true
		d := decls[name]
		v, ok := values[name]
		switch {
		case failed[name]:
			p.vars[name] = cty.DynamicVal // reported: what uses it is not
			continue
		case ok:
		case d.def != nil:
			v = *d.def
		default:
			p.errorf(d.rng, "Missing variable value", "Variable %q has no default and no value was given: set it with -var %s=VALUE, a var file, or NOMAD_VAR_%s.", name, name, name)
			continue
		}
		if d.typ != cty.DynamicPseudoType {
			cv, err := convert.Convert(v, d.typ)
			if err != nil {
				p.errorf(d.rng, "Bad variable value", "Variable %q must be a %s: %v.", name, d.typ.FriendlyName(), err)
				p.vars[name] = cty.DynamicVal
				continue
			}
			v = cv
		}
		p.vars[name] = v
	}
	p.ctx.Variables["var"] = cty.ObjectVal(p.vars)
	for _, name := range order {
		d := decls[name]
		if _, ok := p.vars[name]; !ok {
			continue
		}
		if !p.vars[name].IsWhollyKnown() {
			continue
		}
		for _, vb := range d.checks {
			p.validate(d, vb)
		}
	}

	// Locals may name each other: evaluate what can be until nothing more can.
	var todo []*hclsyntax.Attribute
	for _, b := range localBlocks {
		p.noLabels(b)
		todo = append(todo, sortedAttrs(b.Body)...)
	}
	p.locals = map[string]cty.Value{}
	for _, a := range todo {
		p.locals[a.Name] = cty.DynamicVal // declared: checkVars passes
	}
	resolved := map[string]bool{}
	for progress := true; progress && len(resolved) < len(todo); {
		progress = false
		for _, a := range todo {
			if resolved[a.Name] {
				continue
			}
			ready := true
			for _, tr := range a.Expr.Variables() {
				if tr.RootName() != "local" || len(tr) < 2 {
					continue
				}
				if at, ok := tr[1].(hcl.TraverseAttr); ok && !resolved[at.Name] {
					ready = false
				}
			}
			if !ready {
				continue
			}
			v, diags := p.eval(a.Expr)
			p.diags = append(p.diags, diags...)
			if diags.HasErrors() {
				v = cty.DynamicVal
			}
			p.locals[a.Name] = v
			resolved[a.Name] = true
			p.ctx.Variables["local"] = cty.ObjectVal(p.locals)
			progress = true
		}
	}
	for _, a := range todo {
		if !resolved[a.Name] {
			p.errorf(a.NameRange, "Local value cycle", "local.%s depends on itself through other local values.", a.Name)
		}
	}
	p.ctx.Variables["local"] = cty.ObjectVal(p.locals)
}

// validate runs a variable's validation block.
func (p *parser) validate(d *varDecl, vb *hclsyntax.Block) {
	var cond, msg *hclsyntax.Attribute
	for _, a := range p.attrs(vb.Body, "a validation block", "condition", "error_message") {
		if a.Name == "condition" {
			cond = a
		} else {
			msg = a
		}
	}
	if cond == nil {
		p.errorf(vb.TypeRange, "Bad validation block", "A validation block needs a condition.")
		return
	}
	v, diags := p.m.eval(cond.Expr, p.ctx)
	p.diags = append(p.diags, diags...)
	if diags.HasErrors() {
		return
	}
	b, err := convert.Convert(v, cty.Bool)
	if err != nil || b.IsNull() || !b.IsKnown() {
		p.errorf(cond.Expr.Range(), "Bad validation condition", "The condition of variable %q must be true or false.", d.name)
		return
	}
	if b.True() {
		return
	}
	text := "the value is not valid"
	if msg != nil {
		if m, diags := p.m.eval(msg.Expr, p.ctx); !diags.HasErrors() && m.Type() == cty.String && !m.IsNull() {
			text = m.AsString()
		}
	}
	p.errorf(cond.Expr.Range(), "Invalid value for variable", "Variable %q: %s", d.name, text)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listOr(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, ", ")
}

// varValue reads a -var or NOMAD_VAR_ text as a value of typ: a string
// as is; a number or bool from its text; a collection as an HCL value
// (evaluated through m). Its text is bounded as a file's is, and its value
// as any other.
func varValue(m *meter, raw string, typ cty.Type, from string) (cty.Value, error) {
	if len(raw) > m.lim.SourceBytes {
		return cty.NilVal, fmt.Errorf("%s is %s; tether reads at most %s (its limit on a file's size)", from, byteSize(float64(len(raw))), byteSize(float64(m.lim.SourceBytes)))
	}
	if typ == cty.String || typ == cty.DynamicPseudoType {
		return cty.StringVal(raw), nil
	}
	if typ.IsPrimitiveType() {
		v, err := convert.Convert(cty.StringVal(strings.TrimSpace(raw)), typ)
		if err == nil && typ == cty.Number {
			m.measure(nil, "this makes", v)
			if m.failed != nil {
				return cty.NilVal, fmt.Errorf("%s", m.failed.Detail)
			}
		}
		return v, err
	}
	m.srcs[from] = []byte(raw)
	expr, diags := parseExprBounded(from, []byte(raw), m.lim)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("not an HCL value: %s", diags[0].Summary)
	}
	if len(expr.Variables()) > 0 {
		return cty.NilVal, fmt.Errorf("a value cannot name variables")
	}
	v, diags := m.eval(expr, nil)
	if diags.HasErrors() || !v.IsWhollyKnown() {
		if m.failed != nil {
			return cty.NilVal, fmt.Errorf("%s: %s", m.failed.Summary, m.failed.Detail)
		}
		return cty.NilVal, fmt.Errorf("%s", diags[0].Summary)
	}
	return convert.Convert(v, typ)
}
