//go:build linux

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	hostspec "github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

func TestLaunch_ExitCode(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	id := c.Identity()
	if sid, _ := unix.Getsid(id.PID); sid != id.PID {
		t.Errorf("executor session %d, want its own (%d)", sid, id.PID)
	}
	spec := m.taskSpec(t, "exit", "7")
	lpid, err := c.Launch(ctx, spec)
	pid, start := lpid.PID, lpid.StartTime
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if pid <= 0 || start == 0 {
		t.Fatalf("Launch returned pid %d start %d", pid, start)
	}
	st, err := c.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !sameExit(st, fsm.ExitStatus{Code: 7}) {
		t.Fatalf("exit status %+v, want code 7", st)
	}
	dir := filepath.Dir(id.Socket)
	// Written after the waiters were answered, before the executor exits.
	waitDead(t, id)
	if got, ok, err := readExitStatus(dir); err != nil || !ok || got.Code != 7 {
		t.Fatalf("ReadExitStatus = %+v %v %v", got, ok, err)
	}
	out := readFileString(t, filepath.Join(dir, statedir.StdoutFile))
	if want := fmt.Sprintf("hello stdout dir=%s var=task-value\n", filepath.Join(dir, statedir.LocalDir)); out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if e := readFileString(t, filepath.Join(dir, statedir.StderrFile)); e != "hello stderr\n" {
		t.Errorf("stderr %q", e)
	}
	if err := c.WaitDead(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(id.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file left behind: %v", err)
	}
}

func TestLaunch_Idempotent(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	spec := m.taskSpec(t, "sleep")
	lpid1, err := c.Launch(ctx, spec)
	pid1, s1 := lpid1.PID, lpid1.StartTime
	if err != nil {
		t.Fatal(err)
	}
	lpid2, err := c.Launch(ctx, m.taskSpec(t, "exit", "1"))
	pid2, s2 := lpid2.PID, lpid2.StartTime
	if err != nil || pid1 != pid2 || s1 != s2 {
		t.Fatalf("second Launch = %d %d %v, want %d %d", pid2, s2, err, pid1, s1)
	}
	st, err := c.Status(ctx)
	if err != nil || !st.Launched || st.PID != pid1 || st.StartTime != s1 || st.Exited {
		t.Fatalf("Status = %+v %v", st, err)
	}
}

func TestSignal_ToGroup(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	if err := c.Signal(ctx, syscall.SIGUSR1); !errors.Is(err, wire.ErrNotLaunched) {
		t.Fatalf("Signal before launch = %v, want ErrNotLaunched", err)
	}
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-on-usr1", "42")); err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	if err := c.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	st, err := c.Wait(ctx)
	if err != nil || st.Code != 42 {
		t.Fatalf("Wait = %+v %v, want code 42", st, err)
	}
}

func TestStop_Grace(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-on-term", "3", "-kids", "1")); err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	begin := time.Now()
	st, err := c.Stop(ctx, syscall.SIGTERM, 20*time.Second)
	if err != nil || !sameExit(st, fsm.ExitStatus{Code: 3}) {
		t.Fatalf("Stop = %+v %v, want code 3", st, err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("graceful stop took %v", d)
	}
}

func TestStop_ForcedKill(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-ignore-term", "-kids", "2", "-escapee")); err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	st, err := c.Stop(ctx, syscall.SIGTERM, 200*time.Millisecond)
	if err != nil || !sameExit(st, fsm.ExitStatus{Code: -1, Signal: int(syscall.SIGKILL)}) {
		t.Fatalf("Stop = %+v %v, want killed by SIGKILL", st, err)
	}
	waitDead(t, c.Identity()) // the record is written after the waiters are answered
	if got, ok, _ := readExitStatus(dir); !ok || got.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit status on disk %+v %v", got, ok)
	}
}

func TestStop_GrandchildrenLeaveNothing(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	t.Run("task exits first", func(t *testing.T) {
		c := spawn(t, m, "")
		if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-kids", "2", "-escapee", "-exit-after-kids")); err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx)
		if err != nil || st.Code != 0 {
			t.Fatalf("Wait = %+v %v", st, err)
		}
		// Wait returns only once no descendant is left: check at once.
		assertNoMarked(t, m)
	})
	t.Run("stopped in exec mode", func(t *testing.T) {
		needIsolation(t)
		dir := filepath.Join(t.TempDir(), "task")
		_, readyPath, ready := execFifo(t, dir, "ready")
		c := spawn(t, m, dir)
		spec := m.execSpec(t, "serve", "-ready", readyPath, "-kids", "2", "-escapee")
		if _, err := c.Launch(ctx, spec); err != nil {
			t.Fatal(err)
		}
		readLine(t, ready)
		if _, err := c.Stop(ctx, syscall.SIGTERM, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		assertNoMarked(t, m)
	})
}

// assertNoMarked fails at once (no grace) for a live process with the
// marker other than executors, which may still be exiting.
func assertNoMarked(t *testing.T, m marker) {
	t.Helper()
	for _, p := range testproc.Marked(string(m)) {
		if strings.Contains(p.Cmdline, " executor ") {
			continue
		}
		t.Errorf("survivor %s", p)
	}
}

func TestLease_DriverKilledBeforeLaunch(t *testing.T) {
	m := newMarker(t)
	dir := filepath.Join(t.TempDir(), "task")
	rep, drv := startDriver(t, m, driverPlan{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 12)})
	if alive, err := proc.Alive(rep.Identity); !alive || err != nil {
		t.Fatalf("executor not alive after spawn: %v", err)
	}
	killDriver(t, drv)
	waitDead(t, rep.Identity)
	if _, ok, _ := readExitStatus(dir); ok {
		t.Error("an executor that launched nothing left an exit status")
	}
	if _, err := os.Stat(rep.Identity.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, ok, err := findByNonce(dir, rep.Identity.Nonce); ok || err != nil {
		t.Errorf("FindByNonce after lease expiry = %v %v", ok, err)
	}
}

func TestLease_NoClientExits(t *testing.T) {
	m := newMarker(t)
	dir := t.TempDir()
	cmd := exec.Command(testBinary(t), "executor", m.arg(), "-dir="+dir, proc.NonceArg(randHex(t, 8)), "-lease=100ms")
	cmd.Env = append(os.Environ(), m.env())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("executor exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("executor outlived its lease with no client")
	}
}

func TestReattach_AfterDriverKilled(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	ctlPath, ctl := fifo(t, dir, "ctl")
	spec := m.taskSpec(t, "serve", "-ready", readyPath, "-ctl", ctlPath)
	rep, drv := startDriver(t, m, driverPlan{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 12), Launch: &spec})
	readLine(t, ready)
	killDriver(t, drv)
	if alive, err := proc.Alive(rep.Identity); !alive || err != nil {
		t.Fatalf("executor died with its driver: %v", err)
	}
	id, err := wire.ReadIdentity(dir)
	if err != nil || id != rep.Identity {
		t.Fatalf("ReadIdentity = %+v %v", id, err)
	}
	c, err := Reattach(ctx, dir, rep.Identity)
	if err != nil {
		t.Fatalf("Reattach: %v", err)
	}
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil || !st.Launched || st.PID != rep.TaskPID || st.Exited {
		t.Fatalf("Status = %+v %v", st, err)
	}
	fmt.Fprintln(ctl, "exit 5")
	es, err := c.Wait(ctx)
	if err != nil || es.Code != 5 {
		t.Fatalf("Wait = %+v %v", es, err)
	}
	if err := c.WaitDead(ctx); err != nil {
		t.Fatal(err)
	}
	if es, ok, err := readExitStatus(dir); err != nil || !ok || es.Code != 5 {
		t.Fatalf("ReadExitStatus = %+v %v %v", es, ok, err)
	}
	if _, err := Reattach(ctx, dir, rep.Identity); !errors.Is(err, wire.ErrGone) {
		t.Fatalf("Reattach to an exited executor = %v, want ErrGone", err)
	}
}

func TestReattach_ExitStatusFromDisk(t *testing.T) {
	m := newMarker(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	ctlPath, ctl := fifo(t, dir, "ctl")
	spec := m.taskSpec(t, "serve", "-ready", readyPath, "-ctl", ctlPath)
	rep, drv := startDriver(t, m, driverPlan{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 12), Launch: &spec})
	readLine(t, ready)
	killDriver(t, drv)
	// The task ends while no driver is around; the executor records it and exits.
	fmt.Fprintln(ctl, "exit 9")
	waitDead(t, rep.Identity)
	es, ok, err := readExitStatus(dir)
	if err != nil || !ok || !sameExit(es, fsm.ExitStatus{Code: 9}) {
		t.Fatalf("ReadExitStatus = %+v %v %v", es, ok, err)
	}
	if alive, _ := proc.Alive(rep.Identity); alive {
		t.Fatal("executor outlived its task")
	}
}

func TestKill_RecycledPIDRefused(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	id := c.Identity()
	ltaskPID, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath))
	taskPID, taskStart := ltaskPID.PID, ltaskPID.StartTime
	if err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)

	for name, fake := range map[string]fsm.Identity{
		"start time": {PID: id.PID, StartTime: id.StartTime + 1, BootID: id.BootID, Nonce: id.Nonce},
		"nonce":      {PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, Nonce: "someoneelse"},
	} {
		if alive, err := proc.Alive(fake); alive || err != nil {
			t.Errorf("%s: proc.Alive(fake) = %v %v", name, alive, err)
		}
		if err := proc.Kill(ctx, fake); !errors.Is(err, wire.ErrNotOurs) {
			t.Errorf("%s: Kill(fake) = %v, want ErrNotOurs", name, err)
		}
		if _, err := Reattach(ctx, dir, fake); !errors.Is(err, wire.ErrNotOurs) {
			t.Errorf("%s: Reattach(fake) = %v, want ErrNotOurs", name, err)
		}
	}
	if err := proc.KillGroup(ctx, fsm.Proc{PID: taskPID, StartTime: taskStart + 1}); !errors.Is(err, wire.ErrNotOurs) {
		t.Errorf("KillGroup(fake start) = %v, want ErrNotOurs", err)
	}
	// Nothing was signalled: executor and task are alive.
	if alive, err := proc.Alive(id); !alive || err != nil {
		t.Fatalf("executor hurt by a refused kill: %v", err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Exited {
		t.Fatalf("task hurt by a refused group kill: %+v %v", st, err)
	}
	// The real identity works.
	if err := proc.Kill(ctx, id); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if alive, _ := proc.Alive(id); alive {
		t.Fatal("executor alive after Kill")
	}
	if err := proc.Kill(ctx, id); err != nil {
		t.Fatalf("Kill of a dead executor = %v, want nil", err)
	}
	// The task's leader died with its executor (parent-death signal); its
	// group is killed by KillGroup.
	if err := proc.KillGroup(ctx, fsm.Proc{PID: taskPID, StartTime: taskStart}); err != nil && !errors.Is(err, wire.ErrNotOurs) {
		t.Fatalf("KillGroup: %v", err)
	}
}

func TestKillGroup_AfterExecutorGone(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	lpid, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-kids", "3"))
	pid, start := lpid.PID, lpid.StartTime
	if err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	if err := proc.Kill(ctx, c.Identity()); err != nil {
		t.Fatal(err)
	}
	if err := proc.KillGroup(ctx, fsm.Proc{PID: pid, StartTime: start}); err != nil {
		t.Fatalf("KillGroup: %v", err)
	}
	_ = proc.Each(func(p int, s proc.Stat) {
		if s.PGID == pid && !s.Dead() {
			t.Errorf("group member %d left", p)
		}
	})
}

func TestShutdown_KillsTask(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	if _, err := c.Launch(ctx, m.taskSpec(t, "sleep")); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if alive, _ := proc.Alive(c.Identity()); alive {
		t.Fatal("executor alive after Shutdown")
	}
	es, ok, err := readExitStatus(filepath.Dir(c.Identity().Socket))
	if err != nil || !ok || es.Signal != int(syscall.SIGKILL) {
		t.Fatalf("exit status %+v %v %v", es, ok, err)
	}
}

func TestShutdown_OnSIGTERM(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-kids", "1", "-ignore-term")); err != nil {
		t.Fatal(err)
	}
	p, err := proc.Open(c.Identity().PID)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := proc.Check(c.Identity()); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx)
	if err != nil || st.Signal != int(syscall.SIGKILL) {
		t.Fatalf("Wait after SIGTERM to the executor = %+v %v", st, err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStop_BeforeLaunch(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	if _, err := c.Stop(ctx, syscall.SIGTERM, time.Second); !errors.Is(err, wire.ErrNotLaunched) {
		t.Fatalf("Stop before launch = %v, want ErrNotLaunched", err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := readExitStatus(filepath.Dir(c.Identity().Socket)); ok {
		t.Fatal("exit status recorded for a task never launched")
	}
}

func TestPeerCred_OtherUIDRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs a client as another uid (65534) with CAP_DAC_OVERRIDE")
	}
	m := newMarker(t)
	c := spawn(t, m, "")
	id := c.Identity()
	// A copy of the test binary that uid 65534 can execute.
	binDir := t.TempDir()
	for _, d := range []string{filepath.Dir(binDir), binDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(binDir, "dialer")
	copyFile(t, testBinary(t), bin)
	idJSON, _ := json.Marshal(id)
	cmd := exec.Command(bin, "dialer", m.arg(), filepath.Dir(id.Socket), string(idJSON))
	cmd.Env = append(os.Environ(), m.env())
	// CAP_DAC_OVERRIDE lets it reach the 0700 directory and the 0600 socket,
	// so only the SO_PEERCRED check stands in its way.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: []uintptr{unix.CAP_DAC_OVERRIDE},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dialer as uid 65534: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "peer refused") {
		t.Fatalf("dialer output %q", out)
	}
	// The refused peer did not take the lease or hurt the executor.
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatalf("executor after a refused peer: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateCaps_NetRawRefused(t *testing.T) {
	err := hostspec.ValidateCaps([]string{"CAP_NET_RAW", "chown"}, nil, nil)
	var ce *wire.CapError
	if !errors.As(err, &ce) || !errors.Is(err, wire.ErrCapNotAllowed) {
		t.Fatalf("ValidateCaps = %v, want a *CapError", err)
	}
	if !strings.Contains(err.Error(), "net_raw") || len(ce.NotAllowed) != 1 || ce.NotAllowed[0] != "net_raw" {
		t.Fatalf("error %q does not name net_raw alone", err)
	}
	if err := hostspec.ValidateCaps([]string{"net_raw"}, nil, []string{"NET_RAW"}); err != nil {
		t.Fatalf("net_raw in the allow list refused: %v", err)
	}
	if err := hostspec.ValidateCaps([]string{"Sys_Chroot", "CAP_KILL"}, []string{"all"}, nil); err != nil {
		t.Fatalf("default caps refused: %v", err)
	}
	err = hostspec.ValidateCaps([]string{"frobnicate"}, []string{"nonsense"}, nil)
	if !errors.Is(err, wire.ErrUnknownCap) || !errors.As(err, &ce) || len(ce.Unknown) != 2 {
		t.Fatalf("unknown names: %v", err)
	}
}

func TestLaunch_ExecCapAddNetRawRefused(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	spec := m.taskSpec(t, "exit", "0")
	spec.Driver = wire.ModeExec
	spec.CapAdd = []string{"net_raw"}
	// The client refuses it before asking ...
	if _, err := c.Launch(ctx, spec); !errors.Is(err, wire.ErrCapNotAllowed) || !strings.Contains(err.Error(), "net_raw") {
		t.Fatalf("Launch = %v, want ErrCapNotAllowed naming net_raw", err)
	}
	// ... and so does the executor, across the protocol.
	_, err := c.call(ctx, wire.Request{Op: wire.OpLaunch, Launch: &spec})
	var ce *wire.CapError
	if !errors.Is(err, wire.ErrCapNotAllowed) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "net_raw") {
		t.Fatalf("executor-side launch = %v, want a *CapError naming net_raw", err)
	}
	if st, _ := c.Status(ctx); st.Launched {
		t.Fatal("a refused launch launched")
	}
}

func TestLaunch_ExecCapsApplied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("capability tests need root")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	def, err := hostspec.ResolveCaps(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	withoutChown, err := hostspec.ResolveCaps(nil, []string{"chown"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		spec    func() wire.Launch
		want    map[string]uint64
		wantUID string
	}{
		{"root task, chown dropped", func() wire.Launch {
			s := m.execSpec(t, "caps")
			s.CapDrop, s.User = []string{"CAP_CHOWN"}, "root"
			return s
		}, map[string]uint64{"CapEff": hostspec.CapMask(withoutChown), "CapPrm": hostspec.CapMask(withoutChown), "CapBnd": hostspec.CapMask(withoutChown), "CapAmb": 0}, "0"},
		{"nobody task, none unless named", func() wire.Launch {
			return wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/cat", Args: []string{"/proc/self/status"}, User: "nobody", Env: map[string]string{"TETHER_TEST_MARKER": string(m)}}}
		}, map[string]uint64{"CapEff": 0, "CapPrm": 0, "CapBnd": 0, "CapAmb": 0, "CapInh": 0}, "65534"},
		{"nobody task, cap_add as ambient", func() wire.Launch {
			return wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/cat", Args: []string{"/proc/self/status"}, User: "nobody", CapAdd: []string{"chown", "kill"}, Env: map[string]string{"TETHER_TEST_MARKER": string(m)}}}
		}, map[string]uint64{"CapEff": 1<<0 | 1<<5, "CapPrm": 1<<0 | 1<<5, "CapBnd": 1<<0 | 1<<5, "CapAmb": 1<<0 | 1<<5}, "65534"},
		{"root task, the default set", func() wire.Launch {
			s := m.execSpec(t, "caps")
			s.User = "root"
			return s
		}, map[string]uint64{"CapEff": hostspec.CapMask(def), "CapPrm": hostspec.CapMask(def), "CapBnd": hostspec.CapMask(def), "CapAmb": 0}, "0"},
		{"raw_exec nobody task", func() wire.Launch {
			return wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "cat", Args: []string{"/proc/self/status"}, User: "65534", Dir: "/", Env: map[string]string{"TETHER_TEST_MARKER": string(m), "PATH": "/usr/bin:/bin"}}}
		}, map[string]uint64{"CapEff": 0, "CapPrm": 0, "CapAmb": 0}, "65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := spawn(t, m, "")
			if _, err := c.Launch(ctx, tc.spec()); err != nil {
				t.Fatal(err)
			}
			if st, err := c.Wait(ctx); err != nil || st.Code != 0 {
				t.Fatalf("Wait = %+v %v", st, err)
			}
			out := readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))
			got := map[string]uint64{}
			uid := ""
			for l := range strings.SplitSeq(out, "\n") {
				k, v, ok := strings.Cut(l, ":")
				if !ok {
					continue
				}
				v = strings.TrimSpace(v)
				if k == "Uid" {
					uid = strings.Fields(v)[1]
					continue
				}
				if n, err := strconv.ParseUint(v, 16, 64); err == nil {
					got[k] = n
				}
			}
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s = %016x, want %016x\n%s", k, got[k], w, out)
				}
			}
			if uid != tc.wantUID {
				t.Errorf("effective uid %q, want %q", uid, tc.wantUID)
			}
		})
	}
}

