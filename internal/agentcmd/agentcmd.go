// Package agentcmd is the agent command's setup, shared by the two
// binaries that run an agent: `tether agent` (cmd/tether) and its fleet
// mode, `tether agent --node NAME --cluster URLS`, which tether hands to
// tether-fleet (cmd/tether-fleet). Both take the same flags, read the same
// state directory, apply the same allow lists, read files through the
// same path (package job) and serve until the same signals: this package is that one
// copy. It links no etcd client (tether's start path stays free of it).
//
// Usage, in a command:
//
//	var g agentcmd.Globals
//	var af agentcmd.Flags
//	g.Register(fs, true)
//	af.Register(fs)
//	// parse fs …
//	set, err := g.Resolve()
//	a, err := agent.Open(agent.Config{StateDir: set.StateDir, ConfigDir: af.ConfigDir,
//		AllowedCaps: set.AllowedCaps, ChrootEnv: set.Chroot, …})
//	err = agentcmd.Serve(ctx, a, af.Once, log)
package agentcmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/metrics"
	"github.com/tether-fsm/tether/statedir"
)

// Globals are the global flags that say where the state is and what tasks
// may do, as given: --state-dir and the operator's allow lists.
type Globals struct {
	StateDir    string
	StateDirSet bool // --state-dir was given (an empty one is an error, not the default)
	AllowCaps   string
	ChrootEnv   string
	// AllowSeccomp, AllowMissing and AllowRead are --allow-seccomp,
	// --allow-missing and --allow-read as given.
	AllowSeccomp, AllowMissing, AllowRead string
	// AllowDrivers, AllowHostNamespaces and MaxCount are
	// --allow-drivers, --allow-host-namespaces and --max-count as given.
	AllowDrivers, AllowHostNamespaces, MaxCount string
}

// GlobalNames are the flags Register registers, in order.
var GlobalNames = []string{"state-dir", "allow-caps", "chroot-env", "allow-seccomp", "allow-missing", "allow-read",
	"allow-drivers", "allow-host-namespaces", "max-count"}

// policyNames are the allow lists among GlobalNames.
var policyNames = GlobalNames[1:]

// Register registers the flags on fs, marked global. The allow lists are
// listed in help only for the commands that start tasks (startsTasks);
// every command accepts them.
func (g *Globals) Register(fs *clikit.FlagSet, startsTasks bool) {
	fs.Func("state-dir", "state `directory` (env TETHER_STATE_DIR; default /var/lib/tether for root where it exists, else $XDG_STATE_HOME/tether or ~/.local/state/tether); an existing one must be private and yours", func(v string) error {
		g.StateDir, g.StateDirSet = v, true
		return nil
	})
	fs.StringVar(&g.AllowCaps, "allow-caps", g.AllowCaps, "capability allow `list` for exec tasks, comma-separated (env TETHER_ALLOW_CAPS; default Nomad's exec list, without net_raw)")
	fs.StringVar(&g.ChrootEnv, "chroot-env", g.ChrootEnv, "what an exec task's root is made of: `entries` SRC or SRC:DST, comma-separated, each bound read-only (env TETHER_CHROOT_ENV; default Nomad's chroot_env)")
	fs.StringVar(&g.AllowSeccomp, "allow-seccomp", g.AllowSeccomp, "what an exec task's seccomp may name besides \"default\": `list` of unconfined and profile paths, comma-separated (env TETHER_ALLOW_SECCOMP; default none); unconfined also runs exec tasks unfiltered on a host without seccomp")
	fs.StringVar(&g.AllowMissing, "allow-missing", g.AllowMissing, "sandbox `parts` exec tasks may run without where the host lacks them: cgroupns, keyring, comma-separated (env TETHER_ALLOW_MISSING; default none: such a host refuses exec tasks)")
	fs.StringVar(&g.AllowRead, "allow-read", g.AllowRead, "host `directories`, comma-separated, a job file's template (source, file) or local artifact may read besides the task's own and its group's (env TETHER_ALLOW_READ; default none)")
	fs.StringVar(&g.AllowDrivers, "allow-drivers", g.AllowDrivers, "the `drivers` tasks may use, comma-separated: exec, raw_exec (env TETHER_ALLOW_DRIVERS; default exec,raw_exec)")
	fs.StringVar(&g.AllowHostNamespaces, "allow-host-namespaces", g.AllowHostNamespaces, "the `namespaces` an exec task may share with the host, comma-separated: pid (pid_mode = \"host\"), ipc (ipc_mode = \"host\") (env TETHER_ALLOW_HOST_NAMESPACES; default none)")
	fs.StringVar(&g.MaxCount, "max-count", g.MaxCount, "the most copies of a group (its count) a file may ask for: a `number` (env TETHER_MAX_COUNT; default 1000)")
	fs.MarkGlobal(GlobalNames...)
	if !startsTasks {
		for _, name := range policyNames {
			_ = fs.MarkHidden(name)
		}
	}
}

