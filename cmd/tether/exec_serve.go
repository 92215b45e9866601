package main

import (
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/statedir"
)

// serveExecutor runs the binary in executor mode: the driver re-executes
// tether as `tether executor ...`.
func serveExecutor(args []string) int { return server.Serve(args) }

// The files the executor writes the task's output to, in the task's
// directory (<state-dir>/tasks/<id>).
const (
	stdoutFile = statedir.StdoutFile
	stderrFile = statedir.StderrFile
)
