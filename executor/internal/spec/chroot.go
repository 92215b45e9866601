//go:build linux

package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/statedir"
)

// DefaultChroot is what an exec task's root is built from when
// LaunchSpec.Chroot is nil: Nomad's default chroot_env, each an existing
// host directory bound read-only at the same place (those that do not exist
// on a host are left out). Symbolic links among them (/bin -> usr/bin on a
// merged-/usr host) are made as the same links in the root.
var DefaultChroot = []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/run/resolvconf", "/sbin", "/usr"}

// reservedInRoot are the places of an exec task's root that the executor
// fills itself; a chroot entry may not use them.
var ReservedInRoot = []string{"/", "/dev", "/proc", "/" + statedir.LocalDir, "/" + statedir.SecretsDir, "/" + statedir.TmpDir, "/" + statedir.AllocDir}

// chrootEntry is one parsed Chroot entry.
type ChrootEntry struct{ Src, Dst string }

// parseChroot parses Chroot entries ("SRC" or "SRC:DST"). Both paths must
// be absolute; DST may not be one of the places the executor fills.
func ParseChroot(entries []string) ([]ChrootEntry, error) {
	var out []ChrootEntry
	for _, e := range entries {
		src, dst, ok := strings.Cut(e, ":")
		if !ok {
			dst = src
		}
		src, dst = filepath.Clean(src), filepath.Clean(dst)
		switch {
		case !filepath.IsAbs(src) || !filepath.IsAbs(dst):
			return nil, fmt.Errorf("%w: chroot entry %q: want an absolute SRC or SRC:DST", wire.ErrBadSpec, e)
		case slices.Contains(ReservedInRoot, dst):
			return nil, fmt.Errorf("%w: chroot entry %q: %s is made by the executor (one of %s)", wire.ErrBadSpec, e, dst, strings.Join(ReservedInRoot, " "))
		}
		for _, r := range ReservedInRoot[1:] {
			if strings.HasPrefix(dst, r+"/") {
				return nil, fmt.Errorf("%w: chroot entry %q: %s is inside %s, which the executor makes", wire.ErrBadSpec, e, dst, r)
			}
		}
		out = append(out, ChrootEntry{src, dst})
	}
	return out, nil
}

// ValidateChroot checks chroot entries as an exec launch would: the syntax
// and, for entries given explicitly, that each source exists.
func ValidateChroot(entries []string) error {
	es, err := ParseChroot(entries)
	if err != nil {
		return err
	}
	for _, e := range es {
		if _, err := os.Stat(e.Src); err != nil {
			return fmt.Errorf("%w: chroot entry %s: %w", wire.ErrBadSpec, e.Src, err)
		}
	}
	return nil
}
