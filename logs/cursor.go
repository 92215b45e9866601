package logs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// settleTries bounds the retries of a reader racing rotations: each retry
// follows a rotation, and rotations come at most once per MB written.
const settleTries = 1000

// Cursor reads one stream in order across its rotated files and the live
// file, from a position it keeps between calls. It holds the file it is
// reading open, so a file that rotation deletes under it is still read to
// its end. A Cursor is not safe for concurrent use.
type Cursor struct {
	s   stream
	f   *os.File // the file being read; nil before the stream has any
	idx uint64   // its index
	ino uint64   // its inode

	scanned int64 // bytes read backwards by SeekLines

	// lines cuts what is read into lines with their times (ReadLines);
	// nil until then.
	lines *lineSink

	// hook, in tests, runs at named points where a rotation may come:
	// "check", between reading a file to its end and checking whether it
	// is still the live file; "oldest", between opening the live file and
	// listing the rotated ones.
	hook func(at string)
}

// NewCursor returns a cursor at the start of the oldest retained output
// of the stream name in dir. The stream need not exist yet.
func NewCursor(dir, name string) (*Cursor, error) {
	s, err := newStream(dir, name)
	if err != nil {
		return nil, err
	}
	return &Cursor{s: s}, nil
}

// Close closes the file the cursor holds.
func (c *Cursor) Close() error {
	c.setFile(nil, 0, 0)
	c.lines.close()
	return nil
}

func (c *Cursor) setFile(f *os.File, idx, ino uint64) {
	if c.f != nil {
		_ = c.f.Close()
	}
	c.f, c.idx, c.ino = f, idx, ino
}

// Copy copies to w everything written since the cursor's position, across
// rotations, up to the end of the live file, and moves the cursor there.
// Rotated files that were deleted before the cursor reached them make it
// return a *GapError (errors.Is ErrGap) after moving past them; calling
// Copy again continues after the gap.
func (c *Cursor) Copy(w io.Writer) (int64, error) {
	if c.f == nil {
		ok, err := c.openOldest()
		if err != nil || !ok {
			return 0, err
		}
	}
	var total int64
	for {
		n, err := c.drain(w)
		total += n
		if err != nil {
			return total, err
		}
		moved, n, err := c.advance(w)
		total += n
		if err != nil || !moved {
			return total, err
		}
	}
}

// drain copies the rest of the cursor's file to w.
func (c *Cursor) drain(w io.Writer) (int64, error) {
	if k, ok := w.(*lineSink); ok {
		off, err := c.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, fmt.Errorf("logs: %w", err)
		}
		k.at(c.idx, uint64(off))
	}
	n, err := io.Copy(w, c.f)
	if err != nil {
		return n, fmt.Errorf("logs: copying %s: %w", c.name(), err)
	}
	return n, nil
}

// name is the file name the cursor's file had when it was opened.
func (c *Cursor) name() string {
	return c.f.Name()
}

// advance moves the cursor to the next file once its file is no longer
// the live one (copying what was written to it meanwhile), and reports
// whether it moved.
func (c *Cursor) advance(w io.Writer) (bool, int64, error) {
	if c.hook != nil {
		c.hook("check")
	}
	st, err := os.Lstat(c.s.live())
	if err == nil && inoOf(st) == c.ino {
		return false, 0, nil // still the live file
	}
	if err != nil && !isNotExist(err) {
		return false, 0, fmt.Errorf("logs: %w", err)
	}
	// Nothing is written to a file once it is not the live file, so this
	// drain reads it to its true end.
	n, err := c.drain(w)
	if err != nil {
		return false, n, err
	}
	next := c.idx + 1
	for range settleTries {
		f, fi, err := openForRead(c.s.rotated(next))
		if err == nil {
			c.setFile(f, next, inoOf(fi))
			return true, n, nil
		}
		if !isNotExist(err) {
			return false, n, err
		}
		lf, lfi, lidx, err := c.s.openLive()
		if isNotExist(err) {
			return false, n, nil // a rotation without hard links is between its renames
		}
		if err != nil {
			return false, n, err
		}
		switch {
		case lidx == next:
			c.setFile(lf, lidx, inoOf(lfi))
			return true, n, nil
		case lidx <= c.idx:
			from := c.idx
			c.setFile(lf, lidx, inoOf(lfi))
			return true, n, &GapError{Stream: c.s.name, First: from + 1, Reset: true, Next: c.s.name}
		}
		// The live file is further on: next was rotated since we looked
		// for it, or deleted before we got to it.
		if f, fi, err := openForRead(c.s.rotated(next)); err == nil {
			_ = lf.Close()
			c.setFile(f, next, inoOf(fi))
			return true, n, nil
		}
		rot, err := c.s.listRotated()
		if err != nil {
			_ = lf.Close()
			return false, n, fmt.Errorf("logs: %w", err)
		}
		first := lidx
		for _, i := range rot {
			if i > c.idx && i < lidx {
				first = i
				break
			}
		}
		if first == lidx {
			c.setFile(lf, lidx, inoOf(lfi))
			return true, n, &GapError{Stream: c.s.name, First: next, Last: lidx - 1, Next: c.s.name}
		}
		f, fi, err = openForRead(c.s.rotated(first))
		_ = lf.Close()
		if isNotExist(err) {
			continue // deleted as well meanwhile: look again
		}
		if err != nil {
			return false, n, err
		}
		c.setFile(f, first, inoOf(fi))
		return true, n, &GapError{Stream: c.s.name, First: next, Last: first - 1, Next: c.s.rotatedName(first)}
	}
	return false, n, fmt.Errorf("%w: %s", ErrUnsettled, c.s.live())
}

