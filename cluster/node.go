package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/job"
)

// Defaults of NodeConfig.
const (
	DefaultLeaseTTL = 10 * time.Second
	// MinLeaseTTL is the shortest lease a node may ask for: etcd itself
	// refuses leases shorter than about 1.5 election timeouts.
	MinLeaseTTL = 2 * time.Second
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// DefaultMaxTxnBytes keeps a batch under etcd's default
	// --max-request-bytes (1.5 MiB) with room for keys and framing.
	DefaultMaxTxnBytes = 1 << 20
)

// NodeConfig configures a node's side of the fleet.
type NodeConfig struct {
	// Name is the node's name, validated as task ids are.
	Name string
	// Prefix is the fleet's key prefix ("" is DefaultPrefix).
	Prefix string
	// LeaseTTL is the liveness lease's TTL (default DefaultLeaseTTL, at
	// least MinLeaseTTL): a node whose agent died shows down within it.
	LeaseTTL time.Duration
	// StatusInterval is how often the node's status (seen, mirror lag)
	// is written (default LeaseTTL/2).
	StatusInterval time.Duration
	// Dir is a private directory in the node's state directory for the
	// desired state's local copy and the lease record (created 0700).
	Dir string
	// Source is the local log; Changes its commit notes (StoreSource has
	// both).
	Source  Source
	Changes *Changes
	// MaxTxnOps and MaxTxnBytes bound one mirror transaction (defaults:
	// etcd's defaults, DefaultMaxTxnOps and DefaultMaxTxnBytes).
	MaxTxnOps   int
	MaxTxnBytes int
	// Logger receives the node's logs; nil means none.
	Logger hclog.Logger
	// Hooks crash the node at named points (tests).
	Hooks Hooks
	// Policy is the node's allow lists (its agent's): a desired spec is
	// judged under Policy.ForRemote before it is kept or run.
	Policy job.Policy
	// Now is the clock for the times the node publishes (default
	// time.Now).
	Now func() time.Time

	// What the node registers for placement (info/NODE), with its
	// liveness key.
	//
	// Attrs are its ${attr.*} and NodeAttrs its ${node.*}; nil detects
	// this host's (taskfile.DetectHost). node.unique.name is always Name
	// (several nodes may share a host), node.datacenter Datacenter
	// (default dc1) and node.class Class.
	Attrs      map[string]string
	NodeAttrs  map[string]string
	Datacenter string
	Class      string
	// Meta is the node's meta, ${meta.*}: the operator's --meta
	// KEY=VALUE.
	Meta map[string]string
	// Capacity caps what the node offers (--capacity cpu=MHZ,memory=MB):
	// a zero field is the host's (cpu.totalcompute, memory.totalbytes,
	// cpu.numcores); more than the host has is refused.
	Capacity Resources
	// RemoteDrivers are the drivers the node allows for a spec from etcd
	// (--allow-remote-drivers; nil: DefaultRemoteDrivers).
	RemoteDrivers []string
	// NoScheduler keeps the node out of the election of the fleet's
	// scheduler; by default every node is a candidate.
	NoScheduler bool
	// Scheduling tunes the node's scheduler when it leads (Name, Prefix,
	// Logger and Hooks are the node's).
	Scheduling SchedulerConfig
}

// DefaultRemoteDrivers are the drivers a node allows for a spec from
// etcd unless its operator says otherwise: whoever can write to etcd is
// trusted less than a local file.
var DefaultRemoteDrivers = []string{"exec"}

// Node is one agent's side of the fleet: it holds the node's liveness
// lease, mirrors the local log to etcd, publishes the node's status, and
// watches the node's desired state. See doc.go for how an agent runs it.
type Node struct {
	cli   *clientv3.Client
	cfg   NodeConfig
	keys  Keys
	log   hclog.Logger
	fence fence
	stats stats
	mir   *mirror
	want  *watcher
	place *placeWatcher
	seen  contact // the node's last proof that etcd holds its lease

	info  NodeInfo // the registration, but for its lease and time
	sched *Scheduler

	mu       sync.Mutex
	ours     map[clientv3.LeaseID]bool // leases this process or this state directory held
	recorded []clientv3.LeaseID        // the lease record's, newest last
	fileMu   sync.Mutex                // held while the lease record is read and rewritten
	upSince  int64
}

