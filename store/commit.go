package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Group commit.
//
// One committer goroutine (Store.run) owns every write transaction. An
// Append encodes its records in the caller's goroutine, queues a request and
// waits. The committer takes the first request, then every other request
// already queued (those that arrived while the previous commit was
// syncing), applies them all in one bbolt transaction and commits it with
// one fsync. A lone writer therefore pays no delay; many writers share
// fsyncs.
//
// Each request is validated on its own (head, expected version, legality
// through fsm) before anything of it is written, so a conflict or an illegal
// event fails that request only. A failed write (bbolt refusing a Put) rolls
// the transaction back and the group is retried without that request.

// maxBatch bounds the requests in one transaction (and the queue).
const maxBatch = 1024

// Request states: a request is queued until the committer claims it or its
// caller abandons it (context cancelled). Exactly one of them wins.
const (
	reqQueued int32 = iota
	reqClaimed
	reqAbandoned
)

type request struct {
	task     string
	expected uint64
	events   []fsm.Event // Seq set
	recs     [][]byte    // encoded events
	state    atomic.Int32
	done     chan struct{} // closed by the committer once err and version are set

	version uint64
	err     error
}

// Append appends events to task's log if the task is at version expected,
// and returns the new version. expected is 0 for a new task, whose first
// event must be task-created. Each event's Seq must be 0 (it is then
// assigned) or expected+1, expected+2, and so on.
//
// Append returns only once the events are committed and synced to disk
// (unless Options.NoSync). A version mismatch gives a *ConflictError; an
// event the table does not allow gives an error wrapping
// fsm.ErrIllegalTransition; an event whose record would exceed 1 MiB a
// *SizeError (ErrTooLarge); appending to a task the store does not hold,
// with expected > 0, gives ErrUnknownTask. On any error nothing of this
// call is written. A context that ends while the request is still queued
// returns ctx.Err() and writes nothing (a retry at the same version
// commits the events once); once the committer has claimed the request,
// Append waits for its commit and returns the true outcome, never ctx.Err()
// for events that were committed (a retry of those conflicts: nothing is
// committed twice).
func (s *Store) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	r, err := newRequest(task, expected, events)
	if err != nil {
		return 0, err
	}
	return s.submit(ctx, r)
}

// newRequest checks an append's arguments and encodes its records.
func newRequest(task string, expected uint64, events []fsm.Event) (*request, error) {
	if err := checkTaskID(task); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, ErrNoEvents
	}
	r := &request{task: task, expected: expected, done: make(chan struct{})}
	r.events = make([]fsm.Event, len(events))
	r.recs = make([][]byte, len(events))
	buf := make([]byte, 0, 48*len(events))
	for i, e := range events {
		seq := expected + uint64(i) + 1
		switch e.Seq {
		case 0:
			e.Seq = seq
		case seq:
		default:
			return nil, fmt.Errorf("%w: task %q: event %s has seq %d, expected %d", ErrSequence, task, e.Type, e.Seq, seq)
		}
		r.events[i] = e
		start := len(buf)
		buf = encodeRecord(buf, seq, &e)
		if n := len(buf) - start; n > maxRecord {
			return nil, &SizeError{Task: task, Seq: seq, Type: e.Type, Size: n, Limit: maxRecord}
		}
		r.recs[i] = buf[start:len(buf):len(buf)]
	}
	return r, nil
}

// submit queues r for the committer and waits for its outcome. The moment
// the committer claims r divides what a context that ends means: before
// it, r is abandoned (never written) and ctx's error returned; from it on,
// r is being committed, and its true outcome is waited for and returned
// (a committed append is never reported failed, so that the caller does
// not do again what it recorded).
func (s *Store) submit(ctx context.Context, r *request) (uint64, error) {
	s.mu.RLock()
	switch {
	case s.closed:
		s.mu.RUnlock()
		return 0, ErrClosed
	case s.readOnly:
		s.mu.RUnlock()
		return 0, fmt.Errorf("%w: %s", ErrReadOnly, s.path)
	}
	select {
	case s.reqs <- r:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return 0, ctx.Err()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
			return 0, ctx.Err()
		}
		<-r.done // being committed: report the truth
	}
	return r.version, r.err
}

// run is the committer. It stops, after committing everything queued, when
// quit is closed.
func (s *Store) run() {
	defer close(s.done)
	batch := make([]*request, 0, maxBatch)
	for {
		select {
		case r := <-s.reqs:
			s.commit(s.gather(append(batch[:0], r)))
		case <-s.quit:
			for {
				batch = s.gather(batch[:0])
				if len(batch) == 0 {
					return
				}
				s.commit(batch)
			}
		}
	}
}

