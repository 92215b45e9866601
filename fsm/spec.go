package fsm

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Spec is what a task runs. It is recorded once, in the task-created event.
type Spec struct {
	Name    string            // human name; defaults to the task id
	Driver  string            // "exec" or "raw_exec"
	Command string            // path or name of the program
	Args    []string          // arguments, never interpreted by a shell
	Env     map[string]string // environment of the task
	Dir     string            // working directory
	User    string            // user name or uid; empty for the executor's
	CapAdd  []string          // capabilities to add (exec mode)
	CapDrop []string          // capabilities to drop (exec mode)
	// KillSignal is the signal a stop sends first (0: SIGTERM).
	KillSignal int
	// KillTimeout is the grace before SIGKILL (0: the driver's default).
	KillTimeout time.Duration

	// Resources are the task's cgroup limits (zero: no limit).
	Resources Resources
	// OOMScoreAdj is the task's oom_score_adj; nil resets it to 0 (the
	// task never inherits the agent's value).
	OOMScoreAdj *int
	// Logs configures the rotation of the task's stdout and stderr.
	Logs LogConfig
	// Restart is the task's restart policy; nil never restarts.
	Restart *RestartPolicy
	// PIDMode and IPCMode are "" (a namespace of the task's own; exec
	// only) or "host".
	PIDMode string
	IPCMode string
	// Network is the task's network: "" (as "host") shares the host's
	// network namespace, its loopback and abstract unix sockets included;
	// "none" gives an exec task a namespace of its own with loopback alone.
	Network NetworkMode
	// Seccomp is an exec task's syscall filter: "" (as "default") is
	// Docker's default profile, "unconfined" none, an absolute path a
	// Docker/OCI profile file. Anything but the default needs the
	// operator's allow list (the driver's policy), never the spec alone.
	Seccomp string
	// Job and Group name the Nomad job and group a task came from (a job
	// file); the task then also gets Nomad's NOMAD_* variables.
	Job   string
	Group string

	// Alloc places the task in one copy of its group (a task of a task or
	// job file); nil for a lone task (tether run -- CMD), which keeps its
	// directories in its private one.
	Alloc *Alloc
	// Templates are rendered, and Artifacts fetched before them, in the
	// task's directories before its first launch (Nomad's order); a
	// failure is a failed start naming the template or the source.
	Templates []Template
	Artifacts []Artifact
	// Ports are the ports the task was given (its group's and its own).
	Ports []Port

	// Readiness is how the task says it is ready: "" (ReadinessNone) not
	// at all (it is running once launched, as before), ReadinessNotify by
	// the sd_notify protocol on the socket its executor gives it
	// (NOTIFY_SOCKET).
	Readiness Readiness
	// Watchdog is the sd_notify watchdog interval (needs ReadinessNotify):
	// once ready, a task that sends no WATCHDOG=1 within it is killed and
	// restarted by its restart policy, as if it had exited. 0: none.
	Watchdog time.Duration
	// Check is the readiness check of a task whose Readiness is
	// ReadinessTCP, ReadinessHTTP or ReadinessExec (Nomad's service check
	// shape), run by its executor; nil for any other.
	Check *Check
}

// Check is a readiness check the executor runs every Interval, each try
// bounded by Timeout: a TCP connection to Address:Port, an HTTP GET of
// Path there (a 2xx status passes, as in Nomad), or Command with Args
// run inside the task's sandbox (exit 0 passes). The first pass makes
// the run ready; with Restart, failures after that restart it.
type Check struct {
	// Name names the check in logs and restart reasons ("" for its type).
	Name string
	// PortLabel is the label of the task's port the check connects to
	// ("" for a port given by number); Address and Port are that port's
	// allocated address and host port (tcp and http).
	PortLabel string
	Address   string
	Port      int
	// Path is the http check's request path ("/" when empty).
	Path string
	// Command and Args are the exec check's command.
	Command string
	Args    []string
	// Interval is the time between tries; Timeout bounds each.
	Interval time.Duration
	Timeout  time.Duration
	// Restart is Nomad's check_restart: once ready, Limit consecutive
	// failures (none counted before Grace since the run's start) kill
	// the run, which its restart policy restarts. nil: a failing check
	// after ready is logged only.
	Restart *CheckRestart
}

// CheckRestart is a check's check_restart block.
type CheckRestart struct {
	Limit int
	Grace time.Duration
	// IgnoreWarnings: an http check's 429 (Consul's warning) counts as
	// a pass rather than a failure.
	IgnoreWarnings bool
}

