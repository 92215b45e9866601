package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The name rules, from the CLI: a name stands for its one live task, else
// its most recent one; several live ones are ambiguous; a second live task
// of a given name is refused unless it replaces the first.

// serviceFile writes a task file of a long-running helper task named name
// (kill_signal SIGINT, so that a stop by its own signal is told apart).
func serviceFile(t *testing.T, e *env, name string) string {
	t.Helper()
	args := e.helper("sleep")
	quoted := make([]string, len(args)-1)
	for i, a := range args[1:] {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return writeFile(t, t.TempDir(), name+".hcl", fmt.Sprintf(`task %q {
  driver      = "raw_exec"
  kill_signal = "SIGINT"
  config {
    command = %q
    args    = [%s]
  }
}
`, name, args[0], strings.Join(quoted, ", ")))
}

func TestNames_OneLivePlusEndedResolvesToTheLiveOne(t *testing.T) {
	e := newEnv(t)
	file := serviceFile(t, e, "web")
	old := strings.TrimSpace(e.must("start", file).stdout)
	e.must("stop", "web")
	live := strings.TrimSpace(e.must("start", file).stdout)
	if st := e.status("web"); len(st) != 1 || st[0].ID != live {
		t.Fatalf("status web: %+v, want the live %s (not the ended %s)", st, live, old)
	}
	if r := e.must("logs", "--stdout", "web"); r.stdout != "helper up\n" {
		t.Errorf("logs web: %s", r)
	}
	if r := e.must("stop", "web"); !strings.HasPrefix(r.stdout, live+" stopped") {
		t.Errorf("stop web stopped the wrong task: %s", r)
	}
	// None live: the most recent.
	if st := e.status("web"); len(st) != 1 || st[0].ID != live || st[0].State != "stopped" {
		t.Errorf("status web with none live: %+v, want the latest, %s", st, live)
	}
}

func TestNames_TwoLiveAreAmbiguous(t *testing.T) {
	e := newEnv(t)
	// Commands started without --name share the name of their command:
	// a label, which several live tasks may have.
	a := strings.TrimSpace(e.must(e.runArgs("start", nil, "sleep")...).stdout)
	b := strings.TrimSpace(e.must(e.runArgs("start", nil, "sleep")...).stdout)
	name := a[:strings.LastIndex(a, "-")]
	for _, cmd := range []string{"status", "logs", "stop", "events", "stats"} {
		r := e.tether(cmd, name)
		if r.code != exitError || !strings.Contains(r.stderr, "ambiguous") || !strings.Contains(r.stderr, a) || !strings.Contains(r.stderr, b) || !strings.Contains(r.stderr, "give one's id") {
			t.Errorf("%s %s with two live: want an ambiguity naming both ids and what to do\n%s", cmd, name, r)
		}
	}
	e.must("stop", a)
	// One live again: the name works.
	if st := e.status(name); len(st) != 1 || st[0].ID != b {
		t.Errorf("status %s with one live: %+v, want %s", name, st, b)
	}
	e.must("stop", name)
}

func TestNames_SecondStartOfALiveNameRefused(t *testing.T) {
	e := newEnv(t)
	file := serviceFile(t, e, "web")
	first := strings.TrimSpace(e.must("start", file).stdout)
	for _, args := range [][]string{{"start", file}, {"run", file}, append([]string{"start", "--name", "web"}, append([]string{"--"}, e.helper("sleep")...)...)} {
		r := e.tether(args...)
		if r.code != exitStartFail || !strings.Contains(r.stderr, "a task named web is live: "+first) || !strings.Contains(r.stderr, "--replace") || r.stdout != "" {
			t.Errorf("tether %s with web live: want 125 naming %s and --replace\n%s", args[0], first, r)
		}
	}
	if st := e.status("--all"); len(st) != 1 {
		t.Errorf("a refused start recorded a task: %+v", st)
	}
	e.must("stop", "web")
}

func TestNames_ReplaceStopsTheOldOneThenStarts(t *testing.T) {
	e := newEnv(t)
	file := serviceFile(t, e, "web")
	old := strings.TrimSpace(e.must("start", file).stdout)
	oldPID := e.status(old)[0].PID
	r := e.must("start", "--replace", file, "-v")
	replacement := strings.TrimSpace(r.stdout)
	if replacement == old || !strings.Contains(r.stderr, "stopping "+old) {
		t.Fatalf("start --replace: %s", r)
	}
	st := e.status(old)
	if st[0].State != "stopped" || testproc.Alive(oldPID) {
		t.Errorf("the replaced task: %+v (its process alive: %v)", st[0], testproc.Alive(oldPID))
	}
	evs := e.events(old)
	if stop := findEvent(evs, "stop-requested"); stop == nil || stop.Signal != int(syscall.SIGINT) || stop.ReplacedBy != replacement {
		t.Errorf("the replaced task was not stopped with its kill signal SIGINT, linked to %s: %+v", replacement, evs)
	}
	if created := findEvent(e.events(replacement), "task-created"); created.Replaces != old {
		t.Errorf("the replacement's task-created does not name %s: %+v", old, created)
	}
	if st := e.status("web"); len(st) != 1 || st[0].ID != replacement || st[0].State != "running" {
		t.Errorf("status web: %+v, want the replacement %s running", st, replacement)
	}
	e.must("stop", "web")
}

func TestNames_RestartStopsWithTheKillSignalAndStartsTheSameSpec(t *testing.T) {
	e := newEnv(t)
	file := serviceFile(t, e, "web")
	old := strings.TrimSpace(e.must("start", file).stdout)
	r := e.must("restart", "web")
	replacement := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(replacement, "web-") || replacement == old || r.stderr != "" {
		t.Fatalf("restart web: %s", r)
	}
	if stop := findEvent(e.events(old), "stop-requested"); stop == nil || stop.Signal != int(syscall.SIGINT) || stop.ReplacedBy != replacement {
		t.Errorf("restart did not stop with the task's kill signal SIGINT, linked to %s: %+v", replacement, e.events(old))
	}
	if created := findEvent(e.events(replacement), "task-created"); created.Replaces != old {
		t.Errorf("the new task's task-created does not name %s: %+v", old, created)
	}
	// The same spec, in the same allocation, whose only task is now the
	// replacement (a group of one restarts as a group of one).
	oldSpec, newSpec := findEvent(e.events(old), "task-created").Spec, findEvent(e.events(replacement), "task-created").Spec
	sameApartFromTasks := func(a, b []byte) bool {
		var x, y map[string]any
		if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
			return false
		}
		xa, _ := x["Alloc"].(map[string]any)
		ya, _ := y["Alloc"].(map[string]any)
		if xa == nil || ya == nil || fmt.Sprint(xa["Tasks"]) != "["+old+"]" || fmt.Sprint(ya["Tasks"]) != "["+replacement+"]" {
			return false
		}
		delete(xa, "Tasks")
		delete(ya, "Tasks")
		return reflect.DeepEqual(x, y)
	}
	if len(oldSpec) == 0 || !sameApartFromTasks(oldSpec, newSpec) {
		t.Errorf("the restarted spec differs (beyond its allocation's task list, which names the new task):\n%s\n%s", oldSpec, newSpec)
	}
	// By id too; and a restart of an ended task starts it again.
	again := strings.TrimSpace(e.must("restart", replacement).stdout)
	e.must("stop", "web")
	if st := e.status(again); st[0].State != "stopped" {
		t.Fatalf("%+v", st)
	}
	last := strings.TrimSpace(e.must("restart", "web").stdout)
	if st := e.status("web"); len(st) != 1 || st[0].ID != last || st[0].State != "running" {
		t.Errorf("restart of an ended task: %+v", st)
	}
	e.must("stop", "web")
}

