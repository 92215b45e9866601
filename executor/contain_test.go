//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	hostspec "github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// taskCgroup opens the cgroup an executor announced, checking that it
// names the task (its directory) and the nonce.
func taskCgroup(t *testing.T, h cgroup.Host, id fsm.Identity) *cgroup.Cgroup {
	t.Helper()
	if id.Cgroup == "" {
		t.Fatalf("the executor announced no cgroup: %+v", id)
	}
	cg, err := cgroup.OpenRecorded(h, id.Cgroup, filepath.Base(filepath.Dir(id.Socket)), id.Nonce)
	if err != nil {
		t.Fatalf("the announced cgroup is not the task's: %v", err)
	}
	return cg
}

// checkGone fails unless every directory of cg is gone.
func checkGone(t *testing.T, cg *cgroup.Cgroup) {
	t.Helper()
	for key, d := range cg.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the task's %s cgroup %s is still there (%v)", key, d, err)
		}
	}
}

func alivePID(pid int, start uint64) bool {
	ok, err := proc.Alive(fsm.Identity{PID: pid, StartTime: start})
	return err == nil && ok
}

// TestContain_CgroupLifecycle: the executor announces its task's cgroup
// before anything exists, creates it with the limits at launch, has the
// task inside it from its first instruction, answers stats from it, and
// removes it before it writes the exit status.
func TestContain_CgroupLifecycle(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "web")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	id := c.Identity()
	cg := taskCgroup(t, h, id)
	for key, d := range cg.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the %s cgroup exists before the launch: %v", key, err)
		}
	}
	if _, err := c.Stats(ctx); !errors.Is(err, wire.ErrNotLaunched) {
		t.Errorf("stats before launch: %v, want ErrNotLaunched", err)
	}
	spec := m.taskSpec(t, "serve", "-ready", readyPath, "-on-term", "0")
	spec.Resources = fsm.Resources{MemoryMB: 64, PIDs: 50}
	st, err := c.Launch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Warnings) != 0 {
		t.Errorf("warnings with a cgroup: %v", st.Warnings)
	}
	readLine(t, ready)
	procs, err := cg.Procs()
	if err != nil || len(procs) != 1 || procs[0] != st.PID {
		t.Fatalf("cgroup members %v (%v), want the task %d alone", procs, err, st.PID)
	}
	own, err := cgroup.ProcCgroups(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range cg.Location().Paths() {
		if own[key] != p {
			t.Errorf("the task's %s cgroup is %q, want %q", key, own[key], p)
		}
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Pids < 1 || stats.MemoryBytes == 0 {
		t.Errorf("stats %+v: want the task's memory and pids", stats)
	}
	if mem, ok := cg.Dirs()["memory"]; ok {
		if b, _ := os.ReadFile(mem + "/memory.limit_in_bytes"); strings.TrimSpace(string(b)) != strconv.Itoa(64<<20) {
			t.Errorf("memory.limit_in_bytes = %q, want 64 MB", b)
		}
	}
	x, err := c.Stop(ctx, syscall.SIGTERM, 5*time.Second)
	if err != nil || x.Code != 0 || x.OOM {
		t.Fatalf("Stop = %+v %v, want exit code 0", x, err)
	}
	waitDead(t, c.Identity()) // it removes the cgroup after it answered
	checkGone(t, cg)
	waitDead(t, c.Identity()) // the record is written after the waiters are answered
	rec, ok, err := wire.ReadExitRecord(dir)
	if err != nil || !ok || rec.Exit != x {
		t.Fatalf("exit record %+v %v %v", rec, ok, err)
	}
}

// TestContain_DismissAfterAnEmptiedEnd: the executor answers a stop once
// its task's cgroup is empty and removed (Status.Emptied), so the driver
// that has the answer kills nothing of the task and ends the executor at
// once (Dismiss), without waiting for its exit record.
func TestContain_DismissAfterAnEmptiedEnd(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	id := c.Identity()
	cg := taskCgroup(t, h, id)
	if _, err := c.Launch(ctx, m.taskSpec(t, "sleep")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx); err != nil || st.Emptied {
		t.Fatalf("a running task's status %+v %v: Emptied", st, err)
	}
	st, err := c.stop(ctx, syscall.SIGKILL, 0)
	if err != nil || !st.Over() || !st.Emptied {
		t.Fatalf("stop = %+v %v, want over and emptied", st, err)
	}
	checkGone(t, cg) // before the answer, not after
	if err := c.Dismiss(ctx); err != nil {
		t.Fatalf("Dismiss: %v", err)
	}
	if alive, err := proc.Alive(id); err != nil || alive {
		t.Fatalf("executor alive after Dismiss (%v)", err)
	}
	if err := c.Dismiss(ctx); err != nil {
		t.Errorf("a second Dismiss: %v", err)
	}
	checkLeaks(t, m)
}

// TestContain_DescendantsKilledWhenTaskExits: a task whose setsid'd,
// double-forked descendant outlives it; the executor kills the descendant
// through the cgroup before it answers Wait.
func TestContain_DescendantsKilledWhenTaskExits(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	fpath, f := fifo(t, dir, "pid")
	c := spawn(t, m, dir)
	cg := taskCgroup(t, h, c.Identity())
	if _, err := c.Launch(ctx, m.taskSpec(t, "escape-wait", fpath)); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(readLine(t, f))
	if err != nil {
		t.Fatal(err)
	}
	start, _ := proc.StartTime(pid)
	x, err := c.Wait(ctx)
	if err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	if start != 0 && alivePID(pid, start) {
		t.Fatalf("the setsid'd orphan %d outlived its task's Wait", pid)
	}
	waitDead(t, c.Identity()) // it removes the cgroup after it answered
	checkGone(t, cg)
}

// TestContain_StopKillsTheWholeCgroup: a raw_exec task with a descendant in
// a session of its own; Stop (its signal ignored) kills everything.
func TestContain_StopKillsTheWholeCgroup(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	readyPath, ready := fifo(t, dir, "ready")
	c := spawn(t, m, dir)
	cg := taskCgroup(t, h, c.Identity())
	if _, err := c.Launch(ctx, m.taskSpec(t, "serve", "-ready", readyPath, "-kids", "2", "-escapee", "-ignore-term")); err != nil {
		t.Fatal(err)
	}
	readLine(t, ready)
	procs, _ := cg.Procs()
	if len(procs) != 4 {
		t.Fatalf("cgroup members %v, want the task, two kids and the escapee", procs)
	}
	x, err := c.Stop(ctx, syscall.SIGTERM, 100*time.Millisecond)
	if err != nil || x.Signal != int(syscall.SIGKILL) {
		t.Fatalf("Stop = %+v %v, want killed", x, err)
	}
	assertNoMarked(t, m)
	waitDead(t, c.Identity()) // it removes the cgroup after it answered
	checkGone(t, cg)
}

// TestContain_OOMKilledRecorded: a task that touches 400 MB under memory =
// 64 is killed by the kernel's OOM killer, and its exit status says so.
func TestContain_OOMKilledRecorded(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	spec := m.taskSpec(t, "alloc", "400")
	spec.Resources = fsm.Resources{MemoryMB: 64}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	x, err := c.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x.Signal != int(syscall.SIGKILL) || !x.OOM {
		t.Fatalf("exit %+v, want SIGKILL and OOM", x)
	}
	waitDead(t, c.Identity()) // the record is written after the waiters are answered
	rec, ok, err := wire.ReadExitRecord(filepath.Dir(c.Identity().Socket))
	if err != nil || !ok || !rec.Exit.OOM {
		t.Fatalf("exit record %+v %v %v: want OOM", rec, ok, err)
	}
	if out := readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile)); strings.Contains(out, "survived") {
		t.Fatal("the task survived touching 400 MB under a 64 MB limit")
	}
}

