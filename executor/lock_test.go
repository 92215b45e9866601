package executor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// gc's orphan removal beside a start: the lock decides, and nothing of a
// start is removed under it.
func TestRemoveOrphanDir_KeepsWhatAStartIsUsing(t *testing.T) {
	dir := t.TempDir()
	r := &Real{StateDir: dir}
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o700); err != nil {
		t.Fatal(err)
	}
	unknown := func() (bool, error) { return true, nil }

	// A start holds the lock: kept.
	l, _, err := tryLockTask(r.dir("held"))
	if err != nil || l == nil {
		t.Fatal(err)
	}
	if removed, why, err := r.RemoveOrphanDir("held", unknown); removed || err != nil {
		t.Fatalf("a locked directory was removed (%v, %v)", why, err)
	}
	l.release()

	// The start recorded the task before gc got the lock: kept.
	known := func() (bool, error) { return false, nil }
	if removed, _, err := r.RemoveOrphanDir("held", known); removed || err != nil {
		t.Fatalf("the directory of a task the store knows under the lock was removed: %v", err)
	}
	// Unlocked and unknown: removed.
	if removed, why, err := r.RemoveOrphanDir("held", unknown); !removed || err != nil {
		t.Fatalf("an orphan was kept (%v, %v)", why, err)
	}
	if _, err := os.Stat(r.dir("held")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan still there: %v", err)
	}

	// No lock file: a start may be between its mkdir and its lock file.
	young := r.dir("young")
	if err := os.Mkdir(young, 0o700); err != nil {
		t.Fatal(err)
	}
	if removed, _, _ := r.RemoveOrphanDir("young", unknown); removed {
		t.Fatal("a fresh directory with no lock file was removed")
	}
	old := time.Now().Add(-2 * orphanMinAge)
	if err := os.Chtimes(young, old, old); err != nil {
		t.Fatal(err)
	}
	if removed, why, err := r.RemoveOrphanDir("young", unknown); !removed || err != nil {
		t.Fatalf("an old directory with no lock file was kept (%v, %v)", why, err)
	}
	if _, err := os.Stat(filepath.Join(young, statedir.LockFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("gc created a lock file: %v", err)
	}
}

// A start that opened its lock file just before gc removed the directory
// finds, once it holds the lock, that the file is no longer at its path,
// and starts over in a new directory.
func TestTaskLock_RemovedWhileLockingStartsOver(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "task")
	l, _, err := tryLockTask(dir)
	if err != nil || l == nil {
		t.Fatal(err)
	}
	f := l.f                                  // the start's open file...
	if err := os.RemoveAll(dir); err != nil { // ...whose directory gc removes
		t.Fatal(err)
	}
	if err := stillAt(f, filepath.Join(dir, statedir.LockFile)); !errors.Is(err, errLockMoved) {
		t.Fatalf("stillAt after the removal: %v, want errLockMoved", err)
	}
	l.release()
	again, _, err := tryLockTask(dir)
	if err != nil || again == nil {
		t.Fatalf("lock after the removal: %v", err)
	}
	defer again.release()
	if err := stillAt(again.f, filepath.Join(dir, statedir.LockFile)); err != nil {
		t.Fatalf("the new lock is not at its path: %v", err)
	}
}

