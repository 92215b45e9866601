package fsm

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Rescheduling.
//
// A copy of a group (an allocation) whose tasks have ended is followed by
// a new copy of it, or by nothing, as a pure function of how it ended
// (GroupState.End) and what its allocation carries (Alloc: the group's
// reschedule policy, the reschedules and restarts so far): NextCopy. Once
// a task's restart attempts are spent (its executor's restart policy
// ended it; or, for a task whose executor was lost, the group driver's
// count of the same policy), the group's reschedule block decides, with
// Nomad's semantics: ReschedulePolicy.Next. The new copy's tasks are new
// tasks of the same names, recorded (written ahead) with the time they are
// due (Alloc.NotBefore) and the history the policy reads next time
// (Alloc.Rescheduled), so that a crash anywhere is finished by the next
// driver of the group from the log alone.

// DelayFunction is how a reschedule policy's delay grows from one
// reschedule to the next (Nomad's delay_function).
type DelayFunction string

// The delay functions.
const (
	DelayConstant    DelayFunction = "constant"
	DelayExponential DelayFunction = "exponential"
	DelayFibonacci   DelayFunction = "fibonacci"
)

// ReschedulePolicy is a group's reschedule block, with Nomad's semantics:
// once a copy of the group has failed, a new copy is started after Delay
// (growing by DelayFunction up to MaxDelay), at most Attempts times within
// Interval, or without end when Unlimited. A policy with neither attempts
// nor Unlimited reschedules nothing: the copy stays down.
type ReschedulePolicy struct {
	Attempts      int
	Interval      time.Duration
	Delay         time.Duration
	DelayFunction DelayFunction
	MaxDelay      time.Duration
	Unlimited     bool
}

// Nomad's reschedule defaults for service and batch jobs (a task file's
// tasks and a system job are services here; a sysbatch job is a batch).
var (
	DefaultServiceReschedule = ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: DelayExponential, MaxDelay: time.Hour, Unlimited: true}
	DefaultBatchReschedule   = ReschedulePolicy{Attempts: 1, Interval: 24 * time.Hour, Delay: 5 * time.Second, DelayFunction: DelayConstant}
)

// Nomad's bounds on a reschedule policy.
const (
	MinRescheduleDelay    = 5 * time.Second
	MinRescheduleInterval = 15 * time.Second
)

// MaxRescheduleHistory is how many past reschedules an unlimited policy
// keeps (Nomad's scheduler keeps the last five; a limited policy keeps
// those within its interval).
const MaxRescheduleHistory = 5

// Enabled reports whether the policy reschedules at all.
func (p ReschedulePolicy) Enabled() bool { return p.Attempts > 0 || p.Unlimited }

// Validate checks the policy as Nomad validates a group's reschedule
// policy once the defaults of the job's type are merged in (a disabled
// policy, with neither attempts nor unlimited, is valid whatever else it
// says):
//
//   - attempts with unlimited is ambiguous;
//   - attempts needs a positive interval;
//   - the delay is at least 5s;
//   - the delay function is constant, exponential or fibonacci;
//   - unless constant, the max delay is at least 5s and at least the delay;
//   - with limited attempts, the interval is at least 15s and fits the
//     attempts with their delays.
func (p ReschedulePolicy) Validate() error {
	if !p.Enabled() {
		if p.Attempts < 0 {
			return p.bad("attempts %d is negative", p.Attempts)
		}
		return nil
	}
	switch {
	case p.Attempts > 0 && p.Unlimited:
		return p.bad("attempts = %d with unlimited = true is ambiguous: give attempts (and an interval), or unlimited", p.Attempts)
	case p.Attempts > 0 && p.Interval <= 0:
		return p.bad("interval must be a non-zero value if attempts > 0")
	case p.Delay < MinRescheduleDelay:
		return p.bad("delay cannot be less than %s (got %s)", MinRescheduleDelay, p.Delay)
	case p.DelayFunction != DelayConstant && p.DelayFunction != DelayExponential && p.DelayFunction != DelayFibonacci:
		return p.bad("invalid delay_function %q: use %q, %q or %q", p.DelayFunction, DelayConstant, DelayExponential, DelayFibonacci)
	case p.DelayFunction != DelayConstant && p.MaxDelay < MinRescheduleDelay:
		return p.bad("max_delay cannot be less than %s (got %s)", MinRescheduleDelay, p.MaxDelay)
	case p.DelayFunction != DelayConstant && p.MaxDelay < p.Delay:
		return p.bad("max_delay %s cannot be less than delay %s", p.MaxDelay, p.Delay)
	case !p.Unlimited && p.Interval < MinRescheduleInterval:
		return p.bad("interval cannot be less than %s (got %s)", MinRescheduleInterval, p.Interval)
	}
	if !p.Unlimited {
		if ok, possible, recommended := p.viable(); !ok {
			return p.bad("only %d attempts fit in %s with delay %s and delay_function %q: set the interval to at least %s to accommodate %d attempts",
				possible, p.Interval, p.Delay, p.DelayFunction, recommended.Round(time.Second), p.Attempts)
		}
	}
	return nil
}

