package driver

import (
	"context"

	"github.com/tether-fsm/tether/cgroup"
)

// TaskStats returns the figures of a running task's cgroup: memory now and
// at its peak, CPU time (user, system, throttled), the number of its tasks
// and the OOM kill count. Like SignalTask it needs no owner: it reattaches
// through the recorded identity (bounded by ProbeTimeout) and asks the
// executor. A task that is not running is ErrNotRunning; one without a
// cgroup (the host gives none) wraps executor.ErrNoStats.
//
//	st, err := d.TaskStats(ctx, "web")
//	fmt.Println(st.MemoryBytes, st.CPUUser, st.Pids)
func (d *Driver) TaskStats(ctx context.Context, id string) (cgroup.Stats, error) {
	h, st, err := d.attachRunning(ctx, id)
	if err != nil {
		return cgroup.Stats{}, err
	}
	defer h.Close()
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProbeTimeout)
	defer cancel()
	stats, err := h.Stats(pctx)
	if err != nil {
		return cgroup.Stats{}, runningErr(id, st, err)
	}
	return stats, nil
}
