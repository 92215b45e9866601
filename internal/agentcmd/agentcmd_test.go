package agentcmd

import (
	"slices"
	"strings"
	"testing"
)

// The trust flags come in by flag, else environment, else default; a
// flag beats its variable; a bad value is refused naming the flag.
func TestResolve_TrustFlagsFlagEnvironmentDefault(t *testing.T) {
	for _, v := range []string{"TETHER_ALLOW_DRIVERS", "TETHER_ALLOW_REMOTE_DRIVERS", "TETHER_ALLOW_HOST_NAMESPACES", "TETHER_MAX_COUNT"} {
		t.Setenv(v, "")
	}
	resolve := func(g Globals, f Flags) (Settings, error) {
		g.StateDir = t.TempDir()
		s, err := g.Resolve()
		if err != nil {
			return s, err
		}
		return s, f.Resolve(&s)
	}
	s, err := resolve(Globals{}, Flags{})
	if err != nil || s.AllowDrivers != nil || s.AllowRemoteDrivers != nil || s.AllowHostNamespaces != nil || s.MaxCount != 0 {
		t.Fatalf("defaults: %+v, %v; want every list nil (job.Policy's defaults) and no bound given", s, err)
	}
	t.Setenv("TETHER_ALLOW_DRIVERS", "EXEC")
	t.Setenv("TETHER_ALLOW_HOST_NAMESPACES", "pid")
	t.Setenv("TETHER_MAX_COUNT", "7")
	t.Setenv("TETHER_ALLOW_REMOTE_DRIVERS", "exec")
	s, err = resolve(Globals{}, Flags{})
	if err != nil || !slices.Equal(s.AllowDrivers, []string{"exec"}) || !slices.Equal(s.AllowHostNamespaces, []string{"pid"}) || s.MaxCount != 7 ||
		!slices.Equal(s.AllowRemoteDrivers, []string{"exec"}) {
		t.Fatalf("from the environment: %+v, %v", s, err)
	}
	s, err = resolve(Globals{AllowDrivers: "exec,raw_exec", AllowHostNamespaces: "ipc", MaxCount: "3"}, Flags{AllowRemoteDrivers: "raw_exec"})
	if err != nil || !slices.Equal(s.AllowDrivers, []string{"exec", "raw_exec"}) || !slices.Equal(s.AllowHostNamespaces, []string{"ipc"}) || s.MaxCount != 3 ||
		!slices.Equal(s.AllowRemoteDrivers, []string{"raw_exec"}) {
		t.Fatalf("flags over the environment: %+v, %v", s, err)
	}
	if p := s.Policy(); !slices.Equal(p.AllowRemoteDrivers, []string{"raw_exec"}) || p.MaxCount != 3 {
		t.Errorf("Policy: %+v", p)
	}
	for _, tc := range []struct {
		g    Globals
		f    Flags
		flag string
	}{
		{Globals{AllowDrivers: "docker"}, Flags{}, "--allow-drivers"},
		{Globals{AllowHostNamespaces: "net"}, Flags{}, "--allow-host-namespaces"},
		{Globals{MaxCount: "0"}, Flags{}, "--max-count"},
		{Globals{MaxCount: "-2"}, Flags{}, "--max-count"},
		{Globals{MaxCount: "many"}, Flags{}, "--max-count"},
		{Globals{AllowDrivers: "exec"}, Flags{AllowRemoteDrivers: "exec,raw_exec"}, "--allow-remote-drivers"},
		{Globals{}, Flags{AllowRemoteDrivers: "docker"}, "--allow-remote-drivers"},
	} {
		if _, err := resolve(tc.g, tc.f); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v %+v: %v, want a refusal naming %s", tc.g, tc.f, err, tc.flag)
		}
	}
}
