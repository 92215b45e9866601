package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/agentcmd"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/store"
	"github.com/tether-fsm/tether/taskfile"
)

// The agent's fleet mode: `tether agent --node NAME --cluster URLS …`,
// which tether hands over whole. It is `tether agent` (package agent, set
// up by internal/agentcmd as tether's own agent command is: the same
// state directory, config dir, allow lists, --once) hosting the node's
// side of the fleet (cluster.Node) in the same process:
//
//   - the mirror reads the agent's own open store (Agent.Versions and
//     LoadFrom; one opener, so the agent's flock on the state directory
//     is what proves an earlier agent gone), woken by every append of the
//     agent's driver (Config.Appended);
//   - the node's desired state (etcd's, or the local copy before etcd
//     answers) is an agent.Feed: converged by the agent's one loop and
//     Decide exactly as --config-dir is, each file parsed as `tether
//     cluster start` parsed it (cluster.ParseDesired) and read by the
//     agent through its job path, under the node's allow lists, which it
//     cannot widen;
//   - the copies the fleet's scheduler placed on the node (place/NODE/)
//     are entries of that same feed, one a copy, read through the job path
//     with the copy's selection; the node writes its verdict on each
//     (placed.go says how, and in which order it stops and starts);
//   - the liveness lease is kept by the node; its loss is logged and the
//     node registered again, and no task is touched for it.

// agentCommand is the agent's entry in the binary's command table.
func agentCommand() command {
	return command{
		name: "agent", args: "--node NAME --cluster URLS [flags]",
		summary: "run the agent of a state directory as a node of a fleet: its tasks mirrored to etcd, its liveness leased, the desired state etcd holds for it converged",
		more:    "tether agent without --node or --cluster is the plain agent (tether's own). docs/fleet.md says what the node does.",
		run:     (*fleet).cmdAgent,
	}
}

// agentOptions are the fleet agent's flags.
type agentOptions struct {
	g           agentcmd.Globals
	af          agentcmd.Flags
	lockTimeout time.Duration
	node        string
	cluster     string
	leaseTTL    time.Duration
	metaKVs     []string
	capacityS   string
	// meta and capacity are --meta and --capacity as read.
	meta     map[string]string
	capacity cluster.Resources
}

// agentFlags returns the agent's flag set: tether agent's own
// (internal/agentcmd), tether's --log-level and --lock-timeout, and the
// fleet's.
func (f *fleet) agentFlags(o *agentOptions) *clikit.FlagSet {
	fs := clikit.NewFlagSet("tether agent", nil)
	o.g.Register(fs, true)
	o.af.Register(fs)
	fs.StringVar(&f.logLevel, "log-level", f.logLevel, "log `level`: trace, debug, info, warn, error or off; debug also logs the whole chain of an error")
	fs.DurationVar(&o.lockTimeout, "lock-timeout", o.lockTimeout, "how long to wait while another tether holds the store without letting go (commands queued behind each other wait their turn)")
	fs.MarkGlobal("log-level", "lock-timeout")
	fs.StringVar(&o.node, "node", "", "this node's `name` in the fleet (as a task id: 1 to 63 letters, digits, '.', '_', '-')")
	fs.StringVar(&o.cluster, "cluster", "", "etcd's client `URLs`, comma-separated (env "+envEndpoints+"); plaintext only on this machine's loopback, else https:// with the TLS flags")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", cluster.DefaultLeaseTTL, "the node's liveness lease: a node whose agent died shows down within it (at least "+clikit.DurationText(cluster.MinLeaseTTL)+")")
	fs.StringArrayVar(&o.metaKVs, "meta", nil, "`KEY=VALUE` of this node's meta, its ${meta.KEY} in a placed job's constraints (repeatable; as a Nomad client's meta; on 'tether start' and 'cluster run', --meta is a parameterized job's dispatch meta)")
	fs.StringVar(&o.capacityS, "capacity", "", "what this node offers placed jobs: `cpu=MHZ,memory=MB[,cores=N]` (a field left out is the host's; more than the host has is refused), so that several nodes can share one host")
	fs.StringVar(&f.tlsCA, "cluster-tls-ca", f.tlsCA, "`file` of the CA that signed etcd's certificates")
	fs.StringVar(&f.tlsCert, "cluster-tls-cert", f.tlsCert, "`file` of this node's client certificate")
	fs.StringVar(&f.tlsKey, "cluster-tls-key", f.tlsKey, "`file` of this node's client private key (mode 0600)")
	return fs
}

