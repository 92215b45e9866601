package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

// End to end on a real etcd cluster: Debian's etcd-server (3.4), three
// members on loopback, each a process the test SIGKILLs (the tests skip,
// naming the package, where it is absent).

// A leader killed while `tether cluster events -f` follows a task: the
// stream goes on through another member and prints every event once, and
// the other commands work with two members of three.
func TestE2E_CommandsAndAFollowAcrossALeaderKill(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	n1 := startNode(t, cli, "n1")
	id := n1.sleeper("web")
	n1.waitMirrored(cli)
	lines, _, done := follow(t, "cluster", "--endpoints", eps, "events", "web")
	got := until(t, lines, "  running")
	c.Kill(c.Leader(cli))
	if _, err := n1.d.StopTask(ctxT(t), id, syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		got = append(got, l)
	}
	if err := <-done; err != nil {
		t.Fatalf("events -f across a leader kill ended with %v", err)
	}
	st := must(t, "cluster", "--endpoints", eps, "status", "--all")
	if !strings.Contains(st.stdout, id) || !strings.Contains(st.stdout, "stopped") {
		t.Errorf("status with a member down:\n%s", st.stdout)
	}
	file := filepath.Join(t.TempDir(), "web.hcl")
	if err := os.WriteFile(file, []byte(webFile), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "cluster", "--endpoints", eps, "start", "--node", "n1", file)
	must(t, "cluster", "--endpoints", eps, "stop", "--node", "n1", "web")
	n1.close()
	local := must(t, "--state-dir", n1.dir, "events", id)
	if strings.Join(got, "\n")+"\n" != local.stdout {
		t.Errorf("events -f across a leader kill:\n%s\ntether events on the node:\n%s", strings.Join(got, "\n"), local.stdout)
	}
}

// With every member down a command says etcd did not answer, within
// --command-timeout; once they are back the node's mirror has caught up
// with what it did meanwhile, and the commands show it.
func TestE2E_FullOutageCommandsSayEtcdIsUnavailableThenSeeTheCatchUp(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	n1 := startNode(t, cli, "n1")
	before := n1.sleeper("web")
	n1.waitMirrored(cli)
	for i := range c.Len() {
		c.Kill(i)
	}
	during := n1.run("batch", 0) // the node goes on without etcd
	start := time.Now()
	r := tether(t, "cluster", "--endpoints", eps, "--command-timeout", "2s", "status")
	if r.code != exitError || !strings.Contains(r.stderr, "etcd unavailable") || !strings.Contains(r.stderr, "--command-timeout 2s") {
		t.Errorf("status with etcd down:\n%s", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("status with etcd down took %s, --command-timeout 2s", d)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	c.WaitReady(c.Endpoints()...)
	n1.waitMirrored(cli)
	st := must(t, "cluster", "--endpoints", eps, "status", "--all")
	for _, id := range []string{before, during} {
		if !strings.Contains(st.stdout, id) {
			t.Errorf("status after the outage lacks %s:\n%s", id, st.stdout)
		}
	}
	ev := must(t, "cluster", "--endpoints", eps, "events", during)
	if !strings.Contains(ev.stdout, "task-created") || !strings.Contains(ev.stdout, "executor-reaped") {
		t.Errorf("events of the task run during the outage:\n%s", ev.stdout)
	}
}
