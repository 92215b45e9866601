package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// Config configures a Driver. Only StateDir is required.
type Config struct {
	// StateDir holds the store (tether.db) and one private directory per
	// task under tasks/. A missing one is created 0700; an existing one
	// must be owned by the caller and private (no group or other access),
	// and is used as it is: never chmodded.
	StateDir string
	// Store is the event log; nil opens StateDir/tether.db with
	// StoreOptions. A store passed in is not closed by Close.
	Store        store.Log
	StoreOptions store.Options
	// Logger receives the driver's logs, each line scoped with task_id;
	// nil discards them.
	Logger hclog.Logger
	// World is the process world; nil uses real executor processes
	// started with ExecutorCommand (executor.Real).
	World executor.World
	// ExecutorCommand is the argv prefix that starts a binary in executor
	// mode (see package executor/server); used only when World is nil.
	ExecutorCommand []string
	// AllowedCaps is the capability allow list for exec tasks; nil uses
	// the executor's default (Nomad's exec default, without net_raw). Used
	// only when World is nil (a World has its own).
	AllowedCaps []string
	// ChrootEnv is what an exec task's root is built from: entries "SRC"
	// or "SRC:DST", each bound read-only; nil uses Nomad's chroot_env
	// default (executor.DefaultChroot). Used only when World is nil.
	ChrootEnv []string
	// AllowSeccomp lists what an exec task's seccomp option may name
	// besides the default ("unconfined", profile paths); AllowMissing the
	// parts of the sandbox exec tasks may run without on a host that
	// lacks them ("cgroupns", "keyring"). See executor.Policy. Used only
	// when World is nil.
	AllowSeccomp []string
	AllowMissing []string
	// AllowRead lists host directories a template's source or file, or a
	// local artifact, may be read from besides the task's own and its
	// group's alloc directory (nil: none). Used only when World is nil.
	AllowRead []string
	// AllowDrivers and AllowHostNamespaces: the drivers tasks may use
	// (nil: both) and the namespaces exec tasks may share with the host
	// (nil: none). See executor.Policy. Used only when World is nil.
	AllowDrivers, AllowHostNamespaces []string
	// PrepareTimeout bounds the preparation of a task before its first
	// launch (fetching its artifacts, rendering its templates), on top of
	// EffectTimeout (default 30m, Nomad's artifact read timeout).
	PrepareTimeout time.Duration
	// KillTimeout is the default grace between the stop signal and SIGKILL
	// (default 5s); KillSignal the default stop signal (default SIGTERM).
	KillTimeout time.Duration
	KillSignal  syscall.Signal
	// SpawnTimeout bounds an executor's start (default 10s); EffectTimeout
	// bounds launch, attach and kill (default 30s, plus the grace for
	// kill); ProbeTimeout bounds each question to a live executor during
	// recovery and supervision (hello, status; default 5s), so that a
	// frozen executor makes only its own task unreachable.
	SpawnTimeout  time.Duration
	EffectTimeout time.Duration
	ProbeTimeout  time.Duration
	// Hooks crash the driver or inject faults at named points (tests).
	Hooks Hooks
	// Now is the clock (default time.Now); NewNonce makes spawn nonces
	// (default 128 random bits in hex).
	Now      func() time.Time
	NewNonce func() string
}

// Driver runs tasks through executors, with every lifecycle step written
// ahead to the store. It is safe for concurrent use.
//
// Each task has one owner: a goroutine that receives every input about the
// task (start, stop, wait, recover, the outcomes of its effects, the
// supervisor's report of its exit), is the only writer of its state and the
// only runner of its effects (see owner.go).
type Driver struct {
	cfg      Config
	log      hclog.Logger
	store    store.Log
	ownStore bool
	world    executor.World
	hooks    Hooks

	closing   chan struct{} // closed by Close
	abandoned chan struct{} // closed by Abandon
	owners    sync.WaitGroup

	mu    sync.Mutex
	tasks map[string]*task // tasks with a live owner
	// claims are the tasks Recover is reconciling without an owner
	// (recover.go), each with the channel closed when it lets go (made by
	// the first caller that waits; nil until then): a caller that needs
	// the task's owner waits for that first.
	claims map[string]chan struct{}
	closed bool

	// skipEarlyChecks makes StartTask leave capability checks to the
	// executor (tests of the in-executor failure path).
	skipEarlyChecks bool
}

