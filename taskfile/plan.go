package taskfile

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/template"
)

// Name is how tether names t: its task name when no other task of the
// file has it, else GROUP.TASK.
func (f *File) Name(t *Task) string {
	n := 0
	for _, x := range f.Tasks {
		if x.Name == t.Name {
			n++
		}
	}
	if n > 1 {
		return t.Address()
	}
	return t.Name
}

// InstanceName is the name of copy index of t: Name, plus "[index]" when
// its group's count is above one.
func (f *File) InstanceName(t *Task, index int) string {
	if t.Group != nil && t.Group.Count > 1 {
		return fmt.Sprintf("%s[%d]", f.Name(t), index)
	}
	return f.Name(t)
}

func (f *File) addresses(runnable bool) []string {
	var out []string
	for _, t := range f.Tasks {
		if !runnable || t.Runnable() {
			out = append(out, t.Address())
		}
	}
	return out
}

// Find selects one task: by GROUP.TASK, or by a task name no other task
// of the file has; "" is the file's only runnable task. A task tether
// cannot run (another driver, a refused stanza in it or its group) is
// an ErrNotRunnable naming why.
func (f *File) Find(sel string) (*Task, error) {
	var t *Task
	switch {
	case sel == "":
		var run []*Task
		for _, x := range f.Tasks {
			if x.Runnable() {
				run = append(run, x)
			}
		}
		if len(run) != 1 {
			return nil, fmt.Errorf("%w: %s holds %d tasks tether can run (%s): pick one with --task NAME (GROUP.TASK where names repeat)", ErrNoTask, f.Filename, len(run), listOr(f.addresses(true), "none"))
		}
		t = run[0]
	default:
		var byName []*Task
		for _, x := range f.Tasks {
			if x.Address() == sel {
				t = x
				break
			}
			if x.Name == sel {
				byName = append(byName, x)
			}
		}
		if t == nil {
			switch len(byName) {
			case 0:
				return nil, fmt.Errorf("%w: %s has no task %q (it has: %s)", ErrNoTask, f.Filename, sel, listOr(f.addresses(false), "none"))
			case 1:
				t = byName[0]
			default:
				var addrs []string
				for _, x := range byName {
					addrs = append(addrs, x.Address())
				}
				return nil, fmt.Errorf("%w: %s has %d tasks named %q: pick one as GROUP.TASK (%s)", ErrNoTask, f.Filename, len(byName), sel, strings.Join(addrs, ", "))
			}
		}
	}
	if err := t.CheckRunnable(); err != nil {
		return nil, err
	}
	return t, nil
}

// CheckRunnable says why tether cannot run t, if it cannot.
func (t *Task) CheckRunnable() error {
	if !t.Runnable() {
		return fmt.Errorf("%w: task %q has driver %q; tether runs only exec and raw_exec", ErrNotRunnable, t.Address(), t.Driver)
	}
	var rs []Refusal
	if t.Group != nil {
		rs = append(rs, t.Group.Refusals...)
	}
	rs = append(rs, t.Refusals...)
	if len(rs) > 0 {
		var msgs []string
		for _, r := range rs {
			msgs = append(msgs, r.Error())
		}
		return fmt.Errorf("%w: task %q: %s", ErrNotRunnable, t.Address(), strings.Join(msgs, "; "))
	}
	return nil
}

// GroupPlan is a group as a runner runs it, as Nomad does: the prestart
// tasks first (sidecars among them run on; the others must end
// successfully), then the main tasks with the poststart ones once the
// main tasks started, the poststop ones after the main tasks ended. Every
// copy (Count) runs this plan with its own alloc index.
type GroupPlan struct {
	Group     *Group
	Prestart  []*Task
	Main      []*Task
	Poststart []*Task
	Poststop  []*Task
	// NotRun are the group's tasks of another driver: named, not run.
	NotRun []*Task
}