// openOldest opens the oldest file of the stream; false if it has none.
// It opens the live file before it lists the rotated ones, so that a
// rotation in between cannot hide the file the live one was: every file
// rotated before the live file got its index is in the listing.
func (c *Cursor) openOldest() (bool, error) {
	for range settleTries {
		lf, lfi, lidx, lerr := c.s.openLive()
		if lerr != nil && !isNotExist(lerr) {
			return false, lerr
		}
		closeLive := func() {
			if lf != nil {
				_ = lf.Close()
			}
		}
		if c.hook != nil {
			c.hook("oldest")
		}
		rot, err := c.s.listRotated()
		if err != nil {
			closeLive()
			if isNotExist(err) {
				return false, nil
			}
			return false, fmt.Errorf("logs: %w", err)
		}
		for _, i := range rot {
			if lf != nil && i >= lidx {
				break // rotated after we opened the live file
			}
			f, fi, err := openForRead(c.s.rotated(i))
			if err == nil {
				closeLive()
				c.setFile(f, i, inoOf(fi))
				return true, nil
			}
			if !isNotExist(err) {
				closeLive()
				return false, err
			}
			// deleted since the listing: the next one is the oldest
		}
		if lf != nil {
			c.setFile(lf, lidx, inoOf(lfi))
			return true, nil
		}
		if len(rot) == 0 {
			return false, nil // nothing written yet
		}
		// No live file for a moment, and the rotated files went: look again.
	}
	return false, fmt.Errorf("%w: %s", ErrUnsettled, c.s.live())
}

// openLast opens the file that ends the stream: the live file, or the
// highest rotated file when the live name is missing for a moment.
func (c *Cursor) openLast() (*os.File, fs.FileInfo, uint64, error) {
	f, fi, idx, err := c.s.openLive()
	if !isNotExist(err) {
		return f, fi, idx, err
	}
	rot, err := c.s.listRotated()
	if err != nil {
		return nil, nil, 0, err
	}
	for i := len(rot) - 1; i >= 0; i-- {
		f, fi, err := openForRead(c.s.rotated(rot[i]))
		if err == nil {
			return f, fi, rot[i], nil
		}
		if !isNotExist(err) {
			return nil, nil, 0, err
		}
	}
	return nil, nil, 0, fs.ErrNotExist
}

// SeekEnd moves the cursor to the current end of the stream, so that
// Copy returns only what is written from now on.
func (c *Cursor) SeekEnd() error {
	c.setFile(nil, 0, 0)
	if c.lines != nil {
		c.lines.reset()
	}
	f, fi, idx, err := c.openLast()
	if isNotExist(err) {
		return nil // nothing written yet: all of it will be new
	}
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		_ = f.Close()
		return fmt.Errorf("logs: %w", err)
	}
	c.setFile(f, idx, inoOf(fi))
	return nil
}

