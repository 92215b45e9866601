//go:build linux

package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// nobody is the user an exec task runs as by default.
const nobody = "nobody"

// User is a resolved fsm.Spec.User; UID -1 means the executor's own.
type User struct {
	UID, GID int
	Groups   []int
	Home     string
}

func (tu User) Set() bool { return tu.UID >= 0 }

// lookupUser resolves a user name or uid. "" is the executor's own user.
func LookupUser(name string) (User, error) {
	if name == "" {
		tu := User{UID: -1, GID: -1, Home: os.Getenv("HOME")}
		if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil && u.HomeDir != "" {
			tu.Home = u.HomeDir
		}
		return tu, nil
	}
	var u *user.User
	var err error
	if _, nerr := strconv.Atoi(name); nerr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		if name == nobody || name == "65534" {
			// A host without a nobody entry still has the overflow uid.
			return User{UID: 65534, GID: 65534, Home: "/"}, nil
		}
		return User{}, fmt.Errorf("%w: %q: %w", wire.ErrUnknownUser, name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return User{}, fmt.Errorf("%w: %q has no numeric uid/gid", wire.ErrUnknownUser, name)
	}
	tu := User{UID: uid, GID: gid, Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.Atoi(g); err == nil {
				tu.Groups = append(tu.Groups, n)
			}
		}
	}
	return tu, nil
}

// userOf is the user a task of spec runs as: exec defaults to nobody.
func UserOf(s fsm.Spec) (User, error) {
	name := s.User
	if name == "" && s.Driver == wire.ModeExec {
		name = nobody
	}
	return LookupUser(name)
}

// ValidateUser checks that name (a user name or uid) exists on this host,
// as a launch would: the driver runs it before spawning anything. "" is
// fine (the executor's own user, or nobody for exec).
func ValidateUser(name string) error {
	_, err := LookupUser(name)
	return err
}

// resolveCommand finds the executable the way execvp would, telling a
// missing command from one that cannot be executed.
func ResolveCommand(cmd, dir, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, checkExecutable(p)
	}
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	var notExec error
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, cmd)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, wire.ErrNotExecutable) && notExec == nil {
			notExec = err
		}
	}
	if notExec != nil {
		return "", notExec
	}
	return "", fmt.Errorf("%w: %q not in PATH %s", wire.ErrCommandNotFound, cmd, pathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s", wire.ErrCommandNotFound, p)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", wire.ErrNotExecutable, p, err)
	case fi.IsDir():
		return fmt.Errorf("%w: %s is a directory", wire.ErrNotExecutable, p)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%w: %s has no execute permission", wire.ErrNotExecutable, p)
	}
	return nil
}

// execErr classifies an execve or fork error.
func ExecErr(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %s: %w", wire.ErrCommandNotFound, path, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ETXTBSY):
		return fmt.Errorf("%w: %s: %w", wire.ErrNotExecutable, path, err)
	case errors.Is(err, syscall.E2BIG):
		return fmt.Errorf("%w: %s: %w: the arguments and environment together are more than the kernel takes "+
			"(a quarter of the stack limit, 'ulimit -s'); make them smaller, or raise the limit tether runs with", wire.ErrLaunch, path, err)
	}
	return fmt.Errorf("%w: %s: %w", wire.ErrLaunch, path, err)
}

func EnvList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// taskPaths are where a task finds its directories: host paths for
// raw_exec, paths inside its root for exec.
type taskPaths struct{ local, secrets, tmp, alloc string }

// TaskEnv is the environment a task of spec gets from an executor of
// dirs running it as a user whose home is home: PATH (a default when
// the spec has none: the executor's own PATH for raw_exec, a standard one
// for exec), HOME (the user's; /local for exec), TETHER_TASK_ID (the
// private directory's name), TETHER_TASK_NAME, TETHER_TASK_DIR (its local
// directory), and for a job file (Job set) Nomad's NOMAD_TASK_NAME,
// NOMAD_TASK_DIR, NOMAD_ALLOC_DIR, NOMAD_SECRETS_DIR, NOMAD_JOB_NAME,
// NOMAD_GROUP_NAME and, for the limits that are set, NOMAD_MEMORY_LIMIT,
// NOMAD_MEMORY_MAX_LIMIT and NOMAD_CPU_LIMIT. The spec's Env overrides any
// of them.
func TaskEnv(spec fsm.Spec, dirs Dirs, home string) map[string]string {
	p := dirs.paths(spec.Driver == wire.ModeExec)
	id := filepath.Base(dirs.Private)
	name := spec.Name
	if name == "" {
		name = id
	}
	env := map[string]string{
		"PATH":             DefaultPath,
		"HOME":             home,
		"TETHER_TASK_ID":   id,
		"TETHER_TASK_NAME": name,
		"TETHER_TASK_DIR":  p.local,
	}
	if spec.Driver == wire.ModeExec {
		env["HOME"] = p.local
	} else if own := os.Getenv("PATH"); own != "" {
		env["PATH"] = own
	}
	if env["HOME"] == "" {
		env["HOME"] = p.local
	}
	if spec.Job != "" || spec.Alloc != nil {
		if spec.Job != "" {
			env["NOMAD_JOB_NAME"] = spec.Job
			env["NOMAD_GROUP_NAME"] = spec.Group
		}
		if a := spec.Alloc; a != nil {
			env["NOMAD_ALLOC_ID"] = a.ID
			env["NOMAD_ALLOC_INDEX"] = strconv.Itoa(a.Index)
		}
		env["NOMAD_TASK_NAME"] = name
		env["NOMAD_TASK_DIR"] = p.local
		env["NOMAD_ALLOC_DIR"] = p.alloc
		env["NOMAD_SECRETS_DIR"] = p.secrets
		if r := spec.Resources; r.MemoryMB > 0 {
			env["NOMAD_MEMORY_LIMIT"] = strconv.Itoa(r.MemoryMB)
		}
		if r := spec.Resources; r.MemoryMaxMB > 0 {
			env["NOMAD_MEMORY_MAX_LIMIT"] = strconv.Itoa(r.MemoryMaxMB)
		}
		if r := spec.Resources; r.CPU > 0 {
			env["NOMAD_CPU_LIMIT"] = strconv.Itoa(r.CPU)
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	return env
}
