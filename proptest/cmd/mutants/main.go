// Command mutants runs tether's test suite against each planted bug in a
// directory of mutants and fails if any survives.
//
// A mutant is a txtar archive of find/replace pairs (see the README next to
// the mutants). For each one the runner applies the pairs to copies of the
// product files, runs `go test -overlay` on the packages the mutant names
// (a "packages:" line in its comment; every package, ./..., by default),
// and reports which tests caught it: for rapid's failures the check at which
// the bug was first caught and the length (in actions) of the shrunk
// counterexample, for others the first line that says what was violated
// (for the power-loss tests, the crash state). A find text that no longer
// occurs exactly once, or a mutant that does not compile, is an error: a
// refactor cannot make a mutant vanish.
//
// Usage (from anywhere in the module):
//
//	go run ./proptest/cmd/mutants [-dir DIR] [-budget 5m] [-pkgs ./...] [-run regexp] [-only name] [-race] [-v]
//
// -dir defaults to proptest/testdata/mutants; -pkgs overrides every
// mutant's packages (e.g. -pkgs ./... to see everything that catches each).
// The product code is never edited; nothing needs a build tag.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// config is the command line.
type config struct {
	dir      string
	budget   time.Duration
	pkgs     []string // overrides each mutant's packages when set
	run      string
	only     string
	race     bool
	verbose  bool
	baseline bool
}

func main() {
	var c config
	var pkgs string
	flag.StringVar(&c.dir, "dir", "", "directory of *.txtar mutants (default: proptest/testdata/mutants of the module)")
	flag.DurationVar(&c.budget, "budget", 5*time.Minute, "time budget of one mutant's test run")
	flag.StringVar(&pkgs, "pkgs", "", "packages to test under every mutant, space separated (default: each mutant's own, else ./...)")
	flag.StringVar(&c.run, "run", "", "go test -run for the suite (default: every test)")
	flag.StringVar(&c.only, "only", "", "run only the mutants whose names start with one of these comma-separated prefixes")
	flag.BoolVar(&c.race, "race", false, "run the suite with -race (slower)")
	flag.BoolVar(&c.verbose, "v", false, "print the failing tests' output")
	flag.BoolVar(&c.baseline, "baseline", true, "first run the suite without any mutant; tests failing there catch nothing, and a red baseline fails the run")
	flag.Parse()
	if flag.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "mutants: at most one argument, the directory of mutants")
		os.Exit(2)
	}
	if flag.NArg() == 1 {
		c.dir = flag.Arg(0)
	}
	c.pkgs = strings.Fields(pkgs)
	if err := runAll(c); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func runAll(c config) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := c.dir
	if dir == "" {
		dir = filepath.Join(root, "proptest", "testdata", "mutants")
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil {
		return err
	}
	sort.Strings(paths)
	if len(paths) == 0 {
		return fmt.Errorf("no mutants (*.txtar) under %s", dir)
	}
	var selected []mutant
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".txtar")
		if c.only != "" && !slices.ContainsFunc(strings.Split(c.only, ","), func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		m, err := loadMutant(p)
		if err != nil {
			return err
		}
		if len(c.pkgs) > 0 {
			m.packages = c.pkgs
		}
		selected = append(selected, m)
	}
	ran := len(selected)
	began := time.Now()
	// The baseline: the same packages without any mutant. A test that
	// fails there says nothing about a mutant.
	red := map[string]bool{}
	if c.baseline && ran > 0 {
		var all []string
		for _, m := range selected {
			for _, p := range m.packages {
				if !slices.Contains(all, p) {
					all = append(all, p)
				}
			}
		}
		fmt.Printf("== baseline (no mutant) [%s]\n", strings.Join(all, " "))
		failed, took, err := suite(root, "", all, c)
		if err != nil {
			return fmt.Errorf("the suite does not run without any mutant: %w", err)
		}
		for _, ct := range failed {
			red[ct.id] = true
			fmt.Printf("   FAILS WITHOUT A MUTANT: %s\n", ct)
		}
		fmt.Printf("   %d failing test(s) in %s\n", len(failed), took.Round(time.Millisecond))
	}
	var survivors, broken []string
	for _, m := range selected {
		name := m.name
		fmt.Printf("== mutant %s: %s [%s]\n", name, m.summary(), strings.Join(m.packages, " "))
		res, err := m.run(root, m.packages, c)
		if err != nil {
			fmt.Printf("   BROKEN: %v\n", err)
			broken = append(broken, name)
			continue
		}
		res.caught = slices.DeleteFunc(res.caught, func(ct catch) bool { return red[ct.id] })
		if len(res.caught) == 0 {
			fmt.Printf("   SURVIVED: every test passed (or failed without the mutant too) in %s\n", res.took.Round(time.Millisecond))
			survivors = append(survivors, name)
			continue
		}
		fmt.Printf("   caught in %s by %d test(s):\n", res.took.Round(time.Millisecond), len(res.caught))
		for _, ct := range res.caught {
			fmt.Printf("     %s\n", ct)
			if c.verbose {
				fmt.Print(indent(ct.output, "       | "))
			}
		}
	}
	if ran == 0 {
		return fmt.Errorf("no mutant matches %q", c.only)
	}
	took := time.Since(began).Round(time.Second)
	if len(broken) > 0 {
		return fmt.Errorf("%d mutant(s) could not be applied or run: %s", len(broken), strings.Join(broken, ", "))
	}
	if len(survivors) > 0 {
		return fmt.Errorf("%d mutant(s) survived the suite: %s", len(survivors), strings.Join(survivors, ", "))
	}
	if len(red) > 0 {
		return fmt.Errorf("all %d mutants caught in %s, but %d test(s) fail without any mutant: the verdicts hold only on a green suite", ran, took, len(red))
	}
	fmt.Printf("all %d mutants caught in %s\n", ran, took)
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// edit is one find/replace pair on one file (relative to the module root).
type edit struct {
	file, find, replace string
}

