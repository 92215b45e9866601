//go:build linux

package server

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// allowPeer is the SO_PEERCRED policy: a peer is accepted when it runs as
// the executor's own uid or as root.
func allowPeer(peerUID, selfUID uint32) bool { return peerUID == selfUID || peerUID == 0 }

// Serve is the executor-mode entry point. An embedding binary calls it with
// its arguments after its own mode word, and exits with the returned code:
//
//	if len(os.Args) > 1 && os.Args[1] == "executor" {
//		os.Exit(executor.Serve(os.Args[2:]))
//	}
//
// args must be a tail of os.Args: the executor re-executes its own binary
// with the same prefix (and "-shim") to set an exec-mode task's capabilities.
// Flags (set by Spawn): -dir (task directory), -nonce, -lease (how long to
// wait for the first client), -ready-fd (descriptor to report ready on).
func Serve(args []string) int { return ServeWith(args, nil) }

// ServeWith is Serve with a Preparer for the tasks of job files that have
// artifacts or templates (package executor/prepare); Serve's executor,
// with none, refuses their launch, saying so.
func ServeWith(args []string, preparer Preparer) int {
	if err := proc.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "tether executor: %v\n", err)
		return 1
	}
	if len(args) > 0 && args[0] == shim.Flag {
		return shim.Run(args[1:])
	}
	if len(args) > 0 && args[0] == shim.JoinFlag {
		return shim.RunJoin(args[1:])
	}
	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	dir := fs.String("dir", "", "task directory")
	nonce := fs.String("nonce", "", "spawn nonce")
	lease := fs.Duration("lease", 10*time.Second, "exit if no client said hello within this time")
	readyFD := fs.Int("ready-fd", -1, "descriptor to write the ready message to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var ready *os.File
	if *readyFD >= 0 {
		ready = os.NewFile(uintptr(*readyFD), "ready")
		unix.CloseOnExec(*readyFD)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "executor", Output: os.Stderr, Level: hclog.Info})
	s, err := newServer(log, *dir, *nonce, prefixOf(args))
	if s != nil {
		s.preparer = preparer
	}
	if err != nil {
		log.Error("executor failed to start", "err", err)
		if ready != nil {
			_ = json.NewEncoder(ready).Encode(wire.ReadyMsg{Err: err.Error()})
			ready.Close()
		}
		return 1
	}
	if ready != nil {
		err := json.NewEncoder(ready).Encode(wire.ReadyMsg{Identity: &s.id})
		ready.Close()
		if err != nil {
			log.Warn("could not report ready", "err", err)
		}
	}
	return s.run(*lease)
}

// prefixOf returns the part of os.Args before args (the argv that starts
// this binary in executor mode), or nil if args is not a tail of os.Args.
func prefixOf(args []string) []string {
	n := len(os.Args) - len(args)
	if n < 1 || !slices.Equal(os.Args[n:], args) {
		return nil
	}
	return slices.Clone(os.Args[:n])
}

// lease is where the executor's lease stands: it exits by itself when no
// client said hello within the lease, or when the last client that did
// disconnects before a launch; once its task is launched it runs on
// without any.
type lease uint8

const (
	leaseWaiting lease = iota // no client said hello yet: the lease timer runs
	leaseHeld                 // a client said hello: the lease is the connections
	leaseDone                 // the loop ends: the executor exits
)

// ending is what a client asked of the task's end: nothing yet, that it
// end with this run (a stop: no more restarts), or that the executor kill
// what is left and exit (a shutdown, or SIGTERM). Each is more than the
// one before and replaces it.
type ending uint8

const (
	endNone ending = iota
	endStop
	endShutdown
)

// cgKill is where the kill of the task's cgroup stands (a run's drain).
type cgKill uint8

const (
	cgLive    cgKill = iota // not killed: members may live
	cgKilling               // a kill in flight (killCgroup)
	cgEmpty                 // confirmed empty
	cgGone                  // confirmed empty and removed
	cgGaveUp                // could not be emptied in cgroupKillTries: left to the driver
)

