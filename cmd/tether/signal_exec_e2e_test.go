package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/statedir"
)

// sigHelperArg makes the test binary act as a task of this file's tests,
// dispatched in init (before TestMain). Its last argument is the state
// directory (the leak check's marker).
//
//	usr1 FIFO MARKER      start a kid (usr1-kid) in the task's process
//	                      group, write "main ready" to FIFO once both
//	                      handle SIGUSR1, then "main N" / "kid N" there
//	                      for each one's N-th SIGUSR1; block until killed
const sigHelperArg = "tether-signal-helper"

func init() {
	if len(os.Args) > 3 && os.Args[1] == sigHelperArg {
		os.Exit(sigHelper(os.Args[2], os.Args[3]))
	}
}

func sigHelper(mode, path string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1)
	say := func(line string) {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			os.Exit(3)
		}
		fmt.Fprintln(f, line)
		f.Close()
	}
	who := "kid"
	switch mode {
	case "usr1":
		who = "main"
		kid := exec.Command(os.Args[0], append([]string{sigHelperArg, "usr1-kid"}, os.Args[3:]...)...)
		out, err := kid.StdoutPipe()
		if err != nil || kid.Start() != nil {
			return 2
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
			return 2
		}
		say("main ready")
	case "usr1-kid":
		fmt.Println("ok")
	default:
		return 100
	}
	for n := 1; ; n++ {
		<-sigs
		say(fmt.Sprintf("%s %d", who, n))
	}
}

// fifoRW makes a FIFO and opens it read-write (so it never reads EOF), its
// reads bounded by deadlines.
func fifoRW(t *testing.T, name string) (string, *os.File, *bufio.Reader) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := unix.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil { // past the umask: a task of any user writes it
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f, bufio.NewReader(f)
}

func fifoLine(t *testing.T, f *os.File, r *bufio.Reader) string {
	t.Helper()
	_ = f.SetReadDeadline(time.Now().Add(30 * time.Second))
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading %s: %v (read %q)", f.Name(), err, l)
	}
	return strings.TrimSuffix(l, "\n")
}

// TestSignal_MainAndGroup: `tether signal ID USR1 --main` reaches the
// task's main process and not a kid in its process group; without --main
// both get it; once the task is stopped, signal fails saying so.
func TestSignal_MainAndGroup(t *testing.T) {
	e := newEnv(t)
	path, f, r := fifoRW(t, "usr1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(e.must("start", "--name", "trap", "--", self, sigHelperArg, "usr1", path, e.dir).stdout)
	if l := fifoLine(t, f, r); l != "main ready" {
		t.Fatalf("task: %q", l)
	}
	if res := e.must("signal", id, "USR1", "--main"); !strings.Contains(res.stderr, "main process") {
		t.Errorf("signal --main: %s", res)
	}
	if l := fifoLine(t, f, r); l != "main 1" {
		t.Fatalf("after signal --main the task said %q, want main 1", l)
	}
	e.must("signal", "trap", "SIGUSR1")
	got := map[string]bool{fifoLine(t, f, r): true, fifoLine(t, f, r): true}
	e.must("stop", "--signal", "SIGKILL", id)
	// The whole task is dead: everything it said is in the FIFO.
	fmt.Fprintln(f, "end")
	for l := fifoLine(t, f, r); l != "end"; l = fifoLine(t, f, r) {
		got[l] = true
	}
	if len(got) != 2 || !got["main 2"] || !got["kid 1"] {
		t.Fatalf("after the group signal the task said %v, want main 2 and kid 1 only (the kid must not have had --main's)", got)
	}

	res := e.tether("signal", id, "USR1")
	if res.code != exitError || !strings.Contains(res.stderr, "not running") || !strings.Contains(res.stderr, "(stopped)") {
		t.Errorf("signal of a stopped task: %s, want exit 1 naming the state", res)
	}
	res = e.tether("exec", id, "--", "true")
	if res.code != exitStartFail || !strings.Contains(res.stderr, "not running") || !strings.Contains(res.stderr, "(stopped)") {
		t.Errorf("exec into a stopped task: %s, want exit 125 naming the state", res)
	}
}

// TestSignal_Refusals: an unknown task, an unknown signal, a task waiting
// out a restart's delay (signal and exec both say restarting).
func TestSignal_Refusals(t *testing.T) {
	e := newEnv(t)
	if res := e.tether("signal", "no-such-task", "TERM"); res.code != exitError || !strings.Contains(res.stderr, "no-such-task") {
		t.Errorf("signal of an unknown task: %s", res)
	}
	if res := e.tether("signal", "x", "SIGNOPE"); res.code != exitUsage || !strings.Contains(res.stderr, "unknown signal") {
		t.Errorf("an unknown signal: %s", res)
	}
	if res := e.tether("signal", "x"); res.code != exitUsage {
		t.Errorf("signal without a signal: %s", res)
	}
	file, _ := restartTask(t, e, "resting", `  restart {
    attempts = 3
    interval = "3h"
    delay    = "1h"
    mode     = "fail"
  }`, "4")
	id := strings.TrimSpace(e.must("start", "--min-uptime", "0", file).stdout) // (it never stays up: issue 31)
	waitJournal(t, filepath.Join(e.dir, "tasks", id), 1)
	if res := e.tether("signal", id, "USR1"); res.code != exitError || !strings.Contains(res.stderr, "restarting") {
		t.Errorf("signal of a restarting task: %s, want exit 1 saying restarting", res)
	}
	if res := e.tether("exec", id, "--", "true"); res.code != exitStartFail || !strings.Contains(res.stderr, "restarting") {
		t.Errorf("exec into a restarting task: %s, want exit 125 saying restarting", res)
	}
	e.must("stop", id)
}

// TestSignal_PlantedListenerRefused: a listener planted at the executor's
// socket path (by this test process) is not taken for the executor:
// signal fails naming the pid it found, and nothing reaches the listener.
func TestSignal_PlantedListenerRefused(t *testing.T) {
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "victim"}, "sleep")...).stdout)
	sock := filepath.Join(e.dir, "tasks", id, statedir.SocketFile)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(conn)
		conn.Close()
		got <- b
	}()
	res := e.tether("signal", id, "TERM")
	if res.code != exitError || !strings.Contains(res.stderr, "served by pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("signal through a planted listener: %s, want exit 1 naming this process's pid", res)
	}
	if b := <-got; len(b) != 0 {
		t.Errorf("the planted listener received %q", b)
	}
	ln.Close()
	// The executor itself is ours and alive: stop kills the task by its
	// cgroup and the executor by its identity.
	e.must("stop", "--signal", "SIGKILL", id)
}