// TestNames_RestartCrashBetweenStopAndStart: a restart is two durable
// steps. A tether SIGKILLed right after the old task's end is recorded
// (after-append:executor-reaped) leaves the old task stopped, its stop
// naming a successor that does not exist, and no process; the restart run
// again starts the spec as that successor.
func TestNames_RestartCrashBetweenStopAndStart(t *testing.T) {
	e := newDaemonlessEnv(t, "a crash point armed in the CLI, whose driver runs the restart (the agent's crash points: TestAgent_CrashPoints)")
	file := serviceFile(t, e, "web")
	old := strings.TrimSpace(e.must("start", file).stdout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.command(ctx, []string{"TETHER_CRASHPOINT=after-append:executor-reaped"}, "restart", "web").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the crash point did not fire: %v\n%s", err, out)
	}
	st := e.status("--all")
	if len(st) != 1 || st[0].ID != old || st[0].State != "stopped" {
		t.Fatalf("after the crash: %+v, want only the old task, stopped", st)
	}
	testproc.CheckGone(t, e.dir, 10*time.Second)
	promised := findEvent(e.events(old), "stop-requested").ReplacedBy
	if promised == "" {
		t.Fatalf("the crashed restart's stop names no successor: %+v", e.events(old))
	}
	if r := e.tether("status", promised); r.code != exitError {
		t.Fatalf("the successor exists after the crash: %s", r)
	}
	replacement := strings.TrimSpace(e.must("restart", "web").stdout)
	if replacement != promised {
		t.Errorf("the restart run again started %s, want the successor the log promised, %s", replacement, promised)
	}
	if st := e.status("web"); len(st) != 1 || st[0].ID != replacement || st[0].State != "running" {
		t.Fatalf("the restart run again: %+v", st)
	}
	if created := findEvent(e.events(replacement), "task-created"); created.Replaces != old {
		t.Errorf("the successor's task-created does not name %s: %+v", old, created)
	}
	e.must("stop", "web")
}

