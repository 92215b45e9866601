// Package linearize checks that concurrent calls into a driver.Driver are
// linearizable against a per-task model of the lifecycle, with porcupine:
// a History records each call's steps with their intervals, and Model
// says which orders of steps a task's life allows.
//
//	var h linearize.History
//	go h.StartTask(ctx, d, 0, "web", spec) // one client per goroutine
//	go h.StopTask(ctx, d, 1, "web", syscall.SIGTERM, time.Second)
//	...
//	res := porcupine.CheckOperations(linearize.Model(linearize.Options{}), h.Operations())
package linearize

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
)

// Step is one atomic step of a driver call, as the linearizability
// model sees it. A call that changes the task and then reports its state is
// recorded as two steps with the call's interval (a registration or a
// request, then the snapshot it returns), so that each step has a single
// linearization point inside the call: porcupine then has to find one order
// of all steps that the per-task model accepts.
type Step uint8

// The steps.
const (
	// StepRegister is StartTask's claim of the id: created, or
	// driver.ErrTaskExists.
	StepRegister Step = iota + 1
	// StepStartResult is the state StartTask returned (running, or a
	// terminal state with driver.ErrStartFailed).
	StepStartResult
	// StepStopRequest is StopTask's stop request: driver.ErrUnknownTask,
	// or accepted.
	StepStopRequest
	// StepStopResult is the (terminal) state StopTask returned.
	StepStopResult
	// StepInspect is InspectTask: driver.ErrUnknownTask or a snapshot.
	StepInspect
	// StepWait is WaitTask: driver.ErrUnknownTask or the terminal state.
	StepWait
	// StepRecover is what Recover reported of one task it found live in
	// the store: the state it left it in (no version: a report carries
	// none). Recover is an input like any other: it must not fail a
	// start in progress, nor end a task no stop was requested of.
	StepRecover
)

var linStepNames = map[Step]string{StepRegister: "start/register", StepStartResult: "start/result",
	StepStopRequest: "stop/request", StepStopResult: "stop/result", StepInspect: "inspect", StepWait: "wait", StepRecover: "recover"}

func (s Step) String() string {
	if n, ok := linStepNames[s]; ok {
		return n
	}
	return fmt.Sprintf("step(%d)", uint8(s))
}

// Result is the class of a call's error.
type Result uint8

// The results.
const (
	ResOK          Result = iota + 1
	ResExists             // driver.ErrTaskExists
	ResUnknown            // driver.ErrUnknownTask
	ResStartFailed        // driver.ErrStartFailed
	ResOther              // anything else: never legal in the model
)

