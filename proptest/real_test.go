package proptest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// The test binary serves the real executor and the real tasks of
// TestDriver_RealProperties (see TestMain).
const (
	modeExecutor = "executor"
	modeTask     = "proptest-task"
)

// runTask is a real task: "exit N" exits with N, "run" runs until killed,
// "ignore-term" ignores SIGTERM. Its last two arguments are the test's
// marker and the task id.
func runTask(args []string) int {
	switch args[0] {
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	}
	select {}
}

// realChecks is the number of checks of the real-process property: fewer
// than the simulation's, each one spawning real processes.
var realChecks = flag.Int("proptest.realchecks", 0, "checks of TestDriver_RealProperties (0: rapid.checks/5, between 10 and 100)")

// realWorld is one check's driver over real executors and processes.
type realWorld struct {
	dir    string // the state directory, also the marker of every process
	st     *store.Store
	d      *driver.Driver
	exe    string
	faults struct {
		sync.Mutex
		plan Plan
		hits map[string]int
		any  int
		hit  []string
	}
}

func (w *realWorld) open(t *rapid.T) {
	st, err := store.Open(filepath.Join(w.dir, "tether.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	// Every log a legal path, and bbolt's page check: here, with no
	// writer, because bbolt's check in a read transaction can report
	// pages freed by a concurrent commit ("reachable freed").
	rep, err := st.Check(context.Background())
	if err != nil {
		_ = st.Close()
		t.Fatalf("store check: %v", err)
	}
	if !rep.OK() {
		_ = st.Close()
		t.Fatalf("legal path: store check: %v", rep.Problems)
	}
	d, err := driver.Open(driver.Config{
		StateDir:    w.dir,
		Store:       st,
		Executors:   driver.NewReal(w.dir, []string{w.exe, modeExecutor}, nil),
		KillTimeout: 2 * time.Second,
		Hooks:       driver.Hooks{Fault: w.fault},
	})
	if err != nil {
		_ = st.Close()
		t.Fatalf("open driver: %v", err)
	}
	w.st, w.d = st, d
}

func (w *realWorld) close(t *rapid.T) {
	if w.d == nil {
		return
	}
	if err := w.d.Close(); err != nil {
		t.Errorf("close driver: %v", err)
	}
	if err := w.st.Close(); err != nil {
		t.Errorf("close store: %v", err)
	}
	w.d, w.st = nil, nil
}

// fault injects the step's drawn faults (named, or the n-th of the step).
func (w *realWorld) fault(point string) error {
	f := &w.faults
	f.Lock()
	defer f.Unlock()
	f.hits[point]++
	f.any++
	if slices.Contains(f.plan.Faults, Point{point, f.hits[point]}) || slices.Contains(f.plan.Faults, Point{Any, f.any}) {
		f.hit = append(f.hit, point)
		return ErrFault
	}
	return nil
}

func (w *realWorld) arm(p Plan) {
	w.faults.Lock()
	w.faults.plan, w.faults.hits, w.faults.any, w.faults.hit = p, map[string]int{}, 0, nil
	w.faults.Unlock()
}

// disarm ends the step's faults and reports whether one fired.
func (w *realWorld) disarm() bool {
	w.faults.Lock()
	defer w.faults.Unlock()
	w.faults.plan = Plan{}
	return len(w.faults.hit) > 0
}

func (w *realWorld) state(t *rapid.T, id string) fsm.State {
	info, err := w.d.InspectTask(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return info.State
}

func (w *realWorld) spec(kind, id string) fsm.Spec {
	s := fsm.Spec{Driver: "raw_exec", Command: w.exe}
	switch kind {
	case "run":
		s.Args = []string{modeTask, "run"}
	case "exit":
		s.Args = []string{modeTask, "exit", "0"}
	case "ignore-term":
		s.Args = []string{modeTask, "ignore-term"}
	case "netraw":
		// exec checks capabilities against the allow list, which lacks
		// net_raw (raw_exec grants none and checks none).
		s.Driver = "exec"
		s.Args = []string{modeTask, "run"}
		s.CapAdd = []string{"net_raw"}
	case "invalid":
		s.Command = ""
	}
	s.Args = append(s.Args, w.dir, id)
	return s
}

// realProc is a live process carrying the marker.
type realProc struct {
	pid      int
	task     string
	executor bool
	cmd      string
}

// live scans /proc for the live (non-zombie) processes whose command line
// carries the marker, and tells executors (-dir=<marker>/tasks/<id>) from
// tasks (<marker> <id> as their last arguments).
func (w *realWorld) live() []realProc {
	var out []realProc
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), w.dir) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && len(stat) > i+2 && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		p := realProc{pid: pid, cmd: strings.Join(args, " ")}
		for _, a := range args {
			if d, ok := strings.CutPrefix(a, "-dir="+filepath.Join(w.dir, "tasks")+"/"); ok {
				p.task, p.executor = d, true
			}
		}
		if !p.executor && len(args) >= 2 && args[len(args)-2] == w.dir {
			p.task = args[len(args)-1]
		}
		out = append(out, p)
	}
	return out
}

