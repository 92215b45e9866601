package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/testproc"
)

// isoHelperArg makes the test binary act as a task of this file's tests,
// dispatched in init (before TestMain). Its last argument is the state
// directory (the leak check's marker).
//
//	capeff MARKER            print the CapEff line of /proc/self/status
//	setsid-kid FIFO MARKER   start a kid (sleep) in a session of its own,
//	                         write "ready" to FIFO once it runs, block
//	sleep MARKER             print "ok", block
//	dropcap CAP -- ARGV...   drop CAP from the bounding set, exec ARGV
const isoHelperArg = "tether-isolation-helper"

func init() {
	testproc.Dispatch(map[string]func([]string) int{isoHelperArg: isoHelper})
}

func isoHelper(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "isolation helper: want MODE ... MARKER")
		return 2
	}
	switch args[0] {
	case "capeff", "seccomp":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		field := map[string]string{"capeff": "CapEff:", "seccomp": "Seccomp:"}[args[0]]
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, field) {
				fmt.Println(l)
			}
		}
		return 0
	case "setsid-kid":
		kid := exec.Command(os.Args[0], isoHelperArg, "sleep", args[len(args)-1])
		kid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		out, err := kid.StdoutPipe()
		if err != nil || kid.Start() != nil {
			return 2
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
			return 3
		}
		if err := os.WriteFile(args[1], []byte("ready\n"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		for {
			_ = unix.Pause()
		}
	case "sleep":
		fmt.Println("ok")
		for {
			_ = unix.Pause()
		}
	case "notify":
		// PATH MARKER: write "started" to PATH, then block, stdio untouched.
		if err := os.WriteFile(args[1], []byte("started\n"), 0); err != nil {
			return 2
		}
		for {
			_ = unix.Pause()
		}
	case "fdsteal":
		// GO READY MARKER: once GO has a line, reach for the descriptors
		// of every other process in sight (a tether exec command), print
		// what it got, write READY, block.
		f, err := os.Open(args[1])
		if err != nil {
			return 2
		}
		_, _ = bufio.NewReader(f).ReadString('\n')
		f.Close()
		var report []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			for fd := range 3 {
				p := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
				link, _ := os.Readlink(p)
				w, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
				if err == nil {
					_, err = w.WriteString("rewritten by the task\n")
					w.Close()
				}
				report = append(report, fmt.Sprintf("fd %d %s write:%v", fd, link, err))
			}
		}
		// On READY itself, one line: the log may not have it yet.
		if err := os.WriteFile(args[2], []byte(strings.Join(report, ";")+"\n"), 0); err != nil {
			return 3
		}
		for {
			_ = unix.Pause()
		}
	case "dropcap":
		if len(args) < 4 || args[2] != "--" {
			fmt.Fprintln(os.Stderr, "dropcap: want CAP -- ARGV...")
			return 2
		}
		c, ok := capNamed(args[1])
		if !ok {
			fmt.Fprintln(os.Stderr, "dropcap: no capability", args[1])
			return 2
		}
		// The bounding set is the thread's: the thread that drops is
		// the one that execs.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "dropcap:", err)
			return 2
		}
		err := syscall.Exec(args[3], args[3:], os.Environ())
		fmt.Fprintln(os.Stderr, "dropcap:", err)
		return 2
	}
	fmt.Fprintln(os.Stderr, "isolation helper: unknown mode", args[0])
	return 2
}

// capNamed is the capability called name ("net_raw" or "NET_RAW").
func capNamed(name string) (capability.Cap, bool) {
	for _, c := range capability.ListKnown() {
		if c.String() == strings.ToLower(name) {
			return c, true
		}
	}
	return 0, false
}

// capMaskOf is the CapEff mask of the named capabilities.
func capMaskOf(t *testing.T, names ...string) uint64 {
	t.Helper()
	var m uint64
	for _, n := range names {
		c, ok := capNamed(n)
		if !ok {
			t.Fatalf("no capability %q", n)
		}
		m |= 1 << uint(c)
	}
	return m
}

// needExec skips a test on a host where exec tasks cannot run.
func needExec(t *testing.T) cgroup.Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("exec tasks need root (namespaces, pivot_root)")
	}
	return needTaskCgroups(t)
}

