//go:build linux

package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The package's documented promises, each with the test that holds it
// (tests in the other files are named where they already cover one):
//
//	limits, written and read back        TestCreate_EachLimitReadBack, TestCreate_LimitsLandInKernelFiles
//	memory alone is the hard limit;
//	  with memory_max it is the soft one TestMemory_SoftBelowHard
//	cores pins the task's CPUs           TestCores_TaskRunsOnlyOnItsCPUs
//	pids bounds forks                    TestPids_ForkBeyondLimitFails
//	a limit the host cannot enforce is
//	  an error naming it and its
//	  controller, and nothing is made    TestCreate_UnenforceableLimitNamesItsController
//	bad limits are refused               TestLimits_Validate, TestCreate_LimitsLandInKernelFiles (cores)
//	Create is idempotent                 TestCreate_LimitsLandInKernelFiles
//	Kill empties the cgroup, whatever its
//	  members do (setsid, double fork,
//	  fork while being killed, nested)   TestKill_SetsidAndDoubleFork, TestKill_ForkingMembers, TestKill_NestedCgroup
//	a kill that signals members one by
//	  one signals only those proven in
//	  the cgroup (or below it) after
//	  their pidfd pinned them            TestOpenMember_ProvesMembership
//	Kill is bounded by its context       TestKill_BoundedByContext
//	a gone cgroup is empty               TestKill_EmptyAndGone
//	Remove is idempotent, refuses a
//	  populated cgroup naming members    TestKill_SetsidAndDoubleFork, TestKill_BoundedByContext
//	the OOM kill is counted              TestOOM_KilledAndCounted
//	stats: every key, the peak above the
//	  current, what the host lacks in
//	  Missing, a gone cgroup an error    TestStats_ThisHost, TestStats_PeakAboveCurrent, TestStats_WithoutAController
//	OpenRecorded refuses a location not
//	  of the task and nonce, touching
//	  nothing                            TestOpenRecorded_RefusesOthers, TestOpenRecorded_RefusalTouchesNothing
//	ForkExec: born inside, threads back  TestForkExec_ChildBornInEveryHierarchy
//	UnifiedDir / CLONE_INTO_CGROUP       TestUnifiedDir_CloneIntoCgroup
//	unprivileged: ErrUnavailable, why    TestUnprivileged_NamedError, TestDelegated_CreateKillRemove
//	oom_score_adj reset                  TestOOMScoreAdj_Reset

// needV1 skips a test that reads the v1 files of controller c where this
// host serves it elsewhere, naming what it has.
func needV1(t *testing.T, h Host, cs ...Controller) {
	t.Helper()
	for _, c := range cs {
		hi, why, ok := h.For(c)
		switch {
		case !ok:
			t.Skipf("needs the %s controller: %s", c, why)
		case hi.Version != V1:
			t.Skipf("reads v1 files; %s is on cgroup2 here (its writes are pinned by TestPlanLimits_V2)", c)
		}
	}
}

// The kernel's values of a fresh v1 cgroup: what a limit left unset
// reads.
const (
	v1NoMemoryLimit = "9223372036854771712" // PAGE_COUNTER_MAX pages, in bytes
	v1DefaultShares = "1024"
	noPidsLimit     = "max"
)

