package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/clikit"
	"github.com/tether-fsm/tether/store"
)

// taskJSON is a task as status --json prints it.
type taskJSON struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	State         string    `json:"state"`
	Driver        string    `json:"driver,omitempty"`
	Command       []string  `json:"command,omitempty"`
	PID           int       `json:"pid"`
	ExecutorPID   int       `json:"executor_pid"`
	ExecutorAlive bool      `json:"executor_alive"`
	ExitCode      *int      `json:"exit_code"`
	ExitSignal    *int      `json:"exit_signal,omitempty"`
	OOMKilled     bool      `json:"oom_killed"`
	Restarts      int       `json:"restarts"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	Reason        string    `json:"reason,omitempty"`
	// StartedAt is when the current process of a running task started;
	// EndedAt when an ended task ended; MemoryBytes a running task's
	// cgroup memory now.
	StartedAt   *time.Time `json:"started_at,omitempty"`
	EndedAt     *time.Time `json:"ended_at,omitempty"`
	MemoryBytes *uint64    `json:"memory_bytes,omitempty"`
	// Alloc and Hook place a task of a file in its group's copy; Ports
	// are the ports it was given.
	Alloc string     `json:"alloc,omitempty"`
	Hook  string     `json:"hook,omitempty"`
	Ports []fsm.Port `json:"ports,omitempty"`
	// Readiness is a notify task's ("notify"), and Ready whether its
	// current run said it is ready (the ready event since its last
	// launch); both absent for a task without readiness.
	Readiness string `json:"readiness,omitempty"`
	Ready     *bool  `json:"ready,omitempty"`
	// Desired is the desired entry the task is of, where it stands.
	Desired *desiredJSON `json:"desired,omitempty"`
}

func toJSON(t listed) taskJSON {
	j := toJSONInfo(t.TaskInfo)
	if !t.started.IsZero() {
		at := t.started.UTC()
		j.StartedAt = &at
	}
	if t.State.Terminal() {
		j.EndedAt = &j.UpdatedAt
	}
	j.MemoryBytes = t.mem
	return j
}

func toJSONInfo(info driver.TaskInfo) taskJSON {
	j := taskJSON{
		ID:            info.ID,
		State:         info.State.String(),
		PID:           info.TaskPID,
		ExecutorAlive: info.ExecutorAlive,
		CreatedAt:     time.Unix(0, info.CreatedAt).UTC(),
		UpdatedAt:     time.Unix(0, info.UpdatedAt).UTC(),
		Reason:        info.Reason,
	}
	if info.Spec != nil {
		j.Name, j.Driver = info.Spec.Name, info.Spec.Driver
		j.Command = append([]string{info.Spec.Command}, info.Spec.Args...)
		if a := info.Spec.Alloc; a != nil {
			j.Alloc, j.Hook = a.ID, a.Hook.String()
		}
		j.Ports = info.Spec.Ports
		if info.Spec.Readiness.Waits() {
			ready := info.Ready
			j.Readiness, j.Ready = string(info.Spec.Readiness), &ready
		}
	}
	if info.Executor != nil {
		j.ExecutorPID = info.Executor.PID
	}
	if info.Exit != nil {
		if info.Exit.Signal > 0 {
			sig := info.Exit.Signal
			j.ExitSignal = &sig
		} else {
			code := info.Exit.Code
			j.ExitCode = &code
		}
		j.OOMKilled = info.Exit.OOM
	}
	j.Restarts = info.Restarts
	return j
}

func (c *cli) cmdStatus(args []string) int {
	fs := c.flags("status")
	all := fs.BoolP("all", "a", false, "include ended tasks")
	asJSON := fs.Bool("json", false, "print a JSON array")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	ctx := context.Background()
	s, err := c.open()
	if err != nil {
		return c.fail(err)
	}
	named := fs.NArg() > 0
	var infos []driver.TaskInfo
	var unreadable []store.TaskError
	var failed []error // a word that stands for nothing, in the order given
	one := false       // one word, a task's: its detail view
	if named {
		targets := c.resolveTargets(ctx, s, fs.Args())
		one = len(targets) == 1 && targets[0].err == nil && targets[0].kind == driver.TargetTask
		seen := map[string]bool{}
		for _, t := range targets {
			if t.err != nil {
				failed = append(failed, t.err)
				continue
			}
			for _, info := range t.tasks {
				if !seen[info.ID] {
					seen[info.ID] = true
					infos = append(infos, c.reconcileIfGone(ctx, s, info))
				}
			}
		}
		if len(failed) == len(targets) {
			err = failed[0] // nothing to show: said as one word's error always was
			failed = failed[1:]
		}
	} else {
		infos, unreadable, err = c.list(ctx, s, *all)
	}
	desired := c.readDesired(ctx, s, err)
	now := time.Now()
	var ts []listed
	if err == nil {
		ts = c.describeListed(infos, now)
		if !named {
			sortListed(ts) // named: in the order of the words
		}
	}
	c.closeSession(s)
	code := exitOK
	for _, ferr := range failed {
		code = worst(code, c.fail(ferr))
	}
	if err != nil {
		return worst(code, c.fail(err))
	}
	if *asJSON {
		return worst(code, c.printJSON(statusJSON(ts, desired, named)))
	}
	if one {
		c.printTask(ts[0], now, taskDesired(desired, ts[0].ID, now))
		return code
	}
	if named {
		if len(ts) > 0 {
			if err := c.printList(c.stdout, ts, now); err != nil {
				return c.fail(err)
			}
		}
		return code
	}
	for _, u := range unreadable {
		c.errorf("task %s cannot be read: %v", clikit.Printable(u.Task), u.Err)
	}
	if len(unreadable) > 0 {
		fmt.Fprintln(c.stderr, "  'tether check' says where the store is damaged; 'tether check --salvage' copies what is readable")
	}
	switch {
	case len(infos) > 0:
		if err := c.printList(c.stdout, ts, now); err != nil {
			return c.fail(err)
		}
	case *all:
		fmt.Fprintln(c.stderr, "no tasks")
	default:
		fmt.Fprintln(c.stderr, "no live tasks ('tether status --all' includes ended ones)")
	}
	if len(desired.Entries) > 0 {
		if len(infos) > 0 {
			fmt.Fprintln(c.stdout)
		}
		if err := printDesired(c.stdout, desired.Entries, now); err != nil {
			return c.fail(err)
		}
	}
	for _, p := range otherProblems(desired) {
		c.errorf("desired state: %s", clikit.Printable(p))
	}
	return exitOK
}

// list returns the tasks (live ones unless all) read in one pass, and the
// ones that cannot be read. A listed task whose executor is gone is
// reconciled (its end recorded); the others cost one identity check each.
func (c *cli) list(ctx context.Context, s *session, all bool) ([]driver.TaskInfo, []store.TaskError, error) {
	which := store.LiveTasks
	if all {
		which = store.AllTasks
	}
	scan, err := s.svc.LoadTasks(ctx, which)
	if err != nil {
		return nil, nil, err
	}
	if scan.Incomplete != nil {
		c.errorf("warning: %v; the list may be incomplete", scan.Incomplete)
	}
	infos := make([]driver.TaskInfo, 0, len(scan.Tasks))
	for _, t := range scan.Tasks {
		info, err := s.svc.InspectTask(ctx, t.ID)
		if err != nil {
			scan.Unreadable = append(scan.Unreadable, store.TaskError{Task: t.ID, Err: err})
			continue
		}
		infos = append(infos, c.reconcileIfGone(ctx, s, info))
	}
	return infos, scan.Unreadable, nil
}

// policyText says a restart policy in the task file's terms.
func policyText(p fsm.RestartPolicy) string {
	return fmt.Sprintf("attempts %d in %s, delay %s, mode %s", p.Attempts, p.Interval, p.Delay, p.Mode)
}

// stateText is the task's state, flagged when an executor it should own
// is not alive.
func stateText(info driver.TaskInfo) string {
	s := info.State.String()
	switch {
	case info.State.OwnsExecutor() && info.Executor != nil && !info.ExecutorAlive:
		s += " (executor gone)"
	case info.State == fsm.StateRunning && info.Spec != nil && info.Spec.Readiness.Waits() && info.Ready:
		s += " (ready)"
	case info.State == fsm.StateRunning && info.Spec != nil && info.Spec.Readiness.Waits():
		s += " (not ready)"
	}
	return s
}

func executorText(info driver.TaskInfo) string {
	if info.Executor == nil {
		return "-"
	}
	s := strconv.Itoa(info.Executor.PID)
	if info.State.OwnsExecutor() {
		if info.ExecutorAlive {
			s += " (alive)"
		} else {
			s += " (dead)"
		}
	}
	return s
}

func pidText(pid int) string {
	if pid == 0 {
		return "-"
	}
	return strconv.Itoa(pid)
}

func exitText(x *fsm.ExitStatus) string {
	if x == nil {
		return "-"
	}
	s := strconv.Itoa(x.Code)
	if x.Signal > 0 {
		s = clikit.SignalName(x.Signal)
	}
	switch {
	case x.OOMKilledMain():
		s += " (OOM killed)"
	case x.OOM:
		s += " (a process OOM killed)"
	}
	return s
}

// printTask prints one task in detail.
func (c *cli) printTask(t listed, now time.Time, desired string) {
	info := t.TaskInfo
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", info.ID)
	if info.Spec != nil {
		row("Name", clikit.Printable(info.Spec.Name))
		row("Driver", info.Spec.Driver)
		row("Command", clikit.Printable(strings.Join(append([]string{info.Spec.Command}, info.Spec.Args...), " ")))
	}
	if info.Spec != nil && info.Spec.Alloc != nil {
		a := info.Spec.Alloc
		row("Group", fmt.Sprintf("%s (alloc %s, index %d, %s); its tasks: %s", clikit.Printable(info.Spec.Group), a.ID, a.Index, hookText(*a), strings.Join(a.Tasks, " ")))
	}
	if info.Spec != nil && len(info.Spec.Ports) > 0 {
		row("Ports", portsText(info.Spec.Ports))
	}
	row("State", stateText(info))
	if info.Spec != nil && info.Spec.Readiness.Notify() {
		r := "notify (sd_notify: READY=1 on NOTIFY_SOCKET)"
		if info.Spec.Watchdog > 0 {
			r += ", watchdog " + info.Spec.Watchdog.String()
		}
		row("Readiness", r)
	}
	if info.Spec != nil && info.Spec.Readiness.Checked() && info.Spec.Check != nil {
		row("Readiness", checkText(info.Spec.Readiness, info.Spec.Check))
	}
	row("PID", pidText(info.TaskPID))
	row("Executor", executorText(info))
	row("Created", time.Unix(0, info.CreatedAt).Format(time.RFC3339))
	row("Updated", time.Unix(0, info.UpdatedAt).Format(time.RFC3339))
	if !t.started.IsZero() {
		row("Uptime", clikit.Span(now.Sub(t.started))+" (since "+t.started.Format(time.RFC3339)+")")
	}
	if info.State.Terminal() {
		row("Ended", clikit.Ago(now, info.UpdatedAt))
	}
	if t.mem != nil {
		row("Memory", mib(*t.mem))
	}
	if info.Exit != nil {
		row("Exit", clikit.DescribeExit(*info.Exit))
	}
	if info.Spec != nil && info.Spec.Restart != nil {
		row("Restarts", fmt.Sprintf("%d (policy: %s)", info.Restarts, policyText(*info.Spec.Restart)))
	} else if info.Restarts > 0 {
		row("Restarts", strconv.Itoa(info.Restarts))
	}
	if info.Reason != "" {
		row("Reason", clikit.Printable(info.Reason))
	}
	if desired != "" {
		row("Desired", desired)
	}
	_ = tw.Flush()
}

func (c *cli) printJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// hookText says a task's place in its group: its hook, sidecar, leader.
func hookText(a fsm.Alloc) string {
	s := a.Hook.String()
	if a.Sidecar {
		s += " sidecar"
	}
	if a.Leader {
		s += ", leader"
	}
	return s
}

// portsText lists ports as label=ip:port (->to).
func portsText(ps []fsm.Port) string {
	var out []string
	for _, p := range ps {
		out = append(out, clikit.Printable(p.String()))
	}
	return strings.Join(out, " ")
}

// checkText describes a readiness check for show.
func checkText(r fsm.Readiness, c *fsm.Check) string {
	var what string
	switch r {
	case fsm.ReadinessExec:
		what = clikit.Printable(strings.Join(append([]string{c.Command}, c.Args...), " ")) + " in the task"
	case fsm.ReadinessHTTP:
		what = "GET http://" + net.JoinHostPort(c.Address, strconv.Itoa(c.Port)) + clikit.Printable(c.Path)
	default:
		what = net.JoinHostPort(c.Address, strconv.Itoa(c.Port))
	}
	if c.PortLabel != "" {
		what += " (port " + clikit.Printable(c.PortLabel) + ")"
	}
	s := fmt.Sprintf("%s check %s every %s, timeout %s", r, what, c.Interval, c.Timeout)
	if cr := c.Restart; cr != nil && cr.Limit > 0 {
		s += fmt.Sprintf("; check_restart after %d failures (grace %s)", cr.Limit, cr.Grace)
	}
	return s
}
