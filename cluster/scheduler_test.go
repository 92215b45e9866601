package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

// simNode is a node as the scheduler sees it: a liveness key under a
// lease and its registration, written as Node.register writes them, with
// no agent behind it. Its lease is never kept alive by itself: a test
// loses the node by revoking it (its lease running out at once).
type simNode struct {
	t     tb
	cli   *clientv3.Client
	keys  Keys
	name  string
	info  NodeInfo
	lease clientv3.LeaseID
}

func simInfo(name string, cpu, mem int, meta ...string) NodeInfo {
	return cand(name, cpu, mem, meta...).Info
}

// addNode registers a node with a lease of ttl seconds.
func addNode(t testing.TB, cli *clientv3.Client, info NodeInfo, ttl int64) *simNode {
	n := &simNode{t: t, cli: cli, keys: mustKeys(t), name: info.Node, info: info}
	n.register(ttl)
	return n
}

func (n *simNode) register(ttl int64) {
	n.t.Helper()
	ctx := ctxT(n.t)
	g, err := n.cli.Grant(ctx, ttl)
	if err != nil {
		n.t.Fatal(err)
	}
	n.lease = g.ID
	info := n.info
	info.Lease, info.LeaseTTL = int64(g.ID), time.Duration(ttl)*time.Second
	hv, _ := json.Marshal(Holder{Node: n.name, Lease: int64(g.ID)})
	iv, _ := json.Marshal(info)
	resp, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(n.keys.alive(n.name)), "=", 0)).
		Then(clientv3.OpPut(n.keys.alive(n.name), string(hv), clientv3.WithLease(g.ID)), clientv3.OpPut(n.keys.info(n.name), string(iv))).Commit()
	if err != nil || !resp.Succeeded {
		n.t.Fatalf("register %s: %v", n.name, err)
	}
}

// lose revokes the node's lease: its liveness key is gone, as when the
// lease runs out.
func (n *simNode) lose() {
	n.t.Helper()
	if _, err := n.cli.Revoke(ctxT(n.t), n.lease); err != nil {
		n.t.Fatal(err)
	}
}

// verdict writes the node's verdict on the copy as placed now.
func (n *simNode) verdict(id CopyID, state VerdictState, reason string, at time.Time) {
	n.t.Helper()
	pl := placedOf(n.t, n.cli, id)
	if pl.Node != n.name {
		n.t.Fatalf("verdict of %s on %s: the copy is on %s", id, n.name, pl.Node)
	}
	b, _ := json.Marshal(Verdict{Job: id.Job, Group: id.Group, Index: id.Index, Revision: pl.Revision, State: state, Reason: reason, At: at.UnixNano()})
	if _, err := n.cli.Put(ctxT(n.t), n.keys.verdict(n.name, id), string(b)); err != nil {
		n.t.Fatal(err)
	}
}

// placedOf reads a copy's placement (the zero Placed when none).
func placedOf(t tb, cli *clientv3.Client, id CopyID) Placed {
	t.Helper()
	k := mustKeys(t)
	resp, err := cli.Get(ctxT(t), k.alloc(id))
	if err != nil {
		t.Fatal(err)
	}
	var pl Placed
	if len(resp.Kvs) == 1 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &pl); err != nil {
			t.Fatal(err)
		}
		pl.Revision = resp.Kvs[0].ModRevision
	}
	return pl
}

// fakeClock is the scheduler's clock in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testSched is a scheduler that leads on a session of its own lease; a
// test runs its passes one at a time.
type testSched struct {
	t       testing.TB
	s       *Scheduler
	lead    leadership
	session *concurrency.Session
	clock   *fakeClock
}

func newSched(t testing.TB, cli *clientv3.Client, name string, tune ...func(*SchedulerConfig)) *testSched {
	t.Helper()
	clock := &fakeClock{now: t0}
	cfg := SchedulerConfig{Name: name, Now: clock.Now, Logger: nopLog()}
	for _, f := range tune {
		f(&cfg)
	}
	s, err := NewScheduler(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { session.Close() })
	e := concurrency.NewElection(session, s.keys.leaderPrefix())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, name); err != nil {
		t.Fatal(err)
	}
	return &testSched{t: t, s: s, lead: leadership{key: e.Key(), rev: e.Rev()}, session: session, clock: clock}
}

