//go:build linux

package server

import (
	"errors"
	"fmt"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/seccomp"
)

// features is what of an exec task's sandbox this host lacks: what
// spec.ProbeFeatures reads, and what only a sandbox syscall tells, probed
// once per executor (its restarts and execs ask again).
func (s *server) features() spec.Features {
	if s.feats == nil {
		s.feats = probeFeatures()
	}
	return s.feats
}

// probeFeatures is spec.ProbeFeatures and what only a sandbox syscall
// tells.
func probeFeatures() spec.Features {
	f := spec.ProbeFeatures()
	if _, ok := f[spec.FeatureSeccomp]; !ok {
		if err := seccomp.CheckHost(); err != nil {
			f[spec.FeatureSeccomp] = err
		}
	}
	if _, ok := f[spec.FeatureKeyring]; !ok {
		// The thread keyring's id, without creating one: ENOKEY when
		// there is none (keyrings work); ENOSYS without CONFIG_KEYS;
		// EPERM or EACCES under a filter of the executor's own (a
		// container's).
		thread := int32(unix.KEY_SPEC_THREAD_KEYRING)
		_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(uint32(thread)), 0)
		if e != 0 && !errors.Is(e, unix.ENOKEY) {
			f[spec.FeatureKeyring] = fmt.Errorf("keyctl: %w", e)
		}
	}
	return f
}

// sandboxWarnings are the launch's warnings for the parts of the sandbox
// the task runs without, as the operator allowed.
func sandboxWarnings(sb spec.Sandbox, f spec.Features) []fsm.Warning {
	var out []fsm.Warning
	for _, feat := range sb.Without {
		out = append(out, fsm.Warning{Kind: fsm.WarnUnsandboxed,
			Text: fmt.Sprintf("the task runs without %s: this host lacks it (%v), and the operator allowed that (%s)", feat, f[feat], feat.OptOut())})
	}
	return out
}

// filterFor compiles the seccomp filter of an exec task (its choice, the
// default or an allowed profile's file, read here: the shim no longer
// sees the operator's paths) for its capability set, in the form the shim
// installs. A profile that cannot be used is ErrBadSpec naming the file,
// the rule and the field.
func filterFor(choice string, caps []capability.Cap, hostPID bool) ([]byte, error) {
	c, err := seccomp.ParseChoice(choice)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrBadSpec, err)
	}
	p, err := c.Profile()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrBadSpec, err)
	}
	if p == nil {
		return nil, nil // unconfined
	}
	f, err := seccomp.Compile(p, seccomp.Options{Caps: caps, HostPID: hostPID})
	if errors.Is(err, seccomp.ErrUnsupportedArch) {
		return nil, fmt.Errorf("%w: %w", wire.ErrHostFeature, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrBadSpec, err)
	}
	return f.MarshalBinary()
}

// HostFeatures reports, a line each, the parts of an exec task's sandbox
// this host has or lacks, as an executor probes them at launch, with the
// operator's way to run exec tasks without a missing one: `tether debug
// host` prints them.
func HostFeatures() []string {
	f := probeFeatures()
	var out []string
	for _, feat := range []spec.Feature{spec.FeatureSeccomp, spec.FeatureCgroupNS, spec.FeatureKeyring, spec.FeatureNetNS, spec.FeatureOpenat2} {
		why, missing := f[feat]
		switch {
		case !missing:
			out = append(out, fmt.Sprintf("%s: yes", feat))
		case feat.OptOut() != "":
			out = append(out, fmt.Sprintf("%s: no (%v): exec tasks are refused unless the operator allows %s", feat, why, feat.OptOut()))
		case feat == spec.FeatureNetNS:
			out = append(out, fmt.Sprintf("%s: no (%v): network mode \"none\" is refused", feat, why))
		default:
			out = append(out, fmt.Sprintf("%s: no (%v): exec tasks, and raw_exec tasks with a user, are refused", feat, why))
		}
	}
	return out
}
