package clikit

import "errors"

// Errors of finding a sibling binary.
var (
	// ErrNoSibling: the binary is neither beside this one nor on $PATH.
	ErrNoSibling = errors.New("clikit: binary not found")
)
