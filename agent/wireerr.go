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
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
	"github.com/tether-fsm/tether/taskfile"
)

// Errors cross the socket with their identity: the message as the agent
// formed it, the codes of every named error it matches (errors.Is), and
// the structured errors a caller takes apart with errors.As: a
// *driver.TaskError (task and state, and its cause's text) and a
// *driver.NameError (the name and its live tasks), wherever they are in
// the chain. The client rebuilds an error whose Error() is the agent's
// text and which errors.Is and errors.As answer as the agent's did for
// every error named below, so a CLI prints the same words and picks the
// same exit code with or without the agent.

// wireCodes are the named errors that cross the socket, each with its code.
// A code is never reused: a client that does not know one ignores it.
// TestWireCodes_NameEveryNamedError holds it to every exported Err of the
// packages a CLI's errors come from.
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
	{"driver.not-notify", driver.ErrNotNotify},
	{"driver.never-ready", driver.ErrNeverReady},
	{"driver.unreachable", driver.ErrUnreachable},
	{"driver.closed", driver.ErrClosed},
	{"driver.injected", driver.ErrInjected},
	{"driver.not-ours", driver.ErrNotOurs},
	{"driver.gone", driver.ErrGone},
	{"driver.ambiguous", driver.ErrAmbiguous},
	{"driver.name-taken", driver.ErrNameTaken},
	{"driver.task-not-killed", driver.ErrTaskNotKilled},
	{"driver.unproven", driver.ErrUnproven},
	{"store.locked", store.ErrLocked},
	{"store.not-store", store.ErrNotStore},
	{"store.schema", store.ErrSchema},
	{"store.unsafe-path", store.ErrUnsafePath},
	{"store.closed", store.ErrClosed},
	{"store.read-only", store.ErrReadOnly},
	{"store.conflict", store.ErrConflict},
	{"store.no-events", store.ErrNoEvents},
	{"store.sequence", store.ErrSequence},
	{"store.task-id", store.ErrTaskID},
	{"store.too-large", store.ErrTooLarge},
	{"store.write", store.ErrWrite},
	{"store.unknown-task", store.ErrUnknownTask},
	{"store.corrupt", store.ErrCorrupt},
	{"store.version", store.ErrVersion},
	{"executor.spawn", executor.ErrSpawn},
	{"executor.ready-timeout", executor.ErrReadyTimeout},
	{"executor.protocol-version", executor.ErrProtocolVersion},
	{"executor.nonce-mismatch", executor.ErrNonceMismatch},
	{"executor.peer-refused", executor.ErrPeerRefused},
	{"executor.peer-not-executor", executor.ErrPeerNotExecutor},
	{"executor.busy", executor.ErrBusy},
	{"executor.bad-config", executor.ErrBadConfig},
	{"executor.side-file-mismatch", executor.ErrSideFileMismatch},
	{"executor.command-not-found", executor.ErrCommandNotFound},
	{"executor.not-executable", executor.ErrNotExecutable},
	{"executor.unknown-user", executor.ErrUnknownUser},
	{"executor.cap-not-allowed", executor.ErrCapNotAllowed},
	{"executor.unknown-cap", executor.ErrUnknownCap},
	{"executor.work-dir", executor.ErrWorkDir},
	{"executor.bad-spec", executor.ErrBadSpec},
	{"executor.launch", executor.ErrLaunch},
	{"executor.no-cgroup", executor.ErrNoCgroup},
	{"executor.limit", executor.ErrLimit},
	{"executor.isolation", executor.ErrIsolation},
	{"executor.exec", executor.ErrExec},
	{"executor.unknown-exec", executor.ErrUnknownExec},
	{"executor.unsupported", executor.ErrUnsupported},
	{"executor.not-launched", executor.ErrNotLaunched},
	{"executor.task-exited", executor.ErrTaskExited},
	{"executor.restarting", executor.ErrRestarting},
	{"executor.no-stats", executor.ErrNoStats},
	{"executor.closed", executor.ErrClosed},
	{"executor.protocol", executor.ErrProtocol},
	{"cgroup.unavailable", cgroup.ErrUnavailable},
	{"cgroup.no-controller", cgroup.ErrNoController},
	{"cgroup.no-hierarchy", cgroup.ErrNoHierarchy},
	{"cgroup.bad-location", cgroup.ErrBadLocation},
	{"cgroup.not-ours", cgroup.ErrNotOurs},
	{"cgroup.bad-limits", cgroup.ErrBadLimits},
	{"cgroup.bad-oom-score-adj", cgroup.ErrBadOOMScoreAdj},
	{"cgroup.not-empty", cgroup.ErrNotEmpty},
	{"cgroup.no-unified", cgroup.ErrNoUnified},
	{"cgroup.thread-move", cgroup.ErrThreadMove},
	{"executor.not-ours", executor.ErrNotOurs},
	{"executor.gone", executor.ErrGone},
	{"executor.seccomp-not-allowed", executor.ErrSeccompNotAllowed},
	{"executor.host-feature", executor.ErrHostFeature},
	{"executor.artifact", executor.ErrArtifact},
	{"executor.template", executor.ErrTemplate},
	{"executor.at-limit", executor.ErrAtLimit},
	{"driver.vanished", driver.ErrVanished},
	{"driver.not-waiting", driver.ErrNotWaiting},
	{"driver.waiting", driver.ErrWaiting},
	{"driver.not-group", driver.ErrNotGroup},
	{"agent.no-agent", ErrNoAgent},
	{"agent.agent-running", ErrAgentRunning},
	{"agent.wedged", ErrWedged},
	{"agent.version", ErrVersion},
	{"agent.peer-refused", ErrPeerRefused},
	{"agent.socket", ErrSocket},
	{"agent.unknown-desired", ErrUnknownDesired},
	{"agent.name-conflict", ErrNameConflict},
	{"agent.config-dir", ErrConfigDir},
	{"agent.unsupported", ErrUnsupported},
	{"agent.closed", ErrClosed},
	{"agent.bad-request", ErrBadRequest},
	{"agent.protocol", ErrProtocol},
	{"job.parse", job.ErrParse},
	{"job.nothing-to-run", job.ErrNothingToRun},
	{"job.bad-input", job.ErrBadInput},
	{"job.not-allowed", job.ErrNotAllowed},
	{"job.shape", job.ErrShape},
	{"taskfile.no-task", taskfile.ErrNoTask},
	{"taskfile.not-runnable", taskfile.ErrNotRunnable},
	{"taskfile.unknown-reference", taskfile.ErrUnknownReference},
	{"taskfile.constraint", taskfile.ErrConstraint},
	{"taskfile.ports", taskfile.ErrPorts},
	{"taskfile.limit", taskfile.ErrLimit},
	{"fsm.invalid-spec", fsm.ErrInvalidSpec},
	{"context.canceled", context.Canceled},
	{"context.deadline", context.DeadlineExceeded},
	{"os.not-exist", os.ErrNotExist},
	{"os.permission", os.ErrPermission},
	{"syscall.enospc", syscall.ENOSPC},
}

