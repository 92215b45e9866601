//go:build linux

package proc_test

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// tree starts a chain of depth processes below a root (each in a session
// of its own, so that neither a session nor a group kill finds them) and
// returns the root and the deepest pid.
func tree(t testing.TB, m string, depth int) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(testBinary(t), "tree", strconv.Itoa(depth), m)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, leaf
}

func identityOf(t testing.TB, pid int) fsm.Identity {
	t.Helper()
	start, err := proc.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	return fsm.Identity{PID: pid, StartTime: start, BootID: boot}
}

// TestKillTree_KillsEveryDescendant: the root and a chain of descendants,
// each in a session (and group) of its own, all die.
func TestKillTree_KillsEveryDescendant(t *testing.T) {
	m := newMarker(t)
	root, leaf := tree(t, m, 3)
	leafID := identityOf(t, leaf)
	if err := proc.KillTree(testCtx(t), proc.IdentityRoot(identityOf(t, root.Process.Pid))); err != nil {
		t.Fatal(err)
	}
	if childAlive(t, root) {
		t.Error("the root is alive")
	}
	if ok, _ := proc.Alive(leafID); ok {
		t.Errorf("the deepest descendant %d is alive", leaf)
	}
}

// TestKillTree_AStrangerAtTheRootsPidSignalsNothing: a root whose pid now
// belongs to another process (start time differs) is skipped: neither it
// nor its descendants are signalled.
func TestKillTree_AStrangerAtTheRootsPidSignalsNothing(t *testing.T) {
	m := newMarker(t)
	stranger, leaf := tree(t, m, 1)
	id := identityOf(t, stranger.Process.Pid)
	id.StartTime-- // what a record of an earlier process at this pid holds
	if err := proc.KillTree(testCtx(t), proc.IdentityRoot(id)); err != nil && !errors.Is(err, proc.ErrNotOurs) {
		t.Fatal(err)
	}
	if !childAlive(t, stranger) {
		t.Fatal("the stranger at the recorded pid was killed")
	}
	if ok, _ := proc.Alive(identityOf(t, leaf)); !ok {
		t.Fatal("the stranger's child was killed")
	}
	_ = stranger.Process.Signal(syscall.SIGKILL)
	_ = syscall.Kill(leaf, syscall.SIGKILL)
}

// TestPidFD_Reap: the exit status through the pidfd is the pinned child's:
// none while it runs, then its signal; and an exit code.
func TestPidFD_Reap(t *testing.T) {
	m := newMarker(t)
	cmd := hang(t, m)
	p, err := proc.Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, ok, err := p.Reap(); ok || err != nil {
		t.Fatalf("Reap of a running child: ok %v, %v", ok, err)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	x, ok, err := p.Reap()
	if !ok || err != nil || x.Signal != int(syscall.SIGKILL) || x.Code != -1 {
		t.Fatalf("Reap of a killed child: %+v %v %v", x, ok, err)
	}
	exit3 := exec.Command("/bin/sh", "-c", "exit 3")
	if err := exit3.Start(); err != nil {
		t.Fatal(err)
	}
	q, err := proc.Open(exit3.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Wait(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if x, ok, err := q.Reap(); !ok || err != nil || x.Code != 3 || x.Signal != 0 {
		t.Fatalf("Reap of a child that exited 3: %+v %v %v", x, ok, err)
	}
}

// BenchmarkKillTree_Chain3 kills a root and a chain of three descendants,
// each in a session of its own: the whole of a KillTree (pins, stops, the
// descent's rounds, the kills and waits), per tree.
func BenchmarkKillTree_Chain3(b *testing.B) {
	m := "tetherprocbench" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		root, _ := tree(b, m, 3)
		id := identityOf(b, root.Process.Pid)
		b.StartTimer()
		if err := proc.KillTree(ctx, proc.IdentityRoot(id)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = root.Wait()
		b.StartTimer()
	}
}
