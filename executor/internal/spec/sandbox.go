//go:build linux

package spec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// Feature is a part of an exec task's sandbox that a host may lack.
type Feature string

// The sandbox's features a host may lack. Seccomp, CgroupNS and Keyring
// are refused by default where missing; the operator may let exec tasks
// run without them (Seccomp through Policy.AllowSeccomp's "unconfined",
// the others through Policy.AllowMissing). NetNS (network mode "none")
// and Openat2 (every privileged touch of a task's paths) have no way
// around them.
const (
	FeatureSeccomp  Feature = "seccomp"
	FeatureCgroupNS Feature = "cgroupns"
	FeatureKeyring  Feature = "keyring"
	FeatureNetNS    Feature = "netns"
	FeatureOpenat2  Feature = "openat2"
)

// Features lists those a feature of which this host lacks, each with why;
// a feature absent from the map is there.
type Features map[Feature]error

// What each feature is, as a refusal names it.
var featureWhat = map[Feature]string{
	FeatureSeccomp:  "a seccomp filter (the task's syscall allow list)",
	FeatureCgroupNS: "a cgroup namespace (so that the task sees its own cgroup only)",
	FeatureKeyring:  "a session keyring of the task's own (keyctl)",
	FeatureNetNS:    "a network namespace (network mode \"none\")",
	FeatureOpenat2:  "openat2 (Linux 5.6), through which every privileged touch of a task's paths resolves",
}

// OptOut is the operator's way to let exec tasks run without a feature the
// host lacks, "" when there is none.
func (f Feature) OptOut() string {
	switch f {
	case FeatureSeccomp:
		return "--allow-seccomp " + fsm.SeccompUnconfined + " (TETHER_ALLOW_SECCOMP)"
	case FeatureCgroupNS, FeatureKeyring:
		return "--allow-missing " + string(f) + " (TETHER_ALLOW_MISSING)"
	}
	return ""
}

// MissingFeatures are the values Policy.AllowMissing may hold.
var MissingFeatures = []Feature{FeatureCgroupNS, FeatureKeyring}

