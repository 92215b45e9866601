package proptest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// TestingT is the part of *testing.T (and *rapid.T) the harness uses.
type TestingT interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Outcome is what one driver call of a step did.
type Outcome struct {
	Err  error
	Died bool // its generation crashed before it returned
	Hung bool // it neither returned nor died (a liveness violation)
}

// Step is what a step did.
type Step struct {
	Plan     Plan
	Outcomes []Outcome
	Crashed  bool     // the plan's crash fired
	CrashAt  Point    // where it fired (its name resolved when the plan said Any)
	Died     bool     // the plan's executor deaths fired
	Fired    []string // the faults that fired
	Trace    []Point  // every crash point hit, in order
	Faults   []Point  // every fault point hit, in order
	Turns    int      // the turns the step took (see the scheduler)
}

// Clean reports whether the step ran with no fault, no crash and no
// executor death injected.
func (s Step) Clean() bool { return !s.Crashed && !s.Died && len(s.Fired) == 0 }

// Options configure a Harness.
type Options struct {
	// Dir is the driver's state directory (it must exist); with Bolt, the
	// store file tether.db is there too.
	Dir string
	// Bolt runs the driver on the real bbolt store (store.Store, NoSync)
	// in Dir, closed and reopened by every generation; otherwise on a
	// MemLog, a simulated log with the same contract.
	Bolt bool
	// Cgroups gives the simulated host cgroups (World.SetCgroups).
	Cgroups bool
	// NoLease turns the executors' lease off (World.SetLease).
	NoLease bool
	// OldExecutors makes the executors journal no readiness, as those of
	// a tether before protocol 10 (World.SetOldExecutors).
	OldExecutors bool
}

// Harness runs a driver over a simulated World and an event log (the real
// bbolt store, or a MemLog), injects faults, crashes and executor deaths by
// Plan, and checks the design's invariants.
//
// It must run inside a testing/synctest bubble (see rapid.SyncTest, or
// Check and Enumerate, which make one): a step returns once every goroutine
// of the driver is idle, with the bubble's fake clock advanced past any
// back-off or timeout the driver waits out.
type Harness struct {
	World *World

	opts     Options
	path     string
	root     context.Context
	stopRoot context.CancelFunc

	clock   atomic.Int64
	nonces  atomic.Int64
	adopted int

	mu         sync.Mutex // guards the fields below; driver goroutines touch them through hooks
	plan       Plan
	hits       map[string]int
	trace      []Point
	faultTrace []Point
	fired      []string
	crashed    bool
	died       bool
	crashAt    Point
	anyCrash   int // crash points hit in the step, every name
	anyFault   int // fault points hit in the step, every name
	violations []string
	ledger     map[string][]fsm.Event
	longest    int            // the most crash points one step hit so far
	escapes    map[int]string // escaped descendants seen outliving their task (no cgroup); under World.mu

	// What the checks proved already (see checkStates); touched by the
	// checks only, which run between steps.
	verified    map[string]verified
	sameSpecs   map[[2]*fsm.Spec]bool
	seenTrusted int
	seenSignals int

	gens int
	gen  *Generation
	gctx context.Context
	gend context.CancelFunc
	d    *driver.Driver
	st   *store.Store // Bolt: the current generation's store (guarded by mu: a maintenance replaces it)
	mem  *MemLog      // otherwise: the log, across generations
	// gate is open (nil) but while a maintenance runs: then the store's
	// users wait for it to close (guarded by mu).
	gate chan struct{}
	// onCrash is the current generation's crash point, for a maintenance.
	onCrash func(point string)
	// gcRemoved are the tasks a maintenance removed (ended, so their
	// processes are held to the rule of a terminal task).
	gcRemoved map[string]bool

	// Reached counts every crash point hit over the harness's life.
	Reached map[string]int

	// sched orders the contacts of the driver's goroutines with the
	// outside (see the scheduler), so that a step is a function of its
	// plan.
	sched *scheduler
	turns int           // the most turns one step took so far
	work  chan func()   // to an idle worker (see spawn)
	quit  chan struct{} // closed by Close: the workers end

	// commits is held shared by every append in flight and exclusively by
	// a crash, so that a generation dies between commits, never inside
	// one: what it committed stands, and nothing it had not begun lands.
	commits sync.RWMutex
}