// TestCreate_EachLimitReadBack: each limit alone, and memory with
// memory_max, lands in its kernel file in Nomad's units converted, and
// leaves every other limit file at the kernel's default.
func TestCreate_EachLimitReadBack(t *testing.T) {
	h := needCgroups(t)
	needV1(t, h, Memory, CPU, CPUSet, Pids)
	cs, _, _ := h.For(CPUSet)
	parentCPUs, err := readString(mustDir(t, cs, cs.Parent), "cpuset.cpus")
	if err != nil {
		t.Fatal(err)
	}
	all, err := parseCPUList(parentCPUs)
	if err != nil {
		t.Fatal(err)
	}
	mib := func(n int64) string { return strconv.FormatInt(n<<20, 10) }
	defaults := map[string]string{
		"memory.limit_in_bytes":      v1NoMemoryLimit,
		"memory.soft_limit_in_bytes": v1NoMemoryLimit,
		"cpu.shares":                 v1DefaultShares,
		"pids.max":                   noPidsLimit,
	}
	for _, tc := range []struct {
		name  string
		lim   Limits
		want  map[string]string // files that differ from defaults
		cores int               // CPUs in cpuset.cpus: 0 for all of the parent's
	}{
		{name: "none", lim: Limits{}},
		{name: "memory alone is the hard limit", lim: Limits{Memory: 64}, want: map[string]string{"memory.limit_in_bytes": mib(64)}},
		{name: "memory_max is the hard limit, memory the soft one", lim: Limits{Memory: 64, MemoryMax: 96},
			want: map[string]string{"memory.limit_in_bytes": mib(96), "memory.soft_limit_in_bytes": mib(64)}},
		{name: "memory equal to memory_max", lim: Limits{Memory: 64, MemoryMax: 64},
			want: map[string]string{"memory.limit_in_bytes": mib(64), "memory.soft_limit_in_bytes": mib(64)}},
		{name: "cpu in MHz is cpu.shares", lim: Limits{CPU: 500}, want: map[string]string{"cpu.shares": "500"}},
		{name: "cpu below the kernel's least share", lim: Limits{CPU: 1}, want: map[string]string{"cpu.shares": "2"}},
		{name: "cpu above the kernel's most shares", lim: Limits{CPU: 300000}, want: map[string]string{"cpu.shares": "262144"}},
		{name: "cores pins that many of the parent's CPUs", lim: Limits{Cores: 1}, cores: 1},
		{name: "cores of every CPU", lim: Limits{Cores: len(all)}, cores: len(all)},
		{name: "pids", lim: Limits{Pids: 20}, want: map[string]string{"pids.max": "20"}},
		{name: "all at once", lim: Limits{Memory: 32, MemoryMax: 48, CPU: 2000, Cores: 1, Pids: 7}, cores: 1,
			want: map[string]string{"memory.limit_in_bytes": mib(48), "memory.soft_limit_in_bytes": mib(32), "cpu.shares": "2000", "pids.max": "7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := newCgroup(t, h, tc.lim)
			for file, def := range defaults {
				want := def
				if v, ok := tc.want[file]; ok {
					want = v
				}
				c := Controller(strings.SplitN(file, ".", 2)[0])
				d, ok := cg.serving(c)
				if !ok {
					t.Fatalf("no directory serves %s", c)
				}
				if got := readFileT(t, cg, d.key, file); got != want {
					t.Errorf("%s = %s, want %s", file, got, want)
				}
			}
			mem, _ := cg.serving(Memory)
			if _, err := os.Stat(mem.dir + "/memory.memsw.limit_in_bytes"); err == nil {
				want := v1NoMemoryLimit
				if hard := tc.lim.hardMB(); hard > 0 {
					want = mib(hard)
				}
				if got := readFileT(t, cg, mem.key, "memory.memsw.limit_in_bytes"); got != want {
					t.Errorf("memory.memsw.limit_in_bytes = %s, want %s (swap must not extend the hard limit)", got, want)
				}
			}
			d, _ := cg.serving(CPUSet)
			cpus, err := parseCPUList(readFileT(t, cg, d.key, "cpuset.cpus"))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.cores
			if want == 0 {
				want = len(all)
			}
			if len(cpus) != want || slices.ContainsFunc(cpus, func(c int) bool { return !slices.Contains(all, c) }) {
				t.Errorf("cpuset.cpus %v, want %d of the parent's %v", cpus, want, all)
			}
		})
	}
}

// mustDir is the directory of cgroup path p in hierarchy hi.
func mustDir(t *testing.T, hi *Hierarchy, p string) string {
	t.Helper()
	d, ok := hi.dir(p)
	if !ok {
		t.Fatalf("%s is outside %s", p, hi.Mount)
	}
	return d
}

