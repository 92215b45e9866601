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
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/statedir"
)

// The shared alloc directory's own directories (Nomad's alloc/data,
// alloc/logs, alloc/tmp): writable by every task of the group, whatever
// user each runs as, as in Nomad.
var allocDirs = []struct {
	name string
	mode os.FileMode
}{
	{"data", 0o777}, {"logs", 0o777}, {"tmp", 0o777 | os.ModeSticky},
}

// prepareTaskDirs makes the task's writable directories in dirs, owned by
// the task's user, and its group's shared alloc directory (each executor
// of the group makes what is missing; the first one makes it all), and for
// exec the empty mount point of its root in the private directory. An
// existing entry that is not a directory of its own (a symbolic link a
// raw_exec task planted) is an error.
func prepareTaskDirs(dirs spec.Dirs, tu spec.User, exec bool) error {
	mk := func(p string, mode os.FileMode, chown bool) error {
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
	if dirs.Nomad {
		// The allocation's directory (allocs/ALLOC in a state directory):
		// searchable, so that a raw_exec task of another user reaches
		// ../alloc from its task directory, and not listable.
		parent := filepath.Dir(dirs.Task)
		if err := os.MkdirAll(parent, 0o711); err != nil {
			return fmt.Errorf("%w: create %s: %w", wire.ErrWorkDir, parent, err)
		}
		if err := mk(dirs.Task, 0o755, true); err != nil {
			return err
		}
		if err := mk(dirs.Alloc, 0o755, false); err != nil {
			return err
		}
		for _, d := range allocDirs {
			if err := mk(filepath.Join(dirs.Alloc, d.name), d.mode, false); err != nil {
				return err
			}
		}
	}
	for _, d := range wire.TaskDirs {
		if d.Name == statedir.AllocDir && dirs.Nomad {
			continue // the group's, made above
		}
		if err := mk(filepath.Join(dirs.Task, d.Name), d.Mode, true); err != nil {
			return err
		}
	}
	if exec {
		return mk(filepath.Join(dirs.Private, statedir.RootDir), 0o700, false)
	}
	return nil
}

// taskBinds are an exec task's writable directories as its root binds
// them: /local, /secrets and /tmp from its task directory, /alloc from its
// group's alloc directory.
func taskBinds(dirs spec.Dirs) []shim.BindMount {
	var out []shim.BindMount
	for _, d := range wire.TaskDirs {
		src := filepath.Join(dirs.Task, d.Name)
		if d.Name == statedir.AllocDir {
			src = dirs.Alloc
		}
		out = append(out, shim.BindMount{Src: src, Dst: "/" + d.Name})
	}
	return out
}
