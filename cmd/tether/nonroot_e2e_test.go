package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/internal/testproc"
)

// asNobody runs tether as uid/gid 65534 on a state directory it owns.
func asNobody(t *testing.T) func(args ...string) result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run tether as another user (uid 65534)")
	}
	base, err := os.MkdirTemp("", "tether-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "tether")
	b, err := os.ReadFile(tetherBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, state) })
	return func(args ...string) result {
		cmd := exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
		cmd.Dir = base
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + base}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && exit.Exited():
			r.code = exit.ExitCode()
		default:
			t.Fatalf("tether %s as nobody: %v\n%s", strings.Join(args, " "), err, r)
		}
		return r
	}
}

// TestNonRoot_RawExecWarnsExecIsRefused: where no cgroup can be made (not
// root, no delegation) a raw_exec task runs with one clear warning, and an
// exec task is refused with an error saying why; nothing is spawned for it.
func TestNonRoot_RawExecWarnsExecIsRefused(t *testing.T) {
	tether := asNobody(t)
	r := tether("run", "-v", "--", "/bin/echo", "hello from nobody")
	if r.code != 0 || !strings.Contains(r.stdout, "hello from nobody") {
		t.Fatalf("raw_exec as nobody: %s", r)
	}
	if n := strings.Count(r.stderr, "warning: no cgroup for this task, so it runs uncontained"); n != 1 {
		t.Errorf("raw_exec without cgroups: want the warning once, got %d:\n%s", n, r)
	}
	if !strings.Contains(r.stderr, "delegate") {
		t.Errorf("the warning does not say what to do:\n%s", r)
	}
	ev := tether("events", taskID(t, r.stderr))
	if !strings.Contains(ev.stdout, "no cgroup for this task") {
		t.Errorf("events do not keep the warning:\n%s", ev)
	}
	x := tether("run", "-v", "--driver", "exec", "--", "/bin/echo", "never")
	if x.code != exitStartFail || strings.Contains(x.stdout, "never") {
		t.Fatalf("exec as nobody: want exit %d and nothing run\n%s", exitStartFail, x)
	}
	if !strings.Contains(x.stderr, "exec needs root") || !strings.Contains(x.stderr, "raw_exec") {
		t.Errorf("exec as nobody: the error does not say why and what to do:\n%s", x)
	}
	st := tether("events", taskID(t, x.stderr))
	if strings.Contains(st.stdout, "spawn-intent") {
		t.Errorf("an exec task refused for the host was spawned:\n%s", st)
	}
}
