package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/tether-fsm/tether/internal/clikit"
)

// The fleet's commands are another binary's: tether-fleet links the etcd
// client (gRPC, protobuf, zap), which would double the start of this
// binary, and this binary is the CLI, the executor and the init shim,
// started up to three times for every task start. tether hands them over
// whole: `tether cluster …`, and `tether agent` given a flag of its fleet
// mode. See docs/fleet.md, "Two binaries".

// fleetBinary serves the fleet's commands.
const fleetBinary = "tether-fleet"

// fleetAgentFlags are the flags that put `tether agent` in its fleet mode.
var fleetAgentFlags = []string{"node", "cluster", "lease-ttl", "cluster-tls-ca", "cluster-tls-cert", "cluster-tls-key"}

// fleetCommand returns the command of args that tether-fleet serves:
// "cluster", or "agent" given a flag of its fleet mode (before any "--");
// "" for any other.
func fleetCommand(args []string) string {
	at, cmd, _ := findCommand(args, (&cli{}).flags("help"))
	switch {
	case at < 0:
		return ""
	case cmd.name == "cluster":
		return "cluster"
	case args[at] != "agent":
		return ""
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasPrefix(a, "--") && slices.Contains(fleetAgentFlags, name) {
			return "agent"
		}
	}
	return ""
}

// handOver runs tether-fleet in this process's place (exec: the same pid,
// streams, signals, inherited descriptors and exit code) with args as
// given, for the command what. It returns only when it cannot.
func (c *cli) handOver(what string, args []string) int {
	if what == "agent" {
		what = "tether agent --node/--cluster"
	} else {
		what = "tether " + what
	}
	path, err := clikit.Sibling(fleetBinary)
	if err != nil {
		c.errorf("%s needs the %s binary, which links the etcd client that tether leaves out of its own start path; %v", what, fleetBinary, err)
		fmt.Fprintf(c.stderr, "  'make build' builds both (bin/tether and bin/%s): install %s beside tether\n", fleetBinary, fleetBinary)
		return exitError
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	c.errorf("cannot run %s for %s: %v", path, what, err)
	return exitError
}

// cmdCluster is reached only when tether's own command line parsing runs
// (`tether help cluster`): it hands the command over.
func (c *cli) cmdCluster(args []string) int {
	return c.handOver("cluster", append([]string{"cluster"}, args...))
}
