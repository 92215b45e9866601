package driver_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// An agent embeds the driver: its own binary serves executor mode (here the
// test binary, whose TestMain calls server.Serve for "executor"), every
// start is written ahead to the store, and a restarted agent calls Recover.
func ExampleDriver() {
	stateDir, _ := os.MkdirTemp("", "tether-example-")
	defer os.RemoveAll(stateDir)
	self, _ := os.Executable()

	d, err := driver.Open(driver.Config{
		StateDir:        stateDir,
		ExecutorCommand: []string{self, "executor"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	ctx := context.Background()
	if _, err := d.Recover(ctx); err != nil { // after a crash: reconcile first
		fmt.Println(err)
		return
	}

	_, err = d.StartTask(ctx, "hello", fsm.Spec{Driver: "raw_exec", Command: "/bin/echo", Args: []string{"hi"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	final, _ := d.WaitTask(ctx, "hello")
	fmt.Println(final.State, final.Exit)

	_, err = d.StartTask(ctx, "ping", fsm.Spec{Driver: "exec", Command: "/bin/ping", CapAdd: []string{"net_raw"}})
	fmt.Println(err)
	// Output:
	// exited exit code 0
	// task "ping" (failed): fsm: invalid task spec: executor: capability not allowed: net_raw
}
