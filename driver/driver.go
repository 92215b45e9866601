package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Config configures a Driver. Only StateDir is required.
type Config struct {
	// StateDir holds the store (tether.db) and one private directory per
	// task under tasks/. Created 0700.
	StateDir string
	// Store is the event log; nil opens StateDir/tether.db with
	// StoreOptions. A store passed in is not closed by Close.
	Store        store.Log
	StoreOptions store.Options
	// Logger receives the driver's logs, each line scoped with task_id;
	// nil discards them.
	Logger hclog.Logger
	// Executors is the process world; nil uses real executor processes
	// started with ExecutorCommand (see NewReal).
	Executors Executors
	// ExecutorCommand is the argv prefix that starts a binary in executor
	// mode (see the executor package); used only when Executors is nil.
	ExecutorCommand []string
	// AllowedCaps is the capability allow list for exec tasks; nil uses
	// the executor's default (Nomad's exec default, without net_raw).
	AllowedCaps []string
	// KillTimeout is the default grace between the stop signal and SIGKILL
	// (default 5s); KillSignal the default stop signal (default SIGTERM).
	KillTimeout time.Duration
	KillSignal  syscall.Signal
	// SpawnTimeout bounds an executor's start (default 10s); EffectTimeout
	// bounds launch, attach and kill (default 30s, plus the grace for kill).
	SpawnTimeout  time.Duration
	EffectTimeout time.Duration
	// Hooks crash the driver or inject faults at named points (tests).
	Hooks Hooks
	// Now is the clock (default time.Now); NewNonce makes spawn nonces
	// (default 128 random bits in hex).
	Now      func() time.Time
	NewNonce func() string
}

// Driver runs tasks through executors, with every lifecycle step written
// ahead to the store. It is safe for concurrent use.
type Driver struct {
	cfg      Config
	log      hclog.Logger
	store    store.Log
	ownStore bool
	world    Executors
	hooks    Hooks

	// loops counts effect loops in flight; Close waits for them before it
	// stops supervision.
	loops  sync.WaitGroup
	supCtx context.Context
	supEnd context.CancelCauseFunc
	sups   sync.WaitGroup

	mu     sync.Mutex
	tasks  map[string]*task
	closed bool

	// skipEarlyChecks makes StartTask leave capability checks to the
	// executor (tests of the in-executor failure path).
	skipEarlyChecks bool
}

// task is the driver's runtime for one task: the folded state and the live
// executor handle.
type task struct {
	id  string
	log hclog.Logger

	// loop is a one-slot semaphore: at most one goroutine runs the task's
	// effects at a time.
	loop chan struct{}
	// created is closed once the task-created event is durable (or the
	// start that claimed the id gave up before it).
	created chan struct{}
	// done is closed when the task reaches a terminal state.
	done chan struct{}

	mu       sync.Mutex // guards the fields below; never held across a call into another process
	state    fsm.Task
	h        Executor
	pid      int // task pid reported by a launch whose event may not be recorded
	pidStart uint64
	cancel   context.CancelCauseFunc // cancels the start effect in flight
	sup      bool                    // a supervisor is waiting on h
	starting bool                    // StartTask is driving this task: executor-up leads to the launch intent
	lastErr  error                   // the last start effect's error, for StartTask's caller
}

// Open opens a driver on cfg.StateDir. It does not reconcile anything:
// call Recover to replay the live tasks and reconcile them with reality.
func Open(cfg Config) (*Driver, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("driver: Config.StateDir is required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "tasks"), 0o700); err != nil {
		return nil, fmt.Errorf("driver: create state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("driver: state dir: %w", err)
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
		cfg.EffectTimeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewNonce == nil {
		cfg.NewNonce = randomNonce
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, hooks: cfg.Hooks, tasks: map[string]*task{}}
	d.world = cfg.Executors
	if d.world == nil {
		d.world = NewReal(cfg.StateDir, cfg.ExecutorCommand, cfg.Logger)
	}
	d.store = cfg.Store
	if d.store == nil {
		s, err := store.Open(filepath.Join(cfg.StateDir, "tether.db"), cfg.StoreOptions)
		if err != nil {
			return nil, err
		}
		d.store, d.ownStore = s, true
	}
	d.supCtx, d.supEnd = context.WithCancelCause(context.Background())
	return d, nil
}

// Close stops supervising and releases the store. Tasks keep running: an
// executor whose task is launched outlives the driver, and a later driver
// reattaches to it in Recover. Starts and stops in flight finish first.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.loops.Wait()
	d.supEnd(ErrClosed)
	d.sups.Wait()
	d.mu.Lock()
	for _, t := range d.tasks {
		t.mu.Lock()
		if t.h != nil {
			_ = t.h.Close()
			t.h = nil
		}
		t.mu.Unlock()
	}
	d.mu.Unlock()
	if d.ownStore {
		return d.store.Close()
	}
	return nil
}

// Store returns the driver's event log.
func (d *Driver) Store() store.Log { return d.store }

// TaskDir is the private directory of a task.
func (d *Driver) TaskDir(id string) string { return filepath.Join(d.cfg.StateDir, "tasks", id) }

var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateTaskID refuses ids that are empty, longer than 63 bytes, or
// could escape the state directory ("..", slashes, leading dots).
func ValidateTaskID(id string) error {
	if !taskIDPattern.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidTaskID, id)
	}
	return nil
}

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

