//go:build linux

package executor_test

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// ExampleSpawn starts an executor, runs a task in it and stops it.
func ExampleSpawn() {
	ctx := context.Background()
	c, err := executor.Spawn(ctx, executor.SpawnConfig{
		Command: []string{"/usr/local/bin/tether-executor"},
		TaskDir: "/var/lib/tether/tasks/web-1",
		Nonce:   "3f9c2a7d1e4b",
	})
	if err != nil {
		fmt.Println("spawn:", err) // nothing was left running
		return
	}
	defer c.Close()
	if _, err := c.Launch(ctx, executor.Launch{Spec: fsm.Spec{Driver: executor.ModeExec, Command: "/usr/bin/python3", Args: []string{"-m", "http.server"}}}); err != nil {
		_ = c.Shutdown(ctx) // before launch the executor must not outlive the error
		return
	}
	st, err := c.Stop(ctx, syscall.SIGTERM, 5*time.Second)
	fmt.Println(st, err)
}

// ExampleValidateCaps is the check a driver runs before spawning anything.
func ExampleValidateCaps() {
	err := executor.ValidateCaps([]string{"CAP_NET_RAW"}, nil, nil)
	fmt.Println(err)
	// Output: executor: capability not allowed: net_raw
}
