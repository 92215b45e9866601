package seccomp

import (
	"errors"
	"fmt"
)

// Errors about the host.
var (
	// ErrUnsupported is returned by CheckHost and Install when the kernel
	// cannot filter syscalls (no CONFIG_SECCOMP_FILTER, or a seccomp(2)
	// that is refused). The product shows it as is.
	ErrUnsupported = errors.New("seccomp: this host has no seccomp filter support; allow running without it with --allow-seccomp unconfined")
	// ErrUnsupportedArch is returned by Compile on an architecture that
	// has no syscall table here (only x86_64, i386 and aarch64 have one).
	ErrUnsupportedArch = errors.New("seccomp: no syscall table for this architecture; allow running without a filter with --allow-seccomp unconfined")
)

// Errors about a profile. Each comes wrapped in a *ProfileError that says
// where (the file, the rule) and what to do.
var (
	// ErrProfileSyntax is returned for a profile that is not JSON of the
	// Docker/OCI shape, or that has a field this shape does not know.
	ErrProfileSyntax = errors.New("seccomp: profile is not a Docker/OCI seccomp profile")
	// ErrEmptyProfile is returned for a profile with neither a default
	// action nor a rule: Docker reads that as "no filter", which tether
	// only grants as unconfined.
	ErrEmptyProfile = errors.New("seccomp: profile is empty")
	// ErrDenyList is returned for a profile whose default action lets an
	// unlisted syscall through (SCMP_ACT_ALLOW, SCMP_ACT_LOG): tether
	// runs allow lists only, since a deny list lets every syscall it does
	// not name through, new ones and the i386 ABI's alike.
	ErrDenyList = errors.New("seccomp: profile is a deny list")
	// ErrUnknownSyscall is returned for a syscall name that no Linux
	// architecture has (a typo, most often).
	ErrUnknownSyscall = errors.New("seccomp: unknown syscall")
	// ErrUnknownAction is returned for an action Docker's profiles do not
	// define.
	ErrUnknownAction = errors.New("seccomp: unknown action")
	// ErrUnsupportedAction is returned for an action tether does not run:
	// SCMP_ACT_TRACE and SCMP_ACT_NOTIFY need a supervisor the task does
	// not have.
	ErrUnsupportedAction = errors.New("seccomp: unsupported action")
	// ErrUnknownArch is returned for an architecture name Docker's
	// profiles do not define.
	ErrUnknownArch = errors.New("seccomp: unknown architecture")
	// ErrUnknownOperator is returned for an argument comparison Docker's
	// profiles do not define.
	ErrUnknownOperator = errors.New("seccomp: unknown argument operator")
	// ErrUnknownCapability is returned for a capability name in an
	// includes/excludes condition that Linux does not define.
	ErrUnknownCapability = errors.New("seccomp: unknown capability")
	// ErrBadRule is returned for a rule that cannot be compiled as
	// written: no names, both name and names, an argument index past 5,
	// an errno out of range or on an action that returns none, a flag or
	// a listener tether does not support.
	ErrBadRule = errors.New("seccomp: bad profile rule")
	// ErrTooLarge is returned when a profile compiles to more BPF
	// instructions than the kernel loads (4096).
	ErrTooLarge = errors.New("seccomp: filter too large")
)

// Errors about the operator's choice.
var (
	// ErrBadChoice is returned by ParseChoice for a value that is neither
	// "default", "unconfined" nor an absolute path.
	ErrBadChoice = errors.New(`seccomp: the seccomp option must be "default", "unconfined" or the absolute path of a profile`)
)

// Errors about installing.
var (
	// ErrBadBinary is returned by Filter.UnmarshalBinary for bytes that
	// are not a filter MarshalBinary wrote for this architecture.
	ErrBadBinary = errors.New("seccomp: not a compiled filter for this architecture")
	// ErrInstall is returned by Install when the kernel refused the filter.
	ErrInstall = errors.New("seccomp: install the filter")
)

// ProfileError says where in a profile a problem is: the file (when the
// profile came from one), the rule (its index in "syscalls", when the
// problem is in a rule) and the field. Unwrap gives the named error.
type ProfileError struct {
	Source string // the profile's path, or "the default profile"
	Rule   int    // index in "syscalls", or -1
	Field  string // the JSON field, or ""
	Err    error  // one of the named errors above, wrapped with detail
}

func (e *ProfileError) Error() string {
	where := e.Source
	if e.Rule >= 0 {
		where += fmt.Sprintf(": syscalls[%d]", e.Rule)
	}
	if e.Field != "" {
		where += ": " + e.Field
	}
	return where + ": " + e.Err.Error()
}

func (e *ProfileError) Unwrap() error { return e.Err }
