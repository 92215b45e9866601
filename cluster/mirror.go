package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// mirror writes every committed event of the local log to etcd, exactly
// once and in order (see doc.go, "The mirror"). One goroutine owns it.
type mirror struct {
	n    *Node
	cli  *clientv3.Client
	keys Keys
	node string
	src  Source
	log  hclog.Logger

	// heads are the mirrored heads as etcd last said (read at the start
	// of each session, then the ones this mirror wrote). Never trusted
	// across a session: a session starts by reading them again.
	heads map[string]mirrored
	// seqs are the mirrored seqs of heads, for Stats from other
	// goroutines (task -> uint64).
	seqs sync.Map
	// pending are the tasks that may have events to mirror.
	pending map[string]bool
	// bad are task ids that cannot be keys (an embedder's own ids); they
	// are logged once and never mirrored.
	bad map[string]bool

	// txnHook observes each guarded transaction (tests: the
	// linearizability check); nil in production.
	txnHook func(b *batch, call func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error)
}

// mirrored is a task's head in etcd and the revision it was written at
// (0: no head key).
type mirrored struct {
	head
	modRev int64
}

func newMirror(n *Node) *mirror {
	return &mirror{n: n, cli: n.cli, keys: n.keys, node: n.cfg.Name, src: n.cfg.Source, log: n.log.Named("mirror"),
		bad: map[string]bool{}}
}

// run mirrors until ctx ends. Each session starts from etcd's heads and
// ends at the first error; the next waits for the fence and starts over.
func (m *mirror) run(ctx context.Context) {
	var b backoff
	for ctx.Err() == nil {
		lease, changed := m.n.fence.get()
		if lease == 0 {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		err := m.session(ctx, lease)
		if ctx.Err() != nil {
			return
		}
		m.n.stats.fail(err)
		if errors.Is(err, ErrFenced) {
			m.log.Warn("mirror writes fenced: the node's lease changed; waiting for the next registration", "err", err)
			continue
		}
		m.log.Warn("mirror interrupted; it catches up from etcd's heads when etcd answers", "err", err)
		b.wait(ctx, m.n.cfg.LeaseTTL)
	}
}

// session catches up with the local log, then follows its commits, until
// an error or a change of lease.
func (m *mirror) session(ctx context.Context, lease clientv3.LeaseID) error {
	_, fenceChanged := m.n.fence.get()
	if err := m.loadHeads(ctx); err != nil {
		return err
	}
	m.n.cfg.Changes.take() // everything is listed below
	if err := m.reconcile(ctx, lease); err != nil {
		return err
	}
	var b backoff
	for {
		tasks, all := m.n.cfg.Changes.take()
		if all {
			if err := m.reconcile(ctx, lease); err != nil {
				return err
			}
		}
		for _, t := range tasks {
			m.pending[t] = true
		}
		if len(m.pending) == 0 {
			m.n.stats.fail(nil)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-fenceChanged:
				return ErrFenced
			case <-m.n.cfg.Changes.C():
			}
			continue
		}
		bt, err := m.collect(ctx, lease)
		if err != nil {
			return err
		}
		if len(bt.tasks) == 0 {
			continue
		}
		ok, err := m.commit(ctx, lease, bt)
		if err != nil {
			return err
		}
		if !ok {
			b.wait(ctx, m.n.cfg.LeaseTTL) // a guard failed: heads were refreshed; go again, not in a hot loop
			continue
		}
		b.reset()
	}
}

