package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/metrics"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
	"github.com/tether-fsm/tether/taskfile"
)

// Config configures an agent. StateDir is required.
type Config struct {
	// StateDir is the state directory the agent serves (as the CLI's
	// --state-dir): its store, its tasks, and the agent's socket and lock.
	StateDir string
	// ConfigDir holds the task and job files (*.hcl, *.nomad) the agent
	// keeps running (optional). It and its files must be owned by root or
	// the agent's user and writable by no one else; a file may be a
	// symbolic link within it, never out of it. Each file is read through
	// package job (with the agent's NOMAD_VAR_ variables), as `tether
	// start FILE` reads it.
	ConfigDir string
	// Logger receives the agent's logs (and its driver's, named "driver");
	// nil discards them.
	Logger hclog.Logger
	// ExecutorCommand starts this binary in executor mode (see driver).
	ExecutorCommand []string
	// AllowedCaps and ChrootEnv are the operator's allow lists (see
	// driver.Config): they apply to every task the agent starts, whoever
	// asked; no request carries or widens them.
	AllowedCaps []string
	ChrootEnv   []string
	// AllowSeccomp, AllowMissing and AllowRead are the operator's other
	// allow lists (driver.Config's): what an exec task's seccomp may name,
	// the sandbox parts it may run without, the host directories a job
	// file's template may read. nil: none.
	AllowSeccomp []string
	AllowMissing []string
	AllowRead    []string
	// AllowDrivers, AllowRemoteDrivers, AllowHostNamespaces and MaxCount
	// are the operator's word on drivers (a spec from the Feed may use
	// only the remote ones), host namespaces and a group's count (see
	// job.Policy; nil and 0: its defaults).
	AllowDrivers, AllowRemoteDrivers, AllowHostNamespaces []string
	MaxCount                                              int
	// ReleasePorts lets go of the ports of a group whose directory gc
	// removed (the CLI's port allocator; nil: none).
	ReleasePorts func(alloc string)
	// StoreOptions open the store (held for the agent's life).
	StoreOptions store.Options
	// Hooks crash the agent at its points; DriverHooks are its driver's
	// (tests; see HooksFromEnv).
	Hooks       Hooks
	DriverHooks driver.Hooks
	// Now is the clock (default time.Now); NewID draws a task id for a
	// desired entry's task (default job.NewTaskID), NewAllocID an
	// allocation's (default job.NewAllocID); BootID is this boot's id
	// (default: the kernel's).
	Now        func() time.Time
	NewID      func(name string) string
	NewAllocID func() string
	BootID     string
	// Feed declares desired tasks besides the config dir (tether-fleet's
	// agent: the node's desired state from etcd; see Feed); nil for none.
	Feed *Feed
	// Host is what the job path reads of the node beside what it detects
	// (taskfile.DetectHost): tether-fleet's agent gives the node's name,
	// datacenter, class and --meta, so that ${node.unique.name} and
	// ${meta.*} (constraints, interpolation) are the node's as registered
	// in the fleet. Zero: the host's defaults.
	Host taskfile.HostConfig
	// Appended, when set, is told the task of every append the agent's
	// driver makes to the store, whatever its outcome (a mirror's
	// wake-up: it must not block).
	Appended func(task string)
	// Metrics, when set, is where the agent's metrics are registered
	// (metrics.go: tasks started, stopped, restarted, rescheduled and OOM
	// killed by name, runs ended by reason, tasks by state, executors,
	// desired entries by standing, start, stop, recovery and store commit
	// latencies; docs/metrics.md); the caller serves it. nil: none, at no
	// cost.
	Metrics *metrics.Registry
}

// Agent serves one state directory: it holds its store and its driver,
// serves the CLI on the state directory's socket, and converges the desired
// state. It stops nothing when it exits: the executors keep their tasks,
// and the next agent adopts them.
type Agent struct {
	*Local // the task operations and the upkeep, served to clients

	cfg    Config
	log    hclog.Logger
	lock   *os.File
	st     *heldStore
	d      *driver.Driver
	conv   *converger
	env    *spawnEnv
	drives *drives
	met    *agentMetrics

	serving   chan struct{} // closed once Run's socket listens
	started   atomic.Bool   // Run or Once was called
	closeOnce sync.Once
}

var errStarted = errors.New("agent: Run or Once was called already: an agent serves once")

var _ Service = (*Agent)(nil)

