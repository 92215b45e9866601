package proptest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// Spec arguments the simulated executor understands.
const (
	// ArgExitNow makes the simulated task exit with code 0 as soon as it
	// is launched; ArgExitFail with code 1.
	ArgExitNow  = "sim:exit-now"
	ArgExitFail = "sim:exit-fail"
	// ArgFork makes the task fork a child that stays in its process group.
	ArgFork = "sim:fork"
	// ArgSetsid makes the task fork a child that calls setsid: it leaves
	// the task's process group (and session), so a kill of the group
	// misses it; only the task's cgroup, or the executor (a subreaper
	// that kills its whole tree), still holds it.
	ArgSetsid = "sim:setsid"
	// ArgDaemon makes the task daemonize a grandchild (double fork, then
	// setsid): its parent exits at once, so it is reparented to the
	// executor, in a group of its own.
	ArgDaemon = "sim:daemon"
	// CapRefused is the capability the simulated executor refuses at
	// launch, after it has been spawned (Nomad issue 11958).
	CapRefused = "net_raw"
)

// Kind is what a simulated process is.
type Kind uint8

// The kinds of simulated process.
const (
	KindExecutor   Kind = iota + 1
	KindTask            // the task's first process (its group leader)
	KindStranger        // a process that took a dead process's pid
	KindDescendant      // a process the task started (a child, an escaped setsid child, a daemon)
)

func (k Kind) String() string {
	switch k {
	case KindExecutor:
		return "executor"
	case KindTask:
		return "task"
	case KindStranger:
		return "stranger"
	case KindDescendant:
		return "descendant"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Proc is a simulated process.
type Proc struct {
	PID   int
	Start uint64 // start time in ticks; unique per process
	Kind  Kind
	Task  string // owning task (executor, task and descendant processes)
	Nonce string // the nonce argument on its command line: an executor's spawn nonce, or a look-alike's copy
	// PGID is the process group: the task's leader's pid for the task and
	// the descendants that stayed in its group, a pid of its own for an
	// escaped descendant, an executor and a stranger.
	PGID int
	// Cgroup is the task cgroup the process lives in (the executor's
	// Identity.Cgroup), empty where the host has no cgroups. An
	// executor's own cgroup is not its task's: an executor has none here.
	Cgroup string
	// Escaped is set for a descendant that left the task's process group
	// (setsid).
	Escaped bool
	// Unrecorded is set for a run its executor relaunched and died before
	// recording (executor:after-relaunch): nothing but its cgroup names it.
	Unrecorded bool
	Alive      bool
	Exit       fsm.ExitStatus // valid once dead

	died chan struct{} // closed at death

	// executor only
	conns    int
	launched bool
	child    *Proc         // the task's leader (of its current run)
	rs       *restarts     // the task's restart policy; nil: none
	stopping bool          // a stop or shutdown is under way: no restart
	changed  chan struct{} // closed (and replaced) when the journal grows or the task is over
	// journal is the executor's journal (its restarts and its runs'
	// readiness), as it wrote it; ready: the current run is ready.
	journal []fsm.Event
	ready   bool
	// task tree (task and descendants)
	exec     *Proc // the executor that launched the tree
	recorded bool  // leader: its exit status was written by a live executor
}

// Signal is one signal the world delivered (or was asked to deliver).
type Signal struct {
	PID    int
	Start  uint64
	Kind   Kind
	Sig    syscall.Signal
	Via    string // "kill", "kill-group", "kill-cgroup", "executor", "shutdown"
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
	exitBoot  string
	exitPID   int
	exitSt    uint64
	launchPID int
	launchSt  uint64
	launched  bool
	nonce     string // the nonce of the executor that wrote the launch record
	boot      string // and the boot it ran in
	// The restart journal, and the executor that wrote it.
	journal      []fsm.Event
	journalNonce string
	journalBoot  string
}

// restarts is an executor's restart state for its task (the executor
// restarts its task itself, by the task's restart policy, whether a driver
// is attached or not), as executor/restart.go does.
type restarts struct {
	policy  fsm.RestartPolicy
	state   fsm.RestartState
	spec    fsm.Spec
	pending bool // a restart is journalled and its delay runs
}

// WorldFault is what an injected fault does to one world operation.
type WorldFault uint8

// The world faults.
const (
	NoFault   WorldFault = iota
	FaultFail            // the operation fails at once, having done nothing
	FaultHang            // the operation blocks until its context ends (a frozen executor, a stuck kernel call)
)

// The world operations a fault can be injected into (World.Fault).
const (
	OpKill     = "kill"      // World.Kill
	OpKillTask = "kill-task" // World.KillTask
	OpReattach = "reattach"  // World.Reattach
	OpStop     = "stop"      // Conn.Stop
	OpStatus   = "status"    // Conn.Status
	OpShutdown = "shutdown"  // Conn.Shutdown
	OpDismiss  = "dismiss"   // Conn.Dismiss
)

// WorldOps lists the operations a world fault can hit.
var WorldOps = []string{OpKill, OpKillTask, OpReattach, OpStop, OpStatus, OpShutdown, OpDismiss}

// World is a deterministic simulated process table with executors, tasks
// (with their descendants), strangers and, on a host that has them, a
// cgroup per task. It implements executor.World through per-generation
// views (World.Executors), so that a crashed driver generation loses its
// connections exactly as a SIGKILLed agent would: an executor that had not
// launched its task sees its lease drop and exits by itself; one that had
// keeps running with its task.
//
// An executor is a child subreaper: while it lives, a task that ends has
// the rest of its tree killed by it before its exit status is recorded, and
// its Stop and Shutdown kill the whole tree. When an executor dies, its
// task's tree lives on; then only a kill of the task's cgroup reaches a
// descendant that left the task's process group (setsid). Without
// cgroups, such a descendant outlives its task: Escapes lists them.
//
// Every identity check is pid + start time + boot id + nonce, as the real
// one; a cgroup is killed only when its path names the task and the
// nonce. Every signal is logged (Signals), and every refusal (Refusals).
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
	conns   map[*Generation][]*conn

	// locks are the task locks (executor.World.LockTask): held by a
	// generation until it lets go or dies; freed is closed at each release.
	locks map[string]*lockEntry
	freed chan struct{}

	sched *scheduler // a harness's: the executors' own timers take turns too

	calls map[string]int // the world's operations asked of it, by name (Calls)

	failSpawns int
	noLease    bool
	// oldExecutors: the executors speak a protocol before 10, and journal
	// no readiness (SetOldExecutors).
	oldExecutors bool
	cgroups      bool
	boots        int
	trusted      []Refusal // identity checks a stranger passed

	// BeforeEffect, when set, is called (without the world's lock) as an
	// effect reaches the world: "spawn" with the spawn nonce, "launch".
	// The harness checks write-ahead there: the intent that demands the
	// effect must already be acknowledged.
	BeforeEffect func(effect, task, nonce string)
	// Fault, when set, is asked (without the world's lock) before every
	// operation of WorldOps whether it fails or hangs.
	Fault func(op string) WorldFault
	// ExecutorCrash, when set, is asked (with the world's lock held) at
	// each of an executor's own crash points (executor.CrashPoints, on its
	// restart path) whether the executor dies there.
	ExecutorCrash func(point string) bool
}

// NewWorld returns an empty world with boot id "boot-1", the executors'
// lease on and no cgroups.
func NewWorld() *World {
	return &World{bootID: "boot-1", nextPID: 1000, procs: map[int]*Proc{}, disk: map[string]*disk{}, conns: map[*Generation][]*conn{},
		locks: map[string]*lockEntry{}, freed: make(chan struct{})}
}

// SetLease turns the executors' lease on (the default) or off. Without it,
// an executor whose connection drops before launch lives on (one stuck in
// its start-up, say): the log alone must then lead recovery to it.
func (w *World) SetLease(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noLease = !on
}

// SetOldExecutors makes the executors those of a tether before protocol
// 10: a run's readiness is not journalled (Status.ReadyJournalled is
// false), and whoever waits for it records it.
func (w *World) SetOldExecutors(old bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.oldExecutors = old
}

// JournalOf is the journal task's executor left on disk (its restarts and
// its runs' readiness), and the nonce of the executor that wrote it.
func (w *World) JournalOf(task string) ([]fsm.Event, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil {
		return nil, ""
	}
	return slices.Clone(d.journal), d.journalNonce
}

// SetCgroups gives the host cgroups (or takes them away, for executors
// spawned from now on): each executor then names a cgroup for its task in
// its identity, and its task's whole tree lives in it.
func (w *World) SetCgroups(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cgroups = on
}

// Cgroups reports whether the host has cgroups.
func (w *World) Cgroups() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cgroups
}