// task is what callers hold of a task: its owner's inbox and the last
// durable state, for readers that need not ask the owner.
type task struct {
	id   string
	in   chan request
	done chan struct{} // closed when the task is durably terminal
	gone chan struct{} // closed when the owner has exited
	view atomic.Pointer[fsm.Task]
}

func (t *task) snapshot() fsm.Task { return *t.view.Load() }

// Open opens a driver on cfg.StateDir. It does not reconcile anything:
// call Recover to replay the live tasks and reconcile them with reality.
func Open(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("driver: Config.StateDir is required")
	}
	if err := PrepareStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.KillTimeout <= 0 {
		cfg.KillTimeout = 5 * time.Second
	}
	if cfg.KillSignal == 0 {
		cfg.KillSignal = syscall.SIGTERM
	}
	if cfg.SpawnTimeout <= 0 {
		cfg.SpawnTimeout = 10 * time.Second
	}
	if cfg.EffectTimeout <= 0 {
		cfg.EffectTimeout = defaultEffectTimeout
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = defaultProbeTimeout
	}
	if cfg.PrepareTimeout <= 0 {
		cfg.PrepareTimeout = 30 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewNonce == nil {
		cfg.NewNonce = randomNonce
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, hooks: cfg.Hooks, tasks: map[string]*task{}, claims: map[string]chan struct{}{},
		closing: make(chan struct{}), abandoned: make(chan struct{})}
	d.world = cfg.World
	if d.world == nil {
		policy := executor.Policy{AllowedCaps: cfg.AllowedCaps, Chroot: slices.Clone(cfg.ChrootEnv),
			AllowSeccomp: slices.Clone(cfg.AllowSeccomp), AllowMissing: slices.Clone(cfg.AllowMissing), AllowRead: slices.Clone(cfg.AllowRead),
			AllowDrivers: slices.Clone(cfg.AllowDrivers), AllowHostNamespaces: slices.Clone(cfg.AllowHostNamespaces)}
		if err := executor.ValidatePolicy(policy); err != nil {
			return nil, fmt.Errorf("driver: Config's policy: %w", err)
		}
		d.world = &executor.Real{StateDir: cfg.StateDir, Command: cfg.ExecutorCommand, Logger: cfg.Logger, Policy: policy}
	}
	d.store = cfg.Store
	if d.store == nil {
		s, err := store.Open(statedir.Layout{Dir: cfg.StateDir}.Store(), cfg.StoreOptions)
		if err != nil {
			return nil, err
		}
		d.store, d.ownStore = s, true
	}
	return d, nil
}

// PrepareStateDir makes sure dir can serve as a state directory (see
// statedir.Layout.Prepare): a missing one is created 0700, an existing one
// must be private and the caller's, and is never chmodded.
func PrepareStateDir(dir string) error { return statedir.Layout{Dir: dir}.Prepare() }

// Close stops supervising and releases the store. Tasks keep running: an
// executor whose task is launched outlives the driver, and a later driver
// reattaches to it in Recover. Starts, stops and recoveries in flight finish
// first.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.closing)
	d.mu.Unlock()
	d.owners.Wait()
	if d.ownStore {
		return d.store.Close()
	}
	return nil
}

// defaultProbeTimeout is Config.ProbeTimeout's default, and
// defaultEffectTimeout Config.EffectTimeout's.
const (
	defaultProbeTimeout  = 5 * time.Second
	defaultEffectTimeout = 30 * time.Second
)

// isClosing reports whether Close has begun.
func (d *Driver) isClosing() bool {
	select {
	case <-d.closing:
		return true
	default:
		return false
	}
}