// Open takes the state directory's agent lock (a second agent fails at
// once with a *RunningError naming the first's pid), checks the config
// dir, and opens the store (held until Close) and a driver over it. It
// reconciles nothing: Run and Once do, first.
func Open(cfg Config) (a *Agent, err error) {
	if cfg.StateDir == "" {
		return nil, errors.New("agent: Config.StateDir is required")
	}
	if cfg.StateDir, err = absPath(cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	notifySocket() // out of the environment before anything is spawned
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = job.NewTaskID
	}
	if cfg.NewAllocID == nil {
		cfg.NewAllocID = job.NewAllocID
	}
	if cfg.BootID == "" {
		if cfg.BootID, err = proc.BootID(); err != nil {
			return nil, fmt.Errorf("agent: boot id: %w", err)
		}
	}
	if err := driver.PrepareStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	lock, err := lockAgent(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = lock.Close()
		}
	}()
	if cfg.ConfigDir != "" {
		if cfg.ConfigDir, err = OpenConfigDir(cfg.ConfigDir); err != nil {
			return nil, err
		}
	}
	opts := cfg.StoreOptions
	if opts.Logger == nil {
		opts.Logger = cfg.Logger.Named("store")
	}
	met := newAgentMetrics(cfg.Metrics)
	if met != nil && opts.Committed == nil {
		opts.Committed = met.storeCommit
	}
	policy := executor.Policy{AllowedCaps: slices.Clone(cfg.AllowedCaps), Chroot: slices.Clone(cfg.ChrootEnv),
		AllowSeccomp: slices.Clone(cfg.AllowSeccomp), AllowMissing: slices.Clone(cfg.AllowMissing), AllowRead: slices.Clone(cfg.AllowRead),
		AllowDrivers: slices.Clone(cfg.AllowDrivers), AllowHostNamespaces: slices.Clone(cfg.AllowHostNamespaces)}
	if err := executor.ValidatePolicy(policy); err != nil {
		return nil, fmt.Errorf("agent: Config's policy: %w", err)
	}
	if err := (Policy{AllowDrivers: cfg.AllowDrivers, AllowRemoteDrivers: cfg.AllowRemoteDrivers, AllowHostNamespaces: cfg.AllowHostNamespaces,
		MaxCount: cfg.MaxCount}).Job().Validate(); err != nil {
		return nil, fmt.Errorf("agent: Config's policy: %w", err)
	}
	st, err := openHeld(statedir.Layout{Dir: cfg.StateDir}.Store(), opts)
	if err != nil {
		return nil, err
	}
	if met != nil {
		// Before anything is appended: the tasks live now, by name.
		scan, err := st.LoadTasks(context.Background(), store.LiveTasks)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		met.seed(scan.Tasks)
	}
	env := &spawnEnv{paths: map[string]string{}}
	world := &executor.Real{StateDir: cfg.StateDir, Command: cfg.ExecutorCommand, Logger: cfg.Logger.Named("driver"),
		Policy: policy, Env: env.of}
	d, err := driver.Open(driver.Config{
		StateDir: cfg.StateDir, Store: driverLog(st, cfg, met), Logger: cfg.Logger.Named("driver"), World: world,
		Hooks: cfg.DriverHooks,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, lock: lock, st: st, d: d, env: env, met: met, serving: make(chan struct{})}
	a.Local = &Local{D: d, Store: st, StateDir: cfg.StateDir, ExecutorCommand: cfg.ExecutorCommand,
		Logger: cfg.Logger, Now: cfg.Now, NewID: cfg.NewID, Hooks: cfg.DriverHooks, ReleasePorts: cfg.ReleasePorts,
		BootID: cfg.BootID, Points: cfg.Hooks, Policy: a.Policy().Job(), Host: cfg.Host}
	a.drives = newDrives(a.Local, cfg.Logger)
	a.conv = newConverger(a)
	if met != nil {
		a.drives.copied = met.copied
		a.registerGauges(cfg.Metrics, cfg.Logger.Named("metrics"))
	}
	if cfg.Feed != nil {
		cfg.Feed.onSet(a.Rescan)
	}
	return a, nil
}

// Serving is closed once Run's socket accepts connections (clients
// connecting from then on are served; the desired state converges after
// Recover).
func (a *Agent) Serving() <-chan struct{} { return a.serving }

// Driver is the agent's driver.
func (a *Agent) Driver() *driver.Driver { return a.d }

