//go:build linux

package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
)

// SpawnConfig configures Spawn.
type SpawnConfig struct {
	// Command is the argv prefix that starts a binary in executor mode, e.g.
	// {"/usr/bin/tether", "executor"}; that binary must call Serve with the
	// arguments that follow. Spawn appends its own flags. Empty means
	// {os.Executable(), "executor"}: the calling binary itself.
	Command []string
	// TaskDir is the task's private directory; created 0700 if missing (its
	// parent must exist), and set to 0700 if it exists.
	TaskDir string
	// Nonce is a fresh random nonce chosen by the caller: letters, digits,
	// '-' and '_', 8 to 128 of them.
	Nonce string
	// ReadyTimeout bounds the wait for the executor's ready report; 0 means
	// DefaultReadyTimeout. The executor also uses it as its first lease: it
	// exits if no client says hello within it.
	ReadyTimeout time.Duration
	// Logger is for driver-side logging; nil means a null logger.
	Logger hclog.Logger
	// Env is the executor's environment (nil: this process's). Its PATH is
	// the default PATH of a raw_exec task; nothing else of it reaches a
	// task. An agent spawning for a client passes the client's PATH, so
	// that a task started through it finds what it would daemonless.
	Env []string
}

// DefaultReadyTimeout is used when SpawnConfig.ReadyTimeout is 0.
const DefaultReadyTimeout = 10 * time.Second

// cleanupTimeout bounds the kill of a failed spawn when the caller's context
// is already done.
const cleanupTimeout = 10 * time.Second

// Client is a control connection to one executor.
type Client struct {
	id      fsm.Identity
	taskDir string
	log     hclog.Logger
	conn    *net.UnixConn
	rd      *wire.RightsReader // reads conn, with the descriptors answers carry
	exe     *proc.PidFD        // the executor, verified
	version int                // the protocol version it speaks
	reaped  chan struct{}      // closed once Spawn's reaper collected the executor; nil after Reattach

	wmu sync.Mutex // serialises frame writes

	mu sync.Mutex
	// task is the task process last reported by the
	// executor, to check an exit record against.
	task    fsm.Proc
	nextID  uint64
	pending map[uint64]chan wire.Response
	closed  bool
	connErr error
	readEnd chan struct{} // closed when the reader goroutine ends
}

