package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// Validate holds a policy to Nomad's rules, each on both sides of its
// bound.
func TestReschedulePolicy_Validate(t *testing.T) {
	ok := ReschedulePolicy{Attempts: 3, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: DelayConstant}
	with := func(f func(*ReschedulePolicy)) ReschedulePolicy { p := ok; f(&p); return p }
	for _, tc := range []struct {
		what string
		p    ReschedulePolicy
		says string // "" for valid
	}{
		{"a limited constant policy", ok, ""},
		{"Nomad's service default", DefaultServiceReschedule, ""},
		{"Nomad's batch default", DefaultBatchReschedule, ""},
		{"disabled: attempts 0, not unlimited, whatever else", ReschedulePolicy{Delay: time.Millisecond, DelayFunction: "x"}, ""},
		{"negative attempts", ReschedulePolicy{Attempts: -1}, "negative"},
		{"attempts with unlimited", with(func(p *ReschedulePolicy) { p.Unlimited = true }), "ambiguous"},
		{"attempts without an interval", with(func(p *ReschedulePolicy) { p.Interval = 0 }), "non-zero"},
		{"delay 5s", with(func(p *ReschedulePolicy) { p.Delay = 5 * time.Second }), ""},
		{"delay under 5s", with(func(p *ReschedulePolicy) { p.Delay = 5*time.Second - 1 }), "delay cannot be less than 5s"},
		{"an unknown delay function", with(func(p *ReschedulePolicy) { p.DelayFunction = "linear" }), "invalid delay_function"},
		{"an empty delay function", with(func(p *ReschedulePolicy) { p.DelayFunction = "" }), "invalid delay_function"},
		{"exponential, max delay 5s", with(func(p *ReschedulePolicy) { p.DelayFunction, p.MaxDelay = DelayExponential, 5*time.Second }), ""},
		{"exponential, max delay under 5s", with(func(p *ReschedulePolicy) { p.DelayFunction, p.MaxDelay = DelayExponential, 5*time.Second-1 }), "max_delay cannot be less than 5s"},
		{"fibonacci, max delay under the delay", with(func(p *ReschedulePolicy) {
			p.DelayFunction, p.Delay, p.MaxDelay = DelayFibonacci, 10*time.Second, 9*time.Second
		}), "cannot be less than delay"},
		{"constant ignores max delay", with(func(p *ReschedulePolicy) { p.MaxDelay = 0 }), ""},
		{"interval 15s", ReschedulePolicy{Attempts: 1, Interval: 15 * time.Second, Delay: 5 * time.Second, DelayFunction: DelayConstant}, ""},
		{"interval under 15s", ReschedulePolicy{Attempts: 1, Interval: 15*time.Second - 1, Delay: 5 * time.Second, DelayFunction: DelayConstant}, "interval cannot be less than 15s"},
		{"unlimited needs no interval", ReschedulePolicy{Unlimited: true, Delay: 5 * time.Second, DelayFunction: DelayConstant}, ""},
		{"constant attempts that just fit", ReschedulePolicy{Attempts: 4, Interval: 20 * time.Second, Delay: 5 * time.Second, DelayFunction: DelayConstant}, ""},
		{"constant attempts that do not fit", ReschedulePolicy{Attempts: 5, Interval: 20 * time.Second, Delay: 5 * time.Second, DelayFunction: DelayConstant}, "only 4 attempts fit"},
		{"exponential attempts that do not fit", ReschedulePolicy{Attempts: 4, Interval: 30 * time.Second, Delay: 5 * time.Second, DelayFunction: DelayExponential, MaxDelay: time.Hour}, "only 3 attempts fit"},
		{"fibonacci attempts that do not fit", ReschedulePolicy{Attempts: 5, Interval: 20 * time.Second, Delay: 5 * time.Second, DelayFunction: DelayFibonacci, MaxDelay: time.Hour}, "attempts fit"},
	} {
		err := tc.p.Validate()
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.what, err)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want an error saying %q", tc.what, err, tc.says)
		case tc.says != "" && !errors.Is(err, ErrInvalidSpec):
			t.Errorf("%s: %v is not an ErrInvalidSpec", tc.what, err)
		}
	}
}

