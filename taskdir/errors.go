package taskdir

import "errors"

// Errors returned by Layout.Resolve and the Root operations.
var (
	// ErrOutside is returned for a path that names something outside the
	// task directory and the alloc directory (or, for a read, outside every
	// directory the caller allowed).
	ErrOutside = errors.New("taskdir: path is outside the task and alloc directories")
	// ErrSymlink is returned when a path crosses a symbolic link, or names
	// one, below a root: nothing follows links there.
	ErrSymlink = errors.New("taskdir: path crosses a symbolic link")
	// ErrNotDir is returned when a path component that must be a directory
	// is not one.
	ErrNotDir = errors.New("taskdir: not a directory")
	// ErrNotRegular is returned when a file opened for reading is not a
	// regular file (a fifo, a device, a directory).
	ErrNotRegular = errors.New("taskdir: not a regular file")
	// ErrUnsupported is returned when the kernel has no openat2 (Linux 5.6
	// or later is needed).
	ErrUnsupported = errors.New("taskdir: openat2 is not available (Linux 5.6 or later is needed)")
)
