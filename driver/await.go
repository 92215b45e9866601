package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// AwaitExit waits for a launched or running task to exit without a Driver,
// so without holding the store: it reattaches to the task's executor by
// proven identity and waits; if the executor is already gone it reads the
// exit status the executor left on disk. The exit is not recorded: a
// Driver's Recover records it (and reaps) afterwards. This is how the CLI
// waits for a task while other commands use the store.
func AwaitExit(ctx context.Context, world Executors, task fsm.Task) (fsm.ExitStatus, error) {
	if task.Executor == nil {
		return fsm.ExitStatus{}, &TaskError{Task: task.ID, State: task.State, Err: ErrNotRunning}
	}
	h, err := world.Reattach(ctx, task.ID, *task.Executor)
	if err == nil {
		x, werr := h.Wait(ctx)
		_ = h.Close()
		if werr == nil {
			return x, nil
		}
		if ctx.Err() != nil {
			return fsm.ExitStatus{}, context.Cause(ctx)
		}
		err = werr
	}
	if x, ok, xerr := world.ExitStatus(ctx, task.ID); xerr == nil && ok {
		return x, nil
	} else if xerr != nil {
		err = errors.Join(err, xerr)
	}
	return fsm.ExitStatus{}, &TaskError{Task: task.ID, State: task.State,
		Err: fmt.Errorf("executor unreachable and no exit status left: %w", err)}
}