const s5 = 5 * time.Second

// Next's delays by function, as a table of successive failures of a copy
// that fails as soon as it starts.
func TestReschedulePolicy_Next_Delays(t *testing.T) {
	for _, tc := range []struct {
		what string
		p    ReschedulePolicy
		want []time.Duration // 0: not rescheduled
	}{
		{"constant", ReschedulePolicy{Unlimited: true, Delay: s5, DelayFunction: DelayConstant}, []time.Duration{s5, s5, s5, s5}},
		{"exponential up to its ceiling", ReschedulePolicy{Unlimited: true, Delay: s5, DelayFunction: DelayExponential, MaxDelay: 30 * time.Second},
			[]time.Duration{s5, 10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second}},
		{"fibonacci up to its ceiling", ReschedulePolicy{Unlimited: true, Delay: s5, DelayFunction: DelayFibonacci, MaxDelay: 50 * time.Second},
			[]time.Duration{s5, s5, 10 * time.Second, 15 * time.Second, 25 * time.Second, 40 * time.Second, 50 * time.Second}},
		{"Nomad's service default", DefaultServiceReschedule, []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute}},
		{"Nomad's batch default: once in 24h", DefaultBatchReschedule, []time.Duration{s5, 0}},
		{"two attempts in an hour", ReschedulePolicy{Attempts: 2, Interval: time.Hour, Delay: s5, DelayFunction: DelayConstant}, []time.Duration{s5, s5, 0}},
		{"disabled", ReschedulePolicy{}, []time.Duration{0}},
	} {
		var hist []RescheduleEvent
		failed := int64(1000 * time.Second)
		for i, want := range tc.want {
			d := tc.p.Next(hist, failed)
			if d.Reschedule != (want != 0) || want != 0 && d.Delay != want {
				t.Errorf("%s: failure %d: %+v, want delay %s", tc.what, i+1, d, want)
				break
			}
			if !d.Reschedule {
				if d.Reason == "" {
					t.Errorf("%s: no reason for the refusal", tc.what)
				}
				break
			}
			if d.At != failed+int64(d.Delay) || d.History[len(d.History)-1] != (RescheduleEvent{At: d.At, Delay: d.Delay}) {
				t.Errorf("%s: failure %d: at %d, history %v", tc.what, i+1, d.At, d.History)
			}
			hist = d.History
			failed = d.At + int64(time.Second) // the new copy fails a second after it started
		}
	}
}

// A copy that ran longer than the ceiling since its reschedule starts a
// new series at the first delay; the limited policy forgets reschedules
// that fell out of its interval.
func TestReschedulePolicy_Next_ResetsAndForgets(t *testing.T) {
	p := ReschedulePolicy{Unlimited: true, Delay: s5, DelayFunction: DelayExponential, MaxDelay: 20 * time.Second}
	hist := []RescheduleEvent{{At: 0, Delay: 10 * time.Second}, {At: int64(100 * time.Second), Delay: 20 * time.Second}}
	if d := p.Next(hist, int64(100*time.Second)+int64(20*time.Second)); d.Delay != 20*time.Second {
		t.Errorf("at the ceiling, soon after: %s, want 20s", d.Delay)
	}
	if d := p.Next(hist, int64(100*time.Second)+int64(20*time.Second)+1); d.Delay != s5 {
		t.Errorf("ran past the ceiling: %s, want a new series at 5s", d.Delay)
	}
	lim := ReschedulePolicy{Attempts: 1, Interval: time.Minute, Delay: s5, DelayFunction: DelayConstant}
	old := []RescheduleEvent{{At: 0, Delay: s5}}
	if d := lim.Next(old, int64(time.Minute)-1); d.Reschedule {
		t.Errorf("within the interval of the last reschedule: %+v", d)
	}
	d := lim.Next(old, int64(time.Minute))
	if !d.Reschedule || len(d.History) != 1 {
		t.Errorf("once the interval has passed: %+v, want a reschedule and the old one forgotten", d)
	}
}