func findEvent(evs []eventRow, name string) *eventRow {
	for i := range evs {
		if evs[i].Event == name {
			return &evs[i]
		}
	}
	return nil
}

// Issue 34: several names per command. `tether stop a b c` stops the
// three at once, each said on its own line in the order given; a name
// that stands for nothing is said and makes the exit code 1, whatever
// its place among the others; a second stop says each has ended.
func TestNames_StopSeveralEachOnItsLineTheWorstCode(t *testing.T) {
	e := newEnv(t)
	ids := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		ids[n] = strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", n}, "sleep")...).stdout)
	}
	r := e.tether("stop", "a", "nosuch", "b", "c")
	if r.code != exitError || !strings.Contains(r.stderr, `"nosuch"`) {
		t.Fatalf("stop a nosuch b c: want exit 1 naming nosuch\n%s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("stop of three: want three lines\n%s", r)
	}
	for i, n := range []string{"a", "b", "c"} {
		if !strings.HasPrefix(lines[i], ids[n]+" stopped") {
			t.Errorf("line %d: %q, want %s stopped (the order given)", i, lines[i], ids[n])
		}
	}
	for _, st := range e.status("--all") {
		if st.State != "stopped" {
			t.Errorf("task %s is %s after the stop, want stopped", st.ID, st.State)
		}
	}
	// The worst code, wherever the failure is: first, last, or none.
	for _, args := range [][]string{{"nosuch", "a", "b"}, {"a", "b", "nosuch"}} {
		if r := e.tether(append([]string{"stop"}, args...)...); r.code != exitError {
			t.Errorf("stop %v: exit %d, want 1\n%s", args, r.code, r)
		}
	}
	if r := e.must("stop", "a", "b", "c"); strings.Count(r.stderr, "is already stopped") != 3 {
		t.Errorf("stop of three stopped tasks: want each said ended\n%s", r)
	}
}

// wait of several exits with the largest of their codes, whatever their
// order; each end is said on stderr.
func TestNames_WaitSeveralExitsWithTheLargestCode(t *testing.T) {
	e := newEnv(t)
	e.tether(e.runArgs("run", []string{"--name", "three"}, "exit", "3")...)
	e.tether(e.runArgs("run", []string{"--name", "five"}, "exit", "5")...)
	e.tether(e.runArgs("run", []string{"--name", "zero"}, "exit", "0")...)
	for _, args := range [][]string{{"three", "five", "zero"}, {"five", "three"}, {"zero", "three"}} {
		want := 3
		if slices.Contains(args, "five") {
			want = 5
		}
		if r := e.tether(append([]string{"wait"}, args...)...); r.code != want {
			t.Errorf("wait %v: exit %d, want %d\n%s", args, r.code, want, r)
		}
	}
	if r := e.tether("wait", "zero", "nosuch"); r.code != exitError {
		t.Errorf("wait zero nosuch: exit %d, want 1\n%s", r.code, r)
	}
}