// DisplayName is the check's name, or its type when it has none.
func (c *Check) DisplayName(r Readiness) string {
	if c.Name != "" {
		return c.Name
	}
	return string(r) + " check"
}

// MinCheckInterval is the shortest check interval a spec may ask for
// (Nomad's minimum is 1s; tests and fast services want less).
const MinCheckInterval = 10 * time.Millisecond

// Readiness is how a task says it is ready.
type Readiness string

// Readiness modes; "" is ReadinessNone.
const (
	ReadinessNone   Readiness = "none"
	ReadinessNotify Readiness = "notify"
	ReadinessTCP    Readiness = "tcp"
	ReadinessHTTP   Readiness = "http"
	ReadinessExec   Readiness = "exec"
)

// Notify reports whether the task says it is ready by sd_notify.
func (r Readiness) Notify() bool { return r == ReadinessNotify }

// Checked reports whether the task's executor checks it is ready (a tcp,
// http or exec check).
func (r Readiness) Checked() bool {
	return r == ReadinessTCP || r == ReadinessHTTP || r == ReadinessExec
}

// Waits reports whether the task becomes ready after it is launched (a
// ready event follows), by sd_notify or by a check.
func (r Readiness) Waits() bool { return r.Notify() || r.Checked() }

// validateCheck checks the readiness check against the readiness.
func (s *Spec) validateCheck(bad func(string, ...any) error) error {
	c := s.Check
	switch {
	case c == nil && s.Readiness.Checked():
		return bad("readiness %q needs a check (a service's check block of type %q)", s.Readiness, checkTypeOf(s.Readiness))
	case c == nil:
		return nil
	case !s.Readiness.Checked():
		return bad("a check needs readiness = \"tcp\", \"http\" or \"exec\" (readiness is %q)", s.Readiness)
	case c.Interval < MinCheckInterval:
		return bad("check interval %s is shorter than the %s minimum", c.Interval, MinCheckInterval)
	case c.Timeout <= 0:
		return bad("check timeout %s is not positive", c.Timeout)
	case c.Restart != nil && (c.Restart.Limit < 0 || c.Restart.Grace < 0):
		return bad("check_restart limit %d, grace %s: neither may be negative", c.Restart.Limit, c.Restart.Grace)
	}
	for _, v := range append([]string{c.Name, c.PortLabel, c.Address, c.Path, c.Command}, c.Args...) {
		if strings.IndexByte(v, 0) >= 0 {
			return bad("check %q: a NUL byte in a field", c.Name)
		}
	}
	if s.Readiness == ReadinessExec {
		if c.Command == "" {
			return bad("an exec check needs a command")
		}
		if c.Port != 0 || c.Address != "" || c.Path != "" {
			return bad("an exec check has no port, address or path")
		}
		return nil
	}
	if c.Command != "" || len(c.Args) > 0 {
		return bad("a %s check has no command (that is an exec check's)", s.Readiness)
	}
	if s.Network == NetworkNone {
		return bad("a %s check cannot reach a task with network mode \"none\" (its loopback is its own): use readiness = \"exec\" with a command that checks from inside", s.Readiness)
	}
	if c.Port <= 0 || c.Port > 65535 {
		return bad("check port %d (%q) is not a port", c.Port, c.PortLabel)
	}
	if net.ParseIP(c.Address) == nil {
		return bad("check address %q is not an IP address", c.Address)
	}
	if c.PortLabel != "" {
		i := slices.IndexFunc(s.Ports, func(p Port) bool { return p.Label == c.PortLabel })
		if i < 0 {
			return bad("check port %q is not one of the task's ports", c.PortLabel)
		}
		if p := s.Ports[i]; p.Value != c.Port {
			return bad("check port %q is %d, and the task's port %q is %d", c.PortLabel, c.Port, p.Label, p.Value)
		}
	}
	if s.Readiness == ReadinessTCP && c.Path != "" {
		return bad("a tcp check has no path")
	}
	if s.Readiness == ReadinessHTTP && c.Path != "" && !strings.HasPrefix(c.Path, "/") {
		return bad("http check path %q does not start with /", c.Path)
	}
	return nil
}

// checkTypeOf is Nomad's check type for a checked readiness.
func checkTypeOf(r Readiness) string {
	if r == ReadinessExec {
		return "script"
	}
	return string(r)
}