func (p ReschedulePolicy) bad(format string, args ...any) error {
	return fmt.Errorf("%w: reschedule: "+format, append([]any{ErrInvalidSpec}, args...)...)
}

// viable is Nomad's check that the attempts fit in the interval: whether
// they do, how many do, and the interval that would fit them all.
func (p ReschedulePolicy) viable() (bool, int, time.Duration) {
	possible := 0
	var recommended time.Duration
	switch p.DelayFunction {
	case DelayConstant:
		recommended = time.Duration(p.Attempts) * p.Delay
		if p.Interval < recommended {
			return false, int(p.Interval / p.Delay), recommended
		}
		return true, p.Attempts, recommended
	case DelayExponential:
		for i := range p.Attempts {
			next := p.MaxDelay
			if i < 62 && p.Delay <= p.MaxDelay>>uint(i) {
				next = p.Delay << uint(i)
			}
			if next >= p.MaxDelay {
				next = p.MaxDelay
				recommended += next
			} else {
				recommended = next
			}
			if recommended < p.Interval {
				possible++
			}
		}
		return possible >= p.Attempts, possible, recommended
	default: // fibonacci
		slots := []time.Duration{p.Delay, p.Delay}
		ceiling := false
		for i := 2; i < p.Attempts; i++ {
			var next time.Duration
			if ceiling {
				next = slots[i-1] + p.MaxDelay
			} else if next = slots[i-1] + slots[i-2]; next > p.MaxDelay {
				next, ceiling = p.MaxDelay, true
			}
			slots = append(slots, next)
		}
		recommended = slots[len(slots)-1]
		if p.Interval >= recommended {
			return true, p.Attempts, recommended
		}
		for i, s := range slots {
			if s > p.Interval {
				possible = i
				break
			}
		}
		return false, possible, recommended
	}
}

// RescheduleEvent is one reschedule of an allocation: when its new copy
// was due (Unix ns) and the delay it waited.
type RescheduleEvent struct {
	At    int64         `json:"at"`
	Delay time.Duration `json:"delay"`
}

// RescheduleDecision is the outcome of ReschedulePolicy.Next.
type RescheduleDecision struct {
	Reschedule bool
	// Delay is how long after the failure the new copy starts, and At
	// when (Unix ns).
	Delay time.Duration
	At    int64
	// Attempt is the reschedule's number within the policy's window
	// (unlimited: over the allocation's life, as far as the history
	// reaches).
	Attempt int
	// History is what the new copy carries (Alloc.Rescheduled): the past
	// reschedules the policy keeps, then this one.
	History []RescheduleEvent
	// Reason says why, in words for status and logs.
	Reason string
}

