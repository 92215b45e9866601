package taskfile

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/taskdir"
)

// task wraps an expression as a task's command's argument.
func task(expr string) string {
	return "task \"t\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"/bin/true\"\n    args = [" + expr + "]\n  }\n}\n"
}

// withLocals is a task file with locals ahead of its task.
func withLocals(locals, expr string) string {
	return "locals {\n" + locals + "}\n" + task(expr)
}

// bombs are files that, read without limits, take far more memory or time
// than a process can give (gigabytes, or hours), each named for its shape.
func bombs() map[string]string {
	big := `big = format("%1000000s", "")` + "\n" // 1 MB, within one value
	doubling := func(n int, tmpl string) string {
		var b strings.Builder
		b.WriteString("l0 = \"abcdefgh\"\n")
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "l%d = "+tmpl+"\n", i, i-1, i-1)
		}
		return b.String()
	}
	return map[string]string{
		// The issue's: 24 GiB in one setproduct.
		"setproduct": task(`format("%d", length(setproduct(range(1024), range(1024), range(1024))))`),
		// Go's fmt pads up to a million a verb: two thousand verbs naming
		// one argument are two gigabytes.
		"format-width": task(`format("` + strings.Repeat("%999999[1]d", 2000) + `", 1)`),
		// formatlist pads every line.
		"formatlist-width": task(`join(",", formatlist("%999999d", range(1024)))`),
		// A billion iterations, each cheap.
		"nested-for": task(`length([for a in range(1024) : [for b in range(1024) : [for c in range(1024) : c]]])`),
		// A string that doubles with each local: 8 bytes times 2^40.
		"doubling-template": withLocals(doubling(40, `"${local.l%d}${local.l%d}"`), `local.l40`),
		// A tuple that doubles with each local costs nothing to make (its
		// halves are shared) and 2^60 elements to encode.
		"doubling-tuple": withLocals(doubling(60, `[local.l%d, local.l%d]`), `jsonencode(local.l60)`),
		// A megabyte separator between a thousand elements.
		"join-separator": withLocals(big, `join(local.big, [for i in range(1024) : "x"])`),
		// Every space of a megabyte replaced by the megabyte.
		"replace": withLocals(big, `replace(local.big, " ", local.big)`),
		// A template's for, a megabyte each time.
		"template-for": withLocals(big, `"%{ for i in range(1024) }${local.big}%{ endfor }"`),
		// A number of a billion digits, as a string.
		"number-digits":  task(`"${1e300000000}"`),
		"number-convert": task(`upper(1e300000000)`),
		// A short pattern that compiles to millions of instructions.
		"regex-program": task(`regexall(join("", [for i in range(200) : "[a-z]{1000}"]), "x")`),
		// A megabyte split into its characters.
		"split-chars": withLocals(big, `length(split("", local.big))`),
		// Indenting by a billion.
		"indent": task(`indent(999999999, "a\nb\nc")`),
		// Comparing each of 16,000 elements with each.
		"distinct": task(`length(distinct(flatten([for i in range(16) : [for j in range(1024) : "${i}-${j}"]])))`),
		// A megabyte of nested arrays for jsondecode.
		"jsondecode-depth": withLocals(`open = join("", [for i in range(1000) : "["])`+"\n", `length(jsondecode(local.open))`),
		// The same template in a string with a run-time reference, which
		// tether joins itself.
		"runtime-template": withLocals(big, `"${NOMAD_TASK_DIR}${local.big}${local.big}${local.big}"`),
		// HCL's parser recurses about 10 KB of stack for each bracket: a
		// hundred thousand of them kill the process.
		"nested-parens":    task(strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000)),
		"nested-brackets":  task(strings.Repeat("[", 100000) + "1" + strings.Repeat("]", 100000)),
		"nested-templates": task(strings.Repeat(`"${`, 30000) + "1" + strings.Repeat(`}"`, 30000)),
		"unary-run":        task(strings.Repeat("-", 100000) + "1"),
		// HCL's parser joins a heredoc's lines one at a time, copying what
		// it has joined so far each time: 200 KB of 4,000 lines is 400 MB,
		// a megabyte of 20,000 lines ten gigabytes.
		"heredoc-lines": withLocals("h = <<EOT\n"+strings.Repeat(strings.Repeat("x", 49)+"\n", 20000)+"EOT\n", `"x"`),
		// The same of a string's pieces around each $.
		"dollar-string": task(`"` + strings.Repeat("$", 60000) + `"`),
		// HCL's lexer and parser take about 1 KB a token.
		"tokens": task(strings.Repeat("1,", 400000) + "1"),
		// A default of a billion digits, for a variable.
		"variable-default": "variable \"v\" {\n  default = 1e300000000\n}\n" + task(`"${var.v}"`),
	}
}

