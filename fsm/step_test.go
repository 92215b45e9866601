package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func spec() *Spec {
	return &Spec{Name: "web", Driver: "exec", Command: "/bin/sleep", Args: []string{"10"}, CapAdd: []string{"net_raw"}}
}

// run steps a task through inputs, folding each step's events, and fails
// the test on any error.
func run(t *testing.T, inputs ...Event) (Task, []Event, [][]Effect) {
	t.Helper()
	task := Task{ID: "t1"}
	var log []Event
	var effs [][]Effect
	for _, in := range inputs {
		evs, eff, err := Step(task, in)
		if err != nil {
			t.Fatalf("step %s from %s: %v", in.Type, task.State, err)
		}
		if task, err = FoldAll(task, evs...); err != nil {
			t.Fatalf("fold %s: %v", in.Type, err)
		}
		log = append(log, evs...)
		effs = append(effs, eff)
	}
	return task, log, effs
}

var (
	evCreated  = Event{Type: EventCreated, Spec: spec(), Time: 1}
	evIntent   = Event{Type: EventSpawnIntent, Nonce: "n1"}
	evUp       = Event{Type: EventExecutorUp, Executor: &Identity{PID: 10, StartTime: 5, BootID: "b", Nonce: "n1"}}
	evLaunched = Event{Type: EventLaunched, TaskPID: 11, TaskStartTime: 6}
	evRunning  = Event{Type: EventRunning}
)

