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
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/benchkit"
)

// idleProcs is how many helpers of one kind are alive when memory is read.
const idleProcs = 10

// kind starts one idle helper in dir and returns its pid and its stop.
type kind func(b *testing.B, dir string) (int, func())

func tetherExecutor(command []string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		c, err := executor.Spawn(context.Background(), executor.SpawnConfig{
			Command: command, TaskDir: filepath.Join(dir, "task"),
			Nonce: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36),
		})
		if err != nil {
			b.Fatal(err)
		}
		return c.Identity().PID, func() {
			if err := c.Shutdown(context.Background()); err != nil {
				b.Error(err)
			}
			c.Close()
		}
	}
}

func minHelper(bin string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		h := benchkit.StartHelper(b, bin, dir)
		return h.Cmd.Process.Pid, h.Stop
	}
}

func goPluginHelper(bin string) kind {
	return func(b *testing.B, dir string) (int, func()) {
		cmd := exec.Command(bin, dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		c := plugin.NewClient(&plugin.ClientConfig{
			HandshakeConfig: gpexec.Handshake, Plugins: gpexec.Plugins(), Cmd: cmd,
			AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, Logger: hclog.NewNullLogger(),
		})
		rc, err := c.Client()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rc.Dispense(gpexec.Name); err != nil {
			b.Fatal(err)
		}
		return c.ReattachConfig().Pid, c.Kill
	}
}

// idleMem starts idleProcs helpers of kind k, lets them settle, and returns
// the sum of their RSS and PSS in kB (PSS shares the common pages between
// the ten, as on a node running ten tasks).
func idleMem(b *testing.B, k kind) (rss, pss float64) {
	var stops []func()
	var pids []int
	for range idleProcs {
		dir, err := os.MkdirTemp("", "tb")
		if err != nil {
			b.Fatal(err)
		}
		pid, stop := k(b, dir)
		pids = append(pids, pid)
		stops = append(stops, func() { stop(); os.RemoveAll(dir) })
	}
	// Each kind answered a request before k returned: it is up and idle,
	// and all kinds are read at the same point of their lives.
	for _, pid := range pids {
		r, p := benchkit.MemOf(b, pid)
		rss, pss = rss+r, pss+p
	}
	for _, stop := range stops {
		stop()
	}
	return rss, pss
}

// BenchmarkIdleMemory: RSS and PSS of ten idle executors (tether's
// standalone executor, and the tether binary in executor mode, the embedded
// case) against ten minimal Go helpers and ten go-plugin helpers, kinds
// alternating within each round. Targets: standalone <= 1.1x the helper,
// <= 0.5x go-plugin.
func BenchmarkIdleMemory(b *testing.B) {
	kinds := []kind{
		tetherExecutor([]string{bin(b, "tether-executor")}),
		tetherExecutor([]string{bin(b, "tether"), "executor"}),
		minHelper(bin(b, "minhelper")),
		goPluginHelper(bin(b, "gphelper")),
	}
	names := []string{"standalone", "embedded", "helper", "goplugin"}
	rss := make([][]float64, len(kinds))
	pss := make([][]float64, len(kinds))
	for i := 0; i < b.N; i++ {
		for j := range kinds {
			k := (i + j) % len(kinds) // rotate who goes first
			r, p := idleMem(b, kinds[k])
			rss[k], pss[k] = append(rss[k], r), append(pss[k], p)
		}
	}
	for k, n := range names {
		b.ReportMetric(quantile(rss[k], 0.5)/1024, n+"-rss-MB")
		b.ReportMetric(quantile(pss[k], 0.5)/1024, n+"-pss-MB")
	}
	ratio := func(xs [][]float64, a, f int) float64 {
		p := &paired{a: xs[a], b: xs[f]}
		return p.ratio()
	}
	b.ReportMetric(ratio(rss, 0, 2), "rss-ratio-helper")
	b.ReportMetric(ratio(pss, 0, 2), "pss-ratio-helper")
	b.ReportMetric(ratio(rss, 0, 3), "rss-ratio-goplugin")
	b.ReportMetric(ratio(pss, 0, 3), "pss-ratio-goplugin")
	b.ReportMetric(ratio(rss, 1, 2), "embedded-rss-ratio-helper")
	b.ReportMetric(ratio(pss, 1, 2), "embedded-pss-ratio-helper")
}
