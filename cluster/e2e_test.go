package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/store"
)

// waitHeads waits (on a watch) until node's mirrored heads are exactly
// want.
func waitHeads(t *testing.T, cli *clientv3.Client, node string, want map[string]uint64) {
	t.Helper()
	keys := mustKeys(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, keys.headPrefix(node), clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("read heads: %v", err)
		}
		got := map[string]uint64{}
		for _, kv := range resp.Kvs {
			h, err := decodeHead(string(kv.Key), kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			got[strings.TrimPrefix(string(kv.Key), keys.headPrefix(node))] = h.Seq
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-cli.Watch(ctx, keys.headPrefix(node), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("mirror of %s stuck at %v, want %v", node, got, want)
		}
	}
}

// wantHeads is what generate leaves: tasks tasks of 6+events events.
func wantHeads(node string, tasks, events int) map[string]uint64 {
	m := map[string]uint64{}
	for i := range tasks {
		m[genTask(node, i)] = uint64(6 + events)
	}
	return m
}

// checkExactlyOnce stops the agent and compares the mirror with its
// store, event by event.
func checkExactlyOnce(t *testing.T, cli *clientv3.Client, node, dir string, a *agentProc) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := NewStoreSource(s)
	if ok, why, _ := mirrorMatches(t, ctxT(t), cli, mustKeys(t), node, src); !ok {
		t.Fatalf("mirror is not the local log exactly: %s", why)
	}
}

func agentArgs(eps []string, node, dir string, tasks, events int, every time.Duration) []string {
	return []string{"-endpoints", strings.Join(eps, ","), "-node", node, "-dir", dir, "-ttl", "2s",
		"-tasks", fmt.Sprint(tasks), "-events", fmt.Sprint(events), "-every", every.String()}
}

func TestE2E_MemberKilledMirrorKeepsWorking(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := dial(t, c.Endpoints()...)
	dir := t.TempDir()
	a, first := startAgent(t, nil, agentArgs(c.Endpoints(), "n1", dir, 5, 40, 5*time.Millisecond)...)
	if first != "registered" {
		t.Fatalf("agent: %s", first)
	}
	// Kill the leader while the agent commits and mirrors.
	killed := c.Leader(cli)
	c.Kill(killed)
	if l := a.next(t); !strings.HasPrefix(l, "generated ") {
		t.Fatalf("agent: %s", l)
	}
	waitHeads(t, cli, "n1", wantHeads("n1", 5, 40))
	checkExactlyOnce(t, cli, "n1", dir, a)
}

func TestE2E_FullOutageLocalSideGoesOnMirrorCatchesUpExactlyOnce(t *testing.T) {
	c := etcdtest.Start(t, 3)
	dir := t.TempDir()
	a, first := startAgent(t, nil, agentArgs(c.Endpoints(), "n1", dir, 4, 30, 2*time.Millisecond)...)
	if first != "registered" {
		t.Fatalf("agent: %s", first)
	}
	for i := range c.Len() {
		c.Kill(i)
	}
	// The node commits its whole history with etcd gone.
	if l := a.next(t); l != fmt.Sprintf("generated %d", 4*36) {
		t.Fatalf("agent with etcd down: %s", l)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	cli := dial(t, c.Endpoints()...)
	waitHeads(t, cli, "n1", wantHeads("n1", 4, 30))
	checkExactlyOnce(t, cli, "n1", dir, a)
}

func TestE2E_SIGKILLedAgentShowsDownWithinTheLeaseTTL(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := dial(t, c.Endpoints()...)
	dir := t.TempDir()
	a, first := startAgent(t, nil, agentArgs(c.Endpoints(), "n1", dir, 2, 0, 0)...)
	if first != "registered" {
		t.Fatalf("agent: %s", first)
	}
	a.next(t) // generated
	waitHeads(t, cli, "n1", wantHeads("n1", 2, 0))
	resp, err := cli.Get(ctxT(t), "/tether/alive/n1")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("liveness key: %v, %v", resp, err)
	}
	wch := cli.Watch(ctxT(t), "/tether/alive/n1", clientv3.WithRev(resp.Header.Revision+1))
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	killed := time.Now()
	for wr := range wch {
		if len(wr.Events) > 0 && wr.Events[0].Type == clientv3.EventTypeDelete {
			break
		}
	}
	// etcd expires a lease at most one TTL after its last renewal (and
	// checks every 500ms); 2s of slack on a loaded 2-core machine.
	if d := time.Since(killed); d > 2*time.Second+2*time.Second {
		t.Errorf("node down %s after its agent was SIGKILLed, TTL 2s", d)
	}
	f, _ := NewFleet(cli, "")
	rows, err := f.Status(ctxT(t))
	if err != nil || len(rows) != 2 {
		t.Fatalf("status: %v, %v", rows, err)
	}
	for _, r := range rows {
		if r.Liveness != Down || !strings.HasPrefix(r.StateText(), "unknown (node down since ") {
			t.Errorf("row %s %s: %s, want unknown (node down since …)", r.Node, r.Task.ID, r.StateText())
		}
	}
}

