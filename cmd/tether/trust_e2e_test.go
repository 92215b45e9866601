package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/internal/testproc"
)

// trustHelperArg makes the test binary print a namespace of its own:
// `trustHelperArg NS MARKER` prints the link /proc/self/ns/NS.
const trustHelperArg = "tether-trust-helper"

func init() {
	testproc.Dispatch(map[string]func([]string) int{trustHelperArg: func(args []string) int {
		if len(args) < 1 {
			return 2
		}
		l, err := os.Readlink("/proc/self/ns/" + args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(l)
		return 0
	}})
}

// TestRun_HostNamespacesByTheOperatorsWord: an exec task with pid_mode or
// ipc_mode = "host" is refused, naming the attribute and
// --allow-host-namespaces, before anything is recorded; the operator's
// --allow-host-namespaces NS lets it run, in the host's namespace; one
// namespace allowed does not allow the other.
func TestRun_HostNamespacesByTheOperatorsWord(t *testing.T) {
	needExec(t)
	chroot := execChroot(t)
	for _, ns := range []struct{ attr, ns, other string }{{"pid_mode", "pid", "ipc"}, {"ipc_mode", "ipc", "pid"}} {
		t.Run(ns.ns, func(t *testing.T) {
			e := newEnv(t)
			host, err := os.Readlink("/proc/self/ns/" + ns.ns)
			if err != nil {
				t.Fatal(err)
			}
			quoted := fmt.Sprintf("%q, %q, %q", trustHelperArg, ns.ns, e.dir)
			file := writeFile(t, t.TempDir(), "peek.hcl", fmt.Sprintf(`task "peek" {
  driver = "exec"
  config {
    command = %q
    args    = [%s]
    %s = "host"
  }
}
`, inTestbin(t), quoted, ns.attr))
			for _, allow := range [][]string{nil, {"--allow-host-namespaces", ns.other}} {
				flags := append([]string{"--chroot-env", chroot}, allow...)
				e.policy(flags...) // through an agent, its lists are the ones that apply
				r := e.tether(append(flags, "run", file)...)
				if r.code == 0 || !strings.Contains(r.stderr, ns.attr) || !strings.Contains(r.stderr, "--allow-host-namespaces "+ns.ns) {
					t.Errorf("allowing %v: want a refusal naming %s and --allow-host-namespaces %s: %s", allow, ns.attr, ns.ns, r)
				}
				if ents, _ := os.ReadDir(filepath.Join(e.dir, "tasks")); len(ents) != 0 {
					t.Errorf("allowing %v: a refused file left task directories: %v", allow, ents)
				}
			}
			flags := []string{"--chroot-env", chroot, "--allow-host-namespaces", ns.ns}
			e.policy(flags...)
			r := e.must(append(flags, "run", file)...)
			if got := strings.TrimSpace(r.stdout); got != host {
				t.Errorf("with --allow-host-namespaces %s the task's namespace is %q, want the host's %q", ns.ns, got, host)
			}
		})
	}
}

// TestAgent_BombInConfigDirRefusedAgentKeepsServing: the compute bomb of
// issue 32 in the agent's --config-dir is refused naming the parser's
// limit; the agent serves and runs the file beside it, and does again
// when started once more with the bomb still there.
func TestAgent_BombInConfigDirRefusedAgentKeepsServing(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	writeFile(t, dir, "bomb.hcl", `task "bomb" {
  driver = "raw_exec"
  config {
    command = "/bin/echo"
    args    = [format("%d", length(setproduct(range(1024), range(1024), range(1024))))]
  }
}
`)
	e.serviceFile(dir, "svc", 0, "")
	for i := range 2 {
		a := e.startAgent(nil, true, "--config-dir", dir)
		c := e.client()
		s := await(t, c, "svc running, bomb refused", func(s agent.Status) bool {
			sv, ok := s.Entry("svc")
			b, refused := s.Entry("bomb")
			return ok && running(sv) && refused && b.Standing == agent.StandingRefused
		})
		b, _ := s.Entry("bomb")
		for _, want := range []string{"bomb.hcl:5:", "Parse limit exceeded", "setproduct"} {
			if !strings.Contains(b.Reason, want) {
				t.Errorf("start %d: the bomb refused for %q, want it naming %q", i, b.Reason, want)
			}
		}
		a.term()
	}
}