// New opens a harness on the real bbolt store in dir (which must exist)
// with a first driver generation.
func New(t TestingT, dir string) *Harness { return Open(t, Options{Dir: dir, Bolt: true}) }

// Open opens a harness with a first driver generation.
func Open(t TestingT, o Options) *Harness {
	t.Helper()
	h := &Harness{World: NewWorld(), opts: o, path: filepath.Join(o.Dir, "tether.db"),
		hits: map[string]int{}, ledger: map[string][]fsm.Event{}, Reached: map[string]int{},
		escapes: map[int]string{}, verified: map[string]verified{}, sameSpecs: map[[2]*fsm.Spec]bool{}}
	h.sched = newScheduler()
	h.work, h.quit = make(chan func()), make(chan struct{})
	h.World.sched = h.sched
	h.World.SetLease(!o.NoLease)
	h.World.SetCgroups(o.Cgroups)
	h.World.SetOldExecutors(o.OldExecutors)
	h.World.BeforeEffect = h.writeAhead
	h.World.Fault = h.worldFault
	h.World.ExecutorCrash = func(point string) bool {
		crash, die := h.hitCrash(point)
		return crash || die
	}
	if !o.Bolt {
		h.mem = NewMemLog()
	}
	h.root, h.stopRoot = context.WithCancel(context.Background())
	if err := h.newGeneration(); err != nil {
		t.Fatalf("proptest: open: %v", err)
	}
	return h
}

// Driver is the current generation's driver (nil between a crash and the
// next Recover).
func (h *Harness) Driver() *driver.Driver {
	if h.gen == nil || h.gen.Dead() {
		return nil
	}
	return h.d
}

// Alive reports whether the current driver generation is alive.
func (h *Harness) Alive() bool { return h.gen != nil && !h.gen.Dead() }

// Generation is the number of driver generations opened so far.
func (h *Harness) Generation() int { return h.gens }

// Longest is the most crash points one step has hit so far: a crash drawn
// as the n-th point of a step whatever its name reaches every point of a
// step when n ranges up to it.
func (h *Harness) Longest() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.longest
}

// Turns is the most turns one step has taken so far (see the scheduler):
// a call delayed, or a switch drawn, up to it reaches every turn of a
// step.
func (h *Harness) Turns() int { return h.turns }

func (h *Harness) newGeneration() error {
	h.gens++
	g := h.World.NewGeneration(h.gens)
	g.sched = h.sched
	gctx, gend := context.WithCancel(h.root)
	// onCrash is a crash point reached: the plan may kill the executors
	// there, or the generation (as SIGKILL would).
	onCrash := func(point string) {
		crash, die := h.hitCrash(point)
		if die {
			h.World.KillExecutors()
		}
		if crash {
			g.Kill()   // first: no acknowledgement after this point
			h.freeze() // then: every commit in flight is done, no other begins
			gend()
			runtime.Goexit()
		}
	}
	var log store.Log = h.mem
	if h.opts.Bolt {
		if st := h.store(); st != nil {
			if err := st.Close(); err != nil {
				gend()
				return err
			}
			h.setStore(nil)
		}
		// A maintenance's durable steps are crash points too; it runs
		// in one turn (see maintain), so they do not park.
		st, err := store.Open(h.path, store.Options{NoSync: true, Crash: onCrash})
		if err != nil {
			gend()
			return err
		}
		h.setStore(st)
		log = nil // genLog reads the harness's store, which a maintenance replaces
	}
	hooks := driver.Hooks{
		Crash: func(point, task string) {
			g.enter(point, task)
			onCrash(point)
		},
		Fault: func(point, task string) error {
			g.enter(point, task)
			if fire, _ := h.hitFault(point); fire {
				return ErrFault
			}
			return nil
		},
	}
	d, err := driver.Open(driver.Config{
		StateDir: h.opts.Dir,
		Store:    &genLog{h: h, g: g, s: log},
		World:    h.World.View(g),
		Hooks:    hooks,
		Now: func() time.Time {
			return time.Unix(1_700_000_000, 0).Add(time.Duration(h.clock.Add(1)) * time.Millisecond)
		},
		NewNonce: func() string { return fmt.Sprintf("nonce-%04d", h.nonces.Add(1)) },
	})
	if err != nil {
		gend()
		if st := h.store(); st != nil {
			_ = st.Close()
			h.setStore(nil)
		}
		return err
	}
	h.gen, h.gctx, h.gend, h.d = g, gctx, gend, d
	h.onCrash = onCrash
	return nil
}

