package main

import (
	"context"
	"sync"
	"syscall"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/taskfile"
)

// parseSignal reads a signal as a name ("SIGTERM", "TERM", "term") or a
// number ("15").
func parseSignal(s string) (syscall.Signal, error) { return taskfile.ParseSignal(s) }

// signalGate tells a second request to stop a task from the first one
// delivered twice: the stop has begun once the task's log holds its
// stop-requested (or the task has ended), which the gate learns by
// following the task (FollowTask starts with the task as it is, so a stop
// recorded before the gate was made is seen at once). Where the task
// cannot be followed, every signal counts as a new request, as before
// the gate.
type signalGate struct {
	done      chan struct{} // closed once the stop has begun
	following chan struct{} // closed once the gate has seen the task (tests)
	cancel    context.CancelFunc
}

func newSignalGate(ctx context.Context, s *session, id string) *signalGate {
	return newGroupSignalGate(ctx, s, []string{id})
}

// newGroupSignalGate is the gate of a stop of the tasks ids (a job's
// groups): it opens once any of them has its stop-requested recorded, or
// once every one has ended or cannot be followed (a task that waits for
// its turn cannot). A task of a group that ended on its own (a prestart
// task that completed) does not open it: only a stop does. One task's
// gate opens when it ends, too.
func newGroupSignalGate(ctx context.Context, s *session, ids []string) *signalGate {
	fctx, cancel := context.WithCancel(ctx)
	g := &signalGate{done: make(chan struct{}), following: make(chan struct{}), cancel: cancel}
	var began, seen sync.Once
	open := func() { began.Do(func() { close(g.done) }) }
	var mu sync.Mutex
	left := len(ids)
	for _, id := range ids {
		go func() {
			_, err := s.svc.FollowTask(fctx, id, func(t fsm.Task) {
				seen.Do(func() { close(g.following) })
				if t.StopSignal != 0 || len(ids) == 1 && stopBegan(t) {
					open()
				}
			})
			if fctx.Err() != nil && err != nil {
				return // the gate was closed
			}
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				open() // ended, or cannot be followed: any signal is a request
			}
		}()
	}
	return g
}

// stopBegan reports whether a task's stop has begun: its stop-requested
// is recorded, or it has ended.
func stopBegan(t fsm.Task) bool { return t.StopSignal != 0 || t.State.Terminal() }

// began reports whether the stop has begun.
func (g *signalGate) began() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// close stops following the task.
func (g *signalGate) close() { g.cancel() }