func TestE2E_SecondAgentForTheSameNodeIsRefused(t *testing.T) {
	c := etcdtest.Start(t, 3)
	dirA, dirB := t.TempDir(), t.TempDir()
	a, first := startAgent(t, nil, agentArgs(c.Endpoints(), "n1", dirA, 1, 0, 0)...)
	if first != "registered" {
		t.Fatalf("agent A: %s", first)
	}
	b, line := startAgent(t, nil, agentArgs(c.Endpoints(), "n1", dirB, 1, 0, 0)...)
	if !strings.HasPrefix(line, "held: ") || !strings.Contains(line, fmt.Sprintf("pid %d", a.cmd.Process.Pid)) ||
		!strings.Contains(line, filepath.Join(dirA, "cluster")) {
		t.Fatalf("agent B said %q, want it refused naming A (pid %d, %s)", line, a.cmd.Process.Pid, dirA)
	}
	var ee *exec.ExitError
	if err := b.wait(t); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("agent B ended with %v, want exit 3", err)
	}
}

// TestE2E_CrashAtEveryPointConvergesExactlyOnce SIGKILLs a real agent at
// each crash point (with an etcd member killed too, for the mirror's),
// starts it again on the same state directory, and checks the mirror is
// the local log exactly.
func TestE2E_CrashAtEveryPointConvergesExactlyOnce(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := dial(t, c.Endpoints()...)
	for i, point := range CrashPoints() {
		t.Run(point, func(t *testing.T) {
			node := fmt.Sprintf("n%d", i)
			dir := t.TempDir()
			if strings.HasPrefix(point, "mirror:") {
				if i%2 == 0 {
					c.Kill(0)
					defer func() { c.Restart(0); c.WaitReady(c.Endpoint(0)) }()
				}
				if point == CrashMirrorBeforePrune || point == CrashMirrorAfterPrune {
					// A prune needs a mirrored task the local log lacks.
					plantStrayTask(t, cli, node)
				}
			}
			args := agentArgs(c.Endpoints(), node, dir, 3, 10, time.Millisecond)
			a := startAgentNoWait(t, []string{EnvCrashPoint + "=" + point}, args...)
			err := a.wait(t)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("agent with crash point %s ended with %v, want SIGKILL at the point", point, err)
			}
			b, first := startAgent(t, nil, args...)
			if first != "registered" {
				t.Fatalf("agent after the crash: %s", first)
			}
			if l := b.next(t); !strings.HasPrefix(l, "generated ") {
				t.Fatalf("agent after the crash: %s", l)
			}
			waitHeads(t, cli, node, wantHeads(node, 3, 10))
			checkExactlyOnce(t, cli, node, dir, b)
		})
	}
}

// plantStrayTask writes a mirrored task no local log has.
func plantStrayTask(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	k := mustKeys(t)
	e := lifecycle("stray", 0, 0)[0]
	e.Seq = 1
	ev, _ := encodeEvent(&e)
	hv, _ := marshal(head{Seq: 1, State: "created", Name: "stray", Created: e.Time, Updated: e.Time, LastType: e.Type.String()})
	// A member was just killed: etcd may time a request out while a new
	// leader is elected; the write is idempotent, so it is retried.
	ctx := ctxT(t)
	for {
		_, err := cli.Txn(ctx).Then(clientv3.OpPut(k.event(node, "stray", 1), string(ev)), clientv3.OpPut(k.head(node, "stray"), string(hv))).Commit()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
}
