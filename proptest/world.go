package proptest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// Errors of the simulated world, besides driver.ErrNotOurs and
// driver.ErrGone.
var (
	// ErrNotLaunched: the executor has not launched its task.
	ErrNotLaunched = errors.New("proptest: executor has not launched a task")
	// ErrConnClosed: the connection to the executor was closed.
	ErrConnClosed = errors.New("proptest: executor connection closed")
	// ErrCapRefused: the executor refused a capability (the seed of the
	// design: cap_add = ["net_raw"]), after it was spawned.
	ErrCapRefused = errors.New("proptest: executor refused capability net_raw")
	// ErrSpawnRefused: a spawn failed on demand (World.FailSpawns).
	ErrSpawnRefused = errors.New("proptest: spawn failed on demand")
)

// Spec arguments the simulated executor understands.
const (
	// ArgExitNow makes the simulated task exit with code 0 as soon as it
	// is launched.
	ArgExitNow = "sim:exit-now"
	// CapRefused is the capability the simulated executor refuses at
	// launch, after it has been spawned (Nomad issue 11958).
	CapRefused = "net_raw"
)

// Kind is what a simulated process is.
type Kind uint8

// The kinds of simulated process.
const (
	KindExecutor Kind = iota + 1
	KindTask
	KindStranger // a process that took a dead process's pid
)