// MinWatchdog is the shortest watchdog interval a spec may ask for: a
// shorter one would have the executor kill a healthy task for a
// scheduling delay.
const MinWatchdog = 100 * time.Millisecond

// NetworkMode is a task's network block's mode (Nomad's group network
// shape): tether runs "host" and "none"; bridge networking is not there.
type NetworkMode string

// Network modes; "" is NetworkHost, as in Nomad.
const (
	NetworkHost NetworkMode = "host"
	NetworkNone NetworkMode = "none"
)

// Seccomp choices other than a profile's path; "" is SeccompDefault.
const (
	SeccompDefault    = "default"
	SeccompUnconfined = "unconfined"
)

// Resources are a task's limits, with Nomad's names and units. Zero means
// unset: no limit. (A task file may not say 0: Nomad refuses a memory of 0
// and a cpu of 0, and tether every explicit 0; an attribute left out is no
// limit.) Validate holds the values to Nomad's rules and the kernel's
// ranges; the host check refuses more cores than the host gives tasks, and
// the executor warns, at launch, of a memory limit above the host's RAM.
type Resources struct {
	// MemoryMB is the hard memory limit in MB, or the soft one when
	// MemoryMaxMB is set.
	MemoryMB int
	// MemoryMaxMB is the hard memory limit in MB (Nomad's memory_max).
	MemoryMaxMB int
	// CPU is the task's CPU share in MHz (a relative weight).
	CPU int
	// Cores is the number of CPU cores the task is pinned to.
	Cores int
	// PIDs is the most processes the task may have (tether's addition).
	PIDs int
}

// Bounds of resource values: Nomad's minimum memory, and what the kernel
// takes (cpu.shares, PID_MAX_LIMIT, NR_CPUS's largest setting).
const (
	MinMemoryMB = 10
	MaxCPU      = 262144
	MaxPIDs     = 4 << 20
	MaxCores    = 8192
)

// IsZero reports whether no limit is set.
func (r Resources) IsZero() bool { return r == Resources{} }

// LogConfig is a task's logs block, with Nomad's names and units: the
// rotation of its stdout and stderr. Zero values take Nomad's defaults (10
// files of 10 MB per stream). It is the one log configuration type:
// package logs takes it as it is (logs.Config is this type).
type LogConfig struct {
	// MaxFiles is how many files of a stream are kept, the live file
	// included; the oldest rotated file beyond it is deleted.
	MaxFiles int
	// MaxFileSizeMB is the size, in MB (MiB, as in Nomad), at which the
	// live file is rotated.
	MaxFileSizeMB int
	// Disabled discards the task's output: nothing is written.
	Disabled bool
	// Journald forwards the task's output to the systemd journal as well
	// (package logs, journal.go), one entry a line, beside its files.
	Journald bool `json:",omitempty"`
}

// Nomad's log rotation defaults.
const (
	DefaultLogMaxFiles      = 10
	DefaultLogMaxFileSizeMB = 10
)

// WithDefaults fills unset fields with Nomad's defaults.
func (c LogConfig) WithDefaults() LogConfig {
	if c.MaxFiles == 0 {
		c.MaxFiles = DefaultLogMaxFiles
	}
	if c.MaxFileSizeMB == 0 {
		c.MaxFileSizeMB = DefaultLogMaxFileSizeMB
	}
	return c
}

// maxLogFileMB caps max_file_size: 1 TiB per file; beyond that it is a
// typo.
const maxLogFileMB = 1 << 20

// Validate reports a logs block that cannot be used as it is (defaults
// are not filled in: a zero count is refused here), naming the attribute
// and what it must be. A disabled block is valid whatever its sizes.
func (c LogConfig) Validate() error {
	if c.Disabled && c.Journald {
		return fmt.Errorf("%w: logs: disabled = true and journald = true: disabled discards the output, journald forwards it; leave one out",
			ErrInvalidSpec)
	}
	if c.Disabled {
		return nil
	}
	if c.MaxFiles < 1 {
		return fmt.Errorf("%w: logs: max_files = %d: it counts the live file, so it must be at least 1 (Nomad's default is %d)",
			ErrInvalidSpec, c.MaxFiles, DefaultLogMaxFiles)
	}
	if c.MaxFileSizeMB < 1 {
		return fmt.Errorf("%w: logs: max_file_size = %d: it is in MB and must be at least 1 (Nomad's default is %d)",
			ErrInvalidSpec, c.MaxFileSizeMB, DefaultLogMaxFileSizeMB)
	}
	if c.MaxFileSizeMB > maxLogFileMB {
		return fmt.Errorf("%w: logs: max_file_size = %d MB is more than %d MB (1 TiB); give the size in MB",
			ErrInvalidSpec, c.MaxFileSizeMB, maxLogFileMB)
	}
	return nil
}

