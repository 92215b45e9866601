//go:build linux

package executor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// execOut runs argv inside c's task, its stdout and stderr into one
// buffer, and returns what it printed and its exit status.
func execOut(t *testing.T, c *Client, argv ...string) (string, fsm.ExitStatus) {
	t.Helper()
	ctx := testCtx(t)
	var out lockedBuffer
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: argv, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	defer p.Close()
	x, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait of exec %q: %v", argv, err)
	}
	return out.String(), x
}

// lockedBuffer is a buffer two relays (stdout and stderr) write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// launchSleeper launches spec (a task that prints "ok" and blocks) and
// returns its status once it runs.
func launchSleeper(t *testing.T, c *Client, spec wire.Launch) wire.Status {
	t.Helper()
	st, err := c.Launch(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return st
}

func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	return readFileString(t, "/proc/"+strconv.Itoa(pid)+"/cgroup")
}

// TestExec_RawExecTask: a command run in a raw_exec task starts in the
// task's directory with its environment, in its cgroup, and its exit code
// comes back.
func TestExec_RawExecTask(t *testing.T) {
	needCgroups(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	st := launchSleeper(t, c, m.taskSpec(t, "sleep"))
	out, x := execOut(t, c, "sh", "-c", `pwd; echo "var=$TASK_VAR"; cat /proc/self/cgroup; exit 7`)
	if x.Code != 7 || x.Signal != 0 {
		t.Fatalf("exit %+v, want code 7\n%s", x, out)
	}
	want := filepath.Join(dir, statedir.LocalDir) + "\nvar=task-value\n" + cgroupOf(t, st.PID)
	if out != want {
		t.Fatalf("exec printed\n%s\nwant\n%s", out, want)
	}
}

// TestExec_ExecTask: a command run in an exec task runs as its user
// (nobody), in its PID namespace (pid 1 is the task), in its root (the
// state directory is not there) and in its cgroup.
func TestExec_ExecTask(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	l := newStateLayout(t)
	c := spawn(t, m, l.dir)
	st := launchSleeper(t, c, m.execSpec(t, "sleep"))
	// The task itself is a member of its cgroup in every hierarchy (its
	// shim was born there, or joined it).
	cg := taskCgroup(t, needCgroups(t), c.Identity())
	if procs, err := cg.Procs(); err != nil || !slices.Contains(procs, st.PID) {
		t.Errorf("the task %d is not among its cgroup's members %v (%v)", st.PID, procs, err)
	}
	for key, d := range cg.Dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(st.PID)) {
			t.Errorf("the task %d is not in its %s cgroup %s: %q %v", st.PID, key, d, b, err)
		}
	}
	if out, x := execOut(t, c, "id", "-u"); out != "65534\n" || x.Code != 0 {
		t.Errorf("id -u printed %q, exit %+v; want 65534", out, x)
	}
	if out, _ := execOut(t, c, "cat", "/proc/1/cmdline"); !strings.Contains(out, "sleep") || !strings.Contains(out, string(m)) {
		t.Errorf("/proc/1/cmdline inside is %q, want the task's", out)
	}
	out, _ := execOut(t, c, "ls", "/")
	for _, want := range []string{"local", "secrets", "tmp", "usr"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("ls / inside lacks %s:\n%s", want, out)
		}
	}
	if out, x := execOut(t, c, "ls", l.state); x.Code == 0 {
		t.Errorf("the state directory is visible inside: ls %s printed %q", l.state, out)
	}
	// In the task's cgroup namespace, whose root is the task's cgroup:
	// it sees its own cgroups as "/", as the task does.
	out, _ = execOut(t, c, "cat", "/proc/self/cgroup")
	for line := range strings.Lines(out) {
		if !strings.HasSuffix(line, ":/\n") {
			t.Errorf("exec's cgroup line %q: want the root of the task's cgroup namespace\n%s", line, out)
		}
	}
	if out == "" {
		t.Error("exec's /proc/self/cgroup is empty")
	}
	// And, from the host, in the task's cgroups.
	p, err := c.Exec(testCtx(t), wire.ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupOf(t, p.PID()); got != cgroupOf(t, st.PID) {
		t.Errorf("exec's cgroups seen from the host\n%s\nthe task's\n%s", got, cgroupOf(t, st.PID))
	}
	p.Close()
	if out, x := execOut(t, c, "sh", "-c", "exit 7"); x.Code != 7 {
		t.Errorf("sh -c 'exit 7': %+v %q", x, out)
	}
	// The capabilities the task got (its allowed set, ambient for nobody).
	if out, _ := execOut(t, c, "grep", "^Cap", "/proc/self/status"); out != capLines(t, st.PID) {
		t.Errorf("exec's capabilities\n%s\nthe task's\n%s", out, capLines(t, st.PID))
	}
}

