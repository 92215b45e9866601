package proptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing/synctest"
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

// ErrFault is the error an injected fault returns (wrapped by the driver in
// driver.ErrInjected).
var ErrFault = errors.New("proptest: fault")

// Point is the n-th hit (from 1) of a named crash or fault point within one
// step of the harness. The name Any ("*") stands for every point: Point{Any,
// 3} is the third point of its kind hit in the step, whatever its name, so
// a drawn crash or fault always fires if the step gets that far.
type Point struct {
	Name string
	Nth  int
}

// Any matches every crash or fault point (see Point).
const Any = "*"

func (p Point) String() string {
	if p.Name == "" {
		return "-"
	}
	return p.Name + "#" + strconv.Itoa(p.Nth)
}

// ParsePoint parses Point.String's form.
func ParsePoint(s string) (Point, error) {
	if s == "-" || s == "" {
		return Point{}, nil
	}
	i := strings.LastIndex(s, "#")
	if i < 0 {
		return Point{}, fmt.Errorf("proptest: point %q: want name#n", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 {
		return Point{}, fmt.Errorf("proptest: point %q: bad hit count", s)
	}
	return Point{Name: s[:i], Nth: n}, nil
}

// Plan says where one step of the harness fails and where it crashes.
// Crash names a crash point (driver.CrashPoints); Faults name fault points
// (driver.FaultPoints).
type Plan struct {
	Crash  Point
	Faults []Point
}

func (p Plan) String() string {
	var fs []string
	for _, f := range p.Faults {
		fs = append(fs, f.String())
	}
	return fmt.Sprintf("crash=%s faults=[%s]", p.Crash, strings.Join(fs, " "))
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
	Fired    []string // the faults that fired
	Trace    []Point  // every crash point hit, in order
	Faults   []Point  // every fault point hit, in order
}

// Clean reports whether the step ran with no fault and no crash.
func (s Step) Clean() bool { return !s.Crashed && len(s.Fired) == 0 }

// Harness runs a driver over a simulated World and a real bbolt store,
// injects faults and crashes by Plan, and checks the design's invariants.
//
// It must run inside a testing/synctest bubble (see rapid.SyncTest, or
// Check and Enumerate, which make one): a step returns once every goroutine
// of the driver is idle, with the bubble's fake clock advanced past any
// back-off the driver sleeps.
type Harness struct {
	World *World

	dir, path string
	root      context.Context
	stopRoot  context.CancelFunc

	clock  atomic.Int64
	nonces atomic.Int64

	mu         sync.Mutex // guards the fields below; driver goroutines touch them through hooks
	plan       Plan
	hits       map[string]int
	trace      []Point
	faultTrace []Point
	fired      []string
	crashed    bool
	crashAt    Point
	anyCrash   int // crash points hit in the step, every name
	anyFault   int // fault points hit in the step, every name
	violations []string
	ledger     map[string][]fsm.Event

	gens int
	gen  *Generation
	gctx context.Context
	gend context.CancelFunc
	d    *driver.Driver
	st   *store.Store

	// Reached counts every crash point hit over the harness's life.
	Reached map[string]int

	// frozen is the store file as it was when the generation died; it is
	// put back before the next open, so that nothing the dead process had
	// not committed lands afterwards (its store's committer is drained at
	// close, as a live one would be).
	frozen []byte
	// commits is held shared by every append in flight and exclusively by
	// freeze, so that the copy is of a file between commits.
	commits sync.RWMutex
}

// freeze copies the store file as it is at the moment of a crash: what a
// SIGKILLed process leaves on disk (the page cache survives a process).
func (h *Harness) freeze() {
	h.commits.Lock()
	b, err := os.ReadFile(h.path)
	h.commits.Unlock()
	if err != nil {
		h.violate("freeze: %v", err)
		return
	}
	h.mu.Lock()
	h.frozen = b
	h.mu.Unlock()
}

// thaw puts the frozen file back.
func (h *Harness) thaw() error {
	h.mu.Lock()
	b := h.frozen
	h.frozen = nil
	h.mu.Unlock()
	if b == nil {
		return nil
	}
	return os.WriteFile(h.path, b, 0o600)
}

// New opens a harness with its store in dir (which must exist) and a first
// driver generation.
func New(t TestingT, dir string) *Harness {
	t.Helper()
	h := &Harness{World: NewWorld(), dir: dir, path: filepath.Join(dir, "tether.db"),
		hits: map[string]int{}, ledger: map[string][]fsm.Event{}, Reached: map[string]int{}}
	h.World.BeforeEffect = h.writeAhead
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

func (h *Harness) newGeneration() error {
	if h.st != nil {
		if err := h.st.Close(); err != nil {
			return err
		}
		h.st = nil
	}
	if err := h.thaw(); err != nil {
		return err
	}
	st, err := store.Open(h.path, store.Options{NoSync: true})
	if err != nil {
		return err
	}
	h.gens++
	g := h.World.NewGeneration(h.gens)
	gctx, gend := context.WithCancel(h.root)
	hooks := driver.Hooks{
		Crash: func(point string) {
			g.enter()
			if h.hitCrash(point) {
				g.Kill()   // first: no acknowledgement after this point
				h.freeze() // then: every acknowledged commit is in the file
				gend()
				runtime.Goexit()
			}
		},
		Fault: func(point string) error {
			g.enter()
			if h.hitFault(point) {
				return ErrFault
			}
			return nil
		},
	}
	d, err := driver.Open(driver.Config{
		StateDir:  h.dir,
		Store:     &genLog{h: h, g: g, s: st},
		Executors: h.World.Executors(g),
		Hooks:     hooks,
		Now: func() time.Time {
			return time.Unix(1_700_000_000, 0).Add(time.Duration(h.clock.Add(1)) * time.Millisecond)
		},
		NewNonce: func() string { return fmt.Sprintf("nonce-%04d", h.nonces.Add(1)) },
	})
	if err != nil {
		gend()
		_ = st.Close()
		return err
	}
	h.st, h.gen, h.gctx, h.gend, h.d = st, g, gctx, gend, d
	return nil
}

func (h *Harness) hitCrash(point string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits["crash:"+point]++
	n := h.hits["crash:"+point]
	h.Reached[point]++
	h.anyCrash++
	h.trace = append(h.trace, Point{point, n})
	switch {
	case h.crashed:
		return false
	case h.plan.Crash.Name == Any && h.plan.Crash.Nth == h.anyCrash:
	case h.plan.Crash.Name == point && h.plan.Crash.Nth == n:
	default:
		return false
	}
	h.crashed, h.crashAt = true, Point{point, n}
	return true
}

func (h *Harness) hitFault(point string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits["fault:"+point]++
	n := h.hits["fault:"+point]
	h.anyFault++
	h.faultTrace = append(h.faultTrace, Point{point, n})
	if slices.Contains(h.plan.Faults, Point{point, n}) || slices.Contains(h.plan.Faults, Point{Any, h.anyFault}) {
		h.fired = append(h.fired, Point{point, n}.String())
		return true
	}
	return false
}

func (h *Harness) violate(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// checkAppend holds invariant 2 at the moment it matters: an event that
// makes a task terminal is appended only once its processes are dead.
func (h *Harness) checkAppend(task string, expected uint64, events []fsm.Event) {
	for _, e := range events {
		if e.Type != fsm.EventExecutorReaped && e.Type != fsm.EventConfigRejected {
			continue
		}
		for _, p := range h.World.Live() {
			if p.Task == task {
				h.violate("terminal means dead: task %q appended %s (target %s) while its %s pid %d is alive",
					task, e.Type, e.Target, p.Kind, p.PID)
			}
		}
	}
}

// writeAhead holds invariant 4 at the moment an effect reaches the world:
// the intent that demands it is acknowledged (durable) already. A spawn
// needs the spawn intent with its nonce, a launch a launch intent.
func (h *Harness) writeAhead(effect, task, nonce string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := fsm.EventLaunchIntent
	if effect == "spawn" {
		want = fsm.EventSpawnIntent
	}
	for _, e := range h.ledger[task] {
		if e.Type == want && (effect != "spawn" || e.Nonce == nonce) {
			return
		}
	}
	h.violations = append(h.violations, fmt.Sprintf("write-ahead: %s of task %q (nonce %q) before its %s was acknowledged", effect, task, nonce, want))
}

// committed holds invariant 7 at the moment of an acknowledgement: the
// store's committed head is at least at the acknowledged version.
func (h *Harness) committed(s *store.Store, task string, version uint64) {
	t, err := s.LoadTask(context.Background(), task)
	switch {
	case err != nil:
		h.violate("acknowledged before commit: task %q v%d acknowledged, the store cannot load it: %v", task, version, err)
	case t.Version < version:
		h.violate("acknowledged before commit: task %q v%d acknowledged, the store has committed v%d", task, version, t.Version)
	}
}

func (h *Harness) acknowledge(task string, expected uint64, events []fsm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.ledger[task]
	if expected < uint64(len(l)) && l[expected].Type != fsm.EventNone {
		// Optimistic concurrency: an append at a version already
		// acknowledged means acknowledged history was overwritten.
		h.violations = append(h.violations, fmt.Sprintf("acknowledged lost: task %q: store acknowledged an append at version %d over acknowledged %s", task, expected, l[expected]))
		return
	}
	// Events committed by a generation that died before their
	// acknowledgement leave a gap: placeholders, not checked.
	for uint64(len(l)) < expected {
		l = append(l, fsm.Event{Seq: uint64(len(l)) + 1})
	}
	l = l[:expected]
	for i, e := range events {
		e.Seq = expected + uint64(i) + 1
		l = append(l, e)
	}
	h.ledger[task] = l
}

// quiesce returns once every goroutine of the bubble is blocked for good:
// it waits, lets the fake clock run an hour past any back-off the driver
// sleeps, and waits again.
func quiesce() {
	synctest.Wait()
	tm := time.NewTimer(time.Hour) // fake time: advances the bubble's clock, costs nothing
	<-tm.C
	synctest.Wait()
}

// run performs one step: the calls run concurrently on the current
// generation under plan, and run returns once the driver is idle.
func (h *Harness) run(plan Plan, calls ...func(ctx context.Context, d *driver.Driver) error) Step {
	h.mu.Lock()
	h.plan, h.hits, h.trace, h.faultTrace, h.fired, h.crashed = plan, map[string]int{}, nil, nil, nil, false
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
			go func() { ch <- call(ctx, d) }()
		}
	}
	quiesce()
	s := Step{Plan: plan, Outcomes: make([]Outcome, len(calls))}
	hung := false
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
			if g.Dead() {
				s.Outcomes[i].Died = true
			} else {
				s.Outcomes[i].Hung, hung = true, true
			}
		}
	}
	if hung {
		cancel()
		quiesce()
		h.violate("liveness: a driver call neither returned nor crashed under %s", plan)
	}

	h.mu.Lock()
	h.plan = Plan{}
	s.Crashed, s.Fired, s.CrashAt = h.crashed, h.fired, h.crashAt
	s.Trace, s.Faults = h.trace, h.faultTrace
	h.mu.Unlock()
	if g.Dead() {
		d.Abandon() // its owners stop where they are, as the process's threads would
		quiesce()
	}
	if g.Dead() && h.st != nil {
		// The process is gone: release its file so that the next
		// generation can open it, as the kernel would.
		_ = h.st.Close()
		h.st = nil
		if err := h.thaw(); err != nil {
			h.violate("thaw: %v", err)
		}
	}
	return s
}

