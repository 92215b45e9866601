//go:build linux

package executor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/fsm"
)

// ProtocolVersion is the version of the control protocol. A client and an
// executor of different versions refuse each other at the hello.
//
// The protocol is length-prefixed JSON on a unix stream socket: each frame is
// a 4-byte big-endian length followed by one JSON object, at most
// maxFrame bytes. The client sends requests carrying an id; the executor
// answers each with a response carrying the same id, in any order (a wait
// answers when the task has exited). The first request on a connection must
// be a hello with the protocol version and the executor's nonce.
//
// Version 3 added the stats request, the launch's containment, isolation
// and logs fields, and the launch reply's warnings.
const ProtocolVersion = 4

const maxFrame = 1 << 20

// op names a request. Its JSON form is a number.
type op uint8

const (
	opHello op = iota + 1
	opLaunch
	opStatus
	opWait
	opSignal
	opStop
	opShutdown
	opStats
	opWatch
)

func (o op) String() string {
	switch o {
	case opHello:
		return "hello"
	case opLaunch:
		return "launch"
	case opStatus:
		return "status"
	case opWait:
		return "wait"
	case opSignal:
		return "signal"
	case opStop:
		return "stop"
	case opShutdown:
		return "shutdown"
	case opStats:
		return "stats"
	case opWatch:
		return "watch"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type request struct {
	ID      uint64        `json:"id"`
	Op      op            `json:"op"`
	Version int           `json:"version,omitempty"` // hello
	Nonce   string        `json:"nonce,omitempty"`   // hello
	Spec    *LaunchSpec   `json:"spec,omitempty"`    // launch
	Signal  int           `json:"signal,omitempty"`  // signal, stop
	Grace   time.Duration `json:"grace,omitempty"`   // stop
	Since   int           `json:"since,omitempty"`   // watch
}

type response struct {
	ID       uint64        `json:"id"`
	Err      *wireError    `json:"err,omitempty"`
	Version  int           `json:"version,omitempty"`  // hello
	Identity *fsm.Identity `json:"identity,omitempty"` // hello
	Status   *Status       `json:"status,omitempty"`   // launch, status, wait, stop
	Stats    *cgroup.Stats `json:"stats,omitempty"`    // stats
	Journal  []fsm.Event   `json:"journal,omitempty"`  // watch: the restart journal's entries from Since on
}

// errCode is the wire name of a named error.
type errCode uint8

const (
	codeOther errCode = iota
	codeCommandNotFound
	codeNotExecutable
	codeUnknownUser
	codeCapNotAllowed
	codeWorkDir
	codeBadSpec
	codeLaunch
	codeNotLaunched
	codeTaskExited
	codePeerRefused
	codeProtocolVersion
	codeNonceMismatch
	codeProtocol
	codeUnknownCap
	codeNoCgroup
	codeLimit
	codeIsolation
	codeNoStats
)

// wireErrors maps codes to named errors; the index is the code.
var wireErrors = [...]error{
	codeOther:           nil,
	codeCommandNotFound: ErrCommandNotFound,
	codeNotExecutable:   ErrNotExecutable,
	codeUnknownUser:     ErrUnknownUser,
	codeCapNotAllowed:   ErrCapNotAllowed,
	codeWorkDir:         ErrWorkDir,
	codeBadSpec:         ErrBadSpec,
	codeLaunch:          ErrLaunch,
	codeNotLaunched:     ErrNotLaunched,
	codeTaskExited:      ErrTaskExited,
	codePeerRefused:     ErrPeerRefused,
	codeProtocolVersion: ErrProtocolVersion,
	codeNonceMismatch:   ErrNonceMismatch,
	codeProtocol:        ErrProtocol,
	codeUnknownCap:      ErrUnknownCap,
	codeNoCgroup:        ErrNoCgroup,
	codeLimit:           ErrLimit,
	codeIsolation:       ErrIsolation,
	codeNoStats:         ErrNoStats,
}

type wireError struct {
	Code       errCode  `json:"code"`
	Msg        string   `json:"msg"`
	NotAllowed []string `json:"not_allowed,omitempty"`
	Unknown    []string `json:"unknown,omitempty"`
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error()}
	var ce *CapError
	if errors.As(err, &ce) {
		w.NotAllowed, w.Unknown = ce.NotAllowed, ce.Unknown
	}
	for i, e := range wireErrors {
		if e != nil && errors.Is(err, e) {
			w.Code = errCode(i)
			break
		}
	}
	return w
}

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	if len(w.NotAllowed) > 0 || len(w.Unknown) > 0 {
		return &CapError{NotAllowed: w.NotAllowed, Unknown: w.Unknown}
	}
	var named error
	if int(w.Code) < len(wireErrors) {
		named = wireErrors[w.Code]
	}
	return &RemoteError{Msg: w.Msg, Err: named}
}

// writeFrame writes v as one frame.
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: encode: %w", ErrProtocol, err)
	}
	if len(b) > maxFrame {
		return fmt.Errorf("%w: frame of %d bytes", ErrProtocol, len(b))
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// readFrame reads one frame into v. A clean EOF before a frame is io.EOF.
func readFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return fmt.Errorf("%w: frame of %d bytes", ErrProtocol, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: decode: %w", ErrProtocol, err)
	}
	return nil
}
