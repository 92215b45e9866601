package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
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
	// Scanned is set when the walk of the store's structure could not
	// reach every task (its root, or its task index, is damaged or gone),
	// so that the file's pages were scanned for the rest. Found are the
	// tasks copied from what the scan found (among Copied).
	Scanned bool
	Found   []string
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
	_, err = salvageLocked(ctx, src, ddst, opts, &rep, nil)
	return rep, err
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

// salvageLocked is Salvage once the caller holds src's lock. It returns
// the readable legal prefix of each lost task's log, for RecordLost.
func salvageLocked(ctx context.Context, src, ddst string, opts Options, rep *SalvageReport, claims []Claim) (map[string][]rawRec, error) {
	raw, err := openRaw(src)
	if err != nil {
		var re *rawError
		if !errors.As(err, &re) {
			return nil, fmt.Errorf("%w: salvage %s: %w", ErrCorrupt, src, err)
		}
		// Neither meta page can be read: the pages are scanned.
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: %s: %w", ErrCorrupt, src, err))
		if raw, err = guessRaw(src); err != nil {
			return nil, fmt.Errorf("%w: salvage %s: %w", ErrCorrupt, src, err)
		}
	}
	defer raw.close()

	res, err := salvageRead(ctx, raw, rep, claims)
	if err != nil {
		return nil, err
	}
	out, err := Open(ddst, opts)
	if err != nil {
		return nil, err
	}
	werr := out.importTasks(res.copy)
	if werr == nil && len(res.desired) > 0 {
		werr = out.importDesired(res.desired)
	}
	if cerr := out.Close(); cerr != nil && werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("store: salvage into %s: %w", ddst, werr)
	}
	opts.Logger.Info("store salvaged", "src", src, "dst", ddst, "copied", len(rep.Copied), "found", len(rep.Found), "lost", len(rep.Lost), "scanned", rep.Scanned)
	return res.prefixes, nil
}

// salvaged is a task to copy: its verified records and its fold.
type salvaged struct {
	task fsm.Task
	recs []rawRec
}

// salvageResult is what salvageRead sorted out to write.
type salvageResult struct {
	copy     []salvaged
	desired  []Desired
	prefixes map[string][]rawRec // each lost task's legal prefix, by id
}

// salvageRead walks src and sorts its tasks into those to copy (returned)
// and the lost (in rep). Where the walk cannot reach every task (the task
// index, or the root above it, is damaged or gone), it scans the file's
// pages for the rest (pagescan.go), taking only what claims prove.
func salvageRead(ctx context.Context, raw *rawFile, rep *SalvageReport, claims []Claim) (*salvageResult, error) {
	res := &salvageResult{prefixes: map[string][]rawRec{}}
	w := newRawWalk(raw)
	var meta, tasks, live, desiredBucket []byte
	incomplete := false
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
		incomplete = true
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
				return nil, &SchemaError{Path: raw.path, Found: v, Known: schemaVersion}
			}
		}
	}
	claimed := map[string]Claim{}
	for _, c := range claims {
		if c.ID != "" && c.Nonce != "" {
			claimed[c.ID] = c
		}
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

	seen := map[string]bool{}
	// hidden are the live tasks the live index names on a damaged page of
	// the task index: lost, unless the scan finds them.
	hidden := map[string]string{}
	if tasks == nil {
		incomplete = true
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: the task index could not be found", ErrCorrupt))
	} else {
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
			res.take(rep, readTaskRaw(w, id, e.value), liveIDs[id], false)
			return true
		}, func(d rawDamage) {
			incomplete = true
			rep.Damage = append(rep.Damage, fmt.Errorf("%w: the task index: %w", ErrCorrupt, d.err))
			for id := range liveIDs {
				if (d.from == nil || id >= string(d.from)) && (d.to == nil || id < string(d.to)) && !seen[id] {
					hidden[id] = fmt.Sprintf("live, but its log is on page %d of the task index, which is damaged", d.page)
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if incomplete {
		if err := res.scan(ctx, raw, w.reachable, rep, claimed, liveIDs, seen, desiredBucket == nil); err != nil {
			return nil, err
		}
	}
	for id, why := range hidden {
		if !seen[id] {
			seen[id] = true
			rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, Err: &CorruptError{Task: id, Reason: why}})
		}
	}
	for id := range liveIDs {
		if !seen[id] {
			seen[id] = true
			rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, Err: &CorruptError{Task: id, Reason: "in the live index but not in the store"}})
		}
	}
	for id, c := range claimed {
		if c.Live && !seen[id] {
			seen[id] = true
			rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, Nonce: c.Nonce, Err: &CorruptError{Task: id,
				Reason: "its executor is alive, and none of its records could be found in the damaged file"}})
		}
	}
	// A lost task whose log says nothing of its executor is found by the
	// nonce its executor's directory holds.
	for i := range rep.Lost {
		l := &rep.Lost[i]
		if c, ok := claimed[l.ID]; ok && l.Nonce == "" && l.Prefix.Executor == nil {
			l.Nonce, l.Live = c.Nonce, l.Live || c.Live
		}
	}
	slices.SortFunc(rep.Lost, func(a, b LostTask) int { return strings.Compare(a.ID, b.ID) })
	slices.Sort(rep.Copied)
	slices.Sort(rep.Found)
	slices.Sort(rep.HeadsRebuilt)
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
				res.desired = append(res.desired, d)
				rep.Desired = append(rep.Desired, name)
			}
			return true
		}, func(d rawDamage) {
			rep.Damage = append(rep.Damage, fmt.Errorf("%w: the desired bucket: %w", ErrCorrupt, d.err))
		})
	}
	return res, nil
}