// Abandon stops the driver at once, as a crash of its process would: every
// owner stops where it is, nothing more is appended, performed or answered
// (calls in flight return only when their context ends), and connections
// and task locks are let go of as the kernel would. The store is not
// closed. It is for simulations that crash a driver in-process (see
// proptest); a real agent calls Close.
func (d *Driver) Abandon() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.abandoned)
	}
	d.mu.Unlock()
}

// Store returns the driver's event log.
func (d *Driver) Store() store.Log { return d.store }

// TaskDir is the private directory of a task.
func (d *Driver) TaskDir(id string) string {
	return statedir.Layout{Dir: d.cfg.StateDir}.Task(id).Dir()
}

// ValidateTaskID refuses ids that are empty, longer than 63 bytes, or
// could escape the state directory (see statedir.ValidateTaskID).
func ValidateTaskID(id string) error { return statedir.ValidateTaskID(id) }

func randomNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

func (d *Driver) event(typ fsm.EventType) fsm.Event {
	return fsm.Event{Type: typ, Time: d.cfg.Now().UnixNano()}
}

// exited is the task-exited event of exit x: stamped with when the task
// exited (x.At, as its executor saw it), and with its append time beside
// it when that is later, so that a task nobody watched is recorded as
// ended when it ended, not when a command next looked.
func (d *Driver) exited(x fsm.ExitStatus) fsm.Event {
	ev := d.event(fsm.EventTaskExited)
	if x.At > 0 && x.At < ev.Time {
		ev.Time, ev.Recorded = x.At, ev.Time
	}
	ev.Exit = &x
	return ev
}

// lookup returns the task's live owner, starting one (from the store) when
// the driver has none. A task the store does not know is ErrUnknownTask.
func (d *Driver) lookup(ctx context.Context, id string) (*task, error) {
	if err := ValidateTaskID(id); err != nil {
		return nil, err
	}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, ErrClosed
		}
		if t := d.tasks[id]; t != nil {
			d.mu.Unlock()
			return t, nil
		}
		if c, ok := d.claims[id]; ok {
			if c == nil {
				c = make(chan struct{})
				d.claims[id] = c
			}
			d.mu.Unlock()
			select { // Recover is at it: its owner, if it needs one, comes after
			case <-c:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		d.mu.Unlock()
		st, err := d.store.LoadTask(ctx, id)
		if errors.Is(err, store.ErrUnknownTask) {
			return nil, &TaskError{Task: id, Err: ErrUnknownTask}
		}
		if err != nil {
			return nil, &TaskError{Task: id, Err: err}
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, ErrClosed
		}
		if _, claimed := d.claims[id]; d.tasks[id] == nil && !claimed {
			t := d.startOwner(st, nil)
			d.mu.Unlock()
			return t, nil
		}
		d.mu.Unlock() // another call started an owner meanwhile: use it
	}
}

// ask sends req to the task's owner and waits for its reply. An owner that
// exited meanwhile (its task became terminal) is replaced from the store.
func (d *Driver) ask(ctx context.Context, id string, req request) (reply, error) {
	req.reply = make(chan reply, 1)
	req.cancel = ctx.Done()
	for {
		t, err := d.lookup(ctx, id)
		if err != nil {
			return reply{}, err
		}
		select {
		case t.in <- req:
		case <-t.gone:
			continue
		case <-ctx.Done():
			return reply{task: t.snapshot()}, context.Cause(ctx)
		}
		select {
		case r := <-req.reply:
			return r, nil
		case <-ctx.Done():
			return reply{task: t.snapshot()}, context.Cause(ctx)
		}
	}
}

// StartTask records a new task and starts it: it returns once the task is
// running, or with an error once a failed start has been reaped (the
// executor confirmed dead). A task that ran and exited before it could be
// seen running is a start that worked: its exited state is returned with a
// nil error. A spec refused before spawning fails with ErrInvalidSpec and
// nothing is spawned.
func (d *Driver) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	return d.begin(ctx, id, request{kind: inStart, spec: spec})
}

// startTask is StartTask recording the task it replaces, if any.
func (d *Driver) startTask(ctx context.Context, id string, spec fsm.Spec, replaces string) (fsm.Task, error) {
	return d.begin(ctx, id, request{kind: inStart, spec: spec, link: replaces})
}

