package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/store"
)

// Issue 11, item 8: `tether run` whose store cannot record the task (not a
// tether store, locked by another holder, a state directory that cannot
// be made) says that nothing was started or recorded, names the store's
// problem and what to do, and exits 125; it never points at 'tether
// events ID' for a task the store does not have (events would say unknown
// task).
func TestRun_UnrecordedTaskIsNotSentToEvents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env) []string // returns extra global flags
		say   []string                            // what stderr must name
	}{
		{"not a store", func(t *testing.T, e *env) []string {
			junk := bytes.Repeat([]byte("this is not a bbolt file. "), 2000)
			e.offline(func() { // an agent refuses to serve it, and stays away
				if err := os.WriteFile(filepath.Join(e.dir, "tether.db"), junk, 0o600); err != nil {
					t.Fatal(err)
				}
			})
			return nil
		}, []string{"tether.db", "not a tether store", "tether check"}},
		{"locked", func(t *testing.T, e *env) []string {
			if e.agent != nil {
				t.Skip("daemonless only: the store's file lock between processes (an agent holds the store for good)")
			}
			st, err := store.Open(filepath.Join(e.dir, "tether.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return []string{"--lock-timeout", "200ms"}
		}, []string{"tether.db", "locked", "retry"}},
		{"state dir unusable", func(t *testing.T, e *env) []string {
			// The state directory's parent is a file: nothing can be made.
			e.dir = filepath.Join(t.TempDir(), "a-file", "state")
			if err := os.WriteFile(filepath.Dir(e.dir), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return nil
		}, []string{"a-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			flags := tc.setup(t, e)
			r := e.tether(append(flags, "run", "--name", "never", "--", "/bin/true")...)
			if r.code != exitStartFail {
				t.Errorf("exit %d, want %d: %s", r.code, exitStartFail, r)
			}
			if strings.Contains(r.stderr, "tether events") || strings.Contains(r.stderr, "(none)") {
				t.Errorf("points at the events of a task that was never recorded:\n%s", r)
			}
			for _, s := range tc.say {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not say %q:\n%s", s, r)
				}
			}
			if !regexp.MustCompile(`(?i)nothing (was )?(started|ran)|was not started`).MatchString(r.stderr) {
				t.Errorf("stderr does not say that nothing was started:\n%s", r)
			}
		})
	}
}