// Next decides whether a copy of the group that failed at failed (Unix
// ns), with history the reschedules before it (oldest first), is
// rescheduled, and after what delay. It is pure: Nomad's rules
// (RescheduleTracker and Allocation.NextDelay): a limited policy counts
// the reschedules within its interval before the failure and needs the
// next delay to fit the interval; the delay is Delay for the first
// reschedule, then the previous one doubled (exponential) or the sum of
// the last two (fibonacci), at most MaxDelay, and back to Delay when the
// copy ran longer than MaxDelay since its reschedule.
func (p ReschedulePolicy) Next(history []RescheduleEvent, failed int64) RescheduleDecision {
	if !p.Enabled() {
		return RescheduleDecision{Reason: "its reschedule policy allows no reschedule (attempts = 0, unlimited = false)"}
	}
	delay := p.nextDelay(history, failed)
	attempted := 0
	if !p.Unlimited {
		for _, e := range history {
			if failed-e.At < int64(p.Interval) {
				attempted++
			}
		}
		switch {
		case attempted >= p.Attempts:
			return RescheduleDecision{Reason: fmt.Sprintf("its reschedule policy's %d attempts in %s are spent", p.Attempts, p.Interval)}
		case delay >= p.Interval:
			return RescheduleDecision{Reason: fmt.Sprintf("its next reschedule delay %s does not fit the policy's interval %s", delay, p.Interval)}
		}
	}
	at := failed + int64(delay)
	var kept []RescheduleEvent
	for _, e := range history {
		if p.Unlimited || at-e.At <= int64(p.Interval) {
			kept = append(kept, e)
		}
	}
	if len(kept) >= MaxRescheduleHistory && p.Unlimited {
		kept = kept[len(kept)-MaxRescheduleHistory+1:]
	}
	kept = append(slices.Clip(kept), RescheduleEvent{At: at, Delay: delay})
	d := RescheduleDecision{Reschedule: true, Delay: delay, At: at, History: kept}
	if p.Unlimited {
		d.Attempt = len(history) + 1
		d.Reason = fmt.Sprintf("rescheduled after %s (%s delay, unlimited)", delay, p.DelayFunction)
	} else {
		d.Attempt = attempted + 1
		d.Reason = fmt.Sprintf("reschedule %d of %d in %s, after %s", d.Attempt, p.Attempts, p.Interval, delay)
	}
	return d
}

// nextDelay is Nomad's Allocation.NextDelay.
func (p ReschedulePolicy) nextDelay(history []RescheduleEvent, failed int64) time.Duration {
	if len(history) == 0 {
		return p.Delay
	}
	last := history[len(history)-1]
	var d time.Duration
	switch p.DelayFunction {
	case DelayExponential:
		if last.Delay > math.MaxInt64/2 {
			d = math.MaxInt64
		} else {
			d = last.Delay * 2
		}
	case DelayFibonacci:
		d = p.Delay
		if len(history) >= 2 {
			prev := history[len(history)-2]
			switch {
			case prev.Delay == p.MaxDelay && last.Delay == p.Delay:
				d = last.Delay // a series that restarted after the ceiling
			case last.Delay > math.MaxInt64-prev.Delay:
				d = math.MaxInt64
			default:
				d = last.Delay + prev.Delay
			}
		}
	default:
		return p.Delay
	}
	if p.MaxDelay > 0 && d > p.MaxDelay {
		d = p.MaxDelay
		if failed-last.At > int64(d) {
			d = p.Delay // it ran longer than the ceiling: a new series
		}
	}
	return d
}

func (p ReschedulePolicy) String() string {
	if !p.Enabled() {
		return "none"
	}
	s := fmt.Sprintf("delay %s %s", p.Delay, p.DelayFunction)
	if p.DelayFunction != DelayConstant {
		s += fmt.Sprintf(" up to %s", p.MaxDelay)
	}
	if p.Unlimited {
		return s + ", unlimited"
	}
	return s + fmt.Sprintf(", %d attempts in %s", p.Attempts, p.Interval)
}

// EndKind is how a copy of a group ended, for what follows it.
type EndKind uint8

// The ends of a copy.
const (
	// EndRunning: not every task is terminal.
	EndRunning EndKind = iota
	// EndStopped: a task was stopped on request (tether stop of any task
	// stops the group), and nothing failed.
	EndStopped
	// EndCompleted: its tasks ended by themselves and successfully (a
	// batch job's end).
	EndCompleted
	// EndFailed: a task failed (exited badly once its executor's restart
	// policy gave up on it, failed to start, or exited successfully where
	// its policy restarts successes: a service that ends has failed).
	EndFailed
	// EndRefused: a task's spec was refused before anything of it ran; a
	// new copy of the same spec would be refused too.
	EndRefused
	// EndInterrupted: the copy's recording was interrupted before
	// anything of it ran (tasks it lists are missing).
	EndInterrupted
	// EndLost: a task's executor was lost on this boot (killed from
	// outside); the group's driver restarts the copy under the lost
	// task's restart policy before the reschedule policy applies.
	EndLost
	// EndRebooted: a task was lost to a reboot; started again at once,
	// nothing counted (the reboot is not its failure).
	EndRebooted
	numEndKinds
)

