//go:build linux

package executor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/logs"
	"github.com/tether-fsm/tether/statedir"
)

// streamFiles lists a stream's files in dir (the live one and its
// rotations) with their sizes.
func streamFiles(t *testing.T, dir, name string) map[string]os.FileInfo {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]os.FileInfo{}
	for _, e := range ents {
		if e.Name() == name || strings.HasPrefix(e.Name(), name+".") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = fi
		}
	}
	return out
}

// TestOutput_RotationBounds: a task printing 8 MB with max_files = 2 and
// max_file_size = 1 leaves at most 2 files of at most 1 MB, owned by the
// task's user, the last line last.
func TestOutput_RotationBounds(t *testing.T) {
	needIsolation(t) // nobody must reach the test binary: exec binds it
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	const total = 8 << 20
	spec := m.execSpec(t, "print", fmt.Sprint(total))
	spec.Logs = logs.Config{MaxFiles: 2, MaxFileSizeMB: 1}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	files := streamFiles(t, dir, statedir.StdoutFile)
	if len(files) == 0 || len(files) > 2 {
		t.Fatalf("stdout files %v, want 1 or 2", keys(files))
	}
	for name, fi := range files {
		if fi.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, more than max_file_size 1 MB", name, fi.Size())
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 65534 {
			t.Errorf("%s is owned by uid %d, want the task's user (65534)", name, uid)
		}
	}
	var tail bytes.Buffer
	if _, err := logs.Tail(dir, statedir.StdoutFile, 1, &tail); err != nil {
		t.Fatal(err)
	}
	last := strings.TrimSuffix(tail.String(), "\n")
	want := total / len("line 000000000 "+strings.Repeat("x", 50)+"\n")
	if !strings.HasPrefix(last, fmt.Sprintf("line %09d ", want)) && !strings.HasPrefix(last, fmt.Sprintf("line %09d ", want-1)) {
		t.Errorf("the live file ends with %q; want the task's last line (about %d)", last, want)
	}
}

func keys(m map[string]os.FileInfo) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestOutput_FullDisk: a task that fills the file system of its task
// directory keeps running to its end, and so does the executor, which
// still records the exit status (from room it reserved) and says in its log
// how much output it dropped.
func TestOutput_FullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("needs a tmpfs mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	c := spawn(t, m, dir)
	if _, err := c.Launch(ctx, m.taskSpec(t, "print", fmt.Sprint(4<<20))); err != nil {
		t.Fatal(err)
	}
	x, err := c.Wait(ctx)
	if err != nil || x.Code != 0 || x.Signal != 0 {
		t.Fatalf("Wait = %+v %v, want exit code 0", x, err)
	}
	if err := c.WaitDead(ctx); err != nil {
		t.Fatal(err)
	}
	rec, ok, err := wire.ReadExitRecord(dir)
	if err != nil || !ok || rec.Exit.Code != 0 {
		t.Fatalf("exit record on the full disk: %+v %v %v", rec, ok, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		t.Logf("free on the task's tmpfs after the run: %d bytes", st.Bavail*uint64(st.Bsize))
	}
	if log := readFileString(t, filepath.Join(dir, statedir.LogFile)); !strings.Contains(log, "dropped") {
		t.Logf("the executor log could not say it (the disk is full):\n%s", log)
	}
}

// TestOutput_Disabled: logs { disabled = true } gives the task /dev/null.
func TestOutput_Disabled(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	spec := m.taskSpec(t, "print", "100000")
	spec.Logs.Disabled = true
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	if files := streamFiles(t, dir, statedir.StdoutFile); len(files) != 0 {
		t.Fatalf("stdout files %v with logs disabled", keys(files))
	}
}