func (k Kind) String() string {
	switch k {
	case KindExecutor:
		return "executor"
	case KindTask:
		return "task"
	case KindStranger:
		return "stranger"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Proc is a simulated process.
type Proc struct {
	PID   int
	Start uint64 // start time in ticks; unique per process
	Kind  Kind
	Task  string // owning task (executor and task processes)
	Nonce string // the nonce argument on its command line: an executor's spawn nonce, or a look-alike's copy
	Alive bool
	Exit  fsm.ExitStatus // valid once dead

	died chan struct{} // closed at death

	// executor only
	conns    int
	launched bool
	child    *Proc
	// task only
	parent   *Proc
	recorded bool // its exit status was written by a live executor
}

// Signal is one signal the world delivered (or was asked to deliver).
type Signal struct {
	PID    int
	Start  uint64
	Kind   Kind
	Sig    syscall.Signal
	Via    string // "kill", "kill-group", "executor"
	Task   string // the task the sender acted for
	Target string // the target's task, empty for a stranger
}

// Refusal records an identity check that refused to signal.
type Refusal struct {
	Via  string
	PID  int
	Task string
	Why  string
}

// disk is what an executor leaves in its task's directory.
type disk struct {
	exit      *fsm.ExitStatus
	exitNonce string // the nonce of the executor that wrote exit, and its task
	exitPID   int
	exitSt    uint64
	launchPID int
	launchSt  uint64
	launched  bool
	nonce     string // the nonce of the executor that wrote the launch record
}

// World is a deterministic simulated process table with executors, tasks
// and strangers. It implements driver.Executors through per-generation
// views (World.Executors), so that a crashed driver generation loses its
// connections exactly as a SIGKILLed agent would: an executor that had not
// launched its task sees its lease drop and exits by itself; one that had
// keeps running with its task.
//
// Every identity check is pid + start time + boot id + nonce, as the real
// one; every signal is logged (Signals), and every refusal (Refusals).
type World struct {
	mu      sync.Mutex
	bootID  string
	nextPID int
	ticks   uint64
	procs   map[int]*Proc // the current process at each pid
	all     []*Proc       // every process ever, in creation order
	disk    map[string]*disk
	signals []Signal
	refused []Refusal
	handles map[*Generation][]*handle

	// locks are the task locks (driver.Executors.LockTask): held by a
	// generation until it lets go or dies; freed is closed at each release.
	locks map[string]*lockEntry
	freed chan struct{}

	failSpawns int
	noLease    bool
	trusted    []Refusal // identity checks a stranger passed

	// BeforeEffect, when set, is called (without the world's lock) as an
	// effect reaches the world: "spawn" with the spawn nonce, "launch".
	// The harness checks write-ahead there: the intent that demands the
	// effect must already be acknowledged.
	BeforeEffect func(effect, task, nonce string)
}

// SetLease turns the executors' lease on (the default) or off. Without it,
// an executor whose connection drops before launch lives on (one stuck in
// its start-up, say): the log alone must then lead recovery to it.
func (w *World) SetLease(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noLease = !on
}

// NewWorld returns an empty world with boot id "boot-1".
func NewWorld() *World {
	return &World{bootID: "boot-1", nextPID: 1000, procs: map[int]*Proc{}, disk: map[string]*disk{}, handles: map[*Generation][]*handle{},
		locks: map[string]*lockEntry{}, freed: make(chan struct{})}
}

// BootID is the world's boot id.
func (w *World) BootID() string { return w.bootID }

// Generation is one life of a driver process. When it dies (Kill), every
// call it makes into the world or the store stops its goroutine, as if the
// process had been SIGKILLed, and its connections drop.
type Generation struct {
	ID   int
	w    *World
	dead chan struct{}
	once sync.Once
}

// NewGeneration starts a driver generation in this world.
func (w *World) NewGeneration(id int) *Generation {
	return &Generation{ID: id, w: w, dead: make(chan struct{})}
}

// Dead reports whether the generation was killed.
func (g *Generation) Dead() bool {
	select {
	case <-g.dead:
		return true
	default:
		return false
	}
}

// Done is closed when the generation dies.
func (g *Generation) Done() <-chan struct{} { return g.dead }

// Kill kills the generation: its connections drop (leases), and each of its
// goroutines stops at its next contact with the outside world.
func (g *Generation) Kill() {
	g.once.Do(func() {
		close(g.dead)
		g.w.dropGeneration(g)
	})
}

// enter stops the calling goroutine if its generation is dead: the process
// it belongs to no longer exists.
func (g *Generation) enter() {
	if g.Dead() {
		runtime.Goexit()
	}
}

func (w *World) dropGeneration(g *Generation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.handles[g] {
		w.closeHandleLocked(h)
	}
	delete(w.handles, g)
	for task, l := range w.locks { // the kernel lets go of a dead process's locks
		if l.g == g {
			w.unlockLocked(task, l)
		}
	}
}

// lockEntry is a held task lock.
type lockEntry struct{ g *Generation }

func (w *World) unlockLocked(task string, l *lockEntry) {
	if w.locks[task] != l {
		return
	}
	delete(w.locks, task)
	close(w.freed)
	w.freed = make(chan struct{})
}

func (w *World) lockLocked(g *Generation, task string) (func(), int) {
	if l := w.locks[task]; l != nil {
		return nil, l.g.ID
	}
	l := &lockEntry{g: g}
	w.locks[task] = l
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.unlockLocked(task, l)
	}, 0
}

// LockTask implements driver.Executors: a lock a generation holds until it
// lets go or dies.
func (v *view) LockTask(task string) (func(), int, error) {
	v.g.enter()
	v.w.mu.Lock()
	defer v.w.mu.Unlock()
	release, holder := v.w.lockLocked(v.g, task)
	return release, holder, nil
}

// WaitLockTask implements driver.Executors.
func (v *view) WaitLockTask(ctx context.Context, task string) (func(), error) {
	for {
		v.g.enter()
		v.w.mu.Lock()
		release, _ := v.w.lockLocked(v.g, task)
		freed := v.w.freed
		v.w.mu.Unlock()
		if release != nil {
			return release, nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-v.g.dead:
			runtime.Goexit()
		}
	}
}

// FailSpawns makes the next n spawns fail (before anything is started).
func (w *World) FailSpawns(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failSpawns = n
}

func (w *World) newProcLocked(kind Kind, task string) *Proc {
	w.ticks++
	pid := w.nextPID
	w.nextPID++
	p := &Proc{PID: pid, Start: w.ticks * 100, Kind: kind, Task: task, Alive: true, died: make(chan struct{})}
	w.procs[pid] = p
	w.all = append(w.all, p)
	return p
}

func (w *World) diskLocked(task string) *disk {
	d := w.disk[task]
	if d == nil {
		d = &disk{}
		w.disk[task] = d
	}
	return d
}

// dieLocked ends p with exit status x. A task whose executor is alive has
// its exit status written to disk by that executor.
func (w *World) dieLocked(p *Proc, x fsm.ExitStatus) {
	if !p.Alive {
		return
	}
	p.Alive, p.Exit = false, x
	close(p.died)
	if p.Kind == KindTask && p.parent != nil && p.parent.Alive {
		p.recorded = true
		xx := x
		d := w.diskLocked(p.Task)
		d.exit, d.exitNonce, d.exitPID, d.exitSt = &xx, p.parent.Nonce, p.PID, p.Start
	}
}

func (w *World) signalLocked(p *Proc, sig syscall.Signal, via, task string) {
	target := p.Task
	if p.Kind == KindStranger {
		target = ""
	}
	w.signals = append(w.signals, Signal{PID: p.PID, Start: p.Start, Kind: p.Kind, Sig: sig, Via: via, Task: task, Target: target})
	if p.Kind == KindStranger {
		return // strangers are not ours to model; the log is the evidence
	}
	switch sig {
	case 0, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGWINCH:
		return // no effect on the simulated task
	}
	w.dieLocked(p, fsm.ExitStatus{Code: -1, Signal: int(sig)})
}

// ours is the identity check: pid + start time + boot id + nonce, which is
// all the real one can observe (/proc/PID/stat, the boot id, the nonce
// argument on /proc/PID/cmdline); a process's kind is not observable, so a
// look-alike stranger (see ReusePID) is told apart by its start time alone.
func (w *World) ours(p *Proc, id fsm.Identity) (bool, string) {
	switch {
	case p.Start != id.StartTime:
		return false, fmt.Sprintf("start time %d, recorded %d", p.Start, id.StartTime)
	case id.BootID != w.bootID:
		return false, fmt.Sprintf("boot id %q, recorded %q", w.bootID, id.BootID)
	case p.Nonce != id.Nonce:
		return false, fmt.Sprintf("nonce %q, recorded %q", p.Nonce, id.Nonce)
	}
	return true, ""
}

// Executors returns the world as seen by driver generation g.
func (w *World) Executors(g *Generation) driver.Executors { return &view{w: w, g: g} }

type view struct {
	w *World
	g *Generation
}

var _ driver.Executors = (*view)(nil)

func (v *view) Spawn(ctx context.Context, task, nonce string) (driver.Executor, error) {
	v.g.enter()
	w := v.w
	if w.BeforeEffect != nil {
		w.BeforeEffect("spawn", task, nonce)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failSpawns > 0 {
		w.failSpawns--
		return nil, ErrSpawnRefused
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := w.newProcLocked(KindExecutor, task)
	p.Nonce = nonce
	return w.connectLocked(v.g, p), nil
}

func (w *World) connectLocked(g *Generation, p *Proc) *handle {
	p.conns++
	h := &handle{w: w, g: g, p: p, closed: make(chan struct{})}
	w.handles[g] = append(w.handles[g], h)
	return h
}

func (v *view) Reattach(ctx context.Context, task string, id fsm.Identity) (driver.Executor, error) {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive {
		return nil, fmt.Errorf("%w: pid %d", driver.ErrGone, id.PID)
	}
	if ok, why := w.ours(p, id); !ok {
		w.refused = append(w.refused, Refusal{Via: "reattach", PID: id.PID, Task: task, Why: why})
		return nil, fmt.Errorf("%w: %s", driver.ErrNotOurs, why)
	}
	w.trustLocked(p, "reattach", task)
	return w.connectLocked(v.g, p), nil
}

func (v *view) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	// Only executors: the nonce is fresh and random per spawn, so a
	// look-alike carrying it would need an adversary who read it in the
	// spawn window. (The real scan, executor.FindByNonce, matches command
	// lines and would take such a look-alike for the executor.)
	for _, p := range w.all {
		if p.Alive && p.Kind == KindExecutor && p.Nonce == nonce && p.Task == task {
			return w.identity(p), true, nil
		}
	}
	return fsm.Identity{}, false, nil
}

// trustLocked records an identity check that a stranger passed: the check
// was too weak to tell it from the executor it replaced.
func (w *World) trustLocked(p *Proc, via, task string) {
	if p.Kind == KindStranger {
		w.trusted = append(w.trusted, Refusal{Via: via, PID: p.PID, Task: task,
			Why: fmt.Sprintf("stranger started at %d with nonce %q passed the identity check", p.Start, p.Nonce)})
	}
}

func (w *World) identity(p *Proc) fsm.Identity {
	return fsm.Identity{PID: p.PID, StartTime: p.Start, BootID: w.bootID, Nonce: p.Nonce, Socket: fmt.Sprintf("/sim/%s/%d.sock", p.Task, p.PID)}
}

func (v *view) Kill(ctx context.Context, task string, id fsm.Identity) error {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive {
		return nil
	}
	if ok, why := w.ours(p, id); !ok {
		w.refused = append(w.refused, Refusal{Via: "kill", PID: id.PID, Task: task, Why: why})
		return fmt.Errorf("%w: %s", driver.ErrNotOurs, why)
	}
	w.trustLocked(p, "kill", task)
	w.signalLocked(p, syscall.SIGKILL, "kill", task)
	return nil
}

func (v *view) KillTask(ctx context.Context, task string, _ fsm.Identity, pid int, start uint64) error {
	if pid == 0 {
		return nil
	}
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[pid]
	if p == nil || !p.Alive {
		return nil
	}
	if p.Kind != KindTask || p.Start != start {
		why := fmt.Sprintf("pid %d is a %s started at %d, recorded start %d", pid, p.Kind, p.Start, start)
		w.refused = append(w.refused, Refusal{Via: "kill-group", PID: pid, Task: task, Why: why})
		return fmt.Errorf("%w: %s", driver.ErrNotOurs, why)
	}
	w.signalLocked(p, syscall.SIGKILL, "kill-group", task)
	return nil
}

func (v *view) Alive(ctx context.Context, task string, id fsm.Identity) (bool, error) {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive {
		return false, nil
	}
	ok, _ := w.ours(p, id)
	return ok, nil
}

func (v *view) ExitStatus(ctx context.Context, task string, id fsm.Identity, pid int, start uint64) (fsm.ExitStatus, bool, error) {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil || d.exit == nil {
		return fsm.ExitStatus{}, false, nil
	}
	if d.exitNonce != id.Nonce || pid > 0 && (d.exitPID != pid || d.exitSt != start) {
		why := fmt.Sprintf("exit record of nonce %q pid %d, the log has nonce %q pid %d", d.exitNonce, d.exitPID, id.Nonce, pid)
		w.refused = append(w.refused, Refusal{Via: "exit-status", PID: d.exitPID, Task: task, Why: why})
		return fsm.ExitStatus{}, false, fmt.Errorf("%w: %s", driver.ErrNotOurs, why)
	}
	return *d.exit, true, nil
}

func (v *view) LaunchRecord(ctx context.Context, task string, id fsm.Identity) (int, uint64, bool, error) {
	v.g.enter()
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil || !d.launched {
		return 0, 0, false, nil
	}
	if d.nonce != id.Nonce {
		why := fmt.Sprintf("launch record of nonce %q, the log has %q", d.nonce, id.Nonce)
		w.refused = append(w.refused, Refusal{Via: "launch-record", PID: d.launchPID, Task: task, Why: why})
		return 0, 0, false, fmt.Errorf("%w: %s", driver.ErrNotOurs, why)
	}
	return d.launchPID, d.launchSt, true, nil
}

// handle is one connection from a driver generation to an executor.
type handle struct {
	w        *World
	g        *Generation
	p        *Proc
	isClosed bool
	closed   chan struct{}
}

var _ driver.Executor = (*handle)(nil)

func (w *World) closeHandleLocked(h *handle) {
	if h.isClosed {
		return
	}
	h.isClosed = true
	close(h.closed)
	p := h.p
	p.conns--
	if p.Alive && !p.launched && p.conns == 0 && !w.noLease {
		// The lease: an executor whose control connection drops before
		// launch exits by itself.
		w.dieLocked(p, fsm.ExitStatus{Code: 0})
	}
}

// usable returns an error if the connection cannot carry a request.
func (h *handle) usableLocked() error {
	switch {
	case h.isClosed:
		return ErrConnClosed
	case !h.p.Alive:
		return fmt.Errorf("%w: executor pid %d died", driver.ErrGone, h.p.PID)
	}
	return nil
}

func (h *handle) Identity() fsm.Identity {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.identity(h.p)
}

func (h *handle) Launch(ctx context.Context, spec fsm.Spec, allowed []string) (driver.Status, error) {
	h.g.enter()
	w := h.w
	if w.BeforeEffect != nil {
		w.BeforeEffect("launch", h.p.Task, "")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return driver.Status{}, err
	}
	p := h.p
	if p.launched {
		return h.statusLocked(), nil
	}
	if slices.Contains(spec.CapAdd, CapRefused) {
		return driver.Status{}, ErrCapRefused
	}
	c := w.newProcLocked(KindTask, p.Task)
	c.parent = p
	p.launched, p.child = true, c
	d := w.diskLocked(p.Task)
	d.launched, d.launchPID, d.launchSt, d.nonce = true, c.PID, c.Start, p.Nonce
	if slices.Contains(spec.Args, ArgExitNow) {
		w.dieLocked(c, fsm.ExitStatus{Code: 0})
	}
	return h.statusLocked(), nil
}

func (h *handle) statusLocked() driver.Status {
	p := h.p
	if !p.launched {
		return driver.Status{}
	}
	s := driver.Status{Launched: true, PID: p.child.PID, StartTime: p.child.Start}
	if !p.child.Alive {
		s.Exited, s.Exit = true, p.child.Exit
	}
	return s
}

func (h *handle) Status(ctx context.Context) (driver.Status, error) {
	h.g.enter()
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return driver.Status{}, err
	}
	return h.statusLocked(), nil
}

func (h *handle) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	h.g.enter()
	w := h.w
	w.mu.Lock()
	if err := h.usableLocked(); err != nil {
		w.mu.Unlock()
		return fsm.ExitStatus{}, err
	}
	if !h.p.launched {
		w.mu.Unlock()
		return fsm.ExitStatus{}, ErrNotLaunched
	}
	c := h.p.child
	w.mu.Unlock()
	select {
	case <-c.died:
	case <-h.p.died:
	case <-h.closed:
	case <-ctx.Done():
	}
	h.g.enter()
	w.mu.Lock()
	defer w.mu.Unlock()
	// Decide from the state, not from which channel won, so that the
	// outcome is deterministic.
	switch {
	case !c.Alive && c.recorded && !h.isClosed:
		return c.Exit, nil
	case h.isClosed:
		return fsm.ExitStatus{}, ErrConnClosed
	case !h.p.Alive:
		return fsm.ExitStatus{}, fmt.Errorf("%w: executor pid %d died", driver.ErrGone, h.p.PID)
	}
	return fsm.ExitStatus{}, ctx.Err()
}

