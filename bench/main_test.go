package bench

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// sizingRun reports whether this call is the testing package's first,
// one-round run of a benchmark asked for more rounds (-benchtime Nx with N
// > 1), which it throws away: an expensive benchmark returns at once from
// it rather than pay its setup twice.
func sizingRun(b *testing.B) bool {
	f := flag.Lookup("test.benchtime")
	if b.N != 1 || f == nil {
		return false
	}
	n, ok := strings.CutSuffix(f.Value.String(), "x")
	if !ok {
		return false
	}
	want, err := strconv.Atoi(n)
	return err == nil && want > 1
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

// interleaveSettled is interleave with settle before every sample.
func interleaveSettled(b *testing.B, a, f func(round int) float64) *paired {
	return interleave(b, func(i int) float64 { settle(b); return a(i) }, func(i int) float64 { settle(b); return f(i) })
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

// rotate runs b.N rounds of every side, each once a round, with the order
// rotating round by round (so each side goes first, second, ... equally
// often), and returns each side's samples.
func rotate(b *testing.B, sides ...func(round int) float64) [][]float64 {
	out := make([][]float64, len(sides))
	for i := 0; i < b.N; i++ {
		for j := range sides {
			k := (i + j) % len(sides)
			out[k] = append(out[k], sides[k](i))
		}
	}
	return out
}

// rotateSettled is rotate with settle before every sample.
func rotateSettled(b *testing.B, sides ...func(round int) float64) [][]float64 {
	settled := make([]func(int) float64, len(sides))
	for k, f := range sides {
		settled[k] = func(i int) float64 { settle(b); return f(i) }
	}
	return rotate(b, settled...)
}

// settle waits out three RCU grace periods (membarrier's global command is
// synchronize_rcu), so that a cgroup migration of the previous sample no
// longer speeds up the next one. On cgroup v1 and hybrid hosts the first
// migration after a quiet spell waits for a grace period (the
// threadgroup rwsem's rcu_sync), and any migration within about a grace
// period of another does not: without this, whichever side runs right
// after a side that moved a process into a cgroup gets its migration
// nearly free. Every settled sample starts cold, as a start on a quiet
// node does.
func settle(b *testing.B) {
	for range 3 {
		if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, 1, 0, 0); e != 0 { // MEMBARRIER_CMD_GLOBAL
			b.Fatalf("membarrier: %v", e)
		}
	}
}

// medianRatio is the median of the paired ratios a[i]/f[i].
func medianRatio(a, f []float64) float64 {
	p := &paired{a: a, b: f}
	return p.ratio()
}

// probes records when the driver passes its crash points (used as
// timestamps, never crashing), so a benchmark can say where its time goes,
// and gathers named phases' samples.
type probes struct {
	mu   sync.Mutex
	at   map[string]time.Time
	sums map[string][]float64
}

func newProbes() *probes { return &probes{at: map[string]time.Time{}, sums: map[string][]float64{}} }

func (p *probes) hit(point, _ string) {
	p.mu.Lock()
	p.at[point] = time.Now()
	p.mu.Unlock()
}

func (p *probes) reset() {
	p.mu.Lock()
	clear(p.at)
	p.mu.Unlock()
}

// clear drops every sample gathered so far (the warm-up's).
func (p *probes) clear() {
	p.mu.Lock()
	clear(p.at)
	clear(p.sums)
	p.mu.Unlock()
}

// span adds, under name, the time in seconds from point a to point b of
// this round, and returns it (0 when either was not passed).
func (p *probes) span(name, a, b string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ta, okA := p.at[a]
	tb, okB := p.at[b]
	if !okA || !okB {
		return 0
	}
	d := tb.Sub(ta).Seconds()
	p.sums[name] = append(p.sums[name], d)
	return d
}

// add adds a sample in seconds under name.
func (p *probes) add(name string, secs float64) {
	p.mu.Lock()
	p.sums[name] = append(p.sums[name], secs)
	p.mu.Unlock()
}

// report reports each phase's median in ms as phase-NAME-ms.
func (p *probes) report(b *testing.B) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, xs := range p.sums {
		b.ReportMetric(quantile(xs, 0.5)*1e3, "phase-"+name+"-ms")
	}
}
