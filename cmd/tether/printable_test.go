package main

import (
	"strings"
	"testing"
)

// invisibles are the characters a terminal does not show but that reorder
// or hide what it shows: the bidi embeddings and overrides (U+202A-U+202E),
// the bidi isolates (U+2066-U+2069), the zero-width characters and marks
// (U+200B-U+200F) and the zero-width no-break space (U+FEFF).
var invisibles = []rune{
	0x202a, 0x202b, 0x202c, 0x202d, 0x202e,
	0x2066, 0x2067, 0x2068, 0x2069,
	0x200b, 0x200c, 0x200d, 0x200e, 0x200f,
	0xfeff,
}

// rawInvisible returns the first invisible character s carries raw.
func rawInvisible(s string) (rune, bool) {
	for _, r := range s {
		for _, bad := range invisibles {
			if r == bad {
				return r, true
			}
		}
	}
	return 0, false
}

// Issue 11, item 8: a task whose name (and an argument) hides bidi
// overrides and zero-width characters is never printed with them raw by
// status ID, status --all or events ID: what a terminal shows is what the
// store holds.
func TestStatusAndEvents_NameWithBidiAndZeroWidthIsEscaped(t *testing.T) {
	e := newEnv(t)
	var b strings.Builder
	b.WriteString("good")
	for _, r := range invisibles {
		b.WriteRune(r)
	}
	b.WriteString("evil")
	name := b.String()
	r := e.must("run", "-v", "--name", name, "--", "/bin/echo", "arg"+name)
	id := taskID(t, r.stderr)
	for _, args := range [][]string{{"status", id}, {"status", "--all"}, {"events", id}, {"status", name}, {"events", name}} {
		r := e.must(args...)
		if c, raw := rawInvisible(r.stdout + r.stderr); raw {
			t.Errorf("tether %s printed U+%04X raw:\n%+q", args[0], c, r.stdout)
		}
		if !strings.Contains(r.stdout, `good\u202a`) && !strings.Contains(r.stdout, `arggood\u202a`) {
			t.Errorf("tether %s does not show the name escaped:\n%s", args[0], r.stdout)
		}
	}
}
