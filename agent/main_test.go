package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/store"
)

// The test binary is also the executor, the task, an agent and a client of
// another uid: TestMain dispatches on its first argument.
const (
	modeExecutor = "executor"
	modeTask     = "tether-agent-test-task"
	modeAgent    = "tether-agent-test-agent"
	modeDialAs   = "tether-agent-test-dial-as"
)

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{
		modeExecutor: server.Serve, modeTask: runTask, modeAgent: runAgent, modeDialAs: dialAs,
	})
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	goleak.VerifyTestMain(m)
}

// runTask is a task: "sleep" blocks until killed, "exit N" exits N. Its
// last argument is its test's marker.
func runTask(args []string) int {
	switch args[0] {
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "sleep":
		select {}
	}
	return 2
}

// runAgent is an agent process: runAgent STATE [CONFIG]. It prints
// "serving" once its socket answers, and runs until SIGTERM.
func runAgent(args []string) int {
	cfg := Config{StateDir: args[0], ExecutorCommand: []string{os.Args[0], modeExecutor},
		Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info})}
	if len(args) > 1 {
		cfg.ConfigDir = args[1]
	}
	a, err := Open(cfg)
	if err != nil {
		fmt.Println("open:", err)
		return 3
	}
	defer a.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		select {
		case <-a.Serving():
			fmt.Println("serving")
		case <-ctx.Done():
		}
	}()
	if err := a.Run(ctx); err != nil {
		fmt.Println("run:", err)
		return 3
	}
	return 0
}

// dialAs becomes uid (setuid, all threads) and dials the agent of a state
// directory whose socket is reachable to it: dialAs UID STATE. It prints
// the outcome.
func dialAs(args []string) int {
	uid, _ := strconv.Atoi(args[0])
	if err := syscall.Setgid(uid); err != nil {
		fmt.Println("setgid:", err)
		return 2
	}
	if err := syscall.Setuid(uid); err != nil {
		fmt.Println("setuid:", err)
		return 2
	}
	c, err := Dial(context.Background(), args[1], DialOptions{Deadline: 5 * time.Second})
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	_, err = c.InspectTask(context.Background(), "anything")
	fmt.Println("inspect:", err)
	return 0
}

// taskHCL is a task file of a task named name that sleeps until killed
// (the test binary's task mode), its marker in its arguments, restarted
// at once by its policy (attempts; -1: no restart block), extra inside
// its task block.
func taskHCL(name, marker string, attempts int, extra string) string {
	restart := ""
	if attempts >= 0 {
		restart = fmt.Sprintf("restart {\n    attempts = %d\n    interval = \"1h\"\n    delay = \"0s\"\n    mode = \"fail\"\n  }", attempts)
	}
	return fmt.Sprintf("task %q {\n  driver = \"raw_exec\"\n  config {\n    command = %q\n    args = [%q, \"sleep\", %q]\n  }\n  %s\n  %s\n}\n",
		name, os.Args[0], modeTask, marker, restart, extra)
}

// writeTaskFile writes a task file (0644 whatever the umask).
func writeTaskFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sleeper is a spec of a task that sleeps until killed.
func sleeper(name, marker string) fsm.Spec {
	return fsm.Spec{Name: name, Driver: "raw_exec", Command: os.Args[0], Args: []string{modeTask, "sleep", marker},
		Restart: &fsm.RestartPolicy{Attempts: 3, Interval: time.Hour, Delay: 0, Mode: fsm.RestartFail}}
}

// stateDir makes a private state directory for a test, short enough for
// the socket path, and checks at cleanup that nothing of its tasks is left.
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ta")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		testproc.CheckGone(t, dir, 10*time.Second)
		os.RemoveAll(dir)
	})
	return filepath.Join(dir, "state")
}

// agentProc is an agent process of a test.
type agentProc struct {
	cmd *exec.Cmd
	out *bufio.Scanner
}

// startAgentProc starts an agent process on state and waits until it
// serves.
func startAgentProc(t *testing.T, state string, extra ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{modeAgent, state}, extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if !p.out.Scan() || p.out.Text() != "serving" {
		t.Fatalf("agent process: %q, %v", p.out.Text(), p.out.Err())
	}
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// openAgent opens an in-process agent on state, with cfg's other fields.
func openAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	if cfg.ExecutorCommand == nil {
		cfg.ExecutorCommand = []string{os.Args[0], modeExecutor}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Debug})
	}
	a, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// runAgent runs a in a goroutine until the test ends, and returns a client
// of it.
func serveAgent(t *testing.T, a *Agent) *Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		// The agent stops nothing when it ends: the test stops what it
		// left running first.
		stopLive(t, a)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-a.Serving():
	case err := <-done:
		t.Fatalf("agent ended before serving: %v", err)
	}
	c, err := Dial(ctx, a.cfg.StateDir, DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stopLive stops every live task of an agent's store.
func stopLive(t *testing.T, a *Agent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scan, err := a.LoadTasks(ctx, store.LiveTasks)
	if err != nil {
		t.Errorf("listing the live tasks: %v", err)
		return
	}
	for _, task := range scan.Tasks {
		if _, err := a.StopTask(ctx, task.ID, 0, time.Second); err != nil {
			t.Errorf("stopping %s: %v", task.ID, err)
		}
	}
}
