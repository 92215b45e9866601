package fsm

import (
	"fmt"
	"time"
)

// EffectType names something the lifecycle wants done in the world.
type EffectType uint8

// The effects.
const (
	EffectNone EffectType = iota
	// EffectSpawnExecutor: start an executor with the given nonce. Outcome:
	// executor-up or spawn-failed.
	EffectSpawnExecutor
	// EffectLaunchTask: ask the executor to launch the task (idempotent: the
	// executor says whether it already did). Outcome: launched or
	// launch-failed.
	EffectLaunchTask
	// EffectAttach: confirm the task alive and attach supervision. Outcome:
	// running, task-exited or executor-lost.
	EffectAttach
	// EffectKillExecutor: signal the task group (Signal, then SIGKILL after
	// Grace), collect its exit status, kill the executor by its proven
	// identity (or find it by Nonce when none was recorded), and confirm
	// them dead. Outcome: executor-reaped or kill-failed.
	EffectKillExecutor

	numEffectTypes
)

var effectNames = [numEffectTypes]string{
	EffectNone:          "none",
	EffectSpawnExecutor: "spawn-executor",
	EffectLaunchTask:    "launch-task",
	EffectAttach:        "attach",
	EffectKillExecutor:  "kill-executor",
}

func (e EffectType) String() string {
	if e < numEffectTypes {
		return effectNames[e]
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// Effect is an effect with the data it needs, derived from the task's state.
type Effect struct {
	Type          EffectType
	Nonce         string    // spawn-executor; kill-executor when Executor is nil
	Executor      *Identity // kill-executor, launch-task, attach
	Spec          *Spec     // launch-task
	TaskPID       int       // attach, kill-executor
	TaskStartTime uint64    // attach, kill-executor
	Signal        int       // kill-executor: first signal to the task group (0: SIGKILL at once)
	Grace         time.Duration
	Target        State // kill-executor: the terminal state reaping leads to
}

// TaskProc is the task process the effect concerns (zero when no launch
// was recorded).
func (e Effect) TaskProc() Proc { return Proc{PID: e.TaskPID, StartTime: e.TaskStartTime} }

func (e Effect) String() string { return e.Type.String() }
