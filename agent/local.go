package agent

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// LocalStore is what Local needs of the driver's store beside the event
// log: listings, checks, removal and the desired records. *store.Store and
// *store.Shared have it.
type LocalStore interface {
	LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error)
	Check(ctx context.Context) (store.Report, error)
	Remove(ctx context.Context, olderThan time.Time) ([]string, error)
	Desired(ctx context.Context) ([]store.Desired, error)
	ChangeDesired(ctx context.Context, changes ...store.DesiredChange) ([]store.Desired, error)
}

var (
	_ LocalStore = (*store.Store)(nil)
	_ LocalStore = (*store.Shared)(nil)
	_ Service    = (*Local)(nil)
)

// Local is the Service in-process, daemonless: a driver and its store,
// with no agent. Task operations are the driver's; the desired state is
// only recorded (no agent converges it: an enabled task starts when an
// agent runs).
type Local struct {
	D     *driver.Driver
	Store LocalStore
	// Now is the clock (default time.Now); NewID draws task ids (default:
	// the name and six random hex digits).
	Now   func() time.Time
	NewID func(name string) string
}

func (l *Local) now() int64 {
	if l.Now != nil {
		return l.Now().UnixNano()
	}
	return time.Now().UnixNano()
}

func (l *Local) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	return l.D.StartTask(ctx, id, spec)
}

func (l *Local) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	return l.D.StopTask(ctx, id, sig, grace)
}

func (l *Local) SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error {
	if main {
		return l.D.SignalMain(ctx, id, sig)
	}
	return l.D.SignalTask(ctx, id, sig)
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

func (l *Local) Reconcile(ctx context.Context, ids ...string) (driver.Report, error) {
	return l.D.Reconcile(ctx, ids...)
}

func (l *Local) Recover(ctx context.Context) (driver.Report, error) { return l.D.Recover(ctx) }

func (l *Local) TaskStats(ctx context.Context, id string) (cgroup.Stats, error) {
	return l.D.TaskStats(ctx, id)
}

func (l *Local) record(ctx context.Context, name string) (*store.Desired, bool, error) {
	recs, err := l.Store.Desired(ctx)
	if err != nil {
		return nil, false, err
	}
	for i := range recs {
		if recs[i].Name == name {
			live := false
			if recs[i].Task != "" {
				if t, err := l.D.InspectTask(ctx, recs[i].Task); err == nil {
					live = !t.State.Terminal()
				}
			}
			return &recs[i], live, nil
		}
	}
	return nil, false, nil
}

// Enable records the registration; with no agent running, nothing starts
// it until one does (the entry is Pending).
func (l *Local) Enable(ctx context.Context, file string, spec fsm.Spec) (Entry, error) {
	abs, err := absPath(file)
	if err != nil {
		return Entry{}, err
	}
	rec, live, err := l.record(ctx, spec.Name)
	if err != nil {
		return Entry{}, err
	}
	ch, err := enableChange(rec, "", abs, spec, l.now())
	if err != nil {
		return Entry{}, err
	}
	if ch.NewTask {
		newID := l.NewID
		if newID == nil {
			newID = newTaskID
		}
		ch.Desired.Task = newID(ch.Desired.Name)
	}
	w, err := l.Store.ChangeDesired(ctx, ch.DesiredChange)
	if err != nil {
		return Entry{}, err
	}
	e := entryOfRecord(w[0], live && !ch.NewTask)
	e.Pending = !live || ch.NewTask
	return e, nil
}

// Disable unregisters an enabled task daemonless: the record is marked,
// its task stopped, the record removed (a crash between leaves the mark,
// which the next disable or agent finishes).
func (l *Local) Disable(ctx context.Context, name string) (Entry, error) {
	rec, live, err := l.record(ctx, name)
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
	if live {
		if _, err := l.D.StopTask(ctx, d.Task, 0, 0); err != nil {
			return entryOfRecord(d, true), err
		}
	}
	if _, err := l.Store.ChangeDesired(ctx, store.DesiredChange{Desired: store.Desired{Name: name, Rev: d.Rev}, Delete: true}); err != nil {
		return entryOfRecord(d, false), err
	}
	return entryOfRecord(d, false), nil
}

// StartDesired needs an agent: daemonless, nothing would keep it running.
func (l *Local) StartDesired(_ context.Context, name string) (Entry, error) {
	return Entry{}, fmt.Errorf("%w: starting the desired task %q again is the agent's: run tether agent", ErrNoAgent, name)
}

// Status lists the desired records with their tasks' states (no config
// dir is read daemonless).
func (l *Local) Status(ctx context.Context) (Status, error) {
	recs, err := l.Store.Desired(ctx)
	if err != nil {
		return Status{}, err
	}
	st := Status{Converged: true}
	for _, r := range recs {
		e := entryOfRecord(r, false)
		if r.Task != "" {
			if t, err := l.D.InspectTask(ctx, r.Task); err == nil {
				e.State = t.State
			}
		}
		e.Pending = e.State == fsm.StateNone || r.Disabled
		if e.Pending {
			st.Converged = false
		}
		st.Entries = append(st.Entries, e)
	}
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

func (l *Local) Check(ctx context.Context) (store.Report, error) { return l.Store.Check(ctx) }

func (l *Local) GC(ctx context.Context, olderThan time.Duration) ([]string, error) {
	return l.Store.Remove(ctx, time.Unix(0, l.now()).Add(-olderThan))
}

func (l *Local) Salvage(context.Context) error {
	return fmt.Errorf("%w: salvage works on the store file itself (tether check --salvage)", ErrUnsupported)
}
