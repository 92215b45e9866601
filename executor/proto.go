//go:build linux

package executor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

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
// and logs fields, and the launch reply's warnings. Version 5 added the
// signal's main-only mode and the exec requests (exec, exec-wait,
// exec-signal), whose frames carry descriptors (SCM_RIGHTS): a frame
// declares how many (fds) and they travel with its bytes in the same
// sendmsg.
const ProtocolVersion = 5

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
	opExec
	opExecWait
	opExecSignal
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
	case opExec:
		return "exec"
	case opExecWait:
		return "exec-wait"
	case opExecSignal:
		return "exec-signal"
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
	Main    bool          `json:"main,omitempty"`    // signal: the task's main process only
	Exec    *ExecSpec     `json:"exec,omitempty"`    // exec
	PID     int           `json:"pid,omitempty"`     // exec-wait, exec-signal: which exec
	FDs     int           `json:"fds,omitempty"`     // descriptors sent with this frame

	files []*os.File // the descriptors that came (or go) with the frame
}

type response struct {
	ID       uint64        `json:"id"`
	Err      *wireError    `json:"err,omitempty"`
	Version  int           `json:"version,omitempty"`  // hello
	Identity *fsm.Identity `json:"identity,omitempty"` // hello
	Status   *Status       `json:"status,omitempty"`   // launch, status, wait, stop
	Stats    *cgroup.Stats `json:"stats,omitempty"`    // stats
	Journal  []fsm.Event   `json:"journal,omitempty"`  // watch: the restart journal's entries from Since on
	Exec     *ExecStatus   `json:"exec,omitempty"`     // exec, exec-wait
	FDs      int           `json:"fds,omitempty"`      // descriptors sent with this frame

	files []*os.File // the descriptors that came (or go) with the frame
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
	codeRestarting
	codeExec
	codeUnknownExec
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
	codeRestarting:      ErrRestarting,
	codeExec:            ErrExec,
	codeUnknownExec:     ErrUnknownExec,
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
	buf, err := encodeFrame(v)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

func encodeFrame(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrProtocol, err)
	}
	if len(b) > maxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes", ErrProtocol, len(b))
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	return buf, nil
}

// maxFDs bounds the descriptors one frame may carry.
const maxFDs = 3

// writeFrameFDs writes v as one frame on a unix socket, with files passed
// along (SCM_RIGHTS) on its first bytes. The caller keeps (and closes) its
// copies of files.
func writeFrameFDs(c *net.UnixConn, v any, files []*os.File) error {
	if len(files) == 0 {
		return writeFrame(c, v)
	}
	buf, err := encodeFrame(v)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, _, err := c.WriteMsgUnix(buf, unix.UnixRights(fds...), nil)
	if err != nil {
		return err
	}
	if n < len(buf) { // a stream socket may take a long frame in parts
		_, err = c.Write(buf[n:])
	}
	return err
}

// rightsReader reads a unix stream socket with recvmsg, keeping the
// descriptors that arrive with the bytes (SCM_RIGHTS). The kernel hands
// them over with the first bytes of the sendmsg that carried them and
// never merges two such sendmsgs in one read, and readFrame reads no byte
// past its frame, so once a frame is read the descriptors held are the
// ones sent with it (take).
type rightsReader struct {
	c     *net.UnixConn
	oob   []byte
	files []*os.File
}

func newRightsReader(c *net.UnixConn) *rightsReader {
	return &rightsReader{c: c, oob: make([]byte, unix.CmsgSpace(4*maxFDs))}
}

func (r *rightsReader) Read(p []byte) (int, error) {
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, r.oob)
	if oobn > 0 {
		r.keep(r.oob[:oobn])
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// keep takes the descriptors out of a control message (received
// close-on-exec: Go's ReadMsgUnix asks for MSG_CMSG_CLOEXEC).
func (r *rightsReader) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if len(r.files) >= maxFDs {
				unix.Close(fd)
				continue
			}
			r.files = append(r.files, os.NewFile(uintptr(fd), "received"))
		}
	}
}

// take returns the descriptors that came with the frame just read, which
// declared n of them. Any other count is a protocol error (and closes
// what came).
func (r *rightsReader) take(n int) ([]*os.File, error) {
	got := r.files
	r.files = nil
	if len(got) != n {
		closeFiles(got)
		return nil, fmt.Errorf("%w: frame declares %d descriptors, %d came with it", ErrProtocol, n, len(got))
	}
	return got, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
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