// NewNode checks cfg and returns a node. It contacts nothing.
func NewNode(cli *clientv3.Client, cfg NodeConfig) (*Node, error) {
	if err := ValidateNodeName(cfg.Name); err != nil {
		return nil, err
	}
	keys, err := NewKeys(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.LeaseTTL == 0:
		cfg.LeaseTTL = DefaultLeaseTTL
	case cfg.LeaseTTL < MinLeaseTTL:
		return nil, fmt.Errorf("cluster: lease TTL %s is shorter than %s, which etcd cannot keep", cfg.LeaseTTL, MinLeaseTTL)
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = cfg.LeaseTTL / 2
	}
	if cfg.MaxTxnOps <= 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	if cfg.MaxTxnOps < 4 {
		return nil, fmt.Errorf("cluster: MaxTxnOps %d is too small for one event (at least 4)", cfg.MaxTxnOps)
	}
	if cfg.MaxTxnBytes <= 0 {
		cfg.MaxTxnBytes = DefaultMaxTxnBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Source == nil || cfg.Changes == nil {
		return nil, errors.New("cluster: NodeConfig needs a Source and its Changes (NewStoreSource gives both)")
	}
	if cfg.Dir == "" {
		return nil, errors.New("cluster: NodeConfig needs Dir, a private directory in the state directory")
	}
	if err := privateDir(cfg.Dir); err != nil {
		return nil, err
	}
	info, err := fingerprint(cfg)
	if err != nil {
		return nil, err
	}
	n := &Node{cli: cli, cfg: cfg, keys: keys, log: cfg.Logger.With("node", cfg.Name), ours: map[clientv3.LeaseID]bool{}, info: info}
	if !cfg.NoScheduler {
		sc := cfg.Scheduling
		sc.Name, sc.Prefix, sc.Logger, sc.Hooks = cfg.Name, cfg.Prefix, n.log, cfg.Hooks
		if n.sched, err = NewScheduler(cli, sc); err != nil {
			return nil, err
		}
	}
	n.fence.init()
	if ids, err := n.readLeaseRecord(); err == nil {
		for _, id := range ids {
			n.ours[id] = true
		}
		n.recorded = ids
	}
	n.mir = newMirror(n)
	n.want = newWatcher(cli, keys, cfg.Name, cfg.Dir, cfg.Policy, cfg.Logger.With("node", cfg.Name), cfg.Hooks)
	n.place = newPlaceWatcher(cli, keys, cfg.Name, cfg.Dir, cfg.Logger.With("node", cfg.Name), cfg.Hooks)
	n.seen.init(cfg.Now())
	return n, nil
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Register takes the node's liveness key once: it returns nil when this
// agent holds the node, a *NodeHeldError (ErrNodeHeld) naming the holder
// when another agent does, and an error wrapping ErrUnavailable when etcd
// did not answer before ctx ended. An agent calls it at start and exits
// on ErrNodeHeld; on ErrUnavailable it goes on (Run keeps trying).
//
// A liveness key left by an earlier agent of the same state directory
// (SIGKILLed before its lease ran out) is taken over at once: the caller
// must hold the state directory's store, which proves that agent is gone.
func (n *Node) Register(ctx context.Context) error {
	if id, _ := n.fence.get(); id != 0 {
		return nil
	}
	id, err := n.register(ctx)
	if err != nil {
		return err
	}
	n.fence.set(id)
	return nil
}

// Run runs the node until ctx ends: the liveness lease (registered again
// whenever it is lost), the mirror, the status publisher and the desired
// state's watcher, each in its own goroutine. It never stops a task and
// never gives up on etcd: an outage is logged, and everything catches up
// when etcd answers again. It returns ctx's error.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { n.liveness(ctx) })
	wg.Go(func() { n.mir.run(ctx) })
	wg.Go(func() { n.publish(ctx) })
	wg.Go(func() { n.want.run(ctx) })
	wg.Go(func() { n.place.run(ctx) })
	if n.sched != nil {
		wg.Go(func() { n.schedule(ctx) })
	}
	wg.Wait()
	if id, _ := n.fence.get(); id != 0 {
		// The node's last word: what the local log holds that the mirror
		// does not (a task stopped just before the agent exits is then
		// shown stopped while the node is down, not unknown).
		fctx, cancel := context.WithTimeout(context.Background(), min(flushTimeout, n.cfg.LeaseTTL))
		if err := n.mir.flush(fctx, id); err != nil {
			n.log.Warn("the mirror's last catch-up failed; the next agent catches up", "err", err)
		}
		cancel()
		// Leave the lease to run out rather than revoking it: the node
		// shows down after the TTL unless a new agent takes over first.
		n.log.Debug("node stopped", "lease", fmt.Sprintf("%x", int64(id)))
	}
	return ctx.Err()
}

// Desired returns the channel on which the node delivers its desired
// state: the local copy at once (when there is one), then etcd's at
// every change. Only the newest undelivered set is kept: a slow converger
// skips to the latest.
func (n *Node) Desired() <-chan DesiredSet { return n.want.out }

// Placements returns the channel on which the node delivers what is
// placed on it (place/NODE/, each copy with its job's file and inputs):
// the local copy at once (when there is one, FromCopy), then etcd's at
// every change. Only the newest undelivered set is kept.
func (n *Node) Placements() <-chan PlacedSet { return n.place.out }

// Contact returns the node's last proof that etcd holds its lease (when
// it sent the request that registered it, or received a keep-alive's
// answer; when the node started, before any) and a channel closed at its
// next change. A node cut off from etcd sees it age: its copies with a
// stop_after_client_disconnect stop once it is that old (Disconnected).
func (n *Node) Contact() (time.Time, <-chan struct{}) { return n.seen.get() }

// KeepAliveGap is the longest a node connected to etcd goes between two
// proofs of its lease (Contact): the client renews the lease every third
// of its TTL, checked every half second, and an answer takes a round trip
// (given a second). A shorter loss of etcd cannot be told from no loss.
func (n *Node) KeepAliveGap() time.Duration {
	return time.Duration(n.ttlSeconds())*time.Second/3 + time.Second
}

// contact is a time and a channel closed at each change of it.
type contact struct {
	mu      sync.Mutex
	at      time.Time
	changed chan struct{}
}

func (c *contact) init(at time.Time) {
	c.at, c.changed = at, make(chan struct{})
}

func (c *contact) get() (time.Time, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.changed
}

// touch moves the contact forward to at (never back) and returns the
// contact it replaced.
func (c *contact) touch(at time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.at
	if !at.After(c.at) {
		return prev
	}
	c.at = at
	close(c.changed)
	c.changed = make(chan struct{})
	return prev
}

// touchContact records a proof of the lease at at. After a gap longer
// than a connected node sees (KeepAliveGap), the node's placements are
// listed again: a set delivered from then on is etcd's as of after the
// node came back, which is what a copy stopped for
// stop_after_client_disconnect waits for before it runs again.
func (n *Node) touchContact(at time.Time) {
	if prev := n.seen.touch(at); at.Sub(prev) > n.KeepAliveGap() {
		n.place.relist()
	}
}

// Stats is what a node reports of itself.
type Stats struct {
	// Lease is the lease holding the node's liveness key; 0 while the
	// node is not registered (etcd unreachable, or the node held).
	Lease int64
	// LeaseLosses counts the leases lost and registered again.
	LeaseLosses uint64
	// LagEvents is the number of committed events not yet mirrored, and
	// LagSeconds the age of the oldest of them (0 when caught up).
	LagEvents  uint64
	LagSeconds float64
	// Mirrored counts the events this process wrote to etcd, Txns its
	// mirror transactions, and Conflicts the transactions whose guard
	// failed (a retry that had already committed, a fence).
	Mirrored  uint64
	Txns      uint64
	Conflicts uint64
	// Pruned counts the tasks deleted from the mirror because the local
	// log no longer has them (gc), or diverged from it.
	Pruned uint64
	// LastError is the last error of etcd, "" after a success.
	LastError string
}

// Stats returns the node's current figures. It reads the local log's
// heads for the lag.
func (n *Node) Stats(ctx context.Context) Stats {
	now := n.cfg.Now()
	s := n.stats.get()
	id, _ := n.fence.get()
	s.Lease = int64(id)
	if events, oldest, err := n.mir.lag(ctx); err == nil {
		s.LagEvents = events
		if oldest != 0 {
			s.LagSeconds = max(0, now.Sub(time.Unix(0, oldest)).Seconds())
		}
	}
	return s
}

// stats are the figures the node's goroutines update.
type stats struct {
	mu sync.Mutex
	s  Stats
}

func (st *stats) update(fn func(s *Stats)) {
	st.mu.Lock()
	fn(&st.s)
	st.mu.Unlock()
}

func (st *stats) get() Stats {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

func (st *stats) fail(err error) {
	st.update(func(s *Stats) {
		if err == nil {
			s.LastError = ""
		} else {
			s.LastError = err.Error()
		}
	})
}

// fence is the lease under which the node may write: 0 while it holds
// none. Every mirror and status write compares the liveness key's lease
// with it in the same transaction, so an agent that lost the node can
// never write beside the one that holds it.
type fence struct {
	mu      sync.Mutex
	lease   clientv3.LeaseID
	changed chan struct{} // closed at every change
}

func (f *fence) init() { f.changed = make(chan struct{}) }

func (f *fence) get() (clientv3.LeaseID, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease, f.changed
}

func (f *fence) set(id clientv3.LeaseID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease == id {
		return
	}
	f.lease = id
	close(f.changed)
	f.changed = make(chan struct{})
}

// leaseRecord is the file in Dir naming the lease this state directory's
// agent last held, so that its successor can take the node over at once.
const leaseRecord = "lease.json"

type leaseFile struct {
	Node string `json:"node"`
	// Leases are the last leases granted to this state directory's
	// agents, newest last: any of them may hold the liveness key.
	Leases []int64 `json:"leases"`
}

// maxLeaseRecord bounds the leases remembered.
const maxLeaseRecord = 8

func (n *Node) readLeaseRecord() ([]clientv3.LeaseID, error) {
	b, err := readPrivateFile(n.cfg.Dir, leaseRecord)
	if err != nil {
		return nil, err
	}
	var lf leaseFile
	if err := json.Unmarshal(b, &lf); err != nil || lf.Node != n.cfg.Name {
		return nil, fmt.Errorf("%w: %s: not this node's lease record", ErrLocalCopy, leaseRecord)
	}
	var out []clientv3.LeaseID
	for _, l := range lf.Leases {
		out = append(out, clientv3.LeaseID(l))
	}
	return out, nil
}

// forgetLease drops a lease that never held the key from the record, so
// that refused attempts do not push the holder's lease out of it.
func (n *Node) forgetLease(id clientv3.LeaseID) {
	n.mu.Lock()
	delete(n.ours, id)
	n.recorded = slices.DeleteFunc(n.recorded, func(l clientv3.LeaseID) bool { return l == id })
	n.mu.Unlock()
	if err := n.writeLeaseRecord(id); err != nil {
		n.log.Warn("could not update the lease record", "err", err)
	}
}

// writeLeaseRecord writes the lease record: this node's leases, after the
// leases the file names that this node does not know (another node of the
// same state directory wrote them: a successor that took the node over
// while this one was stalled) except drop. A stalled node that resumes and
// rewrites the record must not drop its successor's lease from it, or the
// next agent could not take over the key that lease holds; nor does it
// take those leases for its own (it would take the node back from a live
// successor).
func (n *Node) writeLeaseRecord(drop clientv3.LeaseID) error {
	n.fileMu.Lock()
	defer n.fileMu.Unlock()
	onFile, _ := n.readLeaseRecord()
	lf := leaseFile{Node: n.cfg.Name}
	n.mu.Lock()
	var foreign []int64
	for _, l := range onFile {
		if l != drop && !slices.Contains(n.recorded, l) {
			foreign = append(foreign, int64(l))
		}
	}
	if len(foreign) > maxLeaseRecord {
		foreign = foreign[len(foreign)-maxLeaseRecord:]
	}
	lf.Leases = foreign
	for _, l := range n.recorded {
		lf.Leases = append(lf.Leases, int64(l))
	}
	n.mu.Unlock()
	b, _ := json.Marshal(lf)
	return writeFileAtomic(n.cfg.Dir, leaseRecord, b)
}

// recordLease adds id to the lease record, durably, before the lease
// may hold the liveness key: a successor that finds the key under any
// recorded lease takes it over at once, whichever step its predecessor
// died at.
func (n *Node) recordLease(id clientv3.LeaseID) error {
	n.mu.Lock()
	n.ours[id] = true
	n.recorded = append(n.recorded, id)
	if len(n.recorded) > maxLeaseRecord {
		n.recorded = n.recorded[len(n.recorded)-maxLeaseRecord:]
	}
	n.mu.Unlock()
	return n.writeLeaseRecord(0)
}

func (n *Node) ttlSeconds() int64 { return max(1, int64((n.cfg.LeaseTTL+time.Second-1)/time.Second)) }

// register grants a lease and creates the liveness key under it if absent
// (taking over one of our own earlier leases' keys), in one attempt.
func (n *Node) register(ctx context.Context) (clientv3.LeaseID, error) {
	sent := n.cfg.Now() // the lease runs from after this
	grant, err := n.cli.Grant(ctx, n.ttlSeconds())
	if err != nil {
		return 0, unavailable("grant a lease", err)
	}
	if err := n.recordLease(grant.ID); err != nil {
		// Not fatal: a successor then waits out the lease instead.
		n.log.Warn("could not record the lease in the state directory", "err", err)
	}
	n.cfg.Hooks.crash(CrashLivenessAfterGrant)
	host, _ := os.Hostname()
	now := n.cfg.Now()
	holder := Holder{Node: n.cfg.Name, Host: host, PID: os.Getpid(), Dir: n.cfg.Dir, Lease: int64(grant.ID), Started: now.UnixNano()}
	val, _ := json.Marshal(holder)
	info := n.info
	info.Lease, info.Registered = int64(grant.ID), now.UnixNano()
	infoVal, _ := json.Marshal(info)
	// Its first status goes with the liveness key: a node whose agent
	// stops before its first status interval is still listed (down, seen
	// at its registration) once its lease expires.
	statusVal, _ := json.Marshal(nodeStatus{Node: n.cfg.Name, Host: host, PID: os.Getpid(), UpSince: now.UnixNano(), Seen: now.UnixNano()})
	key := n.keys.alive(n.cfg.Name)
	for attempt := 0; ; attempt++ {
		resp, err := n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(grant.ID)), clientv3.OpPut(n.keys.info(n.cfg.Name), string(infoVal)),
				clientv3.OpPut(n.keys.status(n.cfg.Name), string(statusVal))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			n.revoke(grant.ID)
			return 0, unavailable("create the liveness key", err)
		}
		if resp.Succeeded {
			break
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue // it lapsed between the compare and the get
		}
		kv := kvs[0]
		prev := clientv3.LeaseID(kv.Lease)
		n.mu.Lock()
		ours := n.ours[prev] && prev != grant.ID
		n.mu.Unlock()
		if !ours || attempt > 0 {
			n.revoke(grant.ID)
			n.forgetLease(grant.ID)
			var h Holder
			_ = json.Unmarshal(kv.Value, &h)
			h.Lease = kv.Lease
			return 0, &NodeHeldError{Node: n.cfg.Name, Holder: h}
		}
		// A key of this state directory's earlier agent: delete it (only
		// while it is still under that lease) and end that lease.
		if _, err := n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", prev)).
			Then(clientv3.OpDelete(key)).
			Commit(); err != nil {
			n.revoke(grant.ID)
			return 0, unavailable("take over the liveness key", err)
		}
		n.revoke(prev)
		n.log.Info("took over the node from this state directory's earlier agent", "lease", fmt.Sprintf("%x", int64(prev)))
	}
	n.cfg.Hooks.crash(CrashLivenessAfterCreate)
	n.touchContact(sent)
	n.mu.Lock()
	n.upSince = now.UnixNano()
	n.mu.Unlock()
	n.log.Info("node registered", "lease", fmt.Sprintf("%x", int64(grant.ID)), "ttl", n.cfg.LeaseTTL)
	return grant.ID, nil
}