// begin serves a start or a create: the first request of a new task's
// owner.
func (d *Driver) begin(ctx context.Context, id string, req request) (fsm.Task, error) {
	if err := ValidateTaskID(id); err != nil {
		return fsm.Task{}, err
	}
	if req.spec.Name == "" {
		req.spec.Name = id
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fsm.Task{}, ErrClosed
	}
	if _, claimed := d.claims[id]; d.tasks[id] != nil || claimed {
		d.mu.Unlock()
		return fsm.Task{}, &TaskError{Task: id, Err: ErrTaskExists}
	}
	req.reply = make(chan reply, 1)
	t := d.startOwner(fsm.Task{ID: id}, &req) // the owner serves it before any other request
	d.mu.Unlock()
	select {
	case r := <-req.reply:
		return r.task, r.err
	case <-ctx.Done():
		return t.snapshot(), context.Cause(ctx)
	}
}

// CreateTask records a task without starting it: task-created alone (with
// config-rejected when its spec is refused, as StartTask does). The task
// waits in created until StartCreated starts it: the tasks of a group are
// all recorded before any of them is spawned, and each waits for its turn
// (see RunGroup). Recovery leaves a waiting task of a group to its group.
func (d *Driver) CreateTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	return d.begin(ctx, id, request{kind: inCreate, spec: spec})
}

// StartCreated starts a task CreateTask recorded, as StartTask starts a
// new one: it returns once the task is running (or has exited), or with
// an error once a failed start has been reaped. A task that is no longer
// waiting (started or settled meanwhile) is ErrNotWaiting, with its state.
func (d *Driver) StartCreated(ctx context.Context, id string) (fsm.Task, error) {
	r, err := d.ask(ctx, id, request{kind: inStartCreated})
	if err != nil {
		return r.task, err
	}
	return r.task, r.err
}

// CheckSpec is the check a start makes before anything is recorded or
// spawned (fsm.Spec.Validate, then what the spec needs of this host):
// a caller recording several tasks at once (a group) checks them all
// first, so that a refused one records nothing.
func (d *Driver) CheckSpec(spec fsm.Spec) error { return d.validateSpec(spec) }

// validateSpec is the check that can fail before anything is spawned.
func (d *Driver) validateSpec(spec fsm.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if d.skipEarlyChecks {
		return nil
	}
	if err := d.world.CheckSpec(spec); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

// WaitTask waits until the task is terminal and returns its final state.
// A task nobody is driving is reconciled first (as Recover would) and a
// running task nobody supervises gets a supervisor, so the wait cannot
// hang on a task whose end nobody would notice.
func (d *Driver) WaitTask(ctx context.Context, id string) (fsm.Task, error) {
	r, err := d.ask(ctx, id, request{kind: inWatch})
	if err != nil {
		return r.task, err
	}
	return r.task, r.err
}

// FollowTask is WaitTask that also calls fn with the task's state when
// the follow begins and after each durable change until the task is
// terminal, on the caller's goroutine (never concurrently). Changes may be
// coalesced: fn sees the latest state, and TaskEvents has every event. fn
// is not called for a task that is terminal already. The task is driven
// while fn runs.
func (d *Driver) FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error) {
	req := request{kind: inWatch, reply: make(chan reply, 1), progress: make(chan fsm.Task, 1), cancel: ctx.Done()}
	for {
		t, err := d.lookup(ctx, id)
		if err != nil {
			return fsm.Task{}, err
		}
		select {
		case t.in <- req:
		case <-t.gone:
			continue
		case <-ctx.Done():
			return t.snapshot(), context.Cause(ctx)
		}
		for {
			select {
			case r := <-req.reply:
				select {
				case st := <-req.progress:
					fn(st) // the change that made it terminal, if not yet seen
				default:
				}
				return r.task, r.err
			case st := <-req.progress:
				fn(st)
			case <-ctx.Done():
				return t.snapshot(), context.Cause(ctx)
			}
		}
	}
}

