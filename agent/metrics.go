package agent

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/metrics"
	"github.com/tether-fsm/tether/store"
)

// The agent's metrics (Config.Metrics), in Prometheus' text format
// through package metrics (no Prometheus client in the binary every task
// start runs: metrics/doc.go says why).
//
// The task counters and the latency histograms are derived from the
// events the agent's driver commits, as it commits them: the driver's log
// hands each append's events to observe (no store read per event), which
// keeps a small record of each live task (its name, when it was created,
// when its stop was asked) and forgets it when the task ends. The copies a
// drive records say what made them (a restart, a reschedule) before their
// tasks are created; the counter moves when the task-created commits. The
// gauges are read when a scraper asks: the store's tasks by state, the
// running ones not ready, the executors proven alive, the desired entries
// by standing, the desired state's problems, whether it converged and its
// generation. docs/metrics.md lists every family.
//
// Counters and histograms start at zero with each agent process, as
// Prometheus expects of a counter (its rate() sees the reset).

// The families' names.
const (
	MetricStarts       = "tether_task_starts_total"
	MetricStops        = "tether_task_stops_total"
	MetricRestarts     = "tether_task_restarts_total"
	MetricReschedules  = "tether_task_reschedules_total"
	MetricOOMKills     = "tether_task_oom_kills_total"
	MetricExits        = "tether_task_exits_total"
	MetricTasks        = "tether_tasks"
	MetricUnready      = "tether_tasks_unready"
	MetricExecutors    = "tether_executors"
	MetricDesired      = "tether_desired_entries"
	MetricProblems     = "tether_desired_problems"
	MetricConverged    = "tether_desired_converged"
	MetricGeneration   = "tether_desired_generation"
	MetricStartSeconds = "tether_task_start_seconds"
	MetricStopSeconds  = "tether_task_stop_seconds"
	MetricRecover      = "tether_recover_seconds"
	MetricStoreCommit  = "tether_store_commit_seconds"
)

// CommitBuckets are the store commit histogram's bounds: an fsync'd
// write, from half a millisecond to a second.
var CommitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Standings lists every standing of a desired entry, in the order status
// explains them: tether_desired_entries has a series for each, 0 included.
var Standings = []Standing{StandingStarting, StandingRunning, StandingReady, StandingRestarting, StandingDown,
	StandingRefused, StandingStopped, StandingCompleted, StandingStopping}

// ExitReasons are the values of tether_task_exits_total's reason label: a
// run killed by the OOM killer, else by a signal, else its exit code 0 or
// another.
var ExitReasons = []string{"success", "failure", "signal", "oom"}

// exitReason is a run's end as one of ExitReasons.
func exitReason(x *fsm.ExitStatus) string {
	switch {
	case x.OOM:
		return "oom"
	case x.Signal > 0:
		return "signal"
	case x.Code == 0:
		return "success"
	}
	return "failure"
}

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 10 * time.Second

// maxPendingCopies bounds the copies told and not yet created (a copy
// whose creation failed is never created): past it they are forgotten.
const maxPendingCopies = 4096

// agentMetrics are the agent's families and what derives them. A nil
// *agentMetrics (no Config.Metrics) does nothing.
type agentMetrics struct {
	starts, stops, restarts, reschedules, ooms *metrics.CounterVec
	exits                                      *metrics.CounterVec // name, reason
	startLat, stopLat, recoverLat, commitLat   *metrics.Histogram

	mu     sync.Mutex
	tasks  map[string]*tracked // live tasks, by id
	copies map[string]CopyKind // tasks of a copy told, until their task-created commits
}

// tracked is what the metrics keep of a live task.
type tracked struct {
	name      string
	state     fsm.State
	created   int64 // task-created's time (Unix ns)
	readiness bool  // its start is its first ready, not its first running
	started   bool  // its start was counted
	stopAt    int64 // stop-requested's time; 0: no stop asked
	exitSeen  bool  // the current run's end was counted (its OOM kill with it)
}

