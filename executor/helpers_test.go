//go:build linux

package executor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	hostspec "github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/prepare"
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

// The test binary is also every helper process, dispatched on os.Args[1]:
//
//	executor -marker=M <Serve flags>   executor mode (Spawn appends the flags)
//	executor-crash / executor-hang     executors that exit at once / never get ready
//	task -marker=M <mode> ...          a task (see runTask)
//	driver -marker=M <json>            a driver process that spawns (and maybe launches), then blocks
//	dialer -marker=M <dir> <json>      a client that reattaches and reports the error
//	unpriv -marker=M <dir>             a driver without cgroups (see TestContain_UnprivilegedExecutor)
func TestMain(m *testing.M) {
	// Helper modes: the binary, the mode, the test's marker, then the
	// mode's arguments.
	testproc.Dispatch(map[string]func([]string) int{
		"executor":         func(a []string) int { return server.ServeWith(a[1:], prepare.Preparer{}) },
		"executor-lean":    func(a []string) int { return server.Serve(a[1:]) },
		"executor-journal": func(a []string) int { server.JournalSocket = a[1]; return server.ServeWith(a[2:], prepare.Preparer{}) },
		"executor-crash":   func([]string) int { return 3 },
		"executor-hang":    func([]string) int { block(); return 0 },
		"task":             func(a []string) int { return runTask(a[1:]) },
		"driver":           func(a []string) int { return runDriver(a[1]) },
		"dialer":           func(a []string) int { return runDialer(a[1], a[2]) },
		"unpriv":           func(a []string) int { return runUnpriv(a[1]) },
		"executor-keyed":   runKeyedExecutor,
		"executor-without": runExecutorWithout,
		"lock-holder":      func(a []string) int { return lockHolder(a[0], a[1], a[2]) },
	})
	// Helper processes built with -race would otherwise sleep 1s at exit.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	if benchBinDir != "" {
		os.RemoveAll(benchBinDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// block never returns (a blocked syscall, so the runtime sees no deadlock).
func block() {
	for {
		_ = unix.Pause()
	}
}

func testBinary(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// marker tags every process a test starts (in argv or env), so the leak
// check can find survivors. newMarker registers the leak check first, so it
// runs after every other cleanup.
type marker string

func newMarker(t *testing.T) marker {
	t.Helper()
	m := marker("tethertest" + randHex(t, 6))
	t.Cleanup(func() { checkLeaks(t, m) })
	return m
}

func (m marker) arg() string { return "-marker=" + string(m) }
func (m marker) env() string { return "TETHER_TEST_MARKER=" + string(m) }

// executorCmd is the SpawnConfig.Command that makes the test binary serve.
func (m marker) executorCmd(t testing.TB) []string {
	return []string{testBinary(t), "executor", m.arg()}
}

// taskSpec runs the test binary as a task.
func (m marker) taskSpec(t testing.TB, mode string, args ...string) wire.Launch {
	return wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: testBinary(t), Args: append([]string{"task", m.arg(), mode}, args...), Env: map[string]string{"TETHER_TEST_MARKER": string(m), "TASK_VAR": "task-value", "GORACE": os.Getenv("GORACE")}}}
}

// execSpec runs the test binary as an exec task: the binary's directory is
// bound into the task's root at /testbin.
func (m marker) execSpec(t testing.TB, mode string, args ...string) wire.Launch {
	s := m.taskSpec(t, mode, args...)
	bin := testBinary(t)
	s.Driver = wire.ModeExec
	s.Command = "/testbin/" + filepath.Base(bin)
	s.Chroot = testChroot(t, filepath.Dir(bin)+":/testbin")
	return s
}

// testChroot is DefaultChroot's entries that exist here, and extra.
func testChroot(t testing.TB, extra ...string) []string {
	var out []string
	for _, e := range hostspec.DefaultChroot {
		if _, err := os.Lstat(e); err == nil {
			out = append(out, e)
		}
	}
	return append(out, extra...)
}

// needIsolation skips a test on a host where exec tasks cannot run,
// naming what is missing.
func needIsolation(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("exec isolation needs root")
	}
	needCgroups(t)
}

// needCgroups skips a test on a host without task cgroups.
func needCgroups(t testing.TB) cgroup.Host {
	t.Helper()
	h, err := cgroup.Probe()
	if err == nil {
		err = h.Usable()
	}
	if err != nil {
		t.Skipf("needs task cgroups (root, or a delegated cgroup): %v", err)
	}
	return h
}

