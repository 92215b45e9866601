package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// runner runs mutants (c.jobs of them at once), remembering across them
// which tests pass without any mutant.
type runner struct {
	root string
	g    *graph
	c    config

	mu sync.Mutex
	// passes records, by "pkg Test", whether a test passed alone without
	// any mutant (each is run at most once).
	passes map[string]bool
	// red lists, by package, the top-level tests that fail without any
	// mutant: they are skipped from then on.
	red map[string][]string
	// busy holds, by package, a lock taken for each go test of it: two
	// mutants never run one package's tests at once (its tests may share
	// what a package's tests share in a normal run: a path, a name), so
	// a catch is never one mutant's run disturbing another's.
	busy map[string]*sync.Mutex
	// unions are, by package, the -run pattern of its baseline (the tests
	// the mutants name there), and onces its one run (see baseline).
	unions map[string]string
	onces  map[string]*sync.Once
}

func newRunner(root string, g *graph, c config) *runner {
	return &runner{root: root, g: g, c: c, passes: map[string]bool{}, red: map[string][]string{}, busy: map[string]*sync.Mutex{},
		unions: map[string]string{}, onces: map[string]*sync.Once{}}
}

// redOf is a copy of the tests of pkg known to fail without any mutant.
func (r *runner) redOf(pkg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.red[pkg])
}

// goTest runs go test of pkg (args end with it) under the package's lock,
// and logs how long it took.
func (r *runner) goTest(ctx context.Context, log io.Writer, pkg, overlay string, args []string) ([]catch, []string, error) {
	r.mu.Lock()
	l := r.busy[pkg]
	if l == nil {
		l = &sync.Mutex{}
		r.busy[pkg] = l
	}
	r.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	began := time.Now()
	got, passed, err := goTest(ctx, r.root, overlay, args)
	with := "with the mutant"
	if overlay == "" {
		with = "without it"
	}
	verdict := fmt.Sprintf("%d failure(s)", len(got))
	if err != nil {
		verdict = "no verdict"
	}
	fmt.Fprintf(log, "   go test %s %s (%s): %s, %s\n", shortPkg(pkg), runOf(args), with, verdict, time.Since(began).Round(100*time.Millisecond))
	return got, passed, err
}

// runOf is the -run argument of go test's args, or "(every test)".
func runOf(args []string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-run="); ok {
			return "-run '" + v + "'"
		}
	}
	return "(every test)"
}

// mutant applies m and runs the packages that may catch it until one
// does, writing what it does to log.
func (r *runner) mutant(m mutant, log io.Writer) (o outcome) {
	o.m = m
	fmt.Fprintf(log, "== mutant %s: %s [%s]\n", m.name, m.summary(), strings.Join(m.files(), " "))
	began := time.Now()
	defer func() { o.took = time.Since(began) }()
	if len(r.c.pkgs) > 0 {
		o.plan, o.err = r.g.expand(r.c.pkgs)
	} else {
		o.plan, o.err = r.g.plan(m)
	}
	if o.err != nil {
		return o
	}
	if len(o.plan) == 0 {
		o.err = fmt.Errorf("no package with tests links %s", strings.Join(m.files(), ", "))
		return o
	}
	short := make([]string, len(o.plan))
	for i, p := range o.plan {
		short[i] = shortPkg(p)
	}
	fmt.Fprintf(log, "   packages, in order: %s\n", strings.Join(short, " "))
	tmp, err := os.MkdirTemp("", "tether-mutant-")
	if err != nil {
		o.err = err
		return o
	}
	defer os.RemoveAll(tmp)
	overlay, err := m.writeOverlay(r.root, tmp)
	if err != nil {
		o.err = err
		return o
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), r.c.budget, fmt.Errorf("the mutant's budget of %s ran out", r.c.budget))
	defer cancel()
	// The mutant's own tests first, if it names some: in the packages
	// that define them.
	if m.tests != "" && !r.c.all && r.c.run == "" {
		for _, pkg := range r.g.defining(o.plan, m.tests) {
			caught, err := r.pkg(ctx, log, pkg, overlay, m.tests)
			if err != nil {
				o.err = fmt.Errorf("%s: %w", shortPkg(pkg), err)
				return o
			}
			if len(caught) > 0 {
				o.caught, o.ran = caught, 1
				return o
			}
		}
		fmt.Fprintf(log, "   not caught by its tests (%s): running every package\n", m.tests)
	}
	for _, pkg := range o.plan {
		o.ran++
		caught, err := r.pkg(ctx, log, pkg, overlay, r.c.run)
		if err != nil {
			o.err = fmt.Errorf("%s: %w", shortPkg(pkg), err)
			return o
		}
		o.caught = append(o.caught, caught...)
		if len(o.caught) > 0 && !r.c.all {
			return o
		}
	}
	return o
}

