package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
	"github.com/tether-fsm/tether/taskfile"
)

// LocalStore is what Local needs of the driver's store beside the event
// log: listings, removal, the desired records, and the file itself for
// its upkeep. *store.Shared (daemonless) and the agent's held store have
// it.
type LocalStore interface {
	LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error)
	LoadTask(ctx context.Context, id string) (fsm.Task, error)
	Remove(ctx context.Context, olderThan time.Time) ([]string, error)
	Desired(ctx context.Context) ([]store.Desired, error)
	ChangeDesired(ctx context.Context, changes ...store.DesiredChange) ([]store.Desired, error)
	// Path is the store's file and Options what it is opened with.
	Path() string
	Options() store.Options
	// Exclusive runs fn while nothing of this process has the store file
	// open; the process's operations wait meanwhile.
	Exclusive(ctx context.Context, fn func() error) error
}

var (
	_ LocalStore = (*store.Shared)(nil)
	_ LocalStore = (*heldStore)(nil)
	_ Service    = (*Local)(nil)
)

// Local is the Service in this process: a driver and its store. It is the
// one implementation of every operation: the CLI runs it daemonless (over
// a store.Shared), and an agent serves its clients with it (over the store
// it holds), so that a command prints and exits the same either way. With
// no agent the desired state is only recorded: an enabled task starts when
// an agent runs.
type Local struct {
	D     *driver.Driver
	Store LocalStore
	// StateDir is the driver's state directory; ExecutorCommand starts
	// this binary in executor mode (for the upkeep's process world: a
	// salvage kills lost tasks' processes, a gc keeps the directories of
	// live executors). Logger receives the upkeep's logs (nil: none).
	StateDir        string
	ExecutorCommand []string
	Logger          hclog.Logger
	// Hooks are the driver's crash points (a salvage's); ReleasePorts lets
	// go of the ports of a group whose directory gc removed (nil: none).
	Hooks        driver.Hooks
	ReleasePorts func(alloc string)
	// Now is the clock (default time.Now); NewID draws task ids (default:
	// the name and six random hex digits).
	Now   func() time.Time
	NewID func(name string) string
	// BootID is this boot's id (default: the kernel's): a copy of a group
	// lost with an executor of another boot is started again at once.
	BootID string
	// Points are the agent's crash points DriveGroup passes (its hooks).
	Points Hooks
	// HandOff starts a driver for the group alloc (its tasks ids) that
	// outlives this process and takes the group over once this one lets
	// go of its lock (the CLI's detached `tether drive-group`): StartGroup
	// and AdoptGroups call it daemonless. nil: nobody drives the group
	// after the call.
	HandOff func(alloc string, ids []string) error
	// Policy is the allow lists of this process's driver (its Config's),
	// which the job path applies too (PlanJob, Enable).
	Policy job.Policy
	// Host is the node's configuration besides what is detected (Config's).
	Host taskfile.HostConfig

	bootOnce sync.Once
	boot     string

	hostMu sync.Mutex
	host   *taskfile.Host
	hostAt time.Time
}

// hostTTL is how long a detection of the host's facts (DetectHost: its
// kernel, CPUs, memory, OS, default route's address) serves the job path:
// a config dir of 50 files read the host 50 times in one round, 0.2 ms
// each, for facts that do not change between two of them.
const hostTTL = time.Second

// hostFacts is the host as the job path sees it: a copy (the job path may
// add to its maps) of a detection at most hostTTL old.
func (l *Local) hostFacts() *taskfile.Host {
	l.hostMu.Lock()
	defer l.hostMu.Unlock()
	now := time.Now()
	if l.host == nil || now.Sub(l.hostAt) >= hostTTL || now.Before(l.hostAt) {
		l.host, l.hostAt = taskfile.DetectHost(l.Host), now
	}
	h := *l.host
	h.Attrs, h.Node, h.Meta = maps.Clone(h.Attrs), maps.Clone(h.Node), maps.Clone(h.Meta)
	return &h
}

func (l *Local) bootID() string {
	l.bootOnce.Do(func() {
		l.boot = l.BootID
		if l.boot == "" {
			l.boot, _ = proc.BootID()
		}
	})
	return l.boot
}

