package driver

import (
	"context"
	"fmt"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

// Restarts and readiness.
//
// The executor restarts its task by the task's restart policy, whether a
// driver watches or not, and journals each restart ahead: the intent (a
// restart-intent event), then the outcome (launched or launch-failed).
// From protocol 10 it journals each run's readiness too (a ready event
// naming the run, with the time it became ready), before it tells anyone.
// The driver folds the entries its log lacks, in order: from a watch of
// the live executor (Conn.Watch, in the supervisor; WaitReady), or from
// the journal the executor left on disk (World.Journal) when it is gone.
// How many entries the log holds follows from the task's state
// (fsm.Task.RestartEvents), so folding is idempotent: a report is cut to
// the entries past it. A ready is thereby recorded for every run that was
// ready, restarts included, by whoever supervises the task, once.

// report is what the supervisor, or a look at reality, found: journal
// entries (from index from on), and the task's end if it is over.
type report struct {
	from    int
	entries []fsm.Event
	end     []fsm.Event // task-exited or executor-lost; nil while the task lives
	// refused: an exit record was there but did not match the log, so it
	// was not believed (end is executor-lost).
	refused bool
	// final is the executor's own last word on a task it reported over
	// (its watch answered with the task over): the executor exits by
	// itself, and says whether it confirmed the task's cgroup empty.
	final *executor.Status
}

// journals reports whether the executor of a task of spec keeps a journal
// the driver folds: for its restarts (a restart policy, or a template
// whose change restarts the task) or its runs' readiness.
func journals(spec *fsm.Spec) bool {
	if spec == nil {
		return false
	}
	if spec.Restart != nil || spec.Readiness.Waits() {
		return true
	}
	for _, t := range spec.Templates {
		if t.ChangeMode == fsm.ChangeRestart {
			return true
		}
	}
	return false
}

// inputs are the events that record what the report found that st's log
// lacks: the journal's entries past the log, each relaunch followed by
// its running (the executor supervises a relaunched task from its first
// instruction, as it does a launched one: attach is done), and a ready of
// a run the log has as launched preceded by its running (a run that said
// it is ready is alive and supervised). An entry that does not apply to
// the log as folded so far ends the entries there (the log has moved past
// them: a stop recorded meanwhile); its failure is the record's, never
// hidden, for any entry but a ready, which a log that left the run has no
// use for. Then the end, if any.
func (d *Driver) inputs(st fsm.Task, r report) []fsm.Event {
	folded := st.RestartEvents()
	cur := st
	var out []fsm.Event
	add := func(e fsm.Event) bool {
		next, err := fsm.Fold(cur, e)
		if err != nil {
			return false
		}
		cur = next
		out = append(out, e)
		return true
	}
	for i, e := range r.entries {
		if r.from+i < folded {
			continue
		}
		if e.Type == fsm.EventReady && cur.State == fsm.StateLaunched {
			add(fsm.Event{Type: fsm.EventRunning, Time: e.Time})
		}
		if !add(e) {
			if e.Type != fsm.EventReady {
				out = append(out, e) // recorded, it fails and says why
			}
			break
		}
		if e.Type == fsm.EventLaunched {
			add(fsm.Event{Type: fsm.EventRunning, Time: e.Time})
		}
	}
	return append(out, r.end...)
}

// foldReport is st with the report's journal entries folded (best effort:
// for following the task's current process, not for the log).
func foldReport(st fsm.Task, r report, d *Driver) fsm.Task {
	for _, e := range d.inputs(st, report{from: r.from, entries: r.entries}) {
		if next, err := fsm.Fold(st, e); err == nil {
			st = next
		}
	}
	return st
}

// superviseLoop follows a running task until its end through Watch,
// reporting each restart and each run's readiness as the executor
// journals it.
func (d *Driver) superviseLoop(ctx context.Context, h executor.Conn, st fsm.Task, c chan<- report) {
	send := func(r report) bool {
		select {
		case c <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	since := st.RestartEvents()
	for {
		s, entries, err := h.Watch(ctx, since)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			send(d.collectEnd(ctx, st, fmt.Errorf("executor connection lost: %w", err)))
			return
		}
		r := report{from: since, entries: entries}
		st = foldReport(st, r, d)
		since += len(entries)
		over := s.Over() && len(entries) == 0
		if over {
			ev := d.exited(s.Exit)
			r.end = []fsm.Event{ev}
			r.final = &s
		}
		if (len(r.entries) > 0 || over) && !send(r) {
			return
		}
		if over || st.State == fsm.StateReaping || st.State.Terminal() {
			return
		}
	}
}

// journalReport is what the executor's journal on disk holds past what
// st's log has, when the world keeps one (restarts and readiness).
func (d *Driver) journalReport(ctx context.Context, st fsm.Task) (report, error) {
	if st.Executor == nil {
		return report{}, nil
	}
	entries, err := d.world.Journal(ctx, st.ID, *st.Executor)
	if err != nil {
		return report{}, err
	}
	folded := st.RestartEvents()
	if folded >= len(entries) {
		return report{from: folded}, nil
	}
	return report{from: folded, entries: entries[folded:]}, nil
}

// catchUp asks a live executor for the journal entries st's log lacks
// (its status says how many it has).
func (d *Driver) catchUp(ctx context.Context, st fsm.Task, h executor.Conn, s executor.Status) report {
	folded := st.RestartEvents()
	if s.Journal <= folded {
		return report{from: folded}
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProbeTimeout)
	defer cancel()
	_, entries, err := h.Watch(pctx, folded)
	if err != nil {
		return report{from: folded}
	}
	return report{from: folded, entries: entries}
}