// pkg runs one package's tests matching run (all if "") under the mutant
// and returns the proven catches: the first one (with -failfast), or with
// -all every one.
func (r *runner) pkg(ctx context.Context, log io.Writer, pkg, overlay, run string) ([]catch, error) {
	skip := r.redOf(pkg)
	for {
		args := r.args(pkg, run, skip, !r.c.all)
		got, _, err := r.goTest(ctx, log, pkg, overlay, args)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return nil, nil
		}
		var proven []catch
		retry := false
		for _, ct := range got {
			top := ct.top()
			if top != "" && slices.Contains(skip, top) {
				continue
			}
			ok, proof, why, err := r.prove(ctx, log, pkg, overlay, ct)
			if err != nil {
				return nil, err
			}
			if ok {
				proven = append(proven, proof)
				if !r.c.all {
					return proven, nil // one proven catch is the verdict
				}
				continue
			}
			fmt.Fprintf(log, "   not counted: %s: %s\n", ct.test, why)
			if top == "" {
				continue // the package as a whole: nothing to skip
			}
			skip = append(skip, top)
			retry = !r.c.all // -failfast stopped there: run the rest
		}
		if len(proven) > 0 || !retry {
			return proven, nil
		}
	}
}

// prove checks that ct is the mutant's doing: its top-level test passes
// alone without the mutant (else it is red: recorded, and skipped from
// then on), and, with -confirm, fails alone again with it, the same
// subtest if it was one (else it is flaky). It returns the catch to
// report: ct, or the failure of the rerun where another subtest of the
// same test failed there (parallel subtests report in any order). A
// failure outside any test is proven by the package passing without the
// mutant.
func (r *runner) prove(ctx context.Context, log io.Writer, pkg, overlay string, ct catch) (bool, catch, string, error) {
	top := ct.top()
	key := pkg + " " + top
	r.mu.Lock()
	_, known := r.passes[key]
	r.mu.Unlock()
	if !known {
		r.proven(pkg, log)
	}
	r.mu.Lock()
	passes, known := r.passes[key]
	r.mu.Unlock()
	if !known {
		got, _, err := r.goTest(ctx, log, pkg, "", r.args(pkg, exactly(top), r.redOf(pkg), false))
		if err != nil {
			return false, ct, "", fmt.Errorf("without the mutant: %w", err)
		}
		passes = !slices.ContainsFunc(got, func(c catch) bool { return top == "" || c.top() == top })
		r.mu.Lock()
		r.passes[key] = passes
		if !passes && top != "" && !slices.Contains(r.red[pkg], top) {
			r.red[pkg] = append(r.red[pkg], top)
			fmt.Fprintf(log, "   FAILS WITHOUT A MUTANT: %s.%s\n", shortPkg(pkg), top)
		}
		r.mu.Unlock()
	}
	if !passes {
		return false, ct, "it fails without the mutant too", nil
	}
	if !r.c.confirm || top == "" {
		return true, ct, "", nil
	}
	got, _, err := r.goTest(ctx, log, pkg, overlay, r.args(pkg, exactly(top), nil, false))
	if err != nil {
		return false, ct, "", fmt.Errorf("confirming %s: %w", ct.test, err)
	}
	if i := slices.IndexFunc(got, func(c catch) bool { return c.id == ct.id }); i >= 0 {
		return true, got[i], "", nil
	}
	if i := slices.IndexFunc(got, func(c catch) bool { return c.top() == top }); i >= 0 {
		fmt.Fprintf(log, "   not counted: %s: it passed when run again with the mutant (flaky?); %s failed instead\n", ct.test, got[i].test)
		return true, got[i], "", nil
	}
	return false, ct, "it passed when run again alone with the mutant (flaky?)", nil
}

