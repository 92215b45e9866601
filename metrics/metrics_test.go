package metrics

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads an exposition with Prometheus' own text parser.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses the exposition: %v\n%s", err, text)
	}
	return fams
}

func text(t *testing.T, r *Registry) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestRegistry_ParsesWithPrometheusParser(t *testing.T) {
	r := NewRegistry()
	starts := r.Counter("tether_task_starts_total", "Tasks started, by name.", "name")
	starts.With("web").Inc()
	starts.With("web").Add(2)
	starts.With(`we"ird\name` + "\nx").Inc()
	r.Gauge("tether_executors", "Live executors.").With().Set(4)
	r.GaugeFunc("tether_tasks", "Tasks by state.", func() []Sample {
		return []Sample{{Values: []string{"running"}, Value: 3}, {Values: []string{"failed"}, Value: 0}}
	}, "state")
	h := r.Histogram("tether_task_start_seconds", "Start latency.\nSecond line \\ here.", []float64{0.01, 0.1, 1})
	for _, x := range []float64{0.005, 0.01, 0.05, 0.5, 5} {
		h.With().Observe(x)
	}
	fams := parse(t, text(t, r))

	c := fams["tether_task_starts_total"]
	if c.GetType() != dto.MetricType_COUNTER || len(c.GetMetric()) != 2 {
		t.Fatalf("starts: %v", c)
	}
	got := map[string]float64{}
	for _, m := range c.GetMetric() {
		got[labelsOf(m)["name"]] = m.GetCounter().GetValue()
	}
	if got["web"] != 3 || got[`we"ird\name`+"\nx"] != 1 {
		t.Fatalf("counter values by name: %v", got)
	}
	if g := fams["tether_executors"].GetMetric()[0].GetGauge().GetValue(); g != 4 {
		t.Fatalf("executors = %v", g)
	}
	states := map[string]float64{}
	for _, m := range fams["tether_tasks"].GetMetric() {
		states[labelsOf(m)["state"]] = m.GetGauge().GetValue()
	}
	if len(states) != 2 || states["running"] != 3 || states["failed"] != 0 {
		t.Fatalf("tasks by state (a zero must be written too): %v", states)
	}
	hf := fams["tether_task_start_seconds"]
	if hf.GetHelp() != "Start latency.\nSecond line \\ here." {
		t.Fatalf("help round trip: %q", hf.GetHelp())
	}
	hist := hf.GetMetric()[0].GetHistogram()
	if hist.GetSampleCount() != 5 || math.Abs(hist.GetSampleSum()-5.565) > 1e-9 {
		t.Fatalf("count %d sum %v", hist.GetSampleCount(), hist.GetSampleSum())
	}
	want := map[float64]uint64{0.01: 2, 0.1: 3, 1: 4} // le is inclusive: 0.01 counts in 0.01
	for _, b := range hist.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
		delete(want, b.GetUpperBound())
	}
	if len(want) != 0 {
		t.Errorf("buckets missing: %v", want)
	}
	if !strings.Contains(text(t, r), `tether_task_start_seconds_bucket{le="+Inf"} 5`) {
		t.Errorf("the +Inf bucket must equal the count")
	}
}

func TestRegistry_CardinalityIsBounded(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("x_total", "x", "name")
	r.SetMaxSeries("x_total", 3)
	for _, n := range []string{"a", "b", "c", "d", "a", "e"} {
		c.With(n).Inc()
	}
	fams := parse(t, text(t, r))
	got := map[string]float64{}
	for _, m := range fams["x_total"].GetMetric() {
		got[labelsOf(m)["name"]] = m.GetCounter().GetValue()
	}
	// Two series of their own, then everything else under the overflow
	// series: nothing counted is lost.
	want := map[string]float64{"a": 2, "b": 1, Overflow: 3}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("series %v, want %v", got, want)
		}
	}

	r.GaugeFunc("y", "y", func() []Sample {
		return []Sample{{[]string{"a"}, 1}, {[]string{"b"}, 2}, {[]string{"c"}, 3}, {[]string{"d"}, 4}}
	}, "k")
	r.SetMaxSeries("y", 2)
	fams = parse(t, text(t, r))
	sum := 0.0
	for _, m := range fams["y"].GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	if len(fams["y"].GetMetric()) != 2 || sum != 10 {
		t.Fatalf("collected gauge past its bound: %d series summing %v, want 2 summing 10", len(fams["y"].GetMetric()), sum)
	}
}

func TestCounter_NeverGoesDown(t *testing.T) {
	r := NewRegistry()
	c := r.Counter("c_total", "c").With()
	c.Add(2)
	c.Add(-1)
	c.Add(math.NaN())
	if c.Value() != 2 {
		t.Fatalf("counter = %v, want 2", c.Value())
	}
	g := r.Gauge("g", "g").With()
	g.Add(2)
	g.Add(-3)
	if g.Value() != -1 {
		t.Fatalf("gauge = %v, want -1", g.Value())
	}
}

func TestCounter_ConcurrentAddsAllCount(t *testing.T) {
	r := NewRegistry()
	v := r.Counter("c_total", "c", "name")
	h := r.Histogram("h_seconds", "h", DefBuckets)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				v.With("a").Inc()
				h.With().Observe(0.02)
			}
		}()
	}
	wg.Wait()
	if got := v.With("a").Value(); got != 8000 {
		t.Fatalf("counter = %v, want 8000", got)
	}
	if got := h.With().Count(); got != 8000 {
		t.Fatalf("histogram count = %v, want 8000", got)
	}
}

