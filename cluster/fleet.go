package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// Fleet answers `tether cluster`: every read is one linearizable etcd
// read of what the nodes mirrored and registered. It never writes a
// node's mirror, and never reconciles a task: a down node's tasks are
// shown as unknown.
type Fleet struct {
	cli  *clientv3.Client
	keys Keys
}

// NewFleet returns the fleet under prefix ("" is DefaultPrefix).
func NewFleet(cli *clientv3.Client, prefix string) (*Fleet, error) {
	keys, err := NewKeys(prefix)
	if err != nil {
		return nil, err
	}
	return &Fleet{cli: cli, keys: keys}, nil
}

// Liveness is whether a node's liveness key exists (its lease is alive).
type Liveness uint8

// The liveness values.
const (
	Down Liveness = iota
	Up
)

func (l Liveness) String() string {
	if l == Up {
		return "up"
	}
	return "down"
}

// MarshalText gives "up" or "down".
func (l Liveness) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads "up" or "down".
func (l *Liveness) UnmarshalText(b []byte) error {
	switch string(b) {
	case "up":
		*l = Up
	case "down":
		*l = Down
	default:
		return fmt.Errorf("cluster: liveness %q: want up or down", b)
	}
	return nil
}

// TaskRef is a mirrored task: where it runs and what its node last said
// of it.
type TaskRef struct {
	Node  string
	ID    string
	Name  string
	State fsm.State
	// Created and Updated are the times of its first and last mirrored
	// events; Seq the last mirrored sequence number.
	Created time.Time
	Updated time.Time
	Seq     uint64
	// Restarts and Reason are the fold's.
	Restarts int
	Reason   string
}

// Live reports whether the node last said the task is not terminal.
func (t TaskRef) Live() bool { return !t.State.Terminal() }

// StatusRow is one row of `tether cluster status`: a task with its node's
// liveness, or (ID "") a node that has no task.
type StatusRow struct {
	Node     string
	Liveness Liveness
	// Since is when the node came up (up), or when it was last seen up
	// (down).
	Since time.Time
	Task  *TaskRef
}

// Known reports whether the row's task state is known: its node is up, or
// the node's last word was a terminal state, which nothing changes.
func (r StatusRow) Known() bool {
	return r.Task != nil && (r.Liveness == Up || r.Task.State.Terminal())
}

// StateText is the task's state as status prints it: the node's last
// word while the node is up (or when it was a terminal state), "unknown
// (node down since …)" for a live task of a down node (a down node's
// tasks are never reconciled by anyone else: pids and boot ids mean
// nothing on another machine, and a partitioned node still runs them).
func (r StatusRow) StateText() string {
	switch {
	case r.Task == nil:
		return ""
	case r.Known():
		return r.Task.State.String()
	case r.Since.IsZero():
		return "unknown (node down)"
	}
	return "unknown (node down since " + r.Since.UTC().Format(time.RFC3339) + ")"
}

// statusJSON is a status row as `status --json` prints it.
type statusJSON struct {
	Node      string    `json:"node"`
	Liveness  Liveness  `json:"liveness"`
	Since     time.Time `json:"since,omitzero"`
	ID        string    `json:"id,omitempty"`
	Name      string    `json:"name,omitempty"`
	State     string    `json:"state,omitempty"`
	LastState string    `json:"last_state,omitempty"`
	Created   time.Time `json:"created_at,omitzero"`
	Updated   time.Time `json:"updated_at,omitzero"`
	Restarts  int       `json:"restarts,omitempty"`
	Reason    string    `json:"reason,omitempty"`
}

// MarshalJSON gives the row's `status --json` object: node, liveness,
// since, and for a task id, name and state ("unknown" for a live task
// while its node is down, with last_state the node's last word).
func (r StatusRow) MarshalJSON() ([]byte, error) {
	j := statusJSON{Node: r.Node, Liveness: r.Liveness, Since: r.Since.UTC()}
	if r.Since.IsZero() {
		j.Since = time.Time{}
	}
	if t := r.Task; t != nil {
		j.ID, j.Name, j.State = t.ID, t.Name, t.State.String()
		j.Created, j.Updated, j.Restarts, j.Reason = t.Created.UTC(), t.Updated.UTC(), t.Restarts, t.Reason
		if !r.Known() {
			j.State, j.LastState = "unknown", t.State.String()
		}
	}
	return json.Marshal(&j)
}

