package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// retryDelay is how long a desired task waits before the agent tries again
// after an effect or a commit failed for a reason its state does not
// record (the store refused a write, the driver is closing).
const retryDelay = time.Second

// converger is the agent's convergence loop: one goroutine (run) owns the
// desired state's decisions, in the manner of a driver owner: every input
// (a change of the config dir, a request, an effect's outcome, a watched
// task's end, a timer) comes in on a channel, and each is followed by a
// round: read, Decide, commit, act.
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
	effects  sync.WaitGroup

	// Published.
	mu      sync.Mutex
	status  Status
	changed chan struct{} // closed and replaced at each change of status
}

func newConverger(a *Agent) *converger {
	return &converger{a: a, log: a.log.Named("converge"), hooks: a.cfg.Hooks,
		reqs: make(chan convRequest), outcomes: make(chan outcome), ended: make(chan string),
		rescans: make(chan struct{}, 1), done: make(chan struct{}),
		busy: map[string]bool{}, retry: map[string]int64{}, watching: map[string]context.CancelFunc{},
		changed: make(chan struct{})}
}

// convRequest is a client's request of the desired state (enable, disable,
// start again), served by run between rounds.
type convRequest struct {
	kind commitKind
	name string
	// reason is a start's, said in the record (default "started again
	// on request").
	reason string
	file   string
	spec   fsm.Spec
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
				default:
					drained = true
				}
			}
			next, quiet := c.round(life, once)
			if next == 0 { // a commit: decide again from it at once
				continue
			}
			dirty = false
			if once && quiet && len(c.busy) == 0 {
				return nil
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
			delete(c.busy, o.e.Name)
			if o.err != nil && !errors.Is(o.err, context.Canceled) {
				c.log.Error("effect failed; trying again later", "name", o.e.Name, "effect", o.e.Kind.String(), "task_id", o.e.Task, "err", o.err)
				c.retry[o.e.Name] = c.a.cfg.Now().Add(retryDelay).UnixNano()
			}
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
	if !once {
		c.syncWatchers(ctx, plan.Watch)
	}
	if len(plan.Changes) > 0 {
		if err := c.commit(ctx, plan.Changes); err != nil {
			c.log.Error("writing the desired state; trying again later", "err", err)
			c.publish(v, plan)
			return now + int64(retryDelay), false
		}
		return 0, false
	}
	for _, e := range plan.Effects {
		c.busy[e.Name] = true
		c.effects.Add(1)
		go c.perform(ctx, e)
	}
	c.publish(v, plan)
	next = -1
	if plan.Wake > 0 {
		next = plan.Wake
	}
	for _, t := range c.retry {
		if t > now && (next < 0 || t < next) {
			next = t
		}
	}
	quiet = len(plan.Effects) == 0
	if once && plan.Wake > 0 {
		c.log.Info("a delayed start is left for a running agent", "due", time.Unix(0, plan.Wake))
	}
	return next, quiet
}

