//go:build linux

package spec

import (
	"slices"
	"strings"

	"github.com/moby/sys/capability"

	"github.com/tether-fsm/tether/executor/internal/wire"
)

// DefaultAllowedCaps is Nomad's exec driver default allow list, used when
// Policy.AllowedCaps is nil. It is also the set a root exec task gets when
// it adds and drops nothing (a task of any other user gets none unless
// its cap_add names them). NET_RAW is deliberately absent.
var DefaultAllowedCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// capByName maps "net_raw" to capability.CAP_NET_RAW for every capability
// the library knows.
func CapByName(name string) (capability.Cap, bool) {
	n := normCap(name)
	for _, c := range capability.ListKnown() {
		if c.String() == n {
			return c, true
		}
	}
	return 0, false
}

// normCap lower-cases a capability name and strips a CAP_ prefix.
func normCap(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	return strings.TrimPrefix(n, "cap_")
}

// ValidateCaps checks cap_add and cap_drop against allowed (nil means
// DefaultAllowedCaps). Names are case-insensitive, with or without the CAP_
// prefix; "all" is accepted in both. Unknown names and added names outside
// allowed are refused with a *CapError naming them (lower case, no prefix):
// adding "all" needs an allow list of every capability. It is pure: the
// driver runs it before spawning anything.
func ValidateCaps(add, drop, allowed []string) error {
	_, err := ResolveCaps(add, drop, allowed)
	return err
}

// TaskCaps is an exec task's capability set, validated like ValidateCaps:
// for a root task (root set) the set ResolveCaps computes, as Nomad does;
// for a task of any other user exactly the capabilities its cap_add names
// (each still within allowed), as Docker and runc give a non-root
// container user none. cap_drop has nothing to take from a non-root
// task's empty basis, but its names are still checked.
func TaskCaps(add, drop, allowed []string, root bool) ([]capability.Cap, error) {
	if root {
		return ResolveCaps(add, drop, allowed)
	}
	// The same validation, on an empty basis: drop everything first.
	return ResolveCaps(add, append([]string{"all"}, drop...), allowed)
}

// ResolveCaps validates like ValidateCaps and returns a root task's final
// set as Nomad computes it: the basis DefaultAllowedCaps ∩ allowed, minus
// drop, plus add. So cap_drop = ["all"] with cap_add = ["chown"] is
// CAP_CHOWN alone.
func ResolveCaps(add, drop, allowed []string) ([]capability.Cap, error) {
	if allowed == nil {
		allowed = DefaultAllowedCaps
	}
	ce := &wire.CapError{}
	allowSet := map[capability.Cap]bool{}
	for _, n := range allowed {
		if normCap(n) == "all" {
			for _, c := range capability.ListKnown() {
				allowSet[c] = true
			}
			continue
		}
		c, ok := CapByName(n)
		if !ok {
			ce.Unknown = appendUniq(ce.Unknown, normCap(n))
			continue
		}
		allowSet[c] = true
	}
	final := map[capability.Cap]bool{}
	for _, n := range DefaultAllowedCaps {
		if c, ok := CapByName(n); ok && allowSet[c] {
			final[c] = true
		}
	}
	for _, n := range drop {
		if normCap(n) == "all" {
			clear(final)
			continue
		}
		c, ok := CapByName(n)
		if !ok {
			ce.Unknown = appendUniq(ce.Unknown, normCap(n))
			continue
		}
		delete(final, c)
	}
	for _, n := range add {
		if normCap(n) == "all" {
			for _, c := range capability.ListKnown() {
				if allowSet[c] {
					final[c] = true
				} else {
					ce.NotAllowed = appendUniq(ce.NotAllowed, c.String())
				}
			}
			continue
		}
		c, ok := CapByName(n)
		switch {
		case !ok:
			ce.Unknown = appendUniq(ce.Unknown, normCap(n))
		case !allowSet[c]:
			ce.NotAllowed = appendUniq(ce.NotAllowed, c.String())
		default:
			final[c] = true
		}
	}
	if len(ce.NotAllowed) > 0 || len(ce.Unknown) > 0 {
		return nil, ce
	}
	out := make([]capability.Cap, 0, len(final))
	for c := range final {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, nil
}

func appendUniq(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// capMask is the kernel bit mask of a capability set, as /proc/PID/status
// prints CapEff and CapBnd.
func CapMask(caps []capability.Cap) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << uint(c)
	}
	return m
}
