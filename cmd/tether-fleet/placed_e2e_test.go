package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
)

// Placed jobs end to end: three real agents on one machine, each a node
// with its own state directory, name, --meta and --capacity, on a real
// 3-member etcd (Debian's etcd-server; skipped, naming it, where absent).

// placedJob is a job of count copies, each one exec task (a shell whose
// command line carries marker, so the test counts the copies that run),
// constrained to the gold nodes.
func placedJob(t *testing.T, count, memory int, marker string) string {
	return writeFile(t, "web.nomad", fmt.Sprintf(`job "web" {
  group "front" {
    count = %d
    constraint {
      attribute = "${meta.tier}"
      value     = "gold"
    }
    task "server" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' TERM; sleep 3600 & wait; true # %s"]
      }
      resources {
        cpu    = 10
        memory = %d
      }
    }
  }
}
`, count, marker, memory))
}

// copyRow is one row of `tether cluster status JOB --json`.
type copyRow struct {
	Copy, Node, State, Reason, ID string
}

func jobRows(t *testing.T, eps, job string) []copyRow {
	t.Helper()
	var out []copyRow
	for _, o := range objects(t, must(t, "cluster", "--endpoints", eps, "status", job, "--json").stdout) {
		r := copyRow{}
		r.Copy, _ = o["copy"].(string)
		r.Node, _ = o["node"].(string)
		r.State, _ = o["state"].(string)
		r.Reason, _ = o["reason"].(string)
		r.ID, _ = o["id"].(string)
		out = append(out, r)
	}
	return out
}

// waitRows waits (on a watch of the job's placements and verdicts) until
// ok holds of the job's rows, and returns them.
func waitRows(t *testing.T, cli *clientv3.Client, eps, job string, what string, ok func([]copyRow) bool, logs ...fmt.Stringer) []copyRow {
	t.Helper()
	ctx := ctxT(t)
	for {
		resp, err := cli.Get(ctx, cluster.DefaultPrefix+"job/"+job)
		if err != nil {
			t.Fatal(err)
		}
		rows := jobRows(t, eps, job)
		if ok(rows) {
			return rows
		}
		wctx, cancel := clientv3.WithRequireLeader(ctx), func() {}
		w := cli.Watch(wctx, cluster.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-w:
		case <-ctx.Done():
			var b strings.Builder
			for _, l := range logs {
				b.WriteString(l.String())
			}
			t.Fatalf("job %s: never %s: %+v\nagents' logs:\n%s", job, what, rows, b.String())
		}
		cancel()
	}
}

