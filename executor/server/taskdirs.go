//go:build linux

package server

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/taskdir"
)

// The shared alloc directory's own directories (Nomad's alloc/data,
// alloc/logs, alloc/tmp): writable by every task of the group, whatever
// user each runs as, as in Nomad.
var allocDirs = []dirMode{
	{"data", 0o777}, {"logs", 0o777}, {"tmp", 0o777 | os.ModeSticky},
}

// dirMode is a directory to make, by its name, and its mode.
type dirMode struct {
	name string
	mode os.FileMode
}

// prepareTaskDirs makes the task's writable directories in dirs, owned by
// the task's user, and its group's shared alloc directory (each executor
// of the group makes what is missing; the first one makes it all), and for
// exec the empty mount point of its root in the private directory. Every
// touch resolves beneath its parent directory without following a
// symbolic link (taskdir.Root), and modes and owners are set through a
// descriptor of each directory: an entry that is not a directory of its
// own (a symbolic link a raw_exec task planted) is an error, and nothing
// it points to is changed.
func prepareTaskDirs(dirs spec.Dirs, tu spec.User, exec bool) error {
	owner := taskdir.Keep
	if tu.Set() {
		owner = taskdir.Owner{UID: tu.UID, GID: tu.GID}
	}
	// ensure makes each of rels beneath base.
	ensure := func(base string, o taskdir.Owner, rels ...dirMode) error {
		r, err := taskdir.OpenRoot(base)
		if err != nil {
			return fmt.Errorf("%w: %w", wire.ErrWorkDir, err)
		}
		defer r.Close()
		for _, d := range rels {
			if err := r.EnsureDir(d.name, d.mode, o); err != nil {
				return fmt.Errorf("%w: %w; remove it", wire.ErrWorkDir, err)
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
		if err := ensure(parent, owner, dirMode{filepath.Base(dirs.Task), 0o755}); err != nil {
			return err
		}
		if err := ensure(filepath.Dir(dirs.Alloc), taskdir.Keep, dirMode{filepath.Base(dirs.Alloc), 0o755}); err != nil {
			return err
		}
		if err := ensure(dirs.Alloc, taskdir.Keep, allocDirs...); err != nil {
			return err
		}
	}
	var own []dirMode
	for _, d := range wire.TaskDirs {
		if d.Name == statedir.AllocDir && dirs.Nomad {
			continue // the group's, made above
		}
		own = append(own, dirMode{d.Name, d.Mode})
	}
	if err := ensure(dirs.Task, owner, own...); err != nil {
		return err
	}
	if exec {
		return ensure(dirs.Private, taskdir.Keep, dirMode{statedir.RootDir, 0o700})
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
