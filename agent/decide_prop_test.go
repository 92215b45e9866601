package agent

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// The convergence property: Decide, run the way the agent runs it (commit
// a plan's changes, then perform its effects, the groups driven as
// DriveGroup drives them: a copy over is followed by what its policies
// say, written ahead in its entry's record), over a simulated world where
// tasks are killed behind its back, fail, are stopped on request, where
// declarations come and go and change (their file, their count), where
// the agent crashes anywhere (between a commit and its effects, in the
// middle of a start) and the host reboots. Every decision is checked
// against the doc-comment table of decide.go, row by row (oracle, below,
// reads the table, not Decide). After every step, no allocation of any
// entry has two live copies; and once the world is left alone, every
// declared entry runs, or was stopped on request, or was given up by its
// policies; no record is left of an entry not declared, and no task of one
// is live.

// simWorld is the durable state and the process table of the simulation.
type simWorld struct {
	now     int64
	boot    string
	decl    map[string]simDecl // the config dir
	records map[string]store.Desired
	tasks   map[string]fsm.Task // the store's tasks, the process table folded in
	driven  map[string]bool     // the allocations the agent drives
	ids     int
}

type simDecl struct {
	version, count int
	refused        bool
}

func (d simDecl) digest() string { return fmt.Sprintf("v%d-c%d", d.version, d.count) }

func newSimWorld() *simWorld {
	return &simWorld{now: now, boot: "boot-1", decl: map[string]simDecl{}, records: map[string]store.Desired{},
		tasks: map[string]fsm.Task{}, driven: map[string]bool{}}
}

var (
	simRestart    = fsm.RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 2 * time.Second, Mode: fsm.RestartFail, OnSuccess: true}
	simReschedule = fsm.ReschedulePolicy{Attempts: 2, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: fsm.DelayConstant}
)

func (w *simWorld) declared(name string) Declared {
	d := w.decl[name]
	f := Declared{Name: name, Source: store.SourceDir, File: cfgDir + "/" + name + ".hcl", Digest: d.digest()}
	if d.refused {
		f.Err = "refused"
		return f
	}
	for i := range d.count {
		f.Shapes = append(f.Shapes, job.Shape{Group: "g", Index: i, Names: []string{fmt.Sprintf("%s[%d]", name, i)}})
	}
	return f
}

// newest is the newest copy of an allocation in the store (its record's,
// or a later one its driver recorded), as the converger reads it.
func (w *simWorld) newest(a store.DesiredAlloc) CopyView {
	cv := CopyView{IDs: a.Tasks, Generation: a.Generation, NotBefore: a.NotBefore, Driven: w.driven[a.ID]}
	best := -1
	for _, t := range w.tasks {
		if t.Spec.Alloc.ID == a.ID && t.Spec.Alloc.Generation > best && t.Spec.Alloc.Generation >= a.Generation {
			best = t.Spec.Alloc.Generation
			cv.IDs, cv.Generation, cv.NotBefore = t.Spec.Alloc.Tasks, t.Spec.Alloc.Generation, t.Spec.Alloc.NotBefore
		}
	}
	for _, id := range cv.IDs {
		if t, ok := w.tasks[id]; ok {
			cv.Tasks = append(cv.Tasks, t)
		} else {
			cv.Missing = append(cv.Missing, id)
		}
	}
	return cv
}

func (w *simWorld) view() View {
	v := View{Now: w.now, BootID: w.boot, ConfigDir: cfgDir, Copies: map[string]CopyView{}, Legacy: map[string]TaskView{},
		Enabled: map[string]Declared{}, Busy: map[string]bool{}}
	for _, n := range slices.Sorted(maps.Keys(w.decl)) {
		v.Files = append(v.Files, w.declared(n))
	}
	for _, n := range slices.Sorted(maps.Keys(w.records)) {
		r := w.records[n]
		v.Records = append(v.Records, r)
		for _, a := range r.Allocs {
			v.Copies[a.ID] = w.newest(a)
		}
	}
	return v
}

// commit applies a plan's changes as ChangeDesired would (all or nothing,
// revisions checked), drawing ids as the converger does.
func (w *simWorld) commit(t *rapid.T, changes []Change) {
	for _, c := range changes {
		cur, ok := w.records[c.Desired.Name]
		if (ok && cur.Rev != c.Desired.Rev) || (!ok && c.Desired.Rev != 0) {
			t.Fatalf("a change of %q expects revision %d, the record is at %d", c.Desired.Name, c.Desired.Rev, cur.Rev)
		}
	}
	newAlloc := func(s job.Shape) store.DesiredAlloc {
		w.ids++
		a := store.DesiredAlloc{Group: s.Group, Index: s.Index, ID: fmt.Sprintf("al%d", w.ids)}
		for _, n := range s.Names {
			a.Tasks = append(a.Tasks, fmt.Sprintf("%s-%d", n, w.ids))
		}
		return a
	}
	for _, c := range changes {
		if c.Delete {
			delete(w.records, c.Desired.Name)
			continue
		}
		d := c.Desired
		if c.NewAllocs != nil {
			d.Allocs = nil
			for _, s := range c.NewAllocs {
				d.Allocs = append(d.Allocs, newAlloc(s))
			}
		}
		d.Allocs = slices.Clone(d.Allocs)
		for i, s := range c.Renew {
			d.Allocs[i] = newAlloc(s)
		}
		d.Rev++
		w.records[d.Name] = d
	}
}

