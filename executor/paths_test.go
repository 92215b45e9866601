//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// A privileged process never follows a symbolic link a task planted: every
// chdir or open of a path the task controls (its working directory, its
// task directories, its log files) by root resolves beneath the task
// directory without following links (openat2), or happens after the
// switch to the task's user. Each test plants a link at one such path,
// pointing at a root-only directory or file, and checks that root did
// nothing there.

// rootOnly makes a root-only (0700) directory holding a 0600 file, and
// returns it with a check that neither changed.
func rootOnly(t *testing.T) (dir string, unchanged func()) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "root-only")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		t.Helper()
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("the root-only directory changed: %v %v", fi.Mode(), err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("the root-only directory holds %d entries, want its one file", len(ents))
		}
		if b, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil || string(b) != "root's" {
			t.Errorf("the root-only file changed: %q %v", b, err)
		}
	}
}

// TestPrivilegedPaths_RawExecWorkDirLink: a raw_exec task with a user
// whose working directory (in its local/) is a link to a root-only
// directory is refused, naming the link, at launch and at a restart's
// launch alike (the same path), and so is a command Exec starts after the
// task planted the link.
func TestPrivilegedPaths_RawExecWorkDirLink(t *testing.T) {
	needCgroups(t)
	if os.Geteuid() != 0 {
		t.Skip("running a task as nobody needs root")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	target, unchanged := rootOnly(t)
	defer unchanged()

	dir := filepath.Join(t.TempDir(), "task")
	local := filepath.Join(dir, statedir.LocalDir)
	if err := os.MkdirAll(local, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(local, "work")); err != nil {
		t.Fatal(err)
	}
	c := spawn(t, m, dir)
	spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", User: "nobody", Dir: "work", Args: []string{string(m)}}}
	_, err := c.Launch(ctx, spec)
	if !errors.Is(err, wire.ErrWorkDir) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Launch with a linked work_dir: %v, want ErrWorkDir naming the link", err)
	}

	// A task that plants the link once it runs (a shell: nobody cannot
	// reach the test binary): Exec's join refuses it.
	dir = filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(dir, statedir.LocalDir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, f := execFifo(t, dir, "ready")
	c = spawn(t, m, dir)
	spec = wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/sh", User: "nobody", Dir: "work",
		Args: []string{"-c", "mv ../work ../work.old && ln -s " + target + " ../work && echo swapped > ../ready && exec sleep 1000", string(m)}}}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if line := readLineOr(f); line != "swapped" {
		t.Fatalf("the task did not swap its directory (%q): %s", line, readFileString(t, filepath.Join(dir, statedir.StderrFile)))
	}
	var out lockedBuffer
	if p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"ls"}, Stdout: &out}); err == nil {
		x, _ := p.Wait(ctx)
		p.Close()
		t.Fatalf("exec into a linked work_dir ran (%+v): %q", x, out.String())
	} else if !errors.Is(err, wire.ErrWorkDir) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("exec into a linked work_dir: %v, want ErrWorkDir naming the link", err)
	}
}

// TestPrivilegedPaths_ExecWorkDirLink: an exec task (nobody) whose working
// directory is a link to a root-only directory bound into its root is
// refused (the shim changes to it as nobody, after the switch); and when
// the task plants the link once it runs, a command Exec starts is refused
// the same way.
func TestPrivilegedPaths_ExecWorkDirLink(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	ctx := testCtx(t)
	target, unchanged := rootOnly(t)
	defer unchanged()

	dir := filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(dir, statedir.LocalDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/rootonly", filepath.Join(dir, statedir.LocalDir, "work")); err != nil {
		t.Fatal(err)
	}
	c := spawn(t, m, dir)
	spec := m.execSpec(t, "sleep")
	spec.Dir = "work"
	spec.Chroot = append(spec.Chroot, target+":/rootonly")
	if _, err := c.Launch(ctx, spec); !errors.Is(err, wire.ErrWorkDir) {
		t.Fatalf("Launch with a linked work_dir: %v, want ErrWorkDir", err)
	}

	dir = filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(dir, statedir.LocalDir, "work"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, statedir.LocalDir, "work"), 0o777); err != nil {
		t.Fatal(err)
	}
	_, ready, f := execFifo(t, dir, "ready")
	c = spawn(t, m, dir)
	sw, _ := json.Marshal(swapTargets{Dir: "/local/work", Target: "/rootonly", Ready: ready})
	spec = m.execSpec(t, "swapdir", string(sw))
	spec.Dir = "work"
	spec.Chroot = append(spec.Chroot, target+":/rootonly")
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	readLine(t, f)
	var out lockedBuffer
	if p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"ls"}, Stdout: &out}); err == nil {
		x, _ := p.Wait(ctx)
		p.Close()
		t.Fatalf("exec into a linked work_dir ran (%+v): %q", x, out.String())
	} else if !errors.Is(err, wire.ErrWorkDir) {
		t.Fatalf("exec into a linked work_dir: %v, want ErrWorkDir", err)
	}
}

