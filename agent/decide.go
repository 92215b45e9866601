package agent

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// Convergence.
//
// Decide is the agent's pure core, as fsm.Step is the driver's: from what
// is declared (the config dir's files, the feed's, the registrations, each
// read through package job), what is recorded (the desired records, the
// folded states of their allocations' copies) and the time, it returns
// what to do as data, and does nothing itself. The agent's loop
// (converge.go) then, as a driver owner does:
//
//  1. writes every record change of the plan in one commit, waiting for the
//     fsync (write-ahead: an entry's allocation ids and its copies' task
//     ids are durable before anything of them is created);
//  2. performs the effects (start, drive, stop) of the names the commit
//     did not touch, each in a goroutine whose outcome comes back as an
//     input;
//  3. decides again from the new state.
//
// A desired entry is a job: its allocations (each a copy of one of its
// groups) are made from its declaration, and each runs as a group of its
// own, driven by the agent (DriveGroup: its tasks started in their turn,
// and once a copy has ended, the copy that follows it by its restart and
// reschedule policies recorded and driven, or nothing). Every decision
// reads only durable state and the process table (through the driver), so
// a crash anywhere is finished by the next agent's first decision. Row by
// row (Row names each; TestDecide_Property checks every decision against
// this table):
//
//	record    declaration       its copies                 decision
//	none      read              -                          intent: new allocations (RowIntent)
//	none      refused           -                          nothing: shown refused (RowRefusedNew)
//	any       -                 a log cannot be read       left as it is (RowUnreadable)
//	disabled  -                 a copy live                stop it (RowStopGone)
//	disabled  -                 none live                  delete the record (RowForget)
//	dir       dir refused       -                          left as it is, driven (RowDirUnknown)
//	dir       feed not known    -                          left as it is, driven (RowDirUnknown)
//	dir       another dir's     -                          left alone (RowOtherDir)
//	dir       file refused      -                          left as it is, driven (RowRefused)
//	dir       file gone         a copy live, not retiring  change: retiring (RowRetire)
//	dir       file gone         a copy live, retiring      stop it (RowStopGone)
//	dir       file gone         none live                  delete the record (RowForget)
//	dir       in another file   -                          change: its file (RowMoved)
//	version 1 -                 its task live              left running (RowLegacyLive)
//	version 1 -                 its task stopped           held: stopped on request (RowLegacyHeld)
//	version 1 -                 its task ended, or gone    intent: new allocations (RowIntent)
//	any       refused now       -                          left as it is, driven (RowRefused)
//	any       changed           a copy live, not retiring  change: retiring (RowRetire)
//	any       changed, or       a copy live, retiring      stop it (RowStopChanged)
//	          same, retiring
//	any       changed, or       none live                  intent: new allocations (RowIntent)
//	          same, retiring
//	any       same              newer copy in the store    change: follow it (RowFollow)
//	any       same              a first copy not recorded  start it (RowStart)
//	any       same              a first copy interrupted   new ids for its allocation (RowRenew)
//	any       same              a copy live, not driven    drive it (RowDrive)
//	any       same              due later, not driven      drive it (RowDrive)
//	any       same              over, something follows    drive it: DriveGroup records it (RowDrive)
//	any       same              live and driven here       nothing (RowSteady)
//	any       same              over, nothing follows      nothing: stopped, completed, refused or down (RowSteady)
//
// "Driven" rows leave what runs as it is, and drive the copies nobody
// drives (as RowDrive). A name with an effect in flight is decided again
// once it is over (RowBusy). At most one copy of an allocation is ever
// live: a copy's successor is recorded only by its driver once it is over
// (DriveGroup, under the group's lock), new allocations only once no copy
// of the old ones is live, and only the recorded copies are ever created.
// A copy the agent stops is marked first (retiring, durable): a copy
// stopped while its record is not retiring was stopped on request, and
// stays stopped until its entry is started again or its file changes; one
// stopped for a change is followed by new allocations even if the change
// was undone meanwhile.

// Declared is a desired entry as its source declares it now, read through
// the job path.
type Declared struct {
	Name   string
	Source store.DesiredSource
	File   string
	// Text and Inputs are what it was read from (a feed's and an enable's
	// are kept in the record; a config dir's file is read again).
	Text   []byte
	Inputs job.Inputs
	// Digest fingerprints the declaration (job.Digest).
	Digest string
	// Shapes are the allocations it makes; Err says why it is refused
	// (then there are none).
	Shapes []job.Shape
	Err    string
}

