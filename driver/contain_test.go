package driver

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
)

// modeContainTask is a task mode of this file's tests, dispatched in init
// (before TestMain): "alloc MB" maps and touches MB megabytes.
const modeContainTask = "tether-contain-task"

func init() {
	if len(os.Args) > 2 && os.Args[1] == modeContainTask {
		os.Exit(runContainTask(os.Args[2:]))
	}
}

func runContainTask(args []string) int {
	switch args[0] {
	case "escape", "escape-orphan", "escape-worker":
		// escape FIFO MARKER: start an escapee (below) as a child, then
		// sleep; escape-orphan FIFO MARKER: the escapee is a grandchild
		// whose parent exits at once (a double fork), so that it is
		// reparented to the executor, the task's subreaper;
		// escape-worker FIFO MARKER: the escapee is the child of a
		// worker that stays in the task's cgroup and sleeps.
		switch args[0] {
		case "escape-orphan":
			args = append([]string{"escape-middle"}, args[1:]...)
		case "escape-worker":
			args = append([]string{"escape"}, args[1:]...)
		default:
			args = append([]string{"escapee"}, args[1:]...)
		}
		c := exec.Command(os.Args[0], append([]string{modeContainTask}, args...)...)
		if args[0] == "escapee" {
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := c.Start(); err != nil {
			return 2
		}
		if args[0] == "escape-middle" {
			_ = c.Wait()
		}
		select {}
	case "escape-middle":
		c := exec.Command(os.Args[0], append([]string{modeContainTask, "escapee-orphan"}, args[1:]...)...)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		c.Env = append(os.Environ(), "ESCAPEE_PARENT="+strconv.Itoa(os.Getpid()))
		if err := c.Start(); err != nil {
			return 2
		}
		return 0 // the escapee is orphaned
	case "escapee", "escapee-orphan":
		// escapee FIFO MARKER: leave the task's cgroup for its parent in
		// every hierarchy (root can), then say so on FIFO and sleep. It
		// runs in a session of its own (its parent set Setsid).
		// escapee-orphan first waits for its parent to exit, so that it
		// has been reparented when it says so.
		if args[0] == "escapee-orphan" {
			parent, _ := strconv.Atoi(os.Getenv("ESCAPEE_PARENT"))
			if err := waitPidfd(parent); err != nil && !errors.Is(err, unix.ESRCH) {
				return 5 // (ESRCH: gone already)
			}
		}
		if err := leaveCgroup(); err != nil {
			fmt.Fprintln(os.Stderr, "escapee:", err)
			return 3
		}
		if err := os.WriteFile(args[1], []byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
			return 4
		}
		select {}
	case "alloc":
		mb, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return 2
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		fmt.Println("survived")
		return 0
	}
	return 100
}

// leaveCgroup moves this process out of its cgroup, into the parent, in
// every hierarchy tether uses: what a root task can do, and stop's kill
// still reaches.
func leaveCgroup() error {
	h, err := cgroup.Probe()
	if err != nil {
		return err
	}
	for _, hi := range h.Hierarchies {
		if hi.Path == "/" {
			continue
		}
		rel, ok := strings.CutPrefix(path.Dir(hi.Path), hi.Root)
		if !ok {
			return fmt.Errorf("%s: %s is not below %s", hi.Key, hi.Path, hi.Root)
		}
		procs := filepath.Join(hi.Mount, rel, "cgroup.procs")
		if err := os.WriteFile(procs, []byte("0\n"), 0); err != nil {
			return fmt.Errorf("%s: %w", hi.Key, err)
		}
	}
	return nil
}

// needCgroups skips a test on a host where this process cannot make task
// cgroups, naming what is missing.
func needCgroups(t testing.TB) cgroup.Host {
	t.Helper()
	h, err := cgroup.Probe()
	if err != nil {
		t.Skipf("needs cgroups: %v", err)
	}
	if err := h.Usable(); err != nil {
		t.Skipf("needs task cgroups (root or a delegated cgroup): %v", err)
	}
	return h
}

func needBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := os.Stat(n); err != nil {
			t.Skipf("needs %s: %v", n, err)
		}
	}
}