// gather adds to batch the requests already queued, without waiting.
func (s *Store) gather(batch []*request) []*request {
	for len(batch) < maxBatch {
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// commit applies a group of requests in one transaction and reports each
// one's outcome.
func (s *Store) commit(batch []*request) {
	claimed := batch[:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(reqQueued, reqClaimed) {
			claimed = append(claimed, r)
		}
	}
	defer func() {
		for _, r := range claimed {
			close(r.done)
		}
	}()
	if broken := s.broken.Load(); broken != nil {
		for _, r := range claimed {
			r.err = *broken
		}
		return
	}
	pending := append([]*request(nil), claimed...)
	for len(pending) > 0 {
		var failed *request
		var began time.Time
		if s.opts.Committed != nil {
			began = time.Now()
		}
		err := updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
			tasks, live := tx.Bucket(bucketTasks), tx.Bucket(bucketLive)
			if tasks == nil || live == nil {
				return fmt.Errorf("%w: %s: missing tasks or live bucket", ErrCorrupt, s.path)
			}
			for _, r := range pending {
				verr, werr := put(tasks, live, r)
				r.err = verr
				if werr != nil {
					failed, r.err = r, fmt.Errorf("%w: %s: task %q: %w", ErrWrite, s.path, r.task, werr)
					return werr
				}
			}
			return nil
		})
		if failed != nil {
			// Retry the others without the request bbolt refused.
			rest := pending[:0]
			for _, r := range pending {
				if r != failed {
					rest = append(rest, r)
				}
			}
			pending = rest
			continue
		}
		if err != nil {
			var pe panicError
			if errors.As(err, &pe) {
				s.broken.CompareAndSwap(nil, &err)
				if pe.wedged {
					s.wedged.Store(true)
				}
				s.log.Error("store damaged: refusing further writes", "err", err)
			}
			for _, r := range pending {
				if r.err == nil {
					r.err = err
				}
			}
			return
		}
		wrote := false
		for _, r := range pending {
			if r.err == nil {
				r.version = r.expected + uint64(len(r.events))
				wrote = true
			}
		}
		if wrote && s.opts.Committed != nil {
			s.opts.Committed(time.Since(began))
		}
		return
	}
}

// put validates one request against the task's head and writes it. A
// validation error (verr) means nothing of the request was written; a write
// error (werr) means the transaction must be rolled back.
func put(tasks, live *bolt.Bucket, r *request) (verr, werr error) {
	id := []byte(r.task)
	b := tasks.Bucket(id)
	var h head
	if b == nil {
		if tasks.Get(id) != nil {
			return &CorruptError{Task: r.task, Reason: "task key is not a bucket"}, nil
		}
		if r.expected != 0 {
			return fmt.Errorf("%w: %q (appending at version %d)", ErrUnknownTask, r.task, r.expected), nil
		}
	} else {
		v := b.Get(headKey)
		if v == nil {
			return &CorruptError{Task: r.task, Reason: "missing head"}, nil
		}
		var err error
		if h, err = decodeHead(r.task, v); err != nil {
			return err, nil
		}
		if h.version != r.expected {
			return &ConflictError{Task: r.task, Expected: r.expected, Actual: h.version}, nil
		}
	}
	t := h.task(r.task)
	for i := range r.events {
		var err error
		if t, err = fsm.Lifecycle.Fold(t, r.events[i]); err != nil {
			return fmt.Errorf("store: append to task %q: %w", r.task, err), nil
		}
	}

	if b == nil {
		var err error
		if b, err = tasks.CreateBucket(id); err != nil {
			return nil, err
		}
	}
	b.FillPercent = 0.9 // keys only ever grow: pack pages
	for i, rec := range r.recs {
		if err := b.Put(seqKey(r.expected+uint64(i)+1), rec); err != nil {
			return nil, err
		}
	}
	if err := b.Put(headKey, encodeHead(headOf(&t))); err != nil {
		return nil, err
	}
	wasLive := h.state != fsm.StateNone && !h.state.Terminal()
	isLive := !t.State.Terminal()
	switch {
	case isLive && !wasLive:
		return nil, live.Put(id, liveMark)
	case !isLive && wasLive:
		return nil, live.Delete(id)
	}
	return nil, nil
}
