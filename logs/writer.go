package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Options are the writer's settings that do not come from the task file.
type Options struct {
	// Chown makes the files the writer creates owned by UID:GID (the
	// task's user); otherwise they belong to the writing process.
	Chown    bool
	UID, GID int
	// Logger receives warnings about dropped output and failed rotations;
	// nil discards them.
	Logger hclog.Logger
	// Untimed keeps no times: no sidecar records when each line was read
	// (see times.go). For a benchmark's comparison; every task keeps them.
	Untimed bool
}

// Stats counts what a Writer did with its input.
type Stats struct {
	Written   uint64 // bytes of output written to the files (notes excluded)
	Dropped   uint64 // bytes of output dropped because a write failed (a full disk)
	Rotations uint64 // rotations done by this Writer
	Index     uint64 // the index the live file gets when it is rotated
}

// Writer is the rotating writer of one stream. Write never fails for an
// I/O error: output that cannot be written is dropped and counted, and a
// note saying how much was dropped is written once writing works again.
// It is safe for concurrent use.
type Writer struct {
	s   stream
	cfg Config
	max int64
	own owner
	log hclog.Logger

	mu       sync.Mutex
	f        *os.File // the live file
	ino      uint64   // its inode
	idx      uint64   // its index
	oldest   uint64   // the lowest rotated index that may be on disk; 0 for none
	size     int64    // its size
	lineEnd  bool     // the stream's last byte ends a line (or there is none)
	markerOK bool     // the marker names the live file
	pending  uint64   // bytes dropped since the last note
	dropErr  error    // why the drops since the last note began
	closed   bool
	untimed  bool     // keep no times (Options.Untimed)
	times    *stamper // the live file's times; nil when none are kept
	now      func() time.Time

	written, dropped, rotations, index atomic.Uint64
}

var _ io.WriteCloser = (*Writer)(nil)

// Open opens the stream name in dir for writing, continuing an existing
// stream where a previous Writer left it: the live file is appended to,
// rotation continues from the highest index on disk, and a rotation that a
// crash cut short is undone. The directory must exist.
func Open(dir, name string, cfg Config, opts Options) (*Writer, error) {
	s, err := newStream(dir, name)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Writer{s: s, cfg: cfg, max: maxFileSize(cfg), log: opts.Logger, lineEnd: true, untimed: opts.Untimed, now: time.Now}
	if w.log == nil {
		w.log = hclog.NewNullLogger()
	}
	if opts.Chown {
		w.own = owner{set: true, uid: opts.UID, gid: opts.GID}
	}
	if cfg.Disabled {
		return w, nil
	}
	if err := w.reopen(); err != nil {
		return nil, err
	}
	return w, nil
}

// reopen finds the stream's state on disk and opens the live file.
func (w *Writer) reopen() error {
	rot, err := w.s.listRotated()
	if err != nil {
		return fmt.Errorf("logs: opening %s in %s: %w", w.s.name, w.s.dir, err)
	}
	// A next file that a crash left never became live, and a marker's
	// temporary never replaced the marker.
	for _, p := range []string{w.s.next(), w.s.markerNew()} {
		if err := os.Remove(p); err != nil && !isNotExist(err) {
			return fmt.Errorf("logs: removing %s: %w", p, err)
		}
	}
	f, created, err := openForAppend(w.s.live())
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	ino := inoOf(fi)
	// A rotation cut short between its link and its rename left the live
	// file under a rotated name too: undo the link.
	kept := rot[:0]
	for _, i := range rot {
		if rfi, err := os.Lstat(w.s.rotated(i)); err == nil && inoOf(rfi) == ino {
			if err := os.Remove(w.s.rotated(i)); err != nil {
				return fmt.Errorf("logs: undoing an interrupted rotation: %w", err)
			}
			continue
		}
		kept = append(kept, i)
	}
	rot = kept
	if fi, err = f.Stat(); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	if n := statOf(fi).Nlink; n > 1 {
		return fmt.Errorf("%w: %s has %d hard links; remove the other names so that the log is written to a file of its own",
			ErrNotRegular, w.s.live(), n)
	}
	var high uint64
	if len(rot) > 0 {
		high = rot[len(rot)-1]
	}
	idx := high + 1
	m, found := w.s.readMarker()
	if found {
		idx = m.index
		if m.ino != ino {
			idx = m.index + 1 // the marker lags the live file by one rotation
		}
		idx = max(idx, high+1)
	}
	if w.own.set {
		if err := f.Chown(w.own.uid, w.own.gid); err != nil {
			return fmt.Errorf("logs: giving %s to %d:%d: %w", w.s.live(), w.own.uid, w.own.gid, err)
		}
	}
	if created {
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
	}
	w.f, w.ino, w.idx, w.size = f, ino, idx, fi.Size()
	w.index.Store(idx)
	w.lineEnd = w.endsLine(rot)
	want := mark{index: idx, ino: ino}
	w.markerOK = found && m == want
	if !w.markerOK {
		if err := w.s.writeMarker(want, w.own); err != nil {
			w.log.Warn("cannot write the rotation marker of "+w.s.name+"; rotation waits until it can", "err", err)
		} else {
			w.markerOK = true
		}
	}
	// Delete what is beyond max_files now (the limit may have shrunk).
	limit := int64(idx) - int64(w.cfg.MaxFiles)
	timed := map[uint64]bool{idx: true} // the files whose times are kept
	for _, i := range rot {
		if int64(i) > limit {
			if w.oldest == 0 {
				w.oldest = i
			}
			timed[i] = true
			continue
		}
		w.remove(i)
	}
	if !w.untimed {
		w.removeStrayTimes(timed)
		st, err := openStamper(w.s, idx, created, w.own)
		if err != nil {
			w.log.Warn("cannot keep the times of "+w.s.name+"; its lines have none", "err", err)
		}
		w.times = st
	}
	ok = true
	return nil
}

