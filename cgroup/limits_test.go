//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestCPUWeight_RuncPoints(t *testing.T) {
	for _, tc := range []struct{ shares, weight uint64 }{
		{0, 1}, {2, 1}, {1024, 100}, {262144, 10000}, {300000, 10000},
		// Nomad's default cpu = 100 MHz.
		{100, 17}, {500, 58}, {4096, 303},
	} {
		if got := CPUWeight(tc.shares); got != tc.weight {
			t.Errorf("CPUWeight(%d) = %d; want %d", tc.shares, got, tc.weight)
		}
	}
	prev := uint64(0)
	for s := uint64(2); s <= 262144; s += 97 {
		w := CPUWeight(s)
		if w < prev || w < 1 || w > 10000 {
			t.Fatalf("CPUWeight(%d) = %d after %d: not monotonic in 1..10000", s, w, prev)
		}
		prev = w
	}
	if CPUShares(0) != 2 || CPUShares(1) != 2 || CPUShares(500) != 500 || CPUShares(1<<20) != 262144 {
		t.Fatal("CPUShares clamps wrong")
	}
}

func TestLimits_Validate(t *testing.T) {
	if err := (Limits{Memory: 64, MemoryMax: 128, CPU: 500, Cores: 1, Pids: 20}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limits{
		{Memory: -1}, {MemoryMax: 128}, {Memory: 256, MemoryMax: 128}, {CPU: -5}, {Cores: -1}, {Pids: -1},
		{Memory: 1 << 50},
	} {
		err := l.Validate()
		if !errors.Is(err, ErrBadLimits) {
			t.Errorf("Validate(%+v) = %v; want ErrBadLimits", l, err)
		}
	}
}

// planString renders writes one per line: key file=value.
func planString(ws []write) string {
	var b strings.Builder
	for _, w := range ws {
		opt := ""
		if w.optional {
			opt = " (if present)"
		}
		fmt.Fprintf(&b, "%s %s=%s%s\n", w.key, w.file, w.value, opt)
	}
	return b.String()
}

func TestPlanLimits_V1(t *testing.T) {
	where := func(c Controller) (string, Version, bool) { return string(c), V1, true }
	got := planString(planLimits(Limits{Memory: 64, MemoryMax: 128, CPU: 500, Cores: 1, Pids: 20}, where, "1", "0"))
	want := `cpuset cpuset.cpus=1
cpuset cpuset.mems=0
memory memory.limit_in_bytes=134217728
memory memory.memsw.limit_in_bytes=134217728 (if present)
memory memory.soft_limit_in_bytes=67108864
cpu cpu.shares=500
pids pids.max=20
`
	if got != want {
		t.Fatalf("v1 plan\n%s\nwant\n%s", got, want)
	}
	// Memory alone is the hard limit; a v1 cpuset always gets its CPUs and
	// memory nodes (the parent's), or no process could join it.
	got = planString(planLimits(Limits{Memory: 64}, where, "0-1", "0"))
	want = `cpuset cpuset.cpus=0-1
cpuset cpuset.mems=0
memory memory.limit_in_bytes=67108864
memory memory.memsw.limit_in_bytes=67108864 (if present)
`
	if got != want {
		t.Fatalf("v1 plan, memory only\n%s\nwant\n%s", got, want)
	}
}

// TestPlanLimits_V2 pins what a pure v2 host gets: this machine has no
// cgroup2 controllers, so the files are checked here, not in the kernel.
func TestPlanLimits_V2(t *testing.T) {
	where := func(c Controller) (string, Version, bool) { return UnifiedKey, V2, c != CPUAcct && c != Freezer }
	got := planString(planLimits(Limits{Memory: 64, MemoryMax: 128, CPU: 500, Cores: 2, Pids: 20}, where, "0-1", ""))
	want := `unified cpuset.cpus=0-1
unified memory.max=134217728
unified memory.swap.max=0 (if present)
unified memory.low=67108864
unified cpu.weight=58
unified pids.max=20
`
	if got != want {
		t.Fatalf("v2 plan\n%s\nwant\n%s", got, want)
	}
	// No cores: a v2 cpuset is left alone (an empty cpuset.cpus inherits).
	if got := planString(planLimits(Limits{Memory: 64}, where, "", "")); got != "unified memory.max=67108864\nunified memory.swap.max=0 (if present)\n" {
		t.Fatalf("v2 plan, memory only\n%s", got)
	}
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		cpus []int
		out  string
	}{
		{"", nil, ""}, {"0", []int{0}, "0"}, {"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0-2,4,6-7", []int{0, 1, 2, 4, 6, 7}, "0-2,4,6-7"}, {"3,1,2", []int{1, 2, 3}, "1-3"},
	} {
		got, err := parseCPUList(tc.in)
		if err != nil || !slices.Equal(got, tc.cpus) {
			t.Errorf("parseCPUList(%q) = %v, %v", tc.in, got, err)
		}
		if s := formatCPUList(got); s != tc.out {
			t.Errorf("formatCPUList(%v) = %q; want %q", got, s, tc.out)
		}
	}
	for _, bad := range []string{"a", "1-", "3-1", "-1", "1,,2"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
}

func TestChooseCPUs_LeastPinnedFirst(t *testing.T) {
	avail := []int{0, 1, 2, 3}
	if got := chooseCPUs(avail, 2, nil); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("no pins: %v", got)
	}
	if got := chooseCPUs(avail, 2, map[int]int{0: 1, 1: 1}); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("0 and 1 pinned: %v", got)
	}
	if got := chooseCPUs(avail, 3, map[int]int{0: 2, 1: 1, 2: 1, 3: 1}); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("0 pinned twice: %v", got)
	}
}