// TestParse_BombsAreRefusedNamingTheLimit: every bomb is refused with a
// diagnostic naming the limit (IsLimit) and where it is, having allocated
// no more than a small allowance: the limits are checked before the
// allocation, never after.
func TestParse_BombsAreRefusedNamingTheLimit(t *testing.T) {
	const allowance = 64 << 20
	for name, src := range bombs() {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f, diags := Parse("bomb.hcl", []byte(src), Options{})
			runtime.ReadMemStats(&after)
			if f != nil || !diags.HasErrors() {
				t.Fatalf("the bomb parsed: %v", diags)
			}
			var lim *hcl.Diagnostic
			for _, d := range diags {
				if IsLimit(d) {
					lim = d
				}
			}
			if lim == nil {
				t.Fatalf("refused, but not for a limit: %v", diags)
			}
			if lim.Subject == nil || lim.Subject.Filename != "bomb.hcl" || lim.Subject.Start.Line < 1 {
				t.Fatalf("the limit's diagnostic names no place: %s", FormatDiag(lim))
			}
			if !strings.Contains(lim.Detail, "limit") {
				t.Fatalf("the diagnostic does not name the limit: %s", FormatDiag(lim))
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > allowance {
				t.Fatalf("refusing it allocated %d MiB (allowance %d MiB): %s", alloc>>20, allowance>>20, FormatDiag(lim))
			}
			t.Logf("%d KiB: %s", (after.TotalAlloc-before.TotalAlloc)>>10, FormatDiag(lim))
		})
	}
}

// limitDiag parses src with lim and returns the limit's diagnostic (nil
// when the file parsed), failing on any other error.
func limitDiag(t *testing.T, src string, opts Options) *hcl.Diagnostic {
	t.Helper()
	f, diags := Parse("t.hcl", []byte(src), opts)
	for _, d := range diags {
		if IsLimit(d) {
			if f != nil {
				t.Fatalf("a limit's diagnostic, and a file: %v", diags)
			}
			return d
		}
	}
	if diags.HasErrors() {
		t.Fatalf("refused, but not for a limit: %v", diags)
	}
	return nil
}

// TestParse_TheIssuesBombIsNamedWithItsLimit: the 230-byte file of the
// report is refused at its setproduct (line and column), naming the limit
// on one value and the size it would have made.
func TestParse_TheIssuesBombIsNamedWithItsLimit(t *testing.T) {
	d := limitDiag(t, bombs()["setproduct"], Options{})
	if d == nil {
		t.Fatal("the bomb parsed")
	}
	got := FormatDiag(d)
	for _, want := range []string{"t.hcl:5:33", "setproduct(range(1024), range(1024), range(1024))", "GiB", "at most 2 MiB", "limit on one value"} {
		if !strings.Contains(got, want) {
			t.Errorf("the diagnostic does not say %q: %s", want, got)
		}
	}
}

// TestLimits_ValueAtItsBound: a value exactly as large as ValueBytes
// passes; a byte more is refused (a string's size is its bytes and 16).
func TestLimits_ValueAtItsBound(t *testing.T) {
	const limit = 4096
	opts := Options{Limits: Limits{ValueBytes: limit}}
	at := withLocals(`s = "`+strings.Repeat("x", limit-16)+`"`+"\n", `"x"`)
	if d := limitDiag(t, at, opts); d != nil {
		t.Fatalf("a value of exactly the limit was refused: %s", FormatDiag(d))
	}
	past := withLocals(`s = "`+strings.Repeat("x", limit-15)+`"`+"\n", `"x"`)
	if d := limitDiag(t, past, opts); d == nil || !strings.Contains(d.Detail, "limit on one value") {
		t.Fatalf("a value a byte past the limit: %v", d)
	}
}

