package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RunResult is what Fleet.Run wrote.
type RunResult struct {
	Job     *Job
	Version uint64
	// Changed is false when the job already ran this very file with these
	// inputs: nothing was written.
	Changed bool
	// Revision is the etcd revision of the write (or of the head read,
	// unchanged).
	Revision int64
}

// Run writes a job for the fleet to place (`tether cluster run`): the
// spec is parsed first as the scheduler will parse it (ParseJob) and
// refused before anything is written; then, in one transaction guarded by
// the job's head as read, the spec as a new version and the head naming
// it. A run of the same text and inputs as the running version writes
// nothing; a run of a stopped job starts it again. It returns
// ErrJobChanged when another run or stop of the job came in between.
func (f *Fleet) Run(ctx context.Context, spec JobSpec, now time.Time) (RunResult, error) {
	job, err := ParseJob(spec)
	if err != nil {
		return RunResult{}, err
	}
	spec.Job = job.Name
	key := f.keys.job(job.Name)
	resp, err := f.cli.Get(ctx, key)
	if err != nil {
		return RunResult{}, unavailable("read the job", err)
	}
	var head JobHead
	var modRev int64
	if len(resp.Kvs) == 1 {
		if err := decodeJSON(key, resp.Kvs[0].Value, &head); err != nil {
			return RunResult{}, err
		}
		modRev = resp.Kvs[0].ModRevision
	}
	digest := spec.digest()
	if modRev != 0 && !head.Stopped && head.Digest == digest {
		return RunResult{Job: job, Version: head.Version, Revision: resp.Header.Revision}, nil
	}
	spec.Version = head.Version + 1
	spec.Submitted = now.UnixNano()
	next := JobHead{Job: job.Name, Version: spec.Version, Digest: digest, Submitted: spec.Submitted}
	hb, _ := json.Marshal(next)
	sb, _ := json.Marshal(spec)
	if len(sb) > MaxSpecBytes*2 {
		return RunResult{}, fmt.Errorf("%w: %s: the file and its inputs are %d bytes (at most %d)", ErrInvalidJob, spec.File, len(sb), 2*MaxSpecBytes)
	}
	guard := clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
	tr, err := f.cli.Txn(ctx).If(guard).
		Then(clientv3.OpPut(key, string(hb)), clientv3.OpPut(f.keys.jobSpec(job.Name, spec.Version), string(sb))).
		Commit()
	if err != nil {
		return RunResult{}, unavailable("write the job", err)
	}
	if !tr.Succeeded {
		return RunResult{}, fmt.Errorf("%w: job %q was run or stopped by another command meanwhile: run it again", ErrJobChanged, job.Name)
	}
	return RunResult{Job: job, Version: spec.Version, Changed: true, Revision: tr.Header.Revision}, nil
}

// StopJob marks the job stopped (`tether cluster stop NAME`): the
// scheduler then removes its placements, and each node stops its copies.
// Stopping a stopped job does nothing.
func (f *Fleet) StopJob(ctx context.Context, name string) error {
	if err := ValidateJobName("job", name); err != nil {
		return err
	}
	key := f.keys.job(name)
	resp, err := f.cli.Get(ctx, key)
	if err != nil {
		return unavailable("read the job", err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("%w %q: no job of this name was run in the fleet ('tether cluster status' lists the tasks; a task started with `cluster start` is stopped with --node)", ErrUnknownJob, name)
	}
	var head JobHead
	if err := decodeJSON(key, resp.Kvs[0].Value, &head); err != nil {
		return err
	}
	if head.Stopped {
		return nil
	}
	head.Stopped = true
	hb, _ := json.Marshal(head)
	tr, err := f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(hb))).Commit()
	if err != nil {
		return unavailable("stop the job", err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("%w: job %q was run or stopped by another command meanwhile: stop it again", ErrJobChanged, name)
	}
	return nil
}

