//go:build linux

package cgroup

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Limits are a task's resource limits, with Nomad's names and units (the
// task file's resources block). Zero means unset.
type Limits struct {
	// Memory is in MB: the hard limit, or the soft limit when MemoryMax is
	// set. Hard: v1 memory.limit_in_bytes (and memory.memsw.limit_in_bytes,
	// so swap does not extend it, where swap accounting is on); v2
	// memory.max (and memory.swap.max = 0). Soft: v1
	// memory.soft_limit_in_bytes; v2 memory.low (see the package doc).
	Memory int64 `json:"memory,omitempty"`
	// MemoryMax is in MB: the hard limit, when the task may burst above
	// Memory while the host has memory to spare. At least Memory.
	MemoryMax int64 `json:"memory_max,omitempty"`
	// CPU is in MHz, as relative shares: v1 cpu.shares = CPU (2 to 262144);
	// v2 cpu.weight = CPUWeight(CPU).
	CPU int64 `json:"cpu,omitempty"`
	// Cores is a number of whole CPUs the task is pinned to (cpuset.cpus),
	// chosen from the parent cgroup's CPUs, least used by other tether task
	// cgroups first.
	Cores int `json:"cores,omitempty"`
	// Pids is the most tasks (processes and threads: the kernel counts
	// both) the cgroup may hold (pids.max); a fork beyond fails with EAGAIN.
	Pids int64 `json:"pids,omitempty"`
}

// maxMB keeps MB<<20 inside int64.
const maxMB = math.MaxInt64 >> 20

// Validate checks the limits' values (not the host): an error wrapping
// ErrBadLimits names the bad one.
func (l Limits) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: %s", ErrBadLimits, fmt.Sprintf(f, args...)) }
	switch {
	case l.Memory < 0 || l.Memory > maxMB:
		return bad("memory = %d: want MB between 0 (unset) and %d", l.Memory, int64(maxMB))
	case l.MemoryMax < 0 || l.MemoryMax > maxMB:
		return bad("memory_max = %d: want MB between 0 (unset) and %d", l.MemoryMax, int64(maxMB))
	case l.MemoryMax > 0 && l.Memory == 0:
		return bad("memory_max = %d without memory: memory_max makes memory the soft limit, so set both", l.MemoryMax)
	case l.MemoryMax > 0 && l.MemoryMax < l.Memory:
		return bad("memory_max = %d is below memory = %d: the hard limit must be at least the soft one", l.MemoryMax, l.Memory)
	case l.CPU < 0:
		return bad("cpu = %d: want MHz, 0 for unset", l.CPU)
	case l.Cores < 0:
		return bad("cores = %d: want a number of CPUs, 0 for unset", l.Cores)
	case l.Pids < 0:
		return bad("pids = %d: want a number of tasks, 0 for unset", l.Pids)
	}
	return nil
}

// hardMB and softMB are the hard and soft memory limits in MB (0: none).
func (l Limits) hardMB() int64 {
	if l.MemoryMax > 0 {
		return l.MemoryMax
	}
	return l.Memory
}

func (l Limits) softMB() int64 {
	if l.MemoryMax > 0 {
		return l.Memory
	}
	return 0
}

// needs lists the controllers the limits need, each with the limit's name.
func (l Limits) needs() []struct {
	limit string
	c     Controller
} {
	type need = struct {
		limit string
		c     Controller
	}
	var out []need
	if l.Memory > 0 {
		out = append(out, need{"memory", Memory})
	}
	if l.MemoryMax > 0 {
		out = append(out, need{"memory_max", Memory})
	}
	if l.CPU > 0 {
		out = append(out, need{"cpu", CPU})
	}
	if l.Cores > 0 {
		out = append(out, need{"cores", CPUSet})
	}
	if l.Pids > 0 {
		out = append(out, need{"pids", Pids})
	}
	return out
}

// CPUShares converts MHz to v1 cpu.shares, clamped to the kernel's 2 to
// 262144.
func CPUShares(mhz int64) uint64 {
	switch {
	case mhz < 2:
		return 2
	case mhz > 262144:
		return 262144
	}
	return uint64(mhz)
}

// CPUWeight converts v1 cpu.shares to v2 cpu.weight as runc (and crun, and
// the kubelet) do since 2025: a quadratic in log2(shares) through the three
// points min, default and max (2 -> 1, 1024 -> 100, 262144 -> 10000), so a
// default task keeps the default weight. (The linear 1 + (shares-2)*9999 /
// 262142 that runc used before mapped 1024 to 39.)
func CPUWeight(shares uint64) uint64 {
	switch {
	case shares <= 2:
		return 1
	case shares >= 262144:
		return 10000
	}
	l := math.Log2(float64(shares))
	exp := (l*l+125*l)/612.0 - 7.0/34.0
	return uint64(math.Ceil(math.Pow(10, exp)))
}

