package crashfs

import (
	"encoding/binary"
	"hash/maphash"
	"maps"
	"slices"
	"sync/atomic"
)

// The crash-state model.
//
// An image is a whole filesystem as a disk would hold it: inodes by number,
// each a regular file (its pages and size), a directory (its entries), a
// symlink, a fifo or a socket. Images are copy on write: a clone shares
// every inode with its original until one of them changes it, so a
// snapshot per persistence point costs a map copy, not the data.
//
// The durable image starts as the backing directory at mount time. Every
// operation is logged (see Op); a persistence point applies to the durable
// image the operations it makes durable, in program order:
//
//   - fsync or fdatasync of a file: every pending write and truncate of that
//     file;
//   - fsync of a directory: every pending entry operation on that directory
//     (create, link, unlink, rename into or out of it), together with the
//     earlier pending entry operations of every directory those touch (the
//     closure below), so that directory histories persist in order and a
//     rename is never durable without the create it moved.
//
// A crash state is the durable image at some point plus a subset of the
// operations still pending there, closed the same way.

// pageSize is the unit in which writes persist: a dirty page is written
// back whole or not at all.
const pageSize = 4096

// ino numbers an inode of the model. Numbers are never reused, unlike the
// backing filesystem's.
type ino uint64

const rootIno ino = 1

type nodeKind uint8

const (
	kindFile nodeKind = iota + 1
	kindDir
	kindSymlink
	kindFifo
	kindSocket
)

func (k nodeKind) String() string {
	switch k {
	case kindFile:
		return "file"
	case kindDir:
		return "dir"
	case kindSymlink:
		return "symlink"
	case kindFifo:
		return "fifo"
	case kindSocket:
		return "socket"
	}
	return "unknown"
}

// page is one page of a file's content; immutable once made.
type page struct {
	sum  uint64 // content hash, to tell images apart
	data [pageSize]byte
}

var pageSeed = maphash.MakeSeed()

func newPage(from *page) *page {
	p := &page{}
	if from != nil {
		p.data = from.data
	}
	return p
}

func (p *page) seal() *page {
	p.sum = maphash.Bytes(pageSeed, p.data[:])
	return p
}

type inode struct {
	gen     uint64 // the image that owns this copy
	kind    nodeKind
	mode    uint32 // permission bits
	size    int64
	pages   map[int64]*page
	target  string         // symlink
	entries map[string]ino // directory
}

// image is a filesystem as a disk holds it.
type image struct {
	gen   uint64
	nodes map[ino]*inode
}

var imageGen atomic.Uint64

func newImage() *image {
	return &image{gen: imageGen.Add(1), nodes: map[ino]*inode{}}
}

// clone returns an image that shares every inode with im until either
// changes it. im must not be changed afterwards (it is a snapshot) unless
// it is the clone's only other owner and was itself re-cloned: see freeze.
func (im *image) clone() *image {
	return &image{gen: imageGen.Add(1), nodes: maps.Clone(im.nodes)}
}

// node returns the inode id of this image for changing, copying it first if
// another image shares it; a missing inode is made, of kind k.
func (im *image) node(id ino, k nodeKind) *inode {
	in := im.nodes[id]
	switch {
	case in == nil:
		in = &inode{gen: im.gen, kind: k, mode: defaultMode(k)}
		switch k {
		case kindDir:
			in.entries = map[string]ino{}
		case kindFile:
			in.pages = map[int64]*page{}
		}
		im.nodes[id] = in
	case in.gen != im.gen:
		c := *in
		c.gen = im.gen
		c.pages = maps.Clone(in.pages)
		c.entries = maps.Clone(in.entries)
		in = &c
		im.nodes[id] = in
	}
	return in
}

func defaultMode(k nodeKind) uint32 {
	if k == kindDir {
		return 0o755
	}
	return 0o644
}

func (in *inode) write(off int64, data []byte) {
	if in.pages == nil {
		in.pages = map[int64]*page{}
	}
	end := off + int64(len(data))
	for len(data) > 0 {
		pi, po := off/pageSize, int(off%pageSize)
		p := newPage(in.pages[pi])
		n := copy(p.data[po:], data)
		in.pages[pi] = p.seal()
		data, off = data[n:], off+int64(n)
	}
	in.size = max(in.size, end)
}

func (in *inode) truncate(size int64) {
	if size < in.size {
		for pi := range in.pages {
			if pi*pageSize >= size {
				delete(in.pages, pi)
			}
		}
		if tail := int(size % pageSize); tail != 0 {
			if old := in.pages[size/pageSize]; old != nil {
				p := newPage(old)
				clear(p.data[tail:])
				in.pages[size/pageSize] = p.seal()
			}
		}
	}
	in.size = size
}

