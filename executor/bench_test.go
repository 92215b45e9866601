//go:build linux

package executor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchBins builds, once per test binary run, the minimal helper and the
// standalone executor (both without cgo, as a small helper would ship).
var benchBins = sync.OnceValues(func() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "tether-bench-bin")
	if err != nil {
		return nil, err
	}
	benchBinDir = dir
	out := map[string]string{}
	for name, pkg := range map[string]string{
		"minhelper":       "github.com/tether-fsm/tether/executor/internal/minhelper",
		"tether-executor": "github.com/tether-fsm/tether/cmd/tether-executor",
	} {
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w: %s", pkg, err, b)
		}
		out[name] = bin
	}
	return out, nil
})

// benchBinDir is removed by TestMain after the run.
var benchBinDir string

func bins(b *testing.B) map[string]string {
	m, err := benchBins()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// memOf returns VmRSS and Pss of pid in kB.
func memOf(b *testing.B, pid int) (rss, pss float64) {
	b.Helper()
	field := func(file, key string) float64 {
		f, err := os.Open(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == key {
				n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				return n
			}
		}
		b.Fatalf("no %s in %s", key, file)
		return 0
	}
	return field("status", "VmRSS"), field("smaps_rollup", "Pss")
}

// helperProc is a running minimal helper.
type helperProc struct {
	cmd *exec.Cmd
	rpc *rpc.Client
}

// startHelper starts the minimal helper the way Spawn starts an executor
// (Setsid, a ready pipe) and waits until it answered one RPC.
func startHelper(b *testing.B, bin, dir string) *helperProc {
	sock := filepath.Join(dir, "h.sock")
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, sock)
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w.Close()
	if _, err := io.ReadAll(r); err != nil {
		b.Fatal(err)
	}
	r.Close()
	c, err := rpc.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	var out int
	if err := c.Call("Helper.Ping", 1, &out); err != nil || out != 2 {
		b.Fatalf("Ping = %d %v", out, err)
	}
	return &helperProc{cmd: cmd, rpc: c}
}

func (h *helperProc) stop() {
	h.rpc.Close()
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// spawnBench spawns an executor with command and waits for its hello.
func spawnBench(b *testing.B, command []string, dir string) *Client {
	c, err := Spawn(context.Background(), SpawnConfig{Command: command, TaskDir: dir, Nonce: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func shutdownBench(b *testing.B, c *Client) {
	if err := c.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	c.Close()
}

type benchTarget struct {
	name  string
	start func(b *testing.B, dir string) (pid int, stop func())
}

func benchTargets(b *testing.B) []benchTarget {
	bs := bins(b)
	exe := func(command []string) func(b *testing.B, dir string) (int, func()) {
		return func(b *testing.B, dir string) (int, func()) {
			c := spawnBench(b, command, filepath.Join(dir, "task"))
			return c.Identity().PID, func() { shutdownBench(b, c) }
		}
	}
	return []benchTarget{
		{"minhelper", func(b *testing.B, dir string) (int, func()) {
			h := startHelper(b, bs["minhelper"], dir)
			return h.cmd.Process.Pid, h.stop
		}},
		{"executor-standalone", exe([]string{bs["tether-executor"]})},
		{"executor-testbinary", exe([]string{testBinary(b), "executor", "-marker=bench"})},
	}
}

// BenchmarkSpawnToReady measures fork to first answered request, and the
// idle memory of the process right after it, for the minimal Go helper
// (net/rpc on a unix socket), the standalone executor binary, and the test
// binary serving executor mode (the embedding case).
func BenchmarkSpawnToReady(b *testing.B) {
	for _, tg := range benchTargets(b) {
		b.Run(tg.name, func(b *testing.B) {
			var rss, pss float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir, err := os.MkdirTemp("", "tb")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				pid, stop := tg.start(b, dir)
				b.StopTimer()
				r, p := memOf(b, pid)
				rss += r
				pss += p
				stop()
				os.RemoveAll(dir)
				b.StartTimer()
			}
			b.ReportMetric(rss/float64(b.N), "rss-kB")
			b.ReportMetric(pss/float64(b.N), "pss-kB")
		})
	}
}

// BenchmarkSpawnRatio alternates the helper and the standalone executor in
// every iteration and reports executor/helper ratios of spawn-to-ready time
// and of idle RSS (targets: at most 1.3 and 1.1).
func BenchmarkSpawnRatio(b *testing.B) {
	tgs := benchTargets(b)
	helper, exe := tgs[0], tgs[1]
	var th, te time.Duration
	var rh, re float64
	for i := 0; i < b.N; i++ {
		dir, err := os.MkdirTemp("", "tb")
		if err != nil {
			b.Fatal(err)
		}
		for k, tg := range []benchTarget{helper, exe} {
			t0 := time.Now()
			pid, stop := tg.start(b, dir)
			d := time.Since(t0)
			r, _ := memOf(b, pid)
			stop()
			if k == 0 {
				th += d
				rh += r
			} else {
				te += d
				re += r
			}
		}
		os.RemoveAll(dir)
	}
	b.ReportMetric(float64(th.Microseconds())/float64(b.N)/1000, "helper-ms")
	b.ReportMetric(float64(te.Microseconds())/float64(b.N)/1000, "executor-ms")
	b.ReportMetric(float64(te)/float64(th), "time-ratio")
	b.ReportMetric(rh/float64(b.N), "helper-rss-kB")
	b.ReportMetric(re/float64(b.N), "executor-rss-kB")
	b.ReportMetric(re/rh, "rss-ratio")
}