// execTask starts an exec task that blocks until stopped; its shell
// carries the state directory as $0 (the leak check's marker).
func execTask(t *testing.T, e *env, name string) (string, taskJSON) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("exec tasks need root (isolation)")
	}
	needTaskCgroups(t)
	id := strings.TrimSpace(e.must("start", "--driver", "exec", "--name", name, "--", "/bin/sh", "-c", "sleep 100000 & wait", e.dir).stdout)
	return id, e.statusOf(id)
}

// inCgroup checks a /proc/PID/cgroup text against the task cgroup
// recorded in the log: every hierarchy's path is the one recorded.
func inCgroup(t *testing.T, text, recorded string) {
	t.Helper()
	loc, err := cgroup.ParseLocation(recorded)
	if err != nil {
		t.Fatalf("the recorded cgroup %q: %v", recorded, err)
	}
	lines := map[string]string{} // controller (unified for cgroup2) -> path
	for l := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			lines["unified"] = f[2]
		}
		for c := range strings.SplitSeq(f[1], ",") {
			lines[strings.TrimPrefix(c, "name=")] = f[2]
		}
	}
	for key, path := range loc.Paths() {
		if lines[key] != path {
			t.Errorf("in hierarchy %s the command is in %q, the task's cgroup is %q\n%s", key, lines[key], path, text)
		}
	}
}

