//go:build linux

package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestProbe_ThisHost checks the probe against what /proc/self/cgroup and
// the mounts say, on whatever layout this machine has.
func TestProbe_ThisHost(t *testing.T) {
	h, err := Probe()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", h)
	own, err := ProcCgroups(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Hierarchies) == 0 {
		t.Skipf("no cgroup hierarchy mounted: %v", h.Usable())
	}
	for _, hi := range h.Hierarchies {
		if hi.Path != own[hi.Key] {
			t.Errorf("%s: Path %q, /proc/self/cgroup says %q", hi.Key, hi.Path, own[hi.Key])
		}
		dir, ok := hi.dir(hi.Path)
		if !ok {
			t.Errorf("%s: own path outside the mount", hi.Key)
			continue
		}
		// Our own pid is in our own cgroup's cgroup.procs: the directory
		// really is ours.
		b, err := os.ReadFile(dir + "/cgroup.procs")
		if err != nil {
			t.Errorf("%s: %v", hi.Key, err)
		} else if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(os.Getpid())) {
			t.Errorf("%s: pid %d not in %s/cgroup.procs", hi.Key, os.Getpid(), dir)
		}
	}
	// This machine's layout, as the brief describes it (CI's is the same).
	if u, ok := h.Unified(); ok && h.Layout == LayoutHybrid {
		if len(u.Controllers) != 0 || u.Parent != u.Path {
			t.Errorf("hybrid unified: controllers %v, parent %s (own %s)", u.Controllers, u.Parent, u.Path)
		}
		if mem, _, ok := h.For(Memory); !ok || mem.Version != V1 || mem.Path != own["memory"] {
			t.Errorf("hybrid: memory served by %+v", mem)
		}
	}
}

// layout writes a probe fixture: /proc/self files under root, and cgroup
// files (path -> content) under root/cg.
func layout(t *testing.T, mountinfo, procCgroup string, files map[string]string) probeEnv {
	t.Helper()
	root := t.TempDir()
	mountinfo = strings.ReplaceAll(mountinfo, "@ROOT@", root)
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(root+"/proc/self/mountinfo", mountinfo)
	write(root+"/proc/self/cgroup", procCgroup)
	for p, s := range files {
		write(root+"/cg"+p, s)
	}
	return probeEnv{root: root, uid: 0, kernel: [2]int{6, 1}}
}

// TestProbe_PureV2 decides where task cgroups go on a systemd-style pure v2
// host: beside the agent's cgroup, which holds processes.
func TestProbe_PureV2(t *testing.T) {
	e := layout(t,
		"30 23 0:26 / @ROOT@/cg rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
		"0::/system.slice/agent.service\n",
		map[string]string{
			"/cgroup.controllers":                                "cpuset cpu io memory hugetlb pids rdma misc",
			"/cgroup.subtree_control":                            "cpu io memory pids",
			"/system.slice/cgroup.controllers":                   "cpu io memory pids",
			"/system.slice/cgroup.subtree_control":               "memory pids",
			"/system.slice/cgroup.procs":                         "",
			"/system.slice/cgroup.events":                        "populated 1\nfrozen 0\n",
			"/system.slice/cgroup.kill":                          "",
			"/system.slice/cgroup.freeze":                        "0\n",
			"/system.slice/agent.service/cgroup.controllers":     "memory pids",
			"/system.slice/agent.service/cgroup.subtree_control": "",
			"/system.slice/agent.service/cgroup.procs":           "812\n",
			"/system.slice/agent.service/cgroup.events":          "populated 1\nfrozen 0\n",
		})
	h, err := e.probe()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", h)
	if h.Layout != LayoutV2 || len(h.Hierarchies) != 1 {
		t.Fatalf("layout %s, %d hierarchies", h.Layout, len(h.Hierarchies))
	}
	u, _ := h.Unified()
	if u.Parent != "/system.slice" || !strings.Contains(u.Note, "no-internal-processes") {
		t.Fatalf("task cgroups below %q (%s); want beside the agent, below /system.slice", u.Parent, u.Note)
	}
	if !slices.Equal(u.Controllers, []Controller{CPU, Memory, Pids}) || !slices.Equal(u.Enabled, []Controller{Memory, Pids}) {
		t.Fatalf("controllers %v, enabled %v", u.Controllers, u.Enabled)
	}
	if !u.Kill || !u.Freeze || !u.Events || h.KillMethod() != "cgroup.kill" {
		t.Fatalf("kill %v freeze %v events %v, method %q", u.Kill, u.Freeze, u.Events, h.KillMethod())
	}
	loc, err := LocationFor(h, "web", "abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	if got := loc.String(); got != "tether-cgroup:1;unified=/system.slice/tether-web@abcdefgh" {
		t.Fatalf("location %s", got)
	}
	// cpuset is not in /system.slice's cgroup.controllers: cores cannot be
	// enforced, and the error says so before anything is made.
	_, err = Create(h, loc, Limits{Memory: 64, Cores: 1})
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrNoController) || le.Limit != "cores" || le.Controller != CPUSet ||
		!strings.Contains(err.Error(), "/system.slice cannot enable it") {
		t.Fatalf("Create with cores on a host without cpuset = %v", err)
	}
	if _, err := os.Stat(e.root + "/cg/system.slice/tether-web@abcdefgh"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Create made its directory: %v", err)
	}
}