// settle runs passes until one changes nothing, and returns it.
func (ts *testSched) settle() PassStats {
	ts.t.Helper()
	for range 50 {
		st := ts.s.Pass(ctxT(ts.t), ts.lead)
		if st.Err != nil {
			ts.t.Fatalf("pass: %v", st.Err)
		}
		if st.Quiet() {
			return st
		}
	}
	ts.t.Fatal("the scheduler did not settle in 50 passes")
	return PassStats{}
}

// runJob writes a job as `tether cluster run` does.
func runJob(t testing.TB, cli *clientv3.Client, text string) RunResult {
	t.Helper()
	f, _ := NewFleet(cli, "")
	r, err := f.Run(ctxT(t), JobSpec{File: "job.nomad", Text: text}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fleetPlacements reads every placement and checks the placement keys
// against them: each copy under exactly its node, at its revision.
func fleetPlacements(t testing.TB, cli *clientv3.Client) map[CopyID]Placed {
	t.Helper()
	k := mustKeys(t)
	resp, err := cli.Txn(ctxT(t)).Then(clientv3.OpGet(k.allocPrefix(""), clientv3.WithPrefix()), clientv3.OpGet(k.prefix+"place/", clientv3.WithPrefix())).Commit()
	if err != nil {
		t.Fatal(err)
	}
	out := map[CopyID]Placed{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		var pl Placed
		if err := json.Unmarshal(kv.Value, &pl); err != nil {
			t.Fatal(err)
		}
		pl.Revision = kv.ModRevision
		out[pl.ID()] = pl
	}
	under := map[CopyID]int{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		parts := k.split(string(kv.Key), "place/", 4)
		id, ok := copyID(parts[1:])
		if !ok {
			t.Fatalf("placement key %s does not name a copy", kv.Key)
		}
		under[id]++
		pl, ok := out[id]
		if !ok || pl.Node != parts[0] || pl.Revision != kv.ModRevision {
			t.Errorf("%s: under node %s at revision %d, placed %+v", id, parts[0], kv.ModRevision, pl)
		}
	}
	for id := range out {
		if under[id] != 1 {
			t.Errorf("%s is under %d nodes' keys, want exactly 1", id, under[id])
		}
	}
	return out
}

func countByNode(m map[CopyID]Placed) map[string]int {
	out := map[string]int{}
	for _, pl := range m {
		out[pl.Node]++
	}
	return out
}

func TestScheduler_PlacesAJobOnMatchingNodesAndNodesSeeIt(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 4000, "tier", "gold"), 60)
	addNode(t, cli, simInfo("n2", 4000, 4000, "tier", "silver"), 60)
	addNode(t, cli, simInfo("n3", 4000, 4000, "tier", "gold"), 60)
	runJob(t, cli, jobText("web", 6, 100, 100, "constraint {\nattribute = \"${meta.tier}\"\nvalue = \"gold\"\n}"))
	ts := newSched(t, cli, "n1")
	ts.settle()
	got := fleetPlacements(t, cli)
	if c := countByNode(got); c["n1"] != 3 || c["n3"] != 3 || c["n2"] != 0 {
		t.Errorf("copies per node %v: want 3 on each gold node", c)
	}
	for id, pl := range got {
		if pl.Version != 1 || pl.Reason != ReasonNew || pl.Use != (Resources{CPU: 100, MemoryMB: 100}) {
			t.Errorf("%s: %+v", id, pl)
		}
	}
	// What a node's agent reads: its placements and the spec they name.
	f, _ := NewFleet(cli, "")
	on, _, err := f.Placements(ctxT(t), "n3")
	if err != nil || len(on) != 3 {
		t.Fatalf("placements on n3: %v, %v", on, err)
	}
	spec, err := f.JobSpec(ctxT(t), "web", on[0].Version)
	if err != nil || !strings.Contains(spec.Text, `job "web"`) {
		t.Errorf("spec of version %d: %+v, %v", on[0].Version, spec, err)
	}
}