// Settings are the Globals resolved: the state directory, absolute, and
// the allow lists, each checked.
type Settings struct {
	StateDir string
	// AllowedCaps is the capability allow list (nil: the default), Chroot
	// the chroot environment's entries (nil: the default).
	AllowedCaps []string
	Chroot      []string
	// AllowSeccomp, AllowMissing and AllowRead are the other lists (nil:
	// none).
	AllowSeccomp []string
	AllowMissing []string
	AllowRead    []string
	// AllowDrivers are the drivers tasks may use (nil: job.DefaultDrivers),
	// AllowHostNamespaces the namespaces an exec task may share with the
	// host (nil: none), MaxCount the bound on a group's count (0: the
	// default). AllowRemoteDrivers, an agent's (Flags.Resolve), are the
	// drivers a spec from etcd may use (nil: job.DefaultRemoteDrivers).
	AllowDrivers        []string
	AllowRemoteDrivers  []string
	AllowHostNamespaces []string
	MaxCount            int
}

// Policy is the settings' allow lists as the job path holds them.
func (s Settings) Policy() job.Policy {
	return job.Policy{AllowedCaps: slices.Clone(s.AllowedCaps), Chroot: slices.Clone(s.Chroot),
		AllowSeccomp: slices.Clone(s.AllowSeccomp), AllowMissing: slices.Clone(s.AllowMissing), AllowRead: slices.Clone(s.AllowRead),
		AllowDrivers: slices.Clone(s.AllowDrivers), AllowRemoteDrivers: slices.Clone(s.AllowRemoteDrivers),
		AllowHostNamespaces: slices.Clone(s.AllowHostNamespaces), MaxCount: s.MaxCount}
}

// Resolve reads each flag, or where it is empty its environment variable,
// checks it and returns the settings. An error names the flag and what to
// give.
func (g *Globals) Resolve() (Settings, error) {
	var s Settings
	if g.StateDirSet && strings.TrimSpace(g.StateDir) == "" {
		return s, errors.New("--state-dir is empty: give a directory, or leave the flag out for the default")
	}
	s.AllowedCaps = splitList(g.AllowCaps, "TETHER_ALLOW_CAPS")
	if len(s.AllowedCaps) > 0 {
		if err := executor.ValidateCaps(nil, nil, s.AllowedCaps); err != nil {
			return s, fmt.Errorf("--allow-caps: %w", err)
		}
	}
	s.Chroot = splitList(g.ChrootEnv, "TETHER_CHROOT_ENV")
	if len(s.Chroot) > 0 {
		if err := executor.ValidatePolicy(executor.Policy{Chroot: s.Chroot}); err != nil {
			return s, fmt.Errorf("--chroot-env: %w; give existing host paths as SRC or SRC:DST", err)
		}
	}
	s.AllowSeccomp = splitList(g.AllowSeccomp, "TETHER_ALLOW_SECCOMP")
	if err := executor.ValidatePolicy(executor.Policy{AllowSeccomp: s.AllowSeccomp}); err != nil {
		return s, fmt.Errorf("--allow-seccomp: %w", err)
	}
	s.AllowMissing = splitList(g.AllowMissing, "TETHER_ALLOW_MISSING")
	if err := executor.ValidatePolicy(executor.Policy{AllowMissing: s.AllowMissing}); err != nil {
		return s, fmt.Errorf("--allow-missing: %w", err)
	}
	for _, d := range splitList(g.AllowRead, "TETHER_ALLOW_READ") {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			return s, fmt.Errorf("--allow-read %q: give absolute directories other than /", d)
		}
		s.AllowRead = append(s.AllowRead, filepath.Clean(d))
	}
	s.AllowDrivers = lowerList(splitList(g.AllowDrivers, "TETHER_ALLOW_DRIVERS"))
	s.AllowHostNamespaces = lowerList(splitList(g.AllowHostNamespaces, "TETHER_ALLOW_HOST_NAMESPACES"))
	if v := cmp.Or(strings.TrimSpace(g.MaxCount), strings.TrimSpace(os.Getenv("TETHER_MAX_COUNT"))); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return s, fmt.Errorf("--max-count %q (or TETHER_MAX_COUNT): give a positive number of copies", v)
		}
		s.MaxCount = n
	}
	if err := s.Policy().Validate(); err != nil {
		return s, errors.New(job.Describe(err))
	}
	dir, err := StateDir(g.StateDir)
	if err != nil {
		return s, err
	}
	s.StateDir = dir
	return s, nil
}

// lowerList lower-cases a list's entries (drivers and namespaces are
// lower case names).
func lowerList(l []string) []string {
	for i := range l {
		l[i] = strings.ToLower(l[i])
	}
	return l
}