// randomDigits is a random decimal string, to tag processes (sleep 301.N)
// that carry no other marker.
func randomDigits(t testing.TB) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(binary.BigEndian.Uint64(b[:])>>20, 10)
}

// openFifo makes a fifo in dir and opens it read-write, so that a writer's
// open never blocks and a read honours deadlines.
func openFifo(t *testing.T, dir string) (string, *os.File) {
	t.Helper()
	p := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f
}

func readLineDeadline(t *testing.T, f *os.File) string {
	t.Helper()
	if err := f.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		t.Fatalf("reading %s: %v", f.Name(), err)
	}
	return strings.TrimSpace(line)
}

// alive reports whether pid is a live (non-zombie) process started at
// start.
func alive(pid int, start uint64) bool {
	ok, err := proc.Alive(fsm.Identity{PID: pid, StartTime: start})
	return err == nil && ok
}

// TestRecover_SetsidDescendantOfKilledExecutorIsKilled is the regression
// for the leak of issue 12 (Nomad issue 24219): a raw_exec task
// `sh -c 'setsid sleep 301 & exec sleep 302'` whose executor is SIGKILLed
// leaves the setsid'd sleep outside the task's process group; a process
// group kill misses it, so before the task cgroup it lived on, reparented,
// after Recover had recorded the task lost. Now Recover kills the task's
// cgroup from the log and nothing of the task is left.
func TestRecover_SetsidDescendantOfKilledExecutorIsKilled(t *testing.T) {
	needCgroups(t)
	needBinaries(t, "/bin/sh", "/usr/bin/setsid", "/bin/sleep")
	dir := stateDir(t)
	fifo, rd := openFifo(t, t.TempDir())
	suffix := randomDigits(t)
	d := newDriver(t, dir, Hooks{})
	ctx := ctxT(t)
	// The descendant reports its pid once it has left the session (setsid
	// runs the inner sh), then becomes sleep 301.
	script := fmt.Sprintf("setsid sh -c 'echo $$ > %s; exec sleep 301.%s' & exec sleep 302.%s", fifo, suffix, suffix)
	st, err := d.StartTask(ctx, "leaky", fsm.Spec{Driver: "raw_exec", Command: "/bin/sh", Args: []string{"-c", script, dir}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"stdout.log", "stderr.log", "executor.log"} {
				b, _ := os.ReadFile(filepath.Join(d.TaskDir("leaky"), f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	})
	escapee, err := strconv.Atoi(readLineDeadline(t, rd))
	if err != nil {
		t.Fatal(err)
	}
	escStart, err := proc.StartTime(escapee)
	if err != nil {
		t.Fatalf("the setsid'd sleep: %v", err)
	}
	if sid, _ := unix.Getsid(escapee); sid != escapee {
		t.Fatalf("the descendant did not leave the task's session: sid %d", sid)
	}
	if st.Executor == nil || st.Executor.Cgroup == "" {
		t.Errorf("executor-up recorded no cgroup: %+v", st.Executor)
	}
	// The driver goes away (as a CLI command does), then the executor is
	// SIGKILLed behind its back.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(ctx, *st.Executor); err != nil {
		t.Fatal(err)
	}

	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	final, err := d2.InspectTask(ctx, "leaky")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateLost {
		t.Errorf("task %s after recover, want lost", final.State)
	}
	if alive(escapee, escStart) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", escapee))
		_ = syscall.Kill(escapee, syscall.SIGKILL)
		t.Fatalf("the setsid'd descendant %d (%q) outlived Recover: the task is %s", escapee, strings.ReplaceAll(string(b), "\x00", " "), final.State)
	}
	if final.TaskPID != 0 && alive(final.TaskPID, final.TaskStartTime) {
		t.Errorf("the task's main process %d is alive", final.TaskPID)
	}
	for _, p := range testproc.Marked(suffix) {
		t.Errorf("left in /proc: %s", p)
	}
	checkCgroupGone(t, final.Task)
}