// cmdAgent runs the agent as a node until SIGTERM or SIGINT (SIGHUP reads
// the config dir again); --once converges the config dir and the local
// copy of the desired state once, without etcd, and exits.
func (f *fleet) cmdAgent(args []string) int {
	f.logLevel = "info" // an agent says what it does
	o := &agentOptions{lockTimeout: 10 * time.Second}
	fs := f.agentFlags(o)
	if err := fs.ParseAnywhere(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			f.commandHelp(fs, "tether", agentCommand())
			return exitOK
		}
		f.flagError(fs, "agent", err)
		return exitUsage
	}
	if err := f.setup(); err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		f.errorf("agent takes no arguments (got %s)", strings.Join(fs.Args(), " "))
		return exitUsage
	}
	if o.lockTimeout <= 0 {
		f.errorf("--lock-timeout %s: must be positive", clikit.DurationText(o.lockTimeout))
		return exitUsage
	}
	set, err := o.g.Resolve()
	if err == nil {
		err = o.af.Resolve(&set) // --allow-remote-drivers, within --allow-drivers
	}
	if err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	eps := o.cluster
	if eps == "" {
		eps = os.Getenv(envEndpoints)
	}
	var endpoints []string
	for _, e := range strings.Split(eps, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	switch {
	case o.node == "":
		f.errorf("the agent's fleet mode needs --node NAME: this node's name in the fleet")
		fmt.Fprintln(f.stderr, "  tether agent --node n1 --cluster http://127.0.0.1:2379 (tether agent with neither is the plain agent)")
		return exitUsage
	case len(endpoints) == 0:
		f.errorf("the agent's fleet mode needs --cluster URLS (or %s): etcd's client URLs, such as --cluster http://127.0.0.1:2379", envEndpoints)
		return exitUsage
	}
	if err := cluster.ValidateNodeName(o.node); err != nil {
		f.errorf("--node: %v", err)
		return exitUsage
	}
	if o.meta, err = cluster.ParseMeta(o.metaKVs); err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	if o.capacity, err = cluster.ParseCapacity(o.capacityS); err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	if o.leaseTTL < cluster.MinLeaseTTL {
		f.errorf("--lease-ttl %s is shorter than %s, which etcd cannot keep", clikit.DurationText(o.leaseTTL), clikit.DurationText(cluster.MinLeaseTTL))
		return exitUsage
	}
	hooks, dhooks, err := agent.HooksFromEnv()
	if err != nil {
		f.errorf("%v; unset the variable or pick a listed point", err)
		return exitUsage
	}
	chooks, err := cluster.HooksFromEnv()
	if err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	tether, err := clikit.Sibling("tether")
	if err != nil {
		f.errorf("the agent starts its tasks' executors with the tether binary, which is not beside tether-fleet: %v", err)
		fmt.Fprintln(f.stderr, "  'make build' builds both (bin/tether and bin/tether-fleet): install them side by side")
		return exitError
	}
	return f.runNode(o, set, endpoints, nodeHooks{agent: hooks, driver: dhooks, cluster: chooks}, []string{tether, "executor"})
}

// nodeHooks are the crash points armed from the environment (tests).
type nodeHooks struct {
	agent   agent.Hooks
	driver  driver.Hooks
	cluster cluster.Hooks
}

