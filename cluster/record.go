package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// Redacted replaces the value of every environment variable of a
// mirrored spec: the environment holds secrets, and etcd is read by
// whoever operates the fleet. The names stay.
const Redacted = "<redacted>"

// wireEvent is an event as it is mirrored: JSON with named types and
// states (numbers are the local log's business), every field of
// fsm.Event (TestWireEvent_CoversEveryEventField fails when one is
// added and not carried here), and the spec's environment values
// redacted.
type wireEvent struct {
	Seq           uint64          `json:"seq"`
	Time          int64           `json:"time"`
	Recorded      int64           `json:"recorded,omitempty"`
	Type          string          `json:"type"`
	Spec          *fsm.Spec       `json:"spec,omitempty"`
	Nonce         string          `json:"nonce,omitempty"`
	Executor      *fsm.Identity   `json:"executor,omitempty"`
	TaskPID       int             `json:"task_pid,omitempty"`
	TaskStartTime uint64          `json:"task_start_time,omitempty"`
	Exit          *fsm.ExitStatus `json:"exit,omitempty"`
	Signal        int             `json:"signal,omitempty"`
	Grace         time.Duration   `json:"grace,omitempty"`
	Delay         time.Duration   `json:"delay,omitempty"`
	Reason        string          `json:"reason,omitempty"`
	Cause         string          `json:"cause,omitempty"`
	Warnings      []wireWarning   `json:"warnings,omitempty"`
	Target        string          `json:"target,omitempty"`
	Attempt       int             `json:"attempt,omitempty"`
	Replaces      string          `json:"replaces,omitempty"`
	ReplacedBy    string          `json:"replaced_by,omitempty"`
}

// wireWarning is a warning as it is mirrored: its kind by name.
type wireWarning struct {
	Kind string `json:"kind"`
	Text string `json:"text"`
}

