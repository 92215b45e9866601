package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestLifecycle_Builds(t *testing.T) {
	if _, err := NewTable(Edges); err != nil {
		t.Fatalf("the declared lifecycle does not build: %v", err)
	}
}

// Every edge that carries the kill today is removed in turn: each resulting
// table must be refused, and the error must name that edge.
func TestNewTable_RefusesMissingKill(t *testing.T) {
	n := 0
	for i, e := range Edges {
		if !e.Kills() || !e.From.OwnsExecutor() {
			continue
		}
		n++
		edges := slices.Clone(Edges)
		edges[i].Effects = nil
		_, err := NewTable(edges)
		if !errors.Is(err, ErrMissingKill) {
			t.Errorf("dropping the kill from %s: got %v, want ErrMissingKill", e, err)
			continue
		}
		var ee *EdgeError
		if !errors.As(err, &ee) || ee.Edge.From != e.From || ee.Edge.On != e.On {
			t.Errorf("dropping the kill from %s: error %v does not name the edge", e, err)
		}
		if !strings.Contains(err.Error(), e.From.String()) || !strings.Contains(err.Error(), e.On.String()) {
			t.Errorf("error text %q does not name %s", err, e)
		}
	}
	if n < 15 {
		t.Fatalf("only %d kill edges found; the table lost its error edges", n)
	}
}

func TestNewTable_RefusesBypassingReaping(t *testing.T) {
	cases := map[string][]Edge{
		"direct edge to a terminal": append(slices.Clone(Edges),
			Edge{StateExecutorUp, EventTaskExited, StateExited, nil, EventNone}),
		"reaping left by anything but executor-reaped": append(slices.Clone(Edges),
			Edge{StateReaping, EventFault, StateFailed, nil, EventNone}),
		// running -> created (no kill needed: created is not reaping) then
		// created --config-rejected--> failed: a path around reaping.
		"indirect path through created": append(slices.Clone(Edges),
			Edge{StateRunning, EventReattached, StateCreated, nil, EventNone}),
	}
	for name, edges := range cases {
		t.Run(name, func(t *testing.T) {
			// The indirect case conflicts with running's own reattached
			// edge; drop that one so only the bypass is wrong.
			if name == "indirect path through created" {
				edges = slices.DeleteFunc(edges, func(e Edge) bool {
					return e.From == StateRunning && e.On == EventReattached && e.To == StateRunning
				})
			}
			_, err := NewTable(edges)
			if !errors.Is(err, ErrBypassesReaping) {
				t.Fatalf("got %v, want ErrBypassesReaping", err)
			}
			var ee *EdgeError
			if !errors.As(err, &ee) {
				t.Fatalf("error %v does not name an edge", err)
			}
		})
	}
}

func TestNewTable_RefusesMalformed(t *testing.T) {
	cases := map[string]Edge{
		"edge out of a terminal":          {StateExited, EventFault, StateReaping, kill, EventNone},
		"second destination for an event": {StateCreated, EventSpawnIntent, StateFailed, nil, EventNone},
		"unknown state":                   {State(200), EventFault, StateReaping, kill, EventNone},
		"different effects into a state":  {StateExecutorUp, EventReattached, StateLaunching, nil, EventNone},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewTable(append(slices.Clone(Edges), bad))
			if !errors.Is(err, ErrBadTable) {
				t.Fatalf("got %v, want ErrBadTable", err)
			}
		})
	}
}

// expectedTable is the lifecycle written out independently of Edges: one
// line per state, "event>destination" for each legal event. Any change to
// the table must change this text too.
const expectedTable = `
created: config-rejected>failed spawn-intent>spawning stop-requested>stopped start-interrupted>failed
spawning: executor-up>executor-up spawn-failed>reaping* stop-requested>reaping* executor-lost>reaping* fault>reaping* start-interrupted>reaping*
executor-up: launch-intent>launching stop-requested>reaping* executor-lost>reaping* fault>reaping* start-interrupted>reaping*
launching: launched>launched launch-failed>reaping* stop-requested>reaping* executor-lost>reaping* fault>reaping* start-interrupted>reaping*
launched: running>running reattached>launched restart-intent>restarting task-exited>reaping* stop-requested>reaping* executor-lost>reaping* fault>reaping*
running: reattached>running ready>running restart-intent>restarting task-exited>reaping* stop-requested>reaping* executor-lost>reaping* fault>reaping*
restarting: launched>launched reattached>restarting launch-failed>reaping* stop-requested>reaping* executor-lost>reaping* fault>reaping*
reaping: kill-failed>reaping* executor-reaped>failed|exited|stopped|lost
failed:
exited:
stopped:
lost:
`