// ancestorIn reports whether a process of pids is pid or one of its
// ancestors.
func ancestorIn(pid int, pids map[int]bool) bool {
	for range 64 {
		if pids[pid] {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil || pid <= 1 {
			return false
		}
	}
	return false
}

// perNode counts the running copies on each node, and the rows in any
// other state.
func perNode(rows []copyRow) (map[string]int, []copyRow) {
	on := map[string]int{}
	var other []copyRow
	for _, r := range rows {
		if r.State == "running" {
			on[r.Node]++
		} else {
			other = append(other, r)
		}
	}
	return on, other
}

func TestFleet_PlacedJobRunsOnMatchingNodesMovesWhenANodeDiesAndNeverRunsTwice(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	marker := fmt.Sprintf("fleetplaced-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	type node struct {
		name, dir, tier, capacity string
		ag                        *runningAgent
	}
	nodes := []*node{{name: "n1", tier: "gold", capacity: "cpu=400,memory=400"}, {name: "n2", tier: "gold", capacity: "cpu=800,memory=800"},
		{name: "n3", tier: "silver", capacity: "cpu=800,memory=800"}}
	start := func(n *node) {
		n.ag = startAgent(t, eps, n.name, n.dir, nil, "--meta", "tier="+n.tier, "--meta", "rack=r-"+n.name, "--capacity", n.capacity)
		n.ag.waitRegistered(cli, n.name)
		n.ag.waitServing()
	}
	logs := func() []fmt.Stringer {
		var out []fmt.Stringer
		for _, n := range nodes {
			out = append(out, n.ag.log)
		}
		return out
	}
	for _, n := range nodes {
		n.dir = filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testproc.CheckNoLeak(t, n.dir) })
		start(n)
	}

	dirs := []string{nodes[0].dir, nodes[1].dir, nodes[2].dir}
	// run without --detach returns once every copy runs, as its node says.
	r := tether(t, "cluster", "--endpoints", eps, "run", "--timeout", "40s", placedJob(t, 6, 10, marker))
	if r.code != 0 || !strings.Contains(r.stdout, "6 of 6 copies placed, 6 running") {
		t.Fatalf("run: want exit 0 once 6 copies run:\n%s\n%s\nagents' logs:\n%s%s%s", r, must(t, "cluster", "--endpoints", eps, "status", "web", "--json").stdout, nodes[0].ag.log, nodes[1].ag.log, nodes[2].ag.log)
	}
	on, other := perNode(jobRows(t, eps, "web"))
	if len(other) != 0 || on["n3"] != 0 || on["n1"] == 0 || on["n2"] == 0 || on["n1"]+on["n2"] != 6 {
		t.Errorf("copies by node %v (others %+v): want all 6 running on the gold nodes n1 and n2, on both", on, other)
	}
	waitProcs(t, marker, 6, dirs, logs()...)

	// n2's agent alone SIGKILLed: its copies run on (as a partitioned
	// node's would) and are placed on n1 once its lease lapses; n2 comes
	// back, stops them, since they are no longer its own, before it starts
	// anything, and takes no copy until it has held its new lease for 3
	// TTLs. Then nothing runs twice.
	n1, n2 := nodes[0], nodes[1]
	lost := cluster.DefaultPrefix + "lost/n2"
	n2.ag.kill()
	waitRows(t, cli, eps, "web", "all running on n1", func(rows []copyRow) bool {
		on, other := perNode(rows)
		return on["n1"] == 6 && !slices.ContainsFunc(other, func(r copyRow) bool { return r.Node != "n2" })
	}, logs()...)
	waitProcs(t, marker, 6+on["n2"], dirs, logs()...) // n2's run on, unknown to the fleet
	start(n2)
	waitNoCopies(t, n2.dir, n2.ag.log)
	waitProcs(t, marker, 6, dirs, logs()...)
	if l := n2.ag.log.String(); !strings.Contains(l, "placements from the local copy: node=n2 revision=") {
		t.Errorf("n2 came back without reading its local copy of the placements (the copies it left as they were):\n%s", l)
	}
	waitGone(t, cli, lost) // the holdoff: 3 lease TTLs of n2's new lease

	// n1's agent and its tasks SIGKILLed: its copies run on n2 within the
	// lease (2s) plus 2s.
	mine := map[int]bool{}
	for _, p := range testproc.Marked(n1.dir) {
		mine[p.PID] = true
	}
	var victims []int
	for _, p := range testproc.Marked(marker) {
		if ancestorIn(p.PID, mine) {
			victims = append(victims, p.PID)
		}
	}
	if len(victims) != 6 {
		t.Fatalf("n1 runs 6 copies, found %d of their processes under its executors", len(victims))
	}
	killed := time.Now()
	n1.ag.kill()
	for pid := range mine {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitRows(t, cli, eps, "web", "all running on n2", func(rows []copyRow) bool {
		on, other := perNode(rows)
		return len(other) == 0 && on["n2"] == 6
	}, logs()...)
	moved := time.Since(killed)
	t.Logf("n1 SIGKILLed: its copies run on n2 %v later (lease 2s)", moved.Round(10*time.Millisecond))
	if moved > 2*(2*time.Second+2*time.Second) { // the lease plus 2s, with this host's 2x noise
		t.Errorf("the copies ran elsewhere %v after the kill: want within the lease plus 2s", moved)
	}
	start(n1)
	waitNoCopies(t, n1.dir, n1.ag.log)
	waitProcs(t, marker, 6, dirs, logs()...)

	// A job no node can hold fails at once, naming the constraint, the
	// resource, and the node just back (n1, held off).
	r = tether(t, "cluster", "--endpoints", eps, "run", writeFile(t, "big.nomad", strings.Replace(
		strings.Replace(string(mustRead(t, placedJob(t, 1, 790, marker))), `job "web"`, `job "big"`, 1), "count = 1", "count = 1", 1)))
	if r.code != exitError || !strings.Contains(r.stderr, `constraint ${meta.tier} = "gold" not met on 1 node`) ||
		!strings.Contains(r.stderr, "memory exhausted on 1 node") || !strings.Contains(r.stderr, "back after its lease lapsed, held off for 6s (1 node)") {
		t.Errorf("run of a job no node can hold: want exit 1 naming the constraint and memory:\n%s", r)
	}
	must(t, "cluster", "--endpoints", eps, "stop", "big")
	must(t, "cluster", "--endpoints", eps, "stop", "web")
	testproc.CheckGone(t, marker, time.Minute)
	for _, n := range nodes {
		n.ag.stop()
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cmpOrEnv is the environment's value of name, or def.
func cmpOrEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// waitNoCopies waits, on the agent's status, until the agent of dir has
// read etcd's placements and runs no placed copy (no entry JOB.GROUP[N]).
func waitNoCopies(t *testing.T, dir string, log fmt.Stringer) {
	t.Helper()
	c, err := agent.Dial(ctxT(t), dir, agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last agent.Status
	err = c.WatchStatus(ctxT(t), func(st agent.Status) bool {
		last = st
		for _, e := range st.Entries {
			if isCopyEntry(e.Name) {
				return false
			}
		}
		return !slices.Contains(st.Problems, "") && strings.Contains(log.String(), "from_copy=false")
	})
	if err != nil {
		t.Fatalf("the agent of %s still has copies: %+v (%v); its log:\n%s", dir, last, err, log)
	}
}

// waitGone waits, on a watch, until key is gone.
func waitGone(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return
		}
		select {
		case <-cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("%s never went", key)
		}
	}
}

// whose says, of each process, which state directory's executor it runs
// under.
func whose(procs []testproc.Proc, dirs ...string) []string {
	var out []string
	for _, p := range procs {
		at := "none"
		for _, d := range dirs {
			m := map[int]bool{}
			for _, q := range testproc.Marked(d) {
				m[q.PID] = true
			}
			if ancestorIn(p.PID, m) {
				at = d
			}
		}
		out = append(out, fmt.Sprintf("%d under %s", p.PID, at))
	}
	return out
}

// waitProcs waits until exactly n processes carry marker and stay so
// (checked every 50ms, for a minute at most): the fleet is quiet. A count
// seen other than n on the way is logged, naming where each runs.
func waitProcs(t *testing.T, marker string, n int, dirs []string, logs ...fmt.Stringer) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	stable := 0
	var procs []testproc.Proc
	for stable < 10 { // half a second of n
		procs = testproc.Marked(marker)
		if len(procs) == n {
			stable++
		} else {
			stable = 0
		}
		select {
		case <-tick.C:
		case <-deadline:
			var b strings.Builder
			for _, l := range logs {
				b.WriteString(l.String())
			}
			t.Fatalf("the copies run as %d processes, want %d: %v\nagents' logs:\n%s", len(procs), n, whose(procs, dirs...), b.String())
		}
	}
}

