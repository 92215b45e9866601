package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// The node's agent as a user runs it: the built `tether agent --node NAME
// --cluster EP`, which the plain tether hands to tether-fleet, on a real
// state directory, with real executors and tasks, against a real etcd.

// runningAgent is one agent process of a test.
type runningAgent struct {
	t    testing.TB
	cmd  *exec.Cmd
	done chan error // its Wait, once
	log  *syncBuffer
	// serving is closed once the agent logs that it serves (its signal
	// handlers are set by then).
	serving chan struct{}
}

// syncBuffer is an agent's stderr, kept for a failure's message.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) add(line string) {
	s.mu.Lock()
	s.b.WriteString(line + "\n")
	s.mu.Unlock()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs `tether agent --node node --cluster ep --state-dir dir
// ARGS` with env added to its environment. It is SIGKILLed at cleanup if
// the test left it running.
func startAgent(t testing.TB, ep, node, dir string, env []string, args ...string) *runningAgent {
	t.Helper()
	cmd := tetherCmd(context.Background(), append([]string{"agent", "--node", node, "--cluster", ep, "--state-dir", dir,
		"--lease-ttl", "2s", "--log-level", cmpOrEnv("TETHER_E2E_LOG", "debug")}, args...)...)
	// These tests' specs are raw_exec: etcd's may use it here (a test's
	// env or flag overrides; TestAgent_RemoteDriversByTheOperatorsWord
	// holds the default, exec alone).
	cmd.Env = append(cmd.Env, "TETHER_ALLOW_REMOTE_DRIVERS=exec,raw_exec")
	cmd.Env = append(cmd.Env, env...)
	errs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ra := &runningAgent{t: t, cmd: cmd, done: make(chan error, 1), log: &syncBuffer{}, serving: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(errs)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		serving := false
		for sc.Scan() {
			ra.log.add(sc.Text())
			if !serving && strings.Contains(sc.Text(), "agent serving") {
				serving = true
				close(ra.serving)
			}
		}
		ra.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if ra.done != nil {
			_ = cmd.Process.Kill()
			<-ra.done
		}
		if t.Failed() {
			t.Logf("agent %d (node %s) log:\n%s", cmd.Process.Pid, node, ra.log)
		}
	})
	return ra
}

// wait waits for the agent to exit and returns how.
func (ra *runningAgent) wait() error {
	ra.t.Helper()
	select {
	case err := <-ra.done:
		ra.done = nil
		return err
	case <-time.After(2 * time.Minute):
		ra.t.Fatalf("agent %d did not exit in 2 minutes; its log:\n%s", ra.cmd.Process.Pid, ra.log)
		return nil
	}
}

// kill SIGKILLs the agent and waits for it.
func (ra *runningAgent) kill() {
	ra.t.Helper()
	if err := ra.cmd.Process.Kill(); err != nil {
		ra.t.Fatal(err)
	}
	_ = ra.wait()
}

// waitServing waits until the agent serves its state directory.
func (ra *runningAgent) waitServing() {
	ra.t.Helper()
	select {
	case <-ra.serving:
	case err := <-ra.done:
		ra.done = nil
		ra.t.Fatalf("agent exited (%v) before it served; its log:\n%s", err, ra.log)
	}
}

// stop ends the agent with SIGTERM once it serves, which must exit 0.
func (ra *runningAgent) stop() {
	ra.t.Helper()
	ra.waitServing()
	if err := ra.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		ra.t.Fatal(err)
	}
	if err := ra.wait(); err != nil {
		ra.t.Fatalf("agent after SIGTERM: %v; its log:\n%s", err, ra.log)
	}
}

// waitRegistered waits, on an etcd watch, until node's liveness key is
// held by this agent's process.
func (ra *runningAgent) waitRegistered(cli *clientv3.Client, node string) {
	ra.t.Helper()
	key := cluster.DefaultPrefix + "alive/" + node
	ctx := ctxT(ra.t)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			ra.t.Fatal(err)
		}
		if len(resp.Kvs) == 1 {
			var h cluster.Holder
			if json.Unmarshal(resp.Kvs[0].Value, &h) == nil && h.PID == ra.cmd.Process.Pid {
				return
			}
		}
		select {
		case <-cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)):
		case err := <-ra.done:
			ra.done = nil
			ra.t.Fatalf("agent exited (%v) before it registered; its log:\n%s", err, ra.log)
		case <-ctx.Done():
			ra.t.Fatalf("agent %d never registered node %s; its log:\n%s", ra.cmd.Process.Pid, node, ra.log)
		}
	}
}

