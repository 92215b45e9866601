package fsm

// Replay's hot path, Table.FoldInPlace, against the floor of a hand-written
// switch over (state, event) that does the same state change and payload
// copies but no validation.
//
//	go test -run '^$' -bench . ./fsm/

import (
	"slices"
	"testing"
	"time"
)

// walk is one task's life: start to exit, through reaping.
var walk = []Event{
	{Type: EventCreated, Time: 1, Spec: &Spec{Driver: "raw_exec", Command: "/bin/sleep", Args: []string{"1"}}},
	{Type: EventSpawnIntent, Time: 2, Nonce: "nonce0001"},
	{Type: EventExecutorUp, Time: 3, Executor: &Identity{PID: 10, StartTime: 7, BootID: "b", Nonce: "nonce0001", Socket: "/s"}},
	{Type: EventLaunchIntent, Time: 4},
	{Type: EventLaunched, Time: 5, TaskPID: 11, TaskStartTime: 8},
	{Type: EventRunning, Time: 6},
	{Type: EventReattached, Time: 7},
	{Type: EventTaskExited, Time: 8, Exit: &ExitStatus{Code: 0}},
	{Type: EventExecutorReaped, Time: 9, Target: StateExited},
}

func foldTable(evs []Event) Task {
	t := Task{ID: "bench"}
	for i := range evs {
		if err := Lifecycle.FoldInPlace(&t, &evs[i]); err != nil {
			panic(err)
		}
	}
	return t
}

// foldSwitch is the floor: the same walk folded by a switch, with the
// payload copies FoldInPlace makes and none of its checks.
func foldSwitch(evs []Event) Task {
	t := Task{ID: "bench"}
	for i := range evs {
		e := &evs[i]
		switch e.Type {
		case EventCreated:
			spec := *e.Spec
			t.Spec, t.CreatedAt, t.State = &spec, e.Time, StateCreated
		case EventSpawnIntent:
			t.Nonce, t.State = e.Nonce, StateSpawning
		case EventExecutorUp:
			id := *e.Executor
			t.Executor, t.State = &id, StateExecutorUp
		case EventLaunchIntent:
			t.State = StateLaunching
		case EventLaunched:
			t.TaskPID, t.TaskStartTime, t.State = e.TaskPID, e.TaskStartTime, StateLaunched
		case EventRunning, EventReattached:
			t.State = StateRunning
		case EventTaskExited:
			x := *e.Exit
			t.Exit, t.Target, t.State = &x, StateExited, StateReaping
		case EventExecutorReaped:
			t.State = e.Target
		default:
			panic("unexpected event")
		}
		t.Version++
		t.UpdatedAt = e.Time
	}
	return t
}

func BenchmarkFold_Table(b *testing.B) {
	for b.Loop() {
		if foldTable(walk).State != StateExited {
			b.Fatal("bad fold")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(walk)), "ns/event")
}

func BenchmarkFold_Switch(b *testing.B) {
	for b.Loop() {
		if foldSwitch(walk).State != StateExited {
			b.Fatal("bad fold")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(walk)), "ns/event")
}

// BenchmarkFoldVsSwitch alternates rounds of 10,000 walks through the
// table and through the switch (b.N rounds) and reports ns/event of each
// and the median of the paired ratios.
func BenchmarkFoldVsSwitch(b *testing.B) {
	const walks = 10_000
	round := func(fold func([]Event) Task) float64 {
		t0 := time.Now()
		for range walks {
			if fold(walk).State != StateExited {
				b.Fatal("bad fold")
			}
		}
		return float64(time.Since(t0).Nanoseconds()) / float64(walks*len(walk))
	}
	var ta, ts, ratios []float64
	for i := 0; i < b.N; i++ {
		var a, s float64
		if i%2 == 0 {
			a, s = round(foldTable), round(foldSwitch)
		} else {
			s, a = round(foldSwitch), round(foldTable)
		}
		ta, ts, ratios = append(ta, a), append(ts, s), append(ratios, a/s)
	}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(med(ta), "table-ns/event")
	b.ReportMetric(med(ts), "switch-ns/event")
	b.ReportMetric(med(ratios), "ratio")
}
