package cluster

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

// The mirror as porcupine sees it, per task: a register holding the
// mirrored length. A guarded write (from..to) that succeeded extends it
// exactly from from-1; one whose guard failed changes nothing; one whose
// outcome is unknown (an error, a crash) may have done either, at any
// time after its call. A read returns the length. A second success of
// the same batch, a read that goes back, or a write that skips ahead
// makes the history non-linearizable.

type mirrorOp struct {
	Task     string
	Read     bool
	From, To uint64 // write: the seqs written
	Outcome  outcome
	Length   uint64 // read: the length seen
}

type outcome uint8

const (
	opOK outcome = iota + 1
	opRefused
	opUnknown
)

func mirrorModel() porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				t := op.Input.(mirrorOp).Task
				by[t] = append(by[t], op)
			}
			var out [][]porcupine.Operation
			for _, t := range sortedKeys(by) {
				out = append(out, by[t])
			}
			return out
		},
		Init: func() []any { return []any{uint64(0)} },
		Step: func(state, input, _ any) []any {
			s, op := state.(uint64), input.(mirrorOp)
			switch {
			case op.Read:
				if op.Length == s {
					return []any{s}
				}
				return nil
			case op.Outcome == opOK:
				if s == op.From-1 {
					return []any{op.To}
				}
				return nil
			case op.Outcome == opRefused:
				return []any{s}
			default:
				if s == op.From-1 {
					return []any{s, op.To}
				}
				return []any{s}
			}
		},
		DescribeOperation: func(input, _ any) string {
			op := input.(mirrorOp)
			if op.Read {
				return fmt.Sprintf("%s read %d", op.Task, op.Length)
			}
			return fmt.Sprintf("%s write %d..%d %d", op.Task, op.From, op.To, op.Outcome)
		},
	}
	return m.ToModel()
}

// history records operations with their real-time intervals.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in mirrorOp, call, ret int64) {
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: nil, Return: ret})
	h.mu.Unlock()
}

