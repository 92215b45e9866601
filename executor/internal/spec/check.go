//go:build linux

package spec

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// CheckTrust refuses what the operator's policy does not allow a launch,
// whatever asked for it (a file, a command line, a restart of a recorded
// spec), before anything of the host is looked at: a launch mode outside
// AllowDrivers (nil: both), an exec task sharing the host's PID or IPC
// namespace outside AllowHostNamespaces (nil: none). Errors wrap
// ErrBadSpec and name the flag that would allow it.
func CheckTrust(l wire.Launch) error {
	if l.AllowDrivers != nil && !slices.Contains(l.AllowDrivers, l.Driver) {
		return fmt.Errorf("%w: driver %q is not allowed by the operator (--allow-drivers %s)", wire.ErrBadSpec, l.Driver, strings.Join(l.AllowDrivers, ","))
	}
	if l.Driver != wire.ModeExec {
		return nil
	}
	for _, m := range []struct{ attr, v, ns string }{{"pid_mode", l.PIDMode, "pid"}, {"ipc_mode", l.IPCMode, "ipc"}} {
		if m.v != "" && !slices.Contains(l.AllowHostNamespaces, m.ns) {
			return fmt.Errorf("%w: %s = %q shares the host's namespace, which the operator does not allow (--allow-host-namespaces %s)", wire.ErrBadSpec, m.attr, m.v, m.ns)
		}
	}
	return nil
}

// HostNamespaces are the names AllowHostNamespaces may list.
var HostNamespaces = []string{"pid", "ipc"}

// ValidateTrust checks AllowDrivers (launch modes) and
// AllowHostNamespaces (HostNamespaces).
func ValidateTrust(drivers, hostNamespaces []string) error {
	for _, d := range drivers {
		if d != wire.ModeExec && d != wire.ModeRawExec {
			return fmt.Errorf("%w: driver %q: use %s or %s", wire.ErrBadSpec, d, wire.ModeExec, wire.ModeRawExec)
		}
	}
	for _, n := range hostNamespaces {
		if !slices.Contains(HostNamespaces, n) {
			return fmt.Errorf("%w: host namespace %q: use %s", wire.ErrBadSpec, n, strings.Join(HostNamespaces, " or "))
		}
	}
	return nil
}