type mutant struct {
	name, comment string
	packages      []string // from the comment's "packages:" line; ./... if none
	edits         []edit
}

func (m mutant) summary() string {
	line, _, _ := strings.Cut(strings.TrimSpace(m.comment), "\n")
	return line
}

// loadMutant reads a txtar archive: a comment (whose "packages:" line, if
// any, names the packages to test), then "-- find FILE --" and
// "-- replace FILE --" sections in pairs.
func loadMutant(path string) (mutant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mutant{}, err
	}
	m := mutant{name: strings.TrimSuffix(filepath.Base(path), ".txtar")}
	comment, files := parseTxtar(b)
	m.comment = comment
	for line := range strings.SplitSeq(comment, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "packages:"); ok {
			m.packages = append(m.packages, strings.Fields(rest)...)
		}
	}
	if len(m.packages) == 0 {
		m.packages = []string{"./..."}
	}
	for _, p := range m.packages {
		if !strings.HasPrefix(p, "./") {
			return m, fmt.Errorf("%s: package %q: name packages relative to the module root (./store/, ./...)", path, p)
		}
	}
	if len(files) == 0 || len(files)%2 != 0 {
		return m, fmt.Errorf("%s: want find/replace pairs, got %d sections", path, len(files))
	}
	for i := 0; i < len(files); i += 2 {
		f, r := files[i], files[i+1]
		fk, ff, _ := strings.Cut(f.name, " ")
		rk, rf, _ := strings.Cut(r.name, " ")
		if fk != "find" || rk != "replace" || ff == "" || ff != rf {
			return m, fmt.Errorf("%s: sections %q, %q: want \"find FILE\" then \"replace FILE\"", path, f.name, r.name)
		}
		if strings.TrimSpace(f.data) == "" {
			return m, fmt.Errorf("%s: empty find for %s", path, ff)
		}
		m.edits = append(m.edits, edit{file: filepath.FromSlash(ff), find: f.data, replace: r.data})
	}
	return m, nil
}

type section struct{ name, data string }

// parseTxtar splits the txtar format: lines "-- NAME --" start sections.
func parseTxtar(b []byte) (string, []section) {
	var comment strings.Builder
	var secs []section
	cur := -1
	for line := range strings.SplitAfterSeq(string(b), "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			secs = append(secs, section{name: strings.TrimSpace(t[3 : len(t)-3])})
			cur = len(secs) - 1
			continue
		}
		if cur < 0 {
			comment.WriteString(line)
		} else {
			secs[cur].data += line
		}
	}
	return comment.String(), secs
}

