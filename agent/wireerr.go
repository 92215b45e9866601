package agent

import (
	"context"
	"errors"
	"os"
	"slices"
	"syscall"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Errors cross the socket with their identity: the message as the agent
// formed it, the codes of every named error it matches (errors.Is), and, for
// a *driver.TaskError at its top, the task and state. The client rebuilds
// an error whose Error() is the agent's text and which errors.Is and
// errors.As answer as the agent's did for every error named below, so a CLI
// prints the same words and picks the same exit code with or without the
// agent.

// wireCodes are the named errors that cross the socket, each with its code.
// A code is never reused: a client that does not know one ignores it.
var wireCodes = []struct {
	code string
	err  error
}{
	{"driver.unknown-task", driver.ErrUnknownTask},
	{"driver.task-exists", driver.ErrTaskExists},
	{"driver.invalid-task-id", driver.ErrInvalidTaskID},
	{"driver.invalid-spec", driver.ErrInvalidSpec},
	{"driver.state-dir", driver.ErrStateDir},
	{"driver.start-failed", driver.ErrStartFailed},
	{"driver.not-running", driver.ErrNotRunning},
	{"driver.unreachable", driver.ErrUnreachable},
	{"driver.closed", driver.ErrClosed},
	{"driver.injected", driver.ErrInjected},
	{"driver.not-ours", driver.ErrNotOurs},
	{"driver.gone", driver.ErrGone},
	{"store.locked", store.ErrLocked},
	{"store.not-store", store.ErrNotStore},
	{"store.schema", store.ErrSchema},
	{"store.unsafe-path", store.ErrUnsafePath},
	{"store.closed", store.ErrClosed},
	{"store.conflict", store.ErrConflict},
	{"store.task-id", store.ErrTaskID},
	{"store.too-large", store.ErrTooLarge},
	{"store.write", store.ErrWrite},
	{"store.unknown-task", store.ErrUnknownTask},
	{"store.corrupt", store.ErrCorrupt},
	{"store.version", store.ErrVersion},
	{"executor.command-not-found", executor.ErrCommandNotFound},
	{"executor.not-executable", executor.ErrNotExecutable},
	{"executor.unknown-user", executor.ErrUnknownUser},
	{"executor.cap-not-allowed", executor.ErrCapNotAllowed},
	{"executor.unknown-cap", executor.ErrUnknownCap},
	{"executor.work-dir", executor.ErrWorkDir},
	{"executor.launch", executor.ErrLaunch},
	{"executor.limit", executor.ErrLimit},
	{"executor.isolation", executor.ErrIsolation},
	{"executor.not-launched", executor.ErrNotLaunched},
	{"executor.task-exited", executor.ErrTaskExited},
	{"executor.restarting", executor.ErrRestarting},
	{"executor.no-stats", executor.ErrNoStats},
	{"executor.peer-not-executor", executor.ErrPeerNotExecutor},
	{"cgroup.unavailable", cgroup.ErrUnavailable},
	{"cgroup.no-controller", cgroup.ErrNoController},
	{"agent.unknown-desired", ErrUnknownDesired},
	{"agent.name-conflict", ErrNameConflict},
	{"agent.config-dir", ErrConfigDir},
	{"agent.unsupported", ErrUnsupported},
	{"agent.closed", ErrClosed},
	{"agent.bad-request", ErrBadRequest},
	{"agent.protocol", ErrProtocol},
	{"context.canceled", context.Canceled},
	{"context.deadline", context.DeadlineExceeded},
	{"os.not-exist", os.ErrNotExist},
	{"os.permission", os.ErrPermission},
	{"syscall.enospc", syscall.ENOSPC},
}

// wireError is an error on the wire.
type wireError struct {
	// Msg is the error's text (for a task error: the text of its cause).
	Msg   string   `json:"msg"`
	Codes []string `json:"codes,omitempty"`
	// Task and State are a *driver.TaskError's.
	Task  string    `json:"task,omitempty"`
	State fsm.State `json:"state,omitempty"`
}

func toWireError(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error()}
	if te, ok := err.(*driver.TaskError); ok {
		w.Task, w.State, w.Msg = te.Task, te.State, te.Err.Error()
	}
	for _, c := range wireCodes {
		if errors.Is(err, c.err) {
			w.Codes = append(w.Codes, c.code)
		}
	}
	return w
}

// err rebuilds the error.
func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	var e error = &RemoteError{Msg: w.Msg, Codes: w.Codes}
	if w.Task != "" {
		e = &driver.TaskError{Task: w.Task, State: w.State, Err: e}
	}
	return e
}

// RemoteError is an error the agent returned: its text, and the named
// errors it matched there.
type RemoteError struct {
	Msg   string
	Codes []string
}

func (e *RemoteError) Error() string { return e.Msg }

// Is reports whether target is one of the named errors the agent's error
// matched.
func (e *RemoteError) Is(target error) bool {
	for _, c := range wireCodes {
		if c.err == target {
			return slices.Contains(e.Codes, c.code)
		}
	}
	return false
}
