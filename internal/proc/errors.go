//go:build linux

package proc

import "errors"

// Errors about process identity. They are the ones every package of
// tether wraps (executor, cgroup, driver name them too), so errors.Is
// holds across the process world.
var (
	// ErrNotOurs: what a record names (a pid, a cgroup, a side file) now
	// belongs to something else than the record describes (start time,
	// boot id, nonce or task differ). Nothing was signalled. The process
	// the record described is gone.
	ErrNotOurs = errors.New("not ours: the identity does not match the record, nothing was signalled")
	// ErrGone: the process a record names no longer exists (exited,
	// reaped, or from an earlier boot).
	ErrGone = errors.New("gone: the process no longer exists")
)
