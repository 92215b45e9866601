package store

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"unicode/utf8"

	"github.com/tether-fsm/tether/fsm"
)

// When a store's structure is gone (its root page, the task index or its
// branch pages cut off or damaged), its records may still be on pages the
// structure no longer reaches. A salvage then scans every page of the file
// (pageScan) for what it can still read on its own:
//
//   - leaf pages of the task index: a task id, and its bucket (the root of
//     its log, or the log itself inline);
//   - leaf pages of a task's log: records, each checked on its own (its
//     checksum, its sequence number equal to its key), with no name of
//     their task: they are given to a task only through the spawn nonce
//     one of them carries and the task's executor proves (a Claim);
//   - leaf pages of the desired bucket: desired records (checksummed, each
//     naming its key).
//
// A page may be an old copy (bbolt writes a changed page anew and frees the
// old one), so what the scan finds is believed only where it proves
// itself: a task found through a leaf page of the index is taken only when
// its log's spawn nonce is the one its executor wrote (the task's Claim);
// records found on their own only when they carry that nonce; of several
// copies, the longest legal log.

// A Claim is a task known outside the store: the directory of an executor
// (tasks/ID), the spawn nonce its identity file holds, and whether that
// executor is proven alive. A salvage that cannot find the task through
// the store's structure gives it its records found by the scan of pages
// when they carry that nonce, and reports a live claim it finds nothing of
// as lost, with the nonce, so that its executor is killed by its proven
// identity (driver.SettleLost) rather than left running where no command
// can reach it.
type Claim struct {
	ID    string
	Nonce string
	Live  bool
}

// scannedPage is a leaf page the structure's walk did not reach, with what
// it holds.
type scannedPage struct {
	id    uint64
	elems []rawElem
}

// pageScan is what a scan of a file's pages found outside the walk.
type pageScan struct {
	// index are the task index's entries found on its leaf pages (and
	// through old root pages), by task id: each a bucket value.
	index map[string][][]byte
	// recs are pages of records: their records, checksummed, in key
	// order (8-byte keys), by page.
	recs []recPage
	// desired are desired records found, by name: the highest revision.
	desired map[string]Desired
}

type recPage struct {
	page uint64
	recs []rawRec
}

// scanPages reads every page of raw that walked did not reach and sorts
// the leaf pages it can parse.
func scanPages(raw *rawFile, reached map[uint64]bool) *pageScan {
	ps := &pageScan{index: map[string][][]byte{}, desired: map[string]Desired{}}
	last := raw.meta.hwm
	if n := uint64(raw.size / int64(raw.pageSize)); n < last {
		last = n
	}
	for id := uint64(2); id < last; id++ {
		if reached[id] {
			continue
		}
		buf, err := raw.page(id, rawLeaf)
		if err != nil {
			continue
		}
		_, elems, err := parseNode(buf, "")
		if err != nil || len(elems) == 0 {
			continue
		}
		ps.sort(raw, scannedPage{id: id, elems: elems})
	}
	return ps
}

// sort files one leaf page: a root's, the index's, a log's or the desired
// bucket's. A page that is none of these is skipped.
func (ps *pageScan) sort(raw *rawFile, p scannedPage) {
	if root := rootLike(p.elems); root != nil {
		// An old root (or the current one, past a damaged branch): its
		// task index is walked for more entries.
		w := newRawWalk(raw)
		w.bucket(root, "an old task index", func(e rawElem) bool {
			if e.bucket && taskIDLike(e.key) {
				ps.index[string(e.key)] = append(ps.index[string(e.key)], e.value)
			}
			return true
		}, func(rawDamage) {})
		return
	}
	var recs []rawRec
	var desired []Desired
	index := 0
	for _, e := range p.elems {
		switch {
		case e.bucket && taskIDLike(e.key) && len(e.value) >= rawBucketHeader:
			index++
		case !e.bucket && len(e.key) == 8:
			seq := binary.BigEndian.Uint64(e.key)
			var ev fsm.Event
			if decodeAt("", seq, e.value, &ev) == nil {
				recs = append(recs, rawRec{seq: seq, v: e.value})
			}
		case !e.bucket:
			if d, why := decodeDesired(e.value); why == "" && d.Name == string(e.key) {
				desired = append(desired, d)
			}
		}
	}
	if index == len(p.elems) {
		for _, e := range p.elems {
			ps.index[string(e.key)] = append(ps.index[string(e.key)], e.value)
		}
		return
	}
	if len(recs) > 0 {
		ps.recs = append(ps.recs, recPage{page: p.id, recs: recs})
	}
	for _, d := range desired {
		if old, ok := ps.desired[d.Name]; !ok || d.Rev > old.Rev {
			ps.desired[d.Name] = d
		}
	}
}

