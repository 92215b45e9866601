//go:build linux

package executor

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// TestLaunch_TasksStartWithUmask022: every task starts with umask 022, as
// under runc (Nomad sets none), whichever way it starts: a raw_exec task
// the executor forks itself, and every task the init shim execs (raw_exec
// with a user, exec as root or as nobody); so a file a prestart task makes
// 0744 is 0744, and a nobody task can run it.
func TestLaunch_TasksStartWithUmask022(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	status := func(driver, user string) wire.Launch {
		return wire.Launch{Spec: fsm.Spec{Driver: driver, Command: "/bin/cat", Args: []string{"/proc/self/status"}, User: user, Dir: "/",
			Env: map[string]string{"TETHER_TEST_MARKER": string(m), "PATH": "/usr/bin:/bin"}}}
	}
	for _, tc := range []struct {
		name string
		spec wire.Launch
		exec bool
	}{
		{"raw_exec forked by the executor", m.taskSpec(t, "caps"), false},
		{"raw_exec as nobody, through the shim", status(wire.ModeRawExec, "65534"), false},
		{"exec as root", func() wire.Launch { s := m.execSpec(t, "caps"); s.User = "root"; return s }(), true},
		{"exec as nobody", status(wire.ModeExec, "nobody"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.exec {
				needIsolation(t)
			} else if tc.spec.User != "" && os.Geteuid() != 0 {
				t.Skip("a task of another user needs root")
			}
			c := spawn(t, m, "")
			if _, err := c.Launch(ctx, tc.spec); err != nil {
				t.Fatal(err)
			}
			if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
				t.Fatalf("Wait = %+v %v", x, err)
			}
			out := readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))
			if !strings.Contains(out, "Umask:\t0022\n") {
				t.Fatalf("the task's umask is not 0022:\n%s", out)
			}
		})
	}
}

// TestExecutorFiles_PrivateByExplicitModes: with the executor's umask 022,
// what it makes for itself in the task's directory is private by its own
// mode: its records, journal, reserve, logs and socket have no group or
// other bits, the notify socket is 0700 in the 0700 secrets directory;
// the task's own directories have theirs (local 0755, tmp 1777, alloc
// 0755).
func TestExecutorFiles_PrivateByExplicitModes(t *testing.T) {
	m := newMarker(t)
	rp := &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}
	n := launchNotify(t, m, wire.ModeRawExec, 0, rp) // a journal, a notify socket, a launch record
	if got := n.say(t, "send READY=1"); got != "ok" {
		t.Fatal(got)
	}
	dirModes := map[string]fs.FileMode{}
	for _, d := range wire.TaskDirs {
		dirModes[d.Name] = d.Mode
	}
	seen := map[string]bool{}
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(n.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		seen[e.Name()] = true
		mode := fi.Mode()
		if want, ok := dirModes[e.Name()]; ok {
			if !mode.IsDir() || mode&(fs.ModePerm|fs.ModeSticky) != want {
				t.Errorf("%s: %v, want a directory %v", e.Name(), mode, want)
			}
			continue
		}
		if mode.Type() == fs.ModeSymlink {
			continue // a log's live link: a link's mode is none
		}
		if mode.Perm()&0o077 != 0 {
			t.Errorf("%s: %v: group or other may use a file of the executor's", e.Name(), mode)
		}
	}
	for _, name := range []string{statedir.IdentityFile, statedir.LaunchFile, statedir.JournalFile, statedir.ReserveFile, statedir.SocketFile, statedir.StdoutFile} {
		if !seen[name] {
			t.Errorf("the task directory lacks %s: %v", name, entries)
		}
	}
	fi, err := os.Lstat(filepath.Join(n.dir, statedir.SecretsDir, "notify"))
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the notify socket: %v %v, want a socket 0700", fi.Mode(), err)
	}
	fmt.Fprintln(n.ctl, "exit 0")
}