// The seed (Nomad issue 11958): an error after the executor is up must
// owe the kill, and the task reaches failed only through executor-reaped.
func TestStep_SeedFaultAfterExecutorUpOwesKill(t *testing.T) {
	task, _, effs := run(t, evCreated, evIntent, evUp)
	evs, eff, err := Step(task, Event{Type: EventFault, Reason: "cap_add: net_raw not allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff) != 1 || eff[0].Type != EffectKillExecutor || eff[0].Executor == nil || eff[0].Executor.PID != 10 {
		t.Fatalf("fault after executor-up: effects %+v, want kill-executor of pid 10", eff)
	}
	if eff[0].Target != StateFailed {
		t.Errorf("kill target %s, want failed", eff[0].Target)
	}
	if effs[1][0].Type != EffectSpawnExecutor || effs[1][0].Nonce != "n1" {
		t.Errorf("spawn intent effects %+v, want spawn-executor with nonce n1", effs[1])
	}
	task, _ = FoldAll(task, evs...)
	if task.State != StateReaping {
		t.Fatalf("state %s, want reaping", task.State)
	}
	if _, _, err := Step(task, Event{Type: EventExecutorReaped, Target: StateExited}); !errors.Is(err, ErrIllegalTransition) {
		t.Errorf("reaped into exited after a fault: %v, want illegal", err)
	}
	evs, eff, err = Step(task, Event{Type: EventExecutorReaped, Target: StateFailed})
	if err != nil || len(eff) != 0 {
		t.Fatalf("reaped: %v %v", eff, err)
	}
	task, _ = FoldAll(task, evs...)
	if task.State != StateFailed || task.Reason != "cap_add: net_raw not allowed" {
		t.Errorf("final %s %q", task.State, task.Reason)
	}
	if Pending(task) != nil {
		t.Errorf("a terminal task owes %v", Pending(task))
	}
}

func TestStep_StopIsIdempotent(t *testing.T) {
	task, _, _ := run(t, evCreated, evIntent, evUp, evLaunched, evRunning,
		Event{Type: EventStopRequested, Signal: 15, Grace: time.Second})
	if task.State != StateReaping {
		t.Fatalf("state %s", task.State)
	}
	p := Pending(task)
	if len(p) != 1 || p[0].Signal != 15 || p[0].Grace != time.Second || p[0].Target != StateStopped {
		t.Fatalf("pending after stop: %+v", p)
	}
	evs, eff, err := Step(task, Event{Type: EventStopRequested, Signal: 9})
	if evs != nil || eff != nil || err != nil {
		t.Fatalf("second stop: %v %v %v, want nothing", evs, eff, err)
	}
}

func TestStep_StopBeforeSpawnNeedsNoKill(t *testing.T) {
	task, _, effs := run(t, evCreated, Event{Type: EventStopRequested})
	if task.State != StateStopped || len(effs[1]) != 0 {
		t.Fatalf("stop of a created task: %s %v", task.State, effs[1])
	}
}

func TestFold_RefusesBadEvents(t *testing.T) {
	task, _, _ := run(t, evCreated, evIntent)
	cases := map[string]Event{
		"wrong nonce":     {Type: EventExecutorUp, Executor: &Identity{PID: 3, Nonce: "other"}},
		"no pid":          {Type: EventExecutorUp, Executor: &Identity{}},
		"seq gap":         {Type: EventExecutorUp, Seq: 9, Executor: &Identity{PID: 3}},
		"unknown type":    {Type: EventType(99)},
		"illegal here":    {Type: EventRunning},
		"terminal target": {Type: EventExecutorReaped, Target: StateRunning},
	}
	for name, ev := range cases {
		if _, err := Fold(task, ev); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// model is an independent reference for the lifecycle, written as a
// switch: the state a task is in after each event, and the target.
type model struct {
	state, target State
	nonce         string
	restarts      int
	readies       int // journalled ready events folded
}

func (m *model) apply(e Event) bool {
	errorTarget := map[EventType]State{EventSpawnFailed: StateFailed, EventLaunchFailed: StateFailed,
		EventFault: StateFailed, EventExecutorLost: StateLost, EventStopRequested: StateStopped, EventTaskExited: StateExited,
		EventStartInterrupted: StateFailed}
	enterReaping := func() bool {
		m.target = errorTarget[e.Type]
		m.state = StateReaping
		return true
	}
	switch m.state {
	case StateNone:
		if e.Type == EventCreated {
			m.state = StateCreated
			return true
		}
	case StateCreated:
		switch e.Type {
		case EventConfigRejected, EventStartInterrupted:
			m.state = StateFailed
			return true
		case EventStopRequested:
			m.state = StateStopped
			return true
		case EventSpawnIntent:
			m.state, m.nonce = StateSpawning, e.Nonce
			return true
		}
	case StateSpawning, StateExecutorUp, StateLaunching, StateLaunched, StateRunning, StateRestarting:
		switch {
		case e.Type == EventExecutorUp && m.state == StateSpawning:
			m.state = StateLaunching // the table's follow-on: the launch intent, in the same append
			return true
		case e.Type == EventLaunchIntent && m.state == StateExecutorUp:
			m.state = StateLaunching
			return true
		case e.Type == EventLaunched && (m.state == StateLaunching || m.state == StateRestarting):
			m.state = StateLaunched
			return true
		case e.Type == EventRestartIntent && (m.state == StateLaunched || m.state == StateRunning):
			if e.Attempt != m.restarts+1 {
				return false
			}
			m.state, m.restarts = StateRestarting, e.Attempt
			return true
		case e.Type == EventReattached && m.state == StateRestarting:
			return true
		case e.Type == EventReady && m.state == StateRunning:
			// A plain ready (an executor that journals none) is always a
			// transition of a running task; a journalled one only at its
			// place: the journal's entries so far are two a restart and
			// one a ready.
			if e.Attempt == 0 {
				return true
			}
			if e.Attempt != 2*m.restarts+m.readies+1 {
				return false
			}
			m.readies++
			return true
		case e.Type == EventRunning && m.state == StateLaunched:
			m.state = StateRunning
			return true
		case e.Type == EventReattached && (m.state == StateLaunched || m.state == StateRunning):
			return true
		case e.Type == EventSpawnFailed && m.state == StateSpawning,
			e.Type == EventLaunchFailed && (m.state == StateLaunching || m.state == StateRestarting),
			e.Type == EventStartInterrupted && (m.state == StateSpawning || m.state == StateExecutorUp || m.state == StateLaunching),
			e.Type == EventTaskExited && (m.state == StateLaunched || m.state == StateRunning),
			e.Type == EventFault, e.Type == EventExecutorLost, e.Type == EventStopRequested:
			return enterReaping()
		}
	case StateReaping:
		switch {
		case e.Type == EventKillFailed:
			return true
		case e.Type == EventExecutorReaped && e.Target == m.target:
			m.state = m.target
			return true
		}
	}
	return false
}

func drawEvent(t *rapid.T, target State, restarts, readies int) Event {
	typ := EventType(rapid.IntRange(int(EventCreated), int(numEventTypes)-1).Draw(t, "type"))
	e := Event{Type: typ, Time: rapid.Int64Range(0, 1<<40).Draw(t, "time")}
	switch typ {
	case EventCreated:
		e.Spec = spec()
	case EventSpawnIntent:
		e.Nonce = rapid.StringMatching(`[a-f0-9]{8}`).Draw(t, "nonce")
	case EventExecutorUp, EventReattached:
		e.Executor = &Identity{PID: rapid.IntRange(1, 1<<22).Draw(t, "pid"), StartTime: rapid.Uint64().Draw(t, "start")}
	case EventLaunched:
		e.TaskPID = rapid.IntRange(1, 1<<22).Draw(t, "taskpid")
	case EventTaskExited:
		e.Exit = &ExitStatus{Code: rapid.IntRange(0, 255).Draw(t, "code")}
	case EventExecutorReaped:
		if rapid.Bool().Draw(t, "right target") && target != StateNone {
			e.Target = target
		} else {
			e.Target = rapid.SampledFrom([]State{StateFailed, StateExited, StateStopped, StateLost}).Draw(t, "target")
		}
	case EventStopRequested:
		e.Signal = rapid.IntRange(0, 31).Draw(t, "sig")
	case EventReady:
		if rapid.Bool().Draw(t, "journalled") {
			e.Attempt = 2*restarts + readies + 1
			if rapid.Bool().Draw(t, "wrong place") {
				e.Attempt = rapid.IntRange(1, 8).Draw(t, "place")
			}
			e.TaskPID = rapid.IntRange(1, 1<<22).Draw(t, "readypid")
		}
	case EventRestartIntent:
		e.Attempt = restarts + 1
		if rapid.Bool().Draw(t, "wrong attempt") {
			e.Attempt = rapid.IntRange(1, 5).Draw(t, "attempt")
		}
		e.Exit = &ExitStatus{Code: rapid.IntRange(0, 255).Draw(t, "code")}
	}
	if rapid.Bool().Draw(t, "reason") {
		e.Reason = rapid.String().Draw(t, "why")
	}
	return e
}

// TestFold_EqualsLiveState drives random inputs through Step (the live
// path: legal inputs are kept, illegal ones refused), checks every verdict
// against the independent model, and then checks that folding the kept log
// from scratch yields exactly the live task (invariant 5).
func TestFold_EqualsLiveState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		live := Task{ID: "p"}
		m := &model{}
		var log []Event
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			in := drawEvent(t, m.target, m.restarts, m.readies)
			before := *m
			legal := m.apply(in)
			if in.Type == EventExecutorUp && in.Executor.Nonce == "" {
				in.Executor.Nonce = m.nonce
			}
			evs, effs, err := Step(live, in)
			idempotentStop := in.Type == EventStopRequested && (before.state == StateReaping || before.state.Terminal())
			switch {
			case idempotentStop:
				*m = before
				if evs != nil || err != nil {
					t.Fatalf("stop in %s: %v %v", before.state, evs, err)
				}
				continue
			case legal && err != nil:
				t.Fatalf("model allows %s from %s, Step refused: %v", in.Type, before.state, err)
			case !legal && err == nil:
				t.Fatalf("model refuses %s from %s, Step allowed it", in.Type, before.state)
			case !legal:
				continue
			}
			if live, err = FoldAll(live, evs...); err != nil {
				t.Fatal(err)
			}
			if live.State != m.state {
				t.Fatalf("after %s: live %s, model %s", in.Type, live.State, m.state)
			}
			for _, f := range effs {
				if m.state == StateReaping && f.Type != EffectKillExecutor {
					t.Fatalf("entering reaping owes %s", f.Type)
				}
			}
			if m.state == StateReaping && (len(effs) != 1 || effs[0].Type != EffectKillExecutor) {
				t.Fatalf("%s into reaping: effects %v, want kill-executor", in.Type, effs)
			}
			log = append(log, evs...)
		}
		replayed, err := FoldAll(Task{ID: "p"}, log...)
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		if !reflect.DeepEqual(replayed, live) {
			t.Fatalf("replay differs from the live task:\nreplay %+v\nlive   %+v", replayed, live)
		}
		if !reflect.DeepEqual(Pending(replayed), Pending(live)) {
			t.Fatal("pending effects differ after replay")
		}
	})
}

