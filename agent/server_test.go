package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The client answers as the driver does in-process: the same states, the
// same events, the same error texts and identities.
func TestClient_AnswersAsTheDriverInProcess(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	a := openAgent(t, Config{StateDir: state})
	c := serveAgent(t, a)
	local := &Local{D: a.d, Store: a.st}

	spec := sleeper("web", state)
	started, err := c.StartTask(ctx, "web-1", spec)
	if err != nil || started.State != fsm.StateRunning {
		t.Fatalf("StartTask through the agent = %s, %v", started.State, err)
	}
	remote, err := c.InspectTask(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	in, err := local.InspectTask(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(remote, in) || !remote.ExecutorAlive {
		t.Fatalf("InspectTask through the agent:\n%+v\nin-process:\n%+v", remote, in)
	}
	revs, _ := c.TaskEvents(ctx, "web-1")
	levs, _ := local.TaskEvents(ctx, "web-1")
	if !reflect.DeepEqual(revs, levs) || len(revs) == 0 {
		t.Fatalf("TaskEvents differ:\n%v\n%v", revs, levs)
	}
	rscan, _ := c.LoadTasks(ctx, store.LiveTasks)
	lscan, _ := local.LoadTasks(ctx, store.LiveTasks)
	if !reflect.DeepEqual(rscan, lscan) || len(rscan.Tasks) != 1 {
		t.Fatalf("LoadTasks differ:\n%+v\n%+v", rscan, lscan)
	}
	for _, op := range []func(Service) error{
		func(s Service) error { _, err := s.InspectTask(ctx, "nope"); return err },
		func(s Service) error { _, err := s.StartTask(ctx, "web-1", spec); return err },
		func(s Service) error { return s.SignalTask(ctx, "nope", syscall.SIGHUP, false) },
		func(s Service) error { _, err := s.StopTask(ctx, "../x", 0, 0); return err },
	} {
		rerr, lerr := op(c), op(local)
		if rerr == nil || lerr == nil || rerr.Error() != lerr.Error() {
			t.Errorf("error through the agent %q, in-process %q", rerr, lerr)
		}
		for _, target := range []error{driver.ErrUnknownTask, driver.ErrTaskExists, driver.ErrInvalidTaskID, driver.ErrNotRunning} {
			if errors.Is(lerr, target) != errors.Is(rerr, target) {
				t.Errorf("%q: errors.Is(%v) is %v in-process, %v through the agent", rerr, target, errors.Is(lerr, target), errors.Is(rerr, target))
			}
		}
		var te *driver.TaskError
		if errors.As(lerr, &te) != errors.As(rerr, &te) {
			t.Errorf("%q: a *driver.TaskError in-process, not through the agent (or the other way)", rerr)
		}
	}
	var states []fsm.State
	following := make(chan struct{})
	followed := make(chan fsm.Task, 1)
	go func() {
		final, err := c.FollowTask(ctx, "web-1", func(st fsm.Task) {
			if states = append(states, st.State); len(states) == 1 {
				close(following)
			}
		})
		if err != nil {
			t.Error(err)
		}
		followed <- final
	}()
	<-following
	stopped, err := c.StopTask(ctx, "web-1", syscall.SIGTERM, time.Second)
	if err != nil || stopped.State != fsm.StateStopped {
		t.Fatalf("StopTask through the agent = %s, %v", stopped.State, err)
	}
	if final := <-followed; final.State != fsm.StateStopped || len(states) == 0 || states[0] != fsm.StateRunning {
		t.Fatalf("FollowTask through the agent: %v then %s; want running first, stopped at the end", states, final.State)
	}
	if rep, err := c.Check(ctx); err != nil || !rep.OK() || rep.Tasks != 1 {
		t.Fatalf("Check through the agent = %s, %v", rep, err)
	}
}

// A request cannot widen the operator's allow list: the agent's applies.
func TestAgent_AllowListAppliesToEveryRequest(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	c := serveAgent(t, openAgent(t, Config{StateDir: state, AllowedCaps: []string{"chown"}}))
	spec := sleeper("raw", state)
	spec.Driver, spec.CapAdd = "exec", []string{"net_raw"}
	st, err := c.StartTask(ctx, "raw-1", spec)
	if !errors.Is(err, driver.ErrInvalidSpec) || !strings.Contains(err.Error(), "net_raw") || st.State != fsm.StateFailed || st.Nonce != "" {
		t.Fatalf("StartTask of cap_add net_raw with an allow list of chown = %s (nonce %q), %v; want refused before any spawn", st.State, st.Nonce, err)
	}
}

func TestAgent_SecondAgentFailsAtOnceNamingTheFirstsPID(t *testing.T) {
	state := stateDir(t)
	p := startAgentProc(t, state)
	_, err := Open(Config{StateDir: state, ExecutorCommand: []string{os.Args[0], modeExecutor}})
	var re *RunningError
	if !errors.As(err, &re) || !errors.Is(err, ErrAgentRunning) || re.PID != p.cmd.Process.Pid ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(p.cmd.Process.Pid)) {
		t.Fatalf("a second agent: %v; want a RunningError naming pid %d", err, p.cmd.Process.Pid)
	}
}

func TestAgent_KilledAgentsSocketIsNoAgentThenRemoved(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	p := startAgentProc(t, state)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	if fi, err := os.Lstat(SocketPath(state)); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the killed agent's socket: %v, %v; want it left behind", fi, err)
	}
	if _, err := Dial(ctx, state, DialOptions{}); !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), "killed agent") {
		t.Fatalf("Dial of a dead socket = %v; want ErrNoAgent at once", err)
	}
	var logs bytes.Buffer
	a := openAgent(t, Config{StateDir: state, Logger: hclog.New(&hclog.LoggerOptions{Output: &syncWriter{w: &logs}, Level: hclog.Info})})
	c := serveAgent(t, a)
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "removed the socket a killed agent left") {
		t.Fatalf("log: %s", logs.String())
	}
	if fi, err := os.Stat(SocketPath(state)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestClient_NoSocketIsNoAgent(t *testing.T) {
	state := stateDir(t)
	if err := driver.PrepareStateDir(state); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(testCtx(t), state, DialOptions{}); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Dial with no socket = %v; want ErrNoAgent", err)
	}
	if _, err := Dial(testCtx(t), filepath.Join(state, "missing"), DialOptions{}); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("Dial of a missing state dir = %v; want ErrNoAgent", err)
	}
}

