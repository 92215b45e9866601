package store

import (
	"encoding/binary"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// A task's head sits in its bucket under headKey (which sorts after every
// 8-byte record key). It carries what Append needs to check the expected
// version and fold new events without reading the log: every field of
// fsm.Task that fsm's FoldInPlace consults to decide whether an event is legal.
//
//	[0]     head version (1 or 2; headVersion is written)
//	[1]     state
//	[2]     target state
//	[3:11]  version: the seq of the last record, little endian
//	[11:]   spawn nonce (uvarint length, bytes)
//	        v2: restarts (uvarint), the last restart-intent's attempt
//	[-4:]   CRC32C of everything before
//
// A version-1 head (written before restarts existed) reads as restarts 0.
type head struct {
	version  uint64
	state    fsm.State
	target   fsm.State
	nonce    string
	restarts int
}

var headKey = []byte("\xffhead")

const headVersion = 2

func headOf(t *fsm.Task) head {
	return head{version: t.Version, state: t.State, target: t.Target, nonce: t.Nonce, restarts: t.Restarts}
}

// task returns the minimal fsm.Task that folds like the full one for the
// purpose of validating the next events.
func (h head) task(id string) fsm.Task {
	return fsm.Task{ID: id, State: h.state, Version: h.version, Target: h.target, Nonce: h.nonce, Restarts: h.restarts}
}

// disagrees says how the head differs from the task its log folds to
// (their versions aside, which the log's iteration checks), or "".
func (h head) disagrees(t *fsm.Task) string {
	f := headOf(t)
	f.version = h.version
	if f == h {
		return ""
	}
	return fmt.Sprintf("head says %s (target %s, nonce %q, %d restarts), the log folds to %s (target %s, nonce %q, %d restarts)",
		h.state, h.target, h.nonce, h.restarts, f.state, f.target, f.nonce, f.restarts)
}

func encodeHead(h head) []byte {
	b := make([]byte, 0, 20+len(h.nonce))
	b = append(b, headVersion, byte(h.state), byte(h.target))
	b = binary.LittleEndian.AppendUint64(b, h.version)
	b = appendString(b, h.nonce)
	b = binary.AppendUvarint(b, uint64(h.restarts))
	return binary.LittleEndian.AppendUint32(b, crc32c(b))
}

func decodeHead(task string, b []byte) (head, error) {
	bad := func(reason string) (head, error) {
		return head{}, &CorruptError{Task: task, Reason: "head: " + reason}
	}
	if len(b) < 16 {
		return bad("truncated")
	}
	body := b[:len(b)-4]
	if binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32c(body) {
		return bad("checksum mismatch")
	}
	v := body[0]
	if v != 1 && v != headVersion {
		return bad("unknown head version")
	}
	h := head{state: fsm.State(body[1]), target: fsm.State(body[2]), version: binary.LittleEndian.Uint64(body[3:])}
	if !h.state.Valid() || (h.target != fsm.StateNone && !h.target.Valid()) {
		return bad("invalid state")
	}
	d := decoder{b: body[11:]}
	h.nonce = d.str()
	if v >= 2 {
		n := d.uvarint()
		if n > uint64(maxRestarts) {
			d.fail("restart count out of range")
		}
		h.restarts = int(n)
	}
	if d.err != "" || len(d.b) != 0 {
		return bad("bad nonce or restart count")
	}
	return h, nil
}

// maxRestarts bounds the restart count a head may carry (an int on every
// platform).
const maxRestarts = 1<<31 - 1
