package taskfile

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// A job file is evaluated in two steps, as Nomad does. While parsing,
// HCL evaluates var.* and local.* and its functions. Everything else in a
// ${...} (NOMAD_* variables, env["X"], attr.*, node.*, meta.*) is a
// run-time reference: it is kept, as the text "${ref}", in the string
// that holds it, and Scope.Interpolate resolves it when the task is about
// to run. A literal "${" in a parsed value (HCL's "$${") is kept as "$${",
// so the run-time step tells it from a reference.

// parseTimeRoots are the variables HCL resolves while parsing.
var parseTimeRoots = map[string]bool{"var": true, "local": true}

// Escape makes s a literal for the run-time step: "${" becomes "$${".
func Escape(s string) string { return strings.ReplaceAll(s, "${", "$${") }

// Unescape is the text of a parsed value that is not interpolated at run
// time (a template's data): "$${" becomes "${", and references stay as
// written.
func Unescape(s string) string { return strings.ReplaceAll(s, "$${", "${") }

// functions are HCL's functions as Nomad offers them in a job file, each
// (but try and can, which evaluate their arguments themselves, through
// the meter) with its cost checked by m before it runs.
func functions(m *meter) map[string]function.Function {
	out := map[string]function.Function{}
	for name, f := range hclFunctions() {
		if name == "try" || name == "can" {
			out[name] = f
			continue
		}
		out[name] = m.bounded(f, estimators[name])
	}
	return out
}

// hclFunctions is the function table itself.
func hclFunctions() map[string]function.Function {
	strFn := func(f func(string) (string, error)) function.Function {
		return function.New(&function.Spec{
			Params: []function.Parameter{{Name: "str", Type: cty.String}},
			Type:   function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				s, err := f(args[0].AsString())
				if err != nil {
					return cty.NilVal, err
				}
				return cty.StringVal(s), nil
			},
		})
	}
	hexOf := func(sum func([]byte) []byte) function.Function {
		return strFn(func(s string) (string, error) { return hex.EncodeToString(sum([]byte(s))), nil })
	}
	return map[string]function.Function{
		"abs": stdlib.AbsoluteFunc, "ceil": stdlib.CeilFunc, "chomp": stdlib.ChompFunc,
		"chunklist": stdlib.ChunklistFunc, "coalesce": stdlib.CoalesceFunc, "coalescelist": stdlib.CoalesceListFunc,
		"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
		"csvdecode": stdlib.CSVDecodeFunc, "distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc,
		"flatten": stdlib.FlattenFunc, "floor": stdlib.FloorFunc, "format": stdlib.FormatFunc,
		"formatdate": stdlib.FormatDateFunc, "formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc,
		"index": stdlib.IndexFunc, "join": stdlib.JoinFunc, "jsondecode": stdlib.JSONDecodeFunc,
		"jsonencode": stdlib.JSONEncodeFunc, "keys": stdlib.KeysFunc, "length": stdlib.LengthFunc,
		"log": stdlib.LogFunc, "lookup": stdlib.LookupFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc,
		"merge": stdlib.MergeFunc, "min": stdlib.MinFunc, "parseint": stdlib.ParseIntFunc, "pow": stdlib.PowFunc,
		"range": stdlib.RangeFunc, "regex": stdlib.RegexFunc, "regexall": stdlib.RegexAllFunc,
		"regex_replace": stdlib.RegexReplaceFunc, "replace": stdlib.ReplaceFunc, "reverse": stdlib.ReverseListFunc,
		"setintersection": stdlib.SetIntersectionFunc, "setproduct": stdlib.SetProductFunc,
		"setsubtract": stdlib.SetSubtractFunc, "setunion": stdlib.SetUnionFunc, "signum": stdlib.SignumFunc,
		"slice": stdlib.SliceFunc, "sort": stdlib.SortFunc, "split": stdlib.SplitFunc, "strrev": stdlib.ReverseFunc,
		"substr": stdlib.SubstrFunc, "timeadd": stdlib.TimeAddFunc, "title": stdlib.TitleFunc, "trim": stdlib.TrimFunc,
		"trimprefix": stdlib.TrimPrefixFunc, "trimspace": stdlib.TrimSpaceFunc, "trimsuffix": stdlib.TrimSuffixFunc,
		"upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
		"try": tryfunc.TryFunc, "can": tryfunc.CanFunc,
		"base64encode": strFn(func(s string) (string, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil }),
		"base64decode": strFn(func(s string) (string, error) {
			b, err := base64.StdEncoding.DecodeString(s)
			return string(b), err
		}),
		"md5":    hexOf(func(b []byte) []byte { h := md5.Sum(b); return h[:] }),
		"sha1":   hexOf(func(b []byte) []byte { h := sha1.Sum(b); return h[:] }),
		"sha256": hexOf(func(b []byte) []byte { h := sha256.Sum256(b); return h[:] }),
		"sha512": hexOf(func(b []byte) []byte { h := sha512.Sum512(b); return h[:] }),
	}
}

