// Package metrics serves tether's agent metrics in Prometheus' text
// exposition format (version 0.0.4), without the Prometheus Go client.
//
// Why not client_golang: tether's binary is the CLI, every task's executor
// and an exec task's init shim, so it is started three times a task, and
// linking the client adds its package initialisers and 7.5 MB to every one
// of those starts (measured here: a static binary that links
// client_golang and promhttp starts in 2.4 ms against 1.4 ms for one with
// net/http alone, 200 runs each, interleaved). What the agent needs of it
// is small: counters, gauges (some computed at scrape time) and
// histograms, written as text. The format is held to Prometheus' own text
// parser (github.com/prometheus/common/expfmt) by the tests, which are
// not linked into the binary.
//
// # Contract
//
//  1. Names and label names follow Prometheus' rules; a registration that
//     breaks them, or registers a name twice, panics (a programmer's
//     error, found by the first test that builds the registry).
//  2. Cardinality is bounded: a family holds at most MaxSeries series
//     (DefaultMaxSeries); what comes past the bound is counted under one
//     series whose every label is Overflow, never dropped and never a
//     new series. tether labels by task name, never by task id.
//  3. Counters only go up (a negative Add is ignored); histogram buckets
//     are cumulative in the output with +Inf equal to the count.
//  4. Label values are escaped (backslash, quote, newline) and made valid
//     UTF-8, so a task's name can never break the exposition.
//  5. A listen address without a host is loopback: ListenAddr(":9100") is
//     127.0.0.1:9100; the operator names another host to expose it.
//
// # Usage
//
//	r := metrics.NewRegistry()
//	starts := r.Counter("tether_task_starts_total", "Tasks started.", "name")
//	starts.With("web").Inc()
//	lat := r.Histogram("tether_task_start_seconds", "Start latency.", metrics.DefBuckets)
//	lat.With().Observe(0.021)
//	http.Handle("/metrics", r.Handler())
package metrics