// PlanGroup plans the group sel ("" is the file's only group). A group
// with a refused stanza, or with no main task tether runs, is an
// ErrNotRunnable.
func (f *File) PlanGroup(sel string) (*GroupPlan, error) {
	var g *Group
	for _, x := range f.Groups {
		if x.Name == sel || (sel == "" && len(f.Groups) == 1) {
			g = x
			break
		}
	}
	if g == nil {
		var names []string
		for _, x := range f.Groups {
			names = append(names, x.Name)
		}
		if sel == "" {
			return nil, fmt.Errorf("%w: %s holds %d groups (%s): pick one", ErrNoTask, f.Filename, len(f.Groups), strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("%w: %s has no group %q (it has: %s)", ErrNoTask, f.Filename, sel, strings.Join(names, ", "))
	}
	if len(g.Refusals) > 0 {
		var msgs []string
		for _, r := range g.Refusals {
			msgs = append(msgs, r.Error())
		}
		return nil, fmt.Errorf("%w: group %q: %s", ErrNotRunnable, g.Name, strings.Join(msgs, "; "))
	}
	gp := &GroupPlan{Group: g}
	for _, t := range g.Tasks {
		if !t.Runnable() {
			gp.NotRun = append(gp.NotRun, t)
			continue
		}
		if err := t.CheckRunnable(); err != nil {
			return nil, err
		}
		switch t.Lifecycle.Hook {
		case HookPrestart:
			gp.Prestart = append(gp.Prestart, t)
		case HookPoststart:
			gp.Poststart = append(gp.Poststart, t)
		case HookPoststop:
			gp.Poststop = append(gp.Poststop, t)
		default:
			gp.Main = append(gp.Main, t)
		}
	}
	if len(gp.Main) == 0 {
		return nil, fmt.Errorf("%w: group %q has no main task tether runs (a task without a lifecycle hook, with driver exec or raw_exec)", ErrNotRunnable, g.Name)
	}
	if g.Count == 0 {
		return nil, fmt.Errorf("%w: group %q has count = 0: nothing to run", ErrNotRunnable, g.Name)
	}
	if limit := f.countLimit(); g.Count > limit {
		return nil, fmt.Errorf("%w: group %q has count = %d; tether runs at most %d copies of a group (its bound on count: --max-count, TETHER_MAX_COUNT)", ErrLimit, g.Name, g.Count, limit)
	}
	return gp, nil
}

// artifactBound sets an artifact's bound on the bytes it places
// (artifact.OptionMaxBytes) from its group's ephemeral_disk size, and
// takes out one the file wrote itself: without an ephemeral_disk the
// artifact package's default holds (300 MiB).
func artifactBound(opts map[string]string, g *Group) map[string]string {
	_, wrote := opts[artifact.OptionMaxBytes]
	if (g == nil || g.EphemeralDiskMB <= 0) && !wrote {
		return opts
	}
	out := maps.Clone(opts)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, artifact.OptionMaxBytes)
	if g != nil && g.EphemeralDiskMB > 0 {
		out[artifact.OptionMaxBytes] = strconv.FormatInt(int64(g.EphemeralDiskMB)<<20, 10)
	}
	return out
}

// countLimit is the bound on a group's count the file was read with.
func (f *File) countLimit() int {
	if f.maxCount > 0 {
		return f.maxCount
	}
	return DefaultMaxCount
}

// Tasks are the plan's tasks in start order.
func (gp *GroupPlan) Tasks() []*Task {
	var out []*Task
	out = append(out, gp.Prestart...)
	out = append(out, gp.Main...)
	out = append(out, gp.Poststart...)
	return append(out, gp.Poststop...)
}

// Check evaluates the job's, the group's and every planned task's
// constraints against host.
func (gp *GroupPlan) Check(host *Host) error {
	for _, t := range gp.Tasks() {
		if err := t.CheckConstraints(host); err != nil {
			return err
		}
	}
	return nil
}

// PortRequests are the group's ports and its planned tasks'.
func (gp *GroupPlan) PortRequests() []PortRequest {
	var out []PortRequest
	if gp.Group.Network != nil {
		out = append(out, gp.Group.Network.Ports...)
	}
	for _, t := range gp.Tasks() {
		if t.Network != nil {
			out = append(out, t.Network.Ports...)
		}
	}
	return out
}

// PortRequests are the ports t needs: its group's and its own.
func (t *Task) PortRequests() []PortRequest {
	var out []PortRequest
	if t.Group != nil && t.Group.Network != nil {
		out = append(out, t.Group.Network.Ports...)
	}
	if t.Network != nil {
		out = append(out, t.Network.Ports...)
	}
	return out
}

// CheckConstraints evaluates the job's, the group's and t's constraints.
func (t *Task) CheckConstraints(host *Host) error {
	var cs []Constraint
	if t.Group != nil {
		if t.Group.Job != nil {
			cs = append(cs, t.Group.Job.Constraints...)
		}
		cs = append(cs, t.Group.Constraints...)
	}
	cs = append(cs, t.Constraints...)
	for _, c := range cs {
		if err := c.Check(host); err != nil {
			return fmt.Errorf("task %q: %w", t.Address(), err)
		}
	}
	return nil
}

// Alloc is one copy of a group about to run: Nomad's allocation.
type Alloc struct {
	ID    string // NOMAD_ALLOC_ID
	Index int    // NOMAD_ALLOC_INDEX, 0 to count-1
	Host  *Host
	// Ports are the allocated ports of the group and its tasks (from an
	// Allocator); each task gets the group's and its own.
	Ports []Port
	// BaseEnv is the environment the executor gives every task (PATH,
	// HOME...): what ${env["PATH"]} reads when the task file sets none.
	BaseEnv map[string]string
}

// Instance is a task ready to run: everything interpolated.
type Instance struct {
	Task  *Task
	Index int
	// Name is tether's name for it (File.InstanceName).
	Name string
	// Spec is what to record and run: Name the instance's name, Env the
	// task's env block with Nomad's NOMAD_* variables (over BaseEnv's), Dir
	// Nomad's working directory (the task directory; "/" for exec) unless
	// work_dir says otherwise; its Templates, Artifacts and Ports; and,
	// with an alloc id and a task directory, its Alloc (every field but
	// Tasks, which the caller fills with the group's task ids).
	Spec fsm.Spec
	// Env is the task's whole environment (BaseEnv, NOMAD_*, its env
	// block): what a template's env function reads.
	Env       map[string]string
	Templates []template.Template
	Artifacts []artifact.Artifact
	Services  []Service
	Ports     []Port
	Layout    taskdir.Layout
}

var metaKeyBad = regexp.MustCompile(`[^A-Za-z0-9_.]`)

// Instantiate makes copy a.Index of t ready to run in layout: checks that
// it can run here (its driver, refusals, constraints), sets Nomad's
// NOMAD_* variables, and interpolates every run-time reference in its
// config, env, meta, templates, artifacts and services. An unknown
// reference is an ErrUnknownReference naming it.
func (f *File) Instantiate(t *Task, a Alloc, layout taskdir.Layout) (*Instance, error) {
	if err := t.CheckRunnable(); err != nil {
		return nil, err
	}
	if a.Host == nil {
		return nil, errors.New("taskfile: Instantiate needs Alloc.Host (DetectHost)")
	}
	if err := t.CheckConstraints(a.Host); err != nil {
		return nil, err
	}
	if t.Group != nil && (a.Index < 0 || a.Index >= max(t.Group.Count, 1)) {
		return nil, fmt.Errorf("%w: alloc index %d of task %q: its group's count is %d", ErrNoTask, a.Index, t.Address(), t.Group.Count)
	}
	in := &Instance{Task: t, Index: a.Index, Name: f.InstanceName(t, a.Index), Layout: layout}
	env := maps.Clone(a.BaseEnv)
	if env == nil {
		env = map[string]string{}
	}
	nomad := layout.Env()
	nomad["NOMAD_TASK_NAME"] = t.Name
	nomad["NOMAD_ALLOC_INDEX"] = strconv.Itoa(a.Index)
	if a.ID != "" {
		nomad["NOMAD_ALLOC_ID"] = a.ID
		nomad["NOMAD_SHORT_ALLOC_ID"] = a.ID[:min(8, len(a.ID))]
	}
	if r := t.Spec.Resources; r.MemoryMB > 0 {
		nomad["NOMAD_MEMORY_LIMIT"] = strconv.Itoa(r.MemoryMB)
	}
	if r := t.Spec.Resources; r.MemoryMaxMB > 0 {
		nomad["NOMAD_MEMORY_MAX_LIMIT"] = strconv.Itoa(r.MemoryMaxMB)
	}
	if r := t.Spec.Resources; r.CPU > 0 {
		nomad["NOMAD_CPU_LIMIT"] = strconv.Itoa(r.CPU)
	}
	var job *Job
	if t.Group != nil {
		job = t.Group.Job
	}
	if job != nil {
		nomad["NOMAD_JOB_NAME"] = job.Name
		nomad["NOMAD_JOB_ID"] = job.Name
		nomad["NOMAD_GROUP_NAME"] = t.Group.Name
		nomad["NOMAD_ALLOC_NAME"] = fmt.Sprintf("%s.%s[%d]", job.Name, t.Group.Name, a.Index)
		nomad["NOMAD_REGION"] = job.Region
		nomad["NOMAD_NAMESPACE"] = job.Namespace
		nomad["NOMAD_DC"] = a.Host.Node["datacenter"]
		if job.Parameterized != nil {
			nomad["NOMAD_JOB_PARENT_ID"] = job.Name
		}
	}
	// Ports: the group's and the task's own.
	for _, p := range a.Ports {
		if p.Task != "" && p.Task != t.Name {
			continue
		}
		in.Ports = append(in.Ports, p)
		host := strconv.Itoa(p.Value)
		port := host
		if p.To > 0 {
			port = strconv.Itoa(p.To)
		}
		addr := p.IP + ":" + host
		nomad["NOMAD_IP_"+p.Label] = p.IP
		nomad["NOMAD_PORT_"+p.Label] = port
		nomad["NOMAD_ADDR_"+p.Label] = addr
		nomad["NOMAD_HOST_IP_"+p.Label] = p.IP
		nomad["NOMAD_HOST_PORT_"+p.Label] = host
		nomad["NOMAD_HOST_ADDR_"+p.Label] = addr
		nomad["NOMAD_ALLOC_IP_"+p.Label] = p.IP
		nomad["NOMAD_ALLOC_PORT_"+p.Label] = port
		nomad["NOMAD_ALLOC_ADDR_"+p.Label] = p.IP + ":" + port
	}
	for _, pr := range t.PortRequests() {
		if _, ok := nomad["NOMAD_PORT_"+pr.Label]; !ok {
			return nil, fmt.Errorf("%w: task %q needs port %q, which Alloc.Ports does not hold (allocate the group's ports first)", ErrPorts, t.Address(), pr.Label)
		}
	}
	maps.Copy(env, nomad)

	// Meta: job < group < task, each value interpolated.
	raw := map[string]string{}
	if job != nil {
		maps.Copy(raw, job.Meta)
	}
	if t.Group != nil {
		maps.Copy(raw, t.Group.Meta)
	}
	maps.Copy(raw, t.Meta)
	lim := f.limits.withDefaults()
	sc := &Scope{Env: env, Host: a.Host, made: &madeBound{each: lim.ValueBytes, total: lim.ValueBytes}}
	meta, err := sc.interpolateMap("meta", raw)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", t.Address(), err)
	}
	for k, v := range meta {
		key := metaKeyBad.ReplaceAllString(k, "_")
		env["NOMAD_META_"+key] = v
		env["NOMAD_META_"+strings.ToUpper(key)] = v
		nomad["NOMAD_META_"+key] = v
		nomad["NOMAD_META_"+strings.ToUpper(key)] = v
	}
	sc.Meta = meta

	userEnv, err := sc.interpolateMap("env", t.Spec.Env)
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", t.Address(), err)
	}
	maps.Copy(env, userEnv)
	in.Env = env

	spec := t.Spec
	spec.Name = in.Name
	spec.Env = maps.Clone(nomad)
	maps.Copy(spec.Env, userEnv)
	fail := func(err error) (*Instance, error) { return nil, fmt.Errorf("task %q: %w", t.Address(), err) }
	if spec.Command, err = sc.Interpolate(t.Spec.Command); err != nil {
		return fail(fmt.Errorf("command: %w", err))
	}
	if spec.Args, err = sc.interpolateAll("args", t.Spec.Args); err != nil {
		return fail(err)
	}
	if spec.CapAdd, err = sc.interpolateAll("cap_add", t.Spec.CapAdd); err != nil {
		return fail(err)
	}
	if spec.CapDrop, err = sc.interpolateAll("cap_drop", t.Spec.CapDrop); err != nil {
		return fail(err)
	}
	dir, err := sc.Interpolate(t.Spec.Dir)
	if err != nil {
		return fail(fmt.Errorf("work_dir: %w", err))
	}
	switch {
	case dir == "":
		spec.Dir = layout.WorkDir()
	case filepath.IsAbs(dir):
		spec.Dir = dir
	default:
		spec.Dir = filepath.Join(layout.WorkDir(), dir)
	}
	in.Spec = spec

	for _, tm := range t.Templates {
		if tm.Source != "" {
			if tm.Source, err = sc.Interpolate(tm.Source); err != nil {
				return fail(fmt.Errorf("template source: %w", err))
			}
		}
		if tm.Destination, err = sc.Interpolate(tm.Destination); err != nil {
			return fail(fmt.Errorf("template destination: %w", err))
		}
		in.Templates = append(in.Templates, tm)
	}
	for _, ar := range t.Artifacts {
		if ar.Source, err = sc.Interpolate(ar.Source); err != nil {
			return fail(fmt.Errorf("artifact source: %w", err))
		}
		if ar.Destination, err = sc.Interpolate(ar.Destination); err != nil {
			return fail(fmt.Errorf("artifact destination: %w", err))
		}
		if ar.Options, err = sc.interpolateMap("artifact options", ar.Options); err != nil {
			return fail(err)
		}
		ar.Options = artifactBound(ar.Options, t.Group)
		if ar.Headers, err = sc.interpolateMap("artifact headers", ar.Headers); err != nil {
			return fail(err)
		}
		in.Artifacts = append(in.Artifacts, ar)
	}
	var services []Service
	if t.Group != nil {
		for _, s := range t.Group.Services {
			if s.Task == "" || s.Task == t.Name {
				services = append(services, s)
			}
		}
	}
	services = append(services, t.Services...)
	for _, s := range services {
		if s.Name, err = sc.Interpolate(s.Name); err != nil {
			return fail(fmt.Errorf("service name: %w", err))
		}
		if s.Tags, err = sc.interpolateAll("service tags", s.Tags); err != nil {
			return fail(err)
		}
		checks := make([]Check, len(s.Checks))
		for i, c := range s.Checks {
			if c.Name, err = sc.Interpolate(c.Name); err != nil {
				return fail(fmt.Errorf("check name: %w", err))
			}
			if c.Path, err = sc.Interpolate(c.Path); err != nil {
				return fail(fmt.Errorf("check path: %w", err))
			}
			if c.Command, err = sc.Interpolate(c.Command); err != nil {
				return fail(fmt.Errorf("check command: %w", err))
			}
			if c.Args, err = sc.interpolateAll("check args", c.Args); err != nil {
				return fail(err)
			}
			checks[i] = c
		}
		s.Checks = checks
		in.Services = append(in.Services, s)
	}
	in.Spec.Templates, in.Spec.Artifacts, in.Spec.Ports = in.Templates, in.Artifacts, in.Ports
	if in.Spec.Check, err = readinessSpec(t, in.Services, in.Ports); err != nil {
		return fail(err)
	}
	if a.ID != "" && layout.TaskDir != "" {
		// The group's runner fills Tasks with the ids it gives the
		// group's tasks.
		in.Spec.Alloc = &fsm.Alloc{ID: a.ID, Index: a.Index, Dir: layout.AllocDir, TaskDir: layout.TaskDir,
			Hook: t.Lifecycle.Hook, Sidecar: t.Lifecycle.Sidecar, Leader: t.Leader}
	}
	return in, nil
}

