//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	hostspec "github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// stateLayout is a state directory as the driver lays it out: the store
// file and one directory per task under tasks/, with the test's task "a"
// and a neighbour "b" holding a file.
type stateLayout struct {
	state, store, dir, other string
}

func newStateLayout(t *testing.T) stateLayout {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	l := stateLayout{state: state, store: filepath.Join(state, "tether.db"),
		dir: filepath.Join(state, "tasks", "a"), other: filepath.Join(state, "tasks", "b")}
	for _, d := range []string{state, filepath.Join(state, "tasks"), l.other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.store, []byte("the store"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.other, "data"), []byte("b's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// inspectExec runs an inspect task of spec and returns what it saw.
func inspectExec(t *testing.T, c *Client, spec wire.Launch) inspectReport {
	t.Helper()
	ctx := testCtx(t)
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v\nstderr: %s", x, err, readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StderrFile)))
	}
	out := readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	return r
}

// hostMountsMention lists the host's mount points under dir.
func hostMountsMention(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(l, dir) {
			out = append(out, l)
		}
	}
	return out
}

// TestExec_IsolatedView checks an exec task from the inside: it sees only
// its own processes, runs as nobody in its own directory, holds no
// capability at all (every set empty, the bounding set too), has no new
// privileges and a seccomp filter, cannot read /etc/shadow, sees neither
// the state directory nor the store, and has PATH, HOME and the task
// variables. Its mounts never reach the host's mount table, during its run
// or after.
func TestExec_IsolatedView(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	l := newStateLayout(t)
	c := spawn(t, m, l.dir)
	spec := m.execSpec(t, "inspect", "/etc/shadow", "/etc/passwd", l.state, l.store, l.other, filepath.Join(l.dir, statedir.IdentityFile), "/local")
	spec.Name = "web"
	r := inspectExec(t, c, spec)
	if r.UID != 65534 || r.GID != 65534 {
		t.Errorf("uid %d gid %d, want nobody (65534)", r.UID, r.GID)
	}
	if r.Self != 1 || !slices.Equal(r.PIDs, []int{1}) {
		t.Errorf("the task is pid %d and sees pids %v; want pid 1 alone", r.Self, r.PIDs)
	}
	if r.Cwd != "/local" {
		t.Errorf("working directory %q, want /local", r.Cwd)
	}
	if r.CapEff != 0 || r.CapPrm != 0 || r.CapInh != 0 || r.CapAmb != 0 || r.CapBnd != 0 {
		t.Errorf("nobody holds capabilities: CapEff %x CapPrm %x CapInh %x CapAmb %x CapBnd %x, want none",
			r.CapEff, r.CapPrm, r.CapInh, r.CapAmb, r.CapBnd)
	}
	if r.NoNewPrivs != "1" || r.Seccomp != "2" {
		t.Errorf("NoNewPrivs %q Seccomp %q, want 1 and 2 (a filter)", r.NoNewPrivs, r.Seccomp)
	}
	for p, wantReadable := range map[string]bool{
		"/etc/shadow": false, "/etc/passwd": true, "/local": false, // local is empty
		l.state: false, l.store: false, l.other: false, filepath.Join(l.dir, statedir.IdentityFile): false,
	} {
		if got := r.Readable[p] == ""; got != wantReadable {
			t.Errorf("%s readable=%v (%s), want %v", p, got, r.Readable[p], wantReadable)
		}
	}
	for k, want := range map[string]string{
		"PATH": hostspec.DefaultPath, "HOME": "/local", "TETHER_TASK_ID": "a", "TETHER_TASK_NAME": "web", "TETHER_TASK_DIR": "/local",
		"TASK_VAR": "task-value",
	} {
		if r.Env[k] != want {
			t.Errorf("%s=%q, want %q", k, r.Env[k], want)
		}
	}
	for _, p := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/local", "/secrets", "/tmp", "/alloc", "/usr", "/etc"} {
		if !slices.Contains(r.MountInfo, p) {
			t.Errorf("no %s mount in the task's mount table %v", p, r.MountInfo)
		}
	}
	if leaked := hostMountsMention(t, l.dir); len(leaked) > 0 {
		t.Errorf("the task's mounts are in the host's mount table:\n%s", strings.Join(leaked, "\n"))
	}
	fi, err := os.Stat(filepath.Join(l.dir, statedir.SecretsDir))
	if err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("secrets/: %v %v, want 0700 owned by nobody", fi.Mode(), err)
	}
}

// TestExec_CapDropAllAddChown: cap_drop = ["all"] with cap_add = ["chown"]
// is exactly CAP_CHOWN, as Nomad computes it, for a root task and for
// nobody alike (ambient for nobody, so that it survives the exec).
func TestExec_CapDropAllAddChown(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	for _, user := range []string{"", "root"} {
		c := spawn(t, m, "")
		spec := m.execSpec(t, "inspect")
		spec.CapDrop, spec.CapAdd, spec.User = []string{"all"}, []string{"chown"}, user
		r := inspectExec(t, c, spec)
		want := uint64(1) << uint(capability.CAP_CHOWN)
		if r.CapEff != want || r.CapPrm != want || r.CapBnd != want {
			t.Errorf("user %q: CapEff %x CapPrm %x CapBnd %x, want exactly CAP_CHOWN (%x)", user, r.CapEff, r.CapPrm, r.CapBnd, want)
		}
		if wantAmb := map[string]uint64{"": want, "root": 0}[user]; r.CapAmb != wantAmb {
			t.Errorf("user %q: CapAmb %x, want %x", user, r.CapAmb, wantAmb)
		}
	}
}

// TestExec_Capabilities: a non-root task holds exactly what its cap_add
// names (checked against the allow list), whatever the allow list holds
// and whatever it drops; a root task keeps Nomad's rule (the allow list's
// part of Nomad's default set, minus cap_drop, plus cap_add). Every set
// is read from inside, with no_new_privs and the filter.
func TestExec_Capabilities(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	bit := func(cs ...capability.Cap) uint64 { return hostspec.CapMask(cs) }
	def, _ := hostspec.ResolveCaps(nil, nil, nil)
	for _, tc := range []struct {
		name      string
		user      string
		add, drop []string
		allowed   []string
		eff, amb  uint64
	}{
		{name: "nobody, nothing named", eff: 0},
		{name: "nobody, every capability allowed", allowed: []string{"all"}, eff: 0},
		{name: "nobody, net_bind_service", add: []string{"net_bind_service"}, eff: bit(capability.CAP_NET_BIND_SERVICE), amb: bit(capability.CAP_NET_BIND_SERVICE)},
		{name: "a named user, kill and chown", user: "daemon", add: []string{"kill", "CAP_CHOWN"}, drop: []string{"kill"}, eff: bit(capability.CAP_KILL, capability.CAP_CHOWN), amb: bit(capability.CAP_KILL, capability.CAP_CHOWN)},
		{name: "root, the default", user: "root", eff: hostspec.CapMask(def)},
		{name: "root, drop setuid", user: "root", drop: []string{"setuid"}, eff: hostspec.CapMask(def) &^ bit(capability.CAP_SETUID)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := spawn(t, m, "")
			spec := m.execSpec(t, "inspect")
			spec.User, spec.CapAdd, spec.CapDrop, spec.AllowedCaps = tc.user, tc.add, tc.drop, tc.allowed
			r := inspectExec(t, c, spec)
			if r.CapEff != tc.eff || r.CapPrm != tc.eff || r.CapBnd != tc.eff || r.CapAmb != tc.amb {
				t.Errorf("CapEff %x CapPrm %x CapBnd %x CapAmb %x, want %x %x %x %x", r.CapEff, r.CapPrm, r.CapBnd, r.CapAmb, tc.eff, tc.eff, tc.eff, tc.amb)
			}
			if r.CapInh != tc.eff {
				t.Errorf("CapInh %x, want %x", r.CapInh, tc.eff)
			}
			if r.NoNewPrivs != "1" || r.Seccomp != "2" {
				t.Errorf("NoNewPrivs %q Seccomp %q, want 1 and 2", r.NoNewPrivs, r.Seccomp)
			}
		})
	}
}

// TestExec_StateDirHiddenInsideABind: a chroot entry that would show the
// state directory (here the directory above it) has it covered.
func TestExec_StateDirHiddenInsideABind(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	l := newStateLayout(t)
	c := spawn(t, m, l.dir)
	spec := m.execSpec(t, "inspect", "/data/state", "/data/state/tether.db", "/data/state/tasks/b/data")
	spec.Chroot = append(spec.Chroot, filepath.Dir(l.state)+":/data")
	r := inspectExec(t, c, spec)
	for _, p := range []string{"/data/state", "/data/state/tether.db", "/data/state/tasks/b/data"} {
		if r.Readable[p] == "" {
			t.Errorf("%s is readable inside the task", p)
		}
	}
}

