// Package docfields holds JSON output to the tables that document it, for
// tests: a table in a Markdown file lists each field of an object, its
// type, when it is present and what it means,
//
//	| field | type | present | meaning |
//	| --- | --- | --- | --- |
//	| `id` | string | always | the task's id |
//
// and Check holds real output to it both ways: a field present "always"
// is in every object, any other in at least one (but for those marked
// "missing", which depend on the host), and every field printed is
// listed. tether's and tether-fleet's documentation tests use it.
package docfields

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Table reads the table of fields under the heading that starts with
// heading in the Markdown file: each field and when it is present.
func Table(t testing.TB, file, heading string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no heading %q", file, heading)
	}
	if i := strings.Index(after, "\n#"); i >= 0 {
		after = after[:i]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| [^|]+ \\| ([a-z-]+) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(after, -1) {
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatalf("%s: no fields under %q", file, heading)
	}
	return out
}

// Check holds objs (what a command printed) to their table doc both ways.
func Check(t testing.TB, what string, doc map[string]string, objs []map[string]json.RawMessage) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range objs {
		for k := range o {
			seen[k] = true
			if _, ok := doc[k]; !ok {
				t.Errorf("%s prints %q, which its documentation does not list", what, k)
			}
		}
		for f, when := range doc {
			if _, ok := o[f]; when == "always" && !ok {
				t.Errorf("%s: %q is documented as always present, and is missing from %v", what, f, keys(o))
			}
		}
	}
	for f, when := range doc {
		if !seen[f] && when != "missing" {
			t.Errorf("%s: %q (present: %s) is documented and never printed", what, f, when)
		}
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Objects reads a command's JSON output: an array of objects, or one.
func Objects(t testing.TB, out string) []map[string]json.RawMessage {
	t.Helper()
	var many []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &many); err == nil {
		return many
	}
	var one map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return []map[string]json.RawMessage{one}
}
