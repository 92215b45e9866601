//go:build linux

package spec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/capability"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// TestTaskCaps_NonRootGetsOnlyWhatItNames: a non-root task's set is
// exactly its cap_add (none when it names none, whatever the allow list),
// each still within the allow list; a root task keeps Nomad's rule.
func TestTaskCaps_NonRootGetsOnlyWhatItNames(t *testing.T) {
	for _, tc := range []struct {
		add, drop, allowed []string
		root               bool
		want               []capability.Cap
		refused            string
	}{
		{want: nil},
		{allowed: []string{"all"}, want: nil},
		{add: []string{"net_bind_service"}, want: []capability.Cap{capability.CAP_NET_BIND_SERVICE}},
		{add: []string{"CAP_NET_BIND_SERVICE", "kill"}, drop: []string{"kill"}, want: []capability.Cap{capability.CAP_KILL, capability.CAP_NET_BIND_SERVICE}},
		{drop: []string{"chown"}, want: nil},
		{add: []string{"net_raw"}, refused: "net_raw"},
		{add: []string{"sys_admin"}, allowed: []string{"chown"}, refused: "sys_admin"},
		{drop: []string{"no_such_cap"}, refused: "no_such_cap"},
		{root: true, drop: []string{"all"}, add: []string{"chown"}, want: []capability.Cap{capability.CAP_CHOWN}},
	} {
		got, err := TaskCaps(tc.add, tc.drop, tc.allowed, tc.root)
		if tc.refused != "" {
			var ce *wire.CapError
			if !errors.As(err, &ce) || !slices.Contains(append(ce.NotAllowed, ce.Unknown...), tc.refused) {
				t.Errorf("%+v: %v, want %s refused", tc, err, tc.refused)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %v %v, want %v", tc, got, err, tc.want)
		}
	}
	root, _ := TaskCaps(nil, nil, nil, true)
	if def, _ := ResolveCaps(nil, nil, nil); !slices.Equal(root, def) || len(root) == 0 {
		t.Errorf("a root task's default set %v, want Nomad's %v", root, def)
	}
}

// TestCheckSeccomp_OperatorAllowsAllButTheDefault: the default needs no
// permission; unconfined and a profile need their exact entry (paths
// compared clean), never another's; the refusal names the flag.
func TestCheckSeccomp_OperatorAllowsAllButTheDefault(t *testing.T) {
	for _, c := range []struct {
		choice  string
		allowed []string
		ok      bool
	}{
		{"", nil, true},
		{"default", nil, true},
		{"unconfined", nil, false},
		{"unconfined", []string{"/etc/p/x.json"}, false},
		{"unconfined", []string{"unconfined"}, true},
		{"/etc/p/x.json", nil, false},
		{"/etc/p/x.json", []string{"unconfined"}, false},
		{"/etc/p/x.json", []string{"/etc/p/y.json"}, false},
		{"/etc/p/x.json", []string{"/etc/p/./x.json"}, true},
		{"/etc/p/../p/x.json", []string{"/etc/p/x.json"}, true},
		{"/etc/p/x.json", []string{"etc/p/x.json"}, false},
	} {
		err := CheckSeccomp(c.choice, c.allowed)
		if c.ok && err != nil {
			t.Errorf("%q with %q: %v, want allowed", c.choice, c.allowed, err)
		}
		if !c.ok && (!errors.Is(err, wire.ErrSeccompNotAllowed) || !strings.Contains(err.Error(), "--allow-seccomp ")) {
			t.Errorf("%q with %q: %v, want ErrSeccompNotAllowed naming the flag", c.choice, c.allowed, err)
		}
	}
}

// TestPlanSandbox_MissingFeatures: a host lacking a part of the sandbox
// refuses an exec task, naming the part and the operator's opt-out,
// unless the operator took it (then the part is off and named in
// Without); the task file alone never turns a part off but seccomp's
// "unconfined", which the operator must allow; network "none" and
// openat2 have no way around them.
func TestPlanSandbox_MissingFeatures(t *testing.T) {
	launch := func(mod func(l *wire.Launch)) wire.Launch {
		l := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}}
		if mod != nil {
			mod(&l)
		}
		return l
	}
	why := errors.New("not on this kernel")
	sb, err := PlanSandbox(launch(nil), Features{})
	if err != nil || !sb.Seccomp || !sb.CgroupNS || !sb.Keyring || sb.NetNS || len(sb.Without) != 0 {
		t.Fatalf("a full host: %+v %v", sb, err)
	}
	for _, tc := range []struct {
		name    string
		missing Feature
		mod     func(l *wire.Launch)
		optOut  string // "" when refused
		off     func(Sandbox) bool
	}{
		{"no seccomp", FeatureSeccomp, nil, "", nil},
		{"no seccomp, allowed", FeatureSeccomp, func(l *wire.Launch) { l.AllowSeccomp = []string{"unconfined"} }, "seccomp", func(s Sandbox) bool { return !s.Seccomp }},
		{"no cgroupns", FeatureCgroupNS, nil, "", nil},
		{"no cgroupns, other opt-out", FeatureCgroupNS, func(l *wire.Launch) { l.AllowMissing = []string{"keyring"} }, "", nil},
		{"no cgroupns, allowed", FeatureCgroupNS, func(l *wire.Launch) { l.AllowMissing = []string{"cgroupns"} }, "cgroupns", func(s Sandbox) bool { return !s.CgroupNS }},
		{"no keyring", FeatureKeyring, nil, "", nil},
		{"no keyring, allowed", FeatureKeyring, func(l *wire.Launch) { l.AllowMissing = []string{"keyring"} }, "keyring", func(s Sandbox) bool { return !s.Keyring }},
		{"no netns, mode none", FeatureNetNS, func(l *wire.Launch) { l.Network = fsm.NetworkNone; l.AllowMissing = []string{"cgroupns", "keyring"} }, "", nil},
		{"no openat2", FeatureOpenat2, func(l *wire.Launch) { l.AllowMissing = []string{"cgroupns", "keyring"} }, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := PlanSandbox(launch(tc.mod), Features{tc.missing: why})
			if tc.optOut == "" {
				if !errors.Is(err, wire.ErrHostFeature) || !strings.Contains(err.Error(), string(tc.missing)) || !strings.Contains(err.Error(), why.Error()) {
					t.Fatalf("%+v %v, want ErrHostFeature naming %s and why", sb, err, tc.missing)
				}
				if opt := tc.missing.OptOut(); opt != "" && !strings.Contains(err.Error(), opt) {
					t.Errorf("%v does not name the opt-out %s", err, opt)
				}
				return
			}
			if err != nil || !tc.off(sb) || !slices.Equal(sb.Without, []Feature{tc.missing}) {
				t.Fatalf("%+v %v, want %s off and named", sb, err, tc.missing)
			}
		})
	}
	// A task that chose unconfined needs no seccomp from the host.
	sb, err = PlanSandbox(launch(func(l *wire.Launch) { l.Seccomp = "unconfined"; l.AllowSeccomp = []string{"unconfined"} }), Features{FeatureSeccomp: why})
	if err != nil || sb.Seccomp || len(sb.Without) != 0 {
		t.Errorf("unconfined on a host without seccomp: %+v %v", sb, err)
	}
	// The task file alone: refused, whatever the host.
	if _, err := PlanSandbox(launch(func(l *wire.Launch) { l.Seccomp = "unconfined" }), Features{}); !errors.Is(err, wire.ErrSeccompNotAllowed) {
		t.Errorf("unconfined without the operator: %v", err)
	}
}

// TestValidatePolicy: the operator's lists hold "unconfined" or absolute
// paths, and known features.
func TestValidatePolicy(t *testing.T) {
	if err := ValidatePolicy([]string{"unconfined", "/etc/p.json"}, []string{"cgroupns", "keyring"}); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct{ sc, miss []string }{
		{sc: []string{"p.json"}}, {sc: []string{"default"}}, {miss: []string{"seccomp"}}, {miss: []string{"netns"}},
	} {
		if err := ValidatePolicy(bad.sc, bad.miss); !errors.Is(err, wire.ErrBadSpec) {
			t.Errorf("%+v: %v, want ErrBadSpec", bad, err)
		}
	}
}
