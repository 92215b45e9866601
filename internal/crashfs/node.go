package crashfs

import (
	"context"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The FUSE side: a loopback filesystem (go-fuse's LoopbackNode) whose
// every changing operation also goes into the log. The backing directory
// holds the live state, what a process sees (the page cache); the log
// holds what a disk would. The backing directory is never synced: its own
// durability does not matter, the model is the disk.
//
// File I/O is taken at the node (NodeWriter and friends), so go-fuse never
// reaches the LoopbackFile's own Write or Fsync, and file handles are
// wrapped so that no passthrough descriptor is handed to the kernel (which
// would then write the backing file without asking). Locks are not
// forwarded (MountOptions.EnableLocks is off), so the kernel keeps flock and
// fcntl locks locally, which is all one machine needs.
//
// Every change goes through the mount, so the kernel's page cache is always
// that of the backing files: files are opened with FOPEN_KEEP_CACHE and the
// mount asks for explicit data cache control, so pages written through the
// mount stay cached and a mapped read of them (bbolt) never waits for this
// process to serve it.

// node is every inode of the mount.
type node struct {
	*fs.LoopbackNode
	fsys *server
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, fsys: n.fsys}
	}
	return ops
}

// rel is the node's path relative to the mount.
func (n *node) rel() string { return n.Path(nil) }

func (n *node) backing(name string) string {
	return filepath.Join(n.fsys.backing, n.rel(), name)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func backingOf(st *syscall.Stat_t) backingID {
	return backingID{dev: uint64(st.Dev), ino: st.Ino}
}

// id returns the model inode of the backing file at p (mu held).
func (f *server) idAt(p string) (ino, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	id, ok := f.rec.byBacking[backingOf(&st)]
	if !ok {
		// Made behind the filesystem's back, in the backing directory.
		return 0, syscall.EIO
	}
	return id, 0
}

func (n *node) selfID() (ino, syscall.Errno) { return n.fsys.idAt(n.backing("")) }

// file is an open regular file: the loopback handle, its descriptor and
// its model inode.
type file struct {
	lf   *fs.LoopbackFile
	fd   int
	id   ino
	node *node
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
)

func (h *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, dest, off)
}
func (h *file) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *file) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

// Setattr is reached only through node.Setattr, which logs it.
func (h *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}

// wrap makes a file of a loopback handle (mu held).
func (n *node) wrap(fh fs.FileHandle) (*file, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EBADF
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	id, ok := n.fsys.rec.byBacking[backingOf(&st)]
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EIO
	}
	return &file{lf: lf, fd: fd, id: id, node: n}, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	dir, errno := n.selfID()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	var before syscall.Stat_t
	existed := syscall.Lstat(n.backing(name), &before) == nil
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	path := join(n.rel(), name)
	lf := fh.(*fs.LoopbackFile)
	if fd, ok := lf.PassthroughFd(); ok && !existed {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err == nil {
			r.create(dir, path, name, r.newIno(backingOf(&st)), kindFile, mode, "")
		}
	}
	h, errno := n.wrap(fh)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if existed && flags&syscall.O_TRUNC != 0 {
		r.truncate(h.id, path, 0)
	}
	return ch, h, fuseFlags | fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.wrap(fh)
	if errno != 0 {
		return nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		r.truncate(h.id, n.rel(), 0)
	}
	return h, fuseFlags | fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := f.(*file)
	if !ok {
		return 0, syscall.EBADF
	}
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	w, err := syscall.Pwrite(h.fd, data, off)
	if w > 0 {
		r.write(h.id, n.rel(), off, data[:w])
	}
	return uint32(max(w, 0)), fs.ToErrno(err)
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	var all []byte
	for _, d := range data {
		all = append(all, d...)
	}
	return n.Write(ctx, f, all, off)
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC, the fsync flag of fdatasync.
const fsyncFdatasync = 1

// Fsync is every persistence point: fsync and fdatasync of a file (FUSE
// FSYNC) and of a directory (FSYNCDIR, through dirHandle or directly).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	r := n.fsys.rec
	r.mu.Lock()
	var id ino
	var errno syscall.Errno
	if h, ok := f.(*file); ok {
		id = h.id
	} else {
		id, errno = n.selfID()
	}
	if errno == 0 {
		r.sync(id, n.rel(), n.IsDir(), flags&fsyncFdatasync != 0)
	}
	r.mu.Unlock()
	if errno == 0 && n.fsys.opts.SyncLatency > 0 {
		// The simulated device's flush: it delays the caller, never
		// orders anything (the boundary is already logged).
		time.Sleep(n.fsys.opts.SyncLatency)
	}
	return errno
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	var id ino
	var errno syscall.Errno
	var inner fs.FileHandle
	if h, ok := f.(*file); ok {
		id, inner = h.id, h.lf
	} else {
		id, errno = n.selfID()
		if errno != 0 {
			return errno
		}
	}
	if errno := n.LoopbackNode.Setattr(ctx, inner, in, out); errno != 0 {
		return errno
	}
	if m, ok := in.GetMode(); ok {
		r.chmod(id, n.rel(), m)
	}
	if sz, ok := in.GetSize(); ok {
		r.truncate(id, n.rel(), int64(sz))
	}
	return 0
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	h, ok := f.(*file)
	if !ok {
		return syscall.EBADF
	}
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		// Punching holes and zeroing ranges change content; nothing here
		// needs them, so they are refused rather than modelled wrongly.
		return syscall.EOPNOTSUPP
	}
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	var before, after syscall.Stat_t
	if err := syscall.Fstat(h.fd, &before); err != nil {
		return fs.ToErrno(err)
	}
	if err := unix.Fallocate(h.fd, mode, int64(off), int64(size)); err != nil {
		return fs.ToErrno(err)
	}
	if err := syscall.Fstat(h.fd, &after); err != nil {
		return fs.ToErrno(err)
	}
	if after.Size != before.Size {
		r.truncate(h.id, n.rel(), after.Size)
	}
	return 0
}

