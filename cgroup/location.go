//go:build linux

package cgroup

import (
	"fmt"
	"path"
	"strings"
)

// locationPrefix starts every location string; the digit is the format's
// version.
const locationPrefix = "tether-cgroup:1"

// leafPrefix starts the name of every task cgroup.
const leafPrefix = "tether-"

// pathMax is Linux's PATH_MAX: no cgroup directory path may reach it.
const pathMax = 4096

// Location is where one task's cgroup lives: one path in each hierarchy
// tether uses (each v1 controller hierarchy, and the unified one where
// present), all ending in the same leaf, LeafName(task, nonce). Paths are
// hierarchy paths as /proc/PID/cgroup shows them, not directories: Open
// resolves them against a probed Host.
//
// A Location is recorded in the event log as its String and read back with
// ParseLocation; the zero Location is none.
type Location struct {
	leaf    string
	entries []locEntry // sorted by key, keys unique
}

type locEntry struct{ key, path string }

// LeafName returns the directory name of the cgroup of task with spawn
// nonce nonce: "tether-<task>@<nonce>". '@' is in neither alphabet, so the
// name gives back exactly one (task, nonce). Task ids are
// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}, nonces [A-Za-z0-9_-]{8,128}; the name is
// at most 199 bytes, below NAME_MAX.
func LeafName(task, nonce string) (string, error) {
	if !validTaskID(task) {
		return "", fmt.Errorf("%w: task id %q: want 1 to 63 of A-Z a-z 0-9 _ . - starting with a letter or digit", ErrBadLocation, task)
	}
	if !validNonce(nonce) {
		return "", fmt.Errorf("%w: nonce %q: want 8 to 128 of A-Z a-z 0-9 _ -", ErrBadLocation, nonce)
	}
	return leafPrefix + task + "@" + nonce, nil
}

// ParseLeaf splits a task cgroup's name into its task id and nonce.
func ParseLeaf(leaf string) (task, nonce string, err error) {
	rest, ok := strings.CutPrefix(leaf, leafPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not a tether task cgroup name (want tether-<task>@<nonce>)", ErrBadLocation, leaf)
	}
	task, nonce, ok = strings.Cut(rest, "@")
	if !ok || !validTaskID(task) || !validNonce(nonce) {
		return "", "", fmt.Errorf("%w: %q is not a tether task cgroup name (want tether-<task>@<nonce>)", ErrBadLocation, leaf)
	}
	return task, nonce, nil
}

func validTaskID(s string) bool {
	if len(s) < 1 || len(s) > 63 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func validNonce(s string) bool {
	if len(s) < 8 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// LocationFor returns the location of the cgroup of task with spawn nonce
// nonce on host h: LeafName(task, nonce) below each hierarchy's Parent (the
// calling process's own cgroup, or on cgroup2 with controllers its parent).
// It touches nothing.
func LocationFor(h Host, task, nonce string) (Location, error) {
	leaf, err := LeafName(task, nonce)
	if err != nil {
		return Location{}, err
	}
	if len(h.Hierarchies) == 0 {
		return Location{}, fmt.Errorf("%w: no cgroup hierarchy is mounted", ErrUnavailable)
	}
	l := Location{leaf: leaf}
	for _, hi := range h.Hierarchies {
		p := path.Join(hi.Parent, leaf)
		dir, ok := hi.dir(p)
		if !ok {
			return Location{}, fmt.Errorf("%w: %s is outside the %s hierarchy mounted at %s", ErrBadLocation, p, hi.Key, hi.Mount)
		}
		if len(dir) >= pathMax {
			return Location{}, fmt.Errorf("%w: %s is %d bytes, over PATH_MAX; run tether from a shallower cgroup", ErrBadLocation, dir[:64]+"...", len(dir))
		}
		l.entries = append(l.entries, locEntry{key: hi.Key, path: p})
	}
	return l, nil
}

// IsZero reports whether l is the zero Location (none recorded).
func (l Location) IsZero() bool { return len(l.entries) == 0 }

// Leaf returns the task cgroup's directory name.
func (l Location) Leaf() string { return l.leaf }

// Paths returns the cgroup path in each hierarchy, by hierarchy key.
func (l Location) Paths() map[string]string {
	m := make(map[string]string, len(l.entries))
	for _, e := range l.entries {
		m[e.key] = e.path
	}
	return m
}

// Check returns nil if l is the location of task's cgroup for spawn nonce
// nonce, else an error wrapping ErrNotOurs (or ErrBadLocation for a bad
// task id or nonce). tether kills and removes only a cgroup that the log
// proves its own: the location written ahead of the launch, checked here
// against the task and nonce of the same log.
func (l Location) Check(task, nonce string) error {
	want, err := LeafName(task, nonce)
	if err != nil {
		return err
	}
	if l.IsZero() {
		return fmt.Errorf("cgroup: %w: no location recorded", ErrNotOurs)
	}
	if l.leaf != want {
		return fmt.Errorf("cgroup: %w: location %s is %q, task %q with nonce %q has %q", ErrNotOurs, l, l.leaf, task, nonce, want)
	}
	return nil
}

// String returns the canonical form, for the event log:
//
//	tether-cgroup:1;cpu=/tether-web@k3Jq9x_a;memory=/a/b/tether-web@k3Jq9x_a;unified=/tether-web@k3Jq9x_a
//
// Entries are sorted by hierarchy key; bytes of a path outside
// [A-Za-z0-9._@/+,:~-] are written %XX.
func (l Location) String() string {
	if l.IsZero() {
		return ""
	}
	var b strings.Builder
	b.WriteString(locationPrefix)
	for _, e := range l.entries {
		b.WriteByte(';')
		b.WriteString(e.key)
		b.WriteByte('=')
		escapePath(&b, e.path)
	}
	return b.String()
}

// MarshalText returns String, so a Location is a JSON string.
func (l Location) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the canonical form; an empty text is the zero
// Location.
func (l *Location) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*l = Location{}
		return nil
	}
	p, err := ParseLocation(string(b))
	if err != nil {
		return err
	}
	*l = p
	return nil
}

