package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// logFiles returns the stream's log files on disk (the live file and the
// rotated ones, not the hidden bookkeeping) with their sizes.
func logFiles(t testing.TB, dir, name string) map[string]int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := stream{dir: dir, name: name}
	files := map[string]int64{}
	for _, e := range ents {
		if _, ok := s.index(e.Name()); !ok && e.Name() != name {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted meanwhile
		}
		files[e.Name()] = fi.Size()
	}
	return files
}

func openWriter(t testing.TB, dir string, cfg Config) *Writer {
	t.Helper()
	w, err := Open(dir, "stdout.log", cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustWrite(t testing.TB, w *Writer, p []byte) {
	t.Helper()
	if n, err := w.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t testing.TB, dir string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := ReadAll(dir, "stdout.log", &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestConfig_Validate(t *testing.T) {
	testproc.Parallel(t)
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{DefaultConfig(), ""},
		{Config{MaxFiles: 1, MaxFileSizeMB: 1}, ""},
		{Config{Disabled: true}, ""},
		{Config{MaxFiles: 0, MaxFileSizeMB: 10}, "max_files = 0"},
		{Config{MaxFiles: -3, MaxFileSizeMB: 10}, "max_files = -3"},
		{Config{MaxFiles: 10, MaxFileSizeMB: 0}, "max_file_size = 0"},
		{Config{MaxFiles: 10, MaxFileSizeMB: 2 << 20}, "1 TiB"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want ErrInvalidConfig naming %q", tc.cfg, err, tc.want)
		}
	}
	if d := DefaultConfig(); d.MaxFiles != 10 || d.MaxFileSizeMB != 10 || d.Disabled {
		t.Errorf("DefaultConfig() = %+v, want Nomad's 10 files of 10 MB", d)
	}
	if _, err := Open(t.TempDir(), "stdout.log", Config{}, Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Open with a zero Config: %v, want ErrInvalidConfig", err)
	}
	for _, name := range []string{"", "..", "a/b", ".hidden"} {
		if _, err := Open(t.TempDir(), name, DefaultConfig(), Options{}); !errors.Is(err, ErrBadName) {
			t.Errorf("Open(%q): %v, want ErrBadName", name, err)
		}
	}
}

// TestWriter_RotationBoundary pins where a write that does not fit is
// cut: after its last newline that fits; else it goes whole into a fresh
// file; else (larger than a file, no newline) at max_file_size exactly.
func TestWriter_RotationBoundary(t *testing.T) {
	testproc.Parallel(t)
	line := func(c byte, n int) []byte { return append(bytes.Repeat([]byte{c}, n-1), '\n') }
	prefill := line('x', MB-50)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name   string
		writes [][]byte
		want   map[string][]byte
	}{
		{
			name:   "cut after the last newline that fits",
			writes: [][]byte{prefill, cat(line('a', 20), line('b', 25), line('c', 100))},
			want: map[string][]byte{
				"stdout.log.1": cat(prefill, line('a', 20), line('b', 25)),
				"stdout.log":   line('c', 100),
			},
		},
		{
			name:   "no newline fits: the write goes whole into a fresh file",
			writes: [][]byte{prefill, bytes.Repeat([]byte{'d'}, 100)},
			want: map[string][]byte{
				"stdout.log.1": prefill,
				"stdout.log":   bytes.Repeat([]byte{'d'}, 100),
			},
		},
		{
			name:   "a write that fills the file exactly stays; the next rotates",
			writes: [][]byte{prefill, bytes.Repeat([]byte{'e'}, 50), []byte("f\n")},
			want: map[string][]byte{
				"stdout.log.1": cat(prefill, bytes.Repeat([]byte{'e'}, 50)),
				"stdout.log":   []byte("f\n"),
			},
		},
		{
			name:   "larger than a file without a newline: cut at max_file_size",
			writes: [][]byte{bytes.Repeat([]byte{'g'}, MB+10)},
			want: map[string][]byte{
				"stdout.log.1": bytes.Repeat([]byte{'g'}, MB),
				"stdout.log":   bytes.Repeat([]byte{'g'}, 10),
			},
		},
		{
			name:   "larger than a file with newlines: cut after the last one that fits",
			writes: [][]byte{cat(line('h', 1000), bytes.Repeat([]byte{'i'}, MB))},
			want: map[string][]byte{
				"stdout.log.1": line('h', 1000),
				"stdout.log":   bytes.Repeat([]byte{'i'}, MB),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
			var all []byte
			for _, p := range tc.writes {
				mustWrite(t, w, p)
				all = append(all, p...)
			}
			got := logFiles(t, dir, "stdout.log")
			if len(got) != len(tc.want) {
				t.Fatalf("files %v, want %d files", got, len(tc.want))
			}
			for name, want := range tc.want {
				if b := readFile(t, filepath.Join(dir, name)); !bytes.Equal(b, want) {
					t.Errorf("%s: %d bytes, want %d", name, len(b), len(want))
				}
			}
			if b := readAll(t, dir); !bytes.Equal(b, all) {
				t.Errorf("ReadAll: %d bytes, want the %d written", len(b), len(all))
			}
		})
	}
}

// progress is a writer that checks what it gets against want, in order,
// and publishes how far it got.
type progress struct {
	want []byte
	mu   sync.Mutex
	off  int
	err  error
	got  atomic.Int64
	tick chan struct{}
}

func newProgress(want []byte) *progress {
	return &progress{want: want, tick: make(chan struct{}, 1)}
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		switch end := p.off + len(b); {
		case end > len(p.want):
			p.err = fmt.Errorf("got %d bytes past the %d written", end-len(p.want), len(p.want))
		case !bytes.Equal(b, p.want[p.off:end]):
			i := 0
			for i < len(b) && b[i] == p.want[p.off+i] {
				i++
			}
			p.err = fmt.Errorf("byte %d differs: got %q, want %q", p.off+i, clip(b[i:]), clip(p.want[p.off+i:]))
		}
	}
	p.off += len(b)
	p.got.Store(int64(p.off))
	select {
	case p.tick <- struct{}{}:
	default:
	}
	return len(b), nil
}

// waitFor waits until the follower has copied n bytes; a follower that
// returns first fails the test.
func (p *progress) waitFor(t *testing.T, n int, followed chan error) {
	t.Helper()
	for p.got.Load() < int64(n) {
		select {
		case <-p.tick:
		case err := <-followed:
			t.Fatalf("the follower returned after %d of %d bytes: %v", p.got.Load(), n, err)
		}
	}
}

func clip(b []byte) []byte { return b[:min(len(b), 40)] }

func (p *progress) result() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.off, p.err
}

