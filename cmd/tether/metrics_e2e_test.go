package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
)

// metricsURL is where the agent said it serves its metrics (its log line
// "serving metrics", written before it says READY=1).
var metricsURL = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/metrics`)

// scrape reads url and parses it with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v\n%s", url, resp.StatusCode, err, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want Prometheus' text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses %s: %v\n%s", url, err, body)
	}
	return fams
}

// metricValue is the value of a family's series whose labels are labels
// (name, value pairs; a histogram's is its count); -1 when there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)/2
		for i := 0; match && i < len(labels); i += 2 {
			match = got[labels[i]] == labels[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

// A scripted day of a real `tether agent --metrics-addr`, scraped over
// HTTP and parsed by Prometheus' parser at each step: a service starts
// (its start counted by name, its state, executor and desired entry
// gauged, its start latency, the recovery and the store's commits
// observed), its task is killed and its policy restarts it (the restart
// counter moves, the start counter does not), its file goes and it is
// stopped (the stop counter and the stop latency move, no task is live).
func TestAgent_MetricsScrapedFromARealAgent(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 3, "")
	a := e.startAgent(nil, true, "--config-dir", dir, "--metrics-addr", "0")
	url := metricsURL.FindString(a.logs.String())
	if url == "" {
		t.Fatalf("the agent did not say where it serves its metrics:\n%s", a.logs)
	}
	c := e.client()
	first := awaitEntry(t, c, "svc", "running", running)
	want := func(fams map[string]*dto.MetricFamily, v float64, name string, labels ...string) {
		t.Helper()
		if got := metricValue(fams, name, labels...); got != v {
			t.Errorf("%s%v = %v, want %v", name, labels, got, v)
		}
	}
	fams := scrape(t, url)
	want(fams, 1, agent.MetricStarts, "name", "svc")
	want(fams, 0, agent.MetricRestarts, "name", "svc")
	want(fams, 1, agent.MetricTasks, "state", "running")
	want(fams, 0, agent.MetricTasks, "state", "lost")
	want(fams, 1, agent.MetricExecutors)
	want(fams, 1, agent.MetricDesired, "standing", string(agent.StandingRunning))
	want(fams, 0, agent.MetricDesired, "standing", string(agent.StandingDown))
	want(fams, 1, agent.MetricStartSeconds)
	want(fams, 1, agent.MetricRecover)
	want(fams, 0, agent.MetricUnready)
	want(fams, 0, agent.MetricProblems)
	want(fams, 0, agent.MetricExits, "name", "svc", "reason", "signal")
	if g := metricValue(fams, agent.MetricGeneration); g < 1 {
		t.Errorf("%s = %v once an entry runs, want at least 1", agent.MetricGeneration, g)
	}
	if n := metricValue(fams, agent.MetricStoreCommit); n < 1 {
		t.Errorf("%s count %v after a task started, want at least 1", agent.MetricStoreCommit, n)
	}
	for _, m := range fams[agent.MetricStarts].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != "name" || l.GetValue() == first.Task {
				t.Errorf("%s labelled %s=%s, want by the task's name alone", agent.MetricStarts, l.GetName(), l.GetValue())
			}
		}
	}

	info, err := c.InspectTask(context.Background(), first.Task)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(info.Executor.PID, syscall.SIGKILL)
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	second := awaitEntry(t, c, "svc", "restarted", func(en agent.Entry) bool { return en.Task != first.Task && running(en) })
	fams = scrape(t, url)
	want(fams, float64(second.Restarts), agent.MetricRestarts, "name", "svc")
	want(fams, 1, agent.MetricRestarts, "name", "svc")
	want(fams, 2, agent.MetricStarts, "name", "svc") // the copy's task is a task started
	want(fams, 2, agent.MetricStartSeconds)
	want(fams, 1, agent.MetricTasks, "state", "running")
	want(fams, 1, agent.MetricTasks, "state", "lost")
	want(fams, 1, agent.MetricExecutors)

	if err := os.Remove(filepath.Join(dir, "svc.hcl")); err != nil {
		t.Fatal(err)
	}
	await(t, c, "svc gone", func(s agent.Status) bool { _, ok := s.Entry("svc"); return !ok && s.Converged })
	fams = scrape(t, url)
	want(fams, 1, agent.MetricStops, "name", "svc")
	want(fams, 1, agent.MetricStopSeconds)
	want(fams, 0, agent.MetricTasks, "state", "running")
	want(fams, 1, agent.MetricTasks, "state", fsm.StateStopped.String())
	want(fams, 1, agent.MetricTasks, "state", fsm.StateLost.String())
	want(fams, 0, agent.MetricExecutors)
	want(fams, 0, agent.MetricDesired, "standing", string(agent.StandingRunning))
	want(fams, 1, agent.MetricConverged)
	// Every family served is documented, by its name and type.
	doc := string(mustRead(t, filepath.Join("..", "..", "docs", "metrics.md")))
	for name, f := range fams {
		if row := "| `" + name + "` | " + strings.ToLower(f.GetType().String()) + " |"; !strings.Contains(doc, row) {
			t.Errorf("docs/metrics.md lacks the row %q", row)
		}
	}
	if len(fams) != 17 {
		t.Errorf("the agent serves %d families, want the 17 docs/metrics.md lists", len(fams))
	}
	if t.Failed() {
		t.Logf("agent's logs:\n%s", a.logs)
	}
}

// --metrics-addr is refused with --once (which serves nothing) and when
// it is no address, naming the flag, before anything is touched.
func TestAgent_MetricsAddrRefusedClearly(t *testing.T) {
	e := newAgentEnv(t)
	for _, tc := range []struct{ args []string }{
		{[]string{"agent", "--once", "--metrics-addr", "9100"}},
		{[]string{"agent", "--metrics-addr", "localhost:http"}},
	} {
		r := e.tether(tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--metrics-addr") {
			t.Errorf("tether %s: %s; want exit %d naming --metrics-addr", strings.Join(tc.args, " "), r, exitUsage)
		}
	}
}

// The scripted day's OOM kill: a task run through the agent that touches
// 400 MB under memory = 64 is killed by the kernel; the agent counts the
// OOM kill and the run's end by its reason, oom (not signal).
func TestAgent_MetricsCountAnOOMKill(t *testing.T) {
	h := needTaskCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	e := newAgentEnv(t)
	a := e.startAgent(nil, true, "--metrics-addr", "0")
	url := metricsURL.FindString(a.logs.String())
	if url == "" {
		t.Fatalf("the agent did not say where it serves its metrics:\n%s", a.logs)
	}
	file := containTask(t, e, "hog", "  resources {\n    memory = 64\n  }", "alloc", "400")
	if r := e.tether("run", file); r.code != 137 {
		t.Fatalf("run through the agent of a task over its memory limit: want exit 137\n%s", r)
	}
	fams := scrape(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{agent.MetricOOMKills, []string{"name", "hog"}, 1},
		{agent.MetricExits, []string{"name", "hog", "reason", "oom"}, 1},
		{agent.MetricExits, []string{"name", "hog", "reason", "signal"}, 0},
		{agent.MetricStarts, []string{"name", "hog"}, 1},
	} {
		if got := metricValue(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("agent's logs:\n%s", a.logs)
	}
}
