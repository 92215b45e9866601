package main

import (
	"github.com/tether-fsm/tether/executor/prepare"
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/statedir"
)

// serveExecutor runs the binary in executor mode: the driver re-executes
// tether as `tether executor ...`. Its executor prepares the tasks of job
// files (artifacts, templates): tether links those packages anyway.
func serveExecutor(args []string) int { return server.ServeWith(args, prepare.Preparer{}) }

// The files the executor writes the task's output to, in the task's
// directory (<state-dir>/tasks/<id>).
const (
	stdoutFile = statedir.StdoutFile
	stderrFile = statedir.StderrFile
)
