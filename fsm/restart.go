package fsm

import (
	"fmt"
	"math"
	"time"
)

// RestartMode is what a restart policy does once a task has used its
// attempts within an interval (Nomad's restart.mode).
type RestartMode string

const (
	// RestartFail: no more restarts; the task ends.
	RestartFail RestartMode = "fail"
	// RestartDelay: wait until the interval is over, then restart again
	// (the attempts count afresh in the new interval).
	RestartDelay RestartMode = "delay"
)

// RestartPolicy is a task's restart block, with Nomad's semantics: at most
// Attempts restarts within Interval, each after Delay; Mode says what
// happens once they are used up. The interval starts when the task first
// starts and again at the first exit after an interval has passed.
type RestartPolicy struct {
	Attempts int
	Interval time.Duration
	Delay    time.Duration
	Mode     RestartMode
	// OnSuccess restarts a task that exited with code 0 too (Nomad's
	// service jobs); without it a successful exit ends the task (batch
	// jobs).
	OnSuccess bool
}

// Nomad's restart defaults for service and batch jobs.
var (
	DefaultServiceRestart = RestartPolicy{Attempts: 2, Interval: 30 * time.Minute, Delay: 15 * time.Second, Mode: RestartFail, OnSuccess: true}
	DefaultBatchRestart   = RestartPolicy{Attempts: 3, Interval: 24 * time.Hour, Delay: 15 * time.Second, Mode: RestartFail}
)

// MinRestartInterval is the shortest restart interval Nomad accepts.
const MinRestartInterval = 5 * time.Second

// Validate checks the policy as Nomad validates a job's restart policy,
// once the defaults of the job's type are merged in (a block that sets
// only attempts and delay takes the default interval), with Nomad's rules
// and the shape of its messages:
//
//   - the mode is "fail" or "delay";
//   - 0 attempts with mode "delay" is ambiguous (it would wait out every
//     interval and restart nothing);
//   - the interval is at least 5s;
//   - attempts x delay fits in the interval (else the attempts could not
//     all happen within it, and the policy would restart for ever at the
//     rate of its delay).
//
// Negative attempts or delay are refused too.
func (p RestartPolicy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: restart: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	switch {
	case p.Mode != RestartFail && p.Mode != RestartDelay:
		return bad("unsupported restart mode %q: use %q or %q", p.Mode, RestartFail, RestartDelay)
	case p.Attempts < 0:
		return bad("attempts %d is negative", p.Attempts)
	case p.Delay < 0:
		return bad("delay %s is negative", p.Delay)
	case p.Attempts == 0 && p.Mode != RestartFail:
		return bad("restart policy %q with %d attempts is ambiguous: use mode \"fail\" for no restarts", p.Mode, p.Attempts)
	case p.Interval < MinRestartInterval:
		return bad("interval can not be less than %s (got %s)", MinRestartInterval, p.Interval)
	case p.Attempts > 0 && p.Delay > p.Interval/time.Duration(p.Attempts):
		// attempts x delay > interval, without overflowing the product.
		return bad("tether can't restart the task %d times in an interval of %s with a delay of %s: make the interval at least %s, or the delay or attempts smaller",
			p.Attempts, p.Interval, p.Delay, product(p.Attempts, p.Delay))
	}
	return nil
}

// product is n x d, or the longest duration when that overflows.
func product(n int, d time.Duration) string {
	if d > 0 && time.Duration(n) > math.MaxInt64/d {
		return "more than " + time.Duration(math.MaxInt64).String()
	}
	return (time.Duration(n) * d).String()
}

// RestartState is what a restart decision depends on besides the policy:
// the current interval and the restarts in it. The executor, which is
// there when the task exits, keeps it (and journals every decision); the
// log records each restart as a restart-intent event with its attempt
// number, so the count survives any crash of the driver.
type RestartState struct {
	// WindowStart is when the current interval began (Unix ns).
	WindowStart int64
	// Count is the number of exits handled in the current interval.
	Count int
	// Attempts is the number of restarts so far, over the task's life.
	Attempts int
}

// RestartDecision is the outcome of Next.
type RestartDecision struct {
	Restart bool
	// Delay is how long to wait before relaunching.
	Delay time.Duration
	// Attempt is the restart's number (from 1) when Restart is set.
	Attempt int
	// Reason says why, in words for `tether events`.
	Reason string
}

// Next decides what to do about a run that ended with exit at now (Unix
// ns), given the state before it, and returns the state after it. It is
// pure: the same policy, state, exit and time always give the same answer.
func (p RestartPolicy) Next(s RestartState, exit ExitStatus, now int64) (RestartState, RestartDecision) {
	if exit.Code == 0 && exit.Signal == 0 && !p.OnSuccess {
		return s, RestartDecision{Reason: "the task exited successfully; the policy restarts only failures"}
	}
	if p.Attempts == 0 {
		return s, RestartDecision{Reason: "the restart policy allows no restarts"}
	}
	end := s.WindowStart + int64(p.Interval)
	if now > end {
		s.WindowStart, s.Count = now, 0
		end = now + int64(p.Interval)
	}
	s.Count++
	if s.Count <= p.Attempts {
		s.Attempts++
		return s, RestartDecision{Restart: true, Delay: p.Delay, Attempt: s.Attempts,
			Reason: fmt.Sprintf("restart %d of %d in %s", s.Count, p.Attempts, p.Interval)}
	}
	if p.Mode == RestartFail {
		return s, RestartDecision{Reason: fmt.Sprintf("exceeded %d restart attempts in %s and mode is %q", p.Attempts, p.Interval, p.Mode)}
	}
	s.Attempts++
	return s, RestartDecision{Restart: true, Delay: time.Duration(end - now), Attempt: s.Attempts,
		Reason: fmt.Sprintf("exceeded %d restart attempts in %s; mode %q waits for the next interval", p.Attempts, p.Interval, p.Mode)}
}
