package taskfile

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/template"
)

// File is what Parse read: a tether task file (task blocks at the top
// level) or a Nomad job file.
type File struct {
	Filename string
	// Job is the job of a job file; nil for a task file.
	Job *Job
	// Groups are the file's groups in order: a task file's tasks, and a
	// task directly under a job, each sit in an implicit group of their
	// own named after the task.
	Groups []*Group
	// Tasks are every task of the file in order, runnable or not.
	Tasks []*Task
	// Notices name, one line each, what tether does not do of the file.
	Notices []Notice

	// maxCount and limits are the bounds the file was read with
	// (Options.MaxCount, Options.Limits), which PlanGroup and Instantiate
	// hold it to.
	maxCount int
	limits   Limits
}

// JobType is a Nomad job's type.
type JobType uint8

// Nomad's job types. A system job runs as a service on this one node, a
// sysbatch job as a batch.
const (
	JobService JobType = iota
	JobBatch
	JobSystem
	JobSysbatch
)

var jobTypeNames = [...]string{"service", "batch", "system", "sysbatch"}

func (t JobType) String() string {
	if int(t) < len(jobTypeNames) {
		return jobTypeNames[t]
	}
	return "JobType(" + strconv.Itoa(int(t)) + ")"
}

// Batch reports whether the type runs to completion (batch, sysbatch).
func (t JobType) Batch() bool { return t == JobBatch || t == JobSysbatch }

// Job is a Nomad job.
type Job struct {
	Name        string
	Type        JobType
	Region      string // "global" when unset
	Namespace   string // "default" when unset
	Datacenters []string
	Meta        map[string]string // its meta block, not yet interpolated
	Constraints []Constraint
	Placement   Placement // its affinity, spread and update blocks
	// Reschedule is the job's reschedule block over its type's defaults
	// (nil: none; each group merges its own over it).
	Reschedule *fsm.ReschedulePolicy
	// Parameterized is set for a parameterized job; DispatchMeta then holds
	// the dispatch's meta (Options.DispatchMeta).
	Parameterized *Parameterized
	DispatchMeta  map[string]string
	Range         hcl.Range
}

// Parameterized is a parameterized job's dispatch contract.
type Parameterized struct {
	Payload      string // "optional", "required" or "forbidden"
	MetaRequired []string
	MetaOptional []string
}

// Group is a task group: the unit Nomad places and tether runs together.
type Group struct {
	Name string
	Job  *Job // nil in a task file
	// Implicit is set for the group of a task file's task or of a task
	// directly under a job.
	Implicit    bool
	Count       int
	Tasks       []*Task
	Network     *Network
	Services    []Service
	Meta        map[string]string
	Constraints []Constraint
	Placement   Placement // its affinity, spread, update and disconnect settings
	Restart     *fsm.RestartPolicy
	// EphemeralDiskMB is its ephemeral_disk's size (MB; 0: none given),
	// which bounds what each of its artifacts may place.
	EphemeralDiskMB int
	// Reschedule is the group's reschedule policy, merged (its type's
	// defaults, the job's block, its own); nil in a task file, whose tasks
	// are services (fsm.DefaultServiceReschedule).
	Reschedule *fsm.ReschedulePolicy
	// Refusals are what the group asks that tether refuses: any one keeps
	// every task of the group from running.
	Refusals []Refusal
	Range    hcl.Range
}

// Hook is a task's lifecycle hook (fsm.Hook: the spec records it).
type Hook = fsm.Hook

// Nomad's lifecycle hooks; HookMain is a task without one.
const (
	HookMain      = fsm.HookMain
	HookPrestart  = fsm.HookPrestart
	HookPoststart = fsm.HookPoststart
	HookPoststop  = fsm.HookPoststop
)

// Lifecycle is a task's lifecycle block.
type Lifecycle struct {
	Hook    Hook
	Sidecar bool // the task runs as long as the main tasks do
}