// create records a copy's task; due at notBefore.
func (w *simWorld) create(a store.DesiredAlloc, name, id string, gen int, notBefore int64, rescheduled []fsm.RescheduleEvent, restarts fsm.RestartState) {
	r, rs := simReschedule, simRestart
	w.tasks[id] = fsm.Task{ID: id, State: fsm.StateCreated, UpdatedAt: w.now, Spec: &fsm.Spec{Name: name, Restart: &rs,
		Alloc: &fsm.Alloc{ID: a.ID, Index: a.Index, Tasks: []string{id}, Generation: gen, NotBefore: notBefore, Reschedule: &r,
			Rescheduled: rescheduled, Restarts: restarts}}}
}

// run starts a created task (a driver's step).
func (w *simWorld) run(id string) {
	t := w.tasks[id]
	t.State, t.Nonce, t.TaskPID, t.UpdatedAt = fsm.StateRunning, "n", 1, w.now
	t.Executor = &fsm.Identity{PID: 1, BootID: w.boot}
	w.tasks[id] = t
}

// drive is DriveGroup over the simulation: the copy's due tasks started;
// once it is over, the copy that follows it written ahead in the record,
// then created; or, when nothing follows, the drive ends.
func (w *simWorld) drive(t *rapid.T, alloc string) {
	for w.driven[alloc] {
		var a store.DesiredAlloc
		for _, r := range w.records {
			for _, x := range r.Allocs {
				if x.ID == alloc {
					a = x
				}
			}
		}
		cv := w.newest(store.DesiredAlloc{ID: alloc, Tasks: a.Tasks, Generation: a.Generation})
		if len(cv.Tasks) == 0 {
			delete(w.driven, alloc)
			return
		}
		for _, tk := range cv.Tasks {
			if tk.State == fsm.StateCreated && tk.Spec.Alloc.NotBefore <= w.now {
				w.run(tk.ID)
			}
		}
		cv = w.newest(store.DesiredAlloc{ID: alloc, Tasks: cv.IDs, Generation: cv.Generation})
		if cv.live() {
			return
		}
		end := fsm.GroupState{Tasks: cv.Tasks, Missing: cv.Missing}.End(w.boot)
		next := fsm.NextCopy(end, allocOf(cv.Tasks), restartOf(cv.Tasks, end.Task))
		if !next.Again || end.Kind == fsm.EndInterrupted {
			delete(w.driven, alloc)
			return
		}
		// Written ahead in its entry's record (copyHook), when one holds it.
		id := fmt.Sprintf("%s-%s-r%d", cv.Tasks[0].Spec.Name, alloc, next.Alloc.Generation)
		held := false
		for n, r := range w.records {
			for i, x := range r.Allocs {
				if x.ID == alloc {
					r.Allocs = slices.Clone(r.Allocs)
					r.Allocs[i].Tasks, r.Allocs[i].Generation, r.Allocs[i].NotBefore = []string{id}, next.Alloc.Generation, next.Alloc.NotBefore
					r.Rev++
					w.records[n], held = r, true
				}
			}
		}
		if !held {
			delete(w.driven, alloc)
			return
		}
		w.create(a, cv.Tasks[0].Spec.Name, id, next.Alloc.Generation, next.Alloc.NotBefore, next.Alloc.Rescheduled, next.Alloc.Restarts)
	}
}

func (w *simWorld) driveAll(t *rapid.T) {
	for _, alloc := range slices.Sorted(maps.Keys(w.driven)) {
		w.drive(t, alloc)
	}
}

