package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

// fields splits a table's lines into their columns (runs of two spaces
// or more separate them; a column may hold single spaces).
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1))
	}
	return rows
}

func objects(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	if err := json.Unmarshal([]byte(out), &objs); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	return objs
}

func TestCluster_StatusShowsEveryNodesTasksWithTheirNodesLiveness(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	web := n1.sleeper("web")
	batch := n1.run("batch", 0)
	n2 := startNode(t, cli, "n2")
	db := n2.sleeper("db")
	migrate := n2.run("migrate", 3)
	n3 := startNode(t, cli, "n3")
	for _, n := range []*testNode{n1, n2, n3} {
		n.waitMirrored(cli)
		n.waitStatus(cli)
	}
	n2.down(cli) // its tasks run on; nobody may say what they do now

	r := must(t, "cluster", "--endpoints", ep, "status")
	rows := fields(r.stdout)
	want := [][]string{
		{"NODE", "LIVENESS", "ID", "NAME", "STATE", "RESTARTS", "UPDATED"},
		{"n1", "up", web, "web", "running", "0"},
		{"n2", "down", db, "db", "unknown (node down since "},
		{"n3", "up", "-", "-", "-", "-", "-"},
		{"1 live, 1 unknown; 3 nodes, 1 down"},
	}
	if len(rows) != len(want) {
		t.Fatalf("status:\n%s", r.stdout)
	}
	for i, w := range want {
		for j, cell := range w {
			if j >= len(rows[i]) || !strings.HasPrefix(rows[i][j], cell) {
				t.Errorf("status row %d: %q, want %q\n%s", i, rows[i], w, r.stdout)
				break
			}
		}
	}
	// --all adds the ended tasks, with their last state even on a down
	// node (a terminal state is final).
	all := must(t, "cluster", "status", "--all", "--endpoints", ep)
	states := map[string]string{}
	for _, row := range fields(all.stdout) {
		if len(row) > 4 {
			states[row[2]] = row[4]
		}
	}
	for id, want := range map[string]string{batch: "exited", migrate: "exited", web: "running", db: "unknown (node down since "} {
		if !strings.HasPrefix(states[id], want) {
			t.Errorf("status --all: %s is %q, want %q\n%s", id, states[id], want, all.stdout)
		}
	}
	objs := objects(t, must(t, "cluster", "--endpoints="+ep, "status", "--json", "--all").stdout)
	byID := map[string]map[string]any{}
	for _, o := range objs {
		id, _ := o["id"].(string)
		byID[id+"@"+o["node"].(string)] = o
	}
	for key, w := range map[string]map[string]any{
		web + "@n1":     {"liveness": "up", "name": "web", "state": "running"},
		db + "@n2":      {"liveness": "down", "name": "db", "state": "unknown", "last_state": "running"},
		migrate + "@n2": {"liveness": "down", "name": "migrate", "state": "exited"},
		"@n3":           {"liveness": "up"},
	} {
		o, ok := byID[key]
		if !ok {
			t.Errorf("status --json has no %s: %v", key, objs)
			continue
		}
		for k, v := range w {
			if o[k] != v {
				t.Errorf("status --json %s: %s = %v, want %v", key, k, o[k], v)
			}
		}
		if s, _ := o["since"].(string); s == "" {
			t.Errorf("status --json %s: no since: %v", key, o)
		}
	}
	if len(objs) != 5 {
		t.Errorf("status --json --all: %d objects, want 5 (4 tasks, 1 node without one): %v", len(objs), objs)
	}
}