// ParseLocation parses a location's canonical form (String). Anything else
// (another prefix, unsorted or repeated keys, a path that is not clean and
// absolute, paths that do not share a tether leaf, a non-canonical escape)
// is an error wrapping ErrBadLocation.
func ParseLocation(s string) (Location, error) {
	bad := func(why string, args ...any) (Location, error) {
		return Location{}, fmt.Errorf("%w: %q: %s", ErrBadLocation, trunc(s), fmt.Sprintf(why, args...))
	}
	rest, ok := strings.CutPrefix(s, locationPrefix+";")
	if !ok {
		return bad("not a tether cgroup location (want %s;<key>=<path>;...)", locationPrefix)
	}
	var l Location
	for item := range strings.SplitSeq(rest, ";") {
		key, esc, ok := strings.Cut(item, "=")
		if !ok || !validKey(key) {
			return bad("entry %q: want <hierarchy>=<path>", trunc(item))
		}
		if n := len(l.entries); n > 0 && l.entries[n-1].key >= key {
			return bad("hierarchy %q out of order or repeated", key)
		}
		p, err := unescapePath(esc)
		if err != nil {
			return bad("%s: %v", key, err)
		}
		if err := validCgroupPath(p); err != nil {
			return bad("%s: %v", key, err)
		}
		leaf := path.Base(p)
		if _, _, err := ParseLeaf(leaf); err != nil {
			return bad("%s: %q is not a tether task cgroup", key, leaf)
		}
		if l.leaf != "" && leaf != l.leaf {
			return bad("%s ends in %q, others in %q", key, leaf, l.leaf)
		}
		l.leaf = leaf
		l.entries = append(l.entries, locEntry{key: key, path: p})
	}
	if l.String() != s {
		return bad("not in canonical form")
	}
	return l, nil
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// validKey accepts UnifiedKey and v1 controller lists (lower-case words
// joined by commas).
func validKey(k string) bool {
	if k == "" {
		return false
	}
	for w := range strings.SplitSeq(k, ",") {
		if w == "" {
			return false
		}
		for i := 0; i < len(w); i++ {
			if c := w[i]; (c < 'a' || c > 'z') && c != '_' {
				return false
			}
		}
	}
	return true
}

// validCgroupPath accepts a clean absolute path below the hierarchy root:
// no empty, "." or ".." element, no NUL or newline.
func validCgroupPath(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" {
		return fmt.Errorf("path %q is not an absolute cgroup path below the root", p)
	}
	if len(p) >= pathMax {
		return fmt.Errorf("path is %d bytes, over PATH_MAX", len(p))
	}
	for el := range strings.SplitSeq(p[1:], "/") {
		if el == "" || el == "." || el == ".." || len(el) > 255 {
			return fmt.Errorf("path %q is not clean", p)
		}
		if strings.ContainsAny(el, "\x00\n") {
			return fmt.Errorf("path %q has a NUL or newline", p)
		}
	}
	return nil
}

func safePathByte(c byte) bool {
	return alnum(c) || strings.IndexByte("._@/+,:~-", c) >= 0
}

const hexDigits = "0123456789ABCDEF"

func escapePath(b *strings.Builder, p string) {
	for i := 0; i < len(p); i++ {
		if c := p[i]; safePathByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
}

func unescapePath(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if !safePathByte(c) {
				return "", fmt.Errorf("byte %q must be written %%%02X", c, c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape")
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("bad escape %q", s[i:i+3])
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}
