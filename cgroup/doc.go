// Package cgroup contains a task in a cgroup of its own, so that nothing
// the task spawned outlives it: a cgroup per task with limits, a kill that
// confirms the cgroup empty, the OOM count, and stats. It supports cgroup
// v2, v1 and the hybrid layout (v1 controllers beside a controller-less
// cgroup2 at /sys/fs/cgroup/unified), on Linux only, through
// golang.org/x/sys/unix and the cgroup files; no daemon, no D-Bus.
//
// # Using it
//
// Write-ahead, as the rest of tether: the driver computes the location and
// records it with the launch intent before anything is created:
//
//	h, err := cgroup.ProbeFor(executorPID)         // or Probe(): the layout the executor sees
//	loc, err := cgroup.LocationFor(h, task, nonce) // record loc.String() in the launch intent
//
// The executor, before it launches the task:
//
//	h, err := cgroup.Probe()
//	if err := h.Usable(); err != nil { ... } // ErrUnavailable: raw_exec warns, exec refuses
//	loc, err := cgroup.ParseLocation(recorded)     // and loc.Check(task, nonce)
//	cg, err := cgroup.Create(h, loc, cgroup.Limits{Memory: 256, CPU: 500, Pids: 100})
//	// *LimitError (ErrNoController): a limit this host cannot enforce
//
// The init shim, between clone and exec (it gets the location's string on
// its command line):
//
//	loc, err := cgroup.ParseLocation(s)
//	h, err := cgroup.Probe()
//	cg, err := cgroup.Open(h, loc)
//	err = cg.Join()                 // every hierarchy; then exec
//	err = cgroup.SetOOMScoreAdj(0)  // unless the task sets oom_score_adj
//
// (on cgroup2, Cgroup.UnifiedDir gives the fd for SysProcAttr.UseCgroupFD,
// so the child is born in the cgroup). When the task has ended, or to stop
// it, the executor or a recovering driver:
//
//	cg, err := cgroup.OpenRecorded(h, recorded, task, nonce) // ErrNotOurs: touch nothing
//	n, err := cg.OOMKills()  // before Remove: the count goes with the cgroup
//	err = cg.Kill(ctx)       // empty when nil; *KillError lists survivors
//	err = cg.Remove()        // idempotent
//
// Host.String is the report for `tether debug host`.
//
// # Where a task cgroup goes
//
// Below the calling process's own cgroup in each hierarchy (read from
// /proc/self/cgroup; each v1 controller may be nested elsewhere), named
// LeafName(task, nonce) = "tether-<task>@<nonce>". The exception is a
// cgroup2 hierarchy with controllers (a pure v2 host): a cgroup that holds
// processes cannot enable controllers for children (the
// no-internal-processes rule), and the executor's own cgroup holds at least the
// executor, so task cgroups go beside it, below its parent, which by the
// same rule holds no processes whenever the executor's cgroup has
// controllers of its own. Under systemd that is the agent's slice (or, with
// Delegate=yes and DelegateSubgroup=, the agent's delegated cgroup). At the
// real root, or when the executor's cgroup has no controllers to hand down
// (the hybrid host's unified hierarchy), they nest below it.
//
// # Limits
//
// Limits uses Nomad's names and units. With memory_max, memory is the soft
// limit: v1 memory.soft_limit_in_bytes, v2 memory.low. memory.low is the
// cgroup2 counterpart of the v1 soft limit (runc maps a reservation to it
// too): memory the kernel reclaims from others first, which the task may
// exceed freely while the host has memory to spare. memory.high would
// instead throttle and reclaim the task as soon as it passed memory, even on
// an idle host: a second hard limit, not Nomad's oversubscription. The hard
// limit also bounds swap (memsw / memory.swap.max 0) where swap is
// accounted. cpu is cpu.shares on v1 and CPUWeight of it on v2; cores pins
// cpuset.cpus; pids is pids.max. A limit whose controller the host lacks is
// a *LimitError, never a warning.
//
// # Killing
//
// Kill uses cgroup.kill where it exists and waits for "populated 0" in
// cgroup.events, woken by the members' pidfds (a member leaves the cgroup
// before its pidfd turns readable) and by POLLPRI on cgroup.events (which
// the kernel raises at most every 10 ms; not inotify, whose close waits for
// an SRCU grace period, 8 to 16 ms here); otherwise, and for anything left
// in v1 hierarchies, it freezes (v1 freezer, else cgroup.freeze), SIGKILLs
// every member through a pidfd whose process was proven a member in
// /proc/PID/cgroup, thaws and waits on the pidfds, until cgroup.procs is
// empty. Host.Without(UnifiedKey) uses a hybrid host as a v1 one.
//
// # Tests
//
// The tests create real cgroups as root, and elsewhere skip naming what is
// missing. On a hybrid host they run every kill path (cgroup.kill,
// cgroup.freeze, v1 freezer). Controllers on cgroup2 (a pure v2 host) are
// covered by the probe of a written layout (TestProbe_PureV2) and by the
// pinned writes (TestPlanLimits_V2), not by a kernel, until CI has such a
// host.
package cgroup
