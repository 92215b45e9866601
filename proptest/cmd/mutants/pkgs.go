package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// graph is the module's packages that have tests, and what each one's
// test binary links: the reverse dependencies of a mutated file are the
// packages whose test binary links the file's package.
type graph struct {
	root   string
	byDir  map[string]string          // package directory -> import path
	dirOf  map[string]string          // import path -> package directory
	deps   map[string]map[string]bool // package with tests -> packages its test binary links
	rapid  map[string]bool            // its test binary links rapid (and takes rapid's flags)
	tested []string                   // packages with tests, in import path order

	mu    sync.Mutex
	tests map[string][]string // package -> its top-level tests (testsOf)
}

// loadGraph lists the module's packages (go list ./... and go list -test
// ./...), once per run: a one-line mutant changes no import.
func loadGraph(root string) (*graph, error) {
	g := &graph{root: root, byDir: map[string]string{}, dirOf: map[string]string{}, deps: map[string]map[string]bool{}, rapid: map[string]bool{}}
	out, err := goList(root, "-f", "{{.ImportPath}}\t{{.Dir}}", "./...")
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		path, dir, ok := strings.Cut(line, "\t")
		if ok {
			g.byDir[dir] = path
			g.dirOf[path] = dir
		}
	}
	out, err = goList(root, "-test", "-f", "{{.ImportPath}}\t{{join .Deps \" \"}}", "./...")
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		name, deps, _ := strings.Cut(line, "\t")
		// The test main package "p.test" links everything p's tests do.
		pkg, ok := strings.CutSuffix(name, ".test")
		if !ok {
			continue
		}
		set := map[string]bool{pkg: true}
		for d := range strings.FieldsSeq(deps) {
			if strings.HasPrefix(d, "[") {
				continue // the "[p.test]" half of a test variant "p [p.test]"
			}
			set[d] = true
		}
		g.deps[pkg] = set
		g.rapid[pkg] = set["pgregory.net/rapid"]
		g.tested = append(g.tested, pkg)
	}
	sort.Strings(g.tested)
	return g, nil
}

func goList(root string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w\n%s", strings.Join(args, " "), err, indent(stderr.String(), "    "))
	}
	return string(out), nil
}

// pkgOf returns the import path of the package a module file (relative
// to the module root) belongs to.
func (g *graph) pkgOf(file string) (string, error) {
	dir := filepath.Join(g.root, filepath.Dir(file))
	if p, ok := g.byDir[dir]; ok {
		return p, nil
	}
	return "", fmt.Errorf("%s is in no package of the module", file)
}

// expand resolves package patterns relative to the module root (./store/,
// ./...) to the import paths of the packages with tests they match.
func (g *graph) expand(patterns []string) ([]string, error) {
	out, err := goList(g.root, append([]string{"-f", "{{.ImportPath}}"}, patterns...)...)
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for p := range strings.FieldsSeq(out) {
		if _, ok := g.deps[p]; ok && !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs, nil
}

// mutated returns the packages m's edits are in, each once, in the order
// of its edits.
func (g *graph) mutated(m mutant) ([]string, error) {
	var mutated []string
	for _, e := range m.edits {
		p, err := g.pkgOf(e.file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		if !slices.Contains(mutated, p) {
			mutated = append(mutated, p)
		}
	}
	return mutated, nil
}

// sees reports whether the test binary of p links one of the packages.
func (g *graph) sees(p string, mutated []string) bool {
	return slices.ContainsFunc(mutated, func(mp string) bool { return g.deps[p][mp] })
}

// seeing returns the packages with tests whose test binary links a
// package m mutates, in import path order.
func (g *graph) seeing(m mutant) ([]string, error) {
	mutated, err := g.mutated(m)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range g.tested {
		if g.sees(p, mutated) {
			out = append(out, p)
		}
	}
	return out, nil
}

// plan returns the packages whose tests may catch mutant m, in the order
// to run them: those its "packages:" line names first (in that order), then
// the mutated packages themselves, then every other package whose test
// binary links a mutated package (fewest dependencies first: lower-level
// packages have quicker suites). A named package that links no mutated
// package is an error: its tests cannot see the mutant.
func (g *graph) plan(m mutant) ([]string, error) {
	mutated, err := g.mutated(m)
	if err != nil {
		return nil, err
	}
	sees := func(p string) bool { return g.sees(p, mutated) }
	var order []string
	if len(m.packages) > 0 {
		first, err := g.expand(m.packages)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		for _, p := range first {
			if !sees(p) {
				return nil, fmt.Errorf("%s: its packages line names %s, whose tests do not link %s", m.name, shortPkg(p), strings.Join(mutated, ", "))
			}
			order = append(order, p)
		}
	}
	for _, p := range mutated {
		if _, ok := g.deps[p]; ok && !slices.Contains(order, p) {
			order = append(order, p)
		}
	}
	var rest []string
	for _, p := range g.tested {
		if sees(p) && !slices.Contains(order, p) {
			rest = append(rest, p)
		}
	}
	sort.SliceStable(rest, func(i, j int) bool { return len(g.deps[rest[i]]) < len(g.deps[rest[j]]) })
	return append(order, rest...), nil
}

// testFunc is a top-level test's declaration in a _test.go file.
var testFunc = regexp.MustCompile(`(?m)^func (Test\w*)\(`)

// defining returns the packages of pkgs (in their order) whose _test.go
// files declare a top-level test that run (a go test -run pattern)
// selects: building and running the test binary of any other package for
// run would be time spent for nothing. As go test does, a pattern is
// split at its first slash, and its first part selects the top-level
// tests; one that does not compile selects every package (go test will
// say what is wrong with it).
func (g *graph) defining(pkgs []string, run string) []string {
	top, _, _ := strings.Cut(run, "/")
	re, err := regexp.Compile(top)
	if err != nil {
		return pkgs
	}
	var out []string
	for _, p := range pkgs {
		if slices.ContainsFunc(g.testsOf(p), re.MatchString) {
			out = append(out, p)
		}
	}
	return out
}

// testsOf lists the top-level tests pkg's _test.go files declare (read
// once; a file that cannot be read is a test named "", which every
// pattern but one that needs a name selects: let go test decide).
func (g *graph) testsOf(pkg string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if names, ok := g.tests[pkg]; ok {
		return names
	}
	var names []string
	files, _ := filepath.Glob(filepath.Join(g.dirOf[pkg], "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			names = append(names, "")
			continue
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			names = append(names, string(m[1]))
		}
	}
	if g.tests == nil {
		g.tests = map[string][]string{}
	}
	g.tests[pkg] = names
	return names
}
