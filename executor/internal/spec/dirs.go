//go:build linux

package spec

import (
	"path/filepath"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// Dirs are where a task's directories are on the host.
//
// A task of a task or job file (its spec has an Alloc) has Nomad's layout:
// its task directory (local/, secrets/, tmp/) and its group's shared alloc
// directory (data/, logs/, tmp/) are the spec's, siblings below the
// allocation's directory, and the task starts where Nomad starts it: in
// its task directory (raw_exec), or in "/" of its root (exec). A lone task
// (tether run -- CMD) keeps them in its private directory and starts in
// local/, where no executor file is in its way.
type Dirs struct {
	// Private is the executor's directory (its identity, socket, logs,
	// and an exec task's root mount point).
	Private string
	// Task holds local/, secrets/ and tmp/.
	Task string
	// Alloc is the shared alloc directory.
	Alloc string
	// Nomad is set for Nomad's layout.
	Nomad bool
}

// DirsOf is where the directories of a task of spec s are, for an
// executor of private directory private.
func DirsOf(s fsm.Spec, private string) Dirs {
	if a := s.Alloc; a != nil {
		return Dirs{Private: private, Task: a.TaskDir, Alloc: a.Dir, Nomad: true}
	}
	return Dirs{Private: private, Task: private, Alloc: filepath.Join(private, statedir.AllocDir)}
}

// home is where a task starts when its spec names no working directory,
// and what a relative one is relative to: a host path for raw_exec, a path
// in its root for exec.
func (d Dirs) home(exec bool) string {
	switch {
	case exec && d.Nomad:
		return "/"
	case exec:
		return "/" + statedir.LocalDir
	case d.Nomad:
		return d.Task
	}
	return filepath.Join(d.Task, statedir.LocalDir)
}

// WorkDir is the working directory of a task of spec s: its work_dir,
// relative to where it starts by default, or that default.
func (d Dirs) WorkDir(s fsm.Spec) string {
	home := d.home(s.Driver == wire.ModeExec)
	switch {
	case s.Dir == "":
		return home
	case filepath.IsAbs(s.Dir):
		return s.Dir
	}
	return filepath.Join(home, s.Dir)
}

// paths are where the task finds its directories: host paths for
// raw_exec, paths in its root for exec.
func (d Dirs) paths(exec bool) taskPaths {
	if exec {
		return taskPaths{"/" + statedir.LocalDir, "/" + statedir.SecretsDir, "/" + statedir.TmpDir, "/" + statedir.AllocDir}
	}
	j := func(n string) string { return filepath.Join(d.Task, n) }
	return taskPaths{j(statedir.LocalDir), j(statedir.SecretsDir), j(statedir.TmpDir), d.Alloc}
}
