//go:build linux

package cgroup

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// killPaths are the ways Kill can empty a cgroup; each test that kills runs
// every one this host has: cgroup.kill, cgroup2's freeze (as on a kernel
// before 5.14) and the v1 freezer (as on a pure v1 host).
func killPaths(t testing.TB, h Host) map[string]Host {
	paths := map[string]Host{}
	if h.KillMethod() == "cgroup.kill" {
		paths["cgroup.kill"] = h
	}
	if u, ok := h.Unified(); ok && u.Freeze {
		fr, _, hasFr := h.For(Freezer)
		v2 := h
		if hasFr && fr.Version == V1 {
			v2 = h.Without(fr.Key)
		}
		v2 = v2.Without() // a copy of the hierarchies, to change one
		uu, _ := v2.Unified()
		uu.Kill = false
		paths["cgroup.freeze"] = v2
	}
	if fr, _, ok := h.For(Freezer); ok && fr.Version == V1 {
		paths["v1 freezer"] = h.Without(UnifiedKey)
	}
	if len(paths) == 0 {
		t.Skipf("no kill path on this host (layout %s)", h.Layout)
	}
	return paths
}

// TestKill_SetsidAndDoubleFork: a task whose child called setsid and whose
// grandchild was double-forked into yet another session (out of any
// process group the executor knows) is killed whole by each kill path,
// confirmed empty, removed, and nothing of it is left alive.
func TestKill_SetsidAndDoubleFork(t *testing.T) {
	h := needCgroups(t)
	for name, hh := range killPaths(t, h) {
		t.Run(name, func(t *testing.T) {
			m := newMarker(t)
			cg := newCgroup(t, hh, Limits{})
			tree := start(t, m.cmd(t, "cg-tree", cg.Location().String()))
			var pids []int
			for f := range strings.FieldsSeq(tree.line) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("tree line %q", tree.line)
				}
				pids = append(pids, pid)
			}
			if len(pids) != 3 {
				t.Fatalf("tree line %q: want task, escaped grandchild, child", tree.line)
			}
			task, escaped := pids[0], pids[1]
			// The escaped one really left the task's session and group.
			st := statOf(t, escaped)
			if st.sid == task || st.pgid == task || st.ppid == task {
				t.Fatalf("grandchild %d: sid %d pgid %d ppid %d; want it outside task %d's session", escaped, st.sid, st.pgid, st.ppid, task)
			}
			members, err := cg.Procs()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pids {
				if !slices.Contains(members, p) {
					t.Fatalf("pid %d not in the cgroup (members %v)", p, members)
				}
			}
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if left, err := cg.Procs(); err != nil || len(left) != 0 {
				t.Fatalf("after Kill: members %v, %v", left, err)
			}
			if ws := tree.wait(t).Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("task ended %v; want SIGKILL", ws)
			}
			if err := cg.Remove(); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if err := cg.Remove(); err != nil {
				t.Fatalf("second Remove: %v", err)
			}
			for _, d := range cg.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after Remove: %v", d, err)
				}
			}
			for _, p := range pids {
				if testproc.Alive(p) {
					t.Errorf("pid %d alive after Kill", p)
				}
			}
			if live := markedLive(m); len(live) > 0 {
				t.Fatalf("alive after Kill: %v", describe(live))
			}
		})
	}
}

type procStat struct{ ppid, pgid, sid int }

func statOf(t *testing.T, pid int) procStat {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	n := func(i int) int { v, _ := strconv.Atoi(f[i]); return v }
	return procStat{ppid: n(1), pgid: n(2), sid: n(3)}
}

