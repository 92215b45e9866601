// Package etcdtest runs real etcd servers for tests: one embedded in the
// test process (go.etcd.io/etcd/server/v3/embed), or a cluster of real
// etcd processes (Debian's etcd-server, 3.4) that a test can SIGKILL
// member by member. Only tests import it: no binary links the etcd
// server.
//
//	ep := etcdtest.Embedded(t)           // http://127.0.0.1:PORT, closed at cleanup
//	c := etcdtest.Start(t, 3)            // skips, naming the package, where etcd is absent
//	c.Kill(c.Leader(cli)); c.Restart(0)
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// FreePort returns a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Embedded starts an etcd server in the test process (on 127.0.0.1,
// random ports, a t.TempDir data directory, no fsync) and returns its
// client URL. tune changes its configuration before it starts. It is
// closed at cleanup.
func Embedded(t testing.TB, tune ...func(*embed.Config)) string {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cfg := embed.NewConfig()
		cfg.Name = "m0"
		cfg.Dir = filepath.Join(t.TempDir(), "etcd")
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.UnsafeNoFsync = true
		cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
		pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		for _, f := range tune {
			f(cfg)
		}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			if attempt < 3 { // a port taken between FreePort and the listen
				continue
			}
			t.Fatalf("start embedded etcd: %v", err)
		}
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(30 * time.Second):
			e.Close()
			t.Fatal("embedded etcd not ready in 30s")
		}
		t.Cleanup(e.Close)
		return cu.String()
	}
}

// Cluster is a real etcd cluster: Debian's etcd-server, each member a
// process of its own on loopback.
type Cluster struct {
	t       testing.TB
	bin     string
	members []*member
	initial string
}

type member struct {
	name, dir, client, peer string
	cmd                     *exec.Cmd
	done                    chan struct{}
}

// Start starts an n-member cluster and waits until it answers, or skips
// the test where the etcd binary is absent. Every member is SIGKILLed at
// cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (Debian package etcd-server): this test runs a real etcd cluster")
	}
	c := &Cluster{t: t, bin: bin}
	var parts []string
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(t.TempDir(), "etcd"),
			client: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)), peer: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))}
		c.members = append(c.members, m)
		parts = append(parts, m.name+"="+m.peer)
	}
	c.initial = strings.Join(parts, ",")
	for i := range c.members {
		c.Restart(i)
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Kill(i)
		}
	})
	c.WaitReady(c.Endpoints()...)
	return c
}

// Len is the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].client }

// Restart starts member i (again, on its data directory, when it was
// killed); it does not wait for it to answer (see WaitReady).
func (c *Cluster) Restart(i int) {
	m := c.members[i]
	if m.cmd != nil {
		return
	}
	m.cmd = exec.Command(c.bin, "--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", c.initial, "--initial-cluster-state", "new", "--initial-cluster-token", "tether-e2e",
		"--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap", "--log-level", "error")
	m.cmd.Stderr = logWriter{t: c.t, prefix: "etcd " + m.name}
	if err := m.cmd.Start(); err != nil {
		c.t.Fatalf("start etcd %s: %v", m.name, err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(m.cmd, m.done)
}

// Kill SIGKILLs member i and waits for it to be gone.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
}

// WaitReady waits until a linearizable read through eps succeeds (the
// client blocks until a member answers with a leader), for 60s at most.
func (c *Cluster) WaitReady(eps ...string) {
	c.t.Helper()
	cli := Client(c.t, eps...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "ready"); err != nil {
		c.t.Fatalf("etcd %v not ready: %v", eps, err)
	}
}

// Leader returns the index of the current leader.
func (c *Cluster) Leader(cli *clientv3.Client) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, m := range c.members {
		if m.cmd == nil {
			continue
		}
		st, err := cli.Status(ctx, m.client)
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	c.t.Fatal("no leader")
	return -1
}

// Client is a plain etcd client of eps, closed at cleanup.
func Client(t testing.TB, eps ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// logWriter passes a process's output to the test's log when -v.
type logWriter struct {
	t      testing.TB
	prefix string
}

func (w logWriter) Write(b []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("%s: %s", w.prefix, strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}