func TestScheduler_UnplaceableCopiesAreNamedInTheEval(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 1000, "tier", "gold"), 60)
	addNode(t, cli, simInfo("n2", 4000, 8000, "tier", "silver"), 60)
	runJob(t, cli, jobText("big", 2, 100, 2000, "constraint {\nattribute = \"${meta.tier}\"\nvalue = \"gold\"\n}"))
	ts := newSched(t, cli, "n1")
	ts.settle()
	f, _ := NewFleet(cli, "")
	st, err := f.JobStatus(ctxT(t), "big")
	if err != nil {
		t.Fatal(err)
	}
	u := st.Unplaced()
	if len(u) != 2 {
		t.Fatalf("unplaced %v, want both copies", u)
	}
	for _, x := range u {
		if !strings.Contains(x.Reason, `constraint ${meta.tier} = "gold" not met on 1 node`) || !strings.Contains(x.Reason, "memory exhausted on 1 node") {
			t.Errorf("%s: reason %q does not name the constraint and the resource", x.Copy, x.Reason)
		}
	}
	_, err = f.WaitJob(ctxT(t), "big", nil)
	var np *NotPlacedError
	if !errors.As(err, &np) || len(np.Copies) != 2 {
		t.Errorf("WaitJob = %v, want a NotPlacedError for both copies", err)
	}
}

func TestScheduler_LostNodesCopiesArePlacedElsewhereAtOnce(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	n2 := addNode(t, cli, simInfo("n2", 4000, 4000), 60)
	addNode(t, cli, simInfo("n3", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 3, 100, 100, ""))
	ts := newSched(t, cli, "n1")
	ts.settle()
	before := fleetPlacements(t, cli)
	var moved CopyID
	for id, pl := range before {
		if pl.Node == "n2" {
			moved = id
		}
	}
	n2.lose()
	ts.settle()
	after := fleetPlacements(t, cli)
	pl := after[moved]
	if pl.Node == "n2" || pl.Node == "" || pl.Previous != "n2" || pl.Reason != "node n2 lost" {
		t.Errorf("copy %s of the lost node: %+v, want it placed elsewhere naming n2", moved, pl)
	}
	for id, p := range after {
		if id != moved && p.Revision != before[id].Revision {
			t.Errorf("%s moved too (%+v): only the lost node's copy moves", id, p)
		}
	}
	l := lostOf(t, cli, "n2")
	if l.Since != t0.UnixNano() || l.Back != 0 {
		t.Errorf("lost record %+v, want since the pass that saw it down", l)
	}
}

func lostOf(t testing.TB, cli *clientv3.Client, node string) Lost {
	t.Helper()
	resp, err := cli.Get(ctxT(t), mustKeys(t).lost(node))
	if err != nil {
		t.Fatal(err)
	}
	var l Lost
	if len(resp.Kvs) == 1 {
		_ = json.Unmarshal(resp.Kvs[0].Value, &l)
	}
	return l
}

func TestScheduler_MaxClientDisconnectKeepsCopiesUntilItPasses(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 1, 100, 100, `max_client_disconnect = "2m"`))
	ts := newSched(t, cli, "sched")
	ts.settle()
	addNode(t, cli, simInfo("n2", 4000, 4000), 60)
	ts.settle()
	id := CopyID{Job: "web", Group: "g", Index: 0}
	if pl := placedOf(t, cli, id); pl.Node != "n1" {
		t.Fatalf("placed on %q, want n1", pl.Node)
	}
	n1.lose()
	st := ts.settle()
	if pl := placedOf(t, cli, id); pl.Node != "n1" {
		t.Fatalf("moved to %s at once: max_client_disconnect keeps it on n1 for 2m", pl.Node)
	}
	if want := t0.Add(2 * time.Minute); !st.Wake.Equal(want) {
		t.Errorf("wake %v, want %v (when max_client_disconnect runs out)", st.Wake, want)
	}
	ts.clock.Advance(2*time.Minute - time.Nanosecond)
	ts.settle()
	if pl := placedOf(t, cli, id); pl.Node != "n1" {
		t.Fatalf("moved to %s a nanosecond early", pl.Node)
	}
	ts.clock.Advance(time.Nanosecond)
	ts.settle()
	if pl := placedOf(t, cli, id); pl.Node != "n2" || pl.Reason != "node n1 lost" {
		t.Errorf("placement %+v once max_client_disconnect passed, want n2", pl)
	}
}

