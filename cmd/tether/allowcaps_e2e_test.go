package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/internal/testproc"
)

// TestAllowCaps_NarrowsAsWellAsWidens: --allow-caps (and TETHER_ALLOW_CAPS)
// is the allow list, not an addition to the default one: a capability of
// the default list that the given list leaves out is refused before
// anything is spawned (exit 125, naming it), one the list adds is
// accepted, and the flag wins over the variable. The checks that accept
// stop short of the capability check only (as root the task runs; as
// another user exec is refused for a reason that is not the capability).
func TestAllowCaps_NarrowsAsWellAsWidens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flag    string // --allow-caps, if not ""
		env     string // TETHER_ALLOW_CAPS, if not ""
		add     string
		refused bool
	}{
		{"the default list allows kill", "", "", "kill", false},
		{"the default list refuses net_raw", "", "", "net_raw", true},
		{"a list without kill refuses it", "chown", "", "kill", true},
		{"the variable narrows too", "", "chown", "kill", true},
		{"a list without chown refuses it", "net_raw", "", "chown", true},
		{"a list with net_raw allows it", "net_raw", "", "net_raw", false},
		{"the flag wins over the variable", "chown", "chown,kill", "kill", true},
		{"the variable applies without the flag", "", "chown,kill", "kill", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testproc.Parallel(t)
			e := newDaemonlessEnv(t, "the allow lists given to each command: through an agent they are the agent's (TestAgent_CLIPolicyAndInjectionRefusedThroughTheAgent)")
			file := writeFile(t, t.TempDir(), "caps.hcl", fmt.Sprintf(`task "caps" {
  driver = "exec"
  config {
    command = "/bin/true"
    cap_add = [%q]
  }
}
`, tc.add))
			var args, env []string
			if tc.flag != "" {
				args = append(args, "--allow-caps", tc.flag)
			}
			if tc.env != "" {
				env = append(env, "TETHER_ALLOW_CAPS="+tc.env)
			}
			r := e.tetherEnv(env, append(args, "run", "-v", file)...) // -v: the lifecycle line names the task
			notAllowed := strings.Contains(r.stderr, "capability not allowed")
			switch {
			case tc.refused && (r.code != exitStartFail || !notAllowed || !strings.Contains(r.stderr, tc.add)):
				t.Fatalf("cap_add %s with allow list %q (env %q): want exit %d refusing it by name:\n%s", tc.add, tc.flag, tc.env, exitStartFail, r)
			case tc.refused:
				evs := e.events(taskID(t, r.stderr))
				if strings.Contains(eventNames(evs), "spawn-intent") {
					t.Errorf("the refusal came after a spawn: %s", eventNames(evs))
				}
			case notAllowed:
				t.Fatalf("cap_add %s with allow list %q (env %q) was refused:\n%s", tc.add, tc.flag, tc.env, r)
			}
		})
	}
}
