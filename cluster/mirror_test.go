package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

func TestMirror_EveryEventExactlyOnceInOrder(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	// Some history before the node runs: caught up at start.
	for i := range 5 {
		appendAll(t, src, fmt.Sprintf("t%d", i), lifecycle(fmt.Sprintf("web%d", i), i*10, i)...)
	}
	n := newTestNode(t, cli, "n1", dir, src)
	runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	// And commits while it runs, from several writers at once.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			task := fmt.Sprintf("t%d", i)
			for j := range 20 {
				appendAll(t, src, task, fsm.Event{Type: fsm.EventReattached, Time: t0.Add(time.Duration(1000+j) * time.Millisecond).UnixNano()})
			}
			appendAll(t, src, task, finish(5000+i)...)
		})
	}
	wg.Wait()
	waitMirrored(t, cli, "n1", src)
	st := n.Stats(ctxT(t))
	if st.LagEvents != 0 || st.LagSeconds != 0 {
		t.Errorf("caught up, yet the lag is %d events, %.3fs", st.LagEvents, st.LagSeconds)
	}
	if st.Mirrored == 0 || st.Lease == 0 {
		t.Errorf("stats %+v: want events mirrored under a lease", st)
	}
}

func TestMirror_EnvironmentValuesNeverReachEtcd(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 0)...)
	runNode(t, newTestNode(t, cli, "n1", dir, src))
	waitMirrored(t, cli, "n1", src)
	resp, err := cli.Get(ctxT(t), "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	sawKey := false
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), "s3cr3t") {
			t.Errorf("key %s holds an environment value: %s", kv.Key, kv.Value)
		}
		sawKey = sawKey || strings.Contains(string(kv.Value), `"TOKEN":"`+Redacted+`"`)
	}
	if !sawKey {
		t.Error("the environment's names are not mirrored (want TOKEN with a redacted value)")
	}
}

func TestMirror_CatchesUpAfterRestartFromEtcdsHeads(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 3)...)
	stop := runNode(t, newTestNode(t, cli, "n1", dir, src))
	waitMirrored(t, cli, "n1", src)
	stop()
	// The local side goes on while no mirror runs.
	appendAll(t, src, "t1", finish(100)...)
	appendAll(t, src, "t2", lifecycle("db", 200, 2)...)
	// A new agent of the same state directory takes the node over at
	// once (the lease record), and catches up.
	n2 := newTestNode(t, cli, "n1", dir, src)
	runNode(t, n2)
	waitMirrored(t, cli, "n1", src)
}

func TestMirror_LostReplyIsNotWrittenTwice(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	n := newTestNode(t, cli, "n1", dir, src)
	var mu sync.Mutex
	lost := 0
	lostC := make(chan struct{}, 3) // a token for each reply lost
	n.mir.txnHook = func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		resp, err := call()
		mu.Lock()
		defer mu.Unlock()
		if err == nil && resp.Succeeded && lost < 3 {
			lost++
			lostC <- struct{}{}
			return nil, errors.New("reply lost in flight") // committed, but the mirror cannot know
		}
		return resp, err
	}
	appendAll(t, src, "t1", lifecycle("web", 0, 0)...)
	runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	appendAll(t, src, "t1", finish(100)...)
	appendAll(t, src, "t2", lifecycle("db", 200, 0)...)
	waitMirrored(t, cli, "n1", src)
	// Two commits whose replies were lost: the second, of events appended
	// after the first was in etcd, needs a transaction of its own. (etcd
	// shows a commit before its reply reaches the hook: a count read
	// right after waitMirrored could miss the second.)
	ctx := ctxT(t)
	for i := range 2 {
		select {
		case <-lostC:
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("only %d replies were lost (waited for the %d. in vain): the test did not exercise the retry", lost, i+1)
		}
	}
}

func TestMirror_BatchesWithinEtcdsTxnLimits(t *testing.T) {
	// A server that allows 8 operations a transaction: a batch that
	// broke the limit would be refused and the mirror would never
	// converge.
	cli := dial(t, etcdtest.Embedded(t, func(c *embed.Config) { c.MaxTxnOps = 8 }))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 60)...)
	for i := range 10 {
		appendAll(t, src, fmt.Sprintf("u%d", i), lifecycle(fmt.Sprintf("svc%d", i), 100*i, 1)...)
	}
	n := newTestNode(t, cli, "n1", dir, src, func(c *NodeConfig) { c.MaxTxnOps = 8 })
	runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	if st := n.Stats(ctxT(t)); st.Txns < 66/6 {
		t.Errorf("%d transactions for 126 events at 8 ops each: batches broke the limit?", st.Txns)
	}
}

func TestMirror_PrunesTasksTheLocalLogRemoved(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "old", append(lifecycle("old", 0, 0), finish(10)...)...)
	appendAll(t, src, "live", lifecycle("live", 20, 0)...)
	runNode(t, newTestNode(t, cli, "n1", dir, src))
	waitMirrored(t, cli, "n1", src)
	removed, err := src.Remove(ctxT(t), time.Now())
	if err != nil || len(removed) != 1 || removed[0] != "old" {
		t.Fatalf("Remove = %v, %v; want [old]", removed, err)
	}
	waitMirrored(t, cli, "n1", src)
	resp, err := cli.Get(ctxT(t), "/tether/event/n1/old/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("events of the removed task left in the mirror: %d, %v", resp.Count, err)
	}
}

