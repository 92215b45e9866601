package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
)

// A reader of bbolt's file format of its own, for the damage paths: Check,
// Salvage and a listing past a damaged index. bbolt trusts its pages (a
// damaged one makes it panic, fault, or wedge its locks), and its cursor
// cannot step past a page it cannot read; this reader checks every page
// id, type, count and offset before it uses it, never panics, and walks
// on past a damaged page, saying which page it was and which keys the
// parent says it held. It reads the file with pread, never maps it, and
// never writes.
//
// The format (bbolt 1.3 to 1.5; the meta's version field is 2):
//
//	page      id u64, flags u16, count u16, overflow u32; then its
//	          elements. A page spans 1+overflow pages of pageSize.
//	meta      (pages 0 and 1) magic u32, version u32, pageSize u32,
//	          flags u32, root bucket {root u64, sequence u64},
//	          freelist u64, pgid u64 (the high water mark), txid u64,
//	          checksum u64 (FNV-1a 64 of what precedes it). The valid
//	          one with the higher txid is current.
//	branch    elements {pos u32, ksize u32, pgid u64}; key at the
//	          element's address + pos: the first key of the child.
//	leaf      elements {flags u32, pos u32, ksize u32, vsize u32}; key at
//	          the element's address + pos, value after it; flags 1 marks
//	          a nested bucket, whose value is {root u64, sequence u64},
//	          followed (root 0) by an inline leaf page.
//	freelist  count u16 page ids u64 (count 0xFFFF: the first u64 is the
//	          count).

const (
	rawPageHeader   = 16
	rawElemSize     = 16
	rawBucketHeader = 16
	rawBranch       = 0x01
	rawLeaf         = 0x02
	rawMetaFlag     = 0x04
	rawFreelist     = 0x10
	rawBucketFlag   = 0x01
	rawMagic        = 0xED0CDAED
	rawVersion      = 2
	rawNoFreelist   = ^uint64(0)
	// rawMaxDepth bounds the tree's depth (bbolt's is a handful): a
	// deeper walk is a cycle.
	rawMaxDepth = 64
)

// rawFile is a bbolt file opened for reading pages.
type rawFile struct {
	f        io.ReaderAt
	closer   io.Closer
	path     string
	size     int64
	pageSize int
	meta     rawMeta
}

type rawMeta struct {
	page     uint64 // 0 or 1
	pageSize uint32
	root     uint64 // the root bucket's root page
	freelist uint64
	hwm      uint64 // pages below it are in use or free
	txid     uint64
}

// rawError is what the raw reader found wrong with a page or a meta (as
// opposed to a failure to read the file at all).
type rawError struct{ msg string }

func (e *rawError) Error() string { return e.msg }

func rawErr(format string, args ...any) error { return &rawError{fmt.Sprintf(format, args...)} }

