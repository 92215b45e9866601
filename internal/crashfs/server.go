package crashfs

import (
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The filesystem is served by a child process: the same binary, started by
// New with serveEnv set, which crashfs's init turns into the server before
// main (or TestMain) runs. It must not be the test's own process: a Go
// thread blocked in the kernel on a FUSE request the runtime does not know
// about (a page fault on a mapped file of the mount, as bbolt's reads are;
// a vfork child whose chdir or exec touches the mount) cannot be stopped
// for a garbage collection, and the stopped world then never serves the
// request it waits on. Seen here: a store test hung in a FUSE page fault,
// and an executor test hung in clone.

// serveEnv carries the server's configuration (JSON) to the child.
const serveEnv = "TETHER_CRASHFS_SERVE"

// controlFD is the child's end of the control socket (ExtraFiles[0]).
const controlFD = 3

func init() {
	if cfg := os.Getenv(serveEnv); cfg != "" {
		os.Exit(serveChild(cfg))
	}
}

// serverConfig is what New tells the child.
type serverConfig struct {
	Backing, Mountpoint string
	SyncLatency         time.Duration
	Debug               bool
}

// Control protocol: the child sends a hello (the initial image, or why it
// could not mount); then the parent sends requests and the child answers
// each, one at a time, over gob.
type hello struct {
	Err     string
	NoFUSE  bool
	Initial []wireNode
}

type request struct {
	Kind  string // "mark", "ops", "unmount"
	Label string // mark
	From  int    // ops, unmount: the ops the parent already has
}

type response struct {
	Mark Mark
	Ops  []wireOp
	Err  string // unmount: the mount was busy
}

type wireNode struct {
	Ino     uint64
	Kind    uint8
	Mode    uint32
	Data    []byte
	Target  string
	Entries map[string]uint64
}

type wireOp struct {
	Seq                    uint64
	Kind                   uint8
	Path, To, Label        string
	Off, Size              int64
	Len                    int
	Datasync               bool
	Node, Node2, Dir, Dir2 uint64
	Name, Name2            string
	Data                   []byte
	NodeKind               uint8
	Mode                   uint32
	Target                 string
}

func toWire(op *Op) wireOp {
	return wireOp{
		Seq: op.Seq, Kind: uint8(op.Kind), Path: op.Path, To: op.To, Label: op.Label,
		Off: op.Off, Size: op.Size, Len: op.Len, Datasync: op.Datasync,
		Node: uint64(op.node), Node2: uint64(op.node2), Dir: uint64(op.dir), Dir2: uint64(op.dir2),
		Name: op.name, Name2: op.name2, Data: op.data, NodeKind: uint8(op.kind), Mode: op.mode, Target: op.target,
	}
}

func fromWire(w *wireOp) Op {
	return Op{
		Seq: w.Seq, Kind: OpKind(w.Kind), Path: w.Path, To: w.To, Label: w.Label,
		Off: w.Off, Size: w.Size, Len: w.Len, Datasync: w.Datasync,
		node: ino(w.Node), node2: ino(w.Node2), dir: ino(w.Dir), dir2: ino(w.Dir2),
		name: w.Name, name2: w.Name2, data: w.Data, kind: nodeKind(w.NodeKind), mode: w.Mode, target: w.Target,
	}
}

func imageToWire(im *image) []wireNode {
	var out []wireNode
	for id, in := range im.nodes {
		w := wireNode{Ino: uint64(id), Kind: uint8(in.kind), Mode: in.mode, Target: in.target}
		if in.kind == kindFile {
			w.Data = in.content()
		}
		if in.entries != nil {
			w.Entries = map[string]uint64{}
			for name, c := range in.entries {
				w.Entries[name] = uint64(c)
			}
		}
		out = append(out, w)
	}
	return out
}

func imageFromWire(ws []wireNode) *image {
	im := newImage()
	for _, w := range ws {
		in := im.node(ino(w.Ino), nodeKind(w.Kind))
		in.mode, in.target = w.Mode, w.Target
		if len(w.Data) > 0 {
			in.write(0, w.Data)
		}
		for name, c := range w.Entries {
			in.entries[name] = ino(c)
		}
	}
	return im
}

// server is the child's filesystem: the log and the mount.
type server struct {
	rec     *recorder
	backing string
	opts    serverConfig
}

// serveChild is the child process: mount, answer the parent, unmount.
func serveChild(cfgJSON string) int {
	os.Unsetenv(serveEnv)
	ctl := os.NewFile(controlFD, "crashfs-control")
	enc, dec := gob.NewEncoder(ctl), gob.NewDecoder(ctl)
	var cfg serverConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		_ = enc.Encode(hello{Err: fmt.Sprintf("crashfs: bad server configuration: %v", err)})
		return 2
	}
	s := &server{rec: newRecorder(), backing: cfg.Backing, opts: cfg}
	fuseServer, err := s.mount(cfg.Mountpoint)
	if err != nil {
		_ = enc.Encode(hello{Err: err.Error(), NoFUSE: errors.Is(err, ErrNoFUSE)})
		return 1
	}
	if err := enc.Encode(hello{Initial: imageToWire(s.rec.initial)}); err != nil {
		s.unmount(fuseServer, cfg.Mountpoint)
		return 1
	}
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			// The parent is gone: leave no mount behind.
			s.unmount(fuseServer, cfg.Mountpoint)
			return 1
		}
		var resp response
		switch req.Kind {
		case "mark":
			resp.Mark = s.rec.mark(req.Label)
		case "ops":
			resp.Ops = s.opsFrom(req.From)
		case "unmount":
			if err := s.unmount(fuseServer, cfg.Mountpoint); err != nil {
				resp.Err = err.Error()
			}
			resp.Ops = s.opsFrom(req.From)
			_ = enc.Encode(resp)
			return 0
		default:
			resp.Err = fmt.Sprintf("crashfs: unknown request %q", req.Kind)
		}
		if err := enc.Encode(resp); err != nil {
			s.unmount(fuseServer, cfg.Mountpoint)
			return 1
		}
	}
}

