package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

func named(id, name string, state fsm.State, created int64) fsm.Task {
	return fsm.Task{ID: id, State: state, CreatedAt: created, Spec: &fsm.Spec{Name: name}}
}

func TestPickNamed_Rules(t *testing.T) {
	ended1 := named("web-1", "web", fsm.StateExited, 1)
	ended2 := named("web-2", "web", fsm.StateStopped, 2)
	live3 := named("web-3", "web", fsm.StateRunning, 3)
	live4 := named("web-4", "web", fsm.StateRestarting, 4)
	other := named("db-1", "db", fsm.StateRunning, 5)
	for _, c := range []struct {
		name  string
		tasks []fsm.Task
		want  string // the id picked, or the error's
		err   error
		among []string // the live tasks an ambiguity names
	}{
		{"one live and ended ones: the live one", []fsm.Task{ended1, live3, ended2, other}, "web-3", nil, nil},
		{"none live: the most recent", []fsm.Task{ended2, ended1, other}, "web-2", nil, nil},
		{"two live: ambiguous, both named", []fsm.Task{ended1, live4, live3, other}, "", ErrAmbiguous, []string{"web-3", "web-4"}},
		{"no task of the name", []fsm.Task{other}, "", ErrUnknownTask, nil},
		{"a task without a spec is no one's", []fsm.Task{{ID: "x", State: fsm.StateRunning}}, "", ErrUnknownTask, nil},
	} {
		got, err := PickNamed(c.tasks, "web")
		if !errors.Is(err, c.err) || err == nil && got.ID != c.want {
			t.Errorf("%s: got %q, %v; want %q, %v", c.name, got.ID, err, c.want, c.err)
			continue
		}
		var ne *NameError
		if c.among != nil {
			if !errors.As(err, &ne) {
				t.Fatalf("%s: %v is not a *NameError", c.name, err)
			}
			var ids []string
			for _, t := range ne.Tasks {
				ids = append(ids, t.ID)
			}
			if !slices.Equal(ids, c.among) {
				t.Errorf("%s: names %v, want %v (oldest first)", c.name, ids, c.among)
			}
		}
	}
	// Ties in creation time go to the larger id, so the pick is a
	// function of the tasks, not of their order.
	a, b := named("web-a", "web", fsm.StateExited, 7), named("web-b", "web", fsm.StateExited, 7)
	for _, ts := range [][]fsm.Task{{a, b}, {b, a}} {
		if got, err := PickNamed(ts, "web"); err != nil || got.ID != "web-b" {
			t.Errorf("tie: %q, %v; want web-b", got.ID, err)
		}
	}
}

func TestResolve_NameStandsForItsLiveTaskElseItsLatest(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := taskSpec(t, dir, "sleep")
	spec.Name = "web"
	if _, err := d.StartTask(ctx, "web-old", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StopTask(ctx, "web-old", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StartTask(ctx, "web-new", spec); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{"web": "web-new", "web-old": "web-old", "web-new": "web-new"} {
		if info, err := d.Resolve(ctx, arg); err != nil || info.ID != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", arg, info.ID, err, want)
		}
	}
	if _, err := d.StopTask(ctx, "web-new", 0, 0); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Resolve(ctx, "web"); err != nil || info.ID != "web-new" {
		t.Errorf("Resolve(web) with none live = %q, %v; want the latest, web-new", info.ID, err)
	}
	if _, err := d.Resolve(ctx, "nobody"); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("Resolve(nobody) = %v, want ErrUnknownTask", err)
	}
}