// freeze waits for the commits in flight; the generation is dead already,
// so no other begins.
func (h *Harness) freeze() {
	h.commits.Lock()
	//lint:ignore SA2001 the empty critical section is the point: a barrier that waits for the commits in flight
	h.commits.Unlock()
}

func (h *Harness) hitCrash(point string) (crash, die bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits["crash:"+point]++
	n := h.hits["crash:"+point]
	h.Reached[point]++
	h.anyCrash++
	h.trace = append(h.trace, Point{point, n})
	if !h.died && h.plan.Die.at(point, n, h.anyCrash) {
		h.died, die = true, true
	}
	if !h.crashed && h.plan.Crash.at(point, n, h.anyCrash) {
		h.crashed, h.crashAt, crash = true, Point{point, n}, true
	}
	return crash, die
}

func (h *Harness) hitFault(point string) (fire, hang bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits["fault:"+point]++
	n := h.hits["fault:"+point]
	h.anyFault++
	h.faultTrace = append(h.faultTrace, Point{point, n})
	fire, hang = h.plan.fault(point, n, h.anyFault)
	if fire {
		name := Point{point, n}.String()
		if hang {
			name = Point{point + HangSuffix, n}.String()
		}
		h.fired = append(h.fired, name)
	}
	return fire, hang
}

// worldFault is the world's fault hook.
func (h *Harness) worldFault(op string) WorldFault {
	switch fire, hang := h.hitFault(worldPrefix + op); {
	case hang:
		return FaultHang
	case fire:
		return FaultFail
	}
	return NoFault
}