func TestCluster_NodesShowLivenessTasksAndMirrorLag(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	n1.sleeper("web")
	n1.run("batch", 0)
	n2 := startNode(t, cli, "n2")
	for _, n := range []*testNode{n1, n2} {
		n.waitMirrored(cli)
		n.waitStatus(cli)
	}
	n2.down(cli)
	rows := fields(must(t, "cluster", "--endpoints", ep, "nodes").stdout)
	host, _ := os.Hostname()
	if len(rows) != 3 || !reflect.DeepEqual(rows[0], []string{"NODE", "LIVENESS", "SINCE", "SEEN", "HOST", "PID", "TASKS", "MIRROR LAG"}) ||
		rows[1][0] != "n1" || rows[1][1] != "up" || rows[1][4] != host || rows[1][6] != "2" ||
		rows[2][0] != "n2" || rows[2][1] != "down" || rows[2][6] != "0" {
		t.Errorf("nodes: %q", rows)
	}
	objs := objects(t, must(t, "cluster", "nodes", "--json", "--endpoints", ep).stdout)
	if len(objs) != 2 {
		t.Fatalf("nodes --json: %v", objs)
	}
	for _, o := range objs {
		for _, k := range []string{"node", "liveness", "since", "seen", "tasks", "mirror_lag_events", "mirror_lag_seconds"} {
			if _, ok := o[k]; !ok {
				t.Errorf("nodes --json: %v lacks %s", o, k)
			}
		}
	}
	if objs[0]["liveness"] != "up" || objs[0]["tasks"] != 2.0 || objs[1]["liveness"] != "down" {
		t.Errorf("nodes --json: %v", objs)
	}
}

// The mirror's events print as the node's own `tether events` prints them:
// the same lines, and the same JSON but for the environment's values,
// which are not mirrored.
func TestCluster_EventsAreWhatTetherEventsPrintsOnTheNode(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	id := n1.sleeper("web")
	if _, err := n1.d.StopTask(ctxT(t), id, syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	n1.waitMirrored(cli)
	fleetText := must(t, "cluster", "--endpoints", ep, "events", "web")
	fleetJSON := must(t, "cluster", "--endpoints", ep, "events", id, "--json")
	n1.close()
	local := must(t, "--state-dir", n1.dir, "events", id)
	if fleetText.stdout != local.stdout || !strings.Contains(local.stdout, "executor-reaped") {
		t.Errorf("tether cluster events:\n%s\ntether events on the node:\n%s", fleetText.stdout, local.stdout)
	}
	localJSON := objects(t, must(t, "--state-dir", n1.dir, "events", "--json", id).stdout)
	mirrored := objects(t, fleetJSON.stdout)
	for i, evs := range [][]map[string]any{mirrored, localJSON} {
		env := evs[0]["spec"].(map[string]any)["Env"].(map[string]any)
		if want := []string{cluster.Redacted, "s3cr3t"}[i]; env["TOKEN"] != want {
			t.Errorf("events --json (%s): TOKEN %v, want %q", []string{"mirror", "node"}[i], env["TOKEN"], want)
		}
		delete(env, "TOKEN")
	}
	if !reflect.DeepEqual(mirrored, localJSON) {
		t.Errorf("events --json differ:\nmirror %v\nnode   %v", mirrored, localJSON)
	}
	for i, e := range mirrored {
		if e["seq"] != float64(i+1) {
			t.Errorf("event %d has seq %v", i, e["seq"])
		}
	}
}

func TestCluster_EventsResolveNamesOnEachNode(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1, n2 := startNode(t, cli, "n1"), startNode(t, cli, "n2")
	a := n1.sleeper("web")
	b := n2.sleeper("web")
	old := n2.run("job", 0)
	n1.waitMirrored(cli)
	n2.waitMirrored(cli)
	r := tether(t, "cluster", "--endpoints", ep, "events", "web")
	if r.code != exitError || !strings.Contains(r.stderr, "ambiguous task name \"web\"") || !strings.Contains(r.stderr, a+" on n1") ||
		!strings.Contains(r.stderr, b+" on n2") || !strings.Contains(r.stderr, "--node") {
		t.Errorf("events of a name on two nodes:\n%s", r)
	}
	for _, args := range [][]string{{"web", "--node", "n2"}, {b}, {"job"}} {
		r := must(t, append([]string{"cluster", "--endpoints", ep, "events", "--json"}, args...)...)
		first := objects(t, r.stdout)[0]
		name := first["spec"].(map[string]any)["Name"]
		if want := map[string]string{"web": "web", b: "web", "job": "job"}[args[0]]; name != want {
			t.Errorf("events %q: task %v", args, name)
		}
	}
	_ = old
	r = tether(t, "cluster", "--endpoints", ep, "events", "nope")
	if r.code != exitError || !strings.Contains(r.stderr, "no mirrored task has this id or name") || !strings.Contains(r.stderr, "status --all") {
		t.Errorf("events of an unknown task:\n%s", r)
	}
	r = tether(t, "cluster", "--endpoints", ep, "events", "web", "--node", "n3")
	if r.code != exitError || !strings.Contains(r.stderr, "on node n3") {
		t.Errorf("events on a node without the task:\n%s", r)
	}
}

// follow starts `tether cluster events ARGS -f` and returns its lines as
// they come, and its end.
func follow(t *testing.T, args ...string) (lines <-chan string, proc *os.Process, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := tetherCmd(ctx, append(args, "-f")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lc, dc := make(chan string, 100), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lc <- sc.Text()
		}
		close(lc)
		dc <- cmd.Wait()
	}()
	return lc, cmd.Process, dc
}

