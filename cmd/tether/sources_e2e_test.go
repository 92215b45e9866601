package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
)

// Every real Nomad job file through each way a file comes in: tether
// start, tether enable and the agent's --config-dir. The one instantiation
// path (package job) must make the same tasks of each, with the same
// environment and the same rendered files; a file that needs what tether
// refuses is refused by all three, with the same error.

// sourceOutcome is what one way made of a file: its refusal, or its tasks
// (the first copy of each allocation), by group and name.
type sourceOutcome struct {
	refused string
	tasks   map[string]sourceTask
}

type sourceTask struct {
	Hook    string
	Driver  string
	Command []string
	Env     map[string]string
	// Files are the task's templates as rendered, by destination (those
	// of a task that launched).
	Files map[string]string
}

// settled: the agent did what it does first with an entry.
func settled(en agent.Entry) bool {
	switch en.Standing {
	case agent.StandingStarting, agent.StandingStopping, "":
		return false
	}
	return true
}

// collect reads the state directory's tasks into an outcome: the specs as
// recorded, normalized (the state directory, allocation ids and ports
// differ between runs), and their rendered templates.
func collectOutcome(t *testing.T, e *jobsEnv) sourceOutcome {
	t.Helper()
	var rows []taskJSON
	if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &rows); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		spec  fsm.Spec
		state string
	}
	var recs []rec
	for _, r := range rows {
		if r.ID == "" {
			continue
		}
		evs := e.events(r.ID)
		if len(evs) == 0 || evs[0].Event != "task-created" {
			t.Fatalf("%s's log: %+v", r.ID, evs)
		}
		if evs[0].Replaces != "" {
			continue // a later copy: its allocation's first is compared
		}
		var spec fsm.Spec
		if err := json.Unmarshal(evs[0].Spec, &spec); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{spec, r.State})
	}
	// The allocations, numbered by group and index.
	seen := map[string]bool{}
	slices.SortFunc(recs, func(a, b rec) int {
		return strings.Compare(a.spec.Group+"\x00"+a.spec.Name, b.spec.Group+"\x00"+b.spec.Name)
	})
	var pairs []string
	for _, r := range recs {
		if a := r.spec.Alloc; a != nil && !seen[a.ID] {
			seen[a.ID] = true
			n := fmt.Sprintf("$ALLOC(%s,%d)", r.spec.Group, a.Index)
			pairs = append(pairs, a.ID, n, a.ID[:8], n+"[:8]")
		}
	}
	pairs = append(pairs, e.dir, "$STATE")
	for _, r := range recs {
		for _, p := range r.spec.Ports {
			pairs = append(pairs, strconv.Itoa(p.Value), "$PORT("+p.Label+")")
		}
	}
	norm := strings.NewReplacer(pairs...).Replace
	out := sourceOutcome{tasks: map[string]sourceTask{}}
	for _, r := range recs {
		s := r.spec
		st := sourceTask{Driver: s.Driver, Command: []string{norm(s.Command)}, Env: map[string]string{}, Files: map[string]string{}}
		for _, a := range s.Args {
			st.Command = append(st.Command, norm(a))
		}
		for k, v := range s.Env {
			if k != "TETHER_TEST_MARKER" { // start's --env, for the leak check
				st.Env[k] = norm(v)
			}
		}
		if s.Alloc != nil {
			st.Hook = s.Alloc.Hook.String()
			launched := r.state != "created" && r.state != "spawning" && r.state != "executor-up" && r.state != "launching" && r.state != "failed"
			l := taskdir.Layout{TaskDir: s.Alloc.TaskDir, AllocDir: s.Alloc.Dir, Chroot: s.Driver == "exec"}
			for _, tm := range s.Templates {
				if !launched {
					continue
				}
				to, err := l.Resolve(tm.Destination)
				if err != nil {
					t.Fatalf("%s's template %s: %v", s.Name, tm.Destination, err)
				}
				b, err := os.ReadFile(to.Host())
				if err != nil {
					t.Errorf("%s's template %s was not rendered: %v", s.Name, tm.Destination, err)
				}
				st.Files[tm.Destination] = norm(string(b))
			}
		}
		key := s.Group + "/" + s.Name
		if _, dup := out.tasks[key]; dup {
			t.Fatalf("two first copies of %s", key)
		}
		out.tasks[key] = st
	}
	return out
}

