package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
	Desired  int // desired records decoded
	Problems []Problem
}

// Problem is one thing Check found wrong. Task and Seq say where (Task is
// empty for problems of the file as a whole, such as a damaged page of an
// index; Seq is 0 for a task's head, its index entry, or the task as a
// whole). Page is the damaged page, when the problem is one.
type Problem struct {
	Task string
	Seq  uint64
	Page uint64
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
	fmt.Fprintf(&sb, "%s: %d tasks (%d live), %d events, %d desired, %d problems", r.Path, r.Tasks, r.Live, r.Events, r.Desired, len(r.Problems))
	for _, p := range r.Problems {
		sb.WriteString("\n  ")
		sb.WriteString(p.String())
	}
	return sb.String()
}

// Check verifies the whole store: every record's checksum, version and
// key; the contiguity of each task's sequence numbers; that each log is a
// legal walk through fsm.Lifecycle (invariant 8) ending where its head
// says; that the live index is exactly the set of non-terminal tasks; and
// the file's pages: each page reached is what its parent says it is, keys
// are in order, no page is both in use and free, none is neither (and,
// when all that holds, bbolt's own page check).
//
// The file is read page by page by a reader of its own (raw.go), not
// through bbolt, so a damaged page never stops it: it reports the page and
// what the tree says it held (the tasks of a page of the task index, the
// records of a page of a task's log) and goes on. Every problem is listed
// in the Report, with its task and seq where it has them, ordered by task
// then seq (problems of the whole file first). The error is for a check
// that could not run (store closed, context cancelled, file unreadable).
//
// A store open for writing is checked under bbolt's writer lock, so no
// commit runs meanwhile. A store whose damage made bbolt fail is still
// checked, from the file.
func (s *Store) Check(ctx context.Context) (Report, error) {
	r := Report{Path: s.path}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return r, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if s.wedged.Load() {
		// bbolt cannot be used at all; nothing writes: read the file.
		err := checkFile(ctx, s.path, &r, nil)
		sortProblems(&r)
		return r, err
	}
	// A writable store is checked in a write transaction (rolled back),
	// which holds off commits; a broken one has no commits to hold off.
	exclusive := !s.readOnly && s.broken.Load() == nil
	err := s.noteDamage(readSafe(s.db, s.path, exclusive, func(tx *bolt.Tx) error {
		return checkFile(ctx, s.path, &r, tx)
	}))
	sortProblems(&r)
	return r, err
}

// CheckFile checks the store file at path as Check does, with the store's
// lock held shared (waiting up to opts.LockTimeout), without opening it
// through bbolt first: it reports on a file Open refuses (a damaged
// freelist, a damaged page bbolt panics on, a file cut short).
func CheckFile(ctx context.Context, path string, opts Options) (Report, error) {
	opts = opts.withDefaults()
	r := Report{Path: path}
	path, err := preparePath(path, true)
	if err != nil {
		return r, err
	}
	r.Path = path
	lk, err := lockStore(ctx, path, false, opts.LockTimeout)
	if err != nil {
		return r, err
	}
	defer lk.release()
	err = checkFile(ctx, path, &r, nil)
	if err == nil && r.OK() {
		// The file is sound page by page: bbolt may read it, for its own
		// check.
		ro := opts
		ro.ReadOnly = true
		db, _, oerr := openBolt(path, ro, opts.LockTimeout)
		if oerr != nil {
			r.Problems = append(r.Problems, Problem{Err: oerr})
		} else {
			err = readSafe(db, path, false, func(tx *bolt.Tx) error {
				for cerr := range tx.Check() {
					r.Problems = append(r.Problems, Problem{Err: fmt.Errorf("%w: bbolt: %w", ErrCorrupt, cerr)})
				}
				return nil
			})
			if cerr := db.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}
	sortProblems(&r)
	return r, err
}

func sortProblems(r *Report) {
	slices.SortStableFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Seq, b.Seq))
	})
}

// checkFile checks the file at path page by page. tx, when given, is a
// transaction that keeps the file still; bbolt's own page check runs in it
// when the file's pages are sound.
func checkFile(ctx context.Context, path string, r *Report, tx *bolt.Tx) error {
	raw, err := openRaw(path)
	if err != nil {
		var re *rawError
		if errors.As(err, &re) {
			r.Problems = append(r.Problems, Problem{Err: fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)})
			return nil
		}
		return fmt.Errorf("store: check %s: %w", path, err)
	}
	defer raw.close()
	c := &checker{ctx: ctx, path: path, r: r, raw: raw, w: newRawWalk(raw)}
	if err := c.run(); err != nil {
		return err
	}
	if tx == nil || c.structural > 0 {
		if c.structural > 0 && tx != nil {
			// bbolt's checker runs in a goroutine of its own, where a fault
			// on a damaged page could not be recovered.
			r.Problems = append(r.Problems, Problem{Err: fmt.Errorf("%w: bbolt's own page check skipped: the pages above are damaged", ErrCorrupt)})
		}
		return nil
	}
	for err := range tx.Check() {
		r.Problems = append(r.Problems, Problem{Err: fmt.Errorf("%w: bbolt: %w", ErrCorrupt, err)})
	}
	return nil
}

