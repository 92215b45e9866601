package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// holdLock takes the agent lock of state on a description of its own (as
// an agent's child between its fork and its exec holds a copy of the
// agent's), with pid recorded in the lock file.
func holdLock(t *testing.T, state string, pid int) *os.File {
	t.Helper()
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// A killed agent's lock, held on by a copy of its descriptor (a child
// between its fork and its exec), is waited for: the next agent takes it
// once the copy goes, and records its own pid.
func TestLockAgent_DeadHoldersLockIsWaitedFor(t *testing.T) {
	state := stateDir(t)
	held := holdLock(t, state, deadPID(t))
	pauses := 0
	old := deadHolderPause
	deadHolderPause = func() {
		pauses++
		held.Close() // the child's exec closes its copy
	}
	t.Cleanup(func() { deadHolderPause = old })
	f, err := lockAgent(state)
	if err != nil {
		t.Fatalf("the lock of a dead agent: %v; want it taken once let go of", err)
	}
	defer f.Close()
	if pauses != 1 {
		t.Fatalf("%d pauses; want the one that let the lock go", pauses)
	}
	if got := readPID(filepath.Join(state, LockFile)); got != os.Getpid() {
		t.Fatalf("the lock file names %d; want this agent, %d", got, os.Getpid())
	}
}

// A live agent's lock is refused at once, naming it: nothing is waited for.
func TestLockAgent_LiveHolderRefusedAtOnce(t *testing.T) {
	state := stateDir(t)
	holdLock(t, state, os.Getpid())
	old := deadHolderPause
	deadHolderPause = func() { t.Fatal("paused for a live agent's lock") }
	t.Cleanup(func() { deadHolderPause = old })
	_, err := lockAgent(state)
	var re *RunningError
	if !errors.As(err, &re) || re.PID != os.Getpid() {
		t.Fatalf("the lock of a live agent: %v; want a RunningError naming %d", err, os.Getpid())
	}
}
