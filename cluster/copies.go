package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tether-fsm/tether/job"
)

// What a node runs of its placements. A node runs only the copies whose
// current placement names it: each copy of a PlacedSet is declared to the
// node's agent as a desired entry of its own (EntryName), read through the
// one instantiation path (package job) from the job's file and inputs with
// the selection of that one copy (job.Inputs.Copy: the group, the index,
// and the placement revision, which is part of the declaration's digest,
// so that a new placement of the copy replaces its tasks). PlanCopies
// decides it, as a function of the set, the node's allow lists for specs
// from etcd, and how long ago the node last had proof of its lease.

// CopyEntry is a placed copy as the node's agent declares it.
type CopyEntry struct {
	Copy CopyID
	// Revision is the placement revision: the copy's identity on the node.
	Revision int64
	// Version is the job version it runs.
	Version uint64
	// File names the job's file (as `tether cluster run` was given it),
	// Text is the file and Inputs what it is read with: its run's inputs
	// and the selection of this one copy.
	File   string
	Text   []byte
	Inputs job.Inputs
	// Names are its tasks' names, in start order (as the agent names
	// them).
	Names []string
	// StopAfterClientDisconnect is its group's (0: never).
	StopAfterClientDisconnect time.Duration
}

// EntryName is the name a placed copy is declared under on its node's
// agent: JOB.GROUP[INDEX], which no name told with `tether cluster start`
// (the task id rule) can be.
func EntryName(id CopyID) string { return id.String() }

// CopyRefusal is a placed copy its node refuses, with why.
type CopyRefusal struct {
	Copy     CopyID
	Revision int64
	Err      error
}

// CopyPlan is what a node runs of its placements now.
type CopyPlan struct {
	// Run are the copies it runs, by entry name.
	Run map[string]CopyEntry
	// Refused are the copies it refuses, by entry name: a placement it
	// cannot read (PlacedSet.Refused), a job version that does not parse
	// with its inputs as a job of that copy, a driver the node does not
	// allow for a spec from etcd, a relative path. Their verdict is
	// refused, with the reason.
	Refused map[string]CopyRefusal
	// Disconnected are the copies it stops, in copy order, because it has
	// had no proof of its lease for their group's
	// stop_after_client_disconnect.
	Disconnected []CopyID
	// Wake is when the next copy's stop_after_client_disconnect falls due
	// if the node hears nothing from etcd meanwhile (zero: none).
	Wake time.Time
}

// CopyReader reads placed copies as their node runs them, keeping each
// read (a job's parse) for as long as the copy's placement is the same.
// Its zero value is ready; it is not safe for concurrent use.
type CopyReader struct {
	read map[copyKey]copyRead
}

type copyKey struct {
	id  CopyID
	rev int64
}

type copyRead struct {
	e   CopyEntry
	err error
}

// Plan decides what the node runs of set (see CopyPlan): drivers are the
// drivers the node allows for a spec from etcd (NodeInfo.Drivers),
// contact is the node's last proof of its lease (Node.Contact) and gap the
// longest a connected node goes without one (Node.KeepAliveGap). A copy
// whose group has a stop_after_client_disconnect of d stops once now is
// max(d, gap) past the contact or more: a loss of etcd shorter than the
// gap cannot be told from none.
func (r *CopyReader) Plan(set PlacedSet, drivers []string, contact, now time.Time, gap time.Duration) CopyPlan {
	p := CopyPlan{Run: map[string]CopyEntry{}, Refused: map[string]CopyRefusal{}}
	keep := map[copyKey]copyRead{}
	for _, id := range set.sortedCopyIDs() {
		if rf, ok := set.Refused[id]; ok {
			p.Refused[EntryName(id)] = CopyRefusal{Copy: id, Revision: rf.Revision, Err: rf.Err}
			continue
		}
		c := set.Copies[id]
		k := copyKey{id: id, rev: c.Placed.Revision}
		cr, ok := r.read[k]
		if !ok {
			cr.e, cr.err = ReadCopy(c, drivers)
		}
		keep[k] = cr
		if cr.err != nil {
			p.Refused[EntryName(id)] = CopyRefusal{Copy: id, Revision: c.Placed.Revision, Err: cr.err}
			continue
		}
		if d := cr.e.StopAfterClientDisconnect; d > 0 {
			due := contact.Add(max(d, gap))
			if !now.Before(due) {
				p.Disconnected = append(p.Disconnected, id)
				continue
			}
			p.Wake = earliest(p.Wake, due)
		}
		p.Run[EntryName(id)] = cr.e
	}
	r.read = keep
	return p
}

