package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/taskfile"
)

// Run is a job's allocations ready to record.
type Run struct {
	Allocs []Alloc
	// Batch: every task runs to completion (a batch job's).
	Batch bool
}

// Alloc is one allocation: a copy of a group.
type Alloc struct {
	ID    string
	Group string
	Index int
	// Tasks are its tasks in start order.
	Tasks []Task
}

// Task is a task ready to record: its id and its spec (whose Alloc lists
// the allocation's task ids).
type Task struct {
	ID   string
	Spec fsm.Spec
}

// IDs lists the allocation's task ids.
func (a Alloc) IDs() []string {
	out := make([]string, len(a.Tasks))
	for i, t := range a.Tasks {
		out[i] = t.ID
	}
	return out
}

// Tasks are every task of the run, allocation by allocation.
func (r *Run) Tasks() []Task {
	var out []Task
	for _, a := range r.Allocs {
		out = append(out, a.Tasks...)
	}
	return out
}

// Instantiate makes the job's allocations ready to record, each with its
// ids (one IDs per Shape, in order, each with a task id per name): see
// the package's doc. ov are the command line's overrides. On failure,
// the ports it allocated are let go of, and nothing else was written.
func (j *Job) Instantiate(ctx context.Context, node Node, ids []IDs, ov Overrides) (*Run, error) {
	return j.instantiate(ctx, node, ids, ov, false)
}

// probeAlloc is the stand-in allocation id of Read's dry run.
const probeAlloc = "00000000-0000-4000-8000-000000000000"

// InstantiateAlloc is Instantiate of the one allocation of shape (group,
// index), with its ids: a caller that makes (or makes again) one
// allocation of a job whose others it keeps.
func (j *Job) InstantiateAlloc(ctx context.Context, node Node, group string, index int, ids IDs, ov Overrides) (*Run, error) {
	for _, g := range j.Groups {
		if g.Name == group && index >= g.First && index < g.First+g.Count {
			run := &Run{Batch: j.Batch}
			a, err := j.instantiateAlloc(ctx, node, node.host(), g, index, ids, ov, j.Tasks() == 1, false)
			if err != nil {
				return nil, err
			}
			run.Allocs = append(run.Allocs, a)
			return run, nil
		}
	}
	return nil, fmt.Errorf("%w: the job has no allocation %d of group %q", ErrShape, index, group)
}

func (j *Job) instantiate(ctx context.Context, node Node, ids []IDs, ov Overrides, dry bool) (run *Run, err error) {
	if err = ov.validDriver(); err != nil {
		return nil, err
	}
	shapes := j.Shapes()
	if dry {
		ids = make([]IDs, len(shapes))
		for i, s := range shapes {
			ids[i] = IDs{Alloc: probeAlloc}
			for k := range s.Names {
				ids[i].Tasks = append(ids[i].Tasks, fmt.Sprintf("probe-%d-%d", i, k))
			}
		}
	}
	if len(ids) != len(shapes) {
		return nil, fmt.Errorf("%w: %d allocations, %d sets of ids", ErrShape, len(shapes), len(ids))
	}
	host := node.host()
	run = &Run{Batch: j.Batch}
	defer func() {
		if err != nil && node.Ports != nil && !dry {
			for _, a := range run.Allocs {
				_ = node.Ports.Release(a.ID)
			}
		}
	}()
	single := j.Tasks() == 1
	k := 0
	for _, g := range j.Groups {
		for i := g.First; i < g.First+g.Count; i++ {
			a, err := j.instantiateAlloc(ctx, node, host, g, i, ids[k], ov, single, dry)
			k++
			if err != nil {
				return run, err
			}
			run.Allocs = append(run.Allocs, a)
		}
	}
	return run, nil
}

