package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	mobyseccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
)

func init() { builds["sleeper"] = struct{ dir, pkg string }{".", "./internal/sleeper"} }

// needContainment skips a benchmark where exec tasks cannot run.
func needContainment(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("isolation needs root")
	}
	h, err := cgroup.Probe()
	if err == nil {
		err = h.Usable()
	}
	if err != nil {
		b.Skipf("needs task cgroups: %v", err)
	}
}

// findRunc returns runc's path, installing it with apt-get when it is
// absent (and saying so); "" with why when it cannot be had.
func findRunc(b *testing.B) (string, string) { return findTool(b, "runc", "runc") }

// findTool returns the path of the program name, installing the Debian
// package pkg with apt-get when it is absent (and saying so in the log);
// "" with why when it cannot be had.
func findTool(b *testing.B, name, pkg string) (string, string) {
	if p, err := exec.LookPath(name); err == nil {
		return p, ""
	}
	if os.Geteuid() != 0 {
		return "", name + " is not installed, and installing it needs root"
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", name + " is not installed and there is no apt-get to install it"
	}
	b.Logf("%s is not installed: installing it with apt-get install -y %s", name, pkg)
	cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", pkg)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("apt-get install %s failed: %v: %s", pkg, err, lastLine(out))
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", "apt-get installed " + pkg + ", but " + name + " is not in PATH"
	}
	return p, ""
}

func lastLine(b []byte) string {
	s := string(b)
	if len(s) > 300 {
		s = s[len(s)-300:]
	}
	return s
}

// chrootOf is executor.DefaultChroot's entries that exist here, with the
// sleeper's directory at /bench.
func chrootOf(sleeperDir string) []string {
	var out []string
	for _, e := range executor.DefaultChroot {
		if _, err := os.Lstat(e); err == nil {
			out = append(out, e)
		}
	}
	return append(out, sleeperDir+":/bench")
}

