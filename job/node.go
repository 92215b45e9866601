package job

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/taskfile"
)

// Node is what the path needs of the node a job runs on.
type Node struct {
	// StateDir is the state directory: allocations live in its allocs/.
	StateDir string
	// Host is the host's attributes (nil: taskfile.DetectHost).
	Host *taskfile.Host
	// Policy is the node's allow lists.
	Policy Policy
	// BaseEnv is the environment the node's executor gives a task before
	// its own (executor.Real.BaseEnv): what ${env["PATH"]} reads. nil:
	// none.
	BaseEnv func(spec fsm.Spec, task string) (map[string]string, error)
	// Ports allocates the allocations' ports (nil: a file that asks for
	// one cannot be instantiated).
	Ports *taskfile.Allocator
	// CheckSpec, when set, is the node's own check of a spec (the
	// driver's: fsm.Spec.Validate, the user, the capability and seccomp
	// allow lists, the host's cgroups), run by Read on its dry run: a
	// desired source's file is refused before anything of it is recorded.
	CheckSpec func(fsm.Spec) error
}

func (n Node) host() *taskfile.Host {
	if n.Host != nil {
		return n.Host
	}
	return taskfile.DetectHost(taskfile.HostConfig{})
}

// Policy is the node's allow lists: what the operator of the node allows
// the tasks it runs, whoever asks (a file on the command line, the config
// dir, an enable, etcd). No file or request widens it.
type Policy struct {
	// AllowedCaps is the capability allow list of exec tasks (nil: the
	// executor's default), Chroot what an exec task's root is made of
	// (nil: the default), AllowSeccomp the seccomp choices besides the
	// default, AllowMissing the sandbox parts exec tasks may run without:
	// the driver and the executor apply these (Executor).
	AllowedCaps  []string `json:"allowed_caps,omitempty"`
	Chroot       []string `json:"chroot_env,omitempty"`
	AllowSeccomp []string `json:"allow_seccomp,omitempty"`
	AllowMissing []string `json:"allow_missing,omitempty"`
	// AllowRead lists the host directories a template's source or a local
	// artifact may be read from, besides the task's own directories and
	// its group's: Check applies it before anything runs, the executor
	// again as it renders and fetches.
	AllowRead []string `json:"allow_read,omitempty"`
	// AllowDrivers are the drivers a file's tasks may use (nil:
	// DefaultDrivers), AllowRemoteDrivers those a spec from etcd may use
	// (nil: DefaultRemoteDrivers; each must be in AllowDrivers), which
	// ForRemote makes the list a read applies. AllowHostNamespaces are
	// the namespaces an exec task may share with the host (pid_mode,
	// ipc_mode = "host"; nil: none). MaxCount bounds a group's count (0:
	// taskfile.DefaultMaxCount). See policy.go.
	AllowDrivers        []string `json:"allow_drivers,omitempty"`
	AllowRemoteDrivers  []string `json:"allow_remote_drivers,omitempty"`
	AllowHostNamespaces []string `json:"allow_host_namespaces,omitempty"`
	MaxCount            int      `json:"max_count,omitempty"`
	// Remote says the policy judges a spec from etcd (ForRemote): its
	// tasks may use only the remote drivers.
	Remote bool `json:"remote,omitempty"`
}

// Executor is the part of the policy the driver gives its executors.
func (p Policy) Executor() executor.Policy {
	return executor.Policy{AllowedCaps: slices.Clone(p.AllowedCaps), Chroot: slices.Clone(p.Chroot),
		AllowSeccomp: slices.Clone(p.AllowSeccomp), AllowMissing: slices.Clone(p.AllowMissing), AllowRead: slices.Clone(p.AllowRead),
		AllowDrivers: slices.Clone(p.AllowDrivers), AllowHostNamespaces: slices.Clone(p.AllowHostNamespaces)}
}

// Validate checks the lists' forms (the drivers, host namespaces and
// count bound first, naming their flags; executor.ValidatePolicy;
// AllowRead: absolute directories other than /).
func (p Policy) Validate() error {
	if err := p.validateTrust(); err != nil {
		return err
	}
	if err := executor.ValidatePolicy(p.Executor()); err != nil {
		return err
	}
	for _, d := range p.AllowRead {
		if !strings.HasPrefix(d, "/") || d == "/" {
			return fmt.Errorf("%w: --allow-read %q: give absolute directories other than /", ErrBadInput, d)
		}
	}
	return nil
}

// Check refuses what a task of layout, spec, asks beyond the lists Check
// applies: a driver outside the drivers it allows (Drivers), a namespace
// shared with the host outside AllowHostNamespaces, a template's source
// or a local artifact outside the task's directories, its group's, and
// AllowRead. The error names the task, what it asks, and the flag that
// would allow it.
func (p Policy) Check(spec fsm.Spec, layout taskdir.Layout) error {
	if err := p.checkSpec(spec); err != nil {
		return err
	}
	allowed := func() string {
		if len(p.AllowRead) == 0 {
			return "none"
		}
		return strings.Join(p.AllowRead, ",")
	}
	for _, tm := range spec.Templates {
		if tm.Source == "" {
			continue
		}
		if _, err := layout.ResolveRead(tm.Source, p.AllowRead); err != nil {
			return fmt.Errorf("%w: task %q: template source %s is outside the task's directories, its group's and --allow-read (%s): add its directory to --allow-read (TETHER_ALLOW_READ) of the process that runs the task (the agent's, through an agent)",
				ErrNotAllowed, spec.Name, tm.Source, allowed())
		}
	}
	for _, a := range spec.Artifacts {
		local, ok := localSource(a.Source)
		if !ok {
			continue
		}
		if _, err := layout.ResolveRead(local, p.AllowRead); err != nil {
			return fmt.Errorf("%w: task %q: local artifact %s is outside the task's directories, its group's and --allow-read (%s): add its directory to --allow-read (TETHER_ALLOW_READ) of the process that runs the task (the agent's, through an agent)",
				ErrNotAllowed, spec.Name, local, allowed())
		}
	}
	return nil
}

// localSource is the host path an artifact source reads, when it is a
// local one: a path, or a file:// URL (forced with file:: or not), as the
// artifact package reads them; a URL of another scheme or a getter's
// shorthand is no local source.
func localSource(src string) (string, bool) {
	if rest, ok := strings.CutPrefix(src, "file::"); ok {
		src = rest
	} else if i := strings.Index(src, "::"); i > 0 && !strings.ContainsAny(src[:i], "/.") {
		return "", false // another getter, forced
	}
	if u, err := url.Parse(src); err == nil && len(u.Scheme) > 1 {
		if strings.EqualFold(u.Scheme, "file") && u.Path != "" {
			return u.Path, true
		}
		return "", false
	}
	for _, p := range []string{"github.com/", "gitlab.com/", "bitbucket.org/", "git@", "www.googleapis.com/storage"} {
		if strings.HasPrefix(src, p) {
			return "", false
		}
	}
	if host, _, _ := strings.Cut(src, "/"); strings.HasSuffix(host, ".amazonaws.com") {
		return "", false
	}
	p, _, _ := strings.Cut(src, "?")
	return p, p != ""
}
