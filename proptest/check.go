package proptest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// The invariants the harness holds at the moment they matter (an append,
// an effect reaching the world, an acknowledgement) and at every quiescent
// point (Check, CheckRecovered).

// checkAppend holds "no process of a task outlives its terminal state" at
// the moment it matters: an event that makes a task terminal is appended
// only once every process of the task is dead (an escaped descendant on a
// host without cgroups excepted: see World.Outlives).
func (h *Harness) checkAppend(task string, expected uint64, events []fsm.Event) {
	for _, e := range events {
		if e.Type != fsm.EventExecutorReaped && e.Type != fsm.EventConfigRejected {
			continue
		}
		for _, p := range h.World.Live() {
			if p.Task != task {
				continue
			}
			if !h.World.Outlives(p) {
				h.noteEscape(p)
				continue
			}
			h.violate("terminal means dead: task %q appended %s (target %s) while its %s is alive",
				task, e.Type, e.Target, describe(p))
		}
	}
}

func (h *Harness) noteEscape(p Proc) {
	h.World.mu.Lock()
	defer h.World.mu.Unlock()
	h.escapes[p.PID] = describe(p)
}

// Escapes lists the escaped descendants (on a host without cgroups) that
// the harness saw outlive their task's terminal state: the host's limit,
// reported rather than counted as a violation.
func (h *Harness) Escapes() []string {
	h.World.mu.Lock() // the checks note escapes under the world's lock
	defer h.World.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.escapes))
	for _, pid := range sortedKeys(h.escapes) {
		out = append(out, h.escapes[pid])
	}
	return out
}

// writeAhead holds invariant 4 at the moment an effect reaches the world:
// the intent that demands it is durable already (acknowledged, or committed
// by an append whose acknowledgement was lost). A spawn needs the spawn
// intent with its nonce, a launch a launch intent.
func (h *Harness) writeAhead(effect, task, nonce string) {
	want := fsm.EventLaunchIntent
	if effect == "spawn" {
		want = fsm.EventSpawnIntent
	}
	var evs []fsm.Event
	if h.mem != nil {
		evs, _, _ = h.mem.entry(task)
	} else if st := h.store(); st != nil {
		evs, _ = st.Load(context.Background(), task)
	}
	for _, e := range evs {
		if e.Type == want && (effect != "spawn" || e.Nonce == nonce) {
			return
		}
	}
	h.violate("write-ahead: %s of task %q (nonce %q) before its %s was durable", effect, task, nonce, want)
}

// committed holds invariant 7 at the moment of an acknowledgement: the
// log's committed head is at least at the acknowledged version.
func (h *Harness) committed(l store.Log, task string, version uint64) {
	t, err := l.LoadTask(context.Background(), task)
	switch {
	case err != nil:
		h.violate("acknowledged before commit: task %q v%d acknowledged, the store cannot load it: %v", task, version, err)
	case t.Version < version:
		h.violate("acknowledged before commit: task %q v%d acknowledged, the store has committed v%d", task, version, t.Version)
	}
}

func (h *Harness) acknowledge(task string, expected uint64, events []fsm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.ledger[task]
	if expected < uint64(len(l)) && l[expected].Type != fsm.EventNone {
		// Optimistic concurrency: an append at a version already
		// acknowledged means acknowledged history was overwritten.
		h.violations = append(h.violations, fmt.Sprintf("acknowledged lost: task %q: store acknowledged an append at version %d over acknowledged %s", task, expected, l[expected]))
		return
	}
	// Events committed by a generation that died before their
	// acknowledgement (or whose acknowledgement was lost) leave a gap:
	// placeholders, not checked.
	for uint64(len(l)) < expected {
		l = append(l, fsm.Event{Seq: uint64(len(l)) + 1})
	}
	l = l[:expected]
	for i, e := range events {
		e.Seq = expected + uint64(i) + 1
		l = append(l, e)
	}
	h.ledger[task] = l
}

