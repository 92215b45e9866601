//go:build linux

package server

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// Readiness (the sd_notify protocol).
//
// A task whose spec says readiness = "notify" gets a notify socket: a unix
// datagram socket the executor binds in the task's secrets directory
// (private to the task's user, 0700) before the task's first run, owned by
// the task's user with mode 0700, so that only that user (and root) can
// send to it. NOTIFY_SOCKET names it: the host path for a raw_exec task,
// /secrets/notify in an exec task's root, where the secrets directory is
// bound (a path, not an abstract socket: those do not cross a network
// namespace of the task's own). A raw_exec task whose host path is too
// long for a sockaddr_un (a deep state directory, a long task name) gets
// an abstract socket of a random name instead ("@tether-notify-..."),
// which has no mode: the sender check below is then its only guard. With a watchdog, WATCHDOG_USEC is set,
// and WATCHDOG_PID, by the init shim, to the task's own pid as it sees it.
//
// The socket has SO_PASSCRED: every datagram comes with its sender's pid
// as the kernel knows it, and a datagram counts only when that pid is the
// task's main process or a process of its cgroup (without a cgroup: a
// descendant of the main process); anything else is dropped (and logged,
// at most once a minute), so no other process can make a task ready or
// feed its watchdog. The check costs a bounded amount per datagram: a
// sender other than the main process is judged once (the cgroup's members
// read, a pidfd of it opened) and its verdict kept for the run while that
// pidfd says the same process lives (pid and identity: a pid reused by
// another process is judged afresh), for at most maxSenders senders.
//
// A task's notify traffic is the task's cost, not its executor's: the
// executor reads at most notifyRate datagrams a second (after a burst of
// notifyBurst), and leaves the rest in the socket's queue, so that a task
// that sends faster fills the queue and its sends block (or fail with
// EAGAIN): the flood costs the task's own CPU, inside its cgroup and its
// limits. A throttled flood is logged at most once a minute. The executor keeps, per run: READY=1 (the run is
// ready: the ready waiters are answered, the watchdog armed), STATUS=
// (the last status text), STOPPING=1 (logged), WATCHDOG=1 (the watchdog
// re-armed), WATCHDOG=trigger (a watchdog miss now). A run that is ready
// and sends no WATCHDOG=1 within the interval is a watchdog miss: the
// task is killed, and its end goes through its restart policy as any exit
// does, the restart's reason naming the watchdog. A relaunch starts not
// ready.

// notifyName is the notify socket's name in the task's secrets directory.
const notifyName = "notify"

// maxNotify bounds a notify datagram (systemd reads at most a pipe's page).
const maxNotify = 4096

// maxNotifyFDs bounds the descriptors a datagram may carry (a BARRIER=1's
// one; systemd's file descriptor store is not kept: they are closed).
const maxNotifyFDs = 16

// notifyRate is how many datagrams a second the executor reads from a
// task's notify socket once notifyBurst were read at once. What the
// protocol carries needs far less: READY=1 once a run, a STATUS= now and
// then, WATCHDOG=1 at half the watchdog interval at most (systemd's
// advice), so 100 a second serves a watchdog of 20 ms, ten times tighter
// than any service sets, and a sd_notify_barrier (two datagrams) fifty
// times a second. At the cost of a datagram here (a read, a hand-over to
// the run loop, its lines, the sender check: tens of microseconds), 100 a
// second is well under 1% of a CPU, whatever the task sends.
const (
	notifyRate  = 100
	notifyBurst = 100
)

// notifyLogEvery is how often, at most, a throttled flood, or a dropped
// stranger's datagram, is logged.
const notifyLogEvery = time.Minute

// maxSenders bounds the senders whose verdict the run keeps.
const maxSenders = 64

// notifyMsg is one datagram, with its sender's credentials and the
// descriptors it carried (closed once it has been handled: a BARRIER=1's
// sender learns so that what it sent before has been).
type notifyMsg struct {
	pid  int
	uid  uint32
	data []byte
	fds  []int
}