func TestLaunch_TypedErrors(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	noexec := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(noexec, []byte("\x00\x01garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*wire.Launch)
		want error
	}{
		{"missing binary", func(s *wire.Launch) { s.Command = "/nonexistent/tether-task" }, wire.ErrCommandNotFound},
		{"missing in PATH", func(s *wire.Launch) { s.Command = "tether-no-such-command" }, wire.ErrCommandNotFound},
		{"not executable", func(s *wire.Launch) { s.Command = plain }, wire.ErrNotExecutable},
		{"no executable format", func(s *wire.Launch) { s.Command = noexec }, wire.ErrNotExecutable},
		{"directory", func(s *wire.Launch) { s.Command = t.TempDir() }, wire.ErrNotExecutable},
		{"unknown user", func(s *wire.Launch) { s.User = "tether-no-such-user" }, wire.ErrUnknownUser},
		{"bad work dir", func(s *wire.Launch) { s.Dir = "/nonexistent/dir" }, wire.ErrWorkDir},
		{"work dir is a file", func(s *wire.Launch) { s.Dir = plain }, wire.ErrWorkDir},
		{"bad mode", func(s *wire.Launch) { s.Driver = "docker" }, wire.ErrBadSpec},
		{"exec mode, not executable", func(s *wire.Launch) {
			s.Driver, s.Command, s.Chroot = wire.ModeExec, "/bad/garbage", testChroot(t, filepath.Dir(noexec)+":/bad")
		}, wire.ErrNotExecutable},
		{"exec mode, missing in the root", func(s *wire.Launch) {
			s.Driver, s.Command, s.Chroot = wire.ModeExec, noexec, testChroot(t)
		}, wire.ErrCommandNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := m.taskSpec(t, "exit", "0")
			tc.edit(&spec)
			_, err := c.Launch(ctx, spec)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Launch = %v, want %v", err, tc.want)
			}
		})
	}
	// The executor is still usable after refused launches.
	if _, err := c.Launch(ctx, m.taskSpec(t, "exit", "4")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx); err != nil || st.Code != 4 {
		t.Fatalf("Wait = %+v %v", st, err)
	}
}