// execFifo makes a fifo an exec task (of any user) can open, in the local
// directory of task directory dir, and returns its path on the host, its
// path in the task's root and the test's read-write end.
func execFifo(t *testing.T, dir, name string) (string, string, *os.File) {
	t.Helper()
	p, f := fifo(t, filepath.Join(dir, statedir.LocalDir), name)
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	return p, "/" + statedir.LocalDir + "/" + name, f
}

// checkLeaks fails the test for any live process that carries the marker
// (in its arguments or its environment); one on its way out gets a bounded
// pidfd wait first.
func checkLeaks(t *testing.T, m marker) {
	t.Helper()
	testproc.CheckGone(t, string(m), 5*time.Second)
}

// testCtxBackground bounds a helper process's calls (the helper exits
// long before; cancel is for vet).
func testCtxBackground() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// spawn starts an executor of the test binary in a fresh task dir and
// registers its shutdown.
func spawn(t *testing.T, m marker, dir string) *Client {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "task")
	}
	c, err := Spawn(testCtx(t), SpawnConfig{Command: m.executorCmd(t), TaskDir: dir, Nonce: randHex(t, 12)})
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	id := c.Identity()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil && !errors.Is(err, wire.ErrClosed) {
			t.Errorf("Shutdown: %v", err)
		}
		c.Close()
		// An executor that answered its waiters writes its exit record
		// next: its task directory is done with once it is dead.
		waitDead(t, id)
		removeTaskCgroup(t, id)
	})
	return c
}

// removeTaskCgroup kills and removes the cgroup an executor announced, as
// a driver's kill of its task would: a test that killed the executor
// behind its back (there is no driver here) leaves it otherwise.
func removeTaskCgroup(t testing.TB, id fsm.Identity) {
	if id.Cgroup == "" {
		return
	}
	h, err := cgroup.Probe()
	if err != nil {
		return
	}
	cg, err := cgroup.OpenRecorded(h, id.Cgroup, filepath.Base(filepath.Dir(id.Socket)), id.Nonce)
	if err != nil {
		t.Errorf("the executor's cgroup %q: %v", id.Cgroup, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cg.Kill(ctx); err != nil {
		t.Errorf("killing the task cgroup: %v", err)
	}
	if err := cg.Remove(); err != nil {
		t.Errorf("removing the task cgroup: %v", err)
	}
}

// fifo makes a named pipe in dir and opens it read-write (so neither side
// ever sees EOF or blocks on open); reads honour deadlines.
func fifo(t *testing.T, dir, name string) (string, *os.File) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f
}

// readLine reads one line from f within a bounded time.
func readLine(t *testing.T, f *os.File) string {
	t.Helper()
	if err := f.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := f.Read(one); err != nil {
			t.Fatalf("reading %s: %v", f.Name(), err)
		}
		if one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

// ---- helper processes ----

// runTask is a task. Modes:
//
//	exit N                    print to stdout and stderr, then exit N
//	caps                      print the Cap and Uid lines of /proc/self/status
//	serve [flags]             see the flags below; then obey the ctl fifo or block
//	sleep [-setsid-kid] [-ignore-term]   report "ok" on stdout, then block
func runTask(args []string) int {
	switch args[0] {
	case "exit":
		wd, _ := os.Getwd()
		fmt.Printf("hello stdout dir=%s var=%s\n", wd, os.Getenv("TASK_VAR"))
		fmt.Fprintln(os.Stderr, "hello stderr")
		n, _ := strconv.Atoi(args[1])
		return n
	case "caps":
		b, _ := os.ReadFile("/proc/self/status")
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "Uid") || strings.HasPrefix(l, "Umask") {
				fmt.Println(l)
			}
		}
		return 0
	case "sleep":
		for _, a := range args[1:] {
			if a == "-ignore-term" {
				signal.Ignore(syscall.SIGTERM)
			}
		}
		fmt.Println("ok")
		block()
	case "serve":
		return serveTask(args[1:])
	}
	return runMoreTask(args)
}