// TestContain_PidsLimit: under pids = 20 a task that forks 100 children
// gets fewer than 20 of them, and the cgroup never holds more than 20
// tasks.
func TestContain_PidsLimit(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(cgroup.Pids); !ok {
		t.Skipf("needs the pids controller: %s", why)
	}
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	fpath, f := fifo(t, dir, "report")
	c := spawn(t, m, dir)
	spec := m.taskSpec(t, "forker", "100", fpath)
	spec.Env["GOMAXPROCS"], spec.Env["GOGC"] = "1", "off"
	spec.Resources = fsm.Resources{PIDs: 20}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var ok, failed, errno int
	if _, err := fmt.Sscan(readLine(t, f), &ok, &failed, &errno); err != nil {
		t.Fatal(err)
	}
	t.Logf("pids = 20: %d of 100 forks worked, %d refused (%v)", ok, failed, syscall.Errno(errno))
	if ok+failed != 100 || ok == 0 || ok >= 20 || syscall.Errno(errno) != syscall.EAGAIN {
		t.Fatalf("forked %d, refused %d (errno %v): want some forks, then EAGAIN", ok, failed, syscall.Errno(errno))
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids > 20 {
		t.Fatalf("the cgroup holds %d tasks under pids = 20", st.Pids)
	}
	cg := taskCgroup(t, h, c.Identity())
	if procs, _ := cg.Procs(); len(procs) != ok+1 {
		t.Fatalf("%d processes in the cgroup, want the forker and its %d children", len(procs), ok)
	}
	if _, err := c.Stop(ctx, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	waitDead(t, c.Identity()) // it removes the cgroup after it answered
	checkGone(t, cg)
}

// TestContain_DirectStartLeavesNoThreadBehind: a raw_exec task is forked
// by an executor thread that moved itself into the task's cgroups (no init
// shim): the task is in every hierarchy of its cgroup from the start, and
// every thread of the executor is back in the executor's own cgroups (a
// thread left in the task's cgroup would be killed with it, and count
// against its limits).
func TestContain_DirectStartLeavesNoThreadBehind(t *testing.T) {
	h := needCgroups(t)
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	id := c.Identity()
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", id.PID))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Launch(ctx, m.taskSpec(t, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	cg := taskCgroup(t, h, id)
	procs, err := cg.Procs()
	if err != nil || len(procs) != 1 || procs[0] != st.PID {
		t.Fatalf("cgroup members %v (%v), want the task %d alone", procs, err, st.PID)
	}
	mine, err := cgroup.ProcCgroups(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range cg.Location().Paths() {
		if mine[key] != p {
			t.Errorf("the task's %s cgroup is %q, want %q", key, mine[key], p)
		}
	}
	threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", id.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range threads {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/cgroup", id.PID, th.Name()))
		if err == nil && string(b) != string(own) {
			t.Errorf("executor thread %s is in\n%s\nnot the executor's own\n%s", th.Name(), b, own)
		}
	}
	if _, err := c.Stop(ctx, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	waitDead(t, c.Identity()) // it removes the cgroup after it answered
	checkGone(t, cg)
}

// TestContain_PidsOfOneStartsThroughTheShim: under pids = 1 the executor's
// forking thread and the task cannot both be in the cgroup, so the start
// falls back to the init shim, which joins it and execs the task: the task
// runs in its cgroup, alone under the limit.
func TestContain_PidsOfOneStartsThroughTheShim(t *testing.T) {
	h := needCgroups(t)
	pidsH, why, ok := h.For(cgroup.Pids)
	if !ok {
		t.Skipf("needs the pids controller: %s", why)
	}
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	cg := taskCgroup(t, h, c.Identity())
	pidsMax := cg.Dirs()[pidsH.Key] + "/pids.max"
	// Builtins only: under pids = 1 the shell cannot fork.
	spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/sh", Args: []string{"-c", `while read -r l; do echo "$l"; done </proc/self/cgroup; read -r max <"$0"; echo "max $max"`, pidsMax}, Resources: fsm.Resources{PIDs: 1}}}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v\n%s", x, err, readFileString(t, filepath.Join(dir, statedir.StderrFile)))
	}
	out := readFileString(t, filepath.Join(dir, statedir.StdoutFile))
	want := cg.Location().Paths()[pidsH.Key]
	if !strings.Contains(out, ":"+pidsH.Key+":"+want+"\n") || !strings.HasSuffix(out, "max 1\n") {
		t.Fatalf("the task printed %q: want its pids cgroup %s and pids.max 1", out, want)
	}
	if log := readFileString(t, filepath.Join(dir, statedir.LogFile)); !strings.Contains(log, "starting the task through the init shim") {
		t.Errorf("the executor did not fall back to the shim:\n%s", log)
	}
}

