package proptest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// Point is the n-th hit (from 1) of a named crash or fault point within one
// step of the harness. The name Any ("*") stands for every point: Point{Any,
// 3} is the third point of its kind hit in the step, whatever its name, so
// a drawn crash or fault always fires if the step gets that far.
type Point struct {
	Name string
	Nth  int
}

// Any matches every crash or fault point (see Point).
const Any = "*"

// HangSuffix, appended to a world fault point's name in a Plan, makes the
// operation hang until its context ends instead of failing at once.
const HangSuffix = "/hang"

func (p Point) String() string {
	if p.Name == "" {
		return "-"
	}
	return p.Name + "#" + strconv.Itoa(p.Nth)
}

// ParsePoint parses Point.String's form.
func ParsePoint(s string) (Point, error) {
	if s == "-" || s == "" {
		return Point{}, nil
	}
	i := strings.LastIndex(s, "#")
	if i < 0 {
		return Point{}, fmt.Errorf("%w: point %q: want name#n", ErrBadScenario, s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n < 1 {
		return Point{}, fmt.Errorf("%w: point %q: bad hit count", ErrBadScenario, s)
	}
	return Point{Name: s[:i], Nth: n}, nil
}

// Plan says where one step of the harness fails, where it crashes, and
// where executors die.
//
//   - Crash names a crash point (CrashPoints): the driver's process dies
//     there, as SIGKILL would kill it.
//   - Die names a crash point too: there every live executor dies behind
//     the driver's back (their task trees live on), and the step goes on.
//   - Faults name fault points (FaultPoints): the driver's own fault
//     hooks (an effect, the driver's side of an append), the store's
//     Append (failing before its commit, or after it), and the world's
//     operations (failing, or hanging until their context ends).
type Plan struct {
	Crash  Point
	Die    Point
	Faults []Point
}

func (p Plan) String() string {
	var fs []string
	for _, f := range p.Faults {
		fs = append(fs, f.String())
	}
	s := fmt.Sprintf("crash=%s faults=[%s]", p.Crash, strings.Join(fs, " "))
	if p.Die.Name != "" {
		s += " die=" + p.Die.String()
	}
	return s
}

// Empty reports whether the plan injects nothing.
func (p Plan) Empty() bool { return p.Crash.Name == "" && p.Die.Name == "" && len(p.Faults) == 0 }

func parsePlan(s string) (Plan, error) {
	var p Plan
	if i := strings.LastIndex(s, " die="); i >= 0 {
		var err error
		if p.Die, err = ParsePoint(s[i+len(" die="):]); err != nil {
			return p, err
		}
		s = s[:i]
	}
	i := strings.Index(s, " faults=[")
	if !strings.HasPrefix(s, "crash=") || i < 0 || !strings.HasSuffix(s, "]") {
		return p, fmt.Errorf("%w: plan %q: want crash=P faults=[P ...] [die=P]", ErrBadScenario, s)
	}
	crash, faults := s[len("crash="):i], s[i+len(" faults=["):len(s)-1]
	var err error
	if p.Crash, err = ParsePoint(crash); err != nil {
		return p, err
	}
	for _, f := range strings.Fields(faults) {
		pt, err := ParsePoint(f)
		if err != nil {
			return p, err
		}
		p.Faults = append(p.Faults, pt)
	}
	return p, nil
}

// Fault points of the store boundary: an Append of an event of the named
// type (one point per event of the batch) fails before it commits
// ("store:fail:<event>"), or commits and then reports failure
// ("store:lost-ack:<event>").
const (
	storeFail    = "store:fail:"
	storeLostAck = "store:lost-ack:"
	worldPrefix  = "world:"
)

// CrashPoints lists every crash point (driver.CrashPoints).
func CrashPoints() []string { return driver.CrashPoints() }

// FaultPoints lists every fault point the harness can fire: the driver's
// (driver.FaultPoints), the store boundary's for every event the driver
// records, and the world's for every operation of WorldOps (append
// HangSuffix to a world point's name in a Plan to make it hang).
func FaultPoints() []string {
	out := driver.FaultPoints()
	for _, e := range driver.Recorded() {
		out = append(out, storeFail+e.String(), storeLostAck+e.String())
	}
	for _, op := range WorldOps {
		out = append(out, worldPrefix+op)
	}
	return out
}

// drawnFaultPoints is what a plan draws faults from: every fault point, and
// every world point also in its hanging form.
func drawnFaultPoints() []string {
	out := FaultPoints()
	for _, op := range WorldOps {
		out = append(out, worldPrefix+op+HangSuffix)
	}
	return out
}

// storeFaultOf is the store fault point names of an append of event ev.
func storeFaultOf(ev fsm.EventType) (fail, lostAck string) {
	return storeFail + ev.String(), storeLostAck + ev.String()
}

// matches reports whether the plan's faults name the n-th hit of point
// (or its hanging form), or the k-th fault point of the step whatever its
// name; hang is set for a hanging form.
func (p Plan) fault(point string, n, k int) (fire, hang bool) {
	switch {
	case slices.Contains(p.Faults, Point{point + HangSuffix, n}):
		return true, true
	case slices.Contains(p.Faults, Point{point, n}), slices.Contains(p.Faults, Point{Any, k}):
		return true, false
	}
	return false, false
}

// at reports whether pt names the n-th hit of point, or (Any) the k-th
// crash point of the step.
func (pt Point) at(point string, n, k int) bool {
	return pt.Name == Any && pt.Nth == k || pt.Name == point && pt.Nth == n
}
