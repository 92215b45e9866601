package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tether-fsm/tether/taskfile"
)

// RemoteDrivers are the drivers a node may allow for a spec from etcd.
var RemoteDrivers = []string{"exec", "raw_exec"}

// fingerprint is what the node registers for placement (all but its
// lease and time): cfg's attributes or this host's, its meta, its
// capacity (checked against the host's) and the drivers it allows.
func fingerprint(cfg NodeConfig) (NodeInfo, error) {
	attrs, nodeAttrs := maps.Clone(cfg.Attrs), maps.Clone(cfg.NodeAttrs)
	if attrs == nil || nodeAttrs == nil {
		h := taskfile.DetectHost(taskfile.HostConfig{Name: cfg.Name, Datacenter: cfg.Datacenter, Class: cfg.Class})
		if attrs == nil {
			attrs = h.Attrs
		}
		if nodeAttrs == nil {
			nodeAttrs = h.Node
		}
	}
	nodeAttrs["unique.name"] = cfg.Name
	if cfg.Datacenter != "" {
		nodeAttrs["datacenter"] = cfg.Datacenter
	} else if nodeAttrs["datacenter"] == "" {
		nodeAttrs["datacenter"] = "dc1"
	}
	if cfg.Class != "" {
		nodeAttrs["class"] = cfg.Class
	}
	for k := range cfg.Meta {
		if k == "" {
			return NodeInfo{}, fmt.Errorf("%w: --meta with an empty key: use KEY=VALUE", ErrInvalidNode)
		}
	}
	info := NodeInfo{Node: cfg.Name, LeaseTTL: cfg.LeaseTTL, Attrs: attrs, NodeAttrs: nodeAttrs, Meta: maps.Clone(cfg.Meta)}
	host := HostCapacity(attrs)
	c := cfg.Capacity
	for _, d := range []struct {
		name       string
		give, have *int
		unit       string
	}{{"cpu", &c.CPU, &host.CPU, "MHz"}, {"memory", &c.MemoryMB, &host.MemoryMB, "MB"}, {"cores", &c.Cores, &host.Cores, ""}} {
		switch {
		case *d.give < 0:
			return NodeInfo{}, fmt.Errorf("cluster: --capacity %s=%d: must not be negative", d.name, *d.give)
		case *d.give == 0:
			*d.give = *d.have
		case *d.have > 0 && *d.give > *d.have:
			return NodeInfo{}, fmt.Errorf("cluster: --capacity %s=%d is more than this host has (%d %s): it caps what the node offers, so that nodes sharing a host split it", d.name, *d.give, *d.have, d.unit)
		}
	}
	info.Capacity = c
	info.Drivers = slices.Clone(cfg.RemoteDrivers)
	if info.Drivers == nil {
		info.Drivers = slices.Clone(DefaultRemoteDrivers)
	}
	for _, d := range info.Drivers {
		if !slices.Contains(RemoteDrivers, d) {
			return NodeInfo{}, fmt.Errorf("cluster: remote driver %q: tether runs %s", d, strings.Join(RemoteDrivers, " and "))
		}
	}
	slices.Sort(info.Drivers)
	info.Drivers = slices.Compact(info.Drivers)
	return info, nil
}

// HostCapacity is what a host of these attributes offers: cpu.totalcompute
// MHz (cpu.numcores × 1000 where the host does not say its frequency),
// memory.totalbytes in MB, cpu.numcores cores.
func HostCapacity(attrs map[string]string) Resources {
	num := func(k string) int {
		v, _ := strconv.ParseInt(attrs[k], 10, 64)
		return int(max(0, v))
	}
	r := Resources{CPU: num("cpu.totalcompute"), MemoryMB: num("memory.totalbytes") >> 20, Cores: num("cpu.numcores")}
	if r.CPU == 0 {
		r.CPU = r.Cores * 1000
	}
	return r
}

// ParseCapacity reads --capacity: comma-separated cpu=MHZ, memory=MB and
// cores=N, each at most once; what it leaves out is the host's.
func ParseCapacity(s string) (Resources, error) {
	var r Resources
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if !ok || err != nil || n <= 0 {
			return Resources{}, fmt.Errorf("cluster: --capacity %q: want cpu=MHZ,memory=MB (positive whole numbers; cores=N too)", s)
		}
		k = strings.TrimSpace(k)
		if seen[k] {
			return Resources{}, fmt.Errorf("cluster: --capacity %q gives %s twice", s, k)
		}
		seen[k] = true
		switch k {
		case "cpu":
			r.CPU = n
		case "memory":
			r.MemoryMB = n
		case "cores":
			r.Cores = n
		default:
			return Resources{}, fmt.Errorf("cluster: --capacity %q: %q is not cpu, memory or cores", s, k)
		}
	}
	return r, nil
}