// newAgentMetrics registers the agent's counters and histograms on r (nil:
// none, and a nil result).
func newAgentMetrics(r *metrics.Registry) *agentMetrics {
	if r == nil {
		return nil
	}
	return &agentMetrics{
		starts:      r.Counter(MetricStarts, "Tasks whose first run came up: running, or ready for a task with readiness.", "name"),
		stops:       r.Counter(MetricStops, "Tasks stopped on request (their terminal state is stopped).", "name"),
		restarts:    r.Counter(MetricRestarts, "Restarts: a run restarted by its task's restart policy, or a group's copy started again after its executor was lost.", "name"),
		reschedules: r.Counter(MetricReschedules, "Tasks of a group's copy started again by its reschedule policy after a failure.", "name"),
		ooms:        r.Counter(MetricOOMKills, "Runs during which the kernel's OOM killer killed a process of the task's cgroup.", "name"),
		exits:       r.Counter(MetricExits, "Runs that ended, by how: oom (the OOM killer), signal, success (exit code 0), failure (another code).", "name", "reason"),
		startLat: r.Histogram(MetricStartSeconds, "Seconds from a task's creation to its first run running (ready, for a task with readiness).",
			metrics.DefBuckets).With(),
		stopLat:    r.Histogram(MetricStopSeconds, "Seconds from a stop's request to the task's terminal state.", metrics.DefBuckets).With(),
		recoverLat: r.Histogram(MetricRecover, "Seconds each recovery of the live tasks took (the agent's start, a salvage).", metrics.DefBuckets).With(),
		commitLat:  r.Histogram(MetricStoreCommit, "Seconds each group commit of the store took (its transaction and fsync).", CommitBuckets).With(),
		tasks:      map[string]*tracked{},
		copies:     map[string]CopyKind{},
	}
}

// seed tracks the live tasks the store holds (an agent's start, a
// salvage): those it tracks already are left as they are.
func (m *agentMetrics) seed(tasks []fsm.Task) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range tasks {
		if _, ok := m.tasks[t.ID]; ok || t.State.Terminal() || t.State == fsm.StateNone {
			continue
		}
		tr := &tracked{state: t.State, created: t.CreatedAt}
		if t.Spec != nil {
			tr.name, tr.readiness = t.Spec.Name, t.Spec.Readiness.Waits()
			m.touch(tr.name)
		}
		switch t.State {
		case fsm.StateCreated, fsm.StateSpawning, fsm.StateExecutorUp, fsm.StateLaunching, fsm.StateLaunched:
		case fsm.StateRunning:
			tr.started = !tr.readiness || t.Ready
		default:
			tr.started = true
		}
		tr.exitSeen = t.State == fsm.StateReaping && t.Exit != nil
		m.tasks[t.ID] = tr
	}
}

// reset forgets every task (the store was replaced: a salvage).
func (m *agentMetrics) reset() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.tasks = map[string]*tracked{}
	m.mu.Unlock()
}

// copied is told a copy a drive is about to record: its tasks' creations
// count as restarts or reschedules by its kind.
func (m *agentMetrics) copied(c Copy) {
	if m == nil || (c.Kind != CopyRestart && c.Kind != CopyReschedule) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.copies)+len(c.Tasks) > maxPendingCopies {
		clear(m.copies)
	}
	for _, id := range c.Tasks {
		m.copies[id] = c.Kind
	}
}

// committed is told the events of each append of the agent's driver that
// committed.
func (m *agentMetrics) committed(task string, events []fsm.Event) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range events {
		m.observe(task, &events[i])
	}
}

// observe moves the counters and histograms one event of task moves.
func (m *agentMetrics) observe(id string, e *fsm.Event) {
	t := m.tasks[id]
	if e.Type == fsm.EventCreated && e.Spec != nil {
		t = &tracked{name: e.Spec.Name, created: e.Time, readiness: e.Spec.Readiness.Waits()}
		m.tasks[id] = t
		m.touch(t.name)
		if kind, ok := m.copies[id]; ok {
			delete(m.copies, id)
			switch kind {
			case CopyRestart:
				m.restarts.With(t.name).Inc()
			case CopyReschedule:
				m.reschedules.With(t.name).Inc()
			}
		}
	}
	if t == nil {
		return // neither created nor found live since this agent opened the store
	}
	next, err := fsm.Next(t.state, *e)
	if err != nil {
		next = t.state
		if e.Type == fsm.EventExecutorReaped {
			next = e.Target
		}
	}
	switch e.Type {
	case fsm.EventRunning:
		if !t.started && !t.readiness {
			m.start(t, e.Time)
		}
	case fsm.EventReady:
		if !t.started && t.readiness {
			m.start(t, e.Time)
		}
	case fsm.EventLaunched:
		t.exitSeen = false // a new run
	case fsm.EventRestartIntent:
		m.restarts.With(t.name).Inc()
		m.runEnded(t, e.Exit)
	case fsm.EventTaskExited, fsm.EventExecutorReaped:
		m.runEnded(t, e.Exit)
	case fsm.EventStopRequested:
		if t.stopAt == 0 {
			t.stopAt = e.Time
		}
	}
	t.state = next
	if next.Terminal() {
		if next == fsm.StateStopped {
			m.stops.With(t.name).Inc()
		}
		if t.stopAt != 0 {
			m.stopLat.Observe(seconds(e.Time - t.stopAt))
		}
		delete(m.tasks, id)
	}
}

// touch makes the counters of a task's name exist at 0 (a rate() or an
// increase() sees their first move, not a series appearing).
func (m *agentMetrics) touch(name string) {
	for _, c := range []*metrics.CounterVec{m.starts, m.stops, m.restarts, m.reschedules, m.ooms} {
		c.With(name).Add(0)
	}
	for _, r := range ExitReasons {
		m.exits.With(name, r).Add(0)
	}
}

