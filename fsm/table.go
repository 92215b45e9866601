package fsm

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"

	lfsm "github.com/looplab/fsm"
)

// Edge is one row of the transition table: on event On, a task in From
// moves to To and the effects are owed.
type Edge struct {
	From    State
	On      EventType
	To      State
	Effects []EffectType
	// Then is the input that follows this edge at once, recorded in the
	// same append (executor-up is followed by the launch intent): the
	// table, not the caller, decides the path. It must be an edge out of
	// To whose event needs no payload.
	Then EventType
}

func (e Edge) String() string {
	s := fmt.Sprintf("%s --%s--> %s", e.From, e.On, e.To)
	if len(e.Effects) > 0 {
		names := make([]string, len(e.Effects))
		for i, f := range e.Effects {
			names[i] = f.String()
		}
		s += " [" + strings.Join(names, ", ") + "]"
	}
	if e.Then != EventNone {
		s += " then " + e.Then.String()
	}
	return s
}

// Kills reports whether the edge carries the kill-executor effect.
func (e Edge) Kills() bool { return slices.Contains(e.Effects, EffectKillExecutor) }

var (
	kill   = []EffectType{EffectKillExecutor}
	spawn  = []EffectType{EffectSpawnExecutor}
	launch = []EffectType{EffectLaunchTask}
	attach = []EffectType{EffectAttach}
)

// errorsInto lists, for one owning state, the error edges into reaping, each
// with the mandatory kill.
func errorsInto(from State, events ...EventType) []Edge {
	out := make([]Edge, len(events))
	for i, ev := range events {
		out[i] = Edge{From: from, On: ev, To: StateReaping, Effects: kill}
	}
	return out
}

// Edges is tether's lifecycle, declared once. Everything else (the compiled
// table, the looplab/fsm mirror, the graphs, the store's legality check) is
// built from it.
var Edges = slices.Concat(
	[]Edge{
		{StateCreated, EventConfigRejected, StateFailed, nil, EventNone},
		{StateCreated, EventStopRequested, StateStopped, nil, EventNone},
		{StateCreated, EventSpawnIntent, StateSpawning, spawn, EventNone},
		{StateCreated, EventStartInterrupted, StateFailed, nil, EventNone},

		{StateSpawning, EventExecutorUp, StateExecutorUp, nil, EventLaunchIntent},
	},
	errorsInto(StateSpawning, EventSpawnFailed, EventStopRequested, EventExecutorLost, EventFault, EventStartInterrupted),

	[]Edge{{StateExecutorUp, EventLaunchIntent, StateLaunching, launch, EventNone}},
	errorsInto(StateExecutorUp, EventStopRequested, EventExecutorLost, EventFault, EventStartInterrupted),

	[]Edge{{StateLaunching, EventLaunched, StateLaunched, attach, EventNone}},
	errorsInto(StateLaunching, EventLaunchFailed, EventStopRequested, EventExecutorLost, EventFault, EventStartInterrupted),

	[]Edge{
		{StateLaunched, EventRunning, StateRunning, nil, EventNone},
		{StateLaunched, EventReattached, StateLaunched, attach, EventNone},
		{StateLaunched, EventRestartIntent, StateRestarting, nil, EventNone},
	},
	errorsInto(StateLaunched, EventTaskExited, EventStopRequested, EventExecutorLost, EventFault),

	[]Edge{
		{StateRunning, EventReattached, StateRunning, nil, EventNone},
		{StateRunning, EventReady, StateRunning, nil, EventNone},
		{StateRunning, EventRestartIntent, StateRestarting, nil, EventNone},
	},
	errorsInto(StateRunning, EventTaskExited, EventStopRequested, EventExecutorLost, EventFault),

	// The executor relaunches the task itself (the driver may be away); a
	// relaunch is recorded as launched, a failed one as launch-failed.
	[]Edge{
		{StateRestarting, EventLaunched, StateLaunched, attach, EventNone},
		{StateRestarting, EventReattached, StateRestarting, nil, EventNone},
	},
	errorsInto(StateRestarting, EventLaunchFailed, EventStopRequested, EventExecutorLost, EventFault),

	[]Edge{
		{StateReaping, EventKillFailed, StateReaping, kill, EventNone},
		{StateReaping, EventExecutorReaped, StateFailed, nil, EventNone},
		{StateReaping, EventExecutorReaped, StateExited, nil, EventNone},
		{StateReaping, EventExecutorReaped, StateStopped, nil, EventNone},
		{StateReaping, EventExecutorReaped, StateLost, nil, EventNone},
	},
)