// runtime returns the in-memory task, loading it from the store the first
// time.
func (d *Driver) runtime(ctx context.Context, id string) (*task, error) {
	if err := ValidateTaskID(id); err != nil {
		return nil, err
	}
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, ErrClosed
		}
		t, ok := d.tasks[id]
		if !ok {
			defer d.mu.Unlock()
			return d.load(ctx, id)
		}
		d.mu.Unlock()
		// A StartTask may have claimed the id without recording the task
		// yet: wait for the record, so that this call comes after the
		// start (as a second StartTask's ErrTaskExists already does).
		select {
		case <-t.created:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		d.mu.Lock()
		same := d.tasks[id] == t
		d.mu.Unlock()
		if same {
			return t, nil
		}
		// The start gave up before recording anything (or the task was
		// destroyed and forgotten): look again.
	}
}

// load reads a task the driver does not hold from the store. d.mu is held.
func (d *Driver) load(ctx context.Context, id string) (*task, error) {
	st, err := d.store.LoadTask(ctx, id)
	if errors.Is(err, store.ErrUnknownTask) {
		return nil, &TaskError{Task: id, Err: ErrUnknownTask}
	}
	if err != nil {
		return nil, err
	}
	t := d.newTask(id)
	close(t.created)
	t.state = st
	if st.State.Terminal() {
		close(t.done)
	}
	d.tasks[id] = t
	return t, nil
}

func (d *Driver) newTask(id string) *task {
	return &task{id: id, state: fsm.Task{ID: id}, log: d.log.With("task_id", id),
		loop: make(chan struct{}, 1), created: make(chan struct{}), done: make(chan struct{})}
}

// apply steps the task with input and appends the resulting events before
// anything else (write-ahead). It returns false, nil when the input no
// longer applies because the task moved on (a late outcome of an effect
// that a stop overtook); such inputs are logged and dropped.
func (d *Driver) apply(ctx context.Context, t *task, input fsm.Event) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	events, _, err := fsm.Step(t.state, input)
	if errors.Is(err, fsm.ErrIllegalTransition) && t.state.Version > 0 {
		t.log.Debug("dropping input that no longer applies", "event", input.Type.String(), "state", t.state.State.String())
		return false, nil
	}
	if err != nil {
		return false, &TaskError{Task: t.id, State: t.state.State, Err: err}
	}
	if len(events) == 0 {
		return false, nil
	}
	typ := events[0].Type.String()
	if err := d.hooks.fault("append:" + typ); err != nil {
		return false, &TaskError{Task: t.id, State: t.state.State, Err: err}
	}
	d.hooks.crash(crashBeforeAppend + typ)
	if _, err := d.store.Append(ctx, t.id, t.state.Version, events...); err != nil {
		return false, &TaskError{Task: t.id, State: t.state.State, Err: err}
	}
	d.hooks.crash(crashAfterAppend + typ)
	next, err := fsm.FoldAll(t.state, events...)
	if err != nil {
		// Step just validated these events: a failure here is a bug.
		panic(fmt.Sprintf("driver: fold of stepped events failed: %v", err))
	}
	from := t.state.State
	t.state = next
	if next.State != from {
		t.log.Info("transition", "event", typ, "state", next.State.String(), "from", from.String())
	}
	if next.State.Terminal() {
		close(t.done)
	}
	return true, nil
}