// Run recovers every live task, serves the socket and converges the desired
// state until ctx ends; then it stops serving and returns, stopping no
// task. A socket a killed agent left is removed first (the agent lock says
// no agent serves it).
func (a *Agent) Run(ctx context.Context) error {
	if a.started.Swap(true) {
		return errStarted
	}
	ln, err := listen(a.cfg.StateDir, func() {
		a.log.Info("removed the socket a killed agent left", "socket", SocketPath(a.cfg.StateDir))
	})
	if err != nil {
		return err
	}
	defer os.Remove(SocketPath(a.cfg.StateDir)) // ours: the lock is held
	owner, err := dirOwner(a.cfg.StateDir)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("agent: state directory: %w", err)
	}
	srv := NewServer(a, owner, a.log.Named("server"))
	srv.Policy = a.Policy()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	a.log.Info("agent serving", "socket", SocketPath(a.cfg.StateDir), "pid", os.Getpid(), "config_dir", a.cfg.ConfigDir)
	close(a.serving)

	a.drives.begin(ctx, a.conv.driveChanged)
	defer a.drives.wait()
	a.recover(ctx)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if a.cfg.ConfigDir != "" {
		w, err := fsnotify.NewWatcher()
		if err == nil {
			err = w.Add(a.cfg.ConfigDir)
		}
		if err != nil {
			a.log.Error("cannot watch the config dir: it is read again on SIGHUP only", "config_dir", a.cfg.ConfigDir, "err", err)
		} else {
			defer w.Close()
			events, errs = w.Events, w.Errors
		}
	}
	cerr := a.conv.run(ctx, false, events, errs)
	serr := <-served
	a.log.Info("agent stopped; its tasks keep running")
	return errors.Join(cerr, serr)
}

// Once recovers every live task, converges the desired state until nothing
// is due (a start delayed by a restart policy is left for a running agent),
// and returns. It serves no socket (for cron's @reboot, or a boot script
// before the agent runs).
func (a *Agent) Once(ctx context.Context) error {
	if a.started.Swap(true) {
		return errStarted
	}
	dctx, stop := context.WithCancel(ctx)
	defer func() {
		stop() // the groups it drives are left to the next agent
		a.drives.wait()
	}()
	a.drives.begin(dctx, a.conv.driveChanged)
	a.recover(ctx)
	return a.conv.run(ctx, true, nil, nil)
}

// recover reconciles every live task (driver.Recover), then drives every
// group nobody drives (a crashed agent's, a dead drive-group's), and every
// group whose last copy ended while no driver recorded what follows it.
func (a *Agent) recover(ctx context.Context) {
	began := time.Now()
	rep, err := a.d.Recover(ctx)
	a.met.recovered(time.Since(began))
	for _, r := range rep.Tasks {
		if r.Err != nil {
			a.log.Error("recovering a task", "task_id", r.ID, "state", r.From.String(), "err", r.Err)
		} else if r.From != r.To {
			a.log.Info("recovered: "+r.Action, "task_id", r.ID, "state", r.To.String())
		}
	}
	if err != nil && len(rep.Tasks) == 0 {
		a.log.Error("recover", "err", err)
	}
	allocs, err := a.AdoptGroups(ctx)
	for _, alloc := range allocs {
		a.log.Info("group adopted: the agent drives it", "alloc", alloc)
	}
	if err != nil {
		a.log.Error("adopting the groups nobody drives", "err", err)
	}
}

// Rescan reads the config dir again (SIGHUP).
func (a *Agent) Rescan() { a.conv.rescan() }

// Recover is Local's, then the groups nobody drives are adopted (see
// recover).
func (a *Agent) Recover(ctx context.Context) (driver.Report, error) {
	began := time.Now()
	rep, err := a.Local.Recover(ctx)
	a.met.recovered(time.Since(began))
	if _, aerr := a.AdoptGroups(ctx); aerr != nil {
		a.log.Error("adopting the groups nobody drives", "err", aerr)
	}
	return rep, err
}

// Close closes the driver (tasks keep running), the store and the lock.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		err = errors.Join(a.d.Close(), a.st.Close(), a.lock.Close())
	})
	return err
}

// The Service, served to the agent's clients: the task operations and the
// upkeep are Local's (the driver's, over the agent's store and with its
// allow lists); the desired state is the convergence loop's.

// Policy is the agent's allow lists (its clients' flags cannot change
// them: the CLI refuses a list of its own that differs, naming these).
func (a *Agent) Policy() Policy {
	return Policy{AllowedCaps: slices.Clone(a.cfg.AllowedCaps), ChrootEnv: slices.Clone(a.cfg.ChrootEnv),
		AllowSeccomp: slices.Clone(a.cfg.AllowSeccomp), AllowMissing: slices.Clone(a.cfg.AllowMissing), AllowRead: slices.Clone(a.cfg.AllowRead),
		AllowDrivers: slices.Clone(a.cfg.AllowDrivers), AllowRemoteDrivers: slices.Clone(a.cfg.AllowRemoteDrivers),
		AllowHostNamespaces: slices.Clone(a.cfg.AllowHostNamespaces), MaxCount: a.cfg.MaxCount}
}

func (a *Agent) Enable(ctx context.Context, req EnableRequest) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitEnable, enable: req})
}

func (a *Agent) Disable(ctx context.Context, name string) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitDisable, name: name})
}

func (a *Agent) StartDesired(ctx context.Context, name string) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitStart, name: name})
}