// refusal is a refusal's words, without what says which way it came in
// (the file's path, tether's prefix, enable's last line).
func refusal(text, file string) string {
	if abs, err := filepath.Abs(file); err == nil {
		text = strings.ReplaceAll(text, abs, "$FILE")
	}
	text = strings.ReplaceAll(text, file, "$FILE")
	// A parse error: the CLI prints its diagnostics a line each, status
	// after the file's name, joined by "; ".
	if diags := diagnostic.FindAllString(text, -1); len(diags) > 0 {
		return strings.Join(diags, "\n")
	}
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, "tether: "))
		l = strings.TrimSuffix(l, "; nothing was enabled")
		l = strings.TrimSuffix(l, "; nothing was started")
		if l == "" || l == "nothing was enabled" || strings.HasPrefix(l, "the process that runs the task reads") {
			continue
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// diagnostic is a parser's diagnostic of a file, up to its end (a "; "
// that joins the next, or the line's end).
var diagnostic = regexp.MustCompile(`\$FILE:\d+:\d+: (?:error|warning): [^\n;]*`)

// serveJobs serves what the job files fetch.
func serveJobs(t *testing.T, e *jobsEnv) {
	e.net.serveGoSet(t)
	e.net.serve("nomad-community-demo.s3.amazonaws.com/hellov1", helloScript(t, e.dir))
}

// agentJobsEnv is a state directory for a test's own agents, with the fake
// internet in their environment.
func agentJobsEnv(t *testing.T) *jobsEnv {
	e := &jobsEnv{env: newAgentEnv(t), net: newFakeInternet(t)}
	serveJobs(t, e)
	return e
}

func TestSources_EveryNomadJobTheSameThreeWays(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(nomadJobsDir, "*.nomad*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(nomadJobsDir); errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s is absent (the shared folder of real Nomad job files beside the repository)", nomadJobsDir)
		}
		t.Fatalf("no job file in %s", nomadJobsDir)
	}
	needRoot(t) // exec tasks among them
	rendered := 0
	defer func() {
		if rendered == 0 && !t.Failed() {
			t.Errorf("no template rendered by all three ways was compared (04-isolation-exec has one)")
		}
	}()
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ways := map[string]sourceOutcome{}

			// tether start.
			{
				e := &jobsEnv{env: newDaemonlessEnv(t, "compares tether start with the agent's sources"), net: newFakeInternet(t)}
				serveJobs(t, e)
				r := e.tether("start", "--min-uptime", "0", path)
				o := collectOutcome(t, e)
				if len(o.tasks) == 0 {
					o.refused = refusal(r.stderr, path)
				}
				ways["start"] = o
				e.stopEverything()
			}

			// tether enable.
			{
				e := agentJobsEnv(t)
				e.startAgent(e.net.env(), true)
				c := e.client()
				r := e.tether("enable", path)
				var o sourceOutcome
				if r.code != 0 {
					o.refused = refusal(r.stderr, path)
				} else {
					name := strings.TrimPrefix(strings.TrimSpace(r.stdout), "enabled ")
					en := awaitEntry(t, c, name, "settled", settled)
					if en.Standing == agent.StandingRefused {
						t.Errorf("enabled, then refused: %+v", en)
					}
					o = collectOutcome(t, e)
					e.must("disable", name)
					await(t, c, name+" disabled", func(s agent.Status) bool { _, ok := s.Entry(name); return !ok })
				}
				ways["enable"] = o
			}

			// The config dir.
			{
				e := agentJobsEnv(t)
				dir := e.configDir()
				copyPath := writeFile(t, dir, name, string(text))
				e.startAgent(e.net.env(), true, "--config-dir", dir)
				c := e.client()
				st := await(t, c, "the config dir's entry", func(s agent.Status) bool {
					for _, en := range s.Entries {
						if en.File == copyPath && settled(en) {
							return true
						}
					}
					return false
				})
				var o sourceOutcome
				for _, en := range st.Entries {
					if en.File == copyPath && en.Standing == agent.StandingRefused {
						// As status says it.
						var rows []entryRowJSON
						if err := json.Unmarshal([]byte(e.must("status", "--json").stdout), &rows); err != nil || len(rows) != 1 || rows[0].Desired == nil {
							t.Fatalf("status --json of a refused file: %v, %+v", err, rows)
						}
						o.refused = refusal(rows[0].Desired.Reason, copyPath)
					}
				}
				if o.refused == "" {
					o = collectOutcome(t, e)
				}
				ways["dir"] = o
			}

			start := ways["start"]
			for _, way := range []string{"enable", "dir"} {
				got := ways[way]
				switch {
				case start.refused != "" || got.refused != "":
					if start.refused == "" || got.refused == "" || !strings.Contains(start.refused, got.refused) && !strings.Contains(got.refused, start.refused) {
						t.Errorf("refused differently:\nstart: %s\n%s: %s", start.refused, way, got.refused)
					}
					continue
				}
				rendered += compareTasks(t, way, start.tasks, got.tasks)
			}
			if start.refused != "" {
				t.Logf("refused by all three: %s", start.refused)
			} else {
				t.Logf("the same %d tasks all three ways", len(start.tasks))
			}
		})
	}
}

// compareTasks compares two ways' tasks; it returns how many rendered
// files it compared.
func compareTasks(t *testing.T, way string, want, got map[string]sourceTask) (files int) {
	t.Helper()
	names := func(m map[string]sourceTask) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(names(want), names(got)) {
		t.Errorf("%s made tasks %v; start made %v", way, names(got), names(want))
		return 0
	}
	for k, w := range want {
		g := got[k]
		if w.Hook != g.Hook || w.Driver != g.Driver || !slices.Equal(w.Command, g.Command) {
			t.Errorf("%s: %s runs %s %q (%s); start's %s %q (%s)", way, k, g.Driver, g.Command, g.Hook, w.Driver, w.Command, w.Hook)
		}
		for _, v := range sortedKeys(w.Env, g.Env) {
			if w.Env[v] != g.Env[v] {
				t.Errorf("%s: %s's %s=%q; start's %q", way, k, v, g.Env[v], w.Env[v])
			}
		}
		if len(w.Env) == 0 {
			t.Errorf("%s: %s has no environment", way, k)
		}
		for dest, wf := range w.Files {
			gf, ok := g.Files[dest]
			switch {
			case !ok:
			case gf != wf:
				t.Errorf("%s: %s rendered %s as %q; start as %q", way, k, dest, gf, wf)
			default:
				files++
			}
		}
	}
	return files
}

func sortedKeys(ms ...map[string]string) []string {
	seen := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			seen[k] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