// TestLimits_ElementsAtTheirBound: a collection of exactly Elements
// elements passes; one more is refused.
func TestLimits_ElementsAtTheirBound(t *testing.T) {
	opts := Options{Limits: Limits{Elements: 100}}
	tuple := func(n int) string { return "[" + strings.Repeat("1,", n-1) + "1]" }
	if d := limitDiag(t, withLocals("l = "+tuple(100)+"\n", `length(local.l)`), opts); d != nil {
		t.Fatalf("a collection of exactly the limit was refused: %s", FormatDiag(d))
	}
	d := limitDiag(t, withLocals("l = "+tuple(101)+"\n", `length(local.l)`), opts)
	if d == nil || !strings.Contains(d.Detail, "101 elements") {
		t.Fatalf("a collection of one more: %v", d)
	}
}

// TestLimits_NestingAtItsBound: brackets exactly Nesting deep pass; one
// level more is refused, at the bracket that passed it.
func TestLimits_NestingAtItsBound(t *testing.T) {
	opts := Options{Limits: Limits{Nesting: 10}}
	// The local's value alone nests: the file's blocks are outside it.
	nested := func(n int) string {
		return "locals {\nl = " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) + "\n}\n" + task(`"x"`)
	}
	// The locals block's brace is a level, and the string's quotes one.
	if d := limitDiag(t, nested(9), opts); d != nil {
		t.Fatalf("nesting at the limit was refused: %s", FormatDiag(d))
	}
	d := limitDiag(t, nested(10), opts)
	if d == nil || d.Subject.Start.Line != 2 || d.Subject.Start.Column != 14 {
		t.Fatalf("nesting one past the limit: %v", d)
	}
}

// TestLimits_SourceAtItsBound: a file of exactly SourceBytes passes; a byte
// more is refused before anything is parsed.
func TestLimits_SourceAtItsBound(t *testing.T) {
	base := task(`"x"`)
	opts := Options{Limits: Limits{SourceBytes: len(base) + 10}}
	if d := limitDiag(t, base+"#"+strings.Repeat("x", 8)+"\n", opts); d != nil {
		t.Fatalf("a file of exactly the limit was refused: %s", FormatDiag(d))
	}
	if d := limitDiag(t, base+"#"+strings.Repeat("x", 9)+"\n", opts); d == nil || !strings.Contains(d.Detail, "limit on a file's size") {
		t.Fatalf("a file a byte past the limit: %v", d)
	}
}

// TestLimits_TokensPastTheirBound: a file within Tokens passes; one with
// more is refused before HCL parses it.
func TestLimits_TokensPastTheirBound(t *testing.T) {
	opts := Options{Limits: Limits{Tokens: 200}}
	if d := limitDiag(t, task(strings.Repeat(`"a",`, 20)+`"a"`), opts); d != nil {
		t.Fatalf("a small file was refused: %s", FormatDiag(d))
	}
	if d := limitDiag(t, task(strings.Repeat(`"a",`, 200)+`"a"`), opts); d == nil || !strings.Contains(d.Detail, "tokens") {
		t.Fatalf("a file of too many tokens: %v", d)
	}
}

// TestLimits_WorkIsBounded: the same file passes with the default work and
// is refused, naming the limit on work, with a small one.
func TestLimits_WorkIsBounded(t *testing.T) {
	src := task(`length([for i in range(100) : "${i}"])`)
	if d := limitDiag(t, src, Options{}); d != nil {
		t.Fatalf("refused with the default limits: %s", FormatDiag(d))
	}
	d := limitDiag(t, src, Options{Limits: Limits{Work: 50000}})
	if d == nil || !strings.Contains(d.Detail, "units of work") {
		t.Fatalf("with a small work limit: %v", d)
	}
}

// TestLimits_TotalIsBounded: the sizes of all the file's values add up
// against TotalBytes.
func TestLimits_TotalIsBounded(t *testing.T) {
	var locals strings.Builder
	for i := range 8 {
		fmt.Fprintf(&locals, "s%d = %q\n", i, strings.Repeat("x", 1000))
	}
	src := withLocals(locals.String(), `"x"`)
	if d := limitDiag(t, src, Options{Limits: Limits{TotalBytes: 9000}}); d != nil {
		t.Fatalf("within the total: %s", FormatDiag(d))
	}
	if d := limitDiag(t, src, Options{Limits: Limits{TotalBytes: 7000}}); d == nil || !strings.Contains(d.Detail, "whole file") {
		t.Fatalf("past the total: %v", d)
	}
}

