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
//	[0]     head version (1, 2 or 3)
//	[1]     state
//	[2]     target state
//	[3:11]  version: the seq of the last record, little endian
//	[11:]   spawn nonce (uvarint length, bytes)
//	        v2: restarts (uvarint), the last restart-intent's attempt
//	        v3: readies (uvarint), the journalled ready events folded
//	[-4:]   CRC32C of everything before
//
// A version-1 head (written before restarts existed) reads as restarts 0,
// a version-2 head (before journalled readiness) as readies 0. A head
// with no journalled ready is written in version 2, as before, so that a
// store whose executors journal no readiness stays readable by the tether
// before it.
type head struct {
	version  uint64
	state    fsm.State
	target   fsm.State
	nonce    string
	restarts int
	readies  int
}

var headKey = []byte("\xffhead")

// headVersion is the newest head version; a head with no readies is
// written in headVersion2.
const (
	headVersion  = 3
	headVersion2 = 2
)

func headOf(t *fsm.Task) head {
	return head{version: t.Version, state: t.State, target: t.Target, nonce: t.Nonce, restarts: t.Restarts, readies: t.Readies}
}

// task returns the minimal fsm.Task that folds like the full one for the
// purpose of validating the next events.
func (h head) task(id string) fsm.Task {
	return fsm.Task{ID: id, State: h.state, Version: h.version, Target: h.target, Nonce: h.nonce, Restarts: h.restarts, Readies: h.readies}
}

// disagrees says how the head differs from the task its log folds to
// (their versions aside, which the log's iteration checks), or "".
func (h head) disagrees(t *fsm.Task) string {
	f := headOf(t)
	f.version = h.version
	if f == h {
		return ""
	}
	return fmt.Sprintf("head says %s (target %s, nonce %q, %d restarts, %d readies), the log folds to %s (target %s, nonce %q, %d restarts, %d readies)",
		h.state, h.target, h.nonce, h.restarts, h.readies, f.state, f.target, f.nonce, f.restarts, f.readies)
}

func encodeHead(h head) []byte {
	v := byte(headVersion2)
	if h.readies > 0 {
		v = headVersion
	}
	b := make([]byte, 0, 24+len(h.nonce))
	b = append(b, v, byte(h.state), byte(h.target))
	b = binary.LittleEndian.AppendUint64(b, h.version)
	b = appendString(b, h.nonce)
	b = binary.AppendUvarint(b, uint64(h.restarts))
	if v == headVersion {
		b = binary.AppendUvarint(b, uint64(h.readies))
	}
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
	if v < 1 || v > headVersion {
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
	if v >= 3 {
		n := d.uvarint()
		if n > uint64(maxRestarts) {
			d.fail("ready count out of range")
		}
		h.readies = int(n)
	}
	if d.err != "" || len(d.b) != 0 {
		return bad("bad nonce, restart or ready count")
	}
	return h, nil
}

// maxRestarts bounds the restart count a head may carry (an int on every
// platform).
const maxRestarts = 1<<31 - 1
