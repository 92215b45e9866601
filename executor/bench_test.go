//go:build linux

package executor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
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
			h := benchkit.StartHelper(b, bs["minhelper"], dir)
			return h.Cmd.Process.Pid, h.Stop
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
				r, p := benchkit.MemOf(b, pid)
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
			r, _ := benchkit.MemOf(b, pid)
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

// BenchmarkLaunch_Preparation is the cost of a job file task's
// preparation on its start: spawn an executor (this test binary, with the
// preparer) and launch a raw_exec task with an alloc, with nothing to
// prepare, with one template (env = true, reading the task's
// environment), and with that template and an artifact fetched over http
// from 127.0.0.1 (a 64 KiB file, sha256 checked); each run until its task
// has started. The difference is what preparation adds to a start.
func BenchmarkLaunch_Preparation(b *testing.B) {
	body := bytes.Repeat([]byte("tether"), 64<<10/6)
	sum := sha256.Sum256(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }))
	defer srv.Close()
	m := marker("tetherbench" + randHex(b, 4))
	cases := []struct {
		name string
		mod  func(*Launch)
	}{
		{"nothing", func(*Launch) {}},
		{"template", func(l *Launch) {
			l.Templates = []fsm.Template{{Data: "DIR={{ env \"NOMAD_ALLOC_DIR\" }}\n", Destination: "local/env", Env: true}}
		}},
		{"template+artifact", func(l *Launch) {
			l.Templates = []fsm.Template{{Data: "DIR={{ env \"NOMAD_ALLOC_DIR\" }}\n", Destination: "local/env", Env: true}}
			l.Artifacts = []fsm.Artifact{{Source: srv.URL + "/app.bin", Destination: "local/app.bin", Mode: fsm.ArtifactFile,
				Options: map[string]string{"checksum": "sha256:" + hex.EncodeToString(sum[:])}}}
		}},
	}
	// The three cases interleaved, in turn, so that the host's noise falls
	// on each alike; each case's median is reported.
	times := make([][]float64, len(cases))
	run := func(k int) {
		root := b.TempDir()
		a := &fsm.Alloc{ID: "a1", Dir: filepath.Join(root, "allocs", "a1", "alloc"), TaskDir: filepath.Join(root, "allocs", "a1", "web"), Tasks: []string{"web"}}
		l := Launch{Spec: fsm.Spec{Driver: ModeRawExec, Command: "/bin/true", Alloc: a, Env: map[string]string{"TETHER_TEST_MARKER": string(m)}}}
		cases[k].mod(&l)
		t0 := time.Now()
		c := spawnBench(b, m.executorCmd(b), filepath.Join(root, "task"))
		if _, err := c.Launch(context.Background(), l); err != nil {
			b.Fatal(err)
		}
		times[k] = append(times[k], float64(time.Since(t0).Microseconds())/1000)
		shutdownBench(b, c)
	}
	for k := range cases {
		run(k) // warm
		times[k] = nil
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range cases {
			run((i + j) % len(cases))
		}
	}
	b.StopTimer()
	for k, tc := range cases {
		slices.Sort(times[k])
		b.ReportMetric(times[k][len(times[k])/2], tc.name+"-p50-ms")
	}
}