func TestScheduler_ReturningNodeIsHeldOffForThreeLeases(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 4000, 4000), 10)
	addNode(t, cli, simInfo("n2", 4000, 4000), 60)
	ts := newSched(t, cli, "sched")
	runJob(t, cli, jobText("a", 2, 100, 100, ""))
	ts.settle()
	n1.lose()
	ts.settle()
	if c := countByNode(fleetPlacements(t, cli)); c["n2"] != 2 {
		t.Fatalf("copies %v: both on n2 once n1 is lost", c)
	}
	n1.register(10)
	ts.clock.Advance(time.Second)
	ts.settle()
	back := lostOf(t, cli, "n1")
	if back.Back != t0.Add(time.Second).UnixNano() || back.BackLease != int64(n1.lease) {
		t.Fatalf("lost record %+v: want its return under lease %x noted", back, n1.lease)
	}
	// A new job lands on n2 only while n1 is held off (3 x its 10s lease).
	runJob(t, cli, jobText("b", 2, 100, 100, ""))
	ts.clock.Advance(30*time.Second - time.Nanosecond)
	ts.settle()
	for id, pl := range fleetPlacements(t, cli) {
		if pl.Node == "n1" {
			t.Fatalf("%s placed on n1 within its holdoff", id)
		}
	}
	ts.clock.Advance(time.Nanosecond)
	ts.settle()
	if l := lostOf(t, cli, "n1"); l.Node != "" {
		t.Fatalf("lost record %+v still there once the holdoff passed", l)
	}
	runJob(t, cli, jobText("c", 1, 100, 3800, "")) // n2 has 3600 MB left
	ts.settle()
	if pl := placedOf(t, cli, CopyID{Job: "c", Group: "g"}); pl.Node != "n1" {
		t.Errorf("job c on %q: n1 takes copies again after the holdoff", pl.Node)
	}
	// Nothing moved back: a's and b's copies stay on n2.
	for id, pl := range fleetPlacements(t, cli) {
		if id.Job != "c" && pl.Node != "n2" {
			t.Errorf("%s moved to %s", id, pl.Node)
		}
	}
}

func TestScheduler_LeaseLostAgainWithinTheHoldoffRestartsIt(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 4000, 4000), 10)
	ts := newSched(t, cli, "sched")
	ts.settle()
	n1.lose()
	ts.settle()
	n1.register(10)
	ts.clock.Advance(20 * time.Second)
	ts.settle()
	n1.lose() // flickers again under load
	ts.clock.Advance(time.Second)
	ts.settle()
	if l := lostOf(t, cli, "n1"); l.Back != 0 || l.Since != t0.Add(21*time.Second).UnixNano() {
		t.Fatalf("lost record %+v: lost again, it is down since now", l)
	}
	n1.register(10)
	ts.clock.Advance(time.Second)
	ts.settle()
	ts.clock.Advance(29 * time.Second) // 30s back, but only since its latest return
	ts.settle()
	runJob(t, cli, jobText("j", 1, 100, 100, ""))
	ts.settle()
	if pl := placedOf(t, cli, CopyID{Job: "j", Group: "g"}); pl.Node != "" {
		t.Fatalf("placed on %s 29s after its latest return", pl.Node)
	}
	ts.clock.Advance(time.Second)
	ts.settle()
	if pl := placedOf(t, cli, CopyID{Job: "j", Group: "g"}); pl.Node != "n1" {
		t.Errorf("placement %+v 30s after its latest return, want n1", pl)
	}
}

