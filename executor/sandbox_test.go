//go:build linux

package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// The sandbox of exec tasks, tried from inside real tasks the way the
// findings of issue 21 broke it: every attack a task makes is a step it
// reports, and the test fails if any step worked.

// attackTargets are what an attacking task aims at.
type attackTargets struct {
	// CgroupFiles are its own cgroup's limit files, where a bind of the
	// host's /sys/fs/cgroup shows them in its root (they exist once the
	// task is launched: the test sends them on Go).
	CgroupFiles []string
	// KeyID is a key of the executor's session keyring (the operator's),
	// 0 when there is none to steal.
	KeyID int32
	// Go is a fifo the task reads a line from before it attacks (the
	// JSON of CgroupFiles); Ready one it writes a line to once it
	// reported, before it blocks ("": neither, and it exits once it
	// reported).
	Go, Ready string
}

// limitFiles are the cgroup files an attacker would write, with what.
var limitFiles = map[string]string{"pids.max": "max", "cpu.shares": "262144", "cpuset.cpus": "0-1", "memory.oom_control": "1",
	"memory.limit_in_bytes": "-1", "cgroup.procs": "1", "tasks": "1", "cgroup.kill": "1", "cgroup.freeze": "1"}

// attackReport has, for each attempt, "" if it worked or the error.
type attackReport map[string]string

func (r attackReport) note(what string, err error) {
	if err == nil {
		r[what] = ""
	} else {
		r[what] = err.Error()
	}
}

func (r attackReport) worked() []string { return hostileReport(r).worked() }

// cloneNS forks a child into new namespaces (flags) with a raw clone, the
// only way for a multithreaded Go program to ask for a user namespace:
// the child exits at once; the error is the clone's.
func cloneNS(flags uintptr) error {
	pid, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return e
	}
	if pid == 0 {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return nil
}

// keyctl is the raw keyctl(2).
func keyctl(op int, a, b, c uintptr) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_KEYCTL, uintptr(op), a, b, c, 0, 0)
	if e != 0 {
		return int(r), e
	}
	return int(r), nil
}

// sessionKeyring is KEY_SPEC_SESSION_KEYRING as keyctl's argument.
var sessionKeyring = func() uintptr { v := int32(unix.KEY_SPEC_SESSION_KEYRING); return uintptr(uint32(v)) }()