// snapshot returns the task's folded state.
func (t *task) snapshot() fsm.Task {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// StartTask records a new task and starts it: it returns once the task is
// running, or with an error once a failed start has been reaped (the
// executor confirmed dead). A spec refused before spawning fails with
// ErrInvalidSpec and nothing is spawned.
func (d *Driver) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	if err := ValidateTaskID(id); err != nil {
		return fsm.Task{}, err
	}
	if spec.Name == "" {
		spec.Name = id
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fsm.Task{}, ErrClosed
	}
	if _, ok := d.tasks[id]; ok {
		d.mu.Unlock()
		return fsm.Task{}, &TaskError{Task: id, Err: ErrTaskExists}
	}
	t := d.newTask(id)
	t.starting = true
	d.tasks[id] = t
	d.loops.Add(1)
	d.mu.Unlock()
	defer d.loops.Done()

	if err := d.create(ctx, t, spec); err != nil {
		return fsm.Task{}, err
	}
	if err := d.validateSpec(spec); err != nil {
		rej := d.event(fsm.EventConfigRejected)
		rej.Reason = err.Error()
		if _, aerr := d.apply(ctx, t, rej); aerr != nil {
			return t.snapshot(), errors.Join(err, aerr)
		}
		return t.snapshot(), &TaskError{Task: id, Err: err}
	}
	intent := d.event(fsm.EventSpawnIntent)
	intent.Nonce = d.cfg.NewNonce()
	if _, err := d.apply(ctx, t, intent); err != nil {
		return t.snapshot(), err
	}
	if err := d.driveWait(ctx, t); err != nil {
		return t.snapshot(), err
	}
	t.mu.Lock()
	st, cause := t.state, t.lastErr
	t.starting = false
	t.mu.Unlock()
	switch {
	case st.State == fsm.StateRunning:
		return st, nil
	case st.State == fsm.StateExited || st.Target == fsm.StateExited:
		// A quick task: it ran, and exited before the start returned.
		return st, nil
	case cause != nil:
		return st, &TaskError{Task: id, State: st.State, Err: fmt.Errorf("%w: %w", ErrStartFailed, cause)}
	default:
		reason := st.Reason
		if reason == "" {
			reason = "ended " + st.State.String()
		}
		return st, &TaskError{Task: id, State: st.State, Err: fmt.Errorf("%w: %s", ErrStartFailed, reason)}
	}
}

// create records the task claimed by StartTask. Whatever the outcome,
// calls waiting for the record (runtime) are released; on failure the
// claim is dropped first, so they find the id unknown (or already in the
// store).
func (d *Driver) create(ctx context.Context, t *task, spec fsm.Spec) error {
	defer close(t.created)
	_, err := d.store.LoadTask(ctx, t.id)
	switch {
	case err == nil:
		err = &TaskError{Task: t.id, Err: ErrTaskExists}
	case errors.Is(err, store.ErrUnknownTask):
		ev := d.event(fsm.EventCreated)
		ev.Spec = &spec
		if _, err = d.apply(ctx, t, ev); err == nil {
			return nil
		}
	}
	d.forget(t.id, t)
	return err
}

func (d *Driver) forget(id string, t *task) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tasks[id] == t {
		delete(d.tasks, id)
	}
}

// validateSpec is the check that can fail before anything is spawned.
func (d *Driver) validateSpec(spec fsm.Spec) error {
	switch spec.Driver {
	case "exec", "raw_exec":
	default:
		return fmt.Errorf("%w: driver %q: use \"exec\" or \"raw_exec\"", ErrInvalidSpec, spec.Driver)
	}
	if spec.Command == "" {
		return fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if spec.KillTimeout < 0 {
		return fmt.Errorf("%w: negative kill_timeout %s", ErrInvalidSpec, spec.KillTimeout)
	}
	if spec.Driver == "exec" && !d.skipEarlyChecks {
		if err := validateCaps(spec.CapAdd, spec.CapDrop, d.cfg.AllowedCaps); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
	}
	return nil
}

// WaitTask waits until the task is terminal and returns its final state.
// A task left owing an effect (an outcome whose append failed) is driven
// on first, and a running task nobody supervises gets a supervisor, so the
// wait cannot hang on a task whose end nobody would notice.
func (d *Driver) WaitTask(ctx context.Context, id string) (fsm.Task, error) {
	t, err := d.runtime(ctx, id)
	if err != nil {
		return fsm.Task{}, err
	}
	if err := d.resume(ctx, t); err != nil {
		return t.snapshot(), err
	}
	select {
	case <-t.done:
		return t.snapshot(), nil
	case <-ctx.Done():
		return t.snapshot(), context.Cause(ctx)
	}
}

// resume runs what the task still owes and makes sure a running task is
// supervised.
func (d *Driver) resume(ctx context.Context, t *task) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.loops.Add(1)
	d.mu.Unlock()
	defer d.loops.Done()
	if t.owes() {
		if err := d.driveWait(ctx, t); err != nil {
			return err
		}
	}
	t.mu.Lock()
	unsupervised := t.state.State == fsm.StateRunning && !t.sup
	t.mu.Unlock()
	if unsupervised {
		if _, err := d.handle(ctx, t); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			// As Recover does: the executor cannot be proven ours and
			// reached, so the task exited (status on disk) or is lost.
			if _, err := d.apply(ctx, t, d.exitedOrLost(ctx, t, err)); err != nil {
				return err
			}
			return d.driveWait(ctx, t)
		}
		d.startSupervisor(t)
	}
	return nil
}

