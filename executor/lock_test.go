package executor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

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