// checkCgroupGone checks that a terminal task's cgroup no longer exists in
// any hierarchy.
func checkCgroupGone(t *testing.T, st fsm.Task) {
	t.Helper()
	if st.Executor == nil || st.Executor.Cgroup == "" {
		return
	}
	h, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.OpenRecorded(h, st.Executor.Cgroup, st.ID, st.Executor.Nonce)
	if err != nil {
		t.Fatalf("recorded cgroup: %v", err)
	}
	for key, d := range cg.Dirs() {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("task %s is %s but its %s cgroup %s is still there", st.ID, st.State, key, d)
		}
	}
}

// escapingSpec is a raw_exec task whose main process is a sleeper and which
// has started a second one in a session of its own; both carry marker.
func escapingSpec(t testing.TB, marker string) fsm.Spec { return escapingSpecOf(self(t), marker) }

func escapingSpecOf(bin, marker string) fsm.Spec {
	return fsm.Spec{Driver: "raw_exec", Command: "/bin/sh", Args: []string{"-c",
		`setsid "$0" ` + modeTask + ` sleep "$1" & exec "$0" ` + modeTask + ` sleep "$1"`, bin, marker}}
}

// cgroupsUsable reports whether this host gives task cgroups (then the
// crash test's tasks leave a descendant in a session of its own, which
// only the cgroup can find).
func cgroupsUsable() bool {
	h, err := cgroup.Probe()
	return err == nil && h.Usable() == nil
}

// cgroupMembers lists the processes in a running task's recorded cgroup.
func cgroupMembers(t *testing.T, st fsm.Task) []int {
	t.Helper()
	if st.Executor == nil || st.Executor.Cgroup == "" {
		return nil
	}
	h, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.OpenRecorded(h, st.Executor.Cgroup, st.ID, st.Executor.Nonce)
	if err != nil {
		t.Fatalf("recorded cgroup: %v", err)
	}
	procs, err := cg.Procs()
	if err != nil {
		t.Fatal(err)
	}
	return procs
}

// TestStopTask_ConfirmsCgroupEmpty: a stop kills a task's descendant that
// left its session, confirms the cgroup empty and removes it.
func TestStopTask_ConfirmsCgroupEmpty(t *testing.T) {
	needCgroups(t)
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	if _, err := d.StartTask(ctx, "esc", escapingSpec(t, dir)); err != nil {
		t.Fatal(err)
	}
	final, err := d.StopTask(ctx, "esc", syscall.SIGTERM, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, final)
	checkCgroupGone(t, final)
	for _, p := range testproc.Marked(dir) {
		t.Errorf("left after the stop: %s", p)
	}
}

// TestStartTask_OOMKilledIsRecorded: a task touching 400 MB under memory =
// 64 is killed by the kernel, and the driver records it exited with an OOM
// kill, in its state and its terminal event.
func TestStartTask_OOMKilledIsRecorded(t *testing.T) {
	h := needCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	dir := stateDir(t)
	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	ctx := ctxT(t)
	spec := fsm.Spec{Driver: "raw_exec", Command: self(t), Args: []string{modeContainTask, "alloc", "400", dir},
		Resources: fsm.Resources{MemoryMB: 64}}
	if _, err := d.StartTask(ctx, "hog", spec); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, "hog")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateExited || final.Exit == nil || !final.Exit.OOM || final.Exit.Signal != int(syscall.SIGKILL) {
		t.Fatalf("final %s exit %v, want exited, SIGKILL, OOM killed", final.State, final.Exit)
	}
	evs, err := d.TaskEvents(ctx, "hog")
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != fsm.EventExecutorReaped || last.Exit == nil || !last.Exit.OOM {
		t.Errorf("terminal event %s exit %v, want executor-reaped with the OOM kill", last.Type, last.Exit)
	}
	checkCgroupGone(t, final)
}

