package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/internal/docfields"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/store"
)

// A refused connection fails a command at once, saying so: with a
// --command-timeout of an hour, only the probe can end it before the
// test's own two minutes.
func TestCluster_RefusedEtcdFailsACommandAtOnce(t *testing.T) {
	ep := fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	for _, args := range [][]string{
		{"status"}, {"nodes"}, {"status", "web"}, {"stop", "web"}, {"stop", "--node", "n1", "web"}, {"events", "web"},
	} {
		r := tether(t, append([]string{"cluster", "--endpoints", ep, "--command-timeout", "1h"}, args...)...)
		if r.code != exitError || !strings.Contains(r.stderr, "refused the connection at "+ep) || !strings.Contains(r.stderr, "start etcd there, or check --endpoints") {
			t.Errorf("%s with nothing listening: want exit 1 saying the connection was refused:\n%s", args, r)
		}
	}
}

// An etcd that accepts the connection and never answers is a timeout,
// said as one.
func TestCluster_UnansweringEtcdIsATimeoutSaidAsOne(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, never answered
		}
	}()
	r := tether(t, "cluster", "--endpoints", "http://"+l.Addr().String(), "--command-timeout", "1s", "status")
	if r.code != exitError || !strings.Contains(r.stderr, "etcd did not answer within --command-timeout 1s") {
		t.Errorf("status against a silent endpoint: want exit 1 saying it did not answer within 1s:\n%s", r)
	}
}