func TestStartNamed_RefusesASecondLiveTaskOfTheName(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := taskSpec(t, dir, "sleep")
	spec.Name = "web"
	if _, _, err := d.StartNamed(ctx, "web-1", spec, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.StartNamed(ctx, "web-2", spec, StartOptions{})
	var ne *NameError
	if !errors.Is(err, ErrNameTaken) || !errors.As(err, &ne) || len(ne.Tasks) != 1 || ne.Tasks[0].ID != "web-1" {
		t.Fatalf("second start: %v; want ErrNameTaken naming web-1", err)
	}
	if _, err := d.TaskEvents(ctx, "web-2"); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("the refused start recorded something: %v", err)
	}
	st, err := d.StopTask(ctx, "web-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, st)
	// Ended, the name is free again.
	if _, _, err := d.StartNamed(ctx, "web-3", spec, StartOptions{}); err != nil {
		t.Fatalf("start after the stop: %v", err)
	}
	if _, err := d.StopTask(ctx, "web-3", 0, 0); err != nil {
		t.Fatal(err)
	}
}

func TestStartNamed_ConcurrentStartsOfOneNameStartOne(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := taskSpec(t, dir, "sleep")
	spec.Name = "web"
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = d.StartNamed(ctx, fmt.Sprintf("web-%d", i), spec, StartOptions{})
		})
	}
	wg.Wait()
	started := 0
	for i, err := range errs {
		switch {
		case err == nil:
			started++
			if _, err := d.StopTask(ctx, fmt.Sprintf("web-%d", i), 0, 0); err != nil {
				t.Fatal(err)
			}
		case !errors.Is(err, ErrNameTaken):
			t.Errorf("start %d: %v, want success or ErrNameTaken", i, err)
		}
	}
	if started != 1 {
		t.Fatalf("%d of %d concurrent starts of one name started, want 1: %v", started, n, errs)
	}
}

func TestStartNamed_ReplaceStopsTheOldOneFirst(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := taskSpec(t, dir, "sleep")
	spec.Name = "web"
	if _, _, err := d.StartNamed(ctx, "web-1", spec, StartOptions{}); err != nil {
		t.Fatal(err)
	}
	var stopping []string
	t2, replaced, err := d.StartNamed(ctx, "web-2", spec, StartOptions{Replace: true, Stopping: func(t fsm.Task) { stopping = append(stopping, t.ID) }})
	if err != nil || t2.State != fsm.StateRunning {
		t.Fatalf("replace: %s, %v", t2.State, err)
	}
	if len(replaced) != 1 || replaced[0].ID != "web-1" || replaced[0].State != fsm.StateStopped || !slices.Equal(stopping, []string{"web-1"}) {
		t.Fatalf("replaced %+v (stopping %v), want web-1 stopped", replaced, stopping)
	}
	checkReaped(t, d, replaced[0])
	old, _ := d.TaskEvents(ctx, "web-1")
	created, _ := d.TaskEvents(ctx, "web-2")
	if stop := old[slices.IndexFunc(old, func(e fsm.Event) bool { return e.Type == fsm.EventStopRequested })]; stop.ReplacedBy != "web-2" || created[0].Replaces != "web-1" {
		t.Errorf("not linked: the stop's ReplacedBy %q, the creation's Replaces %q", stop.ReplacedBy, created[0].Replaces)
	}
	if end, begin := old[len(old)-1], created[0]; end.Type != fsm.EventExecutorReaped || end.Time > begin.Time {
		t.Errorf("the old task's end (%s at %d) is not before the new one's creation (%d)", end.Type, end.Time, begin.Time)
	}
	if _, err := d.StopTask(ctx, "web-2", 0, 0); err != nil {
		t.Fatal(err)
	}
}

func TestRestartTask_StopsThenStartsTheSameSpec(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := taskSpec(t, dir, "sleep")
	spec.Name, spec.KillTimeout = "web", 3e9
	if _, err := d.StartTask(ctx, "web-1", spec); err != nil {
		t.Fatal(err)
	}
	t2, old, err := d.RestartTask(ctx, "web-1", "web-2")
	if err != nil || t2.State != fsm.StateRunning || old.State != fsm.StateStopped {
		t.Fatalf("restart: new %s, old %s, %v", t2.State, old.State, err)
	}
	checkReaped(t, d, old)
	if old.StopGrace != spec.KillTimeout {
		t.Errorf("the stop's grace was %s, want the task's kill_timeout %s", old.StopGrace, spec.KillTimeout)
	}
	if got := *t2.Spec; got.Name != "web" || got.Command != spec.Command || !slices.Equal(got.Args, spec.Args) {
		t.Errorf("the new task's spec %+v is not the old one's", got)
	}
	// An ended task restarts without a stop; another live one of its name
	// refuses it.
	if _, _, err := d.RestartTask(ctx, "web-1", "web-3"); !errors.Is(err, ErrNameTaken) {
		t.Errorf("restart of an ended task while web-2 is live: %v, want ErrNameTaken", err)
	}
	if _, err := d.StopTask(ctx, "web-2", 0, 0); err != nil {
		t.Fatal(err)
	}
	t3, _, err := d.RestartTask(ctx, "web-2", "web-3")
	if err != nil || t3.State != fsm.StateRunning {
		t.Fatalf("restart of an ended task: %s, %v", t3.State, err)
	}
	if _, err := d.StopTask(ctx, "web-3", 0, 0); err != nil {
		t.Fatal(err)
	}
}