// execChroot is a --chroot-env value: the default entries this host has,
// the test binary's directory at /testbin, and extra.
func execChroot(t *testing.T, extra ...string) string {
	t.Helper()
	var es []string
	for _, d := range executor.DefaultChroot {
		if _, err := os.Lstat(d); err == nil {
			es = append(es, d)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	es = append(es, filepath.Dir(self)+":/testbin")
	return strings.Join(append(es, extra...), ",")
}

// inTestbin is the test binary's path inside an exec task of execChroot.
func inTestbin(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return "/testbin/" + filepath.Base(self)
}

// execTaskFile is a task file running the isolation helper as an exec
// task in mode args, with extra config lines.
func execTaskFile(t *testing.T, e *env, name, config string, args ...string) string {
	t.Helper()
	quoted := []string{strconv.Quote(isoHelperArg)}
	for _, a := range append(args, e.dir) {
		quoted = append(quoted, strconv.Quote(a))
	}
	return writeFile(t, t.TempDir(), name+".hcl", fmt.Sprintf(`task %q {
  driver = "exec"
  config {
    command = %q
    args    = [%s]
%s
  }
}
`, name, inTestbin(t), strings.Join(quoted, ", "), config))
}

// capEff reads the CapEff line a capeff task printed.
func capEff(t *testing.T, r result) uint64 {
	t.Helper()
	v, ok := strings.CutPrefix(strings.TrimSpace(r.stdout), "CapEff:")
	if !ok {
		t.Fatalf("no CapEff line: %s", r)
	}
	m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
	if err != nil {
		t.Fatalf("CapEff %q: %v", v, err)
	}
	return m
}

// TestRun_AllowCapsEndToEnd: cap_add = ["net_raw"] with the default allow
// list is refused before anything is spawned, and the refusal names
// --allow-caps and TETHER_ALLOW_CAPS; with an allow list holding net_raw
// (the flag, or the variable) the task runs, and its CapEff, read inside,
// is exactly the set Nomad's rule computes.
func TestRun_AllowCapsEndToEnd(t *testing.T) {
	needExec(t)
	e := newEnv(t)
	chroot := execChroot(t)
	withNetRaw := strings.ToLower(strings.Join(append(slices.Clone(executor.DefaultAllowedCaps), "NET_RAW"), ","))

	file := execTaskFile(t, e, "raw", `    cap_add = ["net_raw"]`, "capeff")
	e.policy("--chroot-env", chroot) // through an agent, its lists are the ones that apply
	refused := e.tether("--chroot-env", chroot, "run", "-v", file)
	if refused.code != exitStartFail || !strings.Contains(refused.stderr, "net_raw") {
		t.Fatalf("want exit %d naming net_raw: %s", exitStartFail, refused)
	}
	for _, want := range []string{"--allow-caps", "TETHER_ALLOW_CAPS"} {
		if !strings.Contains(refused.stderr, want) {
			t.Errorf("the refusal does not name %s as the way to allow it:\n%s", want, refused.stderr)
		}
	}
	evs := e.events(taskID(t, refused.stderr))
	if last := evs[len(evs)-1]; last.Event != "config-rejected" || strings.Contains(eventNames(evs), "spawn-intent") {
		t.Errorf("want a refusal before spawn (config-rejected, no spawn-intent): %s", eventNames(evs))
	}

	e.policy("--chroot-env", chroot, "--allow-caps", withNetRaw)
	allowed := e.tether("--chroot-env", chroot, "--allow-caps", withNetRaw, "run", file)
	if allowed.code != 0 {
		t.Fatalf("with --allow-caps %s: %s", withNetRaw, allowed)
	}
	if got, want := capEff(t, allowed), capMaskOf(t, "net_raw"); got != want {
		t.Errorf("--allow-caps with net_raw, nobody: CapEff %016x, want net_raw alone %016x (a non-root task holds what it names)", got, want)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rootFile := writeFile(t, t.TempDir(), "root.hcl", strings.Replace(string(src), `driver = "exec"`, "driver = \"exec\"\n  user   = \"root\"", 1))
	root := e.tether("--chroot-env", chroot, "--allow-caps", withNetRaw, "run", rootFile)
	if root.code != 0 {
		t.Fatalf("as root with --allow-caps %s: %s", withNetRaw, root)
	}
	if got, want := capEff(t, root), capMaskOf(t, strings.Split(withNetRaw, ",")...); got != want {
		t.Errorf("--allow-caps with net_raw, root: CapEff %016x, want the default set plus net_raw %016x", got, want)
	}

	only := execTaskFile(t, e, "only", `    cap_drop = ["all"]
    cap_add  = ["net_raw"]`, "capeff")
	viaEnv := e.tetherEnv([]string{"TETHER_ALLOW_CAPS=" + withNetRaw}, "--chroot-env", chroot, "run", only)
	if viaEnv.code != 0 {
		t.Fatalf("with TETHER_ALLOW_CAPS: %s", viaEnv)
	}
	if got, want := capEff(t, viaEnv), capMaskOf(t, "net_raw"); got != want {
		t.Errorf("cap_drop all + cap_add net_raw: CapEff %016x, want net_raw alone %016x", got, want)
	}
}

// hostMountsUnder lists the lines of the host's mount table that name a
// path under dir.
func hostMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(l, dir+"/") || strings.HasSuffix(l, dir) || strings.Contains(l, dir+" ") {
			out = append(out, l)
		}
	}
	return out
}

// sessionOf is a process's session id (field 6 of /proc/PID/stat).
func sessionOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return sid
}

