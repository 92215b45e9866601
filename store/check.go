package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Report is the result of Check.
type Report struct {
	Path     string
	Tasks    int // task buckets seen
	Live     int // entries in the live index
	Events   int // records decoded
	Problems []Problem
}

// Problem is one thing Check found wrong. Task and Seq say where (Task is
// empty for problems of the file as a whole; Seq is 0 for a task's head or
// index entry).
type Problem struct {
	Task string
	Seq  uint64
	Err  error
}

func (p Problem) String() string {
	switch {
	case p.Task == "":
		return p.Err.Error()
	default:
		return fmt.Sprintf("task %q seq %d: %v", p.Task, p.Seq, p.Err)
	}
}

// OK reports whether Check found no problem.
func (r Report) OK() bool { return len(r.Problems) == 0 }

func (r Report) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d tasks (%d live), %d events, %d problems", r.Path, r.Tasks, r.Live, r.Events, len(r.Problems))
	for _, p := range r.Problems {
		sb.WriteString("\n  ")
		sb.WriteString(p.String())
	}
	return sb.String()
}

// Check verifies the whole store offline-style, in one read transaction:
// every record's checksum, version and key; the contiguity of each task's
// sequence numbers; that each log is a legal walk through fsm.Lifecycle
// (invariant 8) ending in the state its head records; that the live index
// is exactly the set of non-terminal tasks; and bbolt's own page
// consistency (tx.Check). Every problem is listed in the Report, with its
// task and seq, ordered by task then seq (problems of the whole file
// first). The error is for a check that could not run (store closed,
// context cancelled, file too damaged to walk).
func (s *Store) Check(ctx context.Context) (Report, error) {
	r := Report{Path: s.path}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return r, ErrClosed
	}
	// A store open for writing is checked under the writer lock, so that
	// appends running meanwhile cannot make bbolt's page check report
	// pages they free as "reachable freed". A read-only store has no
	// writer: another process's would hold the file's lock.
	err := readSafe(s.db, s.path, !s.readOnly, func(tx *bolt.Tx) error {
		return checkTx(ctx, tx, s.path, &r)
	})
	slices.SortStableFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Seq, b.Seq))
	})
	return r, err
}

func checkTx(ctx context.Context, tx *bolt.Tx, path string, r *Report) error {
	add := func(task string, seq uint64, err error) {
		r.Problems = append(r.Problems, Problem{Task: task, Seq: seq, Err: err})
	}
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		add("", 0, fmt.Errorf("%w: no meta bucket", ErrCorrupt))
	} else if v := meta.Get(keySchema); len(v) != 4 || binary.BigEndian.Uint32(v) != schemaVersion {
		add("", 0, fmt.Errorf("%w: schema version %x, want %d", ErrSchema, v, schemaVersion))
	}
	tasks, live := tx.Bucket(bucketTasks), tx.Bucket(bucketLive)
	if tasks == nil || live == nil {
		add("", 0, fmt.Errorf("%w: missing tasks or live bucket", ErrCorrupt))
		return nil
	}

	// Every task: decode, walk, compare with its head and the index.
	c := tasks.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		task := string(k)
		if v != nil {
			add(task, 0, &CorruptError{Task: task, Reason: "task key is not a bucket"})
			continue
		}
		r.Tasks++
		state, ok := checkTask(tasks.Bucket(k), task, r)
		if !ok {
			continue
		}
		inLive := live.Get(k) != nil
		switch {
		case state.Terminal() && inLive:
			add(task, 0, &CorruptError{Task: task, Reason: fmt.Sprintf("in the live index but %s", state)})
		case !state.Terminal() && !inLive:
			add(task, 0, &CorruptError{Task: task, Reason: fmt.Sprintf("%s but missing from the live index", state)})
		}
	}
	// Every live entry: a task that exists.
	lc := live.Cursor()
	for k, _ := lc.First(); k != nil; k, _ = lc.Next() {
		r.Live++
		if tasks.Bucket(k) == nil {
			add(string(k), 0, &CorruptError{Task: string(k), Reason: "in the live index but not in the store"})
		}
	}

	// bbolt's own consistency. Its checker runs in a goroutine where a
	// memory fault could not be recovered, so skip it on a file shorter
	// than its header claims (already refused by Open, but it may have been
	// cut since).
	if st, err := os.Stat(path); err != nil || st.Size() < tx.Size() {
		add("", 0, fmt.Errorf("%w: %s is shorter than its header says", ErrCorrupt, path))
		return nil
	}
	for err := range tx.Check() {
		add("", 0, fmt.Errorf("%w: bbolt: %w", ErrCorrupt, err))
	}
	return nil
}

// checkTask verifies one task's bucket and returns the state its log folds
// to; ok is false when it could not be determined.
func checkTask(b *bolt.Bucket, task string, r *Report) (state fsm.State, ok bool) {
	add := func(seq uint64, err error) {
		r.Problems = append(r.Problems, Problem{Task: task, Seq: seq, Err: err})
	}
	var h head
	hv := b.Get(headKey)
	headOK := hv != nil
	if !headOK {
		add(0, &CorruptError{Task: task, Reason: "missing head"})
	} else if hh, err := decodeHead(task, hv); err != nil {
		add(0, err)
		headOK = false
	} else {
		h = hh
	}

	t := fsm.Task{ID: task}
	walkOK := true // the walk so far is legal and contiguous
	want := uint64(1)
	var e fsm.Event
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			if string(k) != string(headKey) {
				add(want, &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("stray key %x", k)})
			}
			continue
		}
		seq := binary.BigEndian.Uint64(k)
		if seq != want {
			add(want, &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("missing record (next key is seq %d)", seq)})
			walkOK = false
		}
		want = seq + 1
		if err := decodeAt(task, seq, v, &e); err != nil {
			add(seq, err)
			walkOK = false
			continue
		}
		r.Events++
		if !walkOK {
			continue
		}
		var err error
		if t, err = fsm.Lifecycle.Fold(t, e); err != nil {
			add(seq, &CorruptError{Task: task, Seq: seq, Reason: "not a legal walk", Err: err})
			walkOK = false
		}
	}
	if !headOK {
		return fsm.StateNone, false
	}
	if want-1 != h.version {
		add(want, &CorruptError{Task: task, Seq: want, Reason: fmt.Sprintf("log ends at seq %d, head says %d", want-1, h.version)})
	}
	if !walkOK {
		// The log cannot be folded; trust the head for the index check.
		return h.state, true
	}
	if why := h.disagrees(&t); why != "" {
		add(0, &CorruptError{Task: task, Reason: why})
	}
	return t.State, true
}