// TestExec_HostileTask: an exec task trying to reach the store, another
// task's files and its own executor (its files, its socket, its pid) and
// the host's kernel, as nobody and as root with the default capabilities,
// gets nowhere.
func TestExec_HostileTask(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	// A descriptor of the host's / that the executor inherits, as an
	// agent's or a shell's file without close-on-exec would be: it must
	// not reach the task (the hostile task tries to read the store
	// through it).
	rootFD, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rootFD) })
	for _, user := range []string{"", "root"} {
		t.Run("user="+user, func(t *testing.T) {
			l := newStateLayout(t)
			ctx := testCtx(t)
			c := spawn(t, m, l.dir)
			id := c.Identity()
			tg, _ := json.Marshal(hostileTargets{Store: l.store, OtherTask: l.other, SideFile: filepath.Join(l.dir, statedir.IdentityFile),
				Socket: id.Socket, ExecutorPID: id.PID})
			spec := m.execSpec(t, "hostile", string(tg))
			spec.User = user
			if _, err := c.Launch(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
				t.Fatalf("Wait = %+v %v", x, err)
			}
			var r hostileReport
			out := readFileString(t, filepath.Join(l.dir, statedir.StdoutFile))
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("report %q: %v", out, err)
			}
			if len(r) < 10 {
				t.Fatalf("report %v has too few attempts", r)
			}
			if w := r.worked(); len(w) > 0 {
				t.Errorf("a hostile task (user %q) managed: %s\n%v", user, strings.Join(w, "; "), r)
			}
			if b, _ := os.ReadFile(l.store); string(b) != "the store" {
				t.Errorf("the store was changed: %q", b)
			}
			if _, err := os.Stat(filepath.Join(l.other, "planted")); err == nil {
				t.Error("a file was planted in another task's directory")
			}
			if _, err := wire.ReadIdentity(l.dir); err != nil {
				t.Errorf("the identity file: %v", err)
			}
			t.Logf("user %q: %v", user, r)
		})
	}
}

// TestExec_PIDModeHost: pid_mode = "host" shares the host's PID namespace.
func TestExec_PIDModeHost(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	spec := m.execSpec(t, "inspect")
	spec.PIDMode = wire.ModeHost
	spec.AllowHostNamespaces = []string{"pid"} // the operator's word (--allow-host-namespaces)
	r := inspectExec(t, c, spec)
	if r.Self == 1 || !slices.Contains(r.PIDs, os.Getpid()) {
		t.Errorf("pid_mode host: the task is pid %d and does not see the test (pid %d)", r.Self, os.Getpid())
	}
}

// TestExec_StopOfAnInitThatIgnoresSIGTERM: the task is its PID namespace's
// init, which the kernel shields from signals it has no handler for. A
// task that handles SIGTERM gets it and exits as it chooses; one that does
// not (and is alone) is killed at once rather than after the grace.
func TestExec_StopOfAnInitThatIgnoresSIGTERM(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		spec func(ready string) wire.Launch
		want int // exit code, or -signal
	}{
		{"handles SIGTERM", func(ready string) wire.Launch {
			return m.execSpec(t, "serve", "-ready", ready, "-on-term", "3")
		}, 3},
		// sleep installs no handler (a Go task would: the runtime
		// catches SIGTERM, and exits 2 when it cannot die of it).
		{"no handler", func(ready string) wire.Launch {
			s := m.execSpec(t, "unused")
			s.Command, s.Args = "/bin/sh", []string{"-c", "echo ready > " + ready + "; exec sleep 1000", string(m)}
			return s
		}, -int(syscall.SIGKILL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "task")
			_, ready, f := execFifo(t, dir, "ready")
			c := spawn(t, m, dir)
			if _, err := c.Launch(ctx, tc.spec(ready)); err != nil {
				t.Fatal(err)
			}
			readLine(t, f)
			x, err := c.Stop(ctx, syscall.SIGTERM, time.Minute) // the grace never runs out in this test
			if err != nil {
				t.Fatal(err)
			}
			got := x.Code
			if x.Signal > 0 {
				got = -x.Signal
			}
			if got != tc.want {
				t.Fatalf("Stop = %+v, want %d", x, tc.want)
			}
		})
	}
}

// TestExec_JobEnvironment: a job file's task gets Nomad's variables, and
// its env block overrides any variable.
func TestExec_JobEnvironment(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	c := spawn(t, m, "")
	spec := m.execSpec(t, "inspect")
	spec.Job, spec.Group, spec.Name = "shop", "frontend", "web"
	spec.Resources.MemoryMB, spec.Resources.CPU = 128, 500
	spec.Env["HOME"] = "/secrets"
	r := inspectExec(t, c, spec)
	for k, want := range map[string]string{
		"NOMAD_JOB_NAME": "shop", "NOMAD_GROUP_NAME": "frontend", "NOMAD_TASK_NAME": "web",
		"NOMAD_TASK_DIR": "/local", "NOMAD_ALLOC_DIR": "/alloc", "NOMAD_SECRETS_DIR": "/secrets",
		"NOMAD_MEMORY_LIMIT": "128", "NOMAD_CPU_LIMIT": "500", "HOME": "/secrets",
	} {
		if r.Env[k] != want {
			t.Errorf("%s=%q, want %q", k, r.Env[k], want)
		}
	}
}

