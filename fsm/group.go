package fsm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A group's lifecycle.
//
// The tasks of one allocation (a copy of a Nomad group: Spec.Alloc) are
// recorded together before any of them is spawned, each in state created;
// a task waits in created until its turn. What the group does next is a
// pure function of its tasks' folded states (GroupState.Next), so any
// process that reads the log (the CLI running the group, a driver that
// resumes it after a crash, an agent) decides the same, and a decision
// interrupted anywhere is made again from the log. It follows Nomad's
// rules for a group on one client:
//
//   - the prestart tasks start first; the main tasks start once every
//     prestart task that is no sidecar has exited successfully and every
//     prestart sidecar has started; the poststart tasks once every main
//     task has started;
//   - the group ends when a task fails (a failed start, a non-zero exit, a
//     lost task), when a task is stopped (tether stop of any of its tasks
//     stops the group), when its leader ends, or when every task that keeps
//     it alive (no sidecar, no poststop hook) has ended;
//   - ending, the tasks still running are stopped, the leader first and the
//     sidecars last, each wave once the one before has stopped; the tasks
//     that never ran are recorded stopped (settled) instead of started;
//   - once every other task has ended, the poststop tasks run (they run on
//     a stop too: they are the group's clean-up), unless one of them was
//     stopped, which ends them all.

// GroupState is what NextGroup decides from.
type GroupState struct {
	// Tasks are the recorded tasks of the allocation, in start order.
	Tasks []Task
	// Missing are the ids the allocation lists that the log does not hold.
	// While nothing of the group ran, the group's recording was
	// interrupted (every task is recorded before any is spawned): the
	// group is settled. Once something ran, a missing task was recorded
	// and removed since (gc removes only ended tasks): it counts as ended.
	Missing []string
	// Stop is a stop of the group asked now (a stop of any of its tasks).
	Stop bool
	// Now is the time (Unix ns): a copy whose tasks are due later
	// (Alloc.NotBefore: a restart's or a reschedule's delay) starts none of
	// them before.
	Now int64
}

// GroupStep is what a group's driver does next: settle, stop, start, in
// that order; then, when none of them is due, wait for a task's state to
// change and ask again.
type GroupStep struct {
	// Settle are tasks that will never run: recorded stopped (a
	// stop-requested takes created to stopped).
	Settle []string
	// Stop are running tasks to stop now, together: one wave (the leader
	// alone, then the others, then the sidecars).
	Stop []string
	// Start are waiting tasks whose turn has come, to start together.
	Start []string
	// Ending says why the group is ending ("" while it runs).
	Ending string
	// Over: every task is terminal.
	Over bool
	// Wake is when the copy's tasks are due (Unix ns), when the step waits
	// for that and nothing else has started: the driver waits until then
	// (or a change).
	Wake int64
}

// Idle reports whether the step asks nothing: the driver waits for a
// change (or the group is over).
func (s GroupStep) Idle() bool { return len(s.Settle)+len(s.Stop)+len(s.Start) == 0 }

func (s GroupStep) String() string {
	var parts []string
	for _, p := range []struct {
		what string
		ids  []string
	}{{"settle", s.Settle}, {"stop", s.Stop}, {"start", s.Start}} {
		if len(p.ids) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.ids, ","))
		}
	}
	if s.Ending != "" {
		parts = append(parts, "ending: "+s.Ending)
	}
	if s.Over {
		parts = append(parts, "over")
	}
	if s.Wake != 0 {
		parts = append(parts, "due at "+strconv.FormatInt(s.Wake, 10))
	}
	if len(parts) == 0 {
		return "wait"
	}
	return strings.Join(parts, "; ")
}

// member is a task of the group with its alloc (a task without one counts
// as a main task).
type member struct {
	t *Task
	a Alloc
}

func (m member) pending() bool { return m.t.State == StateCreated }
func (m member) dead() bool    { return m.t.State.Terminal() }
func (m member) live() bool    { return !m.pending() && !m.dead() }

// started reports whether the task was launched at least once.
func (m member) started() bool { return m.t.TaskPID != 0 }

// ran reports whether anything of the task was ever spawned.
func (m member) ran() bool { return m.t.Nonce != "" }

// failed reports whether the task ended in failure: a failed start, a
// lost task, a non-zero exit or a signal it did not ask for.
func (m member) failed() bool {
	switch m.t.State {
	case StateFailed, StateLost:
		return true
	case StateExited:
		x := m.t.Exit
		return x != nil && (x.Code != 0 || x.Signal != 0)
	}
	return false
}

// stopping reports whether the task is being stopped (a stop recorded,
// its reaping under way).
func (m member) stopping() bool { return m.t.State == StateReaping }

