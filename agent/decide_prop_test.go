package agent

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// The convergence property: Decide, run the way the agent runs it
// (commit a plan's changes, then perform its effects), over a simulated
// world where tasks are killed behind its back, stopped on request, where
// declarations come and go and change, where the agent crashes anywhere
// (between a commit and its effects, in the middle of a start) and the
// host reboots. After every step, no desired name has two live tasks; and
// once the world is left alone, every declared name has a running task or
// has settled with a reason, no record is left for a name not declared,
// and no task of an undeclared name is live.

// simWorld is the durable state and the process table of the simulation.
type simWorld struct {
	now     int64
	boot    string
	decl    map[string]fsm.Spec // the config dir
	records map[string]store.Desired
	tasks   map[string]fsm.Task // the store's tasks (state and spec), the process table folded in
	ids     int
}

func newSimWorld() *simWorld {
	return &simWorld{now: now, boot: "boot-1", decl: map[string]fsm.Spec{}, records: map[string]store.Desired{}, tasks: map[string]fsm.Task{}}
}

func (w *simWorld) view() View {
	v := View{Now: w.now, BootID: w.boot, ConfigDir: cfgDir, Tasks: map[string]TaskView{}}
	for _, n := range slices.Sorted(maps.Keys(w.decl)) {
		v.Files = append(v.Files, Declared{Name: n, Source: store.SourceDir, File: cfgDir + "/" + n + ".hcl", Spec: w.decl[n]})
	}
	for _, n := range slices.Sorted(maps.Keys(w.records)) {
		v.Records = append(v.Records, w.records[n])
	}
	for id, t := range w.tasks {
		v.Tasks[id] = TaskView{Task: t}
	}
	return v
}

// commit applies a plan's changes as ChangeDesired would (all or nothing,
// revisions checked).
func (w *simWorld) commit(t *rapid.T, changes []Change) {
	for _, c := range changes {
		cur, ok := w.records[c.Desired.Name]
		if (ok && cur.Rev != c.Desired.Rev) || (!ok && c.Desired.Rev != 0) {
			t.Fatalf("a change of %q expects revision %d, the record is at %d", c.Desired.Name, c.Desired.Rev, cur.Rev)
		}
	}
	for _, c := range changes {
		if c.Delete {
			delete(w.records, c.Desired.Name)
			continue
		}
		d := c.Desired
		if c.NewTask {
			w.ids++
			d.Task = fmt.Sprintf("%s-%d", d.Name, w.ids)
		}
		d.Rev++
		w.records[d.Name] = d
	}
}

// perform runs an effect; crashed, a start records a task the next
// agent's Recover finds interrupted (failed).
func (w *simWorld) perform(t *rapid.T, e Effect, crashed bool) {
	switch e.Kind {
	case EffectStart:
		if _, ok := w.tasks[e.Task]; ok {
			return // ErrTaskExists
		}
		spec := e.Spec
		st := fsm.Task{ID: e.Task, State: fsm.StateRunning, Spec: &spec, UpdatedAt: w.now, Nonce: "n",
			Executor: &fsm.Identity{PID: 1, BootID: w.boot}}
		if crashed {
			st.State, st.Reason = fsm.StateFailed, "start-interrupted"
		}
		w.tasks[e.Task] = st
	case EffectStop:
		if st := w.tasks[e.Task]; st.State == fsm.StateRunning {
			st.State, st.UpdatedAt = fsm.StateStopped, w.now
			w.tasks[e.Task] = st
		}
	}
}

func (w *simWorld) live(t *rapid.T) {
	byName := map[string]string{}
	for id, st := range w.tasks {
		if st.State.Terminal() {
			continue
		}
		if prev, dup := byName[st.Spec.Name]; dup {
			t.Fatalf("desired task %q runs twice: %s and %s", st.Spec.Name, prev, id)
		}
		byName[st.Spec.Name] = id
	}
}

// agentRound is one round of the agent: decide; commit, or perform the
// effects (all, or, with crashAt >= 0, those before it, the one at it
// interrupted).
func (w *simWorld) agentRound(t *rapid.T, crashAt int) (settled bool) {
	p := Decide(w.view())
	if len(p.Changes) > 0 {
		w.commit(t, p.Changes)
		return false
	}
	for i, e := range p.Effects {
		if crashAt >= 0 && i >= crashAt {
			if i == crashAt {
				w.perform(t, e, true)
			}
			return false
		}
		w.perform(t, e, false)
	}
	if len(p.Effects) > 0 {
		return false
	}
	if p.Wake > 0 {
		w.now = p.Wake
		return false
	}
	return true
}