// Limits on a spec's sizes. An argument or an environment string is held
// to the kernel's limit on one string of execve (MAX_ARG_STRLEN, 32 pages:
// 131072 bytes with its NUL; an environment string is KEY=VALUE); every
// other string (a name, the command, a path) to 64 KiB. All of them
// together are held, as JSON would write them, to what fits the frame in
// which the executor receives the spec (1 MiB, with room for the rest):
// the kernel's own total (a quarter of the stack limit, 2 MiB with the
// usual 8 MiB) is checked by execve at launch.
const (
	maxSpecString = 64 << 10 // a name, the command, a path
	// MaxArgString is the kernel's MAX_ARG_STRLEN: the most bytes one
	// argument or environment string (KEY=VALUE) may have, its NUL
	// included.
	MaxArgString = 32 * 4096
	maxSpecItems = 4096 // arguments, environment variables, capabilities
	// maxSpecEncoded bounds a spec's strings as JSON writes them.
	maxSpecEncoded = 896 << 10
)

// jsonLen is the length of s as a JSON string, quotes included: what it
// adds to the executor's launch frame.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	// U+2028 and U+2029 (3 bytes) are written \u2028, \u2029 (6); a byte
	// that is not UTF-8 is written \ufffd (6 for 1).
	return n + 3*strings.Count(s, "\u2028") + 3*strings.Count(s, "\u2029") + 5*invalidUTF8(s)
}

// invalidUTF8 counts the bytes of s that are not valid UTF-8 (JSON writes
// each as \ufffd, six bytes for one).
func invalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return 0
	}
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			n++
		}
		i += size
	}
	return n
}