// TestPrivilegedPaths_TaskDirLinks: a link where one of the task's own
// directories (local, secrets, tmp, alloc) or a log file goes is refused
// at launch, and its target is not chowned, chmodded or written.
func TestPrivilegedPaths_TaskDirLinks(t *testing.T) {
	needCgroups(t)
	if os.Geteuid() != 0 {
		t.Skip("running a task as nobody needs root")
	}
	m := newMarker(t)
	for _, name := range []string{statedir.LocalDir, statedir.SecretsDir, statedir.TmpDir, statedir.AllocDir, statedir.StdoutFile, statedir.StderrFile} {
		t.Run(name, func(t *testing.T) {
			target, unchanged := rootOnly(t)
			defer unchanged()
			if strings.HasSuffix(name, ".log") {
				target = filepath.Join(target, "secret")
			}
			dir := filepath.Join(t.TempDir(), "task")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			c := spawn(t, m, dir)
			spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", User: "nobody", Args: []string{string(m)}}}
			_, err := c.Launch(testCtx(t), spec)
			if err == nil {
				t.Fatalf("Launch with %s a link: no error", name)
			}
			if !strings.Contains(err.Error(), "symbolic link") && !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Launch with %s a link: %v, want it named", name, err)
			}
		})
	}
}

// swapTargets: the swapping task renames Dir away, links Target at its
// place, writes a line on Ready and blocks.
type swapTargets struct{ Dir, Target, Ready string }

func swapDir(arg string) int {
	var sw swapTargets
	if err := json.Unmarshal([]byte(arg), &sw); err != nil {
		return 2
	}
	if err := os.Rename(sw.Dir, sw.Dir+".old"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := os.Symlink(sw.Target, sw.Dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	f, err := os.OpenFile(sw.Ready, os.O_WRONLY, 0)
	if err != nil {
		return 5
	}
	fmt.Fprintln(f, "swapped")
	f.Close()
	block()
	return 0
}

// readLineOr reads one line from f within a bounded time, "" when none
// came.
func readLineOr(f *os.File) string {
	_ = f.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := f.Read(one); err != nil || one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

// TestPrivilegedPaths_RestartAfterALinkWasPlanted: a raw_exec task with a
// user plants a link to a root-only directory where its working directory
// was, then fails; the executor's restart (the same launch path, as root)
// refuses the link (launch-failed in the journal) and changes nothing
// there.
func TestPrivilegedPaths_RestartAfterALinkWasPlanted(t *testing.T) {
	needCgroups(t)
	if os.Geteuid() != 0 {
		t.Skip("running a task as nobody needs root")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	target, unchanged := rootOnly(t)
	defer unchanged()
	dir := filepath.Join(t.TempDir(), "task")
	if err := os.MkdirAll(filepath.Join(dir, statedir.LocalDir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := spawn(t, m, dir)
	spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/sh", User: "nobody", Dir: "work",
		Args:    []string{"-c", "mv ../work ../work.old && ln -s " + target + " ../work && exit 3", string(m)},
		Restart: &fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Mode: fsm.RestartFail}}}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	entries := watchUntil(t, c, 2)
	if entries[1].Type != fsm.EventLaunchFailed || !strings.Contains(entries[1].Reason, "symbolic link") {
		t.Fatalf("the restart's relaunch: %s %q, want launch-failed naming the link", entries[1].Type, entries[1].Reason)
	}
}