// notifier is the task's notify socket. Its reader hands every datagram to
// the run loop, which alone judges and acts on it.
type notifier struct {
	log  hclog.Logger
	conn *net.UnixConn
	dfd  int    // the secrets directory (O_PATH), where the socket is unlinked at the end; -1: abstract
	path string // host path ("": abstract)
	env  string // NOTIFY_SOCKET: the path as the task sees it
	msgs chan notifyMsg
}

// readiness is where the current run stands.
type readiness struct {
	ready bool
	// journalled: the run's readiness is in the journal (journalReady).
	journalled bool
	status     string // the last STATUS=
	stopping   bool
	wd         *time.Timer // the watchdog, armed once ready; nil: none
	missed     string      // why the run was killed by its watchdog ("": it was not)
	waiters    []waiter    // ready requests waiting for READY=1 or the run's end
	// senders are the verdicts of the run's senders other than its main
	// process, by pid (see fromTask); refused counts the dropped
	// datagrams of strangers since the last log of them.
	senders map[int]*sender
	refused rateLog
}

// sender is the verdict on one process that sent a datagram, kept while
// its pidfd says it lives.
type sender struct {
	fd *proc.PidFD
	ok bool
}

// openNotify makes the notify socket for a task of the launch in dirs, for
// its user tu (once, at the first launch: a relaunch reuses it).
func (s *server) openNotify(dirs spec.Dirs, tu spec.User, exec bool) error {
	if s.notify != nil {
		return nil
	}
	secrets := filepath.Join(dirs.Task, statedir.SecretsDir)
	host := filepath.Join(secrets, notifyName)
	env := host
	var conn *net.UnixConn
	var err error
	dfd := -1
	fail := func(err error) error {
		if conn != nil {
			conn.Close()
		}
		if dfd >= 0 {
			_ = unix.Unlinkat(dfd, notifyName, 0)
			unix.Close(dfd)
		}
		return err
	}
	if !exec && len(host) >= len(unix.RawSockaddrUnix{}.Path) {
		// A raw_exec task shares the host's network namespace: a path
		// it could not connect to (longer than a sockaddr_un holds)
		// becomes an abstract socket of a random name, which the
		// sender check alone guards.
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("%w: notify socket name: %w", wire.ErrLaunch, err)
		}
		host, env = "", "@tether-notify-"+hex.EncodeToString(b[:])
		if conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: env, Net: "unixgram"}); err != nil {
			return fmt.Errorf("%w: bind the notify socket %s: %w", wire.ErrLaunch, env, err)
		}
	} else {
		if exec {
			env = "/" + statedir.SecretsDir + "/" + notifyName
		}
		// The directory as it is now (prepared by this executor, before
		// any run of the task): the socket is made through a descriptor
		// of it, never through a link a task planted.
		if dfd, err = unix.Open(secrets, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("%w: open %s for the notify socket: %w", wire.ErrLaunch, secrets, err)
		}
		_ = unix.Unlinkat(dfd, notifyName, 0) // a socket an earlier executor left
		short := "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + notifyName
		if conn, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: short, Net: "unixgram"}); err != nil {
			return fail(fmt.Errorf("%w: bind the notify socket %s: %w", wire.ErrLaunch, host, err))
		}
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return fail(fmt.Errorf("%w: notify socket: %w", wire.ErrLaunch, err))
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		return fail(fmt.Errorf("%w: notify socket: SO_PASSCRED: %w", wire.ErrLaunch, errors.Join(err, serr)))
	}
	// Mode 0700 (explicit: not the umask's) and the task's owner: only
	// the task's user can connect (root can anyway).
	if dfd >= 0 {
		if err := unix.Fchmodat(dfd, notifyName, 0o700, 0); err != nil {
			return fail(fmt.Errorf("%w: chmod the notify socket: %w", wire.ErrLaunch, err))
		}
	}
	if dfd >= 0 && tu.Set() {
		if err := unix.Fchownat(dfd, notifyName, tu.UID, tu.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail(fmt.Errorf("%w: chown the notify socket: %w", wire.ErrLaunch, err))
		}
	}
	n := &notifier{log: s.log, conn: conn, dfd: dfd, path: host, env: env, msgs: make(chan notifyMsg, 16)}
	s.notify = n
	go n.read(s.quit)
	return nil
}