// until reads lines until one holds s, and returns them.
func until(t *testing.T, lines <-chan string, s string) []string {
	t.Helper()
	var got []string
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended before %q:\n%s", s, strings.Join(got, "\n"))
			}
			got = append(got, l)
			if strings.Contains(l, s) {
				return got
			}
		case <-timeout:
			t.Fatalf("no %q in a minute:\n%s", s, strings.Join(got, "\n"))
		}
	}
}

func TestCluster_EventsFollowPrintsEachEventOnceUntilTheTaskEnds(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	id := n1.sleeper("web")
	n1.waitMirrored(cli)
	lines, _, done := follow(t, "cluster", "--endpoints", ep, "events", "web")
	got := until(t, lines, "  running")
	if _, err := n1.d.StopTask(ctxT(t), id, syscall.SIGTERM, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for l := range lines { // the stream ends by itself at the task's end
		got = append(got, l)
	}
	if err := <-done; err != nil {
		t.Fatalf("events -f ended with %v", err)
	}
	n1.close()
	local := must(t, "--state-dir", n1.dir, "events", id)
	if strings.Join(got, "\n")+"\n" != local.stdout {
		t.Errorf("events -f:\n%s\ntether events on the node:\n%s", strings.Join(got, "\n"), local.stdout)
	}
}

func TestCluster_EventsFollowJSONIsOneObjectALineAndCtrlCEndsIt(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	n1.sleeper("web")
	n1.waitMirrored(cli)
	lines, proc, done := follow(t, "cluster", "--endpoints", ep, "events", "web", "--json")
	got := until(t, lines, `"event":"running"`)
	for i, l := range got {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil || e["seq"] != float64(i+1) {
			t.Errorf("line %d: %q (%v), want an event with seq %d", i, l, err, i+1)
		}
	}
	if err := proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("events -f after Ctrl-C: %v, want exit 0", err)
	}
}

const webFile = `task "web" {
  driver = "raw_exec"
  config {
    command = "/bin/sleep"
    args    = ["300"]
  }
}
`

// desired waits for n to deliver a desired set that ok accepts.
func desired(t *testing.T, n *testNode, ok func(cluster.DesiredSet) bool) cluster.DesiredSet {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case s := <-n.n.Desired():
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatal("the node was not told in a minute")
		}
	}
}

