package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/fsm"
)

// benchAgent is an agent serving a fresh state directory for a benchmark.
func benchAgent(b *testing.B, cfg Config) (*Agent, *Client) {
	b.Helper()
	dir, err := os.MkdirTemp("", "tb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.ExecutorCommand = []string{os.Args[0], modeExecutor}
	cfg.Logger = hclog.NewNullLogger()
	a, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
		a.Close()
	})
	<-a.Serving()
	c, err := Dial(ctx, cfg.StateDir, DialOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return a, c
}

// BenchmarkInspect is one InspectTask of a running task: through the
// agent's socket (a connection, the hello, the request and the answer), and
// in-process on the agent's own driver.
func BenchmarkInspect(b *testing.B) {
	a, c := benchAgent(b, Config{})
	ctx := context.Background()
	if _, err := c.StartTask(ctx, "web-1", sleeper("web", a.cfg.StateDir)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = c.StopTask(ctx, "web-1", 0, time.Second) })
	local := &Local{D: a.d, Store: a.st}
	for _, s := range []struct {
		name string
		svc  Service
	}{{"client", c}, {"in-process", local}} {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.svc.InspectTask(ctx, "web-1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStartStop starts and stops tasks through the agent, n at once:
// the agent holds the store, so concurrent starts share its commits.
func BenchmarkStartStop(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("parallel-%d", n), func(b *testing.B) {
			a, c := benchAgent(b, Config{})
			ctx := context.Background()
			i := 0
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make(chan error, n)
				for range n {
					i++
					id := fmt.Sprintf("t-%d", i)
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := c.StartTask(ctx, id, sleeper("t", a.cfg.StateDir)); err != nil {
							errs <- err
							return
						}
						if _, err := c.StopTask(ctx, id, 0, time.Second); err != nil {
							errs <- err
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkConvergeFifty is an agent starting 50 services declared in its
// config dir: the time from the file's appearance to all 50 running (then,
// untimed, the file is removed and the agent stops them).
func BenchmarkConvergeFifty(b *testing.B) {
	const n = 50
	conf, err := os.MkdirTemp("", "tc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(conf) })
	if err := os.Chmod(conf, 0o755); err != nil {
		b.Fatal(err)
	}
	a, c := benchAgent(b, Config{ConfigDir: conf})
	ctx := context.Background()
	stage, err := os.MkdirTemp(filepath.Dir(conf), "ts")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(stage) })
	for b.Loop() {
		b.StopTimer()
		for i := range n {
			writeTaskFile(b, filepath.Join(stage, fmt.Sprintf("s%02d.hcl", i)), taskHCL(fmt.Sprintf("s%02d", i), a.cfg.StateDir, 3, ""))
		}
		b.StartTimer()
		for i := range n {
			name := fmt.Sprintf("s%02d.hcl", i)
			if err := os.Rename(filepath.Join(stage, name), filepath.Join(conf, name)); err != nil {
				b.Fatal(err)
			}
		}
		err := c.WatchStatus(ctx, func(s Status) bool {
			up := 0
			for _, e := range s.Entries {
				if e.State == fsm.StateRunning && !e.Pending {
					up++
				}
			}
			return up == n
		})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			if err := os.Remove(filepath.Join(conf, fmt.Sprintf("s%02d.hcl", i))); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.WatchStatus(ctx, func(s Status) bool { return len(s.Entries) == 0 && s.Converged }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