// Violations returns the invariant violations found so far (by Check, and
// at the moment of an append or a call).
func (h *Harness) Violations() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.violations)
}

// Check verifies the invariants of the design that hold at every quiescent
// point, and fails t with every violation found:
//
//   - no process of a task outlives its terminal state (also checked at
//     the append of every terminal event): no live executor, task or
//     descendant of a task whose log is terminal (an escaped descendant on
//     a host without cgroups excepted, and listed by Escapes), and none of
//     a task the log does not know;
//   - no leak between recoveries: every live process belongs to a task in
//     a state that may own one;
//   - never a stranger signalled, and no stranger trusted;
//   - no acknowledged event lost: every acknowledged append is in the log;
//   - every log is a legal path (its fold; with Bolt, store.Check with
//     bbolt's own check too);
//   - fold(log) == live state: the driver's InspectTask equals the log's
//     fold (LoadTask) and a fold of its events (Load).
func (h *Harness) Check(t TestingT) {
	t.Helper()
	if v := h.check(); len(v) > 0 {
		t.Fatalf("invariants violated:\n  %s", strings.Join(v, "\n  "))
	}
}

// snapshot is the log as a check reads it: every task's events and folded
// state, by id.
type snapshot struct {
	ids    []string
	mem    *MemLog                // a MemLog's are read in place
	events map[string][]fsm.Event // the store's, read whole
	states map[string]fsm.Task
}

// get returns a task's events and folded state.
func (sn snapshot) get(id string) ([]fsm.Event, fsm.Task, bool) {
	if sn.mem != nil {
		return sn.mem.entry(id)
	}
	st, ok := sn.states[id]
	return sn.events[id], st, ok
}

// logs reads every task's events and folded state from the log, and (Bolt)
// the store's own check. From a MemLog it takes the events and states as
// they are, without copying (the log only ever appends).
func (h *Harness) logs() (sn snapshot, problems []string, err error) {
	if h.mem != nil {
		return snapshot{ids: h.mem.IDs(), mem: h.mem}, nil, nil
	}
	sn.states = map[string]fsm.Task{}
	sn.events = map[string][]fsm.Event{}
	ctx := context.Background()
	err = h.withStore(func(s *store.Store) error {
		rep, err := s.Check(ctx)
		if err != nil {
			return err
		}
		for _, p := range rep.Problems {
			problems = append(problems, "legal path: store check: "+p.String())
		}
		return s.All(ctx, func(id string) error {
			t, err := s.LoadTask(ctx, id)
			if err != nil {
				return err
			}
			sn.ids = append(sn.ids, id)
			sn.states[id] = t
			evs, err := s.Load(ctx, id)
			sn.events[id] = evs
			return err
		})
	})
	slices.Sort(sn.ids)
	return sn, problems, err
}

// verified is what an earlier check proved of one task's log: its first n
// events fold to folded, and its first acked acknowledged events are in it.
type verified struct {
	n      int
	folded fsm.Task
	acked  int
}

func (h *Harness) check() []string {
	v, _ := h.checkStates()
	return v
}