// BootID is the world's boot id.
func (w *World) BootID() string { return w.bootID }

// CgroupFor is the cgroup an executor spawned with nonce names for task.
func CgroupFor(task, nonce string) string { return "/sim/tether/" + task + "." + nonce }

// Generation is one life of a driver process. When it dies (Kill), every
// call it makes into the world or the store stops its goroutine, as if the
// process had been SIGKILLed, and its connections drop.
type Generation struct {
	ID    int
	w     *World
	dead  chan struct{}
	once  sync.Once
	sched *scheduler // a harness's: every contact waits for its turn
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

// enter is a contact of the generation with the outside, op on task
// (empty when the contact does not name one): in a harness, the goroutine
// waits there for its turn (see the scheduler); then it stops if its
// generation is dead: the process it belongs to no longer exists.
func (g *Generation) enter(op, task string) {
	g.w.mu.Lock()
	if g.w.calls == nil {
		g.w.calls = map[string]int{}
	}
	g.w.calls[op]++
	g.w.mu.Unlock()
	if g.sched != nil {
		g.sched.park(op, task, -1)
	}
	g.exitIfDead()
}

// exitIfDead stops the calling goroutine if its generation is dead.
func (g *Generation) exitIfDead() {
	if g.Dead() {
		runtime.Goexit()
	}
}

func (w *World) dropGeneration(g *Generation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.conns[g] {
		w.closeConnLocked(h)
	}
	delete(w.conns, g)
	for task, l := range w.locks { // the kernel lets go of a dead process's locks
		if l.g == g {
			w.unlockLocked(task, l)
		}
	}
}

// inject asks the harness whether op fails or hangs now. A hang lasts
// until ctx ends (its caller's deadline) or the generation dies.
func (w *World) inject(ctx context.Context, g *Generation, op, task string) error {
	if w.Fault == nil {
		return nil
	}
	switch w.Fault(op) {
	case FaultFail:
		return fmt.Errorf("%w: %s", ErrWorldFault, op)
	case FaultHang:
		select {
		case <-ctx.Done():
			g.enter(op, task)
			return fmt.Errorf("proptest: %s hung (injected) until its context ended: %w", op, context.Cause(ctx))
		case <-g.dead:
			runtime.Goexit()
		}
	}
	return nil
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

// LockTask implements executor.World: a lock a generation holds until it
// lets go or dies.
func (v *view) LockTask(task string) (func(), int, error) {
	v.g.enter("lock", task)
	v.w.mu.Lock()
	defer v.w.mu.Unlock()
	release, holder := v.w.lockLocked(v.g, task)
	return release, holder, nil
}

// WaitLockTask implements executor.World.
func (v *view) WaitLockTask(ctx context.Context, task string) (func(), error) {
	for {
		v.g.enter("lock-wait", task)
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
	for p := w.procs[w.nextPID]; p != nil && p.Alive; p = w.procs[w.nextPID] {
		w.nextPID++ // taken (a stranger placed after a reboot)
	}
	pid := w.nextPID
	w.nextPID++
	p := &Proc{PID: pid, Start: w.ticks * 100, Kind: kind, Task: task, PGID: pid, Alive: true, died: make(chan struct{})}
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

// treeLocked lists the live processes of the tree executor e launched.
func (w *World) treeLocked(e *Proc) []*Proc {
	var out []*Proc
	for _, p := range w.all {
		if p.Alive && p.exec == e && p.exec != nil {
			out = append(out, p)
		}
	}
	return out
}

// dieLocked ends p with exit status x. A task leader whose executor is
// alive has the rest of its tree killed by that executor (a subreaper),
// then its exit status written to disk.
func (w *World) dieLocked(p *Proc, x fsm.ExitStatus) {
	if !p.Alive {
		return
	}
	p.Alive, p.Exit = false, x
	close(p.died)
	switch {
	case p.Kind == KindTask && p.exec != nil && p.exec.Alive && p.exec.child == p:
		e := p.exec
		for _, q := range w.treeLocked(e) {
			w.signalLocked(q, syscall.SIGKILL, "executor", p.Task)
		}
		if !w.restartLocked(e, x) {
			w.recordExitLocked(e)
		}
	case p.Kind == KindExecutor:
		w.notifyLocked(p)
	}
}

// recordExitLocked writes the exit status of executor e's last run: its
// task is over.
func (w *World) recordExitLocked(e *Proc) {
	c := e.child
	c.recorded = true
	xx := c.Exit
	d := w.diskLocked(e.Task)
	d.exit, d.exitNonce, d.exitBoot, d.exitPID, d.exitSt = &xx, e.Nonce, w.bootID, c.PID, c.Start
	w.notifyLocked(e)
}

func (w *World) notifyLocked(e *Proc) {
	if e.changed != nil {
		close(e.changed)
		e.changed = make(chan struct{})
	}
}

// execCrashLocked reports whether executor e dies at its crash point, and
// kills it there if so (its task's tree lives on).
func (w *World) execCrashLocked(e *Proc, point string) bool {
	if w.ExecutorCrash == nil || !w.ExecutorCrash(point) {
		return false
	}
	w.dieLocked(e, fsm.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)})
	return true
}

// restartLocked asks executor e's restart policy about the run that ended
// with x, once its tree is gone. For a restart it journals the intent and
// arms the delay, and reports true (the task is not over); it reports true
// too when the executor died at one of its crash points on the way.
func (w *World) restartLocked(e *Proc, x fsm.ExitStatus) bool {
	rs := e.rs
	if rs == nil || e.stopping {
		return false
	}
	now := time.Now().UnixNano()
	state, d := rs.policy.Next(rs.state, x, now)
	rs.state = state
	if !d.Restart {
		return false
	}
	if w.execCrashLocked(e, executor.CrashBeforeRestartIntent) {
		return true
	}
	xx := x
	w.journalLocked(e, fsm.Event{Type: fsm.EventRestartIntent, Time: now, Attempt: d.Attempt, Exit: &xx, Delay: d.Delay, Reason: d.Reason})
	if w.execCrashLocked(e, executor.CrashAfterRestartIntent) {
		return true
	}
	rs.pending = true
	time.AfterFunc(d.Delay, func() { w.relaunch(e) })
	return true
}

func (w *World) journalLocked(e *Proc, ev fsm.Event) {
	e.journal = append(e.journal, ev)
	d := w.diskLocked(e.Task)
	if d.journalNonce != e.Nonce {
		d.journal, d.journalNonce, d.journalBoot = nil, e.Nonce, w.bootID
	}
	d.journal = append(d.journal, ev)
	w.notifyLocked(e)
}

// relaunch starts executor e's task again once a restart's delay is over,
// and journals it.
func (w *World) relaunch(e *Proc) {
	if w.sched != nil {
		w.sched.park("relaunch", e.Task, -1) // a timer's goroutine: it takes its turn too
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := e.rs
	if !e.Alive || rs == nil || !rs.pending {
		return
	}
	rs.pending = false
	c := w.startRunLocked(e, rs.spec)
	e.ready = false
	if w.execCrashLocked(e, executor.CrashAfterRelaunch) {
		// The new run lives on, unrecorded: only its cgroup holds it
		// (as in executor/restart.go, which records a relaunch only after
		// its crash point).
		c.Unrecorded = true
		return
	}
	w.recordLaunchLocked(e)
	w.journalLocked(e, fsm.Event{Type: fsm.EventLaunched, Time: time.Now().UnixNano(), TaskPID: c.PID, TaskStartTime: c.Start})
	if !w.readyLocked(e, rs.spec) {
		return // the executor died at a crash point of its readiness
	}
	w.exitNowLocked(c, rs.spec)
}

// readyPoints are the executor's crash points on its readiness path:
// before its ready entry, and after.
var readyPoints = []string{executor.CrashBeforeReadyEntry, executor.CrashAfterReadyEntry}

// readyLocked makes the live current run of executor e's task ready, when
// its spec's readiness waits (a notify task of the model world says
// READY=1 as soon as it runs): journalled first, between the executor's
// two crash points of its readiness path (readyPoints), as
// executor/server does, unless the world's executors are of a protocol
// before 10 (SetOldExecutors), which journal none. It reports false when
// the executor died at one of those points.
func (w *World) readyLocked(e *Proc, spec fsm.Spec) bool {
	c := e.child
	if !spec.Readiness.Waits() || c == nil || !c.Alive || !e.Alive || e.ready {
		return e.Alive
	}
	if !w.oldExecutors {
		if w.execCrashLocked(e, readyPoints[0]) { // before the entry
			return false
		}
		w.journalLocked(e, fsm.Event{Type: fsm.EventReady, Time: time.Now().UnixNano(), Attempt: len(e.journal) + 1, TaskPID: c.PID, TaskStartTime: c.Start})
		if w.execCrashLocked(e, readyPoints[1]) { // after it
			return false
		}
	}
	e.ready = true
	return true
}

// cancelRestartLocked drops a pending restart (a stop or shutdown during
// its delay): the task is over with its last run's exit.
func (w *World) cancelRestartLocked(e *Proc) {
	if e.rs != nil && e.rs.pending {
		e.rs.pending = false
		w.recordExitLocked(e)
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
// look-alike stranger (see ReusePID) is told apart by its start time alone,
// and one after a reboot (see Reboot) by the boot id alone.
func (w *World) ours(p *Proc, id fsm.Identity) (bool, string) {
	switch {
	case p.Start != id.StartTime:
		return false, fmt.Sprintf("start time %d, recorded %d", p.Start, id.StartTime)
	case p.Nonce != id.Nonce:
		return false, fmt.Sprintf("nonce %q, recorded %q", p.Nonce, id.Nonce)
	}
	return true, ""
}

// otherBoot reports whether id was recorded in another boot: its process
// is gone, whatever now runs at its pid (executor.checkIdentity's first
// test).
func (w *World) otherBoot(id fsm.Identity) bool { return id.BootID != w.bootID }

// Calls says how often a driver asked the world for op ("kill",
// "kill-task", "launch-record", "exit-status", "reattach", "stop",
// "shutdown", "dismiss", "spawn", "launch", ...), counting each contact.
func (w *World) Calls(op string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[op]
}

// View returns the world as seen by driver generation g.
func (w *World) View(g *Generation) executor.World { return &view{w: w, g: g} }

type view struct {
	w *World
	g *Generation
}

var _ executor.World = (*view)(nil)

func (v *view) Spawn(ctx context.Context, task, nonce string) (executor.Conn, error) {
	v.g.enter("spawn", task)
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
	p := w.newExecutorLocked(task, nonce)
	return w.connectLocked(v.g, p), nil
}

func (w *World) newExecutorLocked(task, nonce string) *Proc {
	p := w.newProcLocked(KindExecutor, task)
	p.Nonce = nonce
	p.changed = make(chan struct{})
	if w.cgroups {
		p.Cgroup = CgroupFor(task, nonce)
	}
	return p
}

func (w *World) connectLocked(g *Generation, p *Proc) *conn {
	p.conns++
	h := &conn{w: w, g: g, p: p, closed: make(chan struct{})}
	w.conns[g] = append(w.conns[g], h)
	return h
}

func (v *view) Reattach(ctx context.Context, task string, id fsm.Identity) (executor.Conn, error) {
	v.g.enter(OpReattach, task)
	w := v.w
	if err := w.inject(ctx, v.g, OpReattach, task); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive || w.otherBoot(id) {
		return nil, fmt.Errorf("%w: pid %d (boot %q)", executor.ErrGone, id.PID, id.BootID)
	}
	if ok, why := w.ours(p, id); !ok {
		w.refused = append(w.refused, Refusal{Via: "reattach", PID: id.PID, Task: task, Why: why})
		return nil, fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	w.trustLocked(p, "reattach", task)
	return w.connectLocked(v.g, p), nil
}

func (v *view) FindByNonce(ctx context.Context, task, nonce string) (fsm.Identity, bool, error) {
	v.g.enter("find-by-nonce", task)
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
	return fsm.Identity{PID: p.PID, StartTime: p.Start, BootID: w.bootID, Nonce: p.Nonce,
		Socket: fmt.Sprintf("/sim/%s/%d.sock", p.Task, p.PID), Cgroup: p.Cgroup}
}

func (v *view) Kill(ctx context.Context, task string, id fsm.Identity) error {
	v.g.enter(OpKill, task)
	w := v.w
	if err := w.inject(ctx, v.g, OpKill, task); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive || w.otherBoot(id) {
		return nil
	}
	if ok, why := w.ours(p, id); !ok {
		w.refused = append(w.refused, Refusal{Via: "kill", PID: id.PID, Task: task, Why: why})
		return fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	w.trustLocked(p, "kill", task)
	w.signalLocked(p, syscall.SIGKILL, "kill", task)
	return nil
}

// KillTask kills the task's cgroup when the identity names one (after
// checking that its path names the task and the nonce), else the process
// group led by pid, as executor.KillGroup does: the leader, when alive,
// must have the recorded start time, and members are those of the group
// that started no earlier than it. A task of another boot is gone: nothing
// is signalled (driver.Real.KillTask checks the boot id first).
func (v *view) KillTask(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) error {
	pid, start := run.PID, run.StartTime
	v.g.enter(OpKillTask, task)
	w := v.w
	if id.Cgroup == "" && pid == 0 {
		return nil
	}
	w.mu.Lock()
	other := w.otherBoot(id)
	w.mu.Unlock()
	if other {
		return nil
	}
	if err := w.inject(ctx, v.g, OpKillTask, task); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if id.Cgroup != "" {
		if want := CgroupFor(task, id.Nonce); id.Cgroup != want || id.Nonce == "" {
			why := fmt.Sprintf("cgroup %q does not name task %q and nonce %q", id.Cgroup, task, id.Nonce)
			w.refused = append(w.refused, Refusal{Via: "kill-cgroup", Task: task, Why: why})
			return fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
		}
		for _, p := range w.all {
			if p.Alive && p.Cgroup == id.Cgroup && p.Kind != KindExecutor {
				w.signalLocked(p, syscall.SIGKILL, "kill-cgroup", task)
			}
		}
		return nil
	}
	if p := w.procs[pid]; p != nil && p.Alive && p.Start != start {
		why := fmt.Sprintf("pid %d is a %s started at %d, recorded start %d", pid, p.Kind, p.Start, start)
		w.refused = append(w.refused, Refusal{Via: "kill-group", PID: pid, Task: task, Why: why})
		return fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	for _, p := range w.all {
		if p.Alive && p.PGID == pid && p.Start >= start {
			w.signalLocked(p, syscall.SIGKILL, "kill-group", task)
		}
	}
	return nil
}

func (v *view) Alive(ctx context.Context, task string, id fsm.Identity) (bool, error) {
	v.g.enter("alive", task)
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.procs[id.PID]
	if p == nil || !p.Alive || w.otherBoot(id) {
		return false, nil
	}
	ok, _ := w.ours(p, id)
	return ok, nil
}

func (v *view) ExitStatus(ctx context.Context, task string, id fsm.Identity, run fsm.Proc) (fsm.ExitStatus, bool, error) {
	pid, start := run.PID, run.StartTime
	v.g.enter("exit-status", task)
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil || d.exit == nil {
		return fsm.ExitStatus{}, false, nil
	}
	if d.exitNonce != id.Nonce || d.exitBoot != id.BootID || pid > 0 && (d.exitPID != pid || d.exitSt != start) {
		why := fmt.Sprintf("exit record of nonce %q boot %q pid %d, the log has nonce %q boot %q pid %d", d.exitNonce, d.exitBoot, d.exitPID, id.Nonce, id.BootID, pid)
		w.refused = append(w.refused, Refusal{Via: "exit-status", PID: d.exitPID, Task: task, Why: why})
		return fsm.ExitStatus{}, false, fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	return *d.exit, true, nil
}

func (v *view) LaunchRecord(ctx context.Context, task string, id fsm.Identity) (fsm.Proc, bool, error) {
	v.g.enter("launch-record", task)
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil || !d.launched {
		return fsm.Proc{}, false, nil
	}
	if d.nonce != id.Nonce || d.boot != id.BootID {
		why := fmt.Sprintf("launch record of nonce %q boot %q, the log has %q boot %q", d.nonce, d.boot, id.Nonce, id.BootID)
		w.refused = append(w.refused, Refusal{Via: "launch-record", PID: d.launchPID, Task: task, Why: why})
		return fsm.Proc{}, false, fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	return fsm.Proc{PID: d.launchPID, StartTime: d.launchSt}, true, nil
}

// conn is one connection from a driver generation to an executor.
type conn struct {
	w        *World
	g        *Generation
	p        *Proc
	isClosed bool
	closed   chan struct{}
}

var _ executor.Conn = (*conn)(nil)

func (w *World) closeConnLocked(h *conn) {
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
func (h *conn) usableLocked() error {
	switch {
	case h.isClosed:
		return ErrConnClosed
	case !h.p.Alive:
		return fmt.Errorf("%w: executor pid %d died", executor.ErrGone, h.p.PID)
	}
	return nil
}

func (h *conn) Identity() fsm.Identity {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.identity(h.p)
}

func (h *conn) Launch(ctx context.Context, spec fsm.Spec) (executor.Status, error) {
	h.g.enter("launch", h.p.Task)
	w := h.w
	if w.BeforeEffect != nil {
		w.BeforeEffect("launch", h.p.Task, "")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return executor.Status{}, err
	}
	p := h.p
	if p.launched {
		return w.statusOfLocked(p), nil
	}
	if slices.Contains(spec.CapAdd, CapRefused) {
		return executor.Status{}, ErrCapRefused
	}
	w.launchLocked(p, spec)
	st := w.statusOfLocked(p)
	w.readyLocked(p, spec) // its READY=1 comes after the launch's answer
	return st, nil
}

// launchLocked starts executor p's task (and the descendants its spec
// asks for) in its cgroup, and writes the launch record; a spec with a
// restart policy sets up the executor's restarts.
func (w *World) launchLocked(p *Proc, spec fsm.Spec) {
	p.launched = true
	if spec.Restart != nil {
		p.rs = &restarts{policy: *spec.Restart, state: fsm.RestartState{WindowStart: time.Now().UnixNano()}, spec: spec}
	}
	c := w.startRunLocked(p, spec)
	w.recordLaunchLocked(p)
	w.exitNowLocked(c, spec)
}

// startRunLocked starts one run of executor p's task: its leader and the
// descendants its spec asks for.
func (w *World) startRunLocked(p *Proc, spec fsm.Spec) *Proc {
	c := w.newProcLocked(KindTask, p.Task)
	c.exec, c.Cgroup = p, p.Cgroup
	p.child = c
	for _, a := range spec.Args {
		switch a {
		case ArgFork, ArgSetsid, ArgDaemon:
			k := w.newProcLocked(KindDescendant, p.Task)
			k.exec, k.Cgroup = p, p.Cgroup
			if a == ArgFork {
				k.PGID = c.PID
			} else {
				k.Escaped = true // setsid: a group (and session) of its own
			}
		}
	}
	return c
}

func (w *World) recordLaunchLocked(p *Proc) {
	d := w.diskLocked(p.Task)
	d.launched, d.launchPID, d.launchSt, d.nonce, d.boot = true, p.child.PID, p.child.Start, p.Nonce, w.bootID
}

// exitNowLocked ends a run whose spec says it exits at once.
func (w *World) exitNowLocked(c *Proc, spec fsm.Spec) {
	switch {
	case slices.Contains(spec.Args, ArgExitNow):
		w.dieLocked(c, fsm.ExitStatus{Code: 0})
	case slices.Contains(spec.Args, ArgExitFail):
		w.dieLocked(c, fsm.ExitStatus{Code: 1})
	}
}

func (w *World) statusOfLocked(p *Proc) executor.Status {
	if !p.launched {
		return executor.Status{}
	}
	s := executor.Status{Launched: true, PID: p.child.PID, StartTime: p.child.Start}
	if !p.child.Alive {
		s.Exited, s.Exit = true, p.child.Exit
	}
	if p.rs != nil {
		s.Restarting = p.rs.pending
	}
	s.Journal = len(p.journal)
	if p.ready && p.child.Alive {
		s.Ready, s.ReadyJournalled = true, !w.oldExecutors
	}
	// Emptied, as the real executor says it: the task is over and its
	// cgroup holds nothing (no cgroup: never).
	s.Emptied = s.Over() && p.child.recorded && p.Cgroup != "" && len(w.treeLocked(p)) == 0
	return s
}

func (h *conn) Status(ctx context.Context) (executor.Status, error) {
	h.g.enter(OpStatus, h.p.Task)
	w := h.w
	if err := w.inject(ctx, h.g, OpStatus, h.p.Task); err != nil {
		return executor.Status{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return executor.Status{}, err
	}
	return w.statusOfLocked(h.p), nil
}

func (h *conn) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	h.g.enter("wait", h.p.Task)
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
	h.g.enter("wait", h.p.Task)
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
		return fsm.ExitStatus{}, fmt.Errorf("%w: executor pid %d died", executor.ErrGone, h.p.PID)
	}
	return fsm.ExitStatus{}, ctx.Err()
}

// Signal sends sig to the task's process group, or with main to its
// leader alone.
func (h *conn) Signal(ctx context.Context, sig syscall.Signal, main bool) error {
	h.g.enter("signal", h.p.Task)
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return err
	}
	if !h.p.launched {
		return ErrNotLaunched
	}
	if main {
		if h.p.child.Alive {
			w.signalLocked(h.p.child, sig, "executor", h.p.Task)
		}
		return nil
	}
	w.signalGroupLocked(h.p, sig)
	return nil
}

func (w *World) signalGroupLocked(e *Proc, sig syscall.Signal) {
	leader := e.child
	for _, q := range w.treeLocked(e) {
		if q.PGID == leader.PID {
			w.signalLocked(q, sig, "executor", e.Task)
		}
	}
}

// Stop signals the task's group, and after the grace SIGKILLs the whole
// tree (the executor is a subreaper: escaped descendants too).
func (h *conn) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (executor.Status, error) {
	h.g.enter(OpStop, h.p.Task)
	w := h.w
	if err := w.inject(ctx, h.g, OpStop, h.p.Task); err != nil {
		return executor.Status{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return executor.Status{}, err
	}
	if !h.p.launched {
		return executor.Status{}, ErrNotLaunched
	}
	h.p.stopping = true
	w.cancelRestartLocked(h.p)
	c := h.p.child
	if c.Alive {
		w.signalGroupLocked(h.p, sig)
	}
	for _, q := range w.treeLocked(h.p) { // what ignored the signal: SIGKILL after grace
		w.signalLocked(q, syscall.SIGKILL, "executor", h.p.Task)
	}
	return w.statusOfLocked(h.p), nil
}

func (h *conn) Shutdown(ctx context.Context) error {
	h.g.enter(OpShutdown, h.p.Task)
	w := h.w
	if err := w.inject(ctx, h.g, OpShutdown, h.p.Task); err != nil {
		return err
	}
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
	p.stopping = true
	if p.launched {
		w.cancelRestartLocked(p)
	}
	for _, q := range w.treeLocked(p) {
		w.signalLocked(q, syscall.SIGKILL, "executor", p.Task)
	}
	w.dieLocked(p, fsm.ExitStatus{Code: 0})
	return nil
}

// Dismiss SIGKILLs an executor whose task is over (its pidfd, opened on
// the proven process, reaches it and nothing else); its task's tree, if
// any were left, lives on as it would.
func (h *conn) Dismiss(ctx context.Context) error {
	h.g.enter(OpDismiss, h.p.Task)
	w := h.w
	if err := w.inject(ctx, h.g, OpDismiss, h.p.Task); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return err
	}
	w.signalLocked(h.p, syscall.SIGKILL, "dismiss", h.p.Task) // a look-alike (reattached to one) is logged as signalled
	return nil
}

// WaitReady implements executor.Conn: a notify task of the model world is
// ready as soon as it is launched (its readiness journalled: readyLocked);
// a run that exited is not.
func (h *conn) WaitReady(ctx context.Context) (executor.Status, error) {
	h.g.enter("wait-ready", h.p.Task)
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := h.usableLocked(); err != nil {
		return executor.Status{}, err
	}
	if !h.p.launched {
		return executor.Status{}, ErrNotLaunched
	}
	return w.statusOfLocked(h.p), nil
}

// Watch implements executor.Conn: it returns once the restart journal
// holds entries past since, or the task is over (its last run exited and
// no restart follows).
func (h *conn) Watch(ctx context.Context, since int) (executor.Status, []fsm.Event, error) {
	h.g.enter("watch", h.p.Task)
	w := h.w
	for {
		w.mu.Lock()
		if err := h.usableLocked(); err != nil {
			w.mu.Unlock()
			return executor.Status{}, nil, err
		}
		p := h.p
		if !p.launched {
			w.mu.Unlock()
			return executor.Status{}, nil, ErrNotLaunched
		}
		st := w.statusOfLocked(p)
		var entries []fsm.Event
		if since >= 0 && since < len(p.journal) {
			entries = slices.Clone(p.journal[since:])
		}
		over := st.Over() && p.child.recorded
		changed := p.changed
		w.mu.Unlock()
		if len(entries) > 0 || over {
			return st, entries, nil
		}
		select {
		case <-changed:
		case <-h.closed:
		case <-p.died:
		case <-ctx.Done():
			h.g.enter("watch", h.p.Task)
			return executor.Status{}, nil, ctx.Err()
		case <-h.g.dead:
			runtime.Goexit()
		}
		h.g.enter("watch", h.p.Task)
	}
}

// Journal implements driver.JournalReader: the restart journal the task's
// executor left on disk, once it matches the log's executor identity.
func (v *view) Journal(ctx context.Context, task string, id fsm.Identity) ([]fsm.Event, error) {
	v.g.enter("journal", task)
	w := v.w
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.disk[task]
	if d == nil || d.journal == nil {
		return nil, nil
	}
	if d.journalNonce != id.Nonce || d.journalBoot != id.BootID {
		why := fmt.Sprintf("restart journal of nonce %q boot %q, the log has %q boot %q", d.journalNonce, d.journalBoot, id.Nonce, id.BootID)
		w.refused = append(w.refused, Refusal{Via: "journal", Task: task, Why: why})
		return nil, fmt.Errorf("%w: %s", executor.ErrNotOurs, why)
	}
	return slices.Clone(d.journal), nil
}

// CheckSpec implements executor.World: the simulation models no host, so
// what it checks is what needs none (exec's capabilities against the
// default allow list); CapRefused passes here and is refused at launch,
// the in-executor failure the seed's bug is about.
func (v *view) CheckSpec(spec fsm.Spec) error {
	if spec.Driver == executor.ModeExec {
		return executor.ValidateCaps(spec.CapAdd, spec.CapDrop, nil)
	}
	return nil
}

// DiscardTask implements executor.World: a simulated lock leaves nothing
// behind.
func (v *view) DiscardTask(task string) {}

// Stats implements executor.Conn: the simulation has no cgroup figures.
func (h *conn) Stats(ctx context.Context) (cgroup.Stats, error) {
	return cgroup.Stats{}, fmt.Errorf("%w: stats of a simulated task", executor.ErrUnsupported)
}

// Exec implements executor.Conn: the simulation runs no command inside a
// task.
func (h *conn) Exec(ctx context.Context, es executor.ExecSpec) (*executor.ExecProcess, error) {
	return nil, fmt.Errorf("%w: exec in a simulated task", executor.ErrUnsupported)
}

// Close drops the connection. It never stops the caller, even in a dead
// generation: closing is what a dying process does anyway.
func (h *conn) Close() error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.closeConnLocked(h)
	return nil
}

// --- the harness's view: reality, and events behind the driver's back ---

// Procs returns a copy of every process ever created, in creation order.
func (w *World) Procs() []Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procsLocked(false)
}

func (w *World) procsLocked(liveOnly bool) []Proc {
	out := make([]Proc, 0, len(w.all))
	for _, p := range w.all {
		if liveOnly && (!p.Alive || p.Kind == KindStranger) {
			continue
		}
		q := *p
		q.child, q.exec, q.died = nil, nil, nil
		out = append(out, q)
	}
	return out
}

// eachLive calls fn, with the world locked, for every live executor, task
// and descendant process, in creation order (fn must not call the world).
func (w *World) eachLive(fn func(p *Proc)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.all {
		if p.Alive && p.Kind != KindStranger {
			fn(p)
		}
	}
}

// since returns the trust records and signals logged after the first nt
// and ns.
func (w *World) since(nt, ns int) ([]Refusal, []Signal) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.trusted[nt:]), slices.Clone(w.signals[ns:])
}

// Live returns the live executor, task and descendant processes, by pid.
func (w *World) Live() []Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.procsLocked(true)
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
// killer, an operator's kill -9). An executor's task tree survives it.
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

// KillExecutors kills every live executor behind the driver's back and
// returns how many died.
func (w *World) KillExecutors() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.all {
		if p.Alive && p.Kind == KindExecutor {
			w.dieLocked(p, fsm.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)})
			n++
		}
	}
	return n
}

// Relaunched starts, for task, an executor with nonce that has launched
// the task of spec with no driver connected: what an executor that
// relaunched its task (restart policy), or a driver of an older version
// that recorded launched alone, leaves behind. It returns the executor's
// identity and the task's pid and start time, for the log to record.
func (w *World) Relaunched(task, nonce string, spec fsm.Spec) (fsm.Identity, int, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.newExecutorLocked(task, nonce)
	w.launchLocked(p, spec)
	w.readyLocked(p, spec)
	return w.identity(p), p.child.PID, p.child.Start
}

// Reboot restarts the host: every process dies at once and nothing is
// written (no exit status), every connection and task lock is let go of,
// the boot id changes, and pids and start times count again from where
// they began, so that a new process may have the pid and the start time of
// a process of the last boot (see Collide). The task directories (side
// files) and the log survive. The driver generation must be dead already
// (Harness.Reboot crashes it first).
func (w *World) Reboot() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.all {
		if p.Alive {
			p.Alive, p.Exit = false, fsm.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)}
			close(p.died)
		}
	}
	for g, hs := range w.conns {
		for _, h := range hs {
			w.closeConnLocked(h)
		}
		delete(w.conns, g)
	}
	for task, l := range w.locks {
		w.unlockLocked(task, l)
	}
	w.boots++
	w.bootID = fmt.Sprintf("boot-%d", w.boots+1)
	w.nextPID, w.ticks = 1000, 0
	w.procs = map[int]*Proc{}
}