// runcBundle writes an OCI bundle for one container: the same root as
// tether's exec task (the same read-only binds, the same links, the
// task's four writable directories, proc, a tmpfs /dev with devpts and
// shm, the same masked and read-only paths), the same namespaces (pid,
// mount, ipc, uts, cgroup), user nobody with no capability (as a nobody
// exec task of tether's holds none), no new privileges, Docker's default
// seccomp profile as Docker builds it for those capabilities (tether's
// default filter), memory limit 64 MB. runc joins a new session keyring
// by default, as tether's shim does.
func runcBundle(b *testing.B, dir string, chroot []string) string {
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		b.Fatal(err)
	}
	type mount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	mounts := []mount{
		{"/proc", "proc", "proc", []string{"nosuid", "noexec", "nodev"}},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755", "size=64k"}},
		{"/dev/pts", "devpts", "devpts", []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"/dev/shm", "tmpfs", "shm", []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
	}
	for _, e := range chroot {
		src, dst := e, e
		if i := indexByte(e, ':'); i >= 0 {
			src, dst = e[:i], e[i+1:]
		}
		if fi, err := os.Lstat(src); err == nil && fi.Mode()&os.ModeSymlink != 0 && src == dst {
			target, _ := os.Readlink(src)
			_ = os.Symlink(target, filepath.Join(rootfs, dst)) // as tether makes the same link
			continue
		}
		mounts = append(mounts, mount{dst, "bind", src, []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	for _, d := range []string{"local", "secrets", "tmp", "alloc"} {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Chown(p, 65534, 65534); err != nil {
			b.Fatal(err)
		}
		mounts = append(mounts, mount{"/" + d, "bind", p, []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	caps := []string{} // nobody's: none
	profile, err := mobyseccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		b.Fatal(err)
	}
	cfg := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]int{"uid": 65534, "gid": 65534},
			"args":     []string{"/bench/sleeper"},
			"env":      []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/local"},
			"cwd":      "/local",
			"capabilities": map[string][]string{
				"bounding": caps, "effective": caps, "permitted": caps, "inheritable": caps, "ambient": caps,
			},
			"noNewPrivileges": true,
		},
		"root":   map[string]any{"path": "rootfs", "readonly": true},
		"mounts": mounts,
		"linux": map[string]any{
			"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}, {"type": "cgroup"}},
			"resources":  map[string]any{"memory": map[string]int64{"limit": 64 << 20}},
			"seccomp":    profile,
			"maskedPaths": []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
				"/proc/timer_stats", "/proc/acpi", "/proc/scsi", "/etc/shadow", "/etc/gshadow"},
			"readonlyPaths": []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"},
		},
	}
	bs, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), bs, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// BenchmarkExecStartVsRunc: a whole isolated task start through tether
// (StartTask -> running: the store's six durable appends, the executor's
// spawn, then the launch of BenchmarkExecLaunchVsRunc) against `runc run
// -d` of the same static binary with the same namespaces, root, user,
// capabilities and limit, interleaved; with the driver's phases. tether
// does more here than runc (a supervisor that outlives the caller, and a
// write-ahead log): the figure is for information.
func BenchmarkExecStartVsRunc(b *testing.B) {
	needContainment(b)
	runc, why := findRunc(b)
	if runc == "" {
		b.Skipf("runc unavailable, so the row is skipped: %s", why)
	}
	exe, sleeper := bin(b, "tether-executor"), bin(b, "sleeper")
	if err := os.Chmod(filepath.Dir(sleeper), 0o755); err != nil {
		b.Fatal(err)
	}
	chroot := chrootOf(filepath.Dir(sleeper))
	base := b.TempDir()
	dir := filepath.Join(base, "state")
	ph := newProbes()
	d, err := driver.Open(driver.Config{StateDir: dir, KillTimeout: time.Second, Hooks: driver.Hooks{Crash: ph.hit},
		World: &executor.Real{StateDir: dir, Command: []string{exe}, Policy: executor.Policy{Chroot: chroot}}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	spec := fsm.Spec{Driver: "exec", Command: "/bench/sleeper", Resources: fsm.Resources{MemoryMB: 64}}
	ctx := context.Background()
	runcRoot := filepath.Join(base, "runc")
	tether := func(i int) float64 {
		id := "iso-" + strconv.Itoa(i+1)
		ph.reset()
		t0 := time.Now()
		st, err := d.StartTask(ctx, id, spec)
		el := since(t0)
		if err != nil || st.State != fsm.StateRunning {
			b.Fatalf("StartTask: %v (%s)", err, st.State)
		}
		ph.span("spawn", "before-effect:spawn-executor", "after-effect:spawn-executor")
		ph.span("launch", "before-effect:launch-task", "after-effect:launch-task")
		if err := d.DestroyTask(ctx, id, true); err != nil {
			b.Fatal(err)
		}
		return el
	}
	peer := func(i int) float64 {
		return runcRun(b, runc, runcRoot, filepath.Join(base, "bundles"), "start-runc-"+strconv.Itoa(i+2), chroot)
	}
	peer(-2) // warm both paths
	tether(-2)
	b.ResetTimer()
	p := interleaveSettled(b, tether, peer)
	p.reportMs(b, "tether", "runc", true)
	ph.report(b)
}

// BenchmarkExecLaunchVsRunc: the isolated start proper. A spawned
// executor (untimed, as Nomad's executor is there before libcontainer
// starts the task) launches the static sleeper as an exec task: the init
// shim, the cgroup with memory = 64, new PID, mount, IPC and UTS
// namespaces, a cgroup namespace, the root of read-only binds,
// pivot_root, a new session keyring, nobody with no capability, and
// Docker's default seccomp filter (compiled by the executor, installed by
// the shim), until the task runs. Against `runc run -d` of the same
// binary with the same namespaces, root, user, capabilities and limit
// (see runcBundle), interleaved. Target: ratio <= 1.
func BenchmarkExecLaunchVsRunc(b *testing.B) {
	needContainment(b)
	runc, why := findRunc(b)
	if runc == "" {
		b.Skipf("runc unavailable, so the row is skipped: %s", why)
	}
	exe, sleeper := bin(b, "tether-executor"), bin(b, "sleeper")
	if err := os.Chmod(filepath.Dir(sleeper), 0o755); err != nil {
		b.Fatal(err)
	}
	chroot := chrootOf(filepath.Dir(sleeper))
	base := b.TempDir()
	ctx := context.Background()
	spec := executor.Launch{Spec: fsm.Spec{Driver: executor.ModeExec, Command: "/bench/sleeper", Resources: fsm.Resources{MemoryMB: 64}}, Policy: executor.Policy{Chroot: chroot}}
	runcRoot := filepath.Join(base, "runc")
	tether := func(i int) float64 {
		c, err := executor.Spawn(ctx, executor.SpawnConfig{Command: []string{exe}, TaskDir: filepath.Join(base, fmt.Sprintf("t%d", i+2)),
			Nonce: "launch-bench-" + strconv.Itoa(i+2)})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		t0 := time.Now()
		st, err := c.Launch(ctx, spec)
		el := since(t0)
		if err != nil || st.Exited {
			b.Fatalf("Launch: %+v %v", st, err)
		}
		if _, err := c.Stop(ctx, syscall.SIGKILL, 0); err != nil {
			b.Fatal(err)
		}
		_ = c.WaitDead(ctx)
		return el
	}
	peer := func(i int) float64 {
		return runcRun(b, runc, runcRoot, filepath.Join(base, "bundles"), "launch-runc-"+strconv.Itoa(i+2), chroot)
	}
	peer(-1) // warm both paths
	tether(-1)
	b.ResetTimer()
	p := interleaveSettled(b, tether, peer)
	p.reportMs(b, "tether", "runc", true)
}

// runcRun times `runc run -d` of a fresh bundle for container id, then
// deletes the container (untimed).
func runcRun(b *testing.B, runc, root, bundles, id string, chroot []string) float64 {
	bundle := runcBundle(b, filepath.Join(bundles, id), chroot)
	// The container keeps runc's stdio: a file, not a pipe that would
	// hold Run until the container ends.
	out, err := os.Create(filepath.Join(bundle, "runc.out"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(runc, "--root", root, "run", "-d", "--bundle", bundle, id)
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(out.Name())
		b.Fatalf("runc run: %v: %s", err, msg)
	}
	el := since(t0)
	if msg, err := exec.Command(runc, "--root", root, "delete", "-f", id).CombinedOutput(); err != nil {
		b.Fatalf("runc delete: %v: %s", err, msg)
	}
	return el
}

// BenchmarkStartCgroupVsNone: what containment costs a start. An executor
// is spawned and launches the static sleeper (raw_exec, through the init
// shim either way): in a cgroup of its own with memory = 64 and pids = 100,
// against the same executor spawned from a thread whose mount namespace
// has no cgroup hierarchy, which therefore runs its task uncontained.
// Interleaved; the ratio is the price of the cgroup and its limits (its
// creation, the join, and its kill and removal are not timed: the stop
// is not part of the start).
func BenchmarkStartCgroupVsNone(b *testing.B) {
	needContainment(b)
	exe, sleeper := bin(b, "tether-executor"), bin(b, "sleeper")
	base := b.TempDir()
	// The uncontained side spawns from a locked thread that has a mount
	// namespace of its own without /sys/fs/cgroup; its children inherit
	// it. The thread is never unlocked: it dies with the goroutine.
	// Not on the main thread: /proc/self is the main thread's view, which
	// every probe of this process reads.
	jobs := make(chan func())
	defer close(jobs)
	// A goroutine that lands on the main thread keeps it (locked, parked
	// until the benchmark ends), so the next try runs elsewhere.
	release := make(chan struct{})
	defer close(release)
	ready := make(chan error)
	errMain := errors.New("on the main thread")
	for try := 0; ; try++ {
		go func() {
			runtime.LockOSThread()
			if unix.Gettid() == unix.Getpid() {
				ready <- errMain
				<-release
				runtime.UnlockOSThread()
				return
			}
			err := unix.Unshare(unix.CLONE_NEWNS)
			if err == nil {
				err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
			}
			if err == nil {
				err = unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH)
			}
			ready <- err
			if err != nil {
				return
			}
			for f := range jobs {
				f()
			}
		}()
		err := <-ready
		if err == nil {
			break
		}
		if !errors.Is(err, errMain) || try == 2 {
			b.Skipf("cannot make a mount namespace without cgroups: %v", err)
		}
	}
	start := func(i int, limits bool) float64 {
		dir := filepath.Join(base, fmt.Sprintf("t%d-%v", i+2, limits))
		spec := executor.Launch{Spec: fsm.Spec{Driver: executor.ModeRawExec, Command: sleeper}}
		if limits {
			spec.Resources = fsm.Resources{MemoryMB: 64, PIDs: 100}
		}
		t0 := time.Now()
		var c *executor.Client
		var err error
		spawn := func() {
			c, err = executor.Spawn(context.Background(), executor.SpawnConfig{Command: []string{exe}, TaskDir: dir, Nonce: "bench" + strconv.Itoa(i+2) + "x" + strconv.FormatBool(limits)})
		}
		if limits {
			spawn()
		} else {
			done := make(chan struct{})
			jobs <- func() { spawn(); close(done) }
			<-done
		}
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Launch(context.Background(), spec)
		el := since(t0)
		if err != nil || st.Exited {
			b.Fatalf("Launch: %+v %v", st, err)
		}
		if got := c.Identity().Cgroup != ""; got != limits {
			b.Fatalf("cgroup %q on the side with limits=%v", c.Identity().Cgroup, limits)
		}
		if _, err := c.Stop(context.Background(), syscall.SIGKILL, 0); err != nil && !errors.Is(err, executor.ErrClosed) {
			b.Fatal(err)
		}
		_ = c.WaitDead(context.Background())
		c.Close()
		return el
	}
	start(-1, true) // warm both paths
	start(-1, false)
	b.ResetTimer()
	p := interleaveSettled(b, func(i int) float64 { return start(i, true) }, func(i int) float64 { return start(i, false) })
	p.reportMs(b, "cgroup", "none", true)
}
