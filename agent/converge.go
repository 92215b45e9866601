package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// retryDelay is how long a desired entry waits before the agent tries
// again after an effect or a commit failed for a reason its state does
// not record (the store refused a write, a port was taken, the driver is
// closing).
const retryDelay = time.Second

// maxFollow bounds the copies a round follows past the one its record
// names (a record behind its allocation's driver: the agent crashed
// between the driver's record of a copy and its own).
const maxFollow = 64

// converger is the agent's convergence loop: one goroutine (run) owns the
// desired state's decisions, in the manner of a driver owner: every input
// (a change of the config dir, a request, an effect's outcome, a drive's
// or a watched task's end, a timer) comes in on a channel, and each is
// followed by a round: read, Decide, commit, act.
type converger struct {
	a     *Agent
	log   hclog.Logger
	hooks Hooks

	reqs     chan convRequest
	outcomes chan outcome
	ended    chan string
	rescans  chan struct{}
	done     chan struct{} // closed when run returns

	// Owned by run.
	busy     map[string]bool
	retry    map[string]int64 // name -> not before (Unix ns), after a failure
	watching map[string]context.CancelFunc
	files    []Declared
	problems []FileProblem
	dirErr   error
	scanned  bool
	jobs     map[string]*job.Job // the jobs read, by digest
	effects  sync.WaitGroup

	// Published.
	mu      sync.Mutex
	status  Status
	changed chan struct{} // closed and replaced at each change of status
}

func newConverger(a *Agent) *converger {
	return &converger{a: a, log: a.log.Named("converge"), hooks: a.cfg.Hooks,
		reqs: make(chan convRequest), outcomes: make(chan outcome), ended: make(chan string, 1),
		rescans: make(chan struct{}, 1), done: make(chan struct{}),
		busy: map[string]bool{}, retry: map[string]int64{}, watching: map[string]context.CancelFunc{},
		jobs: map[string]*job.Job{}, changed: make(chan struct{})}
}

// convRequest is a request of the desired state (a client's enable,
// disable, start again; a drive's new copy), served by run between rounds.
type convRequest struct {
	kind commitKind
	name string
	// reason is a start's, said in the record (default "started again
	// on request").
	reason string
	enable EnableRequest
	copy   Copy // commitCopy
	reply  chan convReply
}

type convReply struct {
	entry Entry
	err   error
}

// outcome is an effect's result.
type outcome struct {
	e   Effect
	err error
}

func (c *converger) rescan() {
	select {
	case c.rescans <- struct{}{}:
	default:
	}
}

func (c *converger) request(ctx context.Context, r convRequest) (Entry, error) {
	r.reply = make(chan convReply, 1)
	select {
	case c.reqs <- r:
	case <-c.done:
		return Entry{}, ErrClosed
	case <-ctx.Done():
		return Entry{}, context.Cause(ctx)
	}
	select {
	case rep := <-r.reply:
		return rep.entry, rep.err
	case <-ctx.Done():
		return Entry{}, context.Cause(ctx)
	}
}

// copyHook is the hook of a drive of the group alloc: each new copy its
// driver is about to record is written ahead in the record of the desired
// entry the allocation belongs to (if any) first.
func (c *converger) copyHook(alloc string) func(Copy) error {
	return func(cp Copy) error {
		cp.Alloc = alloc
		_, err := c.request(context.Background(), convRequest{kind: commitCopy, copy: cp})
		return err
	}
}

func (c *converger) snapshot() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

