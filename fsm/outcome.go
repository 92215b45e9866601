package fsm

import (
	"fmt"
	"strings"
)

// Warning is something a step did other than what was asked, which the
// user should see once (a raw_exec task that runs uncontained because the
// host gives no cgroup): recorded on the launched event, typed, so that no
// reader parses it out of a reason.
type Warning struct {
	Kind WarningKind `json:"kind"`
	Text string      `json:"text"`
}

func (w Warning) String() string { return w.Text }

// WarningKind says what a Warning is about.
type WarningKind uint8

// The kinds of warnings. (Their numbers are on disk: append only.)
const (
	// WarnOther is any other warning, and one an earlier tether recorded
	// in a reason ("warning: ...") whose kind cannot be told.
	WarnOther WarningKind = iota
	// WarnUncontained: the host gives no cgroup, so the raw_exec task runs
	// uncontained (a process it starts in a new session can outlive it).
	WarnUncontained
	// WarnNoRestarts: the restart journal cannot be written, so the task
	// will not be restarted.
	WarnNoRestarts
	// WarnUnsandboxed: the host lacks a part of the exec sandbox (a
	// seccomp filter, a cgroup namespace, keyrings), and the operator let
	// exec tasks run without it, as this one does.
	WarnUnsandboxed
	// WarnLimitAboveHost: a limit is above what the host has (a memory
	// limit above its RAM), so the task will not be held to it.
	WarnLimitAboveHost
	numWarningKinds
)

var warningNames = [numWarningKinds]string{WarnOther: "other", WarnUncontained: "uncontained", WarnNoRestarts: "no-restarts",
	WarnUnsandboxed: "unsandboxed", WarnLimitAboveHost: "limit-above-host"}

func (k WarningKind) String() string {
	if k < numWarningKinds {
		return warningNames[k]
	}
	return fmt.Sprintf("warning(%d)", uint8(k))
}

// Valid reports whether k is a declared kind.
func (k WarningKind) Valid() bool { return k < numWarningKinds }

// Cause is what a failure was, in categories a caller acts on (the CLI's
// exit code, the hint it prints): recorded beside the reason on every
// event that records one, so that no reader matches error strings.
type Cause uint8

// The causes. (Their numbers are on disk: append only.)
const (
	// CauseNone: no failure, or one recorded by an earlier tether whose
	// reason names none of the causes below.
	CauseNone Cause = iota
	// CauseOther is a failure of no category below.
	CauseOther
	// CauseInvalidSpec: the spec was refused before anything was spawned.
	CauseInvalidSpec
	// CauseCommandNotFound: the task's command does not exist.
	CauseCommandNotFound
	// CauseNotExecutable: the command exists but cannot be executed.
	CauseNotExecutable
	// CauseUnknownUser: the task's user does not exist.
	CauseUnknownUser
	// CauseCapNotAllowed: a cap_add outside the capability allow list.
	CauseCapNotAllowed
	// CauseUnknownCap: a name in cap_add or cap_drop is no capability.
	CauseUnknownCap
	// CauseWorkDir: the working directory is missing or no directory.
	CauseWorkDir
	// CauseNoCgroup: the task needs a cgroup and the host gives none.
	CauseNoCgroup
	// CauseLimit: a limit the host cannot enforce.
	CauseLimit
	// CauseIsolation: an exec task cannot be isolated here (not root).
	CauseIsolation
	// CauseSpawn: the executor could not be started.
	CauseSpawn
	// CauseInjected: a fault a test injected.
	CauseInjected
	// CauseSeccompNotAllowed: an exec task's seccomp option (unconfined,
	// a profile) the operator did not allow.
	CauseSeccompNotAllowed
	// CauseHostFeature: the host lacks a part of the exec sandbox the
	// operator did not let tasks run without.
	CauseHostFeature
	// CauseArtifact: an artifact could not be fetched before the launch.
	CauseArtifact
	// CauseTemplate: a template could not be rendered before the launch.
	CauseTemplate
	numCauses
)

