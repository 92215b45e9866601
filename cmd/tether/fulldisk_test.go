package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// fillDisk writes path until the filesystem has no room left: nil once a
// write fails with ENOSPC, any other error as it is.
func fillDisk(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// newTmpfsEnv is newEnv on a tmpfs of size bytes mounted as the state
// directory (private, 0700), unmounted at the end of the test after the
// leak check. It skips when a tmpfs cannot be mounted here.
func newTmpfsEnv(t *testing.T, size int) *env {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	switch err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); {
	case errors.Is(err, unix.EPERM):
		t.Skipf("mounting a tmpfs for the state directory needs root (CAP_SYS_ADMIN): %v", err)
	case errors.Is(err, unix.ENODEV):
		t.Skipf("needs a kernel with tmpfs: %v", err)
	case err != nil:
		t.Fatalf("mount a tmpfs for the state directory: %v", err)
	}
	// Cleanups run last first: the leak check (registered after) runs
	// before the unmount.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs at %s: %v", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	e := &env{t: t, dir: dir}
	t.Cleanup(func() { testproc.CheckNoLeak(t, e.dir) })
	return e
}

// exitedWith checks, through status --json and events --json, that the
// store records task id as exited with code, not lost.
func (e *env) exitedWith(id string, code int) {
	e.t.Helper()
	s := e.status(id)
	if len(s) != 1 || s[0].State != "exited" || s[0].ExitCode == nil || *s[0].ExitCode != code {
		e.t.Fatalf("status of the task that exited %d on a full disk: %+v\nevents: %s", code, s, eventNames(e.events(id)))
	}
	evs := e.events(id)
	names := eventNames(evs)
	if strings.Contains(names, "executor-lost") || !strings.Contains(names, "task-exited") {
		e.t.Fatalf("events of the task that exited %d on a full disk: %s", code, names)
	}
	if last := evs[len(evs)-1]; last.Event != "executor-reaped" || last.Target != "exited" {
		e.t.Fatalf("the task's last event: %+v", last)
	}
}

// diskFull fails the test unless the filesystem at dir has (almost) no
// room left: a few blocks, no more than the exit record's reserve that
// the executor let go of.
func diskFull(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if free := st.Bavail * uint64(st.Bsize); free > 64<<10 {
		t.Fatalf("the tmpfs has %d bytes free: the task did not fill it", free)
	}
}

// Issue 11, item 7, at the level of the original bug: on a small tmpfs as
// the state directory, a task fills the disk (a file in its own working
// directory) and exits 7; its exit code is not lost to the full disk.
//
//   - run: `tether run` returns 7, and the store records the task exited
//     with code 7 (status --json, events --json), also after recover.
//   - away: the task ends while no tether command runs (after `tether
//     start`); the executor's exit record, written on the full disk, is all
//     a later command has: `tether wait` returns 7 and the store records
//     exited 7, not lost.
func TestRun_FullDiskKeepsTheExitCode(t *testing.T) {
	t.Run("run", func(t *testing.T) {
		e := newTmpfsEnv(t, 4<<20)
		r := e.tether(e.runArgs("run", []string{"-v", "--name", "filler"}, "fill-exit", "7")...)
		if r.code != 7 {
			t.Fatalf("run of a task that fills the disk and exits 7: %s", r)
		}
		id := taskID(t, r.stderr)
		if _, err := os.Stat(filepath.Join(e.dir, "tasks", id, "local", "fill")); err != nil {
			t.Fatalf("the task's fill file: %v", err)
		}
		diskFull(t, e.dir)
		e.exitedWith(id, 7)
		e.must("recover")
		e.exitedWith(id, 7)
	})
	t.Run("away", func(t *testing.T) {
		e := newTmpfsEnv(t, 4<<20)
		notes := newTermNotes(t) // a FIFO outside the tmpfs
		id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "filler"}, "fill-note-exit", "7", notes.path)...).stdout)
		x := e.status(id)[0].ExecutorPID
		pidfd, err := unix.PidfdOpen(x, 0)
		if err != nil {
			t.Fatalf("pidfd of the executor %d: %v", x, err)
		}
		defer unix.Close(pidfd)
		if s := notes.next(); s != "full\n" {
			t.Fatalf("the task's note: %q", s)
		}
		// The task exits 7 now; its executor records that and exits, with
		// no tether command running. Wait for the executor's end.
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 60_000)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				t.Fatalf("the executor did not exit within a minute of its task: %v", err)
			}
			break
		}
		diskFull(t, e.dir)
		if r := e.tether("wait", id); r.code != 7 {
			t.Fatalf("wait on the task that exited 7 on a full disk: %s\nevents: %s", r, eventNames(e.events(id)))
		}
		e.exitedWith(id, 7)
	})
}
