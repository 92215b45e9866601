package driver

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// Crash points are named places where a test (or a user, through
// TETHER_CRASHPOINT) can kill the driver's process: just before and just
// after every durable append, per event type, and just before and just
// after every effect, per effect type. They are registered here, in one
// place, and cost one nil check when disabled.
const (
	crashBeforeAppend = "before-append:"
	crashAfterAppend  = "after-append:"
	crashBeforeEffect = "before-effect:"
	crashAfterEffect  = "after-effect:"
)

// Recorded lists the event types this driver appends, in lifecycle
// order. (The table's fault event is for embedders that drive the table
// themselves: the driver records the specific failure instead.)
func Recorded() []fsm.EventType {
	return slices.DeleteFunc(fsm.EventTypes(), func(e fsm.EventType) bool {
		return e == fsm.EventFault
	})
}

// CrashPoints lists every crash point name, sorted by lifecycle order.
// Several coincide where the table has the driver append more than one
// event in one commit (executor-up with the launch intent, launched with
// running): those fire at the same moment.
func CrashPoints() []string {
	var out []string
	for _, e := range Recorded() {
		out = append(out, crashBeforeAppend+e.String(), crashAfterAppend+e.String())
	}
	for _, e := range []fsm.EffectType{fsm.EffectSpawnExecutor, fsm.EffectLaunchTask, fsm.EffectAttach, fsm.EffectKillExecutor} {
		out = append(out, crashBeforeEffect+e.String(), crashAfterEffect+e.String())
	}
	// The executor's, on its restart path: TETHER_CRASHPOINT reaches it
	// through the environment it inherits, and it SIGKILLs itself there.
	out = append(out, executor.CrashPoints()...)
	// The executor's on its readiness path: before and after it journals
	// a run's ready entry (a notify task that says READY=1 reaches them).
	out = append(out, executor.CrashBeforeReadyEntry, executor.CrashAfterReadyEntry)
	// A maintenance's durable steps: the store's (Options.Crash) and the
	// salvage's settling of lost tasks (SalvageStore).
	out = append(out, store.PointSalvageCopied, PointSalvageSettled)
	for _, p := range store.CrashPoints() {
		if p != store.PointSalvageCopied {
			out = append(out, p)
		}
	}
	return out
}

// StoreCrash is the store's crash hook (store.Options.Crash) that calls
// h.Crash with the maintenance's points, so that TETHER_CRASHPOINT and
// TETHER_PAUSEPOINT reach them too.
func (h Hooks) StoreCrash() func(point string) {
	if h.Crash == nil {
		return nil
	}
	return func(point string) { h.Crash(point, "") }
}

// FaultPoints lists the operations a fault can be injected into: every
// effect, and the append of every event type.
func FaultPoints() []string {
	var out []string
	for _, e := range []fsm.EffectType{fsm.EffectSpawnExecutor, fsm.EffectLaunchTask, fsm.EffectAttach, fsm.EffectKillExecutor} {
		out = append(out, "effect:"+e.String())
	}
	for _, e := range Recorded() {
		out = append(out, "append:"+e.String())
	}
	return out
}

// Hooks let tests crash the driver or inject faults at named points. The
// zero value disables both.
type Hooks struct {
	// Crash is called at every crash point with its name and the task it
	// concerns. A real-process test's Crash SIGKILLs the process (see
	// HooksFromEnv); a simulation's may panic with a sentinel that its
	// harness recovers, and orders its goroutines by point and task.
	Crash func(point, task string)
	// Fault is called before every effect ("effect:<effect>") and every
	// append ("append:<event>"), with the task; a non-nil error becomes that
	// operation's failure.
	Fault func(point, task string) error
}

func (h Hooks) crash(point, task string) {
	if h.Crash != nil {
		h.Crash(point, task)
	}
}

func (h Hooks) fault(point, task string) error {
	if h.Fault != nil {
		if err := h.Fault(point, task); err != nil {
			return fmt.Errorf("%w at %s: %w", ErrInjected, point, err)
		}
	}
	return nil
}

// The environment variables read by HooksFromEnv.
const (
	EnvCrashPoint = "TETHER_CRASHPOINT" // <point> or <point>:<n>: SIGKILL self at its n-th hit (default 1st)
	EnvPausePoint = "TETHER_PAUSEPOINT" // <point> or <point>:<n>: SIGSTOP self at its n-th hit, until a SIGCONT
	EnvFault      = "TETHER_FAULT"      // <point> or <point>:<n>: fail that operation at its n-th hit
)

// HooksFromEnv builds hooks from TETHER_CRASHPOINT, TETHER_PAUSEPOINT and
// TETHER_FAULT. An unknown point name is an error, so a typo cannot
// silently disable a test. A pause point stops the whole process
// (SIGSTOP) at a crash point until someone sends it SIGCONT: a test holds
// a window open there (a maintenance between its read and its install,
// say) and runs other commands in it, with no sleep.
func HooksFromEnv() (Hooks, error) {
	var h Hooks
	var crash, pause *counter
	for _, p := range []struct {
		env string
		c   **counter
	}{{EnvCrashPoint, &crash}, {EnvPausePoint, &pause}} {
		if v := os.Getenv(p.env); v != "" {
			name, n, err := parsePoint(v, CrashPoints())
			if err != nil {
				return h, fmt.Errorf("%s: %w", p.env, err)
			}
			*p.c = &counter{name: name, n: n}
		}
	}
	if crash != nil || pause != nil {
		h.Crash = func(point, _ string) {
			if pause != nil && pause.hit(point) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) // returns once continued
			}
			if crash != nil && crash.hit(point) {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // SIGKILL is not deliverable late; never go on
			}
		}
	}
	if v := os.Getenv(EnvFault); v != "" {
		name, n, err := parsePoint(v, FaultPoints())
		if err != nil {
			return h, fmt.Errorf("%s: %w", EnvFault, err)
		}
		c := &counter{name: name, n: n}
		h.Fault = func(point, _ string) error {
			if c.hit(point) {
				return fmt.Errorf("%s=%s", EnvFault, v)
			}
			return nil
		}
	}
	return h, nil
}

func parsePoint(v string, known []string) (string, int, error) {
	// Point names contain a colon themselves: a count, if any, follows the last one.
	name, n := v, 1
	if i := strings.LastIndex(v, ":"); i >= 0 {
		if c, err := strconv.Atoi(v[i+1:]); err == nil {
			if c < 1 {
				return "", 0, fmt.Errorf("bad hit count in %q: want <point>:<n> with n >= 1", v)
			}
			name, n = v[:i], c
		}
	}
	for _, k := range known {
		if k == name {
			return name, n, nil
		}
	}
	return "", 0, fmt.Errorf("unknown point %q (tether debug crashpoints lists them)", name)
}

type counter struct {
	mu   sync.Mutex
	name string
	n    int
	hits int
}

func (c *counter) hit(point string) bool {
	if point != c.name {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hits++
	return c.hits == c.n
}