// apply patches copies of the files into tmp and returns the overlay's
// replacements (absolute product path -> patched copy).
func (m mutant) apply(root, tmp string) (map[string]string, error) {
	patched := map[string]string{}
	for _, e := range m.edits {
		src := filepath.Join(root, e.file)
		text, ok := patched[src]
		if !ok {
			b, err := os.ReadFile(src)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			text = string(b)
		}
		switch n := strings.Count(text, e.find); n {
		case 1:
		case 0:
			return nil, fmt.Errorf("%s: the find text no longer occurs in %s (was it refactored? update the mutant):\n%s", m.name, e.file, indent(e.find, "    "))
		default:
			return nil, fmt.Errorf("%s: the find text occurs %d times in %s; make it unique:\n%s", m.name, n, e.file, indent(e.find, "    "))
		}
		patched[src] = strings.Replace(text, e.find, e.replace, 1)
	}
	overlay := map[string]string{}
	for src, text := range patched {
		dst := filepath.Join(tmp, strings.ReplaceAll(strings.TrimPrefix(src, root), string(filepath.Separator), "_"))
		if err := os.WriteFile(dst, []byte(text), 0o600); err != nil {
			return nil, err
		}
		overlay[src] = dst
	}
	return overlay, nil
}

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

type result struct {
	caught []catch
	took   time.Duration
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

func (m mutant) run(root string, pkgs []string, c config) (result, error) {
	tmp, err := os.MkdirTemp("", "tether-mutant-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(tmp)
	repl, err := m.apply(root, tmp)
	if err != nil {
		return result{}, err
	}
	ov, err := json.Marshal(map[string]any{"Replace": repl})
	if err != nil {
		return result{}, err
	}
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o600); err != nil {
		return result{}, err
	}
	caught, took, err := suite(root, ovPath, pkgs, c)
	return result{caught: caught, took: took}, err
}

// suite runs go test on pkgs (with the overlay, if any) and returns the
// failures.
func suite(root, overlay string, pkgs []string, c config) ([]catch, time.Duration, error) {
	withRapid, without, err := splitByRapid(root, overlay, pkgs)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.budget+time.Minute)
	defer cancel()
	began := time.Now()
	var caught []catch
	for _, group := range []struct {
		pkgs  []string
		extra []string
	}{{withRapid, []string{rapidFlag}}, {without, nil}} {
		if len(group.pkgs) == 0 {
			continue
		}
		args := []string{"test", "-json", "-count=1", "-timeout=" + c.budget.String()}
		if overlay != "" {
			args = append(args, "-overlay="+overlay)
		}
		if c.race {
			args = append(args, "-race")
		}
		if c.run != "" {
			args = append(args, "-run="+c.run)
		}
		args = append(append(args, group.pkgs...), group.extra...)
		got, err := goTest(ctx, root, args)
		if err != nil {
			return nil, 0, err
		}
		caught = append(caught, got...)
	}
	return caught, time.Since(began), nil
}

// splitByRapid lists the packages pkgs match that have tests, split by
// whether their test binary links rapid (and so takes rapid's flags).
func splitByRapid(root, overlay string, pkgs []string) (withRapid, without []string, err error) {
	args := []string{"list", "-test", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}
	if overlay != "" {
		args = append(args, "-overlay="+overlay)
	}
	args = append(args, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, indent(stderr.String(), "    "))
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// The test main package "p.test" links everything p's tests do.
		pkg, ok := strings.CutSuffix(fields[0], ".test")
		if !ok {
			continue
		}
		if slices.Contains(fields[1:], "pgregory.net/rapid") {
			withRapid = append(withRapid, pkg)
		} else {
			without = append(without, pkg)
		}
	}
	return withRapid, without, nil
}

// goTest runs one go test -json and returns the failures it reports. A
// package that did not build, or a run that died without reporting any
// failure, is an error: the mutant is broken, not caught.
func goTest(ctx context.Context, root string, args []string) ([]catch, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()

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
		return nil, fmt.Errorf("the mutant does not build (%s):\n%s", strings.Join(slices.Compact(buildFailed), ", "), indent(buildOutput.String(), "    "))
	}
	var caught []catch
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
		return nil, fmt.Errorf("go %s: %v\n%s%s", strings.Join(args, " "), runErr, indent(buildOutput.String(), "    "), indent(stderr.String(), "    "))
	}
	return caught, nil
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
