package driver

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

func needTaskCgroups(t *testing.T) {
	t.Helper()
	h, err := cgroup.Probe()
	if err == nil {
		err = h.Usable()
	}
	if err != nil {
		t.Skipf("needs task cgroups (root, or a delegated cgroup): %v", err)
	}
}

// TestExecTask_RunsInTheTask: a command run with ExecTask starts in the
// task's directory, its output reaches the caller's descriptor, and its
// exit code comes back through Wait.
func TestExecTask_RunsInTheTask(t *testing.T) {
	needTaskCgroups(t)
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "t1", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p, err := d.ExecTask(ctx, "t1", ExecSpec{Argv: []string{"sh", "-c", "pwd; exit 5"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, err := p.Wait(ctx) // returns once the output is relayed
	if err != nil || x.Code != 5 {
		t.Fatalf("Wait = %+v %v, want code 5", x, err)
	}
	if want := filepath.Join(d.TaskDir("t1"), statedir.LocalDir) + "\n"; out.String() != want {
		t.Errorf("the command printed %q, want %q", out.String(), want)
	}
	if _, err := d.StopTask(ctx, "t1", syscall.SIGKILL, time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// execSleeper starts task t1 (a sleeper) on a new driver, which the test
// ends, and a command that sleeps in it.
func execSleeper(t *testing.T) (*Driver, context.Context, *ExecProcess) {
	t.Helper()
	needTaskCgroups(t)
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	t.Cleanup(func() { d.Close() })
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "t1", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	p, err := d.ExecTask(ctx, "t1", ExecSpec{Argv: []string{"sleep", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	return d, ctx, p
}

// TestExecTask_CloseKillsTheCommand: the command lives no longer than its
// ExecProcess; the task runs on.
func TestExecTask_CloseKillsTheCommand(t *testing.T) {
	d, ctx, p := execSleeper(t)
	pid := p.PID()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitPidfd(pid); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the command %d after Close: %v", pid, err)
	}
	if info, err := d.InspectTask(ctx, "t1"); err != nil || info.State != fsm.StateRunning || !info.ExecutorAlive {
		t.Fatalf("the task after its command was killed: %+v %v", info, err)
	}
	if _, err := d.StopTask(ctx, "t1", syscall.SIGKILL, time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// TestExecTask_StatusOfACommandKilledWithItsTask: a command running when
// its task is stopped dies with it, and its exit status still reaches
// the caller who asks for it only after the task's stop was answered:
// the driver lets the executor answer it before it exits (ExecsOwed)
// rather than killing it at once.
func TestExecTask_StatusOfACommandKilledWithItsTask(t *testing.T) {
	d, ctx, p := execSleeper(t)
	defer p.Close()
	fd, err := unix.PidfdOpen(p.PID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	stopped := make(chan error, 1)
	go func() {
		_, err := d.StopTask(ctx, "t1", syscall.SIGKILL, time.Millisecond)
		stopped <- err
	}()
	// The command is dead: the executor has killed the task's cgroup and
	// is answering (or has answered) the stop.
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000); err != nil {
		t.Fatal(err)
	}
	x, err := p.Wait(ctx)
	if err != nil || x.Signal != int(syscall.SIGKILL) {
		t.Errorf("Wait of the command after its task's stop = %+v %v, want killed by SIGKILL", x, err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("StopTask: %v", err)
	}
}

// TestExecTask_NotRunning: ExecTask and SignalTask of a task that has
// ended are ErrNotRunning naming its state; of an unknown one,
// ErrUnknownTask.
func TestExecTask_NotRunning(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.ExecTask(ctx, "nobody-here", ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("ExecTask of an unknown task = %v, want ErrUnknownTask", err)
	}
	if _, err := d.StartTask(ctx, "t1", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StopTask(ctx, "t1", syscall.SIGKILL, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err := d.ExecTask(ctx, "t1", ExecSpec{Argv: []string{"true"}})
	var te *TaskError
	if !errors.Is(err, ErrNotRunning) || !errors.As(err, &te) || te.State != fsm.StateStopped {
		t.Errorf("ExecTask of a stopped task = %v, want ErrNotRunning in state stopped", err)
	}
	if err := d.SignalMain(ctx, "t1", syscall.SIGTERM); !errors.Is(err, ErrNotRunning) {
		t.Errorf("SignalMain of a stopped task = %v, want ErrNotRunning", err)
	}
}

// TestSignalMain_EndsTheTask: SIGTERM to the main process alone of a task
// that does not catch it ends the task with that signal.
func TestSignalMain_EndsTheTask(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "t1", taskSpec(t, dir, "grandchildren")); err != nil {
		t.Fatal(err)
	}
	if err := d.SignalMain(ctx, "t1", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, "t1")
	if err != nil || final.State != fsm.StateExited || final.Exit == nil || final.Exit.Signal != int(syscall.SIGTERM) {
		t.Fatalf("WaitTask = %+v %v, want exited by SIGTERM", final, err)
	}
}

// endConn is an executor connection that records how it was ended.
type endConn struct {
	executor.Conn // any other method is not expected: nil, it panics
	ended         []string
}

func (c *endConn) Identity() fsm.Identity { return fsm.Identity{PID: 1 << 22, StartTime: 1} }
func (c *endConn) Close() error           { return nil }
func (c *endConn) Shutdown(context.Context) error {
	c.ended = append(c.ended, "shutdown")
	return nil
}
func (c *endConn) Dismiss(context.Context) error {
	c.ended = append(c.ended, "dismiss")
	return nil
}

// TestEndWithExecutor_DismissesOnlyWhenNoExecIsOwed: an executor that
// emptied its task's cgroup is killed at once (Dismiss), unless it owes
// an exec's connection its command's exit (ExecsOwed): then it is asked
// to exit (Shutdown), so that it answers first. Either way the task is
// recorded reaped with the executor's exit status.
func TestEndWithExecutor_DismissesOnlyWhenNoExecIsOwed(t *testing.T) {
	d := newDriver(t, stateDir(t), Hooks{})
	defer d.Close()
	for _, c := range []struct {
		owed bool
		want string
	}{{false, "dismiss"}, {true, "shutdown"}} {
		h := &endConn{}
		st := executor.Status{Launched: true, Exited: true, Exit: fsm.ExitStatus{Code: -1, Signal: 9}, Emptied: true, ExecsOwed: c.owed}
		j := job{d: d, id: "t1", h: h, final: &st, eff: fsm.Effect{Type: fsm.EffectKillExecutor, Target: fsm.StateStopped}}
		r, ok := j.endWithExecutor(ctxT(t))
		if !ok || !r.closed || !slices.Equal(h.ended, []string{c.want}) {
			t.Errorf("ExecsOwed %v: ended by %v (ok %v, closed %v), want %s", c.owed, h.ended, ok, r.closed, c.want)
			continue
		}
		if len(r.inputs) != 1 || r.inputs[0].Type != fsm.EventExecutorReaped || r.inputs[0].Exit == nil || r.inputs[0].Exit.Signal != 9 {
			t.Errorf("ExecsOwed %v: inputs %+v, want executor-reaped with the exit", c.owed, r.inputs)
		}
	}
}