// TestWriter_FastWriterWithFollower writes many MB through 1 MB files in
// random chunks while a follower reads: the follower's output is what was
// written, byte for byte, and after every write the stream has at most
// max_files files of at most max_file_size bytes each. With -long it
// writes four times as much.
func TestWriter_FastWriterWithFollower(t *testing.T) {
	testproc.Parallel(t)
	const maxFiles = 4
	total := 6 * MB // six rotations, past max_files
	if testproc.Long() {
		total = 24 * MB
	}
	data, _ := linesOf(0, total)
	dir := t.TempDir()
	// The directory's names as inotify reports them, in order: the most
	// log files there ever were at once (a listing is no snapshot).
	most := watchNames(t, dir, "stdout.log")
	w := openWriter(t, dir, Config{MaxFiles: maxFiles, MaxFileSizeMB: 1})

	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := newProgress(data)
	ctx, cancel := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() { followed <- Follow(ctx, c, seen) }()

	// The follower must stay within the retained files to get everything
	// (falling further behind is TestCursor_GapReported): the writer waits
	// for it when it lags by two files.
	const lag = (maxFiles - 2) * MB
	rng := rand.New(rand.NewPCG(1, 2))
	maxSeen := 0
	for off := 0; off < len(data); {
		for int64(off)-seen.got.Load() > lag {
			select {
			case <-seen.tick:
			case err := <-followed:
				t.Fatalf("follower stopped: %v", err)
			}
		}
		n := min(1+rng.IntN(64<<10), len(data)-off)
		mustWrite(t, w, data[off:off+n])
		off += n
		files := logFiles(t, dir, "stdout.log")
		maxSeen = max(maxSeen, len(files))
		if len(files) > maxFiles {
			t.Fatalf("after %d bytes: %d files on disk, want at most %d: %v", off, len(files), maxFiles, files)
		}
		for name, size := range files {
			if size > MB {
				t.Fatalf("after %d bytes: %s has %d bytes, more than max_file_size (%d)", off, name, size, MB)
			}
		}
	}
	if n, names, err := most(); err != nil {
		t.Errorf("watching the directory: %v", err)
	} else if n > maxFiles {
		t.Errorf("%d log files at once during a rotation, want at most %d: %v", n, maxFiles, names)
	}
	cancel()
	if err := <-followed; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	got, err := seen.result()
	if err != nil {
		t.Fatalf("follower: %v", err)
	}
	if got != len(data) {
		t.Fatalf("follower got %d bytes, want %d", got, len(data))
	}
	st := w.Stats()
	if st.Written != uint64(len(data)) || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want %d written and none dropped", st, len(data))
	}
	if min := uint64(len(data)/MB) - 1; st.Rotations < min {
		t.Errorf("%d rotations, want at least %d", st.Rotations, min)
	}
	if maxSeen != maxFiles {
		t.Errorf("at most %d files were ever on disk, want max_files (%d) to be reached", maxSeen, maxFiles)
	}
	// What is retained is the tail of what was written.
	kept := readAll(t, dir)
	if !bytes.HasSuffix(data, kept) || len(kept) < (maxFiles-1)*MB/2 {
		t.Errorf("retained %d bytes, not a tail of what was written", len(kept))
	}
}

