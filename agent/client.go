package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// DefaultDeadline is how long a client waits for the agent by default:
// for its handshake, and between two frames of an answer (the agent sends
// a heartbeat every HeartbeatInterval while it works on a request).
const DefaultDeadline = 5 * time.Second

// DialOptions configure Dial.
type DialOptions struct {
	// Deadline bounds every wait for the agent (default DefaultDeadline):
	// an agent that does not answer within it is reported (*WedgedError),
	// never waited on for ever. A long request (a start waiting out a
	// spawn, a follow) is not bounded by it: the agent's heartbeats say it
	// is still working, and the silence allowed between two frames of an
	// answer is at least two heartbeat intervals.
	Deadline time.Duration
}

// Client is a Service served by the agent of a state directory. It is
// safe for concurrent use: each call is one exchange on a connection of
// its own.
type Client struct {
	stateDir string
	socket   string
	owner    uint32
	deadline time.Duration

	mu     sync.Mutex
	pid    int
	policy Policy
	idle   *net.UnixConn // a connection past its hello, not used yet
}

var _ Service = (*Client)(nil)

// Dial connects to the agent of stateDir and checks that it answers, in
// the client's protocol version, within the deadline. No agent (no socket,
// or a socket nobody listens on: a killed agent's) is ErrNoAgent at once,
// so that a CLI can work daemonless; an agent that does not answer is a
// *WedgedError (ErrWedged) once the deadline has passed; another protocol
// version a *VersionError naming both.
func Dial(ctx context.Context, stateDir string, opts DialOptions) (*Client, error) {
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	owner, err := dirOwner(stateDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNoAgent, err)
		}
		return nil, fmt.Errorf("agent: state directory %s: %w", stateDir, err)
	}
	c := &Client{stateDir: stateDir, socket: SocketPath(stateDir), owner: owner, deadline: opts.Deadline}
	conn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.idle = conn
	return c, nil
}

// PID is the agent's pid (from the socket's peer credentials).
func (c *Client) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Policy is the agent's allow lists, as its hello said.
func (c *Client) Policy() Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policy
}

// StateDir is the state directory the agent serves.
func (c *Client) StateDir() string { return c.stateDir }

// Close lets go of the connection Dial kept. Calls after Close dial again.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idle != nil {
		err := c.idle.Close()
		c.idle = nil
		return err
	}
	return nil
}

