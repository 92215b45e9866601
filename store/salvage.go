package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// SalvageReport is what Salvage did.
type SalvageReport struct {
	Src, Dst string
	// Copied are the tasks copied whole (every record verified, the walk
	// legal), in id order.
	Copied []string
	// HeadsRebuilt are the copied tasks whose head was damaged: their log
	// was whole, and the new store's head is folded from it.
	HeadsRebuilt []string
	// Lost are the tasks that could not be copied, in id order, with what
	// could be read of them.
	Lost []LostTask
	// Damage is the damage Salvage could not pin on one task (a page of
	// the task index): tasks that page held are in no list, except the
	// live ones the live index names (in Lost). A desired record that could
	// not be read is here too, as a *DesiredError naming it.
	Damage []error
	// Desired are the desired records copied, by name.
	Desired []string
}

// LostTask is a task Salvage could not copy, and what could be read of
// it: enough, where the head or a prefix of the log is readable, to find
// its processes (the executor's identity, the spawn nonce) and kill or
// adopt them, so that a damaged store does not leak running tasks.
type LostTask struct {
	ID string
	// Live is whether the live index lists it: its executor may be
	// running.
	Live bool
	// State is the task's state as far as it is known: its head's, else
	// its readable prefix's (fsm.StateNone when neither is readable).
	State fsm.State
	// Nonce is the spawn nonce (from the head, else the prefix).
	Nonce string
	// Prefix is the fold of the longest readable, legal prefix of its log
	// (Prefix.Version records): its Executor, TaskPID and TaskStartTime
	// identify the task's processes when it got that far.
	Prefix fsm.Task
	// Err is why it could not be copied: the first problem found.
	Err error
}

// Salvage copies every readable task of the store at src, its whole log
// verified (every record's checksum and decoding, contiguity, a legal walk
// agreeing with its head), into a new store at dst, and reports the tasks
// it could not copy with what it could read of them. The live index of the
// new store is rebuilt from the folds. src is only read, page by page by
// the store's own reader (so a damaged page of bbolt's tree does not stop
// it), with its lock held shared; it is never written. dst must not exist.
//
// The copy is a snapshot for looking at: other processes may append to
// src once Salvage has let go of its lock, and the copy does not have
// what they append. To replace a damaged store, salvage it under a
// Maintenance (Maintenance.Salvage, then Maintenance.Install), which holds
// the lock from the read to the install, so that no acknowledged append
// is left behind in the file it replaces.
func Salvage(ctx context.Context, src, dst string, opts Options) (SalvageReport, error) {
	opts = opts.withDefaults()
	src, ddst, rep, err := salvagePaths(src, dst)
	if err != nil {
		return rep, err
	}
	lk, err := lockStore(ctx, src, false, opts.LockTimeout)
	if err != nil {
		return rep, err
	}
	defer lk.release()
	return rep, salvageLocked(ctx, src, ddst, opts, &rep)
}

// salvagePaths checks Salvage's paths: src a store file, dst another file
// that does not exist yet.
func salvagePaths(src, dst string) (string, string, SalvageReport, error) {
	rep := SalvageReport{Src: src, Dst: dst}
	src, err := preparePath(src, true)
	if err != nil {
		return "", "", rep, fmt.Errorf("store: salvage: %w", err)
	}
	rep.Src = src
	ddst, err := preparePath(dst, false)
	if err != nil {
		return "", "", rep, fmt.Errorf("store: salvage: %w", err)
	}
	rep.Dst = ddst
	if ddst == src {
		return "", "", rep, fmt.Errorf("store: salvage %s: the new store must be another file", src)
	}
	if _, err := os.Lstat(ddst); !errors.Is(err, os.ErrNotExist) {
		return "", "", rep, fmt.Errorf("store: salvage into %s: it exists (%v); salvage writes a new store and overwrites nothing", ddst, err)
	}
	return src, ddst, rep, nil
}