// instantiateAlloc makes copy i of group g ready with its ids; its ports
// are let go of when it fails.
func (j *Job) instantiateAlloc(ctx context.Context, node Node, host *taskfile.Host, g Group, i int, id IDs, ov Overrides, single, dry bool) (a Alloc, err error) {
	if err = ov.validDriver(); err != nil {
		return a, err
	}
	if len(id.Tasks) != len(g.Tasks) || statedir.ValidateTaskID(id.Alloc) != nil {
		return a, fmt.Errorf("%w: allocation %d of group %s: %d tasks, ids %+v", ErrShape, i, g.Name, len(g.Tasks), id)
	}
	for _, t := range id.Tasks {
		if err := statedir.ValidateTaskID(t); err != nil {
			return a, fmt.Errorf("%w: %w", ErrShape, err)
		}
	}
	if node.StateDir == "" {
		return a, errors.New("job: Node.StateDir is required")
	}
	var ports []taskfile.Port
	reqs := g.Plan.PortRequests()
	switch {
	case len(reqs) == 0:
	case dry:
		ports = probePorts(reqs, host.IP)
	case node.Ports == nil:
		return a, fmt.Errorf("%w: group %s asks for ports and this node allocates none", taskfile.ErrPorts, g.Name)
	default:
		if ports, err = node.Ports.Allocate(ctx, id.Alloc, reqs); err != nil {
			return a, err
		}
		defer func() {
			if err != nil {
				_ = node.Ports.Release(id.Alloc)
			}
		}()
	}
	a = Alloc{ID: id.Alloc, Group: g.Name, Index: i}
	dirs := statedir.Layout{Dir: node.StateDir}.Alloc(id.Alloc)
	for n, t := range g.Tasks {
		if ov.Driver != "" {
			x := *t
			x.Driver, x.Spec.Driver = ov.Driver, ov.Driver
			t = &x
		}
		dirName := t.Name
		if statedir.ValidateTaskDirName(dirName) != nil {
			dirName = fmt.Sprintf("task-%d", n)
		}
		l := taskdir.Layout{TaskDir: dirs.Task(dirName), AllocDir: dirs.Shared(), Chroot: t.Driver == executor.ModeExec}
		var base map[string]string
		if node.BaseEnv != nil {
			probe := t.Spec
			probe.Alloc = &fsm.Alloc{ID: id.Alloc, Dir: l.AllocDir, TaskDir: l.TaskDir}
			if base, err = node.BaseEnv(probe, id.Tasks[n]); err != nil {
				return a, fmt.Errorf("task %q: %w", t.Address(), err)
			}
		}
		inst, err := j.File.Instantiate(t, taskfile.Alloc{ID: id.Alloc, Index: i, Host: host, Ports: ports, BaseEnv: base}, l)
		if err != nil {
			return a, err
		}
		spec := inst.Spec
		spec.Alloc.Tasks = id.Tasks
		r := g.Reschedule
		spec.Alloc.Reschedule = &r
		if g.Alone {
			spec.Alloc.Hook, spec.Alloc.Sidecar, spec.Alloc.Leader = fsm.HookMain, false, false
		}
		if err := ov.Apply(&spec, single); err != nil {
			return a, err
		}
		if err := node.Policy.Check(spec, l); err != nil {
			return a, err
		}
		if dry {
			if err := spec.Validate(); err != nil {
				return a, fmt.Errorf("task %q: %w", t.Address(), err)
			}
			if node.CheckSpec != nil {
				if err := node.CheckSpec(spec); err != nil {
					return a, fmt.Errorf("task %q: %w", t.Address(), err)
				}
			}
		}
		a.Tasks = append(a.Tasks, Task{ID: id.Tasks[n], Spec: spec})
	}
	return a, nil
}

// probePorts are stand-in ports for Read's dry run: a static port as
// asked, a dynamic one the first of the dynamic range.
func probePorts(reqs []taskfile.PortRequest, ip string) []taskfile.Port {
	var out []taskfile.Port
	next := taskfile.DefaultMinDynamicPort
	for _, r := range reqs {
		p := taskfile.Port{Label: r.Label, Value: r.Static, To: r.To, IP: ip, Task: r.Task}
		if p.Value == 0 {
			p.Value = next
			next++
		}
		out = append(out, p)
	}
	return out
}
