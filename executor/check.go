//go:build linux

package executor

import (
	"fmt"
	"os"

	"github.com/tether-fsm/tether/cgroup"
)

// CheckSpec checks, before anything is spawned, what a launch of spec
// needs from this host, as the executor will check it again at launch: the
// mode and namespaces modes, the limits, the logs block and oom_score_adj;
// the user (exec defaults to nobody); for exec the capabilities against
// the allow list, the chroot entries, root, and task cgroups; for any
// limit, a cgroup controller that enforces it. Errors are named:
// ErrBadSpec, ErrUnknownUser, *CapError, ErrIsolation, ErrNoCgroup, and
// ErrLimit wrapping a *cgroup.LimitError that names the controller.
//
// A driver calls it before it spawns the executor; it reads the host's
// cgroup layout (cgroup.Probe) as the executor, a child of the caller,
// will see it.
func CheckSpec(spec LaunchSpec) error {
	h, err := cgroup.Probe()
	return CheckSpecOn(spec, h, err)
}

// CheckSpecOn is CheckSpec on a layout the caller probed already (probeErr
// is cgroup.Probe's error, if it failed): a driver that checks many specs
// probes once.
func CheckSpecOn(spec LaunchSpec, h cgroup.Host, probeErr error) error {
	if probeErr != nil {
		return checkSpec(spec, cgroup.Host{}, probeErr)
	}
	return checkSpec(spec, h, h.Usable())
}

// checkSpec is CheckSpec on host h; noCgroup is why h gives no task
// cgroups (nil when it does).
func checkSpec(spec LaunchSpec, h cgroup.Host, noCgroup error) error {
	switch spec.Mode {
	case ModeExec, ModeRawExec:
	default:
		return fmt.Errorf("%w: mode %q (want %q or %q)", ErrBadSpec, spec.Mode, ModeExec, ModeRawExec)
	}
	if spec.Command == "" {
		return fmt.Errorf("%w: empty command", ErrBadSpec)
	}
	for _, m := range []struct{ name, v string }{{"pid_mode", spec.PIDMode}, {"ipc_mode", spec.IPCMode}} {
		switch {
		case m.v != "" && m.v != ModeHost:
			return fmt.Errorf("%w: %s %q: use %q or leave it unset", ErrBadSpec, m.name, m.v, ModeHost)
		case m.v != "" && spec.Mode != ModeExec:
			return fmt.Errorf("%w: %s applies to exec tasks only (a raw_exec task shares the host's namespaces)", ErrBadSpec, m.name)
		}
	}
	if err := spec.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: resources: %w", ErrBadSpec, err)
	}
	if err := logsConfig(spec.Logs).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	if a := spec.OOMScoreAdj; a != nil && (*a < -1000 || *a > 1000) {
		return fmt.Errorf("%w: oom_score_adj %d: use -1000 to 1000", ErrBadSpec, *a)
	}
	tu, err := userOf(spec)
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	if tu.set() && euid != 0 && tu.uid != euid {
		return fmt.Errorf("%w: an executor running as uid %d cannot run a task as uid %d (%q); run tether as root", ErrLaunch, euid, tu.uid, spec.User)
	}
	if spec.Mode == ModeExec {
		if _, err := resolveCaps(spec.CapAdd, spec.CapDrop, spec.AllowedCaps); err != nil {
			return err
		}
		if _, err := parseChroot(spec.Chroot); err != nil {
			return err
		}
		if spec.Chroot != nil {
			if err := ValidateChroot(spec.Chroot); err != nil {
				return err
			}
		}
		if euid != 0 {
			return fmt.Errorf("%w: exec needs root (uid %d here): its namespaces and pivot_root need CAP_SYS_ADMIN; run tether as root, or use driver raw_exec", ErrIsolation, euid)
		}
		if noCgroup != nil {
			return fmt.Errorf("%w: an exec task is contained in a cgroup of its own, and this host gives none: %w; run tether as root with cgroups mounted, or use driver raw_exec", ErrNoCgroup, noCgroup)
		}
	}
	needs := limitNeeds(spec.Limits)
	if len(needs) > 0 && noCgroup != nil {
		return fmt.Errorf("%w: resources need the task's cgroup, and this host gives none: %w; drop the resources block, or run tether where it can make cgroups (root, or a delegated cgroup)", ErrNoCgroup, noCgroup)
	}
	for _, n := range needs {
		if _, why, ok := h.For(n.c); !ok {
			return fmt.Errorf("%w: %w", ErrLimit, &cgroup.LimitError{Limit: n.limit, Controller: n.c, Why: why})
		}
	}
	return nil
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
