package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

const (
	cfgDir  = "/etc/tether"
	feedDir = "etcd:/tether/desired/n1"
	boot    = "boot-1"
	now     = int64(1_000_000_000_000)
)

// webDecl is the config dir's web.hcl: one group, one copy, one task.
func webDecl(digest string) Declared {
	return Declared{Name: "web", Source: store.SourceDir, File: cfgDir + "/web.hcl", Digest: digest,
		Shapes: []job.Shape{{Group: "web", Names: []string{"web"}}}}
}

// webRecord is web's record, its one allocation a1 at the copy of ids.
func webRecord(digest string, ids ...string) store.Desired {
	return store.Desired{Name: "web", Source: store.SourceDir, File: cfgDir + "/web.hcl", Digest: digest, Rev: 4,
		Allocs: []store.DesiredAlloc{{Group: "web", ID: "a1", Tasks: ids}}}
}

// copyIn is allocation a1's copy of one task id in state st (its last
// event a second ago), with the service default policies.
func copyIn(id string, st fsm.State, opts ...func(*fsm.Task)) CopyView {
	r := fsm.DefaultServiceReschedule
	restart := fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: 5 * time.Second, Mode: fsm.RestartFail, OnSuccess: true}
	spec := &fsm.Spec{Name: "web", Restart: &restart, Alloc: &fsm.Alloc{ID: "a1", Tasks: []string{id}, Reschedule: &r}}
	t := fsm.Task{ID: id, State: st, Spec: spec, UpdatedAt: now - int64(time.Second), Nonce: "n", TaskPID: 10,
		Executor: &fsm.Identity{PID: 10, BootID: boot}}
	if st == fsm.StateCreated {
		t.Nonce, t.TaskPID, t.Executor = "", 0, nil
	}
	if st == fsm.StateExited {
		t.Exit = &fsm.ExitStatus{Code: 3}
	}
	for _, o := range opts {
		o(&t)
	}
	return CopyView{IDs: []string{id}, Tasks: []fsm.Task{t}}
}

func view(files []Declared, recs []store.Desired, copies map[string]CopyView) View {
	v := View{Now: now, BootID: boot, ConfigDir: cfgDir, Files: files, Records: recs, Copies: copies,
		Legacy: map[string]TaskView{}, Enabled: map[string]Declared{}, Busy: map[string]bool{}}
	if v.Copies == nil {
		v.Copies = map[string]CopyView{}
	}
	return v
}

func copies(cv CopyView) map[string]CopyView { return map[string]CopyView{"a1": cv} }

// decides checks that the plan decided name by row, with kind of effect
// (0: none) and a change or not.
func decides(t *testing.T, p Plan, name string, row Row, effect EffectKind, change bool) {
	t.Helper()
	if p.Rows[name] != row {
		t.Errorf("%s: row %s, want %s (plan %+v)", name, p.Rows[name], row, p)
	}
	var effects []EffectKind
	for _, e := range p.Effects {
		if e.Name == name {
			effects = append(effects, e.Kind)
		}
	}
	switch {
	case effect == 0 && len(effects) > 0, effect != 0 && !slices.Equal(effects, []EffectKind{effect}):
		t.Errorf("%s: effects %v, want %v", name, effects, effect)
	}
	changed := slices.ContainsFunc(p.Changes, func(c Change) bool { return c.Desired.Name == name })
	if changed != change {
		t.Errorf("%s: change %v, want %v (%+v)", name, changed, change, p.Changes)
	}
}

func TestDecide_NewFileRecordsNewAllocations(t *testing.T) {
	p := Decide(view([]Declared{webDecl("d1")}, nil, nil))
	decides(t, p, "web", RowIntent, 0, true)
	c := p.Changes[0]
	if c.Desired.Digest != "d1" || c.Desired.Rev != 0 || len(c.NewAllocs) != 1 || c.NewAllocs[0].Names[0] != "web" || c.Desired.Text != nil {
		t.Errorf("intent %+v", c)
	}
}