// NodeRow is one row of `tether cluster nodes`.
type NodeRow struct {
	Node     string    `json:"node"`
	Liveness Liveness  `json:"liveness"`
	Since    time.Time `json:"since,omitzero"`
	// Seen is when the node last wrote its status.
	Seen  time.Time `json:"seen,omitzero"`
	Host  string    `json:"host,omitempty"`
	PID   int       `json:"pid,omitempty"`
	Tasks int       `json:"tasks"`
	// LagEvents and LagSeconds are the node's mirror lag as of Seen.
	LagEvents  uint64  `json:"mirror_lag_events"`
	LagSeconds float64 `json:"mirror_lag_seconds"`
}

// view is one read of the fleet: every node's liveness and status and
// every mirrored head, at one revision.
type view struct {
	rev    int64
	alive  map[string]Holder
	status map[string]nodeStatus
	tasks  []TaskRef
}

func (f *Fleet) read(ctx context.Context, node string) (*view, error) {
	if node != "" {
		if err := ValidateNodeName(node); err != nil {
			return nil, err
		}
	}
	resp, err := f.cli.Txn(ctx).Then(
		clientv3.OpGet(f.keys.alivePrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(f.keys.statusPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(f.keys.headPrefix(node), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, unavailable("read the fleet", err)
	}
	v := &view{rev: resp.Header.Revision, alive: map[string]Holder{}, status: map[string]nodeStatus{}}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		name := strings.TrimPrefix(string(kv.Key), f.keys.alivePrefix())
		var h Holder
		_ = json.Unmarshal(kv.Value, &h) // the key's existence is the liveness
		h.Lease = kv.Lease
		v.alive[name] = h
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		name := strings.TrimPrefix(string(kv.Key), f.keys.statusPrefix())
		var s nodeStatus
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, &CorruptError{Key: string(kv.Key), Err: err}
		}
		v.status[name] = s
	}
	for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
		parts := f.keys.split(string(kv.Key), "head/", 2)
		if parts == nil {
			continue
		}
		h, err := decodeHead(string(kv.Key), kv.Value)
		if err != nil {
			return nil, err
		}
		st, _ := fsm.ParseState(h.State)
		v.tasks = append(v.tasks, TaskRef{Node: parts[0], ID: parts[1], Name: h.Name, State: st,
			Created: time.Unix(0, h.Created), Updated: time.Unix(0, h.Updated), Seq: h.Seq, Restarts: h.Restarts, Reason: h.Reason})
	}
	return v, nil
}

// liveness returns a node's liveness and its since.
func (v *view) liveness(node string) (Liveness, time.Time) {
	st, known := v.status[node]
	if _, up := v.alive[node]; up {
		if known && st.UpSince != 0 {
			return Up, time.Unix(0, st.UpSince)
		}
		return Up, time.Unix(0, v.alive[node].Started)
	}
	if known && st.Seen != 0 {
		return Down, time.Unix(0, st.Seen)
	}
	return Down, time.Time{}
}

// nodes lists every node the view knows of, sorted.
func (v *view) nodes() []string {
	set := map[string]bool{}
	for n := range v.alive {
		set[n] = true
	}
	for n := range v.status {
		set[n] = true
	}
	for _, t := range v.tasks {
		set[t.Node] = true
	}
	return sortedKeys(set)
}