// TestExec_IntoAnExecTask: a command run with `tether exec` in an exec
// task is nobody, sees the task as pid 1 (same PID namespace), sees the
// task's root and not the state directory, is in the task's cgroup (the
// root of the task's cgroup namespace: "/" in every hierarchy, as the
// task sees itself), holds the task's capabilities (none) under its
// filter, and its exit code is tether exec's.
func TestExec_IntoAnExecTask(t *testing.T) {
	e := newEnv(t)
	id, st := execTask(t, e, "iso")
	if res := e.must("exec", id, "--env", "X=1", "--", "id", "-u"); res.stdout != "65534\n" {
		t.Errorf("id -u: %s, want 65534", res)
	}
	if res := e.must("exec", "iso", "cat", "/proc/1/cmdline"); !strings.Contains(res.stdout, "sleep 100000 & wait") {
		t.Errorf("/proc/1/cmdline inside: %q, want the task's", res.stdout)
	}
	ls := e.must("exec", id, "--", "ls", "/").stdout
	for _, want := range []string{"local\n", "secrets\n", "tmp\n", "usr\n"} {
		if !strings.Contains(ls, want) {
			t.Errorf("ls / inside lacks %q:\n%s", want, ls)
		}
	}
	if res := e.tether("exec", id, "--", "ls", e.dir); res.code == 0 {
		t.Errorf("the state directory is visible inside: %s", res)
	}
	cg := e.must("exec", id, "--", "cat", "/proc/self/cgroup", "/proc/1/cgroup").stdout
	for l := range strings.SplitSeq(strings.TrimSpace(cg), "\n") {
		if !strings.HasSuffix(l, ":/") {
			t.Errorf("the command's (or the task's, seen from it) cgroup line %q: want the root of the task's cgroup namespace\n%s", l, cg)
		}
	}
	_ = st
	status := e.must("exec", id, "--", "grep", "-E", "^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):", "/proc/self/status").stdout
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, want+"\n") {
			t.Errorf("the exec'd command's status lacks %q:\n%s", want, status)
		}
	}
	if res := e.tether("exec", id, "sh", "-c", "exit 7"); res.code != 7 {
		t.Errorf("sh -c 'exit 7': %s, want exit 7", res)
	}
	if res := e.tether("exec", id, "--", "sh", "-c", "kill -TERM $$"); res.code != 128+int(syscall.SIGTERM) {
		t.Errorf("a command killed by SIGTERM: %s, want exit 143", res)
	}
	if res := e.tether("exec", id, "--", "no-such-command"); res.code != exitNotFound || !strings.Contains(res.stderr, "no-such-command") {
		t.Errorf("a command the task does not have: %s, want exit 127 naming it", res)
	}
	// stdin reaches the command.
	cmd := e.command(context.Background(), nil, "exec", id, "--", "cat")
	cmd.Stdin = strings.NewReader("through stdin\n")
	if out, err := cmd.Output(); err != nil || string(out) != "through stdin\n" {
		t.Errorf("cat of stdin printed %q: %v", out, err)
	}
	e.must("stop", id)
}

// TestExec_IntoARawExecTask: in a raw_exec task the command runs in the
// task's directory, with its environment, in its cgroup.
func TestExec_IntoARawExecTask(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "raw", "--env", "GREETING=hello"}, "sleep")...).stdout)
	st := e.statusOf(id)
	res := e.must("exec", id, "--", "sh", "-c", `pwd; echo "$GREETING $TETHER_TASK_ID"`)
	if want := filepath.Join(e.dir, "tasks", id, "local") + "\nhello " + id + "\n"; res.stdout != want {
		t.Errorf("exec printed %q, want %q", res.stdout, want)
	}
	cg := e.must("exec", id, "--", "cat", "/proc/self/cgroup").stdout
	inCgroup(t, cg, e.statusOfRaw(id).Executor.Cgroup)
	if task, err := os.ReadFile("/proc/" + strconv.Itoa(st.PID) + "/cgroup"); err != nil || string(task) != cg {
		t.Errorf("the command's cgroups\n%s\nthe task's\n%s (%v)", cg, task, err)
	}
	// Without --, the command's own flags are its own.
	if res := e.must("exec", id, "ls", "-d", "/"); res.stdout != "/\n" {
		t.Errorf("exec ID ls -d /: %s", res)
	}
	e.must("stop", id)
}

