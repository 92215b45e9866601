package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/docfields"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

// TestDocs_FleetJSONFieldsAreDocumented runs nodes and tasks in every
// shape docs/fleet.md's tables name (a running task, one restarted by its
// policy and failed, a live task of a down node, a node with no task) and
// holds status --json and nodes --json to the tables both ways.
func TestDocs_FleetJSONFieldsAreDocumented(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1, n2, n3 := startNode(t, cli, "n1"), startNode(t, cli, "n2"), startNode(t, cli, "n3")
	n1.sleeper("web")
	id := "again-1"
	spec := fsm.Spec{Name: "again", Driver: "raw_exec", Command: "/bin/sh", Args: []string{"-c", "exit 3", n1.dir},
		Restart: &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 10 * time.Millisecond, Mode: fsm.RestartFail}}
	if _, err := n1.d.StartTask(ctxT(t), id, spec); err != nil {
		t.Fatal(err)
	}
	if final, err := n1.d.WaitTask(ctxT(t), id); err != nil || final.Restarts != 1 || final.Reason == "" {
		t.Fatalf("a task restarted once then ended: %+v, %v", final, err)
	}
	n2.sleeper("db")
	for _, n := range []*testNode{n1, n2, n3} {
		n.waitMirrored(cli)
		n.waitStatus(cli)
	}
	n2.down(cli)
	doc := filepath.Join("..", "..", "docs", "fleet.md")
	status := docfields.Objects(t, must(t, "cluster", "--endpoints", ep, "status", "--all", "--json").stdout)
	if len(status) != 4 {
		t.Fatalf("status --json --all: %v", status)
	}
	docfields.Check(t, "cluster status --json", docfields.Table(t, doc, "### `tether cluster status --json"), status)
	nodes := docfields.Objects(t, must(t, "cluster", "--endpoints", ep, "nodes", "--json").stdout)
	docfields.Check(t, "cluster nodes --json", docfields.Table(t, doc, "### `tether cluster nodes --json"), nodes)
}