// Lifecycle is the table built from Edges. Building it cannot fail unless
// Edges itself is broken, which TestLifecycle_Builds proves it is not.
var Lifecycle = mustTable(Edges)

func mustTable(edges []Edge) *Table {
	t, err := NewTable(edges)
	if err != nil {
		panic(err) // Edges is a constant of this package: a broken one is a programming error.
	}
	return t
}

// Table is a validated, compiled transition table.
type Table struct {
	edges []Edge
	// next[from][event] is the set of destination states, a bit per state.
	next [numStates][numEventTypes]uint16
	// owed[state] is the effects owed while a task is in state.
	owed [numStates][]EffectType
	// then[from][event] is the input that follows the edge at once.
	then [numStates][numEventTypes]EventType

	// lf mirrors the table in looplab/fsm, for Can and graph export. It is
	// built on first use (an executor, which folds nothing, never pays for
	// it). A looplab machine has a current state, so calls are serialised.
	mu     sync.Mutex
	lf     *lfsm.FSM
	labels map[[2]uint8][]string // (from, event) -> looplab event names
}

// NewTable validates edges and compiles them. It refuses, with an
// *EdgeError naming the edge, any table in which:
//   - an edge out of a state that may own an executor (spawning through
//     running) into reaping lacks the kill-executor effect (ErrMissingKill);
//   - a terminal state is reachable from such a state without passing
//     through reaping, or is entered from reaping by anything but
//     executor-reaped (ErrBypassesReaping);
//   - a state or event is unknown, an edge leaves a terminal state, an
//     event has two destinations from one state (executor-reaped excepted),
//     the edges into one state owe different effects, or an edge's Then is
//     not an edge out of its destination or needs a payload (ErrBadTable).
func NewTable(edges []Edge) (*Table, error) {
	t := &Table{edges: slices.Clone(edges), labels: map[[2]uint8][]string{}}
	owedSet := [numStates]bool{}
	for _, e := range t.edges {
		bad := func(err error) (*Table, error) { return nil, &EdgeError{Edge: e, Err: err} }
		switch {
		case !e.From.Valid() || !e.To.Valid() || !e.On.Valid():
			return bad(fmt.Errorf("%w: unknown state or event", ErrBadTable))
		case e.From.Terminal():
			return bad(fmt.Errorf("%w: edge out of a terminal state", ErrBadTable))
		case e.On == EventExecutorReaped && (e.From != StateReaping || !e.To.Terminal()):
			return bad(fmt.Errorf("%w: executor-reaped leads from reaping to a terminal state only", ErrBadTable))
		case e.From == StateReaping && e.To.Terminal() && e.On != EventExecutorReaped:
			return bad(ErrBypassesReaping)
		case e.From.OwnsExecutor() && e.From != StateReaping && e.To.Terminal():
			return bad(ErrBypassesReaping)
		case e.From.OwnsExecutor() && e.To == StateReaping && !e.Kills():
			return bad(ErrMissingKill)
		}
		cell := &t.next[e.From][e.On]
		if *cell&(1<<e.To) != 0 || (*cell != 0 && e.On != EventExecutorReaped) {
			return bad(fmt.Errorf("%w: a second %s edge out of %s", ErrBadTable, e.On, e.From))
		}
		*cell |= 1 << e.To
		if e.Then != EventNone {
			if e.On == EventExecutorReaped {
				return bad(fmt.Errorf("%w: executor-reaped cannot be followed by another input", ErrBadTable))
			}
			bare := Event{Type: e.Then}
			if err := bare.Validate(); err != nil {
				return bad(fmt.Errorf("%w: a follow-on input must need no payload: %w", ErrBadTable, err))
			}
			t.then[e.From][e.On] = e.Then
		}
		if !owedSet[e.To] {
			owedSet[e.To] = true
			t.owed[e.To] = slices.Clone(e.Effects)
		} else if !slices.Equal(t.owed[e.To], e.Effects) {
			return bad(fmt.Errorf("%w: edges into %s owe different effects (%v and %v)",
				ErrBadTable, e.To, t.owed[e.To], e.Effects))
		}
	}
	for _, e := range t.edges {
		if e.Then != EventNone && t.next[e.To][e.Then] == 0 {
			return nil, &EdgeError{Edge: e, Err: fmt.Errorf("%w: no %s edge out of %s to follow it", ErrBadTable, e.Then, e.To)}
		}
	}
	if err := t.checkReapingIsTheGate(); err != nil {
		return nil, err
	}
	return t, nil
}

