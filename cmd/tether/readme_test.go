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
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

// The README's CLI tour is a promise to a new user: every line runs as
// written. TestREADME_CLITourRunsAsWritten reads the tour from README.md
// (so the README cannot drift from what is tested), runs each line with
// sh, in order, with `tether` on PATH and a state directory of the test's
// own, and holds each line to what its comment says. A line the test has
// no expectation for, or an expectation no line matches, fails the test:
// a change to the tour changes the test with it.

// tourLine is what one line of the tour must do.
type tourLine struct {
	code int // exit code; -1: killed by SIGKILL
	// stdout and stderr are substrings their output must hold ("$id" is
	// replaced by the id bound so far); exact, when set, is the whole of
	// stdout, with nothing on stderr.
	stdout, stderr []string
	exact          string
	// bind reads the line's stdout into $id.
	bind bool
	// follow runs a line that never ends: it must still run once check
	// has seen what it waits for in its stdout (fed by feed), and then end
	// with 0 on Ctrl-C.
	follow bool
	feed   func(t *testing.T)
}

// tourExpect is what each line of the tour must do, by its text.
var tourExpect = map[string]tourLine{
	`tether run examples/hello.hcl`:                                      {exact: "hello from tether\n"},
	`tether run -- /bin/sh -c 'exit 3'`:                                  {code: 3, stderr: []string{"exited with code 3"}},
	`tether run examples/net_raw.hcl`:                                    {code: exitStartFail, stderr: []string{"capability not allowed: net_raw", "nothing was spawned"}},
	`tether run examples/isolated.hcl`:                                   {stdout: []string{"uid 65534", "processes in sight"}},
	`tether run examples/flaky.hcl`:                                      {code: 3, stdout: []string{"run at"}, stderr: []string{"restart 2 in", "exited with code 3, after 2 restarts"}},
	`id=$(tether start examples/service.hcl)`:                            {bind: true},
	`tether start examples/service.hcl`:                                  {code: exitStartFail, stderr: []string{"a task named web is live: $id", "--replace"}},
	`tether status --all`:                                                {stdout: []string{"$id", "UPTIME", "flaky", "1 running, "}},
	`tether events web`:                                                  {stdout: []string{"task-created", "running"}},
	`tether logs "$id" --stderr -f`:                                      {follow: true, stdout: []string{"GET /tether-tour"}, feed: getTour},
	`tether stats "$id" --json`:                                          {stdout: []string{`"id": "$id"`, `"memory_bytes"`}},
	`tether signal "$id" SIGSTOP`:                                        {stderr: []string{"sent SIGSTOP"}},
	`tether signal "$id" SIGCONT`:                                        {stderr: []string{"sent SIGCONT"}},
	`tether exec "$id" -- /bin/sh -c 'id; ls /'`:                         {stdout: []string{"uid=0(root)", "proc"}},
	`tether restart web`:                                                 {stdout: []string{"web-"}},
	`tether stop web --signal SIGTERM --timeout 5s`:                      {stdout: []string{"stopped"}},
	`tether recover`:                                                     {stdout: []string{"nothing to recover"}},
	`tether check`:                                                       {stdout: []string{" 0 problems"}},
	`tether check --salvage`:                                             {stdout: []string{"the salvaged store is in place"}},
	`tether gc --older-than 24h`:                                         {stdout: []string{"store compacted"}},
	`tether debug host`:                                                  {stdout: []string{"cgroup"}},
	`tether graph --format dot`:                                          {stdout: []string{"digraph", `kill-executor", color = "red"`}},
	`TETHER_CRASHPOINT=after-append:executor-up tether run -- /bin/true`: {code: -1},
}

// tourThroughAgent is what the lines whose outcome an agent changes, by
// design, must do when the suite runs through one (TETHER_E2E_AGENT): a
// crash point in the CLI's environment would arm a driver that does not
// run there, so it is refused, naming where to give it.
var tourThroughAgent = map[string]tourLine{
	`TETHER_CRASHPOINT=after-append:executor-up tether run -- /bin/true`: {code: exitStartFail,
		stderr: []string{"arms the driver of the process that runs the command", "give the variable to tether agent"}},
}