// TestReal_CheckSpec: the host-dependent checks the driver can run before
// spawning anything.
func TestReal_CheckSpec(t *testing.T) {
	r := &executor.Real{StateDir: t.TempDir()}
	for _, tc := range []struct {
		spec fsm.Spec
		want error
	}{
		{fsm.Spec{Driver: "raw_exec", Command: "/bin/true", User: "tether-no-such-user"}, executor.ErrUnknownUser},
		{fsm.Spec{Driver: "exec", Command: "/bin/true", CapAdd: []string{"net_raw"}}, executor.ErrCapNotAllowed},
		{fsm.Spec{Driver: "exec", Command: "/bin/true", PIDMode: "host", IPCMode: "host"}, executor.ErrBadSpec},
		{fsm.Spec{Driver: "exec", Command: "/bin/true", IPCMode: "host"}, executor.ErrBadSpec},
		{fsm.Spec{Driver: "exec", Command: "/bin/true", PIDMode: "host", IPCMode: "host", Name: "allowed"}, nil},
		{fsm.Spec{Driver: "raw_exec", Command: "/bin/true", Resources: fsm.Resources{MemoryMB: 64, PIDs: 10}}, nil},
	} {
		r := r
		if tc.spec.Name == "allowed" { // the operator's word: --allow-host-namespaces pid,ipc
			r = &executor.Real{StateDir: r.StateDir, Policy: executor.Policy{AllowHostNamespaces: []string{"pid", "ipc"}}}
		}
		err := r.CheckSpec(tc.spec)
		if tc.want == nil && err != nil {
			if h, perr := cgroup.Probe(); perr != nil || h.Usable() != nil || os.Geteuid() != 0 {
				continue // a host without cgroups refuses these, as it should
			}
			t.Errorf("%+v: %v", tc.spec, err)
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.spec, err, tc.want)
		}
	}
}

// escapeTask starts a root raw_exec task (mode escape or escape-orphan of
// runContainTask) whose escapee leaves the task's cgroup for its parent
// and its session, and returns the task and the escapee.
func escapeTask(t *testing.T, d *Driver, dir, id, mode string) (fsm.Task, fsm.Proc) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a root task can move itself out of its cgroup")
	}
	fifo, rd := openFifo(t, t.TempDir())
	st, err := d.StartTask(ctxT(t), id, fsm.Spec{Driver: "raw_exec", Command: self(t), Args: []string{modeContainTask, mode, fifo, dir}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	pid, err := strconv.Atoi(readLineDeadline(t, rd))
	if err != nil {
		t.Fatal(err)
	}
	start, err := proc.StartTime(pid)
	if err != nil {
		t.Fatalf("the escapee: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if slices.Contains(cgroupMembers(t, st), pid) {
		t.Fatalf("the escapee %d is still in the task's cgroup", pid)
	}
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Fatalf("the escapee did not leave the task's session: sid %d", sid)
	}
	return st, fsm.Proc{PID: pid, StartTime: start}
}

// TestRecover_RootTaskChildThatLeftItsCgroupIsKilled: a root raw_exec
// task's child moves itself out of the task's cgroup (into its parent) and
// into a session of its own; the executor is SIGKILLed behind the
// driver's back. tether stop would have killed the child (the executor,
// its subreaper, kills every descendant it sees); Recover kills only the
// task's cgroup, so before issue 27 the child lived on while the task was
// recorded lost. Recover's kill now stops and kills every descendant of the
// task's proven processes before the cgroup, so the child is dead.
//
// With escape-worker the escapee's parent is a worker that stays in the
// cgroup, and the task's main process is killed too before Recover: the
// walk starts from every member of the task's cgroup as well.
func TestRecover_RootTaskChildThatLeftItsCgroupIsKilled(t *testing.T) {
	needCgroups(t)
	for _, mode := range []string{"escape", "escape-worker"} {
		t.Run(mode, func(t *testing.T) { testRecoverKillsTheEscapee(t, mode) })
	}
}

func testRecoverKillsTheEscapee(t *testing.T, mode string) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d := newDriver(t, dir, Hooks{})
	st, escapee := escapeTask(t, d, dir, "leaky", mode)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(ctx, *st.Executor); err != nil { // the executor alone, as an OOM kill or kill -9 would
		t.Fatal(err)
	}
	if mode == "escape-worker" {
		if err := proc.Kill(ctx, fsm.Identity{PID: st.TaskPID, StartTime: st.TaskStartTime}); err != nil {
			t.Fatal(err)
		}
	}
	d2 := newDriver(t, dir, Hooks{})
	defer d2.Close()
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	final, err := d2.InspectTask(ctx, "leaky")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateLost {
		t.Errorf("task %s after recover, want lost", final.State)
	}
	if alive(escapee.PID, escapee.StartTime) {
		t.Fatalf("the child that left the task's cgroup and session (pid %d) outlived Recover: the task is %s", escapee.PID, final.State)
	}
	for _, p := range testproc.Marked(dir) {
		t.Errorf("left in /proc: %s", p)
	}
	checkCgroupGone(t, final.Task)
}