// TestProbe_PureV2Root: a process at the real root (no cgroup.events
// there) nests task cgroups below it; in a cgroup namespace's root, which
// holds processes, no controller can be enabled and limits are refused.
func TestProbe_PureV2Root(t *testing.T) {
	files := map[string]string{
		"/cgroup.controllers":     "cpuset cpu memory pids",
		"/cgroup.subtree_control": "",
		"/cgroup.procs":           "1\n",
	}
	e := layout(t, "30 23 0:26 / @ROOT@/cg rw - cgroup2 cgroup2 rw\n", "0::/\n", files)
	h, err := e.probe()
	if err != nil {
		t.Fatal(err)
	}
	u, _ := h.Unified()
	if u.Parent != "/" || !slices.Equal(u.Controllers, []Controller{CPU, CPUSet, Memory, Pids}) || u.Note != "" {
		t.Fatalf("real root: parent %s, controllers %v, note %q", u.Parent, u.Controllers, u.Note)
	}
	// With no cgroup below the root to look at, the kernel version decides.
	if !u.Kill || !u.Freeze {
		t.Fatalf("kernel 6.1: kill %v freeze %v", u.Kill, u.Freeze)
	}

	files["/cgroup.events"] = "populated 1\nfrozen 0\n"
	e = layout(t, "30 23 0:26 / @ROOT@/cg rw - cgroup2 cgroup2 rw\n", "0::/\n", files)
	if h, err = e.probe(); err != nil {
		t.Fatal(err)
	}
	u, _ = h.Unified()
	if u.Parent != "/" || len(u.Controllers) != 0 || !strings.Contains(u.Note, "namespace") {
		t.Fatalf("namespace root: parent %s, controllers %v, note %q", u.Parent, u.Controllers, u.Note)
	}
	if _, why, ok := h.For(Memory); ok || !strings.Contains(why, "leaf cgroup") {
		t.Fatalf("memory in a namespace root: %v %q", ok, why)
	}
}

// TestProbe_V1 reads a pure v1 layout with co-mounted cpu,cpuacct, a
// bind-mounted subtree (a container's view) and a read-only mount.
func TestProbe_V1(t *testing.T) {
	e := layout(t, strings.Join([]string{
		"25 24 0:22 / @ROOT@/cg/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct",
		"26 24 0:23 /docker/abc @ROOT@/cg/memory rw,nosuid - cgroup cgroup rw,memory",
		"27 24 0:24 / @ROOT@/cg/freezer ro,nosuid - cgroup cgroup ro,freezer",
		"28 24 0:25 / @ROOT@/cg/systemd rw - cgroup cgroup rw,xattr,name=systemd",
		"29 24 0:26 / @ROOT@/cg/net rw - cgroup cgroup rw,net_cls,net_prio",
		"",
	}, "\n"),
		"5:net_cls,net_prio:/\n4:name=systemd:/user.slice\n3:freezer:/\n2:memory:/docker/abc/sub\n1:cpu,cpuacct:/user.slice\n",
		map[string]string{"/cpu,cpuacct/user.slice/cgroup.procs": "", "/memory/sub/cgroup.procs": "", "/freezer/cgroup.procs": ""})
	h, err := e.probe()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", h)
	if h.Layout != LayoutV1 || len(h.Hierarchies) != 3 {
		t.Fatalf("layout %s: %+v", h.Layout, h.Hierarchies)
	}
	cpu, _, ok := h.For(CPUAcct)
	if !ok || cpu.Key != "cpu,cpuacct" || cpu.Parent != "/user.slice" {
		t.Fatalf("cpuacct: %+v", cpu)
	}
	mem, _, _ := h.For(Memory)
	if d, _ := mem.dir(mem.Parent); d != e.root+"/cg/memory/sub" {
		t.Fatalf("memory dir %s (mount root /docker/abc)", d)
	}
	if err := h.Usable(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("Usable with a read-only freezer = %v", err)
	}
	if h.KillMethod() != "freezer" {
		t.Fatalf("kill method %q", h.KillMethod())
	}
	loc, err := LocationFor(h, "web", "abcdefgh")
	if err != nil {
		t.Fatal(err)
	}
	want := "tether-cgroup:1;cpu,cpuacct=/user.slice/tether-web@abcdefgh;freezer=/tether-web@abcdefgh;memory=/docker/abc/sub/tether-web@abcdefgh"
	if loc.String() != want {
		t.Fatalf("location\n got %s\nwant %s", loc, want)
	}
	if _, why, ok := h.Without("freezer").For(Freezer); ok || !strings.Contains(why, "no cgroup2") {
		t.Fatalf("freezer without its hierarchy: %q", why)
	}
	if err := h.Without("freezer").Usable(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no way to kill") {
		t.Fatalf("Usable without a freezer = %v", err)
	}
}

func TestHost_UsableReasons(t *testing.T) {
	h := testHost()
	if err := h.Usable(); err != nil {
		t.Fatal(err)
	}
	if err := (Host{}).Usable(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no cgroup hierarchy") {
		t.Fatalf("empty host: %v", err)
	}
	h.UID = 1000
	h.Hierarchies[1].Writable = false
	if err := h.Usable(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not root (uid 1000)") ||
		!strings.Contains(err.Error(), "/sys/fs/cgroup/freezer") {
		t.Fatalf("unwritable: %v", err)
	}
	if _, err := Create(h, Location{}, Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create on an unusable host = %v", err)
	}
}

func TestParseMountinfo_Escapes(t *testing.T) {
	ms, err := parseMountinfo([]byte("30 23 0:26 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n40 1 0:3 / /proc rw - proc proc rw\n"))
	if err != nil || len(ms) != 1 || ms[0].point != "/mnt/with space" || ms[0].fstype != "cgroup2" {
		t.Fatalf("%+v %v", ms, err)
	}
	if _, err := parseMountinfo([]byte("garbage\n")); err == nil {
		t.Fatal("garbage mountinfo accepted")
	}
	if _, err := parseProcCgroup([]byte("garbage\n")); err == nil {
		t.Fatal("garbage /proc cgroup accepted")
	}
}