func TestDecide_RefusedNewFileIsShownNotRecorded(t *testing.T) {
	f := webDecl("")
	f.Err, f.Shapes = "template source /x: --allow-read", nil
	p := Decide(view([]Declared{f}, nil, nil))
	decides(t, p, "web", RowRefusedNew, 0, false)
	if !strings.Contains(p.Notes["web"], "--allow-read") {
		t.Errorf("note %q", p.Notes["web"])
	}
}

func TestDecide_FirstCopyNotRecordedIsStarted(t *testing.T) {
	p := Decide(view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, nil))
	decides(t, p, "web", RowStart, EffectStart, false)
	if e := p.Effects[0]; len(e.Allocs) != 1 || e.Allocs[0].ID != "a1" {
		t.Errorf("start %+v", e)
	}
}

func TestDecide_DrivenCopyIsLeftToItsDriver(t *testing.T) {
	cv := copyIn("web-1", fsm.StateRunning)
	cv.Driven = true
	decides(t, Decide(view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, copies(cv))), "web", RowSteady, 0, false)
}

// A live copy nobody drives (a crashed agent's) is adopted; so is one due
// later; so is one over whose policies start another.
func TestDecide_CopiesNobodyDrivesAreDriven(t *testing.T) {
	for what, cv := range map[string]CopyView{
		"running":             copyIn("web-1", fsm.StateRunning),
		"due later":           copyIn("web-1", fsm.StateCreated, func(t *fsm.Task) { t.Spec.Alloc.NotBefore = now + int64(time.Minute) }),
		"lost: a restart":     copyIn("web-1", fsm.StateLost),
		"failed: reschedule":  copyIn("web-1", fsm.StateExited),
		"rebooted: again now": copyIn("web-1", fsm.StateLost, func(t *fsm.Task) { t.Executor.BootID = "old" }),
	} {
		t.Run(what, func(t *testing.T) {
			decides(t, Decide(view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, copies(cv))), "web", RowDrive, EffectDrive, false)
		})
	}
}

// A copy over with nothing to follow it stays as it is: stopped on
// request, or given up by its policies.
func TestDecide_OverWithNothingToFollowIsLeft(t *testing.T) {
	noReschedule := func(t *fsm.Task) { t.Spec.Alloc.Reschedule = &fsm.ReschedulePolicy{} }
	for what, cv := range map[string]CopyView{
		"stopped on request": copyIn("web-1", fsm.StateStopped),
		"down":               copyIn("web-1", fsm.StateExited, noReschedule),
		"completed":          copyIn("web-1", fsm.StateExited, func(t *fsm.Task) { t.Exit.Code, t.Spec.Restart.OnSuccess = 0, false }),
		"refused":            copyIn("web-1", fsm.StateFailed, func(t *fsm.Task) { t.Nonce = "" }),
	} {
		t.Run(what, func(t *testing.T) {
			decides(t, Decide(view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, copies(cv))), "web", RowSteady, 0, false)
		})
	}
}

// A record behind its allocation's driver (the agent crashed between the
// driver's record of a copy and its own) follows the newest copy.
func TestDecide_RecordFollowsTheNewestCopy(t *testing.T) {
	cv := copyIn("web-a1-r2", fsm.StateRunning)
	cv.Generation, cv.NotBefore = 2, now-5
	p := Decide(view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, copies(cv)))
	decides(t, p, "web", RowFollow, 0, true)
	if a := p.Changes[0].Desired.Allocs[0]; !slices.Equal(a.Tasks, []string{"web-a1-r2"}) || a.Generation != 2 || a.NotBefore != now-5 {
		t.Errorf("followed to %+v", a)
	}
}