// RestartDesired stops the desired entry's tasks, as tether stop does (the
// convergence sees them stopped on request), then starts it again with
// fresh counts.
func (a *Agent) RestartDesired(ctx context.Context, name string) (Entry, error) {
	e, ok := a.conv.snapshot().Entry(name)
	if !ok {
		return Entry{}, fmt.Errorf("%w: %q", ErrUnknownDesired, name)
	}
	recs, err := a.st.Desired(ctx)
	if err != nil {
		return e, err
	}
	for _, r := range recs {
		if r.Name != name {
			continue
		}
		for _, al := range r.Allocs {
			cv, err := a.conv.copyView(ctx, al)
			if err != nil {
				return e, err
			}
			if cv.live() {
				if _, err := a.d.StopGroup(ctx, cv.IDs, 0, 0, nil); err != nil {
					return e, err
				}
			}
		}
		if r.Task != "" {
			if t, err := a.d.InspectTask(ctx, r.Task); err == nil && !t.State.Terminal() {
				if _, err := a.d.StopTask(ctx, r.Task, 0, 0); err != nil {
					return e, err
				}
			}
		}
	}
	return a.conv.request(ctx, convRequest{kind: commitStart, name: name, reason: "restarted on request"})
}

// StartTask, StartNamed and RestartTask are Local's, with the executor
// spawned on the client's PATH when the request carries one (see
// WithClientPath).
func (a *Agent) StartTask(ctx context.Context, id string, spec fsm.Spec) (t fsm.Task, err error) {
	a.env.with(id, clientPath(ctx), func() { t, err = a.Local.StartTask(ctx, id, spec) })
	return t, err
}

func (a *Agent) StartNamed(ctx context.Context, id string, spec fsm.Spec, opts driver.StartOptions) (t fsm.Task, replaced []fsm.Task, err error) {
	a.env.with(id, clientPath(ctx), func() { t, replaced, err = a.Local.StartNamed(ctx, id, spec, opts) })
	return t, replaced, err
}

func (a *Agent) RestartTask(ctx context.Context, id, newID string) (t, old fsm.Task, err error) {
	a.env.with(newID, clientPath(ctx), func() { t, old, err = a.Local.RestartTask(ctx, id, newID) })
	return t, old, err
}

// RunGroup is Local's, the group's tasks' executors spawned on the
// client's PATH as StartTask's are.
func (a *Agent) RunGroup(ctx context.Context, ids []string, wait bool, fn func(driver.GroupProgress)) (ts []fsm.Task, err error) {
	run := func() { ts, err = a.Local.RunGroup(ctx, ids, wait, fn) }
	for _, id := range ids {
		inner, id := run, id
		run = func() { a.env.with(id, clientPath(ctx), inner) }
	}
	run()
	return ts, err
}

type clientPathKey struct{}

// WithClientPath says that the starts of ctx are a client's whose PATH is
// path: the executors an agent spawns for them get it, as the client's own
// would have daemonless.
func WithClientPath(ctx context.Context, path string) context.Context {
	return context.WithValue(ctx, clientPathKey{}, path)
}

func clientPath(ctx context.Context) string {
	p, _ := ctx.Value(clientPathKey{}).(string)
	return p
}

func (a *Agent) Status(context.Context) (Status, error) { return a.conv.snapshot(), nil }

func (a *Agent) WatchStatus(ctx context.Context, fn func(Status) bool) error {
	return a.conv.watch(ctx, fn)
}

// Salvage is Local's, then a recovery of the driver over the salvaged
// store (tasks that were lost to it have had their processes killed) and a
// new decision of the desired state.
func (a *Agent) Salvage(ctx context.Context) (SalvageReport, error) {
	rep, err := a.Local.Salvage(ctx)
	if err == nil && rep.Installed {
		if a.met != nil { // another store: its live tasks
			a.met.reset()
			if scan, err := a.st.LoadTasks(ctx, store.LiveTasks); err == nil {
				a.met.seed(scan.Tasks)
			}
		}
		a.recover(ctx)
		a.conv.rescan()
	}
	return rep, err
}

// spawnEnv is the environment of the executors the agent spawns for a
// client: its own, with the client's PATH (a raw_exec task's default PATH
// is its executor's, which daemonless is the CLI's).
type spawnEnv struct {
	mu    sync.Mutex
	paths map[string]string // task id -> PATH, while its start is under way
}

func (e *spawnEnv) of(task string) []string {
	e.mu.Lock()
	path, ok := e.paths[task]
	e.mu.Unlock()
	if !ok {
		return nil
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
	return append(env, "PATH="+path)
}

// with runs fn with task's executor spawned on path (none: the agent's).
func (e *spawnEnv) with(task, path string, fn func()) {
	if path == "" {
		fn()
		return
	}
	e.mu.Lock()
	e.paths[task] = path
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.paths, task)
		e.mu.Unlock()
	}()
	fn()
}