// readmeTour returns the command lines of README.md's CLI tour, without
// their comments.
func readmeTour(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## CLI tour\n")
	if !ok {
		t.Fatal(`README.md has no "## CLI tour" section`)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("README.md's CLI tour has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("README.md's CLI tour block does not end")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(stripComment(l)); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// stripComment cuts a shell comment off a line: a # that starts a word,
// outside quotes.
func stripComment(line string) string {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// repoRoot is the repository's root, relative to this package.
const repoRoot = "../.."

func TestREADME_TourExpectationsMatchItsLines(t *testing.T) {
	lines := readmeTour(t)
	seen := map[string]bool{}
	for _, l := range lines {
		if _, ok := tourExpect[l]; !ok {
			t.Errorf("README.md's tour has a line the test does not know; add what it must do to tourExpect:\n%s", l)
		}
		seen[l] = true
	}
	for l := range tourExpect {
		if !seen[l] {
			t.Errorf("tourExpect has a line README.md's tour no longer has:\n%s", l)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`tether exec "$id" -- /bin/sh -c 'id; ls /'  # inside # the task`, `tether exec "$id" -- /bin/sh -c 'id; ls /'  `},
		{`echo 'a # b' # c`, `echo 'a # b' `},
		{`#   a comment line`, ``},
		{`x=a#b`, `x=a#b`},
	} {
		if got := stripComment(c.in); got != c.want {
			t.Errorf("stripComment(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestREADME_CLITourRunsAsWritten(t *testing.T) {
	// The tour's service listens on 127.0.0.1:8080. The test runs it in a
	// network namespace of its own, so that the port is free whatever else
	// runs on this host: the namespace is this goroutine's thread's, which
	// every command started from it inherits (and the thread ends with the
	// test: it is never unlocked).
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("no network namespace for the tour's port 8080 (unshare: %v): needs root or CAP_SYS_ADMIN", err)
		}
		t.Fatal(err)
	}
	if err := loopbackUp(); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	bin := t.TempDir()
	if err := os.Symlink(tetherBin, filepath.Join(bin, "tether")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "TETHER_STATE_DIR=" + e.dir}
	t.Cleanup(func() { e.tether("recover") }) // reaps what the crash line left (and what a failure did)
	id := ""
	for _, line := range readmeTour(t) {
		want := tourExpect[line]
		if over, ok := tourThroughAgent[line]; ok && e.agent != nil {
			want = over
		}
		script := fmt.Sprintf("id='%s'\n%s", id, line)
		if want.bind {
			script += "\nprintf '%s' \"$id\""
		}
		var r tourResult
		if want.follow {
			r = runFollow(t, env, line, want, id)
		} else {
			r = runTourLine(t, env, script)
		}
		t.Logf("$ %s\n%s", line, r)
		if r.code != want.code {
			t.Fatalf("%s\nexit %d, want %d\n%s", line, r.code, want.code, r)
		}
		if want.bind {
			id = strings.TrimSpace(r.stdout)
			if !strings.HasPrefix(id, "web-") || strings.ContainsAny(id, " \n") {
				t.Fatalf("%s: bound id %q\n%s", line, id, r)
			}
		}
		if want.exact != "" && (r.stdout != want.exact || r.stderr != "") {
			t.Fatalf("%s\nwant exactly %q on stdout and nothing on stderr\n%s", line, want.exact, r)
		}
		for _, s := range want.stdout {
			if s = strings.ReplaceAll(s, "$id", id); !strings.Contains(r.stdout, s) {
				t.Fatalf("%s\nstdout lacks %q\n%s", line, s, r)
			}
		}
		for _, s := range want.stderr {
			if s = strings.ReplaceAll(s, "$id", id); !strings.Contains(r.stderr, s) {
				t.Fatalf("%s\nstderr lacks %q\n%s", line, s, r)
			}
		}
	}
	st := e.status("--all")
	for _, s := range st {
		if s.Name == "web" && s.State != "stopped" {
			t.Errorf("after the tour, task %s (web) is %s, want stopped", s.ID, s.State)
		}
	}
	testproc.CheckGone(t, e.dir, 10*time.Second) // the crashed run's executor ends with its lease
}

type tourResult struct {
	stdout, stderr string
	code           int
}

func (r tourResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// tourCommand is sh running a tour line from the repository's root.
func tourCommand(ctx context.Context, env []string, script string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = repoRoot
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TETHER_") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

func runTourLine(t *testing.T, env []string, script string) tourResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := tourCommand(ctx, env, script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := tourExit(t, cmd.Run(), &stdout, &stderr)
	return tourResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// tourExit is a finished command's exit code, -1 for a SIGKILL (of the
// command, or of the command sh ran: 128+9).
func tourExit(t *testing.T, err error, stdout, stderr *bytes.Buffer) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws := exit.Sys().(syscall.WaitStatus); ws.Signaled() && ws.Signal() == syscall.SIGKILL || exit.ExitCode() == 128+int(syscall.SIGKILL) {
			return -1
		}
		return exit.ExitCode()
	}
	t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	return 0
}

// runFollow runs a line that never ends by itself: it must show what
// want.stdout names (after feed makes it happen) while it runs, then end
// with 0 on SIGINT, as on a Ctrl-C.
func runFollow(t *testing.T, env []string, line string, want tourLine, id string) tourResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := tourCommand(ctx, env, fmt.Sprintf("id='%s'; exec %s", id, line)) // exec: the SIGINT reaches tether
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want.feed(t)
	var got bytes.Buffer
	sc := bufio.NewScanner(io.TeeReader(out, &got))
	seen := false
	for !seen && sc.Scan() {
		seen = strings.Contains(sc.Text(), want.stdout[0])
	}
	if !seen {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%s\nended, or never showed %q, before the deadline:\nstdout:\n%s\nstderr:\n%s", line, want.stdout[0], got.String(), stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	got.Write(rest)
	var sink bytes.Buffer
	code := tourExit(t, cmd.Wait(), &sink, &stderr)
	return tourResult{stdout: got.String(), stderr: stderr.String(), code: code}
}

// getTour asks the tour's service for a page, so that its request log
// (on its stderr) has a line. It dials on this goroutine, whose thread is
// in the test's network namespace (net/http would dial on another).
func getTour(t *testing.T) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", "127.0.0.1:8080", 10*time.Second)
	if err != nil {
		t.Fatalf("the tour's service does not answer: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /tether-tour HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatal(err)
	}
}

// loopbackUp brings up the loopback interface of this thread's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// bootLines are the README's boot section, line by line, as written.
var bootLines = []string{
	"make build",
	"sudo make install",
	"sudo systemctl daemon-reload",
	"sudo systemctl enable --now tether-agent",
}

// readmeBlock returns the command lines of the first ```sh block after
// the heading, without their comments.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), heading+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", heading)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("README.md's %q has no ```sh block", heading)
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(stripComment(l)); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// Issue 34: the README's boot section runs as written, into a staging
// root (DESTDIR) instead of the host's: make build, then make install
// lays out both binaries, the manual pages, /etc/tether with the owner
// and mode the agent insists on, and the unit systemctl enables by the
// name the README gives, whose state directory is the one the root CLI
// defaults to; the unit passes systemd-analyze verify where systemd is
// installed.
func TestREADME_BootSectionRunsAsWritten(t *testing.T) {
	lines := readmeBlock(t, "### Starting the agent at boot")
	if !slices.Equal(lines, bootLines) {
		t.Fatalf("README.md's boot section:\n%s\nwant the lines this test runs:\n%s", strings.Join(lines, "\n"), strings.Join(bootLines, "\n"))
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("no make: %v", err)
	}
	root, build := t.TempDir(), t.TempDir()
	bin := filepath.Join(build, "tether")
	for _, line := range lines {
		words := strings.Fields(strings.TrimPrefix(line, "sudo "))
		switch words[0] {
		case "make":
			// As written, with the build in a directory of the test's and
			// the install into the staging root.
			args := append(words[1:], "BIN="+bin, "DESTDIR="+root)
			cmd := exec.Command("make", args...)
			cmd.Dir = repoRoot
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		case "systemctl":
			// Not run on the host: what they name must be what was
			// installed.
			if words[len(words)-1] != "daemon-reload" && words[len(words)-1] != "tether-agent" {
				t.Fatalf("%s: names no unit that make install installs", line)
			}
		default:
			t.Fatalf("a line the test does not know how to run: %s", line)
		}
	}
	for _, b := range []string{"tether", "tether-fleet"} {
		fi, err := os.Stat(filepath.Join(root, "usr/local/bin", b))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("installed %s: %v, %v", b, fi, err)
		}
	}
	for _, cmd := range commands() {
		if cmd.hidden {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "usr/local/share/man/man1", "tether-"+cmd.name+".1")); err != nil {
			t.Errorf("no manual page for %s: %v", cmd.name, err)
		}
	}
	// /etc/tether: a directory of the installing user's (root when run as
	// root), writable by no one else: what the agent's --config-dir check
	// takes.
	etc := filepath.Join(root, "etc/tether")
	var st unix.Stat_t
	if err := unix.Lstat(etc, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o022 != 0 || int(st.Uid) != os.Geteuid() {
		t.Errorf("/etc/tether: mode %o, uid %d, %v; want a directory of uid %d, writable by its owner alone", st.Mode, st.Uid, err, os.Geteuid())
	}
	unitPath := filepath.Join(root, "etc/systemd/system/tether-agent.service")
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nType=notify\n", "\nKillMode=process\n", "\nStateDirectory=tether\n",
		"\nExecStart=/usr/local/bin/tether --state-dir " + statedir.SystemDir + " agent --config-dir /etc/tether\n",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the installed unit lacks %q:\n%s", strings.TrimSpace(want), unit)
		}
	}
	// systemd's StateDirectory=tether is /var/lib/tether: the directory
	// the root CLI defaults to (statedir.Default) once it exists.
	if statedir.SystemDir != "/var/lib/tether" {
		t.Errorf("statedir.SystemDir = %s, want StateDirectory=tether's /var/lib/tether", statedir.SystemDir)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("no systemd-analyze (systemd): the unit was installed, not verified")
	}
	// Verified as it would run from the staging root: its binary there,
	// its manual page there.
	staged := filepath.Join(t.TempDir(), "tether-agent.service")
	if err := os.WriteFile(staged, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/tether", filepath.Join(root, "usr/local/bin/tether"))), 0o644); err != nil {
		t.Fatal(err)
	}
	verify := exec.Command(analyze, "verify", staged)
	verify.Env = append(os.Environ(), "MANPATH="+filepath.Join(root, "usr/local/share/man"))
	if out, err := verify.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify tether-agent.service: %v\n%s", err, out)
	}
}
