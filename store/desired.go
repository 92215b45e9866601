package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Desired state.
//
// The agent (package agent) keeps tasks running that an operator declared:
// the task files of its --config-dir and the tasks registered with `tether
// enable`. What it must remember across any crash about each of them is
// kept here, one record per desired task, in the top-level bucket
// "desired", keyed by the task's name:
//
//   - for an enabled task, the spec itself (the registration: it survives
//     anything the store survives);
//   - the task it started for it last (written before the start, as a
//     spawn intent is: a new agent finds the start it must finish, or the
//     task it must adopt, and never starts a second one);
//   - the restart policy's count of the restarts it made, and when the next
//     start is due (written ahead, as the executor journals its restarts);
//   - the task after whose end it stopped restarting (the policy gave up,
//     or the task was stopped on request), and why;
//   - a disable in progress (the record goes once its task is stopped).
//
// They are records rather than events: a desired task has no lifecycle of
// its own that a table could check (each of its runs is a task with its own
// log, which holds the lifecycle); what the agent needs is the latest
// decision, read whole at every convergence, and a log of decisions would
// be folded to exactly that on every read. Each record carries a revision,
// and ChangeDesired takes the revision a change replaces (optimistic
// concurrency, as Append's expected version).
//
// Record layout (like the event records: checksummed, versioned,
// canonical):
//
//	[0:4]  CRC32C (Castagnoli, little endian) of bytes [4:]
//	[4]    desired record version (1)
//	[5:]   body:
//	       name     string (equal to the record's key)
//	       source   byte (DesiredSource, not 0)
//	       rev      uvarint (not 0)
//	       fields   uvarint bit set of the optional parts that follow
//	       file     string
//	       spec     the event records' spec form (dSpecExt: with its
//	                optional parts)
//	       task     string
//	       notbefore varint (Unix ns)
//	       restart  window start varint, count uvarint, attempts uvarint
//	       settled  string; reason string
//
// An optional part is present exactly when its value is not the zero
// value; disabled is a field bit with no bytes.
//
// A store gets the bucket with its first record, and its schema version
// becomes 2 in the same commit: a tether that predates registrations
// refuses the store with a SchemaError naming both versions rather than
// dropping them (a store without registrations stays at version 1).

// DesiredSource says where a desired task was declared.
type DesiredSource uint8

const (
	// SourceNone is the zero value: no source (invalid in a record).
	SourceNone DesiredSource = iota
	// SourceDir: a task file in the agent's --config-dir. The file is the
	// truth: the record keeps no spec.
	SourceDir
	// SourceEnabled: registered with `tether enable`; the record keeps the
	// spec.
	SourceEnabled

	numSources
)

var sourceNames = [numSources]string{SourceNone: "none", SourceDir: "config-dir", SourceEnabled: "enabled"}

