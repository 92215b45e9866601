//go:build linux

package seccomp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	helperLive = "seccomp-live"
	liveOK     = "seccomp-live: all checks passed"
)

// TestInstall_Live installs the default filter, compiled for a task with
// every capability (root's), in a helper process, and checks from inside
// that the floor's syscalls fail with EPERM although the kernel would let
// root make them, clone3 fails with ENOSYS, and ordinary work goes on:
// threads (the Go runtime makes them after the install), files, sockets,
// exec of a child, which inherits the filter, and Seccomp: 2 on every
// thread (TSYNC).
func TestInstall_Live(t *testing.T) {
	if err := CheckHost(); err != nil {
		t.Skipf("this kernel has no seccomp filter: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the live test runs as root, so that the kernel's own permission checks cannot hide the filter's")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], helperLive, dir)
	// Its own mount, UTS and IPC namespaces: were the filter to let a
	// mount or a mknod through, it would land there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(liveOK)) {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestInstall_NonRoot installs the filter in a process of user nobody
// with no capability, as a non-root exec task's shim does: no privilege
// is needed (no_new_privs), and the floor refuses what the kernel would
// let an unprivileged user do (its own user namespace, its own keys).
func TestInstall_NonRoot(t *testing.T) {
	if err := CheckHost(); err != nil {
		t.Skipf("this kernel has no seccomp filter: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("switching to user nobody needs root")
	}
	// The test binary where nobody can run it.
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "seccomp.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, helperLive, "nonroot")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(liveOK)) {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
}

// runNonRoot is TestInstall_NonRoot's helper.
func runNonRoot() int {
	if os.Geteuid() == 0 {
		fmt.Println("FAIL the helper runs as root")
		return 1
	}
	f, err := Compile(Default(), Options{})
	if err == nil {
		err = f.Install()
	}
	if err != nil {
		fmt.Println("FAIL install as nobody:", err)
		return 1
	}
	c := &liveChecks{}
	const eperm = syscall.EPERM
	c.errno("keyctl(GET_KEYRING_ID, @s)", eperm, unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0xfffffffd, 0)
	c.errno("add_key", eperm, unix.SYS_ADD_KEY, ptr("tether-no-such-type"), ptr("x"), 0, 0, 0xfffffffd)
	c.errno("unshare(CLONE_NEWUSER)", eperm, unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	c.errno("clone(CLONE_NEWUSER|CLONE_THREAD)", eperm, unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD)
	c.errno("clone3", syscall.ENOSYS, unix.SYS_CLONE3, 0, 0)
	c.errno("getpid", 0, unix.SYS_GETPID)
	c.n++
	if m, err := Mode(); err != nil || m != 2 {
		c.fail("seccomp mode %d %v, want 2", m, err)
	}
	if c.failed {
		return 1
	}
	fmt.Printf("%s (%d)\n", liveOK, c.n)
	return 0
}

// runLive is the helper of TestInstall_Live. It prints one line per
// failed check and exits 1 if any failed.
func runLive(args []string) int {
	if len(args) == 1 && args[0] == "status" {
		return printStatus()
	}
	if len(args) == 1 && args[0] == "nonroot" {
		return runNonRoot()
	}
	dir := args[0]
	// Private mounts, so nothing of a mount that got through would
	// propagate to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Println("FAIL make mounts private:", err)
		return 1
	}
	f, err := Compile(Default(), Options{Caps: allCaps()})
	if err != nil {
		fmt.Println("FAIL compile:", err)
		return 1
	}
	if err := f.Install(); err != nil {
		fmt.Println("FAIL install:", err)
		return 1
	}
	c := &liveChecks{}
	c.refused(dir)
	c.allowed(dir)
	if c.failed {
		return 1
	}
	fmt.Printf("%s (%d)\n", liveOK, c.n)
	return 0
}

type liveChecks struct {
	n      int
	failed bool
}

func (c *liveChecks) fail(format string, a ...any) {
	c.failed = true
	fmt.Printf("FAIL "+format+"\n", a...)
}

// errno makes a raw syscall and checks its errno.
func (c *liveChecks) errno(what string, want syscall.Errno, nr uintptr, a ...uintptr) {
	c.n++
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != want {
		c.fail("%s: errno %v (%d), want %v", what, e, int(e), want)
	}
}

// atFDCWD is AT_FDCWD (-100) as a syscall argument.
const atFDCWD = ^uintptr(99)

func ptr(s string) uintptr {
	b := append([]byte(s), 0)
	return uintptr(unsafe.Pointer(&b[0]))
}

// refused checks the floor. Each call's arguments make it fail in some
// other way (or do nothing) should the filter let it through.
func (c *liveChecks) refused(dir string) {
	const eperm = syscall.EPERM
	sessionKeyring := uintptr(0xfffffffd) // KEY_SPEC_SESSION_KEYRING (-3)
	c.errno("keyctl(GET_KEYRING_ID, @s)", eperm, unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, sessionKeyring, 0)
	c.errno("add_key", eperm, unix.SYS_ADD_KEY, ptr("tether-no-such-type"), ptr("x"), 0, 0, sessionKeyring)
	c.errno("request_key", eperm, unix.SYS_REQUEST_KEY, ptr("tether-no-such-type"), ptr("x"), 0, sessionKeyring)
	c.errno("unshare(CLONE_NEWUSER)", eperm, unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	c.errno("unshare(CLONE_FS)", eperm, unix.SYS_UNSHARE, unix.CLONE_FS)
	c.errno("clone(CLONE_NEWUSER|CLONE_THREAD)", eperm, unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD)
	c.errno("clone(CLONE_NEWNS|CLONE_THREAD)", eperm, unix.SYS_CLONE, unix.CLONE_NEWNS|unix.CLONE_THREAD)
	c.errno("clone3", syscall.ENOSYS, unix.SYS_CLONE3, 0, 0)
	c.errno("setns", eperm, unix.SYS_SETNS, ^uintptr(0), 0)
	mnt := filepath.Join(dir, "mnt")
	_ = os.Mkdir(mnt, 0o700)
	c.errno("mount tmpfs", eperm, unix.SYS_MOUNT, ptr("none"), ptr(mnt), ptr("tmpfs"), 0, 0)
	c.errno("umount2", eperm, unix.SYS_UMOUNT2, ptr(mnt), 0)
	c.errno("pivot_root", eperm, unix.SYS_PIVOT_ROOT, ptr(mnt), ptr(mnt))
	c.errno("fsopen", eperm, unix.SYS_FSOPEN, ptr("tmpfs"), 0)
	c.errno("fsmount", eperm, unix.SYS_FSMOUNT, ^uintptr(0), 0, 0)
	c.errno("fsconfig", eperm, unix.SYS_FSCONFIG, ^uintptr(0), 0, 0, 0, 0)
	c.errno("fspick", eperm, unix.SYS_FSPICK, ^uintptr(0), ptr(mnt), 0)
	c.errno("open_tree", eperm, unix.SYS_OPEN_TREE, ^uintptr(0), ptr(mnt), 0)
	c.errno("move_mount", eperm, unix.SYS_MOVE_MOUNT, ^uintptr(0), ptr(mnt), ^uintptr(0), ptr(mnt), 0)
	c.errno("mount_setattr", eperm, unix.SYS_MOUNT_SETATTR, ^uintptr(0), ptr(mnt), 0, 0, 0)
	c.errno("bpf", eperm, unix.SYS_BPF, ^uintptr(0), 0, 0)
	c.errno("perf_event_open", eperm, unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	c.errno("kexec_load", eperm, unix.SYS_KEXEC_LOAD, 0, 0, 0, ^uintptr(0))
	c.errno("kexec_file_load", eperm, unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, ^uintptr(0))
	c.errno("init_module", eperm, unix.SYS_INIT_MODULE, 0, 0, 0)
	c.errno("finit_module", eperm, unix.SYS_FINIT_MODULE, ^uintptr(0), ptr(""), 0)
	c.errno("delete_module", eperm, unix.SYS_DELETE_MODULE, ptr("tether_no_such_module"), 0)
	c.errno("userfaultfd", eperm, unix.SYS_USERFAULTFD, 0)
	c.errno("open_by_handle_at", eperm, unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0)
	c.errno("personality(ADDR_NO_RANDOMIZE)", eperm, unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */)
	c.errno("acct", eperm, unix.SYS_ACCT, ptr(filepath.Join(dir, "none")))
	c.errno("swapon", eperm, unix.SYS_SWAPON, ptr(filepath.Join(dir, "none")), 0)
	c.errno("swapoff", eperm, unix.SYS_SWAPOFF, ptr(filepath.Join(dir, "none")))
	c.errno("reboot", eperm, unix.SYS_REBOOT, 0, 0, 0, 0)
	c.errno("settimeofday(NULL, NULL)", eperm, unix.SYS_SETTIMEOFDAY, 0, 0)
	c.errno("clock_settime", eperm, unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, 0)
	c.errno("adjtimex (with CAP_SYS_TIME)", eperm, unix.SYS_ADJTIMEX, 0)
	c.errno("clock_adjtime (with CAP_SYS_TIME)", eperm, unix.SYS_CLOCK_ADJTIME, unix.CLOCK_REALTIME, 0)
	c.errno("iopl", eperm, unix.SYS_IOPL, 4)
	dev := filepath.Join(dir, "null")
	c.errno("mknodat(S_IFCHR)", eperm, unix.SYS_MKNODAT, atFDCWD, ptr(dev), unix.S_IFCHR|0o600, uintptr(unix.Mkdev(1, 3)))
	c.errno("mknod(S_IFBLK)", eperm, unix.SYS_MKNOD, ptr(dev), unix.S_IFBLK|0o600, uintptr(unix.Mkdev(7, 0)))
	c.errno("socket(AF_VSOCK)", eperm, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	c.errno("socket(AF_ALG)", eperm, unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)
	c.errno("i386 int 0x80 is not reachable from Go; x32 getpid", eperm, unix.SYS_GETPID|0x40000000)
}

// allowed checks that ordinary work goes on under the filter.
func (c *liveChecks) allowed(dir string) {
	// Threads: goroutines locked to threads make the runtime clone new
	// ones, now, under the filter.
	before := threads()
	var wg sync.WaitGroup
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- struct{}{}
			<-release
		}()
	}
	for range 8 {
		<-started
	}
	c.n++
	// Eight threads held by the goroutines and one for this one: some
	// were made after the install.
	if after := threads(); after < 9 || after <= before {
		c.fail("threads: %d before, %d with 8 locked goroutines", before, after)
	}
	// Every thread, the new ones too, is filtered.
	c.n++
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil || !bytes.Contains(b, []byte("\nSeccomp:\t2\n")) {
			c.fail("%s: not in filter mode (%v)", st, err)
		}
	}
	close(release)
	wg.Wait()

	// Files.
	c.n++
	p := filepath.Join(dir, "file")
	if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
		c.fail("write a file: %v", err)
	} else if b, err := os.ReadFile(p); err != nil || string(b) != "data" {
		c.fail("read a file: %q %v", b, err)
	} else if err := os.Rename(p, p+".2"); err != nil {
		c.fail("rename: %v", err)
	} else if err := os.Remove(p + ".2"); err != nil {
		c.fail("remove: %v", err)
	}
	// A FIFO is not a device.
	c.errno("mknodat(S_IFIFO)", 0, unix.SYS_MKNODAT, atFDCWD, ptr(filepath.Join(dir, "fifo")), unix.S_IFIFO|0o600, 0)
	c.errno("personality(query)", 0, unix.SYS_PERSONALITY, 0xffffffff)
	c.errno("adjtimex is refused but clock_gettime is not", 0, unix.SYS_CLOCK_GETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&unix.Timespec{})))

	// Sockets: TCP on loopback, a unix socket pair.
	c.n++
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.fail("listen tcp: %v", err)
	} else {
		go func() {
			if conn, err := ln.Accept(); err == nil {
				_, _ = conn.Write([]byte("pong"))
				conn.Close()
			}
		}()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			c.fail("dial tcp: %v", err)
		} else {
			buf := make([]byte, 4)
			if _, err := conn.Read(buf); err != nil || string(buf) != "pong" {
				c.fail("read tcp: %q %v", buf, err)
			}
			conn.Close()
		}
		ln.Close()
	}
	c.n++
	if fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); err != nil {
		c.fail("socketpair: %v", err)
	} else {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}

	// Exec: the child inherits the filter (os/exec clones with
	// CLONE_VFORK|CLONE_VM and a pidfd: allowed).
	c.n++
	out, err := exec.Command(os.Args[0], helperLive, "status").Output()
	if err != nil {
		c.fail("exec a child: %v", err)
	} else if strings.TrimSpace(string(out)) != "2" {
		c.fail("the child's seccomp mode is %q, want 2", out)
	}
}

func threads() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

func printStatus() int {
	m, err := Mode()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println(m)
	return 0
}

// TestCheckHost: this host filters (the live test shows it), and the
// status field is read as the kernel writes it.
func TestCheckHost(t *testing.T) {
	if err := CheckHost(); err != nil {
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "--allow-seccomp unconfined") {
			t.Fatalf("CheckHost: %v: not ErrUnsupported with what to do", err)
		}
		t.Skipf("this kernel has no seccomp filter: %v", err)
	}
	if !hasSeccompField([]byte("Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n")) {
		t.Error("the Seccomp field was not found")
	}
	if hasSeccompField([]byte("Name:\tx\nNoNewPrivs:\t0\n")) {
		t.Error("a status without Seccomp was taken for one with it")
	}
	if m, err := Mode(); err != nil || m != 0 {
		t.Errorf("the test binary's seccomp mode: %d %v, want 0", m, err)
	}
}