// Task is one task block. Its strings keep their run-time references
// ("${NOMAD_ALLOC_DIR}", "${attr.kernel.name}") for Instantiate.
type Task struct {
	Name   string // the task's own name: NOMAD_TASK_NAME
	Group  *Group
	Driver string
	// Spec holds what fsm.Spec runs, before interpolation: Name is the
	// bare task name, Job and Group are set for a job file.
	Spec      fsm.Spec
	Lifecycle Lifecycle
	// Leader: when this task ends, its group's other tasks are stopped.
	Leader      bool
	Templates   []template.Template
	Artifacts   []artifact.Artifact
	Services    []Service
	Network     *Network // resources { network { ... } }
	Meta        map[string]string
	Constraints []Constraint
	Placement   Placement // its affinity blocks (they apply to its group)
	// DispatchPayload is the file (below local/) a dispatch's payload is
	// written to.
	DispatchPayload string
	Refusals        []Refusal
	Range           hcl.Range
	// readinessImplied: the task sets no readiness, and Spec.Readiness is
	// that of the check of a service of provider "nomad" that tether runs
	// for it (see readiness.go).
	readinessImplied bool
}

// Address is the task's GROUP.TASK (or its name in a task file).
func (t *Task) Address() string {
	if t.Group == nil || t.Group.Job == nil {
		return t.Name
	}
	return t.Group.Name + "." + t.Name
}

// Runnable reports whether tether runs the task's driver.
func (t *Task) Runnable() bool { return t.Driver == "exec" || t.Driver == "raw_exec" }

// Refusal is a stanza tether will not run.
type Refusal struct {
	What  string // the stanza: `network mode "bridge"`
	Why   string
	Range hcl.Range
}

func (r Refusal) Error() string {
	return fmt.Sprintf("%s: %s: %s", pos(r.Range), r.What, r.Why)
}

// NetworkMode is a network block's mode.
type NetworkMode uint8

// Network modes: tether runs host and none.
const (
	NetworkHost NetworkMode = iota
	NetworkNone
	NetworkBridge
	NetworkOther // cni/*: refused
)

func (m NetworkMode) String() string {
	return [...]string{"host", "none", "bridge", "cni"}[m]
}

// Network is a group's network block, or a task's resources.network.
type Network struct {
	Mode  NetworkMode
	Ports []PortRequest
	Range hcl.Range
}

// PortRequest is a port block.
type PortRequest struct {
	Label  string
	Static int // 0: dynamic
	To     int // the port inside the network namespace (bridge); -1: same as the host's
	// Task is "" for a group's port, the task's name for a task's.
	Task  string
	Range hcl.Range
}

// CheckType is a service check's type.
type CheckType string

// Service is a service block, typed for the readiness checks tether may
// run; tether registers nothing.
type Service struct {
	Name        string
	Port        string // a port label or a number
	Provider    string // "consul" or "nomad"
	Tags        []string
	AddressMode string
	Task        string // a group service's task
	Meta        map[string]string
	Checks      []Check
	// CheckRestart is the service's check_restart, which its checks'
	// own are merged over.
	CheckRestart *CheckRestart
	Range        hcl.Range
}

// Check is a service's check block.
type Check struct {
	Name, Type, Path, Method, Protocol, Port, Command, Task string
	Args                                                    []string
	Interval, Timeout                                       time.Duration
	Header                                                  map[string][]string
	Body                                                    string
	InitialStatus                                           string
	SuccessBeforePassing, FailuresBeforeCritical            int
	TLSSkipVerify                                           bool
	CheckRestart                                            *CheckRestart
	Range                                                   hcl.Range
}

// CheckRestart is a check's (or a service's) check_restart block. Grace
// is Nomad's default, 1s, when the block leaves it out.
type CheckRestart struct {
	Limit          int
	Grace          time.Duration
	IgnoreWarnings bool
	graceSet       bool // grace was written (a check's overrides its service's only then)
}

// DefaultCheckGrace is check_restart's grace when a block leaves it out
// (Nomad's default).
const DefaultCheckGrace = time.Second