func (r Result) String() string {
	switch r {
	case ResOK:
		return "ok"
	case ResExists:
		return "exists"
	case ResUnknown:
		return "unknown"
	case ResStartFailed:
		return "start-failed"
	case ResOther:
		return "error"
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// Classify maps a driver error to its Result.
func Classify(err error) Result {
	switch {
	case err == nil:
		return ResOK
	case errors.Is(err, driver.ErrTaskExists):
		return ResExists
	case errors.Is(err, driver.ErrUnknownTask):
		return ResUnknown
	case errors.Is(err, driver.ErrStartFailed):
		return ResStartFailed
	}
	return ResOther
}

// Input is a porcupine operation's input.
type Input struct {
	Step Step
	Task string
}

// Output is a porcupine operation's output: the call's result and, for
// the steps that report one, the task's state and version.
type Output struct {
	Result  Result
	State   fsm.State
	Version uint64
	Err     string // the error's text, for the visualization
}

// State is the model's state of one task: whether a StartTask has
// claimed its id, whether a stop was requested, and the latest snapshot
// (state and version) any call has been linearized at.
type State struct {
	Registered    bool
	StopRequested bool
	State         fsm.State
	Version       uint64
}

func (s State) String() string {
	if !s.Registered {
		return "absent"
	}
	stop := ""
	if s.StopRequested {
		stop = " stop-requested"
	}
	return fmt.Sprintf("%s v%d%s", s.State, s.Version, stop)
}

// Options are the assumptions of a history about the world.
type Options struct {
	// StopsOnly: nothing but a stop ends a task (no task exits, no executor
	// dies, no fault, no invalid spec), so a task reaping or terminal must
	// have had a stop requested, and a start can fail only because of one.
	StopsOnly bool
}

// reach[s] is the set (a bit per state) of states one event leads to from
// s: the lifecycle's edges and none --task-created--> created.
var reach = func() [16]uint16 {
	var r [16]uint16
	r[fsm.StateNone] = 1 << fsm.StateCreated
	for _, e := range fsm.Edges {
		r[e.From] |= 1 << e.To
	}
	return r
}()

// reachable reports whether exactly n events lead from s to t; each event
// is one edge of the lifecycle and bumps the version by one.
func reachable(s, t fsm.State, n uint64) bool {
	set := uint16(1) << s
	for ; n > 0 && set != 0; n-- {
		var next uint16
		for x := range fsm.State(16) {
			if set&(1<<x) != 0 {
				next |= reach[x]
			}
		}
		set = next
	}
	return set&(1<<t) != 0
}

// Model is the sequential specification of one task as the
// driver's API exposes it, partitioned by task id:
//
//   - StartTask on an unknown id claims it (register); on a claimed id it
//     fails with ErrTaskExists. Its result is running, or, after a stop,
//     a terminal state with ErrStartFailed.
//   - StopTask on an unknown id fails with ErrUnknownTask; otherwise its
//     request is recorded, and it returns a terminal state (stopped, or the
//     terminal state the task had already reached: a no-op).
//   - InspectTask returns ErrUnknownTask before the claim, then the current
//     state; WaitTask returns the terminal state.
//   - Recover reports a task it found in the store (so claimed) in a state
//     it may be in: it fails no start in progress and ends no task that
//     no stop was requested of (with StopsOnly).
//   - Every snapshot is a step along the lifecycle: versions never go back,
//     an equal version is the same state, and a version n higher is a state
//     exactly n edges away. After a stop request the task is reaping or
//     terminal; stopped needs a stop request.
//
// Any other error (ResOther) is illegal.
func Model(opts Options) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range history {
				id := op.Input.(Input).Task
				by[id] = append(by[id], op)
			}
			ids := make([]string, 0, len(by))
			for id := range by {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			out := make([][]porcupine.Operation, len(ids))
			for i, id := range ids {
				out[i] = by[id]
			}
			return out
		},
		Init: func() any { return State{} },
		Step: func(state, input, output any) (bool, any) {
			return step(opts, state.(State), input.(Input), output.(Output))
		},
		Hash: func(state any) uint64 {
			s := state.(State)
			h := s.Version<<8 | uint64(s.State)<<2
			if s.Registered {
				h |= 1
			}
			if s.StopRequested {
				h |= 2
			}
			return h
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(Input), output.(Output)
			s := fmt.Sprintf("%s(%s) -> %s", in.Step, in.Task, out.Result)
			if out.State != fsm.StateNone || out.Version > 0 {
				s += fmt.Sprintf(" %s v%d", out.State, out.Version)
			}
			if out.Err != "" {
				s += ": " + out.Err
			}
			return s
		},
		DescribeState: func(state any) string { return state.(State).String() },
	}
}

// snapshot folds an observed (state, version) into s, or reports that it
// cannot follow s.
func snapshot(opts Options, s State, out Output) (bool, State) {
	switch {
	case out.Version < s.Version:
		return false, s // a stale read: the version went back
	case out.Version == s.Version && out.State != s.State:
		return false, s
	case out.Version > s.Version && !reachable(s.State, out.State, out.Version-s.Version):
		return false, s
	case s.StopRequested && out.State != fsm.StateReaping && !out.State.Terminal():
		return false, s // live after the stop request
	case out.State == fsm.StateStopped && !s.StopRequested:
		return false, s // stopped with no stop requested
	case opts.StopsOnly && (out.State == fsm.StateReaping || out.State.Terminal()) && !s.StopRequested:
		return false, s
	}
	s.State, s.Version = out.State, out.Version
	return true, s
}