// revoke ends a lease, best effort, without waiting long.
func (n *Node) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = n.cli.Revoke(ctx, id)
}

// liveness keeps the node registered: it keeps the lease alive, notices
// its loss (the keep-alive channel closes when etcd says the lease is
// gone or does not answer within the TTL), logs it, and registers again.
// It never touches a task.
func (n *Node) liveness(ctx context.Context) {
	var b backoff
	for ctx.Err() == nil {
		id, _ := n.fence.get()
		if id == 0 {
			rctx, cancel := context.WithTimeout(ctx, n.cfg.LeaseTTL)
			var err error
			id, err = n.register(rctx)
			cancel()
			if err != nil {
				n.stats.fail(err)
				if errors.Is(err, ErrNodeHeld) {
					n.log.Error("cannot register: the node is held by another agent; nothing is written until it is free", "err", err)
				} else if ctx.Err() == nil {
					n.log.Warn("cannot register with etcd; tasks run on, and the mirror catches up once it can", "err", err)
				}
				b.wait(ctx, n.cfg.LeaseTTL)
				continue
			}
			n.fence.set(id)
		}
		b.reset()
		ka, err := n.cli.KeepAlive(ctx, id)
		if err == nil {
			// Drained until the lease is lost or ctx ends. Each answer says
			// etcd renewed the lease, for a whole TTL, less than a round
			// trip before it arrived: the node's contact.
			for range ka {
				n.touchContact(n.cfg.Now())
			}
		}
		if ctx.Err() != nil {
			return
		}
		n.fence.set(0)
		n.stats.update(func(s *Stats) { s.LeaseLosses++ })
		n.log.Warn("liveness lease lost (etcd unreachable or the lease expired); registering again. Tasks are not affected",
			"lease", fmt.Sprintf("%x", int64(id)), "err", err)
	}
}