// TestCount_AtItsBound: count = MaxCount parses and plans; one more is
// refused while parsing, naming the group and the bound, by default
// (1,000) and with Options.MaxCount.
func TestCount_AtItsBound(t *testing.T) {
	job := func(n int) string {
		return fmt.Sprintf("job \"j\" {\n  group \"g\" {\n    count = %d\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n", n)
	}
	for _, c := range []struct {
		max, at int
	}{{0, DefaultMaxCount}, {5, 5}, {2000, 2000}} {
		opts := Options{MaxCount: c.max}
		f, diags := Parse("j.nomad", []byte(job(c.at)), opts)
		if diags.HasErrors() {
			t.Fatalf("count = %d with MaxCount %d: %v", c.at, c.max, diags)
		}
		if _, err := f.PlanGroup("g"); err != nil {
			t.Fatalf("count = %d with MaxCount %d: PlanGroup: %v", c.at, c.max, err)
		}
		d := limitDiag(t, job(c.at+1), opts)
		if d == nil || !strings.Contains(d.Detail, fmt.Sprintf("count = %d", c.at+1)) || !strings.Contains(d.Detail, fmt.Sprintf("at most %d", c.at)) {
			t.Fatalf("count = %d with MaxCount %d: %v", c.at+1, c.max, d)
		}
	}
}

// TestPlanGroup_HoldsTheCountBound: a file read with one bound and planned
// is held to it by PlanGroup too (a group whose count was changed after
// parsing is refused with ErrLimit).
func TestPlanGroup_HoldsTheCountBound(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    count = 3\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n"
	f, diags := Parse("j.nomad", []byte(src), Options{MaxCount: 3})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	f.Groups[0].Count = 4
	if _, err := f.PlanGroup("g"); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "at most 3") {
		t.Fatalf("PlanGroup of a count past the bound: %v", err)
	}
}

// TestInstantiate_InterpolationIsBounded: a run-time string of references
// to a long meta value is refused (ErrLimit) before it is spelled out; the
// same string within the bound is interpolated.
func TestInstantiate_InterpolationIsBounded(t *testing.T) {
	src := func(refs int) string {
		return "job \"j\" {\n  meta { big = \"" + strings.Repeat("x", 100000) + "\" }\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/true\"\n        args = [\"" +
			strings.Repeat("${meta.big}", refs) + "\"]\n      }\n    }\n  }\n}\n"
	}
	for _, c := range []struct {
		refs int
		ok   bool
	}{{10, true}, {1000, false}} {
		f, diags := Parse("j.nomad", []byte(src(c.refs)), Options{})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, err := f.Instantiate(f.Tasks[0], Alloc{ID: "a", Host: &Host{}}, taskdir.Layout{TaskDir: "/t", AllocDir: "/a"})
		if c.ok && err != nil {
			t.Fatalf("%d references: %v", c.refs, err)
		}
		if !c.ok && (!errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "meta.big")) {
			t.Fatalf("%d references to a 100 KB value: %v", c.refs, err)
		}
	}
}

// TestConstraint_RegexpIsBounded: a constraint's regexp that would compile
// to millions of instructions (hundreds of megabytes) is refused with
// the limit named before it is compiled; a plain one matches as before.
func TestConstraint_RegexpIsBounded(t *testing.T) {
	host := &Host{Attrs: map[string]string{"kernel.name": "linux"}}
	ok := Constraint{Attribute: "${attr.kernel.name}", Operator: "regexp", Value: "^lin"}
	if err := ok.Check(host); err != nil {
		t.Fatalf("a plain regexp: %v", err)
	}
	bomb := Constraint{Attribute: "${attr.kernel.name}", Operator: "regexp", Value: strings.Repeat("[a-z]{1000}", 100)}
	if err := bomb.Check(host); !errors.Is(err, ErrConstraint) || !strings.Contains(err.Error(), "its limit on a pattern") {
		t.Fatalf("a regexp of 100,000 repeats: %v", err)
	}
	long := Constraint{Attribute: "${attr.kernel.name}", Operator: "regexp", Value: strings.Repeat("a", maxPattern+1)}
	if err := long.Check(host); !strings.Contains(fmt.Sprint(err), "its limit on a pattern") {
		t.Fatalf("a regexp longer than the bound: %v", err)
	}
}