// Validate checks what can be checked of a spec without the host: the
// driver mode, the command, sizes, NUL bytes (which no argv or environment
// can carry), the namespace modes, and the values of the limits, log and
// restart blocks. It names the field at fault. It is the one check of a
// spec's values: the driver runs it before recording the task, the
// executor again at launch. What depends on the host (the user,
// capabilities against the allow list, the chroot entries, cgroup
// controllers) is checked in one place too, beside the executor's client
// (executor.World.CheckSpec), by the driver before anything is spawned and
// by the executor at launch.
func (s *Spec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	switch s.Driver {
	case "exec", "raw_exec":
	default:
		return bad("driver %q: use \"exec\" or \"raw_exec\"", s.Driver)
	}
	if s.Command == "" {
		return bad("no command")
	}
	total := 0
	check := func(what, v string) error {
		total += jsonLen(v)
		switch {
		case strings.IndexByte(v, 0) >= 0:
			return bad("%s contains a NUL byte", what)
		case len(v) > maxSpecString:
			return bad("%s is %d bytes (at most %d)", what, len(v), maxSpecString)
		}
		return nil
	}
	// An argument or an environment string as execve takes it.
	checkArg := func(what string, v string, size int) error {
		total += jsonLen(v)
		switch {
		case strings.IndexByte(v, 0) >= 0:
			return bad("%s contains a NUL byte", what)
		case size+1 > MaxArgString:
			return bad("%s is %d bytes: the kernel takes at most %d bytes per argument or environment string (MAX_ARG_STRLEN, %d with its NUL)",
				what, size, MaxArgString-1, MaxArgString)
		}
		return nil
	}
	for _, f := range []struct{ what, v string }{
		{"name", s.Name}, {"command", s.Command}, {"work_dir", s.Dir}, {"user", s.User},
		{"job", s.Job}, {"group", s.Group},
	} {
		if err := check(f.what, f.v); err != nil {
			return err
		}
	}
	items := len(s.Args) + len(s.Env) + len(s.CapAdd) + len(s.CapDrop) + len(s.Templates) + len(s.Artifacts) + len(s.Ports)
	if s.Alloc != nil {
		items += len(s.Alloc.Tasks)
	}
	for _, a := range s.Artifacts {
		items += len(a.Options) + len(a.Headers)
	}
	if items > maxSpecItems {
		return bad("more than %d arguments, environment variables, capabilities, templates, artifacts, ports and group tasks", maxSpecItems)
	}
	for i, a := range s.Args {
		if err := checkArg(fmt.Sprintf("argument %d", i+1), a, len(a)); err != nil {
			return err
		}
	}
	for k, v := range s.Env {
		name := k
		if len(name) > 64 {
			name = name[:64] + "..."
		}
		switch {
		case k == "" || strings.ContainsRune(k, '='):
			return bad("environment variable name %q: it must be non-empty and have no '='", name)
		}
		if err := checkArg("environment variable "+name+" (as "+name+"=VALUE)", k, len(k)+1+len(v)); err != nil {
			return err
		}
		if err := checkArg("environment variable "+name, v, 0); err != nil {
			return err
		}
	}
	for _, c := range append(append([]string(nil), s.CapAdd...), s.CapDrop...) {
		if err := check("capability", c); err != nil {
			return err
		}
	}
	if a := s.Alloc; a != nil {
		if err := a.validate(); err != nil {
			return err
		}
		for _, f := range []struct{ what, v string }{{"alloc id", a.ID}, {"alloc dir", a.Dir}, {"task dir", a.TaskDir}} {
			if err := check(f.what, f.v); err != nil {
				return err
			}
		}
		for _, id := range a.Tasks {
			if err := check("alloc task id", id); err != nil {
				return err
			}
		}
	}
	if len(s.Templates)+len(s.Artifacts) > 0 && s.Alloc == nil {
		return bad("templates and artifacts are placed in Nomad's task directory layout: the task needs an alloc (its task and alloc directories)")
	}
	for _, t := range s.Templates {
		if err := t.Validate(); err != nil {
			return err
		}
		for _, f := range []struct{ what, v string }{{"source", t.Source}, {"data", t.Data}, {"destination", t.Destination},
			{"left_delimiter", t.LeftDelim}, {"right_delimiter", t.RightDelim}} {
			if err := check(t.Name()+": "+f.what, f.v); err != nil {
				return err
			}
		}
	}
	for _, a := range s.Artifacts {
		if err := a.Validate(); err != nil {
			return err
		}
		if err := check("artifact source", a.Source); err != nil {
			return err
		}
		if err := check("artifact destination", a.Destination); err != nil {
			return err
		}
		for _, m := range []map[string]string{a.Options, a.Headers} {
			for k, v := range m {
				if err := check("artifact "+a.Source+": option or header "+k, k+v); err != nil {
					return err
				}
			}
		}
	}
	for _, p := range s.Ports {
		switch {
		case p.Label == "" || p.Value <= 0 || p.Value > 65535 || p.To < 0 || p.To > 65535:
			return bad("port %q: %d (to %d) is not a port", p.Label, p.Value, p.To)
		}
		if err := check("port "+p.Label, p.Label+p.IP+p.Task); err != nil {
			return err
		}
	}
	if total > maxSpecEncoded {
		return bad("the arguments, environment, names, templates and artifacts come to %d bytes as the executor receives them (JSON), more than the %d its launch frame holds",
			total, maxSpecEncoded)
	}
	if s.KillTimeout < 0 {
		return bad("negative kill_timeout %s", s.KillTimeout)
	}
	if s.KillSignal < 0 || s.KillSignal > 64 {
		return bad("kill_signal %d is not a signal", s.KillSignal)
	}
	r := s.Resources
	for _, f := range []struct {
		name string
		v    int
	}{{"memory", r.MemoryMB}, {"memory_max", r.MemoryMaxMB}, {"cpu", r.CPU}, {"cores", r.Cores}, {"pids", r.PIDs}} {
		if f.v < 0 {
			return bad("resources.%s is negative (%d)", f.name, f.v)
		}
	}
	const maxMB = math.MaxInt64 >> 20 // MB<<20 must fit an int64
	for _, f := range []struct {
		name string
		v    int
	}{{"memory", r.MemoryMB}, {"memory_max", r.MemoryMaxMB}} {
		if int64(f.v) > maxMB {
			return bad("resources.%s = %d MB is more than %d MB", f.name, f.v, int64(maxMB))
		}
	}
	if r.MemoryMB > 0 && r.MemoryMB < MinMemoryMB {
		return bad("resources.memory = %d MB is below Nomad's minimum of %d MB (leave it unset for no limit)", r.MemoryMB, MinMemoryMB)
	}
	if r.CPU > 0 && r.Cores > 0 {
		return bad("resources: a task can only ask for cpu or cores, not both (as in Nomad): cores pins it to whole CPUs, cpu shares them")
	}
	if r.CPU > MaxCPU {
		return bad("resources.cpu = %d MHz is more than %d: cpu is a relative share, and the kernel's largest is %d", r.CPU, MaxCPU, MaxCPU)
	}
	if r.PIDs > MaxPIDs {
		return bad("resources.pids = %d is more than the kernel allows any cgroup (%d, its PID_MAX_LIMIT)", r.PIDs, MaxPIDs)
	}
	if r.Cores > MaxCores {
		return bad("resources.cores = %d is more CPUs than Linux supports (%d)", r.Cores, MaxCores)
	}
	if r.MemoryMaxMB > 0 && r.MemoryMB == 0 {
		return bad("resources.memory_max = %d without memory: memory_max makes memory the soft limit, so set both", r.MemoryMaxMB)
	}
	if r.MemoryMaxMB > 0 && r.MemoryMB > r.MemoryMaxMB {
		return bad("resources.memory (%d MB) is above memory_max (%d MB)", r.MemoryMB, r.MemoryMaxMB)
	}
	if s.OOMScoreAdj != nil && (*s.OOMScoreAdj < -1000 || *s.OOMScoreAdj > 1000) {
		return bad("oom_score_adj %d: use -1000 to 1000", *s.OOMScoreAdj)
	}
	if s.Logs.MaxFiles < 0 || s.Logs.MaxFileSizeMB < 0 {
		return bad("logs: max_files and max_file_size must not be negative")
	}
	if err := s.Logs.WithDefaults().Validate(); err != nil {
		return err
	}
	if s.Restart != nil {
		if err := s.Restart.Validate(); err != nil {
			return err
		}
	}
	for _, m := range []struct{ name, v string }{{"pid_mode", s.PIDMode}, {"ipc_mode", s.IPCMode}} {
		switch {
		case m.v != "" && m.v != "host":
			return bad("%s %q: use \"host\" or leave it unset", m.name, m.v)
		case m.v != "" && s.Driver != "exec":
			return bad("%s applies to exec tasks only (a raw_exec task shares the host's namespaces)", m.name)
		}
	}
	switch s.Network {
	case "", NetworkHost:
	case NetworkNone:
		if s.Driver != "exec" {
			return bad("network mode %q applies to exec tasks only (a raw_exec task shares the host's network); use driver \"exec\", or mode \"host\"", s.Network)
		}
	case "bridge":
		return bad("network mode \"bridge\": tether has no bridge networking (CNI) yet; use \"host\" (the host's network) or \"none\" (loopback alone)")
	default:
		return bad("network mode %q: use \"host\" or \"none\"", s.Network)
	}
	switch s.Readiness {
	case "", ReadinessNone, ReadinessNotify, ReadinessTCP, ReadinessHTTP, ReadinessExec:
	default:
		return bad("readiness %q: use \"notify\" (the task sends READY=1 on NOTIFY_SOCKET), \"tcp\", \"http\" or \"exec\" (a check block), or leave it unset", s.Readiness)
	}
	if err := s.validateCheck(bad); err != nil {
		return err
	}
	switch {
	case s.Watchdog < 0:
		return bad("negative watchdog %s", s.Watchdog)
	case s.Watchdog > 0 && !s.Readiness.Notify():
		return bad("watchdog %s needs readiness = \"notify\" (the task pings with WATCHDOG=1 on NOTIFY_SOCKET)", s.Watchdog)
	case s.Watchdog > 0 && s.Watchdog < MinWatchdog:
		return bad("watchdog %s is shorter than the %s minimum", s.Watchdog, MinWatchdog)
	}
	if err := check("seccomp", s.Seccomp); err != nil {
		return err
	}
	switch {
	case s.Seccomp == "", s.Seccomp == SeccompDefault:
	case s.Driver != "exec":
		return bad("seccomp applies to exec tasks only (a raw_exec task runs unfiltered); remove it, or use driver \"exec\"")
	case s.Seccomp == SeccompUnconfined, strings.HasPrefix(s.Seccomp, "/"):
	default:
		return bad("seccomp %q: use \"default\", \"unconfined\" or the absolute path of a Docker/OCI profile (both need the operator's --allow-seccomp)", s.Seccomp)
	}
	return nil
}