// StopTask stops a task: sig (0: the task's kill_signal, else the
// driver's), then SIGKILL to all its processes after grace (0: the task's
// kill_timeout, else the driver's), then the executor is killed and the
// task recorded stopped. A start in flight is cancelled. Stopping a task
// that is already reaping escalates to this stop's signal and grace when
// they are sooner, then waits for it; a terminal task is returned as it is.
func (d *Driver) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	r, err := d.ask(ctx, id, request{kind: inStop, sig: sig, grace: grace})
	if err != nil {
		return r.task, err
	}
	return r.task, r.err
}

// stopDefaults fills a stop's signal and grace from the task's spec, else
// the driver's defaults.
func (d *Driver) stopDefaults(spec *fsm.Spec, sig syscall.Signal, grace time.Duration) (syscall.Signal, time.Duration) {
	if sig == 0 {
		sig = d.cfg.KillSignal
		if spec != nil && spec.KillSignal != 0 {
			sig = syscall.Signal(spec.KillSignal)
		}
	}
	if grace <= 0 {
		grace = d.cfg.KillTimeout
		if spec != nil && spec.KillTimeout > 0 {
			grace = spec.KillTimeout
		}
	}
	return sig, grace
}

// DestroyTask kills a task at once (SIGKILL, no grace). Without force, a
// task that is not terminal is refused. Its log stays in the store until
// gc removes it.
func (d *Driver) DestroyTask(ctx context.Context, id string, force bool) error {
	info, err := d.InspectTask(ctx, id)
	if err != nil {
		return err
	}
	if info.State.Terminal() {
		return nil
	}
	if !force {
		return &TaskError{Task: id, State: info.State, Err: errors.New("task is still live; stop it first or destroy with force")}
	}
	_, err = d.StopTask(ctx, id, syscall.SIGKILL, time.Nanosecond)
	return err
}

// SignalTask sends sig to a running task's process group (commands run
// with ExecTask are not in it). It needs no owner: it reattaches through
// the recorded identity (bounded by ProbeTimeout) and asks the executor,
// which signals each member through a pidfd. A task that is not running
// is ErrNotRunning in a *TaskError naming its state (restarting too,
// when the executor is waiting out a restart's delay); an executor that
// cannot be reached is an error saying so.
func (d *Driver) SignalTask(ctx context.Context, id string, sig syscall.Signal) error {
	return d.signalTask(ctx, id, sig, false)
}

// SignalMain sends sig to a running task's main process only (the one its
// executor launched, through its pidfd), not to the rest of its process
// group. Otherwise as SignalTask.
func (d *Driver) SignalMain(ctx context.Context, id string, sig syscall.Signal) error {
	return d.signalTask(ctx, id, sig, true)
}

func (d *Driver) signalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error {
	h, st, err := d.attachRunning(ctx, id)
	if err != nil {
		return err
	}
	defer h.Close()
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProbeTimeout)
	defer cancel()
	if err := h.Signal(pctx, sig, main); err != nil {
		return runningErr(id, st, err)
	}
	return nil
}

// attachRunning connects to the executor of a task the log says is
// running, through its recorded identity (the hello bounded by
// ProbeTimeout; the connection then lasts until Close).
func (d *Driver) attachRunning(ctx context.Context, id string) (executor.Conn, fsm.Task, error) {
	info, err := d.InspectTask(ctx, id)
	if err != nil {
		return nil, fsm.Task{}, err
	}
	h, err := attach(ctx, d.world, info.Task, d.cfg.ProbeTimeout)
	return h, info.Task, err
}

// attach reattaches to the executor of a task that is running (or
// launched), proving its identity, within probe.
func attach(ctx context.Context, world executor.World, st fsm.Task, probe time.Duration) (executor.Conn, error) {
	if st.State != fsm.StateRunning && st.State != fsm.StateLaunched || st.Executor == nil {
		return nil, &TaskError{Task: st.ID, State: st.State, Err: ErrNotRunning}
	}
	pctx, cancel := context.WithTimeout(ctx, probe)
	defer cancel()
	h, err := world.Reattach(pctx, st.ID, *st.Executor)
	if err != nil {
		return nil, &TaskError{Task: st.ID, State: st.State,
			Err: fmt.Errorf("%w (pid %d): %w", ErrUnreachable, st.Executor.PID, err)}
	}
	return h, nil
}