func TestSpawn_LongTaskDir(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	base := t.TempDir()
	long := base
	for len(long) < 220 {
		long = filepath.Join(long, strings.Repeat("d", 40))
	}
	if err := os.MkdirAll(filepath.Dir(long), 0o700); err != nil {
		t.Fatal(err)
	}
	readyPath, ready := fifo(t, long, "ready")
	ctlPath, ctl := fifo(t, long, "ctl")
	c := spawn(t, m, long)
	if n := len(c.Identity().Socket); n <= 108 {
		t.Fatalf("socket path only %d bytes long", n)
	}
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-ctl", ctlPath)); err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	c.Close() // after launch the executor stays
	c2, err := Reattach(ctx, long, c.Identity())
	if err != nil {
		t.Fatalf("Reattach through a long path: %v", err)
	}
	defer c2.Close()
	fmt.Fprintln(ctl, "exit 0")
	if st, err := c2.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("Wait = %+v %v", st, err)
	}
}

func TestSpawn_FailureLeavesNothing(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	t.Run("crash", func(t *testing.T) {
		_, err := Spawn(ctx, SpawnConfig{Command: []string{testBinary(t), "executor-crash", m.arg()}, TaskDir: t.TempDir(), Nonce: randHex(t, 8)})
		if !errors.Is(err, wire.ErrSpawn) {
			t.Fatalf("Spawn = %v, want ErrSpawn", err)
		}
	})
	t.Run("never ready", func(t *testing.T) {
		_, err := Spawn(ctx, SpawnConfig{Command: []string{testBinary(t), "executor-hang", m.arg()}, TaskDir: t.TempDir(), Nonce: randHex(t, 8), ReadyTimeout: 300 * time.Millisecond})
		if !errors.Is(err, wire.ErrReadyTimeout) {
			t.Fatalf("Spawn = %v, want ErrReadyTimeout", err)
		}
		assertNoMarked(t, m)
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := Spawn(cctx, SpawnConfig{Command: []string{testBinary(t), "executor-hang", m.arg()}, TaskDir: t.TempDir(), Nonce: randHex(t, 8)})
		if !errors.Is(err, wire.ErrReadyTimeout) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Spawn = %v, want ErrReadyTimeout wrapping context.Canceled", err)
		}
		assertNoMarked(t, m)
	})
	t.Run("missing binary", func(t *testing.T) {
		_, err := Spawn(ctx, SpawnConfig{Command: []string{"/nonexistent/tether"}, TaskDir: t.TempDir(), Nonce: randHex(t, 8)})
		if !errors.Is(err, wire.ErrSpawn) {
			t.Fatalf("Spawn = %v, want ErrSpawn", err)
		}
	})
	t.Run("bad nonce", func(t *testing.T) {
		_, err := Spawn(ctx, SpawnConfig{Command: m.executorCmd(t), TaskDir: t.TempDir(), Nonce: "a b"})
		if !errors.Is(err, wire.ErrBadConfig) {
			t.Fatalf("Spawn = %v, want ErrBadConfig", err)
		}
	})
	t.Run("busy task dir", func(t *testing.T) {
		dir := t.TempDir()
		spawn(t, m, dir)
		_, err := Spawn(ctx, SpawnConfig{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 8)})
		if !errors.Is(err, wire.ErrSpawn) || !strings.Contains(err.Error(), "live executor") {
			t.Fatalf("second Spawn in a busy dir = %v", err)
		}
	})
}

