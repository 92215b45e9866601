package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
	"github.com/tether-fsm/tether/internal/testproc"
)

// services is how many services the supervisors of BenchmarkServices50
// and BenchmarkAgentIdle bring up.
var services = flag.Int("svc.n", 50, "how many services BenchmarkServices50 and BenchmarkAgentIdle define")

// readyEnv names the fifo the sleeper writes its pid to once it runs.
const readyEnv = "TETHER_BENCH_READY"

// svcSide is one supervisor of a scandir-like directory of service
// definitions: tether's agent (--config-dir), s6-svscan, supervisord.
// Every service is the static sleeper with no argument and readyEnv in
// its environment, so all three start the same program the same way.
type svcSide struct {
	name string
	// define writes n definitions under dir and returns the supervisor's
	// command over them, not started (its environment and output are the
	// caller's to add to).
	define func(b *testing.B, dir string, n int) *exec.Cmd
	// settle returns once the supervisor itself has recorded all n
	// services up (its own view, after the tasks said they run).
	settle func(b *testing.B, dir string, n int)
	// perService lists the per-service supervisors (tether's executors,
	// s6-supervise; supervisord has none).
	perService func(b *testing.B, dir string) []int
	// down stops the supervisor and every service it started; the caller
	// then waits for every process marked with dir to be gone.
	down func(b *testing.B, dir string, cmd *exec.Cmd)
	// ready, when set, is when the supervisor said it was up (the agent's
	// READY=1 on NOTIFY_SOCKET: its store open and its socket served,
	// before it converges; s6-svscan's -d notification: its control fifo
	// open), zero if it has not.
	ready func(dir string) time.Time
}