// args are go test's arguments for pkg: only the tests run matches if
// given (a -run pattern), skipping the top-level tests in skip, stopping at
// the first failure if failfast.
func (r *runner) args(pkg, run string, skip []string, failfast bool) []string {
	args := []string{"test", "-json", "-count=1", "-timeout=" + r.c.budget.String()}
	if failfast {
		args = append(args, "-failfast")
	}
	if r.c.race {
		args = append(args, "-race")
	}
	if run != "" {
		args = append(args, "-run="+run)
	}
	if len(skip) > 0 {
		q := make([]string, len(skip))
		for i, s := range skip {
			q[i] = regexp.QuoteMeta(s)
		}
		args = append(args, "-skip=^("+strings.Join(q, "|")+")$")
	}
	args = append(args, pkg)
	if r.g.rapid[pkg] {
		args = append(args, rapidFlag)
	}
	return args
}

// exactly is the -run pattern of one top-level test ("" for all).
func exactly(test string) string {
	if test == "" {
		return ""
	}
	return "^" + regexp.QuoteMeta(test) + "$"
}

// top is the top-level test of a catch ("" for a failure outside any
// test).
func (c catch) top() string {
	_, test, _ := strings.Cut(c.id, " ")
	top, _, _ := strings.Cut(test, "/")
	return top
}

// baseline plans, for each package, the run without any mutant of the
// tests the mutants' tests: lines select there (in the packages whose
// tests can see the mutant): the proof that a catching test passes
// without its mutant then costs one build of the package's test binary for
// every mutant, not one for each. The run happens once, when a mutant's
// catch there is first to be proven (proven). A tests: line with a
// subtest part is left to the proof of its own catch.
func (r *runner) baseline(ms []mutant) {
	byPkg := map[string][]string{}
	for _, m := range ms {
		if m.tests == "" || strings.Contains(m.tests, "/") {
			continue
		}
		sees, err := r.g.seeing(m)
		if err != nil {
			continue // the mutant's own run says what is wrong
		}
		for _, p := range r.g.defining(sees, m.tests) {
			if !slices.Contains(byPkg[p], m.tests) {
				byPkg[p] = append(byPkg[p], m.tests)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, runs := range byPkg {
		r.unions[p] = strings.Join(runs, "|")
	}
}

// proven runs pkg's baseline if it has one and it has not run yet (the
// callers of one package wait for its one run).
func (r *runner) proven(pkg string, log io.Writer) {
	r.mu.Lock()
	run, ok := r.unions[pkg]
	once := r.onces[pkg]
	if ok && once == nil {
		once = &sync.Once{}
		r.onces[pkg] = once
	}
	r.mu.Unlock()
	if ok {
		once.Do(func() { r.baselineOf(pkg, run, log) })
	}
}

// baselineOf runs pkg's tests that run selects without any mutant and
// records each top-level test's verdict. A run that gives no verdict
// records nothing: each catch is then proven on its own.
func (r *runner) baselineOf(pkg, run string, log io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.budget)
	defer cancel()
	fmt.Fprintf(log, "   %s: the tests the mutants name there, without any mutant, once:\n", shortPkg(pkg))
	failed, passed, err := r.goTest(ctx, log, pkg, "", r.args(pkg, run, nil, false))
	if err != nil {
		fmt.Fprintf(log, "   %s: no verdict without a mutant (each catch is proven alone): %v\n", shortPkg(pkg), err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range passed {
		r.passes[pkg+" "+t] = true
	}
	for _, ct := range failed {
		top := ct.top()
		if top == "" {
			continue // outside any test: proven per catch
		}
		r.passes[pkg+" "+top] = false
		if !slices.Contains(r.red[pkg], top) {
			r.red[pkg] = append(r.red[pkg], top)
			fmt.Fprintf(log, "   FAILS WITHOUT A MUTANT: %s.%s\n", shortPkg(pkg), top)
		}
	}
}