// publish writes the node's status (seen, up since, mirror lag) at every
// StatusInterval while the node is registered, fenced by its lease.
func (n *Node) publish(ctx context.Context) {
	t := time.NewTicker(n.cfg.StatusInterval)
	defer t.Stop()
	for {
		id, changed := n.fence.get()
		if id != 0 {
			if err := n.writeStatus(ctx, id); err != nil && ctx.Err() == nil {
				n.log.Debug("status not written", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
	}
}

func (n *Node) writeStatus(ctx context.Context, id clientv3.LeaseID) error {
	now := n.cfg.Now()
	s := n.Stats(ctx)
	host, _ := os.Hostname()
	n.mu.Lock()
	up := n.upSince
	n.mu.Unlock()
	val, _ := json.Marshal(nodeStatus{Node: n.cfg.Name, Host: host, PID: os.Getpid(), UpSince: up, Seen: now.UnixNano(),
		LagEvents: s.LagEvents, LagSeconds: s.LagSeconds, Mirrored: s.Mirrored})
	wctx, cancel := context.WithTimeout(ctx, n.cfg.StatusInterval)
	defer cancel()
	resp, err := n.cli.Txn(wctx).
		If(clientv3.Compare(clientv3.LeaseValue(n.keys.alive(n.cfg.Name)), "=", id)).
		Then(clientv3.OpPut(n.keys.status(n.cfg.Name), string(val))).
		Commit()
	if err != nil {
		return unavailable("write the node's status", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}

// unavailable wraps an etcd client error as ErrUnavailable, keeping the
// client's error in the chain.
func unavailable(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// backoff waits between attempts at etcd: from 100ms, doubling with
// jitter, up to a cap.
type backoff struct{ d time.Duration }

func (b *backoff) reset() { b.d = 0 }

func (b *backoff) wait(ctx context.Context, limit time.Duration) {
	switch {
	case b.d == 0:
		b.d = 100 * time.Millisecond
	case b.d < limit:
		b.d = min(2*b.d, limit)
	}
	d := b.d/2 + rand.N(b.d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