// wireError is an error on the wire.
type wireError struct {
	Msg   string   `json:"msg"`
	Codes []string `json:"codes,omitempty"`
	// Task is the first *driver.TaskError of the chain; Name its first
	// *driver.NameError.
	Task *wireTaskError `json:"task,omitempty"`
	Name *wireNameError `json:"name,omitempty"`
	// Parse is its first *job.ParseError (a file's diagnostics).
	Parse *job.ParseError `json:"parse,omitempty"`
}

type wireTaskError struct {
	Task  string    `json:"task"`
	State fsm.State `json:"state,omitempty"`
	// Msg is the text of its cause (TaskError.Err).
	Msg string `json:"msg"`
}

type wireNameError struct {
	Name  string     `json:"name"`
	Tasks []fsm.Task `json:"tasks,omitempty"`
}

func codesOf(err error) []string {
	var codes []string
	for _, c := range wireCodes {
		if errors.Is(err, c.err) {
			codes = append(codes, c.code)
		}
	}
	return codes
}

func toWireError(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error(), Codes: codesOf(err)}
	var te *driver.TaskError
	if errors.As(err, &te) {
		w.Task = &wireTaskError{Task: te.Task, State: te.State, Msg: te.Err.Error()}
	}
	var ne *driver.NameError
	if errors.As(err, &ne) {
		w.Name = &wireNameError{Name: ne.Name, Tasks: ne.Tasks}
	}
	var pe *job.ParseError
	if errors.As(err, &pe) {
		w.Parse = pe
	}
	return w
}

// err rebuilds the error.
func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	return &RemoteError{Msg: w.Msg, Codes: w.Codes, task: w.Task, name: w.Name, parse: w.Parse}
}

// RemoteError is an error the agent returned: its text, and the named
// errors it matched there. errors.As finds in it the *driver.TaskError
// and *driver.NameError the agent's error held (their causes are the
// agent's, with its codes).
type RemoteError struct {
	Msg   string
	Codes []string
	task  *wireTaskError
	name  *wireNameError
	parse *job.ParseError
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

// As sets a **driver.TaskError, a **driver.NameError or a
// **job.ParseError target to the one the agent's error held.
func (e *RemoteError) As(target any) bool {
	switch t := target.(type) {
	case **driver.TaskError:
		if e.task == nil {
			return false
		}
		*t = &driver.TaskError{Task: e.task.Task, State: e.task.State, Err: &RemoteError{Msg: e.task.Msg, Codes: e.Codes, name: e.name}}
		return true
	case **driver.NameError:
		if e.name == nil {
			return false
		}
		*t = &driver.NameError{Name: e.name.Name, Tasks: e.name.Tasks, Err: &RemoteError{Msg: e.Msg, Codes: e.Codes}}
		return true
	case **job.ParseError:
		if e.parse == nil {
			return false
		}
		*t = e.parse
		return true
	}
	return false
}
