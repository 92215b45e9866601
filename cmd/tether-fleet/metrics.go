package main

import (
	"context"
	"time"

	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/metrics"
)

// The node's metrics, served beside the agent's (tether agent
// --metrics-addr in fleet mode): the lease that holds the node, the
// mirror's lag behind the local log and what it wrote, and whether etcd
// answered last. They are read from the node's Stats when a scraper asks
// (each family reads them: a scrape sees no figure older than itself).
const (
	MetricLeaseHeld       = "tether_fleet_lease_held"
	MetricLeaseLosses     = "tether_fleet_lease_losses_total"
	MetricMirrorLagEvents = "tether_fleet_mirror_lag_events"
	MetricMirrorLag       = "tether_fleet_mirror_lag_seconds"
	MetricMirrored        = "tether_fleet_mirrored_events_total"
	MetricMirrorTxns      = "tether_fleet_mirror_txns_total"
	MetricMirrorConflicts = "tether_fleet_mirror_conflicts_total"
	MetricMirrorPruned    = "tether_fleet_mirror_pruned_total"
	MetricEtcdError       = "tether_fleet_etcd_error"
)

// nodeStatsTimeout bounds the node's read of its local log's heads for
// one family of a scrape.
const nodeStatsTimeout = 10 * time.Second

// registerNodeMetrics registers the node's families on r (nil: none).
func registerNodeMetrics(r *metrics.Registry, read func(context.Context) cluster.Stats) {
	if r == nil {
		return
	}
	stats := func() cluster.Stats {
		ctx, cancel := context.WithTimeout(context.Background(), nodeStatsTimeout)
		defer cancel()
		return read(ctx)
	}
	one := func(v float64) []metrics.Sample { return []metrics.Sample{{Value: v}} }
	flag := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge := func(name, help string, fn func(cluster.Stats) float64) {
		r.GaugeFunc(name, help, func() []metrics.Sample { return one(fn(stats())) })
	}
	counter := func(name, help string, fn func(cluster.Stats) uint64) {
		r.CounterFunc(name, help, func() []metrics.Sample { return one(float64(fn(stats()))) })
	}
	gauge(MetricLeaseHeld, "1 while the node holds its liveness lease in etcd, 0 while it is not registered (etcd unreachable, or the node held by another agent).",
		func(s cluster.Stats) float64 { return flag(s.Lease != 0) })
	counter(MetricLeaseLosses, "Leases the node lost and registered again.", func(s cluster.Stats) uint64 { return s.LeaseLosses })
	gauge(MetricMirrorLagEvents, "Events the local log committed that the etcd mirror does not hold yet.",
		func(s cluster.Stats) float64 { return float64(s.LagEvents) })
	gauge(MetricMirrorLag, "Age in seconds of the oldest event the etcd mirror does not hold yet (0 when caught up).",
		func(s cluster.Stats) float64 { return s.LagSeconds })
	counter(MetricMirrored, "Events this process wrote to the etcd mirror.", func(s cluster.Stats) uint64 { return s.Mirrored })
	counter(MetricMirrorTxns, "Transactions this process wrote to the etcd mirror.", func(s cluster.Stats) uint64 { return s.Txns })
	counter(MetricMirrorConflicts, "Mirror transactions whose guard failed (a retry already committed, a fence).", func(s cluster.Stats) uint64 { return s.Conflicts })
	counter(MetricMirrorPruned, "Tasks deleted from the mirror because the local log no longer has them.", func(s cluster.Stats) uint64 { return s.Pruned })
	gauge(MetricEtcdError, "1 while etcd's last answer to the node was an error, 0 after a success.",
		func(s cluster.Stats) float64 { return flag(s.LastError != "") })
}