// checker is one run of checkFile.
type checker struct {
	ctx        context.Context
	path       string
	r          *Report
	raw        *rawFile
	w          *rawWalk
	structural int // page-level problems found (bbolt must not read them)
}

func (c *checker) add(p Problem) { c.r.Problems = append(c.r.Problems, p) }

// corrupt adds a problem of the file as a whole.
func (c *checker) corrupt(page uint64, format string, args ...any) {
	c.add(Problem{Page: page, Err: fmt.Errorf("%w: %s: "+format, append([]any{ErrCorrupt, c.path}, args...)...)})
}

// damaged reports a part of a bucket the walk could not read, naming the
// keys its parent says it held.
func (c *checker) damaged(what string, d rawDamage, keys func([]byte) string) {
	c.structural++
	held := ""
	switch {
	case d.from != nil && d.to != nil:
		held = fmt.Sprintf(" (%s from %s up to %s)", what, keys(d.from), keys(d.to))
	case d.from != nil:
		held = fmt.Sprintf(" (%s from %s on)", what, keys(d.from))
	case d.to != nil:
		held = fmt.Sprintf(" (%s before %s)", what, keys(d.to))
	default:
		held = fmt.Sprintf(" (all %s)", what)
	}
	if d.page == 0 {
		c.corrupt(0, "could not read%s: %v", held, d.err)
		return
	}
	c.corrupt(d.page, "could not read page %d%s: %v", d.page, held, d.err)
}

func quoted(k []byte) string { return fmt.Sprintf("%q", k) }

func (c *checker) run() error {
	raw := c.raw
	if want := int64(raw.meta.hwm) * int64(raw.pageSize); raw.size < want {
		c.structural++
		c.corrupt(0, "the file is cut short: %d bytes, its header says %d", raw.size, want)
	}
	var meta, tasks, live, desired []byte
	c.w.root(func(e rawElem) bool {
		switch {
		case !e.bucket:
			c.corrupt(0, "stray key %q at the top level", e.key)
		case string(e.key) == string(bucketMeta):
			meta = e.value
		case string(e.key) == string(bucketTasks):
			tasks = e.value
		case string(e.key) == string(bucketLive):
			live = e.value
		case string(e.key) == string(bucketDesired):
			desired = e.value
		default:
			c.corrupt(0, "foreign bucket %q at the top level", e.key)
		}
		return true
	}, func(d rawDamage) { c.damaged("top-level buckets", d, quoted) })

	if meta == nil {
		c.corrupt(0, "no meta bucket")
	} else {
		var schema []byte
		c.w.bucket(meta, "the meta bucket", func(e rawElem) bool {
			if string(e.key) == string(keySchema) {
				schema = e.value
			}
			return true
		}, func(d rawDamage) { c.damaged("meta keys", d, quoted) })
		switch {
		case len(schema) != 4 || binary.BigEndian.Uint32(schema) > schemaVersion || binary.BigEndian.Uint32(schema) == 0:
			c.add(Problem{Err: fmt.Errorf("%w: %s: schema version %x, want %d or %d", ErrSchema, c.path, schema, schemaNoDesired, schemaDesired)})
		case binary.BigEndian.Uint32(schema) == schemaDesired && desired == nil:
			c.corrupt(0, "schema version %d but no desired bucket", schemaDesired)
		case binary.BigEndian.Uint32(schema) == schemaNoDesired && desired != nil:
			c.corrupt(0, "a desired bucket in a store of schema version %d", schemaNoDesired)
		}
	}
	if desired != nil {
		c.desired(desired)
	}

	liveIDs := map[string]bool{}
	if live == nil {
		c.corrupt(0, "no live index")
	} else {
		c.w.bucket(live, "the live index", func(e rawElem) bool {
			liveIDs[string(e.key)] = true
			c.r.Live++
			return true
		}, func(d rawDamage) { c.damaged("live tasks", d, quoted) })
	}

	seen := map[string]bool{}
	if tasks == nil {
		c.corrupt(0, "no task index")
	} else {
		var err error
		c.w.bucket(tasks, "the task index", func(e rawElem) bool {
			if err = c.ctx.Err(); err != nil {
				return false
			}
			id := string(e.key)
			seen[id] = true
			if !e.bucket {
				c.add(Problem{Task: id, Err: &CorruptError{Task: id, Reason: "task key is not a bucket"}})
				return true
			}
			c.r.Tasks++
			c.task(id, e.value, liveIDs[id])
			return true
		}, func(d rawDamage) {
			c.damaged("tasks", d, quoted)
			// The live tasks that page held are known by id: name them.
			for id := range liveIDs {
				if (d.from == nil || id >= string(d.from)) && (d.to == nil || id < string(d.to)) {
					seen[id] = true
					c.add(Problem{Task: id, Page: d.page, Err: &CorruptError{Task: id,
						Reason: fmt.Sprintf("live, but its log is on page %d of the task index, which is damaged", d.page)}})
				}
			}
		})
		if err != nil {
			return err
		}
	}
	for id := range liveIDs {
		if !seen[id] {
			c.add(Problem{Task: id, Err: &CorruptError{Task: id, Reason: "in the live index but not in the store"}})
		}
	}
	c.pages()
	return nil
}