// Properties of Next over random policies and histories: the delay stays
// within [Delay, MaxDelay] (constant: Delay), the new copy is due at the
// failure plus its delay, the history stays bounded, and a limited policy
// never reschedules more than Attempts times within any interval.
func TestReschedulePolicy_Next_Properties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fn := rapid.SampledFrom([]DelayFunction{DelayConstant, DelayExponential, DelayFibonacci}).Draw(t, "fn")
		delay := time.Duration(rapid.Int64Range(int64(s5), int64(time.Hour)).Draw(t, "delay"))
		p := ReschedulePolicy{Delay: delay, DelayFunction: fn, MaxDelay: delay + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "extra"))}
		if rapid.Bool().Draw(t, "unlimited") {
			p.Unlimited = true
		} else {
			p.Attempts = rapid.IntRange(1, 5).Draw(t, "attempts")
			p.Interval = time.Duration(rapid.Int64Range(int64(delay)*int64(p.Attempts)*8, int64(delay)*int64(p.Attempts)*64).Draw(t, "interval"))
		}
		var hist []RescheduleEvent
		var all []RescheduleEvent
		now := int64(0)
		for range rapid.IntRange(1, 30).Draw(t, "failures") {
			now += rapid.Int64Range(0, int64(2*time.Hour)).Draw(t, "ran")
			d := p.Next(hist, now)
			if !d.Reschedule {
				if p.Unlimited {
					t.Fatalf("an unlimited policy refused: %s", d.Reason)
				}
				continue
			}
			switch {
			case d.Delay < p.Delay || fn != DelayConstant && d.Delay > p.MaxDelay || fn == DelayConstant && d.Delay != p.Delay:
				t.Fatalf("delay %s out of [%s, %s] (%s)", d.Delay, p.Delay, p.MaxDelay, fn)
			case d.At != now+int64(d.Delay):
				t.Fatalf("due at %d, failed at %d after %s", d.At, now, d.Delay)
			case p.Unlimited && len(d.History) > MaxRescheduleHistory:
				t.Fatalf("history of %d", len(d.History))
			}
			hist = d.History
			all = append(all, RescheduleEvent{At: d.At, Delay: d.Delay})
			now = d.At
			if !p.Unlimited {
				n := 0
				for _, e := range all {
					if d.At-e.At < int64(p.Interval) {
						n++
					}
				}
				if n > p.Attempts {
					t.Fatalf("%d reschedules within %s, policy allows %d", n, p.Interval, p.Attempts)
				}
			}
		}
	})
}

func groupTask(id string, st State, a Alloc, f func(*Task)) Task {
	spec := &Spec{Name: id, Restart: &RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: time.Second, Mode: RestartFail, OnSuccess: true}, Alloc: &a}
	t := Task{ID: id, State: st, Spec: spec, Nonce: "n-" + id, TaskPID: 10, UpdatedAt: int64(time.Minute)}
	if f != nil {
		f(&t)
	}
	return t
}