// Spawn starts an executor detached from the caller's session and signals
// (Setsid), with stdin and stdout on /dev/null and stderr on statedir.LogFile in the
// task directory; waits for its ready report; connects; and checks the
// protocol version and the nonce. On any failure or timeout it kills the
// executor through the pidfd it got from clone, waits for it to die and
// returns a typed error: nothing is left behind.
//
// The returned Client's connection is the executor's lease: until a task is
// launched, the executor exits by itself when its last client disconnects.
// A goroutine of the calling process reaps the executor when it exits, so a
// long-lived agent accumulates no zombies.
func Spawn(ctx context.Context, cfg SpawnConfig) (*Client, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.TaskDir == "" {
		return nil, fmt.Errorf("%w: empty TaskDir", wire.ErrBadConfig)
	}
	if !wire.ValidNonce(cfg.Nonce) {
		return nil, fmt.Errorf("%w: nonce must be 8 to 128 letters, digits, '-' or '_'", wire.ErrBadConfig)
	}
	dir, err := filepath.Abs(cfg.TaskDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrBadConfig, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: task dir: %w", wire.ErrSpawn, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: task dir: %w", wire.ErrSpawn, err)
	}
	command := cfg.Command
	if len(command) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", wire.ErrSpawn, err)
		}
		command = []string{self, "executor"}
	}
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	logf, err := os.OpenFile(filepath.Join(dir, statedir.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: log file: %w", wire.ErrSpawn, err)
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrSpawn, err)
	}
	defer readyR.Close()

	args := append(append([]string{}, command[1:]...),
		"-dir="+dir, proc.NonceArg(cfg.Nonce), "-lease="+timeout.String(), "-ready-fd=3")
	cmd := exec.Command(command[0], args...)
	cmd.Dir = dir
	// One P (set before the runtime starts: later is too late to shrink
	// what it allocated): the executor waits on its task, pipes and socket
	// for as long as the task runs, and an idle one holds a quarter less
	// anonymous memory with one P than with two. Tasks do not inherit the
	// executor's environment (their own is built from the spec).
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clone(env), "GOMAXPROCS=1")
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	startErr := cmd.Start()
	readyW.Close()
	if startErr != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrSpawn, startErr)
	}
	// A pidfd of its own (its own open file, non-blocking for the poller),
	// opened before the reaper starts: the child cannot be reaped before,
	// so its pid is still its own. Not clone's CLONE_PIDFD one: os/exec
	// duplicates that descriptor for its Wait, which then shares the
	// open file and its O_NONBLOCK, and returns EAGAIN at once instead of
	// reaping (every killed executor of a long-lived agent stayed a
	// zombie).
	exe, err := proc.Open(cmd.Process.Pid)
	reaped := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(reaped)
	}()
	log = log.With("pid", cmd.Process.Pid)
	fail := func(err error) (*Client, error) {
		log.Warn("spawn failed, killing the executor", "err", err)
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if exe != nil {
			_ = exe.Signal(syscall.SIGKILL)
			_ = exe.Wait(kctx)
			exe.Close()
		} else {
			_ = cmd.Process.Kill()
		}
		select {
		case <-reaped:
		case <-kctx.Done():
		}
		return nil, err
	}
	if err != nil {
		return fail(fmt.Errorf("%w: %w", wire.ErrSpawn, err))
	}

	rctx, cancel := context.WithTimeoutCause(ctx, timeout, wire.ErrReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(rctx, func() { _ = readyR.SetReadDeadline(time.Now()) })
	b, rerr := io.ReadAll(readyR)
	stop()
	if rerr != nil {
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			cause := context.Cause(rctx)
			if errors.Is(cause, wire.ErrReadyTimeout) {
				return fail(fmt.Errorf("%w after %v", wire.ErrReadyTimeout, timeout))
			}
			return fail(fmt.Errorf("%w: %w", wire.ErrReadyTimeout, cause))
		}
		return fail(fmt.Errorf("%w: reading ready report: %w", wire.ErrSpawn, rerr))
	}
	var rm wire.ReadyMsg
	if len(b) == 0 {
		return fail(fmt.Errorf("%w: executor exited before it was ready (see %s)", wire.ErrSpawn, filepath.Join(dir, statedir.LogFile)))
	}
	if err := json.Unmarshal(b, &rm); err != nil {
		return fail(fmt.Errorf("%w: ready report: %w", wire.ErrProtocol, err))
	}
	if rm.Err != "" || rm.Identity == nil {
		return fail(fmt.Errorf("%w: executor: %s", wire.ErrSpawn, rm.Err))
	}
	if rm.Identity.PID != cmd.Process.Pid || rm.Identity.Nonce != cfg.Nonce {
		return fail(fmt.Errorf("%w: ready report from pid %d nonce %q", wire.ErrNonceMismatch, rm.Identity.PID, rm.Identity.Nonce))
	}
	c, err := connect(rctx, *rm.Identity, dir, log)
	if err != nil {
		return fail(err)
	}
	c.exe = exe
	c.reaped = reaped
	log.Debug("executor ready")
	return c, nil
}

// Reattach connects a new driver process to the running executor of
// taskDir. The identity file must match want, and the live process must
// match it too (pid, start time, boot id, nonce); the executor's hello must
// as well. A mismatch yields ErrNotOurs, an absent executor ErrGone.
func Reattach(ctx context.Context, taskDir string, want fsm.Identity) (*Client, error) {
	dir, err := filepath.Abs(taskDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrBadConfig, err)
	}
	onDisk, err := wire.ReadIdentity(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: no identity file: %w", wire.ErrGone, err)
		}
		return nil, err
	}
	if onDisk.PID != want.PID || onDisk.StartTime != want.StartTime || onDisk.BootID != want.BootID || onDisk.Nonce != want.Nonce {
		return nil, fmt.Errorf("%w: identity file describes pid %d start %d nonce %s", wire.ErrNotOurs, onDisk.PID, onDisk.StartTime, onDisk.Nonce)
	}
	exe, err := proc.Open(want.PID)
	if err != nil {
		return nil, err
	}
	if err := proc.Check(want); err != nil {
		exe.Close()
		return nil, err
	}
	c, err := connect(ctx, onDisk, dir, hclog.NewNullLogger())
	if err != nil {
		exe.Close()
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			if exe.Exited() {
				return nil, fmt.Errorf("%w: %w", wire.ErrGone, err)
			}
		}
		return nil, err
	}
	c.exe = exe
	return c, nil
}