func TestRegistry_RefusesBadNames(t *testing.T) {
	for name, reg := range map[string]func(r *Registry){
		"bad metric name": func(r *Registry) { r.Counter("1x", "x") },
		"bad label":       func(r *Registry) { r.Counter("x", "x", "a-b") },
		"reserved label":  func(r *Registry) { r.Gauge("x", "x", "__name") },
		"le on histogram": func(r *Registry) { r.Histogram("x", "x", DefBuckets, "le") },
		"twice":           func(r *Registry) { r.Counter("x", "x"); r.Gauge("x", "x") },
		"buckets":         func(r *Registry) { r.Histogram("x", "x", []float64{1, 1}) },
		"inf bucket":      func(r *Registry) { r.Histogram("x", "x", []float64{1, math.Inf(1)}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("registered without a panic")
				}
			}()
			reg(NewRegistry())
		})
	}
	t.Run("label count", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("With took the wrong number of values")
			}
		}()
		NewRegistry().Counter("x", "x", "a", "b").With("only")
	})
}

func TestRegistry_InvalidUTF8LabelStillParses(t *testing.T) {
	r := NewRegistry()
	r.Counter("c_total", "c", "name").With("a\xffb").Inc()
	fams := parse(t, text(t, r))
	if n := labelsOf(fams["c_total"].GetMetric()[0])["name"]; n != "a\uFFFDb" {
		t.Fatalf("name = %q", n)
	}
}

func TestHandler_ServesTheTextFormat(t *testing.T) {
	r := NewRegistry()
	r.Counter("c_total", "c").With().Inc()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ContentType {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if fams := parse(t, string(body)); fams["c_total"].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Fatalf("body:\n%s", body)
	}
	resp, err = http.Post(srv.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d, want 405", resp.StatusCode)
	}
}

func TestListenAddr_LoopbackUnlessAHostIsGiven(t *testing.T) {
	for in, want := range map[string]string{
		"9100":          "127.0.0.1:9100",
		":9100":         "127.0.0.1:9100",
		"0.0.0.0:9100":  "0.0.0.0:9100",
		"10.1.2.3:80":   "10.1.2.3:80",
		"[::1]:9100":    "[::1]:9100",
		"localhost:911": "localhost:911",
	} {
		got, err := ListenAddr(in)
		if err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "host", ":99999", "a:b", "70000"} {
		if got, err := ListenAddr(bad); err == nil {
			t.Errorf("ListenAddr(%q) = %q, want an error", bad, got)
		}
	}
}

// TestServe_MetricsPathUntilTheContextEnds: Serve answers at /metrics
// with the text format, 404 (naming /metrics) elsewhere, and returns nil
// with its listener closed once its context ends.
func TestServe_MetricsPathUntilTheContextEnds(t *testing.T) {
	r := NewRegistry()
	r.Counter("served_total", "s").With().Add(3)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get(Path)
	if code != 200 || parse(t, body)["served_total"].GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Fatalf("%s: %d\n%s", Path, code, body)
	}
	if code, body := get("/"); code != http.StatusNotFound || !strings.Contains(body, Path) {
		t.Fatalf("/: %d %q, want 404 naming %s", code, body, Path)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after Serve returned")
	}
}

// TestCounterFunc_WrittenAsACounter: a counter computed at scrape time is
// typed counter, reads each scrape's value, and a collector's sample with
// the wrong number of label values is left out, never a malformed line.
func TestCounterFunc_WrittenAsACounter(t *testing.T) {
	r := NewRegistry()
	n := 1.0
	r.CounterFunc("tether_fleet_mirror_txns_total", "Txns.", func() []Sample {
		return []Sample{{Value: n}}
	})
	r.CounterFunc("tether_fleet_by_kind_total", "By kind.", func() []Sample {
		return []Sample{{Values: []string{"a"}, Value: 2}, {Values: []string{"a", "b"}, Value: 5}}
	}, "kind")
	fams := parse(t, text(t, r))
	c := fams["tether_fleet_mirror_txns_total"]
	if c.GetType() != dto.MetricType_COUNTER || c.GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Fatalf("txns: %v", c)
	}
	n = 7
	if v := parse(t, text(t, r))["tether_fleet_mirror_txns_total"].GetMetric()[0].GetCounter().GetValue(); v != 7 {
		t.Fatalf("txns at the second scrape = %v, want 7", v)
	}
	k := fams["tether_fleet_by_kind_total"]
	if len(k.GetMetric()) != 1 || labelsOf(k.GetMetric()[0])["kind"] != "a" || k.GetMetric()[0].GetCounter().GetValue() != 2 {
		t.Fatalf("by kind: %v", k)
	}
}

// TestValidName_EveryRow: the loop that replaced the regexps holds
// Prometheus' rules at each edge: a metric name is [a-zA-Z_:][a-zA-Z0-9_:]*,
// a label name the same without the colon; a digit anywhere but first.
func TestValidName_EveryRow(t *testing.T) {
	for _, tc := range []struct {
		s             string
		metric, label bool
	}{
		{"tether_tasks", true, true},
		{"_x", true, true},
		{"Az09_", true, true},
		{"x9", true, true},
		{"ns:x_total", true, false},
		{":x", true, false},
		{"9x", false, false},
		{"", false, false},
		{"a-b", false, false},
		{"a b", false, false},
		{"é", false, false},
		{"a/b", false, false},
		{"a@", false, false},
	} {
		if got := validName(tc.s, true); got != tc.metric {
			t.Errorf("validName(%q, metric) = %v, want %v", tc.s, got, tc.metric)
		}
		if got := validName(tc.s, false); got != tc.label {
			t.Errorf("validName(%q, label) = %v, want %v", tc.s, got, tc.label)
		}
	}
}
