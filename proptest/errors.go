package proptest

import "errors"

// Errors of injected faults.
var (
	// ErrFault is the error an injected driver fault returns (wrapped by
	// the driver in driver.ErrInjected).
	ErrFault = errors.New("proptest: fault")
	// ErrStoreFault: an injected store fault failed an Append before it
	// committed anything.
	ErrStoreFault = errors.New("proptest: store append failed (injected; nothing committed)")
	// ErrLostAck: an injected store fault failed an Append after it had
	// committed (the acknowledgement was lost on the way back: a context
	// cancelled once the commit was claimed, a connection cut).
	ErrLostAck = errors.New("proptest: store append committed, then reported failure (injected)")
	// ErrWorldFault: an injected fault of the simulated world failed an
	// operation (kill, kill-task, stop, status, reattach, shutdown) before
	// it did anything.
	ErrWorldFault = errors.New("proptest: world operation failed (injected)")
)

// Errors of the simulated world, besides driver.ErrNotOurs and
// driver.ErrGone.
var (
	// ErrNotLaunched: the executor has not launched its task.
	ErrNotLaunched = errors.New("proptest: executor has not launched a task")
	// ErrConnClosed: the connection to the executor was closed.
	ErrConnClosed = errors.New("proptest: executor connection closed")
	// ErrCapRefused: the executor refused a capability (the seed of the
	// design: cap_add = ["net_raw"]), after it was spawned.
	ErrCapRefused = errors.New("proptest: executor refused capability net_raw")
	// ErrSpawnRefused: a spawn failed on demand (World.FailSpawns).
	ErrSpawnRefused = errors.New("proptest: spawn failed on demand")
)

// Errors of the harness's use.
var (
	// ErrBadScenario: a scenario or plan seed could not be parsed.
	ErrBadScenario = errors.New("proptest: bad scenario")
)