// connect dials the executor's socket, checks that its peer is the
// executor (see checkPeer) and says hello in the protocol's version; an
// executor of a previous version (one a previous tether started, whose
// task runs on) refuses that hello naming its own, and is dialled again
// and spoken to in it, from OldProtocolVersion on.
func connect(ctx context.Context, id fsm.Identity, dir string, log hclog.Logger) (*Client, error) {
	c, err := dial(ctx, id, dir, log, wire.ProtocolVersion)
	var re *wire.RemoteError
	if errors.As(err, &re) && errors.Is(err, wire.ErrProtocolVersion) &&
		re.Version >= wire.OldProtocolVersion && re.Version < wire.ProtocolVersion {
		log.Debug("the executor speaks a previous protocol", "version", re.Version)
		return dial(ctx, id, dir, log, re.Version)
	}
	return c, err
}

// dial is connect in one protocol version.
func dial(ctx context.Context, id fsm.Identity, dir string, log hclog.Logger, version int) (*Client, error) {
	conn, err := wire.DialSocket(wire.SocketPath(dir))
	if err != nil {
		return nil, err
	}
	if err := checkPeer(conn, id.PID, uint32(os.Geteuid())); err != nil {
		conn.Close()
		return nil, err
	}
	c := &Client{
		id:      id,
		taskDir: dir,
		log:     log,
		conn:    conn,
		rd:      wire.NewRightsReader(conn),
		pending: map[uint64]chan wire.Response{},
		readEnd: make(chan struct{}),
	}
	go c.readLoop()
	resp, err := c.call(ctx, wire.Request{Op: wire.OpHello, Version: version, Nonce: id.Nonce})
	if err != nil {
		c.Close()
		var re *wire.RemoteError
		if errors.As(err, &re) && errors.Is(err, wire.ErrProtocolVersion) {
			re.Version = resp.Version // the executor's, for connect
		}
		return nil, err
	}
	if resp.Version != version {
		c.Close()
		return nil, fmt.Errorf("%w: executor speaks %d", wire.ErrProtocolVersion, resp.Version)
	}
	if resp.Identity == nil || *resp.Identity != id {
		c.Close()
		return nil, fmt.Errorf("%w: executor answered as %+v", wire.ErrNotOurs, resp.Identity)
	}
	c.version = version
	return c, nil
}

func (c *Client) readLoop() {
	defer close(c.readEnd)
	for {
		var r wire.Response
		err := wire.ReadFrame(c.rd, &r)
		if err == nil {
			r.Files, err = c.rd.Take(r.FDs)
		}
		if err != nil {
			c.mu.Lock()
			if c.connErr == nil {
				c.connErr = fmt.Errorf("%w: %w", wire.ErrClosed, err)
			}
			c.mu.Unlock()
			return
		}
		if r.ID == 0 && r.Err != nil {
			// An unsolicited error (the executor refused this peer).
			c.mu.Lock()
			c.connErr = r.Err.Err()
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		} else {
			wire.CloseFiles(r.Files) // nobody waits for them any more
		}
	}
}

// checkPeer checks the credentials (SO_PEERCRED) of the process serving a
// freshly dialled socket before anything is sent on it: it must be the
// executor (pid, whose identity the caller proved) and run as the
// caller's uid or as root (the executor's own rule for its peers: an
// executor runs as the user who spawned it, and a state directory serves
// only its owner). Anything else is a listener planted at the socket path:
// ErrPeerNotExecutor, naming what was seen and what was expected.
func checkPeer(conn *net.UnixConn, pid int, uid uint32) error {
	cred, err := wire.PeerCred(conn)
	if err != nil {
		return fmt.Errorf("%w: %w", wire.ErrPeerNotExecutor, err)
	}
	return peerMatches(cred, pid, uid)
}

// peerMatches is checkPeer's rule.
func peerMatches(cred *unix.Ucred, pid int, uid uint32) error {
	if int(cred.Pid) != pid || (cred.Uid != uid && cred.Uid != 0) {
		return fmt.Errorf("%w: the socket is served by pid %d (uid %d), expected the executor, pid %d (uid %d or root)",
			wire.ErrPeerNotExecutor, cred.Pid, cred.Uid, pid, uid)
	}
	return nil
}

func (c *Client) lostErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connErr
}