// check holds the invariants that are free of races with the driver's
// background work: fold(log) == live state, and no
// live marked process of a task that is terminal or unknown (a terminal
// state is recorded only once the processes are confirmed dead).
func (w *realWorld) check(t *rapid.T) {
	ctx := context.Background()
	var v []string
	// Processes first, states second: a process seen alive was alive
	// before the state was read, so a terminal state then is a violation.
	procs := w.live()
	states := map[string]fsm.Task{}
	if err := w.st.All(ctx, func(id string) error {
		s, err := w.st.LoadTask(ctx, id)
		states[id] = s
		return err
	}); err != nil {
		t.Fatalf("store: %v", err)
	}
	for _, p := range procs {
		s, ok := states[p.task]
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("leak: pid %d (%s) of a task the store does not know", p.pid, p.cmd))
		case s.State.Terminal():
			v = append(v, fmt.Sprintf("terminal means dead: pid %d (%s) alive, task %q is %s", p.pid, p.cmd, p.task, s.State))
		}
	}
	if w.d != nil {
		for _, id := range sortedKeys(states) {
			info, err := w.d.InspectTask(ctx, id)
			if err != nil {
				v = append(v, fmt.Sprintf("inspect %q: %v", id, err))
				continue
			}
			if got, err := w.st.LoadTask(ctx, id); err == nil && !reflect.DeepEqual(info.Task, got) {
				v = append(v, fmt.Sprintf("fold != live: task %q: driver %s v%d, log %s v%d", id, info.State, info.Version, got.State, got.Version))
			}
		}
	}
	if len(v) > 0 {
		t.Fatalf("invariants violated (real processes):\n  %s", strings.Join(v, "\n  "))
	}
}

// checkRecovered holds the strong form after a clean Recover: the live
// marked processes are exactly the executors and task processes of the
// running tasks, one each.
func (w *realWorld) checkRecovered(t *rapid.T) {
	ctx := context.Background()
	want := map[string]bool{}
	_ = w.st.Live(ctx, func(id string) error {
		s, err := w.st.LoadTask(ctx, id)
		if err == nil && s.State != fsm.StateRunning {
			t.Fatalf("no leak: after a clean Recover task %q is %s, not running", id, s.State)
		}
		want[id] = true
		return nil
	})
	seen := map[string]int{}
	for _, p := range w.live() {
		if !want[p.task] {
			t.Fatalf("no leak: after a clean Recover pid %d (%s) is alive, its task is not running", p.pid, p.cmd)
		}
		seen[p.task]++
	}
	for id := range want {
		if seen[id] != 2 {
			t.Fatalf("no leak: after a clean Recover running task %q has %d live processes, want executor and task", id, seen[id])
		}
	}
}

