package agent

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Convergence.
//
// Decide is the agent's pure core, as fsm.Step is the driver's: from what
// is declared (the config dir's task files, the registrations), what is
// recorded (the desired records, the folded state of each record's task)
// and the time, it returns what to do as data, and does nothing itself.
// The agent's loop (converge.go) then, as a driver owner does:
//
//  1. writes every record change of the plan in one commit, waiting for the
//     fsync (write-ahead: a start's task id and its restart count are
//     durable before the start; a decision to stop restarting is durable
//     before it is shown);
//  2. performs the effects (start, stop) of the names the commit did not
//     touch, each in a goroutine whose outcome comes back as an input;
//  3. decides again from the new state.
//
// Every decision reads only durable state and the process table (through
// the driver, which records a task lost once its executor is gone), so a
// crash anywhere is finished by the next agent's first decision:
//
//	record's task   its state          decision
//	none            -                  intent: a new task id (a change)
//	not in store    -                  start it (at NotBefore): an owed start
//	live            spec differs       stop it (the replacement starts once
//	                                   it is stopped)
//	live            same spec          nothing (the driver supervises it)
//	terminal        spec differs       intent: a new task, the count reset
//	terminal        settled on it      nothing
//	stopped         same spec          settle: stopped on request, held
//	failed          refused its spec   settle: retrying cannot help
//	exited          same spec          settle: its executor's policy ended it
//	lost            on another boot    intent at once, no attempt counted
//	lost, failed    -                  the policy's Next: an intent after its
//	                                   delay (the attempt counted), or settle
//
// A record whose declaration is gone (its file removed, or disabled) stops
// its task, then is deleted. At most one task per name is ever live: a new
// task id is recorded only once the previous task is terminal, and only the
// recorded task is ever started.

// Declared is a desired task as its source declares it now.
type Declared struct {
	Name   string
	Source store.DesiredSource
	File   string
	Spec   fsm.Spec
}

// FileProblem is a task file of the config dir the agent refuses: unsafe,
// not parsable, or declaring a name declared already.
type FileProblem struct {
	File string
	Name string // the task it declares, when known
	Err  error
}

func (p FileProblem) String() string {
	if p.Name != "" {
		return fmt.Sprintf("%s (task %q): %v", p.File, p.Name, p.Err)
	}
	return fmt.Sprintf("%s: %v", p.File, p.Err)
}

// TaskView is what the agent knows of a record's task: its folded state
// (StateNone when the store does not hold it), and whether it ended
// because its spec was refused before anything was spawned.
type TaskView struct {
	Task     fsm.Task
	Rejected bool
	// Err is why its log could not be read (a damaged store): its desired
	// task is left as it is.
	Err string
}

// View is everything a decision reads.
type View struct {
	Now    int64  // Unix ns
	BootID string // this boot's (a task lost on another boot is no failure of its own)
	// ConfigDir is the agent's config dir ("" for none): a record declared
	// by a file outside it is left alone.
	ConfigDir string
	// Files are the tasks the config dir's files declare; Problems the
	// files refused. DirErr is why the config dir itself was refused (its
	// tasks are then left as they are: nothing of it is believed).
	Files    []Declared
	Problems []FileProblem
	DirErr   string
	// FeedDir is the name the Feed's tasks are declared under ("" for no
	// feed; its tasks are among Files and Problems); FeedErr says why its
	// state is not known (its records are then left as they are).
	FeedDir string
	FeedErr string
	// Records are the desired records, Tasks the state of the tasks they
	// name (by id).
	Records []store.Desired
	Tasks   map[string]TaskView
	// Busy are the names with an effect in flight: decided again once it
	// is over.
	Busy map[string]bool
}

// Change is a record change of a plan. NewTask asks the caller to give
// the record a fresh task id before it is written (Decide is pure: ids are
// drawn outside it).
type Change struct {
	store.DesiredChange
	NewTask bool
}

// EffectKind is what an effect does.
type EffectKind uint8

const (
	// EffectStart starts the record's task (its id durable already).
	EffectStart EffectKind = iota + 1
	// EffectStop stops a live task (replaced, or its declaration gone).
	EffectStop
)

func (k EffectKind) String() string {
	switch k {
	case EffectStart:
		return "start"
	case EffectStop:
		return "stop"
	}
	return fmt.Sprintf("effect(%d)", uint8(k))
}

// Effect is one effect of a plan.
type Effect struct {
	Kind   EffectKind
	Name   string
	Task   string
	Spec   fsm.Spec // EffectStart: what to run (its policy filled in)
	Reason string
}

// Plan is a decision.
type Plan struct {
	Changes []Change
	Effects []Effect
	// Watch are the live tasks of desired records: the caller waits on each
	// (the driver reconciles a task nobody drives as it waits, so a gone
	// executor is recorded lost, and decided on).
	Watch []string
	// Wake is when the earliest delayed start is due (Unix ns; 0: none).
	Wake int64
	// Notes say, per name, what keeps it from converging (a refused file,
	// a conflict); Problems are the refused files no name is known for.
	Notes    map[string]string
	Problems []string
	// Pending are the names with work left (a change, an effect, a
	// delayed start, an effect in flight).
	Pending map[string]bool
}