// ProbeFeatures reads which of the sandbox's features this host lacks,
// without touching any sandbox syscall (the driver links it): the
// Seccomp field of /proc/self/status (CONFIG_SECCOMP), the cgroup and
// network namespace links of /proc/self/ns, /proc/keys (CONFIG_KEYS), and
// openat2 on "/". The executor adds, at launch, what only a sandbox
// syscall tells: a kernel whose seccomp(2) lacks the filter mode, a
// keyctl that a filter of the executor's own refuses.
func ProbeFeatures() Features {
	f := Features{}
	if status, err := os.ReadFile("/proc/self/status"); err != nil {
		f[FeatureSeccomp] = err
	} else if !hasLine(status, "Seccomp:") {
		f[FeatureSeccomp] = errors.New("/proc/self/status has no Seccomp field: a kernel without CONFIG_SECCOMP")
	}
	for feat, ns := range map[Feature]string{FeatureCgroupNS: "cgroup", FeatureNetNS: "net"} {
		if _, err := os.Stat(filepath.Join("/proc/self/ns", ns)); err != nil {
			f[feat] = fmt.Errorf("the kernel has no %s namespace: %w", ns, err)
		}
	}
	if _, err := os.Stat("/proc/keys"); err != nil {
		f[FeatureKeyring] = fmt.Errorf("the kernel has no keyrings (CONFIG_KEYS): %w", err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		f[FeatureOpenat2] = fmt.Errorf("openat2: %w", err)
	} else {
		unix.Close(fd)
	}
	return f
}

func hasLine(b []byte, prefix string) bool {
	for line := range bytes.Lines(b) {
		if bytes.HasPrefix(line, []byte(prefix)) {
			return true
		}
	}
	return false
}

// Sandbox is what an exec task's sandbox holds on this host, beyond what
// every exec task gets (namespaces, its root, its user, capabilities and
// no_new_privs): each part is on unless the task or the host says
// otherwise (and then the operator allowed it).
type Sandbox struct {
	Seccomp  bool // a seccomp filter: the task's choice is not unconfined
	CgroupNS bool // a cgroup namespace rooted at the task's cgroup
	Keyring  bool // a new anonymous session keyring
	NetNS    bool // a network namespace with loopback alone (network "none")
	// Without are the parts the host lacks that the operator let the task
	// run without: the launch warns of each.
	Without []Feature
}

// PlanSandbox decides an exec task's sandbox: the task's seccomp choice
// against the operator's allow list (ErrSeccompNotAllowed), then each part
// the host lacks (f) against the operator's opt-outs (ErrHostFeature
// naming the feature and the opt-out, or Sandbox.Without).
func PlanSandbox(l wire.Launch, f Features) (Sandbox, error) {
	if err := CheckSeccomp(l.Seccomp, l.AllowSeccomp); err != nil {
		return Sandbox{}, err
	}
	sb := Sandbox{Seccomp: l.Seccomp != fsm.SeccompUnconfined, CgroupNS: true, Keyring: true, NetNS: l.Network == fsm.NetworkNone}
	if err := f[FeatureOpenat2]; err != nil {
		return Sandbox{}, missing(FeatureOpenat2, err)
	}
	if err := f[FeatureNetNS]; err != nil && sb.NetNS {
		return Sandbox{}, fmt.Errorf("%w; use network mode \"host\"", missing(FeatureNetNS, err))
	}
	for _, p := range []struct {
		feat    Feature
		on      *bool
		allowed bool
	}{
		{FeatureSeccomp, &sb.Seccomp, slices.Contains(l.AllowSeccomp, fsm.SeccompUnconfined)},
		{FeatureCgroupNS, &sb.CgroupNS, slices.Contains(l.AllowMissing, string(FeatureCgroupNS))},
		{FeatureKeyring, &sb.Keyring, slices.Contains(l.AllowMissing, string(FeatureKeyring))},
	} {
		err := f[p.feat]
		if err == nil || !*p.on {
			continue
		}
		if !p.allowed {
			return Sandbox{}, fmt.Errorf("%w; allow exec tasks to run without it with %s", missing(p.feat, err), p.feat.OptOut())
		}
		*p.on = false
		sb.Without = append(sb.Without, p.feat)
	}
	return sb, nil
}

// missing is the refusal of a task whose sandbox needs feat, which the
// host lacks (why).
func missing(feat Feature, why error) error {
	return fmt.Errorf("%w: %s: %s: %w", wire.ErrHostFeature, feat, featureWhat[feat], why)
}

// CheckSeccomp checks a task's seccomp choice (fsm.Spec.Seccomp, whose
// syntax Spec.Validate checked) against the operator's allow list: the
// default needs nothing; "unconfined" and a profile's path must be listed
// (paths compared clean), so that a task file alone cannot loosen its
// filter.
func CheckSeccomp(choice string, allowed []string) error {
	if choice == "" || choice == fsm.SeccompDefault {
		return nil
	}
	want := choice
	if filepath.IsAbs(choice) {
		want = filepath.Clean(choice)
	}
	for _, a := range allowed {
		if a == want || filepath.IsAbs(a) && filepath.Clean(a) == want {
			return nil
		}
	}
	return fmt.Errorf("%w: seccomp = %q needs the operator's --allow-seccomp %s (or TETHER_ALLOW_SECCOMP); the default filter needs nothing", wire.ErrSeccompNotAllowed, choice, want)
}

// ValidatePolicy checks the operator's seccomp allow list and sandbox
// opt-outs as a driver takes them: "unconfined" or absolute paths, and
// known features.
func ValidatePolicy(allowSeccomp, allowMissing []string) error {
	for _, a := range allowSeccomp {
		if a != fsm.SeccompUnconfined && !filepath.IsAbs(a) {
			return fmt.Errorf("%w: seccomp allow list entry %q: use %q or the absolute path of a profile", wire.ErrBadSpec, a, fsm.SeccompUnconfined)
		}
	}
	for _, m := range allowMissing {
		if !slices.Contains(MissingFeatures, Feature(m)) {
			names := make([]string, len(MissingFeatures))
			for i, f := range MissingFeatures {
				names[i] = string(f)
			}
			return fmt.Errorf("%w: %q is no sandbox feature an exec task may run without: use %s (seccomp's is --allow-seccomp unconfined)", wire.ErrBadSpec, m, strings.Join(names, ", "))
		}
	}
	return nil
}
