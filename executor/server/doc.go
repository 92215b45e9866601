// Package server is the executor process: the process that a driver
// spawns for one task, that launches the task as its child and supervises
// it, and that outlives the driver. Its client, what a driver links, is
// package executor; the init shim it starts each exec task through is
// package executor/shim. A binary serves all three roles through Serve.
//
// Linux only (kernel 5.6 or later: pidfd_open, clone3 with CLONE_PIDFD,
// and openat2 for every privileged touch of a task's paths);
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
//  4. writes its Identity (pid, start time, boot id, nonce, socket, cgroup) to
//     IdentityFile atomically (write, fsync, rename, fsync of the directory)
//     before it reports ready or answers anything;
//  5. holds a lease until a task is launched: it exits by itself when no
//     client said hello within the ready timeout, or when its last client
//     disconnects; after launch it runs on without any driver;
//  6. launches the task as its child in a new process group, with the
//     parent-death signal set to SIGKILL, so that no instruction of the task
//     runs outside its cgroup or before its isolation is complete: a
//     raw_exec task that keeps the executor's user is forked by an executor
//     thread that moved itself into the task's cgroup (cgroup.ForkExec; its
//     oom_score_adj taken on for the fork), every other task through the
//     init shim (this binary again, with "-shim"; see shim.Flag), which
//     joins the task's cgroup, sets oom_score_adj, for exec builds the
//     task's sandbox (see below), switches user, changes to the working
//     directory and execs the task;
//  7. copies the task's stdout and stderr from pipes into rotating log
//     files (package logs), in goroutines of their own;
//  8. reaps every child in one loop (wait4(-1) on SIGCHLD; nothing else ever
//     waits), and when the task has exited kills everything left in its
//     cgroup and confirms it empty, SIGKILLs whatever else is left of its
//     tree (group members, reparented orphans) until it has no child at
//     all, and lets the output copies reach the end of their pipes;
//  9. then reads the cgroup's OOM kill count into the exit status, answers
//     every waiting client (a driver that has the status records it
//     itself), removes the cgroup, writes the task's exit status to
//     ExitStatusFile atomically and durably (for a driver that was away),
//     removes its socket and exits. An executor never outlives its task.
//
// # Readiness
//
// A task whose spec's Readiness is fsm.ReadinessNotify speaks the sd_notify
// protocol to its executor (notify.go): the executor binds a unix datagram
// socket in the task's secrets directory before the first run (the task's
// user's, mode 0700; /secrets/notify inside an exec task's root; an
// abstract name for a raw_exec task whose path is too long), sets
// NOTIFY_SOCKET (and WATCHDOG_USEC; the shim sets WATCHDOG_PID), and
// believes a datagram only from the run's main process or a process of its
// cgroup (SO_PASSCRED; a sender judged once, its verdict kept while its
// pidfd lives). It reads at most notifyRate datagrams a second, leaving the
// rest queued, so a flood blocks its sender and costs the task, not the
// executor. A ready request (protocol 8) is answered once the run sent
// READY=1 (Status.Ready, Status.NotifyStatus) or ended first; a ready run
// that misses its watchdog is killed, and its restart policy decides as for
// any exit, the restart's reason naming the watchdog. Each run's readiness
// (READY=1, or a check's first pass) is journalled (protocol 10: a ready
// entry naming the run, fsynced) before any waiter or watch is told
// (Status.ReadyJournalled), so that whoever supervises the task records it,
// with the time it happened, whether or not anyone waited.
//
// A task whose spec's Readiness is fsm.ReadinessTCP, ReadinessHTTP or
// ReadinessExec is checked by its executor (checks.go, protocol 9): every
// interval of its spec's Check, a TCP connection, an HTTP GET passing on
// 2xx, or a command run inside the task's sandbox through the shim's join
// mode (as an exec request); its first pass answers the ready requests as
// READY=1 does, and check_restart's limit of consecutive failures after
// its grace kills the run, the restart's reason naming the check.
//
// # Containment
//
// Every task, exec and raw_exec, runs in a cgroup of its own (package
// cgroup), named for the task (the task directory's name) and the spawn
// nonce, below the executor's own cgroups. The executor computes its
// location at startup and announces it in its Identity (fsm.Identity.Cgroup:
// ready report, hello, identity file), so that the driver records it in
// executor-up before the cgroup exists; it creates the cgroup with
// the spec's resources at launch. Stop (signal, grace, then SIGKILL) and
// Shutdown kill the whole cgroup, not only the process group; a driver
// whose executor is gone kills the recorded cgroup itself, after
// cgroup.OpenRecorded proved it the task's. Where this process can make no
// cgroup (not root and no delegation, no cgroupfs), Identity.Cgroup is
// empty: raw_exec runs uncontained with one warning (the executor's log and
// Status.Warnings of the launch reply), exec and any limit are refused with
// an error saying why (ErrNoCgroup). A limit whose controller the host
// lacks is ErrLimit, naming the controller. CheckSpec makes these checks
// before anything is spawned.
//
// # The sandbox (exec)
//
// An exec task is cloned into new mount, UTS, PID and IPC namespaces
// (fsm.Spec.PIDMode and IPCMode "host" opt out of the last two), and, for
// network "none", a network namespace whose loopback the shim brings up
// (nothing else is in it); the shim enters a cgroup namespace once it
// joined the task's cgroup, so that the task sees its cgroups as "/". It
// is pid 1 of its PID namespace: the kernel gives it only the signals it
// handles, so a stop whose signal it does not catch, while it is alone in
// its cgroup, kills it at once instead of waiting out the grace. The shim
// builds its root on a tmpfs in the task directory, in the task's mount
// namespace only (so every mount vanishes with the task and nothing is
// ever mounted in the host's namespace): read-only, nosuid, nodev bind
// mounts of the driver's Policy.Chroot (default DefaultChroot, Nomad's
// chroot_env; never copies), the task's writable directories (local,
// secrets 0700, tmp, alloc) owned by its user, a proc of its own with the
// host's kernel interfaces masked or read-only, and a minimal read-only
// /dev (null, zero, full, random, urandom, tty, a devpts of its own, shm).
// /etc/shadow and its kin are covered by an empty file of mode 0000; the
// state directory is covered when a bind would show it. Then pivot_root,
// the root made read-only, a new anonymous session keyring (nothing of
// the operator's keyrings), nobody (65534) unless User is set, the
// capabilities (a root task: Nomad's rule, see ValidateCaps; any other
// user: exactly what cap_add names, ambient, and an empty bounding set
// otherwise), no_new_privs, the working directory changed to as the
// task's user, and last the seccomp filter: Docker's default profile, or
// the profile the task names and the operator allowed, compiled here for
// the task's final capabilities (package seccomp) and installed by the
// shim just before exec. A host that lacks a part of this (seccomp, a
// cgroup namespace, keyrings) refuses the task, naming the part and the
// operator's opt-out (Policy.AllowSeccomp's "unconfined",
// Policy.AllowMissing); the task file alone never turns a part off.
// TaskEnv is the environment a task gets.
//
// A privileged process never follows a link the task planted: the task
// directory's own directories are made and chowned through descriptors
// (taskdir.Root), a raw_exec task's working directory below its task
// directory is opened beneath it with openat2 and no link followed, and
// every other working directory, an exec task's command and a terminal
// for Exec are looked up after the switch to the task's user.
//
// Every signal, on either side, goes through a pidfd opened before the
// target's identity was checked (pid, start time, boot id, and for
// executors the nonce on the command line), so a recycled pid is never
// signalled. Signal reaches the task's process group, SignalMain its main
// process alone.
//
// # Exec: commands inside the running task
//
// A client's Exec runs a command inside the task as the task itself runs: the
// init shim again, in join mode ("-join"; see shim.JoinFlag), joins the run's
// cgroup and oom_score_adj, for exec its namespaces through a pidfd of the
// task (so a recycled pid is never joined) and thereby its root, its
// working directory, user, capabilities and no_new_privs, and starts the
// command, with the task's environment (ExecSpec.Env laid over), as the
// executor's child in a session of its own, with the task's keyring
// (a new one), capabilities, no_new_privs and seccomp filter. Its stdio
// are pipes the executor makes, whose other ends go back to the client
// (SCM_RIGHTS), which relays the caller's streams through them: no
// descriptor of the caller's ever reaches the task; with ExecSpec.TTY the
// shim opens a pseudo-terminal inside the task (an exec task's own devpts,
// as its user) and the master comes back (ExecProcess.Terminal). The executor reaps the
// command and answers ExecProcess.Wait; it kills the command when the
// connection that asked for it closes, and with the task (its cgroup, its
// PID namespace, the drain of its tree), so nothing of an exec outlives
// the task. A task that is restarting (a restart's delay runs) has no
// process to join or signal: ErrRestarting.
//
// # Serving executor mode
//
// A binary serves executor mode by calling server.Serve with the arguments that
// follow its mode word, and exiting with the result:
//
//	func main() {
//		if len(os.Args) > 1 && os.Args[1] == "executor" {
//			os.Exit(server.Serve(os.Args[2:]))
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
package server
