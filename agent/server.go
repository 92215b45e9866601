package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// serverTimeout bounds how long a connection may take to send its hello and
// request, and how long one frame of an answer may take to be written: a
// client that stalls holds nothing of the agent's past it.
const serverTimeout = 10 * time.Second

// Server serves a Service on a listener: one exchange per connection (see
// proto.go), each on a goroutine of its own. Peers are checked before a
// byte is read from them.
type Server struct {
	svc   Service
	log   hclog.Logger
	owner uint32 // the state directory's owner: served, with root
	pid   int
	// Policy is the agent's allow lists, told to each client in the hello.
	Policy Policy

	wg sync.WaitGroup
}

// NewServer returns a server of svc that accepts root and owner.
func NewServer(svc Service, owner uint32, logger hclog.Logger) *Server {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Server{svc: svc, log: logger, owner: owner, pid: os.Getpid()}
}

// Serve accepts connections until ctx ends, then closes ln and waits for
// the exchanges in flight (their contexts end with ctx).
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var err error
	for {
		c, aerr := ln.AcceptUnix()
		if aerr != nil {
			if ctx.Err() == nil && !errors.Is(aerr, net.ErrClosed) {
				err = fmt.Errorf("agent: accept: %w", aerr)
			}
			break
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
		}()
	}
	s.wg.Wait()
	return err
}

// respWriter serializes the frames of one answer (heartbeats, progress,
// the result).
type respWriter struct {
	mu sync.Mutex
	c  *net.UnixConn
}

func (w *respWriter) write(r Response) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(serverTimeout))
	return writeFrame(w.c, r)
}

func (s *Server) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		s.log.Warn("connection without peer credentials refused", "err", err)
		return
	}
	log := s.log.With("peer_pid", cred.Pid, "peer_uid", cred.Uid)
	_ = c.SetDeadline(time.Now().Add(serverTimeout))
	if !allowed(cred.Uid, s.owner) {
		// Not a byte is read from it: it is told why, and let go.
		log.Warn("peer refused: neither root nor the state directory's owner", "owner_uid", s.owner)
		_ = writeFrame(c, hello{Magic: protocolMagic, Version: ProtocolVersion, PID: s.pid,
			Error: fmt.Sprintf("refused: uid %d is neither root nor the owner of the state directory (uid %d)", cred.Uid, s.owner)})
		return
	}
	b, err := readFrame(c, 4096)
	if err != nil {
		log.Debug("connection closed before its hello", "err", err)
		return
	}
	h, err := decodeHello(b)
	if err != nil {
		log.Warn("peer does not speak the agent protocol", "err", err)
		return
	}
	if h.Version != ProtocolVersion {
		log.Warn("client of another protocol version refused", "client_version", h.Version, "version", ProtocolVersion)
		_ = writeFrame(c, hello{Magic: protocolMagic, Version: ProtocolVersion, PID: s.pid,
			Error: (&VersionError{Agent: ProtocolVersion, Client: h.Version}).Error()})
		return
	}
	if err := writeFrame(c, hello{Magic: protocolMagic, Version: ProtocolVersion, PID: s.pid, Policy: &s.Policy}); err != nil {
		return
	}
	w := &respWriter{c: c}
	b, err = readFrame(c, maxRequestFrame)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			log.Warn("bad request frame", "err", err)
			_ = w.write(Response{Kind: respResult, Err: toWireError(err)})
		}
		return
	}
	req, err := DecodeRequest(b)
	if err != nil {
		log.Warn("bad request", "err", err)
		_ = w.write(Response{Kind: respResult, Err: toWireError(err)})
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	rctx, cancel := context.WithCancelCause(WithClientPath(ctx, req.Path))
	defer cancel(nil)
	var gone atomic.Bool
	go func() {
		// The client sends nothing more: a read returns when it shuts
		// its side (its call's context ended: the request is cancelled,
		// and the answer still sent, as in-process) or closes (a stream
		// it is done with, or a client that went away).
		var one [1]byte
		_, _ = c.Read(one[:])
		gone.Store(true)
		cancel(context.Canceled)
	}()
	go func() {
		t := time.NewTicker(HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if w.write(Response{Kind: respHeartbeat}) != nil {
					return
				}
			case <-rctx.Done():
				return
			}
		}
	}()
	log.Trace("request", "op", req.Op.String(), "task_id", req.ID)
	resp := s.dispatch(rctx, req, w)
	resp.Kind = respResult
	if err := w.write(resp); err != nil && !gone.Load() {
		log.Debug("answer not delivered", "op", req.Op.String(), "err", err)
	}
}