type server struct {
	log     hclog.Logger
	taskDir string
	nonce   string
	id      fsm.Identity
	prefix  []string
	self    int
	selfUID uint32
	ownSess bool // the executor leads its own session (Setsid)

	dirfd int
	ln    *net.UnixListener

	accepted chan *sconn
	inbox    chan inMsg
	gone     chan *sconn
	quit     chan struct{}

	conns map[*sconn]bool // connections that passed hello
	lease lease

	task       *taskState
	noChildren bool
	waiters    []waiter
	killTimer  *time.Timer
	killAt     time.Time
	ending     ending
	exitCode   int

	// Containment (see contain.go): the host's layout, the task cgroup's
	// location (zero, with noCgroup saying why, when the host gives
	// none), the cgroup once created, and its kill.
	host     cgroup.Host
	loc      cgroup.Location
	noCgroup error
	cg       *cgroup.Cgroup
	cgKill   cgKill
	cgKilled chan error
	cgTries  int
	// feats is what of the exec sandbox the host lacks (see features).
	feats spec.Features

	// The task's output streams, and the bound on their last copies.
	outs     []*output
	outTimer *time.Timer

	// Restarts (see restart.go): the spec to relaunch, the restart state,
	// the journal (restarts and readiness: journal.go), and the watches
	// waiting for the journal to grow.
	spec     wire.Launch
	rs       *restarts
	jn       *journal
	watchers []watcher

	// Commands run inside the task (see exec.go), by pid.
	execs map[int]*execProc

	// Readiness (see notify.go): the notify socket of a notify task, and
	// where the current run stands.
	notify *notifier
	rd     readiness
	// ck is the readiness check of a checked task (see checks.go).
	ck *checker

	// Preparation (see prepare.go): the one in flight and where it
	// reports, what the last one left (the env = true templates'
	// variables, what the template watch needs), the watch's changes, and
	// a restart a changed template asked for.
	preparer  Preparer // nil: a launch that needs preparing is refused
	preparing *preparation
	preparedC chan prepared
	prep      Prepared
	tmplEnv   map[string]string
	changes   <-chan Change
	watchStop context.CancelFunc
	forced    string
	// prepState is the restart policy's state after the preparation's
	// failed tries (the runs' policy goes on from it), prepWarnings what
	// the launch reply says of them.
	prepState    *fsm.RestartState
	prepWarnings []fsm.Warning
}

type taskState struct {
	pid    int
	start  uint64
	nsInit bool     // pid 1 of a PID namespace of its own
	join   joinPlan // what an exec into this run joins
	exited bool
	exit   fsm.ExitStatus
	// done: the run is over and drained (completeTask ran); a restart of
	// it may be pending.
	done bool
}

type waiter struct {
	c  *sconn
	id uint64
}

type sconn struct {
	c       *net.UnixConn
	out     chan wire.Response
	hello   bool
	closed  bool
	written chan struct{} // closed when the writer has finished
}

type inMsg struct {
	c   *sconn
	req wire.Request
}

