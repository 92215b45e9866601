package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

// The scheduler's property over a simulated fleet on a real etcd: nodes
// (a liveness key under a lease and a registration, as an agent writes
// them) that are lost and come back; schedulers, one on each node's
// lease, elected through etcd, that crash at any of their crash points
// (a crash takes the node's agent with it: its lease runs out) or are
// deposed in the middle of a pass (their lease lost between their read
// and their write, and their pass goes on); jobs run, changed and
// stopped; nodes saying their copies run or fail; the clock moving.
// After the fleet is quiet (every node back and past its holdoff, a
// leader settled), every job's copies equal its count, each on a live
// node that meets its constraints, no node over its capacity, and at no
// revision of the whole history was a copy placed under two nodes.

// errCrash is the panic of a simulated scheduler crash.
var errCrash = errors.New("simulated scheduler crash")

type simFleet struct {
	t      *rapid.T
	cli    *clientv3.Client
	keys   Keys
	prefix string
	fleet  *Fleet
	clock  *fakeClock
	nodes  []*simNode
	up     []bool
	jobs   map[string]simJob
	// leader is the index of the node whose scheduler leads, or -1.
	leader int
	lead   leadership
	sched  []*Scheduler
	// crashAt, when > 0, crashes the leader at its crashAt-th crash point.
	crashAt int
	hits    int
	// deposeAt, when > 0, deposes the leader at that crash point hit.
	deposeAt int
	start    int64
}

type simJob struct {
	count   int
	gold    bool
	stopped bool
	version int
}

var simN atomic.Int64

func newSimFleet(t *rapid.T, cli *clientv3.Client) *simFleet {
	prefix := fmt.Sprintf("/sim%d/", simN.Add(1))
	keys, _ := NewKeys(prefix)
	f, _ := NewFleet(cli, prefix)
	s := &simFleet{t: t, cli: cli, keys: keys, prefix: prefix, fleet: f, clock: &fakeClock{now: t0}, jobs: map[string]simJob{}, leader: -1}
	resp, err := cli.Get(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	s.start = resp.Header.Revision
	n := rapid.IntRange(2, 4).Draw(t, "nodes")
	for i := range n {
		tier := "silver"
		if i == 0 || rapid.Bool().Draw(t, "gold") {
			tier = "gold"
		}
		info := simInfo(fmt.Sprintf("n%d", i), rapid.IntRange(400, 2000).Draw(t, "cpu"), 4000, "tier", tier)
		sn := &simNode{t: t, cli: cli, keys: keys, name: info.Node, info: info}
		sn.register(60)
		s.nodes = append(s.nodes, sn)
		s.up = append(s.up, true)
		sc, err := NewScheduler(cli, SchedulerConfig{Name: info.Node, Prefix: prefix, Now: s.clock.Now, CopiesPerTxn: 2,
			Logger: nopLog(), Hooks: Hooks{Crash: s.crashPoint}})
		if err != nil {
			t.Fatal(err)
		}
		s.sched = append(s.sched, sc)
	}
	return s
}

func (s *simFleet) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s.t.Cleanup(cancel)
	return ctx
}

// crashPoint is every scheduler's crash hook: only the leader's pass
// meets it (the others do not run).
func (s *simFleet) crashPoint(point string) {
	s.hits++
	if s.deposeAt > 0 && s.hits == s.deposeAt {
		s.deposeAt = 0
		s.lose(s.leader) // its lease lost in the middle of its pass; the pass goes on
		return
	}
	if s.crashAt > 0 && s.hits == s.crashAt {
		s.crashAt = 0
		panic(errCrash)
	}
}

// lose revokes node i's lease (its agent died, or it was cut off for
// longer than its lease).
func (s *simFleet) lose(i int) {
	if !s.up[i] {
		return
	}
	s.nodes[i].lose()
	s.up[i] = false
	if i == s.leader {
		s.leader = -1 // its election key went with its lease
	}
}

func (s *simFleet) back(i int) {
	if s.up[i] {
		return
	}
	s.nodes[i].register(60)
	s.up[i] = true
}

// elect makes the first live node's scheduler lead, if none leads.
func (s *simFleet) elect() bool {
	if s.leader >= 0 && s.up[s.leader] {
		return true
	}
	s.leader = -1
	for i, n := range s.nodes {
		if !s.up[i] {
			continue
		}
		session, err := concurrency.NewSession(s.cli, concurrency.WithLease(n.lease))
		if err != nil {
			s.t.Fatal(err)
		}
		session.Orphan()
		e := concurrency.NewElection(session, s.keys.leaderPrefix())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = e.Campaign(ctx, n.name)
		cancel()
		if err != nil {
			s.t.Fatalf("campaign of %s: %v (an earlier leader's key outlives its lease?)", n.name, err)
		}
		s.leader, s.lead = i, leadership{key: e.Key(), rev: e.Rev()}
		return true
	}
	return false
}