func (h *Harness) violate(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// Call is one driver call of a step.
type Call struct {
	Do func(ctx context.Context, d *driver.Driver) error
	// Waits names the task a WaitTask waits for: such a call may still be
	// blocked when the step is over if that task is not terminal (it is
	// then cancelled, not counted as hung).
	Waits string
}

// Run performs one step: the calls run concurrently on the current
// generation under plan (their contacts with the outside one turn at a
// time, in the order the plan makes: see the scheduler), and Run returns
// once the driver is idle.
func (h *Harness) Run(plan Plan, calls ...Call) Step {
	h.sched.begin(plan.Order)
	h.mu.Lock()
	h.plan, h.hits, h.trace, h.faultTrace, h.fired, h.crashed, h.died = plan, map[string]int{}, nil, nil, nil, false, false
	h.crashAt, h.anyCrash, h.anyFault = Point{}, 0, 0
	h.mu.Unlock()

	g, d := h.gen, h.d
	ctx, cancel := context.WithCancel(h.gctx)
	defer cancel()
	chans := make([]chan error, len(calls))
	if !g.Dead() {
		for i, call := range calls {
			ch := make(chan error, 1)
			chans[i] = ch
			delay := 0
			if i < len(plan.Delays) {
				delay = plan.Delays[i]
			}
			h.spawn(func() {
				h.sched.park("call", callNames[min(i, len(callNames)-1)], delay)
				ch <- call.Do(ctx, d)
			})
		}
	}
	h.sched.settle()
	s := Step{Plan: plan, Outcomes: make([]Outcome, len(calls))}
	hung, blocked := false, false
	for i, ch := range chans {
		if ch == nil {
			s.Outcomes[i].Died = true
			continue
		}
		select {
		case err := <-ch:
			if g.Dead() && errors.Is(err, context.Canceled) {
				// The call was waiting for an owner of the dead
				// generation: it died with its process.
				s.Outcomes[i].Died = true
				break
			}
			s.Outcomes[i].Err = err
		default:
			switch {
			case g.Dead():
				s.Outcomes[i].Died = true
			case calls[i].Waits != "" && !h.terminal(calls[i].Waits):
				s.Outcomes[i].Err = errStillWaiting
				blocked = true
			default:
				s.Outcomes[i].Hung, hung = true, true
			}
		}
	}
	if blocked && !hung {
		cancel()
		h.sched.settle()
	}
	if hung {
		cancel()
		h.sched.settle()
		h.violate("liveness: a driver call neither returned nor crashed under %s", plan)
	}

	h.mu.Lock()
	h.plan = Plan{}
	s.Crashed, s.Died, s.Fired, s.CrashAt = h.crashed, h.died, h.fired, h.crashAt
	s.Trace, s.Faults = h.trace, h.faultTrace
	h.longest = max(h.longest, len(h.trace))
	h.mu.Unlock()
	if g.Dead() {
		d.Abandon() // its owners stop where they are, as the process's threads would
		h.sched.settle()
		h.release()
	}
	s.Turns = h.sched.end()
	h.turns = max(h.turns, s.Turns)
	return s
}

// callNames name the calls of a step at their first turn.
var callNames = []string{"00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10+"}

// settle runs fn (which may call the driver) in a goroutine of its own,
// the driver's contacts taking turns, until the bubble is idle again, and
// reports whether fn returned.
func (h *Harness) settle(fn func()) bool {
	h.sched.begin(nil)
	done := make(chan struct{})
	h.spawn(func() {
		defer close(done)
		fn()
	})
	h.sched.settle()
	h.sched.end()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// spawn runs fn in one of the harness's workers: goroutines kept from step
// to step, so that a call does not pay for a new goroutine and the growth
// of its stack every time; one is started when none is idle.
func (h *Harness) spawn(fn func()) {
	select {
	case h.work <- fn: // an idle worker takes it
	default:
		go h.worker(fn)
	}
}

// worker runs fn, then whatever is handed to it, until the harness
// closes. (A call whose generation dies ends its worker, as it would any
// goroutine of a dead process.)
func (h *Harness) worker(fn func()) {
	for {
		fn()
		select {
		case fn = <-h.work:
		case <-h.quit:
			return
		}
	}
}

// release lets go of a dead generation's store file, as the kernel would,
// so that the next generation can open it.
func (h *Harness) release() {
	if st := h.store(); st != nil {
		_ = st.Close()
		h.setStore(nil)
	}
}

// Start starts the tasks concurrently.
func (h *Harness) Start(plan Plan, ids []string, specs []fsm.Spec) Step {
	calls := make([]Call, len(ids))
	for i := range ids {
		calls[i] = StartCall(ids[i], specs[i])
	}
	return h.Run(plan, calls...)
}

// errStillWaiting is the outcome of a WaitTask whose task had not ended
// when its step was over.
var errStillWaiting = errors.New("proptest: still waiting when the step ended (its task is live)")

// terminal reports whether task's log is terminal.
func (h *Harness) terminal(task string) bool {
	var st fsm.Task
	_ = h.withLog(func(l store.Log) error {
		var err error
		st, err = l.LoadTask(context.Background(), task)
		return err
	})
	return st.State.Terminal()
}

// StartCall is a StartTask call.
func StartCall(id string, spec fsm.Spec) Call {
	return Call{Do: func(ctx context.Context, d *driver.Driver) error {
		_, err := d.StartTask(ctx, id, spec)
		return err
	}}
}

// StartReadyCall is a StartTask call followed by WaitReady (a notify
// task's start as tether start makes it: it returns once the ready event
// is recorded, from the executor's journal by the task's supervisor, or
// by WaitReady itself for an executor that journals none).
func StartReadyCall(id string, spec fsm.Spec) Call {
	return Call{Do: func(ctx context.Context, d *driver.Driver) error {
		if _, err := d.StartTask(ctx, id, spec); err != nil {
			return err
		}
		_, err := d.WaitReady(ctx, id)
		return err
	}}
}

// StopCall is a StopTask call with the task's default signal and grace.
func StopCall(id string) Call {
	return Call{Do: func(ctx context.Context, d *driver.Driver) error {
		_, err := d.StopTask(ctx, id, 0, 0)
		return err
	}}
}

// WaitCall is a WaitTask call.
func WaitCall(id string) Call {
	return Call{Waits: id, Do: func(ctx context.Context, d *driver.Driver) error {
		_, err := d.WaitTask(ctx, id)
		return err
	}}
}

// InspectCall is an InspectTask call.
func InspectCall(id string) Call {
	return Call{Do: func(ctx context.Context, d *driver.Driver) error {
		_, err := d.InspectTask(ctx, id)
		return err
	}}
}

// RecoverCall is a Recover call.
func RecoverCall() Call {
	return Call{Do: func(ctx context.Context, d *driver.Driver) error {
		_, err := d.Recover(ctx)
		return err
	}}
}

// DoCall is any other call.
func DoCall(fn func(ctx context.Context, d *driver.Driver) error) Call { return Call{Do: fn} }

// Stop stops the tasks concurrently.
func (h *Harness) Stop(plan Plan, ids ...string) Step {
	calls := make([]Call, len(ids))
	for i := range ids {
		calls[i] = StopCall(ids[i])
	}
	return h.Run(plan, calls...)
}

// Destroy destroys a task with force.
func (h *Harness) Destroy(plan Plan, id string) Step {
	return h.Run(plan, DoCall(func(ctx context.Context, d *driver.Driver) error { return d.DestroyTask(ctx, id, true) }))
}

// Signal signals a task.
func (h *Harness) Signal(plan Plan, id string, sig syscall.Signal) Step {
	return h.Run(plan, DoCall(func(ctx context.Context, d *driver.Driver) error { return d.SignalTask(ctx, id, sig) }))
}

// Behind runs fn on the world behind the driver's back (a task exits, an
// executor is killed, a pid is reused) and lets the driver react under
// plan.
func (h *Harness) Behind(plan Plan, fn func(w *World)) Step {
	h.sched.begin(plan.Order) // what fn wakes waits for its turn
	fn(h.World)
	return h.Run(plan)
}

// Adopt makes the world hold an executor that launched task id (of spec)
// with no driver connected, and the log hold what such a relaunch (or a
// driver of an older version) records: task-created, spawn-intent,
// executor-up with its launch intent, launched. A later Recover owes it
// the attach effect.
func (h *Harness) Adopt(id string, spec fsm.Spec) error {
	h.adopted++
	nonce := fmt.Sprintf("adopted-%04d", h.adopted)
	spec.Name = id
	x, pid, start := h.World.Relaunched(id, nonce, spec)
	t := fsm.Task{ID: id}
	return h.withLog(func(l store.Log) error {
		for _, in := range []fsm.Event{
			{Type: fsm.EventCreated, Spec: &spec}, {Type: fsm.EventSpawnIntent, Nonce: nonce},
			{Type: fsm.EventExecutorUp, Executor: &x},
			{Type: fsm.EventLaunched, TaskPID: pid, TaskStartTime: start},
		} {
			in.Time = time.Unix(1_700_000_000, 0).Add(time.Duration(h.clock.Add(1)) * time.Millisecond).UnixNano()
			evs, _, err := fsm.Step(t, in)
			if err != nil {
				return err
			}
			if _, err := l.Append(context.Background(), id, t.Version, evs...); err != nil {
				return err
			}
			h.acknowledge(id, t.Version, evs)
			if t, err = fsm.FoldAll(t, evs...); err != nil {
				return err
			}
		}
		return nil
	})
}

// Crash kills the current generation now, between calls (a SIGKILL of an
// idle agent).
func (h *Harness) Crash() {
	if !h.Alive() {
		return
	}
	h.settle(func() {
		h.gen.Kill()
		h.freeze()
		h.gend()
		h.d.Abandon()
	})
	h.release()
}

// Reboot restarts the host (World.Reboot), killing the driver generation
// with it. With collide, every process the log records (an executor, a
// task) gets a look-alike of the new boot at its pid, with its start time
// and (an executor's) nonce: only the boot id tells them apart.
func (h *Harness) Reboot(collide bool) {
	h.Crash()
	type look struct {
		pid   int
		start uint64
		nonce string
	}
	var looks []look
	_ = h.withLog(func(l store.Log) error {
		return l.All(context.Background(), func(id string) error {
			t, err := l.LoadTask(context.Background(), id)
			if err != nil {
				return err
			}
			if t.Executor != nil {
				looks = append(looks, look{t.Executor.PID, t.Executor.StartTime, t.Executor.Nonce})
			}
			if t.TaskPID != 0 {
				looks = append(looks, look{t.TaskPID, t.TaskStartTime, ""})
			}
			return nil
		})
	})
	h.World.Reboot()
	if collide {
		for _, l := range looks {
			h.World.Collide(l.pid, l.start, l.nonce)
		}
	}
}

// Restart closes the live driver cleanly and opens a new generation (no
// Recover).
func (h *Harness) Restart() error {
	if h.Alive() {
		var err error
		if !h.settle(func() { err = h.d.Close() }) {
			return errCloseHung
		}
		if err != nil {
			return err
		}
		h.settle(func() {
			h.gen.Kill()
			h.gend()
		})
	}
	return h.newGeneration()
}

// errCloseHung is a Close of the driver that did not return within an hour
// of fake time: a start, stop or recovery in flight never ended.
var errCloseHung = errors.New("proptest: the driver's Close did not return (a call in flight never ended)")

// Recover opens a new generation if the current one is dead, then calls
// Recover under plan.
func (h *Harness) Recover(plan Plan) (Step, error) {
	if !h.Alive() {
		if err := h.newGeneration(); err != nil {
			return Step{}, err
		}
	}
	return h.Run(plan, RecoverCall()), nil
}

// Close closes the driver and the store and ends every goroutine the
// harness started.
func (h *Harness) Close() error {
	var errs []error
	if h.Alive() {
		var err error
		if !h.settle(func() { err = h.d.Close() }) {
			err = errCloseHung
		}
		errs = append(errs, err)
	}
	h.settle(func() {
		if h.gen != nil {
			h.gen.Kill()
		}
		if h.gend != nil {
			h.gend()
		}
		h.stopRoot()
		close(h.quit)
	})
	if st := h.store(); st != nil {
		errs = append(errs, st.Close())
		h.setStore(nil)
	}
	return errors.Join(errs...)
}

// withLog runs fn on the log: the MemLog, the current generation's store,
// or (between generations) the store file opened for the call.
func (h *Harness) withLog(fn func(l store.Log) error) error {
	if h.mem != nil {
		return fn(h.mem)
	}
	return h.withStore(func(s *store.Store) error { return fn(s) })
}

// withStore runs fn on an open bbolt store: the current generation's, or
// the file opened for the call when the generation is dead.
func (h *Harness) withStore(fn func(s *store.Store) error) error {
	if st := h.store(); st != nil {
		return fn(st)
	}
	s, err := store.Open(h.path, store.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// Tasks lists every task id in the log, sorted.
func (h *Harness) Tasks() []string {
	if h.mem != nil {
		return slices.Clone(h.mem.IDs())
	}
	var ids []string
	_ = h.withLog(func(l store.Log) error {
		return l.All(context.Background(), func(id string) error { ids = append(ids, id); return nil })
	})
	sort.Strings(ids)
	return ids
}

// SpecFor returns a simulated task spec: "run" runs until stopped, "exit"
// exits at once, "netraw" asks for the capability the executor refuses
// after spawning (the seed), "invalid" is refused before any spawn, "fork"
// runs with a child in its group, "setsid" with a child that left its
// group, "daemon" with a daemonized grandchild, "restart" fails at once and
// is restarted twice by its executor (then ends, exited), "service" runs
// and is restarted by its executor whenever it ends (twice an hour),
// "ready" runs as a notify task (readiness = "notify"), ready at once.
func SpecFor(kind string) fsm.Spec {
	s := fsm.Spec{Driver: "raw_exec", Command: "/sim/task"}
	switch kind {
	case "exit":
		s.Args = []string{ArgExitNow}
	case "netraw":
		s.CapAdd = []string{CapRefused}
	case "invalid":
		s.Command = ""
	case "fork":
		s.Args = []string{ArgFork}
	case "setsid":
		s.Args = []string{ArgSetsid}
	case "daemon":
		s.Args = []string{ArgDaemon}
	case "restart":
		s.Args = []string{ArgExitFail}
		s.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: time.Second, Mode: fsm.RestartFail}
	case "service":
		s.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: time.Second, Mode: fsm.RestartDelay, OnSuccess: true}
	case "ready":
		s.Readiness = fsm.ReadinessNotify
	case "ready service":
		s.Readiness = fsm.ReadinessNotify
		s.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: time.Second, Mode: fsm.RestartDelay, OnSuccess: true}
	}
	return s
}

// CheckReadies holds readiness as a fact of a run, recorded by whoever
// supervises the task, once: in every task's log
//
//   - each run (from one launched to the next) is recorded ready at most
//     once;
//   - each journalled ready event is the entry of its executor's journal
//     at its place (the same run, the same time): nothing invented,
//     nothing recorded twice;
//   - a log that follows its runs is never past its executor's journal;
//
// and, with recovered (after a clean Recover), nothing is lost: a task
// whose log follows its runs (running, restarting) and whose executor
// lives holds every entry of its executor's journal.
func (h *Harness) CheckReadies(t TestingT, recovered bool) {
	t.Helper()
	var v []string
	for _, id := range h.Tasks() {
		var evs []fsm.Event
		if err := h.withLog(func(l store.Log) error {
			var err error
			evs, err = l.Load(context.Background(), id)
			return err
		}); err != nil {
			t.Fatalf("check readies: load %s: %v", id, err)
		}
		st, err := fsm.FoldAll(fsm.Task{ID: id}, evs...)
		if err != nil {
			v = append(v, fmt.Sprintf("task %s: its log does not fold: %v", id, err))
			continue
		}
		journal, nonce := h.World.JournalOf(id)
		ours := nonce != "" && nonce == st.Nonce
		readies := 0
		for _, e := range evs {
			if e.Type == fsm.EventLaunched {
				readies = 0
			}
			if e.Type != fsm.EventReady {
				continue
			}
			if readies++; readies > 1 {
				v = append(v, fmt.Sprintf("task %s: a run recorded ready twice (seq %d)", id, e.Seq))
			}
			if !e.Journalled() {
				continue
			}
			if !ours || e.Attempt > len(journal) {
				v = append(v, fmt.Sprintf("task %s: ready seq %d is journal entry %d, which its executor's journal (of %d entries) lacks", id, e.Seq, e.Attempt, len(journal)))
				continue
			}
			if j := journal[e.Attempt-1]; j.Type != fsm.EventReady || j.Time != e.Time || j.TaskProc() != e.TaskProc() {
				v = append(v, fmt.Sprintf("task %s: ready seq %d (%s at %d) is not journal entry %d (%s %s at %d)", id, e.Seq, e.TaskProc(), e.Time, e.Attempt, j.Type, j.TaskProc(), j.Time))
			}
		}
		if !ours {
			continue
		}
		follows := st.State == fsm.StateLaunched || st.State == fsm.StateRunning || st.State == fsm.StateRestarting
		if follows && st.RestartEvents() > len(journal) { // (a log that left the runs counts a last intent's outcome it never folded)
			v = append(v, fmt.Sprintf("task %s: its log holds %d journal entries, its executor journalled %d: log %v, journal %v", id, st.RestartEvents(), len(journal), evs, journal))
		}
		live := false
		for _, p := range h.World.Live() {
			live = live || p.Kind == KindExecutor && p.Task == id && p.Nonce == nonce
		}
		if recovered && live && follows && st.State != fsm.StateLaunched && st.RestartEvents() != len(journal) {
			v = append(v, fmt.Sprintf("task %s (%s): after Recover its log holds %d of its live executor's %d journal entries: %v", id, st.State, st.RestartEvents(), len(journal), journal[st.RestartEvents():]))
		}
	}
	if len(v) > 0 {
		t.Fatalf("readiness:\n  %s", strings.Join(v, "\n  "))
	}
}