func TestWriter_ReopenContinuesIndex(t *testing.T) {
	testproc.Parallel(t)
	for _, maxFiles := range []int{1, 3, 10} {
		t.Run(fmt.Sprintf("max_files=%d", maxFiles), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{MaxFiles: maxFiles, MaxFileSizeMB: 1}
			first, n := linesOf(0, 3*MB+MB/2)
			w := openWriter(t, dir, cfg)
			mustWrite(t, w, first)
			before := w.Stats()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if before.Index != 4 {
				t.Fatalf("after 3.5 MB the live file has index %d, want 4", before.Index)
			}
			// The executor restarts: a new Writer on the same directory.
			w2 := openWriter(t, dir, cfg)
			if got := w2.Stats().Index; got != before.Index {
				t.Fatalf("reopened at index %d, want %d", got, before.Index)
			}
			second, _ := linesOf(n, MB)
			mustWrite(t, w2, second)
			if got := w2.Stats().Index; got != 5 {
				t.Fatalf("after one more rotation the index is %d, want 5", got)
			}
			if _, err := os.Stat(filepath.Join(dir, "stdout.log.4")); maxFiles > 1 && err != nil {
				t.Errorf("the rotation after the restart did not make stdout.log.4: %v", err)
			}
			files := logFiles(t, dir, "stdout.log")
			if len(files) > maxFiles {
				t.Errorf("%d files, want at most %d: %v", len(files), maxFiles, files)
			}
			all := append(append([]byte{}, first...), second...)
			if kept := readAll(t, dir); !bytes.HasSuffix(all, kept) || len(kept) == 0 {
				t.Errorf("retained %d bytes, not a tail of what was written", len(kept))
			}
		})
	}
}