// TestTable_Exhaustive checks every state x event pair three ways: the
// compiled table, the looplab/fsm mirror (Can), and the text above.
func TestTable_Exhaustive(t *testing.T) {
	want := map[State]map[EventType][]State{}
	kills := map[[2]uint8]bool{}
	for _, line := range strings.Split(strings.TrimSpace(expectedTable), "\n") {
		name, rest, _ := strings.Cut(line, ":")
		s, err := ParseState(name)
		if err != nil {
			t.Fatal(err)
		}
		want[s] = map[EventType][]State{}
		for _, f := range strings.Fields(rest) {
			ev, dsts, _ := strings.Cut(f, ">")
			e, err := ParseEventType(ev)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(dsts, "*") {
				kills[[2]uint8{uint8(s), uint8(e)}] = true
				dsts = strings.TrimSuffix(dsts, "*")
			}
			for _, d := range strings.Split(dsts, "|") {
				ds, err := ParseState(d)
				if err != nil {
					t.Fatal(err)
				}
				want[s][e] = append(want[s][e], ds)
			}
		}
	}
	if len(want) != len(States()) {
		t.Fatalf("expected table covers %d states, the package declares %d", len(want), len(States()))
	}
	for _, s := range States() {
		for _, e := range EventTypes() {
			w := want[s][e]
			got := Lifecycle.Destinations(s, e)
			slices.Sort(w)
			if !slices.Equal(got, w) {
				t.Errorf("%s --%s-->: compiled table gives %v, want %v", s, e, got, w)
			}
			if can := Lifecycle.Can(s, e); can != (len(w) > 0) {
				t.Errorf("%s --%s-->: looplab Can = %v, want %v", s, e, can, len(w) > 0)
			}
			for _, d := range w {
				to, err := Lifecycle.Next(s, Event{Type: e, Target: d})
				if err != nil || to != d {
					t.Errorf("Next(%s, %s target %s) = %s, %v", s, e, d, to, err)
				}
			}
			if len(w) == 0 {
				_, err := Lifecycle.Next(s, Event{Type: e})
				var te *TransitionError
				if !errors.As(err, &te) || !errors.Is(err, ErrIllegalTransition) {
					t.Errorf("Next(%s, %s) = %v, want a TransitionError", s, e, err)
				}
			}
		}
	}
	for _, e := range Lifecycle.Edges() {
		if e.Kills() != kills[[2]uint8{uint8(e.From), uint8(e.On)}] {
			t.Errorf("%s: kill-executor = %v, the expected table says %v", e, e.Kills(), !e.Kills())
		}
	}
}

func TestGraph_MarksKillEdges(t *testing.T) {
	nkill := 0
	for _, e := range Lifecycle.Edges() {
		if e.Kills() {
			nkill++
		}
	}
	for _, f := range []GraphFormat{Mermaid, Graphviz} {
		out, err := Lifecycle.Graph(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out, "kill-executor"); got != nkill {
			t.Errorf("%s graph marks %d edges with kill-executor, the table has %d", f, got, nkill)
		}
		for _, s := range States() {
			if !strings.Contains(out, s.String()) {
				t.Errorf("%s graph lacks state %s", f, s)
			}
		}
	}
	if _, err := Lifecycle.Graph("svg"); err == nil {
		t.Error("unknown format accepted")
	}
	dot, _ := Lifecycle.Graph(Graphviz)
	if !strings.HasPrefix(dot, "digraph") || strings.Count(dot, `color = "red" ]`) != nkill {
		t.Errorf("dot output does not colour the %d kill edges:\n%s", nkill, dot)
	}
}

func TestNames_RoundTrip(t *testing.T) {
	for _, s := range States() {
		if got, err := ParseState(s.String()); err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s, got, err)
		}
	}
	for _, e := range EventTypes() {
		if got, err := ParseEventType(e.String()); err != nil || got != e {
			t.Errorf("ParseEventType(%q) = %v, %v", e, got, err)
		}
	}
	if _, err := ParseState("none"); err == nil {
		t.Error(`ParseState("none") accepted`)
	}
}