// TestDriver_RealProperties runs the state-machine property against the
// real executor and real processes (this test binary in executor and task
// modes): starts, stops, destroys, signals, tasks and executors killed
// behind the driver's back, restarts with Recover, and faults at every
// effect and append. Leaks are found by scanning /proc for the check's
// marker (its state directory). Agent crashes at crash points are the
// simulation's business: a test process cannot SIGKILL itself and go on.
func TestDriver_RealProperties(t *testing.T) {
	n := *realChecks
	if n == 0 {
		n = min(max(rapidChecks()/5, 10), 100)
	}
	restore := setFlag(t, "rapid.checks", strconv.Itoa(n))
	defer restore()
	defer setFlag(t, "rapid.steps", "12")()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	checks, steps := 0, 0
	began := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		dir, err := os.MkdirTemp("", "tpr-")
		if err != nil {
			rt.Fatal(err)
		}
		w := &realWorld{dir: dir, exe: exe}
		defer func() {
			w.close(rt)
			// Whatever the outcome, nothing of this check may live on.
			for _, p := range w.live() {
				rt.Errorf("leak after the check: pid %d (%s)", p.pid, p.cmd)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			_ = os.RemoveAll(dir)
		}()
		w.open(rt)
		next := 0
		var ids []string
		ctx := context.Background()
		// A fault can leave a task that no goroutine watches (an append
		// that failed leaves it for Recover); so a kill behind the
		// driver's back must end a running task only while no fault has
		// fired in this check.
		faultedEver := false
		wait := func(rt *rapid.T, id string) {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := w.d.WaitTask(wctx, id); err != nil {
				rt.Fatalf("liveness: task %s did not end: %v", id, err)
			}
		}
		pick := func(rt *rapid.T) string {
			if len(ids) == 0 {
				rt.Skip("no task")
			}
			return rapid.SampledFrom(ids).Draw(rt, "task")
		}
		procOf := func(rt *rapid.T, executor bool) realProc {
			var ps []realProc
			for _, p := range w.live() {
				if p.executor == executor && p.task != "" {
					ps = append(ps, p)
				}
			}
			if len(ps) == 0 {
				rt.Skip("no such process")
			}
			slices.SortFunc(ps, func(a, b realProc) int { return strings.Compare(a.task, b.task) })
			return rapid.SampledFrom(ps).Draw(rt, "process")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"start": func(rt *rapid.T) {
				if next >= 3 {
					rt.Skip("enough tasks")
				}
				id := fmt.Sprintf("t%d", next)
				next++
				ids = append(ids, id)
				kind := rapid.SampledFrom([]string{"run", "exit", "ignore-term", "netraw", "invalid"}).Draw(rt, "kind")
				w.arm(drawFaults(rt))
				_, err := w.d.StartTask(ctx, id, w.spec(kind, id))
				faulted := w.disarm()
				faultedEver = faultedEver || faulted
				steps++
				info, ierr := w.d.InspectTask(ctx, id)
				if ierr != nil {
					if faulted && errors.Is(ierr, driver.ErrUnknownTask) {
						ids = ids[:len(ids)-1] // its first append failed: no task
						rt.Logf("start %s (%s): %v, never recorded", id, kind, err)
						return
					}
					rt.Fatalf("inspect %s: %v", id, ierr)
				}
				rt.Logf("start %s (%s): %v, %s", id, kind, err, info.State)
				if faulted {
					return
				}
				switch {
				case (kind == "run" || kind == "ignore-term") && (err != nil || info.State != fsm.StateRunning):
					rt.Fatalf("clean start of %s (%s): %v, %s; want running", id, kind, err, info.State)
				case kind == "exit" && err != nil:
					rt.Fatalf("clean start of %s (exits at once): %v", id, err)
				case (kind == "netraw" || kind == "invalid") && (err == nil || info.State != fsm.StateFailed):
					rt.Fatalf("clean start of %s (%s): %v, %s; want an error, failed", id, kind, err, info.State)
				}
			},
			"stop": func(rt *rapid.T) {
				id := pick(rt)
				w.arm(drawFaults(rt))
				_, err := w.d.StopTask(ctx, id, 0, 200*time.Millisecond)
				faulted := w.disarm()
				faultedEver = faultedEver || faulted
				steps++
				rt.Logf("stop %s: %v", id, err)
				if !faulted {
					if err != nil {
						rt.Fatalf("clean stop of %s: %v", id, err)
					}
					wait(rt, id)
				}
			},
			"destroy": func(rt *rapid.T) {
				id := pick(rt)
				w.arm(drawFaults(rt))
				err := w.d.DestroyTask(ctx, id, true)
				faulted := w.disarm()
				faultedEver = faultedEver || faulted
				steps++
				rt.Logf("destroy %s: %v", id, err)
				if !faulted && err != nil {
					rt.Fatalf("clean destroy of %s: %v", id, err)
				}
			},
			"signal": func(rt *rapid.T) {
				id := pick(rt)
				err := w.d.SignalTask(ctx, id, syscall.SIGINT)
				steps++
				rt.Logf("signal %s: %v", id, err)
				if err == nil {
					wait(rt, id) // SIGINT ends a Go task process
				}
			},
			"task killed": func(rt *rapid.T) {
				p := procOf(rt, false)
				st := w.state(rt, p.task)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
				steps++
				rt.Logf("task %s (%s) pid %d killed behind the driver's back", p.task, st, p.pid)
				if st == fsm.StateRunning && !faultedEver {
					wait(rt, p.task)
				}
			},
			"executor killed": func(rt *rapid.T) {
				p := procOf(rt, true)
				st := w.state(rt, p.task)
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
				steps++
				rt.Logf("executor of %s (%s) pid %d killed behind the driver's back", p.task, st, p.pid)
				if st == fsm.StateRunning && !faultedEver {
					wait(rt, p.task)
				}
			},
			"restart": func(rt *rapid.T) {
				w.close(rt)
				w.open(rt)
				w.arm(drawFaults(rt))
				rep, err := w.d.Recover(ctx)
				faulted := w.disarm()
				faultedEver = faultedEver || faulted
				steps++
				rt.Logf("restart and recover: %v %+v", err, rep.Tasks)
				if faulted {
					return
				}
				if err != nil {
					rt.Fatalf("clean Recover: %v", err)
				}
				w.checkRecovered(rt)
			},
			"": func(rt *rapid.T) { w.check(rt) },
		})
		// The end of a check: a clean restart and Recover, then every
		// task stopped; the deferred scan finds nothing left.
		w.close(rt)
		w.open(rt)
		if _, err := w.d.Recover(ctx); err != nil {
			rt.Fatalf("final clean Recover: %v", err)
		}
		w.checkRecovered(rt)
		for _, id := range ids {
			info, err := w.d.StopTask(ctx, id, syscall.SIGKILL, 0)
			if err != nil || !info.State.Terminal() {
				rt.Fatalf("final stop of %s: %v, %s", id, err, info.State)
			}
		}
		w.check(rt)
	})
	el := time.Since(began)
	t.Logf("real processes: %d checks, %d steps in %s: %.1f checks/s, %.1f steps/s", checks, steps, el.Round(time.Millisecond),
		float64(checks)/el.Seconds(), float64(steps)/el.Seconds())
}

// drawFaults draws up to two faults of a step (no crash: see
// TestDriver_RealProperties).
func drawFaults(t *rapid.T) Plan {
	p := drawPlan(t)
	p.Crash = Point{}
	return p
}

func rapidChecks() int {
	if f := flag.Lookup("rapid.checks"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil {
			return n
		}
	}
	return 100
}

// setFlag sets a command-line flag for one test and returns its restore.
func setFlag(t *testing.T, name, value string) func() {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := flag.Set(name, value); err != nil {
		t.Fatal(err)
	}
	return func() { _ = flag.Set(name, old) }
}
