package driver

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// groupTask is a task of a test group: its id, hook, flags ("s" sidecar,
// "l" leader) and what it does (a "log" task: appends its id to the
// group's log file, then exits N or sleeps until stopped).
type groupTask struct {
	id, flags string
	hook      fsm.Hook
	then      []string // "exit", "N" or "sleep"
}

// groupLog is the fifo a test group's tasks append their words to: the
// order they ran in, read as it happens (a task has its SIGTERM handler
// once its word is read).
type groupLog struct {
	path  string
	f     *os.File
	lines chan string
	seen  []string
}

func newGroupLog(t *testing.T) *groupLog {
	t.Helper()
	g := &groupLog{path: filepath.Join(t.TempDir(), "order"), lines: make(chan string, 64)}
	if err := unix.Mkfifo(g.path, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(g.path, 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(g.path, os.O_RDWR, 0) // never EOF, never blocks the writers' open
	if err != nil {
		t.Fatal(err)
	}
	g.f = f
	t.Cleanup(func() { f.Close() })
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		close(g.lines)
	}()
	return g
}

// wait reads the log until word (read already, or now).
func (g *groupLog) wait(t *testing.T, word string) {
	t.Helper()
	if slices.Contains(g.seen, word) {
		return
	}
	ctx := ctxT(t)
	for {
		select {
		case l, ok := <-g.lines:
			if !ok {
				t.Fatalf("the group log closed before %q: %v", word, g.seen)
			}
			g.seen = append(g.seen, l)
			if l == word {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %q in the group log: %v", word, g.seen)
		}
	}
}

// order is every word the tasks wrote (call it once they are all over).
func (g *groupLog) order(t *testing.T) []string {
	t.Helper()
	if _, err := g.f.WriteString("end\n"); err != nil {
		t.Fatal(err)
	}
	g.wait(t, "end")
	return g.seen[:len(g.seen)-1]
}

// recordGroup records the tasks of one test group (CreateTask each, all
// before any start) and returns their ids and the group's log.
func recordGroup(t *testing.T, d *Driver, dir string, tasks ...groupTask) ([]string, *groupLog) {
	t.Helper()
	glog := newGroupLog(t)
	logf := glog.path
	var ids []string
	for _, g := range tasks {
		ids = append(ids, g.id)
	}
	allocs := statedir.Layout{Dir: dir}.Alloc("g1")
	for _, g := range tasks {
		spec := taskSpec(t, dir, append([]string{"log", logf, g.id}, g.then...)...)
		spec.Alloc = &fsm.Alloc{ID: "g1", Dir: allocs.Shared(), TaskDir: allocs.Task(g.id), Tasks: ids,
			Hook: g.hook, Sidecar: strings.Contains(g.flags, "s"), Leader: strings.Contains(g.flags, "l")}
		st, err := d.CreateTask(ctxT(t), g.id, spec)
		if err != nil || st.State != fsm.StateCreated {
			t.Fatalf("CreateTask %s: %s %v", g.id, st.State, err)
		}
	}
	return ids, glog
}

func before(order []string, a, b string) bool {
	i, j := slices.Index(order, a), slices.Index(order, b)
	return i >= 0 && j >= 0 && i < j
}

func finalOf(t *testing.T, tasks []fsm.Task, id string) fsm.Task {
	t.Helper()
	for _, x := range tasks {
		if x.ID == id {
			return x
		}
	}
	t.Fatalf("no task %s in %v", id, tasks)
	return fsm.Task{}
}

// TestRunGroup_NomadOrder: prestart tasks first (main waits for the
// non-sidecar one to exit and the sidecar to start), then main, then
// poststart; once every keeper has ended the sidecars are stopped, then
// poststop runs; every task ends reaped.
func TestRunGroup_NomadOrder(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ids, logf := recordGroup(t, d, dir,
		groupTask{id: "init", hook: fsm.HookPrestart, then: []string{"exit", "0"}},
		groupTask{id: "proxy", hook: fsm.HookPrestart, flags: "s", then: []string{"sleep"}},
		groupTask{id: "web", hook: fsm.HookMain, then: []string{"exit", "0"}},
		groupTask{id: "warm", hook: fsm.HookPoststart, then: []string{"exit", "0"}},
		groupTask{id: "clean", hook: fsm.HookPoststop, then: []string{"exit", "0"}},
	)
	var steps []string
	final, err := d.RunGroup(ctxT(t), ids, false, func(p GroupProgress) {
		s := p.Step
		steps = append(steps, s.String())
		if slices.Contains(s.Start, "web") {
			logf.wait(t, "proxy") // the sidecar has its SIGTERM handler before it can be stopped
		}
	})
	if err != nil {
		t.Fatalf("RunGroup: %v (steps %v)", err, steps)
	}
	order := logf.order(t)
	for _, p := range [][2]string{{"init", "web"}, {"proxy", "web"}, {"web", "proxy-stopped"}, {"warm", "proxy-stopped"}, {"proxy-stopped", "clean"}} {
		if !before(order, p[0], p[1]) {
			t.Errorf("%s not before %s: %v (steps %v)", p[0], p[1], order, steps)
		}
	}
	if order[len(order)-1] != "clean" {
		t.Errorf("poststop did not run last: %v", order)
	}
	for _, x := range final {
		want := fsm.StateExited
		if x.ID == "proxy" {
			want = fsm.StateStopped
		}
		if x.State != want || x.State == fsm.StateExited && x.Exit.Code != 0 {
			t.Errorf("%s ended %s %v, want %s", x.ID, x.State, x.Exit, want)
		}
		checkReaped(t, d, x)
	}
}

// TestRunGroup_FailedSiblingStopsGroup is Nomad's failed_sibling job: a
// task that fails stops the one that runs on.
func TestRunGroup_FailedSiblingStopsGroup(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ids, _ := recordGroup(t, d, dir,
		groupTask{id: "failed_sibling", hook: fsm.HookMain, then: []string{"sleep"}},
		groupTask{id: "failure", hook: fsm.HookMain, then: []string{"exit", "99"}},
	)
	final, err := d.RunGroup(ctxT(t), ids, false, nil)
	if err != nil {
		t.Fatalf("RunGroup: %v", err)
	}
	if f := finalOf(t, final, "failure"); f.State != fsm.StateExited || f.Exit.Code != 99 {
		t.Errorf("failure: %s %v", f.State, f.Exit)
	}
	if s := finalOf(t, final, "failed_sibling"); s.State != fsm.StateStopped {
		t.Errorf("failed_sibling: %s, want stopped", s.State)
	}
	for _, x := range final {
		checkReaped(t, d, x)
	}
}

// TestRunGroup_FailedPrestart: main never runs; it is settled (stopped
// without an executor), and poststop still runs (the group's clean-up).
func TestRunGroup_FailedPrestart(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ids, logf := recordGroup(t, d, dir,
		groupTask{id: "init", hook: fsm.HookPrestart, then: []string{"exit", "3"}},
		groupTask{id: "web", hook: fsm.HookMain, then: []string{"sleep"}},
		groupTask{id: "clean", hook: fsm.HookPoststop, then: []string{"exit", "0"}},
	)
	final, err := d.RunGroup(ctxT(t), ids, false, nil)
	if err != nil {
		t.Fatalf("RunGroup: %v", err)
	}
	if w := finalOf(t, final, "web"); w.State != fsm.StateStopped || w.Nonce != "" {
		t.Errorf("web: %s (nonce %q), want stopped without ever being spawned", w.State, w.Nonce)
	}
	if order := logf.order(t); !slices.Equal(order, []string{"init", "clean"}) {
		t.Errorf("order %v, want init then clean", order)
	}
}

// sharedDrivers are two drivers on one state directory and one store, as
// two tether processes are.
func sharedDrivers(t *testing.T) (string, *Driver, *Driver) {
	t.Helper()
	dir := stateDir(t)
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(statedir.Layout{Dir: dir}.Store(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	open := func() *Driver {
		d, err := Open(Config{StateDir: dir, Store: s, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return dir, open(), open()
}

// TestStopGroup_WhileAnotherDrives: a stop of the group from another
// driver records the first wave (the leader), and the group's driver
// carries it through: the rest stopped, poststop run; the stopper returns
// once the group is over. Only one of them drives at a time.
func TestStopGroup_WhileAnotherDrives(t *testing.T) {
	dir, d1, d2 := sharedDrivers(t)
	ids, logf := recordGroup(t, d1, dir,
		groupTask{id: "proxy", hook: fsm.HookPrestart, flags: "s", then: []string{"sleep"}},
		groupTask{id: "web", hook: fsm.HookMain, flags: "l", then: []string{"sleep"}},
		groupTask{id: "api", hook: fsm.HookMain, then: []string{"sleep"}},
		groupTask{id: "clean", hook: fsm.HookPoststop, then: []string{"exit", "0"}},
	)
	ctx := ctxT(t)
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		mainStarted := false
		_, err := d1.RunGroup(ctx, ids, false, func(p GroupProgress) {
			s := p.Step
			switch {
			case slices.Contains(s.Start, "web"):
				mainStarted = true
			case mainStarted && s.Idle():
				close(running) // the main tasks' start has returned: they run
				mainStarted = false
			}
		})
		done <- err
	}()
	<-running
	logf.wait(t, "web") // both main tasks have their SIGTERM handler
	logf.wait(t, "api")
	for _, id := range []string{"web", "api"} { // both main tasks run
		if st, err := d2.InspectTask(ctx, id); err != nil || st.State == fsm.StateCreated {
			t.Fatalf("%s: %s %v", id, st.State, err)
		}
	}
	if _, err := d2.RunGroup(ctx, ids, false, nil); !errors.As(err, new(*GroupDrivenError)) {
		t.Fatalf("a second driver of the group: %v, want a GroupDrivenError", err)
	}
	final, err := d2.StopGroup(ctx, ids, 0, 0, nil)
	if err != nil {
		t.Fatalf("StopGroup: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("RunGroup: %v", err)
	}
	order := logf.order(t)
	for _, p := range [][2]string{{"web-stopped", "api-stopped"}, {"api-stopped", "proxy-stopped"}, {"proxy-stopped", "clean"}} {
		if !before(order, p[0], p[1]) {
			t.Errorf("%s not before %s: %v", p[0], p[1], order)
		}
	}
	for _, x := range final {
		if want := fsm.StateStopped; x.ID != "clean" && x.State != want || x.ID == "clean" && x.State != fsm.StateExited {
			t.Errorf("%s: %s", x.ID, x.State)
		}
		checkReaped(t, d2, x)
	}
}

// TestRunGroup_ResumedAfterItsDriverDied: a group whose driver went away
// (its context ended and its process abandoned: nothing stopped) while a
// keeper ended is finished by the next driver from the log: the sidecar
// stopped, poststop run. Recover leaves its waiting task to the group.
func TestRunGroup_ResumedAfterItsDriverDied(t *testing.T) {
	dir, d1, d2 := sharedDrivers(t)
	ids, logf := recordGroup(t, d1, dir,
		groupTask{id: "proxy", hook: fsm.HookPrestart, flags: "s", then: []string{"sleep"}},
		groupTask{id: "web", hook: fsm.HookMain, then: []string{"sleep"}},
		groupTask{id: "clean", hook: fsm.HookPoststop, then: []string{"exit", "0"}},
	)
	ctx, cancel := context.WithCancel(ctxT(t))
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		webStarted := false
		_, err := d1.RunGroup(ctx, ids, false, func(p GroupProgress) {
			s := p.Step
			switch {
			case slices.Contains(s.Start, "web"):
				webStarted = true
			case webStarted && s.Idle():
				close(started) // the start of web has returned: it runs
				webStarted = false
			}
		})
		done <- err
	}()
	<-started
	if st, err := d2.InspectTask(ctxT(t), "web"); err != nil || st.State != fsm.StateRunning {
		t.Fatalf("web: %s %v", st.State, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunGroup after its context ended: %v", err)
	}
	d1.Abandon()
	rep, err := d2.Recover(ctxT(t))
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	for _, r := range rep.Tasks {
		if r.ID == "clean" && (r.To != fsm.StateCreated || !strings.Contains(r.Action, "group g1")) {
			t.Errorf("recover of the waiting poststop task: %+v", r)
		}
	}
	// web is stopped behind the group's back while nobody drives it.
	if st, err := d2.StopTask(ctxT(t), "web", 0, 0); err != nil || st.State != fsm.StateStopped {
		t.Fatalf("stop web: %s %v", st.State, err)
	}
	final, err := d2.RunGroup(ctxT(t), ids, false, nil)
	if err != nil {
		t.Fatalf("RunGroup resumed: %v", err)
	}
	if order := logf.order(t); !before(order, "proxy-stopped", "clean") {
		t.Errorf("order %v: the sidecar stopped, then poststop", order)
	}
	for _, x := range final {
		checkReaped(t, d2, x)
	}
}

// TestStartCreated: a created task waits (WaitTask says so), starts on
// StartCreated, and a second StartCreated is ErrNotWaiting.
func TestStartCreated(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ids, _ := recordGroup(t, d, dir, groupTask{id: "web", hook: fsm.HookMain, then: []string{"sleep"}})
	if _, err := d.WaitTask(ctxT(t), ids[0]); !errors.Is(err, ErrWaiting) {
		t.Errorf("WaitTask of a waiting task: %v, want ErrWaiting", err)
	}
	st, err := d.StartCreated(ctxT(t), "web")
	if err != nil || st.State != fsm.StateRunning {
		t.Fatalf("StartCreated: %s %v", st.State, err)
	}
	if st, err := d.StartCreated(ctxT(t), "web"); !errors.Is(err, ErrNotWaiting) || st.State != fsm.StateRunning {
		t.Errorf("a second StartCreated: %s %v, want ErrNotWaiting", st.State, err)
	}
	final, err := d.StopTask(ctxT(t), "web", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, final)
}

// TestRestartTask_Groups: the restart of a group's task is refused (the
// group runs and ends together: start its file again); a group of one is
// restarted as a group of one, the new task its only task.
func TestRestartTask_Groups(t *testing.T) {
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ids, _ := recordGroup(t, d, dir,
		groupTask{id: "web", hook: fsm.HookMain, then: []string{"exit", "0"}},
		groupTask{id: "clean", hook: fsm.HookPoststop, then: []string{"exit", "0"}},
	)
	if _, err := d.RunGroup(ctxT(t), ids, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.RestartTask(ctxT(t), "web", "web2"); !errors.Is(err, ErrNotGroup) {
		t.Errorf("restart of a task of a group of two: %v, want ErrNotGroup", err)
	}
	alone := statedir.Layout{Dir: dir}.Alloc("g2")
	spec := taskSpec(t, dir, "exit", "0")
	spec.Alloc = &fsm.Alloc{ID: "g2", Dir: alone.Shared(), TaskDir: alone.Task("solo"), Tasks: []string{"solo"}}
	if _, err := d.StartTask(ctxT(t), "solo", spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitTask(ctxT(t), "solo"); err != nil {
		t.Fatal(err)
	}
	st, _, err := d.RestartTask(ctxT(t), "solo", "solo2")
	if err != nil {
		t.Fatalf("restart of a group of one: %v", err)
	}
	if a := st.Spec.Alloc; a == nil || !slices.Equal(a.Tasks, []string{"solo2"}) || a.ID != "g2" || a.TaskDir != alone.Task("solo") {
		t.Errorf("the restarted task's alloc: %+v", a)
	}
	final, err := d.WaitTask(ctxT(t), "solo2")
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, final)
}