// splitList splits a comma-separated flag value, or when it is empty the
// environment variable env's, into its non-empty entries.
func splitList(flagValue, env string) []string {
	v := flagValue
	if v == "" {
		v = os.Getenv(env)
	}
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// StateDir picks the state directory: the flag, else statedir.Default
// (TETHER_STATE_DIR; for root, /var/lib/tether when it exists; then
// $XDG_STATE_HOME/tether, then ~/.local/state/tether).
func StateDir(flagValue string) (string, error) {
	dir := flagValue
	if dir == "" {
		var err error
		if dir, _, err = statedir.Default(statedir.HostEnv()); err != nil {
			return "", err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory %s: %w", dir, err)
	}
	return abs, nil
}

// Flags are the agent command's own flags.
type Flags struct {
	ConfigDir string
	Once      bool
	// AllowRemoteDrivers is --allow-remote-drivers as given.
	AllowRemoteDrivers string
	// MetricsAddr is --metrics-addr: where to serve Prometheus metrics
	// ("": nowhere).
	MetricsAddr string
}

// Register registers them on fs.
func (f *Flags) Register(fs *clikit.FlagSet) {
	fs.StringVar(&f.ConfigDir, "config-dir", f.ConfigDir, "`directory` of task and job files (*.hcl, *.nomad) to keep running, each read as tether start reads it; owned by root or you, writable by no one else")
	fs.BoolVar(&f.Once, "once", f.Once, "recover and converge once, then exit (for cron's @reboot)")
	fs.StringVar(&f.MetricsAddr, "metrics-addr", f.MetricsAddr, "serve Prometheus metrics at http://`ADDR`/metrics: HOST:PORT, or a port alone for loopback's (default: none)")
	fs.StringVar(&f.AllowRemoteDrivers, "allow-remote-drivers", f.AllowRemoteDrivers, "the `drivers` a spec from etcd (a node's desired state, a placement) may use, comma-separated, each also in --allow-drivers, or none (env TETHER_ALLOW_REMOTE_DRIVERS; default exec)")
}

// Resolve reads --allow-remote-drivers, or where it is empty its
// environment variable, into set, and checks it against set's
// --allow-drivers: every remote driver must be one a local file may use,
// else the error names both flags.
func (f *Flags) Resolve(set *Settings) error {
	set.AllowRemoteDrivers = lowerList(splitList(f.AllowRemoteDrivers, "TETHER_ALLOW_REMOTE_DRIVERS"))
	if err := set.Policy().Validate(); err != nil {
		return errors.New(job.Describe(err))
	}
	return nil
}

// Metrics is the agent's metrics endpoint (--metrics-addr): its registry,
// for agent.Config.Metrics, served over HTTP from OpenMetrics until
// Close. A nil *Metrics (no --metrics-addr) serves nothing.
type Metrics struct {
	reg    *metrics.Registry
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// OpenMetrics listens where --metrics-addr says (a port alone is
// loopback's: metrics.ListenAddr) and serves the registry it returns
// there; nil without --metrics-addr. A taken or bad address is an error
// naming the flag; so is --metrics-addr with --once, which serves nothing.
func (f *Flags) OpenMetrics(log hclog.Logger) (*Metrics, error) {
	if f.MetricsAddr == "" {
		return nil, nil
	}
	if f.Once {
		return nil, errors.New("--metrics-addr with --once: an agent run --once exits after one pass and serves nothing; leave one of them out")
	}
	addr, err := metrics.ListenAddr(f.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w; give a free HOST:PORT", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Metrics{reg: metrics.NewRegistry(), ln: ln, cancel: cancel, done: make(chan struct{})}
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+metrics.Path)
	go func() {
		defer close(m.done)
		if err := m.reg.Serve(ctx, ln); err != nil {
			log.Error("serving metrics stopped", "err", err)
		}
	}()
	return m, nil
}

// Registry is the registry served (nil for a nil *Metrics).
func (m *Metrics) Registry() *metrics.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Addr is the address served (nil for a nil *Metrics).
func (m *Metrics) Addr() net.Addr {
	if m == nil {
		return nil
	}
	return m.ln.Addr()
}

// Close stops serving and waits until it has.
func (m *Metrics) Close() {
	if m == nil {
		return
	}
	m.cancel()
	<-m.done
}

// Serve runs a in the foreground until SIGTERM or SIGINT (SIGHUP reads
// the config dir again), telling the service manager when it serves and
// when it stops; once converges and returns instead (Agent.Once). It
// returns when ctx ends too, and stops no task.
func Serve(ctx context.Context, a *agent.Agent, once bool, log hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGHUP {
					a.Rescan()
					continue
				}
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	if once {
		return a.Once(ctx)
	}
	go func() {
		select {
		case <-a.Serving():
			if err := agent.NotifyReady(); err != nil {
				log.Warn("telling the service manager the agent is ready", "err", err)
			}
		case <-ctx.Done():
		}
	}()
	err := a.Run(ctx)
	_ = agent.NotifyStopping()
	return err
}