// SeekLines moves the cursor to the start of the last n lines of the
// stream, reading backwards from its end only as far as needed. As with
// tail(1), a last line without a newline counts as a line, and with fewer
// than n lines retained the cursor goes to the start of the oldest file.
func (c *Cursor) SeekLines(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: got %d", ErrBadLines, n)
	}
	if n == 0 {
		return c.SeekEnd()
	}
	c.setFile(nil, 0, 0)
	if c.lines != nil {
		c.lines.reset()
	}
	f, fi, idx, err := c.openLast()
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	final := true // the stream's very last byte: its newline ends the last line
	need := n
	for {
		pos := fi.Size()
		for pos > 0 {
			k := int(min(int64(len(buf)), pos))
			pos -= int64(k)
			if _, err := f.ReadAt(buf[:k], pos); err != nil {
				_ = f.Close()
				return fmt.Errorf("logs: reading %s: %w", f.Name(), err)
			}
			c.scanned += int64(k)
			for i := k - 1; i >= 0; i-- {
				if buf[i] == '\n' && !final {
					if need--; need == 0 {
						return c.placeAt(f, fi, idx, pos+int64(i)+1)
					}
				}
				final = false
			}
		}
		// All of this file is within the last n lines: go to the one before.
		if idx <= 1 {
			return c.placeAt(f, fi, idx, 0)
		}
		pf, pfi, err := openForRead(c.s.rotated(idx - 1))
		if isNotExist(err) {
			return c.placeAt(f, fi, idx, 0)
		}
		if err != nil {
			_ = f.Close()
			return err
		}
		_ = f.Close()
		f, fi, idx = pf, pfi, idx-1
	}
}

func (c *Cursor) placeAt(f *os.File, fi fs.FileInfo, idx uint64, off int64) error {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		_ = f.Close()
		return fmt.Errorf("logs: %w", err)
	}
	c.setFile(f, idx, inoOf(fi))
	return nil
}

// ReadAll copies all the retained output of the stream name in dir to w,
// in order. A *GapError means rotation deleted files while they were being
// read (the rest was still copied).
func ReadAll(dir, name string, w io.Writer) (int64, error) {
	c, err := NewCursor(dir, name)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return copyThroughGaps(c, w)
}

// Tail copies the last n lines of the stream name in dir to w.
func Tail(dir, name string, n int, w io.Writer) (int64, error) {
	c, err := NewCursor(dir, name)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SeekLines(n); err != nil {
		return 0, err
	}
	return copyThroughGaps(c, w)
}

// copyThroughGaps copies up to the end, past any gaps, and returns the
// first gap.
func copyThroughGaps(c *Cursor, w io.Writer) (int64, error) {
	var total int64
	var gap error
	for {
		n, err := c.Copy(w)
		total += n
		if errors.Is(err, ErrGap) {
			if gap == nil {
				gap = err
			}
			continue
		}
		if err != nil {
			return total, err
		}
		return total, gap
	}
}

// openForRead opens a log file for reading, refusing a symlink, a FIFO or
// anything else but a regular file.
func openForRead(path string) (*os.File, fs.FileInfo, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, nil, fmt.Errorf("%w: %s is a symlink; tether reads only the files it wrote", ErrNotRegular, path)
		}
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f, _, err := regularFile(fd, path, false)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("logs: %w", err)
	}
	return f, fi, nil
}

// openLive opens the live file and finds its index (see stream).
func (s stream) openLive() (*os.File, fs.FileInfo, uint64, error) {
	for range settleTries {
		f, fi, err := openForRead(s.live())
		if err != nil {
			return nil, nil, 0, err
		}
		ino := inoOf(fi)
		m, found := s.readMarker()
		var high uint64
		if !found {
			rot, err := s.listRotated()
			if err != nil {
				_ = f.Close()
				return nil, nil, 0, fmt.Errorf("logs: %w", err)
			}
			if len(rot) > 0 {
				high = rot[len(rot)-1]
			}
		}
		st, err := os.Lstat(s.live())
		if err != nil || inoOf(st) != ino {
			_ = f.Close()
			continue // rotated while we looked: look again
		}
		switch {
		case !found:
			return f, fi, high + 1, nil
		case m.ino == ino:
			return f, fi, m.index, nil
		default:
			return f, fi, m.index + 1, nil // the marker lags by one rotation
		}
	}
	return nil, nil, 0, fmt.Errorf("%w: %s", ErrUnsettled, s.live())
}