// connect dials the agent, checks its credentials and exchanges hellos.
func (c *Client) connect(ctx context.Context) (*net.UnixConn, error) {
	conn, err := dial(ctx, c.stateDir)
	if err != nil {
		return nil, err
	}
	cred, err := peerCred(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("agent: peer credentials of %s: %w", c.socket, err)
	}
	if !allowed(cred.Uid, c.owner) {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: the process (pid %d) serving %s runs as uid %d, neither root nor the state directory's owner (uid %d)",
			ErrPeerRefused, cred.Pid, c.socket, cred.Uid, c.owner)
	}
	c.mu.Lock()
	c.pid = int(cred.Pid)
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(c.deadline))
	fail := func(err error) (*net.UnixConn, error) {
		_ = conn.Close()
		if cerr := context.Cause(ctx); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &WedgedError{PID: int(cred.Pid), Socket: c.socket, Deadline: c.deadline.String(), During: "its handshake"}
		}
		return nil, err
	}
	// An agent that refuses this client says why and closes without
	// reading its hello: the answer is read even if the hello could not be
	// sent.
	werr := writeFrame(conn, hello{Magic: protocolMagic, Version: ProtocolVersion})
	b, err := readFrame(conn, 4096)
	if err != nil {
		if werr != nil && !errors.Is(werr, os.ErrDeadlineExceeded) {
			return fail(fmt.Errorf("agent: send hello to %s: %w", c.socket, werr))
		}
		return fail(fmt.Errorf("agent: hello from %s: %w", c.socket, err))
	}
	h, err := decodeHello(b)
	switch {
	case err != nil:
		return fail(err)
	case h.Version != ProtocolVersion:
		return fail(&VersionError{Agent: h.Version, Client: ProtocolVersion})
	case h.Error != "":
		return fail(fmt.Errorf("%w: the agent (pid %d) says: %s", ErrPeerRefused, h.PID, h.Error))
	}
	if h.Policy != nil {
		c.mu.Lock()
		c.policy = *h.Policy
		c.mu.Unlock()
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// call runs one exchange: req, then the answer's frames. progress, when
// set, is called with each progress frame; returning true ends the
// exchange (the connection is closed, which cancels the request there).
//
// When ctx ends first, the request is cancelled there (the client shuts
// its side of the connection: the agent's request context ends) and the
// answer is still awaited, as an in-process call returns only once the
// operation has seen its context end: a start that is past the point of
// no return (StartNamed's, RestartTask's) finishes and says which task it
// started. A cancellation the agent answers with is ctx's cause.
func (c *Client) call(ctx context.Context, req Request, progress func(Response) bool) (Response, error) {
	b, err := encodeRequest(req)
	if err != nil {
		return Response{}, fmt.Errorf("%w: encode %s: %w", ErrProtocol, req.Op, err)
	}
	if len(b) > maxRequestFrame {
		return Response{}, fmt.Errorf("%w: the %s request is %d bytes, more than an agent takes (%d): its spec is far larger than any tether can record",
			ErrProtocol, req.Op, len(b), maxRequestFrame)
	}
	c.mu.Lock()
	conn := c.idle
	c.idle = nil
	c.mu.Unlock()
	if conn != nil {
		// The connection Dial left idle may have been closed by the agent
		// since (it waits a while for a first request, not for ever): a
		// request it could not take is sent on a new connection. Nothing
		// was read of it, so nothing is done twice.
		_ = conn.SetWriteDeadline(time.Now().Add(c.deadline + time.Duration(len(b)>>20)*time.Second))
		if werr := writeFrame(conn, json.RawMessage(b)); werr != nil && (errors.Is(werr, syscall.EPIPE) || errors.Is(werr, syscall.ECONNRESET)) {
			_ = conn.Close()
			conn = nil
		} else {
			return c.exchange(ctx, conn, req, progress, werr)
		}
	}
	if conn, err = c.connect(ctx); err != nil {
		return Response{}, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(c.deadline + time.Duration(len(b)>>20)*time.Second))
	return c.exchange(ctx, conn, req, progress, writeFrame(conn, json.RawMessage(b)))
}

// exchange reads the answer to req, sent on conn (werr: how its sending
// failed), with its progress frames.
func (c *Client) exchange(ctx context.Context, conn *net.UnixConn, req Request, progress func(Response) bool, werr error) (Response, error) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWrite() })
	defer stop()
	wedged := func(during string) error {
		return &WedgedError{PID: c.PID(), Socket: c.socket, Deadline: c.deadline.String(), During: during}
	}
	if err := werr; err != nil {
		if cerr := context.Cause(ctx); cerr != nil {
			return Response{}, cerr
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return Response{}, wedged("it to take the " + req.Op.String() + " request")
		}
		return Response{}, fmt.Errorf("agent: send %s: %w", req.Op, err)
	}
	// Between two frames of an answer the agent is silent for at most a
	// heartbeat's interval: a deadline shorter than two of them would
	// call a working agent wedged.
	silence := max(c.deadline, 2*HeartbeatInterval)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(silence))
		b, err := readFrame(conn, maxResponseFrame)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return Response{}, &WedgedError{PID: c.PID(), Socket: c.socket, Deadline: silence.String(), During: "the answer to " + req.Op.String()}
			}
			if cerr := context.Cause(ctx); cerr != nil {
				return Response{}, cerr
			}
			return Response{}, fmt.Errorf("agent: the answer to %s: %w (the agent may have exited)", req.Op, err)
		}
		r, err := decodeResponse(req.Op, b)
		if err != nil {
			return Response{}, fmt.Errorf("%w: the answer to %s: %w", ErrProtocol, req.Op, err)
		}
		switch r.Kind {
		case respHeartbeat:
		case respProgress:
			if progress != nil && progress(r) {
				return r, nil
			}
		case respResult:
			err := r.Err.err()
			if cerr := context.Cause(ctx); cerr != nil && errors.Is(err, context.Canceled) {
				err = cerr
			}
			return r, err
		default:
			return Response{}, fmt.Errorf("%w: an answer frame of kind %d", ErrProtocol, r.Kind)
		}
	}
}