// A node frozen under its lease (no keep-alive, its status stale) still
// holds its liveness key: the scheduler moves nothing of it, however
// many passes it makes, and after it thaws nothing has moved.
func TestScheduler_NodeFrozenUnderItsLeaseMovesNothing(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	frozen := addNode(t, cli, simInfo("n2", 4000, 4000), 60) // never kept alive: frozen from here
	runJob(t, cli, jobText("web", 2, 100, 100, ""))
	ts := newSched(t, cli, "sched")
	ts.settle()
	before := fleetPlacements(t, cli)
	if countByNode(before)["n2"] != 1 {
		t.Fatalf("copies %v", countByNode(before))
	}
	// Its status says it was last seen long ago; passes come and go.
	sv, _ := json.Marshal(nodeStatus{Node: "n2", Seen: t0.Add(-time.Hour).UnixNano()})
	if _, err := cli.Put(ctxT(t), mustKeys(t).status("n2"), string(sv)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ts.clock.Advance(59 * time.Second)
		runJob(t, cli, jobText(fmt.Sprintf("other%d", i), 1, 10, 10, ""))
		ts.settle()
	}
	if _, err := cli.KeepAliveOnce(ctxT(t), frozen.lease); err != nil {
		t.Fatalf("thaw: %v", err)
	}
	ts.settle()
	after := fleetPlacements(t, cli)
	for id, pl := range before {
		if after[id].Node != pl.Node || after[id].Revision != pl.Revision {
			t.Errorf("%s moved from %s to %s while its node held its lease", id, pl.Node, after[id].Node)
		}
	}
	if l := lostOf(t, cli, "n2"); l.Node != "" {
		t.Errorf("lost record %+v for a node that never lost its lease", l)
	}
}

func TestScheduler_DeposedSchedulersWriteFailsWhole(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 45, 10, 10, "")) // more than one transaction
	a := newSched(t, cli, "a")
	// a is deposed: its session's lease runs out.
	if _, err := cli.Revoke(ctxT(t), a.session.Lease()); err != nil {
		t.Fatal(err)
	}
	st := a.s.Pass(ctxT(t), a.lead)
	if !errors.Is(st.Err, ErrNotLeader) {
		t.Fatalf("deposed pass: %+v, want ErrNotLeader", st)
	}
	if got := fleetPlacements(t, cli); len(got) != 0 {
		t.Fatalf("a deposed scheduler placed %d copies", len(got))
	}
	b := newSched(t, cli, "b")
	b.settle()
	if got := fleetPlacements(t, cli); len(got) != 45 {
		t.Errorf("the new leader placed %d copies, want 45", len(got))
	}
}

func TestScheduler_ConcurrentRunFailsThePassNotTheCopies(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 2, 10, 10, ""))
	ts := newSched(t, cli, "sched")
	// Between the pass's read and its write, the job is run again.
	calls := 0
	ts.s.cfg.Hooks.Crash = func(point string) {
		if point == CrashSchedulerBeforeTxn && calls == 0 {
			calls++
			runJob(t, cli, jobText("web", 3, 10, 10, ""))
		}
	}
	st := ts.s.Pass(ctxT(t), ts.lead)
	if st.Conflicts != 1 || st.Placed != 0 {
		t.Fatalf("pass %+v: the job's head changed under it; it must write nothing", st)
	}
	if got := fleetPlacements(t, cli); len(got) != 0 {
		t.Fatalf("%d copies placed by a pass whose job changed", len(got))
	}
	ts.s.cfg.Hooks.Crash = nil
	ts.settle()
	for _, pl := range fleetPlacements(t, cli) {
		if pl.Version != 2 {
			t.Errorf("copy at version %d, want 2", pl.Version)
		}
	}
}