// Next decides the group's next step.
func (g GroupState) Next() GroupStep {
	if len(g.Missing) > 0 && slices.ContainsFunc(g.Tasks, func(t Task) bool { return t.Nonce != "" }) {
		g.Missing = nil // removed after they ended: nothing to decide on
	}
	ms := make([]member, 0, len(g.Tasks))
	over := true
	for i := range g.Tasks {
		t := &g.Tasks[i]
		m := member{t: t}
		if t.Spec != nil && t.Spec.Alloc != nil {
			m.a = *t.Spec.Alloc
		}
		ms = append(ms, m)
		over = over && m.dead()
	}
	if over {
		return GroupStep{Over: true, Ending: g.ending(ms)}
	}
	ending := g.ending(ms)
	if ending == "" {
		return g.advance(ms)
	}
	step := GroupStep{Ending: ending}
	var post []member
	liveRest, anyRan := false, false
	for _, m := range ms {
		switch {
		case m.a.Hook == HookPoststop:
			post = append(post, m)
		case m.pending():
			step.Settle = append(step.Settle, m.t.ID)
		case m.live():
			liveRest = true
		}
		anyRan = anyRan || m.a.Hook != HookPoststop && m.ran()
	}
	if liveRest {
		step.Stop = stopWave(ms)
		return step
	}
	// Every other task has ended: the poststop tasks run, unless one of
	// them was stopped (or a stop is asked while they run), or nothing of
	// the group ever ran (there is nothing to clean up after).
	abort := !anyRan || len(g.Missing) > 0
	for _, m := range post {
		if (m.dead() && m.t.State == StateStopped) || (g.Stop && m.live()) {
			abort = true
		}
	}
	for _, m := range post {
		switch {
		case m.pending() && abort:
			step.Settle = append(step.Settle, m.t.ID)
		case m.pending():
			step.Start = append(step.Start, m.t.ID)
		case m.live() && abort && !m.stopping():
			step.Stop = append(step.Stop, m.t.ID)
		}
	}
	return step
}

// ending says why the group ends, or "" while it runs. The reasons are
// in order of precedence, so that the reason stays the same while the
// group ends: a failure, the leader's end, every keeper's end, a stop.
func (g GroupState) ending(ms []member) string {
	if len(g.Missing) > 0 {
		return fmt.Sprintf("its tasks were not all recorded (%s missing): the start was interrupted before anything ran", strings.Join(g.Missing, ", "))
	}
	if g.Stop {
		return "stop requested"
	}
	var stopped *member
	keepers, ended := 0, 0
	for i, m := range ms {
		if m.a.Hook == HookPoststop {
			continue
		}
		if m.failed() {
			return fmt.Sprintf("task %s %s", m.t.ID, describeEnd(m.t))
		}
		if m.t.State == StateStopped && stopped == nil {
			stopped = &ms[i]
		}
		if m.a.Keeper() {
			keepers++
			if m.dead() && m.ran() && m.t.State != StateStopped {
				ended++
			}
		}
	}
	for _, m := range ms {
		if m.a.Leader && m.a.Hook != HookPoststop && m.dead() && m.ran() && m.t.State != StateStopped {
			return fmt.Sprintf("its leader %s ended", m.t.ID)
		}
	}
	switch {
	case keepers > 0 && ended == keepers:
		return "every task that keeps it running ended"
	case stopped != nil:
		return fmt.Sprintf("task %s was stopped", stopped.t.ID)
	}
	return ""
}

// describeEnd says how a failed task ended, for the group's reason.
func describeEnd(t *Task) string {
	switch {
	case t.State == StateExited && t.Exit != nil && t.Exit.Signal != 0:
		return fmt.Sprintf("was killed by signal %d", t.Exit.Signal)
	case t.State == StateExited && t.Exit != nil:
		return fmt.Sprintf("exited with code %d", t.Exit.Code)
	case t.Reason != "":
		return t.State.String() + ": " + t.Reason
	}
	return t.State.String()
}

// stopWave is the next wave of running tasks (not poststop) to stop: the
// leaders, then the others that are no sidecar, then the sidecars. A wave
// some task of which is still stopping is waited for (nothing is returned
// until it is over).
func stopWave(ms []member) []string {
	waves := [3][]member{}
	for _, m := range ms {
		if m.a.Hook == HookPoststop || !m.live() {
			continue
		}
		switch {
		case m.a.Leader:
			waves[0] = append(waves[0], m)
		case !m.a.Sidecar:
			waves[1] = append(waves[1], m)
		default:
			waves[2] = append(waves[2], m)
		}
	}
	for _, w := range waves {
		if len(w) == 0 {
			continue
		}
		var ids []string
		for _, m := range w {
			if !m.stopping() {
				ids = append(ids, m.t.ID)
			}
		}
		return ids // nil while the wave is still stopping
	}
	return nil
}

// advance is a running group's next step: prestart, main, poststart. A
// copy due later (its tasks' Alloc.NotBefore after Now) of which nothing
// has started yet waits until then.
func (g GroupState) advance(ms []member) GroupStep {
	var step GroupStep
	due, started := int64(0), false
	for _, m := range ms {
		due = max(due, m.a.NotBefore)
		started = started || !m.pending()
	}
	if !started && due > g.Now {
		step.Wake = due
		return step
	}
	pendingOf := func(h Hook) []string {
		var ids []string
		for _, m := range ms {
			if m.a.Hook == h && m.pending() {
				ids = append(ids, m.t.ID)
			}
		}
		return ids
	}
	if step.Start = pendingOf(HookPrestart); len(step.Start) > 0 {
		return step
	}
	for _, m := range ms {
		if m.a.Hook != HookPrestart {
			continue
		}
		if m.a.Sidecar && !m.started() || !m.a.Sidecar && !m.dead() {
			return step // main waits: a prestart task is not done (or a sidecar not started)
		}
	}
	if step.Start = pendingOf(HookMain); len(step.Start) > 0 {
		return step
	}
	for _, m := range ms {
		if m.a.Hook == HookMain && !m.started() && !m.dead() {
			return step // poststart waits for every main task to start
		}
	}
	step.Start = pendingOf(HookPoststart)
	return step
}
