package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// edit is one find/replace pair on one file (relative to the module root).
type edit struct {
	file, find, replace string
}

// mutant is one planted bug: find/replace edits of product files.
type mutant struct {
	name, comment string
	// packages are the comment's "packages:" line: the packages to try
	// first (their tests are known to catch it quickest). Every other
	// reverse dependency of the mutated files is tried after them.
	packages []string
	// tests is the comment's "tests:" line: a go test -run pattern of the
	// tests to run first, alone, in each package (the catch of a mutant
	// whose catching test comes late in a slow package's suite); if none of
	// them catches it, every package's whole suite runs as without it.
	tests string
	edits []edit
}

func (m mutant) summary() string {
	line, _, _ := strings.Cut(strings.TrimSpace(m.comment), "\n")
	return line
}

// loadMutant reads a txtar archive: a comment (whose "packages:" line, if
// any, names the packages to try first), then "-- find FILE --" and
// "-- replace FILE --" sections in pairs.
func loadMutant(path string) (mutant, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mutant{}, err
	}
	m := mutant{name: strings.TrimSuffix(filepath.Base(path), ".txtar")}
	comment, files := parseTxtar(b)
	m.comment = comment
	for line := range strings.SplitSeq(comment, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "packages:"); ok {
			m.packages = append(m.packages, strings.Fields(rest)...)
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "tests:"); ok {
			m.tests = strings.TrimSpace(rest)
		}
	}
	for _, p := range m.packages {
		if !strings.HasPrefix(p, "./") {
			return m, fmt.Errorf("%s: package %q: name packages relative to the module root (./store/, ./...)", path, p)
		}
	}
	if len(files) == 0 || len(files)%2 != 0 {
		return m, fmt.Errorf("%s: want find/replace pairs, got %d sections", path, len(files))
	}
	for i := 0; i < len(files); i += 2 {
		f, r := files[i], files[i+1]
		fk, ff, _ := strings.Cut(f.name, " ")
		rk, rf, _ := strings.Cut(r.name, " ")
		if fk != "find" || rk != "replace" || ff == "" || ff != rf {
			return m, fmt.Errorf("%s: sections %q, %q: want \"find FILE\" then \"replace FILE\"", path, f.name, r.name)
		}
		if strings.TrimSpace(f.data) == "" {
			return m, fmt.Errorf("%s: empty find for %s", path, ff)
		}
		m.edits = append(m.edits, edit{file: filepath.FromSlash(ff), find: f.data, replace: r.data})
	}
	return m, nil
}

type section struct{ name, data string }

// parseTxtar splits the txtar format: lines "-- NAME --" start sections.
func parseTxtar(b []byte) (string, []section) {
	var comment strings.Builder
	var secs []section
	cur := -1
	for line := range strings.SplitAfterSeq(string(b), "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			secs = append(secs, section{name: strings.TrimSpace(t[3 : len(t)-3])})
			cur = len(secs) - 1
			continue
		}
		if cur < 0 {
			comment.WriteString(line)
		} else {
			secs[cur].data += line
		}
	}
	return comment.String(), secs
}

// files returns the files the mutant edits, each once, in order.
func (m mutant) files() []string {
	var fs []string
	for _, e := range m.edits {
		if !slices.Contains(fs, e.file) {
			fs = append(fs, e.file)
		}
	}
	return fs
}

// home is the package whose tests a mutant most likely runs first: the
// first of its packages: line, else its first file's directory.
func (m mutant) home() string {
	if len(m.packages) > 0 {
		return filepath.Clean(m.packages[0])
	}
	if len(m.edits) == 0 {
		return ""
	}
	return filepath.Dir(m.edits[0].file)
}

// writeOverlay applies the mutant into tmp and writes the overlay file
// go build reads (-overlay), returning its path.
func (m mutant) writeOverlay(root, tmp string) (string, error) {
	repl, err := m.apply(root, tmp)
	if err != nil {
		return "", err
	}
	ov, err := json.Marshal(map[string]any{"Replace": repl})
	if err != nil {
		return "", err
	}
	p := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(p, ov, 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// apply patches copies of the files into tmp and returns the overlay's
// replacements (absolute product path -> patched copy).
func (m mutant) apply(root, tmp string) (map[string]string, error) {
	patched := map[string]string{}
	for _, e := range m.edits {
		src := filepath.Join(root, e.file)
		text, ok := patched[src]
		if !ok {
			b, err := os.ReadFile(src)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			text = string(b)
		}
		switch n := strings.Count(text, e.find); n {
		case 1:
		case 0:
			return nil, fmt.Errorf("%s: the find text no longer occurs in %s (was it refactored? update the mutant):\n%s", m.name, e.file, indent(e.find, "    "))
		default:
			return nil, fmt.Errorf("%s: the find text occurs %d times in %s; make it unique:\n%s", m.name, n, e.file, indent(e.find, "    "))
		}
		patched[src] = strings.Replace(text, e.find, e.replace, 1)
	}
	overlay := map[string]string{}
	for src, text := range patched {
		dst := filepath.Join(tmp, strings.ReplaceAll(strings.TrimPrefix(src, root), string(filepath.Separator), "_"))
		if err := os.WriteFile(dst, []byte(text), 0o600); err != nil {
			return nil, err
		}
		overlay[src] = dst
	}
	return overlay, nil
}