func newServer(log hclog.Logger, dir, nonce string, prefix []string) (*server, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: -dir must be an absolute path", wire.ErrBadConfig)
	}
	if !wire.ValidNonce(nonce) {
		return nil, fmt.Errorf("%w: bad -nonce", wire.ErrBadConfig)
	}
	// Tasks start with umask 022, as under runc (Nomad sets none): a task
	// inherits the executor's (the executor forks raw_exec tasks itself,
	// and starts the init shim, which execs the rest). So the executor's
	// umask is 022, and every file and directory it makes for itself is
	// private by an explicit mode, never by the umask: its records and
	// journal 0600 (wire.WriteFile, createJournal), the reserve 0600, its
	// socket 0600 (chmodded below; in the task directory, 0700), the notify
	// socket 0700, the output logs 0600 (package logs), the task's
	// directories by their modes (taskdirs.go, through descriptors).
	syscall.Umask(0o022)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("executor: set child subreaper: %w", err)
	}
	s := &server{
		log:      log.With("pid", os.Getpid()),
		taskDir:  dir,
		nonce:    nonce,
		prefix:   prefix,
		self:     os.Getpid(),
		selfUID:  uint32(os.Geteuid()),
		dirfd:    -1,
		accepted: make(chan *sconn),
		inbox:    make(chan inMsg),
		gone:     make(chan *sconn),
		quit:     make(chan struct{}),
		conns:    map[*sconn]bool{},
		cgKilled: make(chan error, 1),
		execs:    map[int]*execProc{},

		preparedC: make(chan prepared),
	}
	if sid, err := unix.Getsid(0); err == nil && sid == s.self {
		s.ownSess = true
	}
	if old, err := wire.ReadIdentity(dir); err == nil && old.Nonce != nonce {
		if alive, _ := proc.Alive(old); alive {
			return nil, fmt.Errorf("%w: pid %d", wire.ErrBusy, old.PID)
		}
	}
	// Leftovers of an earlier executor of this directory.
	_ = os.Remove(filepath.Join(dir, statedir.ExitStatusFile))
	_ = os.Remove(filepath.Join(dir, statedir.SocketFile))

	start, err := proc.StartTime(s.self)
	if err != nil {
		return nil, err
	}
	boot, err := proc.BootID()
	if err != nil {
		return nil, err
	}
	s.id = fsm.Identity{PID: s.self, StartTime: start, BootID: boot, Nonce: nonce, Socket: wire.SocketPath(dir)}
	// Where the task will be contained is part of the identity, so the
	// driver records it before the cgroup exists.
	s.host, s.loc, s.noCgroup = probeContainment(dir, nonce)
	if s.noCgroup == nil {
		s.id.Cgroup = s.loc.String()
	} else {
		s.log.Warn("no task cgroup on this host: exec tasks are refused, raw_exec tasks run uncontained", "err", s.noCgroup)
	}

	sp, dfd, err := wire.ShortPath(s.id.Socket)
	if err != nil {
		return nil, err
	}
	s.dirfd = dfd
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sp, Net: "unix"})
	if err != nil {
		unix.Close(dfd)
		return nil, fmt.Errorf("executor: listen: %w", err)
	}
	s.ln = ln
	// The socket is the executor's alone (peers are checked too): 0600,
	// whatever the umask made it.
	if err := unix.Fchmodat(dfd, filepath.Base(s.id.Socket), 0o600, 0); err != nil {
		ln.Close()
		unix.Close(dfd)
		return nil, fmt.Errorf("executor: chmod the socket: %w", err)
	}
	if err := wire.WriteFileAtomic(dir, statedir.IdentityFile, s.id); err != nil {
		ln.Close()
		unix.Close(dfd)
		return nil, err
	}
	return s, nil
}

// run is the executor's single loop: it owns all state, reaps every child
// (wait4(-1) on SIGCHLD), and answers requests.
func (s *server) run(lease time.Duration) int {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	// Catch, never ignore: an ignored disposition survives exec, so the
	// task would start with SIGHUP and SIGPIPE ignored. Caught signals
	// are reset to their defaults in the task.
	quiet := make(chan os.Signal, 1)
	signal.Notify(quiet, syscall.SIGHUP, syscall.SIGPIPE)
	defer signal.Stop(quiet)
	defer signal.Stop(sigchld)
	defer signal.Stop(term)

	go s.acceptLoop()
	leaseTimer := time.NewTimer(lease)
	defer leaseTimer.Stop()
	s.log.Info("executor ready", "socket", s.id.Socket)

	for s.lease != leaseDone {
		var killC, outC <-chan time.Time
		if s.killTimer != nil {
			killC = s.killTimer.C
		}
		if s.outTimer != nil {
			outC = s.outTimer.C
		}
		var out0, out1 <-chan struct{}
		if len(s.outs) == 2 {
			out0, out1 = s.outs[0].doneC(), s.outs[1].doneC()
		}
		select {
		case <-sigchld:
			s.reap()
		case sig := <-term:
			s.log.Info("executor signalled, shutting down", "signal", sig)
			s.beginShutdown()
		case sc := <-s.accepted:
			s.conns[sc] = false
		case sc := <-s.gone:
			s.dropConn(sc)
		case m := <-s.inbox:
			s.handle(m.c, m.req)
			if s.lease != leaseWaiting {
				leaseTimer.Stop()
			}
		case <-leaseTimer.C:
			if s.task == nil && s.lease == leaseWaiting {
				s.log.Warn("no client within the lease, exiting")
				s.finish(0)
			}
		case <-killC:
			s.killTimer = nil
			s.log.Info("stop grace expired, killing the task")
			s.killAll()
		case err := <-s.cgKilled:
			s.cgroupKilled(err)
		case <-out0:
			s.finishOutput(s.outs[0])
			s.reap()
		case <-out1:
			s.finishOutput(s.outs[1])
			s.reap()
		case <-outC:
			s.outTimer = nil
			s.log.Warn("the task's output pipes are still open after its whole tree ended; cutting the copies")
			s.cutOutput()
		case <-s.restartC():
			s.relaunch()
		case m := <-s.notifyC():
			s.notified(m)
		case <-s.checkC():
			s.checkTry()
		case r := <-s.checkResultC():
			s.checkDone(r)
		case <-s.checkKillC():
			s.checkExecTimedOut()
		case <-s.watchdogC():
			s.rd.wd = nil
			s.watchdogMissed(fmt.Sprintf("watchdog: no WATCHDOG=1 within %s", s.spec.Watchdog))
		case p := <-s.preparedC:
			s.finishPreparing(p)
		case c, ok := <-s.changes:
			if !ok {
				s.changes = nil
				continue
			}
			s.templateChanged(c)
		}
	}
	s.lingerForExecs()
	return s.close()
}

