package logs

import (
	"bytes"
	"context"
	"errors"
	"time"
)

// Line is one line of a stream, and when it was read.
type Line struct {
	// Text is the line with its newline; a line cut at maxLine, or the
	// last of a stream that never ended it (Cursor.FlushLine), has none.
	Text []byte
	// Time is when the copier read the line's first byte, to the
	// millisecond (see times.go); zero when its stream kept no time for it
	// (output from before times were kept).
	Time time.Time
}

// maxLine bounds a line a reader holds while it waits for the line's end:
// a longer one is passed on in pieces of this size, each a Line.
const maxLine = 64 << 10

// ReadLines calls fn with each whole line written since the cursor's
// position, in order, across rotations, up to the end of the stream, and
// moves the cursor there. A line not ended yet is held until it is (the
// next call passes it on) or until FlushLine. An error from fn stops the
// reading and is returned; a *GapError (errors.Is ErrGap) is as for Copy,
// the line cut by the gap passed on first, unended.
func (c *Cursor) ReadLines(fn func(Line) error) error {
	if c.lines == nil {
		c.lines = &lineSink{s: c.s}
	}
	c.lines.fn = fn
	_, err := c.Copy(c.lines)
	if c.lines.err != nil {
		err, c.lines.err = c.lines.err, nil
	}
	if errors.Is(err, ErrGap) {
		if ferr := c.lines.flush(); ferr != nil {
			return ferr
		}
	}
	return err
}

// FlushLine calls fn with the line not ended yet that ReadLines holds, if
// any.
func (c *Cursor) FlushLine(fn func(Line) error) error {
	if c.lines == nil {
		return nil
	}
	c.lines.fn = fn
	return c.lines.flush()
}

// FollowLines calls fn with each line of the stream from the cursor's
// position as the stream grows, across rotations, until ctx is done; then
// it reads what had been written by then, passes on a last line not ended
// (FlushLine), and returns nil. As Follow, a *GapError means the follower
// fell behind; calling FollowLines again goes on after the gap.
func FollowLines(ctx context.Context, c *Cursor, fn func(Line) error) error {
	err := follow(ctx, c, func() error { return c.ReadLines(fn) }, true)
	if err == nil {
		err = c.FlushLine(fn)
	}
	return err
}

// lineSink cuts what a cursor copies into lines, each with its time from
// its file's times (see times.go).
type lineSink struct {
	s   stream
	fn  func(Line) error
	err error // fn's, which ends the copy

	off   uint64       // the offset in its file of the next byte written
	times *timesReader // that file's times

	line    []byte // the line so far
	started bool   // a line has started (its time is lineAt)
	lineAt  time.Time
	last    time.Time // the time of the last line that had one: a line without inherits it
}

// at says where the bytes written next come from: file idx, from off.
func (k *lineSink) at(idx, off uint64) {
	if k.times == nil || k.times.idx != idx {
		k.times.close()
		k.times = &timesReader{s: k.s, idx: idx}
	}
	k.off = off
}

// reset forgets a line begun and the times read (the cursor moved, maybe
// back: the times reader lets go of records behind it).
func (k *lineSink) reset() {
	k.line, k.started = k.line[:0], false
	k.times.close()
	k.times = nil
}

func (k *lineSink) Write(p []byte) (int, error) {
	n := len(p)
	if k.times != nil {
		k.times.fresh()
	}
	for len(p) > 0 {
		if !k.started {
			k.started, k.lineAt = true, k.last
			if k.times != nil {
				if ms, ok := k.times.at(k.off); ok {
					k.lineAt = time.UnixMilli(ms)
					k.last = k.lineAt
				}
			}
		}
		i := bytes.IndexByte(p, '\n')
		take := len(p)
		if i >= 0 {
			take = i + 1
		}
		if room := maxLine - len(k.line); take > room {
			take, i = room, -1
		}
		k.line = append(k.line, p[:take]...)
		k.off += uint64(take)
		p = p[take:]
		if i >= 0 || len(k.line) >= maxLine {
			if err := k.emit(); err != nil {
				k.err = err
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// emit passes on the line so far.
func (k *lineSink) emit() error {
	l := Line{Text: k.line, Time: k.lineAt}
	err := k.fn(l)
	k.line, k.started = k.line[:0], false
	return err
}

// flush passes on a line begun and not ended.
func (k *lineSink) flush() error {
	if len(k.line) == 0 {
		return nil
	}
	return k.emit()
}

func (k *lineSink) close() {
	if k != nil {
		k.times.close()
	}
}