func ExampleTable_Step() {
	task := Task{ID: "web"}
	for _, in := range []Event{
		{Type: EventCreated, Spec: &Spec{Driver: "exec", Command: "/bin/ping", CapAdd: []string{"net_raw"}}},
		{Type: EventSpawnIntent, Nonce: "4f1c"},
		{Type: EventExecutorUp, Executor: &Identity{PID: 4242, Nonce: "4f1c"}},
		{Type: EventFault, Reason: "cap_add net_raw is not allowed"},
	} {
		events, effects, err := Lifecycle.Step(task, in)
		if err != nil {
			fmt.Println(err)
			return
		}
		// A real caller appends events to the store here, before anything else.
		task, _ = Lifecycle.FoldAll(task, events...)
		fmt.Println(task.State, effects)
	}
	// Output:
	// created []
	// spawning [spawn-executor]
	// launching [launch-task]
	// reaping [kill-executor]
}

// executor-up is followed by the launch intent in the same step: the table
// owns the path, and the caller appends both at once.
func TestStep_ExecutorUpIsFollowedByLaunchIntent(t *testing.T) {
	task, _, _ := run(t, evCreated, evIntent)
	evs, effs, err := Step(task, evUp)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Type != EventExecutorUp || evs[1].Type != EventLaunchIntent || evs[1].Seq != evs[0].Seq+1 {
		t.Fatalf("events %v, want executor-up then launch-intent with consecutive seqs", evs)
	}
	if len(effs) != 1 || effs[0].Type != EffectLaunchTask || effs[0].Spec == nil {
		t.Fatalf("effects %v, want launch-task with the spec", effs)
	}
	if Lifecycle.FollowOn(StateSpawning, EventExecutorUp) != EventLaunchIntent {
		t.Fatal("FollowOn does not report the table's follow-on")
	}
}

