package driver

import (
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// Errors of task lookup and validation.
var (
	// ErrUnknownTask: no task with this id exists in the store.
	ErrUnknownTask = errors.New("driver: unknown task")
	// ErrTaskExists: StartTask was given an id that is already used.
	ErrTaskExists = errors.New("driver: task id already exists")
	// ErrInvalidTaskID: the id is empty, too long, or could escape the
	// state directory.
	ErrInvalidTaskID = statedir.ErrInvalidTaskID
	// ErrInvalidSpec: the task's spec was refused before anything was
	// spawned (no command, unknown driver mode, disallowed capability). It
	// is fsm.ErrInvalidSpec: one error, whichever layer refused.
	ErrInvalidSpec = fsm.ErrInvalidSpec
	// ErrStateDir: the state directory is unusable as it is (shared,
	// owned by someone else, a symbolic link); it is never chmodded.
	ErrStateDir = statedir.ErrStateDir
)

// Errors of task names (see names.go), in a *NameError.
var (
	// ErrAmbiguous: a name stands for several live tasks; an id must say
	// which.
	ErrAmbiguous = errors.New("driver: ambiguous task name")
	// ErrNameTaken: a task of the name is live; stop it, or replace it.
	ErrNameTaken = errors.New("driver: a task of this name is live")
)

// Errors of the task lifecycle.
var (
	// ErrStartFailed: the task did not reach running; its executor was
	// reaped. The *TaskError carries the reason.
	ErrStartFailed = errors.New("driver: task failed to start")
	// ErrNotRunning: the operation needs a running task.
	ErrNotRunning = errors.New("driver: task is not running")
	// ErrNotNotify: WaitReady of a task that has no readiness ("notify",
	// or a tcp, http or exec check): it never says it is ready.
	ErrNotNotify = errors.New(`driver: the task has no readiness ("notify" or a check)`)
	// ErrNeverReady: the task's run ended before it was ready (it sent
	// READY=1, or its check passed).
	ErrNeverReady = errors.New("driver: the task ended before it was ready")
	// ErrUnreachable: the task's executor (its identity proven, or not yet
	// disproven) did not answer within the probe timeout: frozen, busy, or
	// on its way out. Nothing was done to it.
	ErrUnreachable = errors.New("driver: the task's executor does not answer")
	// ErrClosed: the driver was closed.
	ErrClosed = errors.New("driver: closed")
	// ErrTaskNotKilled: a task's executor is dead, and something of the
	// task could not be killed (its cgroup could not be emptied).
	ErrTaskNotKilled = errors.New("driver: the executor is dead; its task could not all be killed")
	// ErrUnproven: nothing readable of a lost task's log proves which
	// processes are its own (SettleLost); nothing was killed.
	ErrUnproven = errors.New("driver: nothing readable proves which processes are the task's")
	// ErrVanished: the task is no longer in the store (a maintenance put
	// a store that lacks it in place, or removed it) while this driver was
	// driving it; what was spawned for it was killed, since no Recover
	// could find it.
	ErrVanished = errors.New("driver: the task is no longer in the store")
	// ErrInjected is the error returned by an injected fault (tests, and
	// TETHER_FAULT in real-process tests).
	ErrInjected = errors.New("driver: injected fault")
	// ErrNotWaiting: StartCreated was asked to start a task that is not
	// waiting for its turn (it was started, or settled, meanwhile).
	ErrNotWaiting = errors.New("driver: the task is not waiting to start")
	// ErrWaiting: WaitTask of a task of a group that waits for its turn:
	// nothing here will start it; wait for its group (RunGroup).
	ErrWaiting = errors.New("driver: the task waits for its turn in its group")
)

// Errors of groups (RunGroup, StopGroup).
var (
	// ErrNotGroup: the ids given are not the tasks of one allocation.
	ErrNotGroup = errors.New("driver: not the tasks of one group")
)

// Errors of the process world (executor.World), the same values as
// executor's (and cgroup's ErrNotOurs): errors.Is holds whichever package
// names them.
var (
	// ErrNotOurs: what the log records (a pid, a cgroup, a side file) now
	// belongs to something else (start time, boot id, nonce or task
	// differ). Nothing was signalled, nothing believed.
	ErrNotOurs = executor.ErrNotOurs
	// ErrGone: the executor recorded for the task no longer exists.
	ErrGone = executor.ErrGone
)

// TaskError is an error about one task, carrying its id and, where it came
// from the log, the state it was in.
type TaskError struct {
	Task  string
	State fsm.State
	Err   error
}

func (e *TaskError) Error() string {
	if e.State != fsm.StateNone {
		return fmt.Sprintf("task %q (%s): %v", e.Task, e.State, e.Err)
	}
	return fmt.Sprintf("task %q: %v", e.Task, e.Err)
}

func (e *TaskError) Unwrap() error { return e.Err }

// causeOf is the category of a failure, recorded beside its reason
// (fsm.Cause), so that no reader of the log has to match its text: the
// executor's named errors, the spec's refusal, an injected fault.
func causeOf(err error) fsm.Cause {
	for _, c := range []struct {
		err   error
		cause fsm.Cause
	}{
		{executor.ErrCommandNotFound, fsm.CauseCommandNotFound},
		{executor.ErrNotExecutable, fsm.CauseNotExecutable},
		{executor.ErrUnknownUser, fsm.CauseUnknownUser},
		{executor.ErrCapNotAllowed, fsm.CauseCapNotAllowed},
		{executor.ErrUnknownCap, fsm.CauseUnknownCap},
		{executor.ErrWorkDir, fsm.CauseWorkDir},
		{executor.ErrNoCgroup, fsm.CauseNoCgroup},
		{executor.ErrLimit, fsm.CauseLimit},
		{executor.ErrIsolation, fsm.CauseIsolation},
		{executor.ErrSeccompNotAllowed, fsm.CauseSeccompNotAllowed},
		{executor.ErrHostFeature, fsm.CauseHostFeature},
		{executor.ErrArtifact, fsm.CauseArtifact},
		{executor.ErrTemplate, fsm.CauseTemplate},
		{ErrInjected, fsm.CauseInjected},
		{fsm.ErrInvalidSpec, fsm.CauseInvalidSpec}, // after the named ones it may wrap
		{executor.ErrSpawn, fsm.CauseSpawn},
		{executor.ErrReadyTimeout, fsm.CauseSpawn},
	} {
		if errors.Is(err, c.err) {
			return c.cause
		}
	}
	return fsm.CauseOther
}