func (s DesiredSource) String() string {
	if s < numSources {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Valid reports whether s is a declared source (not SourceNone).
func (s DesiredSource) Valid() bool { return s > SourceNone && s < numSources }

// Desired is one desired task: what the agent remembers of it.
type Desired struct {
	// Name is the task's name (its spec's), the record's key.
	Name   string
	Source DesiredSource
	// File is the task file it was read from (absolute).
	File string
	// Spec is what runs, for SourceEnabled; nil for SourceDir (the file
	// says).
	Spec *fsm.Spec
	// Task is the id of the task started for it last, or about to be: it
	// is written before the start, and a task the store does not hold yet
	// is a start still owed. Empty before the first.
	Task string
	// NotBefore is when the start of Task is due (Unix ns): a restart's
	// delay, written ahead.
	NotBefore int64
	// Restart is the restart policy's state over the tasks the agent
	// started for it (the executor counts the restarts within one task).
	Restart fsm.RestartState
	// Settled is the task after whose end the agent stopped restarting,
	// with Reason saying why (the policy gave up; stopped on request). It
	// is started again only when its declaration changes or it is started
	// or enabled again.
	Settled string
	Reason  string
	// Disabled: `tether disable` asked for it to go. Its task is stopped,
	// then the record is removed.
	Disabled bool
	// Rev is the record's revision (from 1), raised by every change.
	Rev uint64
}

// DesiredChange is one change of ChangeDesired: Desired written (Delete
// false) or the record named Desired.Name removed (Delete true), either
// only if the record's revision is Desired.Rev (0: no record).
type DesiredChange struct {
	Desired Desired
	Delete  bool
}

var bucketDesired = []byte("desired")

// Schema versions: 1 without desired state, 2 with it.
const (
	schemaNoDesired = 1
	schemaDesired   = 2
)

const desiredRecordVersion = 1

// Field bits of a desired record.
const (
	dFile = 1 << iota
	dSpec
	dSpecExt
	dTask
	dNotBefore
	dRestart
	dSettled
	dReason
	dDisabled

	dAll = dDisabled<<1 - 1
)

// maxDesiredName bounds the key, as maxTaskID bounds a task id.
const maxDesiredName = maxTaskID

// encodeDesired is the record form of d.
func encodeDesired(d *Desired) []byte {
	dst := make([]byte, 0, 64+len(d.File))
	dst = append(dst, 0, 0, 0, 0, desiredRecordVersion)
	dst = appendString(dst, d.Name)
	dst = append(dst, byte(d.Source))
	dst = binary.AppendUvarint(dst, d.Rev)
	var f uint64
	if d.File != "" {
		f |= dFile
	}
	if d.Spec != nil {
		f |= dSpec
		if specExtOf(d.Spec) != 0 {
			f |= dSpecExt
		}
	}
	if d.Task != "" {
		f |= dTask
	}
	if d.NotBefore != 0 {
		f |= dNotBefore
	}
	if d.Restart != (fsm.RestartState{}) {
		f |= dRestart
	}
	if d.Settled != "" {
		f |= dSettled
	}
	if d.Reason != "" {
		f |= dReason
	}
	if d.Disabled {
		f |= dDisabled
	}
	dst = binary.AppendUvarint(dst, f)
	if f&dFile != 0 {
		dst = appendString(dst, d.File)
	}
	if d.Spec != nil {
		dst = appendSpec(dst, d.Spec, f&dSpecExt != 0)
	}
	if f&dTask != 0 {
		dst = appendString(dst, d.Task)
	}
	if f&dNotBefore != 0 {
		dst = binary.AppendVarint(dst, d.NotBefore)
	}
	if f&dRestart != 0 {
		dst = binary.AppendVarint(dst, d.Restart.WindowStart)
		dst = binary.AppendUvarint(dst, uint64(d.Restart.Count))
		dst = binary.AppendUvarint(dst, uint64(d.Restart.Attempts))
	}
	if f&dSettled != 0 {
		dst = appendString(dst, d.Settled)
	}
	if f&dReason != 0 {
		dst = appendString(dst, d.Reason)
	}
	binary.LittleEndian.PutUint32(dst, checksum(dst))
	return dst
}

// decodeDesired decodes a desired record. It never panics; the reason says
// what is wrong with a record that does not decode (a newer version is
// refused, never guessed at).
func decodeDesired(rec []byte) (Desired, string) {
	var d Desired
	if len(rec) < 5 {
		return d, "truncated record header"
	}
	if binary.LittleEndian.Uint32(rec) != checksum(rec) {
		return d, "checksum mismatch"
	}
	if v := rec[4]; v != desiredRecordVersion {
		return d, fmt.Sprintf("desired record version %d: this tether understands %d", v, desiredRecordVersion)
	}
	r := decoder{b: rec[5:]}
	d.Name = r.nonEmpty()
	if len(r.b) < 1 {
		r.fail("truncated source")
	} else {
		d.Source = DesiredSource(r.b[0])
		r.b = r.b[1:]
		if !d.Source.Valid() {
			r.fail("invalid source")
		}
	}
	if d.Rev = r.uvarint(); d.Rev == 0 && r.err == "" {
		r.fail("revision 0")
	}
	f := r.uvarint()
	switch {
	case f&^dAll != 0:
		r.fail("unknown field bits")
	case f&dSpecExt != 0 && f&dSpec == 0:
		r.fail("field bits without their part")
	}
	if f&dFile != 0 {
		d.File = r.nonEmpty()
	}
	if r.err == "" && f&dSpec != 0 {
		d.Spec = r.spec(f&dSpecExt != 0)
	}
	if f&dTask != 0 {
		d.Task = r.nonEmpty()
	}
	if f&dNotBefore != 0 {
		if d.NotBefore = r.varint(); d.NotBefore == 0 {
			r.fail("zero value for a present field")
		}
	}
	if f&dRestart != 0 {
		d.Restart.WindowStart = r.varint()
		d.Restart.Count = r.restartCount()
		d.Restart.Attempts = r.restartCount()
		if d.Restart == (fsm.RestartState{}) {
			r.fail("zero value for a present field")
		}
	}
	if f&dSettled != 0 {
		d.Settled = r.nonEmpty()
	}
	if f&dReason != 0 {
		d.Reason = r.nonEmpty()
	}
	d.Disabled = f&dDisabled != 0
	if r.err == "" && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != "" {
		return Desired{}, r.err
	}
	return d, ""
}

// DesiredError reports a damaged desired record (corrupt, or of a newer
// version), naming its key.
type DesiredError struct {
	Name   string
	Reason string
}

func (e *DesiredError) Error() string {
	return fmt.Sprintf("store: corrupt: desired task %q: %s", e.Name, e.Reason)
}

func (e *DesiredError) Unwrap() error { return ErrCorrupt }

// DesiredConflictError reports a ChangeDesired whose expected revision of a
// record did not match the store's. Nothing of that ChangeDesired is
// written.
type DesiredConflictError struct {
	Name     string
	Expected uint64
	Actual   uint64
}

func (e *DesiredConflictError) Error() string {
	return fmt.Sprintf("store: desired task %q: revision conflict: expected %d, store has %d", e.Name, e.Expected, e.Actual)
}

func (e *DesiredConflictError) Unwrap() error { return ErrConflict }

// restartCount reads a restart count (a uvarint that fits an int32).
func (d *decoder) restartCount() int {
	n := d.uvarint()
	if n > uint64(maxRestarts) {
		d.fail("restart count out of range")
		return 0
	}
	return int(n)
}

func checkDesiredName(name string) error {
	if name == "" || len(name) > maxDesiredName {
		return fmt.Errorf("%w: desired task name %q (want 1 to %d bytes)", ErrTaskID, name, maxDesiredName)
	}
	return nil
}

// checkDesired refuses a record ChangeDesired cannot write.
func checkDesired(d *Desired) error {
	if err := checkDesiredName(d.Name); err != nil {
		return err
	}
	switch {
	case !d.Source.Valid():
		return fmt.Errorf("store: desired task %q: invalid source %d", d.Name, d.Source)
	case d.Restart.Count < 0 || d.Restart.Attempts < 0 || d.Restart.Count > maxRestarts || d.Restart.Attempts > maxRestarts:
		return fmt.Errorf("store: desired task %q: negative restart count", d.Name)
	}
	if d.Spec != nil {
		if err := d.Spec.Validate(); err != nil {
			return fmt.Errorf("store: desired task %q: %w", d.Name, err)
		}
	}
	return nil
}

// Desired returns every desired record, in name order. A damaged record
// gives a *DesiredError naming it (errors.Is ErrCorrupt): the agent must
// stop and say so rather than forget what it was told to run.
func (s *Store) Desired(ctx context.Context) ([]Desired, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Desired
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0]
		b := tx.Bucket(bucketDesired)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return &DesiredError{Name: string(k), Reason: "key is a bucket"}
			}
			d, why := decodeDesired(v)
			switch {
			case why != "":
				return &DesiredError{Name: string(k), Reason: why}
			case d.Name != string(k):
				return &DesiredError{Name: string(k), Reason: fmt.Sprintf("record names %q", d.Name)}
			}
			out = append(out, d)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ChangeDesired applies changes in one commit (all or nothing; synced
// unless Options.NoSync) and returns the records written, their revisions
// raised. Each change expects the record's current revision
// (Desired.Rev; 0 for no record): a mismatch gives a
// *DesiredConflictError and writes nothing. The first record written
// creates the desired bucket and raises the store's schema version to 2.
func (s *Store) ChangeDesired(ctx context.Context, changes ...DesiredChange) ([]Desired, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, fmt.Errorf("%w: %s", ErrReadOnly, s.path)
	}
	seen := map[string]bool{}
	for i := range changes {
		c := &changes[i]
		var err error
		if c.Delete {
			err = checkDesiredName(c.Desired.Name)
		} else {
			err = checkDesired(&c.Desired)
		}
		if err != nil {
			return nil, err
		}
		if seen[c.Desired.Name] {
			return nil, fmt.Errorf("store: desired task %q changed twice in one commit", c.Desired.Name)
		}
		seen[c.Desired.Name] = true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if broken := s.broken.Load(); broken != nil {
		return nil, *broken
	}
	var written []Desired
	err := updateSafe(s.db, s.path, func(tx *bolt.Tx) error {
		written = written[:0]
		b := tx.Bucket(bucketDesired)
		for _, c := range changes {
			key := []byte(c.Desired.Name)
			var rev uint64
			if b != nil {
				if v := b.Get(key); v != nil {
					old, why := decodeDesired(v)
					if why != "" {
						return &DesiredError{Name: c.Desired.Name, Reason: why}
					}
					rev = old.Rev
				}
			}
			if rev != c.Desired.Rev {
				return &DesiredConflictError{Name: c.Desired.Name, Expected: c.Desired.Rev, Actual: rev}
			}
			if c.Delete {
				if b != nil && rev != 0 {
					if err := b.Delete(key); err != nil {
						return fmt.Errorf("%w: %s: desired task %q: %w", ErrWrite, s.path, c.Desired.Name, err)
					}
				}
				continue
			}
			if b == nil {
				var err error
				if b, err = tx.CreateBucket(bucketDesired); err != nil {
					return fmt.Errorf("%w: %s: create the desired bucket: %w", ErrWrite, s.path, err)
				}
				if err := tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaDesired)); err != nil {
					return fmt.Errorf("%w: %s: raise the schema version: %w", ErrWrite, s.path, err)
				}
			}
			d := c.Desired
			d.Rev = rev + 1
			if d.Spec != nil {
				d.Spec = cloneSpec(d.Spec)
			}
			if err := b.Put(key, encodeDesired(&d)); err != nil {
				return fmt.Errorf("%w: %s: desired task %q: %w", ErrWrite, s.path, d.Name, err)
			}
			written = append(written, d)
		}
		return nil
	})
	if err != nil {
		var pe panicError
		if errors.As(err, &pe) {
			s.broken.CompareAndSwap(nil, &err)
			s.wedged.Store(s.wedged.Load() || pe.wedged)
		}
		return nil, err
	}
	return written, nil
}