// releasePorts lets go of the ports of the group alloc (ReleasePorts).
func (l *Local) releasePorts(alloc string) {
	if l.ReleasePorts != nil {
		l.ReleasePorts(alloc)
	}
}

func (l *Local) now() int64 {
	if l.Now != nil {
		return l.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

func (l *Local) logger() hclog.Logger {
	if l.Logger == nil {
		return hclog.NewNullLogger()
	}
	return l.Logger
}

// world is the process world of the upkeep.
func (l *Local) world() *executor.Real {
	return &executor.Real{StateDir: l.StateDir, Command: l.ExecutorCommand, Logger: l.logger().Named("driver")}
}

func (l *Local) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	return l.D.StartTask(ctx, id, spec)
}

func (l *Local) StartNamed(ctx context.Context, id string, spec fsm.Spec, opts driver.StartOptions) (fsm.Task, []fsm.Task, error) {
	return l.D.StartNamed(ctx, id, spec, opts)
}

func (l *Local) RestartTask(ctx context.Context, id, newID string) (fsm.Task, fsm.Task, error) {
	return l.D.RestartTask(ctx, id, newID)
}

func (l *Local) CreateGroup(ctx context.Context, tasks []driver.GroupTask, opts driver.StartOptions) ([]fsm.Task, error) {
	return l.D.CreateGroup(ctx, tasks, opts)
}

func (l *Local) RunGroup(ctx context.Context, ids []string, wait bool, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	return l.D.RunGroup(ctx, ids, wait, fn)
}

func (l *Local) StopGroup(ctx context.Context, ids []string, sig syscall.Signal, grace time.Duration, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	return l.D.StopGroup(ctx, ids, sig, grace, fn)
}

func (l *Local) Groups(ctx context.Context) (map[string][]string, error) { return l.D.Groups(ctx) }

func (l *Local) GroupDriven(alloc string) (bool, int, error) { return l.D.GroupDriven(alloc) }

func (l *Local) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	return l.D.StopTask(ctx, id, sig, grace)
}

func (l *Local) SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error {
	if main {
		return l.D.SignalMain(ctx, id, sig)
	}
	return l.D.SignalTask(ctx, id, sig)
}

func (l *Local) Resolve(ctx context.Context, arg string) (driver.TaskInfo, error) {
	return l.D.Resolve(ctx, arg)
}

func (l *Local) InspectTask(ctx context.Context, id string) (driver.TaskInfo, error) {
	return l.D.InspectTask(ctx, id)
}

func (l *Local) TaskEvents(ctx context.Context, id string) ([]fsm.Event, error) {
	return l.D.TaskEvents(ctx, id)
}

func (l *Local) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	return l.Store.LoadTasks(ctx, which)
}

func (l *Local) FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error) {
	return l.D.FollowTask(ctx, id, fn)
}

func (l *Local) WaitTask(ctx context.Context, id string) (fsm.Task, error) {
	return l.D.WaitTask(ctx, id)
}

// WaitReady is driver.WaitReady.
func (l *Local) WaitReady(ctx context.Context, id string) (driver.ReadyReport, error) {
	return l.D.WaitReady(ctx, id)
}

func (l *Local) Reconcile(ctx context.Context, ids ...string) (driver.Report, error) {
	return l.D.Reconcile(ctx, ids...)
}