// TestExec_KilledWhenTheTaskStops: a long-running exec dies with its
// task: once `tether stop` returns it is dead (its pidfd says so), and
// `tether exec` exits 137.
func TestExec_KilledWhenTheTaskStops(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "host"}, "sleep")...).stdout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, "exec", id, "--", "sh", "-c", "echo $$; exec sleep 100000")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("exec printed %q: %v %v\n%s", line, err, perr, stderr.String())
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("the exec'd command %d: %v", pid, err)
	}
	defer unix.Close(pidfd)
	e.must("stop", id)
	// The stop confirmed the task's cgroup empty: the command is dead now.
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 0); err != nil || n != 1 {
		t.Fatalf("the exec'd command %d outlived the stop of its task (poll %d %v)", pid, n, err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128+int(syscall.SIGKILL) {
		t.Fatalf("tether exec after the task stopped: %v, want exit 137\n%s", err, stderr.String())
	}
}

// TestExec_Terminal: `tether exec -t` gives the command a terminal of its
// own inside the task (tty prints a /dev/pts path, the size is the
// caller's), exits with its code, and leaves the caller's terminal as it
// found it.
func TestExec_Terminal(t *testing.T) {
	e := newEnv(t)
	id, _ := execTask(t, e, "term")
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("needs pseudo-terminals: %v", err)
	}
	defer master.Close()
	if err := pty.Setsize(slave, &pty.Winsize{Rows: 31, Cols: 97}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The command prints its terminal and size, then, when the caller's
	// terminal is resized (the kernel tells tether exec with SIGWINCH,
	// which resizes the command's), the new size.
	cmd := e.command(ctx, nil, "exec", "-t", id, "--", "sh", "-c", `trap 'stty size; exit 3' WINCH; tty; stty size; while :; do sleep 0.1; done`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	var out bytes.Buffer
	copied := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(master)
	_ = master.SetReadDeadline(time.Now().Add(30 * time.Second))
	for !strings.Contains(out.String(), "31 97\r\n") {
		l, err := rd.ReadString('\n')
		out.WriteString(l)
		if err != nil {
			t.Fatalf("reading the terminal: %v (read %q)", err, out.String())
		}
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := io.Copy(&out, rd)
		copied <- err
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("tether exec -t: %v, want exit 3", err)
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("the terminal was not restored: %+v, was %+v", after, before)
	}
	slave.Close() // the last holder: the copy reads to its end
	<-copied
	text := strings.ReplaceAll(out.String(), "\r", "")
	if !strings.Contains(text, "/dev/pts/0\n31 97\n40 120\n") {
		t.Errorf("tty and stty size inside printed %q, want /dev/pts/0, 31 97, then 40 120 after the resize", text)
	}
	e.must("stop", id)
}

// TestExec_CallersTerminalIsRelayed: without -t, a terminal among exec's
// stdio is not handed to the command (it could type into the caller's
// shell): the command gets a pipe, and its output still reaches the
// terminal.
func TestExec_CallersTerminalIsRelayed(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", "relay"}, "sleep")...).stdout)
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("needs pseudo-terminals: %v", err)
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, "exec", id, "--", "sh", "-c", `for fd in 0 1 2; do if [ -t $fd ]; then echo "$fd tty"; else echo "$fd pipe"; fi; done`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if err := cmd.Run(); err != nil {
		t.Fatalf("tether exec: %v", err)
	}
	slave.Close()
	out, _ := io.ReadAll(master) // to EIO
	if got := strings.ReplaceAll(string(out), "\r", ""); got != "0 pipe\n1 pipe\n2 pipe\n" {
		t.Fatalf("the command saw %q, want pipes for stdin, stdout and stderr", got)
	}
	e.must("stop", id)
}

// TestStart_InheritedDescriptorsStayOut: a descriptor the caller of tether
// holds without close-on-exec (a shell's `exec 7</`) reaches neither the
// executor, nor the task, nor a `tether exec` command: through it a task
// confined to a root of its own could read the store and the host's files.
func TestStart_InheritedDescriptorsStayOut(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	root, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// As fds 3 to 7 of each tether command, without close-on-exec (the
	// executor's own descriptor 3, its ready pipe, replaces one).
	withRoot := func(args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := e.command(ctx, nil, args...)
		cmd.ExtraFiles = []*os.File{root, root, root, root, root}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if err != nil {
			t.Fatalf("tether %v: %v\n%s", args, err, r)
		}
		return r
	}
	id := strings.TrimSpace(withRoot(e.runArgs("start", []string{"--name", "fds"}, "sleep")...).stdout)
	st := e.statusOf(id)
	holdsRoot := func(pid int) []string {
		var out []string
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, ent := range ents {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, ent.Name())); err == nil && l == "/" {
				out = append(out, ent.Name())
			}
		}
		return out
	}
	for what, pid := range map[string]int{"executor": st.ExecutorPID, "task": st.PID} {
		if fds := holdsRoot(pid); len(fds) > 0 {
			t.Errorf("the %s holds the caller's descriptor of / as %v", what, fds)
		}
	}
	// A command started into the task by exec: the shell lists its own
	// descriptors (ls is its child).
	r := withRoot("exec", id, "--", "sh", "-c", `ls /proc/$$/fd`)
	if got := strings.Fields(r.stdout); strings.Join(got, " ") != "0 1 2" {
		t.Errorf("a tether exec command holds descriptors %v, want 0 1 2 alone", got)
	}
	e.must("stop", id)
}
