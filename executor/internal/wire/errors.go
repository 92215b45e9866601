//go:build linux

package wire

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// Errors returned by Spawn and Reattach.
var (
	// ErrSpawn is returned when the executor process could not be started or
	// died before it reported ready.
	ErrSpawn = errors.New("executor: spawn failed")
	// ErrReadyTimeout is returned when the executor did not report ready
	// within SpawnConfig.ReadyTimeout (or before the context ended).
	ErrReadyTimeout = errors.New("executor: timed out waiting for the executor to be ready")
	// ErrProtocolVersion is returned when the executor speaks another
	// protocol version.
	ErrProtocolVersion = errors.New("executor: protocol version mismatch")
	// ErrNonceMismatch is returned when the executor answering is not the one
	// started with the expected nonce.
	ErrNonceMismatch = errors.New("executor: nonce mismatch")
	// ErrPeerRefused is returned when the executor refused the connection
	// because the peer runs as another (non-root) user.
	ErrPeerRefused = errors.New("executor: peer refused")
	// ErrPeerNotExecutor is returned when the process serving the task's
	// socket is not the executor whose identity was proven (SO_PEERCRED
	// names another pid, or a uid that is neither the caller's nor root):
	// a listener planted at the socket path. Nothing is sent on such a
	// connection. The executor itself may be alive and ours: this says
	// only that its socket cannot be trusted.
	ErrPeerNotExecutor = errors.New("executor: the socket's peer is not the executor")
	// ErrBusy is returned when the task directory already has a live executor.
	ErrBusy = errors.New("executor: task directory has a live executor")
	// ErrBadConfig is returned for an unusable SpawnConfig (empty task dir,
	// a nonce with characters other than letters, digits, '-' and '_').
	ErrBadConfig = errors.New("executor: bad spawn config")
)

// Errors about process identity.
var (
	// ErrNotOurs is returned when a pid now belongs to another process than
	// the identity describes (start time, boot id or nonce differ). Nothing is
	// signalled. It also means that the process the identity described is
	// gone. It is the one ErrNotOurs of tether: cgroup.ErrNotOurs and
	// driver.ErrNotOurs are the same error.
	ErrNotOurs = proc.ErrNotOurs
	// ErrGone is returned when the process an identity describes no longer
	// exists (exited, reaped, or from an earlier boot); the same error as
	// driver.ErrGone.
	ErrGone = proc.ErrGone
	// ErrSideFileMismatch is returned for a side file (launch record, exit
	// record) that does not match the log: another nonce, boot or task
	// process, a symbolic link, not a regular file, or too large. Such a
	// file is not believed and nothing is signalled because of it.
	// It matches ErrNotOurs too.
	ErrSideFileMismatch = fmt.Errorf("executor: side file does not match the log: %w", proc.ErrNotOurs)
)

// Errors returned by Launch. They travel across the protocol, so errors.Is
// works on the driver side.
var (
	// ErrCommandNotFound is returned when the task's command does not exist.
	ErrCommandNotFound = errors.New("executor: command not found")
	// ErrNotExecutable is returned when the command exists but cannot be
	// executed (no execute permission, a directory, not an executable format).
	ErrNotExecutable = errors.New("executor: command not executable")
	// ErrUnknownUser is returned when the spec's User names no known user.
	ErrUnknownUser = errors.New("executor: unknown user")
	// ErrCapNotAllowed is wrapped by CapError for a capability outside the
	// allow list.
	ErrCapNotAllowed = errors.New("executor: capability not allowed")
	// ErrUnknownCap is wrapped by CapError for a name that is no capability.
	ErrUnknownCap = errors.New("executor: unknown capability")
	// ErrWorkDir is returned when the working directory is missing or not a
	// directory.
	ErrWorkDir = errors.New("executor: bad working directory")
	// ErrBadSpec is returned for a launch whose spec or policy is malformed
	// (fsm.Spec.Validate refused it, or a chroot entry is bad); it matches
	// fsm.ErrInvalidSpec too.
	ErrBadSpec = fmt.Errorf("executor: bad launch spec: %w", fsm.ErrInvalidSpec)
	// ErrLaunch is returned for any other launch failure: fork or exec
	// failed, or a step of the init shim did (the message names the step).
	ErrLaunch = errors.New("executor: launch failed")
	// ErrNoCgroup is returned when a task needs a cgroup of its own (exec,
	// or any limit) and the host gives none (not root, no delegation); the
	// message says why.
	ErrNoCgroup = errors.New("executor: no cgroup for the task")
	// ErrLimit wraps a *cgroup.LimitError: a limit whose controller this
	// host lacks.
	ErrLimit = errors.New("executor: limit cannot be enforced on this host")
	// ErrIsolation is returned when an exec task cannot be isolated here
	// (the executor is not root).
	ErrIsolation = errors.New("executor: cannot isolate the task")
	// ErrSeccompNotAllowed is returned for an exec task whose seccomp
	// option (unconfined, a profile) the operator's allow list
	// (Policy.AllowSeccomp) does not hold.
	ErrSeccompNotAllowed = errors.New("executor: seccomp option not allowed by the operator")
	// ErrHostFeature is returned for an exec task whose sandbox needs a
	// feature this host lacks (a seccomp filter, a cgroup or network
	// namespace, keyrings, openat2), unless the operator let exec tasks
	// run without it; the message names the feature and the opt-out.
	ErrHostFeature = errors.New("executor: the host lacks a feature of the exec sandbox")
	// ErrArtifact is returned when one of the task's artifacts could not
	// be fetched before its first launch; the message names the source
	// and why (unreachable, a checksum mismatch, an archive entry that
	// leaves its destination...).
	ErrArtifact = errors.New("executor: artifact not fetched")
	// ErrTemplate is returned when one of the task's templates could not
	// be rendered before its first launch; the message names the template
	// and why (a function that needs a server, a read or a write outside
	// the task's directories...).
	ErrTemplate = errors.New("executor: template not rendered")
)