// StopTask stops a task: sig (0: the task's kill_signal, else the
// driver's), then SIGKILL to its whole group after grace (0: the task's
// kill_timeout, else the driver's), then the executor is killed and the
// task recorded stopped. A start in flight is cancelled. Stopping a task
// that is already reaping or terminal waits for it and succeeds.
func (d *Driver) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	t, err := d.runtime(ctx, id)
	if err != nil {
		return fsm.Task{}, err
	}
	st := t.snapshot()
	if sig == 0 {
		sig = d.cfg.KillSignal
		if st.Spec != nil && st.Spec.KillSignal != 0 {
			sig = syscall.Signal(st.Spec.KillSignal)
		}
	}
	if grace <= 0 {
		grace = d.cfg.KillTimeout
		if st.Spec != nil && st.Spec.KillTimeout > 0 {
			grace = st.Spec.KillTimeout
		}
	}
	return d.stop(ctx, t, sig, grace)
}

// DestroyTask kills a task at once (SIGKILL, no grace) and forgets it in
// memory; its log stays in the store until gc removes it. Without force, a
// task that is not terminal is refused.
func (d *Driver) DestroyTask(ctx context.Context, id string, force bool) error {
	t, err := d.runtime(ctx, id)
	if err != nil {
		return err
	}
	if !t.snapshot().State.Terminal() {
		if !force {
			return &TaskError{Task: id, State: t.snapshot().State, Err: errors.New("task is still live; stop it first or destroy with force")}
		}
		if _, err := d.stop(ctx, t, syscall.SIGKILL, 0); err != nil {
			return err
		}
	}
	d.forget(id, t)
	return nil
}

func (d *Driver) stop(ctx context.Context, t *task, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fsm.Task{}, ErrClosed
	}
	d.loops.Add(1)
	d.mu.Unlock()
	defer d.loops.Done()

	in := d.event(fsm.EventStopRequested)
	in.Signal, in.Grace = int(sig), grace
	if _, err := d.apply(ctx, t, in); err != nil {
		return t.snapshot(), err
	}
	t.mu.Lock()
	if t.cancel != nil {
		t.cancel(errors.New("stop requested"))
	}
	t.mu.Unlock()
	if err := d.driveWait(ctx, t); err != nil {
		return t.snapshot(), err
	}
	return t.snapshot(), nil
}

// SignalTask sends sig to a running task's process group.
func (d *Driver) SignalTask(ctx context.Context, id string, sig syscall.Signal) error {
	t, err := d.runtime(ctx, id)
	if err != nil {
		return err
	}
	h, err := d.handle(ctx, t)
	if err != nil {
		return err
	}
	return h.Signal(ctx, sig)
}

// handle returns a connection to the task's executor, reattaching (with the
// identity check) when this driver has none.
func (d *Driver) handle(ctx context.Context, t *task) (Executor, error) {
	t.mu.Lock()
	h, st := t.h, t.state
	t.mu.Unlock()
	if h != nil {
		return h, nil
	}
	if st.State != fsm.StateRunning && st.State != fsm.StateLaunched || st.Executor == nil {
		return nil, &TaskError{Task: t.id, State: st.State, Err: ErrNotRunning}
	}
	h, err := d.world.Reattach(ctx, t.id, *st.Executor)
	if err != nil {
		return nil, &TaskError{Task: t.id, State: st.State, Err: err}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h != nil { // another goroutine reattached first
		_ = h.Close()
		return t.h, nil
	}
	t.h = h
	return h, nil
}

// TaskInfo is what InspectTask reports.
type TaskInfo struct {
	fsm.Task
	// ExecutorAlive is whether the recorded executor is alive now, checked
	// against the process table by identity.
	ExecutorAlive bool
}

// InspectTask returns the task's folded state and whether its executor is
// alive now.
func (d *Driver) InspectTask(ctx context.Context, id string) (TaskInfo, error) {
	t, err := d.runtime(ctx, id)
	if err != nil {
		return TaskInfo{}, err
	}
	info := TaskInfo{Task: t.snapshot()}
	if info.Executor != nil && info.State.OwnsExecutor() {
		info.ExecutorAlive, err = d.world.Alive(ctx, id, *info.Executor)
		if err != nil {
			return info, &TaskError{Task: id, State: info.State, Err: err}
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
