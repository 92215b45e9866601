package store

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strconv"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// Record layout (all versions share the 6-byte header):
//
//	[0:4]  CRC32C (Castagnoli, little endian) of bytes [4:]
//	[4]    record schema version (recordVersion)
//	[5]    event type (fsm.EventType)
//	[6:]   body
//
// Body of version 1, in order:
//
//	seq      uvarint (must equal the record's key)
//	time     8 bytes little endian (Unix ns, two's complement)
//	fields   uvarint bit set of the optional fields that follow
//	spec     name, driver, command, args, env, dir, user, cap_add,
//	         cap_drop, kill_signal, kill_timeout
//	nonce    string
//	executor pid, start_time, boot_id, nonce, socket
//	task_pid varint; task_start uvarint
//	exit     code varint, signal varint
//	signal   varint; grace varint
//	reason   string; target byte
//
// Strings are a uvarint length then bytes; lists a uvarint count then
// strings; env a uvarint count then key/value pairs in strictly increasing
// key order. Integers are minimal (u)varints. The form is canonical: a
// record that decodes re-encodes to the same bytes, which the fuzz test
// holds the decoder to.
const (
	recordVersion = 1
	headerLen     = 6
)

const (
	fSpec = 1 << iota
	fNonce
	fExecutor
	fTaskPID
	fTaskStart
	fExit
	fSignal
	fGrace
	fReason
	fTarget

	fAll = 1<<iota - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// checksum is the CRC a record's header must carry: over all but the CRC.
func checksum(rec []byte) uint32 { return crc32.Update(0, castagnoli, rec[4:]) }

// encodeRecord appends the record form of e, with sequence number seq, to
// dst.
func encodeRecord(dst []byte, seq uint64, e *fsm.Event) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, recordVersion, byte(e.Type))
	dst = binary.AppendUvarint(dst, seq)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Time))
	var f uint64
	if e.Spec != nil {
		f |= fSpec
	}
	if e.Nonce != "" {
		f |= fNonce
	}
	if e.Executor != nil {
		f |= fExecutor
	}
	if e.TaskPID != 0 {
		f |= fTaskPID
	}
	if e.TaskStartTime != 0 {
		f |= fTaskStart
	}
	if e.Exit != nil {
		f |= fExit
	}
	if e.Signal != 0 {
		f |= fSignal
	}
	if e.Grace != 0 {
		f |= fGrace
	}
	if e.Reason != "" {
		f |= fReason
	}
	if e.Target != fsm.StateNone {
		f |= fTarget
	}
	dst = binary.AppendUvarint(dst, f)
	if s := e.Spec; s != nil {
		dst = appendString(dst, s.Name)
		dst = appendString(dst, s.Driver)
		dst = appendString(dst, s.Command)
		dst = appendList(dst, s.Args)
		dst = binary.AppendUvarint(dst, uint64(len(s.Env)))
		keys := make([]string, 0, len(s.Env))
		for k := range s.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendString(dst, k)
			dst = appendString(dst, s.Env[k])
		}
		dst = appendString(dst, s.Dir)
		dst = appendString(dst, s.User)
		dst = appendList(dst, s.CapAdd)
		dst = appendList(dst, s.CapDrop)
		dst = binary.AppendVarint(dst, int64(s.KillSignal))
		dst = binary.AppendVarint(dst, int64(s.KillTimeout))
	}
	if f&fNonce != 0 {
		dst = appendString(dst, e.Nonce)
	}
	if x := e.Executor; x != nil {
		dst = binary.AppendVarint(dst, int64(x.PID))
		dst = binary.AppendUvarint(dst, x.StartTime)
		dst = appendString(dst, x.BootID)
		dst = appendString(dst, x.Nonce)
		dst = appendString(dst, x.Socket)
	}
	if f&fTaskPID != 0 {
		dst = binary.AppendVarint(dst, int64(e.TaskPID))
	}
	if f&fTaskStart != 0 {
		dst = binary.AppendUvarint(dst, e.TaskStartTime)
	}
	if x := e.Exit; x != nil {
		dst = binary.AppendVarint(dst, int64(x.Code))
		dst = binary.AppendVarint(dst, int64(x.Signal))
	}
	if f&fSignal != 0 {
		dst = binary.AppendVarint(dst, int64(e.Signal))
	}
	if f&fGrace != 0 {
		dst = binary.AppendVarint(dst, int64(e.Grace))
	}
	if f&fReason != 0 {
		dst = appendString(dst, e.Reason)
	}
	if f&fTarget != 0 {
		dst = append(dst, byte(e.Target))
	}
	binary.LittleEndian.PutUint32(dst[start:], checksum(dst[start:]))
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendList(dst []byte, l []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(l)))
	for _, s := range l {
		dst = appendString(dst, s)
	}
	return dst
}

