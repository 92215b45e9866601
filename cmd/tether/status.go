package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

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
