//go:build linux

package wire

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

// ProtocolVersion is the version of the control protocol. An executor
// refuses a hello of another version (answering with its own); a client
// speaks any version from OldProtocolVersion on to an executor that
// answers with it (one a previous tether started, still running its task
// after an upgrade).
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
// sendmsg. Version 6 launches an fsm.Spec as the log records it, with the
// driver's Policy beside it (launch: a Launch), where version 5 sent a
// LaunchSpec converted from it; and the launch reply's warnings are typed
// (fsm.Warning). Every other request and answer is the same in both, so a
// client of version 6 drives an executor of version 5 through everything
// but a launch (which a task whose executor a previous tether spawned
// never needs: recovery asks it whether it launched, and stops it when
// not). Version 7 launches exec tasks in their sandbox (the launch's
// network, seccomp choice and the policy's AllowSeccomp and AllowMissing,
// which an executor of version 6 would ignore: so a launch needs version
// 7), and an exec request carries no descriptor: the executor makes the
// command's stdin, stdout and stderr pipes and answers with the client's
// ends (three, or the terminal's master), which the client relays. To an
// executor of version 5 or 6 a client sends pipes of its own making
// instead, never the caller's descriptors. Version 8 added the ready
// request (a notify task's run: answered once it sent READY=1, or ended)
// and the status's Ready and NotifyStatus; a launch of a notify task needs
// it (an executor of version 7 would give the task no notify socket).
// Version 9 runs the launch's readiness check (tcp, http or exec: the
// spec's Check, which an executor of version 8 would ignore, leaving the
// task never ready: so a launch needs version 9). Version 10 journals each
// run's readiness (a ready entry in the journal, version 2, fsynced before
// a ready request is answered or a watch told), so a watch returns ready
// entries among the restarts, and says so in the status
// (Status.ReadyJournalled): a driver records the ready event from the
// journal, with the time it happened, whoever waited. To an executor of
// version 8 or 9, which journals none, a driver that waits for readiness
// records it itself, as before (a ready event naming no run, which is
// not a journal entry: fsm.Event.Journalled).
const ProtocolVersion = 10

// ReadyJournalVersion is the first version whose executor journals each
// run's readiness.
const ReadyJournalVersion = 10

// ReadyVersion is the first version whose executor answers a ready
// request.
const ReadyVersion = 8

// OldProtocolVersion is the oldest version a client still speaks: that of
// the executors of the previous releases (5 and 6 differ only in the
// launch, which a client asks of its own version alone).
const OldProtocolVersion = 5

// ExecPipesVersion is the first version whose executor makes an exec's
// pipes itself.
const ExecPipesVersion = 7

const MaxFrame = 1 << 20

// op names a request. Its JSON form is a number.
type Op uint8

const (
	OpHello Op = iota + 1
	OpLaunch
	OpStatus
	OpWait
	OpSignal
	OpStop
	OpShutdown
	OpStats
	OpWatch
	OpExec
	OpExecWait
	OpExecSignal
	OpReady
)