// Start starts the tasks concurrently.
func (h *Harness) Start(plan Plan, ids []string, specs []fsm.Spec) Step {
	calls := make([]func(context.Context, *driver.Driver) error, len(ids))
	for i := range ids {
		calls[i] = func(ctx context.Context, d *driver.Driver) error {
			_, err := d.StartTask(ctx, ids[i], specs[i])
			return err
		}
	}
	return h.run(plan, calls...)
}

// Stop stops the tasks concurrently.
func (h *Harness) Stop(plan Plan, ids ...string) Step {
	calls := make([]func(context.Context, *driver.Driver) error, len(ids))
	for i := range ids {
		calls[i] = func(ctx context.Context, d *driver.Driver) error {
			_, err := d.StopTask(ctx, ids[i], 0, 0)
			return err
		}
	}
	return h.run(plan, calls...)
}

// Destroy destroys a task with force.
func (h *Harness) Destroy(plan Plan, id string) Step {
	return h.run(plan, func(ctx context.Context, d *driver.Driver) error { return d.DestroyTask(ctx, id, true) })
}

// Signal signals a task.
func (h *Harness) Signal(plan Plan, id string, sig syscall.Signal) Step {
	return h.run(plan, func(ctx context.Context, d *driver.Driver) error { return d.SignalTask(ctx, id, sig) })
}