// mirrored waits, on an etcd watch, until the mirror shows a task named
// name in state on node, and returns its id.
func mirrored(t testing.TB, cli *clientv3.Client, node, name string, state fsm.State, log fmt.Stringer) string {
	t.Helper()
	return mirroredWhere(t, cli, node, log, fmt.Sprintf("%s %s", name, state), func(r *cluster.TaskRef) bool {
		return r.Name == name && r.State == state
	})
}

// mirroredWhere waits, on an etcd watch, until the mirror shows a task on
// node that ok accepts (what says which), and returns its id.
func mirroredWhere(t testing.TB, cli *clientv3.Client, node string, log fmt.Stringer, what string, ok func(*cluster.TaskRef) bool) string {
	t.Helper()
	f, err := cluster.NewFleet(cli, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for {
		resp, err := cli.Get(ctx, cluster.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		rows, err := f.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Node == node && r.Task != nil && ok(r.Task) {
				return r.Task.ID
			}
		}
		select {
		case <-cli.Watch(ctx, cluster.DefaultPrefix+"head/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("the mirror never showed %s on %s: %+v; the agent's log:\n%s", what, node, rows, log)
		}
	}
}

// localLog reads every task's events from a state directory's store (no
// agent may hold it).
func localLog(t testing.TB, dir string) map[string][]fsm.Event {
	t.Helper()
	st, err := store.Open(statedir.Layout{Dir: dir}.Store(), store.Options{ReadOnly: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := ctxT(t)
	vs, err := st.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]fsm.Event{}
	for _, v := range vs {
		evs, err := st.Load(ctx, v.Task)
		if err != nil {
			t.Fatal(err)
		}
		out[v.Task] = evs
	}
	return out
}

// waitHeads waits, on an etcd watch, until the node's mirrored heads are
// want's (task id -> its last seq).
func waitHeads(t testing.TB, cli *clientv3.Client, node string, want map[string]uint64, log fmt.Stringer) {
	t.Helper()
	ctx := ctxT(t)
	prefix := cluster.DefaultPrefix + "head/" + node + "/"
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
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
			t.Fatalf("the mirror of %s is stuck at %v, want %v; the agent's log:\n%s", node, got, want, log)
		}
	}
}

// sleeperFile is a task file whose task "web" is the test binary as a
// sleeper, its command line marked with marker; more is HCL added to the
// task's block.
func sleeperFile(t testing.TB, marker string, more ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "web.hcl")
	src := fmt.Sprintf(`task "web" {
  driver = "raw_exec"
  config {
    command = %q
    args    = [%q, %q]
  }
%s}
`, self, sleeperArg, marker, strings.Join(more, "\n"))
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// The whole life of a node's desired task through the real agent: told
// with `tether cluster start`, started by the agent on a real executor,
// shown running by `tether cluster status`; the agent SIGKILLed and
// started again adopts the task rather than starting a second; told to
// stop while no agent runs, the next agent (itself SIGKILLed at the
// mirror's transaction, with the stop committed locally and not yet
// mirrored) and the one after stop it once; and the mirror ends equal to
// the node's local log, event for event: no duplicate, no gap.
func TestAgent_NodeConvergesEtcdsDesiredStateAcrossSIGKILLs(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := fmt.Sprintf("fleetagent-web-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	file := sleeperFile(t, marker)

	ag := startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	r := must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file)
	if strings.TrimSpace(r.stdout) != "web" || !strings.Contains(r.stderr, "web: desired on node n1") {
		t.Errorf("cluster start:\n%s", r)
	}
	id := mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	procs := testproc.Marked(marker)
	if len(procs) != 1 {
		t.Fatalf("the task web runs as %d processes, want 1: %v", len(procs), procs)
	}
	pid := procs[0].PID
	st := must(t, "cluster", "--endpoints", ep, "status")
	if !strings.Contains(st.stdout, id) || !strings.Contains(st.stdout, "running") || !strings.Contains(st.stdout, "n1") {
		t.Errorf("cluster status does not show %s running on n1:\n%s", id, st.stdout)
	}

	// SIGKILL the agent: the task runs on; the next agent adopts it and
	// starts nothing for web.
	ag.kill()
	if !testproc.Alive(pid) {
		t.Fatalf("the task's process %d died with its agent", pid)
	}
	ag = startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	if again := mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log); again != id {
		t.Errorf("after the agent's restart web runs as %s, want %s (adopted)", again, id)
	}
	if procs := testproc.Marked(marker); len(procs) != 1 || procs[0].PID != pid {
		t.Errorf("after the agent's restart the task runs as %v, want pid %d alone", procs, pid)
	}
	ag.kill()

	// Told to stop while no agent runs; the next agent stops it and is
	// SIGKILLed at its first mirror transaction after that.
	r = must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	if !strings.Contains(r.stderr, "web: no longer desired on node n1") {
		t.Errorf("cluster stop:\n%s", r)
	}
	ag = startAgent(t, ep, "n1", dir, []string{cluster.EnvCrashPoint + "=" + cluster.CrashMirrorBeforeTxn})
	err := ag.wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the agent armed at %s ended with %v, not its SIGKILL; its log:\n%s", cluster.CrashMirrorBeforeTxn, err, ag.log)
	}
	ag = startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	if stopped := mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log); stopped != id {
		t.Errorf("the stopped task is %s, want %s", stopped, id)
	}
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()

	// The mirror catches up with the local log, exactly: one more agent
	// mirrors what the last one committed after its last transaction.
	local := localLog(t, dir)
	want := map[string]uint64{}
	for task, evs := range local {
		want[task] = uint64(len(evs))
	}
	if len(local) != 1 || len(local[id]) == 0 {
		t.Fatalf("the node's store holds %d tasks, want only %s: %v", len(local), id, want)
	}
	ag = startAgent(t, ep, "n1", dir, nil)
	waitHeads(t, cli, "n1", want, ag.log)
	ag.stop()
	f, err := cluster.NewFleet(cli, "")
	if err != nil {
		t.Fatal(err)
	}
	for task, evs := range local {
		got, _, err := f.Events(ctxT(t), "n1", task) // a gap is an error here
		if err != nil {
			t.Fatalf("mirrored events of %s: %v", task, err)
		}
		if len(got) != len(evs) {
			t.Errorf("%s: %d events mirrored, %d in the local log", task, len(got), len(evs))
			continue
		}
		for i := range evs {
			if got[i].Seq != evs[i].Seq || got[i].Type != evs[i].Type || got[i].Time != evs[i].Time {
				t.Errorf("%s event %d: mirrored %d %s at %d, local %d %s at %d", task, i, got[i].Seq, got[i].Type, got[i].Time, evs[i].Seq, evs[i].Type, evs[i].Time)
			}
		}
	}
	for _, e := range local[id] {
		if e.Type == fsm.EventCreated && e.Seq != 1 {
			t.Errorf("%s was created twice: %v", id, e)
		}
	}
}

