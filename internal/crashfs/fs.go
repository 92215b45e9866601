package crashfs

import (
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// FS is a mounted crash-recording filesystem, served by a child process
// (see server.go) that keeps the operation log.
type FS struct {
	dir, backing string
	cmd          *exec.Cmd

	mu      sync.Mutex // one request at a time; guards the fields below
	ctl     *os.File
	enc     *gob.Encoder
	dec     *gob.Decoder
	initial *image
	ops     []Op // the log as far as fetched
	mounted bool
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
// The filesystem is served by a child process, this binary re-executed:
// crashfs's init makes it the server before main runs, so any binary that
// imports crashfs can mount one.
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
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("crashfs: the server binary: %w", err)
	}
	cfg, err := json.Marshal(serverConfig{Backing: backing, Mountpoint: mountpoint, SyncLatency: opts.SyncLatency, Debug: opts.Debug})
	if err != nil {
		return nil, fmt.Errorf("crashfs: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("crashfs: control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "crashfs-control"), os.NewFile(uintptr(fds[1]), "crashfs-control")
	cmd := exec.Command(self, "crashfs-server")
	cmd.Env = append(os.Environ(), serveEnv+"="+string(cfg),
		// A -race binary sleeps a second at exit unless told not to.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.ExtraFiles = []*os.File{theirs} // fd 3: controlFD
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// No Pdeathsig (it follows the forking thread, not the process): if
	// this process dies, the server reads EOF on the control socket and
	// unmounts.
	if err := cmd.Start(); err != nil {
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("crashfs: start the server: %w", err)
	}
	theirs.Close()
	f := &FS{dir: mountpoint, backing: backing, cmd: cmd, ctl: ours, enc: gob.NewEncoder(ours), dec: gob.NewDecoder(ours)}
	var h hello
	if err := f.dec.Decode(&h); err != nil {
		f.stop()
		return nil, fmt.Errorf("crashfs: the server died before mounting: %w", err)
	}
	if h.Err != "" {
		f.stop()
		if h.NoFUSE {
			return nil, fmt.Errorf("%w: %s", ErrNoFUSE, h.Err)
		}
		return nil, errors.New(h.Err)
	}
	f.initial = imageFromWire(h.Initial)
	f.mounted = true
	return f, nil
}

// stop ends the server process (mu held or f not yet shared).
func (f *FS) stop() {
	f.ctl.Close()
	_ = f.cmd.Wait()
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

// call sends one request and reads its answer (mu held).
func (f *FS) call(req request) (response, error) {
	var resp response
	if !f.mounted {
		return resp, fmt.Errorf("crashfs: %s: not mounted", f.dir)
	}
	if err := f.enc.Encode(req); err != nil {
		return resp, fmt.Errorf("crashfs: the server of %s: %w", f.dir, err)
	}
	if err := f.dec.Decode(&resp); err != nil {
		return resp, fmt.Errorf("crashfs: the server of %s: %w", f.dir, err)
	}
	return resp, nil
}

func (f *FS) take(ws []wireOp) {
	for i := range ws {
		f.ops = append(f.ops, fromWire(&ws[i]))
	}
}

// Unmount unmounts the filesystem and stops its server; the log stays, so
// CrashStates can still be asked for. A mount kept busy by an open file or
// a process inside it is detached lazily and stops being served (what is
// still open there fails with ENOTCONN), and ErrBusy is returned.
// Unmounting twice is a no-op.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return nil
	}
	resp, err := f.call(request{Kind: "unmount", From: len(f.ops)})
	f.mounted = false
	f.stop()
	if err != nil {
		return err
	}
	f.take(resp.Ops)
	if resp.Err != "" {
		return fmt.Errorf("%w: %s", ErrBusy, resp.Err)
	}
	return nil
}

// Mark logs a moment in the operation stream: call it right after an
// operation the test relies on was acknowledged (an append returned, a
// file write returned), then ask each crash state whether it came Before.
// It panics if the filesystem is no longer mounted or its server died: a
// mark that cannot be placed would make every check after it meaningless.
func (f *FS) Mark(label string) Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp, err := f.call(request{Kind: "mark", Label: label})
	if err != nil {
		panic(fmt.Sprintf("crashfs: Mark(%q): %v", label, err))
	}
	return resp.Mark
}

// Ops returns every operation logged so far, in order. Like Mark, it
// panics if the server died while mounted: a partial log would hide crash
// states.
func (f *FS) Ops() []Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mounted {
		resp, err := f.call(request{Kind: "ops", From: len(f.ops)})
		if err != nil {
			panic(fmt.Sprintf("crashfs: Ops: %v", err))
		}
		f.take(resp.Ops)
	}
	return append([]Op(nil), f.ops...)
}

// Boundaries returns the persistence points so far, in order.
func (f *FS) Boundaries() []Boundary {
	var bs []Boundary
	for _, op := range f.Ops() {
		if op.Kind.Boundary() {
			bs = append(bs, Boundary{Index: len(bs) + 1, Op: op})
		}
	}
	return bs
}
