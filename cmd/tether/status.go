package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
)

// listed is a task as status lists it: what the log says, and what the
// host says of it now.
type listed struct {
	driver.TaskInfo
	// started is when the task's current process started (zero: none,
	// or unknown); mem its cgroup's memory now (nil: not running, or
	// unreadable).
	started time.Time
	mem     *uint64
}

// userHZ is the unit of a process's start time in /proc/PID/stat: USER_HZ,
// fixed at 100 by the kernel's ABI whatever the kernel's own tick rate.
const userHZ = 100

// bootTime is when the host booted, from /proc/uptime (the zero time when
// it cannot be read).
func bootTime(now time.Time) time.Time {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}
	}
	return now.Add(-time.Duration(up * float64(time.Second)))
}

// describeListed adds to each task when its process started and, for a
// running one, its memory: read from its cgroup, located by the path its
// log recorded (checked to be the one named for the task and its nonce),
// without a call to its executor (a listing of many tasks would pay one
// each).
func (c *cli) describeListed(infos []driver.TaskInfo, now time.Time) []listed {
	boot := bootTime(now)
	out := make([]listed, len(infos))
	var host *cgroup.Host
	for i, info := range infos {
		out[i].TaskInfo = info
		if info.State != fsm.StateRunning && info.State != fsm.StateLaunched {
			continue
		}
		if !boot.IsZero() && info.TaskStartTime > 0 {
			out[i].started = boot.Add(time.Duration(info.TaskStartTime) * time.Second / userHZ)
		}
		if !info.ExecutorAlive || info.Executor == nil || info.Executor.Cgroup == "" {
			continue
		}
		if host == nil {
			h, err := cgroup.Probe()
			if err != nil {
				c.log.Debug("no memory figures: the host's cgroups cannot be read", "err", err)
				return out
			}
			host = &h
		}
		if mem, err := cgroupMemory(*host, info); err == nil {
			out[i].mem = &mem
		} else {
			c.log.Debug("no memory figure", "task_id", info.ID, "err", err)
		}
	}
	return out
}

// cgroupMemory reads the memory a running task's cgroup holds now.
func cgroupMemory(h cgroup.Host, info driver.TaskInfo) (uint64, error) {
	cg, err := cgroup.OpenRecorded(h, info.Executor.Cgroup, info.ID, info.Nonce)
	if err != nil {
		return 0, err
	}
	st, err := cg.Stats()
	if err != nil {
		return 0, err
	}
	for _, m := range st.Missing {
		if strings.HasPrefix(m, "memory:") || strings.HasPrefix(m, "memory,") {
			return 0, errors.New(m)
		}
	}
	return st.MemoryBytes, nil
}