// pass runs one pass of the leader's scheduler, crashing where armed.
func (s *simFleet) pass() (st PassStats, crashed bool) {
	if !s.elect() {
		return PassStats{}, false
	}
	i := s.leader
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != errCrash {
					panic(r)
				}
				crashed = true
			}
		}()
		st = s.sched[i].Pass(s.ctx(), s.lead)
	}()
	if crashed {
		s.lose(i) // the agent died with its scheduler
	}
	if errors.Is(st.Err, ErrNotLeader) {
		s.leader = -1
	}
	if st.Err != nil && !errors.Is(st.Err, ErrNotLeader) {
		s.t.Fatalf("pass of %s: %v", s.nodes[i].name, st.Err)
	}
	return st, crashed
}

func (s *simFleet) jobText(name string, j simJob) string {
	extra := ""
	if j.gold {
		extra = "constraint {\nattribute = \"${meta.tier}\"\nvalue = \"gold\"\n}"
	}
	return strings.Replace(jobText(name, j.count, 10, 10, extra), `config { command = "/bin/sleep" }`, fmt.Sprintf(`config {
        command = "/bin/sleep"
        args    = ["%d"]
      }`, j.version), 1)
}

func (s *simFleet) run(name string, j simJob) {
	j.version++
	if _, err := s.fleet.Run(s.ctx(), JobSpec{File: name + ".nomad", Text: s.jobText(name, j)}, s.clock.Now()); err != nil {
		s.t.Fatal(err)
	}
	j.stopped = false
	s.jobs[name] = j
}

