package clikit

import (
	"slices"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

func TestNaturalCompare_RunsOfDigitsAsNumbers(t *testing.T) {
	in := []string{"svc10", "svc2", "svc1", "web", "svc11", "svc01", "a", "svc", "svc2b", "svc2a", "n99999999999999999999", "n100000000000000000000"}
	slices.SortFunc(in, NaturalCompare)
	want := []string{"a", "n99999999999999999999", "n100000000000000000000", "svc", "svc1", "svc01", "svc2", "svc2a", "svc2b", "svc10", "svc11", "web"}
	if !slices.Equal(in, want) {
		t.Fatalf("sorted %v, want %v", in, want)
	}
}

func TestUserText_DropsPackagePrefixes(t *testing.T) {
	for in, want := range map[string]string{
		"fsm: invalid task spec: executor: capability not allowed: net_raw":       "invalid task spec: capability not allowed: net_raw",
		`task "x" (running): driver: executor is gone: executor: process is gone`: `task "x" (running): executor is gone: process is gone`,
		"store: locked (driver: busy); cgroup: no controller":                     "locked (busy); no controller",
		"the task's output says store: nothing, and that stays":                   "the task's output says store: nothing, and that stays",
		"statedir: unusable state directory: /s has mode -rwxr-xr-x":              "unusable state directory: /s has mode -rwxr-xr-x",
		`taskfile: no such task: web.hcl has no task "x"`:                         `no such task: web.hcl has no task "x"`,
		`cluster: etcd unavailable: read the fleet: context deadline exceeded`:    `etcd unavailable: read the fleet: context deadline exceeded`,
	} {
		if got := UserText(in); got != want {
			t.Errorf("UserText(%q) = %q, want %q", in, got, want)
		}
	}
}

// invisibles are the characters a terminal does not show but that reorder
// or hide what it shows: the bidi embeddings and overrides (U+202A-U+202E),
// the bidi isolates (U+2066-U+2069), the zero-width characters and marks
// (U+200B-U+200F) and the zero-width no-break space (U+FEFF).
var invisibles = []rune{
	0x202a, 0x202b, 0x202c, 0x202d, 0x202e,
	0x2066, 0x2067, 0x2068, 0x2069,
	0x200b, 0x200c, 0x200d, 0x200e, 0x200f,
	0xfeff,
}

func TestPrintable_EscapesBidiZeroWidthAndControls(t *testing.T) {
	for _, r := range append(invisibles, 0x1b, 0x7f, 0x9b, '\n') {
		in := "ab" + string(r) + "cd"
		got := Printable(in)
		if strings.ContainsRune(got, r) || !strings.HasPrefix(got, `ab\`) {
			t.Errorf("Printable(%+q) = %+q, want it escaped", in, got)
		}
	}
	if got := Printable("a\xffb"); got != `a\xffb` {
		t.Errorf("Printable of invalid UTF-8 = %q", got)
	}
	for _, in := range []string{"web", "café-naïve", "日本語", "a b"} {
		if got := Printable(in); got != in {
			t.Errorf("Printable(%q) = %q, want it unchanged", in, got)
		}
	}
}

func TestDescribeExit_CodeSignalAndOOM(t *testing.T) {
	for x, want := range map[fsm.ExitStatus]string{
		{Code: 3}:                        "exit code 3",
		{Code: -1, Signal: 9}:            "killed by SIGKILL",
		{Code: -1, Signal: 9, OOM: true}: "killed by SIGKILL, OOM killed",
		{Code: -1, Signal: 77}:           "killed by 77",
		// The OOM killer took another process of the task: the task's
		// own exit is said, the OOM kill beside it.
		{Code: 1, OOM: true}:              "exit code 1; another process of the task was OOM killed",
		{Code: -1, Signal: 15, OOM: true}: "killed by SIGTERM; another process of the task was OOM killed",
	} {
		if got := DescribeExit(x); got != want {
			t.Errorf("DescribeExit(%+v) = %q, want %q", x, got, want)
		}
	}
}