func (h *handle) Signal(ctx context.Context, sig syscall.Signal) error {
	h.g.enter()
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return err
	}
	if !h.p.launched {
		return ErrNotLaunched
	}
	if h.p.child.Alive {
		w.signalLocked(h.p.child, sig, "executor", h.p.Task)
	}
	return nil
}

func (h *handle) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (fsm.ExitStatus, error) {
	h.g.enter()
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return fsm.ExitStatus{}, err
	}
	if !h.p.launched {
		return fsm.ExitStatus{}, ErrNotLaunched
	}
	c := h.p.child
	if c.Alive {
		w.signalLocked(c, sig, "executor", h.p.Task)
	}
	if c.Alive { // the signal was ignored: SIGKILL after grace
		w.signalLocked(c, syscall.SIGKILL, "executor", h.p.Task)
	}
	return c.Exit, nil
}

func (h *handle) Shutdown(ctx context.Context) error {
	h.g.enter()
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return err
	}
	p := h.p
	if p.Kind == KindStranger { // reattached to a look-alike: logged as signalled
		w.signalLocked(p, syscall.SIGKILL, "shutdown", p.Task)
		return nil
	}
	if p.launched && p.child.Alive {
		w.signalLocked(p.child, syscall.SIGKILL, "executor", p.Task)
	}
	w.dieLocked(p, fsm.ExitStatus{Code: 0})
	return nil
}