// TestWriter_ReopenAfterInterruptedRotation lays out what a crash at each
// step of a rotation leaves, and checks that Open carries on from it with
// nothing lost, nothing doubled and the index right.
func TestWriter_ReopenAfterInterruptedRotation(t *testing.T) {
	testproc.Parallel(t)
	live, old := []byte("live line\n"), []byte("old line\n")
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, s stream)
		wantIdx uint64
		want    []byte // ReadAll afterwards
	}{
		{
			name: "after the link, before the rename",
			setup: func(t *testing.T, s stream) {
				writeTestFile(t, s.rotated(2), old)
				writeTestFile(t, s.live(), live)
				setMarker(t, s, 3, s.live())
				if err := os.Link(s.live(), s.rotated(3)); err != nil {
					t.Fatal(err)
				}
				writeTestFile(t, s.next(), nil)
			},
			wantIdx: 3,
			want:    append(append([]byte{}, old...), live...),
		},
		{
			name: "after the rename, before the marker",
			setup: func(t *testing.T, s stream) {
				writeTestFile(t, s.rotated(3), old)
				setMarker(t, s, 3, s.rotated(3))
				writeTestFile(t, s.live(), live)
			},
			wantIdx: 4,
			want:    append(append([]byte{}, old...), live...),
		},
		{
			name: "between the two renames of a rotation without hard links",
			setup: func(t *testing.T, s stream) {
				writeTestFile(t, s.rotated(3), old)
				setMarker(t, s, 3, s.rotated(3))
				writeTestFile(t, s.next(), nil)
			},
			wantIdx: 4,
			want:    old,
		},
		{
			name: "no marker: an older tether's single file",
			setup: func(t *testing.T, s stream) {
				writeTestFile(t, s.live(), live)
			},
			wantIdx: 1,
			want:    live,
		},
		{
			name: "a marker that is not ours",
			setup: func(t *testing.T, s stream) {
				writeTestFile(t, s.rotated(7), old)
				writeTestFile(t, s.live(), live)
				if err := os.Symlink("garbage", s.marker()); err != nil {
					t.Fatal(err)
				}
			},
			wantIdx: 8,
			want:    append(append([]byte{}, old...), live...),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := stream{dir: dir, name: "stdout.log"}
			tc.setup(t, s)
			w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
			if got := w.Stats().Index; got != tc.wantIdx {
				t.Errorf("index %d, want %d", got, tc.wantIdx)
			}
			if got := readAll(t, dir); !bytes.Equal(got, tc.want) {
				t.Errorf("ReadAll = %q, want %q", got, tc.want)
			}
			if _, err := os.Lstat(s.next()); !os.IsNotExist(err) {
				t.Errorf("the next file %s is left over: %v", s.next(), err)
			}
			m, ok := s.readMarker()
			fi, err := os.Stat(s.live())
			if err != nil {
				t.Fatal(err)
			}
			if !ok || m.index != tc.wantIdx || m.ino != inoOf(fi) {
				t.Errorf("marker %v (ok %v), want %d:%d", m, ok, tc.wantIdx, inoOf(fi))
			}
			// And it rotates on from there.
			mustWrite(t, w, bytes.Repeat([]byte("z\n"), MB/2+1))
			if _, err := os.Stat(s.rotated(tc.wantIdx)); err != nil {
				t.Errorf("the next rotation did not make %s: %v", s.rotatedName(tc.wantIdx), err)
			}
		})
	}
}

func writeTestFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func setMarker(t *testing.T, s stream, idx uint64, of string) {
	t.Helper()
	fi, err := os.Stat(of)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.writeMarker(mark{index: idx, ino: inoOf(fi)}, owner{}); err != nil {
		t.Fatal(err)
	}
}

