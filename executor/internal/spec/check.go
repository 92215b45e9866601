//go:build linux

package spec

import (
	"fmt"
	"os"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/wire"
)

// checkSpec is CheckSpec on host h; noCgroup is why h gives no task
// cgroups (nil when it does).
func Check(spec wire.LaunchSpec, h cgroup.Host, noCgroup error) error {
	switch spec.Mode {
	case wire.ModeExec, wire.ModeRawExec:
	default:
		return fmt.Errorf("%w: mode %q (want %q or %q)", wire.ErrBadSpec, spec.Mode, wire.ModeExec, wire.ModeRawExec)
	}
	if spec.Command == "" {
		return fmt.Errorf("%w: empty command", wire.ErrBadSpec)
	}
	for _, m := range []struct{ name, v string }{{"pid_mode", spec.PIDMode}, {"ipc_mode", spec.IPCMode}} {
		switch {
		case m.v != "" && m.v != wire.ModeHost:
			return fmt.Errorf("%w: %s %q: use %q or leave it unset", wire.ErrBadSpec, m.name, m.v, wire.ModeHost)
		case m.v != "" && spec.Mode != wire.ModeExec:
			return fmt.Errorf("%w: %s applies to exec tasks only (a raw_exec task shares the host's namespaces)", wire.ErrBadSpec, m.name)
		}
	}
	if err := spec.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: resources: %w", wire.ErrBadSpec, err)
	}
	if err := LogsConfig(spec.Logs).Validate(); err != nil {
		return fmt.Errorf("%w: %w", wire.ErrBadSpec, err)
	}
	if a := spec.OOMScoreAdj; a != nil && (*a < -1000 || *a > 1000) {
		return fmt.Errorf("%w: oom_score_adj %d: use -1000 to 1000", wire.ErrBadSpec, *a)
	}
	tu, err := UserOf(spec)
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	if tu.Set() && euid != 0 && tu.UID != euid {
		return fmt.Errorf("%w: an executor running as uid %d cannot run a task as uid %d (%q); run tether as root", wire.ErrLaunch, euid, tu.UID, spec.User)
	}
	if spec.Mode == wire.ModeExec {
		if _, err := ResolveCaps(spec.CapAdd, spec.CapDrop, spec.AllowedCaps); err != nil {
			return err
		}
		if _, err := ParseChroot(spec.Chroot); err != nil {
			return err
		}
		if spec.Chroot != nil {
			if err := ValidateChroot(spec.Chroot); err != nil {
				return err
			}
		}
		if euid != 0 {
			return fmt.Errorf("%w: exec needs root (uid %d here): its namespaces and a root of its own need CAP_SYS_ADMIN; run tether as root, or use driver raw_exec", wire.ErrIsolation, euid)
		}
		if noCgroup != nil {
			return fmt.Errorf("%w: an exec task is contained in a cgroup of its own, and this host gives none: %w; run tether as root with cgroups mounted, or use driver raw_exec", wire.ErrNoCgroup, noCgroup)
		}
	}
	needs := limitNeeds(spec.Limits)
	if len(needs) > 0 && noCgroup != nil {
		return fmt.Errorf("%w: resources need the task's cgroup, and this host gives none: %w; drop the resources block, or run tether where it can make cgroups (root, or a delegated cgroup)", wire.ErrNoCgroup, noCgroup)
	}
	for _, n := range needs {
		if _, why, ok := h.For(n.c); !ok {
			return fmt.Errorf("%w: %w", wire.ErrLimit, &cgroup.LimitError{Limit: n.limit, Controller: n.c, Why: why})
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