func TestCluster_StartAndStopTellANodeWhatToRun(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	n1 := startNode(t, cli, "n1")
	dir := t.TempDir()
	file := filepath.Join(dir, "web.hcl")
	if err := os.WriteFile(file, []byte(webFile), 0o644); err != nil {
		t.Fatal(err)
	}
	r := must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file)
	if r.stdout != "web\n" || !strings.Contains(r.stderr, "web: desired on node n1") {
		t.Errorf("start: %s", r)
	}
	s := desired(t, n1, func(s cluster.DesiredSet) bool { _, ok := s.Tasks["web"]; return ok })
	first := s.Tasks["web"]
	if string(first.Spec) != webFile {
		t.Errorf("the node was told %q, want the file's text", first.Spec)
	}
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file) // the same file again: nothing to do
	if err := os.WriteFile(file, []byte(strings.Replace(webFile, "300", "600", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r = tether(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file)
	if r.code != exitError || !strings.Contains(r.stderr, "--replace") {
		t.Errorf("start of another file under a desired name:\n%s", r)
	}
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file, "--replace")
	s = desired(t, n1, func(s cluster.DesiredSet) bool { return s.Tasks["web"].ModRevision > first.ModRevision })
	if !strings.Contains(string(s.Tasks["web"].Spec), "600") {
		t.Errorf("after --replace the node was told %q", s.Tasks["web"].Spec)
	}
	r = must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	if !strings.Contains(r.stderr, "web: no longer desired on node n1") {
		t.Errorf("stop: %s", r)
	}
	desired(t, n1, func(s cluster.DesiredSet) bool { _, ok := s.Tasks["web"]; return !ok })
	r = tether(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	if r.code != exitError || !strings.Contains(r.stderr, "only tasks started with `tether cluster start`") {
		t.Errorf("stop of a task not desired:\n%s", r)
	}
	r = tether(t, "cluster", "--endpoints", ep, "start", "--node", "n9", file)
	if r.code != exitError || !strings.Contains(r.stderr, "no agent has ever registered") {
		t.Errorf("start on a node never seen:\n%s", r)
	}
}

// A file the node would refuse is refused before anything is written:
// with etcd unreachable too (it is not asked), and nothing lands in it.
func TestCluster_StartRefusesABadFileBeforeEtcdIsAsked(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	startNode(t, cli, "n1")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	job := `job "shop" {
  group "front" {
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/sleep" }
    }
    task "log" {
      driver = "raw_exec"
      config { command = "/bin/cat" }
    }
  }
}
`
	for _, c := range []struct{ what, file, says string }{
		{"relative command", write("rel.hcl", strings.Replace(webFile, "/bin/sleep", "bin/sleep", 1)), "relative path in a desired spec"},
		{"syntax", write("broken.hcl", `task "web" {`), "not an HCL task file"},
		{"driver", write("docker.hcl", strings.Replace(webFile, "raw_exec", "docker", 1)), "tether runs only"},
		{"no such task", write("job.nomad", job), ""},
		{"variable", write("var.hcl", "variable \"n\" {}\n"+strings.Replace(webFile, `"300"`, "var.n", 1)), "Missing variable value"},
		{"name", write("name.hcl", strings.Replace(webFile, `"web"`, `"my web"`, 1)), "rename the task"},
		{"size", write("big.hcl", webFile+"#"+strings.Repeat("x", cluster.MaxSpecBytes)), "larger than"},
		{"missing", filepath.Join(dir, "nothing.hcl"), "no such file"},
	} {
		for _, endpoint := range []string{"http://127.0.0.1:1", ep} {
			args := []string{"cluster", "--endpoints", endpoint, "--command-timeout", "30s", "start", "--node", "n1", c.file}
			if c.what == "no such task" {
				args, c.says = append(args[:len(args)-1], "--task", "front.db", c.file), "front.db"
			}
			r := tether(t, args...)
			if r.code != exitError || !strings.Contains(r.stderr, c.says) {
				t.Errorf("%s (etcd %s): want exit 1 saying %q:\n%s", c.what, endpoint, c.says, r)
			}
		}
	}
	resp, err := cli.Get(ctxT(t), cluster.DefaultPrefix+"desired/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("refused files reached etcd: %v, %v", resp, err)
	}
	// --task picks one of several; without it, the job is one desired
	// entry, by the job's name.
	r := must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", "--task", "front.web", filepath.Join(dir, "job.nomad"))
	if r.stdout != "web\n" {
		t.Errorf("start --task front.web: %s", r)
	}
	if r := must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", filepath.Join(dir, "job.nomad")); r.stdout != "shop\n" {
		t.Errorf("start of a job of several tasks: %s", r)
	}
}
