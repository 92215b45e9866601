package proptest

import (
	"fmt"
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
//   - Delays and Order perturb the order in which the step's goroutines
//     take their turns at the outside (see the scheduler): the i-th call
//     of the step begins at turn Delays[i] at the earliest (and then before
//     anything parked by then), and each Switch lets another goroutine go
//     at its turn. Without them the goroutine parked last goes first, and
//     the calls begin in order.
type Plan struct {
	Crash  Point
	Die    Point
	Faults []Point
	Delays []int
	Order  []Switch
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
	if len(p.Delays) > 0 {
		ds := make([]string, len(p.Delays))
		for i, d := range p.Delays {
			ds[i] = strconv.Itoa(d)
		}
		s += " delays=[" + strings.Join(ds, " ") + "]"
	}
	if len(p.Order) > 0 {
		sws := make([]string, len(p.Order))
		for i, sw := range p.Order {
			sws[i] = sw.String()
		}
		s += " order=[" + strings.Join(sws, " ") + "]"
	}
	return s
}

// Empty reports whether the plan injects nothing (an order is not an
// injection).
func (p Plan) Empty() bool { return p.Crash.Name == "" && p.Die.Name == "" && len(p.Faults) == 0 }

// cutList cuts " name=[a b c]" off the end of s, if it ends so.
func cutList(s, name string) (rest string, items []string, ok bool) {
	i := strings.LastIndex(s, " "+name+"=[")
	if i < 0 || !strings.HasSuffix(s, "]") {
		return s, nil, false
	}
	return s[:i], strings.Fields(s[i+len(name)+3 : len(s)-1]), true
}

func parsePlan(s string) (Plan, error) {
	var p Plan
	rest, items, ok := cutList(s, "order")
	if ok {
		for _, it := range items {
			sw, err := parseSwitch(it)
			if err != nil {
				return p, err
			}
			p.Order = append(p.Order, sw)
		}
		s = rest
	}
	if rest, items, ok := cutList(s, "delays"); ok {
		for _, it := range items {
			d, err := strconv.Atoi(it)
			if err != nil || d < 0 {
				return p, fmt.Errorf("%w: delay %q: want a turn", ErrBadScenario, it)
			}
			p.Delays = append(p.Delays, d)
		}
		s = rest
	}
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

// fault reports whether the plan's faults name the n-th hit of point (or
// its hanging form), or the k-th fault point of the step whatever its name
// (Any; Any+HangSuffix hangs it if it is a world operation, else fails
// it); hang is set for a hanging form.
func (p Plan) fault(point string, n, k int) (fire, hang bool) {
	for _, f := range p.Faults {
		switch {
		case f.Nth == n && f.Name == point:
			return true, false
		case f.Nth == n && len(f.Name) == len(point)+len(HangSuffix) && f.Name == point+HangSuffix:
			return true, true
		case f.Nth == k && f.Name == Any:
			return true, false
		case f.Nth == k && f.Name == Any+HangSuffix:
			return true, strings.HasPrefix(point, worldPrefix)
		}
	}
	return false, false
}

// at reports whether pt names the n-th hit of point, or (Any) the k-th
// crash point of the step.
func (pt Point) at(point string, n, k int) bool {
	return pt.Name == Any && pt.Nth == k || pt.Name == point && pt.Nth == n
}
