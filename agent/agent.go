package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/store"
)

// Config configures an agent. StateDir is required; Parse is required
// with ConfigDir.
type Config struct {
	// StateDir is the state directory the agent serves (as the CLI's
	// --state-dir): its store, its tasks, and the agent's socket and lock.
	StateDir string
	// ConfigDir holds the task files (*.hcl) the agent keeps running
	// (optional). It and its files must be owned by root or the agent's
	// user and writable by no one else; a file may be a symbolic link
	// within it, never out of it.
	ConfigDir string
	// Parse parses a task file (the CLI's parser).
	Parse ParseFunc
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
	// StoreOptions open the store (held for the agent's life).
	StoreOptions store.Options
	// Hooks crash the agent at its points; DriverHooks are its driver's
	// (tests; see HooksFromEnv).
	Hooks       Hooks
	DriverHooks driver.Hooks
	// Now is the clock (default time.Now); NewID draws a task id for a
	// desired task's next task (default: its name and 6 random hex
	// digits); BootID is this boot's id (default: the kernel's).
	Now    func() time.Time
	NewID  func(name string) string
	BootID string
	// Feed declares desired tasks besides the config dir (tether-fleet's
	// agent: the node's desired state from etcd; see Feed); nil for none.
	Feed *Feed
	// Appended, when set, is told the task of every append the agent's
	// driver makes to the store, whatever its outcome (a mirror's
	// wake-up: it must not block).
	Appended func(task string)
}

// Agent serves one state directory: it holds its store and its driver,
// serves the CLI on the state directory's socket, and converges the desired
// state. It stops nothing when it exits: the executors keep their tasks,
// and the next agent adopts them.
type Agent struct {
	cfg  Config
	log  hclog.Logger
	lock *os.File
	st   *store.Store
	d    *driver.Driver
	conv *converger

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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = newTaskID
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
		if cfg.Parse == nil {
			return nil, ErrNoParser
		}
		if cfg.ConfigDir, err = OpenConfigDir(cfg.ConfigDir); err != nil {
			return nil, err
		}
	}
	opts := cfg.StoreOptions
	if opts.Logger == nil {
		opts.Logger = cfg.Logger.Named("store")
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, "tether.db"), opts)
	if err != nil {
		return nil, err
	}
	d, err := driver.Open(driver.Config{
		StateDir: cfg.StateDir, Store: driverLog(st, cfg), Logger: cfg.Logger.Named("driver"),
		ExecutorCommand: cfg.ExecutorCommand, AllowedCaps: cfg.AllowedCaps, ChrootEnv: cfg.ChrootEnv,
		AllowSeccomp: cfg.AllowSeccomp, AllowMissing: cfg.AllowMissing, AllowRead: cfg.AllowRead,
		Hooks: cfg.DriverHooks,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a = &Agent{cfg: cfg, log: cfg.Logger, lock: lock, st: st, d: d, serving: make(chan struct{})}
	a.conv = newConverger(a)
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
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	a.log.Info("agent serving", "socket", SocketPath(a.cfg.StateDir), "pid", os.Getpid(), "config_dir", a.cfg.ConfigDir)
	close(a.serving)

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
	a.recover(ctx)
	return a.conv.run(ctx, true, nil, nil)
}

func (a *Agent) recover(ctx context.Context) {
	rep, err := a.d.Recover(ctx)
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
}

// Rescan reads the config dir again (SIGHUP).
func (a *Agent) Rescan() { a.conv.rescan() }

// Close closes the driver (tasks keep running), the store and the lock.
func (a *Agent) Close() error {
	var err error
	a.closeOnce.Do(func() {
		err = errors.Join(a.d.Close(), a.st.Close(), a.lock.Close())
	})
	return err
}

// newTaskID makes a task id from a name and six random hex digits.
func newTaskID(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.TrimLeft(b.String(), "._-")
	if len(base) > 50 {
		base = base[:50]
	}
	if base == "" {
		base = "task"
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand does not fail on Linux
	return base + "-" + hex.EncodeToString(suffix[:])
}

// The Service, served to the agent's clients: the task operations are the
// driver's, over the agent's store and with its allow lists.

func (a *Agent) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	return a.d.StartTask(ctx, id, spec)
}

func (a *Agent) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	return a.d.StopTask(ctx, id, sig, grace)
}

func (a *Agent) SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error {
	if main {
		return a.d.SignalMain(ctx, id, sig)
	}
	return a.d.SignalTask(ctx, id, sig)
}

func (a *Agent) InspectTask(ctx context.Context, id string) (driver.TaskInfo, error) {
	return a.d.InspectTask(ctx, id)
}

func (a *Agent) TaskEvents(ctx context.Context, id string) ([]fsm.Event, error) {
	return a.d.TaskEvents(ctx, id)
}

func (a *Agent) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	return a.st.LoadTasks(ctx, which)
}

func (a *Agent) FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error) {
	return a.d.FollowTask(ctx, id, fn)
}

func (a *Agent) WaitTask(ctx context.Context, id string) (fsm.Task, error) {
	return a.d.WaitTask(ctx, id)
}

func (a *Agent) Reconcile(ctx context.Context, ids ...string) (driver.Report, error) {
	return a.d.Reconcile(ctx, ids...)
}

func (a *Agent) Recover(ctx context.Context) (driver.Report, error) { return a.d.Recover(ctx) }

func (a *Agent) TaskStats(ctx context.Context, id string) (cgroup.Stats, error) {
	return a.d.TaskStats(ctx, id)
}

func (a *Agent) Enable(ctx context.Context, file string, spec fsm.Spec) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitEnable, file: file, spec: spec, name: spec.Name})
}

func (a *Agent) Disable(ctx context.Context, name string) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitDisable, name: name})
}

func (a *Agent) StartDesired(ctx context.Context, name string) (Entry, error) {
	return a.conv.request(ctx, convRequest{kind: commitStart, name: name})
}

func (a *Agent) Status(context.Context) (Status, error) { return a.conv.snapshot(), nil }

func (a *Agent) WatchStatus(ctx context.Context, fn func(Status) bool) error {
	return a.conv.watch(ctx, fn)
}

func (a *Agent) Check(ctx context.Context) (store.Report, error) { return a.st.Check(ctx) }

func (a *Agent) GC(context.Context, time.Duration) ([]string, error) {
	return nil, fmt.Errorf("%w: gc compacts the store, which the agent holds: stop the agent, run tether gc, start it again", ErrUnsupported)
}

func (a *Agent) Salvage(context.Context) error {
	return fmt.Errorf("%w: salvage replaces the store, which the agent holds: stop the agent, run tether check --salvage, start it again", ErrUnsupported)
}