// rootLike returns the task index's bucket value of a page that is a
// root's leaf (its keys are the store's top-level buckets), nil for any
// other page.
func rootLike(elems []rawElem) []byte {
	var tasks []byte
	meta := false
	for _, e := range elems {
		switch {
		case !e.bucket:
			return nil
		case string(e.key) == string(bucketTasks):
			tasks = e.value
		case string(e.key) == string(bucketMeta):
			meta = true
		case string(e.key) == string(bucketLive), string(e.key) == string(bucketDesired):
		default:
			return nil
		}
	}
	if !meta {
		return nil
	}
	return tasks
}

// taskIDLike is a key that can be a task id: printable UTF-8, no NUL, no
// longer than an id may be, and not one of the store's bucket names.
func taskIDLike(k []byte) bool {
	if len(k) == 0 || len(k) > maxTaskID || !utf8.Valid(k) || bytes.IndexByte(k, 0) >= 0 {
		return false
	}
	switch string(k) {
	case string(bucketMeta), string(bucketTasks), string(bucketLive), string(bucketDesired):
		return false
	}
	return true
}

// nonceOf is the spawn nonce a record carries: a spawn intent's, or the
// identity's of an executor-up.
func nonceOf(v []byte) string {
	var e fsm.Event
	if _, err := decodeRecord(v, &e); err != nil {
		return ""
	}
	switch {
	case e.Type == fsm.EventSpawnIntent:
		return e.Nonce
	case e.Type == fsm.EventExecutorUp && e.Executor != nil:
		return e.Executor.Nonce
	}
	return ""
}

// logByNonce gathers the log of task id, whose spawn nonce is nonce: the
// records of seeds (copies of its bucket that entries of the index name),
// every page of records carrying a record with that nonce (copies of one
// page agree on every record they share; a page that disagrees is another
// task's and is left), then the pages that go on from where those end,
// while exactly one goes on legally. It returns the records from seq 1 on
// for as long as they are contiguous, and whether records past a gap were
// found (the log is damaged there, not merely cut short).
func (ps *pageScan) logByNonce(id, nonce string, seeds ...[]rawRec) (log []rawRec, gap bool) {
	bySeq := map[uint64][]byte{}
	var taken []uint64
	agrees := func(p recPage) bool {
		for _, r := range p.recs {
			if v, ok := bySeq[r.seq]; ok && !bytes.Equal(v, r.v) {
				return false
			}
		}
		return true
	}
	add := func(p recPage) {
		for _, r := range p.recs {
			bySeq[r.seq] = r.v
		}
		taken = append(taken, p.page)
	}
	seeded := false
	for _, recs := range seeds {
		if p := (recPage{recs: recs}); agrees(p) {
			for _, r := range recs {
				bySeq[r.seq] = r.v
			}
			seeded = seeded || len(recs) > 0
		}
	}
	for _, p := range ps.recs {
		if !slices.ContainsFunc(p.recs, func(r rawRec) bool { return nonceOf(r.v) == nonce }) || !agrees(p) {
			continue
		}
		add(p)
	}
	if len(taken) == 0 && !seeded {
		return nil, false
	}
	contiguous := func() []rawRec {
		var out []rawRec
		for seq := uint64(1); ; seq++ {
			v, ok := bySeq[seq]
			if !ok {
				return out
			}
			out = append(out, rawRec{seq: seq, v: v})
		}
	}
	beyond := func(log []rawRec) bool {
		for seq := range bySeq {
			if seq > uint64(len(log)) {
				return true
			}
		}
		return false
	}
	for {
		log := contiguous()
		next := uint64(len(log)) + 1
		t, ok := foldRecs(id, log)
		if !ok {
			return log, beyond(log)
		}
		// A page goes on from here when it holds the next record, agrees
		// with what is taken where they overlap, and its records from
		// there fold on legally.
		var cands [][]rawRec
		var pages []uint64
		for _, p := range ps.recs {
			if slices.Contains(taken, p.page) {
				continue
			}
			i := slices.IndexFunc(p.recs, func(r rawRec) bool { return r.seq == next })
			if i < 0 || !agrees(recPage{recs: p.recs[:i]}) {
				continue
			}
			if _, ok := foldFrom(t, id, p.recs[i:]); ok {
				cands = append(cands, p.recs[i:])
				pages = append(pages, p.page)
			}
		}
		// Copies of one page (an old one holds fewer records) are one
		// candidate: the longest, when the others are its first records.
		longest := 0
		for i := range cands {
			if len(cands[i]) > len(cands[longest]) {
				longest = i
			}
		}
		for i := range cands {
			if !isPrefix(cands[i], cands[longest]) {
				return log, true // two ways on: neither is believed
			}
		}
		if len(cands) == 0 {
			return log, beyond(log)
		}
		add(recPage{page: pages[longest], recs: cands[longest]})
		for _, p := range pages {
			if !slices.Contains(taken, p) {
				taken = append(taken, p)
			}
		}
	}
}