// Status lists every mirrored task with its node's liveness, and every
// node without a task, sorted by node, then name (numbers in names in
// numeric order), then id.
func (f *Fleet) Status(ctx context.Context) ([]StatusRow, error) {
	v, err := f.read(ctx, "")
	if err != nil {
		return nil, err
	}
	var rows []StatusRow
	has := map[string]bool{}
	for i := range v.tasks {
		t := &v.tasks[i]
		l, since := v.liveness(t.Node)
		rows = append(rows, StatusRow{Node: t.Node, Liveness: l, Since: since, Task: t})
		has[t.Node] = true
	}
	for _, n := range v.nodes() {
		if !has[n] {
			l, since := v.liveness(n)
			rows = append(rows, StatusRow{Node: n, Liveness: l, Since: since})
		}
	}
	slices.SortFunc(rows, func(a, b StatusRow) int {
		if c := clikit.NaturalCompare(a.Node, b.Node); c != 0 {
			return c
		}
		var an, bn, ai, bi string
		if a.Task != nil {
			an, ai = a.Task.Name, a.Task.ID
		}
		if b.Task != nil {
			bn, bi = b.Task.Name, b.Task.ID
		}
		return cmp.Or(clikit.NaturalCompare(an, bn), strings.Compare(ai, bi))
	})
	return rows, nil
}

// LiveRows returns the rows of rows (as Status sorted them) whose task
// is live by its node's last word, and one row (no task) for each node
// left without one, in place: `tether cluster status` without --all, as
// `tether status` lists live tasks.
func LiveRows(rows []StatusRow) []StatusRow {
	out := make([]StatusRow, 0, len(rows))
	for i, r := range rows {
		if r.Task == nil || r.Task.Live() {
			out = append(out, r)
			continue
		}
		last := i+1 == len(rows) || rows[i+1].Node != r.Node
		if last && (len(out) == 0 || out[len(out)-1].Node != r.Node) {
			out = append(out, StatusRow{Node: r.Node, Liveness: r.Liveness, Since: r.Since})
		}
	}
	return out
}

// Nodes lists every node with its liveness, status and mirror lag.
func (f *Fleet) Nodes(ctx context.Context) ([]NodeRow, error) {
	v, err := f.read(ctx, "")
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, t := range v.tasks {
		count[t.Node]++
	}
	var rows []NodeRow
	for _, n := range v.nodes() {
		l, since := v.liveness(n)
		r := NodeRow{Node: n, Liveness: l, Since: since, Tasks: count[n]}
		if st, ok := v.status[n]; ok {
			r.Host, r.PID, r.LagEvents, r.LagSeconds = st.Host, st.PID, st.LagEvents, st.LagSeconds
			if st.Seen != 0 {
				r.Seen = time.Unix(0, st.Seen)
			}
		}
		if h, ok := v.alive[n]; ok {
			r.Host, r.PID = h.Host, h.PID
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b NodeRow) int { return clikit.NaturalCompare(a.Node, b.Node) })
	return rows, nil
}

// Resolve finds the task ref names on node ("" for any node). ref is a
// task id, or a name resolved on each node by the CLI's rule: its one
// live task, or with none live the most recent; several live tasks of
// that name on one node, or the name on several nodes, are ambiguous
// (*AmbiguousError lists them; pass a node or an id).
func (f *Fleet) Resolve(ctx context.Context, ref, node string) (TaskRef, error) {
	v, err := f.read(ctx, node)
	if err != nil {
		return TaskRef{}, err
	}
	return resolve(v.tasks, ref, node)
}

func resolve(tasks []TaskRef, ref, node string) (TaskRef, error) {
	var byID []TaskRef
	byName := map[string][]TaskRef{}
	for _, t := range tasks {
		if node != "" && t.Node != node {
			continue
		}
		if t.ID == ref {
			byID = append(byID, t)
		}
		if t.Name == ref {
			byName[t.Node] = append(byName[t.Node], t)
		}
	}
	switch {
	case len(byID) == 1:
		return byID[0], nil
	case len(byID) > 1:
		return TaskRef{}, &AmbiguousError{Ref: ref, Candidates: byID}
	}
	// On each node, the name rules of one node (driver.PickNamed): its one
	// live task, else its most recent one.
	var picks []TaskRef
	for _, n := range sortedKeys(byName) {
		cands := byName[n]
		ts := make([]fsm.Task, len(cands))
		for i, c := range cands {
			ts[i] = fsm.Task{ID: c.ID, State: c.State, CreatedAt: c.Created.UnixNano(), Spec: &fsm.Spec{Name: c.Name}}
		}
		picked, err := driver.PickNamed(ts, ref)
		var ne *driver.NameError
		if errors.As(err, &ne) && len(ne.Tasks) > 0 {
			var live []TaskRef
			for _, t := range ne.Tasks {
				live = append(live, cands[slices.IndexFunc(cands, func(c TaskRef) bool { return c.ID == t.ID })])
			}
			return TaskRef{}, &AmbiguousError{Ref: ref, Candidates: live}
		}
		if err != nil {
			return TaskRef{}, err
		}
		picks = append(picks, cands[slices.IndexFunc(cands, func(c TaskRef) bool { return c.ID == picked.ID })])
	}
	switch len(picks) {
	case 0:
		where := "on any node"
		if node != "" {
			where = "on node " + node
		}
		return TaskRef{}, fmt.Errorf("%w %q %s: no mirrored task has this id or name", ErrUnknownTask, ref, where)
	case 1:
		return picks[0], nil
	}
	return TaskRef{}, &AmbiguousError{Ref: ref, Candidates: picks}
}