// salvageLocked is Salvage once the caller holds src's lock.
func salvageLocked(ctx context.Context, src, ddst string, opts Options, rep *SalvageReport) error {
	raw, err := openRaw(src)
	if err != nil {
		return fmt.Errorf("%w: salvage %s: %w", ErrCorrupt, src, err)
	}
	defer raw.close()

	found, desired, err := salvageRead(ctx, raw, rep)
	if err != nil {
		return err
	}
	out, err := Open(ddst, opts)
	if err != nil {
		return err
	}
	werr := out.importTasks(found)
	if werr == nil && len(desired) > 0 {
		werr = out.importDesired(desired)
	}
	if cerr := out.Close(); cerr != nil && werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("store: salvage into %s: %w", ddst, werr)
	}
	opts.Logger.Info("store salvaged", "src", src, "dst", ddst, "copied", len(rep.Copied), "lost", len(rep.Lost))
	return nil
}

// salvaged is a task to copy: its verified records and its fold.
type salvaged struct {
	task fsm.Task
	recs []rawRec
}

// salvageRead walks src and sorts its tasks into those to copy (returned)
// and the lost (in rep).
func salvageRead(ctx context.Context, raw *rawFile, rep *SalvageReport) ([]salvaged, []Desired, error) {
	w := newRawWalk(raw)
	var meta, tasks, live, desiredBucket []byte
	w.root(func(e rawElem) bool {
		if e.bucket {
			switch string(e.key) {
			case string(bucketMeta):
				meta = e.value
			case string(bucketTasks):
				tasks = e.value
			case string(bucketLive):
				live = e.value
			case string(bucketDesired):
				desiredBucket = e.value
			}
		}
		return true
	}, func(d rawDamage) {
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: the top-level buckets: %w", ErrCorrupt, d.err))
	})
	if meta != nil {
		var schema []byte
		w.bucket(meta, "the meta bucket", func(e rawElem) bool {
			if string(e.key) == string(keySchema) {
				schema = e.value
			}
			return true
		}, func(rawDamage) {})
		if len(schema) == 4 {
			if v := binary.BigEndian.Uint32(schema); v != schemaNoDesired && v != schemaDesired {
				return nil, nil, &SchemaError{Path: raw.path, Found: v, Known: schemaVersion}
			}
		}
	}
	if tasks == nil {
		return nil, nil, fmt.Errorf("%w: salvage %s: the task index could not be found", ErrCorrupt, raw.path)
	}
	liveIDs := map[string]bool{}
	if live != nil {
		w.bucket(live, "the live index", func(e rawElem) bool {
			liveIDs[string(e.key)] = true
			return true
		}, func(d rawDamage) {
			rep.Damage = append(rep.Damage, fmt.Errorf("%w: the live index: %w", ErrCorrupt, d.err))
		})
	} else {
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: the live index could not be found", ErrCorrupt))
	}

	var out []salvaged
	seen := map[string]bool{}
	var err error
	w.bucket(tasks, "the task index", func(e rawElem) bool {
		if err = ctx.Err(); err != nil {
			return false
		}
		id := string(e.key)
		seen[id] = true
		if !e.bucket {
			rep.Lost = append(rep.Lost, LostTask{ID: id, Live: liveIDs[id], Err: &CorruptError{Task: id, Reason: "task key is not a bucket"}})
			return true
		}
		tr := readTaskRaw(w, id, e.value)
		var first error
		t, sound, _ := tr.fold(func(_ uint64, err error) {
			if first == nil {
				first = err
			}
		})
		if sound && tr.headErr == nil {
			if why := tr.head.disagrees(&t); why != "" || tr.head.version != t.Version {
				sound, first = false, &CorruptError{Task: id, Reason: cmp.Or(why, fmt.Sprintf("log ends at seq %d, head says %d", t.Version, tr.head.version))}
			}
		}
		if first == nil && len(tr.damage) > 0 {
			first = tr.damage[0].err
		}
		if sound {
			out = append(out, salvaged{task: t, recs: tr.recs})
			rep.Copied = append(rep.Copied, id)
			if tr.headErr != nil {
				rep.HeadsRebuilt = append(rep.HeadsRebuilt, id)
			}
			return true
		}
		rep.Lost = append(rep.Lost, lostTask(tr, liveIDs[id], first))
		return true
	}, func(d rawDamage) {
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: the task index: %w", ErrCorrupt, d.err))
		for id := range liveIDs {
			if (d.from == nil || id >= string(d.from)) && (d.to == nil || id < string(d.to)) && !seen[id] {
				seen[id] = true
				rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, Err: &CorruptError{Task: id,
					Reason: fmt.Sprintf("live, but its log is on page %d of the task index, which is damaged", d.page)}})
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for id := range liveIDs {
		if !seen[id] {
			rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, Err: &CorruptError{Task: id, Reason: "in the live index but not in the store"}})
		}
	}
	slices.SortFunc(rep.Lost, func(a, b LostTask) int { return strings.Compare(a.ID, b.ID) })
	var desired []Desired
	if desiredBucket != nil {
		w.bucket(desiredBucket, "the desired bucket", func(e rawElem) bool {
			name := string(e.key)
			d, why := decodeDesired(e.value)
			switch {
			case e.bucket:
				rep.Damage = append(rep.Damage, &DesiredError{Name: name, Reason: "key is a bucket"})
			case why != "":
				rep.Damage = append(rep.Damage, &DesiredError{Name: name, Reason: why})
			case d.Name != name:
				rep.Damage = append(rep.Damage, &DesiredError{Name: name, Reason: fmt.Sprintf("record names %q", d.Name)})
			default:
				desired = append(desired, d)
				rep.Desired = append(rep.Desired, name)
			}
			return true
		}, func(d rawDamage) {
			rep.Damage = append(rep.Damage, fmt.Errorf("%w: the desired bucket: %w", ErrCorrupt, d.err))
		})
	}
	return out, desired, nil
}