// Check is the one host check of a launch, made by the driver before it
// spawns anything (executor.World.CheckSpec) and by the executor again at
// launch, each after the spec's values were checked (fsm.Spec.Validate):
// the user it runs as (exec defaults to nobody), for exec the capabilities
// against the allow list (TaskCaps), the chroot entries, root, task
// cgroups and the sandbox (PlanSandbox: the seccomp choice against the
// operator's allow list, the features the host lacks against the
// operator's opt-outs), which it returns; for a raw_exec task with a user,
// openat2; for any limit, a cgroup controller that enforces it. h is the
// host's cgroup layout, noCgroup why it gives no task cgroups (nil when
// it does), f what the host lacks (ProbeFeatures). Errors are named:
// ErrBadSpec, ErrUnknownUser, *CapError, ErrIsolation, ErrNoCgroup,
// ErrSeccompNotAllowed, ErrHostFeature, and ErrLimit wrapping a
// *cgroup.LimitError that names the controller.
func Check(l wire.Launch, h cgroup.Host, noCgroup error, f Features) (Sandbox, error) {
	var sb Sandbox
	if err := CheckTrust(l); err != nil {
		return sb, err
	}
	tu, err := UserOf(l.Spec)
	if err != nil {
		return sb, err
	}
	euid := os.Geteuid()
	if tu.Set() && euid != 0 && tu.UID != euid {
		return sb, fmt.Errorf("%w: an executor running as uid %d cannot run a task as uid %d (%q); run tether as root", wire.ErrLaunch, euid, tu.UID, l.User)
	}
	if err := ValidatePolicy(l.AllowSeccomp, l.AllowMissing); err != nil {
		return sb, err
	}
	if l.Driver != wire.ModeExec && tu.Set() && euid == 0 {
		if err := f[FeatureOpenat2]; err != nil {
			return sb, fmt.Errorf("%w (a raw_exec task with a user starts in its directory, opened as root beneath the task directory); upgrade the kernel, or leave user out", missing(FeatureOpenat2, err))
		}
	}
	if l.Driver == wire.ModeExec {
		if _, err := TaskCaps(l.CapAdd, l.CapDrop, l.AllowedCaps, tu.UID == 0); err != nil {
			return sb, err
		}
		if _, err := ParseChroot(l.Chroot); err != nil {
			return sb, err
		}
		if l.Chroot != nil {
			if err := ValidateChroot(l.Chroot); err != nil {
				return sb, err
			}
		}
		if euid != 0 {
			return sb, fmt.Errorf("%w: exec needs root (uid %d here): its namespaces and a root of its own need CAP_SYS_ADMIN; run tether as root, or use driver raw_exec", wire.ErrIsolation, euid)
		}
		if noCgroup != nil {
			return sb, fmt.Errorf("%w: an exec task is contained in a cgroup of its own, and this host gives none: %w; run tether as root with cgroups mounted, or use driver raw_exec", wire.ErrNoCgroup, noCgroup)
		}
		if sb, err = PlanSandbox(l, f); err != nil {
			return sb, err
		}
	}
	needs := limitNeeds(Limits(l.Resources))
	if len(needs) > 0 && noCgroup != nil {
		return sb, fmt.Errorf("%w: resources need the task's cgroup, and this host gives none: %w; drop the resources block, or run tether where it can make cgroups (root, or a delegated cgroup)", wire.ErrNoCgroup, noCgroup)
	}
	for _, n := range needs {
		if _, why, ok := h.For(n.c); !ok {
			return sb, fmt.Errorf("%w: %w", wire.ErrLimit, &cgroup.LimitError{Limit: n.limit, Controller: n.c, Why: why})
		}
	}
	if cores := l.Resources.Cores; cores > 0 {
		list, n, err := h.TaskCPUs()
		if err != nil {
			return sb, fmt.Errorf("%w: cores: %w", wire.ErrLimit, err)
		}
		if cores > n {
			return sb, fmt.Errorf("%w: %w", wire.ErrLimit, &cgroup.LimitError{Limit: "cores", Controller: cgroup.CPUSet,
				Why: fmt.Sprintf("cores = %d, but this host gives tasks %d CPUs (%s)", cores, n, list)})
		}
	}
	return sb, nil
}

// LimitWarnings says what of a spec's limits the host will never enforce
// as written: a memory limit above the host's RAM (it is reached only
// once the host has run out). The executor records them with the launch.
func LimitWarnings(r fsm.Resources) []fsm.Warning {
	ram, err := hostMemoryMB()
	if err != nil || ram == 0 {
		return nil
	}
	var out []fsm.Warning
	for _, f := range []struct {
		name string
		mb   int
	}{{"memory", r.MemoryMB}, {"memory_max", r.MemoryMaxMB}} {
		if int64(f.mb) > ram {
			out = append(out, fsm.Warning{Kind: fsm.WarnLimitAboveHost,
				Text: fmt.Sprintf("%s = %d MB is more than this host's %d MB of RAM: the task will not be held to it", f.name, f.mb, ram)})
		}
	}
	return out
}

// hostMemoryMB is the host's RAM in MB (MemTotal of /proc/meminfo).
func hostMemoryMB() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb >> 10, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// Limits are the task cgroup's limits for a spec's resources, in the
// cgroup package's terms.
func Limits(r fsm.Resources) cgroup.Limits {
	return cgroup.Limits{Memory: int64(r.MemoryMB), MemoryMax: int64(r.MemoryMaxMB),
		CPU: int64(r.CPU), Cores: r.Cores, Pids: int64(r.PIDs)}
}

// limitNeeds lists the controllers the set limits need, each with the
// limit's name as a task file spells it.
func limitNeeds(l cgroup.Limits) []struct {
	limit string
	c     cgroup.Controller
} {
	type need = struct {
		limit string
		c     cgroup.Controller
	}
	var out []need
	if l.Memory > 0 {
		out = append(out, need{"memory", cgroup.Memory})
	}
	if l.MemoryMax > 0 {
		out = append(out, need{"memory_max", cgroup.Memory})
	}
	if l.CPU > 0 {
		out = append(out, need{"cpu", cgroup.CPU})
	}
	if l.Cores > 0 {
		out = append(out, need{"cores", cgroup.CPUSet})
	}
	if l.Pids > 0 {
		out = append(out, need{"pids", cgroup.Pids})
	}
	return out
}