var endNames = [numEndKinds]string{"running", "stopped", "completed", "failed", "refused", "interrupted", "lost", "rebooted"}

func (k EndKind) String() string {
	if k < numEndKinds {
		return endNames[k]
	}
	return fmt.Sprintf("end(%d)", uint8(k))
}

// CopyEnd is how a copy of a group ended (GroupState.End).
type CopyEnd struct {
	Kind EndKind
	// Task is the task whose end decided it; Reason says how it ended.
	Task   string
	Reason string
	// At is when the copy ended: the last update of its tasks (Unix ns).
	At int64
}

// End says how the copy ended: its tasks' folded states (Missing: the ids
// its allocation lists that the log lacks), and bootID this boot's id (a
// task lost with an executor of another boot was lost to the reboot).
// Poststop tasks are its clean-up: how they end changes nothing. Of
// several failures the one that explains most wins: a refused spec, then
// a reboot, then a lost executor, then a failed task.
func (g GroupState) End(bootID string) CopyEnd {
	var e CopyEnd
	ran := false
	for _, t := range g.Tasks {
		if !t.State.Terminal() {
			return CopyEnd{Kind: EndRunning}
		}
		e.At = max(e.At, t.UpdatedAt)
		ran = ran || t.Nonce != ""
	}
	if len(g.Missing) > 0 && !ran {
		e.Kind, e.Reason = EndInterrupted, fmt.Sprintf("its start was interrupted before anything ran (%s not recorded)", strings.Join(g.Missing, ", "))
		return e
	}
	rank := 0
	set := func(r int, k EndKind, t *Task, reason string) {
		if r > rank {
			rank, e.Kind, e.Task, e.Reason = r, k, t.ID, reason
		}
	}
	leaderEnded := false
	var stopped *Task
	for i := range g.Tasks {
		t := &g.Tasks[i]
		a := Alloc{}
		if t.Spec != nil && t.Spec.Alloc != nil {
			a = *t.Spec.Alloc
		}
		if a.Hook == HookPoststop {
			continue
		}
		switch {
		case t.State == StateFailed && t.Nonce == "":
			set(4, EndRefused, t, fmt.Sprintf("task %s was refused: %s", t.ID, orNone(t.Reason)))
		case t.State == StateLost && t.Executor != nil && bootID != "" && t.Executor.BootID != bootID:
			set(3, EndRebooted, t, fmt.Sprintf("task %s was lost to a reboot", t.ID))
		case t.State == StateLost:
			set(2, EndLost, t, fmt.Sprintf("task %s was lost: %s", t.ID, orNone(t.Reason)))
		case t.State == StateFailed:
			set(1, EndFailed, t, fmt.Sprintf("task %s failed to start: %s", t.ID, orNone(t.Reason)))
		case t.State == StateExited && t.Exit != nil && (t.Exit.Code != 0 || t.Exit.Signal != 0):
			set(1, EndFailed, t, fmt.Sprintf("task %s %s after %d restarts", t.ID, exitWords(*t.Exit), t.Restarts))
		case t.State == StateExited && a.Keeper() && t.Spec != nil && t.Spec.Restart != nil && t.Spec.Restart.OnSuccess:
			set(1, EndFailed, t, fmt.Sprintf("task %s exited (code 0) after %d restarts, and its restart policy restarts it no more", t.ID, t.Restarts))
		case t.State == StateExited && a.Leader:
			leaderEnded = true
		case t.State == StateStopped && a.Keeper() && stopped == nil:
			stopped = t
		}
	}
	switch {
	case rank > 0:
	case stopped != nil && !leaderEnded:
		// A keeper is stopped by its group only on a failure or its
		// leader's end: none happened, so someone asked.
		e.Kind, e.Task, e.Reason = EndStopped, stopped.ID, fmt.Sprintf("task %s was stopped on request", stopped.ID)
	default:
		e.Kind, e.Reason = EndCompleted, "its tasks completed successfully"
	}
	return e
}