// runNode opens the agent, wires the node in, and serves.
func (f *fleet) runNode(o *agentOptions, set agentcmd.Settings, endpoints []string, hooks nodeHooks, executor []string) int {
	log := f.log
	// Until agentcmd.Serve handles them (it does from when it starts),
	// SIGTERM and SIGINT end the start cleanly (a registration waiting for
	// etcd gives up), and SIGHUP is held rather than killing the agent.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	held := make(chan os.Signal, 1)
	signal.Notify(held, syscall.SIGHUP)
	defer signal.Stop(held)
	feed, err := agent.NewFeed("etcd:" + cluster.DefaultPrefix + "desired/" + o.node)
	if err != nil {
		return f.fail(err)
	}
	meta, capacity := o.meta, o.capacity
	drivers := set.Policy().RemoteDrivers() // --allow-remote-drivers within --allow-drivers
	// The endpoints and TLS files are checked before the state directory
	// is touched (Dial does not wait for etcd).
	cli, err := cluster.Dial(cluster.Config{Endpoints: endpoints, TLS: cluster.TLS{CA: f.tlsCA, Cert: f.tlsCert, Key: f.tlsKey}})
	if err != nil {
		return f.fail(err)
	}
	defer cli.Close()
	changes := cluster.NewChanges()
	met, err := o.af.OpenMetrics(log.Named("agent"))
	if err != nil {
		f.errorf("%v", err)
		return exitUsage
	}
	defer met.Close()
	a, err := agent.Open(agent.Config{
		StateDir: set.StateDir, ConfigDir: o.af.ConfigDir,
		Logger: log.Named("agent"), ExecutorCommand: executor, AllowedCaps: set.AllowedCaps, ChrootEnv: set.Chroot,
		AllowSeccomp: set.AllowSeccomp, AllowMissing: set.AllowMissing, AllowRead: set.AllowRead,
		AllowDrivers: set.AllowDrivers, AllowRemoteDrivers: set.AllowRemoteDrivers, AllowHostNamespaces: set.AllowHostNamespaces, MaxCount: set.MaxCount,
		StoreOptions: store.Options{LockTimeout: o.lockTimeout, Logger: log.Named("store"), Crash: hooks.driver.StoreCrash()},
		Hooks:        hooks.agent, DriverHooks: hooks.driver,
		Feed: feed, Appended: changes.Note, Metrics: met.Registry(),
		Host: taskfile.HostConfig{Name: o.node, Meta: meta},
	})
	if err != nil {
		var re *agent.RunningError
		if errors.As(err, &re) {
			f.errorf("%v", err)
			fmt.Fprintf(f.stderr, "  one agent serves a state directory; stop it first, or use another --state-dir\n")
			return exitError
		}
		return f.fail(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			f.errorf("warning: closing: %v", err)
		}
	}()
	nodeDir := filepath.Join(set.StateDir, "cluster")
	if o.af.Once {
		// No etcd: what the node was last told, from its local copy.
		// Both sources from their local copies: one never told anything is
		// empty; one whose copy is not usable leaves its entries as they
		// are.
		nf := newNodeFeed(feed, drivers, log)
		ds, err := cluster.LoadDesiredCopy(nodeDir, o.node, set.Policy())
		switch {
		case err == nil:
			nf.setDesired(ds)
		case errors.Is(err, os.ErrNotExist):
			nf.setDesired(cluster.DesiredSet{Node: o.node})
		default:
			log.Error("local copy of the desired state not used: its tasks are left as they are", "err", err)
		}
		ps, err := cluster.LoadPlacedCopy(nodeDir, o.node)
		switch {
		case err == nil:
			nf.setPlaced(ps)
		case errors.Is(err, os.ErrNotExist):
			nf.setPlaced(cluster.PlacedSet{Node: o.node})
		default:
			log.Error("local copy of the placements not used: their copies are left as they are", "err", err)
		}
		// What to leave as it is: the agent's entries, and every copy of the
		// local copy (the agent may not have shown its records yet).
		st, err := a.Status(ctx)
		if err != nil {
			st = agent.Status{}
		}
		for id := range ps.Copies {
			st.Entries = append(st.Entries, agent.Entry{Name: cluster.EntryName(id), Origin: "etcd"})
		}
		st.Generation = max(st.Generation, 1) // what to leave is known: the records are read below, from these
		nf.setStatus(st)
		nf.setContact(time.Now(), 0)
		nf.update()
		if err := agentcmd.Serve(ctx, a, true, log); err != nil {
			return f.fail(err)
		}
		return exitOK
	}
	n, err := cluster.NewNode(cli, cluster.NodeConfig{Name: o.node, LeaseTTL: o.leaseTTL, Dir: nodeDir,
		Source: agentLog{a}, Changes: changes, Logger: log.Named("cluster"), Hooks: hooks.cluster, Policy: set.Policy(),
		Meta: meta, Capacity: capacity, RemoteDrivers: drivers})
	if err != nil {
		return f.fail(err)
	}
	registerNodeMetrics(met.Registry(), n.Stats)
	rctx, cancel := context.WithTimeout(ctx, o.leaseTTL)
	err = n.Register(rctx)
	cancel()
	switch {
	case errors.Is(err, cluster.ErrNodeHeld):
		f.errorf("%v", err)
		return exitError
	case err != nil && ctx.Err() == nil:
		log.Warn("etcd did not answer: the agent serves its tasks and the node registers once etcd answers", "err", err)
	}
	ctx, cancelNode := context.WithCancel(ctx)
	defer cancelNode()
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(ctx) })
	wg.Go(func() { newNodeFeed(feed, drivers, log.Named("placed")).followNode(ctx, n, a) })
	err = agentcmd.Serve(ctx, a, false, log)
	cancelNode()
	wg.Wait() // the mirror reads the agent's store: done before it closes
	if err != nil {
		return f.fail(err)
	}
	return exitOK
}