// parseCause is the cause named s (fsm.Cause's String).
func parseCause(s string) (fsm.Cause, error) {
	for c := fsm.CauseNone; c.Valid(); c++ {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown cause %q (written by a newer tether?)", s)
}

// parseWarningKind is the warning kind named s (fsm.WarningKind's String).
func parseWarningKind(s string) (fsm.WarningKind, error) {
	for k := fsm.WarnOther; k.Valid(); k++ {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown warning kind %q (written by a newer tether?)", s)
}

// redact returns spec with its environment's values replaced by
// Redacted (a copy: the caller's spec is not touched).
func redact(spec *fsm.Spec) *fsm.Spec {
	if spec == nil || len(spec.Env) == 0 {
		return spec
	}
	c := *spec
	c.Env = maps.Clone(spec.Env)
	for k := range c.Env {
		c.Env[k] = Redacted
	}
	return &c
}

// encodeEvent is the mirrored form of e.
func encodeEvent(e *fsm.Event) ([]byte, error) {
	w := wireEvent{
		Seq: e.Seq, Time: e.Time, Recorded: e.Recorded, Type: e.Type.String(), Spec: redact(e.Spec), Nonce: e.Nonce,
		Executor: e.Executor, TaskPID: e.TaskPID, TaskStartTime: e.TaskStartTime, Exit: e.Exit,
		Signal: e.Signal, Grace: e.Grace, Delay: e.Delay, Reason: e.Reason, Attempt: e.Attempt,
		Replaces: e.Replaces, ReplacedBy: e.ReplacedBy,
	}
	if e.Cause != fsm.CauseNone {
		w.Cause = e.Cause.String()
	}
	for _, x := range e.Warnings {
		w.Warnings = append(w.Warnings, wireWarning{Kind: x.Kind.String(), Text: x.Text})
	}
	if e.Target != fsm.StateNone {
		w.Target = e.Target.String()
	}
	return marshal(&w)
}

// marshal is json.Marshal without HTML escaping, so that a mirrored
// value reads as written (Redacted, not \u003credacted\u003e).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// decodeEvent decodes a mirrored event; key names it in the error.
func decodeEvent(key string, b []byte) (fsm.Event, error) {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return fsm.Event{}, &CorruptError{Key: key, Err: err}
	}
	typ, err := fsm.ParseEventType(w.Type)
	if err != nil {
		return fsm.Event{}, &CorruptError{Key: key, Err: fmt.Errorf("%w (written by a newer tether?)", err)}
	}
	e := fsm.Event{
		Type: typ, Seq: w.Seq, Time: w.Time, Recorded: w.Recorded, Spec: w.Spec, Nonce: w.Nonce, Executor: w.Executor,
		TaskPID: w.TaskPID, TaskStartTime: w.TaskStartTime, Exit: w.Exit, Signal: w.Signal,
		Grace: w.Grace, Delay: w.Delay, Reason: w.Reason, Attempt: w.Attempt,
		Replaces: w.Replaces, ReplacedBy: w.ReplacedBy,
	}
	if w.Cause != "" {
		if e.Cause, err = parseCause(w.Cause); err != nil {
			return fsm.Event{}, &CorruptError{Key: key, Err: err}
		}
	}
	for _, x := range w.Warnings {
		k, err := parseWarningKind(x.Kind)
		if err != nil {
			return fsm.Event{}, &CorruptError{Key: key, Err: err}
		}
		e.Warnings = append(e.Warnings, fsm.Warning{Kind: k, Text: x.Text})
	}
	if w.Target != "" {
		if e.Target, err = fsm.ParseState(w.Target); err != nil {
			return fsm.Event{}, &CorruptError{Key: key, Err: err}
		}
	}
	if e.Seq == 0 {
		return fsm.Event{}, &CorruptError{Key: key, Err: errors.New("no sequence number")}
	}
	return e, nil
}

// head is a task's mirrored head: the last mirrored sequence number and
// what a listing needs (state, name, times), so that status reads one
// key per task.
type head struct {
	Seq      uint64 `json:"seq"`
	State    string `json:"state"`
	Name     string `json:"name,omitempty"`
	Created  int64  `json:"created"`
	Updated  int64  `json:"updated"`
	LastType string `json:"last_type"`
	// Restarts and Reason are the fold's, for the listing.
	Restarts int    `json:"restarts,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// advance folds evs (the next events of the task, in order) into h. The
// state follows the lifecycle table; an event the table refuses is an
// error (the local log is a legal walk, so this means a broken mirror).
func (h head) advance(evs []fsm.Event) (head, error) {
	st := fsm.StateNone
	if h.Seq > 0 {
		var err error
		if st, err = fsm.ParseState(h.State); err != nil {
			return h, err
		}
	}
	for i := range evs {
		e := &evs[i]
		if e.Seq != h.Seq+1 {
			return h, fmt.Errorf("event seq %d follows mirrored seq %d", e.Seq, h.Seq)
		}
		next, err := fsm.Next(st, *e)
		if err != nil {
			return h, fmt.Errorf("seq %d: %w", e.Seq, err)
		}
		st = next
		h.Seq = e.Seq
		h.Updated = e.Time
		h.LastType = e.Type.String()
		switch e.Type {
		case fsm.EventCreated:
			h.Created = e.Time
			if e.Spec != nil {
				h.Name = e.Spec.Name
			}
		case fsm.EventRestartIntent:
			h.Restarts = e.Attempt
		}
		if e.Reason != "" {
			h.Reason = e.Reason
		}
	}
	h.State = st.String()
	return h, nil
}

// matches reports whether e (the local log's event at h.Seq) is the event
// the mirror last wrote for the task: the same type at the same
// nanosecond. A state directory replaced under the node's name fails it.
func (h head) matches(e *fsm.Event) bool {
	return e.Seq == h.Seq && e.Type.String() == h.LastType && e.Time == h.Updated
}

func decodeHead(key string, b []byte) (head, error) {
	var h head
	if err := json.Unmarshal(b, &h); err != nil {
		return head{}, &CorruptError{Key: key, Err: err}
	}
	if _, err := fsm.ParseState(h.State); err != nil || h.Seq == 0 {
		return head{}, &CorruptError{Key: key, Err: fmt.Errorf("head with seq %d and state %q", h.Seq, h.State)}
	}
	return h, nil
}

// Holder is the value of a node's liveness key: who holds the node.
type Holder struct {
	Node    string `json:"node"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Dir     string `json:"dir"`
	Lease   int64  `json:"lease"`
	Started int64  `json:"started"`
}

// nodeStatus is the value of a node's status key, written by its agent
// at every StatusInterval and after each catch-up.
type nodeStatus struct {
	Node    string `json:"node"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	UpSince int64  `json:"up_since"`
	Seen    int64  `json:"seen"`
	// LagEvents and LagSeconds are the mirror's at Seen.
	LagEvents  uint64  `json:"mirror_lag_events"`
	LagSeconds float64 `json:"mirror_lag_seconds"`
	Mirrored   uint64  `json:"mirrored"`
}