// desired checks the desired records: each decodes (checksum, version,
// canonical form) and names its key.
func (c *checker) desired(v []byte) {
	c.w.bucket(v, "the desired bucket", func(e rawElem) bool {
		name := string(e.key)
		if e.bucket {
			c.add(Problem{Err: &DesiredError{Name: name, Reason: "key is a bucket"}})
			return true
		}
		d, why := decodeDesired(e.value)
		switch {
		case why != "":
			c.add(Problem{Err: &DesiredError{Name: name, Reason: why}})
		case d.Name != name:
			c.add(Problem{Err: &DesiredError{Name: name, Reason: fmt.Sprintf("record names %q", d.Name)}})
		default:
			c.r.Desired++
		}
		return true
	}, func(d rawDamage) { c.damaged("desired tasks", d, quoted) })
}

// task checks one task's bucket (its value in the task index).
func (c *checker) task(id string, v []byte, inLive bool) {
	tr := readTaskRaw(c.w, id, v)
	for _, d := range tr.damage {
		c.structural++
		c.add(Problem{Task: id, Seq: d.seq, Page: d.page, Err: d.err})
	}
	state, known, events := tr.verify(func(seq uint64, err error) {
		c.add(Problem{Task: id, Seq: seq, Err: err})
	})
	c.r.Events += events
	if !known {
		return
	}
	switch {
	case state.Terminal() && inLive:
		c.add(Problem{Task: id, Err: &CorruptError{Task: id, Reason: fmt.Sprintf("in the live index but %s", state)}})
	case !state.Terminal() && !inLive:
		c.add(Problem{Task: id, Err: &CorruptError{Task: id, Reason: fmt.Sprintf("%s but missing from the live index", state)}})
	}
}

// pages checks that every page below the high water mark is reached from
// the tree or free, and not both.
func (c *checker) pages() {
	free, flPages, err := c.raw.freelist()
	if err != nil {
		c.structural++
		c.corrupt(c.raw.meta.freelist, "%v", err)
		return
	}
	isFree := make(map[uint64]bool, len(free))
	for _, id := range free {
		isFree[id] = true
		if c.w.reachable[id] {
			c.structural++
			c.corrupt(id, "page %d is in use and listed as free", id)
		}
	}
	if c.structural > 0 {
		return // pages past damage were not reached: "neither" would be noise
	}
	inFreelist := map[uint64]bool{}
	for _, id := range flPages {
		inFreelist[id] = true
	}
	var lost []uint64
	for id := uint64(2); id < c.raw.meta.hwm; id++ {
		if !c.w.reachable[id] && !isFree[id] && !inFreelist[id] {
			lost = append(lost, id)
		}
	}
	for _, run := range runs(lost) {
		c.structural++
		if run[0] == run[1] {
			c.corrupt(run[0], "page %d is neither in use nor free", run[0])
		} else {
			c.corrupt(run[0], "pages %d to %d are neither in use nor free", run[0], run[1])
		}
	}
}

// runs groups sorted ids into [first, last] runs.
func runs(ids []uint64) [][2]uint64 {
	var out [][2]uint64
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1][1]+1 == id {
			out[n-1][1] = id
			continue
		}
		out = append(out, [2]uint64{id, id})
	}
	return out
}

// taskRead is what the raw walk could read of one task's bucket.
type taskRead struct {
	id      string
	head    head
	headErr error      // nil when head decoded
	recs    []rawRec   // the 8-byte keys, in order
	stray   [][]byte   // other keys than the records' and the head's
	damage  []taskHole // pages of the bucket that could not be read
}

type rawRec struct {
	seq uint64
	v   []byte
}