// checkReapingIsTheGate walks from every owning state along edges that do
// not leave reaping; reaching a terminal state means reaping was bypassed.
func (t *Table) checkReapingIsTheGate() error {
	for _, start := range lifecycleOrder {
		if !start.OwnsExecutor() || start == StateReaping {
			continue
		}
		var seen [numStates]bool
		seen[start] = true
		queue := []State{start}
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, e := range t.edges {
				if e.From != s || e.From == StateReaping || seen[e.To] {
					continue
				}
				if e.To.Terminal() {
					return &EdgeError{Edge: e, Err: fmt.Errorf("%w (from %s)", ErrBypassesReaping, start)}
				}
				seen[e.To] = true
				queue = append(queue, e.To)
			}
		}
	}
	return nil
}

// label is the looplab event name of an edge: the event, the destination
// when an event has several, and a mark for the kill.
func (t *Table) label(e Edge) string {
	l := e.On.String()
	if bits.OnesCount16(t.next[e.From][e.On]) > 1 {
		l += "/" + e.To.String()
	}
	if e.Then != EventNone {
		l += " then " + e.Then.String()
	}
	if e.Kills() {
		l += " +kill-executor"
	}
	return l
}

// mirror returns the looplab machine, building it on first use. t.mu is held.
func (t *Table) mirror() *lfsm.FSM {
	if t.lf == nil {
		t.buildMirror()
	}
	return t.lf
}

func (t *Table) buildMirror() {
	descs := make([]lfsm.EventDesc, 0, len(t.edges))
	for _, e := range t.edges {
		l := t.label(e)
		k := [2]uint8{uint8(e.From), uint8(e.On)}
		t.labels[k] = append(t.labels[k], l)
		descs = append(descs, lfsm.EventDesc{Name: l, Src: []string{e.From.String()}, Dst: e.To.String()})
	}
	t.lf = lfsm.NewFSM(StateCreated.String(), descs, nil)
}

// Edges returns a copy of the table's edges.
func (t *Table) Edges() []Edge { return slices.Clone(t.edges) }

// Can reports whether the table (through its looplab/fsm mirror) allows
// event ev in state s.
func (t *Table) Can(s State, ev EventType) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	lf := t.mirror()
	lf.SetState(s.String())
	for _, l := range t.labels[[2]uint8{uint8(s), uint8(ev)}] {
		if lf.Can(l) {
			return true
		}
	}
	return false
}

// Destinations lists the states event ev can lead to from s (several only
// for executor-reaped).
func (t *Table) Destinations(s State, ev EventType) []State {
	if !s.Valid() && s != StateNone || !ev.Valid() {
		return nil
	}
	var out []State
	m := t.next[s][ev]
	for m != 0 {
		out = append(out, State(bits.TrailingZeros16(m)))
		m &= m - 1
	}
	return out
}

// Owed returns the effect types owed while a task is in state s.
func (t *Table) Owed(s State) []EffectType {
	if s >= numStates {
		return nil
	}
	return slices.Clone(t.owed[s])
}
