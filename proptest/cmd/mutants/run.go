package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// runner runs mutants one after the other, remembering across them which
// tests pass without any mutant.
type runner struct {
	root string
	g    *graph
	c    config
	// passes records, by "pkg Test", whether a test passed alone without
	// any mutant (each is run at most once).
	passes map[string]bool
	// red lists, by package, the top-level tests that fail without any
	// mutant: they are skipped from then on.
	red map[string][]string
}

// mutant applies m and runs the packages that may catch it until one does.
func (r *runner) mutant(m mutant) (o outcome) {
	o.m = m
	fmt.Printf("== mutant %s: %s [%s]\n", m.name, m.summary(), strings.Join(m.files(), " "))
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
	fmt.Printf("   packages, in order: %s\n", strings.Join(short, " "))
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
	// The mutant's own tests first, if it names some.
	if m.tests != "" && !r.c.all && r.c.run == "" {
		for _, pkg := range o.plan {
			caught, err := r.pkg(ctx, pkg, overlay, m.tests)
			if err != nil {
				o.err = fmt.Errorf("%s: %w", shortPkg(pkg), err)
				return o
			}
			if len(caught) > 0 {
				o.caught, o.ran = caught, 1
				return o
			}
		}
		fmt.Printf("   not caught by its tests (%s): running every package\n", m.tests)
	}
	for _, pkg := range o.plan {
		o.ran++
		caught, err := r.pkg(ctx, pkg, overlay, r.c.run)
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
func (r *runner) pkg(ctx context.Context, pkg, overlay, run string) ([]catch, error) {
	skip := slices.Clone(r.red[pkg])
	for {
		args := r.args(pkg, run, skip, !r.c.all)
		got, err := goTest(ctx, r.root, overlay, args)
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
			ok, proof, why, err := r.prove(ctx, pkg, overlay, ct)
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
			fmt.Printf("   not counted: %s: %s\n", ct.test, why)
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
func (r *runner) prove(ctx context.Context, pkg, overlay string, ct catch) (bool, catch, string, error) {
	top := ct.top()
	key := pkg + " " + top
	passes, known := r.passes[key]
	if !known {
		got, err := goTest(ctx, r.root, "", r.args(pkg, exactly(top), r.red[pkg], false))
		if err != nil {
			return false, ct, "", fmt.Errorf("without the mutant: %w", err)
		}
		passes = !slices.ContainsFunc(got, func(c catch) bool { return top == "" || c.top() == top })
		r.passes[key] = passes
		if !passes && top != "" {
			r.red[pkg] = append(r.red[pkg], top)
			fmt.Printf("   FAILS WITHOUT A MUTANT: %s.%s\n", shortPkg(pkg), top)
		}
	}
	if !passes {
		return false, ct, "it fails without the mutant too", nil
	}
	if !r.c.confirm || top == "" {
		return true, ct, "", nil
	}
	got, err := goTest(ctx, r.root, overlay, r.args(pkg, exactly(top), nil, false))
	if err != nil {
		return false, ct, "", fmt.Errorf("confirming %s: %w", ct.test, err)
	}
	if i := slices.IndexFunc(got, func(c catch) bool { return c.id == ct.id }); i >= 0 {
		return true, got[i], "", nil
	}
	if i := slices.IndexFunc(got, func(c catch) bool { return c.top() == top }); i >= 0 {
		fmt.Printf("   not counted: %s: it passed when run again with the mutant (flaky?); %s failed instead\n", ct.test, got[i].test)
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
