package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/store"
)

// An agent's wiring: the store held open and wrapped, the node
// registered, run, and its desired state converged.
func ExampleNode() {
	ctx := context.Background()
	stateDir := "/var/lib/tether"
	st, err := store.Open(filepath.Join(stateDir, "tether.db"), store.Options{})
	if err != nil {
		return
	}
	src := cluster.NewStoreSource(st) // hand src to the driver as its store.Log
	defer src.Close()
	cli, err := cluster.Dial(cluster.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
	if err != nil {
		return
	}
	defer cli.Close()
	n, err := cluster.NewNode(cli, cluster.NodeConfig{Name: "n1", LeaseTTL: 10 * time.Second,
		Dir: filepath.Join(stateDir, "cluster"), Source: src, Changes: src.Changes()})
	if err != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = n.Register(rctx)
	cancel()
	if err != nil && !isUnavailable(err) {
		return // ErrNodeHeld: another agent holds n1, and the error names it
	}
	go n.Run(ctx)
	for set := range n.Desired() {
		for name, d := range set.Tasks {
			_, _ = name, d.Spec // converge: parse the task file, check the allow lists, start or replace
		}
	}
}

// `tether cluster status --json`.
func ExampleFleet_Status() {
	cli, err := cluster.Dial(cluster.Config{Endpoints: []string{"http://127.0.0.1:2379"}})
	if err != nil {
		return
	}
	defer cli.Close()
	f, _ := cluster.NewFleet(cli, "")
	rows, err := f.Status(context.Background())
	if err != nil {
		return
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rows)
}

func isUnavailable(err error) bool { return err != nil && errors.Is(err, cluster.ErrUnavailable) }