// parseDesiredSet parses a desired set as `tether cluster start` parsed
// it (cluster.ParseDesired, the key's name its entry's: the job's, or the
// task's it selects) into the feed's entries, each file's text with the
// selection: the agent reads it through its own job path (its host, its
// allow lists). A file refused is a problem (its tasks, if any, are left
// as they are, as a config dir file that does not parse). logged holds
// the revision of each name last logged, so a refusal is logged once.
func parseDesiredSet(feed *agent.Feed, ds cluster.DesiredSet, log hclog.Logger, logged map[string]int64) (map[string]agent.FeedEntry, map[string]error) {
	specs := map[string]agent.FeedEntry{}
	problems := map[string]error{}
	for name, d := range ds.Tasks {
		p, err := cluster.ParseDesired(feed.File(name), name, d.Spec)
		fresh := logged[name] != d.ModRevision
		logged[name] = d.ModRevision
		if err != nil {
			problems[name] = err
			if fresh {
				log.Error("desired task refused: its task, if any, is left as it is", "name", name, "err", err)
			}
			continue
		}
		if fresh {
			for _, n := range p.Notes {
				log.Info(n)
			}
		}
		specs[name] = agent.FeedEntry{Text: d.Spec, Inputs: p.Inputs}
	}
	for name, err := range ds.Invalid {
		problems[name] = err
	}
	for name := range logged {
		if _, ok := ds.Tasks[name]; !ok {
			delete(logged, name)
		}
	}
	log.Debug("desired state", "revision", ds.Revision, "tasks", len(specs), "refused", len(problems), "from_copy", ds.FromCopy)
	return specs, problems
}

// agentLog is the agent's open store as the mirror's source.
type agentLog struct{ a *agent.Agent }

var _ cluster.Source = agentLog{}

func (l agentLog) Heads(ctx context.Context) ([]cluster.Head, error) {
	vs, err := l.a.Versions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cluster.Head, len(vs))
	for i, v := range vs {
		out[i] = cluster.Head{Task: v.Task, Seq: v.Version}
	}
	return out, nil
}

func (l agentLog) Events(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error) {
	return l.a.LoadFrom(ctx, task, from, limit)
}