// Behind runs fn on the world behind the driver's back (a task exits, an
// executor is killed, a pid is reused) and lets the driver react under
// plan.
func (h *Harness) Behind(plan Plan, fn func(w *World)) Step {
	fn(h.World)
	return h.run(plan)
}

// Crash kills the current generation now, between calls (a SIGKILL of an
// idle agent).
func (h *Harness) Crash() {
	if !h.Alive() {
		return
	}
	h.gen.Kill()
	h.freeze()
	h.gend()
	h.d.Abandon()
	quiesce()
	if h.st != nil {
		_ = h.st.Close()
		h.st = nil
	}
	if err := h.thaw(); err != nil {
		h.violate("thaw: %v", err)
	}
}

// Restart closes the live driver cleanly and opens a new generation (no
// Recover).
func (h *Harness) Restart() error {
	if h.Alive() {
		if err := h.d.Close(); err != nil {
			return err
		}
		h.gen.Kill()
		h.gend()
		quiesce()
	}
	return h.newGeneration()
}

// Recover opens a new generation if the current one is dead, then calls
// Recover under plan.
func (h *Harness) Recover(plan Plan) (Step, error) {
	if !h.Alive() {
		if err := h.newGeneration(); err != nil {
			return Step{}, err
		}
	}
	return h.run(plan, func(ctx context.Context, d *driver.Driver) error {
		_, err := d.Recover(ctx)
		return err
	}), nil
}

