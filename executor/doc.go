// Package executor is the client of tether's executor process: what a
// driver links to spawn an executor for a task, launch the task through it,
// reattach to it after a crash, signal, stop and exec into the task, and
// read what the executor left on disk (identity, launch record, exit
// status, restart journal), each believed only once it matches the log.
//
// Three processes take part in a task, and each has its package:
//
//	executor          this package: the client, in the driver's process
//	executor/server   the executor process (Serve), which outlives the driver
//	executor/shim     the init shim an exec task starts through (its sandbox:
//	                  namespaces, root, keyring, user, capabilities,
//	                  seccomp), in the task's process
//
// A driver links this package only; the executor process and the shim
// are served by a binary that calls server.Serve (see "Serving executor
// mode" in package executor/server), and the package's test holds the
// driver's dependencies to that.
//
// Linux only (kernel 5.6 or later: pidfd_open, clone3 with CLONE_PIDFD,
// and openat2 for every privileged touch of a task's paths);
// /proc is the process table.
//
// # Peers
//
// Both ends check the other's SO_PEERCRED. The executor accepts peers of
// its own uid or root (ErrPeerRefused otherwise). A client, before it sends
// anything, checks that the process serving the socket it dialled is the
// executor whose identity it proved (that pid) and runs as its own uid or
// root: a listener planted at the socket path is ErrPeerNotExecutor,
// naming the pid and uid it found.
//
// # Using it from a driver
//
//	c, err := executor.Spawn(ctx, executor.SpawnConfig{
//		Command: []string{"/usr/bin/tether", "executor"},
//		TaskDir: dir, Nonce: nonce, Logger: log,
//	})
//	// on error nothing was left running; err is typed (ErrSpawn, ErrReadyTimeout, ...)
//	id := c.Identity() // persist it: its Cgroup is where the task will be
//	st, err := c.Launch(ctx, executor.Launch{Spec: fsm.Spec{Driver: "exec", Command: "/bin/app",
//		Resources: fsm.Resources{MemoryMB: 256, PIDs: 100}}}) // the spec as the log records it
//	// launch errors: ErrCommandNotFound, ErrNotExecutable, ErrUnknownUser,
//	// ErrCapNotAllowed (*CapError), ErrWorkDir, ErrBadSpec, ErrNoCgroup,
//	// ErrLimit, ErrIsolation, ErrSeccompNotAllowed, ErrHostFeature,
//	// ErrLaunch (naming the shim's step)
//	stats, err := c.Stats(ctx)                      // the task cgroup's figures
//	p, err := c.Exec(ctx, executor.ExecSpec{Argv: []string{"id", "-u"}, Stdout: os.Stdout})
//	px, err := p.Wait(ctx)                          // the command's exit status
//	x, err := c.Wait(ctx)                           // or Stop(ctx, syscall.SIGTERM, grace); x.OOM
//
// After a crash, a new driver process calls Reattach(ctx, dir, id) (identity
// checked against the file and the live process). A driver does all of
// this through World, the one contract with the process world, whose real
// implementation is Real: it also reads the exit status an executor left
// on disk, finds an executor by nonce whose spawn outcome was never
// recorded, and kills an executor and a task (its cgroup, else its process
// group) by proven identity when nothing else answers.
//
// # Protocol
//
// Length-prefixed JSON frames on the unix socket; the first request on a
// connection is a hello with the protocol version and the nonce. The
// client speaks the current version (6) and, to an executor a previous
// tether started, the previous one (5) for everything but a launch. A frame may carry descriptors (SCM_RIGHTS), as many as it declares.
// Named errors cross it, so errors.Is works on the driver side.
package executor