// TestExec_TTY: with a terminal, the command's stdin, stdout and stderr
// are a pseudo-terminal of the task's own devpts, and the master comes
// back to the client.
func TestExec_TTY(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	launchSleeper(t, c, m.execSpec(t, "sleep"))
	ctx := testCtx(t)
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"sh", "-c", "tty; stty size"}, TTY: true, Rows: 33, Cols: 111})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out bytes.Buffer
	_ = p.Terminal().SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(&out, p.Terminal()) // to EIO: the terminal's last holder exited
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading the terminal: %v (read %q)", err, out.String())
	}
	x, err := p.Wait(ctx)
	if err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	if got := out.String(); got != "/dev/pts/0\r\n33 111\r\n" {
		t.Fatalf("tty inside printed %q, want /dev/pts/0 and the size", got)
	}
}

// TestExec_KilledWithTheTask: a long exec is killed when the task is
// stopped (and the stop waits for it).
func TestExec_KilledWithTheTask(t *testing.T) {
	needCgroups(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	launchSleeper(t, c, m.taskSpec(t, "sleep"))
	ctx := testCtx(t)
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	pfd, err := proc.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer pfd.Close()
	if err := proc.Check(fsm.Identity{PID: p.PID(), StartTime: p.StartTime()}); err != nil {
		t.Fatalf("the exec's pid: %v", err)
	}
	// The stop is answered before the exec's connection asks for its
	// command's exit: the executor says it owes one (ExecsOwed), and
	// answers the wait that comes after the task's end.
	st, err := c.stop(ctx, syscall.SIGTERM, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !pfd.Exited() {
		t.Fatal("the exec outlived the stop of its task")
	}
	if !st.Over() || !st.ExecsOwed {
		t.Fatalf("the stop's status %+v: want over, with an exec's exit owed", st)
	}
	x, err := p.Wait(ctx)
	if err != nil || x.Signal != int(syscall.SIGKILL) {
		t.Fatalf("the exec's wait after its task ended: %+v %v, want killed by SIGKILL", x, err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("the executor's exit once its exec was answered: %v", err)
	}
}

// sleeperAndSecondClient spawns an executor, launches a sleeper through
// it, and opens a second connection to it (as a tether exec does).
func sleeperAndSecondClient(t *testing.T) (c, c2 *Client, ctx context.Context) {
	t.Helper()
	m := newMarker(t)
	c = spawn(t, m, "")
	launchSleeper(t, c, m.taskSpec(t, "sleep"))
	ctx = testCtx(t)
	c2, err := Reattach(ctx, filepath.Dir(c.Identity().Socket), c.Identity())
	if err != nil {
		t.Fatal(err)
	}
	return c, c2, ctx
}

// TestExec_UnaskedExitDoesNotHoldTheExecutor: an exec's connection that
// never asks for its command's exit status holds the executor only for
// a bounded time after its task ended, and one that closes releases it
// at once.
func TestExec_UnaskedExitDoesNotHoldTheExecutor(t *testing.T) {
	needCgroups(t)
	for _, closes := range []bool{false, true} {
		t.Run(fmt.Sprintf("closes=%v", closes), func(t *testing.T) {
			c, c2, ctx := sleeperAndSecondClient(t)
			defer c2.Close()
			if _, err := c2.Exec(ctx, wire.ExecSpec{Argv: []string{"sleep", "1000"}}); err != nil {
				t.Fatal(err)
			}
			st, err := c.stop(ctx, syscall.SIGKILL, 0)
			if err != nil || !st.ExecsOwed {
				t.Fatalf("stop: %+v %v, want an exec's exit owed", st, err)
			}
			if closes {
				c2.Close()
			}
			if err := c.Shutdown(ctx); err != nil {
				t.Fatalf("the executor did not exit with an exec's status unasked for: %v", err)
			}
			if _, err := c2.Status(ctx); err == nil {
				t.Fatal("the exec's connection still answered after the executor exited")
			}
		})
	}
}

// TestExec_KilledWhenItsConnectionCloses: an exec lives no longer than
// the connection that asked for it.
func TestExec_KilledWhenItsConnectionCloses(t *testing.T) {
	needCgroups(t)
	c, c2, ctx := sleeperAndSecondClient(t)
	p, err := c2.Exec(ctx, wire.ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	pfd, err := proc.Open(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer pfd.Close()
	c2.Close()
	if err := pfd.Wait(ctx); err != nil {
		t.Fatalf("the exec outlived its connection: %v", err)
	}
	if st, err := c.Status(ctx); err != nil || st.Exited {
		t.Fatalf("the task after its exec was killed: %+v %v", st, err)
	}
}

// TestExec_Refusals: a command that does not exist in the task, an exec
// before the launch, after the task's exit, and while it restarts.
func TestExec_Refusals(t *testing.T) {
	needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	if _, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, wire.ErrNotLaunched) {
		t.Errorf("Exec before launch = %v, want ErrNotLaunched", err)
	}
	launchSleeper(t, c, m.taskSpec(t, "sleep"))
	if _, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"no-such-command-here"}}); !errors.Is(err, wire.ErrCommandNotFound) || !strings.Contains(err.Error(), "no-such-command-here") {
		t.Errorf("Exec of a missing command = %v, want ErrCommandNotFound naming it", err)
	}
	if _, err := c.Exec(ctx, wire.ExecSpec{}); !errors.Is(err, wire.ErrBadSpec) {
		t.Errorf("Exec without a command = %v, want ErrBadSpec", err)
	}

	// A task whose run exited and whose restart waits out an hour.
	r := spawn(t, m, "")
	spec := m.taskSpec(t, "exit", "3")
	spec.Restart = &fsm.RestartPolicy{Attempts: 2, Interval: 2 * time.Hour, Delay: time.Hour, Mode: fsm.RestartDelay}
	if _, err := r.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if st, _, err := r.Watch(ctx, 0); err != nil || !st.Restarting {
		t.Fatalf("Watch = %+v %v, want a restart pending", st, err)
	}
	for name, err := range map[string]error{
		"Exec":       func() error { _, err := r.Exec(ctx, wire.ExecSpec{Argv: []string{"true"}}); return err }(),
		"Signal":     r.Signal(ctx, syscall.SIGUSR1),
		"SignalMain": r.SignalMain(ctx, syscall.SIGUSR1),
	} {
		if !errors.Is(err, wire.ErrRestarting) {
			t.Errorf("%s while restarting = %v, want ErrRestarting", name, err)
		}
	}

	// A task that exited.
	if _, err := c.Stop(ctx, syscall.SIGKILL, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, wire.ErrTaskExited) && !errors.Is(err, wire.ErrClosed) {
		t.Errorf("Exec after the task's end = %v, want ErrTaskExited (or the executor gone)", err)
	}
}

// usr1Task is a task (mode "usr1") that starts a kid (mode "usr1-kid")
// in its process group and, once the kid's SIGUSR1 handler and its own
// are in place, writes "main ready" to the FIFO at path; then each writes
// "<who> <n>" there for its n-th SIGUSR1. It blocks until killed.
func usr1Task(mode, path string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1)
	say := func(line string) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			os.Exit(3)
		}
		fmt.Fprintln(f, line)
		f.Close()
	}
	who := "kid"
	if mode == "usr1" {
		who = "main"
		kid := exec.Command(os.Args[0], "task", os.Args[2], "usr1-kid", path)
		out, err := kid.StdoutPipe()
		if err != nil {
			return 2
		}
		if err := kid.Start(); err != nil {
			return 2
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
			return 2
		}
		say("main ready")
	} else {
		fmt.Println("ok")
	}
	for n := 1; ; n++ {
		<-sigs
		say(fmt.Sprintf("%s %d", who, n))
	}
}