// call sends one request and waits for its answer.
func (c *Client) call(ctx context.Context, req wire.Request) (wire.Response, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return wire.Response{}, wire.ErrClosed
	}
	c.nextID++
	req.ID = c.nextID
	ch := make(chan wire.Response, 1)
	c.pending[req.ID] = ch
	c.mu.Unlock()
	answered := false
	defer func() {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		if !answered { // an answer that came too late has no taker
			select {
			case r := <-ch:
				wire.CloseFiles(r.Files)
			default:
			}
		}
	}()
	req.FDs = len(req.Files)

	c.wmu.Lock()
	err := wire.WriteFrameFDs(c.conn, req, req.Files)
	c.wmu.Unlock()
	if err != nil {
		// The executor may have said why it closed (a refused peer): let the
		// reader drain what it sent before giving up.
		select {
		case <-c.readEnd:
		case <-ctx.Done():
		}
		if lost := c.lostErr(); lost != nil {
			return wire.Response{}, lost
		}
		return wire.Response{}, fmt.Errorf("%w: %v: %w", wire.ErrClosed, req.Op, err)
	}
	select {
	case r := <-ch:
		answered = true
		c.noteTask(r)
		if r.Err != nil {
			wire.CloseFiles(r.Files)
			return r, r.Err.Err()
		}
		return r, nil
	case <-c.readEnd:
		select { // the answer may have raced the end of the connection
		case r := <-ch:
			answered = true
			if r.Err != nil {
				wire.CloseFiles(r.Files)
				return r, r.Err.Err()
			}
			return r, nil
		default:
		}
		if lost := c.lostErr(); lost != nil {
			return wire.Response{}, lost
		}
		return wire.Response{}, wire.ErrClosed
	case <-ctx.Done():
		return wire.Response{}, fmt.Errorf("executor: %v: %w", req.Op, context.Cause(ctx))
	}
}

// noteTask remembers the task process a response reports.
func (c *Client) noteTask(r wire.Response) {
	if r.Status == nil || r.Status.PID <= 0 {
		return
	}
	c.mu.Lock()
	c.task = fsm.Proc{PID: r.Status.PID, StartTime: r.Status.StartTime}
	c.mu.Unlock()
}

// Identity returns the executor's verified identity.
func (c *Client) Identity() fsm.Identity { return c.id }

// Launch starts the task. It is idempotent: once the executor has launched
// a task it returns that task's pid and start time, whatever the spec.
// Failures carry named errors (ErrCommandNotFound, ErrNotExecutable,
// ErrUnknownUser, ErrCapNotAllowed in a *CapError, ErrWorkDir, ErrBadSpec)
// across the protocol, so errors.Is works on them.
//
// The answer is the task's status right after the launch: the executor
// supervises the task from its first instruction, so a status that is not
// Exited means the task is running and supervised.
func (c *Client) Launch(ctx context.Context, l wire.Launch) (wire.Status, error) {
	if c.version != wire.ProtocolVersion {
		return wire.Status{}, fmt.Errorf("%w: a launch needs protocol %d, and this executor (started by a previous tether) speaks %d",
			wire.ErrProtocolVersion, wire.ProtocolVersion, c.version)
	}
	if l.Driver == wire.ModeExec {
		if err := spec.ValidateCaps(l.CapAdd, l.CapDrop, l.AllowedCaps); err != nil {
			return wire.Status{}, err
		}
	}
	r, err := c.call(ctx, wire.Request{Op: wire.OpLaunch, Launch: &l})
	if err != nil {
		return wire.Status{}, err
	}
	if r.Status == nil || !r.Status.Launched {
		return wire.Status{}, fmt.Errorf("%w: launch answered without a launched status", wire.ErrProtocol)
	}
	return *r.Status, nil
}

// Status returns what the executor knows of its task.
func (c *Client) Status(ctx context.Context) (wire.Status, error) {
	r, err := c.call(ctx, wire.Request{Op: wire.OpStatus})
	if err != nil {
		return wire.Status{}, err
	}
	return *r.Status, nil
}