// runningErr is the error of an executor's answer about a task the log
// says is running: one it is restarting or that has exited is
// ErrNotRunning in the state it is in.
func runningErr(id string, st fsm.Task, err error) error {
	switch {
	case errors.Is(err, executor.ErrRestarting):
		return &TaskError{Task: id, State: fsm.StateRestarting, Err: fmt.Errorf("%w: %w", ErrNotRunning, err)}
	case errors.Is(err, executor.ErrTaskExited), errors.Is(err, executor.ErrNotLaunched):
		return &TaskError{Task: id, State: st.State, Err: fmt.Errorf("%w: %w", ErrNotRunning, err)}
	}
	return &TaskError{Task: id, State: st.State, Err: err}
}

// TaskInfo is what InspectTask reports.
type TaskInfo struct {
	fsm.Task
	// ExecutorAlive is whether the recorded executor is alive now, checked
	// against the process table by identity.
	ExecutorAlive bool
	// Unfolded is how many entries of the executor's journal (the
	// restarts it performed, and its runs' readiness, while no driver
	// watched) the log does not hold yet: Reconcile folds them.
	Unfolded int
}

// InspectTask returns the task's durable state and whether its executor is
// alive now. It changes nothing.
func (d *Driver) InspectTask(ctx context.Context, id string) (TaskInfo, error) {
	if err := ValidateTaskID(id); err != nil {
		return TaskInfo{}, err
	}
	var info TaskInfo
	d.mu.Lock()
	t := d.tasks[id]
	d.mu.Unlock()
	switch {
	case t != nil && t.snapshot().State == fsm.StateNone:
		// A start has claimed the id and not recorded it yet: the answer
		// comes after it (as a second StartTask's ErrTaskExists does).
		r, err := d.ask(ctx, id, request{kind: inInspect})
		if err == nil {
			err = r.err
		}
		if err != nil {
			return TaskInfo{}, err
		}
		info.Task = r.task
	case t != nil:
		info.Task = t.snapshot()
	default:
		st, err := d.store.LoadTask(ctx, id)
		if errors.Is(err, store.ErrUnknownTask) {
			return TaskInfo{}, &TaskError{Task: id, Err: ErrUnknownTask}
		}
		if err != nil {
			return TaskInfo{}, &TaskError{Task: id, Err: err}
		}
		info.Task = st
	}
	if info.State == fsm.StateNone {
		return TaskInfo{}, &TaskError{Task: id, Err: ErrUnknownTask}
	}
	if info.Executor != nil && info.State.OwnsExecutor() {
		alive, err := d.world.Alive(ctx, id, *info.Executor)
		if err != nil {
			return info, &TaskError{Task: id, State: info.State, Err: err}
		}
		info.ExecutorAlive = alive
		if journals(info.Spec) {
			// Read, not believed: a journal that does not match the
			// identity counts as nothing here (Reconcile says why).
			if entries, err := d.world.Journal(ctx, id, *info.Executor); err == nil {
				info.Unfolded = max(0, len(entries)-info.Task.RestartEvents())
			}
		}
	}
	return info, nil
}

// TaskEvents returns the task's event log.
func (d *Driver) TaskEvents(ctx context.Context, id string) ([]fsm.Event, error) {
	if err := ValidateTaskID(id); err != nil {
		return nil, err
	}
	evs, err := d.store.Load(ctx, id)
	if errors.Is(err, store.ErrUnknownTask) {
		return nil, &TaskError{Task: id, Err: ErrUnknownTask}
	}
	return evs, err
}

// Tasks lists the ids of the tasks in the store, live ones only unless all.
func (d *Driver) Tasks(ctx context.Context, all bool) ([]string, error) {
	var ids []string
	add := func(id string) error { ids = append(ids, id); return nil }
	var err error
	if all {
		err = d.store.All(ctx, add)
	} else {
		err = d.store.Live(ctx, add)
	}
	sort.Strings(ids)
	return ids, err
}