func serveTask(args []string) int {
	var ready, ctl string
	var kids int
	var escapee, exitAfterKids, ignoreTerm bool
	onTerm, onUsr1 := -1, -1
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-ready":
			i++
			ready = args[i]
		case "-ctl":
			i++
			ctl = args[i]
		case "-kids":
			i++
			kids, _ = strconv.Atoi(args[i])
		case "-escapee":
			escapee = true
		case "-exit-after-kids":
			exitAfterKids = true
		case "-ignore-term":
			ignoreTerm = true
		case "-on-term":
			i++
			onTerm, _ = strconv.Atoi(args[i])
		case "-on-usr1":
			i++
			onUsr1, _ = strconv.Atoi(args[i])
		}
	}
	sigs := make(chan os.Signal, 2)
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if onTerm >= 0 {
		signal.Notify(sigs, syscall.SIGTERM)
	}
	if onUsr1 >= 0 {
		signal.Notify(sigs, syscall.SIGUSR1)
	}
	startKid := func(setsid bool) {
		kargs := []string{"task", os.Args[2], "sleep"}
		if ignoreTerm {
			kargs = append(kargs, "-ignore-term")
		}
		cmd := exec.Command(os.Args[0], kargs...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "kid:", err)
			os.Exit(101)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ok\n" {
			fmt.Fprintln(os.Stderr, "kid not ready:", line)
			os.Exit(102)
		}
	}
	for range kids {
		startKid(false)
	}
	if escapee {
		startKid(true)
	}
	if exitAfterKids {
		return 0
	}
	cmds := make(chan int, 1)
	if ctl != "" {
		f, err := os.OpenFile(ctl, os.O_RDWR, 0)
		if err != nil {
			return 103
		}
		go func() {
			var n int
			if _, err := fmt.Fscanf(f, "exit %d\n", &n); err == nil {
				cmds <- n
			}
		}()
	}
	if ready != "" {
		f, err := os.OpenFile(ready, os.O_WRONLY, 0)
		if err != nil {
			return 104
		}
		fmt.Fprintln(f, "ready", os.Getpid())
		f.Close()
	}
	for {
		select {
		case n := <-cmds:
			return n
		case s := <-sigs:
			if s == syscall.SIGTERM {
				return onTerm
			}
			return onUsr1
		}
	}
}

// driverPlan is what the driver helper does.
type driverPlan struct {
	Command []string     `json:"command"`
	TaskDir string       `json:"task_dir"`
	Nonce   string       `json:"nonce"`
	Launch  *wire.Launch `json:"launch,omitempty"`
}

// driverReport is what the driver helper prints once it is set up.
type driverReport struct {
	Identity fsm.Identity `json:"identity"`
	TaskPID  int          `json:"task_pid"`
	Err      string       `json:"err,omitempty"`
}

// runDriver spawns an executor (and launches a task if told), reports on
// stdout, then blocks until it is killed.
func runDriver(planJSON string) int {
	var p driverPlan
	if err := json.Unmarshal([]byte(planJSON), &p); err != nil {
		return 2
	}
	ctx := context.Background()
	c, err := Spawn(ctx, SpawnConfig{Command: p.Command, TaskDir: p.TaskDir, Nonce: p.Nonce})
	rep := driverReport{}
	if err == nil {
		rep.Identity = c.Identity()
		if p.Launch != nil {
			var lst wire.Status
			lst, err = c.Launch(ctx, *p.Launch)
			rep.TaskPID = lst.PID
		}
	}
	if err != nil {
		rep.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	block()
	return 0
}

// runDialer reattaches to the executor of dir and exits 0 if it was
// refused as a peer, 1 (printing why) otherwise.
func runDialer(dir, idJSON string) int {
	var id fsm.Identity
	if err := json.Unmarshal([]byte(idJSON), &id); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Reattach(ctx, dir, id)
	if err == nil {
		c.Close()
		fmt.Println("attached: not refused")
		return 1
	}
	fmt.Println(err)
	if errors.Is(err, wire.ErrPeerRefused) {
		return 0
	}
	return 1
}

// startDriver runs the driver helper and returns its report and process.
func startDriver(t *testing.T, m marker, plan driverPlan) (driverReport, *exec.Cmd) {
	t.Helper()
	b, _ := json.Marshal(plan)
	cmd := exec.Command(testBinary(t), "driver", m.arg(), string(b))
	cmd.Env = append(os.Environ(), m.env())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var rep driverReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil {
		t.Fatalf("driver report: %v", err)
	}
	if rep.Err != "" {
		t.Fatalf("driver: %s", rep.Err)
	}
	t.Cleanup(func() { removeTaskCgroup(t, rep.Identity) })
	return rep, cmd
}

// killDriver SIGKILLs the driver helper and reaps it.
func killDriver(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// waitDead waits (bounded) on a pidfd until the identified process is dead.
func waitDead(t *testing.T, id fsm.Identity) {
	t.Helper()
	p, err := proc.Open(id.PID)
	if err != nil {
		return
	}
	defer p.Close()
	if err := proc.Check(id); errors.Is(err, wire.ErrNotOurs) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("pid %d still alive: %v", id.PID, err)
	}
}

func readFileString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var _ = io.EOF

// readExitStatus is the exit status in dir's exit record, unchecked (the
// tests know whose it is).
func readExitStatus(dir string) (fsm.ExitStatus, bool, error) {
	r, ok, err := wire.ReadExitRecord(dir)
	return r.Exit, ok, err
}
