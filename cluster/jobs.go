package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskfile"
)

// MaxJobCopies bounds the copies of one placed job (every group's count
// summed): the scheduler holds a job's placements in memory and writes
// them in bounded transactions, and a node converges each it is given.
const MaxJobCopies = 1000

// Nomad's resources for a task that gives none: what the scheduler
// reserves for it on a node (a task on one host runs without limits).
const (
	DefaultTaskCPU    = 100 // MHz
	DefaultTaskMemory = 300 // MB
)

// Resources are what a copy asks of a node, or what a node offers: CPU in
// MHz, memory in MB, whole cores.
type Resources struct {
	CPU      int `json:"cpu"`
	MemoryMB int `json:"memory_mb"`
	Cores    int `json:"cores,omitempty"`
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPU: r.CPU + o.CPU, MemoryMB: r.MemoryMB + o.MemoryMB, Cores: r.Cores + o.Cores}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPU: r.CPU - o.CPU, MemoryMB: r.MemoryMB - o.MemoryMB, Cores: r.Cores - o.Cores}
}

func (r Resources) String() string {
	s := fmt.Sprintf("cpu %d MHz, memory %d MB", r.CPU, r.MemoryMB)
	if r.Cores > 0 {
		s += fmt.Sprintf(", %d cores", r.Cores)
	}
	return s
}

// JobInputs are a job file's inputs beside its text, stored with it so
// that every reader (the scheduler, a node) parses the file as `tether
// cluster run` did.
type JobInputs struct {
	// Vars are -var NAME=VALUE.
	Vars map[string]string `json:"vars,omitempty"`
	// VarFiles are -var-file contents, in order.
	VarFiles []JobVarFile `json:"var_files,omitempty"`
	// Env holds the NOMAD_VAR_* variables of the command's environment
	// (no other variable is stored).
	Env map[string]string `json:"env,omitempty"`
	// Meta is a parameterized job's dispatch meta (--meta KEY=VALUE).
	Meta map[string]string `json:"meta,omitempty"`
}

// JobVarFile is one -var-file: its name (for messages) and text.
type JobVarFile struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// options are the parse options of the inputs.
func (in JobInputs) options() taskfile.Options {
	o := taskfile.Options{Vars: in.Vars, Env: in.Env, DispatchMeta: in.Meta}
	for _, f := range in.VarFiles {
		o.VarFiles = append(o.VarFiles, taskfile.VarFile{Name: f.Name, Src: []byte(f.Text)})
	}
	return o
}