func TestDecide_ConvergesWithoutRunningATaskTwice(t *testing.T) {
	names := []string{"a", "b", "c"}
	rapid.Check(t, func(t *rapid.T) {
		w := newSimWorld()
		spec := func(name string, v int) fsm.Spec {
			return fsm.Spec{Name: name, Driver: "raw_exec", Command: "/bin/" + name, Args: []string{fmt.Sprint(v)},
				Restart: &fsm.RestartPolicy{Attempts: rapid.IntRange(0, 2).Draw(t, "attempts"), Interval: time.Hour,
					Delay: time.Duration(rapid.IntRange(0, 2).Draw(t, "delay")) * time.Second, Mode: fsm.RestartFail}}
		}
		held := map[string]string{} // name -> the task stopped on request since its declaration last changed
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "what") {
			case 0: // declare, or change, a task file
				n := rapid.SampledFrom(names).Draw(t, "name")
				w.decl[n] = spec(n, rapid.IntRange(0, 2).Draw(t, "version"))
				delete(held, n) // a change starts it again (an unchanged one too: the test does not compare)
			case 1: // remove a task file
				n := rapid.SampledFrom(names).Draw(t, "name")
				delete(w.decl, n)
				delete(held, n)
			case 2: // a task's executor and task are killed
				for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
					if st := w.tasks[id]; st.State == fsm.StateRunning && rapid.Bool().Draw(t, "kill "+id) {
						st.State, st.UpdatedAt, st.Reason = fsm.StateLost, w.now, "executor gone"
						w.tasks[id] = st
					}
				}
			case 3: // tether stop of a task
				for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
					if st := w.tasks[id]; st.State == fsm.StateRunning && rapid.Bool().Draw(t, "stop "+id) {
						st.State, st.UpdatedAt = fsm.StateStopped, w.now
						w.tasks[id] = st
						if d, ok := w.decl[st.Spec.Name]; ok && store.SpecEqual(st.Spec, ptr(Effective(d))) {
							held[st.Spec.Name] = id
						}
					}
				}
			case 4: // a power cut: every task lost on the next boot
				w.boot += "'"
				for id, st := range w.tasks {
					if st.State == fsm.StateRunning {
						st.State, st.UpdatedAt = fsm.StateLost, w.now
						w.tasks[id] = st
					}
				}
			case 5: // the agent crashes in a round
				w.agentRound(t, rapid.IntRange(0, 2).Draw(t, "crash at"))
			case 6: // time passes
				w.now += int64(time.Duration(rapid.IntRange(0, 3).Draw(t, "seconds")) * time.Second)
			default:
				w.agentRound(t, -1)
			}
			w.live(t)
		}
		// Left alone, the agent converges.
		for i := 0; !w.agentRound(t, -1); i++ {
			w.live(t)
			if i > 200 {
				t.Fatalf("no convergence after 200 rounds: records %+v", w.records)
			}
		}
		for _, n := range names {
			r, rec := w.records[n]
			_, declared := w.decl[n]
			switch {
			case !declared && rec:
				t.Fatalf("%q is not declared, its record is left: %+v", n, r)
			case declared && !rec:
				t.Fatalf("%q is declared and has no record", n)
			case declared:
				st := w.tasks[r.Task]
				if st.State != fsm.StateRunning && r.Settled != r.Task {
					t.Fatalf("%q: its task %s is %s and it has not settled: %+v", n, r.Task, st.State, r)
				}
				if r.Settled != "" && r.Reason == "" {
					t.Fatalf("%q settled without a reason", n)
				}
				if id, ok := held[n]; ok && (r.Task != id || r.Settled != id) {
					t.Fatalf("%q: its task %s was stopped on request and its file did not change, yet it is at %s (settled %q)", n, id, r.Task, r.Settled)
				}
			}
		}
		for id, st := range w.tasks {
			if _, declared := w.decl[st.Spec.Name]; !declared && !st.State.Terminal() {
				t.Fatalf("task %s of the undeclared %q is %s", id, st.Spec.Name, st.State)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }
