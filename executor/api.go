//go:build linux

package executor

import (
	"fmt"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// What the client shares with the executor process (package
// executor/server) is defined once, in executor/internal/wire (the
// protocol, the side files) and executor/internal/spec (what a spec means
// on a host); these are its public names.

// Launch modes and namespace modes (fsm.Spec.Driver, PIDMode, IPCMode).
const (
	ModeExec    = wire.ModeExec
	ModeRawExec = wire.ModeRawExec
	ModeHost    = wire.ModeHost
)

// The executor's crash points (TETHER_CRASHPOINT), on its restart path
// (CrashPoints lists them) and on its readiness path: before and after it
// journals a run's ready entry (reached only by a task that becomes ready,
// so not among CrashPoints, whose every point a restarting task reaches).
const (
	CrashBeforeRestartIntent = wire.CrashBeforeRestartIntent
	CrashAfterRestartIntent  = wire.CrashAfterRestartIntent
	CrashAfterRelaunch       = wire.CrashAfterRelaunch
	CrashBeforeReadyEntry    = wire.CrashBeforeReadyEntry
	CrashAfterReadyEntry     = wire.CrashAfterReadyEntry
)

// CrashPoints lists the executor's crash points.
func CrashPoints() []string { return wire.CrashPoints() }

// Launch is what an executor is asked to launch: the task's fsm.Spec as the
// log records it, and the driver's Policy (their fields are promoted).
type Launch = wire.Launch

// Policy is the driver's host policy for exec tasks, sent with each
// launch: the capability allow list (nil: DefaultAllowedCaps), what an
// exec task's root is built from (nil: DefaultChroot), the seccomp allow
// list (AllowSeccomp) and the sandbox parts exec tasks may run without on
// a host that lacks them (AllowMissing).
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

// SideFiles are the files an executor leaves in its task directory (the
// directory's path): read, never through a symbolic link, only a regular
// file, size-capped. Each record is believed only once it matches the log
// (Match): Real does that for a driver.
type SideFiles string

// Identity reads the executor's identity file (an error matching
// fs.ErrNotExist when there is none).
func (f SideFiles) Identity() (fsm.Identity, error) { return wire.ReadIdentity(string(f)) }

// ExitRecord reads the exit record; ok is false when there is none.
func (f SideFiles) ExitRecord() (ExitRecord, bool, error) { return wire.ReadExitRecord(string(f)) }

// LaunchRecord reads the launch record; ok is false when there is none.
func (f SideFiles) LaunchRecord() (LaunchRecord, bool, error) {
	return wire.ReadLaunchRecord(string(f))
}

// Journal reads the restart journal; ok is false when there is none.
func (f SideFiles) Journal() (Journal, bool, error) { return wire.ReadJournal(string(f)) }

// The defaults of Policy.
var (
	// DefaultAllowedCaps is Nomad's exec driver default allow list, used
	// when Policy.AllowedCaps is nil. It is also the set an exec-mode task
	// gets when it adds and drops nothing. NET_RAW is deliberately absent.
	DefaultAllowedCaps = spec.DefaultAllowedCaps
	// DefaultChroot is what an exec task's root is built from when
	// Policy.Chroot is nil: Nomad's default chroot_env, each an existing
	// host directory bound read-only at the same place.
	DefaultChroot = spec.DefaultChroot
)

// ValidatePolicy checks a driver's policy as a launch would: the
// capability allow list's names, the chroot entries ("SRC" or "SRC:DST",
// existing sources), AllowSeccomp ("unconfined" or absolute profile
// paths) and AllowMissing ("cgroupns", "keyring"); the error names the
// field.
func ValidatePolicy(p Policy) error {
	if err := spec.ValidateCaps(nil, nil, p.AllowedCaps); err != nil && p.AllowedCaps != nil {
		return fmt.Errorf("executor: policy AllowedCaps: %w", err)
	}
	if p.Chroot != nil {
		if err := spec.ValidateChroot(p.Chroot); err != nil {
			return fmt.Errorf("executor: policy Chroot: %w", err)
		}
	}
	if err := spec.ValidatePolicy(p.AllowSeccomp, p.AllowMissing); err != nil {
		return fmt.Errorf("executor: policy AllowSeccomp/AllowMissing: %w", err)
	}
	if err := spec.ValidateTrust(p.AllowDrivers, p.AllowHostNamespaces); err != nil {
		return fmt.Errorf("executor: policy AllowDrivers/AllowHostNamespaces: %w", err)
	}
	return nil
}
