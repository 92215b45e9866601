//go:build linux

package executor

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

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/logs"
)

// Launch modes.
const (
	// ModeExec runs the task isolated: in a cgroup of its own; in new PID,
	// mount, IPC and UTS namespaces (PIDMode and IPCMode "host" opt out of
	// the first and third); pivoted into a root of read-only bind mounts
	// (Chroot) and its own writable directories; as nobody unless User is
	// set; with no new privileges; and with the capabilities
	// DefaultAllowedCaps ∩ AllowedCaps, minus CapDrop, plus CapAdd, as its
	// bounding, permitted, effective and inheritable sets (and ambient for
	// a non-root task). It needs root and task cgroups.
	ModeExec = "exec"
	// ModeRawExec runs the command as is, in a cgroup of its own where the
	// host allows one (else uncontained, with a warning), with the
	// executor's user and capabilities, or the user's when User is set.
	// CapAdd and CapDrop are ignored.
	ModeRawExec = "raw_exec"
)

// Host modes for LaunchSpec.PIDMode and IPCMode.
const ModeHost = "host"

// LaunchSpec describes the task to launch.
type LaunchSpec struct {
	Mode    string   `json:"mode"`    // ModeExec or ModeRawExec
	Command string   `json:"command"` // a path, or a name looked up in the task's PATH
	Args    []string `json:"args,omitempty"`
	// Env is the task file's environment. It is laid over the variables
	// the executor sets (PATH, HOME, TETHER_TASK_*, and NOMAD_* for a job
	// file): see TaskEnv.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory. "" is the task's own directory
	// (TaskLocalDir). For raw_exec a relative Dir is relative to it; for
	// exec Dir is a path inside the task's root, a relative one relative
	// to /local.
	Dir string `json:"dir,omitempty"`
	// User is a user name or uid. "": the executor's own user for
	// raw_exec, nobody for exec.
	User    string   `json:"user,omitempty"`
	CapAdd  []string `json:"cap_add,omitempty"`
	CapDrop []string `json:"cap_drop,omitempty"`
	// AllowedCaps is the allow list for CapAdd; nil means DefaultAllowedCaps.
	AllowedCaps []string `json:"allowed_caps"`

	// Limits are the task cgroup's limits (the task file's resources).
	Limits cgroup.Limits `json:"limits,omitzero"`
	// OOMScoreAdj is the task's oom_score_adj; nil means 0.
	OOMScoreAdj *int `json:"oom_score_adj,omitempty"`
	// PIDMode and IPCMode are "" (namespaces of the task's own) or
	// ModeHost; exec only.
	PIDMode string `json:"pid_mode,omitempty"`
	IPCMode string `json:"ipc_mode,omitempty"`
	// Chroot lists what an exec task's root is built from: "SRC" or
	// "SRC:DST" (DST a path inside the root), each a read-only bind mount
	// of an existing host path; nil means DefaultChroot.
	Chroot []string `json:"chroot,omitempty"`
	// Logs configures the rotation of the task's stdout and stderr; zero
	// fields take Nomad's defaults (10 files of 10 MB).
	Logs logs.Config `json:"logs,omitzero"`

	// Name is the task's name (TETHER_TASK_NAME, NOMAD_TASK_NAME); Job and
	// Group the Nomad job and group of a job file (then NOMAD_* are set).
	Name  string `json:"name,omitempty"`
	Job   string `json:"job,omitempty"`
	Group string `json:"group,omitempty"`

	// Restart is the task's restart policy: the executor, which is there
	// when the task exits, restarts it (journalled ahead: see
	// JournalFile). nil never restarts.
	Restart *fsm.RestartPolicy `json:"restart,omitempty"`
}

