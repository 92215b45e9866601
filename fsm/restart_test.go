package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const sec = int64(time.Second)

func TestRestartPolicy_Next_FailModeExhausts(t *testing.T) {
	p := RestartPolicy{Attempts: 2, Interval: time.Minute, Delay: 5 * time.Second, Mode: RestartFail, OnSuccess: true}
	s := RestartState{WindowStart: 0}
	fail := ExitStatus{Code: 1}
	for i, want := range []bool{true, true, false} {
		var d RestartDecision
		s, d = p.Next(s, fail, int64(i+1)*sec)
		if d.Restart != want {
			t.Fatalf("exit %d: restart %v, want %v (%s)", i+1, d.Restart, want, d.Reason)
		}
		if want && (d.Delay != 5*time.Second || d.Attempt != i+1) {
			t.Fatalf("exit %d: delay %s attempt %d", i+1, d.Delay, d.Attempt)
		}
		if !want && !strings.Contains(d.Reason, "exceeded 2 restart attempts") {
			t.Fatalf("reason %q", d.Reason)
		}
	}
	if s.Attempts != 2 {
		t.Fatalf("attempts %d, want 2", s.Attempts)
	}
}

// Attempts count afresh once the interval has passed.
func TestRestartPolicy_Next_ResetsAfterInterval(t *testing.T) {
	p := RestartPolicy{Attempts: 1, Interval: 10 * time.Second, Delay: time.Second, Mode: RestartFail, OnSuccess: true}
	s, d := p.Next(RestartState{}, ExitStatus{Code: 2}, 1*sec)
	if !d.Restart {
		t.Fatal("first exit not restarted")
	}
	if _, d2 := p.Next(s, ExitStatus{Code: 2}, 5*sec); d2.Restart {
		t.Fatal("second exit within the interval restarted with attempts = 1")
	}
	s, d = p.Next(s, ExitStatus{Code: 2}, 11*sec)
	if !d.Restart || d.Attempt != 2 || s.WindowStart != 11*sec || s.Count != 1 {
		t.Fatalf("after the interval: %+v %+v", d, s)
	}
}

// Mode delay waits out the rest of the interval instead of failing.
func TestRestartPolicy_Next_DelayModeWaitsForNextInterval(t *testing.T) {
	p := RestartPolicy{Attempts: 1, Interval: 30 * time.Second, Delay: time.Second, Mode: RestartDelay, OnSuccess: true}
	s, _ := p.Next(RestartState{}, ExitStatus{Signal: 9}, 2*sec)
	s, d := p.Next(s, ExitStatus{Signal: 9}, 10*sec)
	if !d.Restart || d.Delay != 20*time.Second || d.Attempt != 2 {
		t.Fatalf("delay mode: %+v, want a restart after the 20s left of the interval", d)
	}
	if _, d = p.Next(s, ExitStatus{Signal: 9}, 31*sec); !d.Restart || d.Delay != time.Second {
		t.Fatalf("next interval: %+v, want the normal delay", d)
	}
}

func TestRestartPolicy_Next_SuccessOnlyWithOnSuccess(t *testing.T) {
	batch := DefaultBatchRestart
	if _, d := batch.Next(RestartState{}, ExitStatus{}, sec); d.Restart {
		t.Fatal("batch policy restarted a successful exit")
	}
	svc := DefaultServiceRestart
	if _, d := svc.Next(RestartState{}, ExitStatus{}, sec); !d.Restart {
		t.Fatal("service policy did not restart a successful exit")
	}
	none := RestartPolicy{Mode: RestartFail}
	if _, d := none.Next(RestartState{}, ExitStatus{Code: 1}, sec); d.Restart {
		t.Fatal("attempts = 0 restarted")
	}
}