// read hands each datagram, with its sender's credentials, to the run
// loop, at most notifyRate a second (see limiter): past that it waits,
// leaving the socket unread. It ends when the socket is closed.
func (n *notifier) read(quit <-chan struct{}) {
	buf := make([]byte, maxNotify)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*maxNotifyFDs))
	lim := newLimiter(notifyRate, notifyBurst, time.Now())
	var throttled rateLog
	for {
		if wait := lim.take(time.Now()); wait > 0 {
			if k, ok := throttled.note(time.Now()); ok {
				n.log.Warn("the task sends its notify socket more than it may: reading a bounded number of datagrams a second; its sends wait (logged at most once a minute)",
					"per_second", notifyRate, "throttled", k)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-quit:
				t.Stop()
				return
			}
		}
		nb, noob, _, _, err := n.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m := notifyMsg{pid: -1, data: bytes.Clone(buf[:nb])}
		if cmsgs, err := unix.ParseSocketControlMessage(oob[:noob]); err == nil {
			for _, c := range cmsgs {
				if cred, err := unix.ParseUnixCredentials(&c); err == nil {
					m.pid, m.uid = int(cred.Pid), cred.Uid
				} else if fds, err := unix.ParseUnixRights(&c); err == nil {
					for _, fd := range fds {
						unix.CloseOnExec(fd)
					}
					m.fds = append(m.fds, fds...)
				}
			}
		}
		select {
		case n.msgs <- m:
		case <-quit:
			closeFDs(m.fds)
			return
		}
	}
}

// notifyC is the notify socket's channel, nil when there is none.
func (s *server) notifyC() <-chan notifyMsg {
	if s.notify == nil {
		return nil
	}
	return s.notify.msgs
}

// watchdogC is the watchdog's channel, nil when it is not armed.
func (s *server) watchdogC() <-chan time.Time {
	if s.rd.wd == nil {
		return nil
	}
	return s.rd.wd.C
}

// notifyEnv adds the notify variables to the environment of a run of a
// task whose watchdog is wd.
func (s *server) notifyEnv(env map[string]string, wd time.Duration) {
	if s.notify == nil {
		return
	}
	env["NOTIFY_SOCKET"] = s.notify.env
	if wd > 0 {
		env["WATCHDOG_USEC"] = strconv.FormatInt(wd.Microseconds(), 10)
	}
}

// fromTask reports whether pid is a process of the current run: its main
// process (the executor's unreaped child: its pid is its own), a member of
// its cgroup, or (without a cgroup) a descendant of its main process. A
// sender other than the main process is judged once (memberOf), with a
// pidfd opened before and still live after, and its verdict kept while
// that pidfd says the same process lives: each later datagram of it costs
// a poll of the pidfd. A pid whose process died is judged afresh (its pid
// may be another's now).
func (s *server) fromTask(pid int) bool {
	if s.task == nil || s.task.exited || pid <= 0 {
		return false
	}
	if pid == s.task.pid {
		return true
	}
	if e := s.rd.senders[pid]; e != nil {
		if !e.fd.Exited() {
			return e.ok
		}
		e.fd.Close()
		delete(s.rd.senders, pid)
	}
	fd, err := proc.Open(pid)
	if err != nil {
		return false // gone already: nothing to judge
	}
	ok := s.memberOf(pid)
	if fd.Exited() {
		// It ended while it was judged: whether what was read was of
		// it, or of a process that took its pid since, is not known.
		fd.Close()
		return false
	}
	if len(s.rd.senders) >= maxSenders {
		s.dropSenders(false)
	}
	if s.rd.senders == nil {
		s.rd.senders = map[int]*sender{}
	}
	s.rd.senders[pid] = &sender{fd: fd, ok: ok}
	return ok
}