// Recover is the driver's, and then waits (bounded by the kill's effect
// timeout) for each task it found being reaped by this process's driver:
// in a long-lived driver (an agent's), the supervision that saw an
// executor die is recording its end, and the report says the end, as a
// daemonless recovery, which reaps such a task itself, does.
func (l *Local) Recover(ctx context.Context) (driver.Report, error) {
	rep, err := l.D.Recover(ctx)
	for i, r := range rep.Tasks {
		if r.Err != nil || r.To != fsm.StateReaping {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, reapWait)
		final, werr := l.D.WaitTask(wctx, r.ID)
		cancel()
		if final.State.Terminal() {
			rep.Tasks[i].To = final.State
			rep.Tasks[i].Action = "its end recorded by the supervision in progress: " + final.State.String()
		} else if werr != nil && ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	return rep, err
}

// reapWait bounds Recover's wait for a task being reaped (the driver's
// default effect timeout).
const reapWait = 30 * time.Second

func (l *Local) TaskStats(ctx context.Context, id string) (cgroup.Stats, error) {
	return l.D.TaskStats(ctx, id)
}

func (l *Local) ExecTask(ctx context.Context, id string, spec driver.ExecSpec) (*driver.ExecProcess, error) {
	return l.D.ExecTask(ctx, id, spec)
}

// node is the job path's node of this process: its state directory, its
// allow lists, its executors' base environment, its port allocator (a
// group's ports held while a task of it is live).
func (l *Local) node(ctx context.Context) job.Node {
	host := l.hostFacts()
	real := &executor.Real{StateDir: l.StateDir}
	var once sync.Once
	var live map[string][]string
	ports := &taskfile.Allocator{Dir: l.StateDir, IP: host.IP, Live: func(owner string) bool {
		once.Do(func() {
			var err error
			if live, err = l.D.Groups(ctx); err != nil {
				live = nil
			}
		})
		if live == nil {
			return true // unknown: keep it
		}
		_, ok := live[owner]
		return ok
	}}
	return job.Node{StateDir: l.StateDir, Host: host, Policy: l.Policy, BaseEnv: real.BaseEnv, Ports: ports}
}

// PlanJob is the job path with this process's node: the file read (its
// notes returned), its allocations instantiated with fresh ids, nothing
// recorded. A tether run's (req.Once) carry no reschedule policy.
func (l *Local) PlanJob(ctx context.Context, req JobRequest) (JobPlan, error) {
	node := l.node(ctx)
	j, err := job.Read(req.Source, req.Inputs, node)
	if err != nil {
		if j != nil {
			return JobPlan{Name: j.Name, Notes: j.Notes, Skipped: j.Skipped}, err
		}
		return JobPlan{}, err
	}
	var ids []job.IDs
	for _, s := range j.Shapes() {
		ids = append(ids, job.NewIDs(s))
	}
	run, err := j.Instantiate(ctx, node, ids, req.Overrides)
	if err != nil {
		return JobPlan{Name: j.Name, Notes: j.Notes, Skipped: j.Skipped}, err
	}
	if req.Once {
		for _, a := range run.Allocs {
			for i := range a.Tasks {
				a.Tasks[i].Spec.Alloc.Reschedule = nil
			}
		}
	}
	return JobPlan{Name: j.Name, Run: *run, Notes: j.Notes, Skipped: j.Skipped}, nil
}

// record is the desired record named name, if any.
func (l *Local) record(ctx context.Context, name string) (*store.Desired, error) {
	recs, err := l.Store.Desired(ctx)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if recs[i].Name == name {
			return &recs[i], nil
		}
	}
	return nil, nil
}

// liveCopies are the task ids of the live copies of a record's
// allocations (and its version-1 task, if live).
func (l *Local) liveCopies(ctx context.Context, r store.Desired) ([][]string, error) {
	var out [][]string
	for _, a := range r.Allocs {
		for _, id := range a.Tasks {
			t, err := l.D.InspectTask(ctx, id)
			if err == nil && !t.State.Terminal() {
				out = append(out, a.Tasks)
				break
			}
		}
	}
	if r.Task != "" {
		if t, err := l.D.InspectTask(ctx, r.Task); err == nil && !t.State.Terminal() {
			out = append(out, []string{r.Task})
		}
	}
	return out, nil
}

// Enable records the registration, its file read here first (this
// process's allow lists; the agent reads it again with its own); with no
// agent running, nothing starts it until one does (the entry is Pending).
func (l *Local) Enable(ctx context.Context, req EnableRequest) (Entry, error) {
	src := job.Source{File: req.File, Text: req.Text}
	j, err := job.Read(src, req.Inputs, l.node(ctx))
	if err != nil {
		return Entry{}, err
	}
	rec, err := l.record(ctx, j.Name)
	if err != nil {
		return Entry{}, err
	}
	d := Declared{Name: j.Name, Source: store.SourceEnabled, File: req.File, Text: req.Text, Inputs: req.Inputs,
		Digest: job.Digest(src, req.Inputs), Shapes: j.Shapes()}
	ch, err := enableChange(rec, "", d)
	if err != nil {
		return Entry{}, err
	}
	newID := l.NewID
	if newID == nil {
		newID = job.NewTaskID
	}
	if ch.NewAllocs != nil {
		for _, s := range ch.NewAllocs {
			a := store.DesiredAlloc{Group: s.Group, Index: s.Index, ID: job.NewAllocID()}
			for _, n := range s.Names {
				a.Tasks = append(a.Tasks, newID(n))
			}
			ch.Desired.Allocs = append(ch.Desired.Allocs, a)
		}
	}
	w, err := l.Store.ChangeDesired(ctx, ch.DesiredChange)
	if err != nil {
		return Entry{}, err
	}
	e := entryOfRecord(w[0])
	e.Pending = true
	return e, nil
}

