package crashfs

import (
	"fmt"
	"sync"
)

// OpKind is the kind of a logged operation.
type OpKind uint8

const (
	OpWrite    OpKind = iota + 1 // a write of one page or part of one (writes are split at page boundaries)
	OpTruncate                   // a size change: truncate, ftruncate, O_TRUNC, fallocate past the end
	OpCreate                     // a new file, directory, symlink, fifo or socket in a directory
	OpLink                       // a new name for an existing inode
	OpUnlink                     // unlink or rmdir
	OpRename                     // rename, replacing whatever the new name held
	OpExchange                   // rename with RENAME_EXCHANGE
	OpChmod                      // a mode change (durable at once: modes are not modelled)
	OpSync                       // fsync or fdatasync of a file: a persistence point
	OpSyncDir                    // fsync of a directory: a persistence point
	OpMark                       // a moment the test marked (Mark)
)

var opNames = [...]string{
	OpWrite: "write", OpTruncate: "truncate", OpCreate: "create", OpLink: "link",
	OpUnlink: "unlink", OpRename: "rename", OpExchange: "exchange", OpChmod: "chmod",
	OpSync: "fsync", OpSyncDir: "fsyncdir", OpMark: "mark",
}

func (k OpKind) String() string {
	if int(k) < len(opNames) && opNames[k] != "" {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// data reports whether the kind changes a file's content (persisted by an
// fsync of the file).
func (k OpKind) data() bool { return k == OpWrite || k == OpTruncate }

// entry reports whether the kind changes a directory's entries (persisted
// by an fsync of the directory).
func (k OpKind) entry() bool {
	return k == OpCreate || k == OpLink || k == OpUnlink || k == OpRename || k == OpExchange
}

// Boundary reports whether the kind is a persistence point.
func (k OpKind) Boundary() bool { return k == OpSync || k == OpSyncDir }

// Op is one logged operation on the mount, in the order the filesystem
// performed them. Seq numbers every operation and mark of one FS from 1.
type Op struct {
	Seq  uint64
	Kind OpKind
	// Path names what the operation acted on, relative to the mount: the
	// file written, truncated or synced, the directory synced, or for entry
	// operations the entry (directory/name). To is a rename's new name.
	Path, To string
	Off      int64  // OpWrite: where
	Len      int    // OpWrite: how many bytes
	Size     int64  // OpTruncate: the new size
	Datasync bool   // OpSync: it was fdatasync
	Label    string // OpMark

	node, node2 ino // the inode acted on; OpExchange: the other one
	dir, dir2   ino // entry operations: the directory (and a rename's target directory)
	name, name2 string
	data        []byte
	kind        nodeKind
	mode        uint32
	target      string
}

func (op Op) String() string {
	if op.Path == "" && op.Kind != OpMark {
		op.Path = "."
	}
	switch op.Kind {
	case OpWrite:
		return fmt.Sprintf("#%d write %s [%d,+%d)", op.Seq, op.Path, op.Off, op.Len)
	case OpTruncate:
		return fmt.Sprintf("#%d truncate %s to %d", op.Seq, op.Path, op.Size)
	case OpCreate:
		return fmt.Sprintf("#%d create %s %s", op.Seq, op.kind, op.Path)
	case OpRename, OpExchange:
		return fmt.Sprintf("#%d %s %s -> %s", op.Seq, op.Kind, op.Path, op.To)
	case OpSync:
		if op.Datasync {
			return fmt.Sprintf("#%d fdatasync %s", op.Seq, op.Path)
		}
		return fmt.Sprintf("#%d fsync %s", op.Seq, op.Path)
	case OpMark:
		return fmt.Sprintf("#%d mark %q", op.Seq, op.Label)
	}
	return fmt.Sprintf("#%d %s %s", op.Seq, op.Kind, op.Path)
}

// Mark is a moment in the operation stream, made by FS.Mark: every
// operation with a smaller Seq happened before it, every larger one after.
type Mark struct {
	Seq   uint64
	Label string
}

func (m Mark) String() string { return fmt.Sprintf("#%d %q", m.Seq, m.Label) }

// Boundary is a persistence point: an fsync, fdatasync or directory fsync,
// numbered from 1 in the order the filesystem received them.
type Boundary struct {
	Index int
	Op    Op
}

func (b Boundary) String() string { return fmt.Sprintf("b%d %s", b.Index, b.Op) }

// recorder is the operation log and the map from the backing filesystem's
// inodes to the model's. The FUSE layer holds mu across each operation's
// real effect on the backing directory and its log entry, so the log's
// order is the order in which effects became visible.
type recorder struct {
	mu        sync.Mutex
	ops       []Op
	initial   *image
	next      ino
	byBacking map[backingID]ino
}

// backingID names an inode of the backing filesystem.
type backingID struct{ dev, ino uint64 }

func newRecorder() *recorder {
	r := &recorder{initial: newImage(), next: rootIno, byBacking: map[backingID]ino{}}
	r.initial.node(rootIno, kindDir)
	return r
}

// add logs op (mu held) and returns it with its Seq.
func (r *recorder) add(op Op) Op {
	op.Seq = uint64(len(r.ops)) + 1
	r.ops = append(r.ops, op)
	return op
}

func (r *recorder) newIno(b backingID) ino {
	r.next++
	r.byBacking[b] = r.next
	return r.next
}

// write logs a write, split at page boundaries.
func (r *recorder) write(id ino, path string, off int64, data []byte) {
	for len(data) > 0 {
		n := min(len(data), pageSize-int(off%pageSize))
		r.add(Op{Kind: OpWrite, Path: path, Off: off, Len: n, node: id, data: append([]byte(nil), data[:n]...)})
		data, off = data[n:], off+int64(n)
	}
}

func (r *recorder) truncate(id ino, path string, size int64) {
	r.add(Op{Kind: OpTruncate, Path: path, Size: size, node: id})
}

func (r *recorder) create(dir ino, path, name string, id ino, k nodeKind, mode uint32, target string) {
	r.add(Op{Kind: OpCreate, Path: path, dir: dir, name: name, node: id, kind: k, mode: mode & 0o7777, target: target})
}

func (r *recorder) link(dir ino, path, name string, id ino) {
	r.add(Op{Kind: OpLink, Path: path, dir: dir, name: name, node: id})
}

func (r *recorder) unlink(dir ino, path, name string, id ino) {
	r.add(Op{Kind: OpUnlink, Path: path, dir: dir, name: name, node: id})
}

func (r *recorder) rename(dir ino, path, name string, dir2 ino, to, name2 string, id ino) {
	r.add(Op{Kind: OpRename, Path: path, To: to, dir: dir, name: name, dir2: dir2, name2: name2, node: id})
}

func (r *recorder) exchange(dir ino, path, name string, dir2 ino, to, name2 string, id, id2 ino) {
	r.add(Op{Kind: OpExchange, Path: path, To: to, dir: dir, name: name, dir2: dir2, name2: name2, node: id, node2: id2})
}

func (r *recorder) chmod(id ino, path string, mode uint32) {
	r.add(Op{Kind: OpChmod, Path: path, node: id, mode: mode & 0o7777})
}

func (r *recorder) sync(id ino, path string, dir, datasync bool) Op {
	if dir {
		return r.add(Op{Kind: OpSyncDir, Path: path, node: id})
	}
	return r.add(Op{Kind: OpSync, Path: path, node: id, Datasync: datasync})
}

func (r *recorder) mark(label string) Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.add(Op{Kind: OpMark, Label: label})
	return Mark{Seq: op.Seq, Label: label}
}

// snapshot returns a copy of the log so far.
func (r *recorder) snapshot() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}
