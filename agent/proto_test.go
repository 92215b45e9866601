package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

func TestDecodeRequest_ValidRequests(t *testing.T) {
	spec := sleeper("web", "m")
	for _, r := range []Request{
		{Op: OpStart, ID: "web-1", Spec: &spec},
		{Op: OpStop, ID: "web-1", Signal: 15, Grace: time.Second},
		{Op: OpSignal, ID: "web-1", Signal: 1, Main: true},
		{Op: OpList, All: true},
		{Op: OpReconcile, IDs: []string{"a", "b"}},
		{Op: OpEnable, File: "/etc/tether/web.hcl", Spec: &spec},
		{Op: OpDisable, Name: "web"},
		{Op: OpWatch},
		{Op: OpGC, OlderThan: time.Hour},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRequest(b)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip of %s: %+v", b, got)
		}
	}
}

func TestDecodeRequest_RefusesBadRequests(t *testing.T) {
	for in, want := range map[string]error{
		`{"op":"start","id":"web-1"}`:                          ErrBadRequest, // no spec
		`{"op":"start","id":"../x","spec":{}}`:                 ErrBadRequest,
		`{"op":"launch","id":"a"}`:                             ErrBadRequest,
		`{"op":"stop","id":"a","signal":99}`:                   ErrBadRequest,
		`{"op":"stop","id":"a","grace":-1}`:                    ErrBadRequest,
		`{"op":"enable","file":"web.hcl","spec":{"Name":"w"}}`: ErrBadRequest, // relative file
		`{"op":"enable","file":"/w.hcl","spec":{}}`:            ErrBadRequest, // no name
		`{"op":"disable"}`:                                     ErrBadRequest,
		`{"op":"list","allow_caps":["net_raw"]}`:               ErrProtocol, // no such field: a request cannot carry an allow list
		`{"op":"list"} {"op":"list"}`:                          ErrProtocol,
		`not json`:                                             ErrProtocol,
		``:                                                     ErrProtocol,
		`{"op":"none"}`:                                        ErrBadRequest,
	} {
		_, err := DecodeRequest([]byte(in))
		if !errors.Is(err, want) {
			t.Errorf("DecodeRequest(%s) = %v; want %v", in, err, want)
		}
	}
	if _, err := DecodeRequest(bytes.Repeat([]byte{' '}, maxRequestFrame+1)); !errors.Is(err, ErrProtocol) {
		t.Errorf("an oversized request: %v", err)
	}
}

func TestReadFrame_RefusesOversizedFrames(t *testing.T) {
	var buf bytes.Buffer
	buf.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	if _, err := readFrame(&buf, maxRequestFrame); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "2147483647") {
		t.Fatalf("readFrame of a 2 GiB header = %v; want a protocol error naming its size, nothing allocated", err)
	}
}

// An error crosses the socket with its text and its identity.
func TestWireError_KeepsTextAndIdentity(t *testing.T) {
	inner := &driver.TaskError{Task: "web-1", State: fsm.StateRunning, Err: driver.ErrNotRunning}
	for _, err := range []error{
		inner,
		&driver.TaskError{Task: "web-1", Err: driver.ErrUnknownTask},
		&store.CorruptError{Task: "t", Seq: 3, Reason: "checksum mismatch"},
		errors.Join(errors.New("context"), store.ErrLocked),
	} {
		w := toWireError(err)
		b, _ := json.Marshal(w)
		var back wireError
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := back.err()
		if got.Error() != err.Error() {
			t.Errorf("text: %q, want %q", got, err)
		}
		for _, c := range wireCodes {
			if errors.Is(got, c.err) != errors.Is(err, c.err) {
				t.Errorf("%q: errors.Is(%v) = %v across the socket, %v here", err, c.err, errors.Is(got, c.err), errors.Is(err, c.err))
			}
		}
		var te *driver.TaskError
		if errors.As(err, &te) != errors.As(got, &te) {
			t.Errorf("%q: errors.As(*driver.TaskError) differs across the socket", err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	spec := sleeper("web", "m")
	for _, r := range []Request{
		{Op: OpStart, ID: "web-1", Spec: &spec},
		{Op: OpStop, ID: "web-1", Signal: 15, Grace: time.Second},
		{Op: OpEnable, File: "/etc/tether/web.hcl", Spec: &spec},
		{Op: OpReconcile, IDs: []string{"a"}},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"start","id":"a","spec":{"Env":{"":""}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("DecodeRequest: an error of neither kind: %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted a request that does not validate: %v", err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		again, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("an accepted request, encoded, is refused: %v\n%s", err, b)
		}
		b2, _ := json.Marshal(again)
		if !bytes.Equal(b, b2) {
			t.Fatalf("not stable:\n%s\n%s", b, b2)
		}
	})
}