// checkStates runs Check's checks and returns the violations and the
// log it read.
//
// What a MemLog holds only grows, so what an earlier check proved of the
// first n events of a task's log (that they fold, to the state the log
// reports, and hold every acknowledged event) still holds: only the events
// and acknowledgements since are checked again. The real store's file is
// read and checked whole every time (it is closed and reopened by every
// generation, and a bug could change any of it). Whatever can change
// without an append (the driver's memory, the processes) is checked whole.
func (h *Harness) checkStates() ([]string, snapshot) {
	v := h.Violations()
	ctx := context.Background()
	sn, problems, err := h.logs()
	if err != nil {
		return append(v, "check could not run: "+err.Error()), sn
	}
	v = append(v, problems...)
	for _, id := range sn.ids {
		evs, st, _ := sn.get(id)
		was := h.verified[id]
		if h.mem == nil {
			was = verified{folded: fsm.Task{ID: id}}
		} else if was.n == 0 {
			was.folded = fsm.Task{ID: id}
		}
		if was.n < len(evs) || h.mem == nil {
			f, err := fsm.FoldAll(was.folded, evs[was.n:]...)
			switch {
			case err != nil:
				v = append(v, fmt.Sprintf("legal path: task %q: fold of its log: %v", id, err))
			case !h.sameTask(f, st):
				v = append(v, fmt.Sprintf("fold: task %q: LoadTask %+v != fold of Load %+v", id, st, f))
			default:
				was.n, was.folded = len(evs), f
			}
		}
		// No acknowledged event lost.
		h.mu.Lock()
		acked := h.ledger[id]
		h.mu.Unlock()
		if was.acked < len(acked) || h.mem == nil {
			if len(evs) < len(acked) {
				v = append(v, fmt.Sprintf("acknowledged lost: task %q had %d acknowledged events, the log holds %d", id, len(acked), len(evs)))
			} else {
				lost := false
				for i, a := range acked[was.acked:] {
					i += was.acked
					if a.Type == fsm.EventNone {
						continue // committed, never acknowledged
					}
					if e := evs[i]; e.Seq != a.Seq || e.Type != a.Type || e.Time != a.Time || e.Nonce != a.Nonce {
						v = append(v, fmt.Sprintf("acknowledged lost: task %q seq %d: acknowledged %s, the log holds %s", id, a.Seq, a, e))
						lost = true
					}
				}
				if !lost && h.mem != nil {
					was.acked = len(acked)
				}
			}
		}
		h.verified[id] = was
	}
	var unknown []string // acknowledged, and the log does not know the task
	h.mu.Lock()
	if len(h.ledger) > len(sn.ids) || h.mem == nil {
		for id := range h.ledger {
			if _, found := slices.BinarySearch(sn.ids, id); !found {
				unknown = append(unknown, id)
			}
		}
	}
	h.mu.Unlock()
	slices.Sort(unknown)
	for _, id := range unknown {
		h.mu.Lock()
		n := len(h.ledger[id])
		h.mu.Unlock()
		v = append(v, fmt.Sprintf("acknowledged lost: task %q had %d acknowledged events; the log does not know it", id, n))
	}
	// No process of a task outlives its terminal state; none of a task
	// in a state that owns none.
	h.mu.Lock()
	removed := h.gcRemoved // only ever added to, under mu, by a maintenance (not now: between steps)
	h.mu.Unlock()
	h.World.eachLive(func(p *Proc) {
		_, st, ok := sn.get(p.Task)
		if !ok && removed[p.Task] {
			// gc removed it once it had ended: as terminal as it was.
			ok, st.State = true, fsm.StateStopped
		}
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("leak: %s, a task the log does not know", describe(*p)))
		case st.State.OwnsExecutor():
		case !h.World.Outlives(*p):
			h.escapes[p.PID] = describe(*p) // the world's lock orders this with noteEscape's callers
		case st.State.Terminal():
			v = append(v, fmt.Sprintf("terminal means dead: %s alive, its task is %s", describe(*p), st.State))
		default:
			v = append(v, fmt.Sprintf("leak: %s alive in state %s", describe(*p), st.State))
		}
	})
	// fold(log) == live state.
	if h.Alive() {
		for _, id := range sn.ids {
			_, st, _ := sn.get(id)
			info, err := h.d.InspectTask(ctx, id)
			if err != nil {
				v = append(v, fmt.Sprintf("inspect: task %q: %v", id, err))
				continue
			}
			if !h.sameTask(info.Task, st) {
				v = append(v, fmt.Sprintf("fold != live: task %q: driver holds %s v%d %+v, its log folds to %s v%d %+v",
					id, info.State, info.Version, info.Task, st.State, st.Version, st))
			}
		}
	}
	// Never a stranger trusted or signalled (each record once: a check
	// that finds one fails).
	trusted, signals := h.World.since(h.seenTrusted, h.seenSignals)
	h.seenTrusted += len(trusted)
	h.seenSignals += len(signals)
	for _, r := range trusted {
		v = append(v, fmt.Sprintf("stranger trusted: %s of pid %d for task %q: %s", r.Via, r.PID, r.Task, r.Why))
	}
	for _, s := range signals {
		if s.Kind == KindStranger {
			v = append(v, fmt.Sprintf("stranger signalled: %s to pid %d (start %d) via %s for task %q", s.Sig, s.PID, s.Start, s.Via, s.Task))
		}
	}
	return v, sn
}