// Events returns a mirrored task's events, as its node recorded them
// (environment values redacted), and the revision they were read at.
func (f *Fleet) Events(ctx context.Context, node, task string) ([]fsm.Event, int64, error) {
	if err := ValidateNodeName(node); err != nil {
		return nil, 0, err
	}
	prefix := f.keys.eventPrefix(node, task)
	resp, err := f.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, unavailable("read the task's events", err)
	}
	evs := make([]fsm.Event, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := decodeEvent(string(kv.Key), kv.Value)
		if err != nil {
			return nil, 0, err
		}
		if e.Seq != uint64(len(evs))+1 {
			return nil, 0, &CorruptError{Key: string(kv.Key), Err: fmt.Errorf("seq %d where %d was due", e.Seq, len(evs)+1)}
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		return nil, 0, fmt.Errorf("%w %q on node %s: nothing mirrored", ErrUnknownTask, task, node)
	}
	return evs, resp.Header.Revision, nil
}

// Follow yields a mirrored task's events after seq after, in order, as
// the mirror writes them (an etcd watch), until the task's state is
// terminal, the task is pruned, or ctx ends (then it yields ctx's error).
// A watch that fails (the revision compacted, a lost leader) is resumed
// from the last event yielded, so no event is yielded twice or skipped.
func (f *Fleet) Follow(ctx context.Context, node, task string, after uint64) iter.Seq2[fsm.Event, error] {
	return func(yield func(fsm.Event, error) bool) {
		if err := ValidateNodeName(node); err != nil {
			yield(fsm.Event{}, err)
			return
		}
		st := fsm.StateNone
		next := uint64(1) // the next seq to fold
		emit := func(e fsm.Event) (more, ok bool) {
			if e.Seq != next {
				return true, false
			}
			s, err := fsm.Next(st, e)
			if err != nil {
				yield(fsm.Event{}, &CorruptError{Key: f.keys.event(node, task, e.Seq), Err: err})
				return false, true
			}
			st, next = s, next+1
			if e.Seq > after && !yield(e, nil) {
				return false, true
			}
			return !st.Terminal(), true
		}
		prefix := f.keys.eventPrefix(node, task)
		for {
			resp, err := f.cli.Get(ctx, f.keys.event(node, task, next), clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)))
			if err != nil {
				yield(fsm.Event{}, unavailable("read the task's events", err))
				return
			}
			for _, kv := range resp.Kvs {
				e, err := decodeEvent(string(kv.Key), kv.Value)
				if err != nil {
					yield(fsm.Event{}, err)
					return
				}
				more, ok := emit(e)
				if !ok {
					yield(fsm.Event{}, &CorruptError{Key: string(kv.Key), Err: fmt.Errorf("seq %d where %d was due", e.Seq, next)})
					return
				}
				if !more {
					return
				}
			}
			if next == 1 {
				yield(fsm.Event{}, fmt.Errorf("%w %q on node %s: nothing mirrored", ErrUnknownTask, task, node))
				return
			}
			relist, done := f.follow(ctx, prefix, resp.Header.Revision, emit, yield)
			if done || !relist {
				return
			}
		}
	}
}

