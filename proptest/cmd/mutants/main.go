// Command mutants runs tether's test suite against each planted bug in a
// directory of mutants and fails if any survives.
//
// A mutant is a txtar archive of find/replace pairs (see the README next to
// the mutants). For each one the runner applies the pairs to copies of the
// product files and runs go test with them as an overlay, passed in
// GOFLAGS so that the go commands the tests run themselves build the
// mutant too (the CLI's end-to-end tests build their tether binary in
// TestMain). It runs the tests of the mutated files' reverse dependencies:
// every package of the module whose test binary links a mutated package,
// one package at a time with -failfast, the packages the mutant's
// "packages:" line names first, then the mutated packages, then the rest;
// and it stops at the first test that catches the mutant. A mutant's
// "tests:" line is tried first, alone, in the packages that declare a test
// it selects. With -j N, N mutants run at once, never two go tests of one
// package at once.
//
// A catch counts only once it is proven: the catching test, run alone,
// passes without the mutant (a test that fails there is reported as red
// and skipped) and fails again with it (one that passes on the rerun is
// reported as flaky and skipped). For each mutant the runner reports the
// catching test (for rapid's failures the check at which the bug was first
// caught and the length, in actions, of the shrunk counterexample; for
// others the first line that says what was violated) and the time it took.
// A find text that no longer occurs exactly once, or a mutant that does not
// compile, is an error: a refactor cannot make a mutant vanish.
//
// Usage (from anywhere in the module):
//
//	go run ./proptest/cmd/mutants [-budget 10m] [-j N] [-only a-,b-] [-pkgs ./...] [-all] [-report FILE] [-race] [-v] [DIR]
//
// DIR defaults to proptest/testdata/mutants. -all runs every selected
// package to its end and reports every test that catches each mutant (slow:
// for the README's table, not for CI); -pkgs replaces the reverse
// dependencies by the packages given. The product code is never edited;
// nothing needs a build tag.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// config is the command line.
type config struct {
	dir     string
	budget  time.Duration // one mutant's
	pkgs    []string      // replaces each mutant's reverse dependencies when set
	run     string
	only    string
	all     bool
	confirm bool
	race    bool
	verbose bool
	report  string
	jobs    int // mutants run at once
}

func main() {
	var c config
	var pkgs string
	flag.StringVar(&c.dir, "dir", "", "directory of *.txtar mutants (default: proptest/testdata/mutants of the module)")
	flag.DurationVar(&c.budget, "budget", 10*time.Minute, "time budget of one mutant (every package it runs)")
	flag.StringVar(&pkgs, "pkgs", "", "packages to test under every mutant, space separated (default: the mutated files' reverse dependencies)")
	flag.StringVar(&c.run, "run", "", "go test -run for the suite (default: every test)")
	flag.StringVar(&c.only, "only", "", "run only the mutants whose names start with one of these comma-separated prefixes")
	flag.BoolVar(&c.all, "all", false, "run every selected package to its end and report every test that catches each mutant")
	flag.BoolVar(&c.confirm, "confirm", true, "rerun the catching test alone with the mutant: a test that then passes is flaky and does not count")
	flag.BoolVar(&c.race, "race", false, "run the suite with -race (slower)")
	flag.BoolVar(&c.verbose, "v", false, "print the catching tests' output")
	flag.StringVar(&c.report, "report", "", "also write the results as a Markdown table to this file")
	flag.IntVar(&c.jobs, "j", 1, "mutants run at once (never two go tests of one package at once)")
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

// outcome is what became of one mutant.
type outcome struct {
	m      mutant
	plan   []string // the packages that may catch it, in order
	ran    int      // how many of them ran
	caught []catch
	took   time.Duration
	err    error // broken: does not apply, does not build, or out of time
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
		selected = append(selected, m)
	}
	if len(selected) == 0 {
		return fmt.Errorf("no mutant matches %q", c.only)
	}
	g, err := loadGraph(root)
	if err != nil {
		return err
	}
	r := newRunner(root, g, c)
	began := time.Now()
	if !c.all && c.run == "" {
		r.baseline(selected)
	}
	outs := r.all(selected)
	took := time.Since(began).Round(time.Second)
	printSummary(outs, took)
	if c.report != "" {
		if err := writeReport(c.report, outs, took); err != nil {
			return err
		}
	}
	var survivors, broken []string
	for _, o := range outs {
		switch {
		case o.err != nil:
			broken = append(broken, o.m.name)
		case len(o.caught) == 0:
			survivors = append(survivors, o.m.name)
		}
	}
	var redTests []string
	for pkg, tests := range r.red {
		for _, t := range tests {
			redTests = append(redTests, shortPkg(pkg)+"."+t)
		}
	}
	sort.Strings(redTests)
	switch {
	case len(broken) > 0:
		return fmt.Errorf("%d mutant(s) could not be applied or run: %s", len(broken), strings.Join(broken, ", "))
	case len(survivors) > 0:
		return fmt.Errorf("%d mutant(s) survived the suite: %s", len(survivors), strings.Join(survivors, ", "))
	case len(redTests) > 0:
		return fmt.Errorf("all %d mutants caught in %s, but these tests fail without any mutant (the verdicts hold only on a green suite): %s", len(outs), took, strings.Join(redTests, ", "))
	}
	fmt.Printf("all %d mutants caught in %s\n", len(outs), took)
	return nil
}

