package cluster

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of configuration and trust.
var (
	// ErrInvalidNode: a node name that is not 1 to 63 of [A-Za-z0-9_.-]
	// starting with a letter or digit (the task id rule).
	ErrInvalidNode = errors.New("cluster: invalid node name")
	// ErrInvalidName: a desired task's name, which names its key, breaks
	// the task id rule.
	ErrInvalidName = errors.New("cluster: invalid desired task name")
	// ErrInvalidPrefix: a key prefix that does not start and end with '/'.
	ErrInvalidPrefix = errors.New("cluster: invalid key prefix")
	// ErrInsecure: plaintext (or TLS without a client certificate) to an
	// endpoint that is not on this machine's loopback.
	ErrInsecure = errors.New("cluster: refusing an insecure connection to etcd")
	// ErrTLSConfig: the CA, certificate or key given for etcd is missing,
	// unreadable, unsafe or does not parse.
	ErrTLSConfig = errors.New("cluster: unusable TLS configuration")
	// ErrEndpoint: an endpoint URL that does not parse or has a scheme
	// other than http, https or unix.
	ErrEndpoint = errors.New("cluster: invalid etcd endpoint")
)

// Errors of a node's registration and writes.
var (
	// ErrNodeHeld: another agent holds the node's liveness key. The
	// *NodeHeldError names it.
	ErrNodeHeld = errors.New("cluster: node is held by another agent")
	// ErrFenced: this agent's lease no longer holds the node's liveness
	// key, so its writes were refused; it registers again.
	ErrFenced = errors.New("cluster: writes fenced: the node's lease is not ours")
	// ErrUnavailable: etcd did not answer in time.
	ErrUnavailable = errors.New("cluster: etcd unavailable")
	// ErrDiverged: the mirror holds events the local log does not (the
	// state directory was replaced under the node's name). The mirror is
	// rewritten from the local log, which is the truth.
	ErrDiverged = errors.New("cluster: mirror diverged from the local log")
	// ErrPlacementGone: a verdict about a placement (or a desired key's
	// revision) that is no longer the node's; nothing was written.
	ErrPlacementGone = errors.New("cluster: the placement the verdict is about is gone")
	// ErrTooLarge: one event is larger than a transaction may carry.
	ErrTooLarge = errors.New("cluster: event too large for one etcd transaction")
)

// Errors of the desired state.
var (
	// ErrInvalidSpec: a desired spec that is not a task file this package
	// can accept (too large, not UTF-8, a NUL byte, not HCL syntax), or
	// (ParseDesired) whose task does not parse, cannot run, or breaks a
	// rule of a spec.
	ErrInvalidSpec = errors.New("cluster: invalid desired spec")
	// ErrRelativePath: a relative path in a desired spec, which has no
	// directory to resolve it against.
	ErrRelativePath = errors.New("cluster: relative path in a desired spec")
	// ErrDesiredExists: start of a name that is already desired on the
	// node, without replace.
	ErrDesiredExists = errors.New("cluster: task already desired on the node")
	// ErrNotDesired: stop of a task that the node was not told to run
	// through etcd.
	ErrNotDesired = errors.New("cluster: task is not desired on the node")
	// ErrLocalCopy: the local copy of the desired state is damaged or
	// unsafe; it is not used.
	ErrLocalCopy = errors.New("cluster: unusable local copy of the desired state")
)

// Errors of placed jobs and of the scheduler.
var (
	// ErrInvalidJob: a job file the fleet cannot place: it does not parse
	// with its inputs, has no group tether runs, asks for what tether's
	// scheduler does not do (named), or breaks a bound (MaxJobCopies,
	// MaxSpecBytes).
	ErrInvalidJob = errors.New("cluster: job cannot be placed")
	// ErrUnknownJob: no job of that name was ever run in the fleet.
	ErrUnknownJob = errors.New("cluster: unknown job")
	// ErrJobChanged: the job was changed by another writer between the
	// read and the write of a run or stop; nothing was written.
	ErrJobChanged = errors.New("cluster: job changed concurrently")
	// ErrNotLeader: a scheduler's write was refused because its
	// leadership (its election key under its node's lease) is gone: a
	// deposed scheduler writes nothing.
	ErrNotLeader = errors.New("cluster: not the fleet's scheduler")
	// ErrNotPlaced: copies of a job that no node can hold; the
	// *NotPlacedError says why for each.
	ErrNotPlaced = errors.New("cluster: copies not placed")
	// ErrRefused: every etcd endpoint refused the connection (nothing
	// listens there): a command fails at once rather than waiting out
	// its timeout.
	ErrRefused = errors.New("cluster: etcd refused the connection")
)

// Errors of the fleet's queries.
var (
	// ErrUnknownTask: no mirrored task has this id or name.
	ErrUnknownTask = errors.New("cluster: unknown task")
	// ErrAmbiguous: a name that resolves to several tasks; the
	// *AmbiguousError lists them.
	ErrAmbiguous = errors.New("cluster: ambiguous task name")
	// ErrUnknownNode: a node that etcd has never heard of.
	ErrUnknownNode = errors.New("cluster: unknown node")
	// ErrCorrupt: a mirrored record that does not decode; the
	// *CorruptError names its key.
	ErrCorrupt = errors.New("cluster: corrupt mirrored record")
)

// NodeHeldError is ErrNodeHeld with the holder's registration.
type NodeHeldError struct {
	Node   string
	Holder Holder
}

func (e *NodeHeldError) Error() string {
	h := e.Holder
	return fmt.Sprintf("cluster: node %q is held by another agent (pid %d on host %q, state directory %q, registered %s, lease %x): "+
		"stop that agent, or give this one another --node name",
		e.Node, h.PID, h.Host, h.Dir, time.Unix(0, h.Started).UTC().Format(time.RFC3339), h.Lease)
}

func (e *NodeHeldError) Unwrap() error { return ErrNodeHeld }

// AmbiguousError is ErrAmbiguous with the candidates.
type AmbiguousError struct {
	Ref        string
	Candidates []TaskRef
}

func (e *AmbiguousError) Error() string {
	var parts []string
	for _, c := range e.Candidates {
		parts = append(parts, fmt.Sprintf("%s on %s (%s)", c.ID, c.Node, c.State))
	}
	return fmt.Sprintf("cluster: ambiguous task name %q: %d tasks: %s; use --node or an id", e.Ref, len(e.Candidates), strings.Join(parts, ", "))
}

func (e *AmbiguousError) Unwrap() error { return ErrAmbiguous }

// CorruptError is ErrCorrupt naming the key that did not decode.
type CorruptError struct {
	Key string
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("cluster: corrupt mirrored record at key %q: %v", e.Key, e.Err)
}

func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// NotPlacedError is ErrNotPlaced with the copies and why each is not
// placed (as the scheduler last said, eval/JOB).
type NotPlacedError struct {
	Job    string
	Copies []Unplaced
}

func (e *NotPlacedError) Error() string {
	var parts []string
	for _, u := range e.Copies {
		parts = append(parts, fmt.Sprintf("%s: %s", u.Copy, u.Reason))
	}
	return fmt.Sprintf("cluster: job %q: %d copies not placed: %s", e.Job, len(e.Copies), strings.Join(parts, "; "))
}

func (e *NotPlacedError) Unwrap() error { return ErrNotPlaced }
