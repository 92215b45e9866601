// Package driver is tether's task driver: it starts, supervises, stops and
// recovers tasks through executor processes, with every lifecycle step
// written ahead to the store, so that no executor is ever leaked.
//
// # The effect loop
//
// Each input (a start, a stop, an effect's outcome, a task's exit) goes
// through fsm's pure Step. The driver then, for every input:
//
//  1. appends the resulting events to the store and waits for the fsync
//     (write-ahead: no effect runs before the event that demands it is
//     durable);
//  2. folds them into the task's in-memory state;
//  3. performs the effects now owed (fsm.Pending), one at a time, in the
//     task's single effect loop;
//  4. records each effect's outcome as the next input.
//
// Every error after the spawn intent leads through reaping, whose
// kill-executor effect stops the task group, kills the executor by its
// proven identity (pid, start time, boot id, nonce, through a pidfd) and
// confirms both dead before the task is recorded terminal.
//
// # Recovery
//
// After a crash, Open a new Driver on the same state directory and call
// Recover: it replays the live tasks and reconciles each with the process
// table (see Recover for the table). Named crash points (CrashPoints) let
// tests kill the process at every durable write and effect boundary; set
// TETHER_CRASHPOINT in a real process, or Config.Hooks in a simulation.
//
// # Usage
//
//	d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{self, "executor"}})
//	...
//	defer d.Close()
//	if _, err := d.Recover(ctx); err != nil { ... }
//	t, err := d.StartTask(ctx, "web", fsm.Spec{Driver: "raw_exec", Command: "/usr/bin/python3", Args: []string{"-m", "http.server"}})
//	...
//	final, err := d.StopTask(ctx, "web", 0, 0)
//
// Concurrency: the driver is safe for concurrent use; a task's effects run
// in one loop at a time, no lock is held across a call into another
// process, and the store's group commit lets concurrent tasks share
// fsyncs.
package driver