// Errors returned by Exec.
var (
	// ErrExec is returned when a command could not be started inside the
	// task; the message names the step that failed (joining the task's
	// cgroup or namespaces, the user switch, the exec). A command that does
	// not exist in the task is ErrCommandNotFound, one that cannot be
	// executed ErrNotExecutable.
	ErrExec = errors.New("executor: exec in the task failed")
	// ErrAtLimit is returned when a command could not be started in the
	// task because the task is at a limit of its cgroup (its pids limit);
	// the message names the limit and the count.
	ErrAtLimit = errors.New("executor: the task is at a limit of its cgroup")
	// ErrUnknownExec is returned by ExecProcess.Wait and Signal for an exec
	// the executor does not know on this connection.
	ErrUnknownExec = errors.New("executor: no such exec")
)

// Errors returned by the control calls.
var (
	// ErrUnsupported is returned by a World (or a Conn of one) for what it
	// does not model: a simulated world has no cgroup to read stats from
	// and runs no command inside a task.
	ErrUnsupported = errors.New("executor: not supported by this process world")
	// ErrNotLaunched is returned by Signal and Stop before a task was launched.
	ErrNotLaunched = errors.New("executor: task not launched")
	// ErrTaskExited is returned by Signal and Exec after the task has
	// exited (or while it is being stopped).
	ErrTaskExited = errors.New("executor: task already exited")
	// ErrRestarting is returned by Signal and Exec while the task's last
	// run has exited and its restart policy restarts it (a restart's delay
	// runs): there is no task process to signal or join.
	ErrRestarting = errors.New("executor: task is restarting (no process until its restart)")
	// ErrNoStats is returned by Stats for a task without a cgroup (the host
	// gives none) or whose cgroup is gone.
	ErrNoStats = errors.New("executor: no stats for the task")
	// ErrClosed is returned by calls on a closed client or after the control
	// connection was lost.
	ErrClosed = errors.New("executor: connection closed")
	// ErrProtocol is returned for a malformed or oversized protocol frame.
	ErrProtocol = errors.New("executor: protocol error")
)

// CapError names the capabilities that ValidateCaps (or a launch) refused.
type CapError struct {
	// NotAllowed lists requested capabilities outside the allow list, in
	// lower case without the CAP_ prefix (for example "net_raw").
	NotAllowed []string
	// Unknown lists names that are no capability at all.
	Unknown []string
}

func (e *CapError) Error() string {
	var parts []string
	if len(e.NotAllowed) > 0 {
		parts = append(parts, fmt.Sprintf("%v: %s", ErrCapNotAllowed, strings.Join(e.NotAllowed, ", ")))
	}
	if len(e.Unknown) > 0 {
		parts = append(parts, fmt.Sprintf("%v: %s", ErrUnknownCap, strings.Join(e.Unknown, ", ")))
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns ErrCapNotAllowed and/or ErrUnknownCap.
func (e *CapError) Unwrap() []error {
	var errs []error
	if len(e.NotAllowed) > 0 {
		errs = append(errs, ErrCapNotAllowed)
	}
	if len(e.Unknown) > 0 {
		errs = append(errs, ErrUnknownCap)
	}
	return errs
}

// RemoteError is an error the executor reported over the protocol. It
// unwraps to the named error it stands for, so errors.Is works across the
// process boundary.
type RemoteError struct {
	Msg string
	Err error // the named error, or nil for an unclassified one
	// Version is the executor's protocol version, when it refused the
	// client's (ErrProtocolVersion).
	Version int
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the named error the executor reported.
func (e *RemoteError) Unwrap() error { return e.Err }

// definite marks a preparation's failure that no second try can mend (an
// artifact block tether cannot fetch whatever the network does): the
// executor does not try it again under the restart policy. It stays in
// the executor: its text is its cause's.
type definite struct{ error }

func (d definite) Unwrap() error { return d.error }

// Definite marks err as a failure no second try can mend.
func Definite(err error) error { return definite{err} }

// IsDefinite reports whether err was marked by Definite.
func IsDefinite(err error) bool {
	var d definite
	return errors.As(err, &d)
}