// content returns the file's bytes (holes read as zeros).
func (in *inode) content() []byte {
	b := make([]byte, in.size)
	for pi, p := range in.pages {
		if off := pi * pageSize; off < in.size {
			copy(b[off:], p.data[:])
		}
	}
	return b
}

// apply makes op's effect on the image. Entry operations are applied to
// whatever the image holds: a rename moves the inode it moved live, and
// removes its old name only if that name still holds it.
func (im *image) apply(op *Op) {
	switch op.Kind {
	case OpWrite:
		im.node(op.node, kindFile).write(op.Off, op.data)
	case OpTruncate:
		im.node(op.node, kindFile).truncate(op.Size)
	case OpChmod:
		if im.nodes[op.node] != nil {
			im.node(op.node, kindFile).mode = op.mode
		}
	case OpCreate:
		in := im.node(op.node, op.kind)
		in.mode = op.mode
		in.target = op.target
		im.node(op.dir, kindDir).entries[op.name] = op.node
	case OpLink:
		im.node(op.dir, kindDir).entries[op.name] = op.node
	case OpUnlink:
		d := im.node(op.dir, kindDir)
		if d.entries[op.name] == op.node {
			delete(d.entries, op.name)
		}
	case OpRename:
		from := im.node(op.dir, kindDir)
		if from.entries[op.name] == op.node {
			delete(from.entries, op.name)
		}
		im.node(op.dir2, kindDir).entries[op.name2] = op.node
	case OpExchange:
		im.node(op.dir, kindDir).entries[op.name] = op.node2
		im.node(op.dir2, kindDir).entries[op.name2] = op.node
	}
}

// walk calls fn for every inode reachable from the root, depth first in
// name order, with its path ("" for the root). A directory reached a second
// time (only a damaged image has one) is not entered again; a file reached
// again is passed with first set to the path it was first seen at.
func (im *image) walk(fn func(path string, id ino, in *inode, first string)) {
	seen := map[ino]string{}
	var visit func(path string, id ino)
	visit = func(path string, id ino) {
		in := im.nodes[id]
		if in == nil {
			return
		}
		if p, ok := seen[id]; ok {
			if in.kind != kindDir {
				fn(path, id, in, p)
			}
			return
		}
		seen[id] = path
		fn(path, id, in, "")
		if in.kind != kindDir {
			return
		}
		for _, name := range slices.Sorted(maps.Keys(in.entries)) {
			child := name
			if path != "" {
				child = path + "/" + name
			}
			visit(child, in.entries[name])
		}
	}
	visit("", rootIno)
}

// key identifies the image's reachable content: two images with one key
// materialise to the same tree.
type key [2]uint64

var keySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func (im *image) key() key {
	var hs [2]maphash.Hash
	for i := range hs {
		hs[i].SetSeed(keySeeds[i])
	}
	var buf []byte
	im.walk(func(path string, id ino, in *inode, first string) {
		buf = buf[:0]
		buf = append(buf, path...)
		buf = append(buf, 0, byte(in.kind))
		buf = append(buf, first...)
		buf = append(buf, 0)
		buf = binary.LittleEndian.AppendUint32(buf, in.mode)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(in.size))
		buf = append(buf, in.target...)
		buf = append(buf, 0)
		for _, pi := range slices.Sorted(maps.Keys(in.pages)) {
			if pi*pageSize < in.size {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(pi))
				buf = binary.LittleEndian.AppendUint64(buf, in.pages[pi].sum)
			}
		}
		for i := range hs {
			hs[i].Write(buf)
		}
	})
	return key{hs[0].Sum64(), hs[1].Sum64()}
}

// closure returns the operations of pending (indices into ops, ascending)
// that persist if those with chosen[i] set do: a chosen entry operation
// brings every earlier pending entry operation on any directory it touches,
// transitively. Data operations stand alone.
func closure(ops []Op, pending []int, chosen func(i int) bool) []int {
	in := make([]bool, len(pending))
	active := map[ino]bool{}
	for j := len(pending) - 1; j >= 0; j-- {
		op := &ops[pending[j]]
		if !op.Kind.entry() {
			in[j] = chosen(j)
			continue
		}
		if !chosen(j) && !active[op.dir] && !(op.dir2 != 0 && active[op.dir2]) {
			continue
		}
		in[j] = true
		active[op.dir] = true
		if op.dir2 != 0 {
			active[op.dir2] = true
		}
	}
	var out []int
	for j, ok := range in {
		if ok {
			out = append(out, pending[j])
		}
	}
	return out
}
