package proptest

import (
	"context"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// genLog is the event log as one driver generation sees it: a real
// store.Store (bbolt, NoSync, on a file in the harness's directory) that
// refuses every call of a dead generation. A commit that was under way when
// its generation died stands, as it would in bbolt; its acknowledgement
// never reaches the driver. Every acknowledged append is entered in the
// harness's ledger, so that "no acknowledged event lost" can be checked
// after the next open.
type genLog struct {
	h *Harness
	g *Generation
	s *store.Store
}

var _ store.Log = (*genLog)(nil)

func (l *genLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	l.g.enter()
	l.h.checkAppend(task, expected, events)
	l.h.commits.RLock() // freeze waits for commits in flight: a process dies between writes, never inside one
	v, err := l.s.Append(ctx, task, expected, events...)
	l.h.commits.RUnlock()
	l.g.enter() // died while committing: the commit stands, no acknowledgement
	if err == nil {
		l.h.committed(l.s, task, v)
		l.h.acknowledge(task, expected, events)
	}
	return v, err
}

func (l *genLog) Load(ctx context.Context, task string) ([]fsm.Event, error) {
	l.g.enter()
	return l.s.Load(ctx, task)
}

func (l *genLog) LoadTask(ctx context.Context, task string) (fsm.Task, error) {
	l.g.enter()
	return l.s.LoadTask(ctx, task)
}

func (l *genLog) Live(ctx context.Context, fn func(task string) error) error {
	l.g.enter()
	return l.s.Live(ctx, fn)
}

func (l *genLog) All(ctx context.Context, fn func(task string) error) error {
	l.g.enter()
	return l.s.All(ctx, fn)
}

// Close does nothing: the harness owns the file and closes it when the
// generation is over.
func (l *genLog) Close() error { return nil }