func TestScheduler_FailedCopyIsPlacedAgainAfterItsDelayElsewhere(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 1, 100, 100, ""))
	ts := newSched(t, cli, "sched")
	ts.settle()
	addNode(t, cli, simInfo("n2", 4000, 4000), 60)
	id := CopyID{Job: "web", Group: "g"}
	n1.verdict(id, VerdictFailed, "exit 1", t0)
	st := ts.settle()
	if pl := placedOf(t, cli, id); pl.Node != "n1" {
		t.Fatalf("placed again on %s before the reschedule delay", pl.Node)
	}
	if want := t0.Add(30 * time.Second); !st.Wake.Equal(want) {
		t.Errorf("wake %v, want %v (Nomad's 30s first delay)", st.Wake, want)
	}
	ts.clock.Advance(30 * time.Second)
	ts.settle()
	pl := placedOf(t, cli, id)
	if pl.Node != "n2" || pl.Reason != "failed on n1" || len(pl.Failures) != 1 || pl.Failures[0] != t0.UnixNano() {
		t.Errorf("placement %+v, want n2 (it failed on n1), its failure recorded", pl)
	}
	// Its second failure waits twice as long.
	n2 := &simNode{t: t, cli: cli, keys: mustKeys(t), name: "n2"}
	n2.verdict(id, VerdictFailed, "exit 1", ts.clock.Now())
	st = ts.settle()
	if want := ts.clock.Now().Add(time.Minute); !st.Wake.Equal(want) {
		t.Errorf("wake %v, want %v (the delay doubles)", st.Wake, want)
	}
}

func TestScheduler_StaleVerdictSaysNothingOfANewPlacement(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 4000, 4000), 60)
	runJob(t, cli, jobText("web", 1, 100, 100, ""))
	ts := newSched(t, cli, "sched")
	ts.settle()
	id := CopyID{Job: "web", Group: "g"}
	old := placedOf(t, cli, id)
	// A verdict about an earlier placement revision of the copy.
	b, _ := json.Marshal(Verdict{Job: "web", Group: "g", Revision: old.Revision - 1, State: VerdictFailed, At: t0.UnixNano()})
	if _, err := cli.Put(ctxT(t), mustKeys(t).verdict("n1", id), string(b)); err != nil {
		t.Fatal(err)
	}
	ts.clock.Advance(time.Hour)
	ts.settle()
	if pl := placedOf(t, cli, id); pl.Revision != old.Revision {
		t.Errorf("placement %+v: a verdict about another revision moved it", pl)
	}
	_ = n1
}

func TestScheduler_RollingUpdateMaxParallel(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	n1 := addNode(t, cli, simInfo("n1", 8000, 8000), 60)
	text := func(arg string) string {
		return strings.Replace(jobText("web", 5, 10, 10, "update {\nmax_parallel = 2\n}"), `config { command = "/bin/sleep" }`,
			`config {
        command = "/bin/sleep"
        args = ["`+arg+`"]
      }`, 1)
	}
	runJob(t, cli, text("1"))
	ts := newSched(t, cli, "sched")
	ts.settle()
	if got := fleetPlacements(t, cli); len(got) != 5 {
		t.Fatalf("%d placed: the first version is placed whole, max_parallel limits only replacements", len(got))
	}
	allRunning := func() {
		for id := range fleetPlacements(t, cli) {
			n1.verdict(id, VerdictRunning, "", ts.clock.Now())
		}
	}
	allRunning()
	runJob(t, cli, text("2"))
	versions := func() (v1, v2 int) {
		for _, pl := range fleetPlacements(t, cli) {
			if pl.Version == 1 {
				v1++
			} else {
				v2++
			}
		}
		return
	}
	for _, want := range []int{2, 4, 5} {
		ts.settle()
		if _, v2 := versions(); v2 != want {
			t.Fatalf("%d copies at version 2, want %d (2 at a time, each batch once the last runs)", v2, want)
		}
		ts.settle() // nothing more until they run
		if _, v2 := versions(); v2 != want {
			t.Fatalf("%d copies at version 2 before the replaced ones run, want %d", v2, want)
		}
		for id, pl := range fleetPlacements(t, cli) {
			if pl.Version == 2 {
				n1.verdict(id, VerdictRunning, "", ts.clock.Now())
			}
		}
	}
}