// TestInstantiate_ArtifactBoundFromEphemeralDisk: a group's ephemeral_disk
// size bounds each of its artifacts (artifact.OptionMaxBytes, in bytes);
// without one the option is absent (the artifact package's 300 MiB
// holds), and one the file wrote itself is taken out either way.
func TestInstantiate_ArtifactBoundFromEphemeralDisk(t *testing.T) {
	src := func(disk string) string {
		return "job \"j\" {\n  group \"g\" {\n" + disk + "    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n" +
			"      artifact {\n        source = \"https://example.com/a.tgz\"\n        options {\n          tether_max_bytes = \"999999999999\"\n          checksum = \"sha256:00\"\n        }\n      }\n    }\n  }\n}\n"
	}
	for _, c := range []struct {
		disk, want string
	}{
		{"    ephemeral_disk {\n      size = 500\n      sticky = true\n    }\n", strconv.Itoa(500 << 20)},
		{"", ""},
	} {
		f, diags := Parse("j.nomad", []byte(src(c.disk)), Options{})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		in, err := f.Instantiate(f.Tasks[0], Alloc{ID: "a", Host: &Host{}}, taskdir.Layout{TaskDir: "/t", AllocDir: "/a"})
		if err != nil {
			t.Fatal(err)
		}
		opts := in.Spec.Artifacts[0].Options
		if got := opts[artifact.OptionMaxBytes]; got != c.want || opts["checksum"] != "sha256:00" {
			t.Errorf("ephemeral_disk %q: options %v, want %s = %q and the checksum kept", c.disk, opts, artifact.OptionMaxBytes, c.want)
		}
	}
	bad := "job \"j\" {\n  group \"g\" {\n    ephemeral_disk { size = 0 }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n"
	if _, diags := Parse("j.nomad", []byte(bad), Options{}); !strings.Contains(diags.Error(), "ephemeral_disk size is 0 MB") {
		t.Fatalf("an ephemeral_disk of size 0: %v", diags)
	}
}

// TestLimits_FunctionCostCheckedBeforeItRuns: a call that would make 27
// MB (thirty verbs, each padding its argument to 900,000 bytes) is refused
// with next to nothing allocated: its cost is estimated from its arguments
// before it runs, not measured after.
func TestLimits_FunctionCostCheckedBeforeItRuns(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	d := limitDiag(t, task(`format("`+strings.Repeat("%900000[1]d", 30)+`", 1)`), Options{})
	runtime.ReadMemStats(&after)
	if d == nil || !strings.Contains(d.Detail, "would make") {
		t.Fatalf("a 20 MB format: %v", d)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("refusing it allocated %d KiB: the cost was checked after the call", alloc>>10)
	}
}

// TestLimits_StringCostAtItsBound: a heredoc whose lines times its bytes
// are within StringCost parses; one line more is refused, at the heredoc,
// before HCL's parser joins its lines (copying what it has joined so far
// for each: a 200 KB heredoc of 4,000 lines costs it 400 MB).
func TestLimits_StringCostAtItsBound(t *testing.T) {
	const line = "xxxxxxx\n" // 8 bytes: a heredoc of n lines costs n*8n
	heredoc := func(n int) string {
		return withLocals("h = <<EOT\n"+strings.Repeat(line, n)+"EOT\n", `"x"`)
	}
	opts := Options{Limits: Limits{StringCost: 100 * 800}}
	if d := limitDiag(t, heredoc(100), opts); d != nil {
		t.Fatalf("a heredoc at the bound: %s", FormatDiag(d))
	}
	d := limitDiag(t, heredoc(101), opts)
	if d == nil || !strings.Contains(d.Detail, "pieces") || d.Subject.Start.Line != 2 {
		t.Fatalf("a heredoc a line past the bound: %v", d)
	}
}