// TestRecover_KilledExecutorLeavesNothingOfAnExecTask: an exec task with
// a descendant in a session of its own; its executor is SIGKILLed; after
// `tether recover` no process of the task is left, its cgroup is gone, and
// nothing under the task's directory is in the host's mount table. With
// pid_mode = "host" too, where no PID namespace takes the descendant down
// with the task: only the cgroup does.
func TestRecover_KilledExecutorLeavesNothingOfAnExecTask(t *testing.T) {
	h := needExec(t)
	for _, pidMode := range []string{"", "host"} {
		t.Run("pid_mode="+pidMode, func(t *testing.T) {
			e := newEnv(t)
			ready, f, rd := fifoRW(t, "ready")
			config := ""
			if pidMode != "" {
				config = fmt.Sprintf("    pid_mode = %q", pidMode)
			}
			file := execTaskFile(t, e, "tree", config, "setsid-kid", "/ctl/ready")
			chroot := execChroot(t, filepath.Dir(ready)+":/ctl")
			flags := []string{"--chroot-env", chroot}
			if pidMode != "" {
				flags = append(flags, "--allow-host-namespaces", "pid") // the operator's word
			}
			e.policy(flags...) // through an agent, its list is the one that applies
			id := strings.TrimSpace(e.must(append(flags, "start", file)...).stdout)
			if line := fifoLine(t, f, rd); line != "ready" {
				t.Fatalf("the task said %q, want ready", line)
			}
			// What the log says, read before any command reconciles.
			st := e.statusOfRaw(id)
			taskDir := filepath.Join(e.dir, "tasks", id)
			loc, err := cgroup.ParseLocation(st.Executor.Cgroup)
			if err != nil {
				t.Fatalf("the recorded cgroup %q: %v", st.Executor.Cgroup, err)
			}
			cg, err := cgroup.Open(h, loc)
			if err != nil {
				t.Fatal(err)
			}
			members, err := cg.Procs()
			if err != nil {
				t.Fatal(err)
			}
			// The task, its kid, and the kid's session of its own.
			var task, kid int
			for _, p := range testproc.Marked(e.dir) {
				switch {
				case slices.Contains(p.Args, "setsid-kid"):
					task = p.PID
				case slices.Contains(p.Args, "sleep"):
					kid = p.PID
				}
			}
			if task == 0 || kid == 0 {
				t.Fatalf("the task (%d) or its kid (%d) is not running: %v", task, kid, testproc.Marked(e.dir))
			}
			if sessionOf(t, kid) == sessionOf(t, task) {
				t.Fatalf("the kid %d is in the task's session", kid)
			}
			if !slices.Contains(members, task) || !slices.Contains(members, kid) {
				t.Fatalf("the task %d and kid %d are not both in the task's cgroup %v", task, kid, members)
			}
			if leaked := hostMountsUnder(t, taskDir); len(leaked) > 0 {
				t.Errorf("while the task runs, the host's mount table has its mounts:\n%s", strings.Join(leaked, "\n"))
			}

			if err := syscall.Kill(st.Executor.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitExit(t, st.Executor.PID)
			if pidMode == "host" && e.agent == nil && !testproc.Alive(kid) {
				// (An agent supervises the task: it reconciles the
				// executor's death at once, with recovery's kill.)
				// No PID namespace, and the kid has no parent-death
				// signal: only the cgroup can end it, so the kill
				// below is recover's.
				t.Fatalf("the kid %d died with the executor", kid)
			}
			r := e.must("recover")
			t.Logf("recover: %s", r.stdout)
			if e.agent != nil {
				// The agent's driver reconciles the executor's death as
				// soon as it sees it, and recover leaves a task it is at to
				// it: wait for its end to be recorded (a lost task: exit 1).
				if w := e.tether("wait", id); w.code != exitError || !strings.Contains(w.stderr, "lost") {
					t.Logf("wait: %s", w)
				}
			}

			testproc.CheckNoLeak(t, e.dir)
			for key, d := range cg.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the task's %s cgroup %s is still there (%v)", key, d, err)
				}
			}
			if leaked := hostMountsUnder(t, taskDir); len(leaked) > 0 {
				t.Errorf("after recover, the host's mount table has the task's mounts:\n%s", strings.Join(leaked, "\n"))
			}
			if after := e.statusOf(id); !slices.Contains([]string{"lost", "exited", "failed"}, after.State) || after.ExecutorAlive {
				t.Errorf("after recover: %+v", after)
			}
			if got := eventNames(e.events(id)); !strings.HasSuffix(got, "executor-reaped") {
				t.Errorf("events: %s", got)
			}
		})
	}
}