const fleetJob = `job "web" {
  group "front" {
    count = 3
    constraint {
      attribute = "${meta.tier}"
      value     = "gold"
    }
    task "server" {
      driver = "exec"
      config { command = "/bin/sleep" }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
`

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// gold and silver nodes, each registered with its meta and a scheduler
// among them: the fleet's as `tether agent --meta` would run it.
func metaNodes(t *testing.T, cli *clientv3.Client) map[string]*cluster.Node {
	t.Helper()
	out := map[string]*cluster.Node{}
	for name, tier := range map[string]string{"g1": "gold", "s1": "silver", "g2": "gold"} {
		dir := t.TempDir()
		st := openTestStore(t, dir)
		n, err := cluster.NewNode(cli, cluster.NodeConfig{Name: name, LeaseTTL: 2 * time.Second, Dir: filepath.Join(dir, "cluster"),
			Source: st, Changes: st.Changes(), Meta: map[string]string{"tier": tier}, Capacity: cluster.Resources{CPU: 100, MemoryMB: 100}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Register(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		out[name] = n
	}
	return out
}

// placedOn waits (on a watch) until job has n placements, and returns
// them by copy.
func placedOn(t *testing.T, f *cluster.Fleet, cli *clientv3.Client, job string, n int) *cluster.JobStatus {
	t.Helper()
	ctx := ctxT(t)
	for {
		st, err := f.JobStatus(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		placed := 0
		for _, r := range st.Rows {
			if r.Node != "" && r.State != "stopping" {
				placed++
			}
		}
		if placed == n {
			return st
		}
		select {
		case <-cli.Watch(ctx, cluster.DefaultPrefix+"alloc/"+job+"/", clientv3.WithPrefix(), clientv3.WithRev(st.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("job %s: %d placed, want %d: %+v", job, placed, n, st.Rows)
		}
	}
}

func TestCluster_RunPlacesAJobAndStatusShowsWhereEachCopyIs(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	nodes := metaNodes(t, cli)
	file := writeFile(t, "web.nomad", fleetJob)
	r := must(t, "cluster", "--endpoints", ep, "run", "--detach", file)
	if r.stdout != "web\n" || !strings.Contains(r.stderr, "web: version 1 written (3 copies in 1 groups)") {
		t.Errorf("run --detach:\n%s", r)
	}
	f, _ := cluster.NewFleet(cli, "")
	st := placedOn(t, f, cli, "web", 3)
	for _, row := range st.Rows {
		if row.Node != "g1" && row.Node != "g2" || row.Task != "server" || row.State != "placed" || row.Reason != "new" {
			t.Errorf("row %+v: want a gold node, placed (no word from the node yet)", row)
		}
	}
	// The same file again changes nothing.
	r = must(t, "cluster", "--endpoints", ep, "run", "--detach", file)
	if !strings.Contains(r.stderr, "unchanged: version 1 already runs this file") {
		t.Errorf("second run of the same file:\n%s", r)
	}
	// status JOB: the table and its JSON.
	out := must(t, "cluster", "--endpoints", ep, "status", "web")
	rows := fields(out.stdout)
	if len(rows) != 5 || strings.Join(rows[0], " ") != "COPY NODE TASK STATE REASON" || rows[1][0] != "front[0]" || rows[1][3] != "placed" ||
		!strings.HasPrefix(rows[4][0], "job web, version 1, running; 3 of 3 copies placed, 0 running") {
		t.Errorf("status web:\n%s", out.stdout)
	}
	objs := objects(t, must(t, "cluster", "--endpoints", ep, "status", "web", "--json").stdout)
	if len(objs) != 3 || objs[0]["job"] != "web" || objs[0]["copy"] != "front[0]" || objs[0]["task"] != "server" || objs[0]["state"] != "placed" || objs[0]["reason"] != "new" {
		t.Errorf("status web --json: %v", objs)
	}
	// Without --detach, run waits until every copy runs as its node says.
	changed := writeFile(t, "web.nomad", strings.Replace(fleetJob, "memory = 10", "memory = 11", 1))
	cmd := tetherCmd(ctxT(t), "cluster", "--endpoints", ep, "run", changed)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	placedOn(t, f, cli, "web", 3)
	// The job changed: a new version, whose copies replace the old
	// max_parallel (1) at a time as the nodes say each runs.
	var runErr error
	for ended := false; !ended; {
		st, _ = f.JobStatus(ctxT(t), "web")
		for _, row := range st.Rows {
			if row.Node != "" && row.State == "placed" {
				var id cluster.CopyID
				fmt.Sscanf(strings.NewReplacer("[", " ", "]", "").Replace(row.Copy), "%s %d", &id.Group, &id.Index)
				if err := nodes[row.Node].WriteVerdict(ctxT(t), cluster.Verdict{Job: "web", Group: id.Group, Index: id.Index, Revision: row.Revision,
					State: cluster.VerdictRunning, At: time.Now().UnixNano(), Tasks: []cluster.VerdictTask{{Name: "server", ID: "server-" + row.Copy, State: "running"}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case <-cli.Watch(ctxT(t), cluster.DefaultPrefix+"alloc/web/", clientv3.WithPrefix(), clientv3.WithRev(st.Revision+1)):
		case runErr = <-waited:
			ended = true
		}
	}
	if runErr != nil {
		t.Fatalf("run: %v\n%s%s", runErr, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "job web, version 2, running; 3 of 3 copies placed, 3 running") || !strings.Contains(stderr.String(), "version 2 written") {
		t.Errorf("run without --detach:\n%s%s", stdout.String(), stderr.String())
	}
	// Stop: the scheduler removes every copy.
	must(t, "cluster", "--endpoints", ep, "stop", "web")
	placedOn(t, f, cli, "web", 0)
	if st, err := f.JobStatus(ctxT(t), "web"); err != nil || !st.Head.Stopped || !st.Done() {
		t.Errorf("status after stop: %+v, %v", st, err)
	}
}

func TestCluster_RunFailsNamingWhyNoNodeCanHoldACopy(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	metaNodes(t, cli)
	big := strings.Replace(strings.Replace(fleetJob, "memory = 10", "memory = 80", 1), "count = 3", "count = 4", 1)
	r := tether(t, "cluster", "--endpoints", ep, "run", writeFile(t, "web.nomad", big))
	if r.code != exitError || !strings.Contains(r.stderr, "job web: 2 of its copies cannot be placed:") ||
		!strings.Contains(r.stderr, `constraint ${meta.tier} = "gold" not met on 1 node; memory exhausted on 2 nodes`) {
		t.Errorf("run of a job two copies of which fit nowhere:\n%s", r)
	}
}

func TestCluster_RunRefusesAFileBeforeAnythingIsWritten(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	for _, c := range []struct{ what, text, says string }{
		{"task file", webFile, "a task file has no job to place"},
		{"canary", strings.Replace(fleetJob, `group "front" {`, "group \"front\" {\n    update {\n      canary = 1\n    }", 1), "update canary"},
		{"system", strings.Replace(fleetJob, `job "web" {`, "job \"web\" {\n  type = \"system\"", 1), `job type "system"`},
		{"missing var", "variable \"n\" {\n  type = number\n}\n" + strings.Replace(fleetJob, "count = 3", "count = var.n", 1), "n"},
	} {
		r := tether(t, "cluster", "--endpoints", ep, "run", "--detach", writeFile(t, "job.nomad", c.text))
		if r.code != exitError || !strings.Contains(r.stderr, c.says) || !strings.Contains(r.stderr, "nothing was written") {
			t.Errorf("%s: want exit 1 saying %q:\n%s", c.what, c.says, r)
		}
	}
	resp, err := cli.Get(ctxT(t), cluster.DefaultPrefix+"job", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("refused files reached etcd: %v, %v", resp, err)
	}
	// -var and NOMAD_VAR_ give the variable; it is stored with the file.
	text := "variable \"n\" {\n  type = number\n}\n" + strings.Replace(fleetJob, "count = 3", "count = var.n", 1)
	must(t, "cluster", "--endpoints", ep, "run", "--detach", "--var", "n=2", writeFile(t, "job.nomad", text))
	f, _ := cluster.NewFleet(cli, "")
	spec, err := f.JobSpec(ctxT(t), "web", 1)
	if err != nil || spec.Inputs.Vars["n"] != "2" || spec.Text != text {
		t.Errorf("stored spec %+v, %v", spec, err)
	}
}

func TestCluster_StopWithoutNodeStopsAJobAndSaysWhenThereIsNone(t *testing.T) {
	ep := etcdtest.Embedded(t)
	r := tether(t, "cluster", "--endpoints", ep, "stop", "nosuch")
	if r.code != exitError || !strings.Contains(r.stderr, `unknown job "nosuch"`) || !strings.Contains(r.stderr, "--node NODE") {
		t.Errorf("stop of an unknown job:\n%s", r)
	}
	r = tether(t, "cluster", "--endpoints", ep, "status", "nosuch")
	if r.code != exitError || !strings.Contains(r.stderr, `unknown job "nosuch"`) {
		t.Errorf("status of an unknown job:\n%s", r)
	}
	if r := tether(t, "cluster", "--endpoints", ep, "status", "--all", "web"); r.code != exitUsage {
		t.Errorf("status --all JOB:\n%s", r)
	}
}

// TestDocs_FleetJobJSONFieldsAreDocumented holds `cluster status JOB
// --json` to its table in docs/fleet.md both ways: a copy its node says
// runs (with its task's id), one placed with no word yet, one no node can
// hold.
func TestDocs_FleetJobJSONFieldsAreDocumented(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	nodes := metaNodes(t, cli)
	text := strings.Replace(strings.Replace(fleetJob, "memory = 10", "memory = 60", 1), "count = 3", "count = 3", 1)
	must(t, "cluster", "--endpoints", ep, "run", "--detach", writeFile(t, "web.nomad", text))
	f, _ := cluster.NewFleet(cli, "")
	st := placedOn(t, f, cli, "web", 2)
	for _, row := range st.Rows {
		if row.Node != "" && row.Copy == "front[0]" {
			if err := nodes[row.Node].WriteVerdict(ctxT(t), cluster.Verdict{Job: "web", Group: "front", Index: 0, Revision: row.Revision,
				State: cluster.VerdictRunning, At: 1, Tasks: []cluster.VerdictTask{{Name: "server", ID: "server-1", State: "running"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		st, _ = f.JobStatus(ctxT(t), "web")
		if len(st.Unplaced()) == 1 && st.Rows[0].ID != "" {
			break
		}
		select {
		case <-cli.Watch(ctxT(t), cluster.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithRev(st.Revision+1)):
		case <-ctxT(t).Done():
			t.Fatalf("status %+v", st.Rows)
		}
	}
	objs := docfields.Objects(t, must(t, "cluster", "--endpoints", ep, "status", "web", "--json").stdout)
	docfields.Check(t, "cluster status JOB --json", docfields.Table(t, filepath.Join("..", "..", "docs", "fleet.md"), "### `tether cluster status JOB --json"), objs)
}

// openTestStore opens a real store in dir, closed at cleanup.
func openTestStore(t *testing.T, dir string) *cluster.StoreSource {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{NoSync: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := cluster.NewStoreSource(st)
	t.Cleanup(func() { src.Close() })
	return src
}

// A node's refusal of a copy ends the wait at once, naming the node and
// its reason.
func TestCluster_RunFailsNamingANodesRefusalAndItsReason(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	nodes := metaNodes(t, cli)
	// A refusal ends the wait at once: --timeout (20 s, where the
	// refusal is seen within a second) is what a run that misses it
	// waits out, and then says so.
	cmd := tetherCmd(ctxT(t), "cluster", "--endpoints", ep, "run", "--timeout", "20s", writeFile(t, "web.nomad", fleetJob))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f, _ := cluster.NewFleet(cli, "")
	for ctx := ctxT(t); ; { // until run has written the job
		resp, err := cli.Get(ctx, cluster.DefaultPrefix+"job/web")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 {
			break
		}
		<-cli.Watch(ctx, cluster.DefaultPrefix+"job/web", clientv3.WithRev(resp.Header.Revision+1))
		if ctx.Err() != nil {
			t.Fatal("run never wrote the job")
		}
	}
	st := placedOn(t, f, cli, "web", 3)
	row := st.Rows[0]
	if err := nodes[row.Node].WriteVerdict(ctxT(t), cluster.Verdict{Job: "web", Group: "front", Index: 0, Revision: row.Revision,
		State: cluster.VerdictRefused, Reason: `driver "exec" is not allowed for a spec from etcd on this node`, At: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), "front[0]: refused by node "+row.Node+": ") || !strings.Contains(stderr.String(), `driver "exec" is not allowed`) ||
		strings.Contains(stderr.String(), "after --timeout") {
		t.Errorf("run with a copy refused by its node: %v\n%s%s", err, stdout.String(), stderr.String())
	}
}
