package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{binDir, replayDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

// root is tether's module, the parent of this one.
var root = func() string { d, _ := filepath.Abs(".."); return d }()

// builds are the binaries the benchmarks spawn, built without cgo (as
// helpers ship) on first use: tether's standalone executor, the tether CLI
// (which also serves executor mode: the embedded case), the minimal Go
// helper of the executor package and the go-plugin executor.
var builds = map[string]struct{ dir, pkg string }{
	"tether-executor": {root, "./cmd/tether-executor"},
	"tether":          {root, "./cmd/tether"},
	"minhelper":       {root, "./executor/internal/minhelper"},
	"gphelper":        {".", "./internal/gphelper"},
}

var (
	binMu  sync.Mutex
	built  = map[string]string{}
	binDir string // removed by TestMain
)

func bin(b *testing.B, name string) string {
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "tether-bench-bin-")
		if err != nil {
			b.Fatal(err)
		}
		binDir = dir
	}
	p := builds[name]
	out := filepath.Join(binDir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, p.pkg)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", p.pkg, err, msg)
	}
	built[name] = out
	return out
}

// paired holds the two sides' samples of an interleaved benchmark.
type paired struct{ a, b []float64 }

func (p *paired) add(a, b float64) { p.a, p.b = append(p.a, a), append(p.b, b) }

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// ratio is the median of the paired ratios a/b.
func (p *paired) ratio() float64 {
	r := make([]float64, len(p.a))
	for i := range p.a {
		r[i] = p.a[i] / p.b[i]
	}
	return quantile(r, 0.5)
}

// interleave runs b.N rounds of a and f, alternating which goes first.
func interleave(b *testing.B, a, f func(round int) float64) *paired {
	p := &paired{}
	for i := 0; i < b.N; i++ {
		var va, vf float64
		if i%2 == 0 {
			va, vf = a(i), f(i)
		} else {
			vf, va = f(i), a(i)
		}
		p.add(va, vf)
	}
	return p
}

// reportMs reports both sides' p50 (and p99) in ms of samples in seconds,
// and the median paired ratio.
func (p *paired) reportMs(b *testing.B, aName, bName string, withP99 bool) {
	b.ReportMetric(quantile(p.a, 0.5)*1e3, aName+"-p50-ms")
	b.ReportMetric(quantile(p.b, 0.5)*1e3, bName+"-p50-ms")
	if withP99 {
		b.ReportMetric(quantile(p.a, 0.99)*1e3, aName+"-p99-ms")
		b.ReportMetric(quantile(p.b, 0.99)*1e3, bName+"-p99-ms")
		b.ReportMetric(quantile(p.a, 0.99)/quantile(p.b, 0.99), "p99-ratio")
	}
	b.ReportMetric(p.ratio(), "ratio")
}

func since(t0 time.Time) float64 { return time.Since(t0).Seconds() }
