package logs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Times. Each file of a stream has a sidecar that says when its lines
// were read from the task's pipe (tether logs --timestamps, --since,
// --until, and the order in which the lines of several streams are
// merged):
//
//	.stdout.log.N.time   the times of the file that is, or will be when it
//	                     is rotated, stdout.log.N (the live file's number
//	                     is the marker's: see stream)
//
// It holds a 16-byte header, then one record per line start the writer
// stamped: the line's offset in its file and the time its first byte
// reached the writer (the copier's read, a microsecond before), in
// milliseconds since the Unix epoch. A record is two varints, each the
// difference from the record before (the first from 0): the offset's
// unsigned, the time's signed (a clock stepped back), written in one
// write. The writer stamps a line start only when the time has moved to
// another millisecond since its last record, so lines read in one
// millisecond share their first's record, and a record costs a write
// only when a millisecond has passed: at most a thousand a second,
// whatever the task writes, and two to five bytes each. A reader gives a
// line the time of the last record at or before its start.
//
// The record is written before the output it stamps, so a reader that
// sees a line sees its record. A record cut short (a crash, a full disk)
// ends the sidecar for readers; the writer cuts it off before it appends
// again, and stops stamping a file whose sidecar it cannot mend. A file
// without a sidecar (output from before times were kept), or lines
// before its first record, have no time.

// timesHeader starts every sidecar: the format and its version.
const timesHeader = "tether-times-v1\n"

// maxRecord bounds an encoded record: two 64-bit varints.
const maxRecord = 2 * binary.MaxVarintLen64

func (s stream) timesName(i uint64) string { return fmt.Sprintf(".%s.%d.time", s.name, i) }

func (s stream) times(i uint64) string { return s.dir + "/" + s.timesName(i) }

// stamper appends the records of one file's sidecar (the writer's live
// file).
type stamper struct {
	f      *os.File // nil: no sidecar (broken, or times not kept)
	size   int64    // its size: the end of its last whole record
	off    uint64   // the last record's offset
	ms     int64    // and its time
	any    bool     // a record was written (off and ms hold it)
	broken bool     // a write failed and could not be undone: no more records
}