// Close closes the driver and the store and ends every goroutine the
// harness started.
func (h *Harness) Close() error {
	var errs []error
	if h.Alive() {
		errs = append(errs, h.d.Close())
		h.gen.Kill()
	}
	if h.gend != nil {
		h.gend()
	}
	h.stopRoot()
	quiesce()
	if h.st != nil {
		errs = append(errs, h.st.Close())
		h.st = nil
	}
	return errors.Join(errs...)
}

// withStore runs fn on an open store: the current generation's, or a
// read-only look at the file when the generation is dead.
func (h *Harness) withStore(fn func(s *store.Store) error) error {
	if h.st != nil {
		return fn(h.st)
	}
	s, err := store.Open(h.path, store.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}

// Tasks lists every task id in the store, sorted.
func (h *Harness) Tasks() []string {
	var ids []string
	_ = h.withStore(func(s *store.Store) error {
		return s.All(context.Background(), func(id string) error { ids = append(ids, id); return nil })
	})
	sort.Strings(ids)
	return ids
}

// Violations returns the invariant violations found so far (by Check, and
// at the moment of an append or a call).
func (h *Harness) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.violations)
}

// Check verifies the invariants of the design that hold at every quiescent
// point, and fails t with every violation found:
//
//   - terminal means dead (also checked at the append of every terminal
//     event): no live executor or task process of a task whose log is
//     terminal, and none of a task the store does not know;
//   - no leak between recoveries: every live process belongs to a task in a
//     state that may own one;
//   - never a stranger signalled;
//   - no acknowledged event lost: every acknowledged append is in the log;
//   - every log is a legal path (store.Check, including bbolt's own check);
//   - fold(log) == live state: the driver's InspectTask equals the store's
//     fold and a fold of the loaded events.
func (h *Harness) Check(t TestingT) {
	t.Helper()
	if v := h.check(); len(v) > 0 {
		t.Fatalf("invariants violated:\n  %s", strings.Join(v, "\n  "))
	}
}