func TestFindByNonce_IdentityFileAndScan(t *testing.T) {
	m := newMarker(t)
	c := spawn(t, m, "")
	id := c.Identity()
	dir := filepath.Dir(id.Socket)
	got, ok, err := findByNonce(dir, id.Nonce)
	if err != nil || !ok || got != id {
		t.Fatalf("FindByNonce = %+v %v %v, want %+v", got, ok, err, id)
	}
	if err := os.Remove(filepath.Join(dir, statedir.IdentityFile)); err != nil {
		t.Fatal(err)
	}
	got, ok, err = findByNonce(dir, id.Nonce)
	if err != nil || !ok || got != id {
		t.Fatalf("FindByNonce by /proc scan = %+v %v %v, want %+v", got, ok, err, id)
	}
	if _, ok, _ := findByNonce(dir, "nobodysnonce"); ok {
		t.Fatal("found an executor for an unknown nonce")
	}
	// A look-alike: a process whose argv carries the same dir and nonce
	// but is not a session leader (as a grep or a log viewer would be). Once
	// the real executor is dead, the scan must not take it for ours.
	look := exec.Command(testBinary(t), "executor-hang", m.arg(), "-dir="+dir, proc.NonceArg(id.Nonce))
	if err := look.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = look.Process.Kill(); _ = look.Wait() }()
	if err := proc.Kill(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := findByNonce(dir, id.Nonce); err != nil || ok {
		t.Fatalf("FindByNonce took the look-alike pid %d for the executor: %+v %v %v", look.Process.Pid, got, ok, err)
	}
}

