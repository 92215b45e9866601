package clikit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func executable(t *testing.T, path string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSibling_BesideFirstThenPath(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	self := executable(t, filepath.Join(dir, "tether"))
	onPath := executable(t, filepath.Join(other, "tether-fleet"))
	t.Setenv("PATH", other)
	if got, err := findSibling(self, "tether-fleet"); err != nil || got != onPath {
		t.Errorf("on PATH: %q, %v; want %q", got, err, onPath)
	}
	beside := executable(t, filepath.Join(dir, "tether-fleet"))
	if got, err := findSibling(self, "tether-fleet"); err != nil || got != beside {
		t.Errorf("beside: %q, %v; want %q", got, err, beside)
	}
}

func TestSibling_NeverItselfNorANonExecutable(t *testing.T) {
	dir := t.TempDir()
	self := executable(t, filepath.Join(dir, "tether"))
	// A link of the sibling's name to this binary would hand a command
	// back and forth for ever.
	if err := os.Symlink(self, filepath.Join(dir, "tether-fleet")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tether-executor"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, name := range []string{"tether-fleet", "tether-executor", "tether-nothing"} {
		_, err := findSibling(self, name)
		if !errors.Is(err, ErrNoSibling) {
			t.Errorf("%s: %v, want ErrNoSibling", name, err)
		}
	}
	// A relative directory on $PATH is not searched.
	t.Chdir(dir)
	t.Setenv("PATH", ".")
	if got, err := findSibling(filepath.Join(t.TempDir(), "tether"), "tether"); err == nil {
		t.Errorf("found %q through a relative $PATH", got)
	}
}
