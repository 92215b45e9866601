package agent

import (
	"errors"
	"fmt"
)

// Errors of finding and reaching an agent.
var (
	// ErrNoAgent: no agent serves the state directory (no socket, or a
	// socket nobody listens on: a killed agent's, which the next agent
	// removes). The CLI works daemonless then.
	ErrNoAgent = errors.New("agent: no agent serves this state directory")
	// ErrAgentRunning is wrapped by *RunningError: another agent holds
	// the state directory's agent lock.
	ErrAgentRunning = errors.New("agent: another agent serves this state directory")
	// ErrWedged is wrapped by *WedgedError: the agent did not answer within
	// the client's deadline (stopped, frozen, or overloaded). Nothing is
	// waited for past the deadline.
	ErrWedged = errors.New("agent: the agent does not answer")
	// ErrVersion is wrapped by *VersionError: the agent and the client
	// speak different protocol versions (one was upgraded, the other not).
	ErrVersion = errors.New("agent: protocol version mismatch")
	// ErrPeerRefused: the other end of the socket is not a process the
	// agent serves (or, for the client, not a process it trusts as the
	// agent): neither root nor the state directory's owner.
	ErrPeerRefused = errors.New("agent: peer refused")
	// ErrSocket: the agent's socket path is unusable (not a socket, too
	// deep to bind, refused by the file system).
	ErrSocket = errors.New("agent: unusable socket")
	// ErrProtocol: a frame that does not decode, is too large, or breaks
	// the protocol's order.
	ErrProtocol = errors.New("agent: protocol error")
	// ErrBadRequest: a request that decoded but is not valid (an unknown
	// operation, a missing or malformed field).
	ErrBadRequest = errors.New("agent: bad request")
)

// Errors of the desired state.
var (
	// ErrConfigDir: the --config-dir (or one of its files) is unsafe to
	// take tasks from: group- or world-writable, owned by someone other
	// than root or the agent's user, or a symbolic link out of it.
	ErrConfigDir = errors.New("agent: unsafe config directory")
	// ErrUnknownDesired: no desired task has that name.
	ErrUnknownDesired = errors.New("agent: no desired task has that name")
	// ErrNameConflict: a name declared twice (two task files, or a task
	// file and `tether enable`).
	ErrNameConflict = errors.New("agent: desired task name declared twice")
	// ErrUnsupported: an operation an agent does not serve. Every
	// operation of protocol 2 is served; an agent of protocol 1 answered
	// gc and salvage with it, and its wire code stays.
	ErrUnsupported = errors.New("agent: operation not served by the agent")
	// ErrClosed: the agent is shutting down.
	ErrClosed = errors.New("agent: closed")
)

// RunningError reports that another agent holds the state directory.
type RunningError struct {
	StateDir string
	PID      int // 0 when it has not recorded its pid yet
}

func (e *RunningError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("agent: another agent serves %s (it has not recorded its pid yet)", e.StateDir)
	}
	return fmt.Sprintf("agent: another agent (pid %d) serves %s", e.PID, e.StateDir)
}

func (e *RunningError) Unwrap() error { return ErrAgentRunning }

// WedgedError reports an agent that did not answer within the deadline.
type WedgedError struct {
	PID      int // the agent's, from the socket's peer credentials (0: unknown)
	Socket   string
	Deadline string // the deadline, as the client had it
	During   string // what was awaited: "the handshake", "the answer to start", ...
}

func (e *WedgedError) Error() string {
	who := "the agent"
	if e.PID > 0 {
		who = fmt.Sprintf("the agent (pid %d)", e.PID)
	}
	return fmt.Sprintf("agent: %s at %s did not answer within %s (waiting for %s): it may be stopped (SIGSTOP), frozen or overloaded",
		who, e.Socket, e.Deadline, e.During)
}

func (e *WedgedError) Unwrap() error { return ErrWedged }

// VersionError reports a protocol version mismatch, naming both versions.
type VersionError struct {
	Agent  int // the agent's protocol version
	Client int // this client's
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("agent: the agent speaks protocol version %d and this tether speaks %d: restart the agent with this tether (after an upgrade, the running agent is the old binary)",
		e.Agent, e.Client)
}

func (e *VersionError) Unwrap() error { return ErrVersion }
