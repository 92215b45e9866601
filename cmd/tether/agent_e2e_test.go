package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/store"
)

// The agent end to end: the tether binary as `tether agent`, its executors
// and the test binary's helper tasks, real processes all; the test talks to
// the agent through agent.Dial, as the CLI does.

// lockedBuffer is a buffer written by a process's output copier and read
// by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// agentRun is a `tether agent` process.
type agentRun struct {
	e      *env
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
	notify *net.UnixConn // its NOTIFY_SOCKET
	err    error         // its Wait's, once exited is closed
	// stopped: stop was called (a second call checks nothing).
	stopped bool
}

// startAgent starts `tether agent` with args and extra environment. With
// wait, it returns once the agent has said READY=1 on its NOTIFY_SOCKET
// (as systemd's Type=notify waits for).
func (e *env) startAgent(extra []string, wait bool, args ...string) *agentRun {
	e.t.Helper()
	return e.runAgent(e.command(context.Background(), extra, append([]string{"agent"}, args...)...), wait)
}

// serveAgent starts the agent that serves a test's commands when the
// suite runs through one (newEnv). Its state directory is given relative
// to its working directory, so that the scans for what a test left
// running (which look for the state directory in command lines and
// environments) see its executors and tasks, not it: it is stopped at
// cleanup, and checked to exit 0.
func (e *env) serveAgent() *agentRun {
	e.t.Helper()
	cmd := e.command(context.Background(), nil, "agent")
	cmd.Args = []string{tetherBin, "--state-dir", filepath.Base(e.dir), "agent"}
	cmd.Dir = filepath.Dir(e.dir)
	a := e.runAgent(cmd, true)
	e.t.Cleanup(a.stop)
	return a
}

// policy gives the agent serving the test's commands the operator's
// global flags (--allow-caps, --chroot-env): a command through an agent
// may not give other lists than the agent's, so a test that gives them
// gives them to the agent too (it is stopped and started again with
// them). Daemonless, it does nothing: each command gives its own.
func (e *env) policy(flags ...string) {
	e.t.Helper()
	e.restartAgent(nil, flags...)
}

// restartAgent starts the agent serving the test's commands again, with
// extra environment and global flags (when the suite runs through one).
func (e *env) restartAgent(extra []string, flags ...string) {
	e.t.Helper()
	if e.agent == nil {
		return
	}
	e.agent.stop()
	cmd := e.command(context.Background(), extra, "agent")
	cmd.Args = append(append([]string{tetherBin, "--state-dir", filepath.Base(e.dir)}, flags...), "agent")
	cmd.Dir = filepath.Dir(e.dir)
	e.agent = e.runAgent(cmd, true)
	e.t.Cleanup(e.agent.stop)
}

// offline runs fn with no agent serving the state directory: a test that
// changes the store's file itself (as a bad sector or another program
// would) must not do it under an agent that holds the file open. The
// suite's agent is stopped first and started again after; an agent that
// then refuses the store (it is no store any more) exits, and the test's
// commands run daemonless, as they would on such a host.
func (e *env) offline(fn func()) {
	e.t.Helper()
	if e.agent == nil {
		fn()
		return
	}
	e.agent.stop()
	fn()
	cmd := e.command(context.Background(), nil, "agent")
	cmd.Args = []string{tetherBin, "--state-dir", filepath.Base(e.dir), "agent"}
	cmd.Dir = filepath.Dir(e.dir)
	a := e.runAgent(cmd, false)
	if !a.ready() {
		e.t.Logf("the agent did not serve the changed store (%v); the test's commands run daemonless:\n%s", a.err, a.logs)
		e.agent = nil
		return
	}
	e.agent = a
	e.t.Cleanup(a.stop)
}

func (e *env) runAgent(cmd *exec.Cmd, wait bool) *agentRun {
	e.t.Helper()
	ndir, err := os.MkdirTemp("", "tn")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { os.RemoveAll(ndir) })
	nsock := filepath.Join(ndir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		e.t.Fatal(err)
	}
	a := &agentRun{e: e, logs: &lockedBuffer{}, exited: make(chan struct{}), notify: notify}
	e.t.Cleanup(func() { notify.Close() })
	a.cmd = cmd
	a.cmd.Env = append(a.cmd.Env, "NOTIFY_SOCKET="+nsock)
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	e.t.Cleanup(a.kill)
	if wait && !a.ready() {
		e.t.Fatalf("the agent did not say READY=1 (%v)\nlogs:\n%s", a.err, a.logs)
	}
	return a
}

