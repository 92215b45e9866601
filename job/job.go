package job

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskfile"
)

// Source is a task or job file: the name it is known by (a path as the
// caller gave it, a config dir's absolute path, an etcd key's name) and
// its text.
type Source struct {
	File string
	Text []byte
}

// VarFile is a -var-file: its name and its text.
type VarFile struct {
	Name string `json:"name"`
	Text []byte `json:"text"`
}

// Inputs are what a file is read with besides its text: they are part of
// what a desired entry records, so that the agent reads the file as the
// caller did.
type Inputs struct {
	// Vars are -var NAME=VALUE; VarFiles -var-file's, in order (a later
	// one wins); Env the NOMAD_VAR_<name> variables (only those are kept);
	// Meta a parameterized job's dispatch meta.
	Vars     map[string]string `json:"vars,omitempty"`
	VarFiles []VarFile         `json:"var_files,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Meta     map[string]string `json:"meta,omitempty"`
	// Task selects one task (GROUP.TASK, or a name no other task has),
	// run alone as a group of its own; Group one group. Neither: every
	// group tether can run.
	Task  string `json:"task,omitempty"`
	Group string `json:"group,omitempty"`
	// Copy, with Group, makes the job that group's one copy of index
	// Copy.Index (its NOMAD_ALLOC_INDEX and its tasks' names): a copy the
	// fleet's scheduler placed on this node. See Copy.
	Copy *Copy `json:"copy,omitempty"`
}

// Copy is one placed copy of a group: its index, and the placement it is
// (the etcd revision that placed it on this node), which is part of the
// declaration's digest: a new placement of the copy is a changed
// declaration, whose tasks replace the old ones. Its group carries no
// reschedule policy: its tasks restart on the node under their restart
// block, and a copy that fails past it is placed again by the scheduler,
// elsewhere.
type Copy struct {
	Index     int   `json:"index"`
	Placement int64 `json:"placement"`
}

// VarEnv keeps the NOMAD_VAR_ variables of an environment: what Nomad
// reads variables from besides -var and -var-file.
func VarEnv(env map[string]string) map[string]string {
	var out map[string]string
	for k, v := range env {
		if strings.HasPrefix(k, "NOMAD_VAR_") {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// IsZero reports whether in holds nothing.
func (in Inputs) IsZero() bool {
	return len(in.Vars)+len(in.VarFiles)+len(in.Env)+len(in.Meta) == 0 && in.Task == "" && in.Group == "" && in.Copy == nil
}

// Digest is a short fingerprint of a file's text with its inputs: two
// reads of the same text with the same inputs have the same digest, so a
// desired entry tells a changed declaration from the one its tasks run.
func Digest(src Source, in Inputs) string {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	kv := func(m map[string]string) {
		field(binary.AppendUvarint(nil, uint64(len(m))))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			field([]byte(k))
			field([]byte(m[k]))
		}
	}
	field(src.Text)
	kv(in.Vars)
	field(binary.AppendUvarint(nil, uint64(len(in.VarFiles))))
	for _, f := range in.VarFiles {
		field([]byte(f.Name))
		field(f.Text)
	}
	kv(in.Env)
	kv(in.Meta)
	field([]byte(in.Task))
	field([]byte(in.Group))
	if in.Copy != nil { // absent from the digests of every other read
		field(binary.AppendVarint(nil, int64(in.Copy.Index)))
		field(binary.AppendVarint(nil, in.Copy.Placement))
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Job is a file read (Read): parsed, its groups planned and checked.
type Job struct {
	Source Source
	Inputs Inputs
	File   *taskfile.File
	// Name is the name the job is known by as a desired entry: the task's
	// (--task) or the group's (--group) when one is selected, else the
	// job's, or the task's of a task file of one task, else the file's
	// name without its extension.
	Name string
	// Groups are the groups it runs, in the file's order.
	Groups []Group
	// Batch: every group is of a batch (or sysbatch) job: its tasks run to
	// completion.
	Batch bool
	// Notes are the parser's warnings and notices, one line each, as a
	// CLI prints them; Skipped the groups of the file not run, each with
	// why (when no group was selected).
	Notes   []string
	Skipped []string
}

// Group is a group the job runs.
type Group struct {
	Plan *taskfile.GroupPlan
	// Name is the group's name; Count its copies, from index First (0
	// but for a placed copy: Inputs.Copy).
	Name  string
	Count int
	First int
	// Tasks are its tasks in start order (the plan's), Alone set when one
	// task was selected to run alone (a group of its own: nothing waits
	// for it, it waits for nothing).
	Tasks []*taskfile.Task
	Alone bool
	// Reschedule is its reschedule policy: the file's, or the service
	// default for a task file.
	Reschedule fsm.ReschedulePolicy
}

// Read parses src with in and plans what it runs on node, then checks all
// of it by a dry run of Instantiate (stand-in ids and ports: nothing is
// allocated or written). See the package's doc. A file that parsed and is
// refused after returns its job too, with the error: its Notes (and
// Skipped) say what else the file holds that tether does not run, which a
// caller prints before the refusal.
func Read(src Source, in Inputs, node Node) (*Job, error) {
	j, err := Vet(src, in, node.Policy)
	if err != nil {
		return j, err
	}
	host := node.host()
	for _, g := range j.Groups {
		for _, t := range g.Tasks {
			if err := t.CheckConstraints(host); err != nil {
				return j, err
			}
		}
	}
	if _, err := j.instantiate(context.Background(), node, nil, Overrides{}, true); err != nil {
		return j, err
	}
	return j, nil
}

// Parse is Read without the node: the file parsed with its inputs and its
// groups planned, nothing checked against a host or a policy (what a
// caller that is not the node a file runs on can check: tether cluster
// start, before it writes the file for a node), under the default bound
// on count (taskfile.DefaultMaxCount; Vet parses under a node's). Its job
// comes with an error as Read's does.
func Parse(src Source, in Inputs) (*Job, error) { return parse(src, in, 0) }

// parse is Parse with a bound on a group's count (0: the default).
func parse(src Source, in Inputs, maxCount int) (*Job, error) {
	if err := checkInputs(in); err != nil {
		return nil, err
	}
	opts := taskfile.Options{Vars: in.Vars, Env: in.Env, DispatchMeta: in.Meta, MaxCount: maxCount}
	for _, f := range in.VarFiles {
		opts.VarFiles = append(opts.VarFiles, taskfile.VarFile{Name: f.Name, Src: f.Text})
	}
	tf, diags := taskfile.Parse(src.File, src.Text, opts)
	j := &Job{Source: src, Inputs: in, File: tf}
	var errs []string
	for _, d := range diags {
		line := taskfile.FormatDiag(d)
		if d.Severity == hcl.DiagError {
			errs = append(errs, line)
		} else {
			j.Notes = append(j.Notes, line)
		}
	}
	if len(errs) > 0 {
		return nil, &ParseError{File: src.File, Lines: errs}
	}
	for _, n := range tf.Notices {
		j.Notes = append(j.Notes, src.File+": "+n.String())
	}
	if err := j.plan(); err != nil {
		return j, err
	}
	return j, nil
}

func checkInputs(in Inputs) error {
	if in.Task != "" && in.Group != "" {
		return fmt.Errorf("%w: --task and --group both pick what to run: give one", ErrBadInput)
	}
	if c := in.Copy; c != nil && (in.Group == "" || c.Index < 0 || c.Placement <= 0) {
		return fmt.Errorf("%w: a placed copy names its group, an index (0 or more) and its placement (got group %q, %+v)", ErrBadInput, in.Group, *c)
	}
	for k := range in.Vars {
		if k == "" {
			return fmt.Errorf("%w: a variable with no name: use NAME=VALUE", ErrBadInput)
		}
	}
	for k := range in.Meta {
		if k == "" {
			return fmt.Errorf("%w: dispatch meta with no key: use KEY=VALUE", ErrBadInput)
		}
	}
	for k := range in.Env {
		if !strings.HasPrefix(k, "NOMAD_VAR_") {
			return fmt.Errorf("%w: %q is not a NOMAD_VAR_ variable", ErrBadInput, k)
		}
	}
	return nil
}

// plan picks the groups: the one task --task names (a group of its own),
// the group --group names, or every group tether can run (the others
// named in Skipped).
func (j *Job) plan() error {
	tf, in := j.File, j.Inputs
	add := func(gp *taskfile.GroupPlan, alone bool) {
		g := Group{Plan: gp, Name: gp.Group.Name, Count: max(gp.Group.Count, 1), Tasks: gp.Tasks(), Alone: alone}
		g.Reschedule = fsm.DefaultServiceReschedule
		if r := gp.Group.Reschedule; r != nil {
			g.Reschedule = *r
		}
		j.Groups = append(j.Groups, g)
	}
	switch {
	case in.Task != "":
		t, err := tf.Find(in.Task)
		if err != nil {
			return err
		}
		add(&taskfile.GroupPlan{Group: t.Group, Main: []*taskfile.Task{t}}, true)
		j.Name = tf.Name(t)
	case in.Group != "":
		gp, err := tf.PlanGroup(in.Group)
		if err != nil {
			return err
		}
		add(gp, false)
		j.Name = gp.Group.Name
		if c := in.Copy; c != nil {
			g := &j.Groups[0]
			if c.Index >= g.Count {
				return fmt.Errorf("%w: group %q has %d copies: it has no copy %d", ErrBadInput, g.Name, g.Count, c.Index)
			}
			g.First, g.Count, g.Reschedule = c.Index, 1, fsm.ReschedulePolicy{}
		}
	default:
		var refused []string
		for _, g := range tf.Groups {
			gp, err := tf.PlanGroup(g.Name)
			if err != nil {
				refused = append(refused, err.Error())
				continue
			}
			add(gp, false)
		}
		if len(j.Groups) == 0 {
			return fmt.Errorf("%w: %s holds no group tether can run: %s", ErrNothingToRun, tf.Filename, strings.Join(refused, "; "))
		}
		j.Skipped = refused
		switch {
		case tf.Job != nil:
			j.Name = tf.Job.Name
		case len(tf.Tasks) == 1:
			j.Name = tf.Name(tf.Tasks[0])
		default:
			j.Name = strings.TrimSuffix(filepath.Base(tf.Filename), filepath.Ext(tf.Filename))
		}
	}
	j.Batch = true
	for _, g := range j.Groups {
		if job := g.Plan.Group.Job; job == nil || !job.Type.Batch() {
			j.Batch = false
		}
	}
	return nil
}

// Shape is one allocation the job makes: a copy of a group, with its
// tasks' names (tether's: File.InstanceName) in start order.
type Shape struct {
	Group string
	Index int
	Names []string
}

// Shapes are the job's allocations, group by group, copy by copy.
func (j *Job) Shapes() []Shape {
	var out []Shape
	for _, g := range j.Groups {
		for i := g.First; i < g.First+g.Count; i++ {
			s := Shape{Group: g.Name, Index: i}
			for _, t := range g.Tasks {
				s.Names = append(s.Names, j.File.InstanceName(t, i))
			}
			out = append(out, s)
		}
	}
	return out
}

// Tasks counts the tasks of every allocation.
func (j *Job) Tasks() int {
	n := 0
	for _, g := range j.Groups {
		n += g.Count * len(g.Tasks)
	}
	return n
}

// IDs are an allocation's ids: its own, and its tasks' in start order.
type IDs struct {
	Alloc string   `json:"alloc"`
	Tasks []string `json:"tasks"`
}

// NewIDs draws fresh ids for an allocation of shape s: a random UUID (as
// Nomad's allocation ids look) and a task id per task (NewTaskID).
func NewIDs(s Shape) IDs {
	ids := IDs{Alloc: NewAllocID()}
	for _, n := range s.Names {
		ids.Tasks = append(ids.Tasks, NewTaskID(n))
	}
	return ids
}

// NewAllocID makes an allocation id as Nomad's look: a random UUID.
func NewAllocID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// NewTaskID makes a task id from a name: its letters, digits, '_', '.'
// and '-' (others become '-'), at most 50 of them, then '-' and six
// random hex digits.
func NewTaskID(name string) string {
	var suffix [3]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand does not fail on Linux
	return idBase(name) + "-" + hex.EncodeToString(suffix[:])
}

// CopyTaskID is the id of the task named name in copy generation of the
// allocation alloc (NextCopy's): derived, not drawn, so that two
// processes deciding the same next copy record the same tasks (the second
// finds them recorded) and a crash between the decision and its record is
// finished by the next driver with the same ids.
func CopyTaskID(name, alloc string, generation int) string {
	a := strings.ReplaceAll(alloc, "-", "")
	return fmt.Sprintf("%s-%s-r%d", idBase(name), a[:min(12, len(a))], generation)
}

func idBase(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "._-")
	if len(base) > 50 {
		base = base[:50]
	}
	if base == "" {
		base = "task"
	}
	return base
}

// Overrides are the command line's changes to a file's tasks (tether run
// and start): Env, User, CapAdd, CapDrop, KillSignal, KillTimeout and
// Driver apply to every task; Name and Dir to the one task of a run of
// one.
type Overrides struct {
	Name        string        `json:"name,omitempty"`
	Dir         string        `json:"dir,omitempty"`
	User        string        `json:"user,omitempty"`
	Driver      string        `json:"driver,omitempty"`
	Env         []string      `json:"env,omitempty"` // KEY=VALUE
	CapAdd      []string      `json:"cap_add,omitempty"`
	CapDrop     []string      `json:"cap_drop,omitempty"`
	KillSignal  int           `json:"kill_signal,omitempty"`
	KillTimeout time.Duration `json:"kill_timeout,omitempty"`
}

// Apply applies ov to spec; single says the run has one task (Name and
// Dir apply only then).
func (ov Overrides) Apply(spec *fsm.Spec, single bool) error {
	if !single && (ov.Name != "" || ov.Dir != "") {
		return fmt.Errorf("%w: --name and --dir apply to one task: pick it with --task GROUP.TASK", ErrBadInput)
	}
	if ov.Name != "" {
		spec.Name = ov.Name
	}
	if ov.Dir != "" {
		spec.Dir = ov.Dir
	}
	for _, kv := range ov.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: --env %q: use NAME=VALUE", ErrBadInput, kv)
		}
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		spec.Env[k] = v
	}
	if ov.User != "" {
		spec.User = ov.User
	}
	spec.CapAdd = append(slices.Clip(spec.CapAdd), ov.CapAdd...)
	spec.CapDrop = append(slices.Clip(spec.CapDrop), ov.CapDrop...)
	if ov.KillSignal != 0 {
		spec.KillSignal = ov.KillSignal
	}
	if ov.KillTimeout > 0 {
		spec.KillTimeout = ov.KillTimeout
	}
	return nil
}

// validDriver checks an override's driver.
func (ov Overrides) validDriver() error {
	switch ov.Driver {
	case "", "exec", "raw_exec":
		return nil
	}
	return fmt.Errorf("%w: --driver %q: use exec or raw_exec", ErrBadInput, ov.Driver)
}

// FromSpec is the job of one task whose spec a tether before files were
// kept (a version-1 registration of `tether enable`) holds: a task file of
// that one task, named name, run as a service. Its strings are taken as
// they are (escaped: no run-time reference is read in them).
func FromSpec(file, name string, spec fsm.Spec) (*Job, Source) {
	esc := func(l []string) []string {
		out := make([]string, len(l))
		for i, s := range l {
			out[i] = taskfile.Escape(s)
		}
		return out
	}
	s := spec
	s.Name, s.Command, s.Args, s.Dir = name, taskfile.Escape(spec.Command), esc(spec.Args), taskfile.Escape(spec.Dir)
	s.CapAdd, s.CapDrop = esc(spec.CapAdd), esc(spec.CapDrop)
	if spec.Env != nil {
		s.Env = make(map[string]string, len(spec.Env))
		for k, v := range spec.Env {
			s.Env[k] = taskfile.Escape(v)
		}
	}
	s.Alloc = nil
	g := &taskfile.Group{Name: name, Implicit: true, Count: 1, Restart: spec.Restart}
	t := &taskfile.Task{Name: name, Group: g, Driver: spec.Driver, Spec: s}
	g.Tasks = []*taskfile.Task{t}
	tf := &taskfile.File{Filename: file, Groups: []*taskfile.Group{g}, Tasks: []*taskfile.Task{t}}
	gp := &taskfile.GroupPlan{Group: g, Main: []*taskfile.Task{t}}
	b, _ := json.Marshal(spec) // its digest: the spec's (encoding/json sorts maps: canonical)
	src := Source{File: file, Text: append([]byte(name+"\n"), b...)}
	return &Job{Source: src, File: tf, Name: name, Groups: []Group{{Plan: gp, Name: name, Count: 1, Tasks: []*taskfile.Task{t},
		Reschedule: fsm.DefaultServiceReschedule}}}, src
}