func (s *server) opsFrom(from int) []wireOp {
	ops := s.rec.snapshot()
	var out []wireOp
	for i := from; i < len(ops); i++ {
		out = append(out, toWire(&ops[i]))
	}
	return out
}

func (s *server) mount(mountpoint string) (*fuse.Server, error) {
	if err := s.scan(); err != nil {
		return nil, err
	}
	lr, err := gofs.NewLoopbackRoot(s.backing)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBacking, err)
	}
	ln := lr.(*gofs.LoopbackNode)
	root := &node{LoopbackNode: ln, fsys: s}
	ln.RootData.RootNode = root
	timeout := time.Second
	fuseServer, err := gofs.Mount(mountpoint, root, &gofs.Options{
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true, // no fusermount: mount(2) as root
			AllowOther:        true, // the test's helper processes may run as other users
			FsName:            "crashfs:" + s.backing,
			Name:              "crashfs",
			DisableXAttrs:     true,
			// Nothing changes the backing files but the mount: the
			// kernel need not drop cached pages when times change.
			ExplicitDataCacheControl: true,
			Debug:                    s.opts.Debug,
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
	return fuseServer, nil
}

// unmount unmounts, or detaches a busy mount lazily and stops serving it
// (its open files then fail with ENOTCONN rather than hang).
func (s *server) unmount(fuseServer *fuse.Server, mountpoint string) error {
	if err := fuseServer.Unmount(); err != nil {
		derr := syscall.Unmount(mountpoint, syscall.MNT_DETACH)
		return fmt.Errorf("%w: %s: %w (detached lazily: %v)", ErrBusy, mountpoint, err, derr)
	}
	fuseServer.Wait()
	return nil
}

// scan takes the backing directory's content as the initial durable state.
func (s *server) scan() error {
	r := s.rec
	var st syscall.Stat_t
	if err := syscall.Lstat(s.backing, &st); err != nil {
		return fmt.Errorf("%w: %w", ErrBacking, err)
	}
	r.byBacking[backingOf(&st)] = rootIno
	r.initial.node(rootIno, kindDir).mode = st.Mode & 0o7777
	dirs := map[string]ino{s.backing: rootIno}
	return filepath.WalkDir(s.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBacking, err)
		}
		if p == s.backing {
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