func (s *server) acceptLoop() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return // listener closed
		}
		uid, err := peerUID(c)
		if err != nil || !allowPeer(uid, s.selfUID) {
			s.log.Warn("refused peer", "peer_uid", uid, "err", err)
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_ = wire.WriteFrame(c, wire.Response{Err: wire.FailureOf(fmt.Errorf("%w: uid %d", wire.ErrPeerRefused, uid))})
			c.Close()
			continue
		}
		sc := &sconn{c: c, out: make(chan wire.Response, 64), written: make(chan struct{})}
		select {
		case s.accepted <- sc:
		case <-s.quit:
			c.Close()
			return
		}
		go s.readLoop(sc)
		go s.writeLoop(sc)
	}
}

func peerUID(c *net.UnixConn) (uint32, error) {
	cred, err := wire.PeerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

func (s *server) readLoop(sc *sconn) {
	rd := wire.NewRightsReader(sc.c)
	for {
		var req wire.Request
		err := wire.ReadFrame(rd, &req)
		if err == nil {
			req.Files, err = rd.Take(req.FDs)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("connection read failed", "err", err)
			}
			select {
			case s.gone <- sc:
			case <-s.quit:
			}
			return
		}
		select {
		case s.inbox <- inMsg{c: sc, req: req}:
		case <-s.quit:
			wire.CloseFiles(req.Files)
			return
		}
	}
}

func (s *server) writeLoop(sc *sconn) {
	defer close(sc.written)
	defer sc.c.Close()
	for r := range sc.out {
		_ = sc.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		r.FDs = len(r.Files)
		err := wire.WriteFrameFDs(sc.c, r, r.Files)
		wire.CloseFiles(r.Files) // the client has its own copies now
		if err != nil {
			sc.c.Close()
			for r := range sc.out {
				wire.CloseFiles(r.Files)
			}
			return
		}
	}
}

// send queues a response without ever blocking the loop; a client that does
// not read its answers is dropped.
func (s *server) send(sc *sconn, r wire.Response) {
	if sc.closed {
		wire.CloseFiles(r.Files)
		return
	}
	select {
	case sc.out <- r:
	default:
		wire.CloseFiles(r.Files)
		s.log.Warn("client not reading, dropping it")
		s.closeConn(sc)
	}
}

func (s *server) closeConn(sc *sconn) {
	if sc.closed {
		return
	}
	sc.closed = true
	close(sc.out)
	sc.c.CloseRead()
}

func (s *server) dropConn(sc *sconn) {
	hello, known := s.conns[sc]
	if !known {
		return
	}
	delete(s.conns, sc)
	s.closeConn(sc)
	s.dropExecs(sc)
	if hello && s.task == nil && s.ending != endShutdown && s.helloCount() == 0 {
		s.log.Warn("lease lost before launch: driver connection dropped, exiting")
		if s.preparing != nil {
			s.ending = endShutdown // finishPreparing ends the executor
			s.cancelPreparing()
			return
		}
		s.finish(0)
	}
}

func (s *server) helloCount() int {
	n := 0
	for _, h := range s.conns {
		if h {
			n++
		}
	}
	return n
}