// FileProblem is a file of the config dir (or a feed's declaration) the
// agent refuses: unsafe, not readable, or declaring a name declared
// already.
type FileProblem struct {
	File string
	Name string // the entry it declares, when known
	Err  error
}

func (p FileProblem) String() string {
	if p.Name != "" {
		return fmt.Sprintf("%s (%q): %v", p.File, p.Name, p.Err)
	}
	return fmt.Sprintf("%s: %v", p.File, p.Err)
}

// CopyView is what the agent knows of an allocation's newest copy (the
// record's, or a later one its driver recorded since): its tasks as the
// store holds them, the ids it lacks, and whether the agent drives it.
type CopyView struct {
	// IDs are the copy's task ids, Generation its number; Kind what made
	// it (as the record says, when the record names it).
	IDs        []string
	Generation int
	NotBefore  int64
	Tasks      []fsm.Task
	Missing    []string
	// Driven: the agent drives the allocation now.
	Driven bool
	// Err is why its logs cannot be read (a damaged store): its entry is
	// left as it is.
	Err string
}

// live reports whether a task of the copy is not terminal.
func (c CopyView) live() bool {
	return slices.ContainsFunc(c.Tasks, func(t fsm.Task) bool { return !t.State.Terminal() })
}

// TaskView is a version-1 record's task: its folded state (StateNone when
// the store does not hold it).
type TaskView struct {
	Task fsm.Task
	Err  string
}

// View is everything a decision reads.
type View struct {
	Now    int64  // Unix ns
	BootID string // this boot's (a copy lost on another boot is no failure of its own)
	// ConfigDir is the agent's config dir ("" for none): a record declared
	// by a file outside it is left alone.
	ConfigDir string
	// Files are the entries the config dir's files (and the feed's)
	// declare; Problems the files refused. DirErr is why the config dir
	// itself was refused (its entries are then left as they are: nothing of
	// it is believed).
	Files    []Declared
	Problems []FileProblem
	DirErr   string
	// FeedDir is the name the feed's entries are declared under ("" for no
	// feed; its entries are among Files and Problems); FeedErr says why its
	// state is not known (its records are then left as they are).
	FeedDir string
	FeedErr string
	// Enabled are the registrations' declarations, read from their
	// records' text (or a version-1 record's spec), by name.
	Enabled map[string]Declared
	// Records are the desired records; Copies the newest copy of each of
	// their allocations, by allocation id; Legacy the version-1 records'
	// tasks, by id.
	Records []store.Desired
	Copies  map[string]CopyView
	Legacy  map[string]TaskView
	// Busy are the names with an effect in flight: decided again once it
	// is over.
	Busy map[string]bool
}

// Row names a row of the decision table (see the top of this file).
type Row uint8

// The rows.
const (
	RowNone Row = iota
	RowIntent
	RowRefusedNew
	RowUnreadable
	RowStopGone
	RowForget
	RowDirUnknown
	RowOtherDir
	RowRefused
	RowMoved
	RowRetire
	RowLegacyLive
	RowLegacyHeld
	RowStopChanged
	RowFollow
	RowRenew
	RowStart
	RowDrive
	RowSteady
	RowBusy
	numRows
)

var rowNames = [numRows]string{"none", "intent", "refused-new", "unreadable", "stop-gone", "forget", "dir-unknown", "other-dir",
	"refused", "moved", "retire", "legacy-live", "legacy-held", "stop-changed", "follow", "renew", "start", "drive", "steady", "busy"}

func (r Row) String() string {
	if r < numRows {
		return rowNames[r]
	}
	return fmt.Sprintf("row(%d)", uint8(r))
}

// Change is a record change of a plan. NewAllocs asks the caller to give
// the record new allocations of these shapes (their ids drawn) before it
// is written: Decide is pure, ids are drawn outside it.
type Change struct {
	store.DesiredChange
	NewAllocs []job.Shape
	// Renew asks for new ids for the allocations at these indices (of
	// their shapes), the others kept.
	Renew map[int]job.Shape
}

// EffectKind is what an effect does.
type EffectKind uint8

const (
	// EffectStart instantiates an entry's first copies (their ids
	// durable already), records them and drives them.
	EffectStart EffectKind = iota + 1
	// EffectStop stops the live copies of an entry (replaced, or its
	// declaration gone).
	EffectStop
	// EffectDrive drives copies nobody drives (adopted after a crash, or
	// over with a copy to follow them).
	EffectDrive
)

