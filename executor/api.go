//go:build linux

package executor

import (
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// What the client shares with the executor process (package
// executor/server) is defined once, in executor/internal/wire (the
// protocol, the side files) and executor/internal/spec (what a spec means
// on a host); these are its public names.

// ProtocolVersion is the version of the control protocol (see the package
// doc).
const ProtocolVersion = wire.ProtocolVersion

// Launch modes and namespace modes (fsm.Spec.Driver, PIDMode, IPCMode).
const (
	ModeExec    = wire.ModeExec
	ModeRawExec = wire.ModeRawExec
	ModeHost    = wire.ModeHost
)

// The executor's crash points (TETHER_CRASHPOINT), on its restart path.
const (
	CrashBeforeRestartIntent = wire.CrashBeforeRestartIntent
	CrashAfterRestartIntent  = wire.CrashAfterRestartIntent
	CrashAfterRelaunch       = wire.CrashAfterRelaunch
)

// CrashPoints lists the executor's crash points.
func CrashPoints() []string { return wire.CrashPoints() }

// Launch is what an executor is asked to launch: the task's fsm.Spec as the
// log records it, and the driver's Policy (their fields are promoted).
type Launch = wire.Launch

// Policy is the driver's host policy for exec tasks, sent with each
// launch: the capability allow list (nil: DefaultAllowedCaps) and what an
// exec task's root is built from (nil: DefaultChroot).
type Policy = wire.Policy

// Status is what the executor knows of its task.
type Status = wire.Status

// ExecSpec is a command to run inside the running task.
type ExecSpec = wire.ExecSpec

// ExitRecord is the on-disk form of statedir.ExitStatusFile.
type ExitRecord = wire.ExitRecord

// LaunchRecord is the on-disk form of statedir.LaunchFile.
type LaunchRecord = wire.LaunchRecord

// Journal is a restart journal as read from a task directory.
type Journal = wire.Journal

// ReadIdentity reads the identity file an executor left in taskDir.
func ReadIdentity(taskDir string) (fsm.Identity, error) { return wire.ReadIdentity(taskDir) }

// ReadExitRecord returns the exit record the executor left in taskDir.
func ReadExitRecord(taskDir string) (ExitRecord, bool, error) { return wire.ReadExitRecord(taskDir) }

// ReadLaunchRecord returns the launch record the executor left in taskDir.
func ReadLaunchRecord(taskDir string) (LaunchRecord, bool, error) {
	return wire.ReadLaunchRecord(taskDir)
}

// ReadJournal reads the restart journal in taskDir.
func ReadJournal(taskDir string) (Journal, bool, error) { return wire.ReadJournal(taskDir) }

// JournalFolded is how many entries of a task's restart journal its log
// already holds.
func JournalFolded(st fsm.Task) int { return wire.JournalFolded(st) }

// DefaultAllowedCaps is Nomad's exec driver default allow list.
var DefaultAllowedCaps = spec.DefaultAllowedCaps

// DefaultChroot is what an exec task's root is built from by default.
var DefaultChroot = spec.DefaultChroot

// ValidateChroot checks chroot entries ("SRC" or "SRC:DST").
func ValidateChroot(entries []string) error { return spec.ValidateChroot(entries) }