func step(opts Options, s State, in Input, out Output) (bool, any) {
	switch in.Step {
	case StepRegister:
		switch out.Result {
		case ResOK:
			if s.Registered {
				return false, s // a second StartTask claimed the id
			}
			s.Registered = true
			return true, s
		case ResExists:
			return s.Registered, s
		}
	case StepStartResult:
		if !s.Registered {
			return false, s
		}
		switch out.Result {
		case ResOK:
			if out.State != fsm.StateRunning && out.State != fsm.StateExited {
				return false, s
			}
		case ResStartFailed:
			if !out.State.Terminal() || opts.StopsOnly && !s.StopRequested {
				return false, s
			}
		default:
			return false, s
		}
		return snapshot(opts, s, out)
	case StepStopRequest:
		switch out.Result {
		case ResUnknown:
			return !s.Registered, s
		case ResOK:
			if !s.Registered {
				return false, s
			}
			s.StopRequested = true
			return true, s
		}
	case StepStopResult:
		if !s.Registered || !s.StopRequested || out.Result != ResOK || !out.State.Terminal() {
			return false, s
		}
		return snapshot(opts, s, out)
	case StepRecover:
		switch {
		case out.Result != ResOK || !s.Registered:
			return false, s
		case s.StopRequested && out.State != fsm.StateReaping && !out.State.Terminal():
			return false, s // live after the stop request
		case out.State == fsm.StateStopped && !s.StopRequested:
			return false, s
		case opts.StopsOnly && (out.State == fsm.StateReaping || out.State.Terminal()) && !s.StopRequested:
			return false, s // recovery failed (or ended) a task nobody stopped
		}
		return true, s
	case StepInspect, StepWait:
		switch out.Result {
		case ResUnknown:
			return !s.Registered, s
		case ResOK:
			if !s.Registered || in.Step == StepWait && !out.State.Terminal() {
				return false, s
			}
			return snapshot(opts, s, out)
		}
	}
	return false, s
}

// History records concurrent driver calls as porcupine operations against
// Model. It is safe for concurrent use; timestamps come from one
// counter, which is all porcupine needs (the order of calls and returns).
type History struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *History) add(client int, call, ret int64, in Input, out Output) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func output(err error, t fsm.Task) Output {
	out := Output{Result: Classify(err), State: t.State, Version: t.Version}
	if err != nil {
		out.Err = err.Error()
	}
	return out
}

// StartTask calls d.StartTask and records its register and result steps.
func (h *History) StartTask(ctx context.Context, d *driver.Driver, client int, id string, spec fsm.Spec) (fsm.Task, error) {
	call := h.clock.Add(1)
	t, err := d.StartTask(ctx, id, spec)
	ret := h.clock.Add(1)
	out := output(err, t)
	reg := Output{Result: ResOK}
	switch out.Result {
	case ResOK, ResStartFailed:
		h.add(client, call, ret, Input{StepStartResult, id}, out)
	default:
		reg = out // exists, or an error the model refuses
	}
	h.add(client, call, ret, Input{StepRegister, id}, reg)
	return t, err
}

// StopTask calls d.StopTask and records its request and result steps.
func (h *History) StopTask(ctx context.Context, d *driver.Driver, client int, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	call := h.clock.Add(1)
	t, err := d.StopTask(ctx, id, sig, grace)
	ret := h.clock.Add(1)
	out := output(err, t)
	req := Output{Result: ResOK}
	if out.Result == ResOK {
		h.add(client, call, ret, Input{StepStopResult, id}, out)
	} else {
		req = out // unknown, or an error the model refuses
	}
	h.add(client, call, ret, Input{StepStopRequest, id}, req)
	return t, err
}

// InspectTask calls d.InspectTask and records it.
func (h *History) InspectTask(ctx context.Context, d *driver.Driver, client int, id string) (driver.TaskInfo, error) {
	call := h.clock.Add(1)
	info, err := d.InspectTask(ctx, id)
	ret := h.clock.Add(1)
	h.add(client, call, ret, Input{StepInspect, id}, output(err, info.Task))
	return info, err
}

// WaitTask calls d.WaitTask and records it.
func (h *History) WaitTask(ctx context.Context, d *driver.Driver, client int, id string) (fsm.Task, error) {
	call := h.clock.Add(1)
	t, err := d.WaitTask(ctx, id)
	ret := h.clock.Add(1)
	h.add(client, call, ret, Input{StepWait, id}, output(err, t))
	return t, err
}

// Recover calls d.Recover and records a recover step for every task it
// reported on (an error for a task is ResOther, which the model refuses).
func (h *History) Recover(ctx context.Context, d *driver.Driver, client int) (driver.Report, error) {
	call := h.clock.Add(1)
	rep, err := d.Recover(ctx)
	ret := h.clock.Add(1)
	for _, r := range rep.Tasks {
		out := Output{Result: ResOK, State: r.To}
		if r.Err != nil {
			out.Result, out.Err = ResOther, r.Err.Error()
		}
		h.add(client, call, ret, Input{StepRecover, r.ID}, out)
	}
	if err != nil && len(rep.Tasks) == 0 {
		h.add(client, call, ret, Input{StepRecover, "*"}, Output{Result: ResOther, Err: err.Error()})
	}
	return rep, err
}

// Operations returns the recorded operations.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}
