package agent

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

const (
	cfgDir = "/etc/tether"
	boot   = "boot-1"
	now    = int64(1_000_000_000_000)
)

func webSpec() fsm.Spec {
	return fsm.Spec{Name: "web", Driver: "raw_exec", Command: "/bin/web",
		Restart: &fsm.RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: 5 * time.Second, Mode: fsm.RestartFail}}
}

func webFile() Declared {
	return Declared{Name: "web", Source: store.SourceDir, File: cfgDir + "/web.hcl", Spec: webSpec()}
}

func webRecord(task string) store.Desired {
	return store.Desired{Name: "web", Source: store.SourceDir, File: cfgDir + "/web.hcl", Task: task,
		Restart: fsm.RestartState{WindowStart: now - int64(time.Minute)}, Rev: 4}
}

// taskIn is a task of the web spec in state st, its last event at now-1s.
func taskIn(id string, st fsm.State) TaskView {
	spec := Effective(webSpec())
	t := fsm.Task{ID: id, State: st, Spec: &spec, UpdatedAt: now - int64(time.Second), Nonce: "n",
		Executor: &fsm.Identity{PID: 10, BootID: boot}}
	if st == fsm.StateExited {
		t.Exit = &fsm.ExitStatus{Code: 3}
	}
	return TaskView{Task: t}
}

func view(files []Declared, recs []store.Desired, tasks ...TaskView) View {
	v := View{Now: now, BootID: boot, ConfigDir: cfgDir, Files: files, Records: recs, Tasks: map[string]TaskView{}}
	for _, t := range tasks {
		v.Tasks[t.Task.ID] = t
	}
	return v
}

// one returns the plan's only change, failing otherwise.
func one(t *testing.T, p Plan) Change {
	t.Helper()
	if len(p.Changes) != 1 || len(p.Effects) != 0 {
		t.Fatalf("plan = %+v; want one change and no effect", p)
	}
	return p.Changes[0]
}

func oneEffect(t *testing.T, p Plan) Effect {
	t.Helper()
	if len(p.Changes) != 0 || len(p.Effects) != 1 {
		t.Fatalf("plan = %+v; want one effect and no change", p)
	}
	return p.Effects[0]
}

func TestDecide_NewFileRecordsAnIntent(t *testing.T) {
	c := one(t, Decide(view([]Declared{webFile()}, nil)))
	if !c.NewTask || c.Delete || c.Desired.Name != "web" || c.Desired.Source != store.SourceDir ||
		c.Desired.File != cfgDir+"/web.hcl" || c.Desired.Rev != 0 || c.Desired.Restart.WindowStart != now {
		t.Fatalf("change = %+v; want a new record for web with a new task, its window starting now", c)
	}
}

func TestDecide_OwedStartIsStarted(t *testing.T) {
	e := oneEffect(t, Decide(view([]Declared{webFile()}, []store.Desired{webRecord("web-2")})))
	want := Effective(webSpec())
	if e.Kind != EffectStart || e.Task != "web-2" || !reflect.DeepEqual(e.Spec, want) {
		t.Fatalf("effect = %+v; want a start of web-2 with the file's spec", e)
	}
}

func TestDecide_DelayedStartWaits(t *testing.T) {
	r := webRecord("web-2")
	r.NotBefore = now + int64(3*time.Second)
	p := Decide(view([]Declared{webFile()}, []store.Desired{r}))
	if len(p.Changes)+len(p.Effects) != 0 || p.Wake != r.NotBefore || !p.Pending["web"] {
		t.Fatalf("plan = %+v; want nothing now, a wake at NotBefore, web pending", p)
	}
}

func TestDecide_RunningTaskIsLeftAndWatched(t *testing.T) {
	p := Decide(view([]Declared{webFile()}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning)))
	if len(p.Changes)+len(p.Effects) != 0 || !reflect.DeepEqual(p.Watch, []string{"web-1"}) || len(p.Pending) != 0 {
		t.Fatalf("plan = %+v; want web-1 watched and nothing else", p)
	}
}

