package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// The test binary is also the agent a real-process test SIGKILLs:
// TestMain dispatches on its first argument (see agent_test.go).
func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{modeAgent: runAgent})
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	os.Exit(m.Run())
}

// tb is what the helpers need of a test: a *testing.T, a benchmark, or
// a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

func ctxT(t tb) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := Dial(Config{Endpoints: endpoints, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// openStore opens a real bbolt store in dir as the agent would.
func openStore(t testing.TB, dir string) *StoreSource {
	t.Helper()
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{NoSync: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := NewStoreSource(s)
	t.Cleanup(func() { src.Close() })
	return src
}

// node builds a node over src with its directory in dir.
func newTestNode(t testing.TB, cli *clientv3.Client, name, dir string, src *StoreSource, tune ...func(*NodeConfig)) *Node {
	t.Helper()
	// raw_exec from etcd allowed: these tests' specs are raw_exec (the
	// default, exec alone, is TestDesired_RawExecRefusedByNameNotKept's).
	cfg := NodeConfig{Name: name, LeaseTTL: 2 * time.Second, Dir: filepath.Join(dir, "cluster"), Source: src, Changes: src.Changes(),
		Policy: job.Policy{AllowRemoteDrivers: []string{"exec", "raw_exec"}}}
	for _, f := range tune {
		f(&cfg)
	}
	n, err := NewNode(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runNode registers n and runs it until the returned stop is called (or
// the test ends).
func runNode(t testing.TB, n *Node) (stop func()) {
	t.Helper()
	if err := n.Register(ctxT(t)); err != nil {
		t.Fatalf("register %s: %v", n.Name(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// lifecycle returns the events that take a new task named name to
// running (its spec carrying a secret in its environment), then extra
// reattached events.
func lifecycle(name string, sec int, extra int) []fsm.Event {
	at := func(s int) int64 { return t0.Add(time.Duration(sec+s) * time.Millisecond).UnixNano() }
	evs := []fsm.Event{
		{Type: fsm.EventCreated, Time: at(0), Spec: &fsm.Spec{Name: name, Driver: "exec", Command: "/bin/sleep", Args: []string{"30"},
			Env: map[string]string{"TOKEN": "s3cr3t-" + name, "MODE": "prod"}}},
		{Type: fsm.EventSpawnIntent, Time: at(1), Nonce: "n-" + name},
		{Type: fsm.EventExecutorUp, Time: at(2), Executor: &fsm.Identity{PID: 100, StartTime: 7, BootID: "b", Nonce: "n-" + name, Socket: "/s"}},
		{Type: fsm.EventLaunchIntent, Time: at(3)},
		{Type: fsm.EventLaunched, Time: at(4), TaskPID: 101, TaskStartTime: 8},
		{Type: fsm.EventRunning, Time: at(5)},
	}
	for i := range extra {
		evs = append(evs, fsm.Event{Type: fsm.EventReattached, Time: at(6 + i)})
	}
	return evs
}

// finish returns the events that take a running task to exited.
func finish(ms int) []fsm.Event {
	at := t0.Add(time.Duration(ms) * time.Millisecond).UnixNano()
	return []fsm.Event{
		{Type: fsm.EventTaskExited, Time: at, Exit: &fsm.ExitStatus{Code: 0}},
		{Type: fsm.EventExecutorReaped, Time: at + 1, Target: fsm.StateExited},
	}
}

func appendAll(t testing.TB, src store.Log, task string, evs ...fsm.Event) uint64 {
	t.Helper()
	tk, err := src.LoadTask(ctxT(t), task)
	if err != nil && !isUnknown(err) {
		t.Fatal(err)
	}
	v, err := src.Append(ctxT(t), task, tk.Version, evs...)
	if err != nil {
		t.Fatalf("append %s: %v", task, err)
	}
	return v
}

func isUnknown(err error) bool { return err != nil && errors.Is(err, store.ErrUnknownTask) }

// redacted is the local log's events as the mirror must hold them.
func redacted(evs []fsm.Event) []fsm.Event {
	out := make([]fsm.Event, len(evs))
	for i, e := range evs {
		e.Spec = redact(e.Spec)
		out[i] = e
	}
	return out
}

// waitMirrored waits (on an etcd watch of the fleet's keys, no polling)
// until the mirror of node holds exactly the local log of src: every
// task's events, in order, once each, environment values redacted, read
// at one revision.
func waitMirrored(t testing.TB, cli *clientv3.Client, node string, src Source) {
	t.Helper()
	ctx := ctxT(t)
	keys, _ := NewKeys("")
	for {
		ok, why, rev := mirrorMatches(t, ctx, cli, keys, node, src)
		if ok {
			return
		}
		wch := cli.Watch(ctx, keys.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		select {
		case <-wch:
		case <-ctx.Done():
			t.Fatalf("mirror of %s did not converge to the local log: %s", node, why)
		}
	}
}

// mirrorMatches compares the mirror of node, read at one revision, with
// the local log.
func mirrorMatches(t testing.TB, ctx context.Context, cli *clientv3.Client, keys Keys, node string, src Source) (ok bool, why string, rev int64) {
	t.Helper()
	resp, err := cli.Get(ctx, keys.headPrefix(node), clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read heads: %v", err)
	}
	rev = resp.Header.Revision
	local, err := src.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(local) != len(resp.Kvs) {
		return false, fmt.Sprintf("%d tasks mirrored, %d local", len(resp.Kvs), len(local)), rev
	}
	for i, kv := range resp.Kvs {
		h, err := decodeHead(string(kv.Key), kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(kv.Key) != keys.head(node, local[i].Task) || h.Seq != local[i].Seq {
			return false, fmt.Sprintf("head %s at seq %d, local %s at %d", kv.Key, h.Seq, local[i].Task, local[i].Seq), rev
		}
	}
	for _, l := range local {
		er, err := cli.Get(ctx, keys.eventPrefix(node, l.Task), clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatal(err)
		}
		var got []fsm.Event
		for _, kv := range er.Kvs {
			e, err := decodeEvent(string(kv.Key), kv.Value)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, e)
		}
		want, err := src.Events(ctx, l.Task, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, redacted(want)) {
			return false, fmt.Sprintf("events of %s differ from the local log:\n got %v\nwant %v", l.Task, got, want), rev
		}
	}
	return true, "", rev
}

func itoa(i int) string { return fmt.Sprint(i) }

func mustKeys(t tb) Keys {
	k, err := NewKeys("")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func nopLog() hclog.Logger { return hclog.NewNullLogger() }
