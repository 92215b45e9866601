// Package bench is tether's benchmark suite against its floors and its
// peers, kept in a module of its own so that the peer it measures
// (github.com/hashicorp/go-plugin and its gRPC dependencies) never enters
// tether's own go.mod.
//
// Every benchmark here is a pair measured in one process, interleaved (the
// two sides alternate round by round, and which goes first alternates too),
// and reports the median of the paired ratios as "ratio"; b.N is the number
// of rounds. Run one alone with
//
//	cd bench && go test -run '^$' -bench StartVsGoPlugin -benchtime 30x .
//
// or every row, rendered as one table into BENCHMARKS.md, with
// `make bench` (or `make bench-quick`), which runs cmd/report. The driver's
// own pairs (start against its floor, kill, recover) live in
// driver/bench_test.go, and fold against a switch in fsm/bench_test.go.
package bench