// TestKill_BoundedByContext: a Kill whose context has ended signals
// nothing and names what is still alive.
func TestKill_BoundedByContext(t *testing.T) {
	h := needCgroups(t)
	for name, hh := range killPaths(t, h) {
		t.Run(name, func(t *testing.T) {
			m := newMarker(t)
			cg := newCgroup(t, hh, Limits{})
			s := start(t, m.cmd(t, "cg-ready", cg.Location().String()))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := cg.Kill(ctx)
			var ke *KillError
			if !errors.As(err, &ke) || !errors.Is(err, ErrNotEmpty) || !errors.Is(err, context.Canceled) {
				t.Fatalf("Kill with an ended context = %v", err)
			}
			pid := s.cmd.Process.Pid
			if !slices.ContainsFunc(ke.Alive, func(m Member) bool { return m.PID == pid }) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)) {
				t.Fatalf("KillError does not name pid %d: %v", pid, err)
			}
			if !testproc.Alive(pid) {
				t.Fatalf("pid %d was killed by a Kill whose context had ended", pid)
			}
			if err := cg.Remove(); !errors.Is(err, ErrNotEmpty) || !strings.Contains(err.Error(), strconv.Itoa(pid)) {
				t.Fatalf("Remove of a populated cgroup = %v; want ErrNotEmpty naming pid %d", err, pid)
			}
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKill_EmptyAndGone: Kill of an empty cgroup, and of one that is gone,
// returns at once; so does Remove.
func TestKill_EmptyAndGone(t *testing.T) {
	h := needCgroups(t)
	for name, hh := range killPaths(t, h) {
		t.Run(name, func(t *testing.T) {
			cg := newCgroup(t, hh, Limits{})
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatalf("Kill empty: %v", err)
			}
			if err := cg.Remove(); err != nil {
				t.Fatal(err)
			}
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatalf("Kill gone: %v", err)
			}
			if pids, err := cg.Procs(); err != nil || len(pids) != 0 {
				t.Fatalf("Procs of a gone cgroup: %v %v", pids, err)
			}
		})
	}
}

// TestOOM_KilledAndCounted: a helper touching 400 MB under memory = 64 is
// killed by the OOM killer, and the OOM count says so. The peak is what
// the kernel promises: the task reached the limit (it was not killed
// early), and went past it by no more than the charge of a task being
// killed. A task the OOM killer has chosen may charge past the limit so
// that it can exit (v1: try_charge's forced charge of a dying task;
// cgroup-v2.rst, memory.max: "under certain circumstances, the usage may
// go over the limit temporarily"); the charge in flight is a page, or a
// huge page (2 MiB) where THP is on. The peak was seen one page over on
// this host (67112960 for a 64 MiB limit).
func TestOOM_KilledAndCounted(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{Memory: 64})
	if n, err := cg.OOMKills(); err != nil || n != 0 {
		t.Fatalf("OOM count before: %d, %v", n, err)
	}
	cmd := m.cmd(t, "cg-oom", cg.Location().String(), "400")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper under memory = 64 touching 400 MB: %v, output %q; want killed by SIGKILL", err, out)
	}
	n, err := cg.OOMKills()
	if err != nil || n < 1 {
		t.Fatalf("OOM count after: %d, %v; want >= 1", n, err)
	}
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	const limit, hugePage = 64 << 20, 2 << 20
	if st.OOMKills != n {
		t.Errorf("Stats says %d OOM kills, OOMKills %d", st.OOMKills, n)
	}
	if st.MemoryPeakBytes < limit-hugePage || st.MemoryPeakBytes > limit+hugePage {
		t.Errorf("peak %d bytes under a limit of %d: want the limit reached, and passed by no more than a dying task's charge (%d)", st.MemoryPeakBytes, limit, hugePage)
	}
	if st.MemoryBytes > limit {
		t.Errorf("%d bytes charged after the kill, over the limit of %d", st.MemoryBytes, limit)
	}
}