// StaticSpec is t's spec for a caller that does not instantiate (no task
// directory yet): it works only when t has no run-time reference, and
// says which one it has otherwise. Its working directory is the spec's
// own.
func (t *Task) StaticSpec() (fsm.Spec, error) {
	if err := t.CheckRunnable(); err != nil {
		return fsm.Spec{}, err
	}
	sc := &Scope{}
	spec := t.Spec
	var err error
	fail := func(what string, err error) (fsm.Spec, error) {
		return fsm.Spec{}, fmt.Errorf("task %q: %s: %w", t.Address(), what, err)
	}
	if spec.Command, err = sc.Interpolate(t.Spec.Command); err != nil {
		return fail("command", err)
	}
	if spec.Args, err = sc.interpolateAll("args", t.Spec.Args); err != nil {
		return fail("args", err)
	}
	if spec.Env, err = sc.interpolateMap("env", t.Spec.Env); err != nil {
		return fail("env", err)
	}
	if spec.Dir, err = sc.Interpolate(t.Spec.Dir); err != nil {
		return fail("work_dir", err)
	}
	if spec.CapAdd, err = sc.interpolateAll("cap_add", t.Spec.CapAdd); err != nil {
		return fail("cap_add", err)
	}
	if spec.CapDrop, err = sc.interpolateAll("cap_drop", t.Spec.CapDrop); err != nil {
		return fail("cap_drop", err)
	}
	var services []Service
	if t.Group != nil {
		services = t.Group.Services
	}
	if spec.Check, err = readinessSpec(t, append(services[:len(services):len(services)], t.Services...), nil); err != nil {
		return fail("readiness check (a port label is allocated only for a job file's task)", err)
	}
	return spec, nil
}