func TestDecide_ChangedFileStopsTheLiveTaskThenStartsANewOne(t *testing.T) {
	f := webFile()
	f.Spec.Args = []string{"--new"}
	e := oneEffect(t, Decide(view([]Declared{f}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning))))
	if e.Kind != EffectStop || e.Task != "web-1" {
		t.Fatalf("effect = %+v; want web-1 stopped", e)
	}
	// Stopped: the replacement gets a new task and a fresh count.
	c := one(t, Decide(view([]Declared{f}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateStopped))))
	if !c.NewTask || c.Desired.Settled != "" || c.Desired.Restart != (fsm.RestartState{WindowStart: now}) || c.Desired.Rev != 4 {
		t.Fatalf("change = %+v; want a new task, the count reset, at revision 4", c)
	}
}

func TestDecide_StoppedOnRequestIsHeld(t *testing.T) {
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateStopped))))
	if c.NewTask || c.Desired.Settled != "web-1" || !strings.Contains(c.Desired.Reason, "stopped on request") {
		t.Fatalf("change = %+v; want web settled on web-1, stopped on request", c)
	}
	r := c.Desired
	p := Decide(view([]Declared{webFile()}, []store.Desired{r}, taskIn("web-1", fsm.StateStopped)))
	if len(p.Changes)+len(p.Effects) != 0 || p.Pending["web"] {
		t.Fatalf("plan for a settled task = %+v; want nothing", p)
	}
}

func TestDecide_LostTaskRestartedUnderItsPolicy(t *testing.T) {
	r := webRecord("web-1")
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{r}, taskIn("web-1", fsm.StateLost))))
	lostAt := now - int64(time.Second)
	if !c.NewTask || c.Desired.Restart.Attempts != 1 || c.Desired.Restart.Count != 1 ||
		c.Desired.NotBefore != lostAt+int64(5*time.Second) || !strings.Contains(c.Desired.Reason, "restart 1 of 2") {
		t.Fatalf("change = %+v; want attempt 1 counted, due 5s after the loss", c)
	}
}

func TestDecide_PolicyGivesUpAndStaysFailed(t *testing.T) {
	r := webRecord("web-1")
	r.Restart.Count, r.Restart.Attempts = 2, 2
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{r}, taskIn("web-1", fsm.StateFailed))))
	if c.NewTask || c.Desired.Settled != "web-1" || !strings.Contains(c.Desired.Reason, "exceeded 2 restart attempts") {
		t.Fatalf("change = %+v; want settled with the policy's reason", c)
	}
	// Long after its interval, a settled task stays failed.
	v := view([]Declared{webFile()}, []store.Desired{c.Desired}, taskIn("web-1", fsm.StateFailed))
	v.Now += int64(48 * time.Hour)
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 {
		t.Fatalf("plan = %+v; want a settled task left failed", p)
	}
}

func TestDecide_NoRestartBlockGetsNomadsServiceDelay(t *testing.T) {
	f := webFile()
	f.Spec.Restart = nil
	r := webRecord("web-1")
	tv := taskIn("web-1", fsm.StateLost)
	eff := Effective(f.Spec)
	tv.Task.Spec = &eff
	c := one(t, Decide(view([]Declared{f}, []store.Desired{r}, tv)))
	if !c.NewTask || c.Desired.NotBefore != tv.Task.UpdatedAt+int64(fsm.DefaultServiceRestart.Delay) {
		t.Fatalf("change = %+v; want a start %s after the loss", c, fsm.DefaultServiceRestart.Delay)
	}
}

func TestDecide_LostToARebootStartsAtOnceUncounted(t *testing.T) {
	r := webRecord("web-1")
	tv := taskIn("web-1", fsm.StateLost)
	tv.Task.Executor.BootID = "boot-0"
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{r}, tv)))
	if !c.NewTask || c.Desired.NotBefore != 0 || c.Desired.Restart != r.Restart {
		t.Fatalf("change = %+v; want a new task at once, the count unchanged", c)
	}
}

func TestDecide_ExitedUnderItsExecutorsPolicySettles(t *testing.T) {
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateExited))))
	if c.NewTask || c.Desired.Settled != "web-1" || !strings.Contains(c.Desired.Reason, "exit code 3") {
		t.Fatalf("change = %+v; want settled, naming the exit", c)
	}
}

func TestDecide_RefusedSpecSettlesAtOnce(t *testing.T) {
	tv := taskIn("web-1", fsm.StateFailed)
	tv.Rejected, tv.Task.Reason = true, "capability not allowed: net_raw"
	c := one(t, Decide(view([]Declared{webFile()}, []store.Desired{webRecord("web-1")}, tv)))
	if c.Desired.Settled != "web-1" || !strings.Contains(c.Desired.Reason, "net_raw") {
		t.Fatalf("change = %+v; want settled with the refusal", c)
	}
}