// Close drops the connection. It never stops the caller, even in a dead
// generation: closing is what a dying process does anyway.
func (h *handle) Close() error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.closeHandleLocked(h)
	return nil
}

// --- the harness's view: reality, and events behind the driver's back ---

// Procs returns a copy of every process ever created, in creation order.
func (w *World) Procs() []Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Proc, len(w.all))
	for i, p := range w.all {
		out[i] = *p
		out[i].child, out[i].parent, out[i].died = nil, nil, nil
	}
	return out
}

// Live returns the live executor and task processes, by pid.
func (w *World) Live() []Proc {
	var out []Proc
	for _, p := range w.Procs() {
		if p.Alive && p.Kind != KindStranger {
			out = append(out, p)
		}
	}
	return out
}

// Signals returns the log of every signal the world delivered.
func (w *World) Signals() []Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.signals)
}

// Trusted returns the identity checks (reattach, kill) that a stranger
// passed: each is a violation of "never kill a stranger" in the making.
func (w *World) Trusted() []Refusal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.trusted)
}

// Refusals returns the identity checks that refused to signal.
func (w *World) Refusals() []Refusal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.refused)
}

// ExitTask makes the task process of task exit with code, as if it ended
// by itself. It reports whether there was one alive.
func (w *World) ExitTask(task string, code int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.all {
		if p.Alive && p.Kind == KindTask && p.Task == task {
			w.dieLocked(p, fsm.ExitStatus{Code: code})
			return true
		}
	}
	return false
}