// taskHole is a damaged page of a task's bucket: the records it held
// start at seq (as far as the parent page says).
type taskHole struct {
	seq  uint64
	page uint64
	err  error
}

func readTaskRaw(w *rawWalk, id string, v []byte) *taskRead {
	tr := &taskRead{id: id}
	var hv []byte
	w.bucket(v, fmt.Sprintf("task %q", id), func(e rawElem) bool {
		switch {
		case e.bucket:
			tr.stray = append(tr.stray, e.key)
		case len(e.key) == 8:
			tr.recs = append(tr.recs, rawRec{seq: binary.BigEndian.Uint64(e.key), v: e.value})
		case string(e.key) == string(headKey):
			hv = e.value
		default:
			tr.stray = append(tr.stray, e.key)
		}
		return true
	}, func(d rawDamage) {
		seq := uint64(1)
		if len(tr.recs) > 0 {
			seq = tr.recs[len(tr.recs)-1].seq + 1
		}
		if len(d.from) == 8 {
			seq = binary.BigEndian.Uint64(d.from)
		}
		what := fmt.Sprintf("records from seq %d on", seq)
		if len(d.to) == 8 {
			what = fmt.Sprintf("records seq %d to %d", seq, binary.BigEndian.Uint64(d.to)-1)
		}
		tr.damage = append(tr.damage, taskHole{seq: seq, page: d.page,
			err: &CorruptError{Task: id, Seq: seq, Reason: fmt.Sprintf("%s could not be read", what), Err: d.err}})
	})
	switch {
	case hv == nil && len(tr.damage) > 0:
		tr.headErr = &CorruptError{Task: id, Reason: "head could not be read (on a damaged page)"}
	case hv == nil:
		tr.headErr = &CorruptError{Task: id, Reason: "missing head"}
	default:
		tr.head, tr.headErr = decodeHead(id, hv)
	}
	return tr
}

// verify checks what was read of the task, reporting each problem with
// add. It returns the state the task is in (from the fold of a sound log,
// else from its head) and whether that is known, and the number of
// records decoded.
func (tr *taskRead) verify(add func(seq uint64, err error)) (state fsm.State, known bool, events int) {
	t, sound, events := tr.fold(add)
	if tr.headErr != nil {
		add(0, tr.headErr)
		if sound && len(tr.damage) == 0 {
			return t.State, true, events
		}
		return fsm.StateNone, false, events
	}
	h := tr.head
	last := uint64(0)
	if n := len(tr.recs); n > 0 {
		last = tr.recs[n-1].seq
	}
	if last != h.version && len(tr.damage) == 0 {
		seq := min(last, h.version) + 1
		add(seq, &CorruptError{Task: tr.id, Seq: seq, Reason: fmt.Sprintf("log ends at seq %d, head says %d", last, h.version)})
		sound = false
	}
	if !sound {
		return h.state, true, events // the log cannot be folded: trust the head for the index
	}
	if why := h.disagrees(&t); why != "" {
		add(0, &CorruptError{Task: tr.id, Reason: why})
	}
	return t.State, true, events
}

// fold decodes and folds the records read, reporting each problem with
// add. sound is whether they make a whole legal log: contiguous from 1,
// every record decoded, every step legal, and no stray key or damage.
func (tr *taskRead) fold(add func(seq uint64, err error)) (t fsm.Task, sound bool, events int) {
	t = fsm.Task{ID: tr.id}
	sound = len(tr.damage) == 0
	walkOK := true
	for _, k := range tr.stray {
		add(0, &CorruptError{Task: tr.id, Reason: fmt.Sprintf("stray key %x", k)})
		sound = false
	}
	want := uint64(1)
	holes := tr.damage
	var e fsm.Event
	for _, rec := range tr.recs {
		// A record past a damaged page: its predecessors are missing
		// because of the damage (already reported), not on their own.
		for len(holes) > 0 && holes[0].seq <= rec.seq {
			want, walkOK, holes = rec.seq, false, holes[1:]
		}
		if rec.seq != want {
			add(want, &CorruptError{Task: tr.id, Seq: want, Reason: fmt.Sprintf("missing record (next key is seq %d)", rec.seq)})
			walkOK, sound = false, false
		}
		want = rec.seq + 1
		if err := decodeAt(tr.id, rec.seq, rec.v, &e); err != nil {
			add(rec.seq, err)
			walkOK, sound = false, false
			continue
		}
		events++
		if !walkOK {
			continue
		}
		if err := fsm.Lifecycle.FoldInPlace(&t, &e); err != nil {
			add(rec.seq, &CorruptError{Task: tr.id, Seq: rec.seq, Reason: "not a legal walk", Err: err})
			walkOK, sound = false, false
		}
	}
	return t, sound && walkOK, events
}