func TestDecide_RemovedFileStopsThenForgets(t *testing.T) {
	e := oneEffect(t, Decide(view(nil, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning))))
	if e.Kind != EffectStop || e.Task != "web-1" {
		t.Fatalf("effect = %+v; want web-1 stopped", e)
	}
	c := one(t, Decide(view(nil, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateStopped))))
	if !c.Delete || c.Desired.Name != "web" || c.Desired.Rev != 4 {
		t.Fatalf("change = %+v; want web's record deleted at revision 4", c)
	}
}

func TestDecide_RefusedFileLeavesItsTaskAlone(t *testing.T) {
	v := view(nil, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning))
	v.Problems = []FileProblem{{File: cfgDir + "/web.hcl", Err: ErrConfigDir}}
	p := Decide(v)
	if len(p.Changes)+len(p.Effects) != 0 || !strings.Contains(p.Notes["web"], "left as it is") {
		t.Fatalf("plan = %+v; want web left running with a note", p)
	}
}

func TestDecide_UnreadableConfigDirLeavesEverythingAlone(t *testing.T) {
	v := view(nil, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning))
	v.DirErr = "agent: unsafe config directory: ... mode 0777"
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 || p.Notes["web"] == "" {
		t.Fatalf("plan = %+v; want nothing done", p)
	}
}

func TestDecide_RecordOfAnotherConfigDirIsLeftAlone(t *testing.T) {
	v := view(nil, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning))
	v.ConfigDir = "/srv/other"
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 || !strings.Contains(p.Notes["web"], "not in /srv/other") {
		t.Fatalf("plan = %+v; want nothing done, with a note", p)
	}
}

func TestDecide_DuplicateNameGoesToTheRecordsFile(t *testing.T) {
	other := webFile()
	other.File = cfgDir + "/a-web.hcl" // sorts first, but the record names web.hcl
	p := Decide(view([]Declared{other, webFile()}, []store.Desired{webRecord("web-1")}, taskIn("web-1", fsm.StateRunning)))
	if len(p.Changes)+len(p.Effects) != 0 || len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "a-web.hcl") {
		t.Fatalf("plan = %+v; want web left on web.hcl and a-web.hcl refused", p)
	}
}

func TestDecide_EnabledNameWinsOverAFile(t *testing.T) {
	spec := webSpec()
	r := store.Desired{Name: "web", Source: store.SourceEnabled, File: "/home/u/web.hcl", Spec: &spec, Task: "web-1", Rev: 1}
	f := webFile()
	f.Spec.Args = []string{"different"}
	p := Decide(view([]Declared{f}, []store.Desired{r}, taskIn("web-1", fsm.StateRunning)))
	if len(p.Changes)+len(p.Effects) != 0 || len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "tether enable") {
		t.Fatalf("plan = %+v; want the registration kept and the file refused", p)
	}
}

func TestDecide_DisabledStopsThenForgets(t *testing.T) {
	spec := webSpec()
	r := store.Desired{Name: "web", Source: store.SourceEnabled, Spec: &spec, Task: "web-1", Disabled: true, Rev: 2}
	if e := oneEffect(t, Decide(view(nil, []store.Desired{r}, taskIn("web-1", fsm.StateRunning)))); e.Kind != EffectStop {
		t.Fatalf("effect = %+v; want a stop", e)
	}
	if c := one(t, Decide(view(nil, []store.Desired{r}, taskIn("web-1", fsm.StateStopped)))); !c.Delete {
		t.Fatalf("change = %+v; want a delete", c)
	}
}

func TestDecide_BusyNameIsLeftToItsEffect(t *testing.T) {
	v := view([]Declared{webFile()}, []store.Desired{webRecord("web-2")})
	v.Busy = map[string]bool{"web": true}
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 || !p.Pending["web"] {
		t.Fatalf("plan = %+v; want nothing for a busy name", p)
	}
}

func TestDecide_DamagedTaskLogLeavesItAlone(t *testing.T) {
	v := view([]Declared{webFile()}, []store.Desired{webRecord("web-1")})
	v.Tasks["web-1"] = TaskView{Err: "store: corrupt: task \"web-1\" seq 3: checksum mismatch"}
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 || !strings.Contains(p.Notes["web"], "checksum") {
		t.Fatalf("plan = %+v; want nothing done, the damage noted", p)
	}
}
