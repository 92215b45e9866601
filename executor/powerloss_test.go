//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/internal/crashfs"
	"github.com/tether-fsm/tether/statedir"
)

// Power loss and the side files. The identity file (executor.json) and the
// exit status file (exit.json) are written by writeFileAtomic: a temporary
// file, fsync, rename over the name, fsync of the directory. On a crashfs
// mount every state the disk may hold after a power loss is checked: each
// file is absent or one whole version that was written (never empty, never
// torn), and a version whose write had returned before the crash is there
// (or a later one). A SIGKILL keeps the page cache, so only this finds an
// in-place write or a missing fsync.

// sideFile is what was written to one side file: each version's bytes, the
// moment its write was acknowledged, and the moments from which the file
// may be removed again (a new executor removes the last exit file).
type sideFile struct {
	name     string
	versions [][]byte
	acks     []crashfs.Mark
	removals []crashfs.Mark // removals[i]: the file may be gone again after version i
}

func (f *sideFile) wrote(b []byte, ack crashfs.Mark) {
	f.versions = append(f.versions, b)
	f.acks = append(f.acks, ack)
	f.removals = append(f.removals, crashfs.Mark{})
}

// mayRemove notes that from m on the file may be removed, and its last
// version need no longer be there.
func (f *sideFile) mayRemove(m crashfs.Mark) { f.removals[len(f.removals)-1] = m }

// check returns the problems of the file in st (dir is the task directory,
// relative to the mount).
func (f *sideFile) check(st *crashfs.CrashState, dir string) []string {
	b, err := st.ReadFile(dir + "/" + f.name)
	got := -1
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return []string{err.Error()}
	default:
		got = slices.IndexFunc(f.versions, func(v []byte) bool { return string(v) == string(b) })
		if got < 0 {
			return []string{fmt.Sprintf("%s is %q (%d bytes): not a whole version that was written", f.name, b, len(b))}
		}
	}
	for i := len(f.acks) - 1; i >= 0; i-- {
		if !st.Before(f.acks[i]) {
			continue
		}
		if st.Before(f.removals[i]) && got == -1 {
			return nil // removed on purpose
		}
		if got < i {
			state := "absent"
			if got >= 0 {
				state = fmt.Sprintf("version %d", got+1)
			}
			return []string{fmt.Sprintf("%s is %s, but version %d was written (the write returned at %s) before the crash", f.name, state, i+1, f.acks[i])}
		}
		return nil
	}
	return nil
}

// plTaskDir makes a task directory on the mount and makes its name durable
// (the driver's job: Spawn's own mkdir does not fsync the parent).
func plTaskDir(t *testing.T, fsys *crashfs.FS) string {
	t.Helper()
	dir := fsys.Path("task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(fsys.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func plCheck(t *testing.T, fsys *crashfs.FS, since crashfs.Mark, files ...*sideFile) int {
	t.Helper()
	sts := fsys.CrashStates(crashfs.StateOptions{Since: since, Seed: 15})
	failed := 0
	for _, st := range sts {
		var problems []string
		for _, f := range files {
			problems = append(problems, f.check(st, "task")...)
		}
		for _, p := range problems {
			t.Errorf("crash state %s: %s", st, p)
		}
		if len(problems) > 0 {
			if failed++; failed == 5 {
				t.Errorf("... stopping after %d failing crash states of %d", failed, len(sts))
				break
			}
		}
	}
	return len(sts)
}

// writeFileAtomic itself, version after version over one name.
func TestPowerLoss_WriteFileAtomic(t *testing.T) {
	fsys := crashfs.Mount(t, "", crashfs.Options{})
	dir := plTaskDir(t, fsys)
	since := fsys.Mark("task dir durable")
	id := &sideFile{name: statedir.IdentityFile}
	for i := range 5 {
		v := map[string]any{"pid": 1000 + i, "nonce": strings.Repeat(fmt.Sprint(i), 10*i+1)}
		if err := wire.WriteFileAtomic(dir, statedir.IdentityFile, v); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, statedir.IdentityFile))
		if err != nil {
			t.Fatal(err)
		}
		id.wrote(b, fsys.Mark(fmt.Sprintf("version %d written", i+1)))
	}
	n := plCheck(t, fsys, since, id)
	t.Logf("%d crash states over %d boundaries", n, len(fsys.Boundaries()))
}

// A real executor (the test binary in executor mode) writes its identity
// file and, when its task exits, the exit file, into a task directory on
// the mount; then a second executor of the same directory replaces the
// identity and, after removing the first exit file, writes its own.
func TestPowerLoss_ExecutorSideFiles(t *testing.T) {
	m := newMarker(t)
	fsys := crashfs.Mount(t, "", crashfs.Options{})
	dir := plTaskDir(t, fsys)
	since := fsys.Mark("task dir durable")
	id := &sideFile{name: statedir.IdentityFile}
	exit := &sideFile{name: statedir.ExitStatusFile}
	for round := range 2 {
		if round > 0 {
			// The new executor removes the last exit file before it
			// writes its identity.
			exit.mayRemove(fsys.Mark("second executor starting"))
		}
		ctx := testCtx(t)
		c, err := Spawn(ctx, SpawnConfig{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 12)})
		if err != nil {
			t.Fatalf("Spawn on the mount: %v", err)
		}
		b, err := os.ReadFile(filepath.Join(dir, statedir.IdentityFile))
		if err != nil {
			t.Fatal(err)
		}
		id.wrote(b, fsys.Mark(fmt.Sprintf("executor %d answered", round+1)))
		if _, err := c.Launch(ctx, m.taskSpec(t, "exit", fmt.Sprint(round+3))); err != nil {
			t.Fatalf("Launch: %v", err)
		}
		es, err := c.Wait(ctx)
		if err != nil || es.Code != round+3 {
			t.Fatalf("Wait: %+v, %v; want exit %d", es, err, round+3)
		}
		// The executor writes the exit file before it exits.
		if err := c.WaitDead(ctx); err != nil {
			t.Fatalf("WaitDead: %v", err)
		}
		b, err = os.ReadFile(filepath.Join(dir, statedir.ExitStatusFile))
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, statedir.LogFile))
			t.Fatalf("after the executor exited: %v; its log:\n%s", err, log)
		}
		exit.wrote(b, fsys.Mark(fmt.Sprintf("executor %d exited", round+1)))
		c.Close()
	}
	n := plCheck(t, fsys, since, id, exit)
	t.Logf("%d crash states over %d boundaries", n, len(fsys.Boundaries()))
}
