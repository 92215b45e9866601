package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// The protocol between a client (the CLI) and the agent, over the agent's
// unix socket.
//
// Every message is a frame: a 4-byte big-endian length, then that many
// bytes of JSON. A connection carries one exchange:
//
//  1. the client sends a hello {"magic":"tether-agent","version":N};
//  2. the agent answers with its own hello (its version and pid), or with a
//     hello carrying an error (a refused peer, a version mismatch: both
//     versions are named) and closes;
//  3. the client sends one Request;
//  4. the agent answers with Response frames: heartbeats while it works
//     (every HeartbeatInterval, so that a client can tell a slow answer from
//     a wedged agent), progress frames for a stream (follow, watch), and
//     one final result; then it closes. A client ends a stream by closing
//     the connection, which cancels the request.
//
// The hello's two fields and the frame's form never change: they are how
// two versions tell each other apart. Everything after the hello is the
// version's own.

// ProtocolVersion is the version of the agent protocol this build speaks
// (2: the CLI's whole surface, names, exec's resolution, the upkeep; 3:
// a notify task's readiness, wait-ready; 4: files through the agent's job
// path (plan-job, an enable of a file's text), groups the agent drives
// (start-group, adopt-groups)).
const ProtocolVersion = 4

const protocolMagic = "tether-agent"

// Frame bounds: a request carries a spec and a few names. A valid spec
// is at most 512 KiB of arguments and environment and a few names of 64
// KiB (fsm.Spec.Validate), a few MiB once JSON has escaped it; an invalid
// one is the agent's to refuse and record as a daemonless start would (a
// task file with a 10 MB argument is refused by the driver, naming it,
// not by the protocol), up to this bound. An answer may list every task of
// the store.
const (
	maxRequestFrame  = 64 << 20
	maxResponseFrame = 256 << 20
)

// HeartbeatInterval is how often the agent tells a waiting client that it
// is still working on its request.
const HeartbeatInterval = time.Second

// writeFrame writes v as one frame.
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: encode: %w", ErrProtocol, err)
	}
	buf := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

// encodeRequest is a request frame's payload: the JSON of r. A start of a
// plain command (plainStart: what `tether start -- CMD` sends) is written
// from maps of the fields it sets: the same JSON but for the order of its
// keys, which decodes to the same request, without building
// encoding/json's encoders for the whole of Request and fsm.Spec (their
// every nested type), which costs a short-lived CLI about half a
// millisecond, a tenth of its whole start through an agent.
func encodeRequest(r Request) ([]byte, error) {
	if m, ok := plainStart(r); ok {
		return json.Marshal(m)
	}
	return json.Marshal(r)
}

// plainStart returns r as maps when r is a start (start, start-named)
// that sets no field but the op, the id, the spec, replace and the path,
// of a spec that sets no field but the name, the driver, the command, its
// arguments and environment, the directory and the user. Anything else
// set (a field added later included) is encoded the usual way.
func plainStart(r Request) (map[string]any, bool) {
	if r.Op != OpStart && r.Op != OpStartNamed || r.Spec == nil {
		return nil, false
	}
	s := r.Spec
	plain := fsm.Spec{Name: s.Name, Driver: s.Driver, Command: s.Command, Args: s.Args, Env: s.Env, Dir: s.Dir, User: s.User}
	if !reflect.DeepEqual(*s, plain) || !reflect.DeepEqual(r, Request{Op: r.Op, ID: r.ID, Spec: s, Replace: r.Replace, Path: r.Path}) {
		return nil, false
	}
	// The keys are Spec's field names (it has no tags) and Request's tags.
	m := map[string]any{"op": opNames[r.Op], "spec": map[string]any{
		"Name": s.Name, "Driver": s.Driver, "Command": s.Command, "Args": s.Args, "Env": s.Env, "Dir": s.Dir, "User": s.User,
	}}
	if r.ID != "" {
		m["id"] = r.ID
	}
	if r.Replace {
		m["replace"] = true
	}
	if r.Path != "" {
		m["path"] = r.Path
	}
	return m, true
}