// JobRow is one row of `tether cluster status JOB`: one task of one copy
// (or one copy, before its node names its tasks), where it is placed and
// what its node last said.
type JobRow struct {
	Job string `json:"job"`
	// Copy is GROUP[INDEX].
	Copy string `json:"copy"`
	Node string `json:"node,omitempty"`
	Task string `json:"task,omitempty"`
	// State is the task's (or the copy's) state: the node's verdict
	// (starting, running, ready, complete, failed, refused, stopped),
	// placed (no word from the node yet), unplaced, waiting, stopping (the
	// job stopped, its copy not yet removed), or unknown (node down) for a
	// copy that was not stopped before its node went down.
	State string `json:"state"`
	// Reason says why: a copy not placed, waiting, refused, failed, or
	// the reason of its placement.
	Reason string `json:"reason,omitempty"`
	// ID is the task's id on its node, once the node says it.
	ID string `json:"id,omitempty"`
	// Version is the job version the copy runs.
	Version uint64 `json:"version,omitempty"`
	// Revision is the copy's placement revision.
	Revision int64 `json:"revision,omitempty"`

	copy CopyID
}

// JobStatus is a placed job as `tether cluster status JOB` shows it.
type JobStatus struct {
	Head JobHead
	// Job is the current version parsed (nil for a stopped job or one
	// that does not parse).
	Job  *Job
	Rows []JobRow
	// Revision is the etcd revision it was read at.
	Revision int64
}

// Done reports whether every copy the current version wants runs (is
// running or ready, or complete for a batch copy) at the current version
// on a live node; for a stopped job, whether no copy is placed.
func (s *JobStatus) Done() bool {
	if s.Head.Stopped {
		return !slices.ContainsFunc(s.Rows, func(r JobRow) bool { return r.State == "stopping" })
	}
	if s.Job == nil {
		return false
	}
	for _, r := range s.Rows {
		switch VerdictState(r.State) {
		case VerdictRunning, VerdictReady, VerdictComplete:
			if r.Version == s.Head.Version {
				continue
			}
		}
		return false
	}
	return len(s.Rows) > 0
}

// Refused returns the copies of the current version whose node refused
// its placement, each with "refused by NODE: its reason", or nil.
func (s *JobStatus) Refused() []Unplaced {
	var out []Unplaced
	seen := map[CopyID]bool{}
	for _, r := range s.Rows {
		if VerdictState(r.State) == VerdictRefused && r.Version == s.Head.Version && !seen[r.copy] {
			seen[r.copy] = true
			out = append(out, Unplaced{Copy: r.copy, Reason: "refused by node " + r.Node + ": " + r.Reason})
		}
	}
	return out
}

// Unplaced returns the copies the scheduler could not place at the
// current version, or nil.
func (s *JobStatus) Unplaced() []Unplaced {
	var out []Unplaced
	seen := map[CopyID]bool{}
	for _, r := range s.Rows {
		if r.State == "unplaced" && !seen[r.copy] {
			seen[r.copy] = true
			out = append(out, Unplaced{Copy: r.copy, Reason: r.Reason})
		}
	}
	return out
}

