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
	if !slices.Equal(m.packages, []string{"./..."}) {
		t.Errorf("default packages %q, want ./...", m.packages)
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
