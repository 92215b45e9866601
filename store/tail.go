package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// TaskVersion is a task of the store and the sequence number of its last
// event.
type TaskVersion struct {
	Task    string
	Version uint64
}

// Versions returns every task of the store with its version (the sequence
// number of its last event), in id order, reading only each task's head:
// a follower of the log (the fleet's mirror) learns which tasks grew
// without folding or decoding a single event.
func (s *Store) Versions(ctx context.Context) ([]TaskVersion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []TaskVersion
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0]
		tasks := tx.Bucket(bucketTasks)
		if tasks == nil {
			return fmt.Errorf("%w: %s: no tasks bucket", ErrCorrupt, s.path)
		}
		c := tasks.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v != nil {
				return &CorruptError{Task: string(k), Reason: "task key is not a bucket"}
			}
			id := string(k)
			hv := tasks.Bucket(k).Get(headKey)
			if hv == nil {
				return &CorruptError{Task: id, Reason: "missing head"}
			}
			h, err := decodeHead(id, hv)
			if err != nil {
				return err
			}
			out = append(out, TaskVersion{Task: id, Version: h.version})
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LoadFrom returns at most limit of task's events from sequence number
// from on (limit <= 0: all of them), in order, each record checked as Load
// checks it. It seeks to from rather than reading the log from its start,
// so a follower that has the first n events pays for the rest only. from
// past the end gives no events; an unknown task ErrUnknownTask. A read
// that reaches the head's version checks the log's end as Load does: a
// record missing before it, or one past it, is a *CorruptError naming the
// first sequence number the log and its head disagree on; a read that
// limit stops before then is whole.
func (s *Store) LoadFrom(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if from == 0 {
		from = 1
	}
	var out []fsm.Event
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0]
		return taskSafe(s.path, task, func() error {
			b, h, err := taskBucket(tx, task)
			if err != nil {
				return err
			}
			c := b.Cursor()
			want := from
			k, v := c.Seek(seqKey(from))
			for ; k != nil && want <= h.version; k, v = c.Next() {
				if limit > 0 && len(out) >= limit {
					return nil
				}
				if len(k) != 8 {
					if bytes.Equal(k, headKey) {
						break
					}
					return &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("stray key %x", k)}
				}
				if got := binary.BigEndian.Uint64(k); got != want {
					return &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("missing record (next key is seq %d)", got)}
				}
				var e fsm.Event
				if err := decodeAt(task, want, v, &e); err != nil {
					return err
				}
				out = append(out, e)
				want++
			}
			switch {
			case want <= h.version && (limit <= 0 || len(out) < limit):
				return &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("log ends at seq %d, head says %d", want-1, h.version)}
			case want > h.version && len(k) == 8:
				// A record past the head's version: Load says so too.
				last := binary.BigEndian.Uint64(k)
				for k, _ = c.Next(); len(k) == 8; k, _ = c.Next() {
					last = binary.BigEndian.Uint64(k)
				}
				return &CorruptError{Task: task, Seq: h.version + 1, Reason: fmt.Sprintf("log ends at seq %d, head says %d", last, h.version)}
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