// JobStatus reads a placed job: its head, its current spec, its
// placements, the scheduler's eval and the verdicts of the nodes its
// copies are on, at one revision.
func (f *Fleet) JobStatus(ctx context.Context, name string) (*JobStatus, error) {
	if err := ValidateJobName("job", name); err != nil {
		return nil, err
	}
	k := f.keys
	resp, err := f.cli.Txn(ctx).Then(
		clientv3.OpGet(k.job(name)),
		clientv3.OpGet(k.allocPrefix(name), clientv3.WithPrefix()),
		clientv3.OpGet(k.eval(name)),
		clientv3.OpGet(k.alivePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(k.verdictPrefix(""), clientv3.WithPrefix()),
		clientv3.OpGet(k.statusPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, unavailable("read the job", err)
	}
	rev := resp.Header.Revision
	r := func(i int) []*mvccKV { return toKVs(resp.Responses[i].GetResponseRange().GetKvs()) }
	heads := r(0)
	if len(heads) == 0 {
		return nil, fmt.Errorf("%w %q: no job of this name was run in the fleet", ErrUnknownJob, name)
	}
	st := &JobStatus{Revision: rev}
	if err := decodeJSON(heads[0].key, heads[0].value, &st.Head); err != nil {
		return nil, err
	}
	if !st.Head.Stopped {
		sr, err := f.cli.Get(ctx, k.jobSpec(name, st.Head.Version), clientv3.WithRev(rev))
		if err != nil {
			return nil, unavailable("read the job's spec", err)
		}
		if len(sr.Kvs) == 1 {
			var spec JobSpec
			if decodeJSON(string(sr.Kvs[0].Key), sr.Kvs[0].Value, &spec) == nil {
				st.Job, _ = ParseJob(spec)
			}
		}
	}
	placed := map[CopyID]Placed{}
	for _, kv := range r(1) {
		var pl Placed
		if err := decodeJSON(kv.key, kv.value, &pl); err != nil {
			return nil, err
		}
		pl.Revision = kv.modRev
		placed[pl.ID()] = pl
	}
	var ev Eval
	if evs := r(2); len(evs) == 1 {
		_ = decodeJSON(evs[0].key, evs[0].value, &ev)
	}
	alive := map[string]bool{}
	for _, kv := range r(3) {
		alive[strings.TrimPrefix(kv.key, k.alivePrefix())] = true
	}
	verdicts := map[string]Verdict{} // node/copy -> verdict
	type orphan struct {
		node string
		v    Verdict
	}
	var orphans []orphan // verdicts of this job no placement names: copies being stopped
	for _, kv := range r(4) {
		parts := k.split(kv.key, "verdict/", 4)
		if parts == nil || parts[1] != name {
			continue
		}
		var v Verdict
		if decodeJSON(kv.key, kv.value, &v) != nil {
			continue
		}
		verdicts[parts[0]+"/"+v.ID().String()] = v
		if pl, ok := placed[v.ID()]; !ok || pl.Node != parts[0] {
			orphans = append(orphans, orphan{node: parts[0], v: v})
		}
	}
	seen := map[string]time.Time{}
	for _, kv := range r(5) {
		var s nodeStatus
		if decodeJSON(kv.key, kv.value, &s) == nil && s.Seen != 0 {
			seen[s.Node] = time.Unix(0, s.Seen)
		}
	}
	waiting := map[CopyID]string{}
	for _, w := range ev.Waiting {
		waiting[w.Copy] = w.Reason
	}
	addRows := func(id CopyID, node, state, reason string, version uint64, rev int64, v *Verdict) {
		row := JobRow{Job: name, Copy: fmt.Sprintf("%s[%d]", id.Group, id.Index), Node: node, State: state, Reason: reason, Version: version, Revision: rev, copy: id}
		var tasks []string
		if st.Job != nil {
			if g := st.Job.Group(id.Group); g != nil {
				tasks = g.Tasks
			}
		}
		if v != nil && len(v.Tasks) > 0 {
			for _, t := range v.Tasks {
				x := row
				x.Task, x.ID = t.Name, t.ID
				if t.State != "" && !strings.HasPrefix(state, "unknown") {
					x.State = t.State
				}
				st.Rows = append(st.Rows, x)
			}
			return
		}
		if len(tasks) == 0 {
			st.Rows = append(st.Rows, row)
			return
		}
		for _, t := range tasks {
			x := row
			x.Task = t
			st.Rows = append(st.Rows, x)
		}
	}
	unplaced := map[CopyID]string{}
	if ev.Version == st.Head.Version {
		for _, u := range ev.Unplaced {
			unplaced[u.Copy] = u.Reason
		}
	}
	ids := sortedIDs(placed)
	if st.Job != nil {
		for _, g := range st.Job.Groups {
			for i := range g.Count {
				id := CopyID{Job: name, Group: g.Group, Index: i}
				if _, ok := placed[id]; !ok {
					ids = append(ids, id)
				}
			}
		}
		sortCopies(ids)
	}
	for _, id := range ids {
		pl, ok := placed[id]
		if !ok {
			if why, ok := unplaced[id]; ok {
				addRows(id, "", "unplaced", why, 0, 0, nil)
			} else {
				addRows(id, "", "pending", "the scheduler has not placed it yet", 0, 0, nil)
			}
			continue
		}
		var v *Verdict
		if x, ok := verdicts[pl.Node+"/"+id.String()]; ok && x.Revision == pl.Revision {
			v = &x
		}
		state, reason := "placed", pl.Reason
		if v != nil {
			state = string(v.State)
			if v.Reason != "" {
				reason = v.Reason
			}
		}
		if why, ok := waiting[id]; ok {
			reason = why
		}
		if why, ok := unplaced[id]; ok {
			reason = why
		}
		switch {
		case st.Head.Stopped:
			state, reason = "stopping", "the job is stopped; the scheduler removes the copy and its node stops it"
		case !alive[pl.Node] && !(v != nil && terminalVerdict(v.State)):
			state = "unknown (node down)"
			if t, ok := seen[pl.Node]; ok {
				state = "unknown (node down since " + t.UTC().Format(time.RFC3339) + ")"
			}
		}
		addRows(id, pl.Node, state, reason, pl.Version, pl.Revision, v)
	}
	// Copies no placement names any more that their node still reports
	// (moved or stopped, being stopped there).
	for _, o := range orphans {
		node, v := o.node, o.v
		state := string(v.State)
		if !terminalVerdict(v.State) {
			state = "stopping"
		}
		st.Rows = append(st.Rows, JobRow{Job: name, Copy: fmt.Sprintf("%s[%d]", v.Group, v.Index), Node: node, State: state,
			Reason: "no longer placed on " + node, copy: v.ID()})
	}
	return st, nil
}

// terminalVerdict reports whether a verdict is a copy's end on its node:
// nothing changes it while its node is down.
func terminalVerdict(s VerdictState) bool {
	return s == VerdictStopped || s == VerdictComplete || s == VerdictFailed || s == VerdictRefused
}

// WaitJob follows the job until status says it is done (every copy
// running at the current version, or none placed for a stopped job),
// calling each with every new status, and returns the last. It fails
// with a *NotPlacedError as soon as the scheduler says a copy of the
// current version cannot be placed, or a node refuses a copy of it
// placed there (Refused: its node and reason), and with ctx's error when
// ctx ends.
//
// Copies run once their nodes say so (verdict keys): until the nodes
// write verdicts (the node side of the placed jobs), only a stopped job
// and an unplaceable one end the wait.
func (f *Fleet) WaitJob(ctx context.Context, name string, each func(*JobStatus)) (*JobStatus, error) {
	for {
		st, err := f.JobStatus(ctx, name)
		if err != nil {
			return nil, err
		}
		if each != nil {
			each(st)
		}
		if st.Done() {
			return st, nil
		}
		if u := st.Unplaced(); len(u) > 0 && !st.Head.Stopped {
			return st, &NotPlacedError{Job: name, Copies: u}
		}
		if u := st.Refused(); len(u) > 0 && !st.Head.Stopped {
			return st, &NotPlacedError{Job: name, Copies: u}
		}
		if err := f.waitChange(ctx, st.Revision, name); err != nil {
			return st, err
		}
	}
}

// waitChange returns at the first change after rev of the job's head,
// placements or eval, of a verdict, or of a liveness key.
func (f *Fleet) waitChange(ctx context.Context, rev int64, job string) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	k := f.keys
	merged := make(chan struct{}, 1)
	for _, w := range []struct {
		key    string
		prefix bool
	}{{k.job(job), false}, {k.allocPrefix(job), true}, {k.eval(job), false}, {k.verdictPrefix(""), true}, {k.alivePrefix(), true}} {
		opts := []clientv3.OpOption{clientv3.WithRev(rev + 1)}
		if w.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		ch := f.cli.Watch(wctx, w.key, opts...)
		go func() {
			for range ch {
				select {
				case merged <- struct{}{}:
				default:
				}
			}
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
		return nil
	}
}

// Placements lists what is placed on node (place/NODE/), each with its
// placement revision, and the revision read at: what the node's agent
// converges, fetching each job's spec at the version named (JobSpec).
func (f *Fleet) Placements(ctx context.Context, node string) ([]Placed, int64, error) {
	if err := ValidateNodeName(node); err != nil {
		return nil, 0, err
	}
	resp, err := f.cli.Get(ctx, f.keys.placePrefix(node), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, unavailable("read the node's placements", err)
	}
	var out []Placed
	for _, kv := range resp.Kvs {
		var pl Placed
		if err := decodeJSON(string(kv.Key), kv.Value, &pl); err != nil {
			return nil, 0, err
		}
		pl.Revision = kv.ModRevision
		out = append(out, pl)
	}
	return out, resp.Header.Revision, nil
}

// JobSpec reads one version of a job's spec.
func (f *Fleet) JobSpec(ctx context.Context, job string, version uint64) (JobSpec, error) {
	if err := ValidateJobName("job", job); err != nil {
		return JobSpec{}, err
	}
	key := f.keys.jobSpec(job, version)
	resp, err := f.cli.Get(ctx, key)
	if err != nil {
		return JobSpec{}, unavailable("read the job's spec", err)
	}
	if len(resp.Kvs) == 0 {
		return JobSpec{}, fmt.Errorf("%w %q: no version %d", ErrUnknownJob, job, version)
	}
	var s JobSpec
	return s, decodeJSON(key, resp.Kvs[0].Value, &s)
}
