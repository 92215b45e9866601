// Package driver is tether's task driver: it starts, supervises, stops and
// recovers tasks through executor processes, with every lifecycle step
// written ahead to the store, so that no executor is ever leaked.
//
// # One owner per task
//
// Every task the driver touches has one owner, a goroutine (owner.go) that
// receives every input about it on channels — a caller's request (start,
// stop, wait, recover), the outcome of the effect in flight, the
// supervisor's report of a restart or the task's end — and is the only
// writer of its state and the only runner of its effects. For each input
// it:
//
//  1. steps the pure lifecycle (fsm.StepAll) and appends the resulting
//     events to the store in one commit, waiting for the fsync
//     (write-ahead: no effect runs before the event that demands it is
//     durable);
//  2. folds them into the task's state;
//  3. performs the effects Step returned, one at a time, each in a
//     goroutine whose outcome comes back as the next input.
//
// Every error after the spawn intent leads through reaping, whose
// kill-executor effect stops the task, kills its cgroup until it is empty,
// kills the executor by its proven identity (pid, start time, boot id,
// nonce, through a pidfd) and confirms all of it dead before the task is
// recorded terminal.
//
// Across processes (the CLI opens the store per command), a task's lock
// file (LockFile) says that a live process is driving it; recovery
// elsewhere leaves such a task alone. Appends are optimistic (the
// expected version): two processes acting on one task converge.
//
// # Restarts
//
// The executor restarts its task by the task's restart policy, whether a
// driver watches or not, and journals each restart ahead; the driver folds
// the journal into the log, from a watch of the live executor or from the
// file it left (restart.go). FollowTask sees each restart as it is folded.
//
// # Recovery
//
// After a crash, Open a new Driver on the same state directory and call
// Recover (every live task, their logs read in one read of the store,
// again under its lock only a task that needs an owner) or
// Reconcile (some): each task is reconciled with reality, by its owner
// where it needs one (an effect owed, an end to record), so Recover is
// safe beside every other call (see owner.reconcile for the crash-window
// table); a running task whose executor answers is reattached and let go
// of, with no owner left for it. A task is left to another process only
// while a live process holds its lock. Named crash points
// (CrashPoints) let tests kill the process at every durable write and
// effect boundary; set TETHER_CRASHPOINT in a real process, or
// Config.Hooks in a simulation.
//
// # Names
//
// A task's id is unique; its name (Spec.Name) is shared over time. Resolve
// turns an id or a name into a task (a name stands for its one live task,
// else its most recent one; several live ones are ErrAmbiguous);
// StartNamed refuses a second live task of a name (ErrNameTaken) or
// replaces the first; RestartTask stops a task and starts its spec again.
// A per-name lock file orders these across processes, and the log links a
// replaced task and its replacement (names.go); WaitNameFree waits out a
// restart or replacement holding it. PickTarget extends the rules to the
// words a command takes several of: a task, else JOB.GROUP, else a job.
//
// # Usage
//
//	d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{self, "executor"}})
//	...
//	defer d.Close() // tasks keep running; a later driver reattaches
//	if _, err := d.Recover(ctx); err != nil { ... }
//	t, err := d.StartTask(ctx, "web", fsm.Spec{Driver: "raw_exec", Command: "/usr/bin/python3", Args: []string{"-m", "http.server"}})
//	...
//	err = d.SignalTask(ctx, "web", syscall.SIGHUP) // SignalMain: its main process only
//	p, err := d.ExecTask(ctx, "web", driver.ExecSpec{Argv: []string{"/bin/ls", "/"}, Stdout: os.Stdout})
//	x, err := p.Wait(ctx)
//	stats, err := d.TaskStats(ctx, "web")
//	final, err := d.StopTask(ctx, "web", 0, 0)
//
// The driver is safe for concurrent use; no lock is held across a call
// into another process, every call into an executor has a deadline
// (Config.ProbeTimeout, EffectTimeout), and the store's group commit lets
// concurrent tasks share fsyncs.
package driver
