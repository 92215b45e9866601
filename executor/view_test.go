//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	hostspec "github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

// The test binary is also this file's helper processes, dispatched in init
// (before TestMain, whose modes are in helpers_test.go):
//
//	view -marker=M [-hostname NAME] [-shm KEY] [-write PATH]
//	        print a viewReport of what the task sees
//	dropcap -marker=M CAP -- ARGV...
//	        drop CAP from the bounding set, then exec ARGV (so ARGV and
//	        all it starts can never hold CAP)
func init() {
	testproc.Dispatch(map[string]func([]string) int{
		"view":    func(a []string) int { return runView(a[1:]) },
		"dropcap": func(a []string) int { return runDropCap(a[1:]) },
	})
}

// viewReport is what a view task saw from the inside.
type viewReport struct {
	Root     []string          // the names in /, dot files included
	TmpMode  uint32            // /tmp's mode bits (st_mode & 07777)
	TmpWrite string            // "" if the task could create a file in /tmp, else the error
	NS       map[string]string // /proc/self/ns/{ipc,uts,mnt,pid} as readlink shows them
	Hostname string            // the UTS nodename, after -hostname if given
	SetHost  string            // sethostname's error, "" if it worked (or was not asked)
	Shm      string            // "" if the SysV shm segment of -shm is visible, else the error
	Write    string            // "" if -write's file could be written, else the error
}