// readUntil reads lines from f until one equal to last, and returns them
// (without it).
func readUntil(t *testing.T, f *os.File, last string) []string {
	t.Helper()
	var lines []string
	for {
		l := readLine(t, f)
		if l == last {
			return lines
		}
		lines = append(lines, l)
	}
}

// TestSignalMain_OnlyTheMainProcess: SignalMain reaches the task's main
// process, not a kid in its group; Signal reaches both.
func TestSignalMain_OnlyTheMainProcess(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	path, f := fifo(t, dir, "usr1")
	launchSleeper(t, c, m.taskSpec(t, "usr1", path))
	if l := readLine(t, f); l != "main ready" {
		t.Fatalf("task said %q", l)
	}
	if err := c.SignalMain(ctx, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if l := readLine(t, f); l != "main 1" {
		t.Fatalf("after SignalMain the task said %q, want main 1", l)
	}
	if err := c.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{readLine(t, f): true, readLine(t, f): true}
	if _, err := c.Stop(ctx, syscall.SIGKILL, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// Everything of the task is dead: what it said is all in the FIFO.
	fmt.Fprintln(f, "end")
	for _, l := range readUntil(t, f, "end") {
		got[l] = true
	}
	if len(got) != 2 || !got["main 2"] || !got["kid 1"] {
		t.Fatalf("after the group signal the task said %v, want main 2 and kid 1 only (the kid must not have had SignalMain's)", got)
	}
}

// capLines are the Cap* lines of pid's /proc status.
func capLines(t *testing.T, pid int) string {
	t.Helper()
	var b strings.Builder
	for l := range strings.SplitSeq(readFileString(t, "/proc/"+strconv.Itoa(pid)+"/status"), "\n") {
		if strings.HasPrefix(l, "Cap") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestCheckPeer_PlantedListener: a listener planted at the executor's
// socket path by another process is refused before anything is sent to
// it.
func TestCheckPeer_PlantedListener(t *testing.T) {
	m := newMarker(t)
	c := spawn(t, m, "")
	id := c.Identity()
	dir := filepath.Dir(id.Socket)
	// This test process plants its own listener over the executor's.
	if err := os.Remove(id.Socket); err != nil {
		t.Fatal(err)
	}
	sp, dfd, err := wire.ShortPath(id.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sp, Net: "unix"})
	unix.Close(dfd)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(conn) // until the client hangs up
		got <- b
	}()
	_, err = Reattach(testCtx(t), dir, id)
	if !errors.Is(err, wire.ErrPeerNotExecutor) {
		t.Fatalf("Reattach through a planted listener = %v, want ErrPeerNotExecutor", err)
	}
	want := "served by pid " + strconv.Itoa(os.Getpid())
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(id.PID)) {
		t.Errorf("error %q does not name the pid seen (%s) and the executor's", err, want)
	}
	if b := <-got; len(b) != 0 {
		t.Fatalf("the planted listener got %q", b)
	}
}

// TestPeerMatches_Rule: the peer must be the executor's pid and run as the
// caller's uid or root.
func TestPeerMatches_Rule(t *testing.T) {
	for _, tc := range []struct {
		pid     int32
		uid     uint32
		wantPID int
		wantUID uint32
		ok      bool
	}{
		{100, 1000, 100, 1000, true},
		{100, 0, 100, 1000, true},
		{101, 1000, 100, 1000, false},
		{100, 1001, 100, 1000, false},
		{100, 65534, 100, 0, false},
	} {
		err := peerMatches(&unix.Ucred{Pid: tc.pid, Uid: tc.uid}, tc.wantPID, tc.wantUID)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, wire.ErrPeerNotExecutor) {
			t.Errorf("peer pid %d uid %d, want pid %d uid %d: %v", tc.pid, tc.uid, tc.wantPID, tc.wantUID, err)
		}
	}
}

