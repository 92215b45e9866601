//go:build linux

package cgroup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tether-fsm/tether/cgroup"
)

func ExampleLeafName() {
	leaf, _ := cgroup.LeafName("web", "k3Jq9x_a")
	task, nonce, _ := cgroup.ParseLeaf(leaf)
	fmt.Println(leaf, task, nonce)
	// Output: tether-web@k3Jq9x_a web k3Jq9x_a
}

func ExampleParseLocation() {
	recorded := "tether-cgroup:1;memory=/process_api/ab12/tether-web@k3Jq9x_a;unified=/tether-web@k3Jq9x_a"
	loc, err := cgroup.ParseLocation(recorded)
	if err != nil {
		panic(err)
	}
	fmt.Println(loc.Paths()["memory"])
	fmt.Println(loc.Check("web", "k3Jq9x_a"))
	fmt.Println(errors.Is(loc.Check("web", "other-nonce"), cgroup.ErrNotOurs))
	_, err = cgroup.ParseLocation("/sys/fs/cgroup/memory/docker/abc")
	fmt.Println(errors.Is(err, cgroup.ErrBadLocation))
	// Output:
	// /process_api/ab12/tether-web@k3Jq9x_a
	// <nil>
	// true
	// true
}

// A task's cgroup from creation to removal, as the executor drives it.
func ExampleCreate() {
	h, err := cgroup.Probe()
	if err != nil {
		panic(err)
	}
	if err := h.Usable(); err != nil {
		fmt.Fprintln(os.Stderr, "no containment:", err) // ErrUnavailable
		return
	}
	loc, err := cgroup.LocationFor(h, "web", "k3Jq9x_a")
	if err != nil {
		panic(err)
	}
	cg, err := cgroup.Create(h, loc, cgroup.Limits{Memory: 256, MemoryMax: 512, CPU: 500, Pids: 100})
	var le *cgroup.LimitError
	if errors.As(err, &le) {
		fmt.Fprintln(os.Stderr, "cannot enforce", le.Limit, "on this host:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	// ... the init shim runs cg.Join() before it execs the task ...
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oom, _ := cg.OOMKills()
	if err := cg.Kill(ctx); err != nil {
		panic(err) // a *KillError names what is still alive
	}
	if err := cg.Remove(); err != nil {
		panic(err)
	}
	fmt.Println("OOM kills:", oom)
}