// Effective is the spec a desired task runs: its own, with Nomad's service
// restart policy when it has no restart block (a desired task is a
// service: with no policy of its own it is restarted after Nomad's service
// delay, and settles once that policy gives up).
func Effective(spec fsm.Spec) fsm.Spec {
	if spec.Restart == nil {
		p := fsm.DefaultServiceRestart
		spec.Restart = &p
	}
	return spec
}

// Decide returns the plan for v. It is pure: the same view gives the same
// plan.
func Decide(v View) Plan {
	p := Plan{Notes: map[string]string{}, Pending: map[string]bool{}}
	records := map[string]store.Desired{}
	for _, r := range v.Records {
		records[r.Name] = r
	}
	badFiles := map[string]string{}
	for _, fp := range v.Problems {
		badFiles[fp.File] = fp.Err.Error()
		if fp.Name == "" {
			p.Problems = append(p.Problems, fp.String())
		}
	}
	files := declaredByName(v, records, &p)
	names := make([]string, 0, len(records)+len(files))
	for n := range records {
		names = append(names, n)
	}
	for n := range files {
		if _, ok := records[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if v.Busy[name] {
			p.Pending[name] = true
			continue
		}
		r, hasRecord := records[name]
		f, hasFile := files[name]
		d := decider{v: v, p: &p, name: name}
		switch {
		case !hasRecord:
			d.change(store.Desired{Name: name, Source: store.SourceDir, File: f.File,
				Restart: fsm.RestartState{WindowStart: v.Now}}, false, true)
		case r.Task != "" && v.Tasks[r.Task].Err != "":
			p.Notes[name] = "its task's log cannot be read: " + v.Tasks[r.Task].Err + "; left as it is (tether check says more)"
		case r.Disabled:
			d.remove(r, "disabled")
		case r.Source == store.SourceDir && v.DirErr != "" && underDir(r.File, v.ConfigDir):
			p.Notes[name] = v.DirErr + "; its task is left as it is"
			d.watchLive(r)
		case r.Source == store.SourceDir && v.FeedErr != "" && underDir(r.File, v.FeedDir):
			p.Notes[name] = v.FeedErr + "; its task is left as it is"
			d.watchLive(r)
		case r.Source == store.SourceDir && !underDir(r.File, v.ConfigDir) && !underDir(r.File, v.FeedDir):
			where := "the agent has no --config-dir"
			if v.ConfigDir != "" {
				where = "it is not in " + v.ConfigDir
			}
			p.Notes[name] = fmt.Sprintf("declared in %s, and %s: left as it is (disable it by removing its file with the right --config-dir)", r.File, where)
		case r.Source == store.SourceDir && !hasFile:
			if why, bad := badFiles[r.File]; bad {
				p.Notes[name] = fmt.Sprintf("%s: %s; its task is left as it is until the file is fixed", r.File, why)
				d.watchLive(r)
				continue
			}
			d.remove(r, "its task file "+r.File+" is gone")
		case r.Source == store.SourceDir:
			if f.File != r.File { // the task moved to another file
				r2 := r
				r2.File = f.File
				d.change(r2, false, false)
				continue
			}
			d.converge(r, f.Spec)
		case r.Spec == nil: // an enabled record keeps its spec; the store checks it
			p.Notes[name] = "its registration has no spec: enable it again"
		default:
			d.converge(r, *r.Spec)
		}
	}
	return p
}

// declaredByName indexes the config dir's tasks by name. A name declared by
// several files goes to the file its record names, else to the first file
// in path order; the others are refused, as is a file declaring a name
// that is registered (tether enable).
func declaredByName(v View, records map[string]store.Desired, p *Plan) map[string]Declared {
	byName := map[string][]Declared{}
	for _, f := range v.Files {
		byName[f.Name] = append(byName[f.Name], f)
	}
	out := map[string]Declared{}
	for name, fs := range byName {
		slices.SortFunc(fs, func(a, b Declared) int { return cmp.Compare(a.File, b.File) })
		win := fs[0]
		r, ok := records[name]
		if ok && r.Source == store.SourceEnabled {
			var paths []string
			for _, f := range fs {
				paths = append(paths, f.File)
			}
			p.Problems = append(p.Problems, fmt.Sprintf("%s: task %q: %v: it is registered with tether enable (disable it, or remove the file)",
				strings.Join(paths, ", "), name, ErrNameConflict))
			continue
		}
		if ok {
			for _, f := range fs {
				if f.File == r.File {
					win = f
				}
			}
		}
		for _, f := range fs {
			if f.File != win.File {
				p.Problems = append(p.Problems, fmt.Sprintf("%s: task %q: %v: %s declares it already; this file is ignored",
					f.File, name, ErrNameConflict, win.File))
			}
		}
		out[name] = win
	}
	return out
}

func underDir(file, dir string) bool {
	return dir != "" && filepath.Dir(file) == filepath.Clean(dir)
}

// decider decides for one name.
type decider struct {
	v    View
	p    *Plan
	name string
}

func (d decider) change(r store.Desired, del, newTask bool) {
	if newTask {
		r.Task = ""
	}
	d.p.Changes = append(d.p.Changes, Change{DesiredChange: store.DesiredChange{Desired: r, Delete: del}, NewTask: newTask})
	d.p.Pending[d.name] = true
}

func (d decider) effect(e Effect) {
	e.Name = d.name
	d.p.Effects = append(d.p.Effects, e)
	d.p.Pending[d.name] = true
}

func (d decider) task(id string) (TaskView, bool) {
	if id == "" {
		return TaskView{}, false
	}
	t, ok := d.v.Tasks[id]
	return t, ok && t.Task.State != fsm.StateNone
}

func (d decider) watchLive(r store.Desired) {
	if t, ok := d.task(r.Task); ok && !t.Task.State.Terminal() {
		d.p.Watch = append(d.p.Watch, r.Task)
	}
}

// remove stops the record's task if it is live, else deletes the record.
func (d decider) remove(r store.Desired, why string) {
	if t, ok := d.task(r.Task); ok && !t.Task.State.Terminal() {
		d.p.Watch = append(d.p.Watch, r.Task)
		d.effect(Effect{Kind: EffectStop, Task: r.Task, Reason: why})
		return
	}
	d.change(store.Desired{Name: r.Name, Rev: r.Rev}, true, false)
}

// converge decides for a record whose declaration is want.
func (d decider) converge(r store.Desired, want fsm.Spec) {
	eff := Effective(want)
	t, exists := d.task(r.Task)
	switch {
	case r.Task == "":
		if r.Restart == (fsm.RestartState{}) {
			r.Restart.WindowStart = d.v.Now
		}
		d.change(r, false, true)
		return
	case !exists:
		if r.NotBefore > d.v.Now {
			d.p.Pending[d.name] = true
			if d.p.Wake == 0 || r.NotBefore < d.p.Wake {
				d.p.Wake = r.NotBefore
			}
			return
		}
		d.effect(Effect{Kind: EffectStart, Task: r.Task, Spec: eff})
		return
	}
	st := t.Task
	changed := !store.SpecEqual(st.Spec, &eff)
	if !st.State.Terminal() {
		d.p.Watch = append(d.p.Watch, r.Task)
		if changed {
			d.effect(Effect{Kind: EffectStop, Task: r.Task, Reason: "its declaration changed: replaced"})
		}
		return
	}
	settle := func(reason string) {
		r.Settled, r.Reason = r.Task, reason
		d.change(r, false, false)
	}
	again := func(restart fsm.RestartState, notBefore int64, reason string) {
		r.Settled, r.Reason, r.Restart, r.NotBefore = "", reason, restart, notBefore
		d.change(r, false, true)
	}
	switch {
	case changed:
		again(fsm.RestartState{WindowStart: d.v.Now}, 0, "its declaration changed")
	case r.Settled == r.Task:
		// settled: nothing until its declaration changes or it is started again
	case st.State == fsm.StateStopped:
		settle("stopped on request: it starts again when its declaration changes, or when it is started or enabled again")
	case t.Rejected:
		settle("its spec was refused: " + st.Reason)
	case st.State == fsm.StateExited:
		settle(fmt.Sprintf("exited (%s) after %d restarts by its executor, and its restart policy ends it there", exitOf(st), st.Restarts))
	case st.State == fsm.StateLost && st.Executor != nil && d.v.BootID != "" && st.Executor.BootID != d.v.BootID:
		again(r.Restart, 0, "lost to a reboot: started again (no restart attempt counted)")
	default: // lost, failed
		next, dec := eff.Restart.Next(r.Restart, exitOf(st), st.UpdatedAt)
		if !dec.Restart {
			r.Restart = next
			settle(fmt.Sprintf("%s (%s); %s", st.State, cmp.Or(st.Reason, "no reason recorded"), dec.Reason))
			return
		}
		again(next, st.UpdatedAt+int64(dec.Delay), fmt.Sprintf("%s (%s): %s", st.State, cmp.Or(st.Reason, "no reason recorded"), dec.Reason))
	}
}

// exitOf is the exit status a restart decision weighs: the task's own when
// it was collected, else a failure (the task did not end by itself).
func exitOf(t fsm.Task) fsm.ExitStatus {
	if t.Exit != nil && (t.State == fsm.StateExited || t.Exit.Code != 0 || t.Exit.Signal != 0) {
		return *t.Exit
	}
	return fsm.ExitStatus{Code: -1}
}