// TestPids_ForkBeyondLimitFails: under pids = 20 a helper that forks 100
// children gets fewer than 20 (it counts itself and its threads), the rest
// fail with EAGAIN, and the cgroup never holds more than 20 tasks.
func TestPids_ForkBeyondLimitFails(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(Pids); !ok {
		t.Skipf("needs the pids controller: %s", why)
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{Pids: 20})
	cmd := m.cmd(t, "cg-forker", cg.Location().String(), "100")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off")
	s := start(t, cmd)
	var ok, failed, errno int
	if _, err := fmtSscan(s.line, &ok, &failed, &errno); err != nil {
		t.Fatalf("forker line %q: %v", s.line, err)
	}
	t.Logf("pids = 20: forked %d of 100, %d refused (errno %v)", ok, failed, syscall.Errno(errno))
	if ok+failed != 100 || ok >= 20 || ok == 0 || syscall.Errno(errno) != syscall.EAGAIN {
		t.Fatalf("forked %d, failed %d (last errno %v); want some forks, the rest EAGAIN", ok, failed, syscall.Errno(errno))
	}
	d, _ := cg.serving(Pids)
	cur, err := readUint(d.dir, "pids.current")
	if err != nil || cur > 20 {
		t.Fatalf("pids.current = %d, %v; want <= 20", cur, err)
	}
	if max := readFileT(t, cg, d.key, "pids.max"); max != "20" {
		t.Fatalf("pids.max = %s", max)
	}
	procs, _ := cg.Procs()
	if len(procs) != ok+1 {
		t.Fatalf("%d processes in the cgroup; want the forker and its %d children", len(procs), ok)
	}
	if events, err := readKV(d.dir, "pids.events"); err == nil && events["max"] < uint64(failed) {
		t.Errorf("pids.events max = %d; want >= %d refused forks", events["max"], failed)
	}
	if err := cg.Kill(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func fmtSscan(s string, v ...*int) (int, error) {
	f := strings.Fields(s)
	if len(f) != len(v) {
		return 0, errors.New("wrong field count")
	}
	for i, p := range v {
		n, err := strconv.Atoi(f[i])
		if err != nil {
			return i, err
		}
		*p = n
	}
	return len(v), nil
}

// TestCreate_LimitsLandInKernelFiles: every limit is in the kernel's file,
// in the hierarchy that serves it, with Nomad's units converted.
func TestCreate_LimitsLandInKernelFiles(t *testing.T) {
	h := needCgroups(t)
	for _, c := range []Controller{Memory, CPU, CPUSet, Pids} {
		if hi, why, ok := h.For(c); !ok {
			t.Skipf("needs the %s controller: %s", c, why)
		} else if hi.Version != V1 {
			t.Skipf("checks v1 files; %s is on cgroup2 here (the v2 files are pinned by TestPlanLimits_V2)", c)
		}
	}
	cg := newCgroup(t, h, Limits{Memory: 64, MemoryMax: 128, CPU: 500, Cores: 1, Pids: 20})
	mem, _ := cg.serving(Memory)
	for file, want := range map[string]string{
		"memory.limit_in_bytes":      strconv.Itoa(128 << 20),
		"memory.soft_limit_in_bytes": strconv.Itoa(64 << 20),
	} {
		if got := readFileT(t, cg, mem.key, file); got != want {
			t.Errorf("%s = %s; want %s", file, got, want)
		}
	}
	if _, err := os.Stat(mem.dir + "/memory.memsw.limit_in_bytes"); err == nil {
		if got := readFileT(t, cg, mem.key, "memory.memsw.limit_in_bytes"); got != strconv.Itoa(128<<20) {
			t.Errorf("memsw = %s; want the hard limit", got)
		}
	}
	cpu, _ := cg.serving(CPU)
	if got := readFileT(t, cg, cpu.key, "cpu.shares"); got != "500" {
		t.Errorf("cpu.shares = %s", got)
	}
	cs, _ := cg.serving(CPUSet)
	cpus, err := parseCPUList(readFileT(t, cg, cs.key, "cpuset.cpus"))
	if err != nil || len(cpus) != 1 {
		t.Errorf("cpuset.cpus = %v, %v; want one CPU", cpus, err)
	}
	parentMems, _ := readString(cs.parent(), "cpuset.mems")
	if got := readFileT(t, cg, cs.key, "cpuset.mems"); got != parentMems {
		t.Errorf("cpuset.mems = %q; want the parent's %q", got, parentMems)
	}
	pids, _ := cg.serving(Pids)
	if got := readFileT(t, cg, pids.key, "pids.max"); got != "20" {
		t.Errorf("pids.max = %s", got)
	}

	// Idempotent: the same location again keeps the directories, the
	// values and the chosen CPU.
	again, err := Create(h, cg.Location(), Limits{Memory: 64, MemoryMax: 128, CPU: 500, Cores: 1, Pids: 20})
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if got, _ := parseCPUList(readFileT(t, again, cs.key, "cpuset.cpus")); !slices.Equal(got, cpus) {
		t.Errorf("second Create moved the task from CPU %v to %v", cpus, got)
	}
	// The next task's choice sees this one's pin (the choice itself, least
	// pinned first, is TestChooseCPUs_LeastPinnedFirst).
	if pins := siblingPins(cgDir{dir: cs.parent() + "/tether-next@abcdefgh"}); pins[cpus[0]] < 1 {
		t.Errorf("sibling pins %v miss CPU %d", pins, cpus[0])
	}
	// More cores than the parent has is a clear error.
	loc, _ := LocationFor(h, "many", "abcdefgh"+randHex(t, 4))
	if _, err := Create(h, loc, Limits{Cores: 1000}); !errors.Is(err, ErrBadLimits) || !strings.Contains(err.Error(), "cores = 1000") {
		t.Errorf("cores = 1000: %v", err)
	}
	if c, _ := Open(h, loc); c != nil {
		for _, d := range c.Dirs() {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused Create left %s", d)
			}
		}
	}
}

// TestCreate_MissingControllerIsAnError: on this host without its pids or
// memory hierarchy, asking for that limit is an error naming the
// controller, and nothing is made.
func TestCreate_MissingControllerIsAnError(t *testing.T) {
	h := needCgroups(t)
	for _, tc := range []struct {
		c   Controller
		lim Limits
	}{{Pids, Limits{Pids: 20}}, {Memory, Limits{Memory: 64}}, {CPUSet, Limits{Cores: 1}}, {CPU, Limits{CPU: 100}}} {
		hi, _, ok := h.For(tc.c)
		if !ok {
			continue
		}
		trimmed := h.Without(hi.Key)
		if _, _, still := trimmed.For(tc.c); still {
			continue
		}
		loc, err := LocationFor(trimmed, "t", "n"+randHex(t, 8))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Create(trimmed, loc, tc.lim)
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrNoController) || le.Controller != tc.c || !strings.Contains(err.Error(), string(tc.c)+" controller") {
			t.Errorf("Create %+v without %s: %v", tc.lim, tc.c, err)
		}
		c, _ := Open(trimmed, loc)
		for _, d := range c.Dirs() {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("refused Create made %s", d)
			}
		}
	}
	// A location recorded with a hierarchy the host lacks does not open.
	loc, _ := LocationFor(h, "t", "n"+randHex(t, 8))
	if _, err := Open(h.Without(h.Hierarchies[0].Key), loc); !errors.Is(err, ErrNoHierarchy) {
		t.Errorf("Open on a host without %s: %v", h.Hierarchies[0].Key, err)
	}
}

