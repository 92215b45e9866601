package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
