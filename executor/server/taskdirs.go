//go:build linux

package server

import (
	"fmt"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/taskdir"
)

// prepareTaskDirs makes the task's writable directories (and, for exec,
// the empty mount point of its root) in taskDir, owned by the task's user.
// Every touch resolves beneath the task directory without following a
// symbolic link (taskdir.Root), and modes and owners are set through a
// descriptor of each directory: an entry that is not a directory of its
// own (a symbolic link a raw_exec task planted) is an error, and nothing
// it points to is changed.
func prepareTaskDirs(taskDir string, tu spec.User, exec bool) error {
	r, err := taskdir.OpenRoot(taskDir)
	if err != nil {
		return fmt.Errorf("%w: %w", wire.ErrWorkDir, err)
	}
	defer r.Close()
	owner := taskdir.Keep
	if tu.Set() {
		owner = taskdir.Owner{UID: tu.UID, GID: tu.GID}
	}
	for _, d := range wire.TaskDirs {
		if err := r.EnsureDir(d.Name, d.Mode, owner); err != nil {
			return fmt.Errorf("%w: %w; remove it", wire.ErrWorkDir, err)
		}
	}
	if exec {
		if err := r.EnsureDir(statedir.RootDir, 0o700, taskdir.Keep); err != nil {
			return fmt.Errorf("%w: %w; remove it", wire.ErrWorkDir, err)
		}
	}
	return nil
}