// End names each way a copy ends, one row each, with the precedence
// between failures.
func TestGroupState_End(t *testing.T) {
	main := Alloc{ID: "a", Tasks: []string{"m", "s"}}
	side := Alloc{ID: "a", Tasks: []string{"m", "s"}, Sidecar: true, Hook: HookPrestart}
	leader := main
	leader.Leader = true
	boot := "boot-now"
	exit := func(code int) func(*Task) { return func(t *Task) { t.Exit = &ExitStatus{Code: code} } }
	batch := func(t *Task) { t.Exit = &ExitStatus{}; t.Spec.Restart.OnSuccess = false }
	lostOn := func(b string) func(*Task) {
		return func(t *Task) { t.Executor = &Identity{BootID: b}; t.Reason = "executor gone" }
	}
	for _, tc := range []struct {
		what  string
		tasks []Task
		miss  []string
		want  EndKind
		task  string
	}{
		{"a task still runs", []Task{groupTask("m", StateRunning, main, nil), groupTask("s", StateStopped, side, nil)}, nil, EndRunning, ""},
		{"the main task exited 1", []Task{groupTask("m", StateExited, main, exit(1)), groupTask("s", StateStopped, side, nil)}, nil, EndFailed, "m"},
		{"a service's main task exited 0: its policy restarts successes", []Task{groupTask("m", StateExited, main, exit(0)), groupTask("s", StateStopped, side, nil)}, nil, EndFailed, "m"},
		{"a batch's task exited 0", []Task{groupTask("m", StateExited, main, batch), groupTask("s", StateStopped, side, nil)}, nil, EndCompleted, ""},
		{"a batch leader exited 0, its sibling stopped by the group", []Task{groupTask("m", StateExited, leader, batch), groupTask("s", StateStopped, main, nil)}, nil, EndCompleted, ""},
		{"the main task stopped, nothing failed", []Task{groupTask("m", StateStopped, main, nil), groupTask("s", StateStopped, side, nil)}, nil, EndStopped, "m"},
		{"stopped while due: nothing ran", []Task{groupTask("m", StateStopped, main, func(t *Task) { t.Nonce, t.TaskPID = "", 0 })}, nil, EndStopped, "m"},
		{"a failed start", []Task{groupTask("m", StateFailed, main, nil)}, nil, EndFailed, "m"},
		{"a spec refused before anything ran", []Task{groupTask("m", StateFailed, main, func(t *Task) { t.Nonce = "" })}, nil, EndRefused, "m"},
		{"lost on this boot", []Task{groupTask("m", StateLost, main, lostOn(boot)), groupTask("s", StateStopped, side, nil)}, nil, EndLost, "m"},
		{"lost to a reboot", []Task{groupTask("m", StateLost, main, lostOn("boot-before"))}, nil, EndRebooted, "m"},
		{"lost beats failed", []Task{groupTask("s", StateExited, side, exit(2)), groupTask("m", StateLost, main, lostOn(boot))}, nil, EndLost, "m"},
		{"a reboot beats lost", []Task{groupTask("m", StateLost, main, lostOn(boot)), groupTask("s", StateLost, side, lostOn("old"))}, nil, EndRebooted, "s"},
		{"refused beats everything", []Task{groupTask("s", StateLost, side, lostOn("old")), groupTask("m", StateFailed, main, func(t *Task) { t.Nonce = "" })}, nil, EndRefused, "m"},
		{"a poststop task's failure changes nothing", []Task{groupTask("m", StateStopped, main, nil), groupTask("p", StateExited, Alloc{ID: "a", Hook: HookPoststop}, exit(3))}, nil, EndStopped, "m"},
		{"interrupted before anything ran", []Task{groupTask("m", StateStopped, main, func(t *Task) { t.Nonce, t.TaskPID = "", 0 })}, []string{"s"}, EndInterrupted, ""},
		{"missing after something ran is no interruption", []Task{groupTask("m", StateExited, main, exit(1))}, []string{"s"}, EndFailed, "m"},
	} {
		e := GroupState{Tasks: tc.tasks, Missing: tc.miss}.End(boot)
		if e.Kind != tc.want || e.Task != tc.task {
			t.Errorf("%s: %s (task %q: %s), want %s (task %q)", tc.what, e.Kind, e.Task, e.Reason, tc.want, tc.task)
		}
		if e.Kind != EndRunning && (e.Reason == "" || e.At != int64(time.Minute)) {
			t.Errorf("%s: reason %q at %d", tc.what, e.Reason, e.At)
		}
	}
}

