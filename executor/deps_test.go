//go:build linux

package executor_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goTool is the go command (the one `go test` ran from, in PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command in PATH to list the packages with: %v", err)
	}
	return p
}

// The packages that run in other processes than the driver's: the
// executor process, the init shim and the seccomp compiler they use (and
// the packages below each). A driver (and every embedder of package
// driver) must link none.
var processOnly = []string{
	"github.com/tether-fsm/tether/executor/server",
	"github.com/tether-fsm/tether/executor/shim",
	"github.com/tether-fsm/tether/seccomp",
	"github.com/tether-fsm/tether/executor/prepare",
}

// TestDeps_StandaloneExecutorIsLean: the standalone executor
// (cmd/tether-executor, for agents that want an executor smaller than
// their own binary) links no preparation of job files: package init of
// net/http and text/template alone cost an idle executor 3.7 MB of RSS
// (4.7 MB without, measured here). tether's own binary serves with it.
func TestDeps_StandaloneExecutorIsLean(t *testing.T) {
	cmd := exec.Command(goTool(t), "list", "-deps", "./cmd/tether-executor")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/tether-fsm/tether/executor/server") {
		t.Fatalf("go list -deps read the wrong package: %v", deps)
	}
	for _, heavy := range []string{"net/http", "text/template", "github.com/tether-fsm/tether/executor/prepare",
		"github.com/tether-fsm/tether/artifact", "github.com/tether-fsm/tether/template", "github.com/fsnotify/fsnotify"} {
		if slices.Contains(deps, heavy) {
			t.Errorf("cmd/tether-executor links %s", heavy)
		}
	}
}

// sandboxCode is what only the shim (and the executor process) may do:
// enter or make namespaces, mount, change root, join a keyring, filter
// syscalls, drop privileges for good. Words in comments and names (a
// policy field naming the operator's seccomp allow list travels through
// the driver) are not code.
var sandboxCode = regexp.MustCompile(`\b(?:unix|syscall)\.(?:PivotRoot|Unshare|Setns|Mount|Unmount|MountSetattr|Fsopen|Fsmount|OpenTree|MoveMount|KeyctlJoinSessionKeyring)\(` +
	`|\bSYS_(?:SECCOMP|PIVOT_ROOT|UNSHARE|SETNS|MOUNT|UMOUNT2|KEYCTL)\b|\bPR_SET_(?:SECCOMP|NO_NEW_PRIVS|KEEPCAPS)\b|\bCLONE_NEW(?:NS|USER|PID|NET|IPC|UTS|CGROUP)\b`)

// TestDeps_DriverLinksNoExecutorProcessCode holds the split of the executor
// by process: `go list -deps ./driver` (what an agent embedding the driver
// links) has neither the executor's server loop, the shim nor the seccomp
// compiler, and no file of tether's own in it makes a sandbox syscall
// (pivot_root, unshare, setns, mount, seccomp, the keyring join,
// no_new_privs) or names a namespace's clone flag. cmd/tether, which
// serves every mode, is the one that links them.
func TestDeps_DriverLinksNoExecutorProcessCode(t *testing.T) {
	for _, pkg := range []string{"./driver", "./executor", "./cgroup", "./fsm", "./store", "./logs"} {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			cmd := exec.Command(goTool(t), "list", "-deps", "-json", pkg)
			cmd.Dir = ".."
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("go list: %v\n%s", err, ee.Stderr)
				}
				t.Fatalf("go list: %v", err)
			}
			dec := json.NewDecoder(strings.NewReader(string(out)))
			seen := 0
			for {
				var p struct {
					ImportPath string
					Dir        string
					GoFiles    []string
				}
				if err := dec.Decode(&p); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				for _, bad := range processOnly {
					if p.ImportPath == bad || strings.HasPrefix(p.ImportPath, bad+"/") {
						t.Errorf("%s links %s, code of another process", pkg, p.ImportPath)
					}
				}
				if !strings.HasPrefix(p.ImportPath, "github.com/tether-fsm/tether") {
					continue
				}
				seen++
				for _, f := range p.GoFiles {
					b, err := os.ReadFile(filepath.Join(p.Dir, f))
					if err != nil {
						t.Fatal(err)
					}
					if m := sandboxCode.Find(b); m != nil {
						t.Errorf("%s links %s/%s, which holds %q: the shim's work, not the driver's", pkg, p.ImportPath, f, m)
					}
				}
			}
			if seen == 0 {
				t.Fatalf("go list -deps %s listed none of tether's packages", pkg)
			}
		})
	}
}

// TestDoc_ClientIsSmall holds the client's surface: `go doc -short
// ./executor` (every exported top-level name, a constructor on a line of
// its own, a const or var block one line) lists at most 30 lines. What
// the executor process and the shim need of each other is theirs
// (executor/server, executor/shim) or shared below executor/internal.
func TestDoc_ClientIsSmall(t *testing.T) {
	cmd := exec.Command(goTool(t), "doc", "-short", ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go doc: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 30 {
		t.Errorf("go doc -short ./executor lists %d lines, at most 30:\n%s", len(lines), out)
	}
	if len(lines) < 10 {
		t.Fatalf("go doc -short listed %d lines: the test reads the wrong package\n%s", len(lines), out)
	}
}
