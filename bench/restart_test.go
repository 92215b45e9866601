package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

var agentTasks = flag.Int("agent.tasks", 1000, "how many live tasks BenchmarkAgentRestart's agent is restarted over")

// reattachWorkers is how many tasks the floor of BenchmarkAgentRestart
// works on at once: as many as the driver's recovery (driver's
// recoverWorkers), so that both sides wait for executors the same way.
const reattachWorkers = 64

// BenchmarkAgentRestart is issue 35's row: N live tasks (-agent.tasks;
// sleepers under real executors, started through a real `tether agent`),
// the agent SIGKILLed (its executors and tasks live on), and a new agent
// started; the clock runs from the new agent's fork until every task is
// reattached: the agent said READY=1, its recovery is over (its status
// stream's first generation, which it publishes once Recover returned),
// and a status of each task through it answers running with its executor
// alive (InspectTask, 8 at a time). The floor is the same N identity
// checks and executor connects done bare, reattachWorkers at a time:
// pidfd_open, the start time from /proc/PID/stat against the one
// recorded, connect(2) to the executor's socket, and one exchange with it
// (its hello: the least that proves the executor answers), then close.
// The sides alternate round by round (the floor is taken on the live
// executors between two agents). Untimed: the N starts, and the kill of
// the agent before each round.
//
// Where the time goes: the new agent's start to READY=1, then to the end
// of its recovery, then the statuses; the CPU of the agent and of the
// executors (their answers) in a round, the floor's and its executors';
// the floor's identity checks and connects apart (their times summed over
// its workers).
func BenchmarkAgentRestart(b *testing.B) {
	if sizingRun(b) {
		return
	}
	n := *agentTasks
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	dir := filepath.Join(cliBase(b), "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	ag := launchAgent(b, tether, dir)
	t0 := time.Now()
	bt := runBatch(n, 8, func(int) *exec.Cmd { return tetherCmd(tether, dir, "start", "--min-uptime", "0", "--", sleeper) })
	defer func() {
		stopAll(b, tether, dir, 16)
		ag.stop()
	}()
	if bt.failures > 0 {
		b.Fatalf("%d of %d starts through the agent failed: %s", bt.failures, n, bt.firstErr)
	}
	b.Logf("%d live tasks started through the agent in %.1fs", n, since(t0))
	ctx := context.Background()
	ids := bt.ids
	idents := make([]fsm.Identity, n)
	{
		c, err := agent.Dial(ctx, dir, agent.DialOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i, id := range ids {
			info, err := c.InspectTask(ctx, id)
			if err != nil || info.Executor == nil || !info.ExecutorAlive {
				b.Fatalf("task %s after its start: %+v, %v", id, info.Task, err)
			}
			idents[i] = *info.Executor
		}
		c.Close()
	}
	ph := newProbes()
	executorsCPU := func() float64 {
		total := 0.0
		for _, id := range idents {
			total += procCPU(id.PID)
		}
		return total
	}
	restart := func(int) float64 {
		ag.kill()
		ecpu := executorsCPU()
		t0 := time.Now()
		ag = launchAgent(b, tether, dir)
		ready := time.Now()
		c, err := agent.Dial(ctx, dir, agent.DialOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if err := c.WatchStatus(ctx, func(s agent.Status) bool { return s.Generation > 0 }); err != nil {
			b.Fatalf("the agent's status: %v\n%s", err, ag.logs.String())
		}
		recovered := time.Now()
		fanOut(n, 8, func(i int) {
			info, err := c.InspectTask(ctx, ids[i])
			if err != nil || info.State != fsm.StateRunning || !info.ExecutorAlive || info.Executor == nil || info.Executor.PID != idents[i].PID {
				b.Errorf("task %s after the agent's restart: %s, executor alive %v, %v", ids[i], info.State, info.ExecutorAlive, err)
			}
		})
		el := since(t0)
		// CPU (clock ticks summed over processes: a sum over 1,000
		// executors of ticks each is a fair estimate, not a per-process
		// figure): the agent's own, from its fork, and the executors'.
		ph.add("agent-cpu", procCPU(ag.cmd.Process.Pid))
		ph.add("executors-cpu", executorsCPU()-ecpu)
		ph.add("start-to-ready", ready.Sub(t0).Seconds())
		ph.add("ready-to-recovered", recovered.Sub(ready).Seconds())
		ph.add("statuses", time.Since(recovered).Seconds())
		return el
	}
	floor := func(int) float64 {
		var checks, connects [reattachWorkers]time.Duration
		ecpu := executorsCPU()
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		t0 := time.Now()
		fanOutWorkers(n, reattachWorkers, func(w, i int) {
			c, k := bareReattach(b, idents[i])
			checks[w] += c
			connects[w] += k
		})
		el := since(t0)
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		ph.add("floor-cpu", float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano())/1e9)
		ph.add("floor-executors-cpu", executorsCPU()-ecpu)
		var c, k time.Duration
		for w := range reattachWorkers {
			c, k = c+checks[w], k+connects[w]
		}
		ph.add("floor-identity-checks-summed", c.Seconds())
		ph.add("floor-connects-summed", k.Seconds())
		return el
	}
	floor(-1) // warm both: the executors' pages, the agent binary's
	restart(-1)
	ph.clear()
	b.ResetTimer()
	p := interleave(b, restart, floor)
	b.StopTimer()
	b.ReportMetric(float64(n), "tasks")
	p.reportMs(b, "tether", "floor", false)
	b.ReportMetric(quantile(p.a, 0.5)/float64(n)*1e6, "tether-us/task")
	b.ReportMetric(quantile(p.b, 0.5)/float64(n)*1e6, "floor-us/task")
	ph.report(b)
}

// fanOutWorkers is fanOut that tells f which worker (0..width-1) runs it.
func fanOutWorkers(n, width int, f func(w, i int)) {
	next := make(chan int)
	done := make(chan struct{})
	for w := range width {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				f(w, i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	for range width {
		<-done
	}
}

// bareReattach is the floor's reattach to the executor with identity id:
// pidfd_open, its start time read from /proc/PID/stat and compared, then
// connect(2) to its socket, its hello (the protocol's frame: a 4-byte
// big-endian length, then JSON) and its answer read, and close. It returns
// the time of the identity check and of the connect and exchange.
func bareReattach(b *testing.B, id fsm.Identity) (check, connect time.Duration) {
	t0 := time.Now()
	fd, err := unix.PidfdOpen(id.PID, 0)
	if err != nil {
		b.Errorf("pidfd_open %d: %v", id.PID, err)
		return
	}
	defer unix.Close(fd)
	if st, err := proc.StartTime(id.PID); err != nil || st != id.StartTime {
		b.Errorf("executor %d: start time %d, %v; want %d", id.PID, st, err, id.StartTime)
		return
	}
	t1 := time.Now()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: id.Socket, Net: "unix"})
	if err != nil {
		b.Errorf("connect to executor %d: %v", id.PID, err)
		return
	}
	defer conn.Close()
	hello, _ := json.Marshal(map[string]any{"id": 1, "op": 1, "version": helloVersion, "nonce": id.Nonce})
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(hello)))
	if _, err := conn.Write(append(frame, hello...)); err != nil {
		b.Errorf("hello to executor %d: %v", id.PID, err)
		return
	}
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		b.Errorf("executor %d's answer: %v", id.PID, err)
		return
	}
	answer := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(conn, answer); err != nil {
		b.Errorf("executor %d's answer: %v", id.PID, err)
		return
	}
	var reply map[string]json.RawMessage
	if err := json.Unmarshal(answer, &reply); err != nil || reply["err"] != nil {
		b.Errorf("executor %d's answer to the hello: %q (%v)", id.PID, answer, err)
	}
	return t1.Sub(t0), time.Since(t1)
}

// helloVersion is the protocol version the floor's hello names: the
// executor's (executor/internal/wire.ProtocolVersion, which this module
// cannot import; an executor of another version answers with an error,
// which fails the benchmark).
const helloVersion = 9
