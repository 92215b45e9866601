package agent

import (
	"cmp"
	"path/filepath"
	"strings"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// What status shows of the desired state: every entry with where it
// declared (its origin) and where it stands, from the round's view and
// plan. A pure function, as Decide is.

// statusOf is what a round shows.
func statusOf(v View, plan Plan) Status {
	st := Status{Problems: plan.Problems, Converged: len(plan.Pending) == 0}
	seen := map[string]bool{}
	for _, r := range v.Records {
		e := entryInRound(r, v, plan)
		st.Entries = append(st.Entries, e)
		seen[r.Name] = true
	}
	for _, f := range v.Files {
		if seen[f.Name] || f.Name == "" {
			continue
		}
		seen[f.Name] = true
		e := Entry{Name: f.Name, Source: f.Source, File: f.File, Origin: originOf(f.Source, f.File, v.FeedDir),
			Standing: StandingStarting, Pending: plan.Pending[f.Name], Problem: plan.Notes[f.Name], Digest: f.Digest}
		if f.Err != "" {
			e.Standing, e.Reason = StandingRefused, f.Err
		}
		st.Entries = append(st.Entries, e)
	}
	files := map[string]bool{}
	for _, r := range v.Records {
		files[r.File] = true
	}
	for _, p := range v.Problems {
		if p.Name == "" && !files[p.File] {
			p.Name = fileStem(p.File) // a file refused before its job's name was read
		}
		if p.Name == "" || seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		st.Entries = append(st.Entries, Entry{Name: p.Name, Source: store.SourceDir, File: p.File, Origin: originOf(store.SourceDir, p.File, v.FeedDir),
			Standing: StandingRefused, Reason: p.Err.Error()})
	}
	if v.DirErr != "" {
		st.Problems = append([]string{v.DirErr}, st.Problems...)
	}
	if v.FeedErr != "" {
		st.Problems = append(st.Problems, v.FeedErr)
	}
	return st
}

// originOf says where an entry was declared: "enable", "etcd" (a feed's),
// or "dir".
func originOf(src store.DesiredSource, file, feedDir string) string {
	switch {
	case src == store.SourceEnabled:
		return "enable"
	case feedDir != "" && underDir(file, feedDir), strings.HasPrefix(file, "etcd:"):
		return "etcd"
	}
	return "dir"
}

// entryOfRecord is an entry as its record alone says it (an answer to a
// request, before the next round shows more).
func entryOfRecord(r store.Desired) Entry {
	e := Entry{Name: r.Name, Source: r.Source, File: r.File, Origin: originOf(r.Source, r.File, ""), Reason: r.Reason,
		Disabled: r.Disabled, Standing: StandingStarting, Digest: r.Digest}
	for _, a := range r.Allocs {
		e.Tasks = append(e.Tasks, a.Tasks...)
		e.Restarts += a.Restarts
		e.Reschedules += a.Reschedules
	}
	if len(e.Tasks) > 0 {
		e.Task = e.Tasks[0]
	} else {
		e.Task = r.Task
	}
	return e
}

// entryInRound is an entry as a round sees it.
func entryInRound(r store.Desired, v View, plan Plan) Entry {
	e := entryOfRecord(r)
	e.Origin = originOf(r.Source, r.File, v.FeedDir)
	e.Problem, e.Pending = plan.Notes[r.Name], plan.Pending[r.Name]
	e.Tasks = nil
	var all []fsm.Task
	for _, a := range r.Allocs {
		c := v.Copies[a.ID]
		ids := c.IDs
		if len(ids) == 0 {
			ids = a.Tasks
		}
		e.Tasks = append(e.Tasks, ids...)
		all = append(all, c.Tasks...)
	}
	if r.Task != "" && len(r.Allocs) == 0 {
		e.Tasks = []string{r.Task}
		if t := v.Legacy[r.Task].Task; t.State != fsm.StateNone {
			all = append(all, t)
		}
	}
	// The first main task, and its state.
	e.Task, e.State = "", fsm.StateNone
	if len(e.Tasks) > 0 {
		e.Task = e.Tasks[0]
	}
	for _, t := range all {
		if t.Spec == nil || t.Spec.Alloc == nil || t.Spec.Alloc.Hook == fsm.HookMain {
			e.Task, e.State = t.ID, t.State
			break
		}
	}
	switch row := plan.Rows[r.Name]; {
	case r.Disabled || row == RowStopGone || row == RowForget:
		e.Standing = StandingStopping
		return e
	case row == RowRefused:
		// Its tasks (if any) are left running: they are listed with it.
		e.Standing, e.Reason = StandingRefused, refusal(v, r)
		return e
	}
	if r.Task != "" && len(r.Allocs) == 0 {
		t := v.Legacy[r.Task].Task
		switch {
		case !t.State.Terminal() && t.State != fsm.StateNone:
			e.Standing = StandingRunning
		case t.State == fsm.StateStopped:
			e.Standing = StandingStopped
		}
		return e
	}
	// Each allocation's copy; the entry stands where its worst one does.
	standings := map[Standing]bool{}
	for _, a := range r.Allocs {
		c := v.Copies[a.ID]
		s, reason, since, next := copyStanding(c, v)
		standings[s] = true
		if reason != "" && (s == StandingDown || s == StandingRefused || s == StandingRestarting || s == StandingStopped || e.Reason == "") {
			e.Reason = reason
		}
		if !since.IsZero() && since.After(e.Since) {
			e.Since = since
		}
		if !next.IsZero() && (e.NextAttempt.IsZero() || next.Before(e.NextAttempt)) {
			e.NextAttempt = next
		}
	}
	for _, s := range []Standing{StandingRefused, StandingDown, StandingStarting, StandingRestarting, StandingRunning, StandingReady, StandingStopped, StandingCompleted} {
		if standings[s] {
			e.Standing = s
			break
		}
	}
	if e.Standing != StandingRestarting {
		e.NextAttempt = time.Time{}
	}
	if e.Standing != StandingDown {
		e.Since = time.Time{}
	}
	return e
}

// copyStanding is where an allocation's copy stands: its standing, why,
// since when (down), and when its next copy is due (restarting).
func copyStanding(c CopyView, v View) (s Standing, reason string, since, next time.Time) {
	if len(c.Tasks) == 0 || len(c.Missing) > 0 {
		// Not recorded yet, or only in part: its creation is under way
		// (or, after a crash, owed).
		return StandingStarting, "", since, next
	}
	started, due := false, int64(0)
	for _, t := range c.Tasks {
		started = started || t.State != fsm.StateCreated
		if t.Spec != nil && t.Spec.Alloc != nil {
			due = max(due, t.Spec.Alloc.NotBefore)
		}
	}
	if !started && due > v.Now {
		return StandingRestarting, "", since, time.Unix(0, due)
	}
	if c.live() {
		ready := true
		for _, t := range c.Tasks {
			keeper := t.Spec == nil || t.Spec.Alloc == nil || t.Spec.Alloc.Keeper()
			switch {
			case !keeper || t.State.Terminal():
			case t.State != fsm.StateRunning:
				return StandingStarting, "", since, next
			case t.Spec != nil && t.Spec.Readiness.Waits() && !t.Ready:
				ready = false
			}
		}
		if ready && waitsReady(c.Tasks) {
			return StandingReady, "", since, next
		}
		return StandingRunning, "", since, next
	}
	end := fsm.GroupState{Tasks: c.Tasks, Missing: c.Missing}.End(v.BootID)
	n := fsm.NextCopy(end, allocOf(c.Tasks), restartOf(c.Tasks, end.Task))
	switch {
	case n.Again:
		return StandingRestarting, n.Reason, since, time.Unix(0, n.Alloc.NotBefore)
	case end.Kind == fsm.EndStopped:
		return StandingStopped, end.Reason, since, next
	case end.Kind == fsm.EndCompleted:
		return StandingCompleted, end.Reason, since, next
	case end.Kind == fsm.EndRefused:
		return StandingRefused, end.Reason, since, next
	}
	return StandingDown, n.Reason, time.Unix(0, end.At), next
}

// waitsReady reports whether a running task of tasks says when it is
// ready (readiness notify or a check).
func waitsReady(tasks []fsm.Task) bool {
	for _, t := range tasks {
		if t.State == fsm.StateRunning && t.Spec != nil && t.Spec.Readiness.Waits() {
			return true
		}
	}
	return false
}

// refusal is why an entry's declaration is refused.
func refusal(v View, r store.Desired) string {
	if d, ok := v.Enabled[r.Name]; ok && d.Err != "" {
		return d.Err
	}
	for _, f := range v.Files {
		if f.Name == r.Name && f.Err != "" {
			return f.Err
		}
	}
	for _, p := range v.Problems {
		if p.File == r.File || p.Name == r.Name {
			return p.Err.Error()
		}
	}
	return cmp.Or(r.Reason, "refused")
}

// fileStem is a file's name without its directory and extensions.
func fileStem(file string) string {
	b := filepath.Base(file)
	for _, ext := range TaskFileExts {
		b = strings.TrimSuffix(b, ext)
	}
	return strings.TrimSuffix(b, ".nomad")
}