// TestContain_OOMScoreAdj: a task does not inherit its executor's
// oom_score_adj (Nomad issue 10663): 0 unless it sets one.
func TestContain_OOMScoreAdj(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	old, err := cgroup.OOMScoreAdj(0)
	if err != nil {
		t.Fatal(err)
	}
	// The executor inherits this process's value, as an agent's would
	// (-900 needs CAP_SYS_RESOURCE; without it a raised value stands in).
	from := -900
	if err := cgroup.SetOOMScoreAdj(from); err != nil {
		t.Logf("no CAP_SYS_RESOURCE here (%v): starting from 500", err)
		from = 500
		if err := cgroup.SetOOMScoreAdj(from); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = cgroup.SetOOMScoreAdj(old) })
	adj := 250
	for _, tc := range []struct {
		set  *int
		want string
	}{{nil, "0"}, {&adj, "250"}} {
		c := spawn(t, m, "")
		spec := m.taskSpec(t, "oomadj")
		spec.OOMScoreAdj = tc.set
		if _, err := c.Launch(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
			t.Fatalf("Wait = %+v %v", x, err)
		}
		if out := strings.TrimSpace(readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))); out != tc.want {
			t.Errorf("oom_score_adj %q under an executor at %d (spec %v), want %s", out, from, tc.set, tc.want)
		}
	}
}

