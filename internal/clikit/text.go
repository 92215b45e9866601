package clikit

import (
	"cmp"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
)

// Printable makes a user-supplied string safe to print on a terminal: a
// string with anything a terminal would not show as itself is shown
// quoted, Go-style. That is control characters (C0, DEL, C1: escape
// sequences among them), the format characters that reorder or hide text
// (bidi embeddings, overrides and isolates U+202A-U+202E and
// U+2066-U+2069, zero-width characters and marks U+200B-U+200F, U+FEFF,
// U+061C), line and paragraph separators, and invalid UTF-8: every rune
// strconv.IsPrint refuses, which is also what %q escapes.
func Printable(s string) string {
	if !utf8.ValidString(s) {
		return Quoted(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return Quoted(s)
		}
	}
	return s
}

// Quoted is s as a Go string literal without its quotes.
func Quoted(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// packagePrefix matches the package prefix of a wrapped error's message
// ("driver: ", "cluster: "): named errors carry one (STYLE.md), and a
// person reading the CLI's message has no use for it.
var packagePrefix = regexp.MustCompile(`(^|: |; |\(|\n)(?:fsm|driver|executor|store|statedir|cgroup|logs|seccomp|taskfile|taskdir|template|artifact|cluster|agent|clikit): `)

// UserText is a message without the package prefixes of the errors in it.
func UserText(msg string) string {
	return packagePrefix.ReplaceAllString(msg, "$1")
}

// Ago says how long ago a Unix-ns time was, in a unit a person reads ("-"
// for the zero time).
func Ago(now time.Time, unixNano int64) string {
	if unixNano == 0 {
		return "-"
	}
	return Span(now.Sub(time.Unix(0, unixNano))) + " ago"
}

// Span says a duration in one or two units: 45s, 3m12s, 5h3m, 2d4h.
func Span(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours()/24), int(d.Hours())%24)
}

// NaturalCompare orders strings with their runs of digits as numbers, of
// any length: svc2 before svc10, and svc1 before svc01 before svc2.
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Or(cmp.Compare(len(na), len(nb)), strings.Compare(na, nb)); c != 0 {
				return c
			}
			if c := cmp.Compare(da, db); c != 0 { // "01" after "1"
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// SignalName prints a signal as its name, or its number if it has none.
func SignalName(sig int) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return strconv.Itoa(sig)
}

// DescribeExit says how a process ended: "exit code 3", "killed by
// SIGKILL", with ", OOM killed" when the kernel's OOM killer killed it,
// or the OOM kill of another process of the task said beside its exit.
func DescribeExit(x fsm.ExitStatus) string {
	s := fmt.Sprintf("exit code %d", x.Code)
	if x.Signal > 0 {
		s = "killed by " + SignalName(x.Signal)
	}
	switch {
	case x.OOMKilledMain():
		s += ", OOM killed"
	case x.OOM:
		s += "; another process of the task was OOM killed"
	}
	return s
}

// VersionText is what `PROGRAM version` prints: the version stamped at
// build time (-ldflags "-X main.version=…"), else what the Go build
// information says, with the commit, the Go version and the platform.
func VersionText(program, stamped string) string {
	v := stamped
	rev, modified := "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(development build)"
	}
	s := program + " " + v
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		s += ", commit " + rev[:min(12, len(rev))]
		if modified {
			s += " with local changes"
		}
	}
	return fmt.Sprintf("%s (%s %s/%s)", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