// TestMemory_SoftBelowHard: memory alone is a hard limit (a task that
// touches twice as much is OOM-killed); with memory_max it is the soft
// limit, which the task may pass while the host has memory to spare, and
// memory_max is the hard one.
func TestMemory_SoftBelowHard(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	for _, tc := range []struct {
		name   string
		lim    Limits
		touch  int
		killed bool
	}{
		{"memory alone: killed past it", Limits{Memory: 32}, 64, true},
		{"memory with memory_max: passes the soft limit", Limits{Memory: 32, MemoryMax: 128}, 64, false},
		{"memory with memory_max: killed past the hard one", Limits{Memory: 32, MemoryMax: 64}, 128, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMarker(t)
			cg := newCgroup(t, h, tc.lim)
			out, err := m.cmd(t, "cg-oom", cg.Location().String(), strconv.Itoa(tc.touch)).Output()
			var ee *exec.ExitError
			oomKilled := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			switch {
			case tc.killed && !oomKilled:
				t.Fatalf("touching %d MB under %+v: %v, output %q; want SIGKILL by the OOM killer", tc.touch, tc.lim, err, out)
			case !tc.killed && (err != nil || strings.TrimSpace(string(out)) != "survived"):
				t.Fatalf("touching %d MB under %+v: %v, output %q; want it to survive", tc.touch, tc.lim, err, out)
			}
			n, err := cg.OOMKills()
			if err != nil {
				t.Fatal(err)
			}
			if tc.killed != (n > 0) {
				t.Errorf("OOM count %d; killed = %v", n, tc.killed)
			}
		})
	}
}

// TestCores_TaskRunsOnlyOnItsCPUs: a task in a cgroup with cores = 1 may
// run on that one CPU only, from its first instruction on.
func TestCores_TaskRunsOnlyOnItsCPUs(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(CPUSet); !ok {
		t.Skipf("needs the cpuset controller: %s", why)
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{Cores: 1})
	d, _ := cg.serving(CPUSet)
	pinned := readFileT(t, cg, d.key, "cpuset.cpus")
	s := start(t, m.cmd(t, "cg-affinity", cg.Location().String()))
	if s.line != pinned {
		t.Fatalf("the task may run on CPUs %q; its cgroup pins %q", s.line, pinned)
	}
}

// TestCreate_UnenforceableLimitNamesItsController: on this host without
// the hierarchy a limit needs, Create fails with a *LimitError that names
// the limit as a task file spells it and the controller, and makes no
// directory. A limit of 0 (unset) needs nothing.
func TestCreate_UnenforceableLimitNamesItsController(t *testing.T) {
	h := needCgroups(t)
	for _, tc := range []struct {
		lim   Limits
		limit string
		c     Controller
	}{
		{Limits{Memory: 64}, "memory", Memory},
		{Limits{Memory: 64, MemoryMax: 128}, "memory", Memory},
		{Limits{CPU: 100}, "cpu", CPU},
		{Limits{Cores: 1}, "cores", CPUSet},
		{Limits{Pids: 20}, "pids", Pids},
	} {
		hi, _, ok := h.For(tc.c)
		if !ok {
			t.Logf("%s: this host lacks it already", tc.c)
			continue
		}
		without := h.Without(hi.Key)
		if _, _, still := without.For(tc.c); still {
			t.Logf("%s: served elsewhere too", tc.c)
			continue
		}
		loc, err := LocationFor(without, "t", "n"+randHex(t, 8))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Create(without, loc, tc.lim)
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrNoController) || le.Limit != tc.limit || le.Controller != tc.c {
			t.Errorf("Create %+v without %s: %v; want a *LimitError for limit %q, controller %s", tc.lim, hi.Key, err, tc.limit, tc.c)
			continue
		}
		for _, want := range []string{`"` + tc.limit + `"`, string(tc.c) + " controller"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v does not name %s", err, want)
			}
		}
		c, err := Open(without, loc)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range c.Dirs() {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused Create made %s", d)
			}
		}
		// Without that limit the same host is fine.
		cg := newCgroup(t, without, Limits{})
		if _, ok := cg.serving(tc.c); ok {
			t.Errorf("a cgroup on a host without %s has it", hi.Key)
		}
	}
}

