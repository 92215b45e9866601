package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is a metric family's type, as the text format's TYPE line says it.
type Kind uint8

const (
	KindCounter Kind = iota + 1
	KindGauge
	KindHistogram
)

func (k Kind) String() string {
	switch k {
	case KindCounter:
		return "counter"
	case KindGauge:
		return "gauge"
	case KindHistogram:
		return "histogram"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DefaultMaxSeries bounds the series of one family (its label value
// combinations) unless the family says otherwise.
const DefaultMaxSeries = 1000

// Overflow is the label value every label of a series takes once its
// family holds MaxSeries series: what comes past the bound is counted,
// under one series, never dropped and never a new series.
const Overflow = "_overflow_"

// validName reports whether s is a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*),
// or with colon false a label name ([a-zA-Z_][a-zA-Z0-9_]*). A loop, not
// a regexp: the package costs nothing at init in the binary every task
// start runs.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || colon && c == ':' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// Registry holds metric families and writes them in Prometheus' text
// format. It is safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{families: map[string]*family{}} }

// family is one metric name: its series by label values.
type family struct {
	name, help string
	kind       Kind
	labels     []string
	buckets    []float64 // histograms: upper bounds, ascending, no +Inf
	maxSeries  int
	collect    func() []Sample // gauges and counters computed when written (nil: stored series)

	mu     sync.Mutex
	series map[string]*series // key: label values joined by \xff
}

// series is one label value combination.
type series struct {
	values []string
	bits   atomic.Uint64 // counter and gauge: the float64's bits

	mu     sync.Mutex // histogram
	counts []uint64   // per bucket, not cumulative; the last is +Inf
	sum    float64
	count  uint64
}

// Sample is one series of a gauge computed when the registry is written.
type Sample struct {
	Values []string // in the family's label order
	Value  float64
}

func (r *Registry) add(f *family) *family {
	if !validName(f.name, true) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", f.name))
	}
	for _, l := range f.labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") || (f.kind == KindHistogram && l == "le") {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", f.name, l))
		}
	}
	f.series = map[string]*series{}
	if f.maxSeries <= 0 {
		f.maxSeries = DefaultMaxSeries
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.families[f.name]; ok {
		panic(fmt.Sprintf("metrics: %s registered twice", f.name))
	}
	r.families[f.name] = f
	return f
}

// Counter registers a counter family with the given label names.
func (r *Registry) Counter(name, help string, labels ...string) *CounterVec {
	return &CounterVec{r.add(&family{name: name, help: help, kind: KindCounter, labels: labels})}
}

// Gauge registers a gauge family with the given label names.
func (r *Registry) Gauge(name, help string, labels ...string) *GaugeVec {
	return &GaugeVec{r.add(&family{name: name, help: help, kind: KindGauge, labels: labels})}
}

// GaugeFunc registers a gauge family whose series collect computes each
// time the registry is written (a scrape reads the state as it is then).
// Samples beyond the family's bound are summed into the overflow series.
func (r *Registry) GaugeFunc(name, help string, collect func() []Sample, labels ...string) {
	r.add(&family{name: name, help: help, kind: KindGauge, labels: labels, collect: collect})
}

// CounterFunc registers a counter family whose series collect computes
// each time the registry is written, from counts kept elsewhere (a
// cluster node's): each must only go up, as a counter's.
func (r *Registry) CounterFunc(name, help string, collect func() []Sample, labels ...string) {
	r.add(&family{name: name, help: help, kind: KindCounter, labels: labels, collect: collect})
}

// Histogram registers a histogram family; buckets are its upper bounds,
// strictly ascending and finite (the +Inf bucket is implied).
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *HistogramVec {
	for i, b := range buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= buckets[i-1]) {
			panic(fmt.Sprintf("metrics: %s: buckets must be finite and strictly ascending: %v", name, buckets))
		}
	}
	return &HistogramVec{r.add(&family{name: name, help: help, kind: KindHistogram, labels: labels, buckets: slices.Clone(buckets)})}
}

// SetMaxSeries sets the bound on a family's series (before its first).
func (r *Registry) SetMaxSeries(name string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.families[name]; ok && n > 0 {
		f.maxSeries = n
	}
}

// with returns the series of values, created when new; past the bound,
// the overflow series.
func (f *family) with(values []string) *series {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values (%s), got %d", f.name, len(f.labels), strings.Join(f.labels, ", "), len(values)))
	}
	key := strings.Join(values, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.series[key]; ok {
		return s
	}
	if len(f.series) >= f.maxSeries-1 && len(f.labels) > 0 {
		over := make([]string, len(f.labels))
		for i := range over {
			over[i] = Overflow
		}
		key = strings.Join(over, "\xff")
		values = over
		if s, ok := f.series[key]; ok {
			return s
		}
	}
	s := &series{values: slices.Clone(values)}
	if f.kind == KindHistogram {
		s.counts = make([]uint64, len(f.buckets)+1)
	}
	f.series[key] = s
	return s
}

// CounterVec is a counter family.
type CounterVec struct{ f *family }

// With returns the counter of the label values (in the family's order).
func (v *CounterVec) With(values ...string) *Counter { return &Counter{v.f.with(values)} }

// Counter only goes up.
type Counter struct{ s *series }

// Inc adds one.
func (c *Counter) Inc() { c.Add(1) }

// Add adds d, which must not be negative (a negative d is ignored: a
// counter that went down would read as a reset).
func (c *Counter) Add(d float64) {
	if !(d >= 0) {
		return
	}
	addFloat(&c.s.bits, d)
}

// Value is the counter's value.
func (c *Counter) Value() float64 { return math.Float64frombits(c.s.bits.Load()) }

// GaugeVec is a gauge family.
type GaugeVec struct{ f *family }

