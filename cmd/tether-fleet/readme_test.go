package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The README's fleet commands are a promise: TestREADME_FleetTourRunsAsWritten
// reads them from README.md's "Running a fleet" (the block after the
// agent's), runs each with sh, in order, with tether and tether-fleet on
// $PATH, $TETHER_CLUSTER_ENDPOINTS naming a real etcd and the node n1's
// agent running (the built `tether agent --node n1`), and holds each to
// what its comment says. A line without an expectation, or an
// expectation without its line, fails the test.

// fleetLine is what one line of the fleet tour must do.
type fleetLine struct {
	stdout, stderr []string
	// follow: the line runs until its stdout holds stdout, then ends with
	// 0 on Ctrl-C.
	follow bool
	// after waits for what the line set going (the node's agent at work).
	after func(t *testing.T, tour *fleetTour)
}

var fleetExpect = map[string]fleetLine{
	`tether cluster nodes`:                              {stdout: []string{"n1  ", "  up  ", "MIRROR LAG"}},
	`tether cluster start --node n1 examples/clock.hcl`: {stdout: []string{"clock"}, stderr: []string{"clock: desired on node n1"}, after: waitClock("running")},
	`tether cluster status`:                             {stdout: []string{"n1", "clock", "running", "1 live; 1 nodes"}},
	`tether cluster events clock -f`:                    {follow: true, stdout: []string{"task-created", "  running"}},
	`tether cluster stop --node n1 clock`:               {stderr: []string{"clock: no longer desired on node n1"}, after: waitClock("stopped")},
	`tether cluster status --all --json`:                {stdout: []string{`"name": "clock"`, `"state": "stopped"`}},
}

// fleetTourLines returns the command lines of README.md's fleet tour.
func fleetTourLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## Running a fleet\n")
	if !ok {
		t.Fatal(`README.md has no "## Running a fleet" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "```sh\n")
	if len(blocks) != 3 || !strings.HasPrefix(blocks[1], "tether agent --node") {
		t.Fatalf("README.md's fleet section: want the agent's block, then the commands' block")
	}
	block, _, _ := strings.Cut(blocks[2], "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestREADME_FleetTourExpectationsMatchItsLines(t *testing.T) {
	lines := fleetTourLines(t)
	for _, l := range lines {
		if _, ok := fleetExpect[l]; !ok {
			t.Errorf("README fleet tour line %q has no expectation in fleetExpect", l)
		}
	}
	for l := range fleetExpect {
		found := false
		for _, x := range lines {
			found = found || x == l
		}
		if !found {
			t.Errorf("fleetExpect has %q, which the README's fleet tour no longer has", l)
		}
	}
}

// fleetTour is the tour's world: an etcd, and the node n1's agent, run
// as the README's first block runs it (on the loopback, so without TLS).
type fleetTour struct {
	t     *testing.T
	ep    string
	cli   *clientv3.Client
	agent *runningAgent
}

func TestREADME_FleetTourRunsAsWritten(t *testing.T) {
	ep := etcdtest.Embedded(t)
	tour := &fleetTour{t: t, ep: ep, cli: dial(t, ep)}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	tour.agent = startAgent(t, ep, "n1", dir, nil)
	tour.agent.waitRegistered(tour.cli, "n1")
	waitNodeStatus(t, tour.cli, "n1")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + binDir + ":" + os.Getenv("PATH"), envEndpoints + "=" + ep, "HOME=" + t.TempDir()}
	for _, line := range fleetTourLines(t) {
		want := fleetExpect[line]
		r := tour.run(root, env, line, want)
		if r.code != 0 {
			t.Fatalf("%s: %s", line, r)
		}
		for _, s := range want.stdout {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("%s: stdout lacks %q:\n%s", line, s, r)
			}
		}
		for _, s := range want.stderr {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("%s: stderr lacks %q:\n%s", line, s, r)
			}
		}
		if want.after != nil {
			want.after(t, tour)
		}
	}
	tour.agent.stop()
}

// waitNodeStatus waits, on an etcd watch, until node has published its
// status.
func waitNodeStatus(t testing.TB, cli *clientv3.Client, node string) {
	t.Helper()
	key := cluster.DefaultPrefix + "node/" + node
	ctx := ctxT(t)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		return
	}
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if len(wr.Events) > 0 {
			return
		}
	}
	t.Fatalf("%s wrote no status", node)
}

// run runs one line with sh, in dir.
func (tour *fleetTour) run(dir string, env []string, line string, want fleetLine) result {
	t := tour.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := tetherCmd(ctx)
	cmd.Path, cmd.Args, cmd.Dir, cmd.Env = "/bin/sh", []string{"sh", "-c", "exec " + line}, dir, env // exec: a Ctrl-C reaches tether
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if !want.follow {
		var stdout strings.Builder
		cmd.Stdout = &stdout
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
		if err != nil && r.code == 0 {
			t.Fatalf("%s: %v", line, err)
		}
		return r
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if all(stdout.String(), want.stdout) {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
	}
	_ = cmd.Wait()
	return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
}

func all(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// waitClock waits until the mirror says the task clock is in state.
func waitClock(state string) func(*testing.T, *fleetTour) {
	return func(t *testing.T, tour *fleetTour) {
		t.Helper()
		f, _ := cluster.NewFleet(tour.cli, "")
		ctx := ctxT(t)
		for {
			resp, err := tour.cli.Get(ctx, cluster.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			rows, err := f.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Task != nil && r.Task.Name == "clock" && r.Task.State.String() == state {
					return
				}
			}
			select {
			case <-tour.cli.Watch(ctx, cluster.DefaultPrefix+"head/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)):
			case <-ctx.Done():
				t.Fatalf("clock never %s: %v; the agent's log:\n%s", state, rows, tour.agent.log)
			}
		}
	}
}
