package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

// hostAttrs are a host's attributes as DetectHost gives them.
func hostAttrs() map[string]string {
	return map[string]string{"kernel.name": "linux", "cpu.arch": "amd64", "cpu.numcores": "4", "cpu.totalcompute": "8000",
		"memory.totalbytes": "8589934592"}
}

func TestRegister_WritesTheNodesFingerprintWithItsLivenessKey(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir), func(c *NodeConfig) {
		c.Attrs, c.NodeAttrs = hostAttrs(), map[string]string{"unique.name": "host-a", "datacenter": "dc1"}
		c.Meta = map[string]string{"tier": "gold"}
		c.Capacity = Resources{CPU: 2000}
		c.Datacenter, c.Class = "east", "big"
		c.RemoteDrivers = []string{"raw_exec", "exec", "exec"}
	})
	if err := n.Register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	k := mustKeys(t)
	resp, err := cli.Txn(ctxT(t)).Then(clientv3.OpGet(k.alive("n1")), clientv3.OpGet(k.info("n1"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	alive, info := resp.Responses[0].GetResponseRange().Kvs[0], resp.Responses[1].GetResponseRange().Kvs[0]
	if alive.ModRevision != info.ModRevision {
		t.Errorf("liveness key at %d, registration at %d: want one transaction", alive.ModRevision, info.ModRevision)
	}
	var ni NodeInfo
	if err := json.Unmarshal(info.Value, &ni); err != nil {
		t.Fatal(err)
	}
	if ni.Lease != alive.Lease || ni.LeaseTTL != 2*time.Second || ni.Registered == 0 {
		t.Errorf("registration %+v under lease %x", ni, alive.Lease)
	}
	if ni.NodeAttrs["unique.name"] != "n1" || ni.NodeAttrs["datacenter"] != "east" || ni.NodeAttrs["class"] != "big" {
		t.Errorf("node attributes %v: unique.name is the node's name, datacenter and class the configured ones", ni.NodeAttrs)
	}
	if want := (Resources{CPU: 2000, MemoryMB: 8192, Cores: 4}); ni.Capacity != want {
		t.Errorf("capacity %v, want %v (cpu capped, the rest the host's)", ni.Capacity, want)
	}
	if !reflect.DeepEqual(ni.Drivers, []string{"exec", "raw_exec"}) || ni.Meta["tier"] != "gold" || ni.Attrs["cpu.arch"] != "amd64" {
		t.Errorf("registration %+v", ni)
	}
}

func TestFingerprint_Defaults(t *testing.T) {
	ni, err := fingerprint(NodeConfig{Name: "n1", Attrs: hostAttrs(), NodeAttrs: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ni.Drivers, []string{"exec"}) {
		t.Errorf("drivers %v: a node allows exec alone for remote specs unless told", ni.Drivers)
	}
	if ni.Capacity != (Resources{CPU: 8000, MemoryMB: 8192, Cores: 4}) || ni.NodeAttrs["datacenter"] != "dc1" {
		t.Errorf("defaults %+v", ni)
	}
	// A host that does not say its frequency: 1000 MHz a core.
	a := hostAttrs()
	delete(a, "cpu.totalcompute")
	if c := HostCapacity(a); c.CPU != 4000 {
		t.Errorf("capacity %v without cpu.totalcompute, want 4000 MHz", c)
	}
	// Detected, for real.
	ni, err = fingerprint(NodeConfig{Name: "real"})
	if err != nil || ni.Attrs["kernel.name"] != "linux" || ni.NodeAttrs["unique.name"] != "real" || ni.Capacity.MemoryMB <= 0 || ni.Capacity.CPU <= 0 {
		t.Errorf("detected fingerprint %+v, %v", ni, err)
	}
}

func TestFingerprint_RefusesWhatTheHostDoesNotHave(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  NodeConfig
		want string
	}{
		"cpu over":       {NodeConfig{Capacity: Resources{CPU: 8001}}, "cpu=8001 is more than this host has (8000 MHz)"},
		"memory over":    {NodeConfig{Capacity: Resources{MemoryMB: 8193}}, "memory=8193 is more than this host has (8192 MB)"},
		"cores over":     {NodeConfig{Capacity: Resources{Cores: 5}}, "cores=5 is more than this host has"},
		"negative":       {NodeConfig{Capacity: Resources{CPU: -1}}, "must not be negative"},
		"unknown driver": {NodeConfig{RemoteDrivers: []string{"docker"}}, `remote driver "docker"`},
		"empty meta key": {NodeConfig{Meta: map[string]string{"": "x"}}, "empty key"},
	} {
		c.cfg.Name, c.cfg.Attrs, c.cfg.NodeAttrs = "n1", hostAttrs(), map[string]string{}
		if _, err := fingerprint(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// The host's own figures are not over.
	if _, err := fingerprint(NodeConfig{Name: "n1", Attrs: hostAttrs(), NodeAttrs: map[string]string{}, Capacity: Resources{CPU: 8000, MemoryMB: 8192, Cores: 4}}); err != nil {
		t.Errorf("the host's own capacity refused: %v", err)
	}
}

func TestParseCapacityAndMeta(t *testing.T) {
	r, err := ParseCapacity("cpu=1500, memory=2048")
	if err != nil || r != (Resources{CPU: 1500, MemoryMB: 2048}) {
		t.Errorf("ParseCapacity = %v, %v", r, err)
	}
	if r, err := ParseCapacity("cores=2"); err != nil || r != (Resources{Cores: 2}) {
		t.Errorf("ParseCapacity cores = %v, %v", r, err)
	}
	for _, bad := range []string{"cpu", "cpu=0", "cpu=-5", "cpu=x", "disk=10", "cpu=1,cpu=2", "memory=1.5"} {
		if _, err := ParseCapacity(bad); err == nil {
			t.Errorf("ParseCapacity(%q) accepted", bad)
		}
	}
	m, err := ParseMeta([]string{"rack=r1", "tier=gold", "rack=r2", "empty="})
	if err != nil || !reflect.DeepEqual(m, map[string]string{"rack": "r2", "tier": "gold", "empty": ""}) {
		t.Errorf("ParseMeta = %v, %v", m, err)
	}
	for _, bad := range []string{"novalue", "=x"} {
		if _, err := ParseMeta([]string{bad}); err == nil {
			t.Errorf("ParseMeta(%q) accepted", bad)
		}
	}
}

func TestNode_WriteVerdictIsFencedByItsLease(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir), func(c *NodeConfig) { c.NoScheduler = true })
	v := Verdict{Job: "web", Group: "g", Index: 2, State: VerdictRunning, At: 1}
	place := mustKeys(t).place("n1", v.ID())
	put, err := cli.Put(ctxT(t), place, "{}")
	if err != nil {
		t.Fatal(err)
	}
	v.Revision = put.Header.Revision
	if err := n.WriteVerdict(ctxT(t), v); !errors.Is(err, ErrFenced) {
		t.Fatalf("verdict of an unregistered node: %v, want ErrFenced", err)
	}
	if err := n.Register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A verdict about another placement than the copy's on this node
	// (an older one, a newer one, none) is not written.
	for _, rev := range []int64{v.Revision - 1, v.Revision + 1} {
		old := v
		old.Revision = rev
		if err := n.WriteVerdict(ctxT(t), old); !errors.Is(err, ErrPlacementGone) {
			t.Errorf("verdict about revision %d of a copy placed at %d: %v, want ErrPlacementGone", rev, v.Revision, err)
		}
	}
	if err := n.WriteVerdict(ctxT(t), v); err != nil {
		t.Fatal(err)
	}
	resp, _ := cli.Get(ctxT(t), mustKeys(t).verdict("n1", v.ID()))
	var got Verdict
	if len(resp.Kvs) != 1 || json.Unmarshal(resp.Kvs[0].Value, &got) != nil || !reflect.DeepEqual(got, v) {
		t.Fatalf("verdict key %v", resp.Kvs)
	}
	if _, err := cli.Delete(ctxT(t), place); err != nil {
		t.Fatal(err)
	}
	if err := n.WriteVerdict(ctxT(t), v); !errors.Is(err, ErrPlacementGone) {
		t.Errorf("verdict about a placement removed: %v, want ErrPlacementGone", err)
	}
	if put, err = cli.Put(ctxT(t), place, "{}"); err != nil { // placed here again
		t.Fatal(err)
	}
	v.Revision = put.Header.Revision
	// Another agent took the node: this one's verdicts are refused.
	lease := n.Stats(ctxT(t)).Lease
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	if err := n.WriteVerdict(ctxT(t), v); !errors.Is(err, ErrFenced) {
		t.Errorf("verdict after the lease was lost: %v, want ErrFenced", err)
	}
	for _, bad := range []Verdict{{Job: "a/b", Group: "g", Revision: 1}, {Job: "j", Group: "", Revision: 1}, {Job: "j", Group: "g", Index: -1, Revision: 1}, {Job: "j", Group: "g"}} {
		if err := n.WriteVerdict(ctxT(t), bad); err == nil || errors.Is(err, ErrFenced) {
			t.Errorf("verdict %+v: %v, want refused for its names", bad, err)
		}
	}
}

// A task stopped just before its agent exits is mirrored stopped: the
// node's last act is to catch the mirror up (here its events are
// committed without waking the mirror, as a commit racing the agent's
// stop can be).
func TestNode_TaskStoppedJustBeforeTheAgentExitsIsMirroredStopped(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "a1", lifecycle("web", 0, 0)...)
	n := newTestNode(t, cli, "n1", dir, src, func(c *NodeConfig) { c.NoScheduler = true })
	stop := runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	// The stop's events, committed behind the mirror's back.
	if _, err := src.Store.Append(context.Background(), "a1", 6,
		fsm.Event{Type: fsm.EventStopRequested, Time: t0.Add(time.Second).UnixNano(), Signal: 15, Grace: time.Second},
		fsm.Event{Type: fsm.EventExecutorReaped, Time: t0.Add(2 * time.Second).UnixNano(), Target: fsm.StateStopped}); err != nil {
		t.Fatal(err)
	}
	lease := n.Stats(ctxT(t)).Lease
	stop()
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(lease)); err != nil { // its lease lapses
		t.Fatal(err)
	}
	f, _ := NewFleet(cli, "")
	rows, err := f.Status(ctxT(t))
	if err != nil || len(rows) != 1 || rows[0].Liveness != Down || rows[0].StateText() != "stopped" {
		t.Fatalf("status %+v, %v: want the task stopped (its stop mirrored before the agent exited), not unknown", rows, err)
	}
}
