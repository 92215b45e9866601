package taskdir

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The directories of a task directory and of an alloc directory.
const (
	Local   = "local"   // NOMAD_TASK_DIR
	Secrets = "secrets" // NOMAD_SECRETS_DIR, 0700
	Tmp     = "tmp"
	Alloc   = "alloc" // where an exec task sees the alloc directory: /alloc
	// AllocData, AllocLogs and AllocTmp are the alloc directory's own.
	AllocData = "data"
	AllocLogs = "logs"
	AllocTmp  = "tmp"
)

// Layout is where one task's directories are.
type Layout struct {
	// TaskDir is the host path of the task directory (local/, secrets/,
	// tmp/ below it).
	TaskDir string
	// AllocDir is the host path of the group's shared alloc directory. In
	// Nomad's layout it is the task directory's sibling "alloc", which is
	// what a raw_exec task reaches as ../alloc.
	AllocDir string
	// Chroot is set for an exec task: it sees its directories inside its
	// root (/local, /secrets, /tmp, /alloc) and starts in "/".
	Chroot bool
}

// Target is a resolved path: Rel below the directory Root.
type Target struct {
	Root string // a host directory: the task's, the alloc's, or an allowed one
	Rel  string // a clean relative path below Root ("." for Root itself)
}

// Host is the target's host path.
func (t Target) Host() string { return filepath.Join(t.Root, t.Rel) }

// WorkDir is where the task starts: its task directory, or "/" in an exec
// task's root.
func (l Layout) WorkDir() string {
	if l.Chroot {
		return "/"
	}
	return l.TaskDir
}

// TaskPath is how the task sees dir, one of Local, Secrets, Tmp or Alloc.
func (l Layout) TaskPath(dir string) string {
	switch {
	case l.Chroot:
		return "/" + dir
	case dir == Alloc:
		return l.AllocDir
	}
	return filepath.Join(l.TaskDir, dir)
}

// Env is Nomad's directory variables as the task sees them:
// NOMAD_TASK_DIR, NOMAD_ALLOC_DIR and NOMAD_SECRETS_DIR.
func (l Layout) Env() map[string]string {
	return map[string]string{
		"NOMAD_TASK_DIR":    l.TaskPath(Local),
		"NOMAD_ALLOC_DIR":   l.TaskPath(Alloc),
		"NOMAD_SECRETS_DIR": l.TaskPath(Secrets),
	}
}

// Resolve maps p, a path as the task names it (absolute, or relative to
// its working directory, as a template or artifact destination is), to
// the directory it lands in. It is lexical: Root's operations refuse the
// symbolic links a real path may cross. Only the task directory and the
// alloc directory are reachable; for an exec task, only what its root
// shows of them (/local, /secrets, /tmp, /alloc).
func (l Layout) Resolve(p string) (Target, error) {
	if p == "" {
		return Target{}, fmt.Errorf("%w: an empty path", ErrOutside)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return Target{}, fmt.Errorf("%w: %q holds a NUL byte", ErrOutside, p)
	}
	if l.Chroot {
		v := filepath.Clean("/" + p) // relative to "/", its working directory
		if rel, ok := below("/"+Alloc, v); ok {
			return Target{Root: l.AllocDir, Rel: rel}, nil
		}
		for _, d := range []string{Local, Secrets, Tmp} {
			if rel, ok := below("/"+d, v); ok {
				return Target{Root: l.TaskDir, Rel: filepath.Join(d, rel)}, nil
			}
		}
		return Target{}, fmt.Errorf("%w: %s (an exec task sees only /local, /secrets, /tmp and /alloc of its directories)", ErrOutside, p)
	}
	h := p
	if !filepath.IsAbs(h) {
		h = filepath.Join(l.TaskDir, h)
	}
	return l.host(filepath.Clean(h), p, nil)
}

// ResolveRead maps p, a host path (relative ones relative to the task
// directory, as Nomad reads a template's source or a local artifact), to
// the directory it is read from: the task directory, the alloc directory,
// or one of allow (host directories the operator allowed). For an exec
// task, /local, /secrets, /tmp and /alloc also name its own directories
// as it sees them.
func (l Layout) ResolveRead(p string, allow []string) (Target, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return Target{}, fmt.Errorf("%w: %q", ErrOutside, p)
	}
	h := p
	if !filepath.IsAbs(h) {
		h = filepath.Join(l.TaskDir, h)
	}
	t, err := l.host(filepath.Clean(h), p, allow)
	if err != nil && l.Chroot && filepath.IsAbs(p) {
		if t2, err2 := l.Resolve(p); err2 == nil {
			return t2, nil
		}
	}
	return t, err
}

func (l Layout) host(h, orig string, allow []string) (Target, error) {
	if l.TaskDir != "" {
		if rel, ok := below(filepath.Clean(l.TaskDir), h); ok {
			return Target{Root: l.TaskDir, Rel: rel}, nil
		}
	}
	if l.AllocDir != "" {
		if rel, ok := below(filepath.Clean(l.AllocDir), h); ok {
			return Target{Root: l.AllocDir, Rel: rel}, nil
		}
		// Nomad's ../alloc from the task directory.
		if l.TaskDir != "" {
			if rel, ok := below(filepath.Join(filepath.Dir(filepath.Clean(l.TaskDir)), Alloc), h); ok {
				return Target{Root: l.AllocDir, Rel: rel}, nil
			}
		}
	}
	for _, a := range allow {
		if a == "" || !filepath.IsAbs(a) {
			continue
		}
		if rel, ok := below(filepath.Clean(a), h); ok {
			return Target{Root: filepath.Clean(a), Rel: rel}, nil
		}
	}
	return Target{}, fmt.Errorf("%w: %s", ErrOutside, orig)
}

// below reports whether p is dir or below it, and p relative to dir.
func below(dir, p string) (string, bool) {
	if p == dir {
		return ".", true
	}
	prefix := dir
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	rel, ok := strings.CutPrefix(p, prefix)
	return rel, ok
}
