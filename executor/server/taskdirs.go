//go:build linux

package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/statedir"
)

// prepareTaskDirs makes the task's writable directories (and, for exec,
// the empty mount point of its root) in taskDir, owned by the task's user.
// An existing entry that is not a directory of its own (a symbolic link a
// raw_exec task planted) is an error.
func prepareTaskDirs(taskDir string, tu spec.User, exec bool) error {
	mk := func(name string, mode os.FileMode, chown bool) error {
		p := filepath.Join(taskDir, name)
		if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: create %s: %w", wire.ErrWorkDir, p, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", wire.ErrWorkDir, p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory (%s); remove it", wire.ErrWorkDir, p, fi.Mode().Type())
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("%w: chmod %s: %w", wire.ErrWorkDir, p, err)
		}
		if chown && tu.Set() {
			if err := os.Lchown(p, tu.UID, tu.GID); err != nil {
				return fmt.Errorf("%w: chown %s to %d:%d: %w", wire.ErrWorkDir, p, tu.UID, tu.GID, err)
			}
		}
		return nil
	}
	for _, d := range wire.TaskDirs {
		if err := mk(d.Name, d.Mode, true); err != nil {
			return err
		}
	}
	if exec {
		return mk(statedir.RootDir, 0o700, false)
	}
	return nil
}