// loadHeads reads every mirrored head of the node from etcd, in pages,
// at one revision.
func (m *mirror) loadHeads(ctx context.Context) error {
	m.heads = map[string]mirrored{}
	m.seqs.Clear()
	prefix := m.keys.headPrefix(m.node)
	end := clientv3.GetPrefixRangeEnd(prefix)
	from, rev := prefix, int64(0)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := m.cli.Get(ctx, from, opts...)
		if err != nil {
			return unavailable("read the mirrored heads", err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			parts := m.keys.split(string(kv.Key), "head/", 2)
			if parts == nil {
				continue
			}
			h, err := decodeHead(string(kv.Key), kv.Value)
			if err != nil {
				// A head this mirror cannot read is rewritten from the
				// local log: prune, then mirror again.
				m.log.Warn("unreadable mirrored head; the task is mirrored again from the local log", "err", err)
				h = head{}
			}
			m.setHead(parts[1], mirrored{head: h, modRev: kv.ModRevision})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// reconcile lists the local heads and compares them with the mirrored
// ones: a task behind is pending; a task whose mirror is ahead of the
// local log or whose last mirrored event is not the local one (the state
// directory was replaced) is pruned and mirrored again; a task the local
// log no longer has (gc) is pruned.
func (m *mirror) reconcile(ctx context.Context, lease clientv3.LeaseID) error {
	local, err := m.src.Heads(ctx)
	if err != nil {
		return fmt.Errorf("cluster: read the local log's heads: %w", err)
	}
	m.pending = map[string]bool{}
	seen := map[string]bool{}
	for _, l := range local {
		if !m.usable(l.Task) {
			continue
		}
		seen[l.Task] = true
		mh, ok := m.heads[l.Task]
		if ok && mh.Seq > 0 && !m.sameLog(ctx, l, mh.head) {
			m.log.Warn("the mirror does not match the local log (the state directory was replaced?); mirroring the task again from the local log",
				"task_id", l.Task, "mirrored_seq", mh.Seq, "local_seq", l.Seq, "err", ErrDiverged)
			if err := m.prune(ctx, lease, l.Task); err != nil {
				return err
			}
		}
		if m.heads[l.Task].Seq < l.Seq {
			m.pending[l.Task] = true
		}
	}
	for _, t := range slices.Sorted(maps.Keys(m.heads)) {
		if !seen[t] {
			if err := m.prune(ctx, lease, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameLog reports whether the mirrored head h is a prefix of the local
// log l: not longer, and its last event the local one at that seq.
func (m *mirror) sameLog(ctx context.Context, l Head, h head) bool {
	if h.Seq > l.Seq {
		return false
	}
	evs, err := m.src.Events(ctx, l.Task, h.Seq, 1)
	return err == nil && len(evs) == 1 && h.matches(&evs[0])
}

// usable reports whether a local task id can be a key; it logs an
// unusable one once.
func (m *mirror) usable(task string) bool {
	if driver.ValidateTaskID(task) == nil {
		return true
	}
	if !m.bad[task] {
		m.bad[task] = true
		m.log.Error("task id cannot be mirrored: it breaks the task id rule", "task_id", fmt.Sprintf("%q", task))
	}
	return false
}

// prune deletes a task's head and events from the mirror, fenced.
func (m *mirror) prune(ctx context.Context, lease clientv3.LeaseID, task string) error {
	m.n.cfg.Hooks.crash(CrashMirrorBeforePrune)
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.keys.alive(m.node)), "=", lease)).
		Then(clientv3.OpDelete(m.keys.head(m.node, task)),
			clientv3.OpDelete(m.keys.eventPrefix(m.node, task), clientv3.WithPrefix())).
		Commit()
	m.n.cfg.Hooks.crash(CrashMirrorAfterPrune)
	if err != nil {
		return unavailable("prune a task from the mirror", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	m.delHead(task)
	m.n.stats.update(func(s *Stats) { s.Pruned++ })
	m.log.Debug("task pruned from the mirror", "task_id", task)
	return nil
}

// batch is one guarded transaction's worth of events, for one or more
// tasks.
type batch struct {
	tasks []taskBatch
	ops   int // puts
	bytes int
}

type taskBatch struct {
	task   string
	prev   mirrored
	events []fsm.Event
	vals   [][]byte
	next   head
}

// collect reads the pending tasks' next events from the local log into
// one batch within the transaction limits. Each event needs a put and a
// create-if-absent compare, each task a head put and a head compare, and
// the batch the fence compare: puts <= MaxTxnOps-1 keeps every list of
// the transaction within etcd's --max-txn-ops.
func (m *mirror) collect(ctx context.Context, lease clientv3.LeaseID) (*batch, error) {
	maxOps, maxBytes := m.n.cfg.MaxTxnOps-1, m.n.cfg.MaxTxnBytes
	b := &batch{}
	for _, task := range slices.Sorted(maps.Keys(m.pending)) {
		room := maxOps - b.ops - 1 // events this task may add, after its head put
		if room < 1 || b.bytes >= maxBytes {
			break
		}
		if !m.usable(task) {
			delete(m.pending, task)
			continue
		}
		prev := m.heads[task]
		evs, err := m.src.Events(ctx, task, prev.Seq+1, room)
		switch {
		case errors.Is(err, store.ErrUnknownTask):
			delete(m.pending, task)
			if _, ok := m.heads[task]; ok {
				if err := m.prune(ctx, lease, task); err != nil {
					return nil, err
				}
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("cluster: read task %s from the local log: %w", task, err)
		}
		if len(evs) < room {
			delete(m.pending, task) // drained, until its next commit is noted
		}
		if len(evs) == 0 {
			continue
		}
		tb := taskBatch{task: task, prev: prev}
		for i := range evs {
			val, err := encodeEvent(&evs[i])
			if err != nil {
				return nil, fmt.Errorf("cluster: encode task %s seq %d: %w", task, evs[i].Seq, err)
			}
			if len(tb.vals) > 0 && b.bytes+len(val) > maxBytes || len(tb.vals) == 0 && len(b.tasks) > 0 && b.bytes+len(val) > maxBytes {
				m.pending[task] = true
				break
			}
			tb.events = append(tb.events, evs[i])
			tb.vals = append(tb.vals, val)
			b.bytes += len(val)
		}
		if len(tb.events) == 0 {
			break
		}
		next, err := prev.advance(tb.events)
		if err != nil {
			// The mirrored head is not where the local log's next events
			// can follow: rewrite the task from the local log.
			m.log.Warn("mirrored head does not fold with the local log; mirroring the task again", "task_id", task, "err", err)
			if err := m.prune(ctx, lease, task); err != nil {
				return nil, err
			}
			m.pending[task] = true
			continue
		}
		tb.next = next
		b.ops += len(tb.events) + 1
		b.tasks = append(b.tasks, tb)
		if len(tb.events) < len(evs) {
			break // the byte budget is spent
		}
	}
	return b, nil
}

// commit writes a batch in one transaction: if the node's liveness key is
// under our lease, and each task's head is the one we read (or absent),
// and none of the event keys exists, then put the events and the new
// heads. It returns false when a guard failed, after refreshing what the
// mirror knows from the transaction's else branch; ErrFenced when the
// lease guard did.
func (m *mirror) commit(ctx context.Context, lease clientv3.LeaseID, b *batch) (bool, error) {
	alive := m.keys.alive(m.node)
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(alive), "=", lease)}
	var puts []clientv3.Op
	els := []clientv3.Op{clientv3.OpGet(alive)}
	for _, tb := range b.tasks {
		hk := m.keys.head(m.node, tb.task)
		if tb.prev.modRev == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(hk), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(hk), "=", tb.prev.modRev))
		}
		for i, e := range tb.events {
			ek := m.keys.event(m.node, tb.task, e.Seq)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ek), "=", 0))
			puts = append(puts, clientv3.OpPut(ek, string(tb.vals[i])))
		}
		hv, _ := jsonMarshal(tb.next)
		puts = append(puts, clientv3.OpPut(hk, string(hv)))
		els = append(els, clientv3.OpGet(hk))
	}
	m.n.cfg.Hooks.crash(CrashMirrorBeforeTxn)
	call := func() (*clientv3.TxnResponse, error) {
		return m.cli.Txn(ctx).If(cmps...).Then(puts...).Else(els...).Commit()
	}
	var resp *clientv3.TxnResponse
	var err error
	if m.txnHook != nil {
		resp, err = m.txnHook(b, call)
	} else {
		resp, err = call()
	}
	m.n.cfg.Hooks.crash(CrashMirrorAfterTxn)
	m.n.stats.update(func(s *Stats) { s.Txns++ })
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return false, err
		}
		if tooLarge(err) && len(b.tasks) == 1 && len(b.tasks[0].events) == 1 {
			e := b.tasks[0].events[0]
			return false, fmt.Errorf("%w: task %s seq %d is %d bytes: raise etcd's --max-request-bytes: %w", ErrTooLarge, b.tasks[0].task, e.Seq, b.bytes, err)
		}
		// The outcome is unknown: the session ends, and the next one
		// reads the heads again (a committed batch is then seen there,
		// never written twice).
		return false, unavailable("mirror a batch", err)
	}
	if resp.Succeeded {
		n := 0
		for _, tb := range b.tasks {
			m.setHead(tb.task, mirrored{head: tb.next, modRev: resp.Header.Revision})
			n += len(tb.events)
		}
		m.n.stats.update(func(s *Stats) { s.Mirrored += uint64(n) })
		return true, nil
	}
	m.n.stats.update(func(s *Stats) { s.Conflicts++ })
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != lease {
		return false, ErrFenced
	}
	for i, tb := range b.tasks {
		m.pending[tb.task] = true
		kvs := resp.Responses[i+1].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			if tb.prev.modRev != 0 {
				m.delHead(tb.task) // pruned under us
				continue
			}
			// No head, yet the guard failed: event keys without a head
			// (left by a tether before this one, or by hand). The local
			// log is the truth: clear them, then mirror again.
			if err := m.prune(ctx, lease, tb.task); err != nil {
				return false, err
			}
			continue
		}
		kv := kvs[0]
		if kv.ModRevision == tb.prev.modRev {
			// The head is as we read it, so an event key past it exists:
			// clear the keys past the head, guarded by the head.
			if err := m.clearPast(ctx, lease, tb.task, tb.prev); err != nil {
				return false, err
			}
			continue
		}
		h, err := decodeHead(string(kv.Key), kv.Value)
		if err != nil {
			h = head{}
		}
		// Our own earlier attempt committed (its answer was lost), or the
		// head moved otherwise: go on from what etcd says.
		m.setHead(tb.task, mirrored{head: h, modRev: kv.ModRevision})
		m.log.Debug("mirrored head moved; going on from etcd's", "task_id", tb.task, "seq", h.Seq)
	}
	return false, nil
}