// twoGroupJob writes a job file "app" with groups "web" and "db", each a
// long-running helper task.
func twoGroupJob(t *testing.T, e *env) string {
	t.Helper()
	args := e.helper("sleep")
	quoted := make([]string, len(args)-1)
	for i, a := range args[1:] {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	task := func(name string) string {
		return fmt.Sprintf(`    task %q {
      driver = "raw_exec"
      config {
        command = %q
        args    = [%s]
      }
    }
`, name, args[0], strings.Join(quoted, ", "))
	}
	return writeFile(t, t.TempDir(), "app.nomad", "job \"app\" {\n  group \"web\" {\n"+task("server")+"  }\n  group \"db\" {\n"+task("pg")+"  }\n}\n")
}

// A word is a task's name, then JOB.GROUP, then a job: a job's name
// stops its groups (as groups), a group's stops it alone, and a lone task
// named like the job is the task's.
func TestNames_JobAndGroupNamesStopTheirGroups(t *testing.T) {
	e := newEnv(t)
	job := twoGroupJob(t, e)
	e.must("start", "--min-uptime", "0", job)
	state := func() map[string]string {
		m := map[string]string{}
		for _, s := range e.status("--all") {
			m[s.Name] = s.State
		}
		return m
	}
	// A lone task named "app" takes the word from the job.
	lone := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "app"}, "sleep")...).stdout)
	if r := e.must("stop", "app"); !strings.HasPrefix(r.stdout, lone+" stopped") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stop app with a task named app: want that task alone\n%s", r)
	}
	if st := state(); st["server"] != "running" || st["pg"] != "running" {
		t.Fatalf("the job's tasks after stop of the task named like it: %v", st)
	}
	// The group: its task alone.
	if r := e.must("stop", "app.db"); !strings.Contains(r.stdout, "pg-") || strings.Contains(r.stdout, "server-") {
		t.Fatalf("stop app.db: want pg's end alone\n%s", r)
	}
	if st := state(); st["server"] != "running" || st["pg"] != "stopped" {
		t.Fatalf("after stop app.db: %v", st)
	}
	// With the task named app gone (ended, it is still the name's: the
	// name rule comes first), its id out of the way: the job by a name
	// no task has.
	e.must("gc")
	if r := e.must("stop", "app"); !strings.Contains(r.stdout, "server-") {
		t.Fatalf("stop app (the job): want the web group's task stopped\n%s", r)
	}
	if st := state(); st["server"] != "stopped" {
		t.Fatalf("after stop of the job: %v", st)
	}
	if r := e.tether("stop", "app.nosuch"); r.code != exitError || !strings.Contains(r.stderr, "no task, group (JOB.GROUP) or job") {
		t.Fatalf("stop of an unknown group: %s", r)
	}
}

// signal takes several names, the signal last; events of several prints
// each task's table under its name, and --json every event with its task.
func TestNames_SignalAndEventsOfSeveral(t *testing.T) {
	e := newEnv(t)
	a := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "a"}, "sleep")...).stdout)
	b := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "b"}, "sleep")...).stdout)
	r := e.must("signal", "a", "b", "SIGCONT")
	if !strings.Contains(r.stderr, a+": sent SIGCONT") || !strings.Contains(r.stderr, b+": sent SIGCONT") {
		t.Fatalf("signal a b SIGCONT: %s", r)
	}
	if r := e.tether("signal", "a", "b"); r.code != exitUsage || !strings.Contains(r.stderr, "last argument") {
		t.Fatalf("signal a b (no signal): want a usage error saying the signal goes last\n%s", r)
	}
	r = e.must("events", "a", "b")
	if !strings.Contains(r.stdout, "==> "+a+" (a) <==") || !strings.Contains(r.stdout, "==> "+b+" (b) <==") || strings.Count(r.stdout, "TIME ") != 2 {
		t.Fatalf("events a b: %s", r)
	}
	var evs []struct {
		Task  string `json:"task"`
		Event string `json:"event"`
	}
	if err := json.Unmarshal([]byte(e.must("events", "--json", "a", "b").stdout), &evs); err != nil {
		t.Fatal(err)
	}
	tasks := map[string]int{}
	for _, ev := range evs {
		tasks[ev.Task]++
	}
	if len(tasks) != 2 || tasks[a] == 0 || tasks[b] == 0 {
		t.Fatalf("events --json a b: events by task %v", tasks)
	}
	e.must("stop", "a", "b")
}