// A spec from etcd passes the node's allow lists and cannot widen them:
// an exec task asking for a capability the node's --allow-caps does not
// list is refused before anything of it is recorded (the one
// instantiation path's policy check), the node's status naming it, and
// nothing of it runs.
func TestAgent_ASpecFromEtcdCannotWidenTheNodesAllowList(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	ag := startAgent(t, ep, "n1", dir, nil, "--allow-caps", "chown,kill")
	ag.waitRegistered(cli, "n1")
	root, err := filepath.Abs(filepath.Join("..", "..", "examples", "net_raw.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", root)
	c, err := agent.Dial(ctxT(t), dir, agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last agent.Status
	err = c.WatchStatus(ctxT(t), func(st agent.Status) bool {
		last = st
		e, ok := st.Entry("net_raw")
		return ok && e.Standing == agent.StandingRefused
	})
	e, _ := last.Entry("net_raw")
	if err != nil || e.Origin != "etcd" || !strings.Contains(e.Reason, "net_raw") || len(e.Tasks) != 0 {
		t.Fatalf("the node's entry net_raw: %+v (%v); want refused naming net_raw, from etcd, no task; the agent's log:\n%s", e, err, ag.log)
	}
	ag.stop()
	if tasks := localLog(t, dir); len(tasks) != 0 {
		t.Errorf("a refused spec recorded tasks: %v", tasks)
	}
}

// Mistakes in the fleet agent's flags are usage errors naming the flag; a
// second agent for a node another agent holds is refused, naming the
// holder; a second agent on a state directory an agent serves is refused.
func TestAgent_RefusesBadFlagsASecondAgentForTheNodeAndForTheStateDir(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"agent", "--node", "n1", "--state-dir", dir}, "needs --cluster URLS"},
		{[]string{"agent", "--cluster", ep, "--state-dir", dir}, "needs --node NAME"},
		{[]string{"agent", "--node", "../n1", "--cluster", ep, "--state-dir", dir}, "--node: "},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--lease-ttl", "1s", "--state-dir", dir}, "--lease-ttl 1s is shorter than 2s"},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--allow-caps", "no_such_cap", "--state-dir", dir}, "--allow-caps"},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--state-dir", dir, "extra"}, "agent takes no arguments"},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--state-dir", dir, "--meta", "tier"}, `--meta "tier": use KEY=VALUE`},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--state-dir", dir, "--capacity", "cpu=fast"}, "want cpu=MHZ,memory=MB"},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--state-dir", dir, "--capacity", "cpu=1,disk=2"}, `"disk" is not cpu, memory or cores`},
		{[]string{"agent", "--node", "n1", "--cluster", ep, "--state-dir", dir, "--onse"}, "did you mean --once?"},
	} {
		r := tether(t, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("tether %q: want exit 2 saying %q:\n%s", c.args, c.says, r)
		}
	}
	r := tether(t, "agent", "--node", "n1", "--cluster", "http://192.0.2.1:2379", "--state-dir", dir)
	if r.code != exitError || !strings.Contains(r.stderr, "not on this machine's loopback") {
		t.Errorf("plaintext to another host: want exit 1 refusing it:\n%s", r)
	}
	help := must(t, "agent", "--node", "n1", "-h")
	for _, want := range []string{"Usage: tether agent --node NAME --cluster URLS", "--config-dir", "--once", "--lease-ttl", "--cluster-tls-key", "--allow-caps", "--state-dir", "--meta", "--capacity", "dispatch meta"} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("tether agent --node n1 -h lacks %q:\n%s", want, help.stdout)
		}
	}

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	ag := startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	other := filepath.Join(t.TempDir(), "other")
	r = tether(t, "agent", "--node", "n1", "--cluster", ep, "--state-dir", other)
	if r.code != exitError || !strings.Contains(r.stderr, `node "n1" is held by another agent`) || !strings.Contains(r.stderr, fmt.Sprintf("pid %d", ag.cmd.Process.Pid)) {
		t.Errorf("a second agent for n1: want exit 1 naming the holder (pid %d):\n%s", ag.cmd.Process.Pid, r)
	}
	r = tether(t, "agent", "--node", "n2", "--cluster", ep, "--state-dir", dir)
	if r.code != exitError || !strings.Contains(r.stderr, "another agent") || !strings.Contains(r.stderr, "serves") {
		t.Errorf("a second agent on the state directory: want exit 1 naming the first:\n%s", r)
	}
	ag.stop()
}

