package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCLIParallelAgent is issue 24's throughput row: a batch of
// `tether start --min-uptime 0` run all at once (100, then 200: -cli.tasks
// and its half) on a fresh state directory daemonless, and on one a real
// `tether agent` serves, the sides interleaved round by round. Daemonless,
// every command opens the store and takes its file lock; through an agent
// the store is held once and the commands share its commits. Its metrics:
// each side's starts a second and the batch's wall time, and the agent's
// wall time over the daemonless one (the target: at most 2/3).
func BenchmarkCLIParallelAgent(b *testing.B) {
	if sizingRun(b) {
		return
	}
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	base := cliBase(b)
	sizes := []int{*cliTasks / 2, *cliTasks}
	type side struct{ alone, agent []*batch }
	res := make([]side, len(sizes))
	round := 0
	batchOn := func(dir string, n int) *batch {
		bt := runBatch(n, 0, func(int) *exec.Cmd { return tetherCmd(tether, dir, "start", "--min-uptime", "0", "--", sleeper) })
		if bt.failures > 0 {
			b.Fatalf("%d of %d starts failed in %s: %s", bt.failures, n, dir, bt.firstErr)
		}
		return bt
	}
	mkdir := func(kind string, n int) string {
		d := filepath.Join(base, fmt.Sprintf("%s-%d-%d", kind, n, round))
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
		return d
	}
	b.ResetTimer()
	for round = 0; round < b.N; round++ {
		for i, n := range sizes {
			alone := func() {
				dir := mkdir("alone", n)
				res[i].alone = append(res[i].alone, batchOn(dir, n))
				b.StopTimer()
				stopAll(b, tether, dir, 0)
				b.StartTimer()
			}
			served := func() {
				dir := mkdir("agent", n)
				b.StopTimer()
				stop := startAgent(b, tether, dir)
				b.StartTimer()
				res[i].agent = append(res[i].agent, batchOn(dir, n))
				b.StopTimer()
				stopAll(b, tether, dir, 0)
				stop()
				b.StartTimer()
			}
			if round%2 == 0 {
				alone()
				served()
			} else {
				served()
				alone()
			}
		}
	}
	b.StopTimer()
	med := func(bs []*batch, f func(*batch) float64) float64 {
		xs := make([]float64, len(bs))
		for i, bt := range bs {
			xs[i] = f(bt)
		}
		return quantile(xs, 0.5)
	}
	for i, n := range sizes {
		r := res[i]
		b.ReportMetric(med(r.alone, (*batch).rate), fmt.Sprintf("daemonless-%d-starts/s", n))
		b.ReportMetric(med(r.agent, (*batch).rate), fmt.Sprintf("agent-%d-starts/s", n))
		b.ReportMetric(med(r.alone, func(bt *batch) float64 { return bt.secs }), fmt.Sprintf("daemonless-%d-wall-s", n))
		b.ReportMetric(med(r.agent, func(bt *batch) float64 { return bt.secs }), fmt.Sprintf("agent-%d-wall-s", n))
		ratio := make([]float64, len(r.agent))
		for j := range r.agent {
			ratio[j] = r.agent[j].secs / r.alone[j].secs
		}
		b.ReportMetric(quantile(ratio, 0.5), fmt.Sprintf("agent/daemonless-%d-wall", n))
	}
}

// startAgent starts `tether agent` on dir and returns once it has said
// READY=1 on its NOTIFY_SOCKET (as systemd's Type=notify waits); stop
// SIGTERMs it and waits for its exit (it stops no task).
func startAgent(b *testing.B, tether, dir string) (stop func()) {
	b.Helper()
	a := launchAgent(b, tether, dir)
	return a.stop
}

// agentProc is a running `tether agent`.
type agentProc struct {
	b      *testing.B
	cmd    *exec.Cmd
	logs   *strings.Builder
	exited chan error
}

// launchAgent starts `tether agent` on dir and returns once it has said
// READY=1 on its NOTIFY_SOCKET (as systemd's Type=notify waits).
func launchAgent(b *testing.B, tether, dir string) *agentProc {
	b.Helper()
	sock := filepath.Join(dir, "..", filepath.Base(dir)+".notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { ln.Close(); os.Remove(sock) }()
	cmd := tetherCmd(tether, dir, "agent")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	a := &agentProc{b: b, cmd: cmd, logs: &strings.Builder{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = a.logs, a.logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { a.exited <- cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		_ = ln.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 512)
		n, _ := ln.Read(buf)
		ready <- string(buf[:n])
	}()
	select {
	case msg := <-ready:
		if !strings.Contains(msg, "READY=1") {
			_ = cmd.Process.Kill()
			<-a.exited
			b.Fatalf("the agent said %q, not READY=1:\n%s", msg, a.logs.String())
		}
	case err := <-a.exited:
		b.Fatalf("the agent exited before it was ready: %v\n%s", err, a.logs.String())
	}
	return a
}

// stop SIGTERMs the agent and waits for its exit (it stops no task).
func (a *agentProc) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-a.exited; err != nil {
		a.b.Errorf("the agent on SIGTERM: %v\n%s", err, a.logs.String())
	}
}

// kill SIGKILLs the agent, as a crash would, and waits for its exit: its
// tasks' executors live on.
func (a *agentProc) kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}
