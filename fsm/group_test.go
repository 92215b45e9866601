package fsm

import (
	"reflect"
	"strings"
	"testing"
)

// gtask is a member of a test group: its id, hook and flags ("s" sidecar,
// "l" leader) and where it stands.
func gtask(id string, hook Hook, flags string, state State, opts ...func(*Task)) Task {
	t := Task{ID: id, State: state, Spec: &Spec{Alloc: &Alloc{ID: "a", Hook: hook,
		Sidecar: strings.Contains(flags, "s"), Leader: strings.Contains(flags, "l")}}}
	if state != StateCreated {
		t.Nonce = "n-" + id // spawned
	}
	if state == StateRunning || state == StateRestarting || state.Terminal() && state != StateFailed {
		t.TaskPID = 100 // launched
	}
	for _, o := range opts {
		o(&t)
	}
	return t
}

func exit(code int) func(*Task) {
	return func(t *Task) { t.Exit = &ExitStatus{Code: code} }
}

// never: a task settled before it ran (created, then stopped).
func never(t *Task) { t.Nonce, t.TaskPID = "", 0 }

func TestGroupState_Next(t *testing.T) {
	P, M, PS, PT := HookPrestart, HookMain, HookPoststart, HookPoststop
	cases := []struct {
		name  string
		g     GroupState
		want  GroupStep
		reads string // a word the ending must say
	}{
		{"fresh: the prestart tasks first",
			GroupState{Tasks: []Task{gtask("init", P, "", StateCreated), gtask("proxy", P, "s", StateCreated), gtask("web", M, "", StateCreated),
				gtask("warm", PS, "", StateCreated), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Start: []string{"init", "proxy"}}, ""},
		{"a prestart task still runs: main waits",
			GroupState{Tasks: []Task{gtask("init", P, "", StateRunning), gtask("proxy", P, "s", StateRunning), gtask("web", M, "", StateCreated)}},
			GroupStep{}, ""},
		{"a prestart sidecar not started yet: main waits",
			GroupState{Tasks: []Task{gtask("init", P, "", StateExited, exit(0)), gtask("proxy", P, "s", StateLaunching), gtask("web", M, "", StateCreated)}},
			GroupStep{}, ""},
		{"prestart done, sidecar started: the main tasks",
			GroupState{Tasks: []Task{gtask("init", P, "", StateExited, exit(0)), gtask("proxy", P, "s", StateRunning), gtask("web", M, "", StateCreated),
				gtask("api", M, "", StateCreated), gtask("warm", PS, "", StateCreated)}},
			GroupStep{Start: []string{"web", "api"}}, ""},
		{"a main task not started yet: poststart waits",
			GroupState{Tasks: []Task{gtask("web", M, "", StateRunning), gtask("api", M, "", StateLaunching), gtask("warm", PS, "", StateCreated)}},
			GroupStep{}, ""},
		{"every main task started: poststart",
			GroupState{Tasks: []Task{gtask("web", M, "", StateRunning), gtask("api", M, "", StateExited, exit(0)), gtask("warm", PS, "", StateCreated),
				gtask("clean", PT, "", StateCreated)}},
			GroupStep{Start: []string{"warm"}}, ""},
		{"a main task done, a poststart one runs: the group runs on",
			GroupState{Tasks: []Task{gtask("web", M, "", StateExited, exit(0)), gtask("warm", PS, "", StateRunning), gtask("proxy", P, "s", StateRunning)}},
			GroupStep{}, ""},
		{"every keeper ended: the sidecars are stopped",
			GroupState{Tasks: []Task{gtask("init", P, "", StateExited, exit(0)), gtask("proxy", P, "s", StateRunning), gtask("web", M, "", StateExited, exit(0)),
				gtask("log", PS, "s", StateRunning), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Stop: []string{"proxy", "log"}}, "every task that keeps it running ended"},
		{"the sidecars stopped: poststop runs",
			GroupState{Tasks: []Task{gtask("proxy", P, "s", StateStopped), gtask("web", M, "", StateExited, exit(0)), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Start: []string{"clean"}}, "every task that keeps it running ended"},
		{"a failed task stops its siblings (Nomad's failed_sibling)",
			GroupState{Tasks: []Task{gtask("failed_sibling", M, "", StateRunning), gtask("failure", M, "", StateExited, exit(99))}},
			GroupStep{Stop: []string{"failed_sibling"}}, "failure exited with code 99"},
		{"a failed prestart: main never starts, the sidecar is stopped",
			GroupState{Tasks: []Task{gtask("init", P, "", StateExited, exit(1)), gtask("proxy", P, "s", StateRunning), gtask("web", M, "", StateCreated),
				gtask("clean", PT, "", StateCreated)}},
			GroupStep{Settle: []string{"web"}, Stop: []string{"proxy"}}, "init exited with code 1"},
		{"a start that failed ends the group",
			GroupState{Tasks: []Task{gtask("web", M, "", StateFailed, func(t *Task) { t.Reason = "command not found" }), gtask("api", M, "", StateRunning)}},
			GroupStep{Stop: []string{"api"}}, "command not found"},
		{"a sidecar that fails ends the group too",
			GroupState{Tasks: []Task{gtask("proxy", P, "s", StateExited, exit(2)), gtask("web", M, "", StateRunning)}},
			GroupStep{Stop: []string{"web"}}, "proxy exited with code 2"},
		{"a lost task ends the group",
			GroupState{Tasks: []Task{gtask("web", M, "", StateLost), gtask("api", M, "", StateRunning)}},
			GroupStep{Stop: []string{"api"}}, "lost"},
		{"the leader ended: the rest are stopped, sidecars last",
			GroupState{Tasks: []Task{gtask("proxy", P, "s", StateRunning), gtask("web", M, "l", StateExited, exit(0)), gtask("api", M, "", StateRunning)}},
			GroupStep{Stop: []string{"api"}}, "leader web ended"},
		{"stop asked: the leader alone first",
			GroupState{Stop: true, Tasks: []Task{gtask("proxy", P, "s", StateRunning), gtask("web", M, "l", StateRunning), gtask("api", M, "", StateRunning),
				gtask("clean", PT, "", StateCreated)}},
			GroupStep{Stop: []string{"web"}}, "stop requested"},
		{"the leader still stopping: the next wave waits",
			GroupState{Tasks: []Task{gtask("proxy", P, "s", StateRunning), gtask("web", M, "l", StateReaping), gtask("api", M, "", StateRunning)}},
			GroupStep{}, ""},
		{"the leader stopped: the others, then the sidecars",
			GroupState{Tasks: []Task{gtask("proxy", P, "s", StateRunning), gtask("web", M, "l", StateStopped), gtask("api", M, "", StateRunning),
				gtask("warm", PS, "", StateCreated)}},
			GroupStep{Settle: []string{"warm"}, Stop: []string{"api"}}, "web was stopped"},
		{"a stop while poststop runs stops it, and the rest never run",
			GroupState{Stop: true, Tasks: []Task{gtask("web", M, "", StateStopped), gtask("clean", PT, "", StateRunning), gtask("report", PT, "", StateCreated)}},
			GroupStep{Settle: []string{"report"}, Stop: []string{"clean"}}, "stop requested"},
		{"a stop before poststop started runs it (the group's clean-up)",
			GroupState{Stop: true, Tasks: []Task{gtask("web", M, "", StateExited, exit(0)), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Start: []string{"clean"}}, "stop requested"},
		{"a stopped poststop task ends the others",
			GroupState{Tasks: []Task{gtask("web", M, "", StateExited, exit(0)), gtask("clean", PT, "", StateStopped), gtask("report", PT, "", StateCreated)}},
			GroupStep{Settle: []string{"report"}}, "every task that keeps it running ended"},
		{"a failed poststop task does not stop the others",
			GroupState{Tasks: []Task{gtask("web", M, "", StateExited, exit(0)), gtask("clean", PT, "", StateExited, exit(3)), gtask("report", PT, "", StateRunning)}},
			GroupStep{}, "every task that keeps it running ended"},
		{"stopped before anything ran: nothing runs, poststop neither",
			GroupState{Stop: true, Tasks: []Task{gtask("init", P, "", StateCreated), gtask("web", M, "", StateCreated), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Settle: []string{"init", "web", "clean"}}, "stop requested"},
		{"a group not recorded whole is settled, poststop too",
			GroupState{Missing: []string{"clean"}, Tasks: []Task{gtask("init", P, "", StateCreated), gtask("web", M, "", StateCreated)}},
			GroupStep{Settle: []string{"init", "web"}}, "not all recorded (clean missing)"},
		{"a task removed after it ended (gc) is not a group never recorded",
			GroupState{Missing: []string{"init"}, Tasks: []Task{gtask("web", M, "", StateRunning), gtask("clean", PT, "", StateCreated)}},
			GroupStep{}, ""},
		{"settled tasks never count as run",
			GroupState{Tasks: []Task{gtask("web", M, "", StateStopped, never), gtask("clean", PT, "", StateCreated)}},
			GroupStep{Settle: []string{"clean"}}, "was stopped"},
		{"over",
			GroupState{Tasks: []Task{gtask("web", M, "", StateExited, exit(0)), gtask("clean", PT, "", StateExited, exit(0))}},
			GroupStep{Over: true}, "every task that keeps it running ended"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.g.Next()
			if !strings.Contains(got.Ending, tc.reads) || tc.reads == "" && got.Ending != "" {
				t.Errorf("ending %q, want one saying %q", got.Ending, tc.reads)
			}
			got.Ending = ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Next() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGroupState_NextIsAFixedPoint: a step's tasks, once it is performed
// (started tasks running, stopped and settled ones stopped), lead to a
// step that does not repeat them: a driver that performs each step and
// asks again always makes progress, and ends.
func TestGroupState_NextIsAFixedPoint(t *testing.T) {
	P, M, PS, PT := HookPrestart, HookMain, HookPoststart, HookPoststop
	g := GroupState{Tasks: []Task{gtask("init", P, "", StateCreated), gtask("proxy", P, "s", StateCreated), gtask("web", M, "l", StateCreated),
		gtask("api", M, "", StateCreated), gtask("warm", PS, "", StateCreated), gtask("log", PS, "s", StateCreated), gtask("clean", PT, "", StateCreated)}}
	byID := func(id string) *Task {
		for i := range g.Tasks {
			if g.Tasks[i].ID == id {
				return &g.Tasks[i]
			}
		}
		t.Fatalf("no task %s", id)
		return nil
	}
	var trail []string
	for steps := 0; ; steps++ {
		if steps > 20 {
			t.Fatalf("no end after 20 steps: %v", trail)
		}
		s := g.Next()
		trail = append(trail, s.String())
		if s.Over {
			break
		}
		if s.Idle() {
			// Wait: the world moves. Every running non-sidecar task ends
			// (init and warm exit 0; then the leader).
			moved := false
			for _, id := range []string{"init", "warm", "web", "clean"} {
				if x := byID(id); x.State == StateRunning {
					x.State, x.Exit = StateExited, &ExitStatus{}
					moved = true
					break
				}
			}
			if !moved {
				t.Fatalf("idle with nothing left to happen: %v", trail)
			}
			continue
		}
		for _, id := range s.Settle {
			*byID(id) = gtask(id, byID(id).Spec.Alloc.Hook, "", StateStopped, never)
		}
		for _, id := range s.Stop {
			x := byID(id)
			x.State = StateStopped
		}
		for _, id := range s.Start {
			x := byID(id)
			x.State, x.Nonce, x.TaskPID = StateRunning, "n", 100
		}
		g.Stop = false
	}
	// warm ends, then the leader: the rest is stopped, the non-sidecar
	// first, and once every other task is gone the poststop task runs.
	want := []string{"start init,proxy", "wait", "start web,api", "start warm,log", "wait", "wait",
		"stop api; ending: its leader web ended", "stop proxy,log; ending: its leader web ended",
		"start clean; ending: its leader web ended", "ending: its leader web ended"}
	if got := strings.Join(trail[:len(trail)-1], " | "); got != strings.Join(want, " | ") {
		t.Errorf("trail:\n got %s\nwant %s", got, strings.Join(want, " | "))
	}
}

// A copy due later (a restart's or a reschedule's delay) starts nothing
// before its time, and then starts as any copy does; a stop while it
// waits settles it.
func TestGroupState_Next_WaitsForItsDueTime(t *testing.T) {
	due := func(at int64) func(*Task) { return func(t *Task) { t.Spec.Alloc.NotBefore = at } }
	tasks := func(st State, opts ...func(*Task)) []Task {
		return []Task{gtask("init", HookPrestart, "", st, opts...), gtask("web", HookMain, "", StateCreated, due(100))}
	}
	created := tasks(StateCreated, due(100))
	if s := (GroupState{Tasks: created, Now: 99}).Next(); !s.Idle() || s.Wake != 100 {
		t.Errorf("1ns before its due time: %s, want a wait until 100", s)
	}
	if s := (GroupState{Tasks: created, Now: 100}).Next(); !reflect.DeepEqual(s.Start, []string{"init"}) || s.Wake != 0 {
		t.Errorf("at its due time: %s, want the prestart task started", s)
	}
	started := tasks(StateRunning, due(100))
	if s := (GroupState{Tasks: started, Now: 1}).Next(); s.Wake != 0 {
		t.Errorf("once something started, the due time no longer holds it: %s", s)
	}
	if s := (GroupState{Tasks: created, Now: 1, Stop: true}).Next(); len(s.Settle) != 2 || s.Wake != 0 {
		t.Errorf("a stop while it waits: %s, want both settled", s)
	}
}
