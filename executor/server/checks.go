//go:build linux

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// Readiness checks.
//
// A task whose spec's Readiness is "tcp", "http" or "exec" is checked by
// its executor, every Check.Interval from the launch of each run, each try
// bounded by Check.Timeout (Nomad's service check): tcp connects to the
// check's address and port; http GETs its path there and passes on a 2xx
// status (429 is Consul's warning: a failure, which check_restart's
// ignore_warnings lets pass for restarts; a redirect is not followed, and
// no proxy is used: the status line of the answer alone is read); exec runs the command
// inside the task's sandbox through the init shim's join mode, the same
// machinery as an exec request (the task's namespaces, root, cgroup,
// seccomp filter, capabilities and user; its output discarded), and
// passes on exit 0 (a timed-out command is killed through its pidfd).
//
// The first pass makes the run ready exactly as a notify task's READY=1
// does (its ready waiters are answered, Status.Ready is set). With a
// check_restart of limit N, N consecutive failures, none counted before
// grace since the run's launch, kill the run as a watchdog miss does: its
// end goes through the restart policy, whose reason names the check. As in
// Nomad, failures count whether the run was ready yet or not; a pass
// resets the count. A relaunch starts not ready, with its count at zero.
// Only one try is in flight at a time: a try that outlasts the interval
// delays the next.

// maxStatusLine bounds an http check answer's status line.
const maxStatusLine = 1024

// checker is the current run's readiness check.
type checker struct {
	c        *fsm.Check
	kind     fsm.Readiness
	gen      uint64 // the run the tries are of: a result of an earlier one is dropped
	start    time.Time
	next     *time.Timer // the next try; nil while one is in flight
	results  chan checkResult
	cancel   context.CancelFunc // a tcp or http try in flight
	exec     *execProc          // an exec try in flight
	killer   *time.Timer        // an exec try's timeout
	timedOut bool
	fails    int // consecutive failures counted (after grace)
}

// checkResult is the outcome of one try.
type checkResult struct {
	gen  uint64
	ok   bool
	warn bool   // an http 429: a failure, which ignore_warnings lets pass for restarts
	why  string // why it failed
}

// startCheck begins checking the run just launched, when its spec has a
// check.
func (s *server) startCheck() {
	if !s.spec.Readiness.Checked() || s.spec.Check == nil {
		return
	}
	gen := uint64(1)
	if s.ck != nil {
		gen = s.ck.gen + 1
		s.stopCheck()
	}
	s.ck = &checker{c: s.spec.Check, kind: s.spec.Readiness, gen: gen, start: time.Now(),
		results: make(chan checkResult, 1)}
	// The first try at once: a task that listens as it starts is ready
	// without waiting an interval (Nomad waits one; a start here waits
	// for readiness).
	s.ck.next = time.NewTimer(0)
}

// stopCheck ends the current run's checking: its try in flight is
// abandoned (an exec try's command killed).
func (s *server) stopCheck() {
	ck := s.ck
	if ck == nil {
		return
	}
	if ck.next != nil {
		ck.next.Stop()
		ck.next = nil
	}
	if ck.cancel != nil {
		ck.cancel()
		ck.cancel = nil
	}
	if ck.killer != nil {
		ck.killer.Stop()
		ck.killer = nil
	}
	if e := ck.exec; e != nil && !e.exited {
		_ = e.proc.Signal(syscall.SIGKILL)
	}
	ck.exec = nil
	ck.gen++ // results of the abandoned try are dropped
}

// checkC is the channel of the next try, nil when none is due.
func (s *server) checkC() <-chan time.Time {
	if s.ck == nil || s.ck.next == nil {
		return nil
	}
	return s.ck.next.C
}

// checkResultC is the channel of the tcp and http tries' results.
func (s *server) checkResultC() <-chan checkResult {
	if s.ck == nil {
		return nil
	}
	return s.ck.results
}

// checkKillC is the channel of an exec try's timeout.
func (s *server) checkKillC() <-chan time.Time {
	if s.ck == nil || s.ck.killer == nil {
		return nil
	}
	return s.ck.killer.C
}

// checkTry starts a try of the check.
func (s *server) checkTry() {
	ck := s.ck
	ck.next = nil
	if s.task == nil || s.task.exited || s.ending != endNone {
		return
	}
	if ck.kind == fsm.ReadinessExec {
		s.checkExec()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ck.c.Timeout)
	ck.cancel = cancel
	go func(c fsm.Check, kind fsm.Readiness, gen uint64, out chan<- checkResult) {
		defer cancel()
		r := probe(ctx, kind, c)
		r.gen = gen
		out <- r // buffered: one try in flight at a time
	}(*ck.c, ck.kind, ck.gen, ck.results)
}

// probe runs one tcp or http try.
func probe(ctx context.Context, kind fsm.Readiness, c fsm.Check) checkResult {
	addr := net.JoinHostPort(c.Address, strconv.Itoa(c.Port))
	if kind == fsm.ReadinessTCP {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return checkResult{why: err.Error()}
		}
		conn.Close()
		return checkResult{ok: true}
	}
	status, err := httpGet(ctx, addr, c.Path)
	switch {
	case err != nil:
		return checkResult{why: err.Error()}
	case status >= 200 && status < 300:
		return checkResult{ok: true}
	case status == 429:
		return checkResult{warn: true, why: "HTTP " + strconv.Itoa(status)}
	}
	return checkResult{why: "HTTP " + strconv.Itoa(status)}
}

