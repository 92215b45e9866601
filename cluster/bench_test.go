package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/store"
)

// BenchmarkMirror_VsBareTxn measures the mirror against its floor on the
// same real 3-member etcd (Debian's etcd-server, fsync on) and the same
// durable bbolt store, interleaved round by round (the side that goes
// first alternates): K tasks change state at once, each committing its
// events one by one.
//
//   - mirror: the node's mirror follows the commits (batched, guarded
//     transactions); an event's lag runs from its Append's return to the
//     return of the transaction that mirrored it.
//   - bare: each task's writer, after each Append, writes the event and
//     the task's head in one unguarded Txn itself (no lease, no compare,
//     no batching); the lag is that Txn.
//
// Throughput is events over the round's wall time (until the last event
// is in etcd). b.N is the number of rounds:
//
//	go test -run '^$' -bench MirrorVsBareTxn -benchtime 10x ./cluster/
func BenchmarkMirror_VsBareTxn(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("tasks=%d", k), func(b *testing.B) { benchMirrorVsBare(b, k) })
	}
}

func benchMirrorVsBare(b *testing.B, tasks int) {
	c := startClusterB(b)
	cli := dial(b, c...)
	dir := b.TempDir()
	st, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	src := NewStoreSource(st)
	defer src.Close()
	perTask := max(6, 200/tasks) // about 200 events a round (600 at 100 tasks)

	// The mirror records when each event reached etcd.
	var mu sync.Mutex
	mirroredAt := map[string]time.Time{}
	roundDone := make(chan struct{}, 1)
	want := 0
	n := newTestNode(b, cli, "bench", dir, src, func(c *NodeConfig) { c.LeaseTTL = 10 * time.Second })
	n.mir.txnHook = func(bt *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		resp, err := call()
		if err == nil && resp.Succeeded {
			now := time.Now()
			mu.Lock()
			for _, tb := range bt.tasks {
				for _, e := range tb.events {
					mirroredAt[fmt.Sprintf("%s/%d", tb.task, e.Seq)] = now
				}
			}
			if want > 0 && len(mirroredAt) >= want {
				want = 0
				roundDone <- struct{}{}
			}
			mu.Unlock()
		}
		return resp, err
	}
	runNode(b, n)

	var mirrorLag, bareLag []time.Duration
	var mirrorTime, bareTime time.Duration
	total := 0
	ctx := context.Background()
	mirrorRound := func(round int) {
		mu.Lock()
		clear(mirroredAt)
		want = tasks * perTask
		mu.Unlock()
		committed := make([]map[string]time.Time, tasks)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range tasks {
			wg.Go(func() {
				committed[i] = map[string]time.Time{}
				id := fmt.Sprintf("m%d-%d", round, i)
				for j, e := range lifecycle(id, 0, perTask-6) {
					if _, err := src.Append(ctx, id, uint64(j), e); err != nil {
						b.Error(err)
						return
					}
					committed[i][fmt.Sprintf("%s/%d", id, j+1)] = time.Now()
				}
			})
		}
		wg.Wait()
		<-roundDone
		mu.Lock()
		var last time.Time
		for i := range committed {
			for k, c := range committed[i] {
				m := mirroredAt[k]
				mirrorLag = append(mirrorLag, m.Sub(c))
				if m.After(last) {
					last = m
				}
			}
		}
		mu.Unlock()
		mirrorTime += last.Sub(start)
	}
	bareRound := func(round int) {
		start := time.Now()
		lags := make([][]time.Duration, tasks)
		var wg sync.WaitGroup
		for i := range tasks {
			wg.Go(func() {
				id := fmt.Sprintf("b%d-%d", round, i)
				var h head
				for j, e := range lifecycle(id, 0, perTask-6) {
					v, err := src.Append(ctx, id, uint64(j), e)
					if err != nil {
						b.Error(err)
						return
					}
					committed := time.Now()
					e.Seq = v
					val, _ := encodeEvent(&e)
					h, _ = h.advance([]fsm.Event{e})
					hv, _ := marshal(h)
					if _, err := cli.Txn(ctx).Then(
						clientv3.OpPut(fmt.Sprintf("/bench-bare/event/%s/%020d", id, v), string(val)),
						clientv3.OpPut("/bench-bare/head/"+id, string(hv)),
					).Commit(); err != nil {
						b.Error(err)
						return
					}
					lags[i] = append(lags[i], time.Since(committed))
				}
			})
		}
		wg.Wait()
		bareTime += time.Since(start)
		for _, l := range lags {
			bareLag = append(bareLag, l...)
		}
	}
	b.ResetTimer()
	for round := range b.N {
		if round%2 == 0 {
			mirrorRound(round)
			bareRound(round)
		} else {
			bareRound(round)
			mirrorRound(round)
		}
		total += tasks * perTask
	}
	b.StopTimer()
	mEPS, bEPS := float64(total)/mirrorTime.Seconds(), float64(total)/bareTime.Seconds()
	b.ReportMetric(mEPS, "mirror_events/s")
	b.ReportMetric(bEPS, "bare_events/s")
	b.ReportMetric(mEPS/bEPS, "throughput_ratio")
	mp50, mp99 := pct(mirrorLag, 50), pct(mirrorLag, 99)
	bp50, bp99 := pct(bareLag, 50), pct(bareLag, 99)
	b.ReportMetric(ms(mp50), "mirror_lag_p50_ms")
	b.ReportMetric(ms(mp99), "mirror_lag_p99_ms")
	b.ReportMetric(ms(bp50), "bare_lag_p50_ms")
	b.ReportMetric(ms(bp99), "bare_lag_p99_ms")
	b.ReportMetric(float64(mp99)/float64(bp99), "p99_ratio")
	st2 := n.Stats(ctx)
	b.ReportMetric(float64(st2.Mirrored)/float64(max(1, st2.Txns)), "events/txn")
	b.ReportMetric(float64(st2.Conflicts), "conflicts")
	if st2.Conflicts > 0 || st2.LastError != "" {
		b.Logf("stats %+v", st2)
	}
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startClusterB starts a real 3-member etcd for a benchmark.
func startClusterB(b *testing.B) []string { return etcdtest.Start(b, 3).Endpoints() }

// BenchmarkFleet_Status measures `tether cluster status` over 1,000
// mirrored tasks on 10 nodes (5 up, 5 down), on an embedded etcd:
//
//	go test -run '^$' -bench FleetStatus -benchtime 100x ./cluster/
func BenchmarkFleet_Status(b *testing.B) {
	cli := dial(b, etcdtest.Embedded(b))
	k := mustKeys(b)
	ctx := context.Background()
	for node := range 10 {
		name := fmt.Sprintf("node%d", node)
		sv, _ := marshal(nodeStatus{Node: name, UpSince: time.Now().UnixNano(), Seen: time.Now().UnixNano()})
		if _, err := cli.Put(ctx, k.status(name), string(sv)); err != nil {
			b.Fatal(err)
		}
		if node%2 == 0 {
			l, err := cli.Grant(ctx, 60)
			if err != nil {
				b.Fatal(err)
			}
			hv, _ := marshal(Holder{Node: name, PID: 1})
			if _, err := cli.Put(ctx, k.alive(name), string(hv), clientv3.WithLease(l.ID)); err != nil {
				b.Fatal(err)
			}
		}
		var ops []clientv3.Op
		for task := range 100 {
			h, err := head{}.advance(withSeqs(lifecycle(fmt.Sprintf("svc%d", task), task, 0)))
			if err != nil {
				b.Fatal(err)
			}
			hv, _ := marshal(h)
			ops = append(ops, clientv3.OpPut(k.head(name, fmt.Sprintf("t%03d", task)), string(hv)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	f, _ := NewFleet(cli, "")
	for b.Loop() {
		rows, err := f.Status(ctx)
		if err != nil || len(rows) != 1000 {
			b.Fatalf("status: %d rows, %v", len(rows), err)
		}
	}
}

func withSeqs(evs []fsm.Event) []fsm.Event {
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return evs
}

// BenchmarkSchedule_PlaceJob measures placing a job of MaxJobCopies
// (1,000, the bound) copies on 10 nodes, on a real 3-member etcd
// (Debian's etcd-server, fsync on), against its floor, interleaved round
// by round (the side that goes first alternates):
//
//   - schedule: `cluster run` writes the job (Fleet.Run: the file parsed,
//     the head and spec in one guarded Txn), then one scheduler pass reads
//     the fleet, places every copy (Place) and writes the placements in
//     guarded transactions of DefaultCopiesPerTxn copies; the time is
//     from Run's call to the pass's return, every copy placed;
//   - bare: the same 2,000 keys (each copy's alloc/ and place/ key, the
//     same values) written in unguarded Txns of the same size, one after
//     another: what writing the placements costs etcd alone.
//
// Where the scheduler's time goes is reported too (read, decide, write).
//
//	go test -run '^$' -bench Schedule_PlaceJob -benchtime 10x ./cluster/
func BenchmarkSchedule_PlaceJob(b *testing.B) {
	cli := dial(b, startClusterB(b)...)
	const nodes = 10
	for i := range nodes {
		addNode(b, cli, simInfo(fmt.Sprintf("n%d", i), 1_000_000, 1_000_000), 60)
	}
	text := jobText("big", MaxJobCopies, 10, 10, "")
	sched := newSched(b, cli, "bench")
	f, _ := NewFleet(cli, "")
	k := mustKeys(b)
	ctx := context.Background()
	clear := func() {
		for _, p := range []string{k.jobPrefix(), k.prefix + "jobspec/", k.allocPrefix(""), k.prefix + "place/", k.evalPrefix(), "/bench-bare/"} {
			if _, err := cli.Delete(ctx, p, clientv3.WithPrefix()); err != nil {
				b.Fatal(err)
			}
		}
	}
	var schedT, bareT, readT, decideT, writeT []time.Duration
	var txns int
	round := func(n int) {
		clear()
		start := time.Now()
		if _, err := f.Run(ctx, JobSpec{File: "big.nomad", Text: text}, time.Now()); err != nil {
			b.Fatal(err)
		}
		st := sched.s.Pass(ctx, sched.lead)
		schedT = append(schedT, time.Since(start))
		if st.Err != nil || st.Placed != MaxJobCopies {
			b.Fatalf("pass: %+v", st)
		}
		readT, decideT, writeT = append(readT, st.Read), append(decideT, st.Decide), append(writeT, st.Write)
		txns = st.Txns
		_ = n
	}
	bare := func() {
		clear()
		val, _ := json.Marshal(Placed{Job: "big", Group: "g", Node: "n0", Version: 1, Use: Resources{CPU: 10, MemoryMB: 10}, Reason: ReasonNew})
		start := time.Now()
		for from := 0; from < MaxJobCopies; from += DefaultCopiesPerTxn {
			var ops []clientv3.Op
			for i := from; i < min(from+DefaultCopiesPerTxn, MaxJobCopies); i++ {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("/bench-bare/alloc/big/g/%d", i), string(val)),
					clientv3.OpPut(fmt.Sprintf("/bench-bare/place/n%d/big/g/%d", i%nodes, i), string(val)))
			}
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
		}
		bareT = append(bareT, time.Since(start))
	}
	b.ResetTimer()
	for n := range b.N {
		if n%2 == 0 {
			round(n)
			bare()
		} else {
			bare()
			round(n)
		}
	}
	b.StopTimer()
	var ratios []time.Duration
	for i := range schedT {
		ratios = append(ratios, time.Duration(float64(schedT[i])/float64(bareT[i])*1000))
	}
	b.ReportMetric(ms(pct(schedT, 50)), "all_placed_p50_ms")
	b.ReportMetric(ms(pct(bareT, 50)), "bare_txns_p50_ms")
	b.ReportMetric(float64(pct(ratios, 50))/1000, "ratio_p50")
	b.ReportMetric(ms(pct(readT, 50)), "read_ms")
	b.ReportMetric(ms(pct(decideT, 50)), "decide_ms")
	b.ReportMetric(ms(pct(writeT, 50)), "write_ms")
	b.ReportMetric(float64(txns), "txns")
}

// BenchmarkSchedule_LostNodeReplaced measures, on a real 3-member etcd,
// how long after a node's liveness key is gone its copies are placed
// elsewhere: the leading scheduler (its Lead loop, woken by its etcd
// watch) against the lease itself, which takes its TTL to lapse. A
// 100-copy job on 10 nodes; each round a node's lease is revoked (its
// lapse, at once) and the round ends when none of the job's copies is
// placed on it; then the node registers again. The time to running
// elsewhere adds the node side's start of the copies (not measured here).
//
//	go test -run '^$' -bench Schedule_LostNodeReplaced -benchtime 10x ./cluster/
func BenchmarkSchedule_LostNodeReplaced(b *testing.B) {
	cli := dial(b, startClusterB(b)...)
	const nodes = 10
	var ns []*simNode
	for i := range nodes {
		ns = append(ns, addNode(b, cli, simInfo(fmt.Sprintf("n%d", i), 1_000_000, 1_000_000), 60))
	}
	sc, err := NewScheduler(cli, SchedulerConfig{Name: "bench", Logger: nopLog(), Policy: Policy{ReturnHoldoff: time.Nanosecond}})
	if err != nil {
		b.Fatal(err)
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sc.Lead(ctx, session) }()
	b.Cleanup(func() { cancel(); <-done; session.Close() })
	runJob(b, cli, jobText("svc", 100, 10, 10, ""))
	waitPlaced(b, cli, "svc", 100)
	k := mustKeys(b)
	var lag []time.Duration
	b.ResetTimer()
	for n := range b.N {
		victim := ns[n%nodes]
		resp, err := cli.Get(ctx, k.placePrefix(victim.name), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		wch := cli.Watch(ctx, k.placePrefix(victim.name), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		left := resp.Count
		start := time.Now()
		victim.lose()
		for left > 0 {
			wr := <-wch
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					left--
				}
			}
		}
		lag = append(lag, time.Since(start))
		b.StopTimer()
		victim.register(60)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(ms(pct(lag, 50)), "replaced_p50_ms")
	b.ReportMetric(ms(pct(lag, 99)), "replaced_p99_ms")
}