// TestCheckSpec_HostDecisions: what a host without cgroups, or without a
// controller, refuses before anything is spawned, each error naming why.
func TestCheckSpec_HostDecisions(t *testing.T) {
	h, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	none := fmt.Errorf("%w: not root and no delegation", cgroup.ErrUnavailable)
	raw := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true"}}
	exec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}}
	withMem := raw
	withMem.Resources = fsm.Resources{MemoryMB: 64}
	for _, tc := range []struct {
		name     string
		spec     wire.Launch
		h        cgroup.Host
		noCgroup error
		want     error
		mention  string
	}{
		{"raw_exec without cgroups runs", raw, cgroup.Host{}, none, nil, ""},
		{"exec without cgroups is refused", exec, cgroup.Host{}, none, wire.ErrNoCgroup, "not root and no delegation"},
		{"a limit without cgroups is refused", withMem, cgroup.Host{}, none, wire.ErrNoCgroup, "resources"},
		{"a limit without its controller names it", withMem, h.Without("memory"), nil, wire.ErrLimit, "memory controller"},
		{"an unknown user", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", User: "tether-no-such-user"}}, h, nil, wire.ErrUnknownUser, "tether-no-such-user"},
		{"net_raw outside the allow list", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true", CapAdd: []string{"net_raw"}}}, h, nil, wire.ErrCapNotAllowed, "net_raw"},
		{"pid_mode on raw_exec", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", PIDMode: "host"}}, h, nil, fsm.ErrInvalidSpec, "pid_mode"},
		{"a chroot entry in a reserved place", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}, Policy: wire.Policy{Chroot: []string{"/usr:/proc"}}}, h, nil, wire.ErrBadSpec, "/proc"},
		{"more cores than the host gives tasks", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", Resources: fsm.Resources{Cores: 4096}}}, h, nil, wire.ErrLimit, "but this host gives tasks"},
		{"a chroot entry that does not exist", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}, Policy: wire.Policy{Chroot: []string{"/nonexistent-tether"}}}, h, nil, wire.ErrBadSpec, "nonexistent-tether"},
		{"seccomp unconfined without the operator", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true", Seccomp: "unconfined"}}, h, nil, wire.ErrSeccompNotAllowed, "--allow-seccomp unconfined"},
		{"a profile the operator allowed another of", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true", Seccomp: "/etc/a.json"}, Policy: wire.Policy{AllowSeccomp: []string{"/etc/b.json"}}}, h, nil, wire.ErrSeccompNotAllowed, "/etc/a.json"},
		{"network none on raw_exec", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/true", Network: fsm.NetworkNone}}, h, nil, fsm.ErrInvalidSpec, "network mode"},
		{"a bad opt-out", wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}, Policy: wire.Policy{AllowMissing: []string{"seccomp"}}}, h, nil, wire.ErrBadSpec, "--allow-seccomp unconfined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == nil && os.Geteuid() != 0 && tc.spec.Driver == wire.ModeExec {
				t.Skip("exec needs root")
			}
			// What the executor checks at launch: the spec's values,
			// then the host.
			err := tc.spec.Spec.Validate()
			if err == nil {
				_, err = hostspec.Check(tc.spec, tc.h, tc.noCgroup, hostspec.Features{})
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("checkSpec = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("checkSpec = %v, want %v mentioning %q", err, tc.want, tc.mention)
			}
		})
	}
}

