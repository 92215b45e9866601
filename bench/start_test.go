package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/tether-fsm/tether/bench/internal/gpexec"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
)

// The task both sides start: a real program that stays up.
const taskBinary = "/bin/sleep"

var taskArgs = []string{"3600"}

// gpStart is the start path built on go-plugin, as Nomad's drivers do it:
// the same six durable appends as tether's (bare bbolt Updates), the
// plugin process started by go-plugin (handshake on stdout, gRPC over a
// unix socket), the helper's durable identity file, one Launch RPC that
// fork/execs the task. It returns the plugin client and the task's pid.
func gpStart(b *testing.B, steps *benchkit.BoltSteps, helper, dir string) (*plugin.Client, int) {
	steps.Append(b) // task-created
	steps.Append(b) // spawn-intent
	t0 := time.Now()
	cmd := exec.Command(helper, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  gpexec.Handshake,
		Plugins:          gpexec.Plugins(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	rc, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := rc.Dispense(gpexec.Name)
	if err != nil {
		b.Fatal(err)
	}
	gpPhases.spawn = append(gpPhases.spawn, since(t0))
	steps.Append(b) // executor-up
	steps.Append(b) // launch-intent
	t1 := time.Now()
	pid, err := raw.(gpexec.Executor).Launch(context.Background(), taskBinary, taskArgs)
	if err != nil {
		b.Fatal(err)
	}
	gpPhases.launch = append(gpPhases.launch, since(t1))
	steps.Append(b) // launched
	steps.Append(b) // running
	return c, pid
}

// gpPhases are the go-plugin path's spawn (process start, handshake,
// gRPC dial, Dispense) and Launch RPC times, in seconds.
var gpPhases struct{ spawn, launch []float64 }

func gpStop(c *plugin.Client, pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	c.Kill()
}

// BenchmarkStartVsGoPlugin: tether's StartTask -> running (real driver,
// real store, the standalone tether-executor) against the same path built
// on go-plugin (see gpStart). Target: ratio <= 0.6.
func BenchmarkStartVsGoPlugin(b *testing.B) {
	exe, gph := bin(b, "tether-executor"), bin(b, "gphelper")
	dir := filepath.Join(b.TempDir(), "state")
	d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{exe}, KillTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	steps := benchkit.OpenBoltSteps(b, dir, "peer.db")
	spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
	ctx := context.Background()
	tether := func(i int) float64 {
		id := "start-" + strconv.Itoa(i)
		t0 := time.Now()
		st, err := d.StartTask(ctx, id, spec)
		el := since(t0)
		if err != nil || st.State != fsm.StateRunning {
			b.Fatalf("StartTask: %v (%s)", err, st.State)
		}
		if err := d.DestroyTask(ctx, id, true); err != nil {
			b.Fatal(err)
		}
		return el
	}
	peer := func(i int) float64 {
		hdir := filepath.Join(dir, "peer", strconv.Itoa(i))
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		c, pid := gpStart(b, steps, gph, hdir)
		el := since(t0)
		gpStop(c, pid)
		return el
	}
	peer(-1) // warm both paths
	tether(-1)
	b.ResetTimer()
	p := interleave(b, tether, peer)
	p.reportMs(b, "tether", "goplugin", true)
	b.ReportMetric(quantile(gpPhases.spawn, 0.5)*1e3, "phase-goplugin-spawn-ms")
	b.ReportMetric(quantile(gpPhases.launch, 0.5)*1e3, "phase-goplugin-launch-ms")
}