// A first copy whose recording was interrupted (what was recorded settled
// by its driver) gets new ids: the file makes it again.
func TestDecide_InterruptedFirstCopyIsRenewed(t *testing.T) {
	cv := copyIn("web-1", fsm.StateStopped, func(t *fsm.Task) { t.Nonce, t.TaskPID = "", 0 })
	cv.IDs, cv.Missing = []string{"web-1", "side-1"}, []string{"side-1"}
	rec := webRecord("d1", "web-1", "side-1")
	p := Decide(view([]Declared{webDecl("d1")}, []store.Desired{rec}, copies(cv)))
	decides(t, p, "web", RowRenew, 0, true)
	if c := p.Changes[0]; len(c.Renew) != 1 || c.Renew[0].Group != "web" || c.NewAllocs != nil {
		t.Errorf("renew %+v", c)
	}
}

// A changed file: the record is marked retiring, then its live copy
// stopped, then new allocations made; a copy stopped while retiring is
// followed by new allocations even if the file changed back meanwhile.
func TestDecide_ChangedFileRetiresStopsThenMakesNewAllocations(t *testing.T) {
	rec := webRecord("d1", "web-1")
	running := copies(copyIn("web-1", fsm.StateRunning))
	p := Decide(view([]Declared{webDecl("d2")}, []store.Desired{rec}, running))
	decides(t, p, "web", RowRetire, 0, true)
	if c := p.Changes[0]; !c.Desired.Retiring || c.Desired.Digest != "d1" || c.NewAllocs != nil {
		t.Errorf("retire %+v", c)
	}
	rec.Retiring = true
	decides(t, Decide(view([]Declared{webDecl("d2")}, []store.Desired{rec}, running)), "web", RowStopChanged, EffectStop, false)
	stopped := copies(copyIn("web-1", fsm.StateStopped))
	p = Decide(view([]Declared{webDecl("d2")}, []store.Desired{rec}, stopped))
	decides(t, p, "web", RowIntent, 0, true)
	if c := p.Changes[0]; c.Desired.Digest != "d2" || c.Desired.Rev != 4 || len(c.NewAllocs) != 1 || c.Desired.Retiring {
		t.Errorf("replacement %+v", c)
	}
	// Changed back while its copy was being stopped: new allocations
	// anyway (it was not stopped on request).
	p = Decide(view([]Declared{webDecl("d1")}, []store.Desired{rec}, stopped))
	decides(t, p, "web", RowIntent, 0, true)
	// Not retiring, the same stopped copy was stopped on request: held.
	rec.Retiring = false
	decides(t, Decide(view([]Declared{webDecl("d1")}, []store.Desired{rec}, stopped)), "web", RowSteady, 0, false)
}

func TestDecide_RemovedFileRetiresStopsThenForgets(t *testing.T) {
	rec := webRecord("d1", "web-1")
	running := copies(copyIn("web-1", fsm.StateRunning))
	decides(t, Decide(view(nil, []store.Desired{rec}, running)), "web", RowRetire, 0, true)
	rec.Retiring = true
	decides(t, Decide(view(nil, []store.Desired{rec}, running)), "web", RowStopGone, EffectStop, false)
	p := Decide(view(nil, []store.Desired{rec}, copies(copyIn("web-1", fsm.StateStopped))))
	decides(t, p, "web", RowForget, 0, true)
	if !p.Changes[0].Delete || p.Changes[0].Desired.Rev != 4 {
		t.Errorf("forget %+v", p.Changes[0])
	}
}

// A refused file leaves what its entry runs as it is: nothing stopped,
// the copies nobody drives driven.
func TestDecide_RefusedFileLeavesItsTasksAlone(t *testing.T) {
	recs := []store.Desired{webRecord("d1", "web-1")}
	driven := copyIn("web-1", fsm.StateRunning)
	driven.Driven = true
	v := view(nil, recs, copies(driven))
	v.Problems = []FileProblem{{File: cfgDir + "/web.hcl", Err: errString("does not parse")}}
	p := Decide(v)
	decides(t, p, "web", RowRefused, 0, false)
	if !strings.Contains(p.Notes["web"], "does not parse") {
		t.Errorf("note %q", p.Notes["web"])
	}
	v.Copies = copies(copyIn("web-1", fsm.StateRunning))
	decides(t, Decide(v), "web", RowRefused, EffectDrive, false)
	// Read but refused (its policy, a reference): the same.
	f := webDecl("d2")
	f.Err = "not allowed"
	decides(t, Decide(view([]Declared{f}, recs, copies(driven))), "web", RowRefused, 0, false)
	decides(t, Decide(view([]Declared{f}, recs, copies(copyIn("web-1", fsm.StateStopped)))), "web", RowRefused, 0, false)
}