func (c *converger) watch(ctx context.Context, fn func(Status) bool) error {
	for {
		c.mu.Lock()
		st, ch := c.status, c.changed
		c.mu.Unlock()
		if fn(st) {
			return nil
		}
		select {
		case <-ch:
		case <-c.done:
			return ErrClosed
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// driveChanged tells the loop that the drive of the group alloc took a
// step or returned: a round reads it again.
func (c *converger) driveChanged(alloc string) {
	select {
	case c.ended <- "alloc:" + alloc:
	default: // a round is due already
	}
}

// run converges until ctx ends (once: until nothing is due).
func (c *converger) run(ctx context.Context, once bool, events <-chan fsnotify.Event, watchErrs <-chan error) error {
	defer close(c.done)
	life, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		for _, cancel := range c.watching {
			cancel()
		}
		c.effects.Wait()
	}()
	var timer *time.Timer
	var timerC <-chan time.Time
	dirty := true
	for {
		if dirty {
			// A change of the config dir that came meanwhile is read before
			// deciding (a commit's round comes straight back here).
			for drained := false; !drained; {
				select {
				case <-c.rescans:
					c.scanned = false
				case _, ok := <-events:
					if !ok {
						events = nil
					}
					c.scanned = false
				case o := <-c.outcomes:
					// Effects that ended meanwhile are one round, not one
					// each (50 services starting at once: 50 rounds, each
					// reading every allocation's tasks, otherwise).
					c.outcome(o)
				case id := <-c.ended:
					delete(c.watching, id)
				default:
					drained = true
				}
			}
			next, quiet := c.round(life, once)
			if next == 0 { // a commit: decide again from it at once
				continue
			}
			dirty = false
			if once && quiet && len(c.busy) == 0 && c.a.drives.up() {
				return nil // the groups it drives are up (or due later): left to the next agent
			}
			if timer != nil {
				timer.Stop()
				timer, timerC = nil, nil
			}
			if next > 0 {
				timer = time.NewTimer(time.Duration(max(next-c.a.cfg.Now().UnixNano(), 0)))
				timerC = timer.C
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.rescans:
			c.scanned = false
			dirty = true
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			c.log.Debug("config dir changed", "file", ev.Name, "op", ev.Op.String())
			c.scanned = false
			dirty = true
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			c.log.Warn("watching the config dir", "err", err)
			c.scanned = false
			dirty = true
		case r := <-c.reqs:
			e, err := c.handle(life, r)
			r.reply <- convReply{entry: e, err: err}
			dirty = true
		case o := <-c.outcomes:
			c.outcome(o)
			dirty = true
		case id := <-c.ended:
			delete(c.watching, id)
			dirty = true
		case <-timerC:
			timer, timerC = nil, nil
			dirty = true
		}
	}
}

// outcome takes an effect's end: its entry is no longer busy, and a
// failure is tried again after retryDelay.
func (c *converger) outcome(o outcome) {
	delete(c.busy, o.e.Name)
	if o.err != nil && !errors.Is(o.err, context.Canceled) {
		c.log.Error("effect failed; trying again later", "name", o.e.Name, "effect", o.e.Kind.String(), "err", o.err)
		c.retry[o.e.Name] = c.a.cfg.Now().Add(retryDelay).UnixNano()
	}
}

// round reads the desired state, decides, commits and starts the effects.
// It returns when to decide again: 0 at once (a commit was made), a time
// (Unix ns) when something is due, -1 when only an input can change
// anything; and whether nothing at all is left to do now (for Once).
func (c *converger) round(ctx context.Context, once bool) (next int64, quiet bool) {
	now := c.a.cfg.Now().UnixNano()
	v, err := c.view(ctx, now)
	if err != nil {
		c.log.Error("reading the desired state; trying again later", "err", err)
		c.publishError(err)
		return now + int64(retryDelay), false
	}
	plan := Decide(v)
	c.syncWatchers(ctx, plan.Watch)
	if len(plan.Changes) > 0 {
		if err := c.commit(ctx, v, plan.Changes); err != nil {
			c.log.Error("writing the desired state; trying again later", "err", err)
			c.publish(v, plan)
			return now + int64(retryDelay), false
		}
		return 0, false
	}
	records := map[string]store.Desired{}
	for _, r := range v.Records {
		records[r.Name] = r
	}
	for _, e := range plan.Effects {
		c.busy[e.Name] = true
		c.effects.Add(1)
		go c.perform(ctx, e, records[e.Name], v)
	}
	c.publish(v, plan)
	next = -1
	for _, t := range c.retry {
		if t > now && (next < 0 || t < next) {
			next = t
		}
	}
	quiet = len(plan.Effects) == 0
	return next, quiet
}

// view reads what Decide needs.
func (c *converger) view(ctx context.Context, now int64) (View, error) {
	v := View{Now: now, BootID: c.a.cfg.BootID, ConfigDir: c.a.cfg.ConfigDir, Busy: map[string]bool{},
		Enabled: map[string]Declared{}, Copies: map[string]CopyView{}, Legacy: map[string]TaskView{}}
	used := map[string]bool{} // the digests of the jobs still declared: the cache keeps those
	if c.a.cfg.ConfigDir != "" {
		if !c.scanned {
			c.files, c.problems, c.dirErr = scanConfigDir(c.a.cfg.ConfigDir, c.read)
			c.scanned = true
			if c.dirErr != nil {
				c.log.Error("the config dir is refused: its entries are left as they are", "config_dir", c.a.cfg.ConfigDir, "err", c.dirErr)
			}
			for _, p := range c.problems {
				c.log.Warn("file refused", "file", p.File, "err", p.Err)
			}
			for _, f := range c.files {
				if f.Err != "" {
					c.log.Warn("file refused", "file", f.File, "err", f.Err)
				}
			}
		}
		v.Files, v.Problems = c.files, c.problems
		if c.dirErr != nil {
			v.DirErr = c.dirErr.Error()
		}
	}
	if f := c.a.cfg.Feed; f != nil {
		decl, probs, unknown := f.get()
		v.FeedDir, v.FeedErr = f.Dir(), unknown
		for _, d := range decl {
			v.Files = append(slices.Clip(v.Files), c.readAs(true, d.File, d.Name, d.Text, d.Inputs))
		}
		v.Problems = append(slices.Clip(v.Problems), probs...)
	}
	for _, f := range v.Files {
		used[f.Digest] = true
	}
	recs, err := c.a.st.Desired(ctx)
	if err != nil {
		return v, err
	}
	v.Records = recs
	for _, r := range recs {
		if r.Source == store.SourceEnabled {
			d := c.enabled(r)
			v.Enabled[r.Name] = d
			used[d.Digest] = true
		}
		if r.Task != "" {
			tv, err := c.taskView(ctx, r.Task)
			if err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, store.ErrClosed) {
					return v, err
				}
				tv = TaskView{Err: err.Error()} // one damaged log leaves its entry alone, not the others
			}
			v.Legacy[r.Task] = tv
		}
		for _, a := range r.Allocs {
			cv, err := c.copyView(ctx, a)
			if errors.Is(err, context.Canceled) || errors.Is(err, store.ErrClosed) {
				return v, err
			}
			if err != nil {
				cv.Err = err.Error()
			}
			v.Copies[a.ID] = cv
		}
	}
	for d := range c.jobs {
		if !used[d] {
			delete(c.jobs, d)
		}
	}
	for name := range c.busy {
		v.Busy[name] = true
	}
	for name, t := range c.retry {
		if t > now {
			v.Busy[name] = true
		} else {
			delete(c.retry, name)
		}
	}
	return v, nil
}

// node is the job path's node of the agent: its state directory, its
// allow lists, its driver's check of a spec.
func (c *converger) node(ctx context.Context) job.Node {
	n := c.a.Local.node(ctx)
	n.CheckSpec = c.a.d.CheckSpec
	return n
}

// read reads a file's text (with inputs) through the job path into a
// declaration named name ("": the job's own name), its job kept by digest.
func (c *converger) read(file, name string, text []byte, in job.Inputs) Declared {
	return c.readAs(false, file, name, text, in)
}

// readAs is read; remote reads a feed's entry (a spec from etcd) with the
// node's policy for remote specs (job.Policy.ForRemote), which a job read
// from the same text by another source does not stand in for: its tasks
// are checked against it (job.Policy.CheckJob) whoever read it first.
func (c *converger) readAs(remote bool, file, name string, text []byte, in job.Inputs) Declared {
	src := job.Source{File: file, Text: text}
	d := Declared{Name: name, File: file, Text: text, Inputs: in, Digest: job.Digest(src, in), Source: store.SourceDir}
	policy := c.a.Local.Policy // the node's (c.node's), without reading the host for a cached job
	if remote {
		policy = policy.ForRemote()
	}
	j, ok := c.jobs[d.Digest]
	if ok && remote {
		if err := policy.CheckJob(j); err != nil {
			d.Err = job.Describe(err)
			return d
		}
	}
	if !ok {
		node := c.node(context.Background())
		node.Policy = policy
		var err error
		if j, err = job.Read(src, in, node); err != nil {
			d.Err = job.Describe(err)
			return d
		}
		c.jobs[d.Digest] = j
	}
	d.Name = cmp.Or(name, j.Name)
	d.Shapes = j.Shapes()
	return d
}

// enabled is the declaration of a registration: its text and inputs read
// (a version-1 record: its spec, as a file of that one task).
func (c *converger) enabled(r store.Desired) Declared {
	if r.Text == nil && r.Spec != nil {
		j, src := job.FromSpec(r.File, r.Name, *r.Spec)
		d := Declared{Name: r.Name, Source: store.SourceEnabled, File: r.File, Digest: job.Digest(src, job.Inputs{})}
		c.jobs[d.Digest] = j
		d.Shapes = j.Shapes()
		return d
	}
	if r.Text == nil {
		return Declared{Name: r.Name, Source: store.SourceEnabled, File: r.File, Err: "its registration holds no file: enable it again"}
	}
	d := c.read(r.File, r.Name, r.Text, jobInputs(r.Inputs))
	d.Source = store.SourceEnabled
	return d
}

// jobOf is the job of an entry's record's declaration (as the last round
// read it).
func (c *converger) jobOf(r store.Desired, v View) (*job.Job, error) {
	digest := r.Digest
	if j, ok := c.jobs[digest]; ok {
		return j, nil
	}
	for _, f := range v.Files {
		if f.Name == r.Name && f.Err != "" {
			return nil, errors.New(f.Err)
		}
	}
	return nil, fmt.Errorf("the declaration of %q (%s) is no longer read: a round reads it again", r.Name, digest)
}

// copyView reads the newest copy of an allocation: the one its record
// names, or a later one its driver recorded since (followed by the ids a
// copy's successor takes, job.CopyTaskID).
func (c *converger) copyView(ctx context.Context, a store.DesiredAlloc) (CopyView, error) {
	cv := CopyView{IDs: a.Tasks, Generation: a.Generation, NotBefore: a.NotBefore, Driven: c.a.drives.driving(a.ID)}
	for step := 0; ; step++ {
		cv.Tasks, cv.Missing = nil, nil
		for _, id := range cv.IDs {
			t, err := c.a.st.LoadTask(ctx, id)
			switch {
			case errors.Is(err, store.ErrUnknownTask):
				cv.Missing = append(cv.Missing, id)
			case err != nil:
				return cv, err
			default:
				cv.Tasks = append(cv.Tasks, t)
			}
		}
		if cv.live() || len(cv.Missing) > 0 || len(cv.Tasks) == 0 || step == maxFollow {
			break
		}
		// Over: has its driver recorded the copy that follows it?
		gen := cv.Generation + 1
		var next []string
		for _, t := range cv.Tasks {
			next = append(next, job.CopyTaskID(t.Spec.Name, a.ID, gen))
		}
		first, err := c.a.st.LoadTask(ctx, next[0])
		if errors.Is(err, store.ErrUnknownTask) {
			break
		}
		if err != nil {
			return cv, err
		}
		if first.Spec == nil || first.Spec.Alloc == nil || first.Spec.Alloc.ID != a.ID {
			break // not ours: a name's collision
		}
		cv.IDs, cv.Generation, cv.NotBefore = first.Spec.Alloc.Tasks, gen, first.Spec.Alloc.NotBefore
	}
	if len(cv.Tasks) > 0 && cv.Tasks[0].Spec != nil && cv.Tasks[0].Spec.Alloc != nil {
		cv.NotBefore = cv.Tasks[0].Spec.Alloc.NotBefore
	}
	return cv, nil
}

func (c *converger) taskView(ctx context.Context, id string) (TaskView, error) {
	t, err := c.a.st.LoadTask(ctx, id)
	if errors.Is(err, store.ErrUnknownTask) {
		return TaskView{}, nil
	}
	if err != nil {
		return TaskView{}, err
	}
	return TaskView{Task: t}, nil
}

// commit writes a plan's record changes in one commit, drawing the new
// allocations' ids first, with the crash points of the kinds of change it
// holds.
func (c *converger) commit(ctx context.Context, _ View, changes []Change) error {
	_, err := c.commitWritten(ctx, changes, "")
	return err
}

// commitWritten is commit, returning the records written; kind, if not
// "", is the kind of change its crash points name (a request's).
func (c *converger) commitWritten(ctx context.Context, changes []Change, kind commitKind) ([]store.Desired, error) {
	var kinds []commitKind
	seen := map[commitKind]bool{}
	out := make([]store.DesiredChange, len(changes))
	for i, ch := range changes {
		d := &ch.Desired
		if ch.NewAllocs != nil {
			d.Allocs = nil
			for _, s := range ch.NewAllocs {
				d.Allocs = append(d.Allocs, c.newAlloc(s))
			}
		}
		if len(ch.Renew) > 0 {
			d.Allocs = slices.Clone(d.Allocs)
			for i, s := range ch.Renew {
				d.Allocs[i] = c.newAlloc(s)
			}
		}
		out[i] = ch.DesiredChange
		k := cmp.Or(kind, kindOf(ch))
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	return c.commitKindsWritten(ctx, kinds, out...)
}

// newAlloc is a new allocation of shape s, its ids drawn.
func (c *converger) newAlloc(s job.Shape) store.DesiredAlloc {
	a := store.DesiredAlloc{Group: s.Group, Index: s.Index, ID: c.a.cfg.NewAllocID()}
	for _, n := range s.Names {
		a.Tasks = append(a.Tasks, c.a.cfg.NewID(n))
	}
	return a
}

func (c *converger) commitKinds(ctx context.Context, kinds []commitKind, changes ...store.DesiredChange) error {
	_, err := c.commitKindsWritten(ctx, kinds, changes...)
	return err
}

func (c *converger) commitKindsWritten(ctx context.Context, kinds []commitKind, changes ...store.DesiredChange) ([]store.Desired, error) {
	name := changes[0].Desired.Name
	for _, k := range kinds {
		c.hooks.crash(crashBeforeCommit+string(k), name)
	}
	written, err := c.a.st.ChangeDesired(ctx, changes...)
	if err != nil {
		return nil, err
	}
	for _, k := range kinds {
		c.hooks.crash(crashAfterCommit+string(k), name)
	}
	for _, ch := range changes {
		d := ch.Desired
		switch {
		case ch.Delete:
			c.log.Info("desired entry removed", "name", d.Name)
		default:
			var ids []string
			for _, a := range d.Allocs {
				ids = append(ids, a.Tasks...)
			}
			c.log.Info("desired entry recorded", "name", d.Name, "tasks", fmt.Sprint(ids), "reason", d.Reason)
		}
	}
	return written, nil
}

func kindOf(ch Change) commitKind {
	switch {
	case ch.Delete:
		return commitDelete
	case ch.NewAllocs != nil || len(ch.Renew) > 0:
		return commitIntent
	}
	return commitUpdate
}

// perform runs an effect and reports its outcome.
func (c *converger) perform(ctx context.Context, e Effect, r store.Desired, v View) {
	defer c.effects.Done()
	var err error
	c.hooks.crash(crashBeforeEffect+e.Kind.String(), e.Name)
	switch e.Kind {
	case EffectStart:
		err = c.start(ctx, e, r, v)
	case EffectDrive:
		for _, a := range e.Allocs {
			ids := a.Tasks
			if cv := v.Copies[a.ID]; len(cv.IDs) > 0 {
				ids = cv.IDs
			}
			c.log.Info("driving a copy of a desired entry", "name", e.Name, "alloc", a.ID)
			if _, derr := c.a.drives.start(a.ID, ids, c.copyHook(a.ID)); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	case EffectStop:
		c.log.Info("stopping a desired entry's tasks", "name", e.Name, "reason", e.Reason)
		for _, a := range e.Allocs {
			var serr error
			if a.ID == "" { // a version-1 record's task
				_, serr = c.a.d.StopTask(ctx, a.Tasks[0], 0, 0)
			} else {
				ids := a.Tasks
				if cv := v.Copies[a.ID]; len(cv.IDs) > 0 {
					ids = cv.IDs
				}
				_, serr = c.a.d.StopGroup(ctx, ids, 0, 0, nil)
			}
			err = errors.Join(err, serr)
		}
	}
	if err == nil {
		c.hooks.crash(crashAfterEffect+e.Kind.String(), e.Name)
	}
	select {
	case c.outcomes <- outcome{e: e, err: err}:
	case <-ctx.Done():
	}
}

// start instantiates an entry's allocations (their ids recorded), records
// their tasks and drives them, each until its main tasks have started. A
// refusal of the node (its policy, a port, a name taken) is written in the
// record, and tried again later.
func (c *converger) start(ctx context.Context, e Effect, r store.Desired, v View) error {
	j, err := c.jobOf(r, v)
	if err != nil {
		return err
	}
	node := c.a.Local.node(ctx)
	if f := c.a.cfg.Feed; f != nil && strings.HasPrefix(r.File, f.Dir()+"/") {
		node.Policy = node.Policy.ForRemote() // a spec from etcd, whoever read its text first
	}
	var errs []error
	for _, a := range e.Allocs {
		c.log.Info("starting a copy of a desired entry", "name", e.Name, "alloc", a.ID, "group", a.Group, "index", a.Index)
		run, err := j.InstantiateAlloc(ctx, node, a.Group, a.Index, job.IDs{Alloc: a.ID, Tasks: a.Tasks}, job.Overrides{})
		if err == nil {
			var group []driver.GroupTask
			for _, t := range run.Allocs[0].Tasks {
				group = append(group, driver.GroupTask{ID: t.ID, Spec: t.Spec})
			}
			if _, err = c.a.d.CreateGroup(ctx, group, driver.StartOptions{}); err != nil {
				c.a.Local.releasePorts(a.ID)
			}
		}
		if err != nil {
			c.log.Warn("a desired entry's copy is refused; tried again later", "name", e.Name, "alloc", a.ID, "err", err)
			errs = append(errs, err)
			continue
		}
		dr, err := c.a.drives.start(a.ID, a.Tasks, c.copyHook(a.ID))
		if err == nil {
			_, err = dr.started(ctx, nil)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.noteReason(e.Name, err.Error())
		return err
	}
	return nil
}

// noteReason asks the loop to record why an entry does not run (a
// refusal its tasks' logs do not hold: nothing of it was recorded).
func (c *converger) noteReason(name, reason string) {
	go func() {
		_, _ = c.request(context.Background(), convRequest{kind: commitUpdate, name: name, reason: reason})
	}()
}

// syncWatchers waits on every live task of a version-1 record, and on no
// other.
func (c *converger) syncWatchers(ctx context.Context, ids []string) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		if c.watching[id] != nil {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		c.watching[id] = cancel
		go func() {
			_, err := c.a.d.WaitTask(wctx, id)
			if wctx.Err() != nil {
				return
			}
			if err != nil {
				c.log.Warn("waiting on a desired entry's task", "task_id", id, "err", err)
				t := time.NewTimer(retryDelay)
				defer t.Stop()
				select {
				case <-t.C:
				case <-wctx.Done():
					return
				}
			}
			select {
			case c.ended <- id:
			case <-wctx.Done():
			}
		}()
	}
	for id, cancel := range c.watching {
		if !want[id] {
			cancel()
			delete(c.watching, id)
		}
	}
}

// handle serves a request of the desired state: its record change is
// durable when it returns.
func (c *converger) handle(ctx context.Context, r convRequest) (Entry, error) {
	recs, err := c.a.st.Desired(ctx)
	if err != nil {
		return Entry{}, err
	}
	if r.kind == commitCopy {
		return Entry{}, c.recordCopy(ctx, recs, r.copy)
	}
	var rec *store.Desired
	for i := range recs {
		if recs[i].Name == r.name {
			rec = &recs[i]
		}
	}
	if r.kind == commitUpdate { // a refusal noted by an effect
		if rec == nil || rec.Reason == r.reason {
			return Entry{}, nil
		}
		d := *rec
		d.Reason = r.reason
		return Entry{}, c.commitKinds(ctx, []commitKind{commitUpdate}, store.DesiredChange{Desired: d})
	}
	if c.busy[r.name] && r.kind != commitDisable {
		// A start in flight must not see its record name other tasks.
		return Entry{}, fmt.Errorf("agent: desired entry %q: a start or stop of its tasks is under way; try again once it is over", r.name)
	}
	var ch Change
	switch r.kind {
	case commitEnable:
		var d Declared
		if d, err = c.readEnable(r.enable); err != nil {
			return Entry{}, err
		}
		r.name = d.Name
		rec = nil
		for i := range recs {
			if recs[i].Name == d.Name {
				rec = &recs[i]
			}
		}
		ch, err = enableChange(rec, c.declaredFile(d.Name), d)
	case commitDisable:
		ch, err = disableChange(rec, r.name)
	case commitStart:
		var ok bool
		if ch, ok, err = c.startChange(ctx, rec, r.name, cmp.Or(r.reason, "started again on request")); err == nil && !ok {
			return entryOfRecord(*rec), nil // running already
		}
	}
	if err != nil {
		return Entry{}, err
	}
	written, err := c.commitWritten(ctx, []Change{ch}, r.kind)
	if err != nil {
		return Entry{}, err
	}
	e := entryOfRecord(written[0])
	e.Pending = true
	return e, nil
}

// readEnable reads an enable's file with the agent's own node: a file the
// agent could not run is refused now, before anything is written.
func (c *converger) readEnable(req EnableRequest) (Declared, error) {
	src := job.Source{File: req.File, Text: req.Text}
	j, err := job.Read(src, req.Inputs, c.node(context.Background()))
	if err != nil {
		return Declared{}, err
	}
	d := Declared{Name: j.Name, Source: store.SourceEnabled, File: req.File, Text: req.Text, Inputs: req.Inputs,
		Digest: job.Digest(src, req.Inputs), Shapes: j.Shapes()}
	c.jobs[d.Digest] = j
	return d, nil
}

// recordCopy writes ahead, in the record of the entry it belongs to, a
// new copy a drive is about to record. An allocation no entry holds any
// more (its declaration changed meanwhile) is refused: the drive stops
// there, and nothing of the copy is recorded.
func (c *converger) recordCopy(ctx context.Context, recs []store.Desired, cp Copy) error {
	for _, r := range recs {
		for i, a := range r.Allocs {
			if a.ID != cp.Alloc {
				continue
			}
			d := r
			d.Allocs = slices.Clone(r.Allocs)
			x := &d.Allocs[i]
			x.Tasks, x.Generation, x.NotBefore, x.Kind = cp.Tasks, cp.Generation, cp.NotBefore.UnixNano(), string(cp.Kind)
			switch cp.Kind {
			case CopyRestart:
				x.Restarts++
			case CopyReschedule:
				x.Reschedules++
			}
			d.Reason = cp.Reason
			return c.commitKinds(ctx, []commitKind{commitCopy}, store.DesiredChange{Desired: d})
		}
	}
	return nil // an ad-hoc group: no record to keep
}

// declaredFile is the config dir's file that declares name, if any.
func (c *converger) declaredFile(name string) string {
	for _, f := range c.files {
		if f.Name == name {
			return f.File
		}
	}
	return ""
}

// publish makes the status of a round the one clients see.
func (c *converger) publish(v View, plan Plan) {
	st := statusOf(v, plan)
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Generation = c.status.Generation
	if reflect.DeepEqual(st, c.status) {
		return
	}
	st.Generation++
	c.status = st
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *converger) publishError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.status
	st.Problems = append([]string{"the desired state cannot be read: " + err.Error()}, st.Problems...)
	st.Converged = false
	st.Generation++
	c.status = st
	close(c.changed)
	c.changed = make(chan struct{})
}

// enableChange is the record change of `tether enable`: a new
// registration, or a registration's new file (its allocations replaced if
// it changed; started again if it had ended). A name the config dir
// declares is refused.
func enableChange(rec *store.Desired, declaredBy string, d Declared) (Change, error) {
	name := d.Name
	if err := validName(name); err != nil {
		return Change{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	switch {
	case rec != nil && rec.Source == store.SourceDir:
		return Change{}, fmt.Errorf("%w: %q is declared by %s in the config dir: remove that file first, or give this job another name", ErrNameConflict, name, rec.File)
	case rec == nil && declaredBy != "":
		return Change{}, fmt.Errorf("%w: %q is declared by %s in the config dir: remove that file first, or give this job another name", ErrNameConflict, name, declaredBy)
	case rec != nil && rec.Disabled:
		return Change{}, fmt.Errorf("agent: desired entry %q is being disabled; enable it again once its tasks are stopped", name)
	}
	r := store.Desired{Name: name, Source: store.SourceEnabled, File: d.File, Text: d.Text, Inputs: storeInputs(d.Inputs)}
	if rec == nil {
		r.Digest = d.Digest
		return Change{DesiredChange: store.DesiredChange{Desired: r}, NewAllocs: slices.Clone(d.Shapes)}, nil
	}
	// Enabled again: the new file. A changed declaration is replaced by
	// the convergence (its digest differs); the same one ended is started
	// again with new allocations.
	r.Rev, r.Digest, r.Allocs = rec.Rev, rec.Digest, rec.Allocs
	return Change{DesiredChange: store.DesiredChange{Desired: r}}, nil
}

// disableChange is the record change of `tether disable`: the record is
// marked, its tasks stopped, then the record removed (by convergence).
func disableChange(rec *store.Desired, name string) (Change, error) {
	switch {
	case rec == nil:
		return Change{}, fmt.Errorf("%w: %q", ErrUnknownDesired, name)
	case rec.Source == store.SourceDir:
		return Change{}, fmt.Errorf("%w: %q is declared by %s in the config dir: remove the file to stop it", ErrNameConflict, name, rec.File)
	}
	d := *rec
	d.Disabled = true
	return Change{DesiredChange: store.DesiredChange{Desired: d}}, nil
}

// startChange is the record change of starting a desired entry again: new
// allocations (fresh restart and reschedule counts), unless a copy of it
// is live (ok false).
func (c *converger) startChange(ctx context.Context, rec *store.Desired, name, reason string) (Change, bool, error) {
	switch {
	case rec == nil:
		return Change{}, false, fmt.Errorf("%w: %q", ErrUnknownDesired, name)
	case rec.Disabled:
		return Change{}, false, fmt.Errorf("agent: desired entry %q is being disabled", name)
	}
	for _, a := range rec.Allocs {
		cv, err := c.copyView(ctx, a)
		if err != nil {
			return Change{}, false, err
		}
		if cv.live() {
			return Change{}, false, nil
		}
	}
	if rec.Task != "" {
		if tv, err := c.taskView(ctx, rec.Task); err == nil && tv.Task.State != fsm.StateNone && !tv.Task.State.Terminal() {
			return Change{}, false, nil
		}
	}
	var d Declared
	switch {
	case rec.Source == store.SourceEnabled:
		d = c.enabled(*rec)
	default:
		for _, f := range c.files {
			if f.Name == name {
				d = f
			}
		}
		if f := c.a.cfg.Feed; f != nil && d.Name == "" {
			decl, _, _ := f.get()
			for _, x := range decl {
				if x.Name == name {
					d = c.readAs(true, x.File, x.Name, x.Text, x.Inputs)
				}
			}
		}
	}
	if d.Err != "" || d.Name == "" {
		return Change{}, false, fmt.Errorf("agent: desired entry %q cannot start: its declaration is refused: %s", name, cmp.Or(d.Err, "not declared"))
	}
	r := *rec
	r.Task, r.Reason, r.Digest = "", reason, d.Digest
	if r.Source == store.SourceEnabled && r.Text == nil {
		// keep a version-1 registration's spec
	} else {
		r.Spec = nil
	}
	return Change{DesiredChange: store.DesiredChange{Desired: r}, NewAllocs: slices.Clone(d.Shapes)}, true, nil
}