func (s *server) handle(sc *sconn, req wire.Request) {
	// Descriptors that came with a request are the executor's copies:
	// an exec hands them on to its shim (which gets its own), so they are
	// closed once the request is handled, whatever it was.
	defer wire.CloseFiles(req.Files)
	if _, known := s.conns[sc]; !known {
		return
	}
	if !sc.hello && req.Op != wire.OpHello {
		s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: %v before hello", wire.ErrProtocol, req.Op))})
		s.closeConn(sc)
		return
	}
	switch req.Op {
	case wire.OpHello:
		switch {
		case req.Version != wire.ProtocolVersion:
			s.send(sc, wire.Response{ID: req.ID, Version: wire.ProtocolVersion, Err: wire.FailureOf(fmt.Errorf("%w: executor speaks %d, client %d", wire.ErrProtocolVersion, wire.ProtocolVersion, req.Version))})
			s.closeConn(sc)
		case req.Nonce != s.nonce:
			s.send(sc, wire.Response{ID: req.ID, Version: wire.ProtocolVersion, Err: wire.FailureOf(wire.ErrNonceMismatch)})
			s.closeConn(sc)
		default:
			sc.hello = true
			s.conns[sc] = true
			s.lease = leaseHeld
			id := s.id
			s.send(sc, wire.Response{ID: req.ID, Version: wire.ProtocolVersion, Identity: &id})
		}
	case wire.OpLaunch:
		switch {
		case s.task != nil:
			st := s.status()
			s.send(sc, wire.Response{ID: req.ID, Status: &st})
		case s.preparing != nil: // asked again while preparing: answered with the first
			s.preparing.waiters = append(s.preparing.waiters, waiter{sc, req.ID})
		case s.ending == endShutdown || req.Launch == nil:
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: executor shutting down or no spec", wire.ErrBadSpec))})
		case needsPreparation(*req.Launch) && s.prep == nil:
			_, err := s.checkLaunch(*req.Launch)
			if err == nil && s.preparer == nil {
				err = fmt.Errorf("%w: the task has artifacts or templates, and this executor binary cannot prepare them (it serves without package executor/prepare): use tether's own binary as the executor", wire.ErrLaunch)
			}
			if err != nil {
				s.log.Warn("launch refused", "err", err)
				s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)})
				return
			}
			s.startPreparing(sc, req.ID, *req.Launch)
		default:
			s.launch(sc, req.ID, *req.Launch)
		}
	case wire.OpStatus:
		st := s.status()
		s.send(sc, wire.Response{ID: req.ID, Status: &st})
	case wire.OpWait:
		s.waitFor(sc, req.ID)
	case wire.OpWatch:
		s.watch(sc, req.ID, req.Since)
	case wire.OpSignal:
		if req.Signal < 0 || req.Signal > 64 {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: signal %d", wire.ErrBadSpec, req.Signal))})
			return
		}
		if err := s.checkRunning(); err != nil {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)})
			return
		}
		if req.Main {
			if err := s.signalMain(syscall.Signal(req.Signal)); err != nil {
				s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)})
				return
			}
		} else {
			s.signalGroup(syscall.Signal(req.Signal))
		}
		s.send(sc, wire.Response{ID: req.ID})
	case wire.OpStop:
		if req.Signal < 0 || req.Signal > 64 {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: signal %d", wire.ErrBadSpec, req.Signal))})
			return
		}
		if s.task == nil {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(wire.ErrNotLaunched)})
			return
		}
		s.ending = max(s.ending, endStop) // the task ends with this run: no more restarts
		s.cancelRestart()
		if !s.task.exited {
			sig := syscall.Signal(req.Signal)
			switch {
			case sig > 0 && s.undeliverable(sig):
				s.log.Info("the task is its PID namespace's init, does not catch the stop signal and is alone: killing it now", "signal", sig)
				s.killAll()
			case sig == syscall.SIGKILL:
				s.killAll() // nothing to wait for: the cgroup's kill reaches everything
			case sig > 0:
				s.signalGroup(sig)
				s.armKill(req.Grace)
			default:
				s.armKill(req.Grace)
			}
		}
		s.waitFor(sc, req.ID)
	case wire.OpShutdown:
		s.waiters = append(s.waiters, waiter{sc, req.ID})
		s.beginShutdown()
	case wire.OpStats:
		st, err := s.stats()
		if err != nil {
			s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(err)})
			return
		}
		s.send(sc, wire.Response{ID: req.ID, Stats: &st})
	case wire.OpExec:
		s.execute(sc, req)
	case wire.OpExecWait:
		s.execWait(sc, req.ID, req.PID)
	case wire.OpExecSignal:
		s.execSignal(sc, req)
	case wire.OpReady:
		s.readyReq(sc, req.ID)
	default:
		s.send(sc, wire.Response{ID: req.ID, Err: wire.FailureOf(fmt.Errorf("%w: unknown op %v", wire.ErrProtocol, req.Op))})
	}
}