func (o Op) String() string {
	switch o {
	case OpHello:
		return "hello"
	case OpLaunch:
		return "launch"
	case OpStatus:
		return "status"
	case OpWait:
		return "wait"
	case OpSignal:
		return "signal"
	case OpStop:
		return "stop"
	case OpShutdown:
		return "shutdown"
	case OpStats:
		return "stats"
	case OpWatch:
		return "watch"
	case OpExec:
		return "exec"
	case OpExecWait:
		return "exec-wait"
	case OpExecSignal:
		return "exec-signal"
	case OpReady:
		return "ready"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type Request struct {
	ID      uint64        `json:"id"`
	Op      Op            `json:"op"`
	Version int           `json:"version,omitempty"` // hello
	Nonce   string        `json:"nonce,omitempty"`   // hello
	Launch  *Launch       `json:"launch,omitempty"`  // launch
	Signal  int           `json:"signal,omitempty"`  // signal, stop
	Grace   time.Duration `json:"grace,omitempty"`   // stop
	Since   int           `json:"since,omitempty"`   // watch
	Main    bool          `json:"main,omitempty"`    // signal: the task's main process only
	Exec    *ExecSpec     `json:"exec,omitempty"`    // exec
	PID     int           `json:"pid,omitempty"`     // exec-wait, exec-signal: which exec
	FDs     int           `json:"fds,omitempty"`     // descriptors sent with this frame

	// Files are the descriptors that came (or go) with the frame.
	Files []*os.File `json:"-"`
}

type Response struct {
	ID       uint64        `json:"id"`
	Err      *Failure      `json:"err,omitempty"`
	Version  int           `json:"version,omitempty"`  // hello
	Identity *fsm.Identity `json:"identity,omitempty"` // hello
	Status   *Status       `json:"status,omitempty"`   // launch, status, wait, stop
	Stats    *cgroup.Stats `json:"stats,omitempty"`    // stats
	Journal  []fsm.Event   `json:"journal,omitempty"`  // watch: the restart journal's entries from Since on
	Exec     *ExecStatus   `json:"exec,omitempty"`     // exec, exec-wait
	FDs      int           `json:"fds,omitempty"`      // descriptors sent with this frame

	// Files are the descriptors that came (or go) with the frame.
	Files []*os.File `json:"-"`
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
	codeSeccompNotAllowed
	codeHostFeature
	codeAtLimit
	codeArtifact
	codeTemplate
)

// wireErrors maps codes to named errors; the index is the code.
var wireErrors = [...]error{
	codeOther:             nil,
	codeCommandNotFound:   ErrCommandNotFound,
	codeNotExecutable:     ErrNotExecutable,
	codeUnknownUser:       ErrUnknownUser,
	codeCapNotAllowed:     ErrCapNotAllowed,
	codeWorkDir:           ErrWorkDir,
	codeBadSpec:           ErrBadSpec,
	codeLaunch:            ErrLaunch,
	codeNotLaunched:       ErrNotLaunched,
	codeTaskExited:        ErrTaskExited,
	codePeerRefused:       ErrPeerRefused,
	codeProtocolVersion:   ErrProtocolVersion,
	codeNonceMismatch:     ErrNonceMismatch,
	codeProtocol:          ErrProtocol,
	codeUnknownCap:        ErrUnknownCap,
	codeNoCgroup:          ErrNoCgroup,
	codeLimit:             ErrLimit,
	codeIsolation:         ErrIsolation,
	codeNoStats:           ErrNoStats,
	codeRestarting:        ErrRestarting,
	codeExec:              ErrExec,
	codeUnknownExec:       ErrUnknownExec,
	codeSeccompNotAllowed: ErrSeccompNotAllowed,
	codeHostFeature:       ErrHostFeature,
	codeAtLimit:           ErrAtLimit,
	codeArtifact:          ErrArtifact,
	codeTemplate:          ErrTemplate,
}

type Failure struct {
	Code       errCode  `json:"code"`
	Msg        string   `json:"msg"`
	NotAllowed []string `json:"not_allowed,omitempty"`
	Unknown    []string `json:"unknown,omitempty"`
}

func FailureOf(err error) *Failure {
	if err == nil {
		return nil
	}
	w := &Failure{Msg: err.Error()}
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

func (w *Failure) Err() error {
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
func WriteFrame(w io.Writer, v any) error {
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
	if len(b) > MaxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes", ErrProtocol, len(b))
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	return buf, nil
}

// maxFDs bounds the descriptors one frame may carry.
const MaxFDs = 3

// writeFrameFDs writes v as one frame on a unix socket, with files passed
// along (SCM_RIGHTS) on its first bytes. The caller keeps (and closes) its
// copies of files.
func WriteFrameFDs(c *net.UnixConn, v any, files []*os.File) error {
	if len(files) == 0 {
		return WriteFrame(c, v)
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
type RightsReader struct {
	c     *net.UnixConn
	oob   []byte
	files []*os.File
}

func NewRightsReader(c *net.UnixConn) *RightsReader {
	return &RightsReader{c: c, oob: make([]byte, unix.CmsgSpace(4*MaxFDs))}
}

func (r *RightsReader) Read(p []byte) (int, error) {
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
func (r *RightsReader) keep(oob []byte) {
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
			if len(r.files) >= MaxFDs {
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
func (r *RightsReader) Take(n int) ([]*os.File, error) {
	got := r.files
	r.files = nil
	if len(got) != n {
		CloseFiles(got)
		return nil, fmt.Errorf("%w: frame declares %d descriptors, %d came with it", ErrProtocol, n, len(got))
	}
	return got, nil
}

func CloseFiles(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// readFrame reads one frame into v. A clean EOF before a frame is io.EOF.
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
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

// readyMsg is what the executor writes to its ready descriptor, then closes
// it: its identity, or why it could not start.
type ReadyMsg struct {
	Identity *fsm.Identity `json:"identity,omitempty"`
	Err      string        `json:"err,omitempty"`
}

// peerCred is the SO_PEERCRED of a connected unix socket: the pid, uid
// and gid of the process at its other end (as of its connect or listen).
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("executor: SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}
