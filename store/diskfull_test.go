package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// TestAppend_DiskFull fills a real, small filesystem (a 2 MiB tmpfs
// mounted for the test; the tests run as root, as CI does) until an append
// fails. The error must say the write failed and name the file, and every
// append acknowledged before it must still be there after reopening.
func TestAppend_DiskFull(t *testing.T) {
	testproc.Parallel(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and needs root (CI runs as root)")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=2m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	path := filepath.Join(mnt, "tether.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := strings.Repeat("x", 4096)
	acked := map[string]uint64{}
	var full error
	for i := 0; i < 10_000 && full == nil; i++ {
		id := fmt.Sprintf("t%05d", i)
		spec := &fsm.Spec{Driver: "raw_exec", Command: "/bin/true", Args: []string{big}}
		v, err := s.Append(ctx, id, 0, fsm.Event{Type: fsm.EventCreated, Spec: spec, Time: 1})
		if err != nil {
			full = err
			break
		}
		acked[id] = v
	}
	if full == nil {
		t.Fatal("a 2 MiB filesystem never filled")
	}
	if !errors.Is(full, ErrWrite) && !errors.Is(full, unix.ENOSPC) {
		t.Errorf("disk full gave %v; want ErrWrite or ENOSPC", full)
	}
	if !strings.Contains(full.Error(), path) {
		t.Errorf("disk-full error %q does not name the file %s", full, path)
	}
	t.Logf("filled after %d tasks: %v", len(acked), full)
	if err := s.Close(); err != nil && !errors.Is(err, unix.ENOSPC) {
		t.Logf("close on a full disk: %v", err)
	}
	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("reopen after disk full: %v", err)
	}
	defer r.Close()
	for id, v := range acked {
		task, err := r.LoadTask(ctx, id)
		if err != nil || task.Version != v {
			t.Fatalf("acknowledged task %s lost after disk full: %v %v", id, task.Version, err)
		}
	}
	rep, err := r.Check(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("check after disk full: %v %v", rep, err)
	}
}