// importDesired writes salvaged desired records into this (new) store, as
// they were (revisions kept).
func (s *Store) importDesired(recs []Desired) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketDesired)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaDesired)); err != nil {
			return err
		}
		for i := range recs {
			if err := b.Put([]byte(recs[i].Name), encodeDesired(&recs[i])); err != nil {
				return fmt.Errorf("desired task %q: %w", recs[i].Name, err)
			}
		}
		return nil
	})
}

// lostTask is what can be said of a task whose log could not be copied.
func lostTask(tr *taskRead, live bool, err error) LostTask {
	lt := LostTask{ID: tr.id, Live: live, Err: err, Prefix: tr.prefix()}
	lt.State, lt.Nonce = lt.Prefix.State, lt.Prefix.Nonce
	if tr.headErr == nil {
		lt.State = tr.head.state
		if tr.head.nonce != "" {
			lt.Nonce = tr.head.nonce
		}
	}
	if err == nil {
		lt.Err = tr.headErr
	}
	return lt
}

// prefix folds the records from seq 1 for as long as they are contiguous,
// readable and legal.
func (tr *taskRead) prefix() fsm.Task {
	t := fsm.Task{ID: tr.id}
	var e fsm.Event
	for i, rec := range tr.recs {
		if rec.seq != uint64(i+1) || decodeAt(tr.id, rec.seq, rec.v, &e) != nil || fsm.Lifecycle.FoldInPlace(&t, &e) != nil {
			break
		}
		if len(tr.damage) > 0 && tr.damage[0].seq <= rec.seq {
			break
		}
	}
	return t
}

// importTasks writes verified tasks into this (new) store, many to a
// transaction: their records as read, a head folded from them, and the
// live index from their states.
func (s *Store) importTasks(tasks []salvaged) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	const perTx = 256
	for start := 0; start < len(tasks); start += perTx {
		batch := tasks[start:min(start+perTx, len(tasks))]
		err := updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
			all, live := tx.Bucket(bucketTasks), tx.Bucket(bucketLive)
			for _, t := range batch {
				id := []byte(t.task.ID)
				b, err := all.CreateBucket(id)
				if err != nil {
					return fmt.Errorf("task %q: %w", t.task.ID, err)
				}
				b.FillPercent = 0.9
				for _, r := range t.recs {
					if err := b.Put(seqKey(r.seq), r.v); err != nil {
						return fmt.Errorf("task %q: %w", t.task.ID, err)
					}
				}
				if err := b.Put(headKey, encodeHead(headOf(&t.task))); err != nil {
					return fmt.Errorf("task %q: %w", t.task.ID, err)
				}
				if !t.task.State.Terminal() {
					if err := live.Put(id, liveMark); err != nil {
						return fmt.Errorf("task %q: %w", t.task.ID, err)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
