package fsm

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// What a task of a Nomad job file carries beside its command: the group
// copy it belongs to (an allocation, in Nomad's words), the templates it
// renders and the artifacts it fetches before it starts, and the ports it
// was given. They are part of the spec, recorded once with task-created,
// so that every process that reads the log (a driver resuming a group, the
// executor preparing the task) reads the same plan.

// Hook is a task's lifecycle hook within its group (Nomad's lifecycle
// block); HookMain is a task without one.
type Hook uint8

// Nomad's lifecycle hooks. (Their numbers are on disk: append only.)
const (
	HookMain Hook = iota
	HookPrestart
	HookPoststart
	HookPoststop
	numHooks
)

var hookNames = [numHooks]string{"main", "prestart", "poststart", "poststop"}

func (h Hook) String() string {
	if h < numHooks {
		return hookNames[h]
	}
	return "hook(" + strconv.Itoa(int(h)) + ")"
}

// Valid reports whether h is a declared hook.
func (h Hook) Valid() bool { return h < numHooks }

// Alloc places a task in one copy of a group (Nomad's allocation): the
// tasks of one allocation share its directory, start in the order of their
// hooks and end together (NextGroup says how). Every task of the
// allocation is recorded before any of them is spawned, each with the same
// ID and Tasks, so the group is known from any of its tasks.
type Alloc struct {
	// ID is the allocation's id (NOMAD_ALLOC_ID), shared by its tasks.
	ID string
	// Index is the copy's number, 0 to the group's count - 1
	// (NOMAD_ALLOC_INDEX).
	Index int
	// Dir is the host path of the allocation's shared directory, Nomad's
	// alloc/ (data/, logs/, tmp/): NOMAD_ALLOC_DIR of a raw_exec task,
	// /alloc in an exec task's root.
	Dir string
	// TaskDir is the host path of the task's own directory (local/,
	// secrets/, tmp/): where a raw_exec task starts, and what an exec
	// task's /local, /secrets and /tmp are. Nomad's layout makes it Dir's
	// sibling, so that a raw_exec task reaches the alloc directory as
	// ../alloc.
	TaskDir string
	// Tasks are the ids of every task of the allocation, this one among
	// them, in start order.
	Tasks []string
	// Hook, Sidecar and Leader are the task's lifecycle block and leader
	// flag: when it starts and ends relative to the others.
	Hook    Hook
	Sidecar bool
	Leader  bool

	// Generation counts the copies of the allocation started again after
	// an earlier one ended (NextCopy): 0 for the first. A later copy's
	// tasks are new tasks of the same names, each created with the task it
	// replaces (task-created's Replaces), in the same allocation (its id,
	// directories and ports).
	Generation int
	// NotBefore is when the copy's tasks may start (Unix ns; 0: at once):
	// a restart's or a reschedule's delay, recorded with them ahead.
	NotBefore int64
	// Reschedule is the group's reschedule policy (nil: none: a copy that
	// failed stays down); Rescheduled the past reschedules it weighs
	// (ReschedulePolicy.Next), oldest first.
	Reschedule  *ReschedulePolicy
	Rescheduled []RescheduleEvent
	// Restarts is the restart policy's count across copies started again
	// because an executor was lost (within a run, the executor counts).
	Restarts RestartState
}

// Copy returns a deep copy of a.
func (a *Alloc) Copy() *Alloc {
	if a == nil {
		return nil
	}
	c := *a
	c.Tasks = slices.Clone(a.Tasks)
	c.Rescheduled = slices.Clone(a.Rescheduled)
	if a.Reschedule != nil {
		r := *a.Reschedule
		c.Reschedule = &r
	}
	return &c
}

// Keeper reports whether the task keeps its allocation alive: a task that
// is no sidecar and no poststop task. Once every keeper has ended, the
// sidecars are stopped and the poststop tasks run (Nomad's rule).
func (a *Alloc) Keeper() bool { return !a.Sidecar && a.Hook != HookPoststop }

// ChangeMode is what happens to a running task when one of its rendered
// templates changes (Nomad's change_mode).
type ChangeMode uint8

// Nomad's change modes. (Their numbers are on disk: append only.)
const (
	// ChangeRestart restarts the task (Nomad's default).
	ChangeRestart ChangeMode = iota
	// ChangeSignal sends the task the template's change signal.
	ChangeSignal
	// ChangeNoop does nothing: the task reads the file when it wants.
	ChangeNoop
	// ChangeScript runs change_script inside the task (Nomad 1.5): parsed
	// and reported, not run.
	ChangeScript
	numChangeModes
)

var changeModeNames = [numChangeModes]string{"restart", "signal", "noop", "script"}

func (m ChangeMode) String() string {
	if m < numChangeModes {
		return changeModeNames[m]
	}
	return "change-mode(" + strconv.Itoa(int(m)) + ")"
}

// Valid reports whether m is a declared mode.
func (m ChangeMode) Valid() bool { return m < numChangeModes }

// Template is one template block of a task, its run-time references
// resolved: rendered to Destination before the task starts (package
// template does it, in the executor).
type Template struct {
	// Source is a host path to read the template from (relative: to the
	// task directory); Data is the template itself. Exactly one is set.
	Source string
	Data   string
	// Destination is where the output goes, as the task names it:
	// relative to its working directory, or an absolute path it sees.
	Destination string
	// Perms are the output's permissions (0: 0644, Nomad's default).
	Perms fs.FileMode
	// UID and GID own the output; nil: the task's user.
	UID, GID *int
	// Env: the output's KEY=VALUE lines are the task's environment too.
	Env bool
	// ChangeMode and ChangeSignal say what a change of the output does to
	// the running task.
	ChangeMode   ChangeMode
	ChangeSignal int
	// LeftDelim and RightDelim replace {{ and }} when set.
	LeftDelim, RightDelim string
	// ErrMissingKey makes a missing map key an error instead of "<no value>".
	ErrMissingKey bool
}

// Name is how an error names the template: its source or its destination.
func (t Template) Name() string {
	if t.Source != "" {
		return fmt.Sprintf("template %s -> %s", t.Source, t.Destination)
	}
	return "template -> " + t.Destination
}

// Validate checks what needs no host: exactly one of data and source, a
// destination, a change signal when the mode is signal, permission bits
// only.
func (t Template) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s "+format, append([]any{ErrInvalidSpec, t.Name()}, args...)...)
	}
	switch {
	case t.Source == "" && t.Data == "":
		return bad("has neither data nor source")
	case t.Source != "" && t.Data != "":
		return bad("has both data and source: keep one")
	case t.Destination == "":
		return bad("has no destination")
	case !t.ChangeMode.Valid():
		return bad("has an unknown change_mode %d", uint8(t.ChangeMode))
	case t.ChangeMode == ChangeSignal && t.ChangeSignal == 0:
		return bad("has change_mode \"signal\" but no change_signal")
	case t.ChangeSignal < 0 || t.ChangeSignal > 64:
		return bad("change_signal %d is not a signal", t.ChangeSignal)
	case t.Perms&^fs.ModePerm != 0:
		return bad("perms %o: use permission bits only (e.g. \"644\")", uint32(t.Perms))
	}
	return nil
}

// ArtifactMode is how an artifact is placed (Nomad's mode).
type ArtifactMode uint8

// Nomad's artifact modes. (Their numbers are on disk: append only.)
const (
	// ArtifactAny: an archive is unpacked into the destination directory,
	// a file lands in it under its own name, a directory is copied into it.
	ArtifactAny ArtifactMode = iota
	// ArtifactFile: the destination is the file itself.
	ArtifactFile
	// ArtifactDir: the destination is a directory the archive or directory
	// fills.
	ArtifactDir
	numArtifactModes
)

var artifactModeNames = [numArtifactModes]string{"any", "file", "dir"}

func (m ArtifactMode) String() string {
	if m < numArtifactModes {
		return artifactModeNames[m]
	}
	return "artifact-mode(" + strconv.Itoa(int(m)) + ")"
}

// Valid reports whether m is a declared mode.
func (m ArtifactMode) Valid() bool { return m < numArtifactModes }

// Artifact is one artifact block of a task, its run-time references
// resolved: fetched into Destination before the task starts (package
// artifact does it, in the executor, before the templates are rendered).
type Artifact struct {
	Source      string
	Destination string // as the task names it; "" is local/
	Mode        ArtifactMode
	// Options are go-getter's options: checksum ("type:hex") and archive
	// ("false" to keep an archive as is, or a format to force one).
	Options map[string]string
	// Headers are sent with an http(s) request.
	Headers map[string]string
	// Chown gives what is placed to the task's user (Nomad's chown).
	Chown bool
}

// Validate checks what needs no host: a source, a known mode.
func (a Artifact) Validate() error {
	switch {
	case a.Source == "":
		return fmt.Errorf("%w: an artifact has no source", ErrInvalidSpec)
	case !a.Mode.Valid():
		return fmt.Errorf("%w: artifact %s has an unknown mode %d", ErrInvalidSpec, a.Source, uint8(a.Mode))
	}
	return nil
}

// Port is a port a task was given on this host (a network block's port,
// of its group or its own).
type Port struct {
	Label string `json:"label"`
	Value int    `json:"value"` // the host port
	To    int    `json:"to,omitempty"`
	IP    string `json:"ip"`
	Task  string `json:"task,omitempty"` // "" for a group's port, else its task's name
}

func (p Port) String() string {
	s := p.Label + "=" + p.IP + ":" + strconv.Itoa(p.Value)
	if p.To > 0 && p.To != p.Value {
		s += "->" + strconv.Itoa(p.To)
	}
	return s
}

// validate checks a spec's allocation: an id, two absolute clean
// directories neither of which holds the other, task ids none of which
// repeats, a known hook.
func (a *Alloc) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: alloc: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	switch {
	case a.ID == "":
		return bad("no id")
	case a.Index < 0:
		return bad("negative index %d", a.Index)
	case !a.Hook.Valid():
		return bad("unknown hook %d", uint8(a.Hook))
	case a.Sidecar && a.Hook == HookPoststop:
		return bad("a poststop task cannot be a sidecar")
	case len(a.Tasks) == 0:
		return bad("no tasks")
	}
	for _, d := range []struct{ what, p string }{{"dir", a.Dir}, {"task dir", a.TaskDir}} {
		if d.p == "" || !filepath.IsAbs(d.p) || filepath.Clean(d.p) != d.p || d.p == "/" {
			return bad("%s %q: it must be an absolute, clean path below /", d.what, d.p)
		}
	}
	if a.Dir == a.TaskDir || strings.HasPrefix(a.Dir, a.TaskDir+"/") || strings.HasPrefix(a.TaskDir, a.Dir+"/") {
		return bad("dir %s and task dir %s must not hold one another", a.Dir, a.TaskDir)
	}
	seen := make(map[string]bool, len(a.Tasks))
	for _, id := range a.Tasks {
		if id == "" || seen[id] {
			return bad("task %q is empty or listed twice", id)
		}
		seen[id] = true
	}
	switch {
	case a.Generation < 0 || a.NotBefore < 0:
		return bad("negative generation %d or due time %d", a.Generation, a.NotBefore)
	case a.Restarts.Count < 0 || a.Restarts.Attempts < 0:
		return bad("negative restart count")
	case len(a.Rescheduled) > maxRescheduled:
		return bad("%d past reschedules (at most %d)", len(a.Rescheduled), maxRescheduled)
	}
	for _, e := range a.Rescheduled {
		if e.Delay < 0 {
			return bad("a past reschedule with a negative delay")
		}
	}
	if a.Reschedule != nil {
		if err := a.Reschedule.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// maxRescheduled bounds an allocation's reschedule history: an unlimited
// policy keeps MaxRescheduleHistory, a limited one those within its
// interval (at most its attempts, which the interval bounds by the 5 s
// minimum delay).
const maxRescheduled = 1 << 16