func TestParseStat_CommWithParens(t *testing.T) {
	line := "1234 (a) (b c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, err := proc.ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.State != 'S' || s.PPID != 1 || s.PGID != 1234 || s.SID != 1234 || s.StartTime != 987654 {
		t.Fatalf("parseStat = %+v", s)
	}
	if _, err := proc.ParseStat([]byte("12 (x) S 1")); err == nil {
		t.Fatal("short stat parsed")
	}
}

func TestWireError_RoundTrip(t *testing.T) {
	for _, e := range []error{wire.ErrCommandNotFound, wire.ErrNotExecutable, wire.ErrUnknownUser, wire.ErrWorkDir, wire.ErrNotLaunched, wire.ErrPeerRefused} {
		err := wire.FailureOf(fmt.Errorf("context: %w", e)).Err()
		if !errors.Is(err, e) || !strings.Contains(err.Error(), "context: ") {
			t.Errorf("%v did not survive the wire: %v", e, err)
		}
	}
	err := wire.FailureOf(&wire.CapError{NotAllowed: []string{"net_raw"}}).Err()
	var ce *wire.CapError
	if !errors.As(err, &ce) || ce.NotAllowed[0] != "net_raw" || !errors.Is(err, wire.ErrCapNotAllowed) {
		t.Errorf("CapError did not survive the wire: %v", err)
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf strings.Builder
	_ = wire.WriteFrame(&buf, wire.Request{ID: 1, Op: wire.OpHello, Version: 1, Nonce: "abcdefgh"})
	f.Add([]byte(buf.String()))
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	buf.Reset()
	_ = wire.WriteFrame(&buf, wire.Request{ID: 2, Op: wire.OpExec, Exec: &wire.ExecSpec{Argv: []string{"id", "-u"}, Env: []string{"A=b"}, TTY: true, Rows: 24, Cols: 80}, FDs: 3})
	f.Add([]byte(buf.String()))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req wire.Request
		if err := wire.ReadFrame(strings.NewReader(string(b)), &req); err != nil {
			return
		}
		var w strings.Builder
		if err := wire.WriteFrame(&w, req); err != nil {
			t.Fatalf("re-encoding a decoded request: %v", err)
		}
		var resp wire.Response
		if err := wire.ReadFrame(strings.NewReader(string(b)), &resp); err == nil && resp.Err != nil {
			_ = resp.Err.Err().Error()
		}
	})
}