// StepAll folds a launch reply that already says running: one append, no
// attach owed.
func TestStepAll_LaunchedAndRunningInOneAppend(t *testing.T) {
	task, _, _ := run(t, evCreated, evIntent, evUp)
	evs, effs, err := StepAll(task, evLaunched, evRunning)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Seq != task.Version+2 || len(effs) != 0 {
		t.Fatalf("events %v effects %v", evs, effs)
	}
	final, err := FoldAll(task, evs...)
	if err != nil || final.State != StateRunning {
		t.Fatalf("fold: %s %v", final.State, err)
	}
	if _, _, err := StepAll(task, evRunning, evLaunched); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("out of order: %v, want an illegal transition", err)
	}
}

func TestNewTable_RefusesBadFollowOn(t *testing.T) {
	for name, then := range map[string]EventType{
		"not an edge out of the destination": EventRunning,
		"a follow-on that needs a payload":   EventLaunched,
	} {
		edges := slices.Clone(Edges)
		for i, e := range edges {
			if e.From == StateSpawning && e.On == EventExecutorUp {
				edges[i].Then = then
			}
		}
		if _, err := NewTable(edges); !errors.Is(err, ErrBadTable) {
			t.Errorf("%s: %v, want ErrBadTable", name, err)
		}
	}
}