func runView(args []string) int {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	hostname := fs.String("hostname", "", "set the hostname first")
	shm := fs.Int("shm", 0, "look for the SysV shm segment of this key")
	write := fs.String("write", "", "try to write this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	r := viewReport{NS: map[string]string{}}
	ents, err := os.ReadDir("/")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for _, e := range ents {
		r.Root = append(r.Root, e.Name())
	}
	var st unix.Stat_t
	if err := unix.Stat("/tmp", &st); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	r.TmpMode = st.Mode & 0o7777
	r.TmpWrite = errString(os.WriteFile("/tmp/mine", []byte("x"), 0o600))
	for _, ns := range []string{"ipc", "uts", "mnt", "pid"} {
		r.NS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	if *hostname != "" {
		r.SetHost = errString(unix.Sethostname([]byte(*hostname)))
	}
	r.Hostname, _ = os.Hostname()
	if *shm != 0 {
		_, err := unix.SysvShmGet(*shm, 0, 0)
		r.Shm = errString(err)
	}
	if *write != "" {
		f, err := os.OpenFile(*write, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("written by the task")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		r.Write = errString(err)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runDropCap drops a capability from the bounding set of its (locked)
// thread, which then execs ARGV: the process and its descendants never get
// the capability back.
func runDropCap(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "dropcap: want CAP -- ARGV...")
		return 2
	}
	c, ok := hostspec.CapByName(args[0])
	if !ok {
		fmt.Fprintln(os.Stderr, "dropcap: no capability", args[0])
		return 2
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "dropcap:", err)
		return 2
	}
	err := syscall.Exec(args[2], args[2:], os.Environ())
	fmt.Fprintln(os.Stderr, "dropcap:", err)
	return 2
}

// viewSpec is an exec task of the view helper.
func (m marker) viewSpec(t testing.TB, args ...string) wire.Launch {
	s := m.execSpec(t, "unused")
	s.Args = append([]string{"view", m.arg()}, args...)
	return s
}

// viewExec runs a view task of spec and returns what it saw.
func viewExec(t *testing.T, c *Client, spec wire.Launch) viewReport {
	t.Helper()
	ctx := testCtx(t)
	dir := filepath.Dir(c.Identity().Socket)
	if _, err := c.Launch(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if x, err := c.Wait(ctx); err != nil || x.Code != 0 {
		t.Fatalf("Wait = %+v %v\nstderr: %s", x, err, readFileString(t, filepath.Join(dir, statedir.StderrFile)))
	}
	out := readFileString(t, filepath.Join(dir, statedir.StdoutFile))
	var r viewReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	return r
}

// topNames are the first components of the destinations of chroot
// entries: the names a root built from them shows at /.
func topNames(t *testing.T, chroot []string) []string {
	t.Helper()
	es, err := hostspec.ParseChroot(chroot)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		first, _, _ := strings.Cut(strings.TrimPrefix(e.Dst, "/"), "/")
		if !slices.Contains(out, first) {
			out = append(out, first)
		}
	}
	return out
}

// TestExec_RootHoldsOnlyTheTasksEntries: an exec task's / lists exactly
// its chroot entries, dev, proc and its own directories (nothing tether
// uses internally, such as the file that masks /etc/shadow); its /tmp is
// 1777 like the host's /tmp and writable by the task's user; the mask
// over /etc/shadow is empty and read-only even to a root task that may
// override file modes.
func TestExec_RootHoldsOnlyTheTasksEntries(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	for _, user := range []string{"", "root"} {
		t.Run("user="+user, func(t *testing.T) {
			c := spawn(t, m, "")
			spec := m.viewSpec(t, "-write", "/etc/shadow")
			spec.User = user
			r := viewExec(t, c, spec)
			want := append(topNames(t, spec.Chroot), "dev", "proc", statedir.LocalDir, statedir.SecretsDir, statedir.TmpDir, statedir.AllocDir)
			slices.Sort(want)
			got := slices.Sorted(slices.Values(r.Root))
			if !slices.Equal(got, want) {
				t.Errorf("/ inside the task lists %v, want exactly %v", got, want)
			}
			if r.TmpMode != 0o1777 {
				t.Errorf("/tmp inside the task is %04o, want 1777 (sticky, as /tmp)", r.TmpMode)
			}
			if r.TmpWrite != "" {
				t.Errorf("the task cannot write in /tmp: %s", r.TmpWrite)
			}
			if _, err := os.Stat("/etc/shadow"); err == nil && r.Write == "" {
				t.Errorf("user %q wrote to the mask over /etc/shadow", user)
			}
		})
	}
}

// TestExec_IPCNamespace: an exec task has an IPC namespace of its own (a
// SysV segment of the host is not there); with ipc_mode = "host" it has
// the host's (the same namespace, the segment is there).
func TestExec_IPCNamespace(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	hostIPC, err := os.Readlink("/proc/self/ns/ipc")
	if err != nil {
		t.Fatal(err)
	}
	// A segment of the host's, under a key of this test's (the next one
	// when an earlier run left one behind).
	var key, id int
	for i := range 16 {
		key = int(0x7e7e0000 | (os.Getpid()+i)&0xffff)
		if id, err = unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600); !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	switch {
	case errors.Is(err, unix.ENOSYS):
		t.Skipf("needs SysV shared memory (a kernel with CONFIG_SYSVIPC): %v", err)
	case err != nil:
		t.Fatalf("a SysV shm segment to look for: %v", err)
	}
	t.Cleanup(func() {
		if _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); err != nil {
			t.Errorf("removing the shm segment: %v", err)
		}
	})
	for _, tc := range []struct {
		mode string
		same bool
	}{{"", false}, {wire.ModeHost, true}} {
		t.Run("ipc_mode="+tc.mode, func(t *testing.T) {
			c := spawn(t, m, "")
			spec := m.viewSpec(t, "-shm", fmt.Sprint(key))
			spec.IPCMode = tc.mode
			spec.AllowHostNamespaces = []string{"ipc"} // the operator's word (--allow-host-namespaces)
			r := viewExec(t, c, spec)
			if r.NS["ipc"] == "" {
				t.Fatalf("the task could not read its /proc/self/ns/ipc: %+v", r)
			}
			if same := r.NS["ipc"] == hostIPC; same != tc.same {
				t.Errorf("the task's IPC namespace is %s, the host's %s: want same=%v", r.NS["ipc"], hostIPC, tc.same)
			}
			if seen := r.Shm == ""; seen != tc.same {
				t.Errorf("the host's shm segment %#x inside the task: seen=%v (%s), want %v", key, seen, r.Shm, tc.same)
			}
		})
	}
}

// TestExec_UTSNamespace: an exec task has a UTS namespace of its own: a
// root task allowed CAP_SYS_ADMIN that sets its hostname changes its own,
// not the host's.
func TestExec_UTSNamespace(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	hostUTS, err := os.Readlink("/proc/self/ns/uts")
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	c := spawn(t, m, "")
	name := "task-" + randHex(t, 4)
	spec := m.viewSpec(t, "-hostname", name)
	spec.User, spec.AllowedCaps, spec.CapAdd = "root", []string{"all"}, []string{"sys_admin"}
	r := viewExec(t, c, spec)
	if r.NS["uts"] == "" || r.NS["uts"] == hostUTS {
		t.Errorf("the task's UTS namespace is %q, the host's %s: want one of its own", r.NS["uts"], hostUTS)
	}
	if r.SetHost != "" || r.Hostname != name {
		t.Errorf("inside, sethostname(%s): %q, then the hostname is %q", name, r.SetHost, r.Hostname)
	}
	if after, err := os.Hostname(); err != nil || after != before {
		t.Errorf("the host's hostname went from %q to %q (%v)", before, after, err)
	}
}

// TestExec_SetupStepFailureNamesTheStep: a step of the init shim that
// fails (a chroot entry that cannot be bound: its mount point would be
// inside another, read-only, entry; a capability the executor itself no
// longer has) is a launch failure naming the step; no process of the task
// is left, its cgroup is removed and nothing is left mounted.
func TestExec_SetupStepFailureNamesTheStep(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	for _, tc := range []struct {
		name, step string
		prefix     []string // before the executor's command
		spec       func(s *wire.Launch)
	}{
		{"unbindable chroot entry", shim.StepRoot, nil, func(s *wire.Launch) {
			// /x is /usr/bin, read-only: the mount point of /x/no-such
			// cannot be made in it.
			s.Chroot = append(s.Chroot, "/usr/bin:/x", "/etc/hostname:/x/no-such-"+randHex(t, 4))
		}},
		{"capability the executor lacks", shim.StepCaps, []string{testBinary(t), "dropcap", m.arg(), "sys_module", "--"}, func(s *wire.Launch) {
			s.AllowedCaps, s.CapAdd = []string{"all"}, []string{"sys_module"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir := filepath.Join(t.TempDir(), "task")
			c, err := Spawn(ctx, SpawnConfig{Command: append(tc.prefix, m.executorCmd(t)...), TaskDir: dir, Nonce: randHex(t, 12)})
			if err != nil {
				t.Fatalf("Spawn: %v", err)
			}
			id := c.Identity()
			t.Cleanup(func() {
				if err := c.Shutdown(ctx); err != nil && !errors.Is(err, wire.ErrClosed) {
					t.Errorf("Shutdown: %v", err)
				}
				c.Close()
			})
			spec := m.viewSpec(t)
			tc.spec(&spec)
			_, err = c.Launch(ctx, spec)
			if !errors.Is(err, wire.ErrLaunch) || !strings.Contains(err.Error(), tc.step) {
				t.Fatalf("Launch = %v, want a launch failure naming the step %q", err, tc.step)
			}
			t.Logf("Launch: %v", err)
			// The shim is gone (the executor reaped it); only the
			// executor is left.
			for _, p := range testproc.Marked(string(m)) {
				if p.PID != id.PID {
					waitExited(t, p)
				}
			}
			if leaked := hostMountsMention(t, dir); len(leaked) > 0 {
				t.Errorf("the failed setup left mounts in the host's mount table:\n%s", strings.Join(leaked, "\n"))
			}
			checkGone(t, taskCgroup(t, needCgroups(t), id))
		})
	}
}

// waitExited waits (bounded) through a pidfd for p to exit; it fails the
// test if p is still alive then.
func waitExited(t *testing.T, p testproc.Proc) {
	t.Helper()
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		return // gone already
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n == 0 && testproc.Alive(p.PID) {
			t.Errorf("still alive after a failed launch: %s", p)
		}
		return
	}
}
