//go:build linux

package cgroup

import (
	"context"
	"testing"
	"time"
)

// BenchmarkLifecycle runs, alternately in one run, the containment of a
// one-process task (Create with limits, start a process that joins it the
// way the init shim does, Kill and confirm empty, wait, Remove) and the
// plain path for the same process (start it, SIGKILL it, wait), once for
// each kill path this host has. It reports both per cycle, their ratio,
// and the cgroup steps alone. A timing, never an assertion.
func BenchmarkLifecycle(b *testing.B) {
	h := needCgroups(b)
	paths := killPaths(b, h)
	for _, name := range []string{"cgroup.kill", "cgroup.freeze", "v1 freezer"} {
		if hh, ok := paths[name]; ok {
			b.Run(name, func(b *testing.B) { lifecycle(b, hh) })
		}
	}
}

func lifecycle(b *testing.B, h Host) {
	m := marker("cgbench" + randHex(b, 6))
	lim := Limits{Memory: 256, CPU: 500, Pids: 100}
	ctx := context.Background()
	var plain, contained, create, kill, remove, plainStart, joinStart time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		s := start(b, m.cmd(b, "cg-ready"))
		plainStart += time.Since(t0)
		if err := s.cmd.Process.Kill(); err != nil {
			b.Fatal(err)
		}
		s.wait(b)
		t1 := time.Now()

		loc, err := LocationFor(h, "bench", "n"+randHex(b, 8))
		if err != nil {
			b.Fatal(err)
		}
		cg, err := Create(h, loc, lim)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		s = start(b, m.cmd(b, "cg-ready", loc.String()))
		t3 := time.Now()
		if err := cg.Kill(ctx); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		s.wait(b)
		t5 := time.Now()
		if err := cg.Remove(); err != nil {
			b.Fatal(err)
		}
		t6 := time.Now()

		plain += t1.Sub(t0)
		contained += t6.Sub(t1)
		create += t2.Sub(t1)
		joinStart += t3.Sub(t2)
		kill += t4.Sub(t3)
		remove += t6.Sub(t5)
		n++
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(plain), "plain-ns/cycle")
	b.ReportMetric(per(contained), "cgroup-ns/cycle")
	b.ReportMetric(float64(contained)/float64(plain), "cgroup/plain")
	b.ReportMetric(per(create), "create-ns")
	b.ReportMetric(per(plainStart), "start-ns")
	b.ReportMetric(per(joinStart), "start+join-ns")
	b.ReportMetric(per(kill), "kill-ns")
	b.ReportMetric(per(remove), "remove-ns")
	if live := markedLive(m); len(live) > 0 {
		b.Errorf("leaked: %v", describe(live))
	}
}

// BenchmarkProbe is what the init shim pays to find the hierarchies before
// it joins.
func BenchmarkProbe(b *testing.B) {
	for b.Loop() {
		if _, err := Probe(); err != nil {
			b.Fatal(err)
		}
	}
}