func TestDecide_UnreadableConfigDirLeavesEverythingAlone(t *testing.T) {
	driven := copyIn("web-1", fsm.StateRunning)
	driven.Driven = true
	v := view(nil, []store.Desired{webRecord("d1", "web-1")}, copies(driven))
	v.DirErr = "the config dir is group-writable"
	decides(t, Decide(v), "web", RowDirUnknown, 0, false)
	v.Copies = copies(copyIn("web-1", fsm.StateLost))
	decides(t, Decide(v), "web", RowDirUnknown, EffectDrive, false)
}

func TestDecide_RecordOfAnotherConfigDirIsLeftAlone(t *testing.T) {
	r := webRecord("d1", "web-1")
	r.File = "/srv/other/web.hcl"
	p := Decide(view(nil, []store.Desired{r}, copies(copyIn("web-1", fsm.StateRunning))))
	decides(t, p, "web", RowOtherDir, 0, false)
	if !strings.Contains(p.Notes["web"], "/srv/other/web.hcl") {
		t.Errorf("note %q", p.Notes["web"])
	}
}

func TestDecide_EntryMovedToAnotherFile(t *testing.T) {
	f := webDecl("d1")
	f.File = cfgDir + "/moved.hcl"
	p := Decide(view([]Declared{f}, []store.Desired{webRecord("d1", "web-1")}, copies(copyIn("web-1", fsm.StateRunning))))
	decides(t, p, "web", RowMoved, 0, true)
	if p.Changes[0].Desired.File != f.File {
		t.Errorf("moved to %q", p.Changes[0].Desired.File)
	}
}

func TestDecide_DuplicateNameGoesToTheRecordsFile(t *testing.T) {
	other := webDecl("d9")
	other.File = cfgDir + "/a-first.hcl"
	p := Decide(view([]Declared{other, webDecl("d1")}, []store.Desired{webRecord("d1", "web-1")}, copies(copyIn("web-1", fsm.StateRunning))))
	decides(t, p, "web", RowDrive, EffectDrive, false)
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "a-first.hcl") || !strings.Contains(p.Problems[0], "declares it already") {
		t.Errorf("problems %v", p.Problems)
	}
}

func TestDecide_EnabledNameWinsOverAFile(t *testing.T) {
	r := webRecord("d1", "web-1")
	r.Source, r.File, r.Text = store.SourceEnabled, "/home/u/web.hcl", []byte("x")
	v := view([]Declared{webDecl("d9")}, []store.Desired{r}, copies(copyIn("web-1", fsm.StateRunning)))
	v.Enabled["web"] = Declared{Name: "web", Source: store.SourceEnabled, File: r.File, Digest: "d1", Shapes: webDecl("").Shapes}
	p := Decide(v)
	decides(t, p, "web", RowDrive, EffectDrive, false)
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "registered with tether enable") {
		t.Errorf("problems %v", p.Problems)
	}
}

func TestDecide_DisabledStopsThenForgets(t *testing.T) {
	r := webRecord("d1", "web-1")
	r.Source, r.Disabled = store.SourceEnabled, true // marked: no retiring first
	decides(t, Decide(view(nil, []store.Desired{r}, copies(copyIn("web-1", fsm.StateRunning)))), "web", RowStopGone, EffectStop, false)
	decides(t, Decide(view(nil, []store.Desired{r}, copies(copyIn("web-1", fsm.StateStopped)))), "web", RowForget, 0, true)
}