// sameTask is reflect.DeepEqual of two tasks, with the comparison of their
// specs (the costly part, and the same pair every step) remembered.
func (h *Harness) sameTask(a, b fsm.Task) bool {
	if a.Spec != b.Spec {
		if a.Spec == nil || b.Spec == nil {
			return false
		}
		k := [2]*fsm.Spec{a.Spec, b.Spec}
		if !h.sameSpecs[k] {
			if !reflect.DeepEqual(*a.Spec, *b.Spec) {
				return false
			}
			h.sameSpecs[k] = true
		}
	}
	return equalTask(a, b)
}

// equalTask compares every field of two tasks but the spec (see sameTask),
// what they point to by value. TestEqualTask_EveryField holds it to every
// field fsm.Task has.
func equalTask(a, b fsm.Task) bool {
	return a.ID == b.ID && a.State == b.State && a.Version == b.Version &&
		a.CreatedAt == b.CreatedAt && a.UpdatedAt == b.UpdatedAt && a.Nonce == b.Nonce &&
		equalPtr(a.Executor, b.Executor) && a.TaskPID == b.TaskPID && a.TaskStartTime == b.TaskStartTime &&
		equalPtr(a.Exit, b.Exit) && a.Target == b.Target && a.Reason == b.Reason && a.Cause == b.Cause &&
		slices.Equal(a.Warnings, b.Warnings) &&
		a.StopSignal == b.StopSignal && a.StopGrace == b.StopGrace && a.Restarts == b.Restarts && a.Ready == b.Ready && a.Readies == b.Readies
}

func equalPtr[T comparable](a, b *T) bool { return a == b || a != nil && b != nil && *a == *b }

// CheckRecovered verifies invariant 1 in its strong form, which holds after
// a Recover that ran with nothing injected and returned no error: the live
// executors are exactly those of the live tasks, one each, every live task
// is running with its recorded executor and task process alive, and no
// process of any other task lives (escaped descendants on a host without
// cgroups excepted, as in Check).
func (h *Harness) CheckRecovered(t TestingT) {
	t.Helper()
	v, sn := h.checkStates()
	want := map[int]string{}
	running := map[string]bool{}
	for _, id := range sn.ids {
		_, st, _ := sn.get(id)
		if st.State.Terminal() {
			continue
		}
		if st.State != fsm.StateRunning || st.Executor == nil {
			v = append(v, fmt.Sprintf("no leak: after a clean Recover task %q is %s, not running", id, st.State))
			continue
		}
		running[id] = true
		want[st.Executor.PID] = id
		want[st.TaskPID] = id
	}
	got := map[int]bool{}
	h.World.eachLive(func(p *Proc) {
		got[p.PID] = true
		switch {
		case running[p.Task] && (want[p.PID] == p.Task || p.Kind == KindDescendant):
		case !running[p.Task] && !h.World.Outlives(*p):
		default:
			v = append(v, fmt.Sprintf("no leak: after a clean Recover %s is alive but not recorded as its running task's", describe(*p)))
		}
	})
	for _, pid := range sortedKeys(want) {
		if !got[pid] {
			v = append(v, fmt.Sprintf("no leak: after a clean Recover task %q is running but its pid %d is dead", want[pid], pid))
		}
	}
	if len(v) > 0 {
		t.Fatalf("invariants violated after a clean Recover:\n  %s", strings.Join(v, "\n  "))
	}
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