// ready waits until the agent has said READY=1 on its NOTIFY_SOCKET (as
// systemd's Type=notify waits for), or has exited (false).
func (a *agentRun) ready() bool {
	a.e.t.Helper()
	got := make(chan string, 1)
	go func() {
		_ = a.notify.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 512)
		n, _ := a.notify.Read(buf)
		got <- string(buf[:n])
	}()
	select {
	case msg := <-got:
		if !strings.Contains(msg, "READY=1") || !strings.Contains(msg, "MAINPID="+strconv.Itoa(a.cmd.Process.Pid)) {
			a.e.t.Fatalf("agent's notification: %q\nlogs:\n%s", msg, a.logs)
		}
		return true
	case <-a.exited:
		_ = a.notify.SetReadDeadline(time.Now())
		return false
	}
}

func (a *agentRun) pid() int { return a.cmd.Process.Pid }

// kill SIGKILLs the agent (its tasks keep running) and waits for it.
func (a *agentRun) kill() {
	_ = a.cmd.Process.Signal(syscall.SIGCONT)
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// term stops the agent as systemd would (SIGTERM) and checks it exits 0.
func (a *agentRun) term() {
	a.e.t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		a.e.t.Fatal(err)
	}
	<-a.exited
	if a.err != nil {
		a.e.t.Fatalf("agent on SIGTERM: %v\n%s", a.err, a.logs)
	}
}

// stop ends the agent that served a test's commands: an agent that died
// during the test fails it; else SIGTERM, and it must exit 0. Its logs
// are shown when the test failed.
func (a *agentRun) stop() {
	t := a.e.t
	t.Helper()
	select {
	case <-a.exited:
		if !a.stopped {
			t.Errorf("the agent serving the test exited during it: %v\n%s", a.err, a.logs)
		}
		return
	default:
	}
	a.stopped = true
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	if a.err != nil {
		t.Errorf("agent on SIGTERM: %v", a.err)
	}
	// A detached tether drive-group is the agent's client while the agent
	// drives its group: its request ends with the agent (or with the
	// group, just before), and it exits then. Daemonless, a stop of the
	// group waits for that process; through an agent the group's lock
	// names the agent, so the leak check waits for it here.
	for _, p := range testproc.Marked(a.e.dir) {
		if slices.Contains(p.Args, "drive-group") {
			waitExit(t, p.PID)
		}
	}
	if t.Failed() {
		t.Logf("the agent's logs:\n%s", a.logs)
	}
}

// crashed waits for the agent to die of SIGKILL (a crash point).
func (a *agentRun) crashed() {
	a.e.t.Helper()
	select {
	case <-a.exited:
	case <-time.After(2 * time.Minute):
		a.e.t.Fatalf("the agent did not reach its crash point\n%s", a.logs)
	}
	var ee *exec.ExitError
	if !errors.As(a.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		a.e.t.Fatalf("the agent ended with %v, not at its crash point\n%s", a.err, a.logs)
	}
}