func TestSpec_Validate(t *testing.T) {
	ok := Spec{Driver: "raw_exec", Command: "/bin/true"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	neg := -1
	cases := map[string]func(s *Spec){
		"driver":                 func(s *Spec) { s.Driver = "docker" },
		"command":                func(s *Spec) { s.Command = "" },
		"NUL in arg":             func(s *Spec) { s.Args = []string{"a\x00b"} },
		"NUL in env":             func(s *Spec) { s.Env = map[string]string{"K": "v\x00"} },
		"= in env name":          func(s *Spec) { s.Env = map[string]string{"A=B": "v"} },
		"huge arg":               func(s *Spec) { s.Args = []string{strings.Repeat("x", 10<<20)} },
		"negative memory":        func(s *Spec) { s.Resources.MemoryMB = -1 },
		"memory above max":       func(s *Spec) { s.Resources = Resources{MemoryMB: 200, MemoryMaxMB: 100} },
		"oom_score_adj":          func(s *Spec) { v := 2000; s.OOMScoreAdj = &v },
		"negative logs":          func(s *Spec) { s.Logs.MaxFiles = neg },
		"pid_mode":               func(s *Spec) { s.PIDMode = "private" },
		"restart":                func(s *Spec) { s.Restart = &RestartPolicy{Attempts: 1, Mode: RestartFail} },
		"network none raw":       func(s *Spec) { s.Network = NetworkNone },
		"network bridge":         func(s *Spec) { s.Driver, s.Network = "exec", "bridge" },
		"network other":          func(s *Spec) { s.Driver, s.Network = "exec", "cni/x" },
		"seccomp raw":            func(s *Spec) { s.Seccomp = SeccompUnconfined },
		"seccomp relative":       func(s *Spec) { s.Driver, s.Seccomp = "exec", "profile.json" },
		"seccomp NUL":            func(s *Spec) { s.Driver, s.Seccomp = "exec", "/p\x00" },
		"alloc without id":       func(s *Spec) { a := goodAlloc(); a.ID = ""; s.Alloc = a },
		"relative alloc dir":     func(s *Spec) { a := goodAlloc(); a.Dir = "allocs/a1/alloc"; s.Alloc = a },
		"unclean task dir":       func(s *Spec) { a := goodAlloc(); a.TaskDir = "/s/allocs/a1/../web"; s.Alloc = a },
		"task dir in alloc dir":  func(s *Spec) { a := goodAlloc(); a.TaskDir = a.Dir + "/web"; s.Alloc = a },
		"alloc dir is /":         func(s *Spec) { a := goodAlloc(); a.Dir = "/"; s.Alloc = a },
		"task listed twice":      func(s *Spec) { a := goodAlloc(); a.Tasks = []string{"web", "web"}; s.Alloc = a },
		"poststop sidecar":       func(s *Spec) { a := goodAlloc(); a.Hook, a.Sidecar = HookPoststop, true; s.Alloc = a },
		"unknown hook":           func(s *Spec) { a := goodAlloc(); a.Hook = 9; s.Alloc = a },
		"template without data":  func(s *Spec) { s.Templates = []Template{{Destination: "local/x"}} },
		"template with both":     func(s *Spec) { s.Templates = []Template{{Data: "x", Source: "y", Destination: "local/x"}} },
		"template no dest":       func(s *Spec) { s.Templates = []Template{{Data: "x"}} },
		"signal without signal":  func(s *Spec) { s.Templates = []Template{{Data: "x", Destination: "d", ChangeMode: ChangeSignal}} },
		"template perms":         func(s *Spec) { s.Templates = []Template{{Data: "x", Destination: "d", Perms: 0o4755}} },
		"NUL in template":        func(s *Spec) { s.Templates = []Template{{Data: "x\x00", Destination: "d"}} },
		"artifact no source":     func(s *Spec) { s.Artifacts = []Artifact{{Destination: "local/"}} },
		"template without alloc": func(s *Spec) { s.Alloc = nil; s.Templates = []Template{{Data: "x", Destination: "d"}} },
		"artifact mode":          func(s *Spec) { s.Artifacts = []Artifact{{Source: "x", Mode: 7}} },
		"NUL in header":          func(s *Spec) { s.Artifacts = []Artifact{{Source: "x", Headers: map[string]string{"A": "\x00"}}} },
		"port 0":                 func(s *Spec) { s.Ports = []Port{{Label: "http", IP: "127.0.0.1"}} },
		"port 70000":             func(s *Spec) { s.Ports = []Port{{Label: "http", Value: 70000, IP: "127.0.0.1"}} },
		"huge template": func(s *Spec) { // 16 of 60 KiB: more than a launch frame holds
			for range 16 {
				s.Templates = append(s.Templates, Template{Data: strings.Repeat("x", 60<<10), Destination: "d"})
			}
		},
	}
	full := ok
	full.Alloc = goodAlloc()
	full.Templates = []Template{{Data: "x", Destination: "local/x", ChangeMode: ChangeSignal, ChangeSignal: 1, Perms: 0o755}}
	full.Artifacts = []Artifact{{Source: "http://127.0.0.1/x", Mode: ArtifactFile, Options: map[string]string{"checksum": "sha256:00"}}}
	full.Ports = []Port{{Label: "http", Value: 20000, IP: "127.0.0.1"}}
	if err := full.Validate(); err != nil {
		t.Fatalf("a spec with every job-file part: %v", err)
	}
	for name, mod := range cases {
		s := ok
		s.Alloc = goodAlloc() // templates and artifacts need one; the alloc cases replace it
		mod(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
	for name, mod := range map[string]func(s *Spec){
		"network none":       func(s *Spec) { s.Driver, s.Network = "exec", NetworkNone },
		"network host":       func(s *Spec) { s.Network = NetworkHost },
		"seccomp default":    func(s *Spec) { s.Seccomp = SeccompDefault },
		"seccomp unconfined": func(s *Spec) { s.Driver, s.Seccomp = "exec", SeccompUnconfined },
		"seccomp profile":    func(s *Spec) { s.Driver, s.Seccomp = "exec", "/etc/tether/p.json" },
	} {
		s := ok
		mod(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestSpec_ArgumentAndEnvironmentSizes: an argument or an environment
// string is held to the kernel's MAX_ARG_STRLEN (131072 bytes with its
// NUL; an environment string is KEY=VALUE), not to 64 KiB, and refused
// past it with the kernel's figure; a spec whose strings would not fit
// the executor's launch frame once written as JSON is refused too, and
// jsonLen counts what encoding/json writes.
func TestSpec_ArgumentAndEnvironmentSizes(t *testing.T) {
	spec := func(env map[string]string, args ...string) *Spec {
		return &Spec{Driver: "raw_exec", Command: "/bin/true", Env: env, Args: args}
	}
	max := strings.Repeat("v", MaxArgString-1-len("BIG=")) // BIG=... and its NUL: 131072
	for name, s := range map[string]*Spec{
		"100 KiB value":     spec(map[string]string{"BIG": strings.Repeat("v", 100<<10)}),
		"at the limit":      spec(map[string]string{"BIG": max}),
		"argument at limit": spec(nil, strings.Repeat("a", MaxArgString-1)),
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		s    *Spec
		want string
	}{
		"one past":          {spec(map[string]string{"BIG": max + "v"}), "the kernel takes at most 131071 bytes per argument or environment string (MAX_ARG_STRLEN, 131072 with its NUL)"},
		"argument one past": {spec(nil, strings.Repeat("a", MaxArgString)), "argument 1 is 131072 bytes: the kernel takes at most 131071"},
		"the frame":         {spec(map[string]string{"A": max, "B": max, "C": max, "D": max, "E": max, "F": max, "G": max}), "more than the 917504 its launch frame holds"},
		"escapes count":     {spec(map[string]string{"A": strings.Repeat("\x01", 100<<10), "B": strings.Repeat("\x01", 100<<10)}), "launch frame"},
	} {
		if err := tc.s.Validate(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	for _, s := range []string{"", "plain", "quote\" back\\ nl\n tab\t cr\r", "\x01\x1f<>&", "\u2028\u2029", "bad\xff\xfeutf8", "é漢字"} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonLen(s); got != len(b) {
			t.Errorf("jsonLen(%q) = %d, encoding/json writes %d bytes (%s)", s, got, len(b), b)
		}
	}
}

func goodAlloc() *Alloc {
	return &Alloc{ID: "a1", Dir: "/s/allocs/a1/alloc", TaskDir: "/s/allocs/a1/web", Tasks: []string{"init", "web"}}
}

// A readiness check is validated against the readiness and the task's
// ports: each case below is refused, naming the problem, and the good
// ones pass.
func TestSpec_ValidateCheck(t *testing.T) {
	tcp := func() Spec {
		return Spec{Driver: "raw_exec", Command: "/bin/true", Readiness: ReadinessTCP,
			Ports: []Port{{Label: "web", Value: 20001, IP: "10.0.0.5"}},
			Check: &Check{PortLabel: "web", Address: "10.0.0.5", Port: 20001, Interval: time.Second, Timeout: time.Second}}
	}
	execCheck := func() Spec {
		return Spec{Driver: "exec", Command: "/bin/true", Readiness: ReadinessExec, Network: NetworkNone,
			Check: &Check{Command: "/bin/check", Args: []string{"-q"}, Interval: time.Second, Timeout: time.Second,
				Restart: &CheckRestart{Limit: 3, Grace: time.Minute}}}
	}
	for name, s := range map[string]Spec{"tcp": tcp(), "exec in network none": execCheck()} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		spec func() Spec
		mod  func(s *Spec)
		want string
	}{
		"tcp without check":     {tcp, func(s *Spec) { s.Check = nil }, `readiness "tcp" needs a check`},
		"check without checked": {tcp, func(s *Spec) { s.Readiness = ReadinessNotify }, `a check needs readiness = "tcp"`},
		"short interval":        {tcp, func(s *Spec) { s.Check.Interval = time.Millisecond }, "shorter than the 10ms minimum"},
		"no timeout":            {tcp, func(s *Spec) { s.Check.Timeout = 0 }, "check timeout 0s is not positive"},
		"negative limit":        {tcp, func(s *Spec) { s.Check.Restart = &CheckRestart{Limit: -1} }, "neither may be negative"},
		"unknown label":         {tcp, func(s *Spec) { s.Check.PortLabel = "admin" }, `check port "admin" is not one of the task's ports`},
		"label of another port": {tcp, func(s *Spec) { s.Check.Port = 20002 }, `check port "web" is 20002, and the task's port "web" is 20001`},
		"no port":               {tcp, func(s *Spec) { s.Check.Port, s.Check.PortLabel = 0, "" }, "is not a port"},
		"bad address":           {tcp, func(s *Spec) { s.Check.Address = "example.com" }, "is not an IP address"},
		"tcp with path":         {tcp, func(s *Spec) { s.Check.Path = "/x" }, "a tcp check has no path"},
		"http relative path":    {tcp, func(s *Spec) { s.Readiness, s.Check.Path = ReadinessHTTP, "health" }, "does not start with /"},
		"tcp with command":      {tcp, func(s *Spec) { s.Check.Command = "/bin/x" }, "has no command"},
		"NUL":                   {tcp, func(s *Spec) { s.Check.Name = "a\x00" }, "NUL"},
		"tcp in network none":   {tcp, func(s *Spec) { s.Driver, s.Network, s.Ports, s.Check.PortLabel = "exec", NetworkNone, nil, "" }, `network mode "none"`},
		"exec without command":  {execCheck, func(s *Spec) { s.Check.Command = "" }, "an exec check needs a command"},
		"exec with port":        {execCheck, func(s *Spec) { s.Check.Port = 80 }, "an exec check has no port"},
		"unknown readiness":     {tcp, func(s *Spec) { s.Readiness = "grpc" }, `readiness "grpc"`},
	} {
		s := tc.spec()
		tc.mod(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}
