//go:build linux

package wire

import (
	"fmt"
	"os"
	"strings"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/logs"
	"github.com/tether-fsm/tether/statedir"
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
	// (statedir.LocalDir). For raw_exec a relative Dir is relative to it; for
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
	// statedir.JournalFile). nil never restarts.
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

// ExecSpec is a command to run inside the running task.
type ExecSpec struct {
	// Argv is the command and its arguments. Argv[0] is looked up in the
	// task's PATH, inside the task's root for an exec task.
	Argv []string `json:"argv"`
	// Env holds "KEY=VALUE" entries laid over the task's environment.
	Env []string `json:"env,omitempty"`
	// TTY runs the command on a new pseudo-terminal (its controlling
	// terminal, and its stdin, stdout and stderr), of Rows by Cols when
	// they are set. ExecProcess.Terminal is its master.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Stdin, Stdout and Stderr are the command's own descriptors without
	// TTY (nil: /dev/null). The executor gets copies; the caller keeps
	// its own.
	Stdin  *os.File `json:"-"`
	Stdout *os.File `json:"-"`
	Stderr *os.File `json:"-"`
}

// maxExecArgs bounds an exec's argv and env (each entry, and all together:
// a frame is at most maxFrame).
const MaxExecArgs = 4096

func (s ExecSpec) Validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return fmt.Errorf("%w: exec needs a command", ErrBadSpec)
	}
	if len(s.Argv)+len(s.Env) > MaxExecArgs {
		return fmt.Errorf("%w: exec of %d arguments and variables, at most %d", ErrBadSpec, len(s.Argv)+len(s.Env), MaxExecArgs)
	}
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: exec argument %d holds a NUL byte", ErrBadSpec, i)
		}
	}
	for _, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("%w: exec environment entry %q: want KEY=VALUE without NUL", ErrBadSpec, kv)
		}
	}
	return nil
}

// ExecStatus is what the executor says of a command started by Exec: its
// process (in the host's PID namespace) and, once it has exited, how.
type ExecStatus struct {
	PID       int            `json:"pid"`
	StartTime uint64         `json:"start_time"`
	Exited    bool           `json:"exited,omitempty"`
	Exit      fsm.ExitStatus `json:"exit"`
}

// TaskDirs are the task's writable directories with their modes.
var TaskDirs = []struct {
	Name string
	Mode os.FileMode
}{
	{statedir.LocalDir, 0o755}, {statedir.SecretsDir, 0o700}, {statedir.TmpDir, 0o777 | os.ModeSticky}, {statedir.AllocDir, 0o755},
}