// runtimeRoot returns the first variable of e that HCL does not resolve
// while parsing, if any.
func runtimeRoot(e hcl.Expression) (hcl.Traversal, bool) {
	for _, tr := range e.Variables() {
		if !parseTimeRoots[tr.RootName()] {
			return tr, true
		}
	}
	return nil, false
}

// eval evaluates e for a parsed value: var.* and local.* now, run-time
// references kept as "${ref}" text, every string escaped for the run-time
// step. What HCL computes is evaluated through the meter; the value as a
// whole is measured against the limits too.
func (p *parser) eval(e hclsyntax.Expression) (cty.Value, hcl.Diagnostics) {
	if _, rt := runtimeRoot(e); !rt {
		return p.evalParts(e) // measured by the meter
	}
	v, d := p.evalParts(e)
	if d.HasErrors() || p.m.failed != nil {
		return v, p.m.report(d)
	}
	rng := e.Range()
	p.m.total += p.m.measure(&rng, "this makes", v)
	if p.m.failed == nil && p.m.total > p.m.lim.TotalBytes {
		p.m.fail(&rng, "the file's evaluated values come to more than %s here (tether's limit on a whole file)", byteSize(float64(p.m.lim.TotalBytes)))
	}
	if p.m.failed != nil {
		return cty.DynamicVal, p.m.report(d)
	}
	return v, d
}

// evalParts is eval's work, part by part.
func (p *parser) evalParts(e hclsyntax.Expression) (cty.Value, hcl.Diagnostics) {
	if d := p.checkVars(e); d.HasErrors() {
		return cty.NilVal, d
	}
	if _, ok := runtimeRoot(e); !ok {
		v, d := p.m.eval(e, p.ctx)
		if d.HasErrors() {
			return cty.NilVal, d
		}
		return escapeValue(v), d
	}
	switch e := e.(type) {
	case *hclsyntax.TemplateExpr:
		var b strings.Builder
		grow := func(n int) bool {
			if int64(b.Len())+int64(n) > p.m.lim.ValueBytes {
				p.m.fail(e.SrcRange.Ptr(), "this string template would make a value of more than %s; a value may be at most %s (tether's limit on one value)",
					byteSize(float64(b.Len()+n)), byteSize(float64(p.m.lim.ValueBytes)))
				return false
			}
			return true
		}
		for _, part := range e.Parts {
			if lit, ok := part.(*hclsyntax.LiteralValueExpr); ok && lit.Val.Type() == cty.String && !lit.Val.IsNull() {
				esc := Escape(lit.Val.AsString())
				if !grow(len(esc)) {
					return cty.NilVal, p.m.report(nil)
				}
				b.WriteString(esc)
				continue
			}
			if _, rt := runtimeRoot(part); rt {
				ref, d := p.runtimeRef(part)
				if d.HasErrors() {
					return cty.NilVal, d
				}
				if !grow(len(ref) + 3) {
					return cty.NilVal, p.m.report(nil)
				}
				b.WriteString("${" + ref + "}")
				continue
			}
			v, d := p.m.eval(part, p.ctx)
			if d.HasErrors() || !v.IsWhollyKnown() && p.m.failed != nil {
				return cty.NilVal, p.m.report(d)
			}
			s, err := convert.Convert(v, cty.String)
			if err != nil || s.IsNull() || !s.IsKnown() {
				return cty.NilVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid template value",
					Detail: fmt.Sprintf("This value cannot be part of a string: %v.", err), Subject: part.Range().Ptr()}}
			}
			esc := Escape(s.AsString())
			if !grow(len(esc)) {
				return cty.NilVal, p.m.report(nil)
			}
			b.WriteString(esc)
		}
		return cty.StringVal(b.String()), nil
	case *hclsyntax.TemplateWrapExpr:
		return p.evalParts(e.Wrapped)
	case *hclsyntax.ParenthesesExpr:
		return p.evalParts(e.Expression)
	case *hclsyntax.ScopeTraversalExpr, *hclsyntax.IndexExpr, *hclsyntax.RelativeTraversalExpr:
		ref, d := p.runtimeRef(e)
		if d.HasErrors() {
			return cty.NilVal, d
		}
		return cty.StringVal("${" + ref + "}"), nil
	case *hclsyntax.TupleConsExpr:
		vals := make([]cty.Value, 0, len(e.Exprs))
		for _, x := range e.Exprs {
			v, d := p.evalParts(x)
			if d.HasErrors() {
				return cty.NilVal, d
			}
			vals = append(vals, v)
		}
		return cty.TupleVal(vals), nil
	case *hclsyntax.ObjectConsExpr:
		attrs := map[string]cty.Value{}
		for _, item := range e.Items {
			if _, rt := runtimeRoot(item.KeyExpr); rt {
				return cty.NilVal, p.runtimeMisuse(item.KeyExpr)
			}
			k, d := p.m.eval(item.KeyExpr, p.ctx)
			if d.HasErrors() {
				return cty.NilVal, d
			}
			ks, err := convert.Convert(k, cty.String)
			if err != nil || ks.IsNull() {
				return cty.NilVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid key", Detail: "An object key must be a string.", Subject: item.KeyExpr.Range().Ptr()}}
			}
			v, d := p.evalParts(item.ValueExpr)
			if d.HasErrors() {
				return cty.NilVal, d
			}
			attrs[ks.AsString()] = v
		}
		return cty.ObjectVal(attrs), nil
	}
	return cty.NilVal, p.runtimeMisuse(e)
}

