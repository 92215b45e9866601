package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
)

// BenchmarkFleet_ThousandCopiesRunning: a job of 1,000 copies (the count
// bound) run on 10 real agents on this host, each a node with its own
// state directory and --capacity, on a real etcd: the time from `tether
// cluster run --detach` to every copy placed (the scheduler's write, as
// F5), and to every copy running as its node says (each node's start of
// its ~100 copies through its agent: an executor and a task each). The
// copies are raw_exec sleepers. BENCHMARKS.md row F9.
func BenchmarkFleet_ThousandCopiesRunning(b *testing.B) {
	const nodes, copies = 10, 1000
	b.Setenv("TETHER_E2E_LOG", "info") // a debug log of 1,000 tasks a node is itself a load
	c := etcdtest.Start(b, 1)
	eps := strings.Join(c.Endpoints(), ",")
	cli := dial(b, c.Endpoints()...)
	marker := fmt.Sprintf("fleetbench-%d", time.Now().UnixNano())
	b.Cleanup(func() { testproc.CheckNoLeak(b, marker) })
	var ags []*runningAgent
	for i := range nodes {
		name := fmt.Sprintf("n%d", i+1)
		dir := filepath.Join(b.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { testproc.CheckNoLeak(b, dir) })
		ag := startAgent(b, eps, name, dir, nil, "--capacity", "cpu=2000,memory=2000")
		ag.waitRegistered(cli, name)
		ag.waitServing()
		ags = append(ags, ag)
	}
	file := filepath.Join(b.TempDir(), "web.nomad")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`job "web" {
  group "front" {
    count = %d
    task "server" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 3600; : %s"]
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
`, copies, marker)), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := cluster.NewFleet(cli, "")
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		start := time.Now()
		must(b, "cluster", "--endpoints", eps, "run", "--detach", file)
		var placed, running time.Duration
		_, err := f.WaitJob(ctx, "web", func(st *cluster.JobStatus) {
			n := 0
			for _, r := range st.Rows {
				if r.Node != "" && r.State != "unplaced" {
					n++
				}
			}
			if placed == 0 && n == copies {
				placed = time.Since(start)
			}
		})
		running = time.Since(start)
		cancel()
		for _, ag := range ags {
			select {
			case err := <-ag.done:
				ag.done = nil
				b.Fatalf("agent %d exited during the run (%v); its log:\n%s", ag.cmd.Process.Pid, err, ag.log)
			default:
			}
		}
		if err != nil {
			b.Fatalf("the job's copies did not all run: %v", err)
		}
		b.ReportMetric(placed.Seconds(), "s-all-placed")
		b.ReportMetric(running.Seconds(), "s-all-running")
		b.Logf("%d copies on %d nodes: all placed %v, all running %v after cluster run", copies, nodes, placed.Round(time.Millisecond), running.Round(time.Millisecond))
		b.StopTimer()
		must(b, "cluster", "--endpoints", eps, "stop", "web")
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Minute)
		if _, err := f.WaitJob(sctx, "web", nil); err != nil {
			b.Fatalf("the job's copies did not all stop: %v", err)
		}
		scancel()
		testproc.CheckGone(b, marker, 5*time.Minute) // each copy's shell (its sleep goes with its cgroup)
		b.StartTimer()
	}
	b.StopTimer()
	for _, ag := range ags {
		ag.stop()
	}
}