// readFrame reads one frame's payload, refusing one longer than limit.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("%w: a frame of %d bytes (at most %d)", ErrProtocol, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// hello is the first frame each way.
type hello struct {
	Magic   string `json:"magic"`
	Version int    `json:"version"`
	PID     int    `json:"pid,omitempty"`   // the agent's
	Error   string `json:"error,omitempty"` // the agent's refusal
	// Policy is the agent's allow lists (its hello only).
	Policy *Policy `json:"policy,omitempty"`
}

// Policy is what an agent allows the tasks it starts, whoever asks: the
// operator's lists, given to tether agent. A client's flags never reach
// it.
type Policy struct {
	// AllowedCaps is the capability allow list for exec tasks (nil: the
	// executor's default); ChrootEnv what an exec task's root is built
	// from (nil: Nomad's chroot_env).
	AllowedCaps []string `json:"allowed_caps,omitempty"`
	ChrootEnv   []string `json:"chroot_env,omitempty"`
	// AllowSeccomp, AllowMissing and AllowRead: what an exec task's
	// seccomp may name besides "default", the sandbox parts it may run
	// without, the host directories a job file may read (nil: none).
	AllowSeccomp []string `json:"allow_seccomp,omitempty"`
	AllowMissing []string `json:"allow_missing,omitempty"`
	AllowRead    []string `json:"allow_read,omitempty"`
	// AllowDrivers, AllowRemoteDrivers, AllowHostNamespaces and MaxCount:
	// the drivers a task may use, those a spec from etcd may use, the
	// namespaces an exec task may share with the host, the bound on a
	// group's count (nil and 0: job.Policy's defaults).
	AllowDrivers        []string `json:"allow_drivers,omitempty"`
	AllowRemoteDrivers  []string `json:"allow_remote_drivers,omitempty"`
	AllowHostNamespaces []string `json:"allow_host_namespaces,omitempty"`
	MaxCount            int      `json:"max_count,omitempty"`
}

// Job is the policy as package job holds it.
func (p Policy) Job() job.Policy {
	return job.Policy{AllowedCaps: slices.Clone(p.AllowedCaps), Chroot: slices.Clone(p.ChrootEnv), AllowSeccomp: slices.Clone(p.AllowSeccomp),
		AllowMissing: slices.Clone(p.AllowMissing), AllowRead: slices.Clone(p.AllowRead),
		AllowDrivers: slices.Clone(p.AllowDrivers), AllowRemoteDrivers: slices.Clone(p.AllowRemoteDrivers),
		AllowHostNamespaces: slices.Clone(p.AllowHostNamespaces), MaxCount: p.MaxCount}
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if err := json.Unmarshal(b, &h); err != nil || h.Magic != protocolMagic {
		return h, fmt.Errorf("%w: the peer does not speak the agent protocol", ErrProtocol)
	}
	return h, nil
}

// Op is a request's operation.
type Op uint8

// The operations.
const (
	OpNone Op = iota
	// Task operations, the driver's.
	OpStart     // StartTask(ID, Spec)
	OpStop      // StopTask(ID, Signal, Grace)
	OpSignal    // SignalTask(ID, Signal, Main)
	OpInspect   // InspectTask(ID)
	OpEvents    // TaskEvents(ID)
	OpList      // LoadTasks(All)
	OpFollow    // FollowTask(ID): a stream of states, then the final one
	OpWait      // WaitTask(ID)
	OpReconcile // Reconcile(IDs...)
	OpRecover   // Recover()
	OpStats     // TaskStats(ID)
	// Desired state.
	OpEnable       // Enable(File, Spec)
	OpDisable      // Disable(Name)
	OpStartDesired // StartDesired(Name)
	OpStatus       // Status()
	OpWatch        // WatchStatus(): a stream of statuses
	// Maintenance.
	OpCheck   // Check()
	OpGC      // GC(OlderThan)
	OpSalvage // Salvage()
	// Names (version 2).
	OpResolve        // Resolve(Name: an id or a name)
	OpStartNamed     // StartNamed(ID, Spec, Replace): progress frames name each task it stops
	OpRestart        // RestartTask(ID, NewID)
	OpRestartDesired // RestartDesired(Name)
	// Groups (version 2): a job file's groups, the driver's.
	OpCreateGroup // CreateGroup(Group, Replace): progress frames name each task it stops
	OpRunGroup    // RunGroup(IDs, Wait): progress frames before each step, then the final states
	OpStopGroup   // StopGroup(IDs, Signal, Grace): progress frames, then the final states
	OpGroups      // Groups()
	OpGroupDriven // GroupDriven(Name: the alloc)
	// Readiness (version 3).
	OpWaitReady // WaitReady(ID)
	// Jobs (version 4).
	OpPlanJob     // PlanJob(Job)
	OpStartGroup  // StartGroup(IDs): progress frames, then the tasks as they were once the main tasks started
	OpAdoptGroups // AdoptGroups()

	numOps
)