// attack is the attacking task: everything issue 21's findings did, and
// their kin, each step on its own (so that a step refused does not hide
// the next).
func attack(tg attackTargets) attackReport {
	runtime.LockOSThread() // credentials are per thread: try them on one
	if tg.Go != "" {
		if f, err := os.Open(tg.Go); err == nil {
			line, _ := bufio.NewReader(f).ReadString('\n')
			_ = json.Unmarshal([]byte(line), &tg.CgroupFiles)
			f.Close()
		}
	}
	r := attackReport{}
	if os.Getuid() != 0 {
		_, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 0, 0, 0)
		r.note("setuid(0)", errnoErr(e))
		_, _, e = unix.RawSyscall(unix.SYS_SETRESGID, 0, 0, 0)
		r.note("setgid(0)", errnoErr(e))
	}
	r.note("clone(CLONE_NEWUSER)", cloneNS(unix.CLONE_NEWUSER))
	r.note("clone(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWCGROUP)", cloneNS(unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWCGROUP))
	r.note("clone(CLONE_NEWNS)", cloneNS(unix.CLONE_NEWNS))
	r.note("clone(CLONE_NEWNET)", cloneNS(unix.CLONE_NEWNET))
	r.note("unshare(CLONE_NEWUSER)", unix.Unshare(unix.CLONE_NEWUSER))
	r.note("unshare(CLONE_NEWCGROUP)", unix.Unshare(unix.CLONE_NEWCGROUP))
	if fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		r.note("setns(its own net namespace)", unix.Setns(fd, unix.CLONE_NEWNET))
		unix.Close(fd)
	}
	if err := os.MkdirAll("/tmp/cg", 0o755); err == nil {
		r.note("mount cgroup2", unix.Mount("cgroup2", "/tmp/cg", "cgroup2", 0, ""))
		r.note("mount cgroup (v1) pids", unix.Mount("cgroup", "/tmp/cg", "cgroup", 0, "pids"))
		r.note("mount cgroup (v1) memory", unix.Mount("cgroup", "/tmp/cg", "cgroup", 0, "memory"))
		r.note("mount proc", unix.Mount("proc", "/tmp/cg", "proc", 0, ""))
		_, err := unix.Fsopen("cgroup2", unix.FSOPEN_CLOEXEC)
		r.note("fsopen(cgroup2)", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
		r.note("remount /sys/fs/cgroup read-write", unix.Mount("", "/sys/fs/cgroup", "", unix.MS_REMOUNT|unix.MS_BIND, ""))
		r.note("mount_setattr /sys/fs/cgroup read-write", unix.MountSetattr(unix.AT_FDCWD, "/sys/fs/cgroup", unix.AT_RECURSIVE, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}))
		r.note("umount /sys/fs/cgroup", unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH))
	}
	for _, f := range tg.CgroupFiles {
		r.note("write "+f, writeExisting(f, limitFiles[filepath.Base(f)]))
		r.note("chmod "+f, os.Chmod(f, 0o666))
	}
	_, err := keyctl(unix.KEYCTL_GET_KEYRING_ID, sessionKeyring, 0, 0)
	r.note("keyctl(KEYCTL_GET_KEYRING_ID, @s)", err)
	buf := make([]byte, 4096)
	_, err = keyctl(unix.KEYCTL_READ, sessionKeyring, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	r.note("keyctl read @s", err)
	_, err = unix.AddKey("user", "tether-attack", []byte("x"), unix.KEY_SPEC_SESSION_KEYRING)
	r.note("add_key", err)
	if tg.KeyID != 0 {
		_, err = keyctl(unix.KEYCTL_READ, uintptr(uint32(tg.KeyID)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		r.note("keyctl read the operator's key", err)
	}
	_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
	r.note("bpf", errnoNot(e, unix.EINVAL))
	r.note("pivot_root", unix.PivotRoot("/tmp", "/tmp"))
	_, err = unix.PerfEventOpen(&unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}, 0, -1, -1, 0)
	r.note("perf_event_open", err)
	r.note("mknod a character device", unix.Mknod("/tmp/attack-null", unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	_, _, e = unix.Syscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
	r.note("personality(ADDR_NO_RANDOMIZE)", errnoErr(e))
	return r
}

// writeExisting writes v into the existing file p (never creating one).
func writeExisting(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(v)
	return err
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// errnoNot is errnoErr, but an errno the kernel returns to a call that
// went through (bad arguments) counts as done.
func errnoNot(e, through syscall.Errno) error {
	if e == through {
		return nil
	}
	return errnoErr(e)
}

// limitsOf reads the limit files of the cgroup's directories (the lists
// of members aside).
func limitsOf(dirs []string) map[string]string {
	out := map[string]string{}
	for _, d := range dirs {
		for name := range limitFiles {
			if b, err := os.ReadFile(filepath.Join(d, name)); err == nil && name != "cgroup.procs" && name != "tasks" {
				out[filepath.Join(d, name)] = string(b)
			}
		}
	}
	return out
}

// limitPaths lists the limit files the cgroup's directories hold.
func limitPaths(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		for name := range limitFiles {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				out = append(out, filepath.Join(d, name))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestExec_SandboxAttacks: an exec task (nobody with the default file, and
// root with Docker's default capability set, so that a missing capability
// does not hide the filter), with the host's /sys/fs/cgroup bound into its
// root as an operator might, tries the findings' attacks: setuid(0), a
// user namespace, mounts and remounts of the cgroup hierarchies, writes to
// its own pids.max, cpu.shares, cpuset.cpus and memory.oom_control, the
// session keyring, and the floor's syscalls. Every step is refused; its
// limits are unchanged; and its cgroup files are root's and read-only to
// others.
func TestExec_SandboxAttacks(t *testing.T) {
	needIsolation(t)
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		t.Skipf("no /sys/fs/cgroup to bind: %v", err)
	}
	m := newMarker(t)
	for _, tc := range []struct {
		user  string
		caps  []string
		allow []string
	}{
		{user: ""},
		{user: "root", caps: dockerCaps, allow: []string{"all"}},
	} {
		t.Run("user="+tc.user, func(t *testing.T) {
			ctx := testCtx(t)
			dir := filepath.Join(t.TempDir(), "task")
			_, ready, f := execFifo(t, dir, "ready")
			_, goFifo, g := execFifo(t, dir, "go")
			c := spawn(t, m, dir)
			var dirs []string
			for _, d := range taskCgroup(t, needCgroups(t), c.Identity()).Dirs() {
				dirs = append(dirs, d)
			}
			slices.Sort(dirs)
			tg, _ := json.Marshal(attackTargets{Go: goFifo, Ready: ready})
			spec := m.execSpec(t, "attack", string(tg))
			spec.User, spec.CapAdd, spec.AllowedCaps = tc.user, tc.caps, tc.allow
			spec.Chroot = append(spec.Chroot, "/sys/fs/cgroup")
			spec.Resources = fsm.Resources{MemoryMB: 64, PIDs: 50, Cores: 1} // cores, not cpu too: fsm refuses both (Nomad's rule)
			if _, err := c.Launch(ctx, spec); err != nil {
				t.Fatal(err)
			}
			limits := limitsOf(dirs)
			for _, name := range []string{"pids.max", "memory.oom_control", "cpuset.cpus"} {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(limits)), func(p string) bool { return filepath.Base(p) == name }) {
					t.Errorf("the task's cgroups have no %s to attack: %v", name, dirs)
				}
			}
			files, _ := json.Marshal(limitPaths(dirs))
			if _, err := fmt.Fprintf(g, "%s\n", files); err != nil {
				t.Fatal(err)
			}
			out := readLine(t, f)
			// The cgroup files, from the host: root's, and writable by
			// nobody else.
			for _, d := range dirs {
				ents, err := os.ReadDir(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					fi, err := e.Info()
					if err != nil {
						continue
					}
					if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
						t.Errorf("%s: uid %d mode %v, want root's and not writable by group or others", filepath.Join(d, e.Name()), st.Uid, fi.Mode())
					}
				}
			}
			var r attackReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("report %q: %v", out, err)
			}
			tried := 0
			for k := range r {
				if strings.HasPrefix(k, "write /sys/fs/cgroup/") {
					tried++
				}
			}
			if len(r) < 20 || tried < 3 {
				t.Fatalf("report %v has too few attempts (%d cgroup files)", r, tried)
			}
			if w := r.worked(); len(w) > 0 {
				t.Errorf("an attacking task (user %q) managed: %s", tc.user, strings.Join(w, "; "))
			}
			if after := limitsOf(dirs); !maps2Equal(limits, after) {
				t.Errorf("the task's limits changed:\nbefore %v\nafter  %v", limits, after)
			}
			t.Logf("user %q: %v", tc.user, r)
		})
	}
}

// dockerCaps is Docker's default capability set.
var dockerCaps = []string{"chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw", "setgid", "setuid",
	"setfcap", "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write"}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestExec_InsideView: the sandbox as the task sees it, nobody with the
// default file: every capability set empty, no_new_privs, a seccomp
// filter, its own cgroup namespace (its cgroups are "/"), a root-only
// 0600 file in a bound directory unreadable, and a directory bound deep
// in its root readable (the directories made on the way are 0755 whatever
// the executor's umask: /run of /run/resolvconf was 0700).
func TestExec_InsideView(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	secretDir := t.TempDir()
	if err := os.Chmod(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(secretDir, "private.key")
	if err := os.WriteFile(secret, []byte("root's key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "public"), []byte("anyone's"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := spawn(t, m, "")
	spec := m.execSpec(t, "inspect", "/secretdir/private.key", "/proc/self/cgroup", "/deep/er/dir/public")
	spec.Chroot = append(spec.Chroot, secretDir+":/secretdir", secretDir+":/deep/er/dir")
	r := inspectExec(t, c, spec)
	if r.CapEff|r.CapPrm|r.CapInh|r.CapAmb|r.CapBnd != 0 || r.NoNewPrivs != "1" || r.Seccomp != "2" {
		t.Errorf("CapEff %x CapPrm %x CapInh %x CapAmb %x CapBnd %x NoNewPrivs %q Seccomp %q; want no capability, 1, 2",
			r.CapEff, r.CapPrm, r.CapInh, r.CapAmb, r.CapBnd, r.NoNewPrivs, r.Seccomp)
	}
	if r.Readable["/secretdir/private.key"] == "" {
		t.Error("nobody read a root-only 0600 file in a bound directory")
	}
	if r.Readable["/deep/er/dir/public"] != "" {
		t.Errorf("a file bound deep in the root is unreadable to nobody: %s", r.Readable["/deep/er/dir/public"])
	}
	if r.Readable["/proc/self/cgroup"] != "" {
		t.Errorf("/proc/self/cgroup unreadable: %s", r.Readable["/proc/self/cgroup"])
	}
	for _, line := range r.Cgroups {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("cgroup line %q: want the root of its own cgroup namespace", line)
		}
	}
	if len(r.Cgroups) == 0 {
		t.Error("the task read no cgroup line")
	}
}

// TestExec_SessionKeyringIsTheTasks: the executor's session keyring (an
// operator's, holding a key) is not the task's: a root task run
// unconfined (seccomp = "unconfined", which the operator allowed, so that
// keyctl is there at all) has a session keyring of its own, and cannot
// read the operator's key by its id (it would, possessing the operator's
// keyring); a command started by Exec gets a new one too. Under the
// default filter keyctl is refused altogether (TestExec_SandboxAttacks).
func TestExec_SessionKeyringIsTheTasks(t *testing.T) {
	needIsolation(t)
	if _, err := os.Stat("/proc/keys"); err != nil {
		t.Skipf("this kernel has no keyrings (CONFIG_KEYS): %v", err)
	}
	m := newMarker(t)
	ctx := testCtx(t)
	unconfined := func(s wire.Launch) wire.Launch {
		s.User, s.Seccomp, s.AllowSeccomp = "root", fsm.SeccompUnconfined, []string{fsm.SeccompUnconfined}
		return s
	}
	check := func(t *testing.T, who string, out []byte, key, ring int) {
		t.Helper()
		var r keyringReport
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: report %q: %v", who, out, err)
		}
		if r.ReadKey == "" {
			t.Errorf("%s read the operator's key %d", who, key)
		}
		if r.Session == 0 || r.Session == ring {
			t.Errorf("%s: session keyring %d, the operator's %d: want one of its own", who, r.Session, ring)
		}
		t.Logf("%s: %+v", who, r)
	}

	c, key, ring := spawnKeyed(t, m)
	tg, _ := json.Marshal(attackTargets{KeyID: int32(key)})
	if _, err := c.Launch(ctx, unconfined(m.execSpec(t, "keyring", string(tg)))); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v", x, err)
	}
	check(t, "the task", []byte(readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))), key, ring)

	c, key, ring = spawnKeyed(t, m)
	spec := unconfined(m.execSpec(t, "sleep"))
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	tg, _ = json.Marshal(attackTargets{KeyID: int32(key)})
	var out lockedBuffer
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{spec.Command, "task", m.arg(), "keyring", string(tg)}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if x, err := p.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("exec Wait = %+v %v", x, err)
	}
	check(t, "an exec'd command", []byte(out.String()), key, ring)

	// A raw_exec task run as another user gets a keyring of its own too
	// (no filter there: keyctl is the task's, and it would possess the
	// operator's keyring).
	c, key, ring = spawnKeyed(t, m)
	bin := nobodyBinary(t)
	tg, _ = json.Marshal(attackTargets{KeyID: int32(key)})
	raw := m.taskSpec(t, "keyring", string(tg))
	raw.Command, raw.User, raw.Dir = bin, "nobody", "/"
	if _, err := c.Launch(ctx, raw); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("raw_exec Wait = %+v %v", x, err)
	}
	check(t, "a raw_exec task run as nobody", []byte(readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))), key, ring)
}

