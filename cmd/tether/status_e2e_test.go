package main

import (
	"strings"
	"testing"
)

// status takes several words, each by the name rules (a task, else
// JOB.GROUP, else a job): their tasks listed in the order of the words,
// each once, a word that stands for nothing said on stderr, the exit code
// the worst; one task's word still shows that task alone.
func TestStatus_SeveralNamesInTheirOrderTheWorstCode(t *testing.T) {
	e := newEnv(t)
	ids := map[string]string{}
	for _, n := range []string{"a", "b"} {
		ids[n] = strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", n}, "sleep")...).stdout)
	}
	t.Cleanup(func() { e.tether("stop", "a", "b", "app") })

	r := e.tether("status", "b", "nosuch", "a")
	if r.code != exitError || !strings.Contains(r.stderr, `"nosuch"`) || !strings.Contains(r.stderr, "tether status --all") {
		t.Fatalf("status b nosuch a: want exit 1 naming nosuch and what to do\n%s", r)
	}
	ia, ib := strings.Index(r.stdout, ids["a"]), strings.Index(r.stdout, ids["b"])
	if ia < 0 || ib < 0 || ib > ia {
		t.Fatalf("status b nosuch a: want b's row, then a's\n%s", r)
	}
	// The worst code wherever the failure is; none: 0.
	for _, args := range [][]string{{"nosuch", "a"}, {"a", "nosuch"}} {
		if r := e.tether(append([]string{"status"}, args...)...); r.code != exitError || !strings.Contains(r.stdout, ids["a"]) {
			t.Errorf("status %v: want exit 1 and a's row\n%s", args, r)
		}
	}
	if st := e.status("b", "a"); len(st) != 2 || st[0].ID != ids["b"] || st[1].ID != ids["a"] {
		t.Errorf("status --json b a: %+v, want b then a", st)
	}
	if st := e.status("a", ids["a"], "a"); len(st) != 1 || st[0].ID != ids["a"] {
		t.Errorf("status --json a ID a: %+v, want a's task once", st)
	}
	if r := e.tether("status", "nosuch", "other"); r.code != exitError || r.stdout != "" ||
		!strings.Contains(r.stderr, `"nosuch"`) || !strings.Contains(r.stderr, `"other"`) {
		t.Errorf("status of two unknown words: want exit 1, each named, nothing listed\n%s", r)
	}
	if r := e.must("status", "a"); !strings.Contains(r.stdout, "ID") || !strings.Contains(r.stdout, ids["a"]) || strings.Contains(r.stdout, ids["b"]) {
		t.Errorf("status a: want a's detail alone\n%s", r)
	}

	// A group and a job by their names.
	job := twoGroupJob(t, e)
	e.must("start", "--min-uptime", "0", job)
	names := func(args ...string) []string {
		var out []string
		for _, s := range e.status(args...) {
			out = append(out, s.Name)
		}
		return out
	}
	if got := names("app.db"); len(got) != 1 || got[0] != "pg" {
		t.Errorf("status app.db: %v, want pg alone", got)
	}
	if got := names("app"); len(got) != 2 || !strings.Contains(strings.Join(got, " "), "server") || !strings.Contains(strings.Join(got, " "), "pg") {
		t.Errorf("status app (the job): %v, want server and pg", got)
	}
	if got := names("a", "app.db"); len(got) != 2 || got[0] != "a" || got[1] != "pg" {
		t.Errorf("status a app.db: %v, want a then pg", got)
	}
	if r := e.tether("status", "app.db"); r.code != 0 || !strings.Contains(r.stdout, "pg") || strings.Contains(r.stdout, "\nID ") {
		t.Errorf("status app.db: want the table of its task\n%s", r)
	}
}
