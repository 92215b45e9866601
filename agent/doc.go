// Package agent is tether's agent: one long-running process per state
// directory that holds the store open, serves the CLI on a unix socket, and
// keeps a desired state running (s6-svscan's scandir, supervisord's
// autostart), with every decision written ahead to the store. It is the
// reference embedding of the driver.
//
// # One agent per state directory
//
// Open takes an exclusive flock on STATE/agent.lock, without waiting: a
// second agent fails at once with a *RunningError naming the first's pid
// (the kernel lets go of the lock however the first dies). It then opens
// the store and keeps it (one opener: the driver's appends from every
// request share commits), and a driver over it, configured with the
// operator's allow lists: no request carries or widens them.
//
// Run serves STATE/agent.sock (0600 in the 0700 state directory; a socket
// a killed agent left is removed, once the lock says no agent serves it),
// runs driver.Recover (every task a crash or a reboot left is reconciled:
// recorded lost once its executor is gone, or adopted), then converges
// until its context ends. It stops no task when it returns: the executors
// keep theirs, and the next agent adopts them. Once is Run without the
// socket that returns when nothing is due (cron's @reboot).
//
// # The socket
//
// Peers are checked by SO_PEERCRED on both ends: the agent serves root and
// the state directory's owner, and the client trusts an agent of root or
// that owner. The protocol (proto.go) is versioned, length-prefixed JSON
// frames; a version mismatch is an error naming both versions. The agent
// sends a heartbeat while it works on a request, so a client (Dial, with a
// deadline) reports an agent that does not answer within its deadline
// (*WedgedError) rather than waiting for ever, and a dead socket is
// ErrNoAgent at once, so the CLI can work daemonless.
//
// The service is the driver's operations a CLI needs (Tasks), the desired
// state's (DesiredState) and the store's upkeep (Maintenance), with the
// driver's errors: Local serves it in-process (daemonless), Client through
// an agent, and the agent itself to its clients, so that a command written
// against Service prints and exits the same either way.
//
// # Desired state
//
// A desired task is declared by a task file (*.hcl) in the config dir
// (each task of the file; the dir and its files owned by root or the
// agent's user and writable by no one else, symbolic links only within
// it, read through openat2 RESOLVE_BENEATH) or registered with `tether
// enable` (the spec kept in the store, so it survives what the store
// survives). The store keeps one record per desired task (store.Desired):
// the task started for it (written before its start), the restart count,
// and why it settled.
//
// Convergence (decide.go) is a pure function from the declarations, the
// records, the tasks' recorded states and the time to a plan: record
// changes, then effects (start, stop). The loop (converge.go) commits the
// changes in one fsync'd commit before it performs an effect, and decides
// again after each outcome, a file change (inotify, and SIGHUP), a watched
// task's end, or a due restart. So a desired task whose task is gone is
// started again under its restart policy (Nomad's service policy when it
// has none), its count written ahead; once the policy gives up it stays
// failed with the reason; a task lost to a reboot is started again at once;
// a changed declaration replaces its task (stop, then start); a removed
// one stops it; a task stopped on request stays stopped until its
// declaration changes or it is started or enabled again. At most one task
// per desired task is ever live, across any crash: a new task id is
// recorded only once the previous task is terminal, and only the recorded
// task is started. Named crash points (CrashPoints, armed by
// TETHER_CRASHPOINT) sit before and after each durable step.
//
// # A feed: the fleet's desired state
//
// Config.Feed declares desired tasks besides the config dir: tether-fleet's
// agent (tether agent --node NAME --cluster URLS) sets the node's desired
// state from etcd there, and the one convergence loop converges it as it
// converges the config dir (a task set starts, changed is replaced, no
// longer set stops), under the same allow lists. Its records are config
// dir records whose file is under the feed's name (such as
// "etcd:/tether/desired/n1/web"), so neither source ever takes the other's
// records; until the feed is first set, its records are left as they are.
// Config.Appended is told every append of the agent's driver, and
// Agent.Versions and LoadFrom read the store the agent holds: a mirror of
// the local log (the fleet's) needs nothing else.
//
// # Usage
//
//	a, err := agent.Open(agent.Config{StateDir: dir, ConfigDir: "/etc/tether",
//		Parse: parse, ExecutorCommand: []string{self, "executor"}, Logger: logger})
//	if err != nil { ... } // *RunningError: another agent serves dir
//	defer a.Close()        // tasks keep running
//	err = a.Run(ctx)       // until ctx ends (SIGTERM)
//
// A client:
//
//	c, err := agent.Dial(ctx, dir, agent.DialOptions{Deadline: 5 * time.Second})
//	if errors.Is(err, agent.ErrNoAgent) { /* daemonless: agent.Local */ }
//	t, err := c.StartTask(ctx, id, spec)
//	e, err := c.Enable(ctx, "web.hcl", spec)
//	err = c.WatchStatus(ctx, func(s agent.Status) bool { return s.Converged })
package agent
