package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/cgroup"
)

// docFields reads the table of JSON fields under the heading that starts
// with heading in docs/cli.md: each field and when it is present.
func docFields(t *testing.T, heading string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("docs/cli.md has no heading %q", heading)
	}
	if i := strings.Index(after, "\n#"); i >= 0 {
		after = after[:i]
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| [^|]+ \\| ([a-z-]+) \\|")
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(after, -1) {
		out[m[1]] = m[2]
	}
	if len(out) == 0 {
		t.Fatalf("docs/cli.md: no fields under %q", heading)
	}
	return out
}

// checkDocumented holds JSON objects to their table both ways: a field
// present "always" is in every object, any other in at least one (but for
// the host-dependent ones, marked "missing"), and every field printed is
// documented.
func checkDocumented(t *testing.T, what string, doc map[string]string, objs []map[string]json.RawMessage) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range objs {
		for k := range o {
			seen[k] = true
			if _, ok := doc[k]; !ok {
				t.Errorf("%s prints %q, which docs/cli.md does not list", what, k)
			}
		}
		for f, when := range doc {
			if _, ok := o[f]; when == "always" && !ok {
				t.Errorf("%s: %q is documented as always present, and is missing from %v", what, f, keys(o))
			}
		}
	}
	for f, when := range doc {
		if !seen[f] && when != "missing" {
			t.Errorf("%s: %q (present: %s) is documented and never printed", what, f, when)
		}
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func objects(t *testing.T, r result) []map[string]json.RawMessage {
	t.Helper()
	var many []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &many); err == nil {
		return many
	}
	var one map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r)
	}
	return []map[string]json.RawMessage{one}
}

// TestDocs_JSONFieldsAreDocumented runs tasks in every shape the tables
// name (running, exited, killed, failed, stopped, replaced, restarted,
// and launched with a warning) and checks status, events and stats
// --json against docs/cli.md.
func TestDocs_JSONFieldsAreDocumented(t *testing.T) {
	e := newEnv(t)
	e.must(e.runArgs("start", []string{"--name", "svc"}, "sleep")...)
	e.must(e.runArgs("start", []string{"--name", "svc", "--replace"}, "sleep")...)
	e.tether("run", "--name", "three", "--", "/bin/sh", "-c", "exit 3")
	e.tether("run", "--name", "killed", "--", "/bin/sh", "-c", "kill -9 $$")
	e.tether("run", "--name", "refused", "--driver", "exec", "--cap-add", "net_raw", "--", "/bin/true")
	again := writeFile(t, t.TempDir(), "again.hcl", `task "again" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "exit 3"]
  }
  restart {
    attempts = 1
    interval = "1h"
    delay    = "10ms"
    mode     = "fail"
  }
}
`)
	if r := e.tether("run", again); r.code != 3 {
		t.Fatalf("run of a task restarted once: want exit 3\n%s", r)
	}
	ported := writeFile(t, t.TempDir(), "ported.nomad", `job "ported" {
  type = "batch"
  group "g" {
    network {
      port "http" {}
    }
    task "ported" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`)
	e.must("run", ported)
	status := objects(t, e.must("status", "--all", "--json"))
	if len(status) != 7 {
		t.Fatalf("want 7 tasks: %v", status)
	}
	checkDocumented(t, "status --json", docFields(t, "### `tether status --json"), status)
	var events []map[string]json.RawMessage
	for _, s := range status {
		var id string
		if err := json.Unmarshal(s["id"], &id); err != nil {
			t.Fatal(err)
		}
		events = append(events, objects(t, e.must("events", "--json", id))...)
	}
	eventDoc := docFields(t, "### `tether events --json")
	if os.Geteuid() == 0 {
		// A launch with a warning: a raw_exec task where no cgroup can be
		// made (not root, no delegation) runs uncontained, and says so.
		nobody := asNobody(t)
		r := nobody("run", "-v", "--", "/bin/true")
		events = append(events, objects(t, nobody("events", "--json", taskID(t, r.stderr)))...)
	} else {
		// As any other user, whether a launch warns depends on the host
		// (delegated cgroups): the field may be missing.
		eventDoc["warnings"] = "missing"
	}
	if h, err := cgroup.Probe(); err != nil || h.Usable() != nil {
		eventDoc["peak_memory_bytes"] = "missing" // no task cgroup, no peak
	} else if _, _, ok := h.For(cgroup.Memory); !ok {
		eventDoc["peak_memory_bytes"] = "missing"
	}
	checkDocumented(t, "events --json", eventDoc, events)
	checkDocumented(t, "stats --json", docFields(t, "### `tether stats --json"), objects(t, e.must("stats", "--json", "svc")))
	e.must("stop", "svc")
}