// ParseMeta reads repeated KEY=VALUE flags (--meta) into a map; a later
// key wins.
func ParseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("cluster: --meta %q: use KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

// schedule campaigns for the fleet's scheduling while the node holds a
// lease, on a session on that lease, and schedules while it leads. A lost
// lease ends the session (and the leadership with it); the next
// registration campaigns again.
func (n *Node) schedule(ctx context.Context) {
	var b backoff
	for ctx.Err() == nil {
		lease, changed := n.fence.get()
		if lease == 0 {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-lctx.Done():
			}
		}()
		err := n.leadOn(lctx, lease)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			n.log.Debug("scheduler campaign ended", "err", err)
			b.wait(ctx, n.cfg.LeaseTTL)
			continue
		}
		b.reset()
	}
}

// leadOn campaigns and leads on a session on lease. The session is
// orphaned, never closed: closing it would revoke the node's own lease.
func (n *Node) leadOn(ctx context.Context, lease clientv3.LeaseID) error {
	session, err := concurrency.NewSession(n.cli, concurrency.WithLease(lease), concurrency.WithContext(ctx))
	if err != nil {
		return unavailable("open the scheduler's session", err)
	}
	defer session.Orphan()
	return n.sched.Lead(ctx, session)
}

// WriteVerdict writes the node's word on a copy placed on it
// (verdict/NODE/JOB/GROUP/INDEX) about its placement at v.Revision, in a
// transaction fenced by the node's lease and guarded by that placement:
// an agent that lost the node writes nothing (ErrFenced), and a verdict
// about a placement that is no longer the copy's on this node (moved,
// replaced, or its job stopped) is not written (ErrPlacementGone): the
// node the copy is now on speaks for it.
func (n *Node) WriteVerdict(ctx context.Context, v Verdict) error {
	if err := ValidateJobName("job", v.Job); err != nil {
		return err
	}
	if err := ValidateJobName("group", v.Group); err != nil {
		return err
	}
	if v.Index < 0 {
		return fmt.Errorf("cluster: verdict for copy index %d", v.Index)
	}
	if v.Revision <= 0 {
		return fmt.Errorf("cluster: verdict on copy %s without its placement revision", v.ID())
	}
	b, _ := json.Marshal(v)
	return n.fencedPut(ctx, n.keys.place(n.cfg.Name, v.ID()), v.Revision, n.keys.verdict(n.cfg.Name, v.ID()), b, "write a verdict")
}

// fencedPut puts val at key if the node's liveness key is under its
// lease and guard is at revision rev.
func (n *Node) fencedPut(ctx context.Context, guard string, rev int64, key string, val []byte, what string) error {
	lease, _ := n.fence.get()
	if lease == 0 {
		return fmt.Errorf("%w: the node holds no lease", ErrFenced)
	}
	alive := n.keys.alive(n.cfg.Name)
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(alive), "=", lease), clientv3.Compare(clientv3.ModRevision(guard), "=", rev)).
		Then(clientv3.OpPut(key, string(val))).
		Else(clientv3.OpGet(alive)). // keys-only answers carry no lease
		Commit()
	if err != nil {
		return unavailable(what, err)
	}
	if resp.Succeeded {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != lease {
		return ErrFenced
	}
	return fmt.Errorf("%w: %s is no longer at revision %d", ErrPlacementGone, guard, rev)
}

// DesiredVerdict is the value of standing/NODE/NAME: the node's word on a
// task it was told to run (desired/NODE/NAME) as of the desired key's
// revision, which `tether cluster start` waits for.
type DesiredVerdict struct {
	Name string `json:"name"`
	// Revision is the desired key's ModRevision the verdict is about.
	Revision int64        `json:"revision"`
	State    VerdictState `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	// At is when the node said it (its clock).
	At    int64         `json:"at"`
	Tasks []VerdictTask `json:"tasks,omitempty"`
}

// WriteDesiredVerdict writes the node's word on a desired task
// (standing/NODE/NAME), fenced by its lease and guarded by the desired
// key at v.Revision (ErrPlacementGone when it changed or is gone).
func (n *Node) WriteDesiredVerdict(ctx context.Context, v DesiredVerdict) error {
	if err := ValidateName(v.Name); err != nil {
		return err
	}
	if v.Revision <= 0 {
		return fmt.Errorf("cluster: verdict on desired task %q without its revision", v.Name)
	}
	b, _ := json.Marshal(v)
	return n.fencedPut(ctx, n.keys.desired(n.cfg.Name, v.Name), v.Revision, n.keys.standing(n.cfg.Name, v.Name), b, "write a desired task's verdict")
}

// Info returns what the node registers (its lease and time aside).
func (n *Node) Info() NodeInfo { return n.info }