// TestRightsReader_FramesClaimTheirDescriptors: descriptors travel with
// the frame that declares them; a frame whose count does not match what
// came is a protocol error, and what came is closed.
func TestRightsReader_FramesClaimTheirDescriptors(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(pair[0]), conn(pair[1])
	defer a.Close()
	defer b.Close()
	r1, w1, _ := os.Pipe()
	defer r1.Close()
	defer w1.Close()
	send := func(req wire.Request, files ...*os.File) {
		t.Helper()
		req.FDs = len(files)
		if err := wire.WriteFrameFDs(a, req, files); err != nil {
			t.Fatal(err)
		}
	}
	rd := wire.NewRightsReader(b)
	recv := func(want int) ([]*os.File, error) {
		t.Helper()
		var req wire.Request
		if err := wire.ReadFrame(rd, &req); err != nil {
			t.Fatal(err)
		}
		if want < 0 {
			want = req.FDs
		}
		return rd.Take(want)
	}
	send(wire.Request{ID: 1, Op: wire.OpStatus})
	send(wire.Request{ID: 2, Op: wire.OpExec}, r1, w1)
	send(wire.Request{ID: 3, Op: wire.OpStatus})
	if fs, err := recv(-1); err != nil || len(fs) != 0 {
		t.Fatalf("frame 1: %v %v", fs, err)
	}
	fs, err := recv(-1)
	if err != nil || len(fs) != 2 {
		t.Fatalf("frame 2: %v %v", fs, err)
	}
	// The received pipe ends work: what is written through one copy is
	// read through the other.
	if _, err := fs[1].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := r1.Read(one); err != nil || one[0] != 'x' {
		t.Fatalf("through the received descriptor: %q %v", one, err)
	}
	wire.CloseFiles(fs)
	if fs, err := recv(-1); err != nil || len(fs) != 0 {
		t.Fatalf("frame 3: %v %v", fs, err)
	}
	// Descriptors a frame does not declare are refused and closed.
	send(wire.Request{ID: 4, Op: wire.OpStatus}, r1)
	if _, err := recv(0); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("undeclared descriptors: %v, want ErrProtocol", err)
	}
}