// Disable unregisters an enabled entry daemonless: the record is marked,
// its tasks stopped, the record removed (a crash between leaves the mark,
// which the next disable or agent finishes).
func (l *Local) Disable(ctx context.Context, name string) (Entry, error) {
	rec, err := l.record(ctx, name)
	if err != nil {
		return Entry{}, err
	}
	ch, err := disableChange(rec, name)
	if err != nil {
		return Entry{}, err
	}
	w, err := l.Store.ChangeDesired(ctx, ch.DesiredChange)
	if err != nil {
		return Entry{}, err
	}
	d := w[0]
	live, err := l.liveCopies(ctx, d)
	if err != nil {
		return entryOfRecord(d), err
	}
	for _, ids := range live {
		if len(ids) == 1 && d.Task == ids[0] {
			_, err = l.D.StopTask(ctx, ids[0], 0, 0)
		} else {
			_, err = l.D.StopGroup(ctx, ids, 0, 0, nil)
		}
		if err != nil {
			return entryOfRecord(d), err
		}
	}
	if _, err := l.Store.ChangeDesired(ctx, store.DesiredChange{Desired: store.Desired{Name: name, Rev: d.Rev}, Delete: true}); err != nil {
		return entryOfRecord(d), err
	}
	return entryOfRecord(d), nil
}

// StartDesired needs an agent: daemonless, nothing would keep it running.
func (l *Local) StartDesired(_ context.Context, name string) (Entry, error) {
	return Entry{}, fmt.Errorf("%w: %q is a desired entry, which the agent starts and keeps running: run tether agent", ErrNoAgent, name)
}

// RestartDesired needs an agent, as StartDesired does.
func (l *Local) RestartDesired(_ context.Context, name string) (Entry, error) {
	return Entry{}, fmt.Errorf("%w: %q is a desired entry, which the agent restarts: run tether agent", ErrNoAgent, name)
}

// Status is the desired entries, each where its tasks stand, as an agent
// shows them (no config dir is read daemonless: an entry's declaration is
// its record's).
func (l *Local) Status(ctx context.Context) (Status, error) {
	recs, err := l.Store.Desired(ctx)
	if err != nil {
		return Status{}, err
	}
	v := View{Now: l.now(), BootID: l.bootID(), Records: recs, Copies: map[string]CopyView{}, Legacy: map[string]TaskView{}, Enabled: map[string]Declared{}}
	plan := Plan{Rows: map[string]Row{}, Notes: map[string]string{}, Pending: map[string]bool{}}
	for _, r := range recs {
		for _, a := range r.Allocs {
			cv := CopyView{IDs: a.Tasks, Generation: a.Generation, NotBefore: a.NotBefore}
			for _, id := range a.Tasks {
				t, err := l.Store.LoadTask(ctx, id)
				switch {
				case errors.Is(err, store.ErrUnknownTask):
					cv.Missing = append(cv.Missing, id)
				case err != nil:
					cv.Err = err.Error()
				default:
					cv.Tasks = append(cv.Tasks, t)
				}
			}
			if len(cv.Tasks) == 0 {
				plan.Pending[r.Name] = true
			}
			v.Copies[a.ID] = cv
		}
		if r.Task != "" {
			t, err := l.Store.LoadTask(ctx, r.Task)
			if err == nil {
				v.Legacy[r.Task] = TaskView{Task: t}
			}
		}
		if len(r.Allocs) == 0 || r.Disabled {
			plan.Pending[r.Name] = true
		}
	}
	st := statusOf(v, plan)
	st.Converged = len(plan.Pending) == 0
	return st, nil
}

