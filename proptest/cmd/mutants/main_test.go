package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeMutant(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name+".txtar")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadMutant_PackagesLine(t *testing.T) {
	dir := t.TempDir()
	m, err := loadMutant(writeMutant(t, dir, "x", "A bug.\npackages: ./store/ ./executor/\n-- find a.go --\nold\n-- replace a.go --\nnew\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.packages, []string{"./store/", "./executor/"}) {
		t.Errorf("packages %q, want ./store/ ./executor/", m.packages)
	}
	if m.summary() != "A bug." {
		t.Errorf("summary %q", m.summary())
	}
	m, err = loadMutant(writeMutant(t, dir, "y", "No packages line.\n-- find a.go --\nold\n-- replace a.go --\nnew\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.packages) != 0 {
		t.Errorf("packages %q without a packages line, want none (every reverse dependency)", m.packages)
	}
	if _, err := loadMutant(writeMutant(t, dir, "z", "Bad.\npackages: store\n-- find a.go --\nold\n-- replace a.go --\nnew\n")); err == nil {
		t.Error("a package not relative to the module root was accepted")
	}
	if _, err := loadMutant(writeMutant(t, dir, "w", "Unpaired.\n-- find a.go --\nold\n")); err == nil {
		t.Error("a find without a replace was accepted")
	}
}

func TestApply_FindMustOccurOnce(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.go"), []byte("one\ntwo\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ find, want string }{
		{"three\n", "no longer occurs"},
		{"two\n", "occurs 2 times"},
	} {
		m := mutant{name: "m", edits: []edit{{file: "a.go", find: c.find, replace: "x\n"}}}
		if _, err := m.apply(root, t.TempDir()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("find %q: %v, want an error saying %q", c.find, err, c.want)
		}
	}
	m := mutant{name: "m", edits: []edit{{file: "a.go", find: "one\n", replace: "ONE\n"}}}
	ov, err := m.apply(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(ov[filepath.Join(root, "a.go")])
	if err != nil || string(b) != "ONE\ntwo\ntwo\n" {
		t.Errorf("patched copy %q, %v", b, err)
	}
}

func TestParseCatch(t *testing.T) {
	c := parseCatch("store.TestPowerLoss_ConcurrentWriters", "=== RUN   TestPowerLoss_ConcurrentWriters\n"+
		"    powerloss_test.go:264: crash state b9 (every unsynced operation dropped): invariant 7: task w03 has 0 events\n"+
		"--- FAIL: TestPowerLoss_ConcurrentWriters (0.05s)\n")
	if !strings.HasPrefix(c.reason, "powerloss_test.go:264: crash state b9") || c.check != 0 {
		t.Errorf("power-loss catch: %+v", c)
	}
	c = parseCatch("proptest.TestSim", "[rapid] failed after 41 tests: boom\nFailed test output:\n"+
		"    [rapid] draw action: \"step\"\n    [rapid] draw action: \"start\"\n    [rapid] draw action: \"crash\"\n")
	if c.check != 42 || c.length != 2 || !strings.HasPrefix(c.reason, "[start, crash] boom") {
		t.Errorf("rapid catch: check %d length %d reason %q; want check 42, 2 actions", c.check, c.length, c.reason)
	}
}

// Every planted mutant in the repository parses (whether it still applies
// is make mutants' to say: the product code moves under it).
func TestMutants_Parse(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "testdata", "mutants", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no mutants found: %v", err)
	}
	for _, p := range paths {
		if _, err := loadMutant(p); err != nil {
			t.Error(err)
		}
	}
}

// The packages a mutant runs are the reverse dependencies of the files it
// edits: those whose test binary links the mutated package, the named ones
// first, then the mutated package itself. A named package that cannot see
// the mutant is refused.
func TestGraph_PlanIsTheReverseDependencies(t *testing.T) {
	g := moduleGraph(t)
	const mod = "github.com/tether-fsm/tether/"
	plan, err := g.plan(mutant{name: "m", edits: []edit{{file: "logs/writer.go"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) == 0 || plan[0] != mod+"logs" {
		t.Fatalf("plan %v: want logs first", plan)
	}
	for _, want := range []string{"cmd/tether", "executor"} {
		if !slices.Contains(plan, mod+want) {
			t.Errorf("plan %v misses %s, whose tests link logs", plan, want)
		}
	}
	for _, not := range []string{"fsm", "store", "cgroup"} {
		if slices.Contains(plan, mod+not) {
			t.Errorf("plan %v has %s, whose tests do not link logs", plan, not)
		}
	}
	plan, err = g.plan(mutant{name: "m", packages: []string{"./cmd/tether/"}, edits: []edit{{file: "store/lock.go"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) < 2 || plan[0] != mod+"cmd/tether" || plan[1] != mod+"store" {
		t.Errorf("plan %v: want cmd/tether (named), then store (mutated)", plan)
	}
	if _, err := g.plan(mutant{name: "m", packages: []string{"./fsm/"}, edits: []edit{{file: "store/lock.go"}}}); err == nil {
		t.Error("a packages line naming fsm, which cannot see a mutant of store, was accepted")
	}
	if _, err := g.plan(mutant{name: "m", edits: []edit{{file: "nowhere/x.go"}}}); err == nil {
		t.Error("a file in no package was accepted")
	}
}

// The overlay reaches nested go commands through GOFLAGS, beside what
// GOFLAGS held.
func TestOverlayEnv_GOFLAGS(t *testing.T) {
	t.Setenv("GOFLAGS", "-mod=mod")
	env, err := overlayEnv("/tmp/x/overlay.json")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			got = append(got, v)
		}
	}
	if len(got) != 1 || got[0] != "-mod=mod -overlay=/tmp/x/overlay.json" {
		t.Errorf("GOFLAGS %q, want the old flags and the overlay, once", got)
	}
	if _, err := overlayEnv("/tmp/a b/overlay.json"); err == nil {
		t.Error("a path with a space was put in GOFLAGS")
	}
}

// A mutant's tests: line runs only in the packages of its plan that
// declare a top-level test it selects, in the plan's order; a pattern that
// does not compile selects every package.
func TestGraph_DefiningOnlyThePackagesThatDeclareTheTests(t *testing.T) {
	g := moduleGraph(t)
	const mod = "github.com/tether-fsm/tether/"
	plan := []string{mod + "cmd/tether", mod + "driver", mod + "executor", mod + "store"}
	for _, c := range []struct {
		run  string
		want []string
	}{
		{`^TestExec_KilledWithTheTask$`, []string{mod + "executor"}},
		{`^TestExecTask_StatusOfACommandKilledWithItsTask$|^TestExec_KilledWithTheTask$`, []string{mod + "driver", mod + "executor"}},
		{`^TestExec_KilledWhenTheTaskStops$/sub`, []string{mod + "cmd/tether"}},
		{`^TestNoSuchTestAnywhere$`, nil},
		{`^TestA$/x|^TestExec_KilledWithTheTask$`, nil}, // go test splits at the slash first
		{`(unclosed`, plan},
	} {
		if got := g.defining(plan, c.run); !slices.Equal(got, c.want) {
			t.Errorf("defining(%q) = %v, want %v", c.run, got, c.want)
		}
	}
}

// moduleGraph is the graph of this module's packages.
func moduleGraph(t *testing.T) *graph {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	g, err := loadGraph(root)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The queue hands a free worker the first waiting mutant of a package no
// running mutant is in, and the first waiting one when every package is
// taken; a mutant's home is its packages: line's first, else its file's
// directory.
func TestQueue_InterleavesPackages(t *testing.T) {
	cli := func(name string) mutant {
		return mutant{name: name, edits: []edit{{file: "cmd/tether/run.go"}}}
	}
	ms := []mutant{cli("cli-a"), cli("cli-b"), cli("cli-c"),
		{name: "store-a", packages: []string{"./store/"}, edits: []edit{{file: "store/x.go"}}},
		{name: "a-named", packages: []string{"./proptest/", "./driver/"}, edits: []edit{{file: "driver/effects.go"}}}}
	if got := ms[4].home(); got != "proptest" {
		t.Errorf("home of a mutant whose packages line starts with ./proptest/ = %q", got)
	}
	q := newQueue(ms)
	var order []string
	next := func() int {
		i, ok := q.take()
		if !ok {
			t.Fatalf("queue empty after %v", order)
		}
		order = append(order, ms[i].name)
		return i
	}
	a := next() // cli-a
	next()      // store-a: cmd/tether is taken
	c := next() // a-named (proptest)
	q.done(a)   // cmd/tether is free again
	next()      // cli-b
	next()      // cli-c: only cmd/tether's are left, all of it taken
	q.done(c)
	if _, ok := q.take(); ok {
		t.Fatal("the queue handed out a sixth mutant of five")
	}
	if want := []string{"cli-a", "store-a", "a-named", "cli-b", "cli-c"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}