// runtimeMisuse is the error for a run-time reference inside something
// HCL computes while parsing (a function call, an operator, a condition).
func (p *parser) runtimeMisuse(e hcl.Expression) hcl.Diagnostics {
	tr, _ := runtimeRoot(e)
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Run-time value in a parse-time expression",
		Detail: fmt.Sprintf("%s is known only when the task runs, but it is used in an expression HCL computes while parsing (a function call, an operator or a condition). Use it alone in a string, as \"${%s}\", or compute the value with var.* instead.",
			traversalText(tr), traversalText(tr)),
		Subject: tr.SourceRange().Ptr(),
	}}
}

// runtimeRef is the text of a run-time reference: a traversal from a
// root (attr.kernel.name, env["HOME"], NOMAD_ALLOC_DIR), with index keys
// computed now when they are parse-time values.
func (p *parser) runtimeRef(e hclsyntax.Expression) (string, hcl.Diagnostics) {
	switch e := e.(type) {
	case *hclsyntax.ScopeTraversalExpr:
		return traversalText(e.Traversal), nil
	case *hclsyntax.RelativeTraversalExpr:
		base, d := p.runtimeRef(e.Source)
		if d.HasErrors() {
			return "", d
		}
		return base + traversalText(e.Traversal), nil
	case *hclsyntax.IndexExpr:
		base, d := p.runtimeRef(e.Collection)
		if d.HasErrors() {
			return "", d
		}
		if _, rt := runtimeRoot(e.Key); rt {
			return "", p.runtimeMisuse(e.Key)
		}
		k, d := p.m.eval(e.Key, p.ctx)
		if d.HasErrors() {
			return "", d
		}
		ks, err := convert.Convert(k, cty.String)
		if err != nil || ks.IsNull() {
			return "", hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid index", Detail: "A run-time reference's index must be a string or a number.", Subject: e.Key.Range().Ptr()}}
		}
		return base + fmt.Sprintf("[%q]", ks.AsString()), nil
	case *hclsyntax.TemplateWrapExpr:
		return p.runtimeRef(e.Wrapped)
	case *hclsyntax.ParenthesesExpr:
		return p.runtimeRef(e.Expression)
	}
	return "", p.runtimeMisuse(e)
}

func traversalText(tr hcl.Traversal) string {
	var b strings.Builder
	for _, step := range tr {
		switch s := step.(type) {
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseAttr:
			b.WriteString("." + s.Name)
		case hcl.TraverseIndex:
			if s.Key.Type() == cty.String {
				fmt.Fprintf(&b, "[%q]", s.Key.AsString())
			} else if s.Key.Type() == cty.Number {
				fmt.Fprintf(&b, "[%s]", s.Key.AsBigFloat().Text('f', -1))
			}
		case hcl.TraverseSplat:
			b.WriteString("[*]")
		}
	}
	return b.String()
}

// checkVars names a var.* or local.* that is not declared, instead of
// HCL's "Unsupported attribute".
func (p *parser) checkVars(e hcl.Expression) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, tr := range e.Variables() {
		root := tr.RootName()
		if !parseTimeRoots[root] {
			continue
		}
		if len(tr) < 2 {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Bad reference",
				Detail: fmt.Sprintf("%s needs a name: %s.NAME.", root, root), Subject: tr.SourceRange().Ptr()})
			continue
		}
		attr, ok := tr[1].(hcl.TraverseAttr)
		if !ok {
			continue
		}
		_, known := p.declared[attr.Name]
		word, how := "variable", fmt.Sprintf(`declare it with variable %q { type = string }`, attr.Name)
		if root == "local" {
			_, known = p.locals[attr.Name]
			word, how = "local value", "define it in a locals block"
		}
		if !known {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Undeclared " + word,
				Detail: fmt.Sprintf("%s.%s is not declared in this file: %s.", root, attr.Name, how), Subject: tr.SourceRange().Ptr()})
		}
	}
	return diags
}

// escapeValue escapes every string in v for the run-time step.
func escapeValue(v cty.Value) cty.Value {
	if v.IsNull() || !v.IsWhollyKnown() {
		return v
	}
	out, err := cty.Transform(v, func(_ cty.Path, x cty.Value) (cty.Value, error) {
		if x.Type() == cty.String && !x.IsNull() && x.IsKnown() {
			return cty.StringVal(Escape(x.AsString())), nil
		}
		return x, nil
	})
	if err != nil {
		return v
	}
	return out
}