// TestTaskLockHolder_ParseAndLive: the holder a lock file names is "PID
// START" (or "PID" alone, as an older tether wrote it); anything else
// names nobody. A holder is live only while its pid is alive with the
// start time named: the same pid started earlier or later (reused since)
// is not the holder, and neither is a pid that is gone.
func TestTaskLockHolder_ParseAndLive(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want taskLockHolder
	}{
		{"123 456\n", taskLockHolder{pid: 123, start: 456}},
		{"123\n", taskLockHolder{pid: 123}},
		{"", taskLockHolder{}},
		{"\n", taskLockHolder{}},
		{"abc 1\n", taskLockHolder{}},
		{"123 abc\n", taskLockHolder{}},
		{"123 0\n", taskLockHolder{}},
		{"0 5\n", taskLockHolder{}},
		{"-4 5\n", taskLockHolder{}},
		{"1 2 3\n", taskLockHolder{}},
	} {
		if got := parseHolder([]byte(tc.in)); got != tc.want {
			t.Errorf("parseHolder(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	self := os.Getpid()
	start, err := proc.StartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command(testBinary(t), "executor-crash")
	if err := gone.Run(); err == nil || gone.ProcessState == nil {
		t.Fatalf("the gone process: %v", err)
	}
	for _, tc := range []struct {
		name string
		h    taskLockHolder
		live bool
	}{
		{"this process, its start time", taskLockHolder{pid: self, start: start}, true},
		{"this process, no start time named", taskLockHolder{pid: self}, true},
		{"this pid started later (reused)", taskLockHolder{pid: self, start: start + 1}, false},
		{"this pid started earlier", taskLockHolder{pid: self, start: start - 1}, false},
		{"a pid that is gone", taskLockHolder{pid: gone.ProcessState.Pid()}, false},
		{"nobody", taskLockHolder{}, false},
	} {
		if got := tc.h.live(); got != tc.live {
			t.Errorf("%s: live() = %v, want %v", tc.name, got, tc.live)
		}
	}
	if got := parseHolder(holderLine()); got != (taskLockHolder{pid: self, start: start}) {
		t.Errorf("this process names itself %q, parsed %+v", holderLine(), got)
	}
}

// holdLockFile locks the task's lock file through a descriptor of its
// own (as a child carrying a copy of its holder's descriptor does) with
// content as the holder line, and returns that file (closing it lets go).
func holdLockFile(t *testing.T, dir, content string) *os.File {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, statedir.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTaskLock_HeldByNoLiveProcessIsWaitedOutAndTaken: a task's lock held
// through a descriptor whose holder is no live process (the holder the
// file names is gone, or its pid was reused, or it names nobody: a child
// forked while a driver held it carries the descriptor until its exec) is
// not a live driver's: LockTask waits for it and takes it once it is let
// go of, never answering "held by" that process. A live holder named
// (this process, with its start time) is answered at once.
func TestTaskLock_HeldByNoLiveProcessIsWaitedOutAndTaken(t *testing.T) {
	self := os.Getpid()
	start, err := proc.StartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command(testBinary(t), "executor-crash")
	_ = gone.Run()
	for _, tc := range []struct {
		name, line string
	}{
		{"holder gone", strconv.Itoa(gone.ProcessState.Pid()) + " 12345\n"},
		{"holder's pid reused", strconv.Itoa(self) + " " + strconv.FormatUint(start+1, 10) + "\n"},
		{"no holder named", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir := t.TempDir()
			r := &Real{StateDir: stateDir, LockTimeout: time.Minute}
			carrier := holdLockFile(t, r.dir("web"), tc.line)
			var st syscall.Stat_t
			if err := syscall.Fstat(int(carrier.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			type got struct {
				release func()
				holder  int
				err     error
			}
			c := make(chan got, 1)
			go func() {
				rel, holder, err := r.LockTask("web")
				c <- got{rel, holder, err}
			}()
			waitForWaiter(t, self, st.Ino) // LockTask waits; it has not said "busy"
			carrier.Close()                // the carrier execs: the descriptor is gone
			g := <-c
			if g.err != nil || g.release == nil || g.holder != 0 {
				t.Fatalf("LockTask once the carrier let go: release %v holder %d err %v; want the lock", g.release != nil, g.holder, g.err)
			}
			defer g.release()
			if h := readHolderAt(r.dir("web")); h.pid != self || h.start != start {
				t.Errorf("the lock taken names %+v, want this process (%d, %d)", h, self, start)
			}
		})
	}
	t.Run("past the lock timeout", func(t *testing.T) {
		stateDir := t.TempDir()
		r := &Real{StateDir: stateDir, LockTimeout: 20 * time.Millisecond}
		holdLockFile(t, r.dir("web"), strconv.Itoa(gone.ProcessState.Pid())+" 12345\n")
		rel, holder, err := r.LockTask("web")
		if rel != nil {
			rel()
			t.Fatal("LockTask took a lock another descriptor holds")
		}
		if !errors.Is(err, errLockHeld) || holder != 0 {
			t.Fatalf("LockTask of a lock no live process holds, past its timeout: holder %d, %v; want errLockHeld and no holder", holder, err)
		}
	})
	t.Run("live holder", func(t *testing.T) {
		stateDir := t.TempDir()
		r := &Real{StateDir: stateDir, LockTimeout: time.Minute}
		holdLockFile(t, r.dir("web"), strconv.Itoa(self)+" "+strconv.FormatUint(start, 10)+"\n")
		began := time.Now()
		rel, holder, err := r.LockTask("web")
		if rel != nil {
			rel()
			t.Fatal("LockTask took a lock a live process holds")
		}
		if err != nil || holder != self {
			t.Fatalf("LockTask beside a live holder: holder %d, %v; want %d at once", holder, err, self)
		}
		if el := time.Since(began); el > 30*time.Second {
			t.Errorf("LockTask beside a live holder took %s: it waited", el)
		}
	})
}