func orNone(s string) string {
	if s == "" {
		return "no reason recorded"
	}
	return s
}

func exitWords(x ExitStatus) string {
	if x.Signal != 0 {
		return fmt.Sprintf("was killed by signal %d", x.Signal)
	}
	return fmt.Sprintf("exited with code %d", x.Code)
}

// CopyNext is what follows a copy's end (NextCopy).
type CopyNext struct {
	// Again: a new copy of the group is started; Alloc is what its
	// allocation carries (the caller gives it its task ids, Tasks), due
	// at Alloc.NotBefore.
	Again bool
	Alloc Alloc
	// Delay is how long after the end the new copy is due.
	Delay time.Duration
	// Rescheduled: the new copy is a reschedule (not a restart of a lost
	// copy, nor a start again of an interrupted one).
	Rescheduled bool
	// Reason says what happened and what follows, for status and logs.
	Reason string
}

// NextCopy decides what follows a copy that ended as end, whose
// allocation was a (of any of its tasks: they share it), with restart
// the restart policy of the task whose end decided it (nil: Nomad's
// service policy). It is pure. A copy stopped on request, completed or
// refused is followed by nothing; an interrupted one, or one lost to a
// reboot, by a new copy at once with nothing counted; a copy whose
// executor was lost, by a restart under restart while it allows one; a
// failed one (or a lost one whose restarts are spent), by a reschedule
// under a.Reschedule while it allows one. The new copy starts its
// restart count afresh after a reschedule, as a new allocation of Nomad's
// does. A copy with no reschedule policy at all (tether run's) is
// followed by nothing, however it ended.
func NextCopy(end CopyEnd, a Alloc, restart *RestartPolicy) CopyNext {
	next := Alloc{Index: a.Index, Reschedule: a.Reschedule, Rescheduled: a.Rescheduled, Restarts: a.Restarts,
		Generation: a.Generation + 1, NotBefore: end.At}
	again := func(delay time.Duration, reason string) CopyNext {
		next.NotBefore = end.At + int64(delay)
		return CopyNext{Again: true, Alloc: next, Delay: delay, Reason: reason}
	}
	switch {
	case end.Kind == EndRunning:
		return CopyNext{Reason: "it runs"}
	case a.Reschedule == nil && end.Kind != EndStopped && end.Kind != EndCompleted && end.Kind != EndRefused:
		// tether run's copies (and those of a tether before reschedules):
		// they run once, whoever drives them.
		return CopyNext{Reason: end.Reason + "; nothing follows it (it has no reschedule policy: a run of a file runs once)"}
	}
	switch end.Kind {
	case EndStopped:
		return CopyNext{Reason: end.Reason + ": it stays stopped until it is started again"}
	case EndCompleted:
		return CopyNext{Reason: end.Reason}
	case EndRefused:
		return CopyNext{Reason: end.Reason + ": a new copy would be refused too"}
	case EndInterrupted:
		next.NotBefore = max(a.NotBefore, end.At)
		return CopyNext{Again: true, Alloc: next, Reason: end.Reason + ": started again"}
	case EndRebooted:
		return again(0, end.Reason+": started again (nothing counted)")
	case EndLost:
		p := DefaultServiceRestart
		if restart != nil {
			p = *restart
		}
		state, d := p.Next(a.Restarts, ExitStatus{Code: -1}, end.At)
		if d.Restart {
			next.Restarts = state
			return again(d.Delay, fmt.Sprintf("%s: started again, %s", end.Reason, d.Reason))
		}
		end.Reason = fmt.Sprintf("%s, and its restart policy gave up (%s)", end.Reason, d.Reason)
	}
	d := a.Reschedule.Next(a.Rescheduled, end.At)
	if !d.Reschedule {
		return CopyNext{Reason: end.Reason + "; " + d.Reason}
	}
	next.Rescheduled, next.Restarts = d.History, RestartState{}
	n := again(d.Delay, end.Reason+"; "+d.Reason)
	n.Rescheduled = true
	return n
}