// perform runs an effect; crashed, it stops half way (a start records its
// first copy's tasks, nothing drives them: the agent died).
func (w *simWorld) perform(t *rapid.T, e Effect, crashed bool) {
	for _, a := range e.Allocs {
		switch e.Kind {
		case EffectStart:
			for _, id := range a.Tasks {
				if _, ok := w.tasks[id]; ok {
					t.Fatalf("start of %s, which the store holds", id)
				}
				w.create(a, fmt.Sprintf("%s[%d]", e.Name, a.Index), id, 0, 0, nil, fsm.RestartState{})
			}
			if !crashed {
				w.driven[a.ID] = true
				w.drive(t, a.ID)
			}
		case EffectDrive:
			if !crashed {
				w.driven[a.ID] = true
				w.drive(t, a.ID)
			}
		case EffectStop:
			for _, tk := range w.newest(a).Tasks {
				if !tk.State.Terminal() {
					tk.State, tk.UpdatedAt = fsm.StateStopped, w.now
					if tk.Nonce != "" {
						tk.StopSignal = 15
					}
					w.tasks[tk.ID] = tk
				}
			}
			if !crashed {
				w.drive(t, a.ID)
			}
		}
	}
}

// live checks that no allocation has two live copies, nor any slot of an
// entry two live tasks.
func (w *simWorld) live(t *rapid.T) {
	bySlot := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
		st := w.tasks[id]
		if st.State.Terminal() {
			continue
		}
		if prev, dup := bySlot[st.Spec.Name]; dup {
			t.Fatalf("%s runs twice: %s and %s", st.Spec.Name, prev, id)
		}
		bySlot[st.Spec.Name] = id
	}
}

// oracle is the row of decide.go's table for name in v, read from the
// table itself (the simulation declares no feed, enable, version-1
// record, unreadable log or refused config dir).
func oracle(v View, name string) Row {
	var rec *store.Desired
	for i := range v.Records {
		if v.Records[i].Name == name {
			rec = &v.Records[i]
		}
	}
	var decl *Declared
	for i := range v.Files {
		if v.Files[i].Name == name {
			decl = &v.Files[i]
		}
	}
	live := false
	if rec != nil {
		for _, a := range rec.Allocs {
			live = live || v.Copies[a.ID].live()
		}
	}
	switch {
	case v.Busy[name]:
		return RowBusy
	case rec == nil && decl.Err != "":
		return RowRefusedNew
	case rec == nil:
		return RowIntent
	case decl == nil && live && !rec.Retiring:
		return RowRetire
	case decl == nil && live:
		return RowStopGone
	case decl == nil:
		return RowForget
	case decl.Err != "":
		return RowRefused
	case (decl.Digest != rec.Digest || rec.Retiring) && live && !rec.Retiring:
		return RowRetire
	case (decl.Digest != rec.Digest || rec.Retiring) && live:
		return RowStopChanged
	case decl.Digest != rec.Digest || rec.Retiring:
		return RowIntent
	}
	row := RowSteady
	for _, a := range rec.Allocs { // the first row that applies, by the table's order
		c := v.Copies[a.ID]
		switch {
		case !slices.Equal(c.IDs, a.Tasks):
			return RowFollow
		case c.Driven:
		case a.Generation == 0 && len(c.Tasks) == 0:
			row = min(row, RowStart)
		case c.live():
			row = min(row, RowDrive)
		default:
			end := fsm.GroupState{Tasks: c.Tasks, Missing: c.Missing}.End(v.BootID)
			switch {
			case end.Kind == fsm.EndInterrupted && a.Generation == 0:
				row = min(row, RowRenew)
			case fsm.NextCopy(end, allocOf(c.Tasks), restartOf(c.Tasks, end.Task)).Again:
				row = min(row, RowDrive)
			}
		}
	}
	return row
}

// agentRound is one round of the agent: decide (each name's row checked
// against the oracle); commit, or perform the effects (all, or, with
// crashAt >= 0, those before it, the one at it half done, then the agent
// dies: nothing is driven any more). It reports whether the round had
// nothing to do.
func (w *simWorld) agentRound(t *rapid.T, crashAt int) bool {
	v := w.view()
	p := Decide(v)
	for name, row := range p.Rows {
		if want := oracle(v, name); row != want {
			t.Fatalf("%s: Decide took row %s, the table's is %s\nview %+v", name, row, want, v)
		}
	}
	if len(p.Changes) > 0 {
		w.commit(t, p.Changes)
		return false
	}
	for i, e := range p.Effects {
		if crashAt >= 0 && i >= crashAt {
			if i == crashAt {
				w.perform(t, e, true)
			}
			clear(w.driven)
			return false
		}
		w.perform(t, e, false)
	}
	return len(p.Effects) == 0
}

// nextDue is the earliest due time of a created task after now (0: none).
func (w *simWorld) nextDue() int64 {
	due := int64(0)
	for _, t := range w.tasks {
		if nb := t.Spec.Alloc.NotBefore; t.State == fsm.StateCreated && nb > w.now && (due == 0 || nb < due) {
			due = nb
		}
	}
	return due
}