// WatchStatus calls fn once: with no agent, nothing changes the desired
// state.
func (l *Local) WatchStatus(ctx context.Context, fn func(Status) bool) error {
	st, err := l.Status(ctx)
	if err != nil {
		return err
	}
	if fn(st) {
		return nil
	}
	return fmt.Errorf("%w: nothing converges the desired state daemonless", ErrNoAgent)
}

// Check checks the store file page by page, then with bbolt's own check
// (store.CheckFile: it reports on a file Open refuses), while nothing of
// this process has it open.
func (l *Local) Check(ctx context.Context) (rep store.Report, err error) {
	err = l.Store.Exclusive(ctx, func() error {
		rep, err = store.CheckFile(ctx, l.Store.Path(), l.Store.Options())
		return err
	})
	return rep, err
}

// GC removes the tasks that ended more than olderThan ago and their
// directories, the task directories the store does not know, the group
// directories (allocs/) no task in the store has, and compacts the store.
func (l *Local) GC(ctx context.Context, olderThan time.Duration) (GCReport, error) {
	var rep GCReport
	cutoff := time.Unix(0, l.now()).Add(-olderThan)
	removed, err := l.Store.Remove(ctx, cutoff)
	if errors.Is(err, store.ErrCorrupt) {
		// A damaged freelist refuses writes; compaction rewrites the file
		// from its (checked) tree, and the removal can then proceed.
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("warning: %v; compacting first", err))
		if _, _, cerr := l.compact(ctx); cerr != nil {
			return rep, fmt.Errorf("compact: %w", cerr)
		}
		removed, err = l.Store.Remove(ctx, cutoff)
	}
	if err != nil {
		return rep, err
	}
	rep.Removed = removed
	layout := statedir.Layout{Dir: l.StateDir}
	for _, id := range removed {
		if driver.ValidateTaskID(id) != nil {
			continue // never a path outside the state directory
		}
		if err := os.RemoveAll(layout.Task(id).Dir()); err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("removing the directory of task %s: %v", id, err))
			rep.Failed = true
		}
	}
	orphans, err := l.removeOrphanDirs(ctx, layout, &rep)
	rep.Orphans = orphans
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("looking for task directories the store does not know: %v", err))
		rep.Failed = true
	}
	allocs, err := l.removeAllocDirs(ctx, layout)
	rep.Allocs = allocs
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("removing the directories of ended groups: %v", err))
		rep.Failed = true
	}
	rep.Before, rep.After, err = l.compact(ctx)
	if err != nil {
		return rep, fmt.Errorf("compact: %w", err)
	}
	return rep, nil
}

func (l *Local) compact(ctx context.Context) (before, after int64, err error) {
	err = l.Store.Exclusive(ctx, func() error {
		before, after, err = store.Compact(l.Store.Path(), l.Store.Options())
		return err
	})
	return before, after, err
}

// removeOrphanDirs removes the task directories the store does not know
// (left by a start that crashed before it recorded the task, or by a
// salvage); executor.Real.RemoveOrphanDir keeps the ones in use. One kept
// because an executor runs in it for a task the store does not know is
// something gc could not finish (rep.Failed).
func (l *Local) removeOrphanDirs(ctx context.Context, layout statedir.Layout, rep *GCReport) ([]string, error) {
	ents, err := os.ReadDir(layout.Tasks())
	if err != nil {
		return nil, err
	}
	world := l.world()
	var out []string
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || driver.ValidateTaskID(id) != nil {
			continue // never a path outside the state directory
		}
		unknown := func() (bool, error) {
			_, err := l.Store.LoadTask(ctx, id)
			if errors.Is(err, store.ErrUnknownTask) {
				return true, nil
			}
			return false, nil // known, or unreadable: not ours to judge
		}
		if still, _ := unknown(); !still {
			continue
		}
		removed, kept, err := world.RemoveOrphanDir(id, unknown)
		if err != nil {
			return out, err
		}
		if !removed {
			if errors.Is(kept, executor.ErrBusy) {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("task directory %s is unknown to the store but kept: %v; 'tether stop' cannot reach it: kill that executor (it is not in the store)", id, kept))
				rep.Failed = true
			}
			l.logger().Debug("task directory kept", "task_id", id, "why", fmt.Sprint(kept))
			continue
		}
		out = append(out, id)
	}
	return out, nil
}

// removeAllocDirs removes the group directories (allocs/ALLOC) that no
// task in the store has and no process drives, and lets go of their
// ports (ReleasePorts).
func (l *Local) removeAllocDirs(ctx context.Context, layout statedir.Layout) ([]string, error) {
	ents, err := os.ReadDir(layout.Allocs())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	scan, err := l.Store.LoadTasks(ctx, store.AllTasks)
	if err != nil {
		return nil, err
	}
	if scan.Incomplete != nil || len(scan.Unreadable) > 0 {
		return nil, errors.New("some tasks cannot be read; no group directory is removed ('tether check' says why)")
	}
	held := map[string]bool{}
	for _, t := range scan.Tasks {
		if t.Spec != nil && t.Spec.Alloc != nil {
			held[t.Spec.Alloc.ID] = true
		}
	}
	var out []string
	var errs []error
	for _, e := range ents {
		id := e.Name()
		if held[id] || !e.IsDir() || statedir.ValidateTaskID(id) != nil {
			continue
		}
		if driven, _, err := l.D.GroupDriven(id); err != nil || driven {
			continue
		}
		if err := os.RemoveAll(layout.Alloc(id).Dir()); err != nil {
			errs = append(errs, err)
			continue
		}
		if l.ReleasePorts != nil {
			l.ReleasePorts(id)
		}
		out = append(out, id)
	}
	return out, errors.Join(errs...)
}

// Salvage is the way out of a damaged store that keeps the running tasks
// under control: driver.SalvageStore under a maintenance of the store
// (its lock held from the read to the install, so that nothing another
// process appended meanwhile is left behind in the damaged file), while
// nothing of this process has the store open.
func (l *Local) Salvage(ctx context.Context) (SalvageReport, error) {
	var rep SalvageReport
	var serr error
	layout := statedir.Layout{Dir: l.StateDir}
	err := l.Store.Exclusive(ctx, func() error {
		m, err := store.BeginMaintenance(ctx, l.Store.Path(), l.Store.Options())
		if err != nil {
			return err
		}
		defer func() {
			if err := m.Release(); err != nil {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("warning: %v", err))
			}
		}()
		out, err := driver.SalvageStore(ctx, m, l.world(), l.Hooks)
		serr = err
		rep.Copied, rep.HeadsRebuilt = len(out.Copied), len(out.HeadsRebuilt)
		for _, d := range out.Damage {
			rep.Damage = append(rep.Damage, d.Error())
		}
		for i, lt := range out.Lost {
			lost := Lost{ID: lt.ID, State: lt.State, Why: lt.Err.Error(), What: "nothing done: the salvage stopped before it"}
			if i < len(out.Settled) {
				lost.What, lost.Settled = settled(layout, lt, out.Settled[i])
			}
			rep.Lost = append(rep.Lost, lost)
		}
		rep.Killed = len(out.Settled) > 0
		rep.Installed, rep.Aside, rep.Done = out.Installed, out.Aside, out.Done()
		return nil
	})
	if err != nil {
		return rep, err
	}
	return rep, serr
}

// settled says what driver.SettleLost did about a task that could not be
// salvaged, and whether nothing of it is left running unknown.
func settled(layout statedir.Layout, l store.LostTask, o driver.SettleOutcome) (string, bool) {
	err := o.Err
	switch {
	case errors.Is(err, driver.ErrUnproven):
		return fmt.Sprintf("NOT killed: %v; look at %s", err, layout.Task(l.ID).Dir()), false
	case errors.Is(err, driver.ErrTaskNotKilled):
		return "executor killed; NOT all of its task: " + err.Error(), false
	case err != nil:
		return "NOT killed: " + err.Error(), false
	case o.Ended:
		return "it had ended; nothing to kill", true
	case o.Executor == nil:
		return "no executor with its spawn nonce is alive; whatever was left of its task (its cgroup, its process group) was killed", true
	}
	return fmt.Sprintf("its executor (pid %d) and everything of its task were killed by proven identity", o.Executor.PID), true
}