// launch starts the task (its first run) and answers (sc, id).
func (s *server) launch(sc *sconn, id uint64, ls wire.Launch) {
	l, err := s.startTask(ls)
	if err != nil {
		s.log.Warn("launch failed", "err", err)
		s.send(sc, wire.Response{ID: id, Err: wire.FailureOf(err)})
		return
	}
	s.task = &taskState{pid: l.pid, start: l.start, nsInit: l.nsInit, join: l.join}
	s.outs = l.outs
	rec := wire.LaunchRecord{Nonce: s.nonce, BootID: s.id.BootID, PID: l.pid, StartTime: l.start}
	if err := wire.WriteFile(s.taskDir, statedir.LaunchFile, rec, false); err != nil {
		s.log.Warn("writing the launch record failed", "err", err)
	}
	if err := s.startRestarts(ls); err != nil {
		s.log.Error("no restarts: the restart journal cannot be written", "err", err)
		l.warnings = append(l.warnings, fsm.Warning{Kind: fsm.WarnNoRestarts, Text: "the task will not be restarted: its restart journal cannot be written: " + err.Error()})
	}
	l.warnings = append(l.warnings, s.prepWarnings...)
	s.log.Info("task launched", "task_pid", l.pid, "command", ls.Command, "mode", ls.Driver, "cgroup", s.cg != nil)
	s.watchTemplates()
	s.startCheck()
	s.reap() // it may already have exited
	st := s.status()
	st.Warnings = l.warnings
	s.send(sc, wire.Response{ID: id, Status: &st})
}

func (s *server) status() wire.Status {
	if s.task == nil {
		return wire.Status{}
	}
	return wire.Status{Launched: true, PID: s.task.pid, StartTime: s.task.start, Exited: s.task.exited, Exit: s.task.exit,
		Restarting: s.restarting(), Journal: s.journalLen(), Emptied: s.task.done && s.cgKill == cgGone,
		ExecsOwed: s.task.done && s.execsOwed(), Ready: s.rd.ready, NotifyStatus: s.rd.status, ReadyJournalled: s.rd.ready && s.rd.journalled}
}

// stats reads the task cgroup's figures.
func (s *server) stats() (cgroup.Stats, error) {
	switch {
	case s.task == nil:
		return cgroup.Stats{}, wire.ErrNotLaunched
	case s.cg == nil && s.noCgroup != nil:
		return cgroup.Stats{}, fmt.Errorf("%w: the task has no cgroup: %w", wire.ErrNoStats, s.noCgroup)
	case s.cg == nil:
		return cgroup.Stats{}, fmt.Errorf("%w: the task has ended and its cgroup is gone", wire.ErrNoStats)
	}
	st, err := s.cg.Stats()
	if err != nil {
		return cgroup.Stats{}, fmt.Errorf("%w: %w", wire.ErrNoStats, err)
	}
	return st, nil
}

// checkRunning says why there is no task process to signal or join, if
// there is none: not launched yet, restarting (a run exited and its
// restart policy is deciding, or a restart's delay runs), or exited.
func (s *server) checkRunning() error {
	switch {
	case s.task == nil:
		return wire.ErrNotLaunched
	case s.task.exited && s.restarting():
		return wire.ErrRestarting
	case s.task.exited:
		return wire.ErrTaskExited
	}
	return nil
}

// signalMain signals the task's main process through a pidfd. The task is
// the executor's unreaped child (only this loop reaps), so its pid is
// still its own.
func (s *server) signalMain(sig syscall.Signal) error {
	p, err := proc.Open(s.task.pid)
	if err != nil {
		return fmt.Errorf("%w: %w", wire.ErrTaskExited, err)
	}
	defer p.Close()
	return p.Signal(sig)
}

