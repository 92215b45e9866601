package main

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/taskfile"
)

// parseSignal reads a signal as a name ("SIGTERM", "TERM", "term") or a
// number ("15").
func parseSignal(s string) (syscall.Signal, error) { return taskfile.ParseSignal(s) }

// signalName prints a signal as its name, or its number if it has none.
func signalName(sig int) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return strconv.Itoa(sig)
}
