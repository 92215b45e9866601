package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

func TestRegister_SecondAgentIsRefusedNamingTheHolder(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dirA, dirB := t.TempDir(), t.TempDir()
	a := newTestNode(t, cli, "n1", dirA, openStore(t, dirA))
	runNode(t, a)
	b := newTestNode(t, cli, "n1", dirB, openStore(t, dirB))
	err := b.Register(ctxT(t))
	var held *NodeHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrNodeHeld) {
		t.Fatalf("second agent's Register = %v, want a NodeHeldError", err)
	}
	if held.Holder.PID != os.Getpid() || held.Holder.Dir != a.cfg.Dir || held.Holder.Lease != a.Stats(ctxT(t)).Lease {
		t.Errorf("holder %+v does not name the first agent (pid %d, dir %s)", held.Holder, os.Getpid(), a.cfg.Dir)
	}
	if !strings.Contains(err.Error(), a.cfg.Dir) {
		t.Errorf("error %q does not name the holder's state directory", err)
	}
	// The refused agent left no lease behind to hold anything.
	leases, err := cli.Leases(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != 1 {
		t.Errorf("%d leases after a refused registration, want only the holder's", len(leases.Leases))
	}
}

func TestRegister_EarlierAgentOfTheSameStateDirectoryIsTakenOver(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	a := newTestNode(t, cli, "n1", dir, src, func(c *NodeConfig) { c.LeaseTTL = time.Minute })
	if err := a.Register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	old := a.Stats(ctxT(t)).Lease
	// a "crashes": its lease has a minute left. Its successor holds the
	// same store, so it is the only agent of the directory.
	b := newTestNode(t, cli, "n1", dir, src)
	if err := b.Register(ctxT(t)); err != nil {
		t.Fatalf("successor of the same state directory: %v", err)
	}
	if b.Stats(ctxT(t)).Lease == old {
		t.Fatal("successor reused the old lease")
	}
	ttl, err := cli.TimeToLive(ctxT(t), clientv3.LeaseID(old))
	if err != nil || ttl.TTL != -1 {
		t.Errorf("the earlier agent's lease still lives (TTL %d, %v): it should be revoked", ttl.TTL, err)
	}
}

// A stalled agent that resumes after its successor took the node over
// (registering again, refused, its attempt forgotten) keeps the
// successor's lease in the lease record: the next agent of the state
// directory still takes the node over at once. (The resumed agent wrote
// the record from what it knew, and dropped the successor's lease: the
// next agent was refused until that lease ran out.)
func TestRegister_ResumedStalledAgentKeepsItsSuccessorsLeaseRecorded(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	long := func(c *NodeConfig) { c.LeaseTTL = time.Minute }
	stalled := newTestNode(t, cli, "n1", dir, src, long)
	if err := stalled.Register(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	succ := newTestNode(t, cli, "n1", dir, src, long)
	if err := succ.Register(ctxT(t)); err != nil {
		t.Fatalf("successor: %v", err)
	}
	// The stalled agent resumes and tries to register again: refused,
	// the successor holds the node under a lease it never knew.
	if _, err := stalled.register(ctxT(t)); !errors.Is(err, ErrNodeHeld) {
		t.Fatalf("the resumed agent's registration: %v, want ErrNodeHeld", err)
	}
	next := newTestNode(t, cli, "n1", dir, src, long)
	if err := next.Register(ctxT(t)); err != nil {
		t.Fatalf("the next agent of the state directory is refused: %v", err)
	}
}

func TestLiveness_LostLeaseIsNoticedAndRegisteredAgain(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir))
	runNode(t, n)
	first := n.Stats(ctxT(t)).Lease
	_, changed := n.fence.get()
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(first)); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-changed:
		case <-ctxT(t).Done():
			t.Fatal("the lost lease was never replaced")
		}
		var id clientv3.LeaseID
		id, changed = n.fence.get()
		if id != 0 && int64(id) != first {
			break
		}
	}
	if n.Stats(ctxT(t)).LeaseLosses < 1 {
		t.Error("the loss was not counted")
	}
	resp, err := cli.Get(ctxT(t), "/tether/alive/n1")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == first {
		t.Fatalf("liveness key after re-registration: %v, %v", resp.Kvs, err)
	}
}

