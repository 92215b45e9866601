package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The scheduler has no server of its own: every agent of the fleet is a
// candidate, and one at a time leads, elected through etcd
// (clientv3/concurrency) on a session on its node's own liveness lease.
// So the scheduler is always a live node, and a scheduler that dies or
// freezes loses its leadership exactly when its node is shown down:
// another takes over within one lease TTL. It holds nothing etcd does not
// (its input is one read of etcd, its output placements), so the one
// that takes over resumes from etcd alone.
//
// Every write is one transaction guarded by the scheduler's leadership
// (its election key still exists at the revision it was created at) and
// by the job's head (its ModRevision as read), and by each copy's
// placement (its ModRevision as read, or its absence): a deposed
// scheduler's write fails whole, a run or stop of the job in between
// fails it too, and a copy is never placed twice.

// Scheduler crash points (Hooks), in the order a pass meets them.
const (
	// CrashSchedulerElected: the campaign was won; nothing read yet.
	CrashSchedulerElected = "scheduler:elected"
	// CrashSchedulerBeforeTxn: a transaction of a job's decision is built,
	// not sent.
	CrashSchedulerBeforeTxn = "scheduler:before-txn"
	// CrashSchedulerAfterTxn: etcd committed it; the scheduler has not
	// seen the answer (the job's later transactions not sent).
	CrashSchedulerAfterTxn = "scheduler:after-txn"
)

// SchedulerCrashPoints lists the scheduler's crash points.
func SchedulerCrashPoints() []string {
	return []string{CrashSchedulerElected, CrashSchedulerBeforeTxn, CrashSchedulerAfterTxn}
}

// DefaultCopiesPerTxn is how many copies' changes one transaction of the
// scheduler carries: each takes up to four operations (the placement,
// the node's key, the old node's key and verdict deleted) and a compare,
// within etcd's default --max-txn-ops of 128.
const DefaultCopiesPerTxn = 30

// SchedulerConfig configures a scheduler.
type SchedulerConfig struct {
	// Name is the candidate's name (its node's), the election's value.
	Name string
	// Prefix is the fleet's key prefix ("" is DefaultPrefix).
	Prefix string
	// Policy is what decisions are made by (return holdoff, reschedule
	// policy; Reschedule nil is GroupReschedule: each group's own).
	Policy Policy
	// CopiesPerTxn bounds one transaction (default DefaultCopiesPerTxn).
	CopiesPerTxn int
	// Logger receives the scheduler's logs; nil means none.
	Logger hclog.Logger
	// Now is the scheduler's clock and After its timers (tests: a fake
	// clock); defaults time.Now and time.After.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Hooks crash the scheduler at named points (tests).
	Hooks Hooks
	// OnPass, when set, is told the outcome of every pass (tests,
	// metrics).
	OnPass func(PassStats)
}

// PassStats is one pass of the scheduler.
type PassStats struct {
	// Revision is the etcd revision the pass read the fleet at.
	Revision int64
	// Placed, Deleted are the copies whose placements it wrote; Unplaced
	// the copies no node could hold; Txns its transactions.
	Placed, Deleted, Unplaced, Txns int
	// Conflicts: a guard failed (the job changed, or another writer):
	// the pass was cut short and the next reads again.
	Conflicts int
	// Wake is when something falls due (zero: nothing).
	Wake time.Time
	// Err is the pass's error, if any.
	Err error
	// Where the pass's time went (wall clock, whatever the scheduler's
	// clock): reading the fleet (and parsing new job versions), deciding
	// (Reconcile and Place), writing.
	Read, Decide, Write time.Duration
}

// Quiet reports whether the pass changed nothing.
func (p PassStats) Quiet() bool { return p.Placed+p.Deleted == 0 && p.Conflicts == 0 && p.Err == nil }

// Scheduler places the fleet's jobs while it leads. See the comment at the
// top of this file.
type Scheduler struct {
	cli  *clientv3.Client
	cfg  SchedulerConfig
	keys Keys
	log  hclog.Logger

	mu     sync.Mutex
	parsed map[string]*parsedSpec // "JOB/VERSION" -> the parse of that spec
}

type parsedSpec struct {
	job *Job
	err error
}