// remove deletes rotated file i and its times.
func (w *Writer) remove(i uint64) {
	if err := os.Remove(w.s.rotated(i)); err != nil && !isNotExist(err) {
		w.log.Warn("cannot delete "+w.s.rotatedName(i), "err", err)
	}
	if err := os.Remove(w.s.times(i)); err != nil && !isNotExist(err) {
		w.log.Warn("cannot delete "+w.s.timesName(i), "err", err)
	}
}

// removeStrayTimes deletes the times of files that are gone (a crash
// between a file's deletion and its times').
func (w *Writer) removeStrayTimes(kept map[uint64]bool) {
	d, err := os.Open(w.s.dir)
	if err != nil {
		return
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return
	}
	prefix := "." + w.s.name + "."
	for _, n := range names {
		digits, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		digits, ok = strings.CutSuffix(digits, ".time")
		if !ok {
			continue
		}
		if i, err := strconv.ParseUint(digits, 10, 64); err == nil && !kept[i] {
			if err := os.Remove(w.s.dir + "/" + n); err != nil && !isNotExist(err) {
				w.log.Warn("cannot delete "+n, "err", err)
			}
		}
	}
}

// endsLine reports whether the stream's last byte on disk ends a line.
func (w *Writer) endsLine(rot []uint64) bool {
	last := func(f *os.File, size int64) bool {
		if size == 0 {
			return true
		}
		var b [1]byte
		if _, err := f.ReadAt(b[:], size-1); err != nil {
			return true
		}
		return b[0] == '\n'
	}
	if w.size > 0 {
		r, err := os.Open(w.s.live())
		if err != nil {
			return true
		}
		defer r.Close()
		return last(r, w.size)
	}
	if len(rot) == 0 || rot[len(rot)-1] != w.idx-1 {
		return true
	}
	r, fi, err := openForRead(w.s.rotated(w.idx - 1))
	if err != nil {
		return true
	}
	defer r.Close()
	return last(r, fi.Size())
}

// openForAppend opens (creating it if need be) a log file to append to,
// refusing a symlink, a FIFO or anything else but a regular file.
func openForAppend(path string) (f *os.File, created bool, err error) {
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	created = err == nil
	if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(path, flags, 0)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EISDIR) {
			return nil, false, fmt.Errorf("%w: %s is a symlink, a FIFO or a directory; remove it so that the log can be written there", ErrNotRegular, path)
		}
		return nil, false, fmt.Errorf("logs: opening %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	return regularFile(fd, path, created)
}

