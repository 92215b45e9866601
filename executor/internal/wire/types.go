//go:build linux

package wire

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// Launch modes: fsm.Spec.Driver's values.
const (
	// ModeExec runs the task sandboxed: in a cgroup of its own, and a
	// cgroup namespace rooted there; in new PID, mount, IPC and UTS
	// namespaces (PIDMode and IPCMode "host" opt out of the first and
	// third) and, for Network "none", a network namespace with loopback
	// alone; in a root of its own of read-only bind mounts
	// (Launch.Chroot) and its own writable directories; as nobody unless
	// User is set; with a new session keyring, no new privileges and a
	// seccomp filter (Docker's default profile unless Seccomp says
	// otherwise, within AllowSeccomp); with, for a root task, the
	// capabilities DefaultAllowedCaps ∩ AllowedCaps, minus CapDrop, plus
	// CapAdd, as its bounding, permitted, effective and inheritable sets,
	// and for any other user exactly CapAdd's (within AllowedCaps), ambient
	// too, and none when it names none. It needs root and task cgroups.
	ModeExec = "exec"
	// ModeRawExec runs the command as is, in a cgroup of its own where the
	// host allows one (else uncontained, with a warning), with the
	// executor's user and capabilities, or the user's when User is set.
	// CapAdd and CapDrop are ignored.
	ModeRawExec = "raw_exec"
)

// ModeHost is the value of fsm.Spec.PIDMode and IPCMode that shares the
// host's namespace.
const ModeHost = "host"

// Policy is the driver's host policy for exec tasks, sent with each
// launch: not part of a task's spec (the log records the spec alone), the
// same for every task a driver starts.
type Policy struct {
	// AllowedCaps is the allow list for cap_add; nil means
	// DefaultAllowedCaps.
	AllowedCaps []string `json:"allowed_caps,omitempty"`
	// AllowSeccomp lists what an exec task's seccomp option may name
	// besides "default": "unconfined" and absolute profile paths. With
	// "unconfined", an exec task also runs without a filter on a host
	// that has none (with a warning) instead of being refused.
	AllowSeccomp []string `json:"allow_seccomp,omitempty"`
	// AllowMissing lists the parts of an exec task's sandbox it may run
	// without where the host lacks them (with a warning): "cgroupns",
	// "keyring". Without it such a host refuses exec tasks, naming the
	// part.
	AllowMissing []string `json:"allow_missing,omitempty"`
	// Chroot lists what an exec task's root is built from: "SRC" or
	// "SRC:DST" (DST a path inside the root), each a read-only bind mount
	// of an existing host path; nil means DefaultChroot.
	Chroot []string `json:"chroot,omitempty"`
	// AllowRead lists host directories a template's source or file, or a
	// local artifact, may be read from besides the task's own and its
	// group's alloc directory; nil allows none.
	AllowRead []string `json:"allow_read,omitempty"`
	// AllowDrivers lists the launch modes allowed (nil: both), and
	// AllowHostNamespaces the namespaces an exec task may share with the
	// host ("pid", "ipc": PIDMode, IPCMode "host"; nil: none).
	AllowDrivers        []string `json:"allow_drivers,omitempty"`
	AllowHostNamespaces []string `json:"allow_host_namespaces,omitempty"`
}

// Launch is what the executor is asked to launch: the task's spec as the
// log records it, and the driver's policy (their fields are promoted:
// l.Command, l.Chroot).
type Launch struct {
	fsm.Spec
	Policy
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
	// because the host has no usable cgroups). Only a launch reply has
	// them (version 6; an executor of version 5 is never asked to launch).
	Warnings []fsm.Warning `json:"warnings,omitempty"`
	// Restarting: the run that exited (Exit) may be restarted by the
	// executor: its restart policy is being asked (the run's tree is
	// still being drained), or a restart's delay runs. The task is not
	// over; the journal (Client.Watch) says what was decided.
	Restarting bool `json:"restarting,omitempty"`
	// Journal is the number of entries in the executor's journal (its
	// restarts, and from version 10 its runs' readiness: see Client.Watch).
	Journal int `json:"journal,omitempty"`
	// Emptied: the task is over and drained, and the executor confirmed
	// its cgroup empty and removed it: nothing of the task is left for a
	// driver to kill, and the executor may be killed at once (version 6;
	// an executor of version 5 never says so, and its task's cgroup is
	// killed again by the driver).
	Emptied bool `json:"emptied,omitempty"`
	// ExecsOwed: the task is over, and a command exec'd into it has
	// exited whose connection has not had its exit status yet (it may
	// ask with exec-wait after the task's end). The executor lingers
	// for it before it exits (up to a bound): a driver asks it to exit
	// (Shutdown) rather than killing it at once, even when Emptied.
	ExecsOwed bool `json:"execs_owed,omitempty"`
	// Ready: the current run of a notify task sent READY=1 (version 8),
	// and NotifyStatus is the last STATUS= it sent.
	Ready        bool   `json:"ready,omitempty"`
	NotifyStatus string `json:"notify_status,omitempty"`
	// ReadyJournalled: the current run's readiness is in the journal
	// (version 10): Journal counts its ready entry, which a watch
	// returns, and the driver records the ready event from it. False
	// for an executor of an earlier version, and for a run whose ready
	// entry could not be written (its journal failed): then the driver
	// that waits records the ready itself.
	ReadyJournalled bool `json:"ready_journalled,omitempty"`
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
	// Stdin, Stdout and Stderr are what the command reads and writes
	// without TTY. The client relays them through pipes: the command
	// never holds a descriptor of the caller's (a file, a socket, a
	// terminal), which a task could open through /proc/PID/fd. A nil
	// Stdin is an empty input; a nil Stdout or Stderr discards.
	// ExecProcess.Wait returns once the command has exited and what it
	// wrote is relayed; the copy of Stdin may go on until Stdin returns
	// (as os/exec's does), but no longer than the ExecProcess.
	Stdin  io.Reader `json:"-"`
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`
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