// TestRun_ShimSetupFailureNamesTheStep: a setup step of the init shim that
// fails (a chroot entry that cannot be bound; a capability the executor
// itself lacks) is a launch failure: run exits 125 naming the step, the
// task's events record it (launch-failed, with the step in its reason),
// and the executor is reaped.
func TestRun_ShimSetupFailureNamesTheStep(t *testing.T) {
	needExec(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, step string
		args       func(e *env) []string
		wrap       []string // the command runs under these
	}{
		{"unbindable chroot entry", "build the task's root", func(e *env) []string {
			// /x is /usr/bin, read-only: no mount point can be made in it.
			chroot := execChroot(t, "/usr/bin:/x", "/etc/hostname:/x/no-such-entry")
			e.policy("--chroot-env", chroot) // through an agent, its list is the one that applies
			return []string{"--chroot-env", chroot, "run", "-v", "--driver", "exec", "--name", "unbindable", "--", "/bin/true", e.dir}
		}, nil},
		{"capability the executor lacks", "set the task's capabilities", func(e *env) []string {
			return []string{"--allow-caps", "all", "run", "-v", "--driver", "exec", "--name", "nomodule", "--cap-add", "sys_module", "--", "/bin/true", e.dir}
		}, []string{self, isoHelperArg, "dropcap", "sys_module", "--"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *env
			if tc.wrap != nil {
				e = newDaemonlessEnv(t, "the executor lacks what the CLI that spawns it lacks: through an agent, the agent spawns it")
			} else {
				e = newEnv(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := e.command(ctx, nil, tc.args(e)...)
			if tc.wrap != nil {
				cmd.Path, cmd.Args = self, append(slices.Clone(tc.wrap), cmd.Args...)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			r := result{stdout: stdout.String(), stderr: stderr.String()}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitStartFail || !strings.Contains(r.stderr, tc.step) {
				t.Fatalf("want exit %d naming the step %q: %v\n%s", exitStartFail, tc.step, err, r)
			}
			id := taskID(t, r.stderr)
			evs := e.events(id)
			var failed *eventRow
			for i := range evs {
				if evs[i].Event == "launch-failed" {
					failed = &evs[i]
				}
			}
			if failed == nil || !strings.Contains(failed.Reason, tc.step) {
				t.Errorf("no launch-failed event naming %q: %+v", tc.step, evs)
			}
			if last := evs[len(evs)-1]; last.Event != "executor-reaped" || last.Target != "failed" {
				t.Errorf("events end with %+v, want executor-reaped into failed: %s", last, eventNames(evs))
			}
			if st := e.statusOf(id); st.State != "failed" || st.ExecutorAlive {
				t.Errorf("status: %+v", st)
			}
			if leaked := hostMountsUnder(t, filepath.Join(e.dir, "tasks", id)); len(leaked) > 0 {
				t.Errorf("the failed setup left mounts:\n%s", strings.Join(leaked, "\n"))
			}
		})
	}
}

// TestExec_CallersDescriptorsNeverReachTheTask: `tether exec ID -- CMD <
// FILE` (with a socket as stdout, a pipe as stderr) hands the command
// pipes, never the caller's descriptors: a root task with the default
// capabilities (DAC_OVERRIDE among them), reopening /proc/PID/fd/N of the
// command for writing, reaches pipes, and the root-owned file is not
// rewritten. (Before issue 21, only terminals were relayed, and the task
// rewrote the file through the command's stdin.)
func TestExec_CallersDescriptorsNeverReachTheTask(t *testing.T) {
	needExec(t)
	e := newDaemonlessEnv(t, "the allow lists given to each command: through an agent they are the agent's (TestAgent_CLIPolicyAndInjectionRefusedThroughTheAgent)")
	goPath, goF, _ := fifoRW(t, "go")
	dir := filepath.Dir(goPath)
	readyF, readyR := fifoIn(t, dir, "ready")
	startedF, startedR := fifoIn(t, dir, "started")
	chroot := execChroot(t, dir+":/fifos")
	file := execTaskFile(t, e, "thief", "", "fdsteal", "/fifos/go", "/fifos/ready")
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	file = writeFile(t, t.TempDir(), "thief.hcl", strings.Replace(string(src), `driver = "exec"`, "driver = \"exec\"\n  user   = \"root\"", 1))
	id := strings.TrimSpace(e.must("--chroot-env", chroot, "start", file).stdout)

	victim := writeFile(t, t.TempDir(), "victim.txt", "the original\n")
	in, err := os.Open(victim)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock, peer := os.NewFile(uintptr(sp[0]), "sock"), os.NewFile(uintptr(sp[1]), "peer")
	defer peer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, "exec", id, "--", inTestbin(t), isoHelperArg, "notify", "/fifos/started", e.dir)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, sock, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sock.Close()
	fifoLine(t, startedF, startedR) // the command runs, its descriptors set
	if _, err := goF.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	out := fifoLine(t, readyF, readyR)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if b, _ := os.ReadFile(victim); string(b) != "the original\n" {
		t.Errorf("the task rewrote the caller's file through the exec'd command: %q", b)
	}
	n := 0
	for l := range strings.SplitSeq(out, ";") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "fd" {
			continue
		}
		n++
		if !strings.HasPrefix(f[2], "pipe:") {
			t.Errorf("the command's descriptor %s is %s, not a pipe (%s)", f[1], f[2], l)
		}
	}
	if n != 3 {
		t.Errorf("the task saw %d descriptors of the command, want 3:\n%s", n, out)
	}
	e.must("stop", id)
}

// fifoIn makes a FIFO named name in dir (one fifoRW made) and opens it
// read-write.
func fifoIn(t *testing.T, dir, name string) (*os.File, *bufio.Reader) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := unix.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, bufio.NewReader(f)
}

