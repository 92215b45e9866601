//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stats are a task cgroup's figures, read from its files (`tether stats`).
type Stats struct {
	// MemoryBytes is the memory charged now (v1 memory.usage_in_bytes, v2
	// memory.current); MemoryPeakBytes the most ever (max_usage_in_bytes,
	// memory.peak).
	MemoryBytes     uint64 `json:"memory_bytes"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	// CPUUser and CPUSystem are the CPU time used (cgroup2 cpu.stat, which
	// every cgroup2 cgroup has; else v1 cpuacct.usage_user/usage_sys).
	CPUUser   time.Duration `json:"cpu_user_ns"`
	CPUSystem time.Duration `json:"cpu_system_ns"`
	// CPUThrottled is the time the task was throttled by a CPU quota, and
	// ThrottledPeriods in how many periods (cpu.stat of the cpu controller).
	CPUThrottled     time.Duration `json:"cpu_throttled_ns"`
	ThrottledPeriods uint64        `json:"cpu_throttled_periods"`
	// Pids is the number of tasks (processes and threads) in the cgroup
	// (pids.current).
	Pids uint64 `json:"pids"`
	// OOMKills counts the processes the OOM killer killed in the cgroup.
	OOMKills uint64 `json:"oom_kills"`
	// Missing names each figure this host cannot give, and why; those
	// figures are 0.
	Missing []string `json:"missing,omitempty"`
}

// Stats reads the cgroup's figures. A figure the host lacks is named in
// Missing, not an error; an error is a cgroup that is gone (it matches
// fs.ErrNotExist) or a file that exists but cannot be read.
func (c *Cgroup) Stats() (Stats, error) {
	for _, d := range c.dirs {
		if _, err := os.Stat(d.dir); err != nil {
			return Stats{}, fmt.Errorf("cgroup: stats: %w", err) // gone: matches fs.ErrNotExist
		}
	}
	var st Stats
	miss := func(f string, args ...any) { st.Missing = append(st.Missing, fmt.Sprintf(f, args...)) }
	if d, ok := c.serving(Memory); ok {
		cur, peak := "memory.usage_in_bytes", "memory.max_usage_in_bytes"
		if d.version == V2 {
			cur, peak = "memory.current", "memory.peak"
		}
		var err error
		if st.MemoryBytes, err = readUint(d.dir, cur); isNotExist(err) {
			miss("memory: no %s (the memory controller is not enabled for this cgroup)", cur)
		} else if err != nil {
			return Stats{}, err
		}
		if st.MemoryPeakBytes, err = readUint(d.dir, peak); isNotExist(err) {
			miss("memory_peak: no %s (kernel older than 5.19)", peak)
		} else if err != nil {
			return Stats{}, err
		}
		if st.OOMKills, err = c.OOMKills(); err != nil && !errors.Is(err, ErrNoController) {
			return Stats{}, err
		} else if err != nil {
			miss("oom_kills: %v", err)
		}
	} else {
		miss("memory, memory_peak, oom_kills: no memory controller")
	}
	if err := c.cpuTimes(&st); err != nil {
		return Stats{}, err
	}
	if d, ok := c.serving(CPU); ok {
		kv, err := readKV(d.dir, "cpu.stat")
		if err != nil {
			return Stats{}, err
		}
		st.ThrottledPeriods = kv["nr_throttled"]
		if d.version == V1 {
			st.CPUThrottled = time.Duration(kv["throttled_time"])
		} else {
			st.CPUThrottled = time.Duration(kv["throttled_usec"]) * time.Microsecond
		}
	} else {
		miss("cpu_throttled: no cpu controller")
	}
	if d, ok := c.serving(Pids); ok {
		var err error
		if st.Pids, err = readUint(d.dir, "pids.current"); isNotExist(err) {
			miss("pids: no pids.current (the pids controller is not enabled for this cgroup)")
		} else if err != nil {
			return Stats{}, err
		}
	} else {
		miss("pids: no pids controller")
	}
	return st, nil
}

// cpuTimes fills CPUUser and CPUSystem.
func (c *Cgroup) cpuTimes(st *Stats) error {
	if d, ok := c.byKey(UnifiedKey); ok {
		kv, err := readKV(d.dir, "cpu.stat")
		if err != nil {
			return err
		}
		st.CPUUser = time.Duration(kv["user_usec"]) * time.Microsecond
		st.CPUSystem = time.Duration(kv["system_usec"]) * time.Microsecond
		return nil
	}
	d, ok := c.serving(CPUAcct)
	if !ok {
		st.Missing = append(st.Missing, "cpu_user, cpu_system: no cgroup2 hierarchy and no cpuacct controller")
		return nil
	}
	user, uerr := readUint(d.dir, "cpuacct.usage_user")
	sys, serr := readUint(d.dir, "cpuacct.usage_sys")
	if uerr == nil && serr == nil {
		st.CPUUser, st.CPUSystem = time.Duration(user), time.Duration(sys)
		return nil
	}
	// Older kernels: cpuacct.stat, in USER_HZ (always 100) ticks.
	kv, err := readKV(d.dir, "cpuacct.stat")
	if err != nil {
		return err
	}
	st.CPUUser = time.Duration(kv["user"]) * 10 * time.Millisecond
	st.CPUSystem = time.Duration(kv["system"]) * 10 * time.Millisecond
	return nil
}

// OOMKills returns how many processes the OOM killer killed in the cgroup
// (v1 memory.oom_control oom_kill, kernel 4.13 or later; v2 memory.events
// oom_kill, which counts the cgroups below too). Read it before Remove: the
// count goes with the cgroup.
func (c *Cgroup) OOMKills() (uint64, error) {
	d, ok := c.serving(Memory)
	if !ok {
		return 0, fmt.Errorf("%w: the OOM count needs the memory controller, and %s has no memory hierarchy", ErrNoController, c.loc)
	}
	file := "memory.oom_control"
	if d.version == V2 {
		file = "memory.events"
	}
	kv, err := readKV(d.dir, file)
	if isNotExist(err) {
		return 0, fmt.Errorf("%w: no %s/%s (the memory controller is not enabled for this cgroup)", ErrNoController, d.dir, file)
	}
	if err != nil {
		return 0, err
	}
	n, ok := kv["oom_kill"]
	if !ok {
		return 0, fmt.Errorf("%w: %s/%s has no oom_kill (kernel older than 4.13)", ErrNoController, d.dir, file)
	}
	return n, nil
}

// readKV reads a flat-keyed cgroup file ("key value" lines); values that
// are no number are left out.
func readKV(dir, file string) (map[string]uint64, error) {
	b, err := os.ReadFile(dir + "/" + file)
	if err != nil {
		return nil, fmt.Errorf("cgroup: read %s/%s: %w", dir, file, err)
	}
	kv := map[string]uint64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv, nil
}

// readUint reads a cgroup file holding one number.
func readUint(dir, file string) (uint64, error) {
	s, err := readString(dir, file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s/%s: %q is no number", dir, file, s)
	}
	return n, nil
}

// SetOOMScoreAdj sets this process's /proc/self/oom_score_adj (-1000 to
// 1000). The executor's init shim sets 0 before it execs a task, unless
// the task file sets a value, so a task does not inherit the agent's
// (Nomad issue 10663: tasks inherited -1000 and were never OOM-killed).
// Lowering it needs CAP_SYS_RESOURCE.
func SetOOMScoreAdj(v int) error {
	if v < -1000 || v > 1000 {
		return fmt.Errorf("%w: %d (want -1000 to 1000)", ErrBadOOMScoreAdj, v)
	}
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0); err != nil {
		return fmt.Errorf("cgroup: set oom_score_adj %d: %w (lowering it needs CAP_SYS_RESOURCE)", v, err)
	}
	return nil
}

// OOMScoreAdj reads /proc/PID/oom_score_adj (pid 0: this process).
func OOMScoreAdj(pid int) (int, error) {
	p := "/proc/self"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid)
	}
	s, err := readString(p, "oom_score_adj")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s/oom_score_adj: %q is no number", p, s)
	}
	return n, nil
}
