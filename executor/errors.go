//go:build linux

package executor

import "github.com/tether-fsm/tether/executor/internal/wire"

// Errors returned by Spawn and Reattach.
var (
	// ErrSpawn is returned when the executor process could not be started or
	// died before it reported ready.
	ErrSpawn = wire.ErrSpawn
	// ErrReadyTimeout is returned when the executor did not report ready
	// within SpawnConfig.ReadyTimeout (or before the context ended).
	ErrReadyTimeout = wire.ErrReadyTimeout
	// ErrProtocolVersion is returned when the executor speaks another
	// protocol version.
	ErrProtocolVersion = wire.ErrProtocolVersion
	// ErrNonceMismatch is returned when the executor answering is not the one
	// started with the expected nonce.
	ErrNonceMismatch = wire.ErrNonceMismatch
	// ErrPeerRefused is returned when the executor refused the connection
	// because the peer runs as another (non-root) user.
	ErrPeerRefused = wire.ErrPeerRefused
	// ErrPeerNotExecutor is returned when the process serving the task's
	// socket is not the executor whose identity was proven (SO_PEERCRED
	// names another pid, or a uid that is neither the caller's nor root):
	// a listener planted at the socket path. Nothing is sent on such a
	// connection. The executor itself may be alive and ours: this says
	// only that its socket cannot be trusted.
	ErrPeerNotExecutor = wire.ErrPeerNotExecutor
	// ErrBusy is returned when the task directory already has a live executor.
	ErrBusy = wire.ErrBusy
	// ErrBadConfig is returned for an unusable SpawnConfig (empty task dir,
	// a nonce with characters other than letters, digits, '-' and '_').
	ErrBadConfig = wire.ErrBadConfig
)

// Errors about process identity.
var (
	// ErrNotOurs is returned when a pid now belongs to another process than
	// the identity describes (start time, boot id or nonce differ). Nothing is
	// signalled. It also means that the process the identity described is
	// gone. It is the one ErrNotOurs of tether: cgroup.ErrNotOurs and
	// driver.ErrNotOurs are the same error.
	ErrNotOurs = wire.ErrNotOurs
	// ErrGone is returned when the process an identity describes no longer
	// exists (exited, reaped, or from an earlier boot); the same error as
	// driver.ErrGone.
	ErrGone = wire.ErrGone
	// ErrSideFileMismatch is returned for a side file (launch record, exit
	// record) that does not match the log: another nonce, boot or task
	// process, a symbolic link, not a regular file, or too large. Such a
	// file is not believed and nothing is signalled because of it.
	// It matches ErrNotOurs too.
	ErrSideFileMismatch = wire.ErrSideFileMismatch
)

// Errors returned by Launch. They travel across the protocol, so errors.Is
// works on the driver side.
var (
	// ErrCommandNotFound is returned when the task's command does not exist.
	ErrCommandNotFound = wire.ErrCommandNotFound
	// ErrNotExecutable is returned when the command exists but cannot be
	// executed (no execute permission, a directory, not an executable format).
	ErrNotExecutable = wire.ErrNotExecutable
	// ErrUnknownUser is returned when LaunchSpec.User names no known user.
	ErrUnknownUser = wire.ErrUnknownUser
	// ErrCapNotAllowed is wrapped by CapError for a capability outside the
	// allow list.
	ErrCapNotAllowed = wire.ErrCapNotAllowed
	// ErrUnknownCap is wrapped by CapError for a name that is no capability.
	ErrUnknownCap = wire.ErrUnknownCap
	// ErrWorkDir is returned when the working directory is missing or not a
	// directory.
	ErrWorkDir = wire.ErrWorkDir
	// ErrBadSpec is returned for a malformed LaunchSpec (unknown mode, empty
	// command).
	ErrBadSpec = wire.ErrBadSpec
	// ErrLaunch is returned for any other launch failure: fork or exec
	// failed, or a step of the init shim did (the message names the step).
	ErrLaunch = wire.ErrLaunch
	// ErrNoCgroup is returned when a task needs a cgroup of its own (exec,
	// or any limit) and the host gives none (not root, no delegation); the
	// message says why.
	ErrNoCgroup = wire.ErrNoCgroup
	// ErrLimit wraps a *cgroup.LimitError: a limit whose controller this
	// host lacks.
	ErrLimit = wire.ErrLimit
	// ErrIsolation is returned when an exec task cannot be isolated here
	// (the executor is not root).
	ErrIsolation = wire.ErrIsolation
	// ErrSeccompNotAllowed is returned for an exec task whose seccomp
	// option (unconfined, a profile) the operator's Policy.AllowSeccomp
	// does not hold.
	ErrSeccompNotAllowed = wire.ErrSeccompNotAllowed
	// ErrHostFeature is returned for an exec task whose sandbox needs a
	// feature this host lacks (a seccomp filter, a cgroup or network
	// namespace, keyrings, openat2) and the operator did not let it run
	// without; the message names the feature and the opt-out.
	ErrHostFeature = wire.ErrHostFeature
	// ErrArtifact is returned when an artifact of the task could not be
	// fetched before its first launch (the message names the source).
	ErrArtifact = wire.ErrArtifact
	// ErrTemplate is returned when a template of the task could not be
	// rendered before its first launch (the message names the template).
	ErrTemplate = wire.ErrTemplate
)

// Errors returned by Exec.
var (
	// ErrExec is returned when a command could not be started inside the
	// task; the message names the step that failed (joining the task's
	// cgroup or namespaces, the user switch, the exec). A command that does
	// not exist in the task is ErrCommandNotFound, one that cannot be
	// executed ErrNotExecutable.
	ErrExec = wire.ErrExec
	// ErrAtLimit is returned when a command could not be started in the
	// task because the task is at its pids limit; the message says so
	// with the count.
	ErrAtLimit = wire.ErrAtLimit
	// ErrUnknownExec is returned by ExecProcess.Wait and Signal for an exec
	// the executor does not know on this connection.
	ErrUnknownExec = wire.ErrUnknownExec
)

// Errors returned by the control calls.
var (
	// ErrUnsupported is returned by a World (or a Conn of one) for what it
	// does not model: a simulated world has no cgroup to read stats from
	// and runs no command inside a task.
	ErrUnsupported = wire.ErrUnsupported
	// ErrNotLaunched is returned by Signal and Stop before a task was launched.
	ErrNotLaunched = wire.ErrNotLaunched
	// ErrTaskExited is returned by Signal and Exec after the task has
	// exited (or while it is being stopped).
	ErrTaskExited = wire.ErrTaskExited
	// ErrRestarting is returned by Signal and Exec while the task's last
	// run has exited and its restart policy restarts it (a restart's delay
	// runs): there is no task process to signal or join.
	ErrRestarting = wire.ErrRestarting
	// ErrNoStats is returned by Stats for a task without a cgroup (the host
	// gives none) or whose cgroup is gone.
	ErrNoStats = wire.ErrNoStats
	// ErrClosed is returned by calls on a closed client or after the control
	// connection was lost.
	ErrClosed = wire.ErrClosed
	// ErrProtocol is returned for a malformed or oversized protocol frame.
	ErrProtocol = wire.ErrProtocol
)

// CapError names the capabilities that ValidateCaps (or a launch) refused:
// NotAllowed lists those outside the allow list, Unknown the names that
// are no capability at all (lower case, without the CAP_ prefix). It
// unwraps to ErrCapNotAllowed and/or ErrUnknownCap.
type CapError = wire.CapError

// RemoteError is an error the executor reported over the protocol. It
// unwraps to the named error it stands for, so errors.Is works across the
// process boundary.
type RemoteError = wire.RemoteError
