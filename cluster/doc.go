// Package cluster is tether past one machine: every node's task events
// mirrored to etcd exactly once, a lease per node for its liveness, a
// desired state per node that its agent converges, and placed jobs: Nomad
// job files whose copies a scheduler among the agents (elected through
// etcd, with no server of its own) places on the nodes and moves when a
// node is lost. The write-ahead log stays local (store, bbolt): a
// partitioned node still records its kills, so no quorum is ever in the
// path of an effect, and etcd is a mirror and a control plane, never the
// log.
//
// Only the CLI imports this package; the etcd client (and gRPC) never
// enter fsm, store, driver or executor, which an embedder imports
// (TestDeps_EmbedderPackagesDoNotLinkEtcd).
//
// # Key layout
//
// Under a prefix (DefaultPrefix, "/tether/"), with NODE a validated node
// name and TASK a task id (both by the task id rule), never a raw task
// name:
//
//	alive/NODE             the node's liveness key, under its lease; value: Holder
//	node/NODE              the node's status: up since, last seen, mirror lag
//	head/NODE/TASK         the task's mirrored head: seq, state, name, times
//	event/NODE/TASK/SEQ    one event, as the node recorded it (JSON; SEQ 20 digits);
//	                       environment values replaced by Redacted
//	desired/NODE/NAME      a task file the node is told to run (HCL text)
//	info/NODE              the node's registration (NodeInfo), written with its liveness key
//	job/JOB                a placed job's head (JobHead): version, stopped
//	jobspec/JOB/VERSION    the job's file and inputs at VERSION (JobSpec; 20 digits), never changed
//	alloc/JOB/GROUP/INDEX  a copy's placement (Placed): node, version, resources, reason
//	place/NODE/JOB/GROUP/INDEX  the same placement under its node, in the same Txn
//	verdict/NODE/JOB/GROUP/INDEX  the node's word on a copy (Verdict), naming the placement revision
//	eval/JOB               the scheduler's last word on the job (Eval): copies not placed, and why
//	lost/NODE              a node the scheduler saw lose its lease (Lost), and since when it is back
//	leader/LEASE           the scheduler's election, one key per candidate under its node's lease
//
// # The mirror
//
// Each batch of events goes to etcd in one transaction: if the node's
// liveness key is under this agent's lease (the fence), and each task's
// head is at the revision the mirror read (or absent), and none of the
// batch's event keys exists, then put the events and the new heads. So a
// retry of a batch whose answer was lost, a crash at any step, or a
// second writer for the node can never duplicate or reorder an event,
// and the mirror only ever holds events read from the local log after
// they were committed (never ahead of it). After any error the mirror
// reads the heads from etcd again and goes on from there: a local cursor
// is never trusted. A task the local log no longer has (gc), or whose
// mirror is not a prefix of the local log (the state directory was
// replaced under the node's name), is pruned and mirrored again from the
// local log, which is the truth.
//
// # Placement
//
// A placed job is a Nomad job file (`tether cluster run`, Fleet.Run): its
// text and inputs are written as a new version with its head, in one
// transaction guarded by the head as read. Every node's agent is a
// candidate scheduler: Node.Run campaigns (clientv3/concurrency) on a
// session on the node's own liveness lease, so the leader is always a live
// node and loses its leadership when its node shows down. The leader
// (Scheduler) reads the fleet at one revision, decides with two pure
// functions (ReconcileNodes, ReconcileJob, which places with Place) and
// writes each job's decision in transactions guarded by its leadership,
// the job's head and each copy's placement as read: a deposed scheduler
// writes nothing, and a copy is under one node at every revision (its
// alloc/ and place/ keys move together). A node runs only the copies whose
// current placement names it (place/NODE/), and says how each fares
// (Node.WriteVerdict, fenced by its lease). docs/fleet.md, "Placing jobs",
// says what is placed where and when a copy moves.
//
// # The agent's duties
//
// An agent (tether agent --node NAME --cluster URLS; cmd/tether-fleet's
// agent.go does this with package agent) wires a node in:
//
//  1. Hold the state directory's store open, once (its flock makes this
//     agent the only one of its state directory), and give the node a
//     Source that reads it and a Changes noted at every append:
//     cluster.NewStoreSource(st) wraps a *store.Store as both (hand it to
//     the driver as its store.Log); package agent's Agent reads its own
//     store (Agent.Versions, LoadFrom) and tells every append of its
//     driver to agent.Config.Appended (changes.Note).
//  2. cli, err := cluster.Dial(cluster.Config{Endpoints: urls, TLS: tls});
//     it refuses plaintext to an endpoint off the loopback, and does not
//     wait for etcd.
//  3. n, err := cluster.NewNode(cli, cluster.NodeConfig{Name: node,
//     LeaseTTL: ttl, Dir: filepath.Join(stateDir, "cluster"), Source:
//     src, Changes: changes, Logger: log}).
//  4. err = n.Register(ctx) with a deadline: exit on ErrNodeHeld (another
//     agent holds the node; the error names it); go on after
//     ErrUnavailable (etcd down: tasks run, Run registers later).
//  5. go n.Run(ctx): one goroutine each for the lease (kept alive, its
//     loss logged and re-registered, never stopping a task), the mirror,
//     the status publisher, the desired state's watcher and, unless
//     NodeConfig.NoScheduler, the scheduler's campaign. When ctx ends the
//     node catches its mirror up once more, then returns. The node
//     registers NodeConfig's fingerprint, Meta, Capacity and
//     RemoteDrivers with its liveness key (info/NODE).
//  6. Converge every set from n.Desired() as the --config-dir files are
//     converged: a name added starts a task, removed stops it, a new
//     ModRevision replaces it; each Spec is a task file, read by
//     ParseDesired (the key's name its task's) and checked against the
//     node's allow lists, which it can never widen. The tether-fleet agent
//     sets each set as an agent.Feed, which the agent's one convergence
//     loop converges with its config dir. The first set may come from the
//     local copy (FromCopy), before etcd answers; LoadDesiredCopy reads
//     it without a node (--once). Every spec is judged before the node
//     keeps or delivers it (ReadDesired under NodeConfig.Policy's
//     ForRemote: the parser's limits, --max-count, the remote drivers, the
//     host namespaces): one that fails is in Invalid, never in the copy;
//     a copy's spec that fails at start is dropped from it, logged.
//  7. Report n.Stats(ctx) (lease, mirror lag in events and seconds) with
//     the agent's metrics; the node publishes them under node/NODE.
//
// # Usage for `tether cluster`
//
//	f, _ := cluster.NewFleet(cli, "")
//	rows, _ := f.Status(ctx)             // json.Marshal(rows): the status --json array
//	nodes, _ := f.Nodes(ctx)             // liveness, mirror_lag_events, mirror_lag_seconds
//	t, _ := f.Resolve(ctx, "web", node)  // a name by the CLI's rule; node "" for any
//	evs, _, _ := f.Events(ctx, t.Node, t.ID)
//	for e, err := range f.Follow(ctx, t.Node, t.ID, last) { ... }
//	_, _ = f.Start(ctx, "n3", "web", hcl, false)
//	_ = f.Stop(ctx, "n3", "web")
//	res, _ := f.Run(ctx, cluster.JobSpec{File: "web.nomad", Text: text}, time.Now())
//	st, _ := f.JobStatus(ctx, "web")     // json.Marshal(st.Rows): the status JOB --json array
//	st, err := f.WaitJob(ctx, "web", nil) // *NotPlacedError names each copy no node can hold
//	_ = f.StopJob(ctx, "web")
package cluster
