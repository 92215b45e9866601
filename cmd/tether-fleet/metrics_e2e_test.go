package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
)

// scrapeNode reads the agent's /metrics and parses it with Prometheus'
// own text parser.
func scrapeNode(t *testing.T, url string) map[string]*dto.MetricFamily {
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
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses %s: %v\n%s", url, err, body)
	}
	return fams
}

// value is an unlabelled gauge's or counter's value (-1: no such series),
// or with a label the series of it.
func value(fams map[string]*dto.MetricFamily, name string, label ...string) float64 {
	for _, m := range fams[name].GetMetric() {
		if len(label) == 2 && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != label[0] || m.GetLabel()[0].GetValue() != label[1]) {
			continue
		}
		if m.Counter != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// A node's agent with --metrics-addr serves the agent's metrics and the
// node's beside them: the lease held, etcd answering, a task started from
// etcd counted by its name and its events mirrored.
func TestAgent_NodeServesItsMetricsBesideTheAgents(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := "fleetmetrics-web-" + time.Now().Format("150405.000000000")
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	file := sleeperFile(t, marker)

	ag := startAgent(t, ep, "n1", dir, nil, "--metrics-addr", "127.0.0.1:0")
	ag.waitRegistered(cli, "n1")
	url := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+/metrics`).FindString(ag.log.String())
	if url == "" {
		t.Fatalf("the agent did not say where it serves its metrics:\n%s", ag.log)
	}
	must(t, "cluster", "--endpoints", ep, "start", "--node", "n1", file)
	mirrored(t, cli, "n1", "web", fsm.StateRunning, ag.log)
	// The mirror writes under the node's lease alone: once web's running
	// is mirrored, the node holds it.
	fams := scrapeNode(t, url)
	if v := value(fams, MetricLeaseHeld); v != 1 {
		t.Errorf("%s = %v once the node mirrors, want 1", MetricLeaseHeld, v)
	}
	if v := value(fams, MetricLeaseLosses); v != 0 {
		t.Errorf("%s = %v, want 0", MetricLeaseLosses, v)
	}
	if v := value(fams, agent.MetricStarts, "name", "web"); v != 1 {
		t.Errorf("%s{web} = %v, want 1", agent.MetricStarts, v)
	}
	if v := value(fams, agent.MetricTasks, "state", "running"); v != 1 {
		t.Errorf("%s{running} = %v, want 1", agent.MetricTasks, v)
	}
	if v := value(fams, MetricMirrorLagEvents); v < 0 {
		t.Errorf("%s missing", MetricMirrorLagEvents)
	}
	must(t, "cluster", "--endpoints", ep, "stop", "--node", "n1", "web")
	mirrored(t, cli, "n1", "web", fsm.StateStopped, ag.log)
	testproc.CheckGone(t, marker, time.Minute)
	fams = scrapeNode(t, url)
	if v := value(fams, agent.MetricStops, "name", "web"); v != 1 {
		t.Errorf("%s{web} = %v once stopped, want 1", agent.MetricStops, v)
	}
	// The transaction that mirrored web's running was counted before the
	// one that mirrored its stop was written (the last one may not be yet).
	if v := value(fams, MetricMirrored); v < 1 {
		t.Errorf("%s = %v once web's running and stop are mirrored, want at least 1", MetricMirrored, v)
	}
	if v := value(fams, MetricMirrorTxns); v < 1 {
		t.Errorf("%s = %v, want at least 1", MetricMirrorTxns, v)
	}
	if v := value(fams, MetricEtcdError); v != 0 {
		t.Errorf("%s = %v with etcd answering, want 0", MetricEtcdError, v)
	}
	// Every family of the node's is documented, by its name and type.
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "tether_fleet_") {
			continue
		}
		if row := "| `" + name + "` | " + strings.ToLower(f.GetType().String()) + " |"; !strings.Contains(string(doc), row) {
			t.Errorf("docs/metrics.md lacks the row %q", row)
		}
	}
	ag.stop()
	if t.Failed() {
		t.Logf("agent's log:\n%s", ag.log)
	}
}
