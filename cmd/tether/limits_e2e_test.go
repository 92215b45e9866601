package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun_BombFileIsRefusedNamingTheLimit: the 230-byte file that killed
// the CLI (Go's "fatal error: out of memory", a 24 GiB setproduct) and a
// file of nested brackets (a stack overflow in HCL's parser) are refused
// by `tether run` with a parse error naming the expression, where it is,
// and the limit; nothing is recorded.
func TestRun_BombFileIsRefusedNamingTheLimit(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name, src string
		say       []string
	}{
		{"setproduct.hcl", `task "t" {
  driver = "raw_exec"
  config {
    command = "/bin/echo"
    args    = [format("%d", length(setproduct(range(1024), range(1024), range(1024))))]
  }
}
`, []string{"setproduct.hcl:5:", "Parse limit exceeded", "setproduct(range(1024), range(1024), range(1024))", "limit on one value"}},
		{"parens.hcl", "locals {\n  a = " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + "\n}\n",
			[]string{"parens.hcl:2:", "Parse limit exceeded", "limit on nesting"}},
	} {
		path := writeFile(t, dir, c.name, c.src)
		r := e.tether("run", path)
		if r.code == exitOK {
			t.Fatalf("%s ran:\n%s", c.name, r)
		}
		for _, want := range c.say {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", c.name, want, r)
			}
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "tasks")); len(ents) != 0 {
		t.Errorf("a refused file left task directories: %v", ents)
	}
}
