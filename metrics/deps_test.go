package metrics

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_TetherLinksNoPrometheusClient: the binary every task start
// runs three times links neither the Prometheus Go client nor its
// dependencies (see doc.go for what they cost a start); the package that
// serves the agent's metrics links only the standard library.
func TestDeps_TetherLinksNoPrometheusClient(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH to list the packages with: %v", err)
	}
	for _, pkg := range []string{"github.com/tether-fsm/tether/cmd/tether", "github.com/tether-fsm/tether/metrics"} {
		out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "github.com/prometheus/") {
				t.Errorf("%s links %s", pkg, p)
			}
			if pkg == "github.com/tether-fsm/tether/metrics" && strings.Contains(p, ".") && p != pkg {
				t.Errorf("package metrics links %s, beyond the standard library", p)
			}
		}
	}
}