// BenchmarkExec_True: one Exec of /bin/true into a running task, to its
// exit status (the join shim, the command, the reap), raw_exec and exec.
func BenchmarkExec_True(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("exec tasks need root")
	}
	for _, mode := range []string{wire.ModeRawExec, wire.ModeExec} {
		b.Run(mode, func(b *testing.B) {
			m := marker("tetherbench" + randHex(b, 6))
			dir := filepath.Join(b.TempDir(), "task")
			ctx := context.Background()
			c, err := Spawn(ctx, SpawnConfig{Command: m.executorCmd(b), TaskDir: dir, Nonce: randHex(b, 12)})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				_ = c.Shutdown(ctx)
				c.Close()
			}()
			spec := m.taskSpec(b, "sleep")
			if mode == wire.ModeExec {
				spec = m.execSpec(b, "sleep")
			}
			if _, err := c.Launch(ctx, spec); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"/bin/true"}})
				if err != nil {
					b.Fatal(err)
				}
				if x, err := p.Wait(ctx); err != nil || x.Code != 0 {
					b.Fatalf("Wait = %+v %v", x, err)
				}
			}
		})
	}
}

// TestExec_StdinEndsWithTheCallersInput: a command that reads its stdin to
// the end (cat) gets the caller's whole input and then its end, exits, and
// its output reaches the caller whole: the relay closes the command's
// stdin once the caller's input ends.
func TestExec_StdinEndsWithTheCallersInput(t *testing.T) {
	needCgroups(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	launchSleeper(t, c, m.taskSpec(t, "sleep"))
	in := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16*3) // 192 KiB: more than a pipe holds
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	var out lockedBuffer
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"cat"}, Stdin: bytes.NewReader(in), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	x, err := p.Wait(ctx)
	if err != nil || x.Code != 0 {
		t.Fatalf("Wait of cat = %+v, %v: its stdin never ended?", x, err)
	}
	if got := out.String(); got != string(in) {
		t.Errorf("cat printed %d bytes, want the %d of its input", len(got), len(in))
	}
}