func (k EffectKind) String() string {
	switch k {
	case EffectStart:
		return "start"
	case EffectStop:
		return "stop"
	case EffectDrive:
		return "drive"
	}
	return fmt.Sprintf("effect(%d)", uint8(k))
}

// Effect is one effect of a plan: on the allocations Allocs of the
// entry Name (as its record holds them).
type Effect struct {
	Kind   EffectKind
	Name   string
	Allocs []store.DesiredAlloc
	Reason string
}

// Plan is a decision.
type Plan struct {
	Changes []Change
	Effects []Effect
	// Watch are the live tasks of version-1 records: the caller waits on
	// each, and decides again once it ends.
	Watch []string
	// Rows says which row of the table decided each name.
	Rows map[string]Row
	// Notes say, per name, what keeps it from converging (a refused file,
	// a conflict); Problems are the refused files no name is known for.
	Notes    map[string]string
	Problems []string
	// Pending are the names with work left (a change, an effect, an
	// effect in flight).
	Pending map[string]bool
}

// Decide returns the plan for v. It is pure: the same view gives the same
// plan.
func Decide(v View) Plan {
	p := Plan{Notes: map[string]string{}, Pending: map[string]bool{}, Rows: map[string]Row{}}
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
		d := decider{v: v, p: &p, name: name}
		if v.Busy[name] {
			p.Pending[name] = true
			d.row(RowBusy)
			continue
		}
		r, hasRecord := records[name]
		f, hasFile := files[name]
		switch {
		case !hasRecord && f.Err != "":
			d.row(RowRefusedNew)
			p.Notes[name] = fmt.Sprintf("%s: refused: %s", f.File, f.Err)
		case !hasRecord:
			d.intent(store.Desired{Name: name, Source: f.Source, File: f.File}, f)
		case d.unreadable(r) != "":
			d.row(RowUnreadable)
			p.Notes[name] = "the log of its tasks cannot be read: " + d.unreadable(r) + "; left as it is (tether check says more)"
		case r.Disabled:
			d.remove(r, "disabled")
		case r.Source == store.SourceDir && v.DirErr != "" && underDir(r.File, v.ConfigDir):
			d.row(RowDirUnknown)
			p.Notes[name] = v.DirErr + "; its tasks are left as they are"
			d.keep(r)
		case r.Source == store.SourceDir && v.FeedErr != "" && underDir(r.File, v.FeedDir):
			d.row(RowDirUnknown)
			p.Notes[name] = v.FeedErr + "; its tasks are left as they are"
			d.keep(r)
		case r.Source == store.SourceDir && !underDir(r.File, v.ConfigDir) && !underDir(r.File, v.FeedDir):
			d.row(RowOtherDir)
			where := "the agent has no --config-dir"
			if v.ConfigDir != "" {
				where = "it is not in " + v.ConfigDir
			}
			p.Notes[name] = fmt.Sprintf("declared in %s, and %s: left as it is (disable it by removing its file with the right --config-dir)", r.File, where)
		case r.Source == store.SourceDir && !hasFile:
			if why, bad := badFiles[r.File]; bad {
				d.row(RowRefused)
				p.Notes[name] = fmt.Sprintf("%s: %s; its tasks are left as they are until the file is fixed", r.File, why)
				d.keep(r)
				continue
			}
			d.remove(r, "its file "+r.File+" is gone")
		case r.Source == store.SourceDir && f.File != r.File: // the entry moved to another file
			d.row(RowMoved)
			r2 := r
			r2.File = f.File
			d.change(r2, nil)
		case r.Source == store.SourceDir:
			d.converge(r, f)
		default:
			e, ok := v.Enabled[name]
			if !ok {
				e = Declared{Name: name, Err: "its registration holds no file: enable it again"}
			}
			d.converge(r, e)
		}
	}
	return p
}

