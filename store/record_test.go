package store

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"
)

// genStrings draws a list, nil when empty (the decoder's form).
func genStrings(t *rapid.T, label string) []string {
	l := rapid.SliceOfN(rapid.String(), 0, 4).Draw(t, label)
	if len(l) == 0 {
		return nil
	}
	return l
}

func genEvent(t *rapid.T) fsm.Event {
	e := fsm.Event{
		Type: rapid.SampledFrom(fsm.EventTypes()).Draw(t, "type"),
		Time: rapid.Int64().Draw(t, "time"),
	}
	if rapid.Bool().Draw(t, "spec") {
		s := &fsm.Spec{
			Name: rapid.String().Draw(t, "name"), Driver: rapid.String().Draw(t, "driver"),
			Command: rapid.String().Draw(t, "command"), Args: genStrings(t, "args"),
			Dir: rapid.String().Draw(t, "dir"), User: rapid.String().Draw(t, "user"),
			CapAdd: genStrings(t, "cap_add"), CapDrop: genStrings(t, "cap_drop"),
			KillSignal:  rapid.Int().Draw(t, "kill_signal"),
			KillTimeout: time.Duration(rapid.Int64().Draw(t, "kill_timeout")),
		}
		if env := rapid.MapOfN(rapid.String(), rapid.String(), 0, 4).Draw(t, "env"); len(env) > 0 {
			s.Env = env
		}
		e.Spec = s
	}
	e.Nonce = rapid.String().Draw(t, "nonce")
	if rapid.Bool().Draw(t, "executor") {
		e.Executor = &fsm.Identity{
			PID: rapid.Int().Draw(t, "pid"), StartTime: rapid.Uint64().Draw(t, "start"),
			BootID: rapid.String().Draw(t, "boot"), Nonce: rapid.String().Draw(t, "xnonce"),
			Socket: rapid.String().Draw(t, "socket"),
		}
	}
	e.TaskPID = rapid.Int().Draw(t, "task_pid")
	e.TaskStartTime = rapid.Uint64().Draw(t, "task_start")
	if rapid.Bool().Draw(t, "exit") {
		e.Exit = &fsm.ExitStatus{Code: rapid.Int().Draw(t, "code"), Signal: rapid.Int().Draw(t, "exit_signal")}
	}
	e.Signal = rapid.Int().Draw(t, "signal")
	e.Grace = time.Duration(rapid.Int64().Draw(t, "grace"))
	e.Reason = rapid.String().Draw(t, "reason")
	e.Target = rapid.SampledFrom(append([]fsm.State{fsm.StateNone}, fsm.States()...)).Draw(t, "target")
	return e
}

func TestRecord_RoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := genEvent(t)
		seq := rapid.Uint64().Draw(t, "seq")
		rec := encodeRecord(nil, seq, &e)
		var got fsm.Event
		gotSeq, derr := decodeRecord(rec, &got)
		if derr != nil {
			t.Fatalf("decode of a fresh encoding: %+v", derr)
		}
		if gotSeq != seq || !reflect.DeepEqual(got, e) {
			t.Fatalf("decode(encode(e)):\n got %#v seq %d\nwant %#v seq %d", got, gotSeq, e, seq)
		}
		if again := encodeRecord(nil, gotSeq, &got); !bytes.Equal(again, rec) {
			t.Fatalf("encode(decode(x)) != x:\n% x\n% x", again, rec)
		}
	})
}

func TestDecodeRecord_EveryTruncationIsCorrupt(t *testing.T) {
	for _, e := range append(runningLog(1), finishLog(9)...) {
		rec := encodeRecord(nil, 3, &e)
		for n := range len(rec) {
			var got fsm.Event
			if _, derr := decodeRecord(rec[:n], &got); derr == nil || derr.version != 0 {
				t.Fatalf("%s cut to %d of %d bytes decoded: %+v", e.Type, n, len(rec), derr)
			}
			// Even with a checksum that matches the cut record.
			if n >= headerLen {
				cut := bytes.Clone(rec[:n])
				binary.LittleEndian.PutUint32(cut, checksum(cut))
				if _, derr := decodeRecord(cut, &got); derr == nil {
					t.Fatalf("%s cut to %d bytes with a fixed checksum decoded", e.Type, n)
				}
			}
		}
		for i := range rec { // every single-bit flip is caught
			bad := bytes.Clone(rec)
			bad[i] ^= 1
			var got fsm.Event
			if _, derr := decodeRecord(bad, &got); derr == nil {
				t.Fatalf("%s with byte %d flipped decoded", e.Type, i)
			}
		}
	}
}

func TestDecodeRecord_UnknownType(t *testing.T) {
	e := fsm.Event{Type: fsm.EventRunning}
	rec := encodeRecord(nil, 1, &e)
	rec[5] = 200
	binary.LittleEndian.PutUint32(rec, checksum(rec))
	var got fsm.Event
	if _, derr := decodeRecord(rec, &got); derr == nil || derr.reason != "unknown event type 200" {
		t.Fatalf("unknown type: %+v", derr)
	}
}

// FuzzDecodeRecord holds the decoder to: never panic, and anything it
// accepts re-encodes to the same bytes (the form is canonical). Each input
// is tried as is and with its checksum fixed, so the body parser is
// exercised too. The seed corpus is in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	for i, e := range append(runningLog(1), finishLog(9)...) {
		f.Add(encodeRecord(nil, uint64(i+1), &e))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		try := func(rec []byte) {
			var e fsm.Event
			seq, derr := decodeRecord(rec, &e)
			if derr != nil {
				return
			}
			if again := encodeRecord(nil, seq, &e); !bytes.Equal(again, rec) {
				t.Fatalf("accepted a non-canonical record:\n in % x\nout % x", rec, again)
			}
		}
		try(data)
		if len(data) >= headerLen {
			fixed := bytes.Clone(data)
			binary.LittleEndian.PutUint32(fixed, checksum(fixed))
			try(fixed)
		}
	})
}