// view reads what Decide needs.
func (c *converger) view(ctx context.Context, now int64) (View, error) {
	v := View{Now: now, BootID: c.a.cfg.BootID, ConfigDir: c.a.cfg.ConfigDir, Busy: map[string]bool{}, Tasks: map[string]TaskView{}}
	if c.a.cfg.ConfigDir != "" {
		if !c.scanned {
			c.files, c.problems, c.dirErr = scanConfigDir(c.a.cfg.ConfigDir, c.a.cfg.Parse)
			c.scanned = true
			if c.dirErr != nil {
				c.log.Error("the config dir is refused: its tasks are left as they are", "config_dir", c.a.cfg.ConfigDir, "err", c.dirErr)
			}
			for _, p := range c.problems {
				c.log.Warn("task file refused", "file", p.File, "err", p.Err)
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
		v.Files = append(slices.Clip(v.Files), decl...)
		v.Problems = append(slices.Clip(v.Problems), probs...)
	}
	recs, err := c.a.st.Desired(ctx)
	if err != nil {
		return v, err
	}
	v.Records = recs
	for _, r := range recs {
		for _, id := range []string{r.Task, r.Settled} {
			if _, done := v.Tasks[id]; id == "" || done {
				continue
			}
			tv, err := c.taskView(ctx, id)
			if err != nil {
				if errors.Is(err, context.Canceled) || errors.Is(err, store.ErrClosed) {
					return v, err
				}
				// One damaged log leaves its desired task alone, not the
				// others.
				tv = TaskView{Err: err.Error()}
			}
			v.Tasks[id] = tv
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

func (c *converger) taskView(ctx context.Context, id string) (TaskView, error) {
	t, err := c.a.st.LoadTask(ctx, id)
	if errors.Is(err, store.ErrUnknownTask) {
		return TaskView{}, nil
	}
	if err != nil {
		return TaskView{}, err
	}
	tv := TaskView{Task: t}
	if t.State == fsm.StateFailed && t.Nonce == "" {
		evs, err := c.a.st.Load(ctx, id)
		if err != nil {
			return TaskView{}, err
		}
		for _, e := range evs {
			if e.Type == fsm.EventConfigRejected {
				tv.Rejected = true
			}
		}
	}
	return tv, nil
}

// commit writes a plan's record changes in one commit, drawing the new
// task ids first, with the crash points of the kinds of change it holds.
func (c *converger) commit(ctx context.Context, changes []Change) error {
	var kinds []commitKind
	seen := map[commitKind]bool{}
	out := make([]store.DesiredChange, len(changes))
	for i, ch := range changes {
		if ch.NewTask {
			ch.Desired.Task = c.a.cfg.NewID(ch.Desired.Name)
		}
		out[i] = ch.DesiredChange
		k := kindOf(ch)
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	return c.commitKinds(ctx, kinds, out...)
}

func (c *converger) commitKinds(ctx context.Context, kinds []commitKind, changes ...store.DesiredChange) error {
	name := changes[0].Desired.Name
	for _, k := range kinds {
		c.hooks.crash(crashBeforeCommit+string(k), name)
	}
	if _, err := c.a.st.ChangeDesired(ctx, changes...); err != nil {
		return err
	}
	for _, k := range kinds {
		c.hooks.crash(crashAfterCommit+string(k), name)
	}
	for _, ch := range changes {
		d := ch.Desired
		switch {
		case ch.Delete:
			c.log.Info("desired task removed", "name", d.Name)
		case d.Task != "" && d.Settled == "" && d.NotBefore > 0:
			c.log.Info("desired task: next task recorded", "name", d.Name, "task_id", d.Task, "reason", d.Reason,
				"not_before", time.Unix(0, d.NotBefore))
		case d.Task != "" && d.Settled == "":
			c.log.Info("desired task: next task recorded", "name", d.Name, "task_id", d.Task, "reason", d.Reason)
		case d.Settled != "":
			c.log.Warn("desired task settled: not restarted", "name", d.Name, "task_id", d.Settled, "reason", d.Reason)
		}
	}
	return nil
}

func kindOf(ch Change) commitKind {
	switch {
	case ch.Delete:
		return commitDelete
	case ch.NewTask:
		return commitIntent
	case ch.Desired.Settled != "":
		return commitSettle
	}
	return commitUpdate
}

// perform runs an effect and reports its outcome.
func (c *converger) perform(ctx context.Context, e Effect) {
	defer c.effects.Done()
	var err error
	c.hooks.crash(crashBeforeEffect+e.Kind.String(), e.Name)
	switch e.Kind {
	case EffectStart:
		c.log.Info("starting desired task", "name", e.Name, "task_id", e.Task)
		_, err = c.a.d.StartTask(ctx, e.Task, e.Spec)
		if errors.Is(err, driver.ErrStartFailed) || errors.Is(err, driver.ErrInvalidSpec) || errors.Is(err, driver.ErrTaskExists) {
			// Recorded in the task's log: the next round decides on it.
			c.log.Warn("desired task did not start", "name", e.Name, "task_id", e.Task, "err", err)
			err = nil
		}
	case EffectStop:
		c.log.Info("stopping desired task", "name", e.Name, "task_id", e.Task, "reason", e.Reason)
		_, err = c.a.d.StopTask(ctx, e.Task, 0, 0)
	}
	if err == nil {
		c.hooks.crash(crashAfterEffect+e.Kind.String(), e.Name)
	}
	select {
	case c.outcomes <- outcome{e: e, err: err}:
	case <-ctx.Done():
	}
}

// syncWatchers waits on every live task of a desired record, and on no
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
				c.log.Warn("waiting on a desired task's task", "task_id", id, "err", err)
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
	now := c.a.cfg.Now().UnixNano()
	recs, err := c.a.st.Desired(ctx)
	if err != nil {
		return Entry{}, err
	}
	var rec *store.Desired
	for i := range recs {
		if recs[i].Name == r.name {
			rec = &recs[i]
		}
	}
	var live bool
	if rec != nil && rec.Task != "" {
		tv, err := c.taskView(ctx, rec.Task)
		if err != nil {
			return Entry{}, err
		}
		live = tv.Task.State != fsm.StateNone && !tv.Task.State.Terminal()
	}
	if c.busy[r.name] && r.kind != commitDisable {
		// A start in flight must not see its record name another task.
		return Entry{}, fmt.Errorf("agent: desired task %q: a start or stop of its task is under way; try again once it is over", r.name)
	}
	var ch Change
	switch r.kind {
	case commitEnable:
		ch, err = enableChange(rec, c.declaredFile(r.name), r.file, r.spec, now)
	case commitDisable:
		ch, err = disableChange(rec, r.name)
	case commitStart:
		var ok bool
		if ch, ok, err = startChange(rec, r.name, live, cmp.Or(r.reason, "started again on request"), now); err == nil && !ok {
			return entryOfRecord(*rec, live), nil // running already
		}
	}
	if err != nil {
		return Entry{}, err
	}
	if ch.NewTask {
		ch.Desired.Task = c.a.cfg.NewID(ch.Desired.Name)
	}
	if err := c.commitKinds(ctx, []commitKind{r.kind}, ch.DesiredChange); err != nil {
		return Entry{}, err
	}
	d := ch.Desired
	d.Rev++
	return entryOfRecord(d, live && !ch.NewTask), nil
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

// statusOf is what a round shows.
func statusOf(v View, plan Plan) Status {
	st := Status{Problems: plan.Problems, Converged: len(plan.Pending) == 0}
	seen := map[string]bool{}
	for _, r := range v.Records {
		tv := v.Tasks[r.Task]
		e := entryOfRecord(r, false)
		e.State = tv.Task.State
		e.Problem = plan.Notes[r.Name]
		e.Pending = plan.Pending[r.Name]
		st.Entries = append(st.Entries, e)
		seen[r.Name] = true
	}
	for _, f := range v.Files {
		if !seen[f.Name] && plan.Pending[f.Name] {
			seen[f.Name] = true
			st.Entries = append(st.Entries, Entry{Name: f.Name, Source: store.SourceDir, File: f.File, Pending: true})
		}
	}
	if v.DirErr != "" {
		st.Problems = append([]string{v.DirErr}, st.Problems...)
	}
	if v.FeedErr != "" {
		st.Problems = append(st.Problems, v.FeedErr)
	}
	return st
}

func entryOfRecord(r store.Desired, live bool) Entry {
	e := Entry{Name: r.Name, Source: r.Source, File: r.File, Task: r.Task, Restarts: r.Restart.Attempts,
		Settled: r.Settled != "" && r.Settled == r.Task, Reason: r.Reason, Disabled: r.Disabled}
	if r.NotBefore > 0 {
		e.NotBefore = time.Unix(0, r.NotBefore)
	}
	if live {
		e.State = fsm.StateRunning
	}
	return e
}

// enableChange is the record change of `tether enable`: a new
// registration, or a registration's new spec (started again if it had
// settled). A name the config dir declares is refused.
func enableChange(rec *store.Desired, declaredBy, file string, spec fsm.Spec, now int64) (Change, error) {
	name := spec.Name
	if err := validName(name); err != nil {
		return Change{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := spec.Validate(); err != nil {
		return Change{}, err
	}
	switch {
	case rec != nil && rec.Source == store.SourceDir:
		return Change{}, fmt.Errorf("%w: %q is declared by %s in the config dir: remove that file first, or give this task another name", ErrNameConflict, name, rec.File)
	case rec == nil && declaredBy != "":
		return Change{}, fmt.Errorf("%w: %q is declared by %s in the config dir: remove that file first, or give this task another name", ErrNameConflict, name, declaredBy)
	case rec != nil && rec.Disabled:
		return Change{}, fmt.Errorf("agent: desired task %q is being disabled; enable it again once its task is stopped", name)
	case rec == nil:
		d := store.Desired{Name: name, Source: store.SourceEnabled, File: file, Spec: &spec, Restart: fsm.RestartState{WindowStart: now}}
		return Change{DesiredChange: store.DesiredChange{Desired: d}, NewTask: true}, nil
	}
	d := *rec
	d.File, d.Spec = file, &spec
	newTask := false
	if d.Settled != "" {
		d.Settled, d.Reason, d.NotBefore, d.Restart = "", "", 0, fsm.RestartState{WindowStart: now}
		newTask = true
	}
	return Change{DesiredChange: store.DesiredChange{Desired: d}, NewTask: newTask}, nil
}

// disableChange is the record change of `tether disable`: the record is
// marked, its task stopped, then the record removed (by convergence).
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

// startChange is the record change of starting a desired task again: a new
// task with a fresh restart count, unless its task is live (ok false).
func startChange(rec *store.Desired, name string, live bool, reason string, now int64) (Change, bool, error) {
	switch {
	case rec == nil:
		return Change{}, false, fmt.Errorf("%w: %q", ErrUnknownDesired, name)
	case rec.Disabled:
		return Change{}, false, fmt.Errorf("agent: desired task %q is being disabled", name)
	case live:
		return Change{}, false, nil
	}
	d := *rec
	d.Settled, d.Reason, d.NotBefore, d.Restart = "", reason, 0, fsm.RestartState{WindowStart: now}
	return Change{DesiredChange: store.DesiredChange{Desired: d}, NewTask: true}, true, nil
}