func TestWriter_ShrunkMaxFilesDeletesOnOpen(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	data, _ := linesOf(0, 5*MB+10)
	w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
	mustWrite(t, w, data)
	w.Close()
	if n := len(logFiles(t, dir, "stdout.log")); n != 6 {
		t.Fatalf("%d files, want 6", n)
	}
	openWriter(t, dir, Config{MaxFiles: 2, MaxFileSizeMB: 1})
	files := logFiles(t, dir, "stdout.log")
	if _, ok := files["stdout.log.5"]; len(files) != 2 || !ok {
		t.Errorf("after reopening with max_files = 2: %v, want stdout.log and stdout.log.5", files)
	}
}

func TestWriter_Disabled(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{Disabled: true})
	mustWrite(t, w, []byte("gone\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("a disabled writer left %d entries in its directory", len(ents))
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
}

func TestWriter_RefusesWhatIsNotItsFile(t *testing.T) {
	testproc.Parallel(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"symlink", func(t *testing.T, dir string) {
			secret := filepath.Join(t.TempDir(), "secret")
			writeTestFile(t, secret, []byte("secret\n"))
			if err := os.Symlink(secret, filepath.Join(dir, "stdout.log")); err != nil {
				t.Fatal(err)
			}
		}},
		{"hard link", func(t *testing.T, dir string) {
			other := filepath.Join(dir, "other")
			writeTestFile(t, other, nil)
			if err := os.Link(other, filepath.Join(dir, "stdout.log")); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, dir string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "stdout.log"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "stdout.log"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			if w, err := Open(dir, "stdout.log", DefaultConfig(), Options{}); !errors.Is(err, ErrNotRegular) {
				if w != nil {
					w.Close()
				}
				t.Fatalf("Open: %v, want ErrNotRegular", err)
			}
		})
	}
	// Readers refuse a symlink planted as a rotated file.
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	writeTestFile(t, secret, []byte("secret\n"))
	if err := os.Symlink(secret, filepath.Join(dir, "stdout.log.1")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := ReadAll(dir, "stdout.log", &b); !errors.Is(err, ErrNotRegular) || b.Len() != 0 {
		t.Errorf("ReadAll through a planted symlink: %q, %v; want nothing and ErrNotRegular", b.String(), err)
	}
}

func TestWriter_FileModesAndOwner(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	opts := Options{}
	if os.Geteuid() == 0 {
		opts = Options{Chown: true, UID: 65534, GID: 65534}
	}
	w, err := Open(dir, "stdout.log", Config{MaxFiles: 3, MaxFileSizeMB: 1}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	data, _ := linesOf(0, 2*MB+1)
	mustWrite(t, w, data)
	files := logFiles(t, dir, "stdout.log")
	if len(files) != 3 {
		t.Fatalf("files %v, want 3", files)
	}
	names := []string{".stdout.log.live"}
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
		if st := statOf(fi); opts.Chown && (int(st.Uid) != opts.UID || int(st.Gid) != opts.GID) {
			t.Errorf("%s is owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, opts.UID, opts.GID)
		}
	}
	if !opts.Chown {
		t.Log("not root: ownership by the task's user not checked (needs CAP_CHOWN)")
	}
}

// watchNames follows the log files of stream name in dir through inotify
// events, which come in the order of the changes, and returns a function
// that stops watching and reports the most there ever were at once.
func watchNames(t *testing.T, dir, name string) func() (int, []string, error) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("needs inotify to watch the directory: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	s := stream{dir: dir, name: name}
	var (
		most      int
		mostNames []string
		werr      error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		live := map[string]bool{}
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
					werr = errors.New("the inotify queue overflowed")
					continue
				}
				entry := string(bytes.TrimRight(raw, "\x00"))
				if _, ok := s.index(entry); !ok && entry != name {
					continue
				}
				switch {
				case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
					live[entry] = true
				case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
					delete(live, entry)
				}
				if len(live) > most {
					most, mostNames = len(live), slices.Sorted(maps.Keys(live))
				}
			}
		}
	}()
	return func() (int, []string, error) {
		f.Close()
		<-done
		return most, mostNames, werr
	}
}