func TestScheduler_StopAndCountDownRemoveCopies(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	addNode(t, cli, simInfo("n1", 8000, 8000), 60)
	runJob(t, cli, jobText("web", 4, 10, 10, ""))
	ts := newSched(t, cli, "sched")
	ts.settle()
	runJob(t, cli, jobText("web", 2, 10, 10, ""))
	ts.settle()
	got := fleetPlacements(t, cli)
	if len(got) != 2 {
		t.Fatalf("%d copies after count 4 -> 2", len(got))
	}
	for id := range got {
		if id.Index > 1 {
			t.Errorf("%s kept: the highest indexes go", id)
		}
	}
	f, _ := NewFleet(cli, "")
	if err := f.StopJob(ctxT(t), "web"); err != nil {
		t.Fatal(err)
	}
	st, err := f.JobStatus(ctxT(t), "web")
	if err != nil || st.Done() || st.Rows[0].State != "stopping" {
		t.Fatalf("status right after stop: %+v, %v: its copies are stopping", st, err)
	}
	ts.settle()
	if got := fleetPlacements(t, cli); len(got) != 0 {
		t.Errorf("%d copies placed after the job stopped", len(got))
	}
	if st, err := f.JobStatus(ctxT(t), "web"); err != nil || !st.Done() {
		t.Errorf("status after the scheduler removed them: %+v, %v", st, err)
	}
	// The old spec versions nothing names are gone; the head's stays.
	resp, _ := cli.Get(ctxT(t), mustKeys(t).jobSpecPrefix("web"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if len(resp.Kvs) != 1 || !strings.HasSuffix(string(resp.Kvs[0].Key), seqText(2)) {
		t.Errorf("spec keys %v, want only version 2's", resp.Kvs)
	}
}

func TestReconcileNodes_Transitions(t *testing.T) {
	now := t0
	p := Policy{}
	for name, c := range map[string]struct {
		alive     bool
		lease     int64
		lost      *Lost
		wantLost  *Lost
		wantGone  bool
		wantWake  time.Time
		ttlSecond int
	}{
		"up, never lost":               {alive: true, lease: 7},
		"down, seen now":               {lost: nil, wantLost: &Lost{Node: "n", Since: now.UnixNano()}},
		"down, already known":          {lost: &Lost{Node: "n", Since: 5}},
		"back: return noted":           {alive: true, lease: 7, lost: &Lost{Node: "n", Since: 5}, wantLost: &Lost{Node: "n", Since: 5, Back: now.UnixNano(), BackLease: 7}, wantWake: now.Add(30 * time.Second)},
		"back under another lease":     {alive: true, lease: 8, lost: &Lost{Node: "n", Since: 5, Back: 1, BackLease: 7}, wantLost: &Lost{Node: "n", Since: 5, Back: now.UnixNano(), BackLease: 8}, wantWake: now.Add(30 * time.Second)},
		"held off, 1ns short":          {alive: true, lease: 7, lost: &Lost{Node: "n", Since: 5, Back: now.Add(-30*time.Second + 1).UnixNano(), BackLease: 7}, wantWake: now.Add(1)},
		"held off long enough":         {alive: true, lease: 7, lost: &Lost{Node: "n", Since: 5, Back: now.Add(-30 * time.Second).UnixNano(), BackLease: 7}, wantGone: true},
		"lost again while held off":    {lost: &Lost{Node: "n", Since: 5, Back: 9, BackLease: 7}, wantLost: &Lost{Node: "n", Since: now.UnixNano()}},
		"longer lease, longer holdoff": {alive: true, lease: 7, ttlSecond: 20, lost: &Lost{Node: "n", Since: 5, Back: now.Add(-30 * time.Second).UnixNano(), BackLease: 7}, wantWake: now.Add(30 * time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			ns := &NodeState{Name: "n", Alive: c.alive, Lease: c.lease, Info: &NodeInfo{LeaseTTL: 10 * time.Second}}
			if c.ttlSecond != 0 {
				ns.Info.LeaseTTL = time.Duration(c.ttlSecond) * time.Second
			}
			w := &World{Now: now, Nodes: map[string]*NodeState{"n": ns}, Lost: map[string]Lost{}}
			if c.lost != nil {
				w.Lost["n"] = *c.lost
			}
			d, wake := ReconcileNodes(w, p)
			switch {
			case c.wantLost != nil:
				if len(d.PutLost) != 1 || d.PutLost[0] != *c.wantLost || len(d.DeleteLost) != 0 {
					t.Errorf("decision %+v, want put %+v", d, *c.wantLost)
				}
			case c.wantGone:
				if len(d.DeleteLost) != 1 || len(d.PutLost) != 0 {
					t.Errorf("decision %+v, want the record deleted", d)
				}
			default:
				if len(d.PutLost)+len(d.DeleteLost) != 0 {
					t.Errorf("decision %+v, want none", d)
				}
			}
			if !wake.Equal(c.wantWake) {
				t.Errorf("wake %v, want %v", wake, c.wantWake)
			}
		})
	}
}

func TestNomadDefaultReschedule(t *testing.T) {
	svc, batch := &GroupAsk{}, &GroupAsk{Batch: true}
	at := func(s ...int) []time.Time {
		var out []time.Time
		for _, x := range s {
			out = append(out, t0.Add(time.Duration(x)*time.Second))
		}
		return out
	}
	for _, c := range []struct {
		g    *GroupAsk
		f    []time.Time
		want time.Duration
		ok   bool
	}{
		{svc, at(0), 30 * time.Second, true},
		{svc, at(0, 1), time.Minute, true},
		{svc, at(0, 1, 2, 3, 4, 5, 6), 32 * time.Minute, true},
		{svc, at(0, 1, 2, 3, 4, 5, 6, 7), time.Hour, true},
		{svc, at(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), time.Hour, true},
		{batch, at(0), 5 * time.Second, true},
		{batch, at(0, 10), 5 * time.Second, false},
		{batch, at(0, 86400), 5 * time.Second, true},
		{batch, at(0, 86399), 5 * time.Second, false},
	} {
		d, ok := NomadDefaultReschedule{}.Next(c.g, c.f)
		if d != c.want || ok != c.ok {
			t.Errorf("batch %v after %d failures: %v %v, want %v %v", c.g.Batch, len(c.f), d, ok, c.want, c.ok)
		}
	}

}

// The scheduler runs in every node's agent. The leader's agent SIGKILLed,
// its lease runs out, another agent's node leads, and a job run after
// the kill is placed, on the live node only.
func TestScheduler_KilledLeadersAgentIsReplacedWithinItsLease(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	eps := cli.Endpoints()[0]
	agents := map[string]*agentProc{}
	for _, name := range []string{"n1", "n2"} {
		p, line := startAgent(t, nil, "--endpoints", eps, "--node", name, "--dir", t.TempDir(), "--ttl", "2s")
		if line != "registered" {
			t.Fatalf("%s: %s", name, line)
		}
		agents[name] = p
	}
	k := mustKeys(t)
	leader := func() (string, int64) {
		ctx := ctxT(t)
		for {
			resp, err := cli.Get(ctx, k.leaderPrefix()+"/", append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) == 1 {
				return string(resp.Kvs[0].Value), resp.Kvs[0].Lease
			}
			wch := cli.Watch(ctx, k.leaderPrefix()+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
			select {
			case <-wch:
			case <-ctx.Done():
				t.Fatal("no scheduler was elected")
			}
		}
	}
	first, firstLease := leader()
	if err := agents[first].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agents[first].wait(t)
	runJob(t, cli, jobText("after", 2, 10, 10, ""))
	waitPlaced(t, cli, "after", 2)
	second, secondLease := leader()
	if second == first || secondLease == firstLease {
		t.Errorf("leader %s (lease %x) after %s was killed", second, secondLease, first)
	}
	for id, pl := range fleetPlacements(t, cli) {
		if pl.Node != second {
			t.Errorf("%s on %s: only %s is alive", id, pl.Node, second)
		}
	}
}

// waitPlaced waits (on a watch) until job has n placements.
func waitPlaced(t testing.TB, cli *clientv3.Client, job string, n int) {
	t.Helper()
	ctx := ctxT(t)
	k := mustKeys(t)
	for {
		resp, err := cli.Get(ctx, k.allocPrefix(job), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if int(resp.Count) == n {
			return
		}
		wch := cli.Watch(ctx, k.allocPrefix(job), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-ctx.Done():
			t.Fatalf("job %s: %d placed, want %d", job, resp.Count, n)
		}
	}
}
