package agent

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/tether-fsm/tether/driver"
)

// Crash points of the convergence: just before and just after each durable
// step (a commit of desired records, by the kind of change it holds, and
// a group driver's record of a copy, by its kind: drive.go) and each
// effect. They are registered here, in one place, cost one nil check
// when disabled, and are armed in a real agent by TETHER_CRASHPOINT as the
// driver's are (the agent's driver keeps its own: a crash at
// after-append:task-created during a convergence's start is the driver's
// point, hit in the agent's process).
const (
	crashBeforeCommit = "agent-before-commit:"
	crashAfterCommit  = "agent-after-commit:"
	crashBeforeEffect = "agent-before-effect:"
	crashAfterEffect  = "agent-after-effect:"
)

// commitKind names what a commit of desired records holds, for its crash
// points.
type commitKind string

const (
	commitIntent  commitKind = "intent"  // new allocations for a desired entry (their ids, ahead of their tasks)
	commitCopy    commitKind = "copy"    // an allocation's next copy (a restart, a reschedule), ahead of its tasks
	commitDelete  commitKind = "delete"  // a desired entry's record goes (file removed, disabled)
	commitUpdate  commitKind = "update"  // another change (its file moved, a copy followed, a refusal noted)
	commitEnable  commitKind = "enable"  // tether enable
	commitDisable commitKind = "disable" // tether disable
	commitStart   commitKind = "start"   // a desired entry started again
)

var commitKinds = []commitKind{commitIntent, commitCopy, commitDelete, commitUpdate, commitEnable, commitDisable, commitStart}

// CrashPoints lists the agent's crash points.
func CrashPoints() []string {
	var out []string
	for _, k := range commitKinds {
		out = append(out, crashBeforeCommit+string(k), crashAfterCommit+string(k))
	}
	for _, k := range []EffectKind{EffectStart, EffectStop, EffectDrive} {
		out = append(out, crashBeforeEffect+k.String(), crashAfterEffect+k.String())
	}
	for _, k := range copyKinds {
		out = append(out, crashBeforeCopy+string(k), crashAfterCopy+string(k))
	}
	return out
}

// Hooks crash the agent at its named points (tests). The zero value
// disables them.
type Hooks struct {
	// Crash is called at every crash point with its name and the desired
	// task it concerns.
	Crash func(point, name string)
}

func (h Hooks) crash(point, name string) {
	if h.Crash != nil {
		h.Crash(point, name)
	}
}

// HooksFromEnv builds the agent's hooks and its driver's from
// TETHER_CRASHPOINT and TETHER_FAULT (<point> or <point>:<n>, the n-th hit).
// A point may be the agent's (CrashPoints) or the driver's
// (driver.CrashPoints); an unknown one is an error, so that a typo cannot
// silently disable a test.
func HooksFromEnv() (Hooks, driver.Hooks, error) {
	v := os.Getenv(driver.EnvCrashPoint)
	name, n, err := splitPoint(v)
	if err != nil {
		return Hooks{}, driver.Hooks{}, fmt.Errorf("%s: %w", driver.EnvCrashPoint, err)
	}
	if v == "" || !slices.Contains(CrashPoints(), name) {
		dh, err := driver.HooksFromEnv()
		return Hooks{}, dh, err
	}
	// An agent point: the driver must not see it (it would refuse a name it
	// does not know). Its executors never match it either: they compare
	// the variable with their own points.
	os.Unsetenv(driver.EnvCrashPoint)
	dh, err := driver.HooksFromEnv()
	os.Setenv(driver.EnvCrashPoint, v)
	if err != nil {
		return Hooks{}, dh, err
	}
	var (
		mu   sync.Mutex
		hits int
	)
	return Hooks{Crash: func(point, _ string) {
		if point != name {
			return
		}
		mu.Lock()
		hits++
		fire := hits == n
		mu.Unlock()
		if fire {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL is not deliverable late; never go on
		}
	}}, dh, nil
}

// splitPoint splits <point>[:<n>] (point names contain colons themselves:
// a count, if any, follows the last one).
func splitPoint(v string) (string, int, error) {
	name, n := v, 1
	if i := strings.LastIndex(v, ":"); i >= 0 {
		if c, err := strconv.Atoi(v[i+1:]); err == nil {
			if c < 1 {
				return "", 0, fmt.Errorf("bad hit count in %q: want <point>:<n> with n >= 1", v)
			}
			name, n = v[:i], c
		}
	}
	return name, n, nil
}

// IsCrashPoint reports whether v (a TETHER_CRASHPOINT value, <point> or
// <point>:<n>) names one of the agent's crash points.
func IsCrashPoint(v string) bool {
	name, _, err := splitPoint(v)
	return err == nil && slices.Contains(CrashPoints(), name)
}