// openRaw opens the file at path and finds its current meta. The caller
// holds the store's lock (shared at least), so that no commit changes the
// file during the reads.
func openRaw(path string) (*rawFile, error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := newRaw(f, path, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// newRaw reads the metas of the file f of size bytes.
func newRaw(f io.ReaderAt, path string, size int64) (*rawFile, error) {
	r := &rawFile{f: f, path: path, size: size}
	if err := r.readMeta(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rawFile) close() {
	if r.closer != nil {
		r.closer.Close()
	}
}

// readMeta picks the meta bbolt would: the valid one with the higher txid.
func (r *rawFile) readMeta() error {
	var metas [2]*rawMeta
	var errs [2]error
	// Page 0 is at offset 0; its page size says where page 1 is (bbolt
	// tries the usual sizes when page 0 is unreadable).
	metas[0], errs[0] = r.metaAt(0, 0)
	sizes := []int64{4096, 1024, 2048, 8192, 16384, 32768, 65536}
	if metas[0] != nil {
		sizes = []int64{int64(metas[0].pageSize)}
	}
	for _, ps := range sizes {
		if metas[1], errs[1] = r.metaAt(ps, 1); metas[1] != nil {
			break
		}
	}
	best := metas[0]
	if metas[1] != nil && (best == nil || metas[1].txid > best.txid) {
		best = metas[1]
	}
	if best == nil {
		return rawErr("both meta pages: %v; %v", errs[0], errs[1])
	}
	r.meta, r.pageSize = *best, int(best.pageSize)
	return nil
}

func (r *rawFile) metaAt(off int64, want uint64) (*rawMeta, error) {
	buf := make([]byte, rawPageHeader+64)
	if _, err := r.f.ReadAt(buf, off); err != nil {
		return nil, rawErr("meta page %d: %v", want, err)
	}
	m := buf[rawPageHeader:]
	le := binary.LittleEndian
	switch {
	case le.Uint16(buf[8:]) != rawMetaFlag:
		return nil, rawErr("meta page %d: not a meta page (flags %#x)", want, le.Uint16(buf[8:]))
	case le.Uint32(m) != rawMagic:
		return nil, rawErr("meta page %d: bad magic", want)
	case le.Uint32(m[4:]) != rawVersion:
		return nil, rawErr("meta page %d: bbolt version %d", want, le.Uint32(m[4:]))
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:]) {
		return nil, rawErr("meta page %d: checksum mismatch", want)
	}
	ps := le.Uint32(m[8:])
	if ps < 512 || ps > 1<<24 || ps&(ps-1) != 0 || (want == 1 && int64(ps) != off) {
		return nil, rawErr("meta page %d: page size %d", want, ps)
	}
	return &rawMeta{page: want, pageSize: ps, root: le.Uint64(m[16:]), freelist: le.Uint64(m[32:]),
		hwm: le.Uint64(m[40:]), txid: le.Uint64(m[48:])}, nil
}

// page reads page id and its overflow pages, and checks its header. want
// is the page type expected (0: any).
func (r *rawFile) page(id uint64, want uint16) ([]byte, error) {
	if id < 2 || id >= r.meta.hwm {
		return nil, rawErr("page %d: outside the file's pages 2 to %d", id, r.meta.hwm-1)
	}
	ps := int64(r.pageSize)
	if int64(id)*ps+ps > r.size {
		return nil, rawErr("page %d: past the end of the file (%d bytes)", id, r.size)
	}
	hdr := make([]byte, rawPageHeader)
	if _, err := r.f.ReadAt(hdr, int64(id)*ps); err != nil {
		return nil, rawErr("page %d: %v", id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(hdr); got != id {
		return nil, rawErr("page %d: says it is page %d", id, got)
	}
	flags, overflow := le.Uint16(hdr[8:]), uint64(le.Uint32(hdr[12:]))
	if want != 0 && flags != want {
		return nil, rawErr("page %d: a %s page where a %s page should be", id, rawType(flags), rawType(want))
	}
	if id+overflow >= r.meta.hwm || int64(id+overflow+1)*ps > r.size {
		return nil, rawErr("page %d: %d overflow pages run past the end", id, overflow)
	}
	buf := make([]byte, int64(overflow+1)*ps)
	if _, err := r.f.ReadAt(buf, int64(id)*ps); err != nil && !errors.Is(err, io.EOF) {
		return nil, rawErr("page %d: %v", id, err)
	}
	return buf, nil
}

func rawType(flags uint16) string {
	switch flags {
	case rawBranch:
		return "branch"
	case rawLeaf:
		return "leaf"
	case rawMetaFlag:
		return "meta"
	case rawFreelist:
		return "freelist"
	}
	return fmt.Sprintf("unknown (%#x)", flags)
}

// rawElem is one element of a branch or leaf page.
type rawElem struct {
	key    []byte
	value  []byte // leaf
	bucket bool   // leaf: value is a nested bucket
	child  uint64 // branch
}

// parseNode parses a branch or leaf page (or an inline bucket's page) in
// buf, checking every element against buf's bounds and the keys' order.
func parseNode(buf []byte, name string) (leaf bool, elems []rawElem, err error) {
	if len(buf) < rawPageHeader {
		return false, nil, rawErr("%s: truncated page header", name)
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(buf[8:]), int(le.Uint16(buf[10:]))
	switch flags {
	case rawLeaf:
		leaf = true
	case rawBranch:
		if count == 0 {
			return false, nil, rawErr("%s: empty branch page", name)
		}
	default:
		return false, nil, rawErr("%s: a %s page where a branch or leaf page should be", name, rawType(flags))
	}
	if rawPageHeader+count*rawElemSize > len(buf) {
		return false, nil, rawErr("%s: %d elements do not fit the page", name, count)
	}
	elems = make([]rawElem, count)
	for i := range elems {
		at := rawPageHeader + i*rawElemSize
		e := buf[at : at+rawElemSize]
		var pos, ksize, vsize uint64
		if leaf {
			pos, ksize, vsize = uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
			elems[i].bucket = le.Uint32(e)&rawBucketFlag != 0
		} else {
			pos, ksize = uint64(le.Uint32(e)), uint64(le.Uint32(e[4:]))
			elems[i].child = le.Uint64(e[8:])
		}
		start := uint64(at) + pos
		if ksize == 0 || start+ksize+vsize > uint64(len(buf)) || start < uint64(rawPageHeader+count*rawElemSize) {
			return false, nil, rawErr("%s: element %d lies outside the page", name, i)
		}
		elems[i].key = buf[start : start+ksize : start+ksize]
		if leaf {
			elems[i].value = buf[start+ksize : start+ksize+vsize : start+ksize+vsize]
		}
		if i > 0 && bytes.Compare(elems[i-1].key, elems[i].key) >= 0 {
			return false, nil, rawErr("%s: keys out of order at element %d", name, i)
		}
	}
	return leaf, elems, nil
}

// rawDamage is a part of a bucket the walk could not read: the page, and
// the keys its parent says it held (from inclusive; to exclusive, nil for
// the end of the bucket).
type rawDamage struct {
	page     uint64
	from, to []byte
	err      error
}

// rawWalk walks buckets, remembering every page it reached.
type rawWalk struct {
	r         *rawFile
	reachable map[uint64]bool
}

func newRawWalk(r *rawFile) *rawWalk { return &rawWalk{r: r, reachable: map[uint64]bool{}} }

// bucket walks the bucket whose value (header, and inline page) is v, in
// key order: fn with each leaf element, damage with each part it cannot
// read. It stops early only when fn returns false.
func (w *rawWalk) bucket(v []byte, name string, fn func(rawElem) bool, damage func(rawDamage)) {
	if len(v) < rawBucketHeader {
		damage(rawDamage{err: rawErr("%s: bucket header truncated", name)})
		return
	}
	root := binary.LittleEndian.Uint64(v)
	if root == 0 {
		leaf, elems, err := parseNode(v[rawBucketHeader:], name+" (inline)")
		if err == nil && !leaf {
			err = rawErr("%s: inline bucket is not a leaf", name)
		}
		if err != nil {
			damage(rawDamage{err: err})
			return
		}
		for _, e := range elems {
			if !fn(e) {
				return
			}
		}
		return
	}
	w.node(root, name, nil, nil, 0, fn, damage)
}

// root walks the root bucket (meta's).
func (w *rawWalk) root(fn func(rawElem) bool, damage func(rawDamage)) {
	w.node(w.r.meta.root, "the root bucket", nil, nil, 0, fn, damage)
}

// node walks the subtree at page id, whose keys the parent puts in
// [from, to). It returns false when fn asked to stop.
func (w *rawWalk) node(id uint64, name string, from, to []byte, depth int, fn func(rawElem) bool, damage func(rawDamage)) bool {
	bad := func(err error) bool {
		damage(rawDamage{page: id, from: from, to: to, err: err})
		return true
	}
	if depth > rawMaxDepth {
		return bad(rawErr("%s: page %d: the tree is deeper than %d (a cycle)", name, id, rawMaxDepth))
	}
	if w.reachable[id] {
		return bad(rawErr("%s: page %d is reached twice", name, id))
	}
	buf, err := w.r.page(id, 0)
	if err != nil {
		return bad(fmt.Errorf("%s: %w", name, err))
	}
	leaf, elems, err := parseNode(buf, fmt.Sprintf("%s: page %d", name, id))
	if err != nil {
		return bad(err)
	}
	if len(elems) > 0 && ((from != nil && bytes.Compare(elems[0].key, from) < 0) ||
		(to != nil && bytes.Compare(elems[len(elems)-1].key, to) >= 0)) {
		return bad(rawErr("%s: page %d: keys outside the range its parent gives it", name, id))
	}
	for p := id; p < id+uint64(len(buf)/w.r.pageSize); p++ {
		w.reachable[p] = true
	}
	for i, e := range elems {
		if leaf {
			if !fn(e) {
				return false
			}
			continue
		}
		hi := to
		if i+1 < len(elems) {
			hi = elems[i+1].key
		}
		if !w.node(e.child, name, e.key, hi, depth+1, fn, damage) {
			return false
		}
	}
	return true
}

// freelist reads the free page ids the current meta names, checking them:
// in the file's range, sorted, and none of the freelist's own pages. A
// store without a synced freelist gives nil.
func (r *rawFile) freelist() (ids []uint64, pages []uint64, err error) {
	id := r.meta.freelist
	if id == rawNoFreelist {
		return nil, nil, nil
	}
	buf, err := r.page(id, rawFreelist)
	if err != nil {
		return nil, nil, fmt.Errorf("the freelist: %w", err)
	}
	for p := id; p < id+uint64(len(buf)/r.pageSize); p++ {
		pages = append(pages, p)
	}
	le := binary.LittleEndian
	count, at := uint64(le.Uint16(buf[10:])), rawPageHeader
	if count == 0xFFFF {
		if len(buf) < rawPageHeader+8 {
			return nil, nil, rawErr("the freelist: page %d: truncated count", id)
		}
		count, at = le.Uint64(buf[rawPageHeader:]), rawPageHeader+8
	}
	if count > uint64(len(buf)-at)/8 {
		return nil, nil, rawErr("the freelist: page %d: %d ids do not fit its %d pages", id, count, len(pages))
	}
	ids = make([]uint64, count)
	for i := range ids {
		p := le.Uint64(buf[at+8*i:])
		switch {
		case p < 2 || p >= r.meta.hwm:
			return nil, nil, rawErr("the freelist: page %d: free page %d is outside the file's pages 2 to %d", id, p, r.meta.hwm-1)
		case i > 0 && p <= ids[i-1]:
			return nil, nil, rawErr("the freelist: page %d: free pages out of order (%d after %d)", id, p, ids[i-1])
		case p >= id && p < id+uint64(len(pages)):
			return nil, nil, rawErr("the freelist: page %d: lists its own page %d as free", id, p)
		case p == r.meta.root:
			return nil, nil, rawErr("the freelist: page %d: lists the root page %d as free", id, p)
		}
		ids[i] = p
	}
	return ids, pages, nil
}

// rootsNotFree checks that the root page and the roots of the top-level
// buckets are not among the free ids.
func (r *rawFile) rootsNotFree(free []uint64) error {
	isFree := func(id uint64) bool {
		_, found := slices.BinarySearch(free, id)
		return found
	}
	if isFree(r.meta.root) {
		return rawErr("the freelist lists the root page %d as free", r.meta.root)
	}
	buf, err := r.page(r.meta.root, 0)
	if err != nil {
		return err
	}
	_, elems, err := parseNode(buf, "the root bucket")
	if err != nil {
		return err
	}
	for _, e := range elems {
		if e.bucket && len(e.value) >= rawBucketHeader {
			if root := binary.LittleEndian.Uint64(e.value); root != 0 && isFree(root) {
				return rawErr("the freelist lists page %d, the root of bucket %q, as free", root, e.key)
			}
		}
	}
	return nil
}
