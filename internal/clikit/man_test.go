package clikit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// A page's text is escaped for roff: a backslash, a dash, a line that
// would start with a control character; an indented example stays in a
// no-fill block; flags sorted, their values named, defaults said.
func TestManPage_EscapesRoffAndListsFlags(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("zeta", "dflt", "the `VALUE` of zeta")
	fs.BoolP("alpha", "a", false, "a switch")
	fs.Int("hidden", 0, "not listed")
	_ = fs.MarkHidden("hidden")
	var flags []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f) })
	p := ManPage{Name: "tool-cmd", Title: "tool cmd", Summary: "does a\\b thing", Version: "tool v1-2",
		Synopsis:    []string{"[flags] NAME..."},
		Description: "First paragraph\ngoes on.\n\n.starts with a dot\n'and a quote\n\n  example -x\n  more\nafter",
		Options:     flags, SeeAlso: []string{"tool(1)", "other(8)"},
		Sections: []ManSection{{Heading: "Exit status", Items: []ManItem{{Term: "0", Text: "done"}}}}}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`.TH TOOL\-CMD 1 "" "tool v1\-2" "User Commands"`,
		"tool\\-cmd \\- does a\\eb thing\n",
		"First paragraph\ngoes on.\n.PP\n\\&.starts with a dot\n\\&'and a quote\n.PP\n.nf\n  example \\-x\n  more\n.fi\nafter\n",
		"\\fB\\-a\\fR, \\fB\\-\\-alpha\\fR\na switch\n.TP\n\\fB\\-\\-zeta\\fR \\fIVALUE\\fR\nthe VALUE of zeta (default dflt)\n",
		".SH EXIT STATUS\n.TP\n\\fB0\\fR\ndone\n",
		".BR tool (1),\n.BR other (8)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("a hidden flag is listed:\n%s", out)
	}
	requests := map[string]bool{".TH": true, ".SH": true, ".TP": true, ".PP": true, ".B": true, ".BR": true, ".br": true, ".nf": true, ".fi": true, `.\"`: true}
	for _, l := range strings.Split(out, "\n") {
		req, _, _ := strings.Cut(l, " ")
		if strings.HasPrefix(l, "'") || strings.HasPrefix(l, ".") && !requests[req] {
			t.Errorf("a line roff would take for a request: %q", l)
		}
	}
}