// WaitReady returns once the current run of a notify task (its spec's
// Readiness is fsm.ReadinessNotify) has sent READY=1 (Status.Ready, with
// its last STATUS= in Status.NotifyStatus), or has ended first
// (Status.Exited, and Status.Restarting when its restart policy may start
// it again); an executor gone meanwhile (its task over) is answered by the
// exit status it left on disk. An executor of a protocol before
// ReadyVersion cannot say: ErrProtocolVersion.
func (c *Client) WaitReady(ctx context.Context) (wire.Status, error) {
	if c.version < wire.ReadyVersion {
		return wire.Status{}, fmt.Errorf("%w: waiting for readiness needs protocol %d, and this executor (started by a previous tether) speaks %d",
			wire.ErrProtocolVersion, wire.ReadyVersion, c.version)
	}
	r, err := c.call(ctx, wire.Request{Op: wire.OpReady})
	if errors.Is(err, wire.ErrClosed) {
		// The executor went away (it exits once its task is over, and a
		// request that comes a moment late finds it closing): the run
		// ended, and the exit status it left on disk says how. An ended
		// run is not ready, as the executor itself would answer.
		return c.finalStatus(ctx, r, err)
	}
	if err != nil {
		return wire.Status{}, err
	}
	if r.Status == nil {
		return wire.Status{}, fmt.Errorf("%w: ready answered without a status", wire.ErrProtocol)
	}
	return *r.Status, nil
}

// Wait returns once the task has exited and its whole process group (and
// every other descendant) is gone. If the executor went away meanwhile, the
// exit status it left on disk is returned.
func (c *Client) Wait(ctx context.Context) (fsm.ExitStatus, error) {
	r, err := c.call(ctx, wire.Request{Op: wire.OpWait})
	st, err := c.finalStatus(ctx, r, err)
	return st.Exit, err
}

// Watch returns as soon as the task's restart journal holds entries past
// since (returned in order: restart-intent, then launched or
// launch-failed, for each restart), or the task is over for good; the
// status says which (Restarting, Exited). It is how a driver follows a
// task that its executor restarts.
//
// If the executor went away meanwhile (it exits once the task is over),
// the journal and the exit status it left on disk are returned, once they
// match its identity.
func (c *Client) Watch(ctx context.Context, since int) (wire.Status, []fsm.Event, error) {
	r, err := c.call(ctx, wire.Request{Op: wire.OpWatch, Since: since})
	if errors.Is(err, wire.ErrClosed) {
		return c.watchOnDisk(ctx, since, err)
	}
	if err != nil {
		return wire.Status{}, nil, err
	}
	if r.Status == nil {
		return wire.Status{}, nil, fmt.Errorf("%w: watch answered without a status", wire.ErrProtocol)
	}
	for i := range r.Journal {
		r.Journal[i].Upgrade() // an executor of protocol 5 sends its restart-intent's delay as Grace
	}
	return *r.Status, r.Journal, nil
}

// watchOnDisk is Watch's answer from the files a dead executor left.
func (c *Client) watchOnDisk(ctx context.Context, since int, cause error) (wire.Status, []fsm.Event, error) {
	st, err := c.finalStatus(ctx, wire.Response{}, cause)
	if err != nil {
		return wire.Status{}, nil, err
	}
	j, ok, err := wire.ReadJournal(c.taskDir)
	if err != nil {
		return wire.Status{}, nil, err
	}
	var entries []fsm.Event
	if ok {
		if err := j.Match(c.id); err != nil {
			return wire.Status{}, nil, err
		}
		if since >= 0 && since < len(j.Entries) {
			entries = j.Entries[since:]
		}
	}
	st.Journal = len(j.Entries)
	return st, entries, nil
}

// finalStatus turns the answer to a wait-like call into the task's final
// status, falling back to the exit status file when the connection was
// lost (a status that says nothing then of the cgroup: not Emptied).
func (c *Client) finalStatus(ctx context.Context, r wire.Response, err error) (wire.Status, error) {
	if err == nil {
		if r.Status == nil || !r.Status.Launched {
			return wire.Status{}, wire.ErrNotLaunched
		}
		return *r.Status, nil
	}
	if !errors.Is(err, wire.ErrClosed) {
		return wire.Status{}, err
	}
	// The executor writes the file before it answers and exits; once it is
	// dead the file is final.
	if c.exe != nil {
		if werr := c.exe.Wait(ctx); werr != nil {
			return wire.Status{}, errors.Join(err, werr)
		}
	}
	rec, ok, rerr := wire.ReadExitRecord(c.taskDir)
	if rerr != nil {
		return wire.Status{}, rerr
	}
	if !ok {
		return wire.Status{}, fmt.Errorf("%w: executor died without recording an exit status: %w", wire.ErrGone, err)
	}
	c.mu.Lock()
	run := c.task
	c.mu.Unlock()
	// The executor may have relaunched its task (its restart policy) since
	// this client last heard of the run: the journal it left, once it
	// matches, names the latest.
	if j, ok, jerr := wire.ReadJournal(c.taskDir); jerr == nil && ok && j.Match(c.id) == nil {
		for i := len(j.Entries) - 1; i >= 0; i-- {
			if e := j.Entries[i]; e.Type == fsm.EventLaunched {
				run = e.TaskProc()
				c.mu.Lock()
				c.task = run
				c.mu.Unlock()
				break
			}
		}
	}
	if merr := rec.Match(c.id, run); merr != nil {
		return wire.Status{}, merr
	}
	return wire.Status{Launched: true, PID: run.PID, StartTime: run.StartTime, Exited: true, Exit: rec.Exit}, nil
}