// waitFor answers now if the task is over, or when it is (completeTask,
// once it has ended for good).
func (s *server) waitFor(sc *sconn, id uint64) {
	if s.lease == leaseDone {
		st := s.status()
		s.send(sc, wire.Response{ID: id, Status: &st})
		return
	}
	s.waiters = append(s.waiters, waiter{sc, id})
}

// armKill schedules the group kill after grace; an earlier deadline wins.
func (s *server) armKill(grace time.Duration) {
	if grace <= 0 {
		s.killAll()
		return
	}
	at := time.Now().Add(grace)
	if s.killTimer != nil {
		if !at.Before(s.killAt) {
			return
		}
		s.killTimer.Stop()
	}
	s.killAt = at
	s.killTimer = time.NewTimer(grace)
}

func (s *server) beginShutdown() {
	s.ending = endShutdown
	if s.preparing != nil {
		s.cancelPreparing() // finishPreparing ends the executor
		return
	}
	if s.task == nil {
		s.finish(0)
		return
	}
	if s.restartPending() {
		s.cancelRestart()
		return
	}
	s.killAll()
	s.reap()
}

// signalGroup signals every live member of the task's process group through
// its own pidfd. With a cgroup the members are looked for among the
// cgroup's (every process of the task is one); without, in all of /proc.
func (s *server) signalGroup(sig syscall.Signal) {
	pgid := s.task.pid
	fds, err := proc.SignalAmong(sig, s.cgroupMembers(), func(_ int, st proc.Stat) bool { return st.PGID == pgid })
	proc.CloseAll(fds)
	if err != nil {
		s.log.Warn("signalling the task group", "signal", sig, "err", err)
	}
}

// cgroupMembers lists the pids in the task's cgroup, or nil when it has
// none (or its members cannot be read): then the caller looks through all
// of /proc.
func (s *server) cgroupMembers() []int {
	if s.cg == nil || s.cgKill == cgEmpty {
		return nil
	}
	pids, err := s.cg.Procs()
	if err != nil {
		s.log.Warn("listing the task cgroup's members", "err", err)
		return nil
	}
	return pids
}

// killAll kills the task's cgroup (in the background: see killCgroup), and
// SIGKILLs every descendant the executor can see: its children (the task,
// reparented orphans, a shim not yet in the cgroup) and every member of its
// session (the task's group and their children). Deeper descendants
// surface as children when their parents die; reap calls killAll again
// until none is left. Where there is no cgroup, a descendant that left the
// session is out of reach once its parent died. With a cgroup, whose kill
// reaches every member, only the executor's own children are looked at
// besides (from /proc/self/task/*/children, not a scan of every process).
func (s *server) killAll() {
	s.killCgroup()
	self, own := s.self, s.ownSess
	var among []int
	if s.cg != nil {
		if kids, err := proc.Children(self); err == nil {
			among = kids
		}
	}
	fds, err := proc.SignalAmong(syscall.SIGKILL, among, func(pid int, st proc.Stat) bool {
		return pid != self && (st.PPID == self || (own && st.SID == self) || (s.task != nil && st.PGID == s.task.pid))
	})
	proc.CloseAll(fds)
	if err != nil {
		s.log.Warn("killing descendants", "err", err)
	}
}

// reap collects every child that exited. Once the task has exited it
// drains what is left of it (see drain).
func (s *server) reap() {
	s.reapExecs()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			s.noChildren = true
			break
		}
		if err != nil {
			s.log.Error("wait4", "err", err)
			break
		}
		if pid == 0 {
			s.noChildren = false
			break
		}
		if e := s.execs[pid]; e != nil && !e.exited {
			// It ended between reapExecs and this wait: still unreaped
			// until now, so the pid was its own.
			s.execReaped(e, exitOf(ws))
			continue
		}
		if s.task != nil && pid == s.task.pid && !s.task.exited {
			s.task.exited = true
			s.task.exit = exitOf(ws)
			s.task.exit.At = time.Now().UnixNano() // SIGCHLD woke this loop: when the task died
			s.log.Info("task exited", "task_pid", pid, "code", s.task.exit.Code, "signal", s.task.exit.Signal)
			s.runEnded()
		} else {
			s.log.Debug("reaped", "child", pid)
		}
	}
	if s.task == nil || !s.task.exited || s.task.done {
		return
	}
	s.drain()
}

