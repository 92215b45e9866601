package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/store"
)

// The end-to-end tests build the tether binary once and drive it as a
// user would, each test on its own state directory. Every test ends with a
// leak check: no live process whose command line names the test's state
// directory may survive it (executors carry their task directory in their
// arguments, helper tasks carry the state directory as their last one).

// tetherBin is the binary under test, built by TestMain.
var tetherBin string

// helperArg makes the test binary act as a task (see helperMain).
const helperArg = "tether-test-helper"

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{helperArg: helperMain, containHelperArg: containHelper})
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tether-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tetherBin = filepath.Join(dir, "tether")
	build := exec.Command("go", "build", "-o", tetherBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build: static
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building tether: %v\n", err)
		return 1
	}
	return m.Run()
}

// helperMain is a task for the tests: its last argument is always the
// state directory (the leak check's marker), which it ignores.
//
//	exit N          exit with code N
//	sleep           print "helper stderr" on stderr, then "helper up" on
//	                stdout, then block until killed
//	notify CTL OUT [announce]  speak sd_notify as told (testproc.NotifyTask)
//	fiforead PATH   read PATH (a FIFO) to its end, then exit 7
//	fifowrite PATH  write a line to PATH (a FIFO), then exit 0
//	ignore-term PATH  ignore SIGTERM: write "up" to PATH (a FIFO) once the
//	                handler is in place, then a line each time SIGTERM
//	                arrives; block until killed
//	fill-exit N     write a file "fill" in the working directory until the
//	                disk is full (ENOSPC), say so on stdout, then exit N
//	fill-note-exit N PATH  as fill-exit, writing "full" to PATH (a FIFO)
//	                once the disk is full, before it exits
func helperMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "helper: want MODE ... MARKER")
		return 2
	}
	switch args[0] {
	case "notify": // notify CTL OUT [announce] MARKER: testproc.NotifyTask
		return testproc.NotifyTask(args[1 : len(args)-1])
	case "check": // check CTL OUT [announce] MARKER: testproc.CheckTask
		return testproc.CheckTask(args[1 : len(args)-1])
	case "exit":
		n, _ := strconv.Atoi(args[1])
		fmt.Println("helper exiting with", n)
		return n
	case "sleep":
		fmt.Fprintln(os.Stderr, "helper stderr")
		fmt.Println("helper up")
		select {}
	case "fiforead":
		b, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("read %q\n", b)
		return 7
	case "ignore-term":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		if err := os.WriteFile(args[1], []byte("up\n"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for range sigs {
			if err := os.WriteFile(args[1], []byte("got SIGTERM\n"), 0); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	case "fill-exit", "fill-note-exit":
		n, _ := strconv.Atoi(args[1])
		if err := fillDisk("fill"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if args[0] == "fill-note-exit" {
			if err := os.WriteFile(args[2], []byte("full\n"), 0); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		fmt.Println("the disk is full; exiting with", n)
		return n
	case "serve-http":
		// A web server on the task's port (09-helloworld's hellov1): it
		// says which copy of its group it is and where it runs.
		ln, err := net.Listen("tcp", os.Getenv("NOMAD_ADDR_web"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		wd, _ := os.Getwd()
		msg := fmt.Sprintf("hello from copy %s in %s\n", os.Getenv("NOMAD_ALLOC_INDEX"), wd)
		fmt.Println("listening on", ln.Addr())
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, msg) }))
		return 1
	case "fifowrite":
		if err := os.WriteFile(args[1], []byte("hello through the fifo\n"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", args[0])
	return 2
}

// env is one test's state directory and the tether commands run on it.
type env struct {
	t   *testing.T
	dir string
	// agent serves dir when the suite runs through an agent (see
	// newEnv).
	agent *agentRun
}

// envAgent is the variable that runs the suite through an agent: with
// TETHER_E2E_AGENT=1, newEnv starts `tether agent` on each test's state
// directory before its first command, so that every command the test runs
// goes through it (make test-e2e-agent). The same tests, the same
// expectations: the CLI must print and exit the same either way.
const envAgent = "TETHER_E2E_AGENT"

// throughAgent reports whether the suite runs through an agent.
func throughAgent() bool { return os.Getenv(envAgent) != "" }

// newEnv is a test's state directory, served by an agent when the suite
// runs through one; its cleanup stops the agent (which stops no task)
// before it checks that nothing of the test is left running.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := newDaemonlessEnv(t, "")
	if throughAgent() {
		e.agent = e.serveAgent()
	}
	return e
}

// newDaemonlessEnv is a state directory that no agent serves, even when
// the suite runs through one: for a test of what only a daemonless
// command does (a crash point or a fault armed in the CLI's own process,
// the store's file lock between commands, allow lists given to the
// process that spawns). why says which, for a reader of the test.
func newDaemonlessEnv(t *testing.T, why string) *env {
	t.Helper()
	if why != "" && throughAgent() {
		t.Logf("daemonless although the suite runs through an agent: %s", why)
	}
	e := &env{t: t, dir: filepath.Join(t.TempDir(), "state")} // TempDir's own is 0755: not a private state dir
	if err := os.Mkdir(e.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkNoLeak(t, e.dir) })
	return e
}

// checkNoLeak is testproc.CheckNoLeak once the state directory's detached
// group drivers have had their time to end: a tether drive-group exits
// once its group is over and nothing follows it (one still waiting to
// start a group's next copy, a pending reschedule, is a leak of the test,
// which left a service to its policies).
func checkNoLeak(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range testproc.Marked(dir) {
		if !slices.Contains(p.Args, groupDriverArg) {
			continue
		}
		fd, err := unix.PidfdOpen(p.PID, 0)
		if err != nil {
			continue // gone already
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, max(int(time.Until(deadline).Milliseconds()), 0))
			if err != unix.EINTR {
				break
			}
		}
		unix.Close(fd)
	}
	testproc.CheckNoLeak(t, dir)
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// command returns a tether command on the test's state directory; extra
// is added to a clean environment (no TETHER_* from outside).
func (e *env) command(ctx context.Context, extra []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, tetherBin, append([]string{"--state-dir", e.dir}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// tether runs a tether command to its end.
func (e *env) tether(args ...string) result { return e.tetherEnv(nil, args...) }

func (e *env) tetherEnv(extra []string, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.command(ctx, extra, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.Exited():
		r.code = exit.ExitCode()
	default:
		e.t.Fatalf("tether %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		e.t.Fatalf("tether %s panicked:\n%s", strings.Join(args, " "), r)
	}
	return r
}

// must runs a tether command and fails the test unless it exits 0.
func (e *env) must(args ...string) result {
	e.t.Helper()
	r := e.tether(args...)
	if r.code != 0 {
		e.t.Fatalf("tether %s: %s", strings.Join(args, " "), r)
	}
	return r
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestGraph_MarksKillExecutor(t *testing.T) {
	e := newEnv(t)
	r := e.must("graph")
	if !strings.Contains(r.stdout, "kill-executor") || !strings.Contains(r.stdout, "graph") {
		t.Fatalf("mermaid graph lacks kill-executor edges:\n%s", r)
	}
	r = e.must("graph", "--format", "dot")
	if !strings.Contains(r.stdout, "digraph") || !strings.Contains(r.stdout, `kill-executor", color = "red"`) {
		t.Fatalf("dot graph lacks red kill-executor edges:\n%s", r)
	}
	if r := e.tether("graph", "--format", "png"); r.code != exitUsage || !strings.Contains(r.stderr, "mermaid or dot") {
		t.Fatalf("bad format: %s", r)
	}
}

func TestDebugCrashpoints_ListsDriverPoints(t *testing.T) {
	e := newEnv(t)
	r := e.must("debug", "crashpoints")
	want := strings.Join(append(driver.CrashPoints(), agent.CrashPoints()...), "\n") + "\n"
	if r.stdout != want {
		t.Fatalf("crashpoints:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = e.must("debug", "faultpoints")
	if r.stdout != strings.Join(driver.FaultPoints(), "\n")+"\n" {
		t.Fatalf("faultpoints:\n%s", r.stdout)
	}
}

func TestCrashpointEnv_UnknownNameRefused(t *testing.T) {
	e := newEnv(t)
	r := e.tetherEnv([]string{"TETHER_CRASHPOINT=after-append:no-such-event"}, "status")
	if r.code != exitUsage || !strings.Contains(r.stderr, "TETHER_CRASHPOINT") || !strings.Contains(r.stderr, "no-such-event") {
		t.Fatalf("unknown crash point: %s", r)
	}
	r = e.tetherEnv([]string{"TETHER_FAULT=effect:nope"}, "status")
	if r.code != exitUsage || !strings.Contains(r.stderr, "TETHER_FAULT") {
		t.Fatalf("unknown fault point: %s", r)
	}
}

func TestCorruptStore_ClearErrorNoPanic(t *testing.T) {
	e := newEnv(t)
	junk := bytes.Repeat([]byte("this is not a bbolt file. "), 2000)
	if err := os.WriteFile(filepath.Join(e.dir, "tether.db"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"check"}, {"run", "--", "/bin/true"}, {"recover"}, {"gc"}} {
		r := e.tether(args...)
		if r.code == 0 {
			t.Errorf("tether %v on a corrupt store exited 0:\n%s", args, r)
		}
		if !strings.Contains(r.stderr, "tether.db") || !strings.Contains(r.stderr, "damaged") {
			t.Errorf("tether %v: the message does not name the damaged store:\n%s", args, r)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "tasks")); err == nil {
		entries, _ := os.ReadDir(filepath.Join(e.dir, "tasks"))
		if len(entries) != 0 {
			t.Errorf("a task directory was created on a corrupt store: %v", entries)
		}
	}
}

func TestLockedStore_ClearError(t *testing.T) {
	e := newDaemonlessEnv(t, "the store's file lock between tether processes: an agent holds it for good")
	st, err := store.Open(filepath.Join(e.dir, "tether.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := e.tether("--lock-timeout", "200ms", "status")
	if r.code == 0 || !strings.Contains(r.stderr, "locked") || !strings.Contains(r.stderr, "another tether") {
		t.Fatalf("locked store: %s", r)
	}
}

func TestRun_InvalidTaskFile(t *testing.T) {
	e := newEnv(t)
	bad := writeFile(t, t.TempDir(), "bad.hcl", "task \"x\" {\n  driver = \"raw_exec\"\n  config {\n    command = \n  }\n}\n")
	r := e.tether("run", bad)
	if r.code == 0 || !regexp.MustCompile(regexp.QuoteMeta(bad)+`:\d+:\d+: error: `).MatchString(r.stderr) {
		t.Fatalf("invalid task file: want file:line:col in the message:\n%s", r)
	}
	docker := writeFile(t, t.TempDir(), "docker.hcl", "task \"x\" {\n  driver = \"docker\"\n  config { command = \"/bin/true\" }\n}\n")
	r = e.tether("run", docker)
	if r.code == 0 || !strings.Contains(r.stderr, docker+":2:12: error: Unsupported driver") {
		t.Fatalf("bad driver: %s", r)
	}
	if r := e.tether("run", filepath.Join(t.TempDir(), "missing.hcl")); r.code == 0 || !strings.Contains(r.stderr, "missing.hcl") {
		t.Fatalf("missing file: %s", r)
	}
}

func TestUnknownTaskID(t *testing.T) {
	e := newEnv(t)
	for _, cmd := range []string{"status", "events", "logs", "stop", "wait"} {
		r := e.tether(cmd, "no-such-task")
		if r.code != exitError || !strings.Contains(r.stderr, `"no-such-task"`) || !strings.Contains(r.stderr, "tether status --all") {
			t.Errorf("tether %s no-such-task: %s", cmd, r)
		}
	}
	if r := e.tether("events", "../escape"); r.code != exitError || !strings.Contains(r.stderr, "no task") {
		t.Errorf("events ../escape: %s", r)
	}
}

func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"frobnicate"}, {"run"}, {"run", "--driver", "docker", "--", "/bin/true"}, {"run", "--env", "novalue", "--", "/bin/true"}, {"stop"}, {"--log-level", "loud", "status"}} {
		if r := e.tether(args...); r.code != exitUsage {
			t.Errorf("tether %v: want exit %d: %s", args, exitUsage, r)
		}
	}
	if r := e.tether("help"); r.code != 0 || !strings.Contains(r.stdout, "run") || strings.Contains(r.stdout, "\n  executor") {
		t.Errorf("help (must not list executor): %s", r)
	}
	if r := e.tether("run", "-h"); r.code != 0 || !strings.Contains(r.stdout, "--task") {
		t.Errorf("run -h: %s", r)
	}
}

func TestStatus_EmptyStore(t *testing.T) {
	e := newEnv(t)
	r := e.must("status", "--json")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("status --json on an empty store: %s", r)
	}
	e.must("check")
	if r := e.must("recover"); !strings.Contains(r.stdout, "nothing to recover") {
		t.Fatalf("recover: %s", r)
	}
}