// all runs the mutants, c.jobs at once, and returns their outcomes in
// their order. Each mutant's log is printed whole once it is done.
func (r *runner) all(ms []mutant) []outcome {
	outs := make([]outcome, len(ms))
	q := newQueue(ms)
	var print sync.Mutex
	var wg sync.WaitGroup
	for range max(r.c.jobs, 1) {
		wg.Go(func() {
			for {
				i, ok := q.take()
				if !ok {
					return
				}
				var log strings.Builder
				outs[i] = r.mutant(ms[i], &log)
				r.verdict(&log, outs[i])
				q.done(i)
				print.Lock()
				fmt.Print(log.String())
				print.Unlock()
			}
		})
	}
	wg.Wait()
	return outs
}

// queue hands the mutants to the workers. A free worker takes the first
// waiting mutant whose home package no running mutant shares (mutants
// named alike sit in one package, and one package's go tests run one at
// a time), else the first waiting one.
type queue struct {
	mu      sync.Mutex
	ms      []mutant
	waiting []int
	running map[string]int // home package -> mutants of it running
}

func newQueue(ms []mutant) *queue {
	q := &queue{ms: ms, running: map[string]int{}}
	for i := range ms {
		q.waiting = append(q.waiting, i)
	}
	return q
}

// take returns the index of the next mutant to run (false: none left).
func (q *queue) take() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		return 0, false
	}
	k := max(slices.IndexFunc(q.waiting, func(i int) bool { return q.running[q.ms[i].home()] == 0 }), 0)
	i := q.waiting[k]
	q.waiting = slices.Delete(q.waiting, k, k+1)
	q.running[q.ms[i].home()]++
	return i, true
}

// done says mutant i has been run.
func (q *queue) done(i int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running[q.ms[i].home()]--
}

// verdict writes what became of a mutant to its log.
func (r *runner) verdict(log io.Writer, o outcome) {
	switch {
	case o.err != nil:
		fmt.Fprintf(log, "   BROKEN: %v\n", o.err)
	case len(o.caught) == 0:
		fmt.Fprintf(log, "   SURVIVED: every test of %d package(s) passed (or fails without the mutant too) in %s\n", o.ran, o.took.Round(time.Millisecond))
	default:
		fmt.Fprintf(log, "   caught in %s (%d of %d package(s) run) by:\n", o.took.Round(100*time.Millisecond), o.ran, len(o.plan))
		for _, ct := range o.caught {
			fmt.Fprintf(log, "     %s\n", ct)
			if r.c.verbose {
				fmt.Fprint(log, indent(ct.output, "       | "))
			}
		}
	}
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

// printSummary prints one line per mutant: its file, what caught it and
// how long that took.
func printSummary(outs []outcome, took time.Duration) {
	fmt.Printf("\n== summary (%d mutants, %s)\n", len(outs), took)
	for _, o := range outs {
		verdict := "SURVIVED"
		switch {
		case o.err != nil:
			verdict = "BROKEN"
		case len(o.caught) > 0:
			verdict = o.caught[0].test
		}
		fmt.Printf("%-40s %-28s %8s  %s\n", o.m.name, strings.Join(o.m.files(), ","), o.took.Round(100*time.Millisecond), verdict)
	}
}

// writeReport writes the results as a Markdown table.
func writeReport(path string, outs []outcome, took time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d mutants in %s (`go run ./proptest/cmd/mutants`).\n\n", len(outs), took)
	b.WriteString("| mutant | file | slip | caught by | time |\n| --- | --- | --- | --- | --- |\n")
	for _, o := range outs {
		verdict := "**survived**"
		switch {
		case o.err != nil:
			verdict = "**broken**"
		case len(o.caught) > 0:
			var ts []string
			for _, ct := range o.caught {
				ts = append(ts, ct.test)
			}
			verdict = strings.Join(ts, ", ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", o.m.name, strings.Join(o.m.files(), ", "),
			strings.ReplaceAll(o.m.summary(), "|", `\|`), verdict, o.took.Round(100*time.Millisecond))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
