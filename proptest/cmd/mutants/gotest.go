package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// catch is one test (or a package as a whole) that failed under the mutant.
type catch struct {
	id     string // "pkg test": what the baseline is compared by
	test   string // "pkg.TestName", or "pkg (package)" for a failure outside any test
	check  int    // rapid: the check at which the failure was first found (0: not rapid)
	length int    // rapid: actions in the shrunk counterexample
	reason string
	output string
}

func (c catch) String() string {
	s := c.test
	if c.check > 0 {
		s += fmt.Sprintf(": rapid check %d, shrunk to %d action(s)", c.check, c.length)
	}
	if c.reason != "" {
		s += ": " + c.reason
	}
	return s
}

// testEvent is one line of `go test -json` (test2json, and build events).
type testEvent struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string // fail: the package whose build failed
}

// rapidFlag is rapid's flag that keeps a mutant's counterexamples out of
// testdata/rapid, where the real suite would replay them. Only test
// binaries that link rapid accept it.
const rapidFlag = "-rapid.nofailfile"

// goTest runs one go test -json and returns the failures it reports, in
// the order they were reported, and the top-level tests that passed. A
// package that did not build, or a run that died without reporting any
// failure, is an error: the mutant is broken, not caught.
//
// A non-empty overlay is passed in GOFLAGS, not on the command line, so
// that every go command the tests run themselves sees it too: the CLI's
// end-to-end tests build their tether binary with a plain go build in
// TestMain, which would otherwise build the unmutated code.
func goTest(ctx context.Context, root, overlay string, args []string) (caught []catch, passed []string, err error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	env, err := overlayEnv(overlay)
	if err != nil {
		return nil, nil, err
	}
	cmd.Env = env
	// The test binaries are go's children: end them all with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("out of time: %w", context.Cause(ctx))
	}

	outputs := map[string]*strings.Builder{} // by "pkg test"; "pkg " for package output
	var failed []string                      // "pkg test", in order
	var pkgFailed []string                   // packages that failed outside any test
	var buildFailed []string
	var buildOutput strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			buildOutput.WriteString(sc.Text() + "\n")
			continue
		}
		switch ev.Action {
		case "build-output":
			buildOutput.WriteString(ev.Output)
			continue
		case "build-fail":
			buildFailed = append(buildFailed, ev.ImportPath)
			continue
		}
		id := ev.Package + " " + ev.Test
		if outputs[id] == nil {
			outputs[id] = &strings.Builder{}
		}
		switch ev.Action {
		case "output":
			outputs[id].WriteString(ev.Output)
		case "pass":
			if ev.Test != "" && !strings.Contains(ev.Test, "/") {
				passed = append(passed, ev.Test)
			}
		case "fail":
			switch {
			case ev.FailedBuild != "":
				buildFailed = append(buildFailed, ev.FailedBuild)
			case ev.Test != "":
				failed = append(failed, id)
			default:
				pkgFailed = append(pkgFailed, ev.Package)
			}
		}
	}
	if len(buildFailed) > 0 {
		slices.Sort(buildFailed)
		return nil, nil, fmt.Errorf("the mutant does not build (%s):\n%s", strings.Join(slices.Compact(buildFailed), ", "), indent(buildOutput.String(), "    "))
	}
	// Report the innermost failures (a subtest rather than its parent).
	for _, id := range failed {
		if slices.ContainsFunc(failed, func(other string) bool { return strings.HasPrefix(other, id+"/") }) {
			continue
		}
		pkg, test, _ := strings.Cut(id, " ")
		ct := parseCatch(shortPkg(pkg)+"."+test, outputs[id].String())
		ct.id = id
		caught = append(caught, ct)
	}
	// A package that failed with no failing test: a panic outside a test,
	// TestMain's leak check, a timeout.
	for _, pkg := range pkgFailed {
		if slices.ContainsFunc(failed, func(id string) bool { return strings.HasPrefix(id, pkg+" ") }) {
			continue
		}
		ct := parseCatch(shortPkg(pkg)+" (package)", outputs[pkg+" "].String())
		ct.id = pkg + " "
		caught = append(caught, ct)
	}
	if runErr != nil && len(caught) == 0 {
		// Not a test failure: the run died.
		return nil, nil, fmt.Errorf("go %s: %v\n%s%s", strings.Join(args, " "), runErr, indent(buildOutput.String(), "    "), indent(stderr.String(), "    "))
	}
	return caught, passed, nil
}

// overlayEnv is this process's environment with overlay added to
// GOFLAGS (GOFLAGS is a space-separated list, so the path must have no
// space).
func overlayEnv(overlay string) ([]string, error) {
	env := os.Environ()
	if overlay == "" {
		return env, nil
	}
	if strings.ContainsAny(overlay, " \t\n") {
		return nil, fmt.Errorf("the overlay's path %q has a space, which GOFLAGS cannot carry: set TMPDIR to a path without one", overlay)
	}
	flags := "-overlay=" + overlay
	if cur := os.Getenv("GOFLAGS"); cur != "" {
		flags = cur + " " + flags
	}
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOFLAGS=") })
	return append(env, "GOFLAGS="+flags), nil
}

// shortPkg drops the module path from a package path.
func shortPkg(pkg string) string {
	const module = "github.com/tether-fsm/tether/"
	if s, ok := strings.CutPrefix(pkg, module); ok {
		return s
	}
	return pkg
}

var (
	rapidFailed = regexp.MustCompile(`\[rapid\] (?:failed|panic) after (\d+) tests: (.*)`)
	rapidAction = regexp.MustCompile(`\[rapid\] draw action: "(.*)"`)
	// violation marks the line of a failed test's output that says what
	// was violated, in the words tether's tests use.
	violation = regexp.MustCompile(`crash state |write-ahead:|acknowledged|leak:|leaked|stranger|terminal means dead|invariant \d`)
)

// parseCatch reads a failed test's output: rapid's check count and the
// actions of the shrunk counterexample it replays, and the first line that
// says what was violated.
func parseCatch(test, out string) catch {
	c := catch{test: test, output: out}
	if m := rapidFailed.FindStringSubmatch(out); m != nil {
		n, _ := strconv.Atoi(m[1])
		c.check = n + 1 // rapid counts the checks that passed before
		c.reason = strings.TrimSpace(m[2])
		_, replay, _ := strings.Cut(out, "Failed test output:")
		var acts []string
		for _, a := range rapidAction.FindAllStringSubmatch(replay, -1) {
			if a[1] != "step" { // the state machine's one outer action
				acts = append(acts, a[1])
			}
		}
		c.length = len(acts)
		if len(acts) > 0 {
			c.reason = "[" + strings.Join(acts, ", ") + "] " + c.reason
		}
	}
	for line := range strings.SplitSeq(out, "\n") {
		if violation.MatchString(line) && !strings.Contains(line, "invariants violated") {
			c.reason = appendReason(c.reason, strings.TrimSpace(line))
			break
		}
	}
	if c.reason == "" {
		for line := range strings.SplitSeq(out, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
				c.reason = appendReason("", t)
				break
			}
		}
	}
	return c
}

func appendReason(r, s string) string {
	const max = 300
	if len(s) > max {
		s = s[:max] + "..."
	}
	if r == "" {
		return s
	}
	return r + " | " + s
}

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}