// unprivReport is what the unprivileged driver helper saw.
type unprivReport struct {
	Cgroup   string
	ExecErr  string
	ExecCode string
	Warnings []fsm.Warning
	Exit     fsm.ExitStatus
	Err      string
}

// TestContain_UnprivilegedExecutor: an executor that cannot make cgroups
// (uid 65534, no delegation) announces none, refuses exec saying why, and
// runs raw_exec uncontained with one warning in its log and its launch
// reply.
func TestContain_UnprivilegedExecutor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the executor as uid 65534")
	}
	m := newMarker(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "unpriv")
	copyFile(t, testBinary(t), bin)
	dir := filepath.Join(base, "task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "unpriv", m.arg(), dir)
	cmd.Env = append(os.Environ(), m.env())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("unprivileged helper: %v: %s", err, out)
	}
	var r unprivReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	if r.Err != "" {
		t.Fatal(r.Err)
	}
	if r.Cgroup != "" {
		t.Errorf("an unprivileged executor announced cgroup %q", r.Cgroup)
	}
	if r.ExecErr == "" || !strings.Contains(r.ExecErr, "exec needs root") {
		t.Errorf("exec launch: %q, want a refusal saying exec needs root", r.ExecErr)
	}
	if len(r.Warnings) != 1 || r.Warnings[0].Kind != fsm.WarnUncontained || !strings.Contains(r.Warnings[0].Text, "uncontained") || !strings.Contains(r.Warnings[0].Text, "not root") {
		t.Errorf("raw_exec warnings %v, want one saying it runs uncontained and why", r.Warnings)
	}
	if r.Exit.Code != 0 {
		t.Errorf("raw_exec exit %+v", r.Exit)
	}
	log := readFileString(t, filepath.Join(dir, statedir.LogFile))
	if n := strings.Count(log, "runs uncontained"); n != 1 {
		t.Errorf("the executor log has %d warnings about running uncontained, want 1:\n%s", n, log)
	}
}

// runUnpriv is the unprivileged driver helper: spawn an executor in dir,
// launch an exec task (refused), then a raw_exec task, and report.
func runUnpriv(dir string) int {
	var r unprivReport
	defer func() {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}()
	ctx, cancel := testCtxBackground()
	defer cancel()
	self, _ := os.Executable()
	c, err := Spawn(ctx, SpawnConfig{Command: []string{self, "executor", os.Args[2]}, TaskDir: dir, Nonce: "unprivileged-nonce"})
	if err != nil {
		r.Err = err.Error()
		return 0
	}
	defer c.Close()
	r.Cgroup = c.Identity().Cgroup
	if _, err := c.Launch(ctx, wire.Launch{Spec: fsm.Spec{Driver: wire.ModeExec, Command: "/bin/true"}}); err != nil {
		r.ExecErr = err.Error()
	}
	st, err := c.Launch(ctx, wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: self, Args: []string{"task", os.Args[2], "exit", "0"}}})
	if err != nil {
		r.Err = err.Error()
		return 0
	}
	r.Warnings = st.Warnings
	if r.Exit, err = c.Wait(ctx); err != nil {
		r.Err = err.Error()
	}
	// The executor writes its exit record after it answered the wait.
	if err := c.WaitDead(ctx); err != nil && r.Err == "" {
		r.Err = err.Error()
	}
	return 0
}
