package seccomp

import (
	"fmt"
	"strconv"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Action is what the filter does with a syscall.
type Action uint8

// The actions tether runs. A profile's SCMP_ACT_TRACE and SCMP_ACT_NOTIFY
// are refused (ErrUnsupportedAction).
const (
	ActErrno       Action = iota // fail the syscall with an errno (EPERM unless the rule names one)
	ActAllow                     // run the syscall
	ActLog                       // run the syscall and log it (the audit log)
	ActKillThread                // kill the calling thread (SCMP_ACT_KILL, SCMP_ACT_KILL_THREAD)
	ActKillProcess               // kill the whole process
	ActTrap                      // send SIGSYS
)

// The kernel's SECCOMP_RET_* values (linux/seccomp.h).
const (
	retKillProcess uint32 = 0x80000000
	retKillThread  uint32 = 0x00000000
	retTrap        uint32 = 0x00030000
	retErrno       uint32 = 0x00050000
	retLog         uint32 = 0x7ffc0000
	retAllow       uint32 = 0x7fff0000
	retActionFull  uint32 = 0xffff0000
	retData        uint32 = 0x0000ffff
)

var actionNames = [...]string{
	ActErrno:       "errno",
	ActAllow:       "allow",
	ActLog:         "log",
	ActKillThread:  "kill_thread",
	ActKillProcess: "kill_process",
	ActTrap:        "trap",
}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// allows reports whether the action lets the syscall run.
func (a Action) allows() bool { return a == ActAllow || a == ActLog }

// parseAction maps a profile's action to an Action.
func parseAction(a specs.LinuxSeccompAction) (Action, error) {
	switch a {
	case specs.ActErrno:
		return ActErrno, nil
	case specs.ActAllow:
		return ActAllow, nil
	case specs.ActLog:
		return ActLog, nil
	case specs.ActKill, specs.ActKillThread:
		return ActKillThread, nil
	case specs.ActKillProcess:
		return ActKillProcess, nil
	case specs.ActTrap:
		return ActTrap, nil
	case specs.ActTrace, specs.ActNotify:
		return 0, fmt.Errorf("%w %q: it needs a tracer or a supervisor the task does not have; use SCMP_ACT_ERRNO", ErrUnsupportedAction, a)
	case "":
		return 0, fmt.Errorf("%w: empty (use SCMP_ACT_ALLOW or SCMP_ACT_ERRNO)", ErrUnknownAction)
	}
	return 0, fmt.Errorf("%w %q (Docker's are SCMP_ACT_ALLOW, SCMP_ACT_ERRNO, SCMP_ACT_KILL, SCMP_ACT_KILL_PROCESS, SCMP_ACT_KILL_THREAD, SCMP_ACT_TRAP, SCMP_ACT_LOG)", ErrUnknownAction, a)
}

// ret is the filter's return value for action a with errno e (used by
// ActErrno only).
func ret(a Action, e syscall.Errno) uint32 {
	switch a {
	case ActAllow:
		return retAllow
	case ActLog:
		return retLog
	case ActKillThread:
		return retKillThread
	case ActKillProcess:
		return retKillProcess
	case ActTrap:
		return retTrap
	}
	return retErrno | uint32(e)&retData
}

// Result is what the filter decided for one syscall: the action and, for
// ActErrno, the errno the syscall returns.
type Result struct {
	Action Action
	Errno  syscall.Errno
}

func (r Result) String() string {
	if r.Action == ActErrno {
		return "errno " + errnoName(r.Errno)
	}
	return r.Action.String()
}

// resultOf decodes a filter's return value.
func resultOf(v uint32) Result {
	switch v & retActionFull {
	case retAllow:
		return Result{Action: ActAllow}
	case retLog:
		return Result{Action: ActLog}
	case retErrno:
		return Result{Action: ActErrno, Errno: syscall.Errno(v & retData)}
	case retTrap:
		return Result{Action: ActTrap}
	case retKillProcess:
		return Result{Action: ActKillProcess}
	}
	return Result{Action: ActKillThread}
}

// errnoName is the errno's symbol (EPERM), or its number.
func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return strconv.Itoa(int(e))
}
