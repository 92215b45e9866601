//go:build !withexec

package main

import (
	"errors"
	"fmt"
	"os"
)

// Temporary until the executor package lands (the driver has the same
// build tag): executor mode is unavailable.
func serveExecutor(args []string) int {
	fmt.Fprintln(os.Stderr, "tether: this build has no executor (build with -tags withexec)")
	return 1
}

// The executor's launch errors, by their text, until the package lands.
var (
	errCommandNotFound = errors.New("executor: command not found")
	errNotExecutable   = errors.New("executor: command not executable")
)

// The files the executor writes the task's output to (executor.StdoutFile
// and executor.StderrFile).
const (
	stdoutFile = "stdout.log"
	stderrFile = "stderr.log"
)