// inGroup is a task of job job, group group, allocation alloc.
func inGroup(id, name, job, group, alloc string, state fsm.State, created int64) fsm.Task {
	return fsm.Task{ID: id, State: state, CreatedAt: created,
		Spec: &fsm.Spec{Name: name, Job: job, Group: group, Alloc: &fsm.Alloc{ID: alloc}}}
}

func ids(ts []fsm.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// Rules 5 to 7, in order: a task (by id, then by name), then JOB.GROUP,
// then a job; each row also names a word that a later rule would take
// differently, so that an order changed is caught.
func TestPickTarget_TaskThenGroupThenJob(t *testing.T) {
	tasks := []fsm.Task{
		// Job "app": group "api" (a prestart task that completed, and the
		// server), and group "web" whose task is named "app" too.
		inGroup("init-1", "init", "app", "api", "a1", fsm.StateExited, 1),
		inGroup("server-1", "server", "app", "api", "a1", fsm.StateRunning, 2),
		inGroup("app-1", "app", "app", "web", "a2", fsm.StateRunning, 3),
		// A lone task named like the job's group "app.api".
		named("lone-1", "app.api", fsm.StateRunning, 4),
		// Job "db": ended allocations only, its task restarted in its
		// allocation once, then started again in a new one.
		inGroup("pg-1", "pg", "db", "main", "d1", fsm.StateStopped, 5),
		inGroup("pg-2", "pg", "db", "main", "d1", fsm.StateStopped, 6),
		inGroup("pg-3", "pg", "db", "main", "d2", fsm.StateExited, 7),
		// Job "svc": group "web" with count 2 live, one copy's task
		// restarted in its allocation (the ended one is left out).
		inGroup("w0-1", "web[0]", "svc", "web", "s1", fsm.StateStopped, 8),
		inGroup("w0-2", "web[0]", "svc", "web", "s1", fsm.StateRunning, 9),
		inGroup("w1-1", "web[1]", "svc", "web", "s2", fsm.StateRunning, 10),
		inGroup("old-1", "web", "svc", "web", "s0", fsm.StateExited, 0),
	}
	for _, c := range []struct {
		arg   string
		kind  TargetKind
		job   string
		group string
		want  []string
	}{
		{"server-1", TargetTask, "", "", []string{"server-1"}}, // an id
		{"app", TargetTask, "", "", []string{"app-1"}},         // a task's name before the job "app"
		{"app.api", TargetTask, "", "", []string{"lone-1"}},    // a task's name before the group
		{"app.web", TargetGroup, "app", "web", []string{"app-1"}},
		{"db", TargetJob, "db", "", []string{"pg-3"}},                    // none live: each name's latest
		{"db.main", TargetGroup, "db", "main", []string{"pg-3"}},         // the same, for the group
		{"svc", TargetJob, "svc", "", []string{"w0-2", "w1-1"}},          // live allocations only
		{"svc.web", TargetGroup, "svc", "web", []string{"w0-2", "w1-1"}}, // the same, for the group
		{"pg", TargetTask, "", "", []string{"pg-3"}},                     // a name: its latest task
		{"web[0]", TargetTask, "", "", []string{"w0-2"}},                 // a copy's name
		{"server", TargetTask, "", "", []string{"server-1"}},             // a task of a group, by name
	} {
		got, err := PickTarget(tasks, c.arg)
		if err != nil || got.Kind != c.kind || got.Job != c.job || got.Group != c.group || !slices.Equal(ids(got.Tasks), c.want) {
			t.Errorf("PickTarget(%q) = %v %q.%q %v, %v; want %v %q.%q %v", c.arg, got.Kind, got.Job, got.Group, ids(got.Tasks), err, c.kind, c.job, c.group, c.want)
		}
	}
	// A live group: every task of its live allocation, the completed
	// prestart task among them. Without the lone "app.api" task, the word
	// is the group's.
	got, err := PickTarget(slices.DeleteFunc(slices.Clone(tasks), func(t fsm.Task) bool { return t.ID == "lone-1" }), "app.api")
	if err != nil || got.Kind != TargetGroup || !slices.Equal(ids(got.Tasks), []string{"init-1", "server-1"}) {
		t.Errorf("app.api without the lone task: %v %v, %v; want the group's init-1 and server-1", got.Kind, ids(got.Tasks), err)
	}
	// The job "app" once its task named "app" is gone: the job, every
	// task of its live allocations.
	got, err = PickTarget(slices.DeleteFunc(slices.Clone(tasks), func(t fsm.Task) bool { return t.ID == "app-1" }), "app")
	if err != nil || got.Kind != TargetJob || !slices.Equal(ids(got.Tasks), []string{"init-1", "server-1"}) {
		t.Errorf("app without its task named app: %v %v, %v; want the job's init-1 and server-1", got.Kind, ids(got.Tasks), err)
	}
	for _, arg := range []string{"nothing", "", "app.", ".api", "app.nothing", "db.main.x"} {
		_, err := PickTarget(tasks, arg)
		var ne *NameError
		if !errors.Is(err, ErrUnknownTask) || !errors.As(err, &ne) || !strings.Contains(err.Error(), "no task, group (JOB.GROUP) or job") {
			t.Errorf("PickTarget(%q): %v, want ErrUnknownTask naming tasks, groups and jobs", arg, err)
		}
	}
}

// A JOB.GROUP that splits two ways is ambiguous; a name of two live
// tasks is ambiguous as for PickNamed, inside a group too.
func TestPickTarget_AmbiguousSplitsAndNames(t *testing.T) {
	tasks := []fsm.Task{
		inGroup("x-1", "x", "a", "b.c", "1", fsm.StateRunning, 1),
		inGroup("y-1", "y", "a.b", "c", "2", fsm.StateRunning, 2),
		named("z-1", "z", fsm.StateRunning, 3),
		named("z-2", "z", fsm.StateRunning, 4),
	}
	if _, err := PickTarget(tasks, "a.b.c"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), `job "a" group "b.c"`) || !strings.Contains(err.Error(), `job "a.b" group "c"`) {
		t.Errorf("a.b.c: %v, want an ambiguity naming both splits", err)
	}
	if _, err := PickTarget(tasks, "z"); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("z: %v, want ErrAmbiguous", err)
	}
	if got, err := PickTarget(tasks, "a.b"); err != nil || got.Kind != TargetJob || !slices.Equal(ids(got.Tasks), []string{"y-1"}) {
		t.Errorf("a.b: %v %v, %v; want the job a.b", got.Kind, ids(got.Tasks), err)
	}
}

// WaitNameFree waits for the name's lock: while a start or restart of the
// name holds it, a wait ends only with its context; once it is let go
// of, the wait returns at once.
func TestWaitNameFree_WaitsForTheNamesLock(t *testing.T) {
	dir := stateDir(t)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockName(ctxT(t), dir, "web")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if err := WaitNameFree(ctx, dir, "web"); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitNameFree while the lock is held: %v, want it to wait until its context ends", err)
	}
	// Another name's lock is another file.
	if err := WaitNameFree(ctxT(t), dir, "db"); err != nil {
		t.Fatalf("WaitNameFree of another name: %v", err)
	}
	unlock()
	if err := WaitNameFree(ctxT(t), dir, "web"); err != nil {
		t.Fatalf("WaitNameFree once the lock is let go of: %v", err)
	}
}