// CopyFileRange is refused so that the kernel copies through Read and
// Write, which are logged.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Tmpfile is refused: an O_TMPFILE inode has no name to log until linkat,
// which FUSE cannot tell from a hard link. Callers fall back to a named
// temporary file.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// created logs a new inode made by mk at dir/name (mu held).
func (n *node) created(name string, k nodeKind, mode uint32, target string, mk func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	r := n.fsys.rec
	dir, errno := n.selfID()
	if errno != 0 {
		return nil, errno
	}
	ch, errno := mk()
	if errno != 0 {
		return nil, errno
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.backing(name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	r.create(dir, join(n.rel(), name), name, r.newIno(backingOf(&st)), k, mode, target)
	return ch, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fsys.rec.mu.Lock()
	defer n.fsys.rec.mu.Unlock()
	return n.created(name, kindDir, mode, "", func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Mkdir(ctx, name, mode, out)
	})
}

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var k nodeKind
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		k = kindFile
	case syscall.S_IFIFO:
		k = kindFifo
	case syscall.S_IFSOCK:
		k = kindSocket
	default:
		return nil, syscall.EOPNOTSUPP // device nodes: not modelled
	}
	n.fsys.rec.mu.Lock()
	defer n.fsys.rec.mu.Unlock()
	return n.created(name, k, mode, "", func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Mknod(ctx, name, mode, dev, out)
	})
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fsys.rec.mu.Lock()
	defer n.fsys.rec.mu.Unlock()
	return n.created(name, kindSymlink, 0o777, target, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Symlink(ctx, target, name, out)
	})
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	dir, errno := n.selfID()
	if errno != 0 {
		return nil, errno
	}
	ch, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno != 0 {
		return nil, errno
	}
	id, errno := n.fsys.idAt(n.backing(name))
	if errno != 0 {
		return nil, errno
	}
	r.link(dir, join(n.rel(), name), name, id)
	return ch, 0
}

// removed logs the removal of dir/name done by rm (mu held).
func (n *node) removed(name string, rm func() syscall.Errno) syscall.Errno {
	r := n.fsys.rec
	dir, errno := n.selfID()
	if errno != 0 {
		return errno
	}
	id, errno := n.fsys.idAt(n.backing(name))
	if errno != 0 {
		return errno
	}
	if errno := rm(); errno != 0 {
		return errno
	}
	r.unlink(dir, join(n.rel(), name), name, id)
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fsys.rec.mu.Lock()
	defer n.fsys.rec.mu.Unlock()
	return n.removed(name, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fsys.rec.mu.Lock()
	defer n.fsys.rec.mu.Unlock()
	return n.removed(name, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	to, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	r := n.fsys.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	dir, errno := n.selfID()
	if errno != 0 {
		return errno
	}
	dir2, errno := to.selfID()
	if errno != 0 {
		return errno
	}
	id, errno := n.fsys.idAt(n.backing(name))
	if errno != 0 {
		return errno
	}
	var id2 ino
	if flags&unix.RENAME_EXCHANGE != 0 {
		if id2, errno = n.fsys.idAt(to.backing(newName)); errno != 0 {
			return errno
		}
	}
	if errno := n.LoopbackNode.Rename(ctx, name, to.LoopbackNode, newName, flags); errno != 0 {
		return errno
	}
	from, dest := join(n.rel(), name), join(to.rel(), newName)
	if flags&unix.RENAME_EXCHANGE != 0 {
		r.exchange(dir, from, name, dir2, dest, newName, id, id2)
	} else {
		r.rename(dir, from, name, dir2, dest, newName, id)
	}
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{inner: fh, node: n}, fuseFlags, 0
}

// dirHandle is an open directory: the loopback's stream, with its fsync
// taken as a persistence point.
type dirHandle struct {
	inner fs.FileHandle
	node  *node
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if rd, ok := d.inner.(fs.FileReaddirenter); ok {
		return rd.Readdirent(ctx)
	}
	return nil, syscall.ENOTSUP
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if sd, ok := d.inner.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if rd, ok := d.inner.(fs.FileReleasedirer); ok {
		rd.Releasedir(ctx, flags)
	}
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.node.Fsync(ctx, nil, flags)
}