// declaredByName indexes the config dir's (and the feed's) entries by
// name. A name declared by several files goes to the file its record
// names, else to the first file in path order; the others are refused, as
// is a file declaring a name that is registered (tether enable).
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
			p.Problems = append(p.Problems, fmt.Sprintf("%s: %q: %v: it is registered with tether enable (disable it, or remove the file)",
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
				p.Problems = append(p.Problems, fmt.Sprintf("%s: %q: %v: %s declares it already; this file is ignored",
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

func (d decider) row(r Row) { d.p.Rows[d.name] = r }

func (d decider) change(r store.Desired, shapes []job.Shape) {
	d.p.Changes = append(d.p.Changes, Change{DesiredChange: store.DesiredChange{Desired: r}, NewAllocs: shapes})
	d.p.Pending[d.name] = true
}

func (d decider) effect(k EffectKind, allocs []store.DesiredAlloc, reason string) {
	d.p.Effects = append(d.p.Effects, Effect{Kind: k, Name: d.name, Allocs: allocs, Reason: reason})
	d.p.Pending[d.name] = true
}

// intent records new allocations for r of f's shapes (r's old ones, if
// any, have no live copy).
func (d decider) intent(r store.Desired, f Declared) {
	d.row(RowIntent)
	spec := r.Spec
	r.Digest, r.Allocs, r.Task, r.Spec, r.Reason, r.Retiring = f.Digest, nil, "", nil, "", false
	if r.Source == store.SourceEnabled || underDir(f.File, d.v.FeedDir) {
		r.Text, r.Inputs = f.Text, storeInputs(f.Inputs)
	}
	if r.Source == store.SourceEnabled && f.Text == nil {
		r.Spec = spec // a version-1 registration: its spec is its file
	}
	d.change(r, slices.Clone(f.Shapes))
}

// unreadable is why a log of the record's copies cannot be read, if so.
func (d decider) unreadable(r store.Desired) string {
	for _, a := range r.Allocs {
		if c := d.v.Copies[a.ID]; c.Err != "" {
			return c.Err
		}
	}
	if r.Task != "" {
		return d.v.Legacy[r.Task].Err
	}
	return ""
}

// liveAllocs are the record's allocations with a live copy.
func (d decider) liveAllocs(r store.Desired) []store.DesiredAlloc {
	var out []store.DesiredAlloc
	for _, a := range r.Allocs {
		if d.v.Copies[a.ID].live() {
			out = append(out, a)
		}
	}
	return out
}

func (d decider) legacyLive(r store.Desired) bool {
	t, ok := d.v.Legacy[r.Task]
	return r.Task != "" && ok && t.Task.State != fsm.StateNone && !t.Task.State.Terminal()
}

func (d decider) watchLegacy(r store.Desired) {
	if d.legacyLive(r) {
		d.p.Watch = append(d.p.Watch, r.Task)
	}
}

// remove stops the record's live copies (and a version-1 task), marking
// it retiring first (a disabled record is marked already), else deletes
// the record.
func (d decider) remove(r store.Desired, why string) {
	live := d.liveAllocs(r)
	legacy := d.legacyLive(r)
	if legacy {
		d.p.Watch = append(d.p.Watch, r.Task)
		live = append(live, store.DesiredAlloc{ID: "", Tasks: []string{r.Task}})
	}
	switch {
	case len(live) > 0 && !r.Retiring && !r.Disabled:
		d.retire(r)
	case len(live) > 0:
		d.row(RowStopGone)
		d.effect(EffectStop, live, why)
	default:
		d.row(RowForget)
		d.p.Changes = append(d.p.Changes, Change{DesiredChange: store.DesiredChange{Desired: store.Desired{Name: r.Name, Rev: r.Rev}, Delete: true}})
		d.p.Pending[d.name] = true
	}
}

// retire marks the record retiring: the stop of its copies follows.
func (d decider) retire(r store.Desired) {
	d.row(RowRetire)
	r.Retiring = true
	d.change(r, nil)
}

// keep leaves what an entry runs as it is, and drives its copies nobody
// drives (a version-1 task is watched).
func (d decider) keep(r store.Desired) {
	d.watchLegacy(r)
	var drive []store.DesiredAlloc
	for _, a := range r.Allocs {
		if c := d.v.Copies[a.ID]; !c.Driven && len(c.Tasks) > 0 && (c.live() || d.owed(c)) {
			drive = append(drive, a)
		}
	}
	if len(drive) > 0 {
		d.effect(EffectDrive, drive, "")
	}
}

// owed reports whether a copy over has a copy to follow it.
func (d decider) owed(c CopyView) bool {
	end := fsm.GroupState{Tasks: c.Tasks, Missing: c.Missing}.End(d.v.BootID)
	return end.Kind != fsm.EndRunning && !(end.Kind == fsm.EndInterrupted && allocOf(c.Tasks).Generation == 0) &&
		fsm.NextCopy(end, allocOf(c.Tasks), restartOf(c.Tasks, end.Task)).Again
}

// converge decides for a record whose declaration is f.
func (d decider) converge(r store.Desired, f Declared) {
	if r.Task != "" && len(r.Allocs) == 0 { // a version-1 record's task
		t := d.v.Legacy[r.Task]
		switch {
		case d.legacyLive(r):
			d.row(RowLegacyLive)
			d.p.Watch = append(d.p.Watch, r.Task)
			return
		case t.Task.State == fsm.StateStopped:
			d.row(RowLegacyHeld)
			return
		case f.Err != "":
			d.refused(r, f)
			return
		}
		d.intent(r, f)
		return
	}
	if f.Err != "" {
		d.refused(r, f)
		return
	}
	if r.Digest != f.Digest || len(r.Allocs) == 0 || r.Retiring {
		switch live := d.liveAllocs(r); {
		case len(live) > 0 && !r.Retiring:
			d.retire(r)
		case len(live) > 0:
			d.row(RowStopChanged)
			d.effect(EffectStop, live, "its declaration changed: replaced")
		default:
			d.intent(r, f)
		}
		return
	}
	// The same declaration: each allocation's newest copy.
	r.Allocs = slices.Clone(r.Allocs)
	follow := false
	renew := map[int]job.Shape{}
	var start, drive []store.DesiredAlloc
	for i, a := range r.Allocs {
		c := d.v.Copies[a.ID]
		switch {
		case len(c.IDs) > 0 && !slices.Equal(c.IDs, a.Tasks):
			follow = true
			r.Allocs[i].Tasks, r.Allocs[i].Generation, r.Allocs[i].NotBefore = slices.Clone(c.IDs), c.Generation, c.NotBefore
			if c.Generation > a.Generation {
				r.Allocs[i].Kind = ""
			}
		case c.Driven:
		case a.Generation == 0 && len(c.Tasks) == 0:
			start = append(start, a) // its first copy: nothing of it recorded yet
		case c.live():
			drive = append(drive, a)
		case d.owed(c):
			drive = append(drive, a)
		default:
			end := fsm.GroupState{Tasks: c.Tasks, Missing: c.Missing}.End(d.v.BootID)
			if end.Kind == fsm.EndInterrupted && a.Generation == 0 {
				// Its first copy's recording was interrupted (and its
				// driver settled what was recorded): new ids, and the file
				// makes it again.
				if sh, ok := shapeOf(f.Shapes, a); ok {
					renew[i] = sh
				}
			}
		}
	}
	switch {
	case follow:
		d.row(RowFollow)
		d.change(r, nil)
	case len(renew) > 0:
		d.row(RowRenew)
		d.p.Changes = append(d.p.Changes, Change{DesiredChange: store.DesiredChange{Desired: r}, Renew: renew})
		d.p.Pending[d.name] = true
	case len(start) > 0:
		d.row(RowStart)
		d.effect(EffectStart, start, "")
	case len(drive) > 0:
		d.row(RowDrive)
		d.effect(EffectDrive, drive, "")
	default:
		d.row(RowSteady)
	}
}

// shapeOf is the shape of the allocation a among shapes.
func shapeOf(shapes []job.Shape, a store.DesiredAlloc) (job.Shape, bool) {
	for _, s := range shapes {
		if s.Group == a.Group && s.Index == a.Index {
			return s, true
		}
	}
	return job.Shape{}, false
}

// refused leaves an entry whose declaration is refused as it is, driven.
func (d decider) refused(r store.Desired, f Declared) {
	d.row(RowRefused)
	d.p.Notes[d.name] = fmt.Sprintf("%s: refused: %s; what it runs is left as it is until it is fixed", f.File, f.Err)
	d.keep(r)
}

// storeInputs is job.Inputs as the store keeps them.
func storeInputs(in job.Inputs) store.DesiredInputs {
	out := store.DesiredInputs{Vars: in.Vars, Env: in.Env, Meta: in.Meta, Task: in.Task, Group: in.Group}
	for _, f := range in.VarFiles {
		out.VarFiles = append(out.VarFiles, store.NamedText{Name: f.Name, Text: f.Text})
	}
	return out
}

// jobInputs is a record's inputs as job.Inputs.
func jobInputs(in store.DesiredInputs) job.Inputs {
	out := job.Inputs{Vars: in.Vars, Env: in.Env, Meta: in.Meta, Task: in.Task, Group: in.Group}
	for _, f := range in.VarFiles {
		out.VarFiles = append(out.VarFiles, job.VarFile{Name: f.Name, Text: f.Text})
	}
	return out
}