// TestKill_ForkingMembers: a member that forks without pause while it is
// being killed (refused forks retried at once, up to pids.max) is killed
// with everything it forked, on each kill path, and the cgroup is empty.
func TestKill_ForkingMembers(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(Pids); !ok {
		t.Skipf("needs the pids controller to bound the forks: %s", why)
	}
	for name, hh := range killPaths(t, h) {
		t.Run(name, func(t *testing.T) {
			m := newMarker(t)
			cg := newCgroup(t, hh, Limits{Pids: 40})
			cmd := m.cmd(t, "cg-forkloop", cg.Location().String(), "10")
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC=off")
			s := start(t, cmd)
			if s.line != "forked 10" {
				t.Fatalf("forker said %q", s.line)
			}
			if err := cg.Kill(testCtx(t)); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if pids, err := cg.Procs(); err != nil || len(pids) != 0 {
				t.Fatalf("after Kill: members %v, %v", pids, err)
			}
			if ws := s.wait(t).Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("the forker ended %v; want SIGKILL", ws)
			}
			if live := markedLive(m); len(live) > 0 {
				t.Fatalf("alive after Kill: %v", describe(live))
			}
		})
	}
}

// TestStats_PeakAboveCurrent: a task that touched 64 MB and gave it back
// shows a peak of at least 64 MB and a current charge well below it; the
// pids count is its threads; the OOM count is 0.
func TestStats_PeakAboveCurrent(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	s := start(t, m.cmd(t, "cg-spike", cg.Location().String(), "64"))
	if s.line != "freed" {
		t.Fatalf("helper said %q", s.line)
	}
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryPeakBytes < 64<<20 {
		t.Errorf("peak %d bytes after touching 64 MB", st.MemoryPeakBytes)
	}
	if st.MemoryBytes == 0 || st.MemoryBytes > st.MemoryPeakBytes-32<<20 {
		t.Errorf("current %d bytes after giving back 64 MB (peak %d)", st.MemoryBytes, st.MemoryPeakBytes)
	}
	if st.OOMKills != 0 {
		t.Errorf("%d OOM kills", st.OOMKills)
	}
	if _, _, ok := h.For(Pids); ok {
		threads, err := os.ReadDir("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		if st.Pids != uint64(len(threads)) {
			t.Errorf("pids %d; the only member has %d threads", st.Pids, len(threads))
		}
	}
}

// TestStats_WithoutAController: a figure the host cannot give is named in
// Missing (and 0), never an error; OOMKills without a memory hierarchy is
// ErrNoController; the stats of a removed cgroup are an error matching
// fs.ErrNotExist.
func TestStats_WithoutAController(t *testing.T) {
	h := needCgroups(t)
	mem, _, ok := h.For(Memory)
	if !ok || mem.Version != V1 {
		t.Skip("needs a v1 memory hierarchy to leave out")
	}
	without := h.Without(mem.Key)
	cg := newCgroup(t, without, Limits{})
	st, err := cg.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.MemoryBytes != 0 || st.OOMKills != 0 || !slices.ContainsFunc(st.Missing, func(s string) bool { return strings.Contains(s, "memory") }) {
		t.Errorf("stats without a memory hierarchy: %+v; want memory named in Missing", st)
	}
	if _, err := cg.OOMKills(); !errors.Is(err, ErrNoController) {
		t.Errorf("OOMKills without a memory hierarchy: %v, want ErrNoController", err)
	}
	if err := cg.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := cg.Stats(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stats of a removed cgroup: %v, want fs.ErrNotExist", err)
	}
}

