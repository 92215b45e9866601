// Command mutants runs tether's property suite (./proptest) against each
// planted bug under proptest/testdata/mutants and fails if any survives.
//
// A mutant is a txtar archive of find/replace pairs (see the README next to
// them). For each one the runner applies the pairs to copies of the product
// files, runs `go test -overlay` on ./proptest with the default check count
// and a time budget, and reports which tests caught it, and for rapid's
// failures the check at which the bug was first caught and the length (in
// actions) of the shrunk counterexample. A find text that no longer occurs
// exactly once is an error: a refactor cannot make a mutant vanish.
//
// Usage (from anywhere in the module):
//
//	go run ./proptest/cmd/mutants [-budget 5m] [-run regexp] [-only name] [-v]
//
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
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	budget := flag.Duration("budget", 5*time.Minute, "time budget of one mutant's test run")
	run := flag.String("run", "", "go test -run for the suite (default: every test)")
	only := flag.String("only", "", "run only the mutants whose name contains this")
	race := flag.Bool("race", false, "run the suite with -race (slower)")
	verbose := flag.Bool("v", false, "print the failing tests' output")
	flag.Parse()
	if err := runAll(*budget, *run, *only, *race, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func runAll(budget time.Duration, run, only string, race, verbose bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "proptest", "testdata", "mutants")
	paths, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
	if err != nil {
		return err
	}
	sort.Strings(paths)
	if len(paths) == 0 {
		return fmt.Errorf("no mutants under %s", dir)
	}
	var survivors, broken []string
	ran := 0
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".txtar")
		if only != "" && !strings.Contains(name, only) {
			continue
		}
		ran++
		m, err := loadMutant(p)
		if err != nil {
			return err
		}
		fmt.Printf("== mutant %s: %s\n", name, m.summary())
		res, err := m.run(root, budget, run, race)
		if err != nil {
			fmt.Printf("   BROKEN: %v\n", err)
			broken = append(broken, name)
			continue
		}
		if len(res.caught) == 0 {
			fmt.Printf("   SURVIVED: every test passed in %s\n", res.took.Round(time.Millisecond))
			survivors = append(survivors, name)
			continue
		}
		fmt.Printf("   caught in %s by %d test(s):\n", res.took.Round(time.Millisecond), len(res.caught))
		for _, c := range res.caught {
			fmt.Printf("     %s\n", c)
			if verbose {
				fmt.Println(indent(c.output, "       | "))
			}
		}
	}
	if ran == 0 {
		return fmt.Errorf("no mutant matches %q", only)
	}
	if len(broken) > 0 {
		return fmt.Errorf("%d mutant(s) could not be applied or run: %s", len(broken), strings.Join(broken, ", "))
	}
	if len(survivors) > 0 {
		return fmt.Errorf("%d mutant(s) survived the suite: %s", len(survivors), strings.Join(survivors, ", "))
	}
	fmt.Printf("all %d mutants caught\n", ran)
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
	edits         []edit
}

func (m mutant) summary() string {
	line, _, _ := strings.Cut(strings.TrimSpace(m.comment), "\n")
	return line
}

// loadMutant reads a txtar archive: a comment, then "-- find FILE --" and
// "-- replace FILE --" sections in pairs.
func loadMutant(path string) (mutant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mutant{}, err
	}
	m := mutant{name: strings.TrimSuffix(filepath.Base(path), ".txtar")}
	comment, files := parseTxtar(b)
	m.comment = comment
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

// catch is one test that failed under the mutant.
type catch struct {
	test   string
	check  int // rapid: the check at which the failure was first found (0: not rapid)
	length int // rapid: actions in the shrunk counterexample
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

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action string
	Test   string
	Output string
}

func (m mutant) run(root string, budget time.Duration, runRE string, race bool) (result, error) {
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
	args := []string{"test", "-json", "-count=1", "-overlay=" + ovPath, "-timeout=" + budget.String()}
	if race {
		args = append(args, "-race")
	}
	if runRE != "" {
		args = append(args, "-run="+runRE)
	}
	// No fail files: a mutant's counterexamples must not land in
	// testdata/rapid, where the real suite would replay them.
	args = append(args, "./proptest/", "-rapid.nofailfile")
	ctx, cancel := context.WithTimeout(context.Background(), budget+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	began := time.Now()
	out, runErr := cmd.Output()
	res := result{took: time.Since(began)}

	outputs := map[string]*strings.Builder{}
	var failed []string
	var buildOutput strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			buildOutput.WriteString(sc.Text() + "\n")
			continue
		}
		if ev.Test == "" {
			if ev.Action == "output" || ev.Action == "build-output" {
				buildOutput.WriteString(ev.Output)
			}
			continue
		}
		if outputs[ev.Test] == nil {
			outputs[ev.Test] = &strings.Builder{}
		}
		if ev.Action == "output" {
			outputs[ev.Test].WriteString(ev.Output)
		}
		if ev.Action == "fail" {
			failed = append(failed, ev.Test)
		}
	}
	// Report the innermost failures (a subtest rather than its parent).
	for _, name := range failed {
		parent := false
		for _, other := range failed {
			if strings.HasPrefix(other, name+"/") {
				parent = true
			}
		}
		if !parent {
			res.caught = append(res.caught, parseCatch(name, outputs[name].String()))
		}
	}
	if runErr != nil && len(res.caught) == 0 {
		// Not a test failure: the mutant did not build, or the run died.
		return res, fmt.Errorf("go %s: %v\n%s%s", strings.Join(args, " "), runErr, indent(buildOutput.String(), "    "), indent(stderr.String(), "    "))
	}
	return res, nil
}

var (
	rapidFailed = regexp.MustCompile(`\[rapid\] (?:failed|panic) after (\d+) tests: (.*)`)
	rapidAction = regexp.MustCompile(`\[rapid\] draw action: "(.*)"`)
)

// parseCatch reads a failed test's output: rapid's check count and the
// actions of the shrunk counterexample it replays, or the first line that
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
		if i := strings.Index(line, "invariants violated"); i >= 0 || strings.Contains(line, "write-ahead:") ||
			strings.Contains(line, "acknowledged") || strings.Contains(line, "leak:") || strings.Contains(line, "stranger") ||
			strings.Contains(line, "terminal means dead") {
			if strings.Contains(line, "invariants violated") {
				continue
			}
			c.reason = appendReason(c.reason, strings.TrimSpace(line))
			break
		}
	}
	if c.reason == "" {
		for line := range strings.SplitSeq(out, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") {
				c.reason = t
				break
			}
		}
	}
	return c
}

func appendReason(r, s string) string {
	const max = 220
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