// decodeError is what the decoder reports; the caller adds the task.
type decodeError struct {
	version uint8 // non-zero: an unknown record version
	reason  string
}

// decodeRecord decodes rec into *e. It never panics and never trusts a
// length it has not checked against the bytes left. It returns the
// record's sequence number.
func decodeRecord(rec []byte, e *fsm.Event) (uint64, *decodeError) {
	if len(rec) < headerLen {
		return 0, &decodeError{reason: "truncated record header"}
	}
	if binary.LittleEndian.Uint32(rec) != checksum(rec) {
		return 0, &decodeError{reason: "checksum mismatch"}
	}
	switch v := rec[4]; {
	case v == 0:
		return 0, &decodeError{reason: "record version 0"}
	case v > recordVersion:
		return 0, &decodeError{version: v}
	}
	*e = fsm.Event{Type: fsm.EventType(rec[5])}
	if !e.Type.Valid() {
		return 0, &decodeError{reason: "unknown event type " + strconv.Itoa(int(rec[5]))}
	}
	d := decoder{b: rec[headerLen:]}
	seq := d.uvarint()
	if len(d.b) < 8 {
		d.fail("truncated time")
	} else {
		e.Time = int64(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
	}
	f := d.uvarint()
	if f&^fAll != 0 {
		d.fail("unknown field bits")
	}
	if d.err == "" && f&fSpec != 0 {
		s := &fsm.Spec{}
		s.Name = d.str()
		s.Driver = d.str()
		s.Command = d.str()
		s.Args = d.list()
		if n := d.count(2); n > 0 {
			s.Env = make(map[string]string, n)
			prev := ""
			for i := range n {
				k, v := d.str(), d.str()
				if i > 0 && k <= prev {
					d.fail("env keys out of order")
					break
				}
				s.Env[k], prev = v, k
			}
		}
		s.Dir = d.str()
		s.User = d.str()
		s.CapAdd = d.list()
		s.CapDrop = d.list()
		s.KillSignal = d.int()
		s.KillTimeout = time.Duration(d.varint())
		e.Spec = s
	}
	if f&fNonce != 0 {
		e.Nonce = d.nonEmpty()
	}
	if d.err == "" && f&fExecutor != 0 {
		x := &fsm.Identity{}
		x.PID = d.int()
		x.StartTime = d.uvarint()
		x.BootID = d.str()
		x.Nonce = d.str()
		x.Socket = d.str()
		e.Executor = x
	}
	if f&fTaskPID != 0 {
		e.TaskPID = d.nonZero()
	}
	if f&fTaskStart != 0 {
		if e.TaskStartTime = d.uvarint(); e.TaskStartTime == 0 {
			d.fail("zero value for a present field")
		}
	}
	if d.err == "" && f&fExit != 0 {
		e.Exit = &fsm.ExitStatus{Code: d.int(), Signal: d.int()}
	}
	if f&fSignal != 0 {
		e.Signal = d.nonZero()
	}
	if f&fGrace != 0 {
		if e.Grace = time.Duration(d.varint()); e.Grace == 0 {
			d.fail("zero value for a present field")
		}
	}
	if f&fReason != 0 {
		e.Reason = d.nonEmpty()
	}
	if f&fTarget != 0 {
		if len(d.b) < 1 {
			d.fail("truncated target")
		} else if e.Target = fsm.State(d.b[0]); !e.Target.Valid() {
			d.fail("invalid target state")
		} else {
			d.b = d.b[1:]
		}
	}
	if d.err == "" && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != "" {
		return 0, &decodeError{reason: d.err}
	}
	return seq, nil
}

// decoder reads a record body. The first failure sticks; later reads
// return zero values.
type decoder struct {
	b   []byte
	err string
}

func (d *decoder) fail(reason string) {
	if d.err == "" {
		d.err = reason
	}
	d.b = nil
}

// uvarint reads a minimal unsigned varint.
func (d *decoder) uvarint() uint64 {
	b := d.b
	var v uint64
	for i := 0; i < len(b) && i < binary.MaxVarintLen64; i++ {
		c := b[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			break // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.fail("non-minimal integer")
				return 0
			}
			d.b = b[i+1:]
			return v
		}
	}
	d.fail("truncated or overlong integer")
	return 0
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// int reads a varint that must fit an int.
func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.fail("integer out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) nonZero() int {
	v := d.int()
	if v == 0 {
		d.fail("zero value for a present field")
	}
	return v
}

// count reads an element count, each element at least minBytes long, and
// refuses counts the remaining bytes cannot hold.
func (d *decoder) count(minBytes int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minBytes) {
		d.fail("count exceeds record")
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string exceeds record")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) nonEmpty() string {
	s := d.str()
	if s == "" {
		d.fail("empty value for a present field")
	}
	return s
}

func (d *decoder) list() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = d.str()
	}
	return l
}