// TestSpawn_ExecutorRunsOnOnePTasksDoNot: the executor is started with
// GOMAXPROCS=1 (an idle executor holds less memory with one P), and that
// setting is the executor's alone: neither a task (direct or through the
// shim) nor a command started into it inherits the executor's environment.
func TestSpawn_ExecutorRunsOnOnePTasksDoNot(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	id := c.Identity()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", id.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(env), "\x00"), "GOMAXPROCS=1") {
		t.Errorf("the executor's environment lacks GOMAXPROCS=1: %q", env)
	}
	dir := filepath.Dir(id.Socket)
	if _, err := c.Launch(ctx, wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/usr/bin/env", Args: nil}}); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	out := readFileString(t, filepath.Join(dir, statedir.StdoutFile))
	if strings.Contains(out, "GOMAXPROCS") || !strings.Contains(out, "TETHER_TASK_ID=") {
		t.Errorf("the task's environment:\n%s\nwant the task's own (TETHER_TASK_ID) without the executor's GOMAXPROCS", out)
	}
}

// sameExit compares what an exit says of the task (code, signal, OOM),
// and requires the time of the exit, which every executor now records.
func sameExit(got, want fsm.ExitStatus) bool {
	return got.Code == want.Code && got.Signal == want.Signal && got.OOM == want.OOM && got.At > 0
}
