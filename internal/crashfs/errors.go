package crashfs

import "errors"

// Mounting.
var (
	// ErrNoFUSE means FUSE cannot be mounted here: not Linux, not root, no
	// /dev/fuse, or the kernel refused the mount. Tests skip on it.
	ErrNoFUSE = errors.New("crashfs: FUSE unavailable")
	// ErrBacking means the backing directory cannot be used: missing, not a
	// directory, or holding something the model does not cover.
	ErrBacking = errors.New("crashfs: unusable backing directory")
	// ErrBusy means the mount was still in use at Unmount (an open file, a
	// process inside it); it was detached lazily.
	ErrBusy = errors.New("crashfs: mount busy")
)

// Crash states.
var (
	// ErrNotEmpty means a mountpoint, or the directory a crash state is
	// materialised into, is not empty.
	ErrNotEmpty = errors.New("crashfs: directory not empty")
)