func (h *Harness) check() []string {
	v := h.Violations()
	ctx := context.Background()
	err := h.withStore(func(s *store.Store) error {
		rep, err := s.Check(ctx)
		if err != nil {
			return err
		}
		for _, p := range rep.Problems {
			v = append(v, "legal path: store check: "+p.String())
		}
		states := map[string]fsm.Task{}
		err = s.All(ctx, func(id string) error {
			t, err := s.LoadTask(ctx, id)
			if err != nil {
				return err
			}
			states[id] = t
			evs, err := s.Load(ctx, id)
			if err != nil {
				return err
			}
			if f, err := fsm.FoldAll(fsm.Task{ID: id}, evs...); err != nil {
				v = append(v, fmt.Sprintf("legal path: task %q: fold of its log: %v", id, err))
			} else if !reflect.DeepEqual(f, t) {
				v = append(v, fmt.Sprintf("fold: task %q: store.LoadTask %+v != fold of Load %+v", id, t, f))
			}
			return nil
		})
		if err != nil {
			return err
		}
		// No acknowledged event lost.
		h.mu.Lock()
		ledger := make(map[string][]fsm.Event, len(h.ledger))
		for k, l := range h.ledger {
			ledger[k] = l
		}
		h.mu.Unlock()
		for _, id := range sortedKeys(ledger) {
			acked := ledger[id]
			evs, err := s.Load(ctx, id)
			if err != nil {
				v = append(v, fmt.Sprintf("acknowledged lost: task %q had %d acknowledged events; load: %v", id, len(acked), err))
				continue
			}
			if len(evs) < len(acked) {
				v = append(v, fmt.Sprintf("acknowledged lost: task %q had %d acknowledged events, the log holds %d", id, len(acked), len(evs)))
				continue
			}
			for i, a := range acked {
				if a.Type == fsm.EventNone {
					continue // committed, never acknowledged
				}
				if e := evs[i]; e.Seq != a.Seq || e.Type != a.Type || e.Time != a.Time || e.Nonce != a.Nonce {
					v = append(v, fmt.Sprintf("acknowledged lost: task %q seq %d: acknowledged %s, the log holds %s", id, a.Seq, a, e))
				}
			}
		}
		// Terminal means dead; no process of a task in a state that owns none.
		for _, p := range h.World.Live() {
			st, ok := states[p.Task]
			switch {
			case !ok:
				v = append(v, fmt.Sprintf("leak: %s pid %d of task %q, which the store does not know", p.Kind, p.PID, p.Task))
			case !st.State.OwnsExecutor():
				v = append(v, fmt.Sprintf("leak: %s pid %d of task %q alive in state %s", p.Kind, p.PID, p.Task, st.State))
			}
		}
		// fold(log) == live state.
		if h.Alive() {
			for _, id := range sortedKeys(states) {
				info, err := h.d.InspectTask(ctx, id)
				if err != nil {
					v = append(v, fmt.Sprintf("inspect: task %q: %v", id, err))
					continue
				}
				if !reflect.DeepEqual(info.Task, states[id]) {
					v = append(v, fmt.Sprintf("fold != live: task %q: driver holds %s v%d %+v, its log folds to %s v%d %+v",
						id, info.State, info.Version, info.Task, states[id].State, states[id].Version, states[id]))
				}
			}
		}
		return nil
	})
	if err != nil {
		v = append(v, "check could not run: "+err.Error())
	}
	for _, r := range h.World.Trusted() {
		v = append(v, fmt.Sprintf("stranger trusted: %s of pid %d for task %q: %s", r.Via, r.PID, r.Task, r.Why))
	}
	for _, s := range h.World.Signals() {
		if s.Kind == KindStranger {
			v = append(v, fmt.Sprintf("stranger signalled: %s to pid %d (start %d) via %s for task %q", s.Sig, s.PID, s.Start, s.Via, s.Task))
		}
	}
	return v
}

// CheckRecovered verifies invariant 1 in its strong form, which holds after
// a Recover that ran with no fault and no crash and returned no error: the
// live executors are exactly those of the live tasks, one each, every live
// task is running with its recorded executor and task process alive, and
// no other executor or task process lives.
func (h *Harness) CheckRecovered(t TestingT) {
	t.Helper()
	v := h.check()
	ctx := context.Background()
	_ = h.withStore(func(s *store.Store) error {
		live := map[string]fsm.Task{}
		_ = s.Live(ctx, func(id string) error {
			t, err := s.LoadTask(ctx, id)
			if err == nil {
				live[id] = t
			}
			return nil
		})
		want := map[int]string{}
		for _, id := range sortedKeys(live) {
			st := live[id]
			if st.State != fsm.StateRunning || st.Executor == nil {
				v = append(v, fmt.Sprintf("no leak: after a clean Recover task %q is %s, not running", id, st.State))
				continue
			}
			want[st.Executor.PID] = id
			want[st.TaskPID] = id
		}
		got := map[int]string{}
		for _, p := range h.World.Live() {
			got[p.PID] = p.Task
			if want[p.PID] != p.Task {
				v = append(v, fmt.Sprintf("no leak: after a clean Recover %s pid %d of task %q is alive but not recorded as its running task's", p.Kind, p.PID, p.Task))
			}
		}
		for _, pid := range sortedKeys(want) {
			if _, ok := got[pid]; !ok {
				v = append(v, fmt.Sprintf("no leak: after a clean Recover task %q is running but its pid %d is dead", want[pid], pid))
			}
		}
		return nil
	})
	if len(v) > 0 {
		t.Fatalf("invariants violated after a clean Recover:\n  %s", strings.Join(v, "\n  "))
	}
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// SpecFor returns a simulated task spec: "run" runs until stopped, "exit"
// exits at once, "netraw" asks for the capability the executor refuses
// after spawning (the seed), "invalid" is refused before any spawn.
func SpecFor(kind string) fsm.Spec {
	s := fsm.Spec{Driver: "raw_exec", Command: "/sim/task"}
	switch kind {
	case "exit":
		s.Args = []string{ArgExitNow}
	case "netraw":
		s.CapAdd = []string{CapRefused}
	case "invalid":
		s.Command = ""
	}
	return s
}