// dispatch runs a request against the service.
func (s *Server) dispatch(ctx context.Context, req Request, w *respWriter) Response {
	var r Response
	var err error
	switch req.Op {
	case OpStart:
		task, e := s.svc.StartTask(ctx, req.ID, *req.Spec)
		r.Task, err = &task, e
	case OpStartNamed:
		task, replaced, e := s.svc.StartNamed(ctx, req.ID, *req.Spec, driver.StartOptions{Replace: req.Replace,
			Stopping: func(old fsm.Task) { _ = w.write(Response{Kind: respProgress, Task: &old}) }})
		r.Task, r.Replaced, err = &task, replaced, e
	case OpRestart:
		task, old, e := s.svc.RestartTask(ctx, req.ID, req.NewID)
		r.Task, r.Old, err = &task, &old, e
	case OpResolve:
		info, e := s.svc.Resolve(ctx, req.Name)
		r.Info, err = &info, e
	case OpRestartDesired:
		e, er := s.svc.RestartDesired(ctx, req.Name)
		r.Entry, err = &e, er
	case OpCreateGroup:
		r.Tasks, err = s.svc.CreateGroup(ctx, req.Group, driver.StartOptions{Replace: req.Replace,
			Stopping: func(old fsm.Task) { _ = w.write(Response{Kind: respProgress, Task: &old}) }})
	case OpRunGroup:
		r.Tasks, err = s.svc.RunGroup(ctx, req.IDs, req.Wait, func(p driver.GroupProgress) {
			_ = w.write(Response{Kind: respProgress, Progress: &p})
		})
	case OpStopGroup:
		r.Tasks, err = s.svc.StopGroup(ctx, req.IDs, syscall.Signal(req.Signal), req.Grace, func(p driver.GroupProgress) {
			_ = w.write(Response{Kind: respProgress, Progress: &p})
		})
	case OpGroups:
		r.Groups, err = s.svc.Groups(ctx)
	case OpGroupDriven:
		r.Driven, r.PID, err = s.svc.GroupDriven(req.Name)
	case OpStop:
		task, e := s.svc.StopTask(ctx, req.ID, syscall.Signal(req.Signal), req.Grace)
		r.Task, err = &task, e
	case OpSignal:
		err = s.svc.SignalTask(ctx, req.ID, syscall.Signal(req.Signal), req.Main)
	case OpInspect:
		info, e := s.svc.InspectTask(ctx, req.ID)
		r.Info, err = &info, e
	case OpEvents:
		r.Events, err = s.svc.TaskEvents(ctx, req.ID)
	case OpList:
		sel := store.LiveTasks
		if req.All {
			sel = store.AllTasks
		}
		scan, e := s.svc.LoadTasks(ctx, sel)
		r.Scan, err = toWireScan(scan), e
	case OpFollow:
		task, e := s.svc.FollowTask(ctx, req.ID, func(st fsm.Task) {
			_ = w.write(Response{Kind: respProgress, Task: &st})
		})
		r.Task, err = &task, e
	case OpWait:
		task, e := s.svc.WaitTask(ctx, req.ID)
		r.Task, err = &task, e
	case OpWaitReady:
		rep, e := s.svc.WaitReady(ctx, req.ID)
		r.Ready, err = &rep, e
	case OpReconcile:
		rep, e := s.svc.Reconcile(ctx, req.IDs...)
		r.Report, err = toWireReport(rep), e
	case OpRecover:
		rep, e := s.svc.Recover(ctx)
		r.Report, err = toWireReport(rep), e
	case OpStats:
		st, e := s.svc.TaskStats(ctx, req.ID)
		r.Stats, err = &st, e
	case OpEnable:
		e, er := s.svc.Enable(ctx, *req.Enable)
		r.Entry, err = &e, er
	case OpPlanJob:
		plan, e := s.svc.PlanJob(ctx, *req.Job)
		r.Plan, err = &plan, e
	case OpStartGroup:
		r.Tasks, err = s.svc.StartGroup(ctx, req.IDs, func(p driver.GroupProgress) {
			_ = w.write(Response{Kind: respProgress, Progress: &p})
		})
	case OpAdoptGroups:
		r.Allocs, err = s.svc.AdoptGroups(ctx)
	case OpDisable:
		e, er := s.svc.Disable(ctx, req.Name)
		r.Entry, err = &e, er
	case OpStartDesired:
		e, er := s.svc.StartDesired(ctx, req.Name)
		r.Entry, err = &e, er
	case OpStatus:
		st, e := s.svc.Status(ctx)
		r.Status, err = &st, e
	case OpWatch:
		err = s.svc.WatchStatus(ctx, func(st Status) bool {
			return w.write(Response{Kind: respProgress, Status: &st}) != nil
		})
	case OpCheck:
		rep, e := s.svc.Check(ctx)
		r.Check, err = toWireCheck(rep), e
	case OpGC:
		rep, e := s.svc.GC(ctx, req.OlderThan)
		r.GC, err = &rep, e
	case OpSalvage:
		rep, e := s.svc.Salvage(ctx)
		r.Salvage, err = &rep, e
	default:
		err = fmt.Errorf("%w: %s", ErrBadRequest, req.Op)
	}
	r.Err = toWireError(err)
	return r
}