// OnlyNomadVars returns the NOMAD_VAR_* entries of env: the environment
// a job's parse may read, and all of it that is stored.
func OnlyNomadVars(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "NOMAD_VAR_") {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// JobSpec is one version of a placed job, as `tether cluster run` wrote
// it (jobspec/JOB/VERSION): its file's text and inputs. It never
// changes; a changed file is a new version.
type JobSpec struct {
	Job     string    `json:"job"`
	Version uint64    `json:"version"`
	File    string    `json:"file"`
	Text    string    `json:"text"`
	Inputs  JobInputs `json:"inputs"`
	// Submitted is when the version was written (the command's clock).
	Submitted int64 `json:"submitted"`
}

// digest identifies a spec's text and inputs: a run of the same file
// with the same inputs is no new version.
func (s JobSpec) digest() string {
	b, _ := json.Marshal(struct {
		Text   string    `json:"text"`
		Inputs JobInputs `json:"inputs"`
	}{s.Text, s.Inputs})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// JobHead is a placed job's head (job/JOB): its current version and
// whether it is stopped. Every change of the job (a changed file, a stop)
// is a new version; the scheduler's writes are guarded by the head's
// revision.
type JobHead struct {
	Job     string `json:"job"`
	Version uint64 `json:"version"`
	Stopped bool   `json:"stopped,omitempty"`
	// Digest is the current version's JobSpec digest.
	Digest string `json:"digest"`
	// Submitted is when the current version was written.
	Submitted int64 `json:"submitted"`
}

// Job is a job file read for placement: its groups as the scheduler
// places them.
type Job struct {
	Name   string
	Type   taskfile.JobType
	Groups []*GroupAsk
	// Skipped are the groups tether does not run, each with why (as
	// `tether run` names them); none of their copies is placed.
	Skipped []string
	// Notes are the parser's warnings and notices.
	Notes []string
}

// Copies is the number of copies of every group.
func (j *Job) Copies() int {
	n := 0
	for _, g := range j.Groups {
		n += g.Count
	}
	return n
}

// Group returns the group named name, or nil.
func (j *Job) Group(name string) *GroupAsk {
	for _, g := range j.Groups {
		if g.Group == name {
			return g
		}
	}
	return nil
}

// GroupAsk is one group of a job as placement sees it: how many copies,
// what each asks of a node, and where it may and would rather go.
type GroupAsk struct {
	Group string
	Count int
	// Ask is one copy's resources: its planned tasks' summed (a task that
	// gives none asks Nomad's DefaultTaskCPU and DefaultTaskMemory).
	Ask Resources
	// Drivers are the drivers its tasks use: a node must allow each.
	Drivers []string
	// JobConstraints are the job's constraint blocks (a distinct_hosts or
	// distinct_property among them counts every group's copies);
	// Constraints the group's and its planned tasks'.
	JobConstraints []taskfile.Constraint
	Constraints    []taskfile.Constraint
	Affinities     []taskfile.Affinity
	Spreads        []taskfile.Spread
	// MaxParallel is update's max_parallel (0: all at once).
	MaxParallel int
	// MaxClientDisconnect and StopAfterClientDisconnect are the group's.
	MaxClientDisconnect       time.Duration
	StopAfterClientDisconnect time.Duration
	// Batch: its copies run to completion (batch, sysbatch).
	Batch bool
	// Reschedule is its reschedule policy as Nomad merges it (its job
	// type's defaults, the job's block, the group's): how soon, and how
	// many times, a copy that failed on a live node is placed again.
	Reschedule fsm.ReschedulePolicy
	// Ready: a task of its tasks says when it is ready (readiness): a copy
	// runs once its node says it is ready, not only running.
	Ready bool
	// Tasks are the names of its planned tasks, in start order.
	Tasks []string
}

// ParseJob reads a job spec for placement: its text's form (checkText),
// the task file parser with its inputs, then each group tether can run
// (taskfile.PlanGroup), its resources, drivers, constraints and placement
// stanzas. A file tether's scheduler cannot place is an ErrInvalidJob
// naming why: not a job file, a job or group name that breaks the task id
// rule, a system job, a placement stanza refused by name, no group to
// run, more than MaxJobCopies copies.
//
// `tether cluster run` calls it before it writes anything, and the
// scheduler on what it reads: a file is accepted by both or by neither.
func ParseJob(spec JobSpec) (*Job, error) {
	bad := func(format string, args ...any) (*Job, error) {
		return nil, fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidJob, spec.File}, args...)...)
	}
	if err := checkText([]byte(spec.Text)); err != nil {
		return bad("%v", err)
	}
	tf, diags := taskfile.Parse(spec.File, []byte(spec.Text), spec.Inputs.options())
	j := &Job{}
	var errs []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, taskfile.FormatDiag(d))
		} else {
			j.Notes = append(j.Notes, taskfile.FormatDiag(d))
		}
	}
	if len(errs) > 0 {
		return bad("%s", strings.Join(errs, "; "))
	}
	for _, n := range tf.Notices {
		j.Notes = append(j.Notes, spec.File+": "+n.String())
	}
	if tf.Job == nil {
		return bad("a task file has no job to place: write a job file (job \"NAME\" { group \"G\" { count = N ... } }), or tell one node to run it with `tether cluster start --node NODE`")
	}
	j.Name, j.Type = tf.Job.Name, tf.Job.Type
	if err := ValidateJobName("job", j.Name); err != nil {
		return bad("%v", err)
	}
	if spec.Job != "" && spec.Job != j.Name {
		return bad("the file's job is %q, not %q", j.Name, spec.Job)
	}
	switch j.Type {
	case taskfile.JobSystem, taskfile.JobSysbatch:
		return bad("job type %q runs a copy on every node: tether's scheduler does not place it; give the group a count and a distinct_hosts constraint", j.Type)
	}
	for _, g := range tf.Groups {
		gp, err := tf.PlanGroup(g.Name)
		if err != nil {
			j.Skipped = append(j.Skipped, fmt.Sprintf("group %q: %v", g.Name, err))
			continue
		}
		if err := ValidateJobName("group", g.Name); err != nil {
			return bad("%v", err)
		}
		rules := g.Rules()
		if len(rules.Refusals) > 0 {
			var msgs []string
			for _, r := range rules.Refusals {
				msgs = append(msgs, r.Error())
			}
			return bad("group %q: %s", g.Name, strings.Join(msgs, "; "))
		}
		ga := &GroupAsk{
			Group: g.Name, Count: g.Count, Affinities: rules.Affinities, Spreads: rules.Spreads,
			MaxParallel: rules.Update.MaxParallel, MaxClientDisconnect: rules.MaxClientDisconnect,
			StopAfterClientDisconnect: rules.StopAfterClientDisconnect, Batch: j.Type.Batch(),
		}
		if g.Reschedule != nil {
			ga.Reschedule = *g.Reschedule
		} else if ga.Batch {
			ga.Reschedule = fsm.DefaultBatchReschedule
		} else {
			ga.Reschedule = fsm.DefaultServiceReschedule
		}
		if g.Job != nil {
			ga.JobConstraints = slices.Clone(g.Job.Constraints)
		}
		ga.Constraints = append(ga.Constraints, g.Constraints...)
		drivers := map[string]bool{}
		for _, t := range gp.Tasks() {
			ga.Constraints = append(ga.Constraints, t.Constraints...)
			ga.Tasks = append(ga.Tasks, t.Name)
			drivers[t.Driver] = true
			ga.Ready = ga.Ready || t.Spec.Readiness != fsm.ReadinessNone
			r := t.Spec.Resources
			cpu, mem := r.CPU, r.MemoryMB
			if cpu == 0 && r.Cores == 0 {
				cpu = DefaultTaskCPU
			}
			if mem == 0 {
				mem = DefaultTaskMemory
			}
			ga.Ask = ga.Ask.Add(Resources{CPU: cpu, MemoryMB: mem, Cores: r.Cores})
		}
		ga.Drivers = slices.Sorted(maps.Keys(drivers))
		j.Groups = append(j.Groups, ga)
	}
	if len(j.Groups) == 0 {
		return bad("no group tether can run: %s", strings.Join(j.Skipped, "; "))
	}
	if n := j.Copies(); n > MaxJobCopies {
		return bad("%d copies (every group's count summed): at most %d may be placed for one job", n, MaxJobCopies)
	}
	return j, nil
}

// Placed is one copy's placement: the value of alloc/JOB/GROUP/INDEX and
// of place/NODE/JOB/GROUP/INDEX, which the scheduler writes in one
// transaction (and moves together: the old node's key deleted in the
// same transaction as the new node's is put), so a copy is under exactly
// one node at every revision.
type Placed struct {
	Job   string `json:"job"`
	Group string `json:"group"`
	Index int    `json:"index"`
	Node  string `json:"node"`
	// Version is the job version the copy runs (jobspec/JOB/VERSION).
	Version uint64 `json:"version"`
	// Use is what the copy holds on its node.
	Use Resources `json:"use"`
	// At is when the scheduler placed it (its clock).
	At int64 `json:"at"`
	// Reason is why it was placed: "new", "job changed", "node n2 lost",
	// "failed on n2".
	Reason string `json:"reason"`
	// Previous is the node it was placed on before, if any.
	Previous string `json:"previous,omitempty"`
	// Failures are the times of the failures it was placed again for
	// (the reschedule policy's window).
	Failures []int64 `json:"failures,omitempty"`
	// Batch: it runs to completion (its node's verdict "complete" is its
	// end).
	Batch bool `json:"batch,omitempty"`
	// StopAfterClientDisconnect is the group's: how long its node may be
	// cut off from etcd before it stops the copy itself (0: never).
	StopAfterClientDisconnect time.Duration `json:"stop_after_client_disconnect,omitempty"`
	// Revision is the placement revision: the etcd revision of the
	// transaction that wrote it (both keys' ModRevision). Not stored.
	Revision int64 `json:"-"`
}

// ID is the copy's id.
func (p Placed) ID() CopyID { return CopyID{Job: p.Job, Group: p.Group, Index: p.Index} }

// VerdictState is a node's word on a copy placed on it.
type VerdictState string

// The verdicts a node gives (phase 2 of the fleet: the node writes them
// as it converges its placements).
const (
	// VerdictStarting: the node took the copy and is starting its tasks.
	VerdictStarting VerdictState = "starting"
	// VerdictRunning: the copy's main tasks run.
	VerdictRunning VerdictState = "running"
	// VerdictReady: they run and are ready (readiness).
	VerdictReady VerdictState = "ready"
	// VerdictComplete: a batch copy ended successfully: its end.
	VerdictComplete VerdictState = "complete"
	// VerdictFailed: the copy failed past its restart policy: the
	// scheduler places it again under the group's reschedule policy.
	VerdictFailed VerdictState = "failed"
	// VerdictRefused: the node refused the copy (its allow lists, a
	// constraint on what only it knows, a spec that does not parse): as
	// failed, with the refusal as its reason.
	VerdictRefused VerdictState = "refused"
	// VerdictStopped: the node stopped the copy (it was moved or stopped).
	VerdictStopped VerdictState = "stopped"
)

// Up reports whether the verdict says the copy runs (running or ready).
func (s VerdictState) Up() bool { return s == VerdictRunning || s == VerdictReady }

// Failed reports whether the verdict asks for the copy to be placed again.
func (s VerdictState) Failed() bool { return s == VerdictFailed || s == VerdictRefused }

// Verdict is the value of verdict/NODE/JOB/GROUP/INDEX: the node's word
// on the copy's placement at Revision. A verdict about an older revision
// than the copy's current placement says nothing of it.
type Verdict struct {
	Job   string `json:"job"`
	Group string `json:"group"`
	Index int    `json:"index"`
	// Revision is the placement revision the verdict is about.
	Revision int64        `json:"revision"`
	State    VerdictState `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	// At is when the node said it (its clock).
	At int64 `json:"at"`
	// Tasks are the copy's tasks on the node: name, task id, state.
	Tasks []VerdictTask `json:"tasks,omitempty"`
}

// ID is the copy's id.
func (v Verdict) ID() CopyID { return CopyID{Job: v.Job, Group: v.Group, Index: v.Index} }

// VerdictTask is one task of a copy as its node last said.
type VerdictTask struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	State string `json:"state"`
}

// Unplaced is a copy the scheduler could not place, and why.
type Unplaced struct {
	Copy   CopyID `json:"copy"`
	Reason string `json:"reason"`
}

// Eval is the scheduler's last word on a job (eval/JOB): the version it
// placed, and the copies no node could hold.
type Eval struct {
	Job      string     `json:"job"`
	Version  uint64     `json:"version"`
	At       int64      `json:"at"`
	Unplaced []Unplaced `json:"unplaced,omitempty"`
	// Waiting are copies left where they are for now, with why (a lost
	// node within max_client_disconnect, a reschedule delay, an update
	// waiting on max_parallel).
	Waiting []Unplaced `json:"waiting,omitempty"`
}

// Lost is the scheduler's record of a node whose lease lapsed (lost/NODE):
// when it saw it down, and since when the node holds a lease again. A
// node with a record takes no new copies until it has held its lease for
// the return holdoff (see SchedulerConfig.ReturnHoldoff).
type Lost struct {
	Node string `json:"node"`
	// Since is when the scheduler saw the node's liveness key gone.
	Since int64 `json:"since"`
	// Back is when it saw the node hold a lease again (0: still down),
	// and BackLease that lease: a new lapse starts the holdoff again.
	Back      int64 `json:"back,omitempty"`
	BackLease int64 `json:"back_lease,omitempty"`
}

// NodeInfo is what a node registers (info/NODE) with its liveness key, in
// the same transaction: what the scheduler places by.
type NodeInfo struct {
	Node string `json:"node"`
	// Lease is the lease its liveness key was created under: info of
	// another lease than the liveness key's is stale.
	Lease int64 `json:"lease"`
	// LeaseTTL is the node's --lease-ttl.
	LeaseTTL time.Duration `json:"lease_ttl"`
	// Attrs are its ${attr.*} (kernel.name, cpu.arch...), NodeAttrs its
	// ${node.*} (unique.name, datacenter, class...), Meta its ${meta.*}
	// (the operator's --meta).
	Attrs     map[string]string `json:"attrs"`
	NodeAttrs map[string]string `json:"node_attrs"`
	Meta      map[string]string `json:"meta,omitempty"`
	// Capacity is what it offers (--capacity, default the host's).
	Capacity Resources `json:"capacity"`
	// Drivers are the drivers it allows for a spec from etcd.
	Drivers []string `json:"drivers"`
	// Registered is when it registered (its clock).
	Registered int64 `json:"registered"`
}

// Host is the node's attributes as taskfile's constraints read them.
func (ni NodeInfo) Host() *taskfile.Host {
	return &taskfile.Host{Attrs: ni.Attrs, Node: ni.NodeAttrs, Meta: ni.Meta}
}

// decodeJSON decodes a record, naming its key when it does not decode.
func decodeJSON(key string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return &CorruptError{Key: key, Err: err}
	}
	return nil
}