// A stopped agent renews its lease no more: its node shows down once the
// lease runs out (within the TTL of its last renewal, by etcd's clock).
// The test holds the agent to what is its own (no keep-alive is sent for
// the lease after the agent stopped, but one already in flight) and
// waits for the key's deletion on a watch, with no wall-clock bound: on a
// loaded host etcd's expiry of a lease may lag its TTL by seconds, which
// made the earlier "within TTL + 2s" bound fail on unchanged code
// (issue 36).
func TestNode_ShowsDownWithinTheLeaseTTLOnceItsAgentStops(t *testing.T) {
	ep := etcdtest.Embedded(t)
	var stopped atomic.Bool
	var after atomic.Int64
	renewed := make(chan struct{})
	var once sync.Once
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
			return s, err
		}
		return &keepAliveCounter{ClientStream: s, sent: func() {
			once.Do(func() { close(renewed) })
			if stopped.Load() {
				after.Add(1)
			}
		}}, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir))
	stop := runNode(t, n)
	select {
	case <-renewed: // the agent renews its lease
	case <-ctxT(t).Done():
		t.Fatal("the agent never renewed its lease")
	}
	f, _ := NewFleet(cli, "")
	rows, err := f.Nodes(ctxT(t))
	if err != nil || len(rows) != 1 || rows[0].Liveness != Up {
		t.Fatalf("nodes = %+v, %v; want n1 up", rows, err)
	}
	// Watch the liveness key from now, then stop the agent without
	// revoking: only the lease's expiry can delete the key.
	resp, _ := cli.Get(ctxT(t), "/tether/alive/n1")
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	wch := cli.Watch(ctxT(t), "/tether/alive/n1", clientv3.WithRev(resp.Header.Revision+1))
	stop()
	stopped.Store(true)
	if ttl, err := cli.TimeToLive(ctxT(t), lease); err != nil || ttl.TTL > ttl.GrantedTTL || ttl.GrantedTTL != 2 {
		t.Errorf("lease after the agent stopped: %+v, %v: want at most its 2s TTL left", ttl, err)
	}
	deleted := false
	for wr := range wch {
		if len(wr.Events) > 0 && wr.Events[0].Type == clientv3.EventTypeDelete {
			deleted = true
			break
		}
	}
	if !deleted {
		t.Fatal("the liveness key was never deleted")
	}
	if k := after.Load(); k > 1 {
		t.Errorf("%d keep-alives sent for the lease after the agent stopped: nothing may renew it (one already in flight at most)", k)
	}
	rows, err = f.Nodes(ctxT(t))
	if err != nil || len(rows) != 1 || rows[0].Liveness != Down || rows[0].Since.IsZero() {
		t.Fatalf("nodes = %+v, %v; want n1 down, with since", rows, err)
	}
}

// keepAliveCounter counts the keep-alive requests a client sends.
type keepAliveCounter struct {
	grpc.ClientStream
	sent func()
}

func (k *keepAliveCounter) SendMsg(m any) error {
	k.sent()
	return k.ClientStream.SendMsg(m)
}

func TestNewNode_RefusesBadConfig(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	for name, cfg := range map[string]NodeConfig{
		"bad name":    {Name: "../etc", Dir: dir, Source: src, Changes: src.Changes()},
		"short ttl":   {Name: "n1", Dir: dir, Source: src, Changes: src.Changes(), LeaseTTL: time.Second},
		"no source":   {Name: "n1", Dir: dir},
		"no dir":      {Name: "n1", Source: src, Changes: src.Changes()},
		"bad prefix":  {Name: "n1", Dir: dir, Source: src, Changes: src.Changes(), Prefix: "tether"},
		"open dir":    {Name: "n1", Dir: worldWritable(t), Source: src, Changes: src.Changes()},
		"tiny txn":    {Name: "n1", Dir: dir, Source: src, Changes: src.Changes(), MaxTxnOps: 2},
		"name with /": {Name: "a/b", Dir: dir, Source: src, Changes: src.Changes()},
	} {
		if _, err := NewNode(cli, cfg); err == nil {
			t.Errorf("%s: NewNode accepted %+v", name, cfg)
		}
	}
}

func worldWritable(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRegister_EtcdDownIsUnavailableNotFatal(t *testing.T) {
	cli := dial(t, "http://127.0.0.1:"+itoa(etcdtest.FreePort(t)))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.Register(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Register with etcd down = %v, want ErrUnavailable", err)
	}
}