// callTask is call for a request about one task: an id the driver would
// refuse is refused here with the driver's own error (the agent refuses it
// too, as a bad request), so that the caller sees what it would see
// in-process.
func (c *Client) callTask(ctx context.Context, req Request, progress func(Response) bool) (Response, error) {
	if err := driver.ValidateTaskID(req.ID); err != nil {
		return Response{}, err
	}
	return c.call(ctx, req, progress)
}

func taskOf(r Response) fsm.Task {
	if r.Task == nil {
		return fsm.Task{}
	}
	return *r.Task
}

// StartTask is driver.StartTask through the agent (the agent applies its
// own allow lists; the executor gets this process's PATH).
func (c *Client) StartTask(ctx context.Context, id string, spec fsm.Spec) (fsm.Task, error) {
	r, err := c.callTask(ctx, Request{Op: OpStart, ID: id, Spec: &spec, Path: os.Getenv("PATH")}, nil)
	return taskOf(r), err
}

// StartNamed is driver.StartNamed through the agent: opts.Stopping is
// called on the caller's goroutine as the agent stops each task it
// replaces.
func (c *Client) StartNamed(ctx context.Context, id string, spec fsm.Spec, opts driver.StartOptions) (fsm.Task, []fsm.Task, error) {
	r, err := c.callTask(ctx, Request{Op: OpStartNamed, ID: id, Spec: &spec, Replace: opts.Replace, Path: os.Getenv("PATH")},
		func(r Response) bool {
			if r.Task != nil && opts.Stopping != nil {
				opts.Stopping(*r.Task)
			}
			return false
		})
	return taskOf(r), r.Replaced, err
}

// RestartTask is driver.RestartTask through the agent.
func (c *Client) RestartTask(ctx context.Context, id, newID string) (fsm.Task, fsm.Task, error) {
	if err := driver.ValidateTaskID(newID); err != nil {
		return fsm.Task{}, fsm.Task{}, err
	}
	r, err := c.callTask(ctx, Request{Op: OpRestart, ID: id, NewID: newID, Path: os.Getenv("PATH")}, nil)
	var old fsm.Task
	if r.Old != nil {
		old = *r.Old
	}
	return taskOf(r), old, err
}

// Resolve is driver.Resolve through the agent.
func (c *Client) Resolve(ctx context.Context, arg string) (driver.TaskInfo, error) {
	r, err := c.call(ctx, Request{Op: OpResolve, Name: arg}, nil)
	if r.Info == nil {
		return driver.TaskInfo{}, err
	}
	return *r.Info, err
}

// ExecTask is driver.ExecTask with the task's state read from the agent
// and the command started by the task's executor for this process
// directly (driver.ExecIn): the command's stdio never pass through the
// agent.
func (c *Client) ExecTask(ctx context.Context, id string, spec driver.ExecSpec) (*driver.ExecProcess, error) {
	info, err := c.InspectTask(ctx, id)
	if err != nil {
		return nil, err
	}
	return driver.ExecIn(ctx, &executor.Real{StateDir: c.stateDir}, info.Task, spec)
}

// CreateGroup is driver.CreateGroup through the agent: opts.Stopping is
// called as the agent stops each task it replaces.
func (c *Client) CreateGroup(ctx context.Context, tasks []driver.GroupTask, opts driver.StartOptions) ([]fsm.Task, error) {
	r, err := c.call(ctx, Request{Op: OpCreateGroup, Group: tasks, Replace: opts.Replace, Path: os.Getenv("PATH")},
		func(r Response) bool {
			if r.Task != nil && opts.Stopping != nil {
				opts.Stopping(*r.Task)
			}
			return false
		})
	return r.Tasks, err
}

// RunGroup is driver.RunGroup, driven by the agent for as long as the call
// lasts: fn is called with each step it takes.
func (c *Client) RunGroup(ctx context.Context, ids []string, wait bool, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	r, err := c.call(ctx, Request{Op: OpRunGroup, IDs: ids, Wait: wait, Path: os.Getenv("PATH")}, groupProgress(fn))
	return r.Tasks, err
}

// StopGroup is driver.StopGroup through the agent.
func (c *Client) StopGroup(ctx context.Context, ids []string, sig syscall.Signal, grace time.Duration, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	r, err := c.call(ctx, Request{Op: OpStopGroup, IDs: ids, Signal: int(sig), Grace: grace}, groupProgress(fn))
	return r.Tasks, err
}