func TestMirror_ReplacedStateDirectoryIsMirroredAfresh(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dirA, dirB := t.TempDir(), t.TempDir()
	srcA := openStore(t, dirA)
	appendAll(t, srcA, "t1", lifecycle("web", 0, 5)...)
	appendAll(t, srcA, "t2", lifecycle("db", 0, 0)...)
	nA := newTestNode(t, cli, "n1", dirA, srcA)
	stop := runNode(t, nA)
	waitMirrored(t, cli, "n1", srcA)
	stop()
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(nA.Stats(ctxT(t)).Lease)); err != nil {
		t.Fatal(err)
	}
	// Another state directory under the same node name: same task id,
	// a shorter, different log; the other task gone.
	srcB := openStore(t, dirB)
	appendAll(t, srcB, "t1", lifecycle("web", 500, 1)...)
	nB := newTestNode(t, cli, "n1", dirB, srcB)
	runNode(t, nB)
	waitMirrored(t, cli, "n1", srcB)
	if st := nB.Stats(ctxT(t)); st.Pruned < 2 {
		t.Errorf("pruned %d tasks, want t1 (diverged) and t2 (gone)", st.Pruned)
	}
}

func TestMirror_SameLengthDifferentLogIsRewritten(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dirA, dirB := t.TempDir(), t.TempDir()
	srcA := openStore(t, dirA)
	appendAll(t, srcA, "t1", lifecycle("web", 0, 2)...)
	nA := newTestNode(t, cli, "n1", dirA, srcA)
	stop := runNode(t, nA)
	waitMirrored(t, cli, "n1", srcA)
	stop()
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(nA.Stats(ctxT(t)).Lease)); err != nil {
		t.Fatal(err)
	}
	srcB := openStore(t, dirB)
	appendAll(t, srcB, "t1", lifecycle("web", 7, 2)...) // same types, other times
	runNode(t, newTestNode(t, cli, "n1", dirB, srcB))
	waitMirrored(t, cli, "n1", srcB)
}

func TestMirror_WriterThatLostTheNodeIsFenced(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dirA, dirB := t.TempDir(), t.TempDir()
	srcA, srcB := openStore(t, dirA), openStore(t, dirB)
	appendAll(t, srcA, "a1", lifecycle("from-a", 0, 0)...)
	nA := newTestNode(t, cli, "n1", dirA, srcA)
	runNode(t, nA)
	waitMirrored(t, cli, "n1", srcA)
	// A's lease lapses (a partition longer than the TTL, as etcd sees
	// it); B registers the node. A stays running and keeps committing.
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(nA.Stats(ctxT(t)).Lease)); err != nil {
		t.Fatal(err)
	}
	appendAll(t, srcB, "b1", lifecycle("from-b", 0, 0)...)
	nB := newTestNode(t, cli, "n1", dirB, srcB)
	err := nB.Register(ctxT(t))
	for errors.Is(err, ErrNodeHeld) { // A may have registered again first: then B is refused, as it should be
		var held *NodeHeldError
		errors.As(err, &held)
		if held.Holder.Dir != nA.cfg.Dir {
			t.Fatalf("B refused naming %+v, want A's directory %s", held.Holder, nA.cfg.Dir)
		}
		if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(held.Holder.Lease)); err != nil {
			t.Fatal(err)
		}
		err = nB.Register(ctxT(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	runNode(t, nB)
	for i := range 20 {
		appendAll(t, srcA, "a1", fsm.Event{Type: fsm.EventReattached, Time: t0.Add(time.Duration(10+i) * time.Millisecond).UnixNano()})
	}
	appendAll(t, srcA, "a2", lifecycle("from-a-2", 0, 0)...)
	waitMirrored(t, cli, "n1", srcB) // exactly B's log: A wrote nothing
	// And it stays so: A keeps trying, fenced, while B holds the node.
	// A commit of B's, once mirrored, orders after any write A could
	// have made; the mirror is still exactly B's log.
	appendAll(t, srcB, "b1", finish(100)...)
	waitMirrored(t, cli, "n1", srcB)
	if st := nA.Stats(ctxT(t)); st.Lease != 0 && st.Lease == nB.Stats(ctxT(t)).Lease {
		t.Fatalf("A and B hold the same lease %x", st.Lease)
	}
}

func TestMirror_LagIsMeasuredWhileEtcdIsAway(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 0)...)
	n := newTestNode(t, cli, "n1", dir, src)
	stop := runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	stop() // the mirror is gone; the local log goes on
	appendAll(t, src, "t1", finish(100)...)
	appendAll(t, src, "t2", lifecycle("db", 0, 0)...)
	st := n.Stats(context.Background())
	if st.LagEvents != 8 {
		t.Errorf("lag %d events, want 8 (2 of t1, 6 of t2)", st.LagEvents)
	}
	if want := time.Since(t0).Seconds(); st.LagSeconds < want-60 {
		t.Errorf("lag %.0fs, want the age of the oldest event not mirrored (about %.0fs)", st.LagSeconds, want)
	}
}