func TestDecide_Property(t *testing.T) {
	names := []string{"a", "b", "c"}
	rapid.Check(t, func(t *rapid.T) {
		w := newSimWorld()
		held := map[string]string{} // name -> the declaration (digest) under which one of its copies was stopped on request
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 10).Draw(t, "what") {
			case 0: // declare, or change, a file
				n := rapid.SampledFrom(names).Draw(t, "name")
				d := simDecl{version: rapid.IntRange(0, 2).Draw(t, "version"), count: rapid.IntRange(1, 2).Draw(t, "count"),
					refused: rapid.IntRange(0, 9).Draw(t, "refused") == 0}
				w.decl[n] = d
			case 1: // remove a file
				n := rapid.SampledFrom(names).Draw(t, "name")
				delete(w.decl, n)
			case 2: // a task's executor and task are killed
				for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
					if st := w.tasks[id]; st.State == fsm.StateRunning && rapid.Bool().Draw(t, "kill "+id) {
						st.State, st.UpdatedAt, st.Reason = fsm.StateLost, w.now, "executor gone"
						w.tasks[id] = st
					}
				}
			case 3: // a task fails (its executor's restarts spent)
				for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
					if st := w.tasks[id]; st.State == fsm.StateRunning && rapid.Bool().Draw(t, "fail "+id) {
						st.State, st.UpdatedAt, st.Exit = fsm.StateExited, w.now, &fsm.ExitStatus{Code: 1}
						w.tasks[id] = st
					}
				}
			case 4: // tether stop of a task
				for _, id := range slices.Sorted(maps.Keys(w.tasks)) {
					if st := w.tasks[id]; !st.State.Terminal() && rapid.Bool().Draw(t, "stop "+id) {
						st.State, st.UpdatedAt, st.StopSignal = fsm.StateStopped, w.now, 15
						w.tasks[id] = st
						for n, r := range w.records {
							for _, a := range r.Allocs {
								if a.ID == st.Spec.Alloc.ID && !r.Retiring {
									held[n] = r.Digest
								}
							}
						}
					}
				}
			case 5: // a power cut: every task lost on the next boot, the agent with them
				w.boot += "'"
				for id, st := range w.tasks {
					if st.State == fsm.StateRunning {
						st.State, st.UpdatedAt = fsm.StateLost, w.now
						w.tasks[id] = st
					}
				}
				clear(w.driven)
			case 6: // the agent crashes in a round
				w.agentRound(t, rapid.IntRange(0, 2).Draw(t, "crash at"))
			case 7: // time passes
				w.now += int64(time.Duration(rapid.IntRange(0, 6).Draw(t, "seconds")) * time.Second)
			default:
				w.agentRound(t, -1)
			}
			w.driveAll(t)
			w.live(t)
		}
		// Left alone, the agent converges.
		for i := 0; ; i++ {
			if w.agentRound(t, -1) {
				if due := w.nextDue(); due > 0 {
					w.now = due
					w.driveAll(t)
					continue
				}
				break
			}
			w.driveAll(t)
			w.live(t)
			if i > 300 {
				t.Fatalf("no convergence after 300 rounds: records %+v", w.records)
			}
		}
		for _, n := range names {
			r, rec := w.records[n]
			d, declared := w.decl[n]
			switch {
			case !declared && rec:
				t.Fatalf("%q is not declared, its record is left: %+v", n, r)
			case declared && !rec && !d.refused:
				t.Fatalf("%q is declared and has no record", n)
			case !declared || !rec || d.refused:
			default:
				if r.Digest != d.digest() && !d.refused {
					t.Fatalf("%q: its record is of declaration %s, the file's is %s", n, r.Digest, d.digest())
				}
				for _, a := range r.Allocs {
					cv := w.newest(a)
					end := fsm.GroupState{Tasks: cv.Tasks, Missing: cv.Missing}.End(w.boot)
					switch {
					case cv.live() && !cv.Driven:
						t.Fatalf("%q: allocation %s is live and nobody drives it", n, a.ID)
					case cv.live():
					case end.Kind == fsm.EndStopped:
						// Stopped on request, under the declaration its record
						// still has (a change since would have replaced it).
						if held[n] != r.Digest {
							t.Fatalf("%q: allocation %s is stopped, and nobody asked\nrecords %+v\ntasks %+v", n, a.ID, w.records, w.tasks)
						}
					case fsm.NextCopy(end, allocOf(cv.Tasks), restartOf(cv.Tasks, end.Task)).Again:
						t.Fatalf("%q: allocation %s ended (%s) with a copy owed, and it was not made", n, a.ID, end.Reason)
					}
				}
			}
		}
		for id, st := range w.tasks {
			name := st.Spec.Name[:1]
			if d, declared := w.decl[name]; (!declared || d.refused && w.records[name].Digest == "") && !st.State.Terminal() {
				t.Fatalf("task %s of the undeclared %q is %s", id, name, st.State)
			}
		}
	})
}