var opNames = [numOps]string{
	OpNone: "none", OpStart: "start", OpStop: "stop", OpSignal: "signal", OpInspect: "inspect",
	OpEvents: "events", OpList: "list", OpFollow: "follow", OpWait: "wait", OpReconcile: "reconcile",
	OpRecover: "recover", OpStats: "stats", OpEnable: "enable", OpDisable: "disable",
	OpStartDesired: "start-desired", OpStatus: "status", OpWatch: "watch", OpCheck: "check",
	OpGC: "gc", OpSalvage: "salvage", OpResolve: "resolve", OpStartNamed: "start-named", OpRestart: "restart",
	OpRestartDesired: "restart-desired", OpCreateGroup: "create-group", OpRunGroup: "run-group",
	OpStopGroup: "stop-group", OpGroups: "groups", OpGroupDriven: "group-driven", OpWaitReady: "wait-ready",
	OpPlanJob: "plan-job", OpStartGroup: "start-group", OpAdoptGroups: "adopt-groups",
}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// MarshalText writes an operation by its name.
func (o Op) MarshalText() ([]byte, error) {
	if o == OpNone || o >= numOps {
		return nil, fmt.Errorf("%w: %s", ErrBadRequest, o)
	}
	return []byte(opNames[o]), nil
}

// UnmarshalText reads an operation's name; an unknown one is an error.
func (o *Op) UnmarshalText(b []byte) error {
	for i, n := range opNames {
		if Op(i) != OpNone && n == string(b) {
			*o = Op(i)
			return nil
		}
	}
	return fmt.Errorf("%w: unknown operation %q", ErrBadRequest, b)
}