// write is one value written to one cgroup file.
type write struct {
	key      string // hierarchy
	file     string
	value    string
	optional bool // skipped when the file does not exist
}

// planLimits returns the writes that set lim, in order, given which
// hierarchy (key and version) serves each controller and the CPUs chosen
// for cpuset.cpus (v1 always gets cpuset.cpus and cpuset.mems: a v1 cpuset
// without them takes no process). Pure: Create performs them.
func planLimits(lim Limits, where func(Controller) (string, Version, bool), cpus, mems string) []write {
	var ws []write
	set := func(c Controller, v1file, v1value, v2file, v2value string, optional bool) {
		key, v, ok := where(c)
		switch {
		case !ok:
		case v == V1 && v1file != "":
			ws = append(ws, write{key: key, file: v1file, value: v1value, optional: optional})
		case v == V2 && v2file != "":
			ws = append(ws, write{key: key, file: v2file, value: v2value, optional: optional})
		}
	}
	if lim.Cores > 0 {
		set(CPUSet, "cpuset.cpus", cpus, "cpuset.cpus", cpus, false)
	} else {
		set(CPUSet, "cpuset.cpus", cpus, "", "", false)
	}
	set(CPUSet, "cpuset.mems", mems, "", "", false)
	if hard := lim.hardMB(); hard > 0 {
		b := strconv.FormatInt(hard<<20, 10)
		set(Memory, "memory.limit_in_bytes", b, "memory.max", b, false)
		// Swap does not extend the hard limit, where swap is accounted.
		set(Memory, "memory.memsw.limit_in_bytes", b, "memory.swap.max", "0", true)
	}
	if soft := lim.softMB(); soft > 0 {
		b := strconv.FormatInt(soft<<20, 10)
		set(Memory, "memory.soft_limit_in_bytes", b, "memory.low", b, false)
	}
	if lim.CPU > 0 {
		sh := CPUShares(lim.CPU)
		set(CPU, "cpu.shares", strconv.FormatUint(sh, 10), "cpu.weight", strconv.FormatUint(CPUWeight(sh), 10), false)
	}
	if lim.Pids > 0 {
		n := strconv.FormatInt(lim.Pids, 10)
		set(Pids, "pids.max", n, "pids.max", n, false)
	}
	return ws
}

// parseCPUList parses a cpuset list ("0-3,5").
func parseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	var out []int
	if s == "" {
		return out, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cgroup: bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cgroup: bad cpu list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// formatCPUList writes sorted CPUs as a cpuset list ("0-3,5").
func formatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// chooseCPUs picks n of avail, those pinned by the fewest other task
// cgroups (use counts how many pin each CPU) first, lower numbers first
// among equals; the result is sorted.
func chooseCPUs(avail []int, n int, use map[int]int) []int {
	c := slices.Clone(avail)
	slices.SortStableFunc(c, func(a, b int) int {
		if use[a] != use[b] {
			return use[a] - use[b]
		}
		return a - b
	})
	c = c[:n]
	slices.Sort(c)
	return c
}

// TaskCPUs lists the CPUs the host gives task cgroups, the ones Cores are
// chosen from: those of the cpuset hierarchy's parent of task cgroups
// (cpuset.cpus on v1, cpuset.cpus.effective on cgroup2), as the kernel
// spells them ("0-3,8") and counted. A host without a cpuset controller
// is ErrNoController.
func (h Host) TaskCPUs() (list string, n int, err error) {
	hi, why, ok := h.For(CPUSet)
	if !ok {
		return "", 0, fmt.Errorf("%w: cpuset: %s", ErrNoController, why)
	}
	dir, ok := hi.dir(hi.Parent)
	if !ok {
		return "", 0, fmt.Errorf("cgroup: the parent of task cgroups %s lies outside the mounted %s hierarchy", hi.Parent, hi.Key)
	}
	file := "cpuset.cpus"
	if hi.Version == V2 {
		file = "cpuset.cpus.effective"
	}
	list, err = readString(dir, file)
	if err != nil {
		return "", 0, err
	}
	cpus, err := parseCPUList(list)
	if err != nil {
		return "", 0, err
	}
	return list, len(cpus), nil
}