// Collide starts, after a reboot, a stranger at pid with start time start
// and nonce on its command line: a process of the new boot that looks, by
// everything but the boot id, like a process of the last one. It reports
// whether the pid was free.
func (w *World) Collide(pid int, start uint64, nonce string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.procs[pid]; p != nil && p.Alive {
		return false
	}
	s := &Proc{PID: pid, Start: start, Kind: KindStranger, PGID: pid, Nonce: nonce, Alive: true, died: make(chan struct{})}
	w.procs[pid] = s
	w.all = append(w.all, s)
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
	if p == nil || p.Alive || w.groupInUseLocked(pid) {
		return false
	}
	w.ticks++
	s := &Proc{PID: pid, Start: w.ticks * 100, Kind: KindStranger, PGID: pid, Alive: true, died: make(chan struct{})}
	if lookAlike {
		s.Nonce = p.Nonce
	}
	w.procs[pid] = s
	w.all = append(w.all, s)
	return true
}

// ReusablePIDs lists, in order, the pids of dead processes that no other
// process has taken since, and that no live process has as its process
// group (the kernel keeps a pid number allocated while a group of that
// number has members: executor.KillGroup relies on it).
func (w *World) ReusablePIDs() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int
	for pid, p := range w.procs {
		if !p.Alive && !w.groupInUseLocked(pid) {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// Census reports whether a task process (or a descendant), an executor
// and a reusable pid (ReusablePIDs) are there, without listing them.
func (w *World) Census() (tasks, executors, reusable bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var groups [16]int
	live := groups[:0]
	for _, p := range w.all {
		if !p.Alive {
			continue
		}
		tasks = tasks || p.Kind == KindTask
		executors = executors || p.Kind == KindExecutor
		if !slices.Contains(live, p.PGID) {
			live = append(live, p.PGID)
		}
	}
	for pid, p := range w.procs {
		if !p.Alive && !slices.Contains(live, pid) {
			return tasks, executors, true
		}
	}
	return tasks, executors, false
}

func (w *World) groupInUseLocked(pgid int) bool {
	for _, p := range w.all {
		if p.Alive && p.PGID == pgid {
			return true
		}
	}
	return false
}

// Outlives reports whether p, a live process of a task whose log is
// terminal, breaks "no process of a task outlives its terminal state":
// every one does, except, where the host has no cgroups, a descendant that
// escaped the task's process group, which nothing can find once its
// executor is gone, and a run its executor relaunched and died before
// recording (no pid of it is anywhere). That is the host's limit (and, for
// the second, the executor's order of relaunch and record), not the
// driver's: Escapes lists them.
func (w *World) Outlives(p Proc) bool {
	if p.Cgroup != "" {
		return true
	}
	return !(p.Kind == KindDescendant && p.Escaped || p.Kind == KindTask && p.Unrecorded)
}

// Escapes returns the live processes outside any cgroup that nothing can
// find (see Outlives), one line each: what a host without cgroups leaks
// when an executor dies, which the property reports and does not count
// against the driver.
func (w *World) Escapes() []string {
	var out []string
	for _, p := range w.Live() {
		if !w.Outlives(p) {
			out = append(out, fmt.Sprintf("%s pid %d of task %q", p.Kind, p.PID, p.Task))
		}
	}
	return out
}

// describe is a short line about a process, for violations.
func describe(p Proc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s pid %d of task %q", p.Kind, p.PID, p.Task)
	if p.Escaped {
		b.WriteString(" (escaped its group)")
	}
	if p.Unrecorded {
		b.WriteString(" (relaunched, never recorded)")
	}
	if p.Cgroup != "" {
		b.WriteString(" in cgroup " + p.Cgroup)
	}
	return b.String()
}