// TestUnifiedDir_CloneIntoCgroup: a child started with UseCgroupFD is born
// in the cgroup2 cgroup (CLONE_INTO_CGROUP); on a hybrid host it joins the
// v1 hierarchies itself.
func TestUnifiedDir_CloneIntoCgroup(t *testing.T) {
	h := needCgroups(t)
	if _, ok := h.Unified(); !ok {
		t.Skip("needs a cgroup2 hierarchy")
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	f, err := cg.UnifiedDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := m.cmd(t, "cg-ready")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	s := start(t, cmd)
	f.Close()
	own, err := ProcCgroups(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := cg.Location().Paths()[UnifiedKey]; own[UnifiedKey] != want {
		t.Fatalf("child's cgroup2 cgroup %q; want %q", own[UnifiedKey], want)
	}
	if err := cg.Add(s.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if own, _ = ProcCgroups(s.cmd.Process.Pid); !mapsEqual(own, cg.Location().Paths()) {
		t.Fatalf("after Add: %v; want %v", own, cg.Location().Paths())
	}
	if _, err := newV1Only(t, h).UnifiedDir(); !errors.Is(err, ErrNoUnified) {
		t.Fatalf("UnifiedDir without cgroup2: %v", err)
	}
}

func newV1Only(t *testing.T, h Host) *Cgroup {
	loc, err := LocationFor(h.Without(UnifiedKey), "t", "n"+randHex(t, 8))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(h.Without(UnifiedKey), loc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mapsEqual: every key of want has want's value in got.
func mapsEqual(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestStats_ThisHost: a live member shows up in every figure this host has.
func TestStats_ThisHost(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	start(t, m.cmd(t, "cg-ready", cg.Location().String()))
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	t.Logf("%s", b)
	if h.Layout == LayoutHybrid && len(st.Missing) != 0 {
		t.Errorf("hybrid host misses %v", st.Missing)
	}
	if _, _, ok := h.For(Memory); ok && (st.MemoryBytes == 0 || st.MemoryPeakBytes < st.MemoryBytes) {
		t.Errorf("memory %d, peak %d", st.MemoryBytes, st.MemoryPeakBytes)
	}
	if _, _, ok := h.For(Pids); ok && st.Pids < 2 { // a Go process has threads
		t.Errorf("pids %d", st.Pids)
	}
	if st.CPUUser+st.CPUSystem == 0 {
		t.Errorf("no CPU time for a Go process that started")
	}
	for _, key := range []string{`"memory_bytes"`, `"memory_peak_bytes"`, `"cpu_user_ns"`, `"cpu_system_ns"`, `"cpu_throttled_ns"`, `"pids"`, `"oom_kills"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// TestUnprivileged_NamedError: as uid 65534 the probe works, and Usable
// and Create say why no cgroup can be made.
func TestUnprivileged_NamedError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a helper as uid 65534, which needs root")
	}
	m := newMarker(t)
	bin := nobodyBinary(t)
	cmd := exec.Command(bin, "cg-unpriv", m.arg(), "web", "abcdefgh")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper as uid 65534: %v", err)
	}
	var r struct {
		UID         int
		Layout      string
		UsableErr   string
		Unavailable bool
		CreateErr   string
		CreateUnav  bool
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	t.Logf("%+v", r)
	if r.UID != 65534 || !r.Unavailable || !r.CreateUnav {
		t.Fatalf("as uid 65534: %+v; want ErrUnavailable from Usable and Create", r)
	}
	if r.Layout != "none" && !strings.Contains(r.UsableErr, "not root (uid 65534)") {
		t.Fatalf("reason %q does not say not root", r.UsableErr)
	}
	if r.CreateErr != r.UsableErr {
		t.Fatalf("Create said %q, Usable %q", r.CreateErr, r.UsableErr)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestOOMScoreAdj_Reset: a process that inherited an agent's
// oom_score_adj (-1000 where this process has CAP_SYS_RESOURCE, else 500)
// resets it to 0.
func TestOOMScoreAdj_Reset(t *testing.T) {
	from := "500"
	if hasCap(t, unix.CAP_SYS_RESOURCE) {
		from = "-1000"
	} else {
		t.Log("no CAP_SYS_RESOURCE here: starting from 500, not -1000")
	}
	m := newMarker(t)
	out, err := m.cmd(t, "cg-oomadj", from, "0").Output()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("oom_score_adj after reset from %s: %q, %v", from, out, err)
	}
	if err := SetOOMScoreAdj(1001); !errors.Is(err, ErrBadOOMScoreAdj) {
		t.Fatalf("SetOOMScoreAdj(1001) = %v", err)
	}
	if v, err := OOMScoreAdj(0); err != nil || v < -1000 || v > 1000 {
		t.Fatalf("OOMScoreAdj(self) = %d, %v", v, err)
	}
}

// hasCap reports whether capability c is in this process's effective set.
func hasCap(t *testing.T, c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<c) != 0
		}
	}
	return false
}

// TestKill_NestedCgroup: a member that made a cgroup of its own below the
// task's (a root task may) is killed too, and Remove removes both.
func TestKill_NestedCgroup(t *testing.T) {
	h := needCgroups(t)
	for name, hh := range killPaths(t, h) {
		t.Run(name, func(t *testing.T) {
			m := newMarker(t)
			cg := newCgroup(t, hh, Limits{})
			s := start(t, m.cmd(t, "cg-ready", cg.Location().String()))
			for _, d := range cg.Dirs() {
				sub := d + "/inner"
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				if cs, ok := cg.serving(CPUSet); ok && cs.version == V1 && cs.dir == d {
					// A v1 cpuset takes no process before it has CPUs and nodes.
					for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
						v, _ := readString(d, f)
						if err := writeFile(sub, f, v); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := writeFile(sub, "cgroup.procs", strconv.Itoa(s.cmd.Process.Pid)); err != nil {
					t.Fatal(err)
				}
			}
			if pids, _ := cg.Procs(); !slices.Contains(pids, s.cmd.Process.Pid) {
				t.Fatalf("Procs %v misses the member of a nested cgroup", pids)
			}
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			s.wait(t)
			if err := cg.Remove(); err != nil {
				t.Fatal(err)
			}
			for _, d := range cg.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after Remove: %v", d, err)
				}
			}
		})
	}
}

// TestOpenRecorded_RefusesOthers: a recorded location opens only for its
// own task and nonce.
func TestOpenRecorded_RefusesOthers(t *testing.T) {
	h := needCgroups(t)
	loc, err := LocationFor(h, "web", "abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRecorded(h, loc.String(), "web", "abcdefgh"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRecorded(h, loc.String(), "web", "zzzzzzzz"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("other nonce: %v", err)
	}
	if _, err := OpenRecorded(h, loc.String(), "db", "abcdefgh"); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("other task: %v", err)
	}
	if _, err := OpenRecorded(h, "/sys/fs/cgroup/memory", "web", "abcdefgh"); !errors.Is(err, ErrBadLocation) {
		t.Fatalf("garbage: %v", err)
	}
	b, err := json.Marshal(h)
	if err != nil || !strings.Contains(string(b), `"layout":"`+h.Layout.String()+`"`) {
		t.Fatalf("host JSON %s, %v", b, err)
	}
}

// TestDelegated_CreateKillRemove: uid 65534, in a cgroup delegated to it
// (its directories and cgroup.procs chowned, as systemd's Delegate=yes
// does), may create, fill, kill and remove task cgroups below it, with
// limits.
func TestDelegated_CreateKillRemove(t *testing.T) {
	h := needCgroups(t)
	if os.Geteuid() != 0 {
		t.Skip("delegates a cgroup to uid 65534, which needs root")
	}
	m := newMarker(t)
	deleg := newCgroup(t, h, Limits{})
	for _, d := range deleg.Dirs() {
		for _, p := range []string{d, d + "/cgroup.procs", d + "/tasks", d + "/cgroup.subtree_control", d + "/cgroup.threads"} {
			if err := os.Chown(p, 65534, 65534); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	bin := nobodyBinary(t)
	cmd := exec.Command(bin, "cg-deleg", m.arg(), "inner", "abcdefgh")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, cmd) // it prints its pid, then waits to be moved
	if err := deleg.Add(s.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Err, Dir string }
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if r.Err != "" {
		t.Fatalf("as uid 65534 in a delegated cgroup: %s", r.Err)
	}
	if !strings.HasPrefix(r.Dir, deleg.Dirs()[h.Hierarchies[0].Key]+"/") {
		t.Fatalf("task cgroup %s is not below the delegated %s", r.Dir, deleg.Dirs()[h.Hierarchies[0].Key])
	}
	if st := s.wait(t); !st.Success() {
		t.Fatalf("delegated helper: %v", st)
	}
}

// nobodyBinary is a copy of the test binary that uid 65534 can execute.
func nobodyBinary(t *testing.T) string {
	binDir := t.TempDir()
	for _, d := range []string{filepath.Dir(binDir), binDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, _ := os.Executable()
	bin := filepath.Join(binDir, "cgroup.test")
	copyFile(t, exe, bin)
	return bin
}

// TestProbeFor_Child: the layout seen for a child is its own cgroups: a
// child moved into a task cgroup nests the next location below that.
func TestProbeFor_Child(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	s := start(t, m.cmd(t, "cg-ready", cg.Location().String()))
	hc, err := ProbeFor(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, hi := range hc.Hierarchies {
		if want := cg.Location().Paths()[hi.Key]; hi.Path != want {
			t.Errorf("%s: child's own path %s; want %s", hi.Key, hi.Path, want)
		}
	}
	loc, err := LocationFor(hc, "inner", "abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	for _, hi := range hc.Hierarchies {
		if hi.Parent != hi.Path {
			continue // cgroup2 with controllers: beside it (TestProbe_PureV2)
		}
		if got, want := loc.Paths()[hi.Key], cg.Location().Paths()[hi.Key]+"/tether-inner@abcdefgh"; got != want {
			t.Errorf("%s: location below the child: %s; want %s", hi.Key, got, want)
		}
	}
	if _, err := ProbeFor(0); err == nil {
		t.Error("ProbeFor(0) accepted")
	}
}