// follow watches prefix from rev+1 and emits events. It returns relist
// when the watch must be replaced by a new read (compaction, a gap, a
// lost leader), done when the stream ended.
func (f *Fleet) follow(ctx context.Context, prefix string, rev int64, emit func(fsm.Event) (bool, bool), yield func(fsm.Event, error) bool) (relist, done bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range f.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrNoLeader) {
				return true, false
			}
			yield(fsm.Event{}, unavailable("watch the task's events", err))
			return false, true
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return false, true // pruned: the node no longer has the task
			}
			e, err := decodeEvent(string(ev.Kv.Key), ev.Kv.Value)
			if err != nil {
				yield(fsm.Event{}, err)
				return false, true
			}
			more, ok := emit(e)
			if !ok {
				return true, false
			}
			if !more {
				return false, true
			}
		}
	}
	if err := ctx.Err(); err != nil {
		yield(fsm.Event{}, err)
		return false, true
	}
	return true, false
}

// Start tells node to run the task file spec under name: the node's
// agent converges it as it converges a file of its --config-dir. A name
// already desired on the node is ErrDesiredExists unless replace (then
// the node replaces its task: stop, then start). It returns the revision
// of the write.
func (f *Fleet) Start(ctx context.Context, node, name string, spec []byte, replace bool) (int64, error) {
	if err := ValidateNodeName(node); err != nil {
		return 0, err
	}
	if err := ValidateSpec(name, spec); err != nil {
		return 0, err
	}
	v, err := f.read(ctx, node)
	if err != nil {
		return 0, err
	}
	if _, up := v.alive[node]; !up {
		if _, known := v.status[node]; !known {
			return 0, fmt.Errorf("%w %q: no agent has ever registered it; start `tether agent --node %s --cluster …` there first (or check the name with `tether cluster nodes`)",
				ErrUnknownNode, node, node)
		}
	}
	key := f.keys.desired(node, name)
	if replace {
		resp, err := f.cli.Put(ctx, key, string(spec))
		if err != nil {
			return 0, unavailable("write the desired task", err)
		}
		return resp.Header.Revision, nil
	}
	resp, err := f.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(spec))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, unavailable("write the desired task", err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 1 && string(kvs[0].Value) == string(spec) {
			return kvs[0].ModRevision, nil // the same file again: nothing to do
		}
		return 0, fmt.Errorf("%w: %q on node %s has another task file: pass --replace to replace it (stop, then start)", ErrDesiredExists, name, node)
	}
	return resp.Header.Revision, nil
}

// Stop tells node to stop running ref: the desired task of that name is
// deleted, and the node's agent stops it. ref is a desired name, or a
// task id or name resolved on the node (whose name is then the desired
// one). A task the node was not told to run through etcd is
// ErrNotDesired: etcd is not a remote control for the node's own tasks.
func (f *Fleet) Stop(ctx context.Context, node, ref string) error {
	if err := ValidateNodeName(node); err != nil {
		return err
	}
	name := ref
	if ValidateName(ref) != nil {
		return fmt.Errorf("%w %q", ErrNotDesired, ref)
	}
	resp, err := f.cli.Delete(ctx, f.keys.desired(node, name))
	if err != nil {
		return unavailable("delete the desired task", err)
	}
	if resp.Deleted > 0 {
		return nil
	}
	t, rerr := f.Resolve(ctx, ref, node)
	if rerr == nil && t.Name != "" && t.Name != ref && ValidateName(t.Name) == nil {
		resp, err := f.cli.Delete(ctx, f.keys.desired(node, t.Name))
		if err != nil {
			return unavailable("delete the desired task", err)
		}
		if resp.Deleted > 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %q on node %s: only tasks started with `tether cluster start` can be stopped through the cluster; stop it on the node with `tether stop`",
		ErrNotDesired, ref, node)
}

// Desired lists the desired tasks of node, by name.
func (f *Fleet) Desired(ctx context.Context, node string) ([]Desired, error) {
	if err := ValidateNodeName(node); err != nil {
		return nil, err
	}
	prefix := f.keys.desiredPrefix(node)
	resp, err := f.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("list the desired state", err)
	}
	out := make([]Desired, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, Desired{Name: strings.TrimPrefix(string(kv.Key), prefix), Spec: kv.Value, ModRevision: kv.ModRevision})
	}
	return out, nil
}