// dropSenders forgets the kept verdicts of senders that have ended, or
// with all of every one, and closes their pidfds.
func (s *server) dropSenders(all bool) {
	for pid, e := range s.rd.senders {
		if all || e.fd.Exited() {
			e.fd.Close()
			delete(s.rd.senders, pid)
		}
	}
	if len(s.rd.senders) >= maxSenders {
		s.dropSenders(true)
	}
}

// memberOf reports whether pid is a member of the run's cgroup, or
// (without a cgroup) a descendant of its main process.
func (s *server) memberOf(pid int) bool {
	if s.cg != nil {
		pids, err := s.cg.Procs()
		return err == nil && slices.Contains(pids, pid)
	}
	for p, hops := pid, 0; p > 1 && hops < 4096; hops++ {
		st, err := proc.ReadStat(p)
		if err != nil {
			return false
		}
		if st.PPID == s.task.pid {
			return true
		}
		p = st.PPID
	}
	return false
}

// closeFDs closes the descriptors a datagram carried.
func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// notified acts on one datagram of the notify socket, then closes what it
// carried (a BARRIER=1's descriptor: its sender waits for that close, so
// that a short-lived sender, systemd-notify's, outlives the check of its
// earlier datagrams).
func (s *server) notified(m notifyMsg) {
	defer closeFDs(m.fds)
	if !s.fromTask(m.pid) {
		if n, ok := s.rd.refused.note(time.Now()); ok {
			s.log.Warn("notify messages from a process that is not the task's: dropped (logged at most once a minute)", "sender_pid", m.pid, "sender_uid", m.uid, "dropped", n)
		}
		return
	}
	n := parseNotice(m.data)
	if n.status != nil {
		s.rd.status = *n.status
	}
	if n.stopping && !s.rd.stopping {
		s.rd.stopping = true
		s.log.Info("task stopping", "task_pid", s.task.pid)
	}
	if n.trigger {
		s.watchdogMissed("the task triggered its watchdog (WATCHDOG=trigger)")
		return
	}
	if n.ping {
		s.armWatchdog()
	}
	// READY=1 is acted on after the rest of its datagram (its STATUS=
	// with it is the status it is ready with).
	if n.ready && !s.rd.ready {
		s.becameReady("task ready", "status", s.rd.status)
	}
}

// notice is what one datagram says that the executor acts on.
type notice struct {
	ready    bool    // READY=1
	status   *string // the last STATUS= (nil: none)
	stopping bool    // STOPPING=1
	ping     bool    // WATCHDOG=1
	trigger  bool    // WATCHDOG=trigger: a watchdog miss now
}

// parseNotice reads a datagram's newline-separated KEY=VALUE lines (the
// sd_notify protocol): only the exact values count (READY=1, not READY=0
// or READY=10), and of several STATUS= lines the last. It is pure.
func parseNotice(data []byte) notice {
	var n notice
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		key, val, _ := bytes.Cut(line, []byte("="))
		switch string(key) {
		case "READY":
			n.ready = n.ready || string(val) == "1"
		case "STATUS":
			v := string(val)
			n.status = &v
		case "STOPPING":
			n.stopping = n.stopping || string(val) == "1"
		case "WATCHDOG":
			switch string(val) {
			case "1":
				n.ping = true
			case "trigger":
				n.trigger = true
			}
		}
	}
	return n
}

// becameReady makes the current run ready (READY=1, or its check's first
// pass): its readiness is journalled first (fsynced: journalReady), then
// its watchdog armed, its ready waiters answered and the watches told.
func (s *server) becameReady(msg string, kv ...any) {
	s.rd.ready = true
	s.rd.journalled = s.journalReady(time.Now())
	s.log.Info(msg, append([]any{"task_pid", s.task.pid, "journalled", s.rd.journalled}, kv...)...)
	s.armWatchdog()
	s.answerReady()
	s.notifyWatchers()
}