// NextCopy: what follows each end, one row each.
func TestNextCopy(t *testing.T) {
	at := int64(time.Hour)
	pol := ReschedulePolicy{Attempts: 1, Interval: time.Hour, Delay: 7 * time.Second, DelayFunction: DelayConstant}
	a := Alloc{ID: "a", Index: 2, Generation: 3, Reschedule: &pol, NotBefore: at - 5}
	restart := &RestartPolicy{Attempts: 1, Interval: time.Hour, Delay: 3 * time.Second, Mode: RestartFail}
	for _, tc := range []struct {
		what        string
		end         EndKind
		a           Alloc
		again       bool
		delay       time.Duration
		rescheduled bool
	}{
		{"running", EndRunning, a, false, 0, false},
		{"stopped on request stays stopped", EndStopped, a, false, 0, false},
		{"completed", EndCompleted, a, false, 0, false},
		{"refused", EndRefused, a, false, 0, false},
		{"interrupted: again at once, nothing counted", EndInterrupted, a, true, 0, false},
		{"rebooted: again at once, nothing counted", EndRebooted, a, true, 0, false},
		{"lost: a restart under the restart policy", EndLost, a, true, 3 * time.Second, false},
		{"lost, restarts spent: a reschedule", EndLost, func() Alloc { x := a; x.Restarts = RestartState{WindowStart: at, Count: 1}; return x }(), true, 7 * time.Second, true},
		{"failed: a reschedule", EndFailed, a, true, 7 * time.Second, true},
		{"failed, reschedules spent: down", EndFailed, func() Alloc { x := a; x.Rescheduled = []RescheduleEvent{{At: at - 10, Delay: pol.Delay}}; return x }(), false, 0, false},
		{"failed, no policy (a run's): down", EndFailed, func() Alloc { x := a; x.Reschedule = nil; return x }(), false, 0, false},
		{"lost, no policy (a run's): nothing", EndLost, func() Alloc { x := a; x.Reschedule = nil; return x }(), false, 0, false},
		{"rebooted, no policy (a run's): nothing", EndRebooted, func() Alloc { x := a; x.Reschedule = nil; return x }(), false, 0, false},
		{"failed, attempts 0 unlimited false: down", EndFailed, func() Alloc { x := a; x.Reschedule = &ReschedulePolicy{}; return x }(), false, 0, false},
	} {
		n := NextCopy(CopyEnd{Kind: tc.end, Task: "m", Reason: "it ended", At: at}, tc.a, restart)
		switch {
		case n.Again != tc.again || n.Delay != tc.delay || n.Rescheduled != tc.rescheduled:
			t.Errorf("%s: %+v, want again %v after %s (rescheduled %v)", tc.what, n, tc.again, tc.delay, tc.rescheduled)
		case tc.end != EndRunning && !strings.Contains(n.Reason, "it ended"):
			t.Errorf("%s: reason %q does not say how it ended", tc.what, n.Reason)
		case !n.Again:
		case n.Alloc.Generation != tc.a.Generation+1 || n.Alloc.Index != tc.a.Index || n.Alloc.Reschedule != tc.a.Reschedule:
			t.Errorf("%s: the new copy's alloc %+v", tc.what, n.Alloc)
		case tc.end == EndInterrupted && n.Alloc.NotBefore != at:
			t.Errorf("%s: due %d, want the end %d", tc.what, n.Alloc.NotBefore, at)
		case tc.end != EndInterrupted && n.Alloc.NotBefore != at+int64(tc.delay):
			t.Errorf("%s: due %d, want %d", tc.what, n.Alloc.NotBefore, at+int64(tc.delay))
		case tc.rescheduled && (len(n.Alloc.Rescheduled) != 1 || n.Alloc.Restarts != RestartState{}):
			t.Errorf("%s: a reschedule carries %v and restarts %+v", tc.what, n.Alloc.Rescheduled, n.Alloc.Restarts)
		case tc.end == EndLost && !tc.rescheduled && n.Alloc.Restarts.Attempts != 1:
			t.Errorf("%s: the restart is not counted: %+v", tc.what, n.Alloc.Restarts)
		}
	}
}