// NewScheduler checks cfg and returns a scheduler; it contacts nothing.
func NewScheduler(cli *clientv3.Client, cfg SchedulerConfig) (*Scheduler, error) {
	if err := ValidateNodeName(cfg.Name); err != nil {
		return nil, err
	}
	keys, err := NewKeys(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	if cfg.CopiesPerTxn <= 0 {
		cfg.CopiesPerTxn = DefaultCopiesPerTxn
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Policy.Reschedule == nil {
		cfg.Policy.Reschedule = GroupReschedule{}
	}
	return &Scheduler{cli: cli, cfg: cfg, keys: keys, log: cfg.Logger.Named("scheduler"), parsed: map[string]*parsedSpec{}}, nil
}

// Lead campaigns for the fleet's scheduling on session (a session on the
// node's liveness lease: concurrency.WithLease) and schedules while it
// leads. It returns when ctx ends (after resigning, so that another
// takes over at once), when the session ends (the lease is lost: another
// already leads or soon will), or when a write finds the leadership gone
// (ErrNotLeader).
func (s *Scheduler) Lead(ctx context.Context, session *concurrency.Session) error {
	e := concurrency.NewElection(session, s.keys.leaderPrefix())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	if err := e.Campaign(cctx, s.cfg.Name); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cluster: campaign for the scheduler: %w", err)
	}
	s.log.Info("leading the fleet's scheduling", "key", e.Key(), "rev", e.Rev())
	s.cfg.Hooks.crash(CrashSchedulerElected)
	defer func() {
		// Resign on the way out, so that another candidate leads at once
		// (a crash leaves the key to its lease instead).
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer rcancel()
		_ = e.Resign(rctx)
	}()
	lead := leadership{key: e.Key(), rev: e.Rev()}
	err := s.loop(cctx, lead)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// leadership is the guard of every write: the election key as created.
type leadership struct {
	key string
	rev int64
}

func (l leadership) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// loop runs passes until ctx ends or the leadership is gone: each pass
// reads the fleet, reconciles it and writes; then it waits for a change
// of a job, a node's liveness or registration or a verdict (etcd
// watches), or for the next due time.
func (s *Scheduler) loop(ctx context.Context, lead leadership) error {
	var b backoff
	for ctx.Err() == nil {
		st := s.Pass(ctx, lead)
		if s.cfg.OnPass != nil {
			s.cfg.OnPass(st)
		}
		if errors.Is(st.Err, ErrNotLeader) {
			s.log.Warn("no longer the fleet's scheduler", "err", st.Err)
			return st.Err
		}
		if st.Err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Warn("scheduling pass failed; trying again", "err", st.Err)
			b.wait(ctx, 5*time.Second)
			continue
		}
		b.reset()
		if st.Conflicts > 0 || st.Placed+st.Deleted > 0 {
			continue // read again at once: the writes changed the world
		}
		if err := s.wait(ctx, st.Revision, st.Wake); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// wait returns at the first change after rev of a job, a liveness key, a
// registration or a verdict, or at wake.
func (s *Scheduler) wait(ctx context.Context, rev int64, wake time.Time) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var chans []clientv3.WatchChan
	for _, p := range []string{s.keys.jobPrefix(), s.keys.alivePrefix(), s.keys.infoPrefix(), s.keys.verdictPrefix("")} {
		chans = append(chans, s.cli.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithRev(rev+1)))
	}
	var timer <-chan time.Time
	if !wake.IsZero() {
		timer = s.cfg.After(max(0, wake.Sub(s.cfg.Now())))
	}
	merged := make(chan struct{}, 1)
	for _, ch := range chans {
		go func() {
			for range ch {
				select {
				case merged <- struct{}{}:
				default:
				}
			}
			// A watch that ends (compaction, a lost leader, ctx) wakes the
			// loop too: it reads the fleet again.
			select {
			case merged <- struct{}{}:
			default:
			}
		}()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-merged:
	case <-timer:
	}
	return nil
}

// Pass reads the fleet once, reconciles it, and writes the decisions in
// guarded transactions, under lead. It is the whole of the scheduler's
// work; Lead runs it in a loop.
func (s *Scheduler) Pass(ctx context.Context, lead leadership) PassStats {
	var st PassStats
	t0 := time.Now()
	w, rev, err := s.read(ctx)
	st.Read = time.Since(t0)
	st.Revision = rev
	if err != nil {
		st.Err = err
		return st
	}
	p := s.cfg.Policy
	t1 := time.Now()
	nd, wake := ReconcileNodes(w, p)
	st.Decide += time.Since(t1)
	st.Wake = wake
	if len(nd.PutLost)+len(nd.DeleteLost) > 0 {
		t2 := time.Now()
		err := s.writeNodes(ctx, lead, nd)
		st.Write += time.Since(t2)
		if err != nil {
			st.Err = err
			return st
		}
		st.Txns++
	}
	for _, name := range slices.Sorted(maps.Keys(w.Jobs)) {
		js := w.Jobs[name]
		t1 := time.Now()
		d, due := ReconcileJob(w, name, p)
		st.Decide += time.Since(t1)
		st.Wake = earliest(st.Wake, due)
		if d.Eval != nil {
			st.Unplaced += len(d.Eval.Unplaced)
		}
		t2 := time.Now()
		txns, err := s.writeJob(ctx, lead, js, d)
		st.Write += time.Since(t2)
		st.Txns += txns
		if errors.Is(err, ErrJobChanged) {
			st.Conflicts++
			return st // read again: another job's decision may rest on this one's
		}
		if err != nil {
			st.Err = err
			return st
		}
		st.Placed += len(d.Put)
		st.Deleted += len(d.Delete)
	}
	return st
}

// read reads the fleet at one revision: jobs, liveness keys,
// registrations, placements, verdicts, lost records and evals in one
// transaction, then each job's current spec at that revision (parsed
// once per version and kept).
func (s *Scheduler) read(ctx context.Context) (*World, int64, error) {
	k := s.keys
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(k.jobPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(k.alivePrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(k.infoPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(k.allocPrefix(""), clientv3.WithPrefix()),
		clientv3.OpGet(k.verdictPrefix(""), clientv3.WithPrefix()),
		clientv3.OpGet(k.lostPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(k.evalPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(k.prefix+"jobspec/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, unavailable("read the fleet for scheduling", err)
	}
	rev := resp.Header.Revision
	w := &World{Now: s.cfg.Now(), Jobs: map[string]*JobState{}, Nodes: map[string]*NodeState{}, Placed: map[CopyID]Placed{},
		Verdicts: map[string]map[CopyID]Verdict{}, Lost: map[string]Lost{}}
	node := func(name string) *NodeState {
		ns := w.Nodes[name]
		if ns == nil {
			ns = &NodeState{Name: name}
			w.Nodes[name] = ns
		}
		return ns
	}
	kvs := func(i int) []*mvccKV { return toKVs(resp.Responses[i].GetResponseRange().GetKvs()) }
	for _, kv := range kvs(0) {
		var h JobHead
		if err := decodeJSON(kv.key, kv.value, &h); err != nil {
			s.log.Error("job head not read; the job is left as it is", "err", err)
			continue
		}
		w.Jobs[h.Job] = &JobState{Head: h, HeadRev: kv.modRev}
	}
	for _, kv := range kvs(1) {
		ns := node(strings.TrimPrefix(kv.key, k.alivePrefix()))
		ns.Alive, ns.Lease = true, kv.lease
	}
	for _, kv := range kvs(2) {
		var ni NodeInfo
		if err := decodeJSON(kv.key, kv.value, &ni); err != nil {
			s.log.Warn("node registration not read", "err", err)
			continue
		}
		ns := node(strings.TrimPrefix(kv.key, k.infoPrefix()))
		if ns.Alive && ni.Lease == ns.Lease {
			ns.Info = &ni
		}
	}
	for _, kv := range kvs(3) {
		var pl Placed
		if err := decodeJSON(kv.key, kv.value, &pl); err != nil {
			s.log.Error("placement not read; the copy is placed again", "err", err)
			continue
		}
		id, ok := copyID(k.split(kv.key, "alloc/", 3))
		if !ok || id != pl.ID() {
			s.log.Error("placement under a key that does not name it; ignored", "key", kv.key)
			continue
		}
		pl.Revision = kv.modRev
		w.Placed[id] = pl
		node(pl.Node)
	}
	for _, kv := range kvs(4) {
		parts := k.split(kv.key, "verdict/", 4)
		if parts == nil {
			continue
		}
		id, ok := copyID(parts[1:])
		var v Verdict
		if !ok || decodeJSON(kv.key, kv.value, &v) != nil || v.ID() != id {
			continue
		}
		if w.Verdicts[parts[0]] == nil {
			w.Verdicts[parts[0]] = map[CopyID]Verdict{}
		}
		w.Verdicts[parts[0]][id] = v
	}
	for _, kv := range kvs(5) {
		var l Lost
		if decodeJSON(kv.key, kv.value, &l) == nil {
			w.Lost[l.Node] = l
			node(l.Node)
		}
	}
	for _, kv := range kvs(6) {
		var ev Eval
		if decodeJSON(kv.key, kv.value, &ev) == nil {
			if js := w.Jobs[ev.Job]; js != nil {
				js.Eval = &ev
			}
		}
	}
	for _, kv := range kvs(7) {
		parts := k.split(kv.key, "jobspec/", 2)
		if parts == nil {
			continue
		}
		v, err := strconv.ParseUint(parts[1], 10, 64)
		if js := w.Jobs[parts[0]]; js != nil && err == nil {
			js.Versions = append(js.Versions, v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.Jobs)) {
		js := w.Jobs[name]
		if js.Head.Stopped {
			continue
		}
		js.Job, js.Err = s.parse(ctx, name, js.Head.Version, rev)
		if js.Err != nil && !errors.Is(js.Err, ErrInvalidJob) {
			return nil, 0, js.Err
		}
	}
	return w, rev, nil
}

// parse returns the parse of job's spec at version, read at rev once.
func (s *Scheduler) parse(ctx context.Context, job string, version uint64, rev int64) (*Job, error) {
	key := job + "/" + strconv.FormatUint(version, 10)
	s.mu.Lock()
	p := s.parsed[key]
	s.mu.Unlock()
	if p != nil {
		return p.job, p.err
	}
	resp, err := s.cli.Get(ctx, s.keys.jobSpec(job, version), clientv3.WithRev(rev))
	if err != nil {
		return nil, unavailable("read a job's spec", err)
	}
	p = &parsedSpec{}
	if len(resp.Kvs) == 0 {
		p.err = fmt.Errorf("%w: job %s version %d has no spec in etcd", ErrInvalidJob, job, version)
	} else {
		var spec JobSpec
		if err := decodeJSON(string(resp.Kvs[0].Key), resp.Kvs[0].Value, &spec); err != nil {
			p.err = fmt.Errorf("%w: %w", ErrInvalidJob, err)
		} else {
			p.job, p.err = ParseJob(spec)
		}
	}
	if p.err != nil {
		s.log.Error("a job's current version does not parse; its copies are left as they are", "job", job, "version", version, "err", p.err)
	}
	s.mu.Lock()
	if len(s.parsed) > 4096 {
		clear(s.parsed)
	}
	s.parsed[key] = p
	s.mu.Unlock()
	return p.job, p.err
}

// writeNodes writes the lost records, under lead.
func (s *Scheduler) writeNodes(ctx context.Context, lead leadership, nd NodeDecision) error {
	var ops []clientv3.Op
	for _, l := range nd.PutLost {
		b, _ := json.Marshal(l)
		ops = append(ops, clientv3.OpPut(s.keys.lost(l.Node), string(b)))
		if l.Back == 0 {
			s.log.Warn("node lost: its lease lapsed; its copies are placed elsewhere (after max_client_disconnect where the group gives one)", "lost_node", l.Node)
		} else {
			s.log.Info("lost node back under a new lease; it takes new copies once it has held it for the holdoff", "lost_node", l.Node)
		}
	}
	for _, n := range nd.DeleteLost {
		ops = append(ops, clientv3.OpDelete(s.keys.lost(n)))
	}
	resp, err := s.cli.Txn(ctx).If(lead.cmp()).Then(ops...).Commit()
	if err != nil {
		return unavailable("write the lost nodes", err)
	}
	if !resp.Succeeded {
		return ErrNotLeader
	}
	return nil
}

// writeJob writes one job's decision in transactions of CopiesPerTxn
// copies, each guarded by the leadership, the job's head and each copy's
// placement as read. The eval goes with the last (alone when nothing
// else changes and it says something new).
func (s *Scheduler) writeJob(ctx context.Context, lead leadership, js *JobState, d JobDecision) (int, error) {
	k := s.keys
	type change struct {
		cmp clientv3.Cmp
		ops []clientv3.Op
	}
	var changes []change
	for _, pl := range d.Delete {
		c := change{cmp: clientv3.Compare(clientv3.ModRevision(k.alloc(pl.ID())), "=", pl.Revision)}
		c.ops = append(c.ops, clientv3.OpDelete(k.alloc(pl.ID())), clientv3.OpDelete(k.place(pl.Node, pl.ID())), clientv3.OpDelete(k.verdict(pl.Node, pl.ID())))
		changes = append(changes, c)
	}
	for _, pl := range d.Put {
		id := pl.ID()
		old, had := d.Prev[id]
		var c change
		if had {
			c.cmp = clientv3.Compare(clientv3.ModRevision(k.alloc(id)), "=", old.Revision)
		} else {
			c.cmp = clientv3.Compare(clientv3.CreateRevision(k.alloc(id)), "=", 0)
		}
		b, _ := json.Marshal(pl)
		c.ops = append(c.ops, clientv3.OpPut(k.alloc(id), string(b)), clientv3.OpPut(k.place(pl.Node, id), string(b)))
		if had && old.Node != pl.Node {
			c.ops = append(c.ops, clientv3.OpDelete(k.place(old.Node, id)), clientv3.OpDelete(k.verdict(old.Node, id)))
		}
		changes = append(changes, c)
	}
	var evalOp []clientv3.Op
	if d.Eval != nil && !sameEval(js.Eval, d.Eval) {
		b, _ := json.Marshal(d.Eval)
		evalOp = append(evalOp, clientv3.OpPut(k.eval(d.Job), string(b)))
	}
	var specOps []clientv3.Op
	for _, v := range d.DeleteSpecs {
		specOps = append(specOps, clientv3.OpDelete(k.jobSpec(d.Job, v)))
	}
	if len(changes) == 0 && len(evalOp) == 0 && len(specOps) == 0 {
		return 0, nil
	}
	txns := 0
	for start := 0; start < len(changes) || start == 0; start += s.cfg.CopiesPerTxn {
		end := min(start+s.cfg.CopiesPerTxn, len(changes))
		cmps := []clientv3.Cmp{lead.cmp(), clientv3.Compare(clientv3.ModRevision(k.job(d.Job)), "=", d.HeadRev)}
		var ops []clientv3.Op
		for _, c := range changes[start:end] {
			cmps = append(cmps, c.cmp)
			ops = append(ops, c.ops...)
		}
		if end == len(changes) {
			ops = append(ops, evalOp...)
			if len(ops)+len(specOps) <= 120 {
				ops = append(ops, specOps...)
			}
		}
		s.cfg.Hooks.crash(CrashSchedulerBeforeTxn)
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(lead.key)).Commit()
		s.cfg.Hooks.crash(CrashSchedulerAfterTxn)
		txns++
		if err != nil {
			return txns, unavailable("write a job's placements", err)
		}
		if !resp.Succeeded {
			if len(resp.Responses[0].GetResponseRange().GetKvs()) == 0 {
				return txns, ErrNotLeader
			}
			s.log.Debug("a job's placements changed under the pass; reading again", "job", d.Job)
			return txns, ErrJobChanged
		}
		if end >= len(changes) {
			break
		}
	}
	if len(d.Put)+len(d.Delete) > 0 {
		s.log.Info("job placed", "job", d.Job, "version", js.Head.Version, "placed", len(d.Put), "removed", len(d.Delete),
			"unplaced", len(d.Eval.Unplaced))
	}
	return txns, nil
}

// mvccKV is what the scheduler reads of a key.
type mvccKV struct {
	key    string
	value  []byte
	modRev int64
	lease  int64
}

func toKVs(kvs []*mvccpb.KeyValue) []*mvccKV {
	out := make([]*mvccKV, len(kvs))
	for i, kv := range kvs {
		out[i] = &mvccKV{key: string(kv.Key), value: kv.Value, modRev: kv.ModRevision, lease: kv.Lease}
	}
	return out
}

// sameEval reports whether two evals say the same (their times aside).
func sameEval(a, b *Eval) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.At, y.At = 0, 0
	return reflect.DeepEqual(x, y)
}
