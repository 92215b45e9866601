package agent

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/metrics"
)

// scrapeText parses an exposition with Prometheus' own text parser.
func scrapeText(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus' parser refuses the exposition: %v\n%s", err, text)
	}
	return fams
}

// scrapeRegistry writes r and parses it.
func scrapeRegistry(t *testing.T, r *metrics.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return scrapeText(t, b.String())
}

// series finds the series of a family whose labels are labels (name,
// value pairs); nil when there is none.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(labels)/2 {
			continue
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// counter is a counter's value (0 when it has no such series).
func counter(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	return series(fams, name, labels...).GetCounter().GetValue()
}

// hist is a histogram's count and sum.
func hist(fams map[string]*dto.MetricFamily, name string) (uint64, float64) {
	h := series(fams, name).GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// gauge is a gauge's value, and whether the series is there.
func gauge(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	m := series(fams, name, labels...)
	return m.GetGauge().GetValue(), m != nil
}

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixNano()

// ms is t0 plus n milliseconds.
func ms(n int) int64 { return t0 + int64(n)*int64(time.Millisecond) }

// up is the events of a start, task-created at created and running at
// running (ms from t0).
func up(spec fsm.Spec, created, running int) []fsm.Event {
	id := &fsm.Identity{PID: 100, StartTime: 1, BootID: "b", Nonce: "n"}
	return []fsm.Event{
		{Type: fsm.EventCreated, Time: ms(created), Spec: &spec},
		{Type: fsm.EventSpawnIntent, Time: ms(created + 1), Nonce: "n"},
		{Type: fsm.EventExecutorUp, Time: ms(created + 2), Executor: id},
		{Type: fsm.EventLaunchIntent, Time: ms(created + 3)},
		{Type: fsm.EventLaunched, Time: ms(created + 4), TaskPID: 200, TaskStartTime: 2},
		{Type: fsm.EventRunning, Time: ms(running)},
	}
}

func ev(typ fsm.EventType, at int, f ...func(*fsm.Event)) fsm.Event {
	e := fsm.Event{Type: typ, Time: ms(at)}
	for _, fn := range f {
		fn(&e)
	}
	return e
}

func exitOf(x fsm.ExitStatus) func(*fsm.Event) { return func(e *fsm.Event) { e.Exit = &x } }
func target(s fsm.State) func(*fsm.Event)      { return func(e *fsm.Event) { e.Target = s } }
func attempt(n int) func(*fsm.Event)           { return func(e *fsm.Event) { e.Attempt = n } }

// TestMetrics_EventsMoveTheCounters: each family moves as the events of a
// day say, each counter labelled by the task's name (never its id), each
// histogram observing its own interval, each run's OOM kill counted once.
func TestMetrics_EventsMoveTheCounters(t *testing.T) {
	r := metrics.NewRegistry()
	m := newAgentMetrics(r)
	web := fsm.Spec{Name: "web", Driver: "raw_exec", Command: "/bin/sleep"}
	ready := fsm.Spec{Name: "api", Driver: "raw_exec", Command: "/bin/sleep", Readiness: fsm.ReadinessNotify}

	// web starts: created → running in 2.5 s.
	m.committed("web-aaaaaa", up(web, 0, 2500))
	// api starts running at 1 s and is ready at 4 s: its start is 4 s.
	m.committed("api-bbbbbb", up(ready, 0, 1000))
	m.committed("api-bbbbbb", []fsm.Event{ev(fsm.EventReady, 4000)})
	fams := scrapeRegistry(t, r)
	if got := counter(fams, MetricStarts, "name", "web"); got != 1 {
		t.Errorf("starts{web} = %v, want 1", got)
	}
	if got := counter(fams, MetricStarts, "name", "api"); got != 1 {
		t.Errorf("starts{api} = %v, want 1 (at its ready)", got)
	}
	if n, sum := hist(fams, MetricStartSeconds); n != 2 || math.Abs(sum-6.5) > 1e-9 {
		t.Errorf("start seconds: count %d sum %v, want 2 and 6.5 (2.5 to running, 4 to ready)", n, sum)
	}
	for _, name := range []string{MetricStops, MetricRestarts, MetricReschedules, MetricOOMKills} {
		if m := series(fams, name, "name", "web"); m == nil || m.GetCounter().GetValue() != 0 {
			t.Errorf("%s{web} = %v once web was created, want a series at 0", name, m)
		}
	}
	for _, f := range fams[MetricStarts].GetMetric() {
		for _, l := range f.GetLabel() {
			if strings.Contains(l.GetValue(), "-") {
				t.Errorf("a counter labelled by a task id: %s", l.GetValue())
			}
		}
	}

	// web crashes and its policy restarts it (an OOM kill); the new run
	// comes up, is OOM killed again and exits: two OOM kills, whatever
	// number of events carry the second run's exit.
	oom := fsm.ExitStatus{Code: -1, Signal: 9, OOM: true}
	m.committed("web-aaaaaa", []fsm.Event{ev(fsm.EventRestartIntent, 5000, attempt(1), exitOf(oom))})
	m.committed("web-aaaaaa", []fsm.Event{ev(fsm.EventLaunched, 5001, func(e *fsm.Event) { e.TaskPID, e.TaskStartTime = 201, 3 })})
	m.committed("web-aaaaaa", []fsm.Event{ev(fsm.EventRunning, 5002)})
	m.committed("web-aaaaaa", []fsm.Event{ev(fsm.EventTaskExited, 6000, exitOf(oom))})
	m.committed("web-aaaaaa", []fsm.Event{ev(fsm.EventExecutorReaped, 6010, target(fsm.StateExited), exitOf(oom))})
	fams = scrapeRegistry(t, r)
	if got := counter(fams, MetricRestarts, "name", "web"); got != 1 {
		t.Errorf("restarts{web} = %v, want 1", got)
	}
	if got := counter(fams, MetricOOMKills, "name", "web"); got != 2 {
		t.Errorf("oom kills{web} = %v, want 2 (one a run)", got)
	}
	if got := counter(fams, MetricStarts, "name", "web"); got != 1 {
		t.Errorf("starts{web} = %v after a restart, want 1 (a restart is no start)", got)
	}
	if got := counter(fams, MetricExits, "name", "web", "reason", "oom"); got != 2 {
		t.Errorf("exits{web,oom} = %v, want 2 (one a run)", got)
	}
	for _, r := range []string{"success", "failure", "signal"} {
		if m := series(fams, MetricExits, "name", "web", "reason", r); m == nil || m.GetCounter().GetValue() != 0 {
			t.Errorf("exits{web,%s} = %v, want a series at 0", r, m)
		}
	}
	if n, _ := hist(fams, MetricStartSeconds); n != 2 {
		t.Errorf("start seconds count %d after a restart, want 2", n)
	}
	if got := counter(fams, MetricStops, "name", "web"); got != 0 {
		t.Errorf("stops{web} = %v for a task that exited, want 0", got)
	}
	if _, ok := m.tasks["web-aaaaaa"]; ok {
		t.Error("an ended task is still tracked")
	}

	// api is stopped: asked at 10 s, stopped at 10.75 s.
	m.committed("api-bbbbbb", []fsm.Event{ev(fsm.EventStopRequested, 10000)})
	m.committed("api-bbbbbb", []fsm.Event{ev(fsm.EventExecutorReaped, 10750, target(fsm.StateStopped))})
	// A task stopped before it spawned: stopped at once.
	m.committed("cron-cccccc", []fsm.Event{{Type: fsm.EventCreated, Time: ms(11000), Spec: &fsm.Spec{Name: "cron", Driver: "raw_exec", Command: "/bin/true"}}})
	m.committed("cron-cccccc", []fsm.Event{ev(fsm.EventStopRequested, 11500)})
	fams = scrapeRegistry(t, r)
	if got := counter(fams, MetricStops, "name", "api"); got != 1 {
		t.Errorf("stops{api} = %v, want 1", got)
	}
	if got := counter(fams, MetricStops, "name", "cron"); got != 1 {
		t.Errorf("stops{cron} = %v (stopped before it spawned), want 1", got)
	}
	if n, sum := hist(fams, MetricStopSeconds); n != 2 || math.Abs(sum-0.75) > 1e-9 {
		t.Errorf("stop seconds: count %d sum %v, want 2 and 0.75 (request to terminal)", n, sum)
	}
	if len(m.tasks) != 0 {
		t.Errorf("tracked after every task ended: %v", m.tasks)
	}

	// A group's copies: a reschedule's and a restart's tasks count when
	// their task-created commits; an interrupted start's again counts
	// nothing.
	m.copied(Copy{Kind: CopyReschedule, Tasks: []string{"web-1-r"}})
	m.copied(Copy{Kind: CopyRestart, Tasks: []string{"web-2-r"}})
	m.copied(Copy{Kind: CopyAgain, Tasks: []string{"web-3-r"}})
	for _, id := range []string{"web-1-r", "web-2-r", "web-3-r"} {
		m.committed(id, []fsm.Event{{Type: fsm.EventCreated, Time: ms(20000), Spec: &web}})
	}
	fams = scrapeRegistry(t, r)
	if got := counter(fams, MetricReschedules, "name", "web"); got != 1 {
		t.Errorf("reschedules{web} = %v, want 1", got)
	}
	if got := counter(fams, MetricRestarts, "name", "web"); got != 2 {
		t.Errorf("restarts{web} = %v after a copy's restart, want 2", got)
	}
	if len(m.copies) != 0 {
		t.Errorf("copies told and created are still pending: %v", m.copies)
	}
}

// TestMetrics_SeededTasksCountFromWhereTheyStand: the tasks live when the
// agent opened its store are tracked by name from their state: a running
// one is not started again, a launched one's running is its start, a
// stop of a seeded task is counted.
func TestMetrics_SeededTasksCountFromWhereTheyStand(t *testing.T) {
	r := metrics.NewRegistry()
	m := newAgentMetrics(r)
	spec := &fsm.Spec{Name: "db", Driver: "raw_exec", Command: "/bin/sleep"}
	m.seed([]fsm.Task{
		{ID: "db-111111", State: fsm.StateRunning, Spec: spec, CreatedAt: ms(0)},
		{ID: "db-222222", State: fsm.StateLaunched, Spec: spec, CreatedAt: ms(0)},
		{ID: "db-333333", State: fsm.StateExited, Spec: spec, CreatedAt: ms(0)},
	})
	if _, ok := m.tasks["db-333333"]; ok {
		t.Error("an ended task was seeded")
	}
	m.committed("db-111111", []fsm.Event{ev(fsm.EventReattached, 100, func(e *fsm.Event) { e.Executor = &fsm.Identity{PID: 1, Nonce: "n"} })})
	m.committed("db-222222", []fsm.Event{ev(fsm.EventRunning, 1500)})
	m.committed("db-111111", []fsm.Event{ev(fsm.EventStopRequested, 2000), ev(fsm.EventExecutorReaped, 2200, target(fsm.StateStopped))})
	fams := scrapeRegistry(t, r)
	if got := counter(fams, MetricStarts, "name", "db"); got != 1 {
		t.Errorf("starts{db} = %v, want 1 (the launched one's running)", got)
	}
	if got := counter(fams, MetricStops, "name", "db"); got != 1 {
		t.Errorf("stops{db} = %v, want 1", got)
	}
	if n, sum := hist(fams, MetricStopSeconds); n != 1 || math.Abs(sum-0.2) > 1e-9 {
		t.Errorf("stop seconds %d %v, want 1 and 0.2", n, sum)
	}
}

// TestMetrics_GaugesListEveryStateAndStanding: tether_tasks has a series
// for every state the fsm knows and tether_desired_entries one for every
// standing, 0 included, so that an alert on a state's count sees 0
// rather than nothing; Standings lists every Standing constant the
// package declares.
func TestMetrics_GaugesListEveryStateAndStanding(t *testing.T) {
	r := metrics.NewRegistry()
	r.GaugeFunc(MetricTasks, "t", func() []metrics.Sample {
		return tasksByState([]fsm.Task{{State: fsm.StateRunning}, {State: fsm.StateRunning}, {State: fsm.StateLost}})
	}, "state")
	r.GaugeFunc(MetricDesired, "d", func() []metrics.Sample {
		return entriesByStanding([]Entry{{Standing: StandingDown}})
	}, "standing")
	fams := scrapeRegistry(t, r)
	for _, s := range fsm.States() {
		want := map[fsm.State]float64{fsm.StateRunning: 2, fsm.StateLost: 1}[s]
		if got, ok := gauge(fams, MetricTasks, "state", s.String()); !ok || got != want {
			t.Errorf("tether_tasks{state=%q} = %v (present %v), want %v", s, got, ok, want)
		}
	}
	declared := standingConstants(t)
	for _, s := range declared {
		if !slices.Contains(Standings, s) {
			t.Errorf("Standings lacks %q", s)
		}
		want := map[Standing]float64{StandingDown: 1}[s]
		if got, ok := gauge(fams, MetricDesired, "standing", string(s)); !ok || got != want {
			t.Errorf("tether_desired_entries{standing=%q} = %v (present %v), want %v", s, got, ok, want)
		}
	}
	if len(Standings) != len(declared) {
		t.Errorf("Standings %v, declared %v", Standings, declared)
	}
}

// standingConstants are the Standing constants service.go declares.
func standingConstants(t *testing.T) []Standing {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "service.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []Standing
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Standing" {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					out = append(out, Standing(strings.Trim(lit.Value, `"`)))
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no Standing constant found in service.go")
	}
	return out
}

// TestExitReason_EveryRow: a run's end is oom when the OOM killer killed
// in it (whatever signal ended it), else signal, else success for code 0
// and failure for any other; every reason is one ExitReasons lists.
func TestExitReason_EveryRow(t *testing.T) {
	for _, tc := range []struct {
		x    fsm.ExitStatus
		want string
	}{
		{fsm.ExitStatus{Code: -1, Signal: 9, OOM: true}, "oom"},
		{fsm.ExitStatus{Code: 0, OOM: true}, "oom"},
		{fsm.ExitStatus{Code: -1, Signal: 15}, "signal"},
		{fsm.ExitStatus{Code: 0}, "success"},
		{fsm.ExitStatus{Code: 1}, "failure"},
		{fsm.ExitStatus{Code: 255}, "failure"},
	} {
		if got := exitReason(&tc.x); got != tc.want || !slices.Contains(ExitReasons, got) {
			t.Errorf("exitReason(%+v) = %q, want %q", tc.x, got, tc.want)
		}
	}
}