// isPrefix reports whether a's records are the first of b's.
func isPrefix(a, b []rawRec) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i].seq != b[i].seq || !bytes.Equal(a[i].v, b[i].v) {
			return false
		}
	}
	return true
}

// checkedRecs are the records of recs whose checksums and sequence
// numbers hold.
func checkedRecs(recs []rawRec) []rawRec {
	var out []rawRec
	var e fsm.Event
	for _, r := range recs {
		if decodeAt("", r.seq, r.v, &e) == nil {
			out = append(out, r)
		}
	}
	return out
}

// foldRecs folds records from seq 1: ok when they are contiguous, readable
// and a legal walk.
func foldRecs(id string, recs []rawRec) (fsm.Task, bool) {
	return foldFrom(fsm.Task{ID: id}, id, recs)
}

// foldFrom folds recs onto t: ok when they follow on from t's version,
// contiguous, readable and legal.
func foldFrom(t fsm.Task, id string, recs []rawRec) (fsm.Task, bool) {
	var e fsm.Event
	for _, r := range recs {
		if r.seq != t.Version+1 || decodeAt(id, r.seq, r.v, &e) != nil || fsm.Lifecycle.FoldInPlace(&t, &e) != nil {
			return t, false
		}
	}
	return t, true
}

// guessRaw is a rawFile for a file whose meta pages are both unreadable:
// its page size is the one at which most pages name themselves, every page
// in the file is taken to be in use, and the root is unknown (the walk
// finds nothing, the scan does the work).
func guessRaw(path string) (*rawFile, error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r := &rawFile{f: f, closer: f, path: path, size: st.Size(), pageSize: os.Getpagesize()}
	best := 0
	hdr := make([]byte, 8)
	for _, ps := range []int{4096, 1024, 2048, 8192, 16384, 32768, 65536} {
		named := 0
		for id := int64(2); id*int64(ps)+8 <= r.size && id < 4096; id++ {
			if _, err := f.ReadAt(hdr, id*int64(ps)); err == nil && binary.LittleEndian.Uint64(hdr) == uint64(id) {
				named++
			}
		}
		if named > best {
			best, r.pageSize = named, ps
		}
	}
	r.meta = rawMeta{pageSize: uint32(r.pageSize), hwm: uint64(r.size / int64(r.pageSize)), freelist: rawNoFreelist}
	return r, nil
}