// verdicts writes a verdict for every placement on a live node: running,
// or (when fail names the copy) failed.
func (s *simFleet) verdicts(fail func(CopyID) bool) {
	for _, pl := range s.placements() {
		i := slices.IndexFunc(s.nodes, func(n *simNode) bool { return n.name == pl.Node })
		if i < 0 || !s.up[i] {
			continue
		}
		st := VerdictRunning
		if fail != nil && fail(pl.ID()) {
			st = VerdictFailed
		}
		b, _ := json.Marshal(Verdict{Job: pl.Job, Group: pl.Group, Index: pl.Index, Revision: pl.Revision, State: st, At: s.clock.Now().UnixNano()})
		if _, err := s.cli.Put(s.ctx(), s.keys.verdict(pl.Node, pl.ID()), string(b)); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *simFleet) placements() map[CopyID]Placed {
	resp, err := s.cli.Get(s.ctx(), s.keys.allocPrefix(""), clientv3.WithPrefix())
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[CopyID]Placed{}
	for _, kv := range resp.Kvs {
		var pl Placed
		if err := json.Unmarshal(kv.Value, &pl); err != nil {
			s.t.Fatal(err)
		}
		pl.Revision = kv.ModRevision
		out[pl.ID()] = pl
	}
	return out
}

// quiesce brings every node back, lets every holdoff and delay pass, and
// runs passes (nodes saying their copies run) until one changes nothing.
func (s *simFleet) quiesce() {
	for i := range s.nodes {
		s.back(i)
	}
	var last []string
	for round := 0; ; round++ {
		if round > 60 {
			for name := range s.jobs {
				st, _ := s.fleet.JobStatus(s.ctx(), name)
				for _, r := range st.Rows {
					last = append(last, fmt.Sprintf("%+v", r))
				}
			}
			s.t.Fatalf("the fleet did not quiet down in 60 passes; last passes and rows:\n%s", strings.Join(last, "\n"))
		}
		st, crashed := s.pass()
		last = append(last, fmt.Sprintf("pass %+v", st))
		if len(last) > 5 {
			last = last[1:]
		}
		if crashed {
			s.t.Fatal("crash armed while quiescing")
		}
		if errors.Is(st.Err, ErrNotLeader) {
			continue
		}
		s.verdicts(nil)
		if st.Quiet() {
			// Past every holdoff (3 x 60s) and reschedule delay.
			if !st.Wake.IsZero() {
				s.clock.Advance(st.Wake.Sub(s.clock.Now()) + time.Nanosecond)
				continue
			}
			st2, _ := s.pass()
			if st2.Quiet() {
				return
			}
		}
	}
}

// checkHistory replays every change of the placement keys since the
// fleet began, revision by revision: at no revision is a copy under two
// nodes.
func (s *simFleet) checkHistory() {
	ctx := s.ctx()
	// A last write under the fleet's prefix ends the replay.
	now, err := s.cli.Put(ctx, s.prefix+"history-end", "")
	if err != nil {
		s.t.Fatal(err)
	}
	end := now.Header.Revision
	where := map[CopyID]map[string]bool{}
	check := func(rev int64) {
		for id, nodes := range where {
			if len(nodes) > 1 {
				s.t.Fatalf("at revision %d, %s is placed under %d nodes: %v", rev, id, len(nodes), nodes)
			}
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(wctx, s.keys.prefix, clientv3.WithPrefix(), clientv3.WithRev(s.start+1))
	last := int64(0)
	for wr := range wch {
		if err := wr.Err(); err != nil {
			s.t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if !strings.HasPrefix(string(ev.Kv.Key), s.keys.prefix+"place/") {
				continue
			}
			if ev.Kv.ModRevision != last && last != 0 {
				check(last)
			}
			last = ev.Kv.ModRevision
			parts := s.keys.split(string(ev.Kv.Key), "place/", 4)
			id, _ := copyID(parts[1:])
			if where[id] == nil {
				where[id] = map[string]bool{}
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(where[id], parts[0])
			} else {
				where[id][parts[0]] = true
			}
		}
		if n := len(wr.Events); n > 0 && wr.Events[n-1].Kv.ModRevision >= end {
			break
		}
	}
	check(last)
}

// checkQuiet checks the fleet once quiet.
func (s *simFleet) checkQuiet() {
	pls := s.placements()
	byJob := map[string]int{}
	used := map[string]Resources{}
	for id, pl := range pls {
		byJob[id.Job]++
		i := slices.IndexFunc(s.nodes, func(n *simNode) bool { return n.name == pl.Node })
		if i < 0 || !s.up[i] {
			s.t.Fatalf("%s placed on %s, which is not a live node", id, pl.Node)
		}
		j := s.jobs[id.Job]
		if j.gold && s.nodes[i].info.Meta["tier"] != "gold" {
			s.t.Fatalf("%s on %s (tier %s): its job needs gold", id, pl.Node, s.nodes[i].info.Meta["tier"])
		}
		if pl.Version == 0 || id.Index >= j.count {
			s.t.Fatalf("%s: %+v does not belong to the job's count %d", id, pl, j.count)
		}
		used[pl.Node] = used[pl.Node].Add(pl.Use)
	}
	for _, n := range s.nodes {
		if u, c := used[n.name], n.info.Capacity; u.CPU > c.CPU || u.MemoryMB > c.MemoryMB {
			s.t.Fatalf("node %s over capacity: %v of %v", n.name, u, c)
		}
	}
	for name, j := range s.jobs {
		want := j.count
		if j.stopped {
			want = 0
		}
		if byJob[name] != want {
			st, _ := s.fleet.JobStatus(s.ctx(), name)
			s.t.Fatalf("job %s: %d copies placed, want %d (stopped %v); status %+v", name, byJob[name], want, j.stopped, st)
		}
	}
	// Every placement is under exactly its node's key.
	resp, err := s.cli.Get(s.ctx(), s.keys.prefix+"place/", clientv3.WithPrefix())
	if err != nil {
		s.t.Fatal(err)
	}
	if len(resp.Kvs) != len(pls) {
		s.t.Fatalf("%d placement keys under nodes, %d placements", len(resp.Kvs), len(pls))
	}
	for _, kv := range resp.Kvs {
		parts := s.keys.split(string(kv.Key), "place/", 4)
		id, _ := copyID(parts[1:])
		if pls[id].Node != parts[0] || pls[id].Revision != kv.ModRevision {
			s.t.Fatalf("%s under %s at %d, placed %+v", id, parts[0], kv.ModRevision, pls[id])
		}
	}
}

func TestScheduler_SimulatedFleetProperty(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	rapid.Check(t, func(t *rapid.T) {
		s := newSimFleet(t, cli)
		jobNames := []string{"a", "b", "c"}
		steps := rapid.IntRange(5, 25).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1:
				name := rapid.SampledFrom(jobNames).Draw(t, "job")
				j := s.jobs[name]
				j.count, j.gold = rapid.IntRange(1, 5).Draw(t, "count"), rapid.Bool().Draw(t, "gold")
				s.run(name, j)
			case 2:
				name := rapid.SampledFrom(jobNames).Draw(t, "stop")
				if j, ok := s.jobs[name]; ok {
					if err := s.fleet.StopJob(s.ctx(), name); err != nil {
						t.Fatal(err)
					}
					j.stopped = true
					s.jobs[name] = j
				}
			case 3:
				s.lose(rapid.IntRange(0, len(s.nodes)-1).Draw(t, "lose"))
			case 4:
				s.back(rapid.IntRange(0, len(s.nodes)-1).Draw(t, "back"))
			case 5:
				// The leader crashes at one of its next crash points.
				s.hits, s.crashAt = 0, rapid.IntRange(1, 6).Draw(t, "crash at")
				s.pass()
				s.crashAt = 0
			case 6:
				// The leader is deposed in the middle of its pass; the
				// pass goes on and must write nothing more.
				s.hits, s.deposeAt = 0, rapid.IntRange(1, 6).Draw(t, "depose at")
				if st, _ := s.pass(); s.deposeAt == 0 && st.Err != nil && !errors.Is(st.Err, ErrNotLeader) {
					t.Fatalf("deposed pass: %v", st.Err)
				}
				s.deposeAt = 0
			case 7:
				fails := rapid.IntRange(0, 3).Draw(t, "fail")
				s.verdicts(func(id CopyID) bool { return id.Index == fails })
			case 8:
				s.clock.Advance(time.Duration(rapid.IntRange(1, 240).Draw(t, "seconds")) * time.Second)
			default:
				s.pass()
			}
		}
		s.crashAt, s.deposeAt = 0, 0
		s.quiesce()
		s.checkQuiet()
		s.checkHistory()
	})
}