// agentSide is `tether agent --config-dir DIR/conf` on DIR/state, with n
// task files (raw_exec, the sleeper, no restart block).
func agentSide(tether, sleeper string) svcSide {
	rd := &readiness{at: map[string]chan time.Time{}}
	return svcSide{
		name:  "agent",
		ready: rd.wait,
		define: func(b *testing.B, dir string, n int) *exec.Cmd {
			state, conf := filepath.Join(dir, "state"), filepath.Join(dir, "conf")
			for _, d := range []string{state, conf} {
				if err := os.Mkdir(d, 0o700); err != nil {
					b.Fatal(err)
				}
			}
			fifo := filepath.Join(dir, "ready.fifo")
			for i := range n {
				name := fmt.Sprintf("s%02d", i)
				src := fmt.Sprintf("task %q {\n  driver = \"raw_exec\"\n  config {\n    command = %q\n  }\n  env {\n    %s = %q\n  }\n}\n", name, sleeper, readyEnv, fifo)
				if err := os.WriteFile(filepath.Join(conf, name+".hcl"), []byte(src), 0o600); err != nil {
					b.Fatal(err)
				}
			}
			// READY=1 (the agent serving) is read by a goroutine of its
			// own, so the agent never waits on the benchmark.
			sock := filepath.Join(dir, "notify.sock")
			ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
			if err != nil {
				b.Fatal(err)
			}
			ch := rd.arm(dir)
			go func() {
				defer ln.Close()
				_ = ln.SetReadDeadline(time.Now().Add(2 * time.Minute))
				buf := make([]byte, 512)
				for {
					n, err := ln.Read(buf)
					if err != nil {
						return
					}
					if strings.Contains(string(buf[:n]), "READY=1") {
						ch <- time.Now()
						return
					}
				}
			}()
			cmd := tetherCmd(tether, state, "agent", "--config-dir", conf)
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
			return cmd
		},
		settle: func(b *testing.B, dir string, n int) {
			if rd.wait(dir).IsZero() { // the socket is served from READY=1 on
				b.Fatal("the agent did not say READY=1 within a minute")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := agent.Dial(ctx, filepath.Join(dir, "state"), agent.DialOptions{})
			if err != nil {
				b.Fatalf("dialing the agent: %v", err)
			}
			defer c.Close()
			var last agent.Status
			err = c.WatchStatus(ctx, func(s agent.Status) bool {
				last = s
				up := 0
				for _, e := range s.Entries {
					if e.State == fsm.StateRunning {
						up++
					}
				}
				return s.Converged && up == n && len(s.Entries) == n
			})
			if err != nil {
				b.Fatalf("waiting for the agent to converge on %d running: %v (last status: %d entries, converged %v)", n, err, len(last.Entries), last.Converged)
			}
		},
		perService: func(b *testing.B, dir string) []int {
			var pids []int
			for _, p := range testproc.Marked(filepath.Join(dir, "state") + "/") {
				if len(p.Args) > 1 && p.Args[1] == "executor" {
					pids = append(pids, p.PID)
				}
			}
			return pids
		},
		down: func(b *testing.B, dir string, cmd *exec.Cmd) {
			// The agent stops no task when it exits (its guarantee); the
			// tasks are then stopped daemonless, and checked gone.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			waitCmd(b, cmd)
			stopAll(b, tether, filepath.Join(dir, "state"), 0)
		},
	}
}

// s6Side is s6-svscan over DIR/scan, a service directory per service whose
// run is a link to the sleeper.
func s6Side(svscan, sleeper string) svcSide {
	ctl := filepath.Join(filepath.Dir(svscan), "s6-svscanctl")
	svwait := filepath.Join(filepath.Dir(svscan), "s6-svwait")
	rd := &readiness{at: map[string]chan time.Time{}}
	return svcSide{
		name:  "s6",
		ready: rd.wait,
		define: func(b *testing.B, dir string, n int) *exec.Cmd {
			scan := filepath.Join(dir, "scan")
			for i := range n {
				svc := filepath.Join(scan, fmt.Sprintf("s%02d", i))
				if err := os.MkdirAll(svc, 0o700); err != nil {
					b.Fatal(err)
				}
				if err := os.Symlink(sleeper, filepath.Join(svc, "run")); err != nil {
					b.Fatal(err)
				}
			}
			if n == 0 {
				if err := os.MkdirAll(scan, 0o700); err != nil {
					b.Fatal(err)
				}
			}
			// -d 3: s6-svscan writes a newline to fd 3 once it listens
			// on its control fifo (its readiness notification).
			r, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			ch := rd.arm(dir)
			go func() {
				defer r.Close()
				buf := make([]byte, 64)
				for {
					n, err := r.Read(buf)
					if err != nil {
						return
					}
					if strings.Contains(string(buf[:n]), "\n") {
						ch <- time.Now()
						return
					}
				}
			}()
			cmd := exec.Command(svscan, "-d", "3", scan)
			cmd.ExtraFiles = []*os.File{w}
			return cmd
		},
		settle: func(b *testing.B, dir string, n int) {
			scan := filepath.Join(dir, "scan")
			if rd.wait(dir).IsZero() {
				b.Fatal("s6-svscan did not notify readiness within a minute")
			}
			if n == 0 {
				return
			}
			svcs, _ := filepath.Glob(filepath.Join(scan, "s*"))
			runOK(b, exec.Command(svwait, append([]string{"-u", "-a", "-t", "60000"}, svcs...)...))
		},
		perService: func(b *testing.B, dir string) []int {
			var pids []int
			for _, p := range testproc.Marked(dir + "/") {
				if filepath.Base(p.Args[0]) == "s6-supervise" {
					pids = append(pids, p.PID)
				}
			}
			return pids
		},
		down: func(b *testing.B, dir string, cmd *exec.Cmd) {
			// -t: every s6-supervise brings its service down and exits,
			// then s6-svscan exits.
			runOK(b, exec.Command(ctl, "-t", filepath.Join(dir, "scan")))
			waitCmd(b, cmd)
		},
	}
}

// supervisordSide is supervisord in the foreground on DIR/supervisord.conf,
// a [program:x] section per service (autostart, startsecs = 0), with the
// control socket Debian's default configuration has.
func supervisordSide(supervisord, sleeper string) svcSide {
	ctl := filepath.Join(filepath.Dir(supervisord), "supervisorctl")
	return svcSide{
		name: "supervisord",
		define: func(b *testing.B, dir string, n int) *exec.Cmd {
			var c strings.Builder
			fmt.Fprintf(&c, "[unix_http_server]\nfile=%s/supervisor.sock\nchmod=0700\n\n", dir)
			c.WriteString("[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n")
			fmt.Fprintf(&c, "[supervisorctl]\nserverurl=unix://%s/supervisor.sock\n\n", dir)
			fmt.Fprintf(&c, "[supervisord]\nnodaemon=true\nlogfile=%[1]s/supervisord.log\npidfile=%[1]s/supervisord.pid\nchildlogdir=%[1]s/logs\n\n", dir)
			for i := range n {
				fmt.Fprintf(&c, "[program:s%02d]\ncommand=%s\nautostart=true\nautorestart=true\nstartsecs=0\n\n", i, sleeper)
			}
			if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
				b.Fatal(err)
			}
			conf := filepath.Join(dir, "supervisord.conf")
			if err := os.WriteFile(conf, []byte(c.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			return exec.Command(supervisord, "-c", conf)
		},
		settle: func(b *testing.B, dir string, n int) {
			// supervisorctl has no wait: ask until every program is
			// RUNNING (each ask is a Python start, ~0.1 s: paced by itself).
			conf := filepath.Join(dir, "supervisord.conf")
			deadline := time.Now().Add(time.Minute)
			for {
				out, err := exec.Command(ctl, "-c", conf, "status").CombinedOutput()
				up := strings.Count(string(out), " RUNNING ")
				var xe *exec.ExitError
				if (err == nil || errors.As(err, &xe)) && up == n && (n > 0 || err == nil) {
					return
				}
				if time.Now().After(deadline) {
					b.Fatalf("supervisord: %d of %d RUNNING after a minute: %v\n%s", up, n, err, out)
				}
			}
		},
		perService: func(*testing.B, string) []int { return nil },
		down: func(b *testing.B, dir string, cmd *exec.Cmd) {
			// supervisord stops every program (stopsignal TERM) on SIGTERM,
			// then exits.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			waitCmd(b, cmd)
		},
	}
}

// readiness is when each round's supervisor said it was ready, by its
// directory: arm before the start, wait after.
type readiness struct {
	mu sync.Mutex
	at map[string]chan time.Time
}

// arm returns the channel the round in dir sends its ready time on.
func (r *readiness) arm(dir string) chan time.Time {
	ch := make(chan time.Time, 1)
	r.mu.Lock()
	r.at[dir] = ch
	r.mu.Unlock()
	return ch
}

// wait returns when the supervisor in dir said it was ready (zero if it
// did not within a minute); it can be asked again.
func (r *readiness) wait(dir string) time.Time {
	r.mu.Lock()
	ch := r.at[dir]
	r.mu.Unlock()
	select {
	case t := <-ch:
		ch <- t
		return t
	case <-time.After(time.Minute):
		return time.Time{}
	}
}

// runOK runs cmd and fails the benchmark, with its output, if it fails.
func runOK(b *testing.B, cmd *exec.Cmd) {
	b.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// waitCmd waits for a supervisor started by bootSvc to exit.
func waitCmd(b *testing.B, cmd *exec.Cmd) {
	b.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var xe *exec.ExitError
		if err != nil && !errors.As(err, &xe) {
			b.Errorf("%s: %v", cmd.Path, err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		b.Errorf("%s did not exit within a minute of being told to stop; killed", cmd.Path)
	}
}

// svcRun is one supervisor brought up by bootSvc.
type svcRun struct {
	cmd   *exec.Cmd
	tasks []int // the services' pids, as they wrote them
	t0    time.Time
	first float64 // from the supervisor's fork to the first service running
	secs  float64 // from the supervisor's fork to the last service running
	log   string
}

// bootSvc writes n definitions under dir, starts the supervisor over them,
// and returns once all n services have written their pid to the ready
// fifo (the moment each task process runs: the same signal on every side,
// read without polling), timing that from the supervisor's start.
func bootSvc(b *testing.B, side svcSide, dir string, n int) *svcRun {
	fifo := filepath.Join(dir, "ready.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		b.Fatal(err)
	}
	// Opened read-write: never EOF between two writers, and never blocking
	// a writer for want of a reader. A fifo is pollable: reads take a
	// deadline.
	rd, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	cmd := side.define(b, dir, n)
	logPath := filepath.Join(dir, side.name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, readyEnv+"="+fifo)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	r := &svcRun{cmd: cmd, log: logPath}
	_ = rd.SetReadDeadline(time.Now().Add(time.Minute))
	t0 := time.Now()
	err = cmd.Start()
	for _, f := range cmd.ExtraFiles { // the child's now
		f.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(rd)
	seen := map[int]bool{}
	for len(seen) < n && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			b.Fatalf("the ready fifo got %q", sc.Text())
		}
		if !seen[pid] {
			if len(seen) == 0 {
				r.first = since(t0)
			}
			seen[pid] = true
			r.tasks = append(r.tasks, pid)
		}
	}
	r.secs, r.t0 = since(t0), t0
	if len(seen) < n {
		out, _ := os.ReadFile(logPath)
		teardown(b, side, dir, r)
		b.Fatalf("%s: %d of %d services running after a minute (%v); its output:\n%s", side.name, len(seen), n, sc.Err(), tail(out, 3000))
	}
	return r
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// teardown stops the supervisor and its services, waits (on pidfds) for
// every process marked with dir (the supervisor, its per-service
// supervisors, the tasks: all carry dir in their command line or
// environment) to be gone, and fails on any left.
func teardown(b *testing.B, side svcSide, dir string, r *svcRun) {
	var fds []int
	for _, p := range testproc.Marked(dir + "/") {
		if fd, err := unix.PidfdOpen(p.PID, 0); err == nil {
			fds = append(fds, fd)
		}
	}
	side.down(b, dir, r.cmd)
	deadline := time.Now().Add(time.Minute)
	for _, fd := range fds {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			n, err := unix.Poll(pfd, int(left.Milliseconds())+1)
			if n > 0 || err != nil && !errors.Is(err, unix.EINTR) {
				break
			}
		}
		unix.Close(fd)
	}
	if left := testproc.Marked(dir + "/"); len(left) > 0 {
		b.Fatalf("%s: %d processes left after the teardown, e.g. %s", side.name, len(left), left[0])
	}
}

// svcSides are the supervisors that can be had here: the agent always,
// s6 and supervisord when installed (or installable with apt-get), each
// skipped with a note naming why otherwise.
func svcSides(b *testing.B) []svcSide {
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	sides := []svcSide{agentSide(tether, sleeper)}
	if p, why := findTool(b, "s6-svscan", "s6"); p != "" {
		sides = append(sides, s6Side(p, sleeper))
	} else {
		b.Logf("note: s6 not measured: %s", why)
	}
	if p, why := findTool(b, "supervisord", "supervisor"); p != "" {
		sides = append(sides, supervisordSide(p, sleeper))
	} else {
		b.Logf("note: supervisord not measured: %s", why)
	}
	return sides
}

// svcDir is a fresh directory for one boot, removed at the end. It is
// short, so that the sockets under it stay within sun_path.
func svcDir(b *testing.B, side string, round int) string {
	d, err := os.MkdirTemp("", fmt.Sprintf("tsv-%s-%d-", side, round))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// BenchmarkServices50 is issue 24's supervisor row: the time from "n
// service definitions exist" to "all n running", for tether's agent
// started with --config-dir on n task files, s6-svscan started on a
// scandir of n service directories, and supervisord started on n
// [program:x] sections (autostart, startsecs = 0). Each side execs its
// supervisor on definitions written beforehand (untimed), and the clock
// stops when the n-th service process has written its pid to a fifo: the
// same static sleeper on every side, the same signal, no polling. The
// sides rotate round by round, each sample after settle (tether's tasks
// are moved into cgroups; s6's and supervisord's are not), and every
// round is torn down and checked for leaked processes. Its metrics: each
// side's median, and the agent's median paired ratio to each (the issue's
// target, moved by issue 31: agent ≤ 2x s6).
func BenchmarkServices50(b *testing.B) {
	if sizingRun(b) {
		return
	}
	n := *services
	sides := svcSides(b)
	first := make([][]float64, len(sides))
	ready := make([][]float64, len(sides))
	samples := rotateSettled(b, func() []func(int) float64 {
		fs := make([]func(int) float64, len(sides))
		for k, s := range sides {
			fs[k] = func(round int) float64 {
				dir := svcDir(b, s.name, round)
				r := bootSvc(b, s, dir, n)
				b.StopTimer()
				first[k] = append(first[k], r.first)
				if s.ready != nil {
					if t := s.ready(dir); !t.IsZero() {
						ready[k] = append(ready[k], t.Sub(r.t0).Seconds())
					}
				}
				teardown(b, s, dir, r)
				b.StartTimer()
				return r.secs
			}
		}
		return fs
	}()...)
	b.StopTimer()
	b.ReportMetric(float64(n), "services")
	for k, s := range sides {
		b.ReportMetric(quantile(samples[k], 0.5)*1e3, s.name+"-ms")
		b.ReportMetric(quantile(first[k], 0.5)*1e3, s.name+"-first-ms")
		if len(ready[k]) > 0 {
			b.ReportMetric(quantile(ready[k], 0.5)*1e3, s.name+"-ready-ms")
		}
		if k > 0 {
			b.ReportMetric(medianRatio(samples[0], samples[k]), "agent/"+s.name)
		}
	}
}

// BenchmarkAgentIdle is the memory beside that row: each supervisor,
// brought up as there on 0 and on n services and settled (its own view
// says all n up: the agent's status stream converged with n running,
// s6-svwait -u, supervisorctl status), read from /proc/PID/status (VmRSS)
// and smaps_rollup (Pss); and the per-service supervisors' sum
// (tether's executors, s6-supervise). The configurations rotate round by
// round. PSS shares a page among the processes mapping it: the agent's
// text is shared with its executors (the same binary), s6-svscan's with
// nothing, supervisord's Python with other Python processes on the host.
func BenchmarkAgentIdle(b *testing.B) {
	if sizingRun(b) {
		return
	}
	n := *services
	sides := svcSides(b)
	type conf struct {
		side svcSide
		n    int
		key  string
	}
	var confs []conf
	for _, s := range sides {
		confs = append(confs, conf{s, 0, fmt.Sprintf("%s-0", s.name)}, conf{s, n, fmt.Sprintf("%s-%d", s.name, n)})
	}
	type mem struct{ rss, pss, perRSS, perPSS []float64 }
	got := make([]mem, len(confs))
	fs := make([]func(int) float64, len(confs))
	for k, c := range confs {
		fs[k] = func(round int) float64 {
			dir := svcDir(b, c.side.name, round)
			r := bootSvc(b, c.side, dir, c.n)
			c.side.settle(b, dir, c.n)
			rss, pss := benchkit.MemOf(b, r.cmd.Process.Pid)
			var prss, ppss float64
			per := c.side.perService(b, dir)
			if c.n > 0 && c.side.name != "supervisord" && len(per) != c.n {
				b.Fatalf("%s: %d per-service supervisors for %d services", c.side.name, len(per), c.n)
			}
			for _, pid := range per {
				r, p := benchkit.MemOf(b, pid)
				prss, ppss = prss+r, ppss+p
			}
			m := &got[k]
			m.rss, m.pss = append(m.rss, rss), append(m.pss, pss)
			m.perRSS, m.perPSS = append(m.perRSS, prss), append(m.perPSS, ppss)
			teardown(b, c.side, dir, r)
			return 0
		}
	}
	rotate(b, fs...)
	b.ReportMetric(float64(n), "services")
	for k, c := range confs {
		m := got[k]
		b.ReportMetric(quantile(m.rss, 0.5)/1024, c.key+"-rss-MB")
		b.ReportMetric(quantile(m.pss, 0.5)/1024, c.key+"-pss-MB")
		if c.n > 0 && c.side.name != "supervisord" {
			b.ReportMetric(quantile(m.perRSS, 0.5)/1024, c.key+"-per-service-rss-MB")
			b.ReportMetric(quantile(m.perPSS, 0.5)/1024, c.key+"-per-service-pss-MB")
		}
	}
}