// drain runs once the task (its leader) has exited, and again on every
// step it waits for: kill everything left in its cgroup and confirm it
// empty; kill and reap every child left; let the copies of its output reach
// the end of their pipes; then complete.
func (s *server) drain() {
	switch {
	case s.cg != nil && (s.cgKill == cgLive || s.cgKill == cgKilling):
		s.killCgroup()
	case !s.noChildren:
		s.killAll()
	case !s.outputDone():
		if s.outTimer == nil {
			s.outTimer = time.NewTimer(outputGrace)
		}
	default:
		s.completeTask()
	}
}

func exitOf(ws unix.WaitStatus) fsm.ExitStatus {
	if ws.Signaled() {
		return fsm.ExitStatus{Code: -1, Signal: int(ws.Signal())}
	}
	return fsm.ExitStatus{Code: ws.ExitStatus()}
}

// completeTask runs once the task exited, its cgroup is empty, its whole
// tree is gone and its output copied: read the OOM kill count, remove the
// cgroup, answer every waiter and watcher, record the exit status on
// disk, exit.
func (s *server) completeTask() {
	s.task.done = true
	if s.killTimer != nil {
		s.killTimer.Stop()
		s.killTimer = nil
	}
	if s.outTimer != nil {
		s.outTimer.Stop()
		s.outTimer = nil
	}
	if s.oomKilled() {
		s.task.exit.OOM = true
	}
	s.task.exit.PeakMemory = s.memoryPeak()
	restart := s.restartNext()
	if s.cgKill != cgGaveUp {
		s.removeCgroup()
	}
	s.release()
	if restart {
		return // journalled a restart; the relaunch follows its delay
	}
	// The task has ended for good, its cgroup empty and removed
	// (Status.Emptied): whoever waits for it (a driver's Stop or Wait, or
	// its watch) has its status now, before the exit record's fsync,
	// which is for a driver that is away. A driver that has it may end
	// the executor at once (executor.Conn.Dismiss).
	s.answerWaiters()
	s.notifyWatchers()
	s.writeExit()
}

// writeExit records the last run's exit status on disk and ends the
// executor. The waiters connected by then (a driver's Stop or Wait) were
// answered already: they have the status in hand and record it in their
// log, so they need not wait for the record's fsync (nor keep the
// executor alive for it: a driver that has its answer may kill it at once,
// executor.Conn.Dismiss). The record is for a driver that is away.
func (s *server) writeExit() {
	rec := wire.ExitRecord{Exit: s.task.exit, Nonce: s.nonce, BootID: s.id.BootID, PID: s.task.pid, StartTime: s.task.start}
	code := 0
	if err := wire.WriteFileAtomic(s.taskDir, statedir.ExitStatusFile, rec); err != nil {
		s.log.Error("could not record the exit status", "err", err)
		code = 1
	}
	s.finish(code)
}

// finish answers every waiter with the final status and ends the loop.
func (s *server) finish(code int) {
	if s.task == nil {
		s.removeCgroup()
		s.release()
	}
	s.answerWaiters()
	s.exitCode = code
	s.lease = leaseDone
	s.stopWatching()
	s.notifyWatchers()
	if s.jn != nil {
		_ = s.jn.close()
	}
}

// answerWaiters answers every waiter with the final status.
func (s *server) answerWaiters() {
	st := s.status()
	for _, w := range s.waiters {
		s.send(w.c, wire.Response{ID: w.id, Status: &st})
	}
	s.waiters = nil
}

// close flushes the answers, closes every connection and the listener
// (which removes the socket file), and returns the exit code.
func (s *server) close() int {
	close(s.quit)
	s.ln.Close()
	deadline := time.NewTimer(2 * time.Second)
	defer deadline.Stop()
	for sc := range s.conns {
		s.closeConn(sc)
	}
	expired := false
	for sc := range s.conns {
		if !expired {
			select {
			case <-sc.written:
			case <-deadline.C:
				expired = true
			}
		}
		sc.c.Close()
	}
	unix.Close(s.dirfd)
	s.closeNotify()
	s.stopCheck()
	s.log.Info("executor exiting", "code", s.exitCode)
	return s.exitCode
}