// take sorts one task read from the store: copied whole when its log is
// sound, lost otherwise (with its readable legal prefix kept for
// RecordLost). found marks a task the scan of pages found.
func (res *salvageResult) take(rep *SalvageReport, tr *taskRead, live, found bool) {
	id := tr.id
	var first error
	t, sound, _ := tr.fold(func(_ uint64, err error) {
		if first == nil {
			first = err
		}
	})
	if sound && tr.headErr == nil {
		if last := t.Version; last != tr.head.version {
			sound, first = false, &CorruptError{Task: id, Seq: min(last, tr.head.version) + 1,
				Reason: fmt.Sprintf("log ends at seq %d, head says %d", last, tr.head.version)}
		} else if why := tr.head.disagrees(&t); why != "" {
			sound, first = false, &CorruptError{Task: id, Reason: why}
		}
	}
	if first == nil && len(tr.damage) > 0 {
		first = tr.damage[0].err
	}
	if sound {
		res.copy = append(res.copy, salvaged{task: t, recs: tr.recs})
		rep.Copied = append(rep.Copied, id)
		if found {
			rep.Found = append(rep.Found, id)
		}
		if tr.headErr != nil {
			rep.HeadsRebuilt = append(rep.HeadsRebuilt, id)
		}
		return
	}
	lt := lostTask(tr, live, first)
	res.prefixes[id] = tr.recs[:lt.Prefix.Version]
	rep.Lost = append(rep.Lost, lt)
}

// scan is the salvage's scan of the pages the walk did not reach: the
// index entries it finds are taken where a claim proves them, the logs no
// index names are given to the live claims whose nonce they carry, and
// (when the desired bucket was not found) the desired records found are
// kept.
func (res *salvageResult) scan(ctx context.Context, raw *rawFile, reached map[uint64]bool, rep *SalvageReport,
	claimed map[string]Claim, liveIDs, seen map[string]bool, wantDesired bool) error {
	rep.Scanned = true
	ps := scanPages(raw, reached)
	var unproven []string
	// seeds are the records of every copy of a live claim's bucket the
	// index's entries name: given to its log with the pages its nonce
	// finds.
	seeds := map[string][][]rawRec{}
	for _, id := range slices.Sorted(maps.Keys(ps.index)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if seen[id] {
			continue
		}
		// Of the copies of its bucket, the longest legal log.
		var best *taskRead
		var bestT fsm.Task
		var copies [][]rawRec
		for _, v := range ps.index[id] {
			tr := readTaskRaw(newRawWalk(raw), id, v)
			copies = append(copies, checkedRecs(tr.recs))
			t := tr.prefix()
			if best == nil || t.Version > bestT.Version {
				best, bestT = tr, t
			}
		}
		c, ok := claimed[id]
		if !ok || bestT.Nonce == "" || bestT.Nonce != c.Nonce {
			unproven = append(unproven, id)
			continue
		}
		if c.Live {
			seeds[id] = copies // taken below, with the pages its nonce finds
			continue
		}
		seen[id] = true
		res.take(rep, best, liveIDs[id], true)
	}
	for _, id := range slices.Sorted(maps.Keys(claimed)) {
		c := claimed[id]
		if !c.Live || seen[id] {
			continue
		}
		recs, gap := ps.logByNonce(id, c.Nonce, seeds[id]...)
		t, prefix := foldPrefix(id, recs)
		if t.Nonce != c.Nonce {
			continue // what was found does not reach its spawn
		}
		seen[id] = true
		if !gap && prefix == len(recs) && !t.State.Terminal() {
			res.copy = append(res.copy, salvaged{task: t, recs: recs})
			rep.Copied = append(rep.Copied, id)
			rep.Found = append(rep.Found, id)
			rep.HeadsRebuilt = append(rep.HeadsRebuilt, id)
			continue
		}
		res.prefixes[id] = recs[:prefix]
		rep.Lost = append(rep.Lost, LostTask{ID: id, Live: true, State: t.State, Nonce: c.Nonce, Prefix: t,
			Err: &CorruptError{Task: id, Reason: fmt.Sprintf("only seq 1 to %d of its log could be found by a scan of the damaged file's pages", prefix)}})
	}
	if len(unproven) > 0 {
		rep.Damage = append(rep.Damage, fmt.Errorf("%w: the scan of the file's pages found logs it could not prove whose (no executor directory holds their spawn nonce), not copied: %s",
			ErrCorrupt, strings.Join(unproven, ", ")))
	}
	if wantDesired {
		for _, name := range slices.Sorted(maps.Keys(ps.desired)) {
			res.desired = append(res.desired, ps.desired[name])
			rep.Desired = append(rep.Desired, name)
		}
	}
	return nil
}

// foldPrefix folds recs from seq 1 for as long as they are contiguous,
// readable and legal, and says how many it folded.
func foldPrefix(id string, recs []rawRec) (fsm.Task, int) {
	t := fsm.Task{ID: id}
	var e fsm.Event
	for i, r := range recs {
		if r.seq != uint64(i+1) || decodeAt(id, r.seq, r.v, &e) != nil || fsm.Lifecycle.FoldInPlace(&t, &e) != nil {
			return t, i
		}
	}
	return t, len(recs)
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