// client dials the agent of the test's state directory.
func (e *env) client() *agent.Client {
	e.t.Helper()
	c, err := agent.Dial(context.Background(), e.dir, agent.DialOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// await watches the agent's status until done; it fails the test after a
// minute (the agent has nothing to wait for that long in these tests).
func await(t *testing.T, c *agent.Client, what string, done func(agent.Status) bool) agent.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last agent.Status
	if err := c.WatchStatus(ctx, func(s agent.Status) bool { last = s; return done(s) }); err != nil {
		t.Fatalf("waiting for %s: %v; last status:\n%+v", what, err, last)
	}
	return last
}

func awaitEntry(t *testing.T, c *agent.Client, name, what string, done func(agent.Entry) bool) agent.Entry {
	t.Helper()
	s := await(t, c, name+" "+what, func(s agent.Status) bool { e, ok := s.Entry(name); return ok && done(e) })
	e, _ := s.Entry(name)
	return e
}

func running(e agent.Entry) bool { return e.State == fsm.StateRunning && !e.Pending }

// serviceFile is a task file of a service that sleeps until killed
// (helper "sleep", its name in its arguments), restarted at once by its
// policy (attempts; 0: never).
func (e *env) serviceFile(dir, name string, attempts int, extra string) string {
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	return writeFile(e.t, dir, name+".hcl", fmt.Sprintf(`task %q {
  driver = "raw_exec"
  config {
    command = %q
    args    = [%q, "sleep", %q, %q]
  }
  %s
  restart {
    attempts = %d
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }
}
`, name, self, helperArg, name, e.dir, extra, attempts))
}

// configDir makes the test's config dir (0755, owned by the test's user).
func (e *env) configDir() string {
	e.t.Helper()
	dir := filepath.Join(e.t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// serviceProcs are the live helper tasks of the named service.
func (e *env) serviceProcs(name string) []testproc.Proc {
	var out []testproc.Proc
	for _, p := range testproc.Marked(e.dir) {
		if len(p.Args) > 3 && p.Args[1] == helperArg && p.Args[2] == "sleep" && p.Args[3] == name {
			out = append(out, p)
		}
	}
	return out
}

// stopEverything stops, daemonless, every live task of the state
// directory once its agents are gone (tasks outlive agents by design).
func (e *env) stopEverything() {
	e.t.Helper()
	for _, ts := range e.status() {
		if ts.ID == "" {
			continue // a desired entry's row
		}
		if r := e.tether("stop", "--timeout", "1s", ts.ID); r.code != 0 {
			e.t.Errorf("stop %s: %s", ts.ID, r)
		}
	}
}

// newAgentEnv is newEnv whose cleanup kills its agents and then stops
// their tasks, before the leak check.
func newAgentEnv(t *testing.T) *env {
	e := newDaemonlessEnv(t, "it starts and kills its own agents")
	t.Cleanup(e.stopEverything) // runs after the agents' kills (registered later), before the leak check
	return e
}

func TestAgent_ServiceComesBackAfterItsExecutorAndTaskAreKilled(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	info, err := c.InspectTask(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	if procs := e.serviceProcs("svc"); len(procs) != 1 || procs[0].PID != info.TaskPID {
		t.Fatalf("svc's processes: %v; want its task %d alone", procs, info.TaskPID)
	}
	_ = syscall.Kill(info.Executor.PID, syscall.SIGKILL)
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	second := awaitEntry(t, c, "svc", "back", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	if old, err := c.InspectTask(context.Background(), first.Task); err != nil || old.State != fsm.StateLost {
		t.Fatalf("the killed task: %s, %v; want lost", old.State, err)
	}
	if second.Restarts != 1 || !strings.Contains(second.Reason, "restart 1 of 3") {
		t.Fatalf("svc after the kill: %+v; want restart 1 of 3", second)
	}
	if procs := e.serviceProcs("svc"); len(procs) != 1 {
		t.Fatalf("svc's processes after its restart: %v; want one", procs)
	}
}

// A power cut: agent, executor and task all SIGKILLed at once. A new agent
// records the old task lost, then brings the service back, once.
func TestAgent_PowerCutNewAgentBringsItBackOldTaskLost(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	a := e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	info, err := c.InspectTask(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, pid := range []int{a.pid(), info.Executor.PID, info.TaskPID} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	<-a.exited
	testproc.CheckGone(t, first.Task, 10*time.Second) // its executor (marked by its task directory) is gone
	b := e.startAgent(nil, true, "--config-dir", dir)
	c = e.client()
	second := awaitEntry(t, c, "svc", "back", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	old, err := c.InspectTask(context.Background(), first.Task)
	if err != nil || old.State != fsm.StateLost {
		t.Fatalf("the task the power cut took: %s, %v; want lost", old.State, err)
	}
	evs, _ := c.TaskEvents(context.Background(), second.Task)
	if len(evs) == 0 || evs[0].Time < old.UpdatedAt {
		t.Fatalf("the new task was created before the old one was recorded lost")
	}
	if procs := e.serviceProcs("svc"); len(procs) != 1 {
		t.Fatalf("svc's processes: %v; want exactly one", procs)
	}
	if !strings.Contains(b.logs.String(), "removed the socket a killed agent left") {
		t.Errorf("the new agent's log does not say it removed the old socket:\n%s", b.logs)
	}
}

func TestAgent_FileChangedReplacesRemovedStops(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	e.serviceFile(dir, "svc", 3, `env { VERSION = "2" }`)
	second := awaitEntry(t, c, "svc", "replaced", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	for id, want := range map[string]fsm.State{first.Task: fsm.StateStopped, second.Task: fsm.StateRunning} {
		info, err := c.InspectTask(context.Background(), id)
		if err != nil || info.State != want {
			t.Fatalf("task %s: %s, %v; want %s", id, info.State, err, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "svc.hcl")); err != nil {
		t.Fatal(err)
	}
	await(t, c, "svc gone", func(s agent.Status) bool { _, ok := s.Entry("svc"); return !ok && s.Converged })
	if info, err := c.InspectTask(context.Background(), second.Task); err != nil || info.State != fsm.StateStopped {
		t.Fatalf("after its file went: %s, %v; want stopped", info.State, err)
	}
	if procs := e.serviceProcs("svc"); len(procs) != 0 {
		t.Fatalf("svc's processes after its file went: %v", procs)
	}
}

// A task file that is a symbolic link within the config dir, to a file in
// a subdirectory that inotify on the config dir does not see: SIGHUP reads
// it again.
func TestAgent_SIGHUPReadsTheConfigDirAgain(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	sub := filepath.Join(dir, "real")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	real := e.serviceFile(sub, "svc", 3, "")
	if err := os.Symlink("real/svc.hcl", filepath.Join(dir, "svc.hcl")); err != nil {
		t.Fatal(err)
	}
	a := e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	e.serviceFile(sub, "svc", 3, `env { VERSION = "2" }`)
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	second := awaitEntry(t, c, "svc", "replaced", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	if info, err := c.InspectTask(context.Background(), second.Task); err != nil || info.Spec.Env["VERSION"] != "2" {
		t.Fatalf("after SIGHUP: %+v, %v; want the changed spec of %s", info.Spec, err, real)
	}
}

// tether enable and disable, with an agent and without one.
func TestAgent_EnableAndDisable(t *testing.T) {
	e := newAgentEnv(t)
	files := e.configDir()
	file := e.serviceFile(files, "svc", 3, "")

	// Daemonless: recorded, started by the next agent.
	r := e.must("enable", file)
	if r.stdout != "enabled svc\n" || !strings.Contains(r.stderr, "no agent serves") {
		t.Fatalf("enable without an agent: %s", r)
	}
	if procs := e.serviceProcs("svc"); len(procs) != 0 {
		t.Fatalf("enable without an agent started %v", procs)
	}
	e.startAgent(nil, true)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	if first.Source != store.SourceEnabled || first.File != file {
		t.Fatalf("entry: %+v", first)
	}
	// Through the agent: a second task file, enabled from another working directory.
	other := e.serviceFile(files, "other", 3, "")
	cmd := e.command(context.Background(), nil, "enable", filepath.Base(other))
	cmd.Dir = files
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "enabled other\n") || !strings.Contains(string(out), "running") {
		t.Fatalf("enable through the agent: %v\n%s", err, out)
	}
	if en, _ := await(t, c, "other", func(agent.Status) bool { return true }).Entry("other"); en.File != other || !running(en) {
		t.Fatalf("other: %+v; want running from %s", en, other)
	}
	r = e.must("disable", "svc")
	if r.stdout != "disabled svc\n" {
		t.Fatalf("disable: %s", r)
	}
	if info, err := c.InspectTask(context.Background(), first.Task); err != nil || info.State != fsm.StateStopped {
		t.Fatalf("after disable: %s, %v; want stopped", info.State, err)
	}
	if _, ok := await(t, c, "", func(agent.Status) bool { return true }).Entry("svc"); ok {
		t.Fatalf("svc still desired after disable")
	}
	r = e.tether("disable", "svc")
	if r.code != exitError || !strings.Contains(r.stderr, "no desired task has that name") {
		t.Fatalf("disable of an unknown name: %s", r)
	}
}

func TestAgent_SecondAgentRefusedNamingTheFirst(t *testing.T) {
	e := newAgentEnv(t)
	a := e.startAgent(nil, true)
	r := e.tether("agent")
	if r.code != exitError || !strings.Contains(r.stderr, fmt.Sprintf("another agent (pid %d) serves %s", a.pid(), e.dir)) {
		t.Fatalf("a second agent: %s", r)
	}
}

// A stopped (SIGSTOP) agent is reported by the CLI within the client's
// deadline, naming its pid, not waited on.
func TestAgent_WedgedAgentReportedByTheCLI(t *testing.T) {
	e := newAgentEnv(t)
	files := e.configDir()
	file := e.serviceFile(files, "svc", 3, "")
	a := e.startAgent(nil, true)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r := e.tether("enable", file)
	if r.code != exitError || !strings.Contains(r.stderr, fmt.Sprintf("the agent (pid %d)", a.pid())) || !strings.Contains(r.stderr, "did not answer within") {
		t.Fatalf("enable with a stopped agent: %s", r)
	}
}

// SIGTERM stops the agent and nothing else; --once adopts what runs.
func TestAgent_TermStopsNothingOnceAdopts(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	r := e.must("agent", "--once", "--config-dir", dir)
	if procs := e.serviceProcs("svc"); len(procs) != 1 {
		t.Fatalf("after agent --once: %v; want svc running\n%s", procs, r)
	}
	a := e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	c.Close()
	a.term()
	if _, err := os.Lstat(agent.SocketPath(e.dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after SIGTERM: %v; want it removed", err)
	}
	if procs := e.serviceProcs("svc"); len(procs) != 1 {
		t.Fatalf("after the agent's SIGTERM: %v; want svc still running", procs)
	}
	e.must("agent", "--once", "--config-dir", dir)
	e.startAgent(nil, true, "--config-dir", dir)
	c = e.client()
	if again := awaitEntry(t, c, "svc", "running", running); again.Task != first.Task {
		t.Fatalf("svc after two agents: task %s, was %s; want it adopted, not restarted", again.Task, first.Task)
	}
}

// With restarts and reschedules both none (reschedule { attempts = 0
// unlimited = false }), a service whose executor is lost stays down, its
// reason shown.
func TestAgent_PolicyGivesUpStaysDown(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 0, "reschedule {\n    attempts  = 0\n    unlimited = false\n  }")
	e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	info, err := c.InspectTask(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(info.Executor.PID, syscall.SIGKILL)
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	en := awaitEntry(t, c, "svc", "down", func(en agent.Entry) bool { return en.Standing == agent.StandingDown })
	if en.Task != first.Task || en.State != fsm.StateLost || !strings.Contains(en.Reason, "allows no restarts") ||
		!strings.Contains(en.Reason, "allows no reschedule") || en.Since.IsZero() {
		t.Fatalf("svc: %+v; want down on its lost task with the policies' reasons", en)
	}
}

// The crash-point test: a real agent SIGKILLed at each of its durable
// steps (and at the driver's, hit in its process), then a new agent: every
// desired task runs exactly once, every other task is terminal, the store
// is clean.
func TestAgent_CrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the crash-point test starts about 80 agents")
	}
	type step func(e *env, dir string, c *agent.Client)
	type crashCase struct {
		point string
		// prep runs a clean agent to convergence, then stops it (SIGTERM)
		// and does what the case needs behind its back.
		prep func(e *env, dir string)
		// during asks the crash-armed agent for something (nil: the agent
		// crashes on its own).
		during step
		// want says, per name, "running" (one process) or "gone" (none).
		want map[string]string
	}
	twoServices := func(e *env, dir string) {
		e.serviceFile(dir, "a", 3, "")
		e.serviceFile(dir, "b", 3, "")
	}
	converged := func(e *env, dir string) *agentRun {
		a := e.startAgent(nil, true, "--config-dir", dir)
		c := e.client()
		await(e.t, c, "convergence", func(s agent.Status) bool { return s.Converged && len(s.Entries) > 0 })
		c.Close()
		return a
	}
	killTask := func(e *env, name string) {
		procs := e.serviceProcs(name)
		if len(procs) != 1 {
			e.t.Fatalf("%s: %v", name, procs)
		}
		ppid := parentOf(procs[0].PID)
		_ = syscall.Kill(ppid, syscall.SIGKILL)
		_ = syscall.Kill(procs[0].PID, syscall.SIGKILL)
	}
	prepBoot := twoServices
	prepLost := func(e *env, dir string) {
		twoServices(e, dir)
		converged(e, dir).term()
		killTask(e, "a")
	}
	prepReplace := func(e *env, dir string) {
		twoServices(e, dir)
		converged(e, dir).term()
		e.serviceFile(dir, "a", 3, `env { VERSION = "2" }`)
	}
	prepRemove := func(e *env, dir string) {
		twoServices(e, dir)
		converged(e, dir).term()
		if err := os.Remove(filepath.Join(dir, "b.hcl")); err != nil {
			e.t.Fatal(err)
		}
	}
	// b fails (its task killed with its executor alive: restart attempts
	// 0, an exit by a signal) while no agent runs: the next agent
	// reschedules it after 5s.
	prepFailed := func(e *env, dir string) {
		e.serviceFile(dir, "a", 3, "")
		e.serviceFile(dir, "b", 0, "reschedule {\n    attempts       = 1\n    interval       = \"1h\"\n    delay          = \"5s\"\n    delay_function = \"constant\"\n    unlimited      = false\n  }")
		converged(e, dir).term()
		procs := e.serviceProcs("b")
		if len(procs) != 1 {
			e.t.Fatalf("b: %v", procs)
		}
		_ = syscall.Kill(procs[0].PID, syscall.SIGKILL)
		testproc.CheckGone(e.t, "\x00b\x00"+e.dir, 10*time.Second)
	}
	enable := func(e *env, dir string, c *agent.Client) {
		file := e.serviceFile(e.t.TempDir(), "c", 3, "")
		_, _ = c.Enable(context.Background(), agent.EnableRequest{File: file, Text: mustRead(e.t, file)})
	}
	prepEnabled := func(e *env, dir string) {
		twoServices(e, dir)
		a := e.startAgent(nil, true, "--config-dir", dir)
		c := e.client()
		enable(e, dir, c)
		await(e.t, c, "convergence", func(s agent.Status) bool { en, ok := s.Entry("c"); return s.Converged && ok && running(en) })
		c.Close()
		a.term()
	}
	disable := func(_ *env, _ string, c *agent.Client) { _, _ = c.Disable(context.Background(), "c") }
	prepHeld := func(e *env, dir string) {
		twoServices(e, dir)
		a := converged(e, dir)
		c := e.client()
		st, _ := c.Status(context.Background())
		en, _ := st.Entry("a")
		if _, err := c.StopGroup(context.Background(), en.Tasks, 0, time.Second, nil); err != nil {
			e.t.Fatal(err)
		}
		await(e.t, c, "a held", func(s agent.Status) bool {
			en, _ := s.Entry("a")
			return en.Standing == agent.StandingStopped && s.Converged
		})
		c.Close()
		a.term()
	}
	startAgain := func(_ *env, _ string, c *agent.Client) { _, _ = c.StartDesired(context.Background(), "a") }
	both := map[string]string{"a": "running", "b": "running"}

	var cases []crashCase
	for _, p := range []string{
		"agent-before-commit:intent", "agent-after-commit:intent",
		"agent-before-effect:start", "agent-after-effect:start", "agent-after-effect:start:2",
		"after-append:task-created", "after-append:executor-up", "before-effect:launch-task", "after-append:launched",
	} {
		cases = append(cases, crashCase{point: p, prep: prepBoot, want: both})
	}
	// A lost executor: the next copy of its allocation (a restart under
	// its restart policy), written ahead in the record, then recorded
	// (derived ids: a decision made twice records one copy), then driven.
	for _, p := range []string{
		"after-append:executor-reaped", "agent-before-commit:copy", "agent-after-commit:copy",
		"agent-before-copy:restart", "agent-after-copy:restart", "after-append:task-created", "after-append:launched",
	} {
		cases = append(cases, crashCase{point: p, prep: prepLost, want: both})
	}
	// A failed task: the reschedule, the same way.
	for _, p := range []string{
		"agent-before-commit:copy", "agent-after-commit:copy", "agent-before-copy:reschedule", "agent-after-copy:reschedule",
		"after-append:task-created", "after-append:launched",
	} {
		cases = append(cases, crashCase{point: p, prep: prepFailed, want: both})
	}
	for _, p := range []string{
		"agent-before-commit:update", "agent-after-commit:update", "agent-before-effect:stop", "after-append:stop-requested",
		"agent-after-effect:stop", "agent-after-commit:intent", "agent-before-effect:start", "after-append:task-created",
	} {
		cases = append(cases, crashCase{point: p, prep: prepReplace, want: both})
	}
	for _, p := range []string{"agent-after-commit:update", "agent-before-effect:stop", "agent-after-effect:stop", "agent-before-commit:delete", "agent-after-commit:delete"} {
		cases = append(cases, crashCase{point: p, prep: prepRemove, want: map[string]string{"a": "running", "b": "gone"}})
	}
	for _, p := range []string{"agent-before-commit:enable", "agent-after-commit:enable"} {
		cases = append(cases, crashCase{point: p, prep: twoServices, during: enable,
			want: map[string]string{"a": "running", "b": "running", "c": map[bool]string{true: "gone", false: "running"}[p == "agent-before-commit:enable"]}})
	}
	for _, p := range []string{"agent-before-commit:disable", "agent-after-commit:disable", "agent-before-effect:stop", "agent-after-effect:stop", "agent-after-commit:delete"} {
		cases = append(cases, crashCase{point: p, prep: prepEnabled, during: disable,
			want: map[string]string{"a": "running", "b": "running", "c": map[bool]string{true: "running", false: "gone"}[p == "agent-before-commit:disable"]}})
	}
	for _, p := range []string{"agent-before-commit:start", "agent-after-commit:start", "agent-before-effect:start", "after-append:task-created"} {
		cases = append(cases, crashCase{point: p, prep: prepHeld, during: startAgain,
			want: map[string]string{"a": map[bool]string{true: "gone", false: "running"}[p == "agent-before-commit:start"], "b": "running"}})
	}
	for i, cc := range cases {
		t.Run(fmt.Sprintf("%02d-%s", i, strings.ReplaceAll(cc.point, ":", "_")), func(t *testing.T) {
			e := newAgentEnv(t)
			dir := e.configDir()
			cc.prep(e, dir)
			crashing := e.startAgent([]string{driver.EnvCrashPoint + "=" + cc.point}, cc.during != nil, "--config-dir", dir)
			if cc.during != nil {
				c := e.client()
				go cc.during(e, dir, c)
			}
			crashing.crashed()

			after := e.startAgent(nil, true, "--config-dir", dir)
			c := e.client()
			// Converged, and every entry that should run runs (a copy due
			// later, a reschedule's, is waited for).
			s := await(t, c, "convergence after the crash", func(s agent.Status) bool {
				if !s.Converged {
					return false
				}
				for name, want := range cc.want {
					if en, ok := s.Entry(name); want == "running" && (!ok || en.Standing == agent.StandingRestarting || en.Standing == agent.StandingStarting) {
						return false
					}
				}
				return true
			})
			scan, err := c.LoadTasks(context.Background(), store.AllTasks)
			if err != nil || len(scan.Unreadable) > 0 {
				t.Fatalf("tasks: %+v, %v", scan, err)
			}
			current := map[string]bool{}
			for name, want := range cc.want {
				procs := e.serviceProcs(name)
				en, desired := s.Entry(name)
				switch want {
				case "running":
					if !desired || en.State != fsm.StateRunning || len(procs) != 1 {
						t.Errorf("%s: entry %+v (desired %v), processes %v; want it running exactly once", name, en, desired, procs)
					}
					for _, id := range en.Tasks {
						current[id] = true
					}
				case "gone":
					if len(procs) != 0 || desired && en.Standing != agent.StandingStopped && en.Standing != agent.StandingDown {
						t.Errorf("%s: entry %+v (desired %v), processes %v; want nothing of it running", name, en, desired, procs)
					}
				}
			}
			for _, task := range scan.Tasks {
				if !task.State.Terminal() && !current[task.ID] {
					t.Errorf("task %s (%s) is %s: neither terminal nor a desired task's current one", task.ID, task.Spec.Name, task.State)
				}
			}
			if rep, err := c.Check(context.Background()); err != nil || !rep.OK() {
				t.Errorf("store check: %s, %v", rep, err)
			}
			c.Close()
			after.term()
			if t.Failed() {
				t.Logf("crashing agent:\n%s\nagent after:\n%s", crashing.logs, after.logs)
			}
		})
	}
}

// parentOf is a process's parent pid.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// An agent of a user (nobody), not root: it serves its own state
// directory; root's client is served (root is), a task file of a third
// user is refused (neither root nor the agent's user), and its task runs
// as that user.
func TestAgent_NonRootAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent as another user (uid 65534)")
	}
	base, err := os.MkdirTemp("", "tether-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "tether")
	b, err := os.ReadFile(tetherBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	state, conf := filepath.Join(base, "state"), filepath.Join(base, "conf")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{state, 0o700}, {conf, 0o755}} {
		if err := os.Mkdir(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d.path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { testproc.CheckGone(t, state, 10*time.Second) })
	svc := writeFile(t, conf, "svc.hcl", fmt.Sprintf(`task "svc" {
  driver = "raw_exec"
  config {
    command = "/bin/sleep"
    args    = ["1000"]
  }
  env { MARK = %q }
}
`, state))
	other := writeFile(t, conf, "other.hcl", strings.ReplaceAll(string(mustRead(t, svc)), `"svc"`, `"other"`))
	for file, uid := range map[string]int{svc: 65534, other: 65533} {
		if err := os.Chown(file, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	// Its notification socket, which the agent's user may send to.
	nsock := filepath.Join(base, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	if err := os.Chmod(nsock, 0o666); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		buf := make([]byte, 512)
		n, _ := notify.Read(buf) // ends when notify is closed
		ready <- string(buf[:n])
	}()
	cmd := exec.Command(bin, "--state-dir", state, "agent", "--config-dir", conf)
	cmd.Dir = base
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + base, "NOTIFY_SOCKET=" + nsock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case msg := <-ready:
		if !strings.Contains(msg, "READY=1") {
			t.Fatalf("the agent's notification: %q\n%s", msg, logs)
		}
	case <-exited:
		t.Fatalf("the agent exited before it was ready: %v\n%s", waitErr, logs)
	}
	c, err := agent.Dial(context.Background(), state, agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PID() != cmd.Process.Pid {
		t.Fatalf("agent pid %d, client says %d", cmd.Process.Pid, c.PID())
	}
	s := await(t, c, "svc running", func(s agent.Status) bool {
		en, ok := s.Entry("svc")
		return ok && running(en) && len(s.Problems) == 1
	})
	if !strings.Contains(s.Problems[0], "other.hcl") || !strings.Contains(s.Problems[0], "owned by uid 65533, neither root nor the agent's user (uid 65534)") {
		t.Fatalf("problems: %v; want other.hcl refused for its owner", s.Problems)
	}
	en, _ := s.Entry("svc")
	info, err := c.InspectTask(context.Background(), en.Task)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", info.TaskPID))
	if err != nil || !strings.Contains(string(st), "\nUid:\t65534\t") {
		t.Fatalf("svc's task runs as: %s, %v; want uid 65534", st, err)
	}
	if fi, err := os.Stat(agent.SocketPath(state)); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, %v; want nobody's, 0600", fi, err)
	}
	if _, err := c.StopTask(context.Background(), en.Task, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-exited
	if waitErr != nil {
		t.Fatalf("the agent on SIGTERM: %v\n%s", waitErr, logs)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