// regularFile checks that fd is a regular file and makes it blocking.
func regularFile(fd int, path string, created bool) (*os.File, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, false, fmt.Errorf("logs: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = unix.Close(fd)
		return nil, false, fmt.Errorf("%w: %s is not a regular file; remove it so that the log can be written there", ErrNotRegular, path)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, false, fmt.Errorf("logs: %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), created, nil
}

// Write writes p to the stream, rotating as needed. It returns len(p) and
// a nil error unless the Writer is closed: output that cannot be written
// (a full disk) is dropped and counted in Stats. A write that fits in the
// live file is never split; one that does not is cut after its last
// newline that fits, or, if none does, written whole into a fresh file
// (split at max_file_size only when it is larger than that).
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, ErrClosed
	}
	if w.cfg.Disabled || len(p) == 0 {
		return len(p), nil
	}
	now := w.now() // when the copier read p: its lines' time
	if w.pending > 0 && !w.writeNote(now) {
		w.drop(uint64(len(p)), nil)
		return len(p), nil
	}
	n, err := w.emit(p, now)
	w.written.Add(uint64(n))
	if err != nil {
		w.drop(uint64(len(p)-n), err)
	}
	return len(p), nil
}

// emit writes p, read at now, rotating at the bound, and stops at the
// first failure.
func (w *Writer) emit(p []byte, now time.Time) (int, error) {
	total := 0
	for len(p) > 0 {
		room := max(w.max-w.size, 0)
		cut := len(p)
		if int64(len(p)) > room {
			cut = -1
			if room > 0 {
				if i := bytes.LastIndexByte(p[:room], '\n'); i >= 0 {
					cut = i + 1
				}
			}
			if cut < 0 {
				if w.size > 0 {
					cut = 0 // rotate first, then see whether p fits a fresh file
				} else {
					cut = int(room) // larger than a whole file, no newline: cut at the bound
				}
			}
		}
		if cut > 0 {
			w.stampLines(p[:cut], now)
			n, err := w.f.Write(p[:cut])
			w.size += int64(n)
			if n > 0 {
				w.lineEnd = p[n-1] == '\n'
			}
			total += n
			if err != nil {
				return total, err
			}
			p = p[cut:]
			if len(p) == 0 {
				break
			}
		}
		if err := w.rotate(); err != nil {
			return total, err
		}
	}
	return total, nil
}

// stampLines records when the first line that starts in p (the next bytes
// of the live file) was read, ahead of writing p (see times.go).
func (w *Writer) stampLines(p []byte, now time.Time) {
	if w.times == nil {
		return
	}
	start := -1
	if w.lineEnd {
		start = 0
	} else if i := bytes.IndexByte(p, '\n'); i >= 0 && i+1 < len(p) {
		start = i + 1
	}
	if start >= 0 {
		w.times.stamp(uint64(w.size)+uint64(start), now)
	}
}

// rotate makes the live file rotated file w.idx and a fresh file live.
// The live name never disappears: the old file gets its rotated name by a
// hard link, then the fresh file is renamed over the live name.
func (w *Writer) rotate() error {
	wrap := func(what string, err error) error {
		return fmt.Errorf("%w: %s: %s: %w", ErrRotate, w.s.name, what, err)
	}
	if !w.markerOK {
		if err := w.s.writeMarker(mark{index: w.idx, ino: w.ino}, w.own); err != nil {
			return wrap("updating the marker", err)
		}
		w.markerOK = true
	}
	nf, err := w.createNext()
	if err != nil {
		return wrap("creating the next file", err)
	}
	nfi, err := nf.Stat()
	if err != nil {
		_ = nf.Close()
		_ = os.Remove(w.s.next())
		return wrap("creating the next file", err)
	}
	// The fresh file's times are in place before it is live.
	var nt *stamper
	if !w.untimed {
		if nt, err = openStamper(w.s, w.idx+1, true, w.own); err != nil {
			w.log.Warn("cannot keep the times of "+w.s.name+"; its lines have none", "err", err)
		}
	}
	dropNext := func() {
		_ = nf.Close()
		_ = os.Remove(w.s.next())
		if nt != nil {
			nt.close()
			_ = os.Remove(w.s.times(w.idx + 1))
		}
	}
	keep := w.cfg.MaxFiles > 1
	// Delete beyond max_files first, so that the stream never has more.
	if keep && w.idx+1 > uint64(w.cfg.MaxFiles) {
		limit := w.idx + 1 - uint64(w.cfg.MaxFiles)
		for ; w.oldest != 0 && w.oldest <= limit && w.oldest < w.idx; w.oldest++ {
			w.remove(w.oldest)
		}
	}
	switch {
	case !keep:
		// max_files = 1: the old file goes when the fresh one replaces it.
		err = os.Rename(w.s.next(), w.s.live())
	case os.Link(w.s.live(), w.s.rotated(w.idx)) == nil:
		if err = os.Rename(w.s.next(), w.s.live()); err != nil {
			_ = os.Remove(w.s.rotated(w.idx))
		}
	default:
		// No hard link (not supported here, or no room for the name): two
		// renames, with a moment in which the live name is missing.
		if err = os.Rename(w.s.live(), w.s.rotated(w.idx)); err == nil {
			if err = os.Rename(w.s.next(), w.s.live()); err != nil {
				_ = os.Rename(w.s.rotated(w.idx), w.s.live())
			}
		}
	}
	if err != nil {
		dropNext()
		return wrap("renaming", err)
	}
	if keep && w.oldest == 0 {
		w.oldest = w.idx
	}
	if err := w.f.Close(); err != nil {
		w.log.Debug("closing the rotated "+w.s.rotatedName(w.idx), "err", err)
	}
	w.times.close()
	if !keep {
		_ = os.Remove(w.s.times(w.idx)) // its file is gone
	}
	w.times = nt
	w.f, w.ino, w.size = nf, inoOf(nfi), 0
	w.idx++
	w.index.Store(w.idx)
	w.rotations.Add(1)
	if err := w.s.writeMarker(mark{index: w.idx, ino: w.ino}, w.own); err != nil {
		w.markerOK = false
		w.log.Warn("cannot update the rotation marker of "+w.s.name+"; the next rotation waits until it can", "err", err)
	} else {
		w.markerOK = true
	}
	return nil
}

