package cluster

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// modeAgent runs the test binary as an agent's fleet side: a real bbolt
// store held open, the node registered and run (mirror, liveness,
// status, desired watch), and a generator committing task events to the
// store as a driver would, whatever etcd does. It prints "registered"
// once it holds the node, "held: ERR" (exit 3) when another agent does,
// and "generated N" once its generator is done. SIGTERM ends it.
const modeAgent = "tether-test-agent"

func runAgent(args []string) int {
	fs := flag.NewFlagSet(modeAgent, flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "etcd client URLs, comma-separated")
	node := fs.String("node", "", "node name")
	dir := fs.String("dir", "", "state directory")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL")
	tasks := fs.Int("tasks", 0, "tasks to generate")
	events := fs.Int("events", 0, "reattached events per task after running")
	every := fs.Duration("every", 0, "pause between commits")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info, Name: "agent"})
	hooks, err := HooksFromEnv()
	if err != nil {
		log.Error("hooks", "err", err)
		return 2
	}
	st, err := store.Open(filepath.Join(*dir, "tether.db"), store.Options{LockTimeout: 30 * time.Second})
	if err != nil {
		log.Error("store", "err", err)
		return 1
	}
	src := NewStoreSource(st)
	defer src.Close()
	cli, err := Dial(Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 2 * time.Second})
	if err != nil {
		log.Error("dial", "err", err)
		return 1
	}
	defer cli.Close()
	n, err := NewNode(cli, NodeConfig{Name: *node, LeaseTTL: *ttl, Dir: filepath.Join(*dir, "cluster"), Source: src,
		Changes: src.Changes(), Logger: log, Hooks: hooks})
	if err != nil {
		log.Error("node", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = n.Register(rctx)
	cancel()
	switch {
	case errors.Is(err, ErrNodeHeld):
		fmt.Printf("held: %v\n", err)
		return 3
	case err != nil:
		log.Warn("not registered yet; running on", "err", err)
	}
	fmt.Println("registered")
	go func() {
		total := generate(ctx, src, *node, *tasks, *events, *every)
		fmt.Printf("generated %d\n", total)
	}()
	_ = n.Run(ctx)
	return 0
}

// generate commits tasks lifecycles with events reattached events each,
// round robin, one commit per event, going on from whatever an earlier
// run of the agent committed, and returns the events in the log.
func generate(ctx context.Context, src store.Log, node string, tasks, events int, every time.Duration) int {
	logs := make([][]fsm.Event, tasks)
	done := make([]uint64, tasks)
	for i := range logs {
		logs[i] = lifecycle(fmt.Sprintf("%s-svc%d", node, i), i, events)
		if t, err := src.LoadTask(ctx, genTask(node, i)); err == nil {
			done[i] = t.Version
		}
	}
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		did := false
		for i := range logs {
			if done[i] >= uint64(len(logs[i])) {
				continue
			}
			did = true
			if tick != nil {
				select {
				case <-ctx.Done():
					return -1
				case <-tick:
				}
			}
			e := logs[i][done[i]]
			e.Time = time.Now().UnixNano()
			if _, err := src.Append(ctx, genTask(node, i), done[i], e); err != nil {
				return -1
			}
			done[i]++
		}
		if !did {
			total := 0
			for _, d := range done {
				total += int(d)
			}
			return total
		}
	}
}

func genTask(node string, i int) string { return fmt.Sprintf("%s-t%d", node, i) }

// agentProc is a running agent helper.
type agentProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

// startAgent starts the agent helper and waits for its first line
// ("registered" or "held: …").
func startAgent(t *testing.T, env []string, args ...string) (*agentProc, string) {
	t.Helper()
	p := startAgentNoWait(t, env, args...)
	return p, p.next(t)
}

// startAgentNoWait starts the agent helper without waiting for a line.
func startAgentNoWait(t *testing.T, env []string, args ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{modeAgent}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &prefixWriter{t: t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	})
	return p
}

func (p *agentProc) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			err := <-p.done
			p.done <- err
			t.Fatalf("agent %d exited: %v", p.cmd.Process.Pid, err)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("agent %d said nothing in 60s", p.cmd.Process.Pid)
	}
	return ""
}

// wait waits for the agent to exit and returns how it ended.
func (p *agentProc) wait(t *testing.T) error {
	t.Helper()
	for range p.lines {
	}
	err := <-p.done
	p.done <- err // for the cleanup
	return err
}

type prefixWriter struct{ t testing.TB }

func (w *prefixWriter) Write(b []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("agent: %s", strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}