// stop_after_client_disconnect: a node cut off from etcd (every member
// SIGKILLed) stops its copy itself once that long has passed since its
// last proof of its lease; with etcd back, the placement still names it,
// and it runs the copy again.
func TestFleet_StopAfterClientDisconnectStopsTheCopyOnItsNodeWithoutEtcd(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	marker := fmt.Sprintf("fleetdisconnect-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	ag := startAgent(t, eps, "n1", dir, nil, "--meta", "tier=gold")
	ag.waitRegistered(cli, "n1")
	job := strings.Replace(string(mustRead(t, placedJob(t, 1, 10, marker))), `group "front" {`, `group "front" {
    stop_after_client_disconnect = "1s"`, 1)
	r := tether(t, "cluster", "--endpoints", eps, "run", "--timeout", "1m", writeFile(t, "web.nomad", job))
	if r.code != 0 {
		t.Fatalf("run:\n%s\nthe agent's log:\n%s", r, ag.log)
	}
	waitProcs(t, marker, 1, []string{dir}, ag.log)
	cut := time.Now()
	for i := range c.Len() {
		c.Kill(i)
	}
	testproc.CheckGone(t, marker, time.Minute)
	t.Logf("etcd gone: the copy stopped on its node %v later (stop_after_client_disconnect 1s, keep-alive gap %v)",
		time.Since(cut).Round(10*time.Millisecond), 2*time.Second/3+time.Second)
	if !strings.Contains(ag.log.String(), "no contact with etcd for the copy's stop_after_client_disconnect") {
		t.Errorf("the agent did not say why it stopped the copy:\n%s", ag.log)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	c.WaitReady(c.Endpoints()...)
	waitRows(t, cli, eps, "web", "running again", func(rows []copyRow) bool {
		on, other := perNode(rows)
		return len(other) == 0 && on["n1"] == 1
	}, ag.log)
	waitProcs(t, marker, 1, []string{dir}, ag.log)
	must(t, "cluster", "--endpoints", eps, "stop", "web")
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()
}

// The scheduler's agent SIGKILLed in the middle of placing a job (after
// the first of its transactions, 30 of 40 copies written): another
// agent's scheduler takes over within the lease and places the rest, and
// the dead node's copies elsewhere; once the dead node is back (it stops
// what it no longer owns), each of the 40 copies runs exactly once.
func TestFleet_SchedulerKilledMidPlacementAnotherPlacesEveryCopyOnce(t *testing.T) {
	c := etcdtest.Start(t, 3)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(t, c.Endpoints()...)
	marker := fmt.Sprintf("fleetmidplace-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	type node struct {
		name, dir string
		ag        *runningAgent
	}
	nodes := []*node{{name: "n1"}, {name: "n2"}, {name: "n3"}}
	start := func(n *node, env ...string) {
		n.ag = startAgent(t, eps, n.name, n.dir, env, "--meta", "tier=gold", "--capacity", "cpu=800,memory=800")
		n.ag.waitRegistered(cli, n.name)
		n.ag.waitServing()
	}
	var dirs []string
	logs := func() []fmt.Stringer {
		var out []fmt.Stringer
		for _, n := range nodes {
			out = append(out, n.ag.log)
		}
		return out
	}
	for _, n := range nodes {
		n.dir = filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testproc.CheckNoLeak(t, n.dir) })
		dirs = append(dirs, n.dir)
	}
	// n1 first, so that its scheduler is elected; it SIGKILLs itself just
	// after its first placement transaction.
	n1 := nodes[0]
	start(n1, cluster.EnvCrashPoint+"="+cluster.CrashSchedulerAfterTxn)
	ctx := ctxT(t)
	for {
		resp, err := cli.Get(ctx, cluster.DefaultPrefix+"leader/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == "n1" {
			break
		}
		select {
		case <-cli.Watch(ctx, cluster.DefaultPrefix+"leader/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
		case <-ctx.Done():
			t.Fatalf("n1's scheduler was never elected: %v; its log:\n%s", resp.Kvs, n1.ag.log)
		}
	}
	start(nodes[1])
	start(nodes[2])
	must(t, "cluster", "--endpoints", eps, "run", "--detach", placedJob(t, 40, 10, marker))
	if err := n1.ag.wait(); err == nil {
		t.Fatalf("n1's agent exited 0; want it SIGKILLed at its crash point; its log:\n%s", n1.ag.log)
	}
	if l := n1.ag.log.String(); strings.Contains(l, "job placed") {
		t.Fatalf("n1's scheduler wrote every copy before it died: the crash was not mid-placement; its log:\n%s", l)
	}
	killed := time.Now()
	rows := waitRows(t, cli, eps, "web", "all 40 running on n2 and n3", func(rows []copyRow) bool {
		on, other := perNode(rows)
		return len(other) == 0 && on["n2"]+on["n3"] == 40
	}, logs()...)
	t.Logf("n1's scheduler SIGKILLed mid-placement: all 40 copies run on n2 and n3 %v later (lease 2s)", time.Since(killed).Round(10*time.Millisecond))
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.Copy] {
			t.Errorf("copy %s placed twice: %+v", r.Copy, rows)
		}
		seen[r.Copy] = true
	}
	if len(seen) != 40 {
		t.Errorf("%d distinct copies, want 40: %+v", len(seen), rows)
	}
	// n1 back: anything it started of the first transaction's copies is
	// no longer its own; it stops it. Then each copy runs once.
	start(n1)
	waitProcs(t, marker, 40, dirs, logs()...)
	if on, other := perNode(jobRows(t, eps, "web")); len(other) != 0 || on["n2"]+on["n3"] != 40 {
		t.Errorf("with n1 back: copies by node %v (others %+v), want the 40 where they were", on, other)
	}
	must(t, "cluster", "--endpoints", eps, "stop", "web")
	testproc.CheckGone(t, marker, time.Minute)
	for _, n := range nodes {
		n.ag.stop()
	}
}
