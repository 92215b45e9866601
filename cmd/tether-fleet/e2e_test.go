package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
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

// With every member down a command says at once that etcd refused the
// connection (not after --command-timeout); once they are back the node's
// mirror has caught up with what it did meanwhile, and the commands show
// it.
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
	r := tether(t, "cluster", "--endpoints", eps, "--command-timeout", "1h", "status")
	if r.code != exitError || !strings.Contains(r.stderr, "etcd unavailable") || !strings.Contains(r.stderr, "refused the connection") {
		t.Errorf("status with etcd down:\n%s", r)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("status with etcd down took %s: a refused connection fails at once, whatever --command-timeout", d)
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

// The node's real agent on a real 3-member cluster: it converges through a
// leader kill; with every member down it serves its state directory
// (a stop made on the node meanwhile is recorded locally), and once the
// members are back its mirror catches up, event for event.
func TestE2E_RealAgentAcrossALeaderKillAndAFullOutage(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := fmt.Sprintf("fleetagent-e2e-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	file := sleeperFile(t, marker)
	ag := startAgent(t, eps, "n1", dir, nil)
	ag.waitRegistered(cli, "n1")
	must(t, "cluster", "--endpoints", eps, "start", "--node", "n1", file)
	first := mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)

	leader := c.Leader(cli)
	c.Kill(leader)
	var live []string
	for i, e := range c.Endpoints() {
		if i != leader {
			live = append(live, e)
		}
	}
	// A write in flight when the leader dies fails (etcd: "request timed
	// out, possibly due to previous leader failure"); the command is for
	// the new leader.
	c.WaitReady(live...)
	must(t, "cluster", "--endpoints", eps, "stop", "--node", "n1", "web")
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log)
	must(t, "cluster", "--endpoints", eps, "start", "--node", "n1", file)
	second := mirroredWhere(t, cli, "n1", ag.log, "web started again", func(r *cluster.TaskRef) bool {
		return r.Name == "web" && r.State == fsm.StateRunning && r.ID != first
	})
	c.Restart(leader)
	c.WaitReady(c.Endpoints()...)

	// Every member down: the node goes on without etcd.
	for i := range c.Len() {
		c.Kill(i)
	}
	ag.stop()
	must(t, "--state-dir", dir, "stop", second) // the plain CLI, on the node
	ag = startAgent(t, eps, "n1", dir, nil)
	ag.waitServing()
	if !strings.Contains(ag.log.String(), "etcd did not answer") {
		t.Errorf("the agent started with every member down does not say etcd did not answer:\n%s", ag.log)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	c.WaitReady(c.Endpoints()...)
	if stopped := mirroredWhere(t, cli, "n1", ag.log, "the stop made during the outage", func(r *cluster.TaskRef) bool {
		return r.ID == second && r.State == fsm.StateStopped
	}); stopped != second {
		t.Fatalf("mirrored %s", stopped)
	}
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()

	local := localLog(t, dir)
	want := map[string]uint64{}
	for task, evs := range local {
		want[task] = uint64(len(evs))
	}
	ag = startAgent(t, eps, "n1", dir, nil)
	waitHeads(t, cli, "n1", want, ag.log)
	ag.stop()
	f, err := cluster.NewFleet(cli, "")
	if err != nil {
		t.Fatal(err)
	}
	for task, evs := range local {
		got, _, err := f.Events(ctxT(t), "n1", task)
		if err != nil || len(got) != len(evs) {
			t.Errorf("%s: %d events mirrored (%v), %d in the local log", task, len(got), err, len(evs))
			continue
		}
		for j := range evs {
			if got[j].Seq != evs[j].Seq || got[j].Type != evs[j].Type || got[j].Time != evs[j].Time {
				t.Errorf("%s event %d: mirrored %d %s, local %d %s", task, j, got[j].Seq, got[j].Type, evs[j].Seq, evs[j].Type)
			}
		}
	}
	if len(local) != 2 {
		t.Errorf("the node's store holds %d tasks, want 2 (%s, %s): %v", len(local), first, second, want)
	}
}