// createNext creates the next live file under its temporary name.
func (w *Writer) createNext() (*os.File, error) {
	path := w.s.next()
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags, 0o600)
	if errors.Is(err, unix.EEXIST) {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
		fd, err = unix.Open(path, flags, 0o600)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	err = f.Chmod(0o600)
	if err == nil && w.own.set {
		err = f.Chown(w.own.uid, w.own.gid)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

// drop counts n bytes of output that were not written.
func (w *Writer) drop(n uint64, why error) {
	if n == 0 {
		return
	}
	w.dropped.Add(n)
	if w.pending == 0 {
		w.dropErr = why
		w.log.Warn("dropping output of "+w.s.name+" until it can be written", "err", why)
	}
	w.pending += n
}

// writeNote writes the note about dropped output, if there is room for
// it, and reports whether it did.
func (w *Writer) writeNote(now time.Time) bool {
	note := w.note()
	if !w.roomFor(len(note)) {
		return false
	}
	n, err := w.emit(note, now)
	if err != nil {
		w.log.Debug("writing the note about dropped output failed", "err", err, "written", n)
		return false
	}
	w.pending, w.dropErr = 0, nil
	return true
}

func (w *Writer) note() []byte {
	why := "a write failed"
	if w.dropErr != nil {
		why = w.dropErr.Error()
		var errno syscall.Errno
		if errors.As(w.dropErr, &errno) && !errors.Is(w.dropErr, ErrRotate) {
			why = errno.Error()
		}
	}
	nl := ""
	if !w.lineEnd {
		nl = "\n"
	}
	return fmt.Appendf(nil, "%s[tether: %d bytes of output were dropped here: %s]\n", nl, w.pending, why)
}

// roomFor reports whether the file system has room for n more bytes, so
// that a note is not cut in half by a disk that is still full.
func (w *Writer) roomFor(n int) bool {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return true
	}
	var st unix.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return true // no statfs: just try
	}
	blocks := st.Bavail
	if os.Geteuid() == 0 {
		blocks = st.Bfree // root may write into the reserved blocks
	}
	return blocks*uint64(st.Bsize) >= uint64(n)
}

// Stats returns what the Writer has done so far.
func (w *Writer) Stats() Stats {
	return Stats{
		Written:   w.written.Load(),
		Dropped:   w.dropped.Load(),
		Rotations: w.rotations.Load(),
		Index:     w.index.Load(),
	}
}

// Dropped returns how many bytes of output were dropped.
func (w *Writer) Dropped() uint64 { return w.dropped.Load() }

// Close writes the note about dropped output if there is one to write and
// room for it, then closes the live file. Closing twice is a no-op.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.f == nil {
		return nil
	}
	if w.pending > 0 {
		w.writeNote(w.now())
	}
	w.times.close()
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("logs: closing %s: %w", w.s.live(), err)
	}
	return nil
}