// ReadCopy reads a placed copy as its node runs it: the job's file with
// its inputs and the selection of the copy, through the job path's parse
// and plan (package job's Parse; the node's agent reads it again with its
// host and allow lists), each of the copy's tasks with a driver among
// drivers and no relative path (CheckPaths, as a desired file).
func ReadCopy(c PlacedCopy, drivers []string) (CopyEntry, error) {
	pl := c.Placed
	in := c.Spec.Inputs.jobInputs()
	in.Group, in.Copy = pl.Group, &job.Copy{Index: pl.Index, Placement: pl.Revision}
	e := CopyEntry{Copy: pl.ID(), Revision: pl.Revision, Version: pl.Version, File: c.Spec.File, Text: []byte(c.Spec.Text),
		Inputs: in, StopAfterClientDisconnect: pl.StopAfterClientDisconnect}
	if err := checkText(e.Text); err != nil {
		return e, fmt.Errorf("job %s version %d: %w", pl.Job, pl.Version, err)
	}
	j, err := job.Parse(job.Source{File: c.Spec.File, Text: e.Text}, in)
	if err != nil {
		return e, fmt.Errorf("job %s version %d, copy %s: %s", pl.Job, pl.Version, pl.ID(), job.Describe(err))
	}
	if j.File.Job == nil || j.File.Job.Name != pl.Job {
		return e, fmt.Errorf("job %s version %d: the file is not job %s", pl.Job, pl.Version, pl.Job)
	}
	for _, g := range j.Groups {
		for _, t := range g.Tasks {
			if !slices.Contains(drivers, t.Driver) {
				return e, fmt.Errorf("task %q: driver %q is not allowed for a spec from etcd on this node (it allows %s: --allow-remote-drivers)",
					t.Address(), t.Driver, strings.Join(drivers, ", "))
			}
			if err := CheckPaths(t.Spec.Command, t.Spec.Dir); err != nil {
				return e, fmt.Errorf("task %q: %w", t.Address(), err)
			}
		}
	}
	shapes := j.Shapes()
	if len(shapes) != 1 || shapes[0].Group != pl.Group || shapes[0].Index != pl.Index {
		return e, fmt.Errorf("%w: copy %s is not one allocation of the job", job.ErrShape, pl.ID())
	}
	e.Names = shapes[0].Names
	return e, nil
}

// Digest is the digest of the copy's declaration as its node's agent
// reads it (job.Digest): a standing of the agent's entry that carries it
// is about this placement.
func (e CopyEntry) Digest() string {
	return job.Digest(job.Source{File: e.File, Text: e.Text}, e.Inputs)
}

// jobInputs are a job's stored inputs as the job path takes them.
func (in JobInputs) jobInputs() job.Inputs {
	out := job.Inputs{Vars: in.Vars, Env: in.Env, Meta: in.Meta}
	for _, f := range in.VarFiles {
		out.VarFiles = append(out.VarFiles, job.VarFile{Name: f.Name, Text: []byte(f.Text)})
	}
	return out
}

// VerdictOf is the verdict a copy's node gives from the standing its
// agent shows for the copy's entry (package agent's words): starting,
// running, ready, restarting (a copy due later: starting), down (given
// up after its restarts: failed), refused, stopped (on request),
// completed (a batch copy's end: complete). A standing that says nothing
// of the placement (stopping: the entry is being removed) gives false.
func VerdictOf(standing string) (VerdictState, bool) {
	switch standing {
	case "starting", "restarting":
		return VerdictStarting, true
	case "running":
		return VerdictRunning, true
	case "ready":
		return VerdictReady, true
	case "down":
		return VerdictFailed, true
	case "refused":
		return VerdictRefused, true
	case "stopped":
		return VerdictStopped, true
	case "completed":
		return VerdictComplete, true
	}
	return "", false
}
