//go:build linux

package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/statedir"
)

// joinResult reads the join shim's report: the command's pid (and the
// terminal's master), or why it did not start. A shim that closed its end
// without a report died on the way.
func JoinResult(fd int) (JoinReport, *os.File, error) {
	var rep JoinReport
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(joinTimeout)
	for {
		n, err := unix.Poll(pfd, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return rep, nil, fmt.Errorf("%w: waiting for the init shim: %w", wire.ErrExec, err)
		}
		if n == 0 {
			return rep, nil, fmt.Errorf("%w: the init shim gave no verdict within %v", wire.ErrExec, joinTimeout)
		}
		break
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return rep, nil, fmt.Errorf("%w: reading the init shim's report: %w", wire.ErrExec, err)
	}
	var term *os.File
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, f := range fds {
					if term == nil {
						term = os.NewFile(uintptr(f), "pty")
					} else {
						unix.Close(f)
					}
				}
			}
		}
	}
	if n == 0 {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: %w (see %s)", wire.ErrExec, ErrDied, statedir.LogFile)
	}
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: the init shim's report: %w", wire.ErrProtocol, err)
	}
	if rep.Err != nil {
		if term != nil {
			term.Close()
		}
		return rep, nil, rep.Err.Err()
	}
	if rep.PID <= 0 {
		if term != nil {
			term.Close()
		}
		return rep, nil, fmt.Errorf("%w: the init shim reported no pid", wire.ErrProtocol)
	}
	return rep, term, nil
}

// joinTimeout bounds the wait for the join shim's report.
const joinTimeout = 10 * time.Second