// openStamper opens (creating it) the sidecar of file i, continuing its
// records; fresh truncates it (the file it stamps was just created, so
// whatever the sidecar held was another file's).
func openStamper(s stream, i uint64, fresh bool, own owner) (*stamper, error) {
	path := s.times(i)
	const flags = unix.O_RDWR | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := unix.Open(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("logs: opening %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	f, _, err := regularFile(fd, path, false)
	if err != nil {
		return nil, err
	}
	st := &stamper{f: f}
	if err := st.load(fresh, own); err != nil {
		_ = f.Close()
		return nil, err
	}
	return st, nil
}

// load reads the sidecar's records to their end (the last whole one) and
// cuts off what follows; a sidecar without its header is started again.
func (st *stamper) load(fresh bool, own owner) error {
	if err := st.f.Chmod(0o600); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	if own.set {
		if err := st.f.Chown(own.uid, own.gid); err != nil {
			return fmt.Errorf("logs: giving %s to %d:%d: %w", st.f.Name(), own.uid, own.gid, err)
		}
	}
	b, err := io.ReadAll(st.f)
	if err != nil {
		return fmt.Errorf("logs: reading %s: %w", st.f.Name(), err)
	}
	if fresh || !bytes.HasPrefix(b, []byte(timesHeader)) {
		if err := st.f.Truncate(0); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		if _, err := st.f.WriteAt([]byte(timesHeader), 0); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		st.size = int64(len(timesHeader))
		return nil
	}
	var d timesDecoder
	n := d.decode(b[len(timesHeader):], func(off uint64, ms int64) {})
	st.size = int64(len(timesHeader) + n)
	st.off, st.ms, st.any = d.off, d.ms, d.n > 0
	if st.size < int64(len(b)) {
		if err := st.f.Truncate(st.size); err != nil {
			return fmt.Errorf("logs: cutting the torn end of %s: %w", st.f.Name(), err)
		}
	}
	return nil
}

// stamp records that a line starts at off, read at now, unless a record
// in the same millisecond covers it. A failed write is undone (the
// sidecar cut back to its last whole record); one that cannot be undone
// ends the stamping of this file.
func (st *stamper) stamp(off uint64, now time.Time) {
	if st == nil || st.f == nil || st.broken {
		return
	}
	ms := now.UnixMilli()
	if st.any && ms == st.ms {
		return // the last record's time is this line's, to the millisecond
	}
	var rec [maxRecord]byte
	n := binary.PutUvarint(rec[:], off-st.off)
	n += binary.PutVarint(rec[n:], ms-st.ms)
	w, err := st.f.WriteAt(rec[:n], st.size)
	if err != nil || w != n {
		if terr := st.f.Truncate(st.size); terr != nil {
			st.broken = true
		}
		return
	}
	st.size += int64(n)
	st.off, st.ms, st.any = off, ms, true
}

func (st *stamper) close() {
	if st != nil && st.f != nil {
		_ = st.f.Close()
		st.f = nil
	}
}

// timesDecoder decodes a sidecar's records as they come.
type timesDecoder struct {
	off uint64 // the last record's offset
	ms  int64  // and time
	n   int    // records decoded
}

// decode calls fn with each whole record of b and returns how many bytes
// they took: a record cut short at the end of b is left for later.
func (d *timesDecoder) decode(b []byte, fn func(off uint64, ms int64)) int {
	used := 0
	for used < len(b) {
		doff, k := binary.Uvarint(b[used:])
		if k <= 0 {
			break
		}
		dms, j := binary.Varint(b[used+k:])
		if j <= 0 {
			break
		}
		used += k + j
		d.off += doff
		d.ms += dms
		d.n++
		fn(d.off, d.ms)
	}
	return used
}

// stamp is one record: a line starting at off was read at ms.
type stamp struct {
	off uint64
	ms  int64
}

// timesChunk is how much of a sidecar a reader decodes at a time: what
// it holds is bounded by it and not by the sidecar's size (which the
// task, owning its files, could make as large as its disk allows).
const timesChunk = 64 << 10

// timesReader reads the sidecar of one file as it grows, a chunk at a
// time, keeping only the records from the one that covers the line read
// last: a reader goes through a file's lines in order.
type timesReader struct {
	s      stream
	idx    uint64
	f      *os.File // nil: none found yet
	pos    int64    // how much of it was decoded
	looked bool     // read since the last fresh()
	more   bool     // the last read filled its chunk: more may follow
	d      timesDecoder
	stamps []stamp
}

// fresh says that more of the file may have been read since the sidecar
// was: the next lookup past the last record reads the sidecar again.
// (A record is written before its output, so the sidecar read after the
// output holds the output's records.)
func (r *timesReader) fresh() { r.looked = false }

// read decodes the next chunk of what was appended to the sidecar.
func (r *timesReader) read() {
	r.looked, r.more = true, false
	if r.f == nil {
		f, _, err := openForRead(r.s.times(r.idx))
		if err != nil {
			return // no sidecar (yet): its lines have no time
		}
		head := make([]byte, len(timesHeader))
		if _, err := io.ReadFull(f, head); err != nil || string(head) != timesHeader {
			_ = f.Close()
			return // not a sidecar, or its header is still being written
		}
		r.f, r.pos = f, int64(len(timesHeader))
	}
	b := make([]byte, timesChunk)
	n, _ := r.f.ReadAt(b, r.pos)
	used := r.d.decode(b[:n], func(off uint64, ms int64) {
		r.stamps = append(r.stamps, stamp{off, ms})
	})
	r.pos += int64(used)
	r.more = n == len(b)
}

// at returns the time of a line starting at off: the last record at or
// before it (the sidecar read further when off is past its last record
// and more output was read since, or more of it is left); ok is false
// when no record covers it. Lines are looked up in order: the records
// before the one found are let go of.
func (r *timesReader) at(off uint64) (int64, bool) {
	for (len(r.stamps) == 0 || r.stamps[len(r.stamps)-1].off < off) && (!r.looked || r.more) {
		r.read()
		r.keepFrom(off)
	}
	r.keepFrom(off)
	if len(r.stamps) == 0 || r.stamps[0].off > off {
		return 0, false
	}
	return r.stamps[0].ms, true
}

// keepFrom lets go of the records before the last one at or before off
// (the records are in offset order).
func (r *timesReader) keepFrom(off uint64) {
	lo, hi := 0, len(r.stamps)
	for lo < hi {
		m := (lo + hi) / 2
		if r.stamps[m].off <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 1 {
		r.stamps = append(r.stamps[:0], r.stamps[lo-1:]...)
	}
}

func (r *timesReader) close() {
	if r != nil && r.f != nil {
		_ = r.f.Close()
		r.f = nil
	}
}