// A node that boots without etcd runs what it was last told: after a
// power cut (the agent, its executor and the task SIGKILLed), `tether
// agent --node n1 --once`, with etcd out of reach, records the task lost
// and starts it again from the local copy of the desired state; the next
// agent mirrors both, each once.
func TestAgent_OnceWithoutEtcdRunsWhatTheNodeWasLastTold(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := fmt.Sprintf("fleetagent-once-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	file := sleeperFile(t, marker, `  restart {
    attempts = 3
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }
`)
	ag := startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file)
	first := mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)

	// The power cut.
	ag.kill()
	for _, p := range append(testproc.Marked(dir), testproc.Marked(marker)...) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	testproc.CheckGone(t, marker, time.Minute)
	testproc.CheckGone(t, dir, time.Minute)

	port := etcdtest.FreePort(t)                                                                                                                                            // nothing listens: etcd is out of reach
	r := tether(t, "agent", "--node", "n1", "--cluster", fmt.Sprintf("http://127.0.0.1:%d", port), "--state-dir", dir, "--once", "--allow-remote-drivers", "exec,raw_exec") // as startAgent allows
	if r.code != 0 {
		t.Fatalf("tether agent --node n1 --once without etcd: %s", r)
	}
	procs := testproc.Marked(marker)
	if len(procs) != 1 {
		t.Fatalf("after --once without etcd the task runs as %v, want one process; its log:\n%s", procs, r.stderr)
	}
	pid := procs[0].PID

	ag = startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	if lost := mirrored(t, cli, "n1", "web", fsm.StateLost, ag.log); lost != first {
		t.Errorf("the task lost to the power cut is %s, want %s", lost, first)
	}
	mirroredWhere(t, cli, "n1", ag.log, "web running as a new task", func(r *cluster.TaskRef) bool {
		return r.Name == "web" && r.State == fsm.StateRunning && r.ID != first
	})
	if procs := testproc.Marked(marker); len(procs) != 1 || procs[0].PID != pid {
		t.Errorf("with the agent back the task runs as %v, want the one --once started (pid %d) alone", procs, pid)
	}
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log)
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()
}

// Over mutual TLS the agent registers its node and converges what it is
// told; a client certificate of another CA gets nothing from etcd, and
// the agent serves its state directory all the same.
func TestAgent_OverMutualTLS(t *testing.T) {
	p := etcdtest.NewPKI(t)
	ep := etcdtest.EmbeddedTLS(t, p)
	tlsArgs := []string{"--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.ClientCert, "--cluster-tls-key", p.ClientKey}
	cli, err := cluster.Dial(cluster.Config{Endpoints: []string{ep}, TLS: cluster.TLS{CA: p.CA, Cert: p.ClientCert, Key: p.ClientKey}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	ag := startAgent(t, ep, "n1", dir, nil, tlsArgs...)
	ag.waitRegistered(cli, "n1")
	file := filepath.Join(t.TempDir(), "web.hcl")
	if err := os.WriteFile(file, []byte(webFile), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, append([]string{"cluster", "--endpoints", ep, "start", "--node", "n1", file}, tlsArgs...)...)
	mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	must(t, append([]string{"cluster", "--endpoints", ep, "stop", "--node", "n1", "web"}, tlsArgs...)...)
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log)
	ag.stop()

	stranger := startAgent(t, ep, "n2", filepath.Join(t.TempDir(), "other"), nil,
		"--cluster-tls-ca", p.CA, "--cluster-tls-cert", p.StrangerCert, "--cluster-tls-key", p.Stranger)
	stranger.stop() // it serves without etcd, and stops on SIGTERM
	if !strings.Contains(stranger.log.String(), "etcd did not answer") {
		t.Errorf("an agent whose certificate etcd refuses does not say etcd did not answer:\n%s", stranger.log)
	}
	resp, err := cli.Get(ctxT(t), cluster.DefaultPrefix+"alive/n2")
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("an agent with another CA's certificate registered n2: %v, %v", resp, err)
	}
}

// A lost lease is logged and the node registered again, its task left
// running; a spec replaced in etcd (start --replace) replaces the task:
// the old one stopped, then the new one started.
func TestAgent_LeaseLossReRegistersAndAReplacedSpecReplacesItsTask(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	old := fmt.Sprintf("fleetagent-old-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, old) })
	ag := startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", sleeperFile(t, old))
	first := mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	procs := testproc.Marked(old)
	if len(procs) != 1 {
		t.Fatalf("web runs as %v, want one process", procs)
	}

	// Revoke the node's lease, as etcd does when a partition outlasts it.
	ctx := ctxT(t)
	key := cluster.DefaultPrefix + "alive/n1"
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the liveness key: %v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if n := len(wr.Events); n > 0 && wr.Events[n-1].Kv.Lease != 0 && clientv3.LeaseID(wr.Events[n-1].Kv.Lease) != lease {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the node never registered again after its lease was revoked; the agent's log:\n%s", ag.log)
	}
	if !strings.Contains(ag.log.String(), "liveness lease lost") {
		t.Errorf("the agent did not log the lost lease:\n%s", ag.log)
	}
	if !testproc.Alive(procs[0].PID) {
		t.Errorf("the task's process %d died with the lease", procs[0].PID)
	}

	replaced := fmt.Sprintf("fleetagent-new-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, replaced) })
	r := tether(t, "cluster", "--endpoints", ep, "start", "--node", "n1", sleeperFile(t, replaced))
	if r.code != exitError || !strings.Contains(r.stderr, "--replace") {
		t.Errorf("a second start of web with another file without --replace: want exit 1 naming --replace:\n%s", r)
	}
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", "--replace", sleeperFile(t, replaced))
	second := mirroredWhere(t, cli, "n1", ag.log, "web replaced", func(r *cluster.TaskRef) bool {
		return r.Name == "web" && r.State == fsm.StateRunning && r.ID != first
	})
	if st := mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log); st != first {
		t.Errorf("the stopped task is %s, want the replaced %s", st, first)
	}
	testproc.CheckGone(t, old, time.Minute)
	if procs := testproc.Marked(replaced); len(procs) != 1 {
		t.Errorf("the replacement %s runs as %v, want one process", second, procs)
	}
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	testproc.CheckGone(t, replaced, time.Minute)
	ag.stop()
}

// --config-dir and etcd declare the node's desired tasks side by side,
// converged by the one loop; a name both declare stays the config dir's
// (etcd's is refused as a conflict and nothing of it runs) until the
// config dir no longer declares it.
func TestAgent_ConfigDirAndEtcdSideBySide(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	stamp := time.Now().UnixNano()
	fromDir, fromEtcd, conflict := fmt.Sprintf("fleetagent-dir-%d", stamp), fmt.Sprintf("fleetagent-etcd-%d", stamp), fmt.Sprintf("fleetagent-conflict-%d", stamp)
	for _, m := range []string{fromDir, fromEtcd, conflict} {
		t.Cleanup(func() { testproc.CheckNoLeak(t, m) })
	}
	rename := func(file, name string) string {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), name+".hcl")
		if err := os.WriteFile(out, []byte(strings.Replace(string(src), `task "web"`, `task "`+name+`"`, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return out
	}
	confDir := t.TempDir()
	apiFile := rename(sleeperFile(t, fromDir), "api")
	src, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "api.hcl"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	ag := startAgent(t, ep, "n1", dir, nil, "--config-dir", confDir)
	ag.waitRegistered(cli, "n1")
	api := mirrored(t, cli, "n1", "api", fsm.StateRunning, ag.log)
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", sleeperFile(t, fromEtcd))
	mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	st := must(t, "cluster", "--endpoints", ep, "status")
	if !strings.Contains(st.stdout, api) || !strings.Contains(st.stdout, "web") {
		t.Errorf("cluster status lacks the config dir's task or etcd's:\n%s", st.stdout)
	}

	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", rename(sleeperFile(t, conflict), "api"))
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log) // the agent converged past the conflicting api
	testproc.CheckGone(t, fromEtcd, time.Minute)
	if p := testproc.Marked(conflict); len(p) != 0 {
		t.Errorf("etcd's api runs beside the config dir's: %v", p)
	}
	if p := testproc.Marked(fromDir); len(p) != 1 {
		t.Errorf("the config dir's api runs as %v, want one process", p)
	}
	// Once the config dir no longer declares api, etcd's declaration is
	// the only one: the config dir's task is stopped, then etcd's started.
	if err := os.Remove(filepath.Join(confDir, "api.hcl")); err != nil {
		t.Fatal(err)
	}
	if stopped := mirrored(t, cli, "n1", "api", fsm.StateStopped, ag.log); stopped != api {
		t.Errorf("the stopped api is %s, want the config dir's %s", stopped, api)
	}
	mirroredWhere(t, cli, "n1", ag.log, "etcd's api running", func(r *cluster.TaskRef) bool {
		return r.Name == "api" && r.State == fsm.StateRunning && r.ID != api
	})
	testproc.CheckGone(t, fromDir, time.Minute)
	if p := testproc.Marked(conflict); len(p) != 1 {
		t.Errorf("etcd's api runs as %v, want one process", p)
	}
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "api")
	testproc.CheckGone(t, conflict, time.Minute)
	ag.stop()
}

// The node's allow lists are the operator's flags, applied to what etcd
// tells it: an exec task asking for seccomp = "unconfined" is refused
// before anything is recorded by a node without --allow-seccomp unconfined,
// naming the flag, and runs on a node given it.
func TestAgent_AppliesTheOperatorsSeccompAllowList(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	file := filepath.Join(t.TempDir(), "loose.hcl")
	if err := os.WriteFile(file, []byte(`task "loose" {
  driver = "exec"
  config {
    command = "/bin/sleep"
    args    = ["300"]
    seccomp = "unconfined"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var agents []*runningAgent
	var dirs []string
	for _, node := range []string{"tight", "loose"} {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
		var args []string
		if node == "loose" {
			args = []string{"--allow-seccomp", "unconfined"}
		}
		ag := startAgent(t, ep, node, dir, nil, args...)
		ag.waitRegistered(cli, node)
		must(t, "cluster", "--endpoints", ep, "start", "--node", node, file)
		agents, dirs = append(agents, ag), append(dirs, dir)
	}
	// On the node without --allow-seccomp: refused before anything is
	// recorded, its status naming the flag.
	c, err := agent.Dial(ctxT(t), dirs[0], agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last agent.Status
	err = c.WatchStatus(ctxT(t), func(st agent.Status) bool {
		last = st
		e, ok := st.Entry("loose")
		return ok && e.Standing == agent.StandingRefused
	})
	if e, _ := last.Entry("loose"); err != nil || !strings.Contains(e.Reason, "--allow-seccomp unconfined") || len(e.Tasks) != 0 {
		t.Errorf("on the node without --allow-seccomp: want loose refused naming --allow-seccomp unconfined, no task: %+v (%v)", e, err)
	}
	mirrored(t, cli, "loose", "loose", fsm.StateRunning, agents[1].log)
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "loose", "loose")
	mirrored(t, cli, "loose", "loose", fsm.StateStopped, agents[1].log)
	for _, ag := range agents {
		ag.stop()
	}
	if tasks := localLog(t, dirs[0]); len(tasks) != 0 {
		t.Errorf("the refused spec recorded tasks on the node without --allow-seccomp: %v", tasks)
	}
}

// The agent SIGKILLed at each durable step of its node (registration,
// the mirror's transaction, the local copy of the desired state), in the
// middle of stopping a task etcd no longer wants: the next agent finishes
// the stop, the task is stopped once, and the mirror ends equal to the
// local log, event for event. (The prune points need a gc, which an agent
// holding its store does not run.)
func TestAgent_SIGKILLAtEachCrashPointOfTheNode(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	for i, point := range []string{cluster.CrashLivenessAfterGrant, cluster.CrashLivenessAfterCreate,
		cluster.CrashDesiredBeforeCopy, cluster.CrashDesiredAfterCopy, cluster.CrashMirrorBeforeTxn, cluster.CrashMirrorAfterTxn} {
		t.Run(strings.ReplaceAll(point, ":", "-"), func(t *testing.T) {
			node := fmt.Sprintf("n%d", i)
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
			marker := fmt.Sprintf("fleetagent-crash-%d-%d", i, time.Now().UnixNano())
			t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
			ag := startAgent(t, ep, node, dir, nil)
			ag.waitRegistered(cli, node)
			must(t, "cluster", "--endpoints", ep, "start", "--node", node, sleeperFile(t, marker))
			id := mirrored(t, cli, node, "web", fsm.StateRunning, ag.log)
			ag.stop()
			must(t, "cluster", "--endpoints", ep, "stop", "--node", node, "web")

			ag = startAgent(t, ep, node, dir, []string{cluster.EnvCrashPoint + "=" + point})
			err := ag.wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the agent armed at %s ended with %v, not its SIGKILL; its log:\n%s", point, err, ag.log)
			}
			ag = startAgent(t, ep, node, dir, nil)
			ag.waitRegistered(cli, node)
			if stopped := mirrored(t, cli, node, "web", fsm.StateStopped, ag.log); stopped != id {
				t.Errorf("the stopped task is %s, want %s", stopped, id)
			}
			testproc.CheckGone(t, marker, time.Minute)
			ag.stop()

			local := localLog(t, dir)
			want := map[string]uint64{}
			for task, evs := range local {
				want[task] = uint64(len(evs))
			}
			if len(local) != 1 {
				t.Errorf("the node's store holds %d tasks, want only %s: %v", len(local), id, want)
			}
			stops := 0
			for _, e := range local[id] {
				if e.Type == fsm.EventStopRequested {
					stops++
				}
			}
			if stops != 1 {
				t.Errorf("%s was asked to stop %d times, want once", id, stops)
			}
			ag = startAgent(t, ep, node, dir, nil)
			waitHeads(t, cli, node, want, ag.log)
			ag.stop()
			f, err := cluster.NewFleet(cli, "")
			if err != nil {
				t.Fatal(err)
			}
			for task, evs := range local {
				got, _, err := f.Events(ctxT(t), node, task)
				if err != nil {
					t.Fatalf("mirrored events of %s: %v", task, err)
				}
				if len(got) != len(evs) {
					t.Errorf("%s: %d events mirrored, %d in the local log", task, len(got), len(evs))
					continue
				}
				for j := range evs {
					if got[j].Seq != evs[j].Seq || got[j].Type != evs[j].Type || got[j].Time != evs[j].Time {
						t.Errorf("%s event %d: mirrored %d %s, local %d %s", task, j, got[j].Seq, got[j].Type, evs[j].Seq, evs[j].Type)
					}
				}
			}
		})
	}
}

// Whoever writes etcd directly, behind `tether cluster start`'s checks,
// gets the same checks from the node: a spec whose task is not the key's
// name, or whose command is a relative path, or that is not HCL, runs
// nothing, and the agent says why; a valid spec written after them runs.
func TestAgent_RefusesSpecsWrittenToEtcdBehindTheCLIsBack(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := fmt.Sprintf("fleetagent-direct-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	ag := startAgent(t, ep, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	prefix := cluster.DefaultPrefix + "desired/n1/"
	for name, spec := range map[string]string{
		"alias":    "task \"other\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"/bin/sleep\"\n    args = [\"300\", \"" + marker + "\"]\n  }\n}\n",
		"relative": "task \"relative\" {\n  driver = \"raw_exec\"\n  config {\n    command = \"bin/sleep\"\n    args = [\"300\", \"" + marker + "\"]\n  }\n}\n",
		"garbage":  "task {{{ \"" + marker + "\"",
	} {
		if _, err := cli.Put(ctxT(t), prefix+name, spec); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(sleeperFile(t, marker))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctxT(t), prefix+"web", string(src)); err != nil {
		t.Fatal(err)
	}
	mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	if p := testproc.Marked(marker); len(p) != 1 {
		t.Errorf("processes of the node's desired tasks: %v, want web's alone", p)
	}
	f, err := cluster.NewFleet(cli, "")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := f.Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Task != nil && r.Task.Name != "web" {
			t.Errorf("a refused spec ran: %+v", *r.Task)
		}
	}
	for _, name := range []string{`name=alias`, `name=relative`} {
		if !strings.Contains(ag.log.String(), "desired task refused") || !strings.Contains(ag.log.String(), name) {
			t.Errorf("the agent's log does not say %s was refused:\n%s", name, ag.log)
		}
	}
	if _, err := cli.Delete(ctxT(t), prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log)
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()
}
