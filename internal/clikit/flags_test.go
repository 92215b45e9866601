package clikit

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDuration_BareNumberRefusedWithTheUnitMeant(t *testing.T) {
	for in, want := range map[string]string{"5": "did you mean 5s?", "2.5": "did you mean 2.5s?", "ten": "not a duration", "-1s": "must not be negative"} {
		if _, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, want an error saying %q", in, err, want)
		}
	}
	for in, want := range map[string]time.Duration{"0": 0, "5s": 5 * time.Second, "1m30s": 90 * time.Second, "7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestClosest_SuggestsWhatWasMeant(t *testing.T) {
	names := []string{"run", "start", "restart", "status", "ps", "stats", "stop", "logs", "events"}
	for typed, want := range map[string]string{"stauts": "status", "rn": "run", "stp": "stop", "evnets": "events", "restar": "restart", "frobnicate": "", "x": ""} {
		if got := Closest(typed, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", typed, got, want)
		}
	}
}

// A flag set with a global flag taking a value, a bool, and a rule that
// starts the command line at the second positional.
func testFlags() *FlagSet {
	fs := NewFlagSet("test", func(pos []string, _ string, afterDash bool) bool { return len(pos) >= 1 })
	fs.String("endpoints", "", "")
	fs.Bool("json", false, "")
	fs.StringP("node", "n", "", "")
	fs.MarkGlobal("endpoints")
	return fs
}

func TestParseAnywhere_FlagsAroundPositionalsUpToTheLine(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		pos, line []string
		node      string
	}{
		{[]string{"--node", "n1", "web", "ls", "--node", "x"}, []string{"web"}, []string{"ls", "--node", "x"}, "n1"},
		{[]string{"-n", "n1", "--", "web", "ls"}, []string{"web"}, []string{"ls"}, "n1"},
		{[]string{"--json", "--node=n2"}, nil, nil, "n2"},
	} {
		fs := testFlags()
		if err := fs.ParseAnywhere(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if !slices.Equal(fs.Args(), tc.pos) || !slices.Equal(fs.CommandLine(), tc.line) || fs.Lookup("node").Value.String() != tc.node {
			t.Errorf("%q: positionals %q, line %q, node %q; want %q, %q, %q", tc.args, fs.Args(), fs.CommandLine(), fs.Lookup("node").Value, tc.pos, tc.line, tc.node)
		}
	}
	// Without a line rule, every argument but the flags is positional.
	fs := NewFlagSet("plain", nil)
	fs.Bool("json", false, "")
	if err := fs.ParseAnywhere([]string{"a", "--json", "b", "--", "--json"}); err != nil || !slices.Equal(fs.Args(), []string{"a", "b", "--json"}) {
		t.Errorf("plain: %q, %v", fs.Args(), err)
	}
}

func TestFindCommand_SkipsGlobalFlagsValues(t *testing.T) {
	isName := func(s string) bool { return s == "status" || s == "cluster" }
	for _, tc := range []struct {
		args []string
		at   int
		ok   bool
	}{
		{[]string{"status"}, 0, true},
		{[]string{"--endpoints", "status", "cluster"}, 2, true}, // a global flag's value is never the name
		{[]string{"--endpoints=x", "--json", "status"}, 2, true},
		{[]string{"--name", "web", "status"}, 2, true}, // an unknown flag's word is taken for its value
		{[]string{"stauts"}, 0, false},
		{[]string{"--", "status"}, -1, false},
	} {
		at, ok := FindCommand(tc.args, testFlags().FlagSet, isName)
		if at != tc.at || ok != tc.ok {
			t.Errorf("FindCommand(%q) = %d, %v; want %d, %v", tc.args, at, ok, tc.at, tc.ok)
		}
	}
}

func TestFlagError_NamesTheFlagAsTypedAndSuggests(t *testing.T) {
	for args, want := range map[string]string{
		"--nod n1":      "test has no flag --nod; did you mean --node?",
		"-jsn":          "test has no flag -jsn; did you mean --json?",
		"-endpoints x":  "test has no flag -endpoints; did you mean --endpoints?",
		"--node":        "--node needs a value",
		"--json=maybe":  "--json maybe: ",
		"--x\x1b[31m=1": `test has no flag --x\x1b[31m`,
	} {
		fs := testFlags()
		err := fs.ParseAnywhere(strings.Fields(args))
		if err == nil {
			t.Errorf("%q parsed", args)
			continue
		}
		if got := FlagError(fs, "test", err); !strings.HasPrefix(got, want) {
			t.Errorf("FlagError(%q) = %q, want it to start with %q", args, got, want)
		}
	}
}

func TestUsages_SortedWrappedAndDefaults(t *testing.T) {
	fs := NewFlagSet("test", nil)
	fs.Duration("lease-ttl", 10*time.Second, "the liveness lease's `TTL`")
	fs.Bool("json", false, "print JSON "+strings.Repeat("and more words ", 10))
	_ = fs.MarkHidden("json")
	fs.String("node", "", "node `name`")
	own, global := fs.Split()
	if len(global) != 0 {
		t.Errorf("global flags %v", global)
	}
	got := Usages(own)
	want := "      --lease-ttl TTL  the liveness lease's TTL (default 10s)\n      --node NAME      node name\n"
	if got != want {
		t.Errorf("Usages:\n%s\nwant:\n%s", got, want)
	}
}