// Request is a client's request.
type Request struct {
	Op Op `json:"op"`
	// ID is the task (start, start-named, restart, stop, signal, inspect,
	// events, follow, wait, stats); IDs the tasks to reconcile; NewID a
	// restart's new task.
	ID    string   `json:"id,omitempty"`
	IDs   []string `json:"ids,omitempty"`
	NewID string   `json:"new_id,omitempty"`
	// Name is the desired task (disable, start-desired, restart-desired),
	// or what to resolve (an id or a task's name).
	Name string `json:"name,omitempty"`
	// Spec is the spec of a command (start, start-named).
	Spec *fsm.Spec `json:"spec,omitempty"`
	// Job is a file to plan (plan-job), Enable one to register (enable):
	// the text the client read, which the agent reads through its own job
	// path (the agent never opens a file a request names).
	Job    *JobRequest    `json:"job,omitempty"`
	Enable *EnableRequest `json:"enable,omitempty"`
	// Signal and Grace: stop's (0: the task's or the agent's defaults),
	// signal's (Main: the task's main process only).
	Signal int           `json:"signal,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	Main   bool          `json:"main,omitempty"`
	// All lists every task, not only live ones (list).
	All bool `json:"all,omitempty"`
	// Replace stops the live task of the name first (start-named).
	Replace bool `json:"replace,omitempty"`
	// Path is the client's PATH (start, start-named, restart): the
	// executor spawned for the task gets it, as the client's own would
	// daemonless (a raw_exec task's default PATH).
	Path string `json:"path,omitempty"`
	// OlderThan is gc's age.
	OlderThan time.Duration `json:"older_than,omitempty"`
	// Group is the tasks a create-group records (IDs: the tasks a
	// run-group or stop-group drives); Wait makes a run-group wait for
	// the group's lock.
	Group []driver.GroupTask `json:"group,omitempty"`
	Wait  bool               `json:"wait,omitempty"`
}

// Validate checks that a request carries what its operation needs, and
// nothing malformed: ids by driver.ValidateTaskID, signals in range, a
// file absolute. A spec's own content is the driver's to check (it
// records the refusal, as it does for a daemonless start).
func (r *Request) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrBadRequest, r.Op}, args...)...)
	}
	switch r.Op {
	case OpStart, OpStartNamed, OpStop, OpSignal, OpInspect, OpEvents, OpFollow, OpWait, OpStats, OpWaitReady:
		if err := driver.ValidateTaskID(r.ID); err != nil {
			return bad("%v", err)
		}
	case OpRestart:
		if err := driver.ValidateTaskID(r.ID); err != nil {
			return bad("%v", err)
		}
		if err := driver.ValidateTaskID(r.NewID); err != nil {
			return bad("new task: %v", err)
		}
	case OpResolve:
		if len(r.Name) > maxName {
			return bad("a name of %d bytes (at most %d)", len(r.Name), maxName)
		}
	case OpCreateGroup:
		if len(r.Group) == 0 {
			return bad("no tasks")
		}
		for _, g := range r.Group {
			if err := driver.ValidateTaskID(g.ID); err != nil {
				return bad("%v", err)
			}
		}
	case OpRunGroup, OpStopGroup, OpStartGroup:
		if len(r.IDs) == 0 {
			return bad("no tasks")
		}
		for _, id := range r.IDs {
			if err := driver.ValidateTaskID(id); err != nil {
				return bad("%v", err)
			}
		}
	case OpGroupDriven:
		if err := driver.ValidateTaskID(r.Name); err != nil {
			return bad("group id: %v", err)
		}
	case OpReconcile:
		for _, id := range r.IDs {
			if err := driver.ValidateTaskID(id); err != nil {
				return bad("%v", err)
			}
		}
	case OpDisable, OpStartDesired, OpRestartDesired:
		if err := validName(r.Name); err != nil {
			return bad("%v", err)
		}
	case OpEnable:
		if r.Enable == nil {
			return bad("no file")
		}
		if r.Enable.File == "" || !filepath.IsAbs(r.Enable.File) {
			return bad("the file %q is not an absolute path", r.Enable.File)
		}
		if len(r.Enable.Text) > maxFileText {
			return bad("a file of %d bytes (at most %d)", len(r.Enable.Text), maxFileText)
		}
	case OpPlanJob:
		if r.Job == nil {
			return bad("no file")
		}
		if len(r.Job.Source.Text) > maxFileText {
			return bad("a file of %d bytes (at most %d)", len(r.Job.Source.Text), maxFileText)
		}
	case OpList, OpRecover, OpStatus, OpWatch, OpCheck, OpGC, OpSalvage, OpGroups, OpAdoptGroups:
	default:
		return bad("unknown operation")
	}
	if (r.Op == OpStart || r.Op == OpStartNamed) && r.Spec == nil {
		return bad("no spec")
	}
	if r.Path != "" && !utf8.ValidString(r.Path) || len(r.Path) > maxPath || strings.IndexByte(r.Path, 0) >= 0 {
		return bad("a PATH that is not one")
	}
	if r.Signal < 0 || r.Signal > 64 {
		return bad("signal %d is not a signal", r.Signal)
	}
	if r.Grace < 0 || r.OlderThan < 0 {
		return bad("negative duration")
	}
	return nil
}

// maxName bounds a desired task's name (a store key); maxPath a client's
// PATH.
const (
	maxName = 1024
	maxPath = 64 << 10
	// maxFileText bounds a file a request carries (as the config dir's).
	maxFileText = maxTaskFile
)

func validName(name string) error {
	switch {
	case name == "":
		return errors.New("no task name")
	case len(name) > maxName:
		return fmt.Errorf("task name of %d bytes (at most %d)", len(name), maxName)
	case bytes.IndexByte([]byte(name), 0) >= 0:
		return errors.New("task name contains a NUL byte")
	}
	return nil
}

// DecodeRequest decodes and validates a request frame's payload. It never
// panics: any input is a request or an error (FuzzDecodeRequest holds it
// to that, and to re-encoding what it accepts to the same request).
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > maxRequestFrame {
		return r, fmt.Errorf("%w: a request of %d bytes (at most %d)", ErrProtocol, len(b), maxRequestFrame)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, ErrBadRequest) {
			return Request{}, err
		}
		return Request{}, fmt.Errorf("%w: request: %w", ErrProtocol, err)
	}
	if dec.More() {
		return Request{}, fmt.Errorf("%w: trailing data after the request", ErrProtocol)
	}
	if err := r.Validate(); err != nil {
		return Request{}, err
	}
	return r, nil
}

// respKind is the kind of a response frame.
type respKind uint8

const (
	respResult respKind = iota + 1
	respProgress
	respHeartbeat
)

// Response is a frame of the agent's answer. Which fields are set depends
// on the request's operation; Err is set when it failed.
type Response struct {
	Kind respKind  `json:"kind"`
	Task *fsm.Task `json:"task,omitempty"`
	// Old is a restart's old task; Replaced the tasks a start-named
	// stopped.
	Old      *fsm.Task        `json:"old,omitempty"`
	Replaced []fsm.Task       `json:"replaced,omitempty"`
	Info     *driver.TaskInfo `json:"info,omitempty"`
	Events   []fsm.Event      `json:"events,omitempty"`
	Scan     *wireScan        `json:"scan,omitempty"`
	Report   *wireReport      `json:"report,omitempty"`
	Stats    *cgroup.Stats    `json:"stats,omitempty"`
	Entry    *Entry           `json:"entry,omitempty"`
	Status   *Status          `json:"status,omitempty"`
	Check    *wireCheck       `json:"check,omitempty"`
	GC       *GCReport        `json:"gc,omitempty"`
	Salvage  *SalvageReport   `json:"salvage,omitempty"`
	// Ready is a wait-ready's report.
	Ready *driver.ReadyReport `json:"ready,omitempty"`
	// Tasks are a group operation's tasks; Progress a group's step (a
	// progress frame); Groups the groups with a live task; Driven and
	// PID whether a process drives a group, and which.
	Tasks    []fsm.Task            `json:"tasks,omitempty"`
	Progress *driver.GroupProgress `json:"progress,omitempty"`
	Groups   map[string][]string   `json:"groups,omitempty"`
	Driven   bool                  `json:"driven,omitempty"`
	PID      int                   `json:"pid,omitempty"`
	// Plan is a plan-job's; Allocs the groups an adopt-groups gave to a
	// driver.
	Plan   *JobPlan   `json:"plan,omitempty"`
	Allocs []string   `json:"allocs,omitempty"`
	Err    *wireError `json:"err,omitempty"`
}

// taskAnswer is the part of a Response that the answer to a start (start,
// start-named) sets: its kind, the task, the tasks it replaced, its error.
type taskAnswer struct {
	Kind     respKind   `json:"kind"`
	Task     *taskWire  `json:"task,omitempty"`
	Replaced []taskWire `json:"replaced,omitempty"`
	// Err is decoded only when there is one: a wireError can hold tasks
	// (a name's), whose type tree is what taskWire keeps from being built.
	Err json.RawMessage `json:"err,omitempty"`
}

// taskWire is an fsm.Task as a start's answer is decoded: its spec kept
// as JSON (the field shadows fsm.Task's), so that encoding/json never
// builds its encoders for fsm.Spec's whole type tree (allocations,
// templates, checks, ...) for a spec that sets none of it (plainSpec).
type taskWire struct {
	fsm.Task
	Spec json.RawMessage
}

// task is w with its spec decoded.
func (w *taskWire) task() (fsm.Task, error) {
	t := w.Task
	t.Spec = nil
	if len(w.Spec) == 0 || string(w.Spec) == "null" {
		return t, nil
	}
	spec, ok := plainSpec(w.Spec)
	if !ok {
		spec = new(fsm.Spec)
		if err := json.Unmarshal(w.Spec, spec); err != nil {
			return t, err
		}
	}
	t.Spec = spec
	return t, nil
}

// plainSpecFields are the fields of a plain spec (plainStart's), decoded
// one by one.
var plainSpecFields = map[string]bool{"Name": true, "Driver": true, "Command": true, "Args": true, "Env": true, "Dir": true, "User": true}

// plainSpec decodes b, a spec's JSON, when every key of it is a field of
// fsm.Spec by its exact name and every field but the plain ones holds its
// zero value's JSON (null, false, 0, "", or, for a struct field, an object
// of those): the spec a plain start records. Anything else is not decoded
// here (ok false), and the caller decodes it in full.
func plainSpec(b []byte) (*fsm.Spec, bool) {
	var keys map[string]json.RawMessage
	if json.Unmarshal(b, &keys) != nil {
		return nil, false
	}
	st := reflect.TypeFor[fsm.Spec]()
	var s fsm.Spec
	for k, v := range keys {
		f, ok := st.FieldByName(k)
		if !ok || !f.IsExported() || len(f.Index) != 1 {
			return nil, false
		}
		if !plainSpecFields[k] {
			if !zeroJSON(v, f.Type) {
				return nil, false
			}
			continue
		}
		fv := reflect.ValueOf(&s).Elem().Field(f.Index[0])
		if json.Unmarshal(v, fv.Addr().Interface()) != nil {
			return nil, false
		}
	}
	return &s, true
}

// zeroJSON reports whether v decodes into a value of type t as t's zero
// value: null (any kind), "" (a string), false (a bool), 0 (a number), or,
// for a struct, an object whose every key is an exported field of it
// holding its zero.
func zeroJSON(v json.RawMessage, t reflect.Type) bool {
	switch k := t.Kind(); {
	case string(v) == "null":
		return true // leaves any kind as it was: zero
	case k == reflect.String:
		return string(v) == `""`
	case k == reflect.Bool:
		return string(v) == "false"
	case k >= reflect.Int && k <= reflect.Float64:
		return string(v) == "0"
	case k != reflect.Struct || len(v) == 0 || v[0] != '{':
		return false // a pointer's 0 is a pointer to 0, not nil
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(v, &keys) != nil {
		return false
	}
	for k, fv := range keys {
		f, ok := t.FieldByName(k)
		if !ok || !f.IsExported() || len(f.Index) != 1 || !zeroJSON(fv, f.Type) {
			return false
		}
	}
	return true
}

// decodeResponse decodes a response frame's payload, the answer to op. An
// answer to a start is decoded into taskAnswer when it holds nothing else
// (a field it does not know, at any depth, and the frame is decoded as a
// whole Response, as any other answer): decoding into Response makes
// encoding/json build its encoders for every type a Response can hold
// (statuses, plans, reports), which costs a short-lived CLI more than
// half a millisecond; a start's answer needs fsm.Task's alone.
func decodeResponse(op Op, b []byte) (Response, error) {
	if op == OpStart || op == OpStartNamed {
		var a taskAnswer
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&a) == nil && !dec.More() {
			if r, ok := a.response(); ok {
				return r, nil
			}
		}
	}
	var r Response
	err := json.Unmarshal(b, &r)
	return r, err
}

// response is a as a Response (ok false: a spec it holds does not decode).
func (a *taskAnswer) response() (Response, bool) {
	r := Response{Kind: a.Kind}
	if len(a.Err) > 0 && string(a.Err) != "null" {
		if err := json.Unmarshal(a.Err, &r.Err); err != nil {
			return r, false
		}
	}
	if a.Task != nil {
		t, err := a.Task.task()
		if err != nil {
			return r, false
		}
		r.Task = &t
	}
	if a.Replaced != nil {
		r.Replaced = make([]fsm.Task, 0, len(a.Replaced))
	}
	for i := range a.Replaced {
		t, err := a.Replaced[i].task()
		if err != nil {
			return r, false
		}
		r.Replaced = append(r.Replaced, t)
	}
	return r, true
}

// wireScan is store.Scan on the wire.
type wireScan struct {
	Tasks      []fsm.Task `json:"tasks,omitempty"`
	Unreadable []struct {
		Task string     `json:"task"`
		Err  *wireError `json:"err"`
	} `json:"unreadable,omitempty"`
	Incomplete *wireError `json:"incomplete,omitempty"`
}

func toWireScan(s store.Scan) *wireScan {
	w := &wireScan{Tasks: s.Tasks, Incomplete: toWireError(s.Incomplete)}
	for _, u := range s.Unreadable {
		w.Unreadable = append(w.Unreadable, struct {
			Task string     `json:"task"`
			Err  *wireError `json:"err"`
		}{u.Task, toWireError(u.Err)})
	}
	return w
}

func (w *wireScan) scan() store.Scan {
	s := store.Scan{Tasks: w.Tasks, Incomplete: w.Incomplete.err()}
	for _, u := range w.Unreadable {
		s.Unreadable = append(s.Unreadable, store.TaskError{Task: u.Task, Err: u.Err.err()})
	}
	return s
}

// wireReport is driver.Report on the wire.
type wireReport struct {
	Tasks []wireTaskReport `json:"tasks,omitempty"`
}

type wireTaskReport struct {
	ID     string     `json:"id"`
	From   fsm.State  `json:"from"`
	To     fsm.State  `json:"to"`
	Action string     `json:"action,omitempty"`
	Err    *wireError `json:"err,omitempty"`
}

func toWireReport(r driver.Report) *wireReport {
	w := &wireReport{}
	for _, t := range r.Tasks {
		w.Tasks = append(w.Tasks, wireTaskReport{ID: t.ID, From: t.From, To: t.To, Action: t.Action, Err: toWireError(t.Err)})
	}
	return w
}

func (w *wireReport) report() driver.Report {
	var r driver.Report
	for _, t := range w.Tasks {
		r.Tasks = append(r.Tasks, driver.TaskReport{ID: t.ID, From: t.From, To: t.To, Action: t.Action, Err: t.Err.err()})
	}
	return r
}

// wireCheck is store.Report on the wire.
type wireCheck struct {
	Path     string `json:"path"`
	Tasks    int    `json:"tasks"`
	Live     int    `json:"live"`
	Events   int    `json:"events"`
	Desired  int    `json:"desired"`
	Problems []struct {
		Task string     `json:"task,omitempty"`
		Seq  uint64     `json:"seq,omitempty"`
		Page uint64     `json:"page,omitempty"`
		Err  *wireError `json:"err"`
	} `json:"problems,omitempty"`
}

func toWireCheck(r store.Report) *wireCheck {
	w := &wireCheck{Path: r.Path, Tasks: r.Tasks, Live: r.Live, Events: r.Events, Desired: r.Desired}
	for _, p := range r.Problems {
		w.Problems = append(w.Problems, struct {
			Task string     `json:"task,omitempty"`
			Seq  uint64     `json:"seq,omitempty"`
			Page uint64     `json:"page,omitempty"`
			Err  *wireError `json:"err"`
		}{p.Task, p.Seq, p.Page, toWireError(p.Err)})
	}
	return w
}

func (w *wireCheck) report() store.Report {
	r := store.Report{Path: w.Path, Tasks: w.Tasks, Live: w.Live, Events: w.Events, Desired: w.Desired}
	for _, p := range w.Problems {
		r.Problems = append(r.Problems, store.Problem{Task: p.Task, Seq: p.Seq, Page: p.Page, Err: p.Err.err()})
	}
	return r
}