// Stats returns the figures of the task's cgroup: memory now and at its
// peak, CPU time (user, system, throttled), the number of tasks, the OOM
// kill count. ErrNoStats when the task has no cgroup (the host gives none)
// or it is gone; ErrNotLaunched before the launch.
func (c *Client) Stats(ctx context.Context) (cgroup.Stats, error) {
	r, err := c.call(ctx, wire.Request{Op: wire.OpStats})
	if err != nil {
		return cgroup.Stats{}, err
	}
	if r.Stats == nil {
		return cgroup.Stats{}, fmt.Errorf("%w: stats answered without stats", wire.ErrProtocol)
	}
	return *r.Stats, nil
}

// Signal sends sig to every member of the task's process group (commands
// started with Exec are not in it). ErrRestarting while a restart's delay
// runs, ErrTaskExited once the task has exited, ErrNotLaunched before.
func (c *Client) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := c.call(ctx, wire.Request{Op: wire.OpSignal, Signal: int(sig)})
	return err
}

// SignalMain sends sig to the task's main process only (the process the
// executor launched, through its pidfd), not to the rest of its group.
// Errors as for Signal.
func (c *Client) SignalMain(ctx context.Context, sig syscall.Signal) error {
	_, err := c.call(ctx, wire.Request{Op: wire.OpSignal, Signal: int(sig), Main: true})
	return err
}

// Stop sends sig (0: none) to the task's group, waits up to grace for the
// task to exit, then SIGKILLs the group and every other descendant, and
// returns the exit status once none is left. A task killed after the grace
// reports Signal 9.
func (c *Client) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (fsm.ExitStatus, error) {
	st, err := c.stop(ctx, sig, grace)
	return st.Exit, err
}

// stop is Stop with the final status: whether the executor confirmed the
// task's cgroup empty (Emptied) beside the exit.
func (c *Client) stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (wire.Status, error) {
	r, err := c.call(ctx, wire.Request{Op: wire.OpStop, Signal: int(sig), Grace: grace})
	return c.finalStatus(ctx, r, err)
}

// Shutdown kills the task group if there is one, has the executor record
// the exit status and exit, and returns once the executor is dead.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return wire.ErrClosed
	}
	_, err := c.call(ctx, wire.Request{Op: wire.OpShutdown})
	if err != nil && !errors.Is(err, wire.ErrClosed) {
		return err
	}
	return c.waitGone(ctx)
}

// Dismiss ends an executor that reported its task over for good (its
// answer to a Stop or Wait, or a Watch, said Status.Over): it SIGKILLs it
// through the pidfd opened on the process whose identity was proven, and
// returns once it is dead. The executor's exit record, which it writes
// for a driver that is away, is not needed by one that has the status in
// hand. Without a pidfd (never verified) it falls back to Shutdown.
func (c *Client) Dismiss(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return wire.ErrClosed
	}
	if c.exe == nil {
		return c.Shutdown(ctx)
	}
	if err := c.exe.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("executor: dismissing: %w", err)
	}
	return c.waitGone(ctx)
}

// waitGone returns once the executor process is dead, and reaped when
// this client spawned it.
func (c *Client) waitGone(ctx context.Context) error {
	if c.exe == nil {
		return nil
	}
	if err := c.exe.Wait(ctx); err != nil {
		return err
	}
	if c.reaped != nil {
		select {
		case <-c.reaped:
		case <-ctx.Done():
			return fmt.Errorf("executor: reaping: %w", context.Cause(ctx))
		}
	}
	return nil
}

// WaitDead returns once the executor process has exited (its pidfd is
// readable). It works after Reattach too.
func (c *Client) WaitDead(ctx context.Context) error {
	if c.exe == nil {
		return wire.ErrClosed
	}
	return c.exe.Wait(ctx)
}

// Close closes the control connection. Before launch this ends the
// executor's lease if it was the last client; after launch the executor
// keeps running.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.readEnd
	if c.exe != nil {
		c.exe.Close()
	}
	return err
}
