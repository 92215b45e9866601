package crashfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options configure a mount.
type Options struct {
	// SyncLatency makes every persistence point take this long before it
	// returns, as a disk's cache flush does, so that writers queue behind
	// it (group commit batches them). It orders nothing: the boundary is
	// logged when the request arrives.
	SyncLatency time.Duration
	// Debug logs every FUSE request and reply to stderr.
	Debug bool
}

// FS is a mounted crash-recording filesystem.
type FS struct {
	rec     *recorder
	backing string
	dir     string
	opts    Options
	server  *fuse.Server
}

// Available reports whether this process can mount a crashfs: nil, or an
// error wrapping ErrNoFUSE that names what is missing.
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: %s is not Linux", ErrNoFUSE, runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (mounting without fusermount needs CAP_SYS_ADMIN)", ErrNoFUSE)
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoFUSE, err)
	}
	return f.Close()
}

// New mounts a crashfs at mountpoint (an existing empty directory) over
// backing (an existing directory, on one filesystem, that nothing else
// changes while it is mounted). What backing holds at mount time is the
// durable state the log starts from.
//
// The process that mounts also serves the filesystem. A goroutine of the
// same process that faults on a mapped page of a file of the mount (bbolt
// reads through mmap) holds its Go scheduler slot (P) until the server
// answers the read, and the server needs a slot to answer: with every slot
// so held, the process deadlocks. Pages written through the mount stay
// cached (see node.go), so a file made on the mount faults only under
// memory pressure; files that were in backing before the mount fault on
// first read. New raises GOMAXPROCS to at least 4, and callers should keep
// fewer goroutines reading mapped files of the mount at once than that, or
// run the code under test in another process.
func New(backing, mountpoint string, opts Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBacking, err)
	}
	if st, err := os.Stat(backing); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory (%v)", ErrBacking, backing, err)
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("crashfs: mountpoint: %w", err)
	}
	if ents, err := os.ReadDir(mountpoint); err != nil {
		return nil, fmt.Errorf("crashfs: mountpoint: %w", err)
	} else if len(ents) > 0 {
		return nil, fmt.Errorf("%w: mountpoint %s", ErrNotEmpty, mountpoint)
	}
	f := &FS{rec: newRecorder(), backing: backing, dir: mountpoint, opts: opts}
	if err := f.scan(); err != nil {
		return nil, err
	}
	lr, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBacking, err)
	}
	ln := lr.(*gofs.LoopbackNode)
	root := &node{LoopbackNode: ln, fsys: f}
	ln.RootData.RootNode = root

	if runtime.GOMAXPROCS(0) < 4 {
		runtime.GOMAXPROCS(4)
	}
	timeout := time.Second
	server, err := gofs.Mount(mountpoint, root, &gofs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true, // no fusermount: mount(2) as root
			AllowOther:        true, // the test's helper processes may run as other users
			FsName:            "crashfs:" + backing,
			Name:              "crashfs",
			DisableXAttrs:     true,
			// Nothing changes the backing files but the mount: the
			// kernel need not drop cached pages when times change.
			ExplicitDataCacheControl: true,
			Debug:                    opts.Debug,
		},
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
	})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("%w: mount %s: %w", ErrNoFUSE, mountpoint, err)
		}
		return nil, fmt.Errorf("crashfs: mount %s: %w", mountpoint, err)
	}
	f.server = server
	return f, nil
}

// Mount mounts a crashfs over backing ("" for a fresh temporary directory)
// at a fresh temporary mountpoint, and unmounts it when the test ends. Where
// FUSE cannot be mounted it skips the test, saying what is missing.
func Mount(t testing.TB, backing string, opts Options) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping: crashfs needs FUSE (%v)", err)
	}
	if backing == "" {
		backing = t.TempDir()
	}
	f, err := New(backing, t.TempDir(), opts)
	if errors.Is(err, ErrNoFUSE) {
		t.Skipf("skipping: crashfs needs FUSE (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("crashfs: %v", err)
		}
	})
	return f
}

// Dir is the mountpoint: where the code under test reads and writes.
func (f *FS) Dir() string { return f.dir }

// Path joins elem onto the mountpoint.
func (f *FS) Path(elem ...string) string { return filepath.Join(append([]string{f.dir}, elem...)...) }

// Unmount unmounts the filesystem; the log stays, so CrashStates can still
// be asked for. A mount kept busy by an open file or a process inside it is
// detached lazily (so nothing stays mounted once they are gone) and ErrBusy
// is returned. Unmounting twice is a no-op.
func (f *FS) Unmount() error {
	if f.server == nil {
		return nil
	}
	server := f.server
	f.server = nil
	if err := server.Unmount(); err != nil {
		derr := syscall.Unmount(f.dir, syscall.MNT_DETACH)
		return fmt.Errorf("%w: %s: %w (lazy detach: %v)", ErrBusy, f.dir, err, derr)
	}
	server.Wait()
	return nil
}

// Mark logs a moment in the operation stream: call it right after an
// operation the test relies on was acknowledged (an append returned, a
// file write returned), then ask each crash state whether it came Before.
func (f *FS) Mark(label string) Mark { return f.rec.mark(label) }

// Boundaries returns the persistence points so far, in order.
func (f *FS) Boundaries() []Boundary { return f.rec.boundaries() }

// Ops returns every operation logged so far, in order.
func (f *FS) Ops() []Op { return f.rec.snapshot() }

// scan takes the backing directory's content as the initial durable state.
func (f *FS) scan() error {
	r := f.rec
	var st syscall.Stat_t
	if err := syscall.Lstat(f.backing, &st); err != nil {
		return fmt.Errorf("%w: %w", ErrBacking, err)
	}
	r.byBacking[backingOf(&st)] = rootIno
	r.initial.node(rootIno, kindDir).mode = st.Mode & 0o7777
	dirs := map[string]ino{f.backing: rootIno}
	return filepath.WalkDir(f.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBacking, err)
		}
		if p == f.backing {
			return nil
		}
		if err := syscall.Lstat(p, &st); err != nil {
			return fmt.Errorf("%w: %w", ErrBacking, err)
		}
		b := backingOf(&st)
		parent := r.initial.node(dirs[filepath.Dir(p)], kindDir)
		if id, ok := r.byBacking[b]; ok { // a hard link
			parent.entries[filepath.Base(p)] = id
			return nil
		}
		id := r.newIno(b)
		var k nodeKind
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			k = kindDir
			dirs[p] = id
		case syscall.S_IFREG:
			k = kindFile
		case syscall.S_IFLNK:
			k = kindSymlink
		case syscall.S_IFIFO:
			k = kindFifo
		case syscall.S_IFSOCK:
			k = kindSocket
		default:
			return fmt.Errorf("%w: %s is a device node (not modelled)", ErrBacking, p)
		}
		in := r.initial.node(id, k)
		in.mode = st.Mode & 0o7777
		parent.entries[filepath.Base(p)] = id
		switch k {
		case kindFile:
			src, err := os.Open(p)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBacking, err)
			}
			b, err := io.ReadAll(src)
			src.Close()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrBacking, err)
			}
			in.write(0, b)
		case kindSymlink:
			if in.target, err = os.Readlink(p); err != nil {
				return fmt.Errorf("%w: %w", ErrBacking, err)
			}
		}
		return nil
	})
}