// TestResolveCaps_NomadOrder: the basis (the default set within the allow
// list), minus cap_drop, plus cap_add; "all" in both; an added capability
// outside the allow list refused.
func TestResolveCaps_NomadOrder(t *testing.T) {
	names := func(cs []capability.Cap) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.String())
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	sorted := func(s string) string {
		f := strings.Split(s, ",")
		slices.Sort(f)
		return strings.Join(f, ",")
	}
	for _, tc := range []struct {
		add, drop, allowed []string
		want               string
		refused            string
	}{
		{drop: []string{"all"}, add: []string{"chown"}, want: "chown"},
		{drop: []string{"ALL"}, add: []string{"CAP_KILL", "net_bind_service"}, want: "kill,net_bind_service"},
		{drop: []string{"all"}, want: ""},
		{drop: []string{"chown", "kill"}, add: []string{"kill"}, want: "dac_override,fowner,fsetid,kill,mknod,net_bind_service,setgid,setuid,setfcap,setpcap,sys_chroot,audit_write"},
		{add: []string{"net_raw"}, refused: "net_raw"},
		{add: []string{"net_raw"}, allowed: append(slices.Clone(hostspec.DefaultAllowedCaps), "net_raw"), want: "chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,sys_chroot,mknod,audit_write,setfcap"},
		{add: []string{"all"}, refused: "sys_admin"},
		{drop: []string{"all"}, add: []string{"all"}, allowed: []string{"all"}, want: names(capability.ListKnown())},
	} {
		got, err := hostspec.ResolveCaps(tc.add, tc.drop, tc.allowed)
		if tc.refused != "" {
			var ce *wire.CapError
			if !errors.As(err, &ce) || !slices.Contains(ce.NotAllowed, tc.refused) {
				t.Errorf("add %v drop %v allowed %v: %v, want %s refused", tc.add, tc.drop, tc.allowed, err, tc.refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("add %v drop %v: %v", tc.add, tc.drop, err)
			continue
		}
		if names(got) != sorted(tc.want) {
			t.Errorf("add %v drop %v allowed %v = %s, want %s", tc.add, tc.drop, tc.allowed, names(got), tc.want)
		}
	}
}

// TestExec_MountsStayInTheTaskNamespace: while an exec task runs and after
// it ended, nothing of its root is in the host's mount table: its mounts
// live in its own mount namespace and vanish with it.
func TestExec_MountsStayInTheTaskNamespace(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	_, ready, f := execFifo(t, dir, "ready")
	c := spawn(t, m, dir)
	st, err := c.Launch(ctx, m.execSpec(t, "serve", "-ready", ready))
	if err != nil {
		t.Fatal(err)
	}
	readLine(t, f)
	// The task's own view has its root; the host's has none of it.
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(own), " /local ") {
		t.Fatalf("the task's mount table has no /local:\n%s", own)
	}
	if leaked := hostMountsMention(t, dir); len(leaked) > 0 {
		t.Errorf("while the task runs, the host's mount table has its mounts:\n%s", strings.Join(leaked, "\n"))
	}
	if _, err := c.Stop(ctx, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	if leaked := hostMountsMention(t, dir); len(leaked) > 0 {
		t.Errorf("after the task, the host's mount table has its mounts:\n%s", strings.Join(leaked, "\n"))
	}
	if ents, err := os.ReadDir(filepath.Join(dir, statedir.RootDir)); err != nil || len(ents) != 0 {
		t.Errorf("the root's mount point is not an empty directory on the host: %v %v", ents, err)
	}
}

// TestRawExec_UserWithoutWorkDir: a raw_exec task with a user and no
// work_dir starts in its own directory, which it owns, although it could
// not traverse the root-owned 0700 task directory above it.
func TestRawExec_UserWithoutWorkDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a task as nobody needs root")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	dir := filepath.Dir(c.Identity().Socket)
	spec := wire.Launch{Spec: fsm.Spec{Driver: wire.ModeRawExec, Command: "/bin/sh", User: "nobody", Args: []string{"-c", "pwd; id -u; touch mine && echo wrote", string(m)}}}
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v\n%s", x, err, readFileString(t, filepath.Join(dir, statedir.StderrFile)))
	}
	want := filepath.Join(dir, statedir.LocalDir) + "\n65534\nwrote\n"
	if out := readFileString(t, filepath.Join(dir, statedir.StdoutFile)); out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	// Its tmp/ is 1777, as /tmp: sticky, so users sharing it cannot remove
	// each other's files.
	if fi, err := os.Stat(filepath.Join(dir, statedir.TmpDir)); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
		t.Errorf("the task's tmp/: %v %v, want drwxrwxrwt", fi.Mode(), err)
	}
}