// With returns the gauge of the label values.
func (v *GaugeVec) With(values ...string) *Gauge { return &Gauge{v.f.with(values)} }

// Gauge goes up and down.
type Gauge struct{ s *series }

// Set sets the gauge.
func (g *Gauge) Set(x float64) { g.s.bits.Store(math.Float64bits(x)) }

// Add adds d (negative to subtract).
func (g *Gauge) Add(d float64) { addFloat(&g.s.bits, d) }

// Value is the gauge's value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.s.bits.Load()) }

func addFloat(bits *atomic.Uint64, d float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// HistogramVec is a histogram family.
type HistogramVec struct{ f *family }

// With returns the histogram of the label values.
func (v *HistogramVec) With(values ...string) *Histogram {
	return &Histogram{s: v.f.with(values), buckets: v.f.buckets}
}

// Histogram counts observations by bucket.
type Histogram struct {
	s       *series
	buckets []float64
}

// Observe records x (NaN is ignored).
func (h *Histogram) Observe(x float64) {
	if math.IsNaN(x) {
		return
	}
	i, _ := slices.BinarySearch(h.buckets, x) // the first bound >= x: x <= le
	h.s.mu.Lock()
	h.s.counts[i]++
	h.s.sum += x
	h.s.count++
	h.s.mu.Unlock()
}

// Count is how many observations were made.
func (h *Histogram) Count() uint64 {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.count
}

// ContentType is the text format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// WriteText writes every family in Prometheus' text exposition format
// (version 0.0.4), families by name and series by label values.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	fams := make([]*family, 0, len(r.families))
	for _, f := range r.families {
		fams = append(fams, f)
	}
	r.mu.Unlock()
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		f.write(bw)
	}
	return bw.Flush()
}

func (f *family) write(w *bufio.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
	if f.collect != nil {
		f.writeCollected(w)
		return
	}
	f.mu.Lock()
	all := make([]*series, 0, len(f.series))
	for _, s := range f.series {
		all = append(all, s)
	}
	f.mu.Unlock()
	slices.SortFunc(all, func(a, b *series) int { return slices.Compare(a.values, b.values) })
	for _, s := range all {
		switch f.kind {
		case KindCounter, KindGauge:
			writeSample(w, f.name, f.labels, s.values, "", "", math.Float64frombits(s.bits.Load()))
		case KindHistogram:
			s.mu.Lock()
			counts, sum, count := slices.Clone(s.counts), s.sum, s.count
			s.mu.Unlock()
			var cum uint64
			for i, b := range f.buckets {
				cum += counts[i]
				writeSample(w, f.name+"_bucket", f.labels, s.values, "le", formatFloat(b), float64(cum))
			}
			writeSample(w, f.name+"_bucket", f.labels, s.values, "le", "+Inf", float64(count))
			writeSample(w, f.name+"_sum", f.labels, s.values, "", "", sum)
			writeSample(w, f.name+"_count", f.labels, s.values, "", "", float64(count))
		}
	}
}

func (f *family) writeCollected(w *bufio.Writer) {
	samples := f.collect()
	sums := map[string]*Sample{}
	var keys []string
	for _, s := range samples {
		if len(s.Values) != len(f.labels) {
			continue // a collector's slip: never a malformed line
		}
		key := strings.Join(s.Values, "\xff")
		if _, ok := sums[key]; !ok && len(sums) >= f.maxSeries-1 && len(f.labels) > 0 {
			over := make([]string, len(f.labels))
			for i := range over {
				over[i] = Overflow
			}
			s.Values, key = over, strings.Join(over, "\xff")
		}
		if x, ok := sums[key]; ok {
			x.Value += s.Value
			continue
		}
		c := Sample{Values: s.Values, Value: s.Value}
		sums[key] = &c
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, k := range keys {
		writeSample(w, f.name, f.labels, sums[k].Values, "", "", sums[k].Value)
	}
}

func writeSample(w *bufio.Writer, name string, labels, values []string, extra, extraValue string, v float64) {
	w.WriteString(name)
	if len(labels) > 0 || extra != "" {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			w.WriteString(l)
			w.WriteString(`="`)
			w.WriteString(escapeLabel(values[i]))
			w.WriteByte('"')
		}
		if extra != "" {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			w.WriteString(extra)
			w.WriteString(`="`)
			w.WriteString(extraValue)
			w.WriteByte('"')
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// escapeLabel escapes a label value; invalid UTF-8 is replaced, since the
// format is UTF-8 text and a task's name comes from a user.
func escapeLabel(s string) string { return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }

// Handler serves the registry at any path for GET and HEAD.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		if req.Method == http.MethodHead {
			return
		}
		_ = r.WriteText(w)
	})
}

// Path is where Serve serves the registry.
const Path = "/metrics"

// Serve serves r at Path on ln until ctx ends, then closes ln and
// returns nil (an error only when serving failed). Any other path is 404,
// naming Path. A scraper that is slow to send its request or to read the
// answer is cut off (5 s for the request's headers, 30 s for the whole
// answer), so that it cannot hold a connection of the agent's for ever.
func (r *Registry) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle(Path, r.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "tether serves its metrics at "+Path, http.StatusNotFound)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return err
}

// DefBuckets are latency buckets in seconds, from 1 ms to 60 s.
var DefBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ListenAddr is the address to listen on for addr as an operator gave it:
// a port alone ("9100" or ":9100") is loopback's; a host given is kept.
func ListenAddr(addr string) (string, error) {
	if addr == "" {
		return "", fmt.Errorf("metrics: empty listen address: give HOST:PORT or a port (loopback)")
	}
	if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
		return "127.0.0.1:" + addr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen address %q: %w; give HOST:PORT or a port (loopback)", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("metrics: listen address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
