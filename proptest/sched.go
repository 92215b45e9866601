package proptest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing/synctest"
	"time"
)

// The scheduler makes a step's outcome a function of its plan.
//
// The driver runs a step in several goroutines (the calls, each task's
// owner, the effect and probe in flight, the supervisors, one per task a
// Recover reconciles), and the Go scheduler interleaves them as it likes:
// which of two owners reaches the world first decides which one a fault
// at the n-th point hits, which pid a spawn gets, whether a Recover finds
// a start under way. So every contact a goroutine of the driver makes with
// the outside (an operation on the world or the log, a crash or fault
// hook) is a turn: the goroutine parks there, and the harness, once every
// goroutine of the bubble is blocked (synctest.Wait), lets exactly one of
// the parked goroutines go, chosen by a rule that depends on nothing but
// what is parked and the plan, then waits again. Between two turns only
// the goroutine let go runs (with what it wakes, which parks at its own
// first contact), so the world, the log and the harness's counters see
// one deterministic order.
//
// The rule: the goroutine parked most recently goes first (a goroutine
// goes on until it blocks, as a real one mostly does), ties broken by the
// contact's name and its task. A plan perturbs it: a call of the step may
// begin only at a drawn turn (Plan.Delays: a Recover lands in the middle of
// a start), and at a drawn turn another parked goroutine than the first
// may go (Plan.Order).
//
// What remains unordered is what runs between contacts inside the driver
// (its own locks and channels), and goroutines that park in the same turn
// at contacts of the same name and task (crash and fault hooks do not name
// their task): rare, and the same for every plan.

// Switch says that at turn At of a step (from 1) the Pick-th goroutine of
// the parked ones (in the rule's order, from 0, modulo how many there are)
// goes instead of the first.
type Switch struct {
	At, Pick int
}

func (s Switch) String() string { return strconv.Itoa(s.At) + ":" + strconv.Itoa(s.Pick) }

func parseSwitch(s string) (Switch, error) {
	a, p, ok := strings.Cut(s, ":")
	at, err1 := strconv.Atoi(a)
	pick, err2 := strconv.Atoi(p)
	if !ok || err1 != nil || err2 != nil || at < 1 || pick < 0 {
		return Switch{}, fmt.Errorf("%w: switch %q: want at:pick", ErrBadScenario, s)
	}
	return Switch{At: at, Pick: pick}, nil
}

// waiter is a goroutine parked at a contact.
type waiter struct {
	op, task string
	rank     int // 2 x the turn it parked in; 2 x its delay + 1 for a call that was held back
	seq      int // arrival order: the last tie-break
	delay    int // a call: the turn it may begin at
	run      chan struct{}
}

// scheduler orders the contacts of a harness's driver (see above).
type scheduler struct {
	mu       sync.Mutex
	active   bool // between turns only while a step (or a crash, a restart, a close) settles
	turn     int  // turns taken in the current step
	seq      int
	parked   []*waiter
	ready    []*waiter // next's scratch
	free     []*waiter // waiters to reuse (their channels belong to this bubble)
	switches []Switch
	woke     chan struct{} // a goroutine parked: the harness stops letting the clock run
}

func newScheduler() *scheduler { return &scheduler{woke: make(chan struct{}, 1)} }

// begin starts ordering the contacts of a step under plan's switches.
func (s *scheduler) begin(switches []Switch) {
	s.mu.Lock()
	s.active, s.turn, s.switches = true, 0, switches
	s.mu.Unlock()
}

// end stops ordering: contacts made outside a step (the harness's own
// calls of the driver between steps, tests that drive it by hand) pass.
// It returns how many turns the step took.
func (s *scheduler) end() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parked) > 0 {
		panic("proptest: scheduler ended with goroutines parked")
	}
	s.active, s.switches = false, nil
	return s.turn
}

// park waits for the goroutine's turn at contact op of task; a call's
// contact (delay >= 0) may go only from turn delay on.
func (s *scheduler) park(op, task string, delay int) {
	s.mu.Lock()
	if !s.active {
		s.mu.Unlock()
		return
	}
	var w *waiter
	if n := len(s.free); n > 0 {
		w, s.free = s.free[n-1], s.free[:n-1]
	} else {
		w = &waiter{run: make(chan struct{}, 1)}
	}
	s.seq++
	w.op, w.task, w.rank, w.seq, w.delay = op, task, 2*s.turn, s.seq, delay
	s.parked = append(s.parked, w)
	s.mu.Unlock()
	select {
	case s.woke <- struct{}{}:
	default:
	}
	<-w.run
	s.mu.Lock()
	s.free = append(s.free, w)
	s.mu.Unlock()
}

// before orders two parked goroutines by the rule.
func before(a, b *waiter) int {
	switch {
	case a.rank != b.rank:
		return b.rank - a.rank // the latest first
	case a.op != b.op:
		return strings.Compare(a.op, b.op)
	case a.task != b.task:
		return strings.Compare(a.task, b.task)
	}
	return a.seq - b.seq
}

// next lets one parked goroutine go and reports whether there was one.
func (s *scheduler) next() bool {
	s.mu.Lock()
	if len(s.parked) == 0 {
		s.mu.Unlock()
		return false
	}
	s.turn++
	ready := s.ready[:0]
	held := -1 // the call held back longest-due, if nothing else is ready
	for i, w := range s.parked {
		switch {
		case w.delay <= 0:
		case w.delay <= s.turn:
			w.rank, w.delay = 2*w.delay+1, 0 // its turn: it goes before what was parked by then
		default:
			if held < 0 || w.delay < s.parked[held].delay {
				held = i
			}
			continue
		}
		ready = append(ready, w)
	}
	if len(ready) == 0 { // only calls held back: the earliest goes now
		w := s.parked[held]
		w.rank, w.delay = 2*s.turn+1, 0
		ready = append(ready, w)
	}
	slices.SortFunc(ready, before)
	pick := 0
	for _, sw := range s.switches {
		if sw.At == s.turn {
			pick = sw.Pick % len(ready)
		}
	}
	w := ready[pick]
	s.ready = ready[:0]
	s.parked = slices.DeleteFunc(s.parked, func(p *waiter) bool { return p == w })
	s.mu.Unlock()
	w.run <- struct{}{}
	return true
}

// settle lets the parked goroutines go one turn at a time until every
// goroutine of the bubble is blocked for good: it waits, lets one go,
// waits again; with none parked it lets the bubble's fake clock run, up
// to an hour past any back-off or timeout the driver waits out (a
// goroutine a timer wakes parks at its next contact, and the turns go
// on).
func (s *scheduler) settle() {
	tm := time.NewTimer(time.Hour) // fake time: costs nothing
	defer tm.Stop()
	expired := false
	for {
		synctest.Wait()
		if s.next() {
			continue
		}
		if expired {
			return
		}
		select {
		case <-s.woke:
		case <-tm.C:
			expired = true
		}
	}
}
