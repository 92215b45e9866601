// Package executor runs a task through a separate executor process that can
// outlive the agent that started it and can never be left behind.
//
// Linux only (kernel 5.3 or later: pidfd_open, clone3 with CLONE_PIDFD);
// /proc is the process table.
//
// # The executor process
//
// An executor is a real OS process: either the calling binary re-executed in
// executor mode, or the small standalone binary cmd/tether-executor. It
//
//  1. starts in its own session (Setsid), with stdin and stdout on /dev/null
//     and stderr on LogFile in the task directory, so neither the agent's
//     terminal, its process-group signals nor a closed pipe can reach it;
//  2. becomes a child subreaper (PR_SET_CHILD_SUBREAPER), so every process
//     its task forks stays its descendant;
//  3. listens on SocketFile in the task directory (0700; the socket 0600;
//     any path length, through /proc/self/fd/N/), accepting only peers of its
//     own uid or root (SO_PEERCRED) that know its nonce;
//  4. writes its Identity (pid, start time, boot id, nonce, socket) to
//     IdentityFile atomically (write, fsync, rename, fsync of the directory)
//     before it reports ready or answers anything;
//  5. holds a lease until a task is launched: it exits by itself when no
//     client said hello within the ready timeout, or when its last client
//     disconnects; after launch it runs on without any driver;
//  6. launches the task as its child in a new process group, stdout and
//     stderr to StdoutFile and StderrFile, with the parent-death signal set
//     to SIGKILL; in ModeExec through a shim (this binary again, with
//     "-shim") that drops the bounding set, switches user on its one thread
//     keeping the allowed capabilities (ambient for a non-root user) and
//     execs the task;
//  7. reaps every child in one loop (wait4(-1) on SIGCHLD; nothing else ever
//     waits), and when the task has exited, SIGKILLs whatever is left of its
//     tree (group members, reparented orphans, daemons that left the group)
//     until it has no child at all;
//  8. then writes the task's exit status to ExitStatusFile atomically,
//     answers every waiting client, removes its socket and exits. An
//     executor never outlives its task.
//
// Every signal, on either side, goes through a pidfd opened before the
// target's identity was checked (pid, start time, boot id, and for
// executors the nonce on the command line), so a recycled pid is never
// signalled.
//
// # Serving executor mode
//
// A binary serves executor mode by calling Serve with the arguments that
// follow its mode word, and exiting with the result:
//
//	func main() {
//		if len(os.Args) > 1 && os.Args[1] == "executor" {
//			os.Exit(executor.Serve(os.Args[2:]))
//		}
//		// ... the agent
//	}
//
// and the driver passes SpawnConfig.Command = []string{"/path/to/binary",
// "executor"} (the default when Command is empty: os.Executable() and
// "executor"). The standalone binary takes no mode word:
// Command = []string{"/path/to/tether-executor"}. It keeps the executor's
// idle memory at the floor of a minimal Go helper (see the benchmarks).
// Serve must receive a tail of os.Args: the shim re-executes the same argv
// prefix.
//
// # Using it from a driver
//
//	c, err := executor.Spawn(ctx, executor.SpawnConfig{
//		Command: []string{"/usr/bin/tether", "executor"},
//		TaskDir: dir, Nonce: nonce, Logger: log,
//	})
//	// on error nothing was left running; err is typed (ErrSpawn, ErrReadyTimeout, ...)
//	id := c.Identity() // persist it
//	pid, start, err := c.Launch(ctx, executor.LaunchSpec{Mode: executor.ModeExec, Command: "/bin/app"})
//	// launch errors: ErrCommandNotFound, ErrNotExecutable, ErrUnknownUser,
//	// ErrCapNotAllowed (*CapError), ErrWorkDir, ErrBadSpec
//	st, err := c.Wait(ctx)                          // or Stop(ctx, syscall.SIGTERM, grace)
//
// After a crash, a new driver process calls Reattach(ctx, dir, id) (identity
// checked against the file and the live process), or, if the executor is
// gone, ReadExitStatus(dir); FindByNonce finds an executor whose spawn
// outcome was never recorded; Kill and KillGroup reap an executor and a task
// group by identity when nothing else answers.
//
// # Protocol
//
// Length-prefixed JSON frames (see ProtocolVersion) on the unix socket; the
// first request on a connection is a hello with the protocol version and the
// nonce. Named errors cross it, so errors.Is works on the driver side.
package executor
