// Command tether-executor is the standalone tether executor: a small binary
// that only serves executor mode, for agents that want the executor's memory
// footprint smaller than their own binary's. Pass
// SpawnConfig.Command = []string{"/path/to/tether-executor"}.
package main

import (
	"os"

	"github.com/tether-fsm/tether/executor/server"
)

func main() {
	os.Exit(server.Serve(os.Args[1:]))
}