// An agent that does not answer (SIGSTOPped) is reported within the
// client's deadline: at the handshake, and in the middle of an answer.
func TestClient_WedgedAgentReportedWithinItsDeadline(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	p := startAgentProc(t, state)
	pid := p.cmd.Process.Pid
	c, err := Dial(ctx, state, DialOptions{Deadline: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.StartTask(ctx, "web-1", sleeper("web", state)); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	_, err = c.FollowTask(ctx, "web-1", func(fsm.Task) {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Error(err)
		}
		close(stopped)
	})
	var we *WedgedError
	if !errors.As(err, &we) || !errors.Is(err, ErrWedged) || we.PID != pid || !strings.Contains(err.Error(), "follow") {
		t.Fatalf("a follow whose agent stopped = %v; want a WedgedError naming pid %d", err, pid)
	}
	<-stopped
	_, err = Dial(ctx, state, DialOptions{Deadline: 200 * time.Millisecond})
	if !errors.As(err, &we) || we.PID != pid || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("Dial of a stopped agent = %v; want a WedgedError at the handshake naming pid %d", err, pid)
	}
	// A context's end is the caller's, not a wedge.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Dial(cctx, state, DialOptions{Deadline: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial with a cancelled context = %v", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c2, err := Dial(ctx, state, DialOptions{})
	if err != nil {
		t.Fatalf("Dial once the agent goes on: %v", err)
	}
	defer c2.Close()
	if _, err := c2.StopTask(ctx, "web-1", 0, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestClient_VersionMismatchNamesBothVersions(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	if err := driver.PrepareStateDir(state); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(state), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an agent of protocol version 99
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readFrame(c, 4096); err == nil {
			_ = writeFrame(c, hello{Magic: protocolMagic, Version: 99, PID: 1})
		}
	}()
	_, err = Dial(ctx, state, DialOptions{})
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Agent != 99 || ve.Client != ProtocolVersion ||
		!strings.Contains(err.Error(), "protocol version 99") || !strings.Contains(err.Error(), "speaks "+strconv.Itoa(ProtocolVersion)) {
		t.Fatalf("Dial of an agent of version 99 = %v; want a VersionError naming both", err)
	}

	// The agent's side: a client of version 99 is answered with both.
	state2 := stateDir(t)
	c := serveAgent(t, openAgent(t, Config{StateDir: state2}))
	defer c.Close()
	conn, err := dial(ctx, state2)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := writeFrame(conn, hello{Magic: protocolMagic, Version: 99}); err != nil {
		t.Fatal(err)
	}
	b, err := readFrame(conn, 4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHello(b)
	if err != nil || h.Version != ProtocolVersion || !strings.Contains(h.Error, "version "+strconv.Itoa(ProtocolVersion)) || !strings.Contains(h.Error, "speaks 99") {
		t.Fatalf("the agent's answer to version 99: %+v, %v", h, err)
	}
}

// countingService counts the requests that reach it; only InspectTask is
// served.
type countingService struct {
	Service
	calls atomic.Int32
}

func (s *countingService) InspectTask(context.Context, string) (driver.TaskInfo, error) {
	s.calls.Add(1)
	return driver.TaskInfo{}, &driver.TaskError{Task: "anything", Err: driver.ErrUnknownTask}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

// A peer of another uid is refused by its credentials, for real: a helper
// process that setuid()s to nobody before dialling. (Its socket is made
// reachable to it here, so that the refusal is the agent's, not the file
// system's: the agent's own socket is 0600 in a 0700 directory.)
func TestServer_RefusesAPeerOfAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test becomes nobody in a helper process (setuid)")
	}
	ctx := testCtx(t)
	dir, err := os.MkdirTemp("", "tp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(SocketPath(dir), 0o666); err != nil {
		t.Fatal(err)
	}
	svc := &countingService{}
	logs := &syncWriter{w: &bytes.Buffer{}}
	srv := NewServer(svc, 0, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	out, _ := exec.CommandContext(ctx, os.Args[0], modeDialAs, "65534", dir).CombinedOutput()
	if !bytes.Contains(out, []byte("peer refused")) || !bytes.Contains(out, []byte("uid 65534 is neither root nor the owner")) {
		t.Fatalf("nobody's dial: %s; want it refused naming its uid", out)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("the refused peer's request reached the service (%d calls)", n)
	}
	if !strings.Contains(logs.String(), "peer refused") || !strings.Contains(logs.String(), "peer_uid=65534") {
		t.Fatalf("agent log: %s", logs.String())
	}
	// Root is served, through the same socket.
	out, _ = exec.CommandContext(ctx, os.Args[0], modeDialAs, "0", dir).CombinedOutput()
	if !bytes.Contains(out, []byte("inspect: task \"anything\": driver: unknown task")) || svc.calls.Load() != 1 {
		t.Fatalf("root's dial: %s (%d calls); want its request served", out, svc.calls.Load())
	}
}

// The desired state, in-process with real executors: enable starts it; a
// task killed behind the agent's back is replaced (a new copy of its
// allocation, written ahead, under its restart policy); a stop on request
// holds; StartDesired starts it again; disable stops it and forgets it.
func TestAgent_EnableKillStopStartDisable(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	c := serveAgent(t, openAgent(t, Config{StateDir: state}))
	text := []byte(taskHCL("web", state, 3, ""))
	e, err := c.Enable(ctx, EnableRequest{File: "web.hcl", Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "web" || e.Source != store.SourceEnabled || !filepath.IsAbs(e.File) || e.Task == "" || e.Origin != "enable" {
		t.Fatalf("Enable = %+v", e)
	}
	first := awaitEntry(t, c, "web", func(e Entry) bool { return e.State == fsm.StateRunning && !e.Pending })
	info, err := c.InspectTask(ctx, first.Task)
	if err != nil {
		t.Fatal(err)
	}
	// Its executor and task are SIGKILLed behind the agent's back.
	if err := proc.Kill(ctx, *info.Executor); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	second := awaitEntry(t, c, "web", func(e Entry) bool { return e.Task != first.Task && e.State == fsm.StateRunning })
	if second.Restarts != 1 || second.Standing != StandingRunning {
		t.Fatalf("after a kill: %+v; want restart 1, running", second)
	}
	if old, err := c.InspectTask(ctx, first.Task); err != nil || old.State != fsm.StateLost {
		t.Fatalf("the killed task: %s, %v; want lost", old.State, err)
	}
	if evs, err := c.TaskEvents(ctx, second.Task); err != nil || evs[0].Replaces != first.Task {
		t.Fatalf("the new copy's task-created names %q as the task it replaces, want %s (%v)", evs[0].Replaces, first.Task, err)
	}
	// tether stop of a desired entry's task holds it.
	if _, err := c.StopGroup(ctx, []string{second.Task}, 0, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	held := awaitEntry(t, c, "web", func(e Entry) bool { return e.Standing == StandingStopped && !e.Pending })
	if held.Task != second.Task || held.State != fsm.StateStopped || !strings.Contains(held.Reason, "stopped on request") {
		t.Fatalf("after a stop: %+v; want held on its stopped task", held)
	}
	again, err := c.StartDesired(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	third := awaitEntry(t, c, "web", func(e Entry) bool { return e.Task == again.Task && e.State == fsm.StateRunning })
	if third.Standing != StandingRunning || third.Task == second.Task || third.Restarts != 0 {
		t.Fatalf("started again: %+v", third)
	}
	if _, err := c.Disable(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, c, func(s Status) bool { _, ok := s.Entry("web"); return !ok })
	if st, err := c.InspectTask(ctx, third.Task); err != nil || st.State != fsm.StateStopped {
		t.Fatalf("after disable: %s, %v; want stopped", st.State, err)
	}
	if _, err := c.Disable(ctx, "web"); !errors.Is(err, ErrUnknownDesired) {
		t.Fatalf("disable of an unknown name = %v", err)
	}
	// A file the agent cannot run is refused by name, nothing recorded.
	bad := []byte(taskHCL("bad", state, 3, "template {\n source = \"/etc/hostname\"\n destination = \"local/h\"\n}"))
	if _, err := c.Enable(ctx, EnableRequest{File: "bad.hcl", Text: bad}); !errors.Is(err, job.ErrNotAllowed) || !strings.Contains(err.Error(), "--allow-read") {
		t.Fatalf("enable of a file reading outside --allow-read = %v", err)
	}
	if st, _ := c.Status(ctx); len(st.Entries) != 0 {
		t.Fatalf("a refused enable left %+v", st.Entries)
	}
	testproc.CheckGone(t, state, 10*time.Second)
}

func awaitStatus(t *testing.T, c *Client, done func(Status) bool) Status {
	t.Helper()
	var last Status
	if err := c.WatchStatus(testCtx(t), func(s Status) bool { last = s; return done(s) }); err != nil {
		t.Fatalf("waiting for the agent: %v; last status %+v", err, last)
	}
	return last
}

func awaitEntry(t *testing.T, c *Client, name string, done func(Entry) bool) Entry {
	t.Helper()
	s := awaitStatus(t, c, func(s Status) bool { e, ok := s.Entry(name); return ok && done(e) })
	e, _ := s.Entry(name)
	return e
}

// The config dir, watched: a file added starts its tasks, a changed one
// replaces its task (stop, then start), a removed one stops it.
func TestAgent_ConfigDirFilesStartReplaceAndStop(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	dir := configDir(t)
	c := serveAgent(t, openAgent(t, Config{StateDir: state, ConfigDir: dir}))
	writeTaskFile(t, filepath.Join(dir, "web.hcl"), taskHCL("web", state, 3, ""))
	first := awaitEntry(t, c, "web", func(e Entry) bool { return e.State == fsm.StateRunning && !e.Pending })
	writeTaskFile(t, filepath.Join(dir, "web.hcl"), taskHCL("web", state, 3, `env { VERSION = "2" }`))
	second := awaitEntry(t, c, "web", func(e Entry) bool { return e.Task != first.Task && e.State == fsm.StateRunning })
	if old, err := c.InspectTask(ctx, first.Task); err != nil || old.State != fsm.StateStopped {
		t.Fatalf("the replaced task: %s, %v; want stopped", old.State, err)
	}
	if now, err := c.InspectTask(ctx, second.Task); err != nil || now.Spec.Env["VERSION"] != "2" {
		t.Fatalf("the replacement runs %+v, %v; want the changed spec", now.Spec, err)
	}
	if err := os.Remove(filepath.Join(dir, "web.hcl")); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, c, func(s Status) bool { _, ok := s.Entry("web"); return !ok && s.Converged })
	if st, err := c.InspectTask(ctx, second.Task); err != nil || st.State != fsm.StateStopped {
		t.Fatalf("after its file went: %s, %v; want stopped", st.State, err)
	}
	// A refused file is reported, and starts nothing. (It is made aside,
	// hidden, and renamed in: the agent never sees it safe.)
	tmp := filepath.Join(dir, ".shared.tmp")
	writeTaskFile(t, tmp, taskHCL("shared", state, 3, ""))
	if err := os.Chmod(tmp, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "shared.hcl")); err != nil {
		t.Fatal(err)
	}
	s := awaitStatus(t, c, func(s Status) bool { return len(s.Problems) == 1 && strings.Contains(s.Problems[0], "mode 0666") })
	if !strings.Contains(s.Problems[0], "shared.hcl") || len(s.Entries) != 1 || s.Entries[0].Standing != StandingRefused || s.Entries[0].Task != "" {
		t.Fatalf("status with a world-writable file: %+v", s)
	}
}

// A state directory whose socket path is longer than a sockaddr_un holds is
// served and dialled through its directory's descriptor.
func TestAgent_LongStateDirPath(t *testing.T) {
	state := filepath.Join(stateDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if len(SocketPath(state)) <= 108 {
		t.Fatalf("path of %d bytes: not long enough", len(SocketPath(state)))
	}
	c := serveAgent(t, openAgent(t, Config{StateDir: state}))
	if _, err := c.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(SocketPath(state)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, %v", fi, err)
	}
}

// A client whose idle connection the agent has closed meanwhile (the agent
// waits a while for a first request, not for ever: a command that dials,
// then works on its own for longer) sends its request on a new connection:
// the request was never read, so nothing is done twice.
func TestClient_IdleConnectionClosedByTheAgentIsReplaced(t *testing.T) {
	ctx := testCtx(t)
	state := stateDir(t)
	a := openAgent(t, Config{StateDir: state})
	c := serveAgent(t, a)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Close(fds[1]) // the agent's end, closed
	f := os.NewFile(uintptr(fds[0]), "closed-by-agent")
	fc, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	if c.idle != nil {
		_ = c.idle.Close()
	}
	c.idle = fc.(*net.UnixConn)
	c.mu.Unlock()
	if _, err := c.StartTask(ctx, "web-1", sleeper("web", state)); err != nil {
		t.Fatalf("StartTask on a client whose idle connection was closed: %v", err)
	}
	if _, err := c.StopTask(ctx, "web-1", syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
}