// clearPast deletes the event keys of task past its mirrored head,
// guarded by the head's revision and the fence.
func (m *mirror) clearPast(ctx context.Context, lease clientv3.LeaseID, task string, h mirrored) error {
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(m.keys.alive(m.node)), "=", lease),
			clientv3.Compare(clientv3.ModRevision(m.keys.head(m.node, task)), "=", h.modRev)).
		Then(clientv3.OpDelete(m.keys.event(m.node, task, h.Seq+1),
			clientv3.WithRange(clientv3.GetPrefixRangeEnd(m.keys.eventPrefix(m.node, task))))).
		Commit()
	if err != nil {
		return unavailable("clear stray mirrored events", err)
	}
	if resp.Succeeded {
		m.log.Warn("cleared mirrored events past the task's head", "task_id", task, "seq", h.Seq)
	}
	return nil
}

func (m *mirror) setHead(task string, h mirrored) {
	m.heads[task] = h
	m.seqs.Store(task, h.Seq)
}

func (m *mirror) delHead(task string) {
	delete(m.heads, task)
	m.seqs.Delete(task)
}

// lag counts the committed events not yet mirrored, from the local log's
// heads against the mirrored ones last known, and finds the time of the
// oldest of them. It reads the local log (one head per task, one event
// per lagging task) and may run beside the mirror's goroutine; while etcd
// is down it still tells how far behind the mirror is.
func (m *mirror) lag(ctx context.Context) (events uint64, oldest int64, err error) {
	local, err := m.src.Heads(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range local {
		var h uint64
		if v, ok := m.seqs.Load(l.Task); ok {
			h = v.(uint64)
		}
		if l.Seq <= h || driver.ValidateTaskID(l.Task) != nil {
			continue
		}
		events += l.Seq - h
		if evs, err := m.src.Events(ctx, l.Task, h+1, 1); err == nil && len(evs) == 1 && (oldest == 0 || evs[0].Time < oldest) {
			oldest = evs[0].Time
		}
	}
	return events, oldest, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// tooLarge reports whether err is etcd's (or gRPC's) refusal of a request
// over the size limit.
func tooLarge(err error) bool {
	return errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) ||
		status.Code(err) == codes.ResourceExhausted
}
