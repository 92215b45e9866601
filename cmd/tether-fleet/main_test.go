package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// The tests build both binaries into one directory, as `make build` does,
// and run the plain tether as a user would: `tether cluster …` and
// `tether agent --node … --cluster …` are handed to the tether-fleet
// beside it. The node's agent runs as built in agent_e2e_test.go and the
// README's tour (startAgent); the tests of the commands drive a node's
// tasks directly, so their node is this process: a real store and driver
// (real executors, the built tether's `executor` mode, and real tasks)
// wrapped for the mirror by cluster.NewStoreSource, and a cluster.Node
// mirroring it to a real etcd, as the agent does.

// binDir holds tether and tether-fleet; tetherBin is the plain one.
var binDir, tetherBin string

// sleeperArg makes the test binary a task that runs until a signal; its
// last argument is its node's state directory (the leak check's marker).
const sleeperArg = "fleet-test-sleeper"

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{sleeperArg: sleeper})
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	os.Exit(buildAndRun(m))
}

func sleeper([]string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("sleeper up")
	<-sigs
	return 0
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tether-fleet-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir, tetherBin = dir, filepath.Join(dir, "tether")
	for _, b := range []struct{ out, pkg string }{{"tether", "../tether"}, {"tether-fleet", "."}} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build: static
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", b.out, err)
			return 1
		}
	}
	return m.Run()
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// result is how a command ended.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// tether runs the plain tether binary with args, in an environment
// without TETHER_* from outside.
func tether(t testing.TB, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := tetherCmd(ctx, args...)
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
		t.Fatalf("tether %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("tether %s panicked:\n%s", strings.Join(args, " "), r)
	}
	return r
}

func tetherCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, tetherBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// must runs tether and fails the test unless it exits 0.
func must(t testing.TB, args ...string) result {
	t.Helper()
	r := tether(t, args...)
	if r.code != 0 {
		t.Fatalf("tether %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// dial is a client of the fleet's etcd, closed at cleanup.
func dial(t testing.TB, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := cluster.Dial(cluster.Config{Endpoints: eps, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testNode is a node run by the test: its state directory, store,
// driver and cluster.Node.
type testNode struct {
	t    testing.TB
	name string
	dir  string
	src  *cluster.StoreSource
	d    *driver.Driver
	n    *cluster.Node
	stop func()
}

// startNode opens a node's state directory (a real store and driver),
// registers it with etcd and runs its mirror until stopNode or the end of
// the test. At cleanup every live task is stopped and nothing of the
// node may be left running.
func startNode(t testing.TB, cli *clientv3.Client, name string) *testNode {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := cluster.NewStoreSource(st)
	d, err := driver.Open(driver.Config{StateDir: dir, Store: src, ExecutorCommand: []string{tetherBin, "executor"},
		Logger: hclog.NewNullLogger(), KillTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.NewNode(cli, cluster.NodeConfig{Name: name, LeaseTTL: 2 * time.Second, StatusInterval: 200 * time.Millisecond,
		Dir: filepath.Join(dir, "cluster"), Source: src, Changes: src.Changes(),
		Policy: job.Policy{AllowRemoteDrivers: []string{"exec", "raw_exec"}}}) // these tests' specs are raw_exec
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{t: t, name: name, dir: dir, src: src, d: d, n: n}
	if err := n.Register(ctxT(t)); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	stopped := false
	tn.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(func() {
		tn.close()
		testproc.CheckNoLeak(t, dir)
	})
	return tn
}

// close stops the node's mirror and its live tasks, and closes its
// driver and store (so that the plain tether can open its state
// directory). It may be called again.
func (tn *testNode) close() {
	if tn.src == nil {
		return
	}
	tn.stop()
	tn.stopAll()
	_ = tn.d.Close()
	_ = tn.src.Close()
	tn.src = nil
}

// stopAll stops the node's live tasks.
func (tn *testNode) stopAll() {
	scan, err := tn.src.LoadTasks(context.Background(), store.LiveTasks)
	if err != nil {
		tn.t.Errorf("list %s's tasks: %v", tn.name, err)
		return
	}
	for _, task := range scan.Tasks {
		if _, err := tn.d.StopTask(context.Background(), task.ID, syscall.SIGTERM, 5*time.Second); err != nil {
			tn.t.Errorf("stop %s: %v", task.ID, err)
		}
	}
}

// sleeper starts a real task named name on the node: the test binary as
// a sleeper, until stopped.
func (tn *testNode) sleeper(name string) string {
	tn.t.Helper()
	self, err := os.Executable()
	if err != nil {
		tn.t.Fatal(err)
	}
	id := name + "-" + fmt.Sprint(time.Now().UnixNano()%1e6)
	spec := fsm.Spec{Name: name, Driver: "raw_exec", Command: self, Args: []string{sleeperArg, tn.dir},
		Env: map[string]string{"TOKEN": "s3cr3t"}}
	if _, err := tn.d.StartTask(ctxT(tn.t), id, spec); err != nil {
		tn.t.Fatalf("start %s on %s: %v", name, tn.name, err)
	}
	return id
}

// run starts a real task that exits at once with code.
func (tn *testNode) run(name string, code int) string {
	tn.t.Helper()
	id := name + "-" + fmt.Sprint(time.Now().UnixNano()%1e6)
	spec := fsm.Spec{Name: name, Driver: "raw_exec", Command: "/bin/sh", Args: []string{"-c", fmt.Sprintf("exit %d", code), tn.dir}}
	if _, err := tn.d.StartTask(ctxT(tn.t), id, spec); err != nil {
		tn.t.Fatalf("start %s on %s: %v", name, tn.name, err)
	}
	if _, err := tn.d.WaitTask(ctxT(tn.t), id); err != nil {
		tn.t.Fatalf("wait %s: %v", id, err)
	}
	return id
}

// waitMirrored waits, on an etcd watch, until the node's mirrored heads
// are its local log's heads.
func (tn *testNode) waitMirrored(cli *clientv3.Client) {
	tn.t.Helper()
	ctx := ctxT(tn.t)
	prefix := cluster.DefaultPrefix + "head/" + tn.name + "/"
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			tn.t.Fatalf("read heads: %v", err)
		}
		local, err := tn.src.Heads(ctx)
		if err != nil {
			tn.t.Fatal(err)
		}
		want := map[string]uint64{}
		for _, h := range local {
			want[h.Task] = h.Seq
		}
		got := map[string]uint64{}
		for _, kv := range resp.Kvs {
			var h struct{ Seq uint64 }
			_ = json.Unmarshal(kv.Value, &h)
			got[strings.TrimPrefix(string(kv.Key), prefix)] = h.Seq
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			tn.t.Fatalf("mirror of %s stuck at %v, want %v", tn.name, got, want)
		}
	}
}

// down stops the node's side of the fleet and revokes its lease: the
// node shows down at once (its tasks run on).
func (tn *testNode) down(cli *clientv3.Client) {
	tn.t.Helper()
	lease := tn.n.Stats(ctxT(tn.t)).Lease
	tn.stop()
	if _, err := cli.Revoke(ctxT(tn.t), clientv3.LeaseID(lease)); err != nil {
		tn.t.Fatal(err)
	}
}

// waitStatus waits until the node has published its status.
func (tn *testNode) waitStatus(cli *clientv3.Client) {
	tn.t.Helper()
	key := cluster.DefaultPrefix + "node/" + tn.name
	ctx := ctxT(tn.t)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		tn.t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		return
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if len(wr.Events) > 0 {
			return
		}
	}
	tn.t.Fatalf("%s wrote no status", tn.name)
}