func groupProgress(fn func(driver.GroupProgress)) func(Response) bool {
	return func(r Response) bool {
		if r.Progress != nil && fn != nil {
			fn(*r.Progress)
		}
		return false
	}
}

// Groups is driver.Groups through the agent.
func (c *Client) Groups(ctx context.Context) (map[string][]string, error) {
	r, err := c.call(ctx, Request{Op: OpGroups}, nil)
	return r.Groups, err
}

// GroupDriven is driver.GroupDriven through the agent.
func (c *Client) GroupDriven(alloc string) (bool, int, error) {
	r, err := c.call(context.Background(), Request{Op: OpGroupDriven, Name: alloc}, nil)
	return r.Driven, r.PID, err
}

// StopTask is driver.StopTask through the agent.
func (c *Client) StopTask(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) (fsm.Task, error) {
	r, err := c.callTask(ctx, Request{Op: OpStop, ID: id, Signal: int(sig), Grace: grace}, nil)
	return taskOf(r), err
}

// SignalTask is driver.SignalTask (main: driver.SignalMain) through the
// agent.
func (c *Client) SignalTask(ctx context.Context, id string, sig syscall.Signal, main bool) error {
	_, err := c.callTask(ctx, Request{Op: OpSignal, ID: id, Signal: int(sig), Main: main}, nil)
	return err
}

// InspectTask is driver.InspectTask through the agent.
func (c *Client) InspectTask(ctx context.Context, id string) (driver.TaskInfo, error) {
	r, err := c.callTask(ctx, Request{Op: OpInspect, ID: id}, nil)
	if r.Info == nil {
		return driver.TaskInfo{}, err
	}
	return *r.Info, err
}

// TaskEvents is driver.TaskEvents through the agent.
func (c *Client) TaskEvents(ctx context.Context, id string) ([]fsm.Event, error) {
	r, err := c.callTask(ctx, Request{Op: OpEvents, ID: id}, nil)
	return r.Events, err
}

// LoadTasks is store.LoadTasks through the agent.
func (c *Client) LoadTasks(ctx context.Context, which store.Selection) (store.Scan, error) {
	r, err := c.call(ctx, Request{Op: OpList, All: which == store.AllTasks}, nil)
	if r.Scan == nil {
		return store.Scan{}, err
	}
	return r.Scan.scan(), err
}

// FollowTask is driver.FollowTask through the agent: fn is called on the
// caller's goroutine with each state the agent streams.
func (c *Client) FollowTask(ctx context.Context, id string, fn func(fsm.Task)) (fsm.Task, error) {
	r, err := c.callTask(ctx, Request{Op: OpFollow, ID: id}, func(r Response) bool {
		if r.Task != nil {
			fn(*r.Task)
		}
		return false
	})
	return taskOf(r), err
}

// WaitTask is driver.WaitTask through the agent.
func (c *Client) WaitTask(ctx context.Context, id string) (fsm.Task, error) {
	r, err := c.callTask(ctx, Request{Op: OpWait, ID: id}, nil)
	return taskOf(r), err
}

// WaitReady is driver.WaitReady through the agent. When ctx ends first,
// the error is ctx's cause (a caller's deadline keeps its own error).
func (c *Client) WaitReady(ctx context.Context, id string) (driver.ReadyReport, error) {
	r, err := c.callTask(ctx, Request{Op: OpWaitReady, ID: id}, nil)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if r.Ready == nil {
		return driver.ReadyReport{}, err
	}
	return *r.Ready, err
}

func reportOf(r Response) driver.Report {
	if r.Report == nil {
		return driver.Report{}
	}
	return r.Report.report()
}

// Reconcile is driver.Reconcile through the agent.
func (c *Client) Reconcile(ctx context.Context, ids ...string) (driver.Report, error) {
	r, err := c.call(ctx, Request{Op: OpReconcile, IDs: ids}, nil)
	return reportOf(r), err
}

// Recover is driver.Recover through the agent.
func (c *Client) Recover(ctx context.Context) (driver.Report, error) {
	r, err := c.call(ctx, Request{Op: OpRecover}, nil)
	return reportOf(r), err
}