// TestOpenRecorded_RefusalTouchesNothing: a recorded location checked
// against another task or nonce is refused before anything is done: the
// cgroup and its member live on, and only the right task and nonce get a
// Cgroup that can kill it. A location naming a hierarchy the host does not
// mount is ErrNoHierarchy.
func TestOpenRecorded_RefusalTouchesNothing(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	task, nonce := "web", "n"+randHex(t, 8)
	loc, err := LocationFor(h, task, nonce)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := Create(h, loc, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cg.Kill(testCtx(t))
		_ = cg.Remove()
	})
	s := start(t, m.cmd(t, "cg-ready", loc.String()))
	for _, tc := range []struct {
		task, nonce string
		want        error
	}{
		{task, "n" + randHex(t, 8), ErrNotOurs},
		{"db", nonce, ErrNotOurs},
		{task + "x", nonce, ErrNotOurs},
		{task, nonce[:len(nonce)-1], ErrNotOurs},
		{task, "bad/nonce", ErrBadLocation},
	} {
		if got, err := OpenRecorded(h, loc.String(), tc.task, tc.nonce); !errors.Is(err, tc.want) || got != nil {
			t.Errorf("OpenRecorded(%s) for %s@%s: %v, %v; want %v and no cgroup", loc, tc.task, tc.nonce, got, err, tc.want)
		}
	}
	if _, err := OpenRecorded(h.Without(h.Hierarchies[0].Key), loc.String(), task, nonce); !errors.Is(err, ErrNoHierarchy) {
		t.Errorf("OpenRecorded on a host without %s: %v, want ErrNoHierarchy", h.Hierarchies[0].Key, err)
	}
	if !testproc.Alive(s.cmd.Process.Pid) {
		t.Fatal("a refused OpenRecorded killed the member")
	}
	for _, d := range cg.Dirs() {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("a refused OpenRecorded removed %s: %v", d, err)
		}
	}
	own, err := OpenRecorded(h, loc.String(), task, nonce)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Kill(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t).Sys().(syscall.WaitStatus); !ws.Signaled() {
		t.Fatalf("member ended %v after the Kill of its recorded cgroup", ws)
	}
}

// TestForkExec_ChildBornInEveryHierarchy: ForkExec's child is a member of
// the cgroup in every hierarchy when it first runs (it reads its own
// /proc/self/cgroup before anything could move it), and every thread of
// the calling process is back in its own cgroups afterwards. A pids limit
// of 1 leaves no room for the thread and the child: ErrThreadMove.
func TestForkExec_ChildBornInEveryHierarchy(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	cg := newCgroup(t, h, Limits{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	attr := &syscall.ProcAttr{Files: []uintptr{0, w.Fd(), 2}, Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	before := ownThreads(t)
	pid, err := cg.ForkExec(h, exe, []string{exe, "cg-ready", m.arg()}, attr)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	line := make([]byte, 3)
	if _, err := r.Read(line); err != nil || string(line) != "ok\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	got, err := ProcCgroups(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(got, cg.Location().Paths()) {
		t.Errorf("child's cgroups %v, want %v", got, cg.Location().Paths())
	}
	for tid, cgs := range ownThreads(t) {
		if want, ok := before[tid]; ok && want != cgs {
			t.Errorf("thread %d of this process is in %q after ForkExec, was in %q", tid, cgs, want)
		}
		if strings.Contains(cgs, cg.Location().Leaf()) {
			t.Errorf("thread %d of this process stayed in the task's cgroup: %q", tid, cgs)
		}
	}

	if _, _, ok := h.For(Pids); ok {
		one := newCgroup(t, h, Limits{Pids: 1})
		pid, err := one.ForkExec(h, exe, []string{exe, "cg-sleep", m.arg()}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}})
		if pid > 0 {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
				_, _ = p.Wait()
			}
		}
		if !errors.Is(err, ErrThreadMove) {
			t.Errorf("ForkExec under pids = 1: pid %d, %v; want ErrThreadMove", pid, err)
		}
	}
}

// ownThreads maps each thread of this process to its /proc cgroup text.
func ownThreads(t *testing.T) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "cgroup"))
		if err != nil {
			continue // ended meanwhile
		}
		out[tid] = string(b)
	}
	return out
}
