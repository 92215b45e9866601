package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/internal/clikit"
)

// statsJSON is what stats --json prints: the task's id and its cgroup's
// figures (bytes, nanoseconds).
type statsJSON struct {
	ID string `json:"id"`
	cgroup.Stats
}

// cmdStats prints a running task's cgroup figures: memory now and at its
// peak, CPU time (user, system, throttled), tasks, OOM kills.
func (c *cli) cmdStats(args []string) int {
	fs := c.flags("stats")
	asJSON := fs.Bool("json", false, "print JSON (bytes and nanoseconds)")
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		c.errorf("stats takes one task id or name")
		return exitUsage
	}
	ctx := context.Background()
	s, info, code, ok := c.openTask(ctx, fs.Arg(0))
	if !ok {
		return code
	}
	defer c.closeSession(s)
	st, err := s.svc.TaskStats(ctx, info.ID)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.printJSON(statsJSON{ID: info.ID, Stats: st})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\n", info.ID)
	fmt.Fprintf(tw, "Memory\t%s (peak %s)\n", mib(st.MemoryBytes), mib(st.MemoryPeakBytes))
	fmt.Fprintf(tw, "CPU\tuser %s, system %s\n", st.CPUUser.Round(time.Millisecond), st.CPUSystem.Round(time.Millisecond))
	fmt.Fprintf(tw, "Throttled\t%s in %d periods\n", st.CPUThrottled.Round(time.Millisecond), st.ThrottledPeriods)
	fmt.Fprintf(tw, "Tasks\t%d (processes and threads)\n", st.Pids)
	fmt.Fprintf(tw, "OOM kills\t%d\n", st.OOMKills)
	for _, m := range st.Missing {
		fmt.Fprintf(tw, "Missing\t%s\n", clikit.Printable(m))
	}
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	return exitOK
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
