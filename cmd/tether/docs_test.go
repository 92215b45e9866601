package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/internal/docfields"
)

func docFields(t *testing.T, heading string) map[string]string {
	return docfields.Table(t, filepath.Join(repoRoot, "docs", "cli.md"), heading)
}

func objects(t *testing.T, r result) []map[string]json.RawMessage {
	return docfields.Objects(t, r.stdout)
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
	// A notify task that never says it is ready: start gives up on it at
	// --ready-timeout, and it runs on, not ready.
	notify := writeFile(t, t.TempDir(), "notify.hcl", `task "notify" {
  driver    = "raw_exec"
  readiness = "notify"
  config {
    command = "/bin/sleep"
    args    = ["1000"]
  }
}
`)
	if r := e.tether("start", "--ready-timeout", "100ms", notify); r.code != exitError {
		t.Fatalf("start of a notify task that never says it is ready: want exit 1\n%s", r)
	}
	// A desired entry: daemonless, enabled and not started (a row with no
	// id); through an agent, its running task.
	e.must("enable", e.taskFile("desired", "", "sleep"))
	status := objects(t, e.must("status", "--all", "--json"))
	if len(status) != 9 {
		t.Fatalf("want 8 tasks and a desired entry: %v", status)
	}
	docfields.Check(t, "status --json", docFields(t, "### `tether status --json"), status)
	var events []map[string]json.RawMessage
	for _, s := range status {
		var id string
		if _, ok := s["id"]; !ok {
			continue // the desired entry's row
		}
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
	docfields.Check(t, "events --json", eventDoc, events)
	docfields.Check(t, "stats --json", docFields(t, "### `tether stats --json"), objects(t, e.must("stats", "--json", "svc")))
	e.must("stop", "svc")
	e.must("stop", "notify")
	e.must("disable", "desired")
}