// sortListed sorts tasks by name in natural order (svc2 before svc10),
// then by creation, oldest first.
func sortListed(ts []listed) {
	slices.SortStableFunc(ts, func(a, b listed) int {
		return cmp.Or(clikit.NaturalCompare(taskName(a.TaskInfo), taskName(b.TaskInfo)), cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

func taskName(info driver.TaskInfo) string {
	if info.Spec == nil {
		return ""
	}
	return info.Spec.Name
}

// failedEnd reports whether an ended task failed: it did not start, was
// lost, or exited with a code other than 0 or by a signal.
func failedEnd(t fsm.Task) bool {
	switch t.State {
	case fsm.StateFailed, fsm.StateLost:
		return true
	case fsm.StateExited:
		return t.Exit != nil && (t.Exit.Code != 0 || t.Exit.Signal != 0 || t.Exit.OOM)
	}
	return false
}

// printList prints the task table and its totals line. The ENDED, EXIT and
// REASON columns are there when an ended task is listed.
func (c *cli) printList(w io.Writer, ts []listed, now time.Time) error {
	ended := slices.ContainsFunc(ts, func(t listed) bool { return t.State.Terminal() })
	ports := slices.ContainsFunc(ts, func(t listed) bool { return t.Spec != nil && len(t.Spec.Ports) > 0 })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "ID\tNAME\tSTATE\tPID\tEXECUTOR\tMEM\tUPTIME\tRESTARTS"
	if ports {
		head += "\tPORTS"
	}
	if ended {
		head += "\tENDED\tEXIT\tREASON"
	}
	fmt.Fprintln(tw, head)
	var running, stopped, failed int
	for _, t := range ts {
		mem, up := "-", "-"
		if t.mem != nil {
			mem = mib(*t.mem)
		}
		if !t.started.IsZero() {
			up = clikit.Span(now.Sub(t.started))
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d", t.ID, clikit.Printable(taskName(t.TaskInfo)), stateText(t.TaskInfo), pidText(t.TaskPID),
			executorText(t.TaskInfo), mem, up, t.Restarts)
		if ports {
			p := "-"
			if t.Spec != nil && len(t.Spec.Ports) > 0 {
				p = portsText(t.Spec.Ports)
			}
			row += "\t" + p
		}
		if ended {
			end, exit, reason := "-", "-", ""
			if t.State.Terminal() {
				end, exit, reason = clikit.Ago(now, t.UpdatedAt), exitText(t.Exit), endReason(t.Task)
			}
			row += fmt.Sprintf("\t%s\t%s\t%s", end, exit, clikit.Printable(reason))
		}
		fmt.Fprintln(tw, row)
		switch {
		case !t.State.Terminal():
			running++
		case failedEnd(t.Task):
			failed++
		default:
			stopped++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, totalsLine(running, stopped+failed, failed))
	return err
}

// totalsLine counts the tasks listed: "3 running, 2 ended (1 failed)".
func totalsLine(running, ended, failed int) string {
	s := fmt.Sprintf("%d running", running)
	if ended > 0 {
		s += fmt.Sprintf(", %d ended (%d failed)", ended, failed)
	}
	return s
}

// endReason says why an ended task ended, when its exit status does not:
// the failure's reason, or the stop's signal.
func endReason(t fsm.Task) string {
	const most = 60
	r := ""
	switch {
	case t.State == fsm.StateFailed, t.State == fsm.StateLost:
		r = t.Reason
	case t.State == fsm.StateStopped && t.StopSignal != 0:
		r = "stopped with " + clikit.SignalName(t.StopSignal)
	}
	if r := []rune(clikit.UserText(r)); len(r) > most {
		return string(r[:most-3]) + "..."
	}
	return clikit.UserText(r)
}

// desiredJSON is where a desired entry stands, in status --json: on each
// of its tasks' rows, and on its own row (with no id) when none of its
// tasks is listed.
type desiredJSON struct {
	// Name is the entry's name (what tether disable takes); Source where
	// it was declared: "dir" (the agent's --config-dir), "enable" or
	// "etcd"; File the file (or etcd key) it was read from.
	Name   string `json:"name"`
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	// Standing is where it stands (agent.Standing's values), Reason why
	// (down, refused, restarting, stopped), Since when it was given up
	// (down), NextAttemptAt when its next copy is due (restarting).
	Standing      string     `json:"standing"`
	Reason        string     `json:"reason,omitempty"`
	Since         *time.Time `json:"since,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// Reschedules counts the copies its reschedule policy started.
	Reschedules int `json:"reschedules,omitempty"`
}

// entryRowJSON is a desired entry none of whose tasks is listed: not
// recorded yet, refused, or (without --all) ended.
type entryRowJSON struct {
	Name    string       `json:"name"`
	State   string       `json:"state"`
	Desired *desiredJSON `json:"desired"`
}

func toDesiredJSON(e agent.Entry) *desiredJSON {
	d := &desiredJSON{Name: e.Name, Source: e.Origin, File: e.File, Standing: string(e.Standing), Reason: entryReason(e), Reschedules: e.Reschedules}
	if !e.Since.IsZero() {
		at := e.Since.UTC()
		d.Since = &at
	}
	if !e.NextAttempt.IsZero() {
		at := e.NextAttempt.UTC()
		d.NextAttemptAt = &at
	}
	return d
}

// entryReason is why an entry stands where it does: its reason, and what
// keeps the agent from converging it.
func entryReason(e agent.Entry) string {
	switch {
	case e.Problem == "":
		return clikit.UserText(e.Reason)
	case e.Reason == "" || strings.Contains(e.Problem, e.Reason):
		return clikit.UserText(e.Problem)
	}
	return clikit.UserText(e.Reason + "; " + e.Problem)
}

// desiredByTask maps each task id of a desired entry to its entry.
func desiredByTask(st agent.Status) map[string]agent.Entry {
	out := map[string]agent.Entry{}
	for _, e := range st.Entries {
		for _, id := range e.Tasks {
			out[id] = e
		}
		if e.Task != "" {
			out[e.Task] = e
		}
	}
	return out
}

// statusJSON is status --json's array: the tasks listed, each of a desired
// entry with its standing, then a row for each entry none of whose tasks
// is listed.
func statusJSON(ts []listed, st agent.Status, single bool) []any {
	of := desiredByTask(st)
	shown := map[string]bool{}
	out := make([]any, 0, len(ts)+len(st.Entries))
	for _, t := range ts {
		j := toJSON(t)
		if e, ok := of[t.ID]; ok {
			j.Desired = toDesiredJSON(e)
			shown[e.Name] = true
		}
		out = append(out, j)
	}
	if single {
		return out
	}
	for _, e := range sortedEntries(st.Entries) {
		if !shown[e.Name] {
			out = append(out, entryRowJSON{Name: e.Name, State: e.State.String(), Desired: toDesiredJSON(e)})
		}
	}
	return out
}

func sortedEntries(es []agent.Entry) []agent.Entry {
	es = slices.Clone(es)
	slices.SortStableFunc(es, func(a, b agent.Entry) int { return clikit.NaturalCompare(a.Name, b.Name) })
	return es
}

// printDesired prints the desired entries' table: each entry with where it
// was declared and where it stands.
func printDesired(w io.Writer, es []agent.Entry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESIRED\tSOURCE\tSTANDING\tTASK\tDETAIL")
	for _, e := range sortedEntries(es) {
		task := e.Task
		if task == "" {
			task = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", clikit.Printable(e.Name), e.Origin, e.Standing, task, clikit.Printable(entryDetail(e, now)))
	}
	return tw.Flush()
}

// entryDetail says in words why an entry stands where it does.
func entryDetail(e agent.Entry, now time.Time) string {
	var parts []string
	switch e.Standing {
	case agent.StandingRestarting:
		if !e.NextAttempt.IsZero() {
			parts = append(parts, "next attempt "+inSpan(now, e.NextAttempt)+" (at "+e.NextAttempt.Local().Format(time.TimeOnly)+")")
		}
	case agent.StandingDown:
		if !e.Since.IsZero() {
			parts = append(parts, "given up "+clikit.Ago(now, e.Since.UnixNano()))
		}
	case agent.StandingRefused:
		if e.File != "" && !strings.Contains(entryReason(e), e.File) {
			parts = append(parts, e.File)
		}
	case agent.StandingStopped:
		parts = append(parts, "stopped on request")
	}
	if r := entryReason(e); r != "" {
		parts = append(parts, r)
	}
	switch {
	case e.Reschedules == 1:
		parts = append(parts, "rescheduled once")
	case e.Reschedules > 1:
		parts = append(parts, fmt.Sprintf("rescheduled %d times", e.Reschedules))
	}
	return strings.Join(parts, ": ")
}

// inSpan says when a time to come is: "in 4s", or "now" once it is due.
func inSpan(now, at time.Time) string {
	if !at.After(now) {
		return "now"
	}
	return "in " + clikit.Span(at.Sub(now))
}

// readDesired is the desired entries, each where it stands (daemonless: as
// the store records them), once the tasks were listed (listErr nil). A
// store that cannot say leaves the tasks listed, with a warning.
func (c *cli) readDesired(ctx context.Context, s *session, listErr error) agent.Status {
	if listErr != nil {
		return agent.Status{}
	}
	st, err := s.svc.Status(ctx)
	if err != nil {
		c.errorf("warning: the desired state cannot be read: %v", err)
	}
	return st
}

// taskDesired says, for status ID's listing, the desired entry the task is
// of ("" for none).
func taskDesired(st agent.Status, id string, now time.Time) string {
	e, ok := desiredByTask(st)[id]
	if !ok {
		return ""
	}
	line := fmt.Sprintf("%s (%s, %s)", clikit.Printable(e.Name), e.Origin, e.Standing)
	if d := entryDetail(e, now); d != "" {
		line += ": " + clikit.Printable(d)
	}
	return line
}

// otherProblems are the desired state's problems that no entry listed
// says already (a refused file is an entry's reason).
func otherProblems(st agent.Status) []string {
	var out []string
	for _, p := range st.Problems {
		said := false
		for _, e := range st.Entries {
			said = said || (e.Standing == agent.StandingRefused && e.File != "" && strings.HasPrefix(p, e.File))
		}
		if !said {
			out = append(out, p)
		}
	}
	return out
}