// Status is what the executor knows of its task.
type Status struct {
	Launched  bool   `json:"launched"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// Exited: the task (its leader) has exited; Wait also waits for the
	// rest of its tree.
	Exited bool           `json:"exited"`
	Exit   fsm.ExitStatus `json:"exit"`
	// Warnings are what the launch did differently from what was asked,
	// for the caller to show once (a raw_exec task that runs uncontained
	// because the host has no usable cgroups).
	Warnings []string `json:"warnings,omitempty"`
	// Restarting: the run that exited (Exit) may be restarted by the
	// executor: its restart policy is being asked (the run's tree is
	// still being drained), or a restart's delay runs. The task is not
	// over; the journal (Client.Watch) says what was decided.
	Restarting bool `json:"restarting,omitempty"`
	// Journal is the number of entries in the executor's restart journal
	// (see Client.Watch).
	Journal int `json:"journal,omitempty"`
}

// Over reports whether the task is over for good: its last run exited and
// no restart of it may follow.
func (s Status) Over() bool { return s.Exited && !s.Restarting }

// The task's own directories, below its task directory. An exec task sees
// them at /local, /secrets, /tmp and /alloc in its root.
const (
	TaskLocalDir   = "local"   // its working directory by default, and HOME for exec
	TaskSecretsDir = "secrets" // 0700
	TaskTmpDir     = "tmp"
	TaskAllocDir   = "alloc" // NOMAD_ALLOC_DIR
	// rootDir is the empty mount point an exec task's root is built on
	// (in the task's mount namespace only).
	rootDir = "root"
)

// taskDirs are the task's writable directories with their modes.
var taskDirs = []struct {
	name string
	mode os.FileMode
}{
	{TaskLocalDir, 0o755}, {TaskSecretsDir, 0o700}, {TaskTmpDir, 0o777 | os.ModeSticky}, {TaskAllocDir, 0o755},
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// nobody is the user an exec task runs as by default.
const nobody = "nobody"

// taskUser is a resolved LaunchSpec.User; uid -1 means the executor's own.
type taskUser struct {
	uid, gid int
	groups   []int
	home     string
}

func (tu taskUser) set() bool { return tu.uid >= 0 }

// lookupUser resolves a user name or uid. "" is the executor's own user.
func lookupUser(name string) (taskUser, error) {
	if name == "" {
		tu := taskUser{uid: -1, gid: -1, home: os.Getenv("HOME")}
		if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil && u.HomeDir != "" {
			tu.home = u.HomeDir
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
			return taskUser{uid: 65534, gid: 65534, home: "/"}, nil
		}
		return taskUser{}, fmt.Errorf("%w: %q: %w", ErrUnknownUser, name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return taskUser{}, fmt.Errorf("%w: %q has no numeric uid/gid", ErrUnknownUser, name)
	}
	tu := taskUser{uid: uid, gid: gid, home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.Atoi(g); err == nil {
				tu.groups = append(tu.groups, n)
			}
		}
	}
	return tu, nil
}

// userOf is the user a task of spec runs as: exec defaults to nobody.
func userOf(spec LaunchSpec) (taskUser, error) {
	name := spec.User
	if name == "" && spec.Mode == ModeExec {
		name = nobody
	}
	return lookupUser(name)
}

// ValidateUser checks that name (a user name or uid) exists on this host,
// as a launch would: the driver runs it before spawning anything. "" is
// fine (the executor's own user, or nobody for exec).
func ValidateUser(name string) error {
	_, err := lookupUser(name)
	return err
}

// resolveCommand finds the executable the way execvp would, telling a
// missing command from one that cannot be executed.
func resolveCommand(cmd, dir, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, checkExecutable(p)
	}
	if pathEnv == "" {
		pathEnv = defaultPath
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
		if errors.Is(err, ErrNotExecutable) && notExec == nil {
			notExec = err
		}
	}
	if notExec != nil {
		return "", notExec
	}
	return "", fmt.Errorf("%w: %q not in PATH %s", ErrCommandNotFound, cmd, pathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s", ErrCommandNotFound, p)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrNotExecutable, p, err)
	case fi.IsDir():
		return fmt.Errorf("%w: %s is a directory", ErrNotExecutable, p)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%w: %s has no execute permission", ErrNotExecutable, p)
	}
	return nil
}

// execErr classifies an execve or fork error.
func execErr(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %s: %w", ErrCommandNotFound, path, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ETXTBSY):
		return fmt.Errorf("%w: %s: %w", ErrNotExecutable, path, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrLaunch, path, err)
}

func envList(env map[string]string) []string {
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

func pathsFor(mode, taskDir string) taskPaths {
	if mode == ModeExec {
		return taskPaths{"/" + TaskLocalDir, "/" + TaskSecretsDir, "/" + TaskTmpDir, "/" + TaskAllocDir}
	}
	j := func(n string) string { return filepath.Join(taskDir, n) }
	return taskPaths{j(TaskLocalDir), j(TaskSecretsDir), j(TaskTmpDir), j(TaskAllocDir)}
}

// TaskEnv is the environment a task of spec gets from an executor of
// taskDir running it as a user whose home is home: PATH (a default when
// the spec has none: the executor's own PATH for raw_exec, a standard one
// for exec), HOME (the user's; /local for exec), TETHER_TASK_ID (the task
// directory's name), TETHER_TASK_NAME, TETHER_TASK_DIR (its local
// directory), and for a job file (Job set) Nomad's NOMAD_TASK_NAME,
// NOMAD_TASK_DIR, NOMAD_ALLOC_DIR, NOMAD_SECRETS_DIR, NOMAD_JOB_NAME,
// NOMAD_GROUP_NAME and, for the limits that are set, NOMAD_MEMORY_LIMIT,
// NOMAD_MEMORY_MAX_LIMIT and NOMAD_CPU_LIMIT. The spec's Env overrides any
// of them.
func TaskEnv(spec LaunchSpec, taskDir, home string) map[string]string {
	p := pathsFor(spec.Mode, taskDir)
	id := filepath.Base(taskDir)
	name := spec.Name
	if name == "" {
		name = id
	}
	env := map[string]string{
		"PATH":             defaultPath,
		"HOME":             home,
		"TETHER_TASK_ID":   id,
		"TETHER_TASK_NAME": name,
		"TETHER_TASK_DIR":  p.local,
	}
	if spec.Mode == ModeExec {
		env["HOME"] = p.local
	} else if own := os.Getenv("PATH"); own != "" {
		env["PATH"] = own
	}
	if env["HOME"] == "" {
		env["HOME"] = p.local
	}
	if spec.Job != "" {
		env["NOMAD_JOB_NAME"] = spec.Job
		env["NOMAD_GROUP_NAME"] = spec.Group
		env["NOMAD_TASK_NAME"] = name
		env["NOMAD_TASK_DIR"] = p.local
		env["NOMAD_ALLOC_DIR"] = p.alloc
		env["NOMAD_SECRETS_DIR"] = p.secrets
		if spec.Limits.Memory > 0 {
			env["NOMAD_MEMORY_LIMIT"] = strconv.FormatInt(spec.Limits.Memory, 10)
		}
		if spec.Limits.MemoryMax > 0 {
			env["NOMAD_MEMORY_MAX_LIMIT"] = strconv.FormatInt(spec.Limits.MemoryMax, 10)
		}
		if spec.Limits.CPU > 0 {
			env["NOMAD_CPU_LIMIT"] = strconv.FormatInt(spec.Limits.CPU, 10)
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	return env
}

// prepareTaskDirs makes the task's writable directories (and, for exec,
// the empty mount point of its root) in taskDir, owned by the task's user.
// An existing entry that is not a directory of its own (a symbolic link a
// raw_exec task planted) is an error.
func prepareTaskDirs(taskDir string, tu taskUser, exec bool) error {
	mk := func(name string, mode os.FileMode, chown bool) error {
		p := filepath.Join(taskDir, name)
		if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: create %s: %w", ErrWorkDir, p, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrWorkDir, p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %s is not a directory (%s); remove it", ErrWorkDir, p, fi.Mode().Type())
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("%w: chmod %s: %w", ErrWorkDir, p, err)
		}
		if chown && tu.set() {
			if err := os.Lchown(p, tu.uid, tu.gid); err != nil {
				return fmt.Errorf("%w: chown %s to %d:%d: %w", ErrWorkDir, p, tu.uid, tu.gid, err)
			}
		}
		return nil
	}
	for _, d := range taskDirs {
		if err := mk(d.name, d.mode, true); err != nil {
			return err
		}
	}
	if exec {
		return mk(rootDir, 0o700, false)
	}
	return nil
}

// logsConfig fills a spec's logs block with Nomad's defaults.
func logsConfig(c logs.Config) logs.Config {
	if c.MaxFiles == 0 {
		c.MaxFiles = logs.DefaultMaxFiles
	}
	if c.MaxFileSizeMB == 0 {
		c.MaxFileSizeMB = logs.DefaultMaxFileSizeMB
	}
	return c
}
