package driver

import (
	"errors"
	"fmt"
	"slices"
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
