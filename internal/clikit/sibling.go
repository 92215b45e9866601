package clikit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Sibling finds the binary name that goes with this one: beside this
// process's own executable first (where `make build` and a package put
// both), then on $PATH. A candidate that is this very binary (a link of
// one name to the other) is skipped, so that two binaries can never
// hand a command to each other for ever. The error wraps ErrNoSibling and
// says where it looked.
func Sibling(name string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: %s: cannot find this binary's own path: %w", ErrNoSibling, name, err)
	}
	return findSibling(self, name)
}

// findSibling is Sibling for the binary at self.
func findSibling(self, name string) (string, error) {
	selfInfo, _ := os.Stat(self)
	usable := func(path string) bool {
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
		return selfInfo == nil || !os.SameFile(fi, selfInfo)
	}
	beside := filepath.Join(filepath.Dir(self), name)
	if usable(beside) {
		return beside, nil
	}
	// LookPath refuses a match in a relative directory of $PATH (ErrDot).
	if onPath, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(onPath); err == nil && usable(abs) {
			return abs, nil
		}
	}
	return "", fmt.Errorf("%w: %s is neither beside %s nor on $PATH", ErrNoSibling, name, self)
}