// TestRecover_RootTaskEscapeLimits holds what README says a root raw_exec
// task can still escape. Its escapee is a grandchild that left the task's
// cgroup and session and whose parent exited at once, so it was
// reparented to the executor (the task's subreaper):
//   - tether stop, with the executor alive, kills it (the executor kills
//     every descendant it can see, its adopted orphans among them);
//   - after the executor is SIGKILLed behind the driver's back, the orphan
//     is reparented to init: no parent, cgroup, session or group ties it
//     to the task any more, and Recover cannot prove it the task's. It
//     survives, as documented (and is killed here by the test).
func TestRecover_RootTaskEscapeLimits(t *testing.T) {
	needCgroups(t)
	t.Run("stop kills the orphan", func(t *testing.T) {
		dir := stateDir(t)
		d := newDriver(t, dir, Hooks{})
		defer d.Close()
		_, escapee := escapeTask(t, d, dir, "orphan", "escape-orphan")
		final, err := d.StopTask(ctxT(t), "orphan", syscall.SIGTERM, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		checkReaped(t, d, final)
		if alive(escapee.PID, escapee.StartTime) {
			t.Errorf("tether stop left the orphan that left the cgroup (pid %d)", escapee.PID)
		}
	})
	t.Run("a killed executor hands the orphan to init", func(t *testing.T) {
		dir := stateDir(t)
		ctx := ctxT(t)
		d := newDriver(t, dir, Hooks{})
		st, escapee := escapeTask(t, d, dir, "orphan", "escape-orphan")
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := proc.Kill(ctx, *st.Executor); err != nil {
			t.Fatal(err)
		}
		d2 := newDriver(t, dir, Hooks{})
		defer d2.Close()
		if _, err := d2.Recover(ctx); err != nil {
			t.Fatalf("recover: %v", err)
		}
		final, err := d2.InspectTask(ctx, "orphan")
		if err != nil {
			t.Fatal(err)
		}
		if final.State != fsm.StateLost || (final.TaskPID != 0 && alive(final.TaskPID, final.TaskStartTime)) {
			t.Errorf("task %s, main process alive %v; want lost and dead", final.State, final.TaskPID != 0 && alive(final.TaskPID, final.TaskStartTime))
		}
		if !alive(escapee.PID, escapee.StartTime) {
			t.Fatalf("the orphan was killed: README's limit is out of date (good news: say so there)")
		}
		s, err := proc.ReadStat(escapee.PID)
		if err != nil || s.PPID == st.Executor.PID {
			t.Fatalf("the orphan's parent is %d (%v), want init or a subreaper above the executor", s.PPID, err)
		}
		_ = syscall.Kill(escapee.PID, syscall.SIGKILL)
		_ = waitPidfd(escapee.PID)
	})
}