func TestDecide_BusyNameIsLeftToItsEffect(t *testing.T) {
	v := view([]Declared{webDecl("d2")}, []store.Desired{webRecord("d1", "web-1")}, copies(copyIn("web-1", fsm.StateRunning)))
	v.Busy["web"] = true
	p := Decide(v)
	decides(t, p, "web", RowBusy, 0, false)
	if !p.Pending["web"] {
		t.Errorf("a busy name is not pending")
	}
}

func TestDecide_DamagedTaskLogLeavesItAlone(t *testing.T) {
	cv := copyIn("web-1", fsm.StateRunning)
	cv.Err = "checksum mismatch"
	p := Decide(view([]Declared{webDecl("d2")}, []store.Desired{webRecord("d1", "web-1")}, copies(cv)))
	decides(t, p, "web", RowUnreadable, 0, false)
	if !strings.Contains(p.Notes["web"], "checksum mismatch") {
		t.Errorf("note %q", p.Notes["web"])
	}
}

// A version-1 record: its task runs on until it ends; stopped on request,
// it is held; ended otherwise, it gets allocations of its file.
func TestDecide_Version1RecordsCarryOn(t *testing.T) {
	r := store.Desired{Name: "web", Source: store.SourceDir, File: cfgDir + "/web.hcl", Task: "web-old", Rev: 2}
	legacy := func(st fsm.State) View {
		v := view([]Declared{webDecl("d1")}, []store.Desired{r}, nil)
		v.Legacy["web-old"] = TaskView{Task: fsm.Task{ID: "web-old", State: st}}
		return v
	}
	p := Decide(legacy(fsm.StateRunning))
	decides(t, p, "web", RowLegacyLive, 0, false)
	if !slices.Equal(p.Watch, []string{"web-old"}) {
		t.Errorf("watch %v", p.Watch)
	}
	decides(t, Decide(legacy(fsm.StateStopped)), "web", RowLegacyHeld, 0, false)
	p = Decide(legacy(fsm.StateLost))
	decides(t, p, "web", RowIntent, 0, true)
	if c := p.Changes[0]; c.Desired.Task != "" || c.Desired.Digest != "d1" || len(c.NewAllocs) != 1 {
		t.Errorf("the version-1 record's intent %+v", c)
	}
}

// A feed's entries: left as they are until the feed is known; stopped
// once no longer declared; replaced once changed; never taken for the
// config dir's, nor the other way round.
func TestDecide_Feed(t *testing.T) {
	fr := webRecord("d1", "web-1")
	fr.File = feedDir + "/web"
	fd := webDecl("d1")
	fd.File = feedDir + "/web"
	running := copies(copyIn("web-1", fsm.StateRunning))
	v := view(nil, []store.Desired{fr}, running)
	v.FeedDir, v.FeedErr = feedDir, "the desired state of "+feedDir+" is not known yet"
	decides(t, Decide(v), "web", RowDirUnknown, EffectDrive, false)
	v.FeedErr = ""
	decides(t, Decide(v), "web", RowRetire, 0, true)
	changed := fd
	changed.Digest = "d2"
	v = view([]Declared{changed}, []store.Desired{fr}, running)
	v.FeedDir = feedDir
	decides(t, Decide(v), "web", RowRetire, 0, true)
	// The feed's record is its own: the config dir's web.hcl declares
	// another "api", and the feed's web is left as it is.
	api := webDecl("d1")
	api.Name = "api"
	v = view([]Declared{api, fd}, []store.Desired{fr}, running)
	v.FeedDir = feedDir
	p := Decide(v)
	decides(t, p, "web", RowDrive, EffectDrive, false)
	decides(t, p, "api", RowIntent, 0, true)
	// A feed's entry's text and inputs are kept in its record.
	fd.Text, fd.Inputs = []byte("task"), job.Inputs{Task: "web"}
	v = view([]Declared{fd}, nil, nil)
	v.FeedDir = feedDir
	if c := Decide(v).Changes[0]; string(c.Desired.Text) != "task" || c.Desired.Inputs.Task != "web" {
		t.Errorf("the feed's intent keeps no text: %+v", c.Desired)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