// httpGet sends GET path to addr (HTTP/1.1, the connection closed after
// it) and returns the answer's status code, read from its status line.
// It is written here rather than with net/http, which the standalone
// executor does not link (its package init alone costs an idle executor
// megabytes): a check needs the status, nothing else.
func httpGet(ctx context.Context, addr, path string) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: tether-check\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	line, err := bufio.NewReaderSize(io.LimitReader(conn, maxStatusLine), maxStatusLine).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("reading the answer's status line: %w", err)
	}
	// "HTTP/1.1 200 OK": the protocol, then the three-digit code.
	proto, rest, ok := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/") || len(rest) < 3 {
		return 0, fmt.Errorf("not an HTTP answer: %q", line)
	}
	code, err := strconv.Atoi(rest[:3])
	if err != nil || code < 100 || code > 999 || len(rest) > 3 && rest[3] != ' ' {
		return 0, fmt.Errorf("not an HTTP status line: %q", line)
	}
	return code, nil
}

// checkExec starts an exec try: the command inside the task's sandbox.
func (s *server) checkExec() {
	ck := s.ck
	fail := func(why string) { s.checkDone(checkResult{gen: ck.gen, why: why}) }
	if err := s.canExec(); err != nil {
		fail(err.Error())
		return
	}
	es := wire.ExecSpec{Argv: append([]string{ck.c.Command}, ck.c.Args...)}
	e, files, err := s.startExec(es)
	if err != nil {
		fail(s.atLimit(err).Error())
		return
	}
	// Its stdin at end of file, its output read and dropped (a command
	// that writes must not block on a full pipe).
	for i, f := range files {
		if i == 0 {
			f.Close()
			continue
		}
		go func(f io.ReadCloser) {
			_, _ = io.Copy(io.Discard, f)
			f.Close()
		}(f)
	}
	e.check = true
	s.execs[e.pid] = e
	ck.exec, ck.timedOut = e, false
	ck.killer = time.NewTimer(ck.c.Timeout)
	s.reap() // it may have exited already
}

// checkExecTimedOut kills an exec try that outlived its timeout; its reap
// is the try's failure.
func (s *server) checkExecTimedOut() {
	ck := s.ck
	ck.killer = nil
	if ck.exec == nil || ck.exec.exited {
		return
	}
	ck.timedOut = true
	if err := ck.exec.proc.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Warn("killing a check command", "exec_pid", ck.exec.pid, "err", err)
	}
}

// checkExecReaped is an exec try's end.
func (s *server) checkExecReaped(e *execProc) {
	ck := s.ck
	if ck == nil || ck.exec != e {
		return // a try of a run since relaunched
	}
	ck.exec = nil
	if ck.killer != nil {
		ck.killer.Stop()
		ck.killer = nil
	}
	switch {
	case ck.timedOut:
		s.checkDone(checkResult{gen: ck.gen, why: fmt.Sprintf("timed out after %s", ck.c.Timeout)})
	case e.exit.Code == 0 && e.exit.Signal == 0:
		s.checkDone(checkResult{gen: ck.gen, ok: true})
	default:
		s.checkDone(checkResult{gen: ck.gen, why: e.exit.String()})
	}
}

// checkDone acts on a try's result: the first pass makes the run ready; a
// failure counts toward check_restart; the next try is due an interval
// after this one ended (a slow try never overlaps the next).
func (s *server) checkDone(r checkResult) {
	ck := s.ck
	if ck == nil || r.gen != ck.gen {
		return
	}
	ck.cancel = nil
	if s.task == nil || s.task.exited || s.ending != endNone || s.rd.missed != "" {
		return
	}
	ck.next = time.NewTimer(ck.c.Interval)
	name := ck.c.DisplayName(ck.kind)
	if r.ok {
		ck.count(r, time.Since(ck.start))
		if !s.rd.ready {
			s.becameReady("task ready: its check passed", "check", name)
		}
		return
	}
	s.log.Debug("check failed", "check", name, "why", r.why, "ready", s.rd.ready)
	if ck.count(r, time.Since(ck.start)) {
		s.unhealthy(fmt.Sprintf("check_restart: check %q failed %d times in a row (%s)", name, ck.fails, r.why))
	}
}

// count takes a try's result, elapsed after the run's launch, into
// check_restart's count of consecutive failures, and reports whether it
// reached the limit (the run is to be restarted). It is pure but for the
// count: a pass resets it; a failure within the grace, or with no
// check_restart (or a limit of 0), counts nothing; a warning (an HTTP
// 429) with ignore_warnings is a pass for restarts (it resets the count);
// any other failure counts one.
func (ck *checker) count(r checkResult, elapsed time.Duration) bool {
	cr := ck.c.Restart
	switch {
	case r.ok:
		ck.fails = 0
		return false
	case cr == nil || cr.Limit <= 0 || elapsed < cr.Grace:
		return false
	case r.warn && cr.IgnoreWarnings:
		ck.fails = 0
		return false
	}
	ck.fails++
	return ck.fails >= cr.Limit
}

// unhealthy kills the run for why (its check's failures): its end goes
// through the restart policy as an exit does, with why as the restart's
// reason.
func (s *server) unhealthy(why string) {
	if s.task == nil || s.task.exited || s.rd.missed != "" || s.ending != endNone {
		return
	}
	s.rd.missed = why
	s.stopCheck()
	s.log.Warn("unhealthy: killing the task", "why", why, "task_pid", s.task.pid)
	s.killAll()
}