// TestMirror_LinearizableUnderMemberKillsAndCrashes runs a node's mirror
// against a real 3-member etcd while a writer commits to its store,
// SIGKILLs etcd members one at a time, and crashes the mirror at every
// crash point in turn (the goroutine stops dead there; a new node of the
// same state directory takes over, as a restarted agent would), with
// readers reading the mirror throughout. The history of guarded writes
// and reads must be linearizable per task, every read a gapless,
// duplicate-free prefix of the local log, and the mirror must converge
// to the local log.
func TestMirror_LinearizableUnderMemberKillsAndCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a real etcd cluster, member kills and crashes")
	}
	c := etcdtest.Start(t, 3)
	cli := dial(t, c.Endpoints()...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	src := openStore(t, dir)
	keys := mustKeys(t)
	h := &history{start: time.Now()}
	const tasks = 4

	// The writer: the local side commits whatever etcd does.
	stopWriter := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for step := 0; ; step++ {
			for i := range tasks {
				task := fmt.Sprintf("t%d", i)
				evs, expected := lifecycle(task, 0, 0), uint64(0) // 6 events
				if step > 0 {
					evs, expected = []fsm.Event{{Type: fsm.EventReattached, Time: time.Now().UnixNano()}}, uint64(5+step)
				}
				if _, err := src.Append(context.Background(), task, expected, evs...); err != nil {
					t.Errorf("append %s: %v", task, err)
					return
				}
			}
			select {
			case <-stopWriter:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})

	// Readers: one Get of the node's events at a time, each task's part
	// an operation.
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for r := range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				call := h.now()
				resp, err := cli.Get(ctx, keys.eventPrefix("n1", ""), clientv3.WithPrefix())
				ret := h.now()
				cancel()
				if err != nil {
					continue // a read that failed observed nothing
				}
				seen := map[string]uint64{}
				for _, kv := range resp.Kvs {
					parts := keys.split(string(kv.Key), "event/", 3)
					e, err := decodeEvent(string(kv.Key), kv.Value)
					if err != nil {
						t.Error(err)
						return
					}
					if e.Seq != seen[parts[1]]+1 {
						t.Errorf("read saw %s seq %d after %d: a gap or a duplicate", parts[1], e.Seq, seen[parts[1]])
					}
					seen[parts[1]] = e.Seq
				}
				for i := range tasks {
					task := fmt.Sprintf("t%d", i)
					h.add(100+r, mirrorOp{Task: task, Read: true, Length: seen[task]}, call, ret)
				}
				reads.Add(1)
			}
		})
	}

	// Node incarnations, each crashed at a point, until every point has
	// fired; an etcd member is killed (and later restarted) every few.
	points := CrashPoints()
	fired := map[string]bool{}
	killed, stalls, crashes := -1, 0, 0
	for inc := 0; len(fired) < len(points) || inc < 16; inc++ {
		if inc > 60 {
			t.Fatalf("crash points never reached: %v", missing(points, fired))
		}
		if inc%3 == 1 {
			if killed >= 0 {
				c.Restart(killed)
			}
			killed = rng.IntN(3)
			c.Kill(killed)
		}
		point := "" // a stall, not a crash
		if inc%4 != 3 {
			point = points[crashes%len(points)]
			crashes++
		}
		hit := 1
		if point == CrashMirrorBeforeTxn || point == CrashMirrorAfterTxn {
			hit += rng.IntN(3)
		}
		if point == CrashMirrorBeforePrune || point == CrashMirrorAfterPrune {
			plantStrayTask(t, cli, "n1") // something for the prune to prune
		}
		ctx, cancel := context.WithCancel(context.Background())
		var hits atomic.Int32
		crashed := make(chan string, 1)
		n := newTestNode(t, cli, "n1", dir, src, func(c *NodeConfig) {
			c.Hooks.Crash = func(p string) {
				if p == point && hits.Add(1) == int32(hit) {
					crashed <- p
					cancel()
					runtime.Goexit() // the goroutine stops dead here
				}
			}
		})
		n.mir.txnHook = recordTxns(h)
		stall := inc%4 == 3
		stalled, release := make(chan struct{}), make(chan struct{})
		type result struct {
			resp *clientv3.TxnResponse
			err  error
		}
		returned := make(chan result, 1)
		if stall {
			// A stalled agent (SIGSTOP, a long pause): its next
			// transaction is held while a successor of the same state
			// directory takes the node over and mirrors on, then goes
			// out with its stale view. The fence must refuse it.
			var once sync.Once
			rec := recordTxns(h)
			n.mir.txnHook = func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
				first := false
				once.Do(func() { first = true })
				if !first {
					return rec(b, call)
				}
				close(stalled)
				<-release
				resp, err := rec(b, call)
				returned <- result{resp, err}
				return resp, err
			}
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(ctx) }()
		if stall {
			<-stalled
			succ := newTestNode(t, cli, "n1", dir, src)
			progressed := make(chan struct{})
			var progress sync.Once
			srec := recordTxns(h)
			succ.mir.txnHook = func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
				resp, err := srec(b, call)
				if err == nil && resp.Succeeded {
					progress.Do(func() { close(progressed) })
				}
				return resp, err
			}
			sctx, scancel := context.WithCancel(context.Background())
			sdone := make(chan struct{})
			go func() { defer close(sdone); _ = succ.Run(sctx) }()
			<-progressed
			close(release)
			r := <-returned
			switch {
			case r.err == nil && r.resp.Succeeded:
				t.Errorf("a stalled writer's transaction succeeded after its successor took the node over")
			case r.err == nil:
				stalls++
			}
			cancel()
			<-done
			scancel()
			<-sdone
			continue
		}
		select {
		case p := <-crashed:
			fired[p] = true
		case <-time.After(3 * time.Second): // the point is not on this run's path (a prune with nothing to prune)
			cancel()
		}
		<-done
	}
	if killed >= 0 {
		c.Restart(killed)
	}
	close(stopWriter)
	writer.Wait()
	// A last node converges.
	n := newTestNode(t, cli, "n1", dir, src)
	n.mir.txnHook = recordTxns(h)
	stop := runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	close(stopReaders)
	readers.Wait()
	stop()

	t.Logf("%d operations, %d reads, %d stalled writers fenced, crash points fired: %v", len(h.ops), reads.Load(), stalls, sortedKeys(fired))
	res, info := porcupine.CheckOperationsVerbose(mirrorModel(), h.ops, time.Minute)
	if res != porcupine.Ok {
		path := t.TempDir() + "/linearizability.html"
		_ = porcupine.VisualizePath(mirrorModel(), info, path)
		t.Fatalf("mirror history is %s (visualization: %s)", res, path)
	}
	// Every read was a prefix of the local log (which only grows): the
	// contents were checked for gaps and duplicates as read, and the
	// final mirror is the local log exactly (waitMirrored).
	if !strings.Contains(fmt.Sprint(sortedKeys(fired)), "mirror:after-txn") {
		t.Errorf("the crash after a committed transaction never fired: %v", sortedKeys(fired))
	}
}

// recordTxns records each guarded transaction of a mirror as one write
// per task.
func recordTxns(h *history) func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	return func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		start := h.now()
		resp, err := call()
		end := h.now()
		out := opOK
		switch {
		case err != nil:
			out, end = opUnknown, math.MaxInt64
		case !resp.Succeeded:
			out = opRefused
		}
		for _, tb := range b.tasks {
			if tb.task == "stray" {
				continue
			}
			h.add(0, mirrorOp{Task: tb.task, From: tb.events[0].Seq, To: tb.events[len(tb.events)-1].Seq, Outcome: out}, start, end)
		}
		return resp, err
	}
}

func missing(all []string, fired map[string]bool) []string {
	var out []string
	for _, p := range all {
		if !fired[p] {
			out = append(out, p)
		}
	}
	return out
}
