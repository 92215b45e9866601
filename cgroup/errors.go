//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tether-fsm/tether/internal/proc"
)

// Errors about the host.
var (
	// ErrUnavailable is returned when this process cannot create task
	// cgroups at all: not root and no delegation, a read-only cgroupfs, no
	// cgroup hierarchy mounted, no way to kill a cgroup. The wrapping error
	// says which. A driver runs raw_exec without containment (with one
	// warning) and refuses exec.
	ErrUnavailable = errors.New("cgroup: unavailable")
	// ErrNoController is wrapped by LimitError: a limit needs a controller
	// this host does not offer.
	ErrNoController = errors.New("cgroup: controller not available")
	// ErrNoHierarchy is returned when a location names a hierarchy this host
	// does not mount (a location recorded on another layout).
	ErrNoHierarchy = errors.New("cgroup: hierarchy not mounted")
)

// Errors about names, locations and limits.
var (
	// ErrBadLocation is returned for a location string that does not parse,
	// names no tether cgroup, or escapes its hierarchy; and for a task id or
	// nonce a location cannot be made from.
	ErrBadLocation = errors.New("cgroup: bad location")
	// ErrNotOurs is returned when a location is not the one for the given
	// task and nonce. Nothing is touched.
	// It is tether's one ErrNotOurs (executor.ErrNotOurs, driver.ErrNotOurs).
	ErrNotOurs = proc.ErrNotOurs
	// ErrBadLimits is returned for limits that make no sense (negative,
	// memory above memory_max, more cores than the parent cgroup has).
	ErrBadLimits = errors.New("cgroup: bad limits")
	// ErrBadOOMScoreAdj is returned for an oom_score_adj outside -1000..1000.
	ErrBadOOMScoreAdj = errors.New("cgroup: oom_score_adj out of range")
)

// Errors about killing and removing.
var (
	// ErrNotEmpty is wrapped by KillError: the cgroup still has live members
	// (Kill gave up when its context ended, or Remove found members).
	ErrNotEmpty = errors.New("cgroup: not empty")
	// ErrNoUnified is returned by UnifiedDir when the location has no cgroup2
	// part (a pure v1 host, or a host used without its unified hierarchy).
	ErrNoUnified = errors.New("cgroup: no cgroup2 hierarchy in this location")
	// ErrThreadMove is returned by ForkExec when the calling process cannot
	// put one of its threads into the cgroup (or take it out again) in
	// every v1 hierarchy, or pids.max leaves no room for the thread and the
	// child: the caller starts the process some other way (a helper that
	// joins the cgroup itself).
	ErrThreadMove = errors.New("cgroup: cannot fork from a thread in the cgroup")
)

// LimitError names a limit the host cannot enforce and what to do.
type LimitError struct {
	// Limit is the limit's name as a task file spells it ("memory", "cpu",
	// "cores", "pids", "memory_max").
	Limit string
	// Controller is the cgroup controller it needs.
	Controller Controller
	// Why says what the probe found instead.
	Why string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: limit %q needs the %s controller: %s; mount it (cgroup v1) or enable it in the parent's cgroup.subtree_control (cgroup v2), or drop the limit",
		ErrNoController, e.Limit, e.Controller, e.Why)
}

// Unwrap returns ErrNoController.
func (e *LimitError) Unwrap() error { return ErrNoController }

// Member is a process found in a cgroup.
type Member struct {
	PID int `json:"pid"`
	// Comm is the process's name from /proc/PID/comm ("" if it exited).
	Comm string `json:"comm"`
	// State is the state letter from /proc/PID/stat ("D": uninterruptible
	// sleep, which no signal ends), or "" if it exited.
	State string `json:"state"`
}

func (m Member) String() string {
	if m.State == "" {
		return fmt.Sprintf("pid %d (exited)", m.PID)
	}
	return fmt.Sprintf("pid %d (%s, state %s)", m.PID, m.Comm, m.State)
}

// KillError reports the members still alive when Kill gave up or Remove
// refused. It wraps ErrNotEmpty and the cause (the context's error, or the
// kernel's EBUSY).
type KillError struct {
	// Dir is the cgroup directory that still has members.
	Dir string
	// Alive lists them (pids read from cgroup.procs).
	Alive []Member
	// Err is why it stopped: ctx.Err(), or the failed rmdir.
	Err error
}

func (e *KillError) Error() string {
	alive := make([]string, len(e.Alive))
	for i, m := range e.Alive {
		alive[i] = m.String()
	}
	s := fmt.Sprintf("%v: %s still has %d live member(s)", ErrNotEmpty, e.Dir, len(e.Alive))
	if len(alive) > 0 {
		s += ": " + strings.Join(alive, ", ")
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrNotEmpty and the cause.
func (e *KillError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotEmpty}
	}
	return []error{ErrNotEmpty, e.Err}
}