// TaskStats is driver.TaskStats through the agent.
func (c *Client) TaskStats(ctx context.Context, id string) (cgroup.Stats, error) {
	r, err := c.callTask(ctx, Request{Op: OpStats, ID: id}, nil)
	if r.Stats == nil {
		return cgroup.Stats{}, err
	}
	return *r.Stats, err
}

func entryOf(r Response) Entry {
	if r.Entry == nil {
		return Entry{}
	}
	return *r.Entry
}

// Enable registers a file as a desired entry (see DesiredState). Its
// file name is made absolute against this process's working directory.
func (c *Client) Enable(ctx context.Context, req EnableRequest) (Entry, error) {
	abs, err := absPath(req.File)
	if err != nil {
		return Entry{}, err
	}
	req.File = abs
	r, err := c.call(ctx, Request{Op: OpEnable, Enable: &req}, nil)
	return entryOf(r), err
}

// PlanJob is the job path through the agent: its node, its allow lists.
func (c *Client) PlanJob(ctx context.Context, req JobRequest) (JobPlan, error) {
	r, err := c.call(ctx, Request{Op: OpPlanJob, Job: &req}, nil)
	if r.Plan == nil {
		return JobPlan{}, err
	}
	return *r.Plan, err
}

// StartGroup is Agent.StartGroup: the agent drives the group from now on;
// fn is told each step it streams until the main tasks have started.
func (c *Client) StartGroup(ctx context.Context, ids []string, fn func(driver.GroupProgress)) ([]fsm.Task, error) {
	r, err := c.call(ctx, Request{Op: OpStartGroup, IDs: ids, Path: os.Getenv("PATH")}, groupProgress(fn))
	return r.Tasks, err
}

// AdoptGroups is Agent.AdoptGroups: the agent drives every group nobody
// drives.
func (c *Client) AdoptGroups(ctx context.Context) ([]string, error) {
	r, err := c.call(ctx, Request{Op: OpAdoptGroups}, nil)
	return r.Allocs, err
}

// Disable unregisters an enabled task (see DesiredState).
func (c *Client) Disable(ctx context.Context, name string) (Entry, error) {
	r, err := c.call(ctx, Request{Op: OpDisable, Name: name}, nil)
	return entryOf(r), err
}

// StartDesired starts a settled desired task again (see DesiredState).
func (c *Client) StartDesired(ctx context.Context, name string) (Entry, error) {
	r, err := c.call(ctx, Request{Op: OpStartDesired, Name: name}, nil)
	return entryOf(r), err
}

// RestartDesired restarts a desired task (see DesiredState).
func (c *Client) RestartDesired(ctx context.Context, name string) (Entry, error) {
	r, err := c.call(ctx, Request{Op: OpRestartDesired, Name: name}, nil)
	return entryOf(r), err
}

// Status is the agent's desired state.
func (c *Client) Status(ctx context.Context) (Status, error) {
	r, err := c.call(ctx, Request{Op: OpStatus}, nil)
	if r.Status == nil {
		return Status{}, err
	}
	return *r.Status, err
}

// WatchStatus calls fn with the agent's status now and after each change,
// until fn returns true or ctx ends (then ctx's error).
func (c *Client) WatchStatus(ctx context.Context, fn func(Status) bool) error {
	done := false
	_, err := c.call(ctx, Request{Op: OpWatch}, func(r Response) bool {
		if r.Status != nil && fn(*r.Status) {
			done = true
		}
		return done
	})
	if done {
		return nil
	}
	return err
}

// Check is store.Check of the agent's store.
func (c *Client) Check(ctx context.Context) (store.Report, error) {
	r, err := c.call(ctx, Request{Op: OpCheck}, nil)
	if r.Check == nil {
		return store.Report{}, err
	}
	return r.Check.report(), err
}

// GC is the agent's gc (see Maintenance).
func (c *Client) GC(ctx context.Context, olderThan time.Duration) (GCReport, error) {
	r, err := c.call(ctx, Request{Op: OpGC, OlderThan: olderThan}, nil)
	if r.GC == nil {
		return GCReport{}, err
	}
	return *r.GC, err
}

// Salvage is the agent's salvage (see Maintenance).
func (c *Client) Salvage(ctx context.Context) (SalvageReport, error) {
	r, err := c.call(ctx, Request{Op: OpSalvage}, nil)
	if r.Salvage == nil {
		return SalvageReport{}, err
	}
	return *r.Salvage, err
}
