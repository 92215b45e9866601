package taskfile

import "errors"

// Errors returned after parsing: selecting, planning and instantiating a
// task, interpolating, checking constraints and allocating ports. Parse
// itself reports hcl.Diagnostics, each with its file:line:column.
var (
	// ErrNoTask is returned when a selection names no task or group of the
	// file, or names several.
	ErrNoTask = errors.New("taskfile: no such task")
	// ErrNotRunnable is returned for a task tether does not run: a driver
	// other than exec and raw_exec, or a stanza it refuses (network mode
	// bridge, a volume, a Vault token...) in the task or its group.
	ErrNotRunnable = errors.New("taskfile: task cannot run here")
	// ErrUnknownReference is returned when a run-time ${...} names a
	// variable, attribute or meta key this task and host do not have.
	ErrUnknownReference = errors.New("taskfile: unknown run-time variable")
	// ErrConstraint is returned when a constraint on this host's
	// attributes is not met.
	ErrConstraint = errors.New("taskfile: constraint not met")
	// ErrPorts is returned when a port cannot be allocated: a static port
	// in use or held by another task, or no free dynamic port.
	ErrPorts = errors.New("taskfile: cannot allocate port")
	// ErrLimit is returned when making a task ready would pass one of the
	// Limits the file was read with (a run-time interpolation making more
	// than one value may hold), or its group's count passes
	// Options.MaxCount.
	ErrLimit = errors.New("taskfile: limit exceeded")
)