var causeNames = [numCauses]string{
	CauseNone: "none", CauseOther: "other", CauseInvalidSpec: "invalid-spec",
	CauseCommandNotFound: "command-not-found", CauseNotExecutable: "not-executable",
	CauseUnknownUser: "unknown-user", CauseCapNotAllowed: "cap-not-allowed", CauseUnknownCap: "unknown-cap",
	CauseWorkDir: "work-dir", CauseNoCgroup: "no-cgroup", CauseLimit: "limit", CauseIsolation: "isolation",
	CauseSpawn: "spawn", CauseInjected: "injected",
	CauseSeccompNotAllowed: "seccomp-not-allowed", CauseHostFeature: "host-feature",
	CauseArtifact: "artifact", CauseTemplate: "template",
}

func (c Cause) String() string {
	if c < numCauses {
		return causeNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Valid reports whether c is a declared cause.
func (c Cause) Valid() bool { return c < numCauses }

// legacyWarning is the prefix an earlier tether gave each warning of a
// launch in its launched event's reason: "warning: A; warning: B".
const legacyWarning = "warning: "

// legacyCauses are the texts of the named errors an earlier tether put in
// a failure's reason, by the cause each stands for.
var legacyCauses = []struct {
	text  string
	cause Cause
}{
	{"executor: command not found", CauseCommandNotFound},
	{"executor: command not executable", CauseNotExecutable},
	{"executor: unknown user", CauseUnknownUser},
	{"executor: capability not allowed", CauseCapNotAllowed},
	{"executor: unknown capability", CauseUnknownCap},
	{"executor: bad working directory", CauseWorkDir},
	{"executor: no cgroup for the task", CauseNoCgroup},
	{"executor: limit cannot be enforced on this host", CauseLimit},
	{"executor: cannot isolate the task", CauseIsolation},
	{"fsm: invalid task spec", CauseInvalidSpec},
	{"driver: injected fault", CauseInjected},
}

// Upgrade rewrites an event recorded by an earlier tether (a record of
// version 1 or 2, a restart journal entry of an executor of protocol 5)
// into the form this one records: a restart-intent's delay, which was its
// Grace, is its Delay; a launch's warnings, which were its Reason
// ("warning: A; warning: B"), are its Warnings (of kind WarnOther); a
// failure's Cause is told from its Reason when that names one of the
// errors an earlier tether recorded. It is the one place those old forms
// are read, and it leaves an event of this tether as it is.
func (e *Event) Upgrade() {
	switch {
	case e.Type == EventRestartIntent && e.Delay == 0 && e.Grace != 0:
		e.Delay, e.Grace = e.Grace, 0
	case e.Type == EventLaunched && len(e.Warnings) == 0 && strings.HasPrefix(e.Reason, legacyWarning):
		for _, w := range strings.Split(strings.TrimPrefix(e.Reason, legacyWarning), "; "+legacyWarning) {
			e.Warnings = append(e.Warnings, Warning{Kind: WarnOther, Text: w})
		}
		e.Reason = ""
	}
	if e.Cause == CauseNone && e.Reason != "" && e.Type != EventLaunched {
		for _, l := range legacyCauses {
			if strings.Contains(e.Reason, l.text) {
				e.Cause = l.cause
				break
			}
		}
	}
}

// Downgrade is Upgrade's inverse for what an earlier form can hold: a
// restart-intent's Delay back in its Grace, a launch's Warnings back in
// its Reason. (A Cause has no earlier form: it is dropped.) A store holds
// old records to their canonical form with it.
func (e *Event) Downgrade() {
	switch {
	case e.Type == EventRestartIntent && e.Grace == 0 && e.Delay != 0:
		e.Grace, e.Delay = e.Delay, 0
	case e.Type == EventLaunched && e.Reason == "" && len(e.Warnings) > 0:
		texts := make([]string, len(e.Warnings))
		for i, w := range e.Warnings {
			texts[i] = w.Text
		}
		e.Reason = legacyWarning + strings.Join(texts, "; "+legacyWarning)
		e.Warnings = nil
	}
	e.Cause = CauseNone
}