// cloneSpec is a deep copy of a spec, so that a record written is not
// changed under the store by its caller.
func cloneSpec(s *fsm.Spec) *fsm.Spec {
	c := *s
	c.Args = slices.Clone(s.Args)
	c.CapAdd = slices.Clone(s.CapAdd)
	c.CapDrop = slices.Clone(s.CapDrop)
	if s.Env != nil {
		c.Env = make(map[string]string, len(s.Env))
		for k, v := range s.Env {
			c.Env[k] = v
		}
	}
	if s.Restart != nil {
		r := *s.Restart
		c.Restart = &r
	}
	if s.OOMScoreAdj != nil {
		a := *s.OOMScoreAdj
		c.OOMScoreAdj = &a
	}
	return &c
}

// desiredTasks returns the set of tasks the desired records name as their
// current task, for Remove to keep (a desired task whose task is gone is a
// start the agent still owes: removing a stopped one would start it
// again).
func desiredTasks(tx *bolt.Tx) (map[string]bool, error) {
	b := tx.Bucket(bucketDesired)
	if b == nil {
		return nil, nil
	}
	keep := map[string]bool{}
	err := b.ForEach(func(k, v []byte) error {
		d, why := decodeDesired(v)
		if why != "" {
			return &DesiredError{Name: string(k), Reason: why}
		}
		if d.Task != "" {
			keep[d.Task] = true
		}
		if d.Settled != "" {
			keep[d.Settled] = true
		}
		return nil
	})
	return keep, err
}

// SpecEqual reports whether two specs are the same task: their record
// forms (canonical: every field, nil and empty lists and maps alike) are
// equal. A nil spec equals only nil.
func SpecEqual(a, b *fsm.Spec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return string(appendSpec(nil, a, specExtOf(a) != 0)) == string(appendSpec(nil, b, specExtOf(b) != 0))
}
