package main

import (
	"syscall"

	"github.com/tether-fsm/tether/taskfile"
)

// parseSignal reads a signal as a name ("SIGTERM", "TERM", "term") or a
// number ("15").
func parseSignal(s string) (syscall.Signal, error) { return taskfile.ParseSignal(s) }
