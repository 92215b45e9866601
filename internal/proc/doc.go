// Package proc is tether's one reading of the process table: /proc/PID/stat
// and its kin, the boot id, pidfds, and the identity checks that stand
// between a recorded process and a signal.
//
// Every signal tether sends goes through a pidfd opened before the
// target's identity was checked (Check: pid, start time, boot id and, for
// an executor, the spawn nonce on its command line), so that a pid reused
// by another process is never signalled:
//
//	p, err := proc.Open(id.PID) // pins the process
//	if err != nil { ... }       // ErrGone: nothing to do
//	defer p.Close()
//	if err := proc.Check(id); err != nil { ... } // ErrNotOurs: send nothing
//	_ = p.Signal(syscall.SIGKILL)
//	_ = p.Wait(ctx)
//
// Kill, KillGroup and SignalAmong are that sequence for an executor, a task's
// process group and a set of processes.
package proc
