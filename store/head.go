package store

import (
	"encoding/binary"

	"github.com/tether-fsm/tether/fsm"
)

// A task's head sits in its bucket under headKey (which sorts after every
// 8-byte record key). It carries what Append needs to check the expected
// version and fold new events without reading the log:
//
//	[0]     head version (1)
//	[1]     state
//	[2]     target state
//	[3:11]  version: the seq of the last record, little endian
//	[11:]   spawn nonce (uvarint length, bytes)
//	[-4:]   CRC32C of everything before
type head struct {
	version uint64
	state   fsm.State
	target  fsm.State
	nonce   string
}

var headKey = []byte("\xffhead")

const headVersion = 1

func headOf(t *fsm.Task) head {
	return head{version: t.Version, state: t.State, target: t.Target, nonce: t.Nonce}
}

// task returns the minimal fsm.Task that folds like the full one for the
// purpose of validating the next events.
func (h head) task(id string) fsm.Task {
	return fsm.Task{ID: id, State: h.state, Version: h.version, Target: h.target, Nonce: h.nonce}
}

func encodeHead(h head) []byte {
	b := make([]byte, 0, 16+len(h.nonce))
	b = append(b, headVersion, byte(h.state), byte(h.target))
	b = binary.LittleEndian.AppendUint64(b, h.version)
	b = appendString(b, h.nonce)
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
	if body[0] != headVersion {
		return bad("unknown head version")
	}
	h := head{state: fsm.State(body[1]), target: fsm.State(body[2]), version: binary.LittleEndian.Uint64(body[3:])}
	if !h.state.Valid() || (h.target != fsm.StateNone && !h.target.Valid()) {
		return bad("invalid state")
	}
	d := decoder{b: body[11:]}
	h.nonce = d.str()
	if d.err != "" || len(d.b) != 0 {
		return bad("bad nonce")
	}
	return h, nil
}