// TestRestartPolicy_Validate holds Nomad's rules for a restart policy
// (after the defaults of the job type are merged), each refusal naming
// what is wrong in the shape of Nomad's message. The policies of issue 27
// that restarted 25 times in 3 s (interval 1ns) and 10 times in 6 s and on
// (interval 1s, delay 600ms) are refused.
func TestRestartPolicy_Validate(t *testing.T) {
	for name, tc := range map[string]struct {
		p    RestartPolicy
		want string
	}{
		"negative attempts":  {RestartPolicy{Attempts: -1, Interval: time.Minute, Mode: RestartFail}, "attempts -1 is negative"},
		"no interval":        {RestartPolicy{Attempts: 1, Mode: RestartFail}, "interval can not be less than 5s (got 0s)"},
		"interval 1ns":       {RestartPolicy{Attempts: 2, Interval: 1, Delay: 100 * time.Millisecond, Mode: RestartFail}, "interval can not be less than 5s (got 1ns)"},
		"interval 4.999s":    {RestartPolicy{Attempts: 1, Interval: 5*time.Second - 1, Mode: RestartDelay}, "interval can not be less than 5s"},
		"bad mode":           {RestartPolicy{Attempts: 1, Interval: time.Minute, Mode: "sometimes"}, `unsupported restart mode "sometimes"`},
		"no mode":            {RestartPolicy{Attempts: 1, Interval: time.Minute}, `unsupported restart mode ""`},
		"negative delay":     {RestartPolicy{Attempts: 1, Interval: time.Minute, Delay: -1, Mode: RestartFail}, "delay -1ns is negative"},
		"delay, 0 attempts":  {RestartPolicy{Interval: time.Minute, Mode: RestartDelay}, `restart policy "delay" with 0 attempts is ambiguous`},
		"1s with 600ms":      {RestartPolicy{Attempts: 2, Interval: 6 * time.Second, Delay: 3001 * time.Millisecond, Mode: RestartFail}, "can't restart the task 2 times in an interval of 6s with a delay of 3.001s"},
		"mode delay too":     {RestartPolicy{Attempts: 3, Interval: time.Minute, Delay: 21 * time.Second, Mode: RestartDelay}, "can't restart the task 3 times in an interval of 1m0s with a delay of 21s"},
		"product overflows":  {RestartPolicy{Attempts: 1 << 40, Interval: time.Hour, Delay: 1 << 40, Mode: RestartFail}, "at least more than"},
		"issue 27: 1s/600ms": {RestartPolicy{Attempts: 2, Interval: time.Second, Delay: 600 * time.Millisecond, Mode: RestartFail}, "interval can not be less than 5s (got 1s)"},
	} {
		err := tc.p.Validate()
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec saying %q", name, err, tc.want)
		}
	}
	for name, p := range map[string]RestartPolicy{
		"service default":          DefaultServiceRestart,
		"batch default":            DefaultBatchRestart,
		"exactly attempts x delay": {Attempts: 2, Interval: 6 * time.Second, Delay: 3 * time.Second, Mode: RestartFail},
		"interval 5s":              {Attempts: 1, Interval: 5 * time.Second, Delay: 5 * time.Second, Mode: RestartDelay},
		"0 attempts, fail":         {Interval: time.Minute, Mode: RestartFail},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A restart walks running -> restarting -> launched -> running, with its
// attempt recorded; a stop during the delay reaps.
func TestStep_RestartPath(t *testing.T) {
	task, _, _ := run(t, evCreated, evIntent, evUp, evLaunched, evRunning)
	ri := Event{Type: EventRestartIntent, Attempt: 1, Exit: &ExitStatus{Code: 3}, Grace: time.Second}
	task, _, _ = runFrom(t, task, ri)
	if task.State != StateRestarting || task.Restarts != 1 || task.Exit == nil || task.Exit.Code != 3 {
		t.Fatalf("after restart-intent: %+v", task)
	}
	if _, err := Fold(task, Event{Type: EventRestartIntent, Attempt: 1, Exit: &ExitStatus{}}); err == nil {
		t.Fatal("a second restart-intent from restarting was accepted")
	}
	relaunched, _, effs := runFrom(t, task, Event{Type: EventLaunched, TaskPID: 99, TaskStartTime: 7})
	if relaunched.State != StateLaunched || relaunched.TaskPID != 99 || len(effs[0]) != 1 || effs[0][0].Type != EffectAttach {
		t.Fatalf("relaunch: %+v %v", relaunched, effs)
	}
	again, _, _ := runFrom(t, relaunched, evRunning)
	if _, err := Fold(again, Event{Type: EventRestartIntent, Attempt: 3, Exit: &ExitStatus{}}); err == nil {
		t.Fatal("attempt 3 after attempt 1 was accepted")
	}
	stopped, _, effs := runFrom(t, task, Event{Type: EventStopRequested, Signal: 15})
	if stopped.State != StateReaping || stopped.Target != StateStopped || effs[0][0].Type != EffectKillExecutor {
		t.Fatalf("stop while restarting: %+v %v", stopped, effs)
	}
}

func runFrom(t *testing.T, task Task, inputs ...Event) (Task, []Event, [][]Effect) {
	t.Helper()
	var log []Event
	var effs [][]Effect
	for _, in := range inputs {
		evs, eff, err := Step(task, in)
		if err != nil {
			t.Fatalf("step %s from %s: %v", in.Type, task.State, err)
		}
		if task, err = FoldAll(task, evs...); err != nil {
			t.Fatalf("fold %s: %v", in.Type, err)
		}
		log = append(log, evs...)
		effs = append(effs, eff)
	}
	return task, log, effs
}

// TestTask_RestartEvents_FollowsTheState: how many of its executor's
// restart journal entries a task's log holds follows from its state alone
// (each restart an intent and an outcome; restarting: the intent only).
func TestTask_RestartEvents_FollowsTheState(t *testing.T) {
	for _, c := range []struct {
		restarts, readies int
		state             State
		want              int
	}{
		{0, 0, StateRunning, 0}, {1, 0, StateRestarting, 1}, {1, 0, StateRunning, 2}, {3, 0, StateReaping, 6}, {2, 0, StateRestarting, 3},
		// Each journalled ready is one entry more.
		{0, 1, StateRunning, 1}, {1, 1, StateRestarting, 2}, {1, 2, StateRunning, 4}, {2, 3, StateRestarting, 6},
	} {
		if got := (Task{Restarts: c.restarts, Readies: c.readies, State: c.state}).RestartEvents(); got != c.want {
			t.Errorf("%d restarts, %d readies, %s: %d, want %d", c.restarts, c.readies, c.state, got, c.want)
		}
	}
}

// TestFold_JournalledReadyCountsAsAnEntry: a ready event that names its run
// (its executor journalled it) is one of the journal's entries the log
// holds; one that names none (recorded for an executor before protocol
// 10, which journals no readiness) is not. Either sets Ready, which a
// restart clears and the count survives.
func TestFold_JournalledReadyCountsAsAnEntry(t *testing.T) {
	task := runningTask(t)
	bare := Event{Type: EventReady, Time: 5}
	if bare.Journalled() {
		t.Fatal("a ready naming no place in the journal counts as journalled")
	}
	got, err := Fold(task, bare)
	if err != nil || !got.Ready || got.Readies != 0 || got.RestartEvents() != task.RestartEvents() {
		t.Fatalf("bare ready: %+v %v; want ready, not counted", got, err)
	}
	j := Event{Type: EventReady, Time: 6, Attempt: 1, TaskPID: task.TaskPID, TaskStartTime: task.TaskStartTime}
	got, err = Fold(task, j)
	if err != nil || !got.Ready || got.Readies != 1 || got.RestartEvents() != task.RestartEvents()+1 {
		t.Fatalf("journalled ready: %+v %v; want ready, counted", got, err)
	}
	// Folded again (a second process read the journal too): no
	// transition, dropped as an input that no longer applies.
	if _, err := Fold(got, j); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("the same journal entry folded twice: %v, want ErrIllegalTransition", err)
	}
	// Ahead of its place (an entry before it missing): no transition either.
	ahead := j
	ahead.Attempt = 2
	if _, err := Fold(task, ahead); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("journal entry 2 folded onto a log that holds none: %v, want ErrIllegalTransition", err)
	}
	x := ExitStatus{Code: 1}
	got, err = Fold(got, Event{Type: EventRestartIntent, Time: 7, Attempt: 1, Exit: &x})
	if err != nil || got.Ready || got.Readies != 1 || got.RestartEvents() != 2 {
		t.Fatalf("restart after a journalled ready: %+v %v; want not ready, 2 entries (the ready and the intent)", got, err)
	}
	for _, bad := range []Event{
		{Type: EventReady, Attempt: -1, TaskPID: 3},
		{Type: EventReady, Attempt: 1},
		{Type: EventReady, TaskPID: 3},
	} {
		if _, err := Fold(task, bad); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("ready attempt %d task pid %d: %v, want ErrInvalidEvent", bad.Attempt, bad.TaskPID, err)
		}
	}
}

// runningTask is a task folded to running.
func runningTask(t *testing.T) Task {
	t.Helper()
	spec := Spec{Driver: "raw_exec", Command: "/bin/true"}
	id := Identity{PID: 10, StartTime: 1, BootID: "b", Nonce: "n"}
	task, err := FoldAll(Task{ID: "a"},
		Event{Type: EventCreated, Spec: &spec}, Event{Type: EventSpawnIntent, Nonce: "n"},
		Event{Type: EventExecutorUp, Executor: &id}, Event{Type: EventLaunchIntent},
		Event{Type: EventLaunched, TaskPID: 11, TaskStartTime: 2}, Event{Type: EventRunning})
	if err != nil {
		t.Fatal(err)
	}
	return task
}