// start counts a task's start, at, and observes its latency.
func (m *agentMetrics) start(t *tracked, at int64) {
	t.started = true
	m.starts.With(t.name).Inc()
	m.startLat.Observe(seconds(at - t.created))
}

// runEnded counts the end of a run that ended as x, and its OOM kill,
// once per run.
func (m *agentMetrics) runEnded(t *tracked, x *fsm.ExitStatus) {
	if x == nil || t.exitSeen {
		return
	}
	t.exitSeen = true
	m.exits.With(t.name, exitReason(x)).Inc()
	if x.OOM {
		m.ooms.With(t.name).Inc()
	}
}

func (m *agentMetrics) storeCommit(d time.Duration) { m.commitLat.Observe(d.Seconds()) }

// recovered observes a recovery's duration.
func (m *agentMetrics) recovered(d time.Duration) {
	if m != nil {
		m.recoverLat.Observe(d.Seconds())
	}
}

// seconds is a span of Unix ns in seconds (never negative: clocks step).
func seconds(ns int64) float64 { return max(0, float64(ns)/1e9) }

// registerGauges registers the gauges read at scrape time: the store's
// tasks by state, the executors proven alive, the desired entries by
// standing (every state and standing, 0 included).
func (a *Agent) registerGauges(r *metrics.Registry, log hclog.Logger) {
	scan := func(which store.Selection) ([]fsm.Task, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		defer cancel()
		sc, err := a.st.LoadTasks(ctx, which)
		if err != nil {
			log.Warn("metrics: reading the store's tasks", "err", err)
			return nil, false
		}
		return sc.Tasks, true
	}
	r.GaugeFunc(MetricTasks, "Tasks in the store, by state.", func() []metrics.Sample {
		tasks, ok := scan(store.AllTasks)
		if !ok {
			return nil
		}
		return tasksByState(tasks)
	}, "state")
	r.GaugeFunc(MetricUnready, "Running tasks with readiness (notify, a check) that are not ready now.", func() []metrics.Sample {
		tasks, ok := scan(store.LiveTasks)
		if !ok {
			return nil
		}
		n := 0
		for _, t := range tasks {
			if t.State == fsm.StateRunning && t.Spec != nil && t.Spec.Readiness.Waits() && !t.Ready {
				n++
			}
		}
		return []metrics.Sample{{Value: float64(n)}}
	})
	r.GaugeFunc(MetricExecutors, "Executors of this state directory's tasks proven alive (by pid, start time and boot).", func() []metrics.Sample {
		tasks, ok := scan(store.LiveTasks)
		if !ok {
			return nil
		}
		n := 0
		for _, t := range tasks {
			if t.State.OwnsExecutor() && t.Executor != nil {
				if alive, err := proc.Alive(*t.Executor); err == nil && alive {
					n++
				}
			}
		}
		return []metrics.Sample{{Value: float64(n)}}
	})
	r.GaugeFunc(MetricDesired, "Desired entries (config dir, enabled, a node's etcd spec), by standing.", func() []metrics.Sample {
		return entriesByStanding(a.conv.snapshot().Entries)
	}, "standing")
	r.GaugeFunc(MetricProblems, "Files of the config dir the agent refused that name no desired entry it knows (tether status says them).", func() []metrics.Sample {
		return []metrics.Sample{{Value: float64(len(a.conv.snapshot().Problems))}}
	})
	r.GaugeFunc(MetricConverged, "1 when nothing of the desired state is pending, 0 while a start, a stop or a delayed restart is.", func() []metrics.Sample {
		v := 0.0
		if a.conv.snapshot().Converged {
			v = 1
		}
		return []metrics.Sample{{Value: v}}
	})
	r.GaugeFunc(MetricGeneration, "Changes of the desired state's status the agent has published (it grows at each).", func() []metrics.Sample {
		return []metrics.Sample{{Value: float64(a.conv.snapshot().Generation)}}
	})
}

// tasksByState counts tasks by state, every state of the fsm listed.
func tasksByState(tasks []fsm.Task) []metrics.Sample {
	n := map[fsm.State]int{}
	for _, t := range tasks {
		n[t.State]++
	}
	var out []metrics.Sample
	for _, s := range fsm.States() {
		out = append(out, metrics.Sample{Values: []string{s.String()}, Value: float64(n[s])})
	}
	return out
}

// entriesByStanding counts entries by standing, every standing listed.
func entriesByStanding(es []Entry) []metrics.Sample {
	n := map[Standing]int{}
	for _, e := range es {
		n[e.Standing]++
	}
	var out []metrics.Sample
	for _, s := range Standings {
		out = append(out, metrics.Sample{Values: []string{string(s)}, Value: float64(n[s])})
	}
	return out
}
