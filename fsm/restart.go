package fsm

import (
	"fmt"
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

// Validate checks the policy's values.
func (p RestartPolicy) Validate() error {
	switch {
	case p.Attempts < 0:
		return fmt.Errorf("%w: restart attempts %d is negative", ErrInvalidSpec, p.Attempts)
	case p.Delay < 0:
		return fmt.Errorf("%w: restart delay %s is negative", ErrInvalidSpec, p.Delay)
	case p.Attempts > 0 && p.Interval <= 0:
		return fmt.Errorf("%w: restart interval must be positive", ErrInvalidSpec)
	case p.Mode != RestartFail && p.Mode != RestartDelay:
		return fmt.Errorf("%w: restart mode %q: use %q or %q", ErrInvalidSpec, p.Mode, RestartFail, RestartDelay)
	case p.Mode == RestartDelay && p.Interval < p.Delay:
		return fmt.Errorf("%w: restart interval %s is shorter than its delay %s", ErrInvalidSpec, p.Interval, p.Delay)
	}
	return nil
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