// armWatchdog (re)starts the watchdog of a ready run.
func (s *server) armWatchdog() {
	wd := s.spec.Watchdog
	if wd <= 0 || !s.rd.ready || s.rd.missed != "" {
		return
	}
	if s.rd.wd == nil {
		s.rd.wd = time.NewTimer(wd)
		return
	}
	s.rd.wd.Reset(wd)
}

// watchdogMissed kills the run: its end goes through the restart policy
// as an exit does, with why as the restart's reason.
func (s *server) watchdogMissed(why string) {
	if s.rd.wd != nil {
		s.rd.wd.Stop()
		s.rd.wd = nil
	}
	if s.task == nil || s.task.exited || s.rd.missed != "" || s.ending != endNone {
		return
	}
	s.rd.missed = why
	s.log.Warn("watchdog: killing the task", "why", why, "task_pid", s.task.pid)
	s.killAll()
}

// resetReadiness starts a new run not ready (a relaunch), its senders
// unjudged.
func (s *server) resetReadiness() {
	if s.rd.wd != nil {
		s.rd.wd.Stop()
	}
	s.dropSenders(true)
	waiters, refused := s.rd.waiters, s.rd.refused
	s.rd = readiness{waiters: waiters, refused: refused}
}

// runEnded is called when the run's main process has exited: its
// watchdog stops, and the ready waiters learn it will never be ready.
func (s *server) runEnded() {
	s.stopCheck()
	if s.rd.wd != nil {
		s.rd.wd.Stop()
		s.rd.wd = nil
	}
	s.rd.ready = false
	s.answerReady()
}

// readyReq answers a ready request now if the run is ready or over, or
// when it is.
func (s *server) readyReq(sc *sconn, id uint64) {
	switch {
	case !s.spec.Readiness.Waits():
		s.send(sc, wire.Response{ID: id, Err: wire.FailureOf(fmt.Errorf("%w: the task has no readiness (\"notify\" or a check)", wire.ErrBadSpec))})
	case s.task == nil:
		s.send(sc, wire.Response{ID: id, Err: wire.FailureOf(wire.ErrNotLaunched)})
	default:
		s.rd.waiters = append(s.rd.waiters, waiter{sc, id})
		s.answerReady()
	}
}

// answerReady answers the ready waiters once the run is ready, or has
// ended (and a restart of it may follow: Status.Restarting).
func (s *server) answerReady() {
	if len(s.rd.waiters) == 0 || s.task == nil || !s.rd.ready && !s.task.exited {
		return
	}
	st := s.status()
	for _, w := range s.rd.waiters {
		s.send(w.c, wire.Response{ID: w.id, Status: &st})
	}
	s.rd.waiters = nil
}

// closeNotify closes the notify socket and removes it.
func (s *server) closeNotify() {
	s.dropSenders(true)
	if s.notify == nil {
		return
	}
	s.notify.conn.Close()
	if s.notify.dfd >= 0 {
		_ = unix.Unlinkat(s.notify.dfd, notifyName, 0)
		unix.Close(s.notify.dfd)
	}
	s.notify = nil
}

// limiter is a token bucket: take says how long to wait before the next
// datagram may be read, rate a second after a burst. It is pure (the
// caller gives the time).
type limiter struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newLimiter(rate, burst int, now time.Time) *limiter {
	return &limiter{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
}

// take takes a token at now, or says how long until one is there (the
// caller waits that long, then reads: the token is taken then).
func (l *limiter) take(now time.Time) time.Duration {
	if el := now.Sub(l.last); el > 0 {
		l.tokens = min(l.burst, l.tokens+el.Seconds()*l.rate)
		l.last = now
	}
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}

// rateLog says when something that may happen often is logged: at most
// once every notifyLogEvery, with how many times it happened since the
// last log.
type rateLog struct {
	last time.Time
	n    int
}

// note counts one more at now; ok says to log now, with n since the last.
func (r *rateLog) note(now time.Time) (n int, ok bool) {
	r.n++
	if !r.last.IsZero() && now.Sub(r.last) < notifyLogEvery {
		return 0, false
	}
	n, r.n, r.last = r.n, 0, now
	return n, true
}
