package store

import (
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// Errors returned when opening, compacting or closing a store.
var (
	// ErrLocked is returned by Open and Compact when another process holds
	// the store's file lock past Options.LockTimeout.
	ErrLocked = errors.New("store: locked")
	// ErrNotStore is returned by Open for a file that is not a tether store
	// or is damaged beyond opening (truncated, garbage, foreign buckets).
	ErrNotStore = errors.New("store: not a tether store or damaged")
	// ErrSchema is wrapped by SchemaError: the store's schema version is
	// not one this build understands.
	ErrSchema = errors.New("store: unknown schema version")
	// ErrUnsafePath is returned by Open and Compact for a store file (or
	// its lock file) that is a symbolic link or not a regular file.
	ErrUnsafePath = errors.New("store: unsafe path")
	// ErrClosed is returned by every operation on a closed store.
	ErrClosed = errors.New("store: closed")
	// ErrReadOnly is returned by Append and Remove on a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("store: read-only")
)

// Errors returned when appending events.
var (
	// ErrConflict is wrapped by ConflictError: the task's version is not the
	// one the caller expected (optimistic concurrency).
	ErrConflict = errors.New("store: version conflict")
	// ErrNoEvents is returned by Append when given no events.
	ErrNoEvents = errors.New("store: no events to append")
	// ErrSequence is returned by Append for an event whose Seq is neither 0
	// nor the next sequence number.
	ErrSequence = errors.New("store: event out of sequence")
	// ErrTaskID is returned for an empty or oversized task id.
	ErrTaskID = errors.New("store: invalid task id")
	// ErrTooLarge is wrapped by SizeError: an event whose record would be
	// larger than the store accepts (1 MiB).
	ErrTooLarge = errors.New("store: record too large")
	// ErrWrite is wrapped around failures to write or sync the file (disk
	// full, I/O error); the message names the file.
	ErrWrite = errors.New("store: write failed")
)

// Errors returned when reading events.
var (
	// ErrUnknownTask is returned for a task the store does not hold.
	ErrUnknownTask = errors.New("store: unknown task")
	// ErrCorrupt is wrapped by CorruptError and by every error that reports
	// damaged data: a bad checksum, a truncated record, an unknown event
	// type, an illegal walk on disk, or a bbolt panic on a damaged file.
	// It is a category distinct from ordinary failures: stop and say where.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrVersion is wrapped by VersionError: a record was written by a newer
	// record schema than this build understands.
	ErrVersion = errors.New("store: unknown record version")
)

// ConflictError reports an Append whose expected version did not match the
// task's current version.
type ConflictError struct {
	Task     string
	Expected uint64
	Actual   uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("store: task %q: version conflict: expected %d, store has %d", e.Task, e.Expected, e.Actual)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// SizeError reports an event Append refused because its record would be
// larger than Limit bytes. Nothing of that Append is written.
type SizeError struct {
	Task  string
	Seq   uint64
	Type  fsm.EventType
	Size  int
	Limit int
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("store: task %q seq %d: the %s event is %d bytes, more than the %d one record may hold: shorten its arguments or environment",
		e.Task, e.Seq, e.Type, e.Size, e.Limit)
}

func (e *SizeError) Unwrap() error { return ErrTooLarge }

// CorruptError reports a damaged record (or head) of a task. Seq is the
// sequence number of the record (0 for the task's head or the task as a
// whole).
type CorruptError struct {
	Task   string
	Seq    uint64
	Reason string
	// Err is the underlying cause, if any (an fsm.TransitionError for an
	// illegal walk on disk).
	Err error
}

func (e *CorruptError) Error() string {
	s := fmt.Sprintf("store: corrupt: task %q seq %d: %s", e.Task, e.Seq, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrCorrupt and the cause, so that errors.Is matches both.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// VersionError reports a record written with a record schema version this
// build does not understand. It is refused, never guessed at.
type VersionError struct {
	Task    string
	Seq     uint64
	Version uint8
	Known   uint8
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("store: task %q seq %d: record version %d is newer than this tether understands (%d): upgrade tether",
		e.Task, e.Seq, e.Version, e.Known)
}

func (e *VersionError) Unwrap() error { return ErrVersion }

// SchemaError reports a store whose schema version (in its meta bucket) this
// build does not understand.
type SchemaError struct {
	Path  string
	Found uint32
	Known uint32
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("store: %s: schema version %d, this tether understands up to %d: use a matching tether or move the file aside",
		e.Path, e.Found, e.Known)
}

func (e *SchemaError) Unwrap() error { return ErrSchema }