// nobodyBinary is a copy of the test binary that nobody can run (the
// one go test built sits in a directory only root may enter).
func nobodyBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tether-test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// keyringReport is what the keyring task saw.
type keyringReport struct {
	Session int    // its session keyring's id
	ReadKey string // "" if it could read the operator's key, else the error
}

func keyringTask(tg attackTargets) keyringReport {
	runtime.LockOSThread()
	var r keyringReport
	r.Session, _ = keyctl(unix.KEYCTL_GET_KEYRING_ID, sessionKeyring, 0, 0)
	buf := make([]byte, 4096)
	_, err := keyctl(unix.KEYCTL_READ, uintptr(uint32(tg.KeyID)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if err != nil {
		r.ReadKey = err.Error()
	}
	return r
}

// spawnKeyed spawns an executor whose session keyring is an operator's
// holding a user key, and returns the key's and the keyring's ids.
func spawnKeyed(t *testing.T, m marker) (*Client, int, int) {
	t.Helper()
	idFile := filepath.Join(t.TempDir(), "ids")
	c, err := Spawn(testCtx(t), SpawnConfig{Command: []string{testBinary(t), "executor-keyed", m.arg(), "tether-test-" + randHex(t, 6), idFile},
		TaskDir: filepath.Join(t.TempDir(), "task"), Nonce: randHex(t, 12)})
	if err != nil {
		t.Fatalf("Spawn: %v", err)
	}
	id := c.Identity()
	t.Cleanup(func() {
		ctx, cancel := testCtxBackground()
		defer cancel()
		_ = c.Shutdown(ctx)
		c.Close()
		waitDead(t, id)
		removeTaskCgroup(t, id)
	})
	var key, ring int
	if _, err := fmt.Sscan(readFileString(t, idFile), &key, &ring); err != nil {
		t.Fatal(err)
	}
	return c, key, ring
}

// TestExec_CommandHoldsNoCallerDescriptor: the /proc/PID/fd attack
// against a command started by Exec. The caller hands it a root-owned file
// it opened read-write as stdin, a unix socket as stdout and a pipe as
// stderr; a root task with the default capabilities (DAC_OVERRIDE among
// them) opens /proc/PID/fd/N of the command for writing and takes its
// descriptors with pidfd_getfd. It reaches pipes only: the file is not
// rewritten and no descriptor it got is the caller's.
func TestExec_CommandHoldsNoCallerDescriptor(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	ctx := testCtx(t)
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("the original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdin, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock, peer := os.NewFile(uintptr(sp[0]), "sock"), os.NewFile(uintptr(sp[1]), "peer")
	defer sock.Close()
	defer peer.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()

	dir := filepath.Join(t.TempDir(), "task")
	_, ready, f := execFifo(t, dir, "ready")
	_, goFifo, g := execFifo(t, dir, "go")
	c := spawn(t, m, dir)
	tg, _ := json.Marshal(attackTargets{Go: goFifo, Ready: ready})
	spec := m.execSpec(t, "fdsteal", string(tg))
	spec.User = "root"
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	p, err := c.Exec(ctx, wire.ExecSpec{Argv: []string{"sleep", "1000"}, Stdin: stdin, Stdout: sock, Stderr: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fmt.Fprintln(g, "[]")
	out := readLine(t, f)
	if b, _ := os.ReadFile(victim); string(b) != "the original\n" {
		t.Errorf("the caller's file was rewritten through the command: %q", b)
	}
	var r fdReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	if len(r.Links) != 3 {
		t.Fatalf("the task found %d descriptors of the command, want 3: %+v", len(r.Links), r)
	}
	for fd, link := range r.Links {
		if !strings.HasPrefix(link, "pipe:") {
			t.Errorf("the command's descriptor %s is %q, not a pipe", fd, link)
		}
	}
	for fd, kind := range r.Taken {
		if kind != "" && kind != "fifo" {
			t.Errorf("pidfd_getfd of the command's descriptor %s gave the task a %s", fd, kind)
		}
	}
	t.Logf("%+v", r)
}

// fdReport is what the fd-stealing task found of the other process in its
// PID namespace (the exec'd command): each descriptor's link, what
// writing through /proc/PID/fd/N did, and the kind of file pidfd_getfd
// gave ("" when refused).
type fdReport struct {
	Links  map[string]string
	Writes map[string]string
	Taken  map[string]string
}

func fdSteal() fdReport {
	r := fdReport{Links: map[string]string{}, Writes: map[string]string{}, Taken: map[string]string{}}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		pidfd, perr := unix.PidfdOpen(pid, 0)
		for fd := range 3 {
			key := fmt.Sprintf("%d/%d", pid, fd)
			p := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
			r.Links[key], _ = os.Readlink(p)
			w, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				_, err = w.WriteString("owned by the task\n")
				w.Close()
			}
			r.Writes[key] = fmt.Sprint(err)
			if perr != nil {
				continue
			}
			if got, err := unix.PidfdGetfd(pidfd, fd, 0); err == nil {
				var st unix.Stat_t
				_ = unix.Fstat(got, &st)
				switch st.Mode & unix.S_IFMT {
				case unix.S_IFIFO:
					r.Taken[key] = "fifo"
				case unix.S_IFSOCK:
					r.Taken[key] = "socket"
				case unix.S_IFREG:
					r.Taken[key] = "file"
					_, _ = unix.Pwrite(got, []byte("owned by the task\n"), 0)
				default:
					r.Taken[key] = fmt.Sprintf("mode %o", st.Mode)
				}
				unix.Close(got)
			}
		}
		if perr == nil {
			unix.Close(pidfd)
		}
	}
	return r
}

// netReport is what the network task saw.
type netReport struct {
	Interfaces []string // the names of the interfaces that are up
	DialHost   string   // "" if it reached the host's loopback listener, else the error
	DialAbs    string   // the same for the host's abstract unix socket
	OwnLoop    string   // the same for a listener of its own on 127.0.0.1
	Bind80     string   // "" if it could listen on port 80
	CapEff     uint64
}

func netCheck(hostAddr, abstract string) netReport {
	var r netReport
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagUp != 0 {
			r.Interfaces = append(r.Interfaces, i.Name)
		}
	}
	if hostAddr != "" {
		c, err := net.DialTimeout("tcp", hostAddr, 5*time.Second)
		if err == nil {
			c.Close()
		}
		r.DialHost = errText(err)
	}
	if abstract != "" {
		c, err := net.Dial("unix", "@"+abstract)
		if err == nil {
			c.Close()
		}
		r.DialAbs = errText(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err == nil {
		var c net.Conn
		c, err = net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		ln.Close()
	}
	r.OwnLoop = errText(err)
	ln, err = net.Listen("tcp", ":80")
	if err == nil {
		ln.Close()
	}
	r.Bind80 = errText(err)
	b, _ := os.ReadFile("/proc/self/status")
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			r.CapEff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return r
}

// TestExec_NetworkModes: network "none" is a namespace with loopback
// alone: only lo is up, the host's loopback listeners and abstract unix
// sockets are out of reach, its own loopback works. network "host" (the
// default) shares them, as documented. A nobody task with cap_add =
// ["net_bind_service"] holds exactly that (0x400) and binds port 80 (in
// its own namespace), one without it cannot.
func TestExec_NetworkModes(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	abstract := "tether-test-" + string(m)
	al, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	for _, l := range []net.Listener{ln, al} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	run := func(t *testing.T, network fsm.NetworkMode, capAdd []string) netReport {
		t.Helper()
		c := spawn(t, m, "")
		spec := m.execSpec(t, "netcheck", ln.Addr().String(), abstract)
		spec.Network, spec.CapAdd = network, capAdd
		ctx := testCtx(t)
		if _, err := c.Launch(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
			t.Fatalf("Wait = %+v %v", x, err)
		}
		var r netReport
		out := readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("report %q: %v", out, err)
		}
		t.Logf("network %q cap_add %v: %+v", network, capAdd, r)
		return r
	}
	t.Run("none", func(t *testing.T) {
		r := run(t, fsm.NetworkNone, []string{"net_bind_service"})
		if !slices.Equal(r.Interfaces, []string{"lo"}) {
			t.Errorf("interfaces up %v, want lo alone", r.Interfaces)
		}
		if r.DialHost == "" || r.DialAbs == "" {
			t.Errorf("reached the host: its loopback listener %q, its abstract socket %q", r.DialHost, r.DialAbs)
		}
		if r.OwnLoop != "" {
			t.Errorf("its own loopback: %s", r.OwnLoop)
		}
		if r.CapEff != 1<<unix.CAP_NET_BIND_SERVICE || r.Bind80 != "" {
			t.Errorf("cap_add net_bind_service: CapEff %#x, bind :80: %q; want 0x400 and bound", r.CapEff, r.Bind80)
		}
	})
	t.Run("none without cap_add", func(t *testing.T) {
		if r := run(t, fsm.NetworkNone, nil); r.CapEff != 0 || r.Bind80 == "" {
			t.Errorf("CapEff %#x, bind :80 %q; want none and refused", r.CapEff, r.Bind80)
		}
	})
	t.Run("host", func(t *testing.T) {
		r := run(t, "", nil)
		if r.DialHost != "" || r.DialAbs != "" {
			t.Errorf("network host shares the host's loopback and abstract sockets, but: %q %q", r.DialHost, r.DialAbs)
		}
		if len(r.Interfaces) < 1 {
			t.Errorf("interfaces up %v", r.Interfaces)
		}
	})
}

// runSandboxTask holds the task modes of the sandbox tests:
//
//	attack JSON     try what attackTargets lists, print an attackReport
//	keyring JSON    print a keyringReport
//	fdsteal JSON    wait on Go, print an fdReport, write Ready, block
//	netcheck ADDR ABSTRACT   print a netReport
func runSandboxTask(args []string) int {
	switch args[0] {
	case "swapdir":
		return swapDir(args[1])
	case "netcheck":
		b, _ := json.Marshal(netCheck(args[1], args[2]))
		fmt.Println(string(b))
		return 0
	case "fdsteal":
		var tg attackTargets
		if err := json.Unmarshal([]byte(args[1]), &tg); err != nil {
			return 2
		}
		f, err := os.Open(tg.Go)
		if err != nil {
			return 3
		}
		_, _ = bufio.NewReader(f).ReadString('\n')
		f.Close()
		b, _ := json.Marshal(fdSteal())
		w, err := os.OpenFile(tg.Ready, os.O_WRONLY, 0)
		if err != nil {
			return 4
		}
		fmt.Fprintln(w, string(b))
		w.Close()
		block()
	case "attack":
		var tg attackTargets
		if err := json.Unmarshal([]byte(args[1]), &tg); err != nil {
			return 2
		}
		b, _ := json.Marshal(attack(tg))
		if tg.Ready == "" {
			fmt.Println(string(b))
			return 0
		}
		// The report goes on Ready itself: the test reads it there, not
		// from the log, which the executor's copy may not have reached.
		f, err := os.OpenFile(tg.Ready, os.O_WRONLY, 0)
		if err != nil {
			return 3
		}
		fmt.Fprintln(f, string(b))
		f.Close()
		block()
		return 0
	case "keyring":
		var tg attackTargets
		if err := json.Unmarshal([]byte(args[1]), &tg); err != nil {
			return 2
		}
		b, _ := json.Marshal(keyringTask(tg))
		fmt.Println(string(b))
		return 0
	}
	return 100
}

// runKeyedExecutor is an executor whose session keyring is an operator's
// holding a key: it joins a new session keyring, adds a user key
// described desc to it, writes the key's and the keyring's ids to idFile,
// then execs itself as the plain executor helper (exec keeps the
// keyring).
func runKeyedExecutor(args []string) int {
	runtime.LockOSThread()
	markerArg, desc, idFile, rest := args[0], args[1], args[2], args[3:]
	ring, err := unix.KeyctlJoinSessionKeyring("operator-" + desc)
	if err == nil {
		var key int
		key, err = unix.AddKey("user", desc, []byte("the operator's secret"), unix.KEY_SPEC_SESSION_KEYRING)
		if err == nil {
			err = os.WriteFile(idFile, []byte(fmt.Sprintf("%d %d\n", key, ring)), 0o600)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keyed executor:", err)
		return 2
	}
	err = syscall.Exec(os.Args[0], append([]string{os.Args[0], "executor", markerArg}, rest...), os.Environ())
	fmt.Fprintln(os.Stderr, "keyed executor: exec:", err)
	return 2
}

// TestExec_HostWithoutAFeature: an executor on a host that lacks a part
// of the sandbox (here: its own seccomp filter makes keyctl, or seccomp
// itself, answer ENOSYS, as a kernel without them would) refuses an exec
// task, naming the part and the operator's opt-out; with the opt-out the
// task runs without it, and the launch warns of it.
func TestExec_HostWithoutAFeature(t *testing.T) {
	needIsolation(t)
	if runtime.GOARCH != "amd64" {
		t.Skipf("the test's filter is x86_64's; this is %s", runtime.GOARCH)
	}
	m := newMarker(t)
	for _, tc := range []struct {
		feature string
		optOut  func(*wire.Launch)
		names   string
	}{
		{"keyring", func(l *wire.Launch) { l.AllowMissing = []string{"keyring"} }, "--allow-missing keyring"},
		{"seccomp", func(l *wire.Launch) { l.AllowSeccomp = []string{"unconfined"} }, "--allow-seccomp unconfined"},
	} {
		t.Run(tc.feature, func(t *testing.T) {
			ctx := testCtx(t)
			spawnWithout := func() *Client {
				c, err := Spawn(ctx, SpawnConfig{Command: []string{testBinary(t), "executor-without", m.arg(), tc.feature},
					TaskDir: filepath.Join(t.TempDir(), "task"), Nonce: randHex(t, 12)})
				if err != nil {
					t.Fatalf("Spawn: %v", err)
				}
				id := c.Identity()
				t.Cleanup(func() {
					ctx, cancel := testCtxBackground()
					defer cancel()
					_ = c.Shutdown(ctx)
					c.Close()
					waitDead(t, id)
					removeTaskCgroup(t, id)
				})
				return c
			}
			c := spawnWithout()
			_, err := c.Launch(ctx, m.execSpec(t, "exit", "0"))
			if !errors.Is(err, wire.ErrHostFeature) || !strings.Contains(err.Error(), tc.feature) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("Launch on a host without %s: %v, want ErrHostFeature naming it and %s", tc.feature, err, tc.names)
			}
			c = spawnWithout()
			spec := m.execSpec(t, "exit", "0")
			tc.optOut(&spec)
			st, err := c.Launch(ctx, spec)
			if err != nil {
				t.Fatalf("Launch with the opt-out: %v", err)
			}
			if len(st.Warnings) != 1 || st.Warnings[0].Kind != fsm.WarnUnsandboxed || !strings.Contains(st.Warnings[0].Text, tc.feature) {
				t.Errorf("warnings %+v, want one of kind unsandboxed naming %s", st.Warnings, tc.feature)
			}
			if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
				t.Errorf("Wait = %+v %v", x, err)
			}
		})
	}
}

// runExecutorWithout is an executor on a host without a feature: it
// installs a seccomp filter of its own that answers ENOSYS to keyctl
// ("keyring") or to seccomp ("seccomp"), as a kernel without them would,
// then execs itself as the plain executor helper (the filter stays).
func runExecutorWithout(args []string) int {
	markerArg, feature, rest := args[0], args[1], args[2:]
	nr := map[string]uint32{"keyring": unix.SYS_KEYCTL, "seccomp": unix.SYS_SECCOMP}[feature]
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1},
		bpf.RetConstant{Val: 0x00050000 | uint32(unix.ENOSYS)}, // SECCOMP_RET_ERRNO
		bpf.RetConstant{Val: 0x7fff0000},                       // SECCOMP_RET_ALLOW
	})
	if err != nil || nr == 0 {
		fmt.Fprintln(os.Stderr, "executor-without:", feature, err)
		return 2
	}
	sf := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		sf[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(sf)), Filter: &sf[0]}
	const setModeFilter, flagTSync = 1, 1
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, setModeFilter, flagTSync, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fmt.Fprintln(os.Stderr, "executor-without: seccomp:", e)
		return 2
	}
	err = syscall.Exec(os.Args[0], append([]string{os.Args[0], "executor", markerArg}, rest...), os.Environ())
	fmt.Fprintln(os.Stderr, "executor-without: exec:", err)
	return 2
}

// TestExec_NoNewPrivsWithoutAFilter: an exec task run unconfined (seccomp
// = "unconfined", which the operator allowed) still runs with
// no_new_privs, as root and as nobody: installing the filter is not what
// sets it, and a setuid binary in its root must not raise it.
func TestExec_NoNewPrivsWithoutAFilter(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	for _, user := range []string{"", "root"} {
		c := spawn(t, m, "")
		spec := m.execSpec(t, "inspect", "/proc/self/status")
		spec.User, spec.Seccomp, spec.AllowSeccomp = user, fsm.SeccompUnconfined, []string{fsm.SeccompUnconfined}
		r := inspectExec(t, c, spec)
		if r.NoNewPrivs != "1" || r.Seccomp != "0" {
			t.Errorf("user %q, unconfined: NoNewPrivs %q Seccomp %q; want 1 and 0 (no filter)", user, r.NoNewPrivs, r.Seccomp)
		}
	}
}