// TestRun_SeccompNeedsTheOperator: a task file asking for seccomp =
// "unconfined" is refused before anything is spawned, the refusal naming
// --allow-seccomp; allowed by the flag (or TETHER_ALLOW_SECCOMP) it runs
// without a filter (Seccomp: 0 inside), where the default runs with one
// (Seccomp: 2).
func TestRun_SeccompNeedsTheOperator(t *testing.T) {
	needExec(t)
	e := newDaemonlessEnv(t, "the allow lists given to each command: through an agent they are the agent's (TestAgent_CLIPolicyAndInjectionRefusedThroughTheAgent)")
	chroot := execChroot(t)
	unconfined := execTaskFile(t, e, "loose", `    seccomp = "unconfined"`, "seccomp")
	refused := e.tether("--chroot-env", chroot, "run", "-v", unconfined)
	if refused.code != exitStartFail || !strings.Contains(refused.stderr, "--allow-seccomp unconfined") {
		t.Fatalf("want exit %d naming --allow-seccomp unconfined: %s", exitStartFail, refused)
	}
	evs := e.events(taskID(t, refused.stderr))
	if last := evs[len(evs)-1]; last.Event != "config-rejected" || strings.Contains(eventNames(evs), "spawn-intent") {
		t.Errorf("want a refusal before spawn (config-rejected, no spawn-intent): %s", eventNames(evs))
	}
	if r := e.tether("--chroot-env", chroot, "--allow-seccomp", "unconfined", "run", unconfined); r.code != 0 || strings.TrimSpace(r.stdout) != "Seccomp:\t0" {
		t.Errorf("allowed by --allow-seccomp: %s, want Seccomp 0 inside", r)
	}
	if r := e.tetherEnv([]string{"TETHER_ALLOW_SECCOMP=unconfined"}, "--chroot-env", chroot, "run", unconfined); r.code != 0 || strings.TrimSpace(r.stdout) != "Seccomp:\t0" {
		t.Errorf("allowed by TETHER_ALLOW_SECCOMP: %s, want Seccomp 0 inside", r)
	}
	if r := e.tether("--chroot-env", chroot, "run", execTaskFile(t, e, "tight", "", "seccomp")); r.code != 0 || strings.TrimSpace(r.stdout) != "Seccomp:\t2" {
		t.Errorf("the default: %s, want Seccomp 2 inside", r)
	}
}