// KillProc kills the process at pid behind the driver's back (an OOM
// killer, an operator's kill -9). An executor's task survives it.
func (w *World) KillProc(pid int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[pid]
	if p == nil || !p.Alive || p.Kind == KindStranger {
		return false
	}
	w.dieLocked(p, fsm.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)})
	return true
}

// ReusePID starts a stranger process at the pid of a dead process, with a
// new start time. It reports whether the pid was free.
func (w *World) ReusePID(pid int) bool { return w.reuse(pid, false) }

// ReusePIDLookAlike starts a look-alike stranger at the pid of a dead
// process: it carries the dead process's command line, nonce included (an
// operator re-running what ps showed, a supervisor restarting it), so that
// only its start time tells it apart. It reports whether the pid was free.
func (w *World) ReusePIDLookAlike(pid int) bool { return w.reuse(pid, true) }

func (w *World) reuse(pid int, lookAlike bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[pid]
	if p == nil || p.Alive {
		return false
	}
	w.ticks++
	s := &Proc{PID: pid, Start: w.ticks * 100, Kind: KindStranger, Alive: true, died: make(chan struct{})}
	if lookAlike {
		s.Nonce = p.Nonce
	}
	w.procs[pid] = s
	w.all = append(w.all, s)
	return true
}

// ReusablePIDs lists, in order, the pids of dead processes that no other
// process has taken since.
func (w *World) ReusablePIDs() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for pid, p := range w.procs {
		if !p.Alive {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}
