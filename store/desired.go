package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Desired state.
//
// The agent (package agent) keeps running what an operator declared: the
// task and job files of its --config-dir, the files registered with
// `tether enable`, a node's desired state from etcd. What it must remember
// across any crash about each of them is kept here, one record per
// desired entry, in the top-level bucket "desired", keyed by the entry's
// name (a job's name, or the task or group a selection named):
//
//   - for an enabled entry (and one from etcd), the file's text and the
//     inputs it was read with (-var, -var-file, NOMAD_VAR_, dispatch meta,
//     the selection): the registration, which survives anything the store
//     survives; a config dir's file is read again from the dir;
//   - the digest of the declaration its allocations were made from (a
//     declaration of another digest replaces them);
//   - its allocations, each with its id and the ids of its current copy's
//     tasks, written before the copy is created (as a spawn intent is: a new
//     agent finds the creation it must finish, or the tasks it must adopt,
//     and never creates a second copy), with the copy's generation, when
//     it is due, what made it, and the restarts and reschedules so far;
//   - why it stands as it does (refused, given up), and a disable in
//     progress (the record goes once its tasks are stopped).
//
// They are records rather than events: an entry has no lifecycle of its
// own that a table could check (each of its tasks has its own log, which
// holds the lifecycle, and each copy's decisions are in its tasks'
// specs); what the agent needs is the latest decision, read whole at every
// convergence. Each record carries a revision, and ChangeDesired takes the
// revision a change replaces (optimistic concurrency, as Append's expected
// version).
//
// Record layout (like the event records: checksummed, versioned,
// canonical):
//
//	[0:4]  CRC32C (Castagnoli, little endian) of bytes [4:]
//	[4]    desired record version (2; version 1 is read and upcast)
//	[5:]   body:
//	       name     string (equal to the record's key)
//	       source   byte (DesiredSource, not 0)
//	       rev      uvarint (not 0)
//	       fields   uvarint bit set of the optional parts that follow
//	       file     string
//	       text     string (the file's text)
//	       inputs   vars (map), var files (a count, then name and text
//	                each), env (map), meta (map), task, group (strings)
//	       digest   string
//	       allocs   a count, then each: group string, index uvarint, id
//	                string, tasks (list), generation uvarint, not-before
//	                varint, kind string, restarts uvarint, reschedules
//	                uvarint
//	       reason   string
//	       spec     (version 1's registration, kept: the event records'
//	                spec form, with dSpecExt its optional parts)
//	       task     string (version 1's task, until it ends)
//
// disabled and retiring are field bits with no bytes.
//
// Version 1 held one task per record: the registration's spec, the task
// started for it, a restart count and the task it settled on. It is read
// and upcast: its spec stays the registration (run as a file of one task
// would be), its task is adopted until it ends, its settling is dropped
// (an entry settled by version 1 is started again once its task has
// ended... unless it was stopped on request, which its task's state says).
//
// An optional part is present exactly when its value is not the zero
// value.
//
// A store gets the bucket with its first record, and its schema version
// becomes 2 in the same commit: a tether that predates registrations
// refuses the store with a SchemaError naming both versions rather than
// dropping them (a store without registrations stays at version 1).

// DesiredSource says where a desired entry was declared.
type DesiredSource uint8

const (
	// SourceNone is the zero value: no source (invalid in a record).
	SourceNone DesiredSource = iota
	// SourceDir: a file of the agent's --config-dir, or of a feed (a
	// node's desired state from etcd, whose file is a name such as
	// "etcd:/tether/desired/n1/web"). The config dir's file is the truth:
	// the record keeps its text only for a feed's.
	SourceDir
	// SourceEnabled: registered with `tether enable`; the record keeps the
	// file's text and inputs.
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

// Desired is one desired entry: what the agent remembers of it.
type Desired struct {
	// Name is the entry's name, the record's key.
	Name   string
	Source DesiredSource
	// File is the file it was read from (absolute, or a feed's name).
	File string
	// Text and Inputs are the file's text and what it was read with (an
	// enable's, a feed's); nil for a config dir's file, read again from
	// the dir.
	Text   []byte
	Inputs DesiredInputs
	// Digest is the digest of the declaration its allocations were made
	// from (job.Digest): a declaration of another digest replaces them.
	Digest string
	// Allocs are its allocations, each with its current copy (written
	// before the copy's tasks are created). Empty before the first.
	Allocs []DesiredAlloc
	// Reason says why it stands as it does, when something keeps it from
	// running (refused: the error; given up: the reason).
	Reason string
	// Disabled: `tether disable` asked for it to go. Its tasks are
	// stopped, then the record is removed.
	Disabled bool
	// Retiring: its declaration changed or went, and the agent is
	// stopping its copies (marked before the first stop): a copy stopped
	// while it is set was stopped for that, never on request, and new
	// allocations follow if it is declared once they are stopped.
	Retiring bool
	// Spec and Task are a version-1 record's: the registration's spec of
	// one task (run as a file of that one task would be), and the task
	// started for it, adopted until it ends.
	Spec *fsm.Spec
	Task string
	// Rev is the record's revision (from 1), raised by every change.
	Rev uint64
}

// DesiredInputs are what a file was read with (job.Inputs as the store
// keeps them).
type DesiredInputs struct {
	Vars     map[string]string
	VarFiles []NamedText
	Env      map[string]string
	Meta     map[string]string
	Task     string
	Group    string
}

// NamedText is a file's name and text (a -var-file).
type NamedText struct {
	Name string
	Text []byte
}

// IsZero reports whether in holds nothing.
func (in DesiredInputs) IsZero() bool {
	return len(in.Vars)+len(in.VarFiles)+len(in.Env)+len(in.Meta) == 0 && in.Task == "" && in.Group == ""
}

// DesiredAlloc is an allocation of a desired entry: a copy of one group
// of its file, and the copy of it that runs now (or is due).
type DesiredAlloc struct {
	// Group and Index say which copy of which group it is.
	Group string
	Index int
	// ID is the allocation's id; Tasks the ids of its current copy's
	// tasks, in start order (written before they are created).
	ID    string
	Tasks []string
	// Generation is the current copy's number (fsm.Alloc.Generation),
	// NotBefore when it is due (Unix ns; 0: at once), Kind what made it
	// (restart, reschedule, again; "" for the first).
	Generation int
	NotBefore  int64
	Kind       string
	// Restarts and Reschedules count the copies made so far of each kind.
	Restarts    int
	Reschedules int
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

// Desired record versions: version 1 (one task per record) is read and
// upcast; version 2 is written.
const (
	desiredRecordV1      = 1
	desiredRecordVersion = 2
)

// Field bits of a version-2 desired record.
const (
	dFile = 1 << iota
	dText
	dInputs
	dDigest
	dAllocs
	dReason
	dDisabled
	dSpec
	dSpecExt
	dTask
	dRetiring

	dAll = dRetiring<<1 - 1
)

// Field bits of a version-1 desired record.
const (
	d1File = 1 << iota
	d1Spec
	d1SpecExt
	d1Task
	d1NotBefore
	d1Restart
	d1Settled
	d1Reason
	d1Disabled

	d1All = d1Disabled<<1 - 1
)

// maxDesiredName bounds the key, as maxTaskID bounds a task id.
const maxDesiredName = maxTaskID

// MaxDesiredText bounds the file text a record keeps.
const MaxDesiredText = 4 << 20

// encodeDesired is the record form of d.
func encodeDesired(d *Desired) []byte {
	dst := make([]byte, 0, 64+len(d.File)+len(d.Text))
	dst = append(dst, 0, 0, 0, 0, desiredRecordVersion)
	dst = appendString(dst, d.Name)
	dst = append(dst, byte(d.Source))
	dst = binary.AppendUvarint(dst, d.Rev)
	var f uint64
	for _, b := range []struct {
		bit uint64
		set bool
	}{{dFile, d.File != ""}, {dText, len(d.Text) > 0}, {dInputs, !d.Inputs.IsZero()}, {dDigest, d.Digest != ""},
		{dAllocs, len(d.Allocs) > 0}, {dReason, d.Reason != ""}, {dDisabled, d.Disabled}, {dSpec, d.Spec != nil},
		{dSpecExt, d.Spec != nil && specExtOf(d.Spec) != 0}, {dTask, d.Task != ""}, {dRetiring, d.Retiring}} {
		if b.set {
			f |= b.bit
		}
	}
	dst = binary.AppendUvarint(dst, f)
	if f&dFile != 0 {
		dst = appendString(dst, d.File)
	}
	if f&dText != 0 {
		dst = appendString(dst, string(d.Text))
	}
	if f&dInputs != 0 {
		in := &d.Inputs
		dst = appendMap(dst, in.Vars)
		dst = binary.AppendUvarint(dst, uint64(len(in.VarFiles)))
		for _, v := range in.VarFiles {
			dst = appendString(dst, v.Name)
			dst = appendString(dst, string(v.Text))
		}
		dst = appendMap(dst, in.Env)
		dst = appendMap(dst, in.Meta)
		dst = appendString(dst, in.Task)
		dst = appendString(dst, in.Group)
	}
	if f&dDigest != 0 {
		dst = appendString(dst, d.Digest)
	}
	if f&dAllocs != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(d.Allocs)))
		for _, a := range d.Allocs {
			dst = appendString(dst, a.Group)
			dst = binary.AppendUvarint(dst, uint64(a.Index))
			dst = appendString(dst, a.ID)
			dst = appendList(dst, a.Tasks)
			dst = binary.AppendUvarint(dst, uint64(a.Generation))
			dst = binary.AppendVarint(dst, a.NotBefore)
			dst = appendString(dst, a.Kind)
			dst = binary.AppendUvarint(dst, uint64(a.Restarts))
			dst = binary.AppendUvarint(dst, uint64(a.Reschedules))
		}
	}
	if f&dReason != 0 {
		dst = appendString(dst, d.Reason)
	}
	if d.Spec != nil {
		dst = appendSpec(dst, d.Spec, f&dSpecExt != 0)
	}
	if f&dTask != 0 {
		dst = appendString(dst, d.Task)
	}
	binary.LittleEndian.PutUint32(dst, checksum(dst))
	return dst
}

// decodeDesired decodes a desired record of either version (version 1
// upcast). It never panics; the reason says what is wrong with a record
// that does not decode (a newer version is refused, never guessed at).
func decodeDesired(rec []byte) (Desired, string) {
	var d Desired
	if len(rec) < 5 {
		return d, "truncated record header"
	}
	if binary.LittleEndian.Uint32(rec) != checksum(rec) {
		return d, "checksum mismatch"
	}
	switch v := rec[4]; v {
	case desiredRecordV1:
		return decodeDesiredV1(rec)
	case desiredRecordVersion:
	default:
		return d, fmt.Sprintf("desired record version %d: this tether understands %d and %d", v, desiredRecordV1, desiredRecordVersion)
	}
	r := decoder{b: rec[5:]}
	d.Name, d.Source, d.Rev = r.desiredHeader()
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
	if f&dText != 0 {
		d.Text = []byte(r.nonEmpty())
	}
	if r.err == "" && f&dInputs != 0 {
		in := &d.Inputs
		in.Vars = r.strMap()
		if n := r.count(2); n > 0 {
			in.VarFiles = make([]NamedText, n)
			for i := 0; r.err == "" && i < n; i++ {
				in.VarFiles[i] = NamedText{Name: r.str(), Text: []byte(r.str())}
			}
		}
		in.Env, in.Meta = r.strMap(), r.strMap()
		in.Task, in.Group = r.str(), r.str()
		if r.err == "" && in.IsZero() {
			r.fail("zero value for a present field")
		}
	}
	if f&dDigest != 0 {
		d.Digest = r.nonEmpty()
	}
	if r.err == "" && f&dAllocs != 0 {
		n := r.count(9)
		if n == 0 {
			r.fail("zero value for a present field")
		}
		d.Allocs = make([]DesiredAlloc, n)
		for i := 0; r.err == "" && i < n; i++ {
			a := &d.Allocs[i]
			a.Group, a.Index, a.ID, a.Tasks = r.str(), r.restartCount(), r.nonEmpty(), r.list()
			a.Generation, a.NotBefore, a.Kind = r.restartCount(), r.varint(), r.str()
			a.Restarts, a.Reschedules = r.restartCount(), r.restartCount()
		}
	}
	if f&dReason != 0 {
		d.Reason = r.nonEmpty()
	}
	d.Disabled, d.Retiring = f&dDisabled != 0, f&dRetiring != 0
	if r.err == "" && f&dSpec != 0 {
		d.Spec = r.spec(f&dSpecExt != 0)
	}
	if f&dTask != 0 {
		d.Task = r.nonEmpty()
	}
	if r.err == "" && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != "" {
		return Desired{}, r.err
	}
	return d, ""
}

// desiredHeader reads a desired record's name, source and revision.
func (d *decoder) desiredHeader() (string, DesiredSource, uint64) {
	name := d.nonEmpty()
	var src DesiredSource
	if len(d.b) < 1 {
		d.fail("truncated source")
	} else {
		src = DesiredSource(d.b[0])
		d.b = d.b[1:]
		if !src.Valid() {
			d.fail("invalid source")
		}
	}
	rev := d.uvarint()
	if rev == 0 && d.err == "" {
		d.fail("revision 0")
	}
	return name, src, rev
}

// decodeDesiredV1 decodes a version-1 record and upcasts it: its spec is
// the registration, its task adopted; its restart count, due time and
// settling are dropped (they were the one task's).
func decodeDesiredV1(rec []byte) (Desired, string) {
	var d Desired
	r := decoder{b: rec[5:]}
	d.Name, d.Source, d.Rev = r.desiredHeader()
	f := r.uvarint()
	switch {
	case f&^d1All != 0:
		r.fail("unknown field bits")
	case f&d1SpecExt != 0 && f&d1Spec == 0:
		r.fail("field bits without their part")
	}
	if f&d1File != 0 {
		d.File = r.nonEmpty()
	}
	if r.err == "" && f&d1Spec != 0 {
		d.Spec = r.spec(f&d1SpecExt != 0)
	}
	if f&d1Task != 0 {
		d.Task = r.nonEmpty()
	}
	if f&d1NotBefore != 0 {
		if r.varint() == 0 {
			r.fail("zero value for a present field")
		}
	}
	if f&d1Restart != 0 {
		if (fsm.RestartState{WindowStart: r.varint(), Count: r.restartCount(), Attempts: r.restartCount()}) == (fsm.RestartState{}) {
			r.fail("zero value for a present field")
		}
	}
	if f&d1Settled != 0 {
		r.nonEmpty()
	}
	if f&d1Reason != 0 {
		d.Reason = r.nonEmpty()
	}
	d.Disabled = f&d1Disabled != 0
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
		return fmt.Errorf("store: desired entry %q: invalid source %d", d.Name, d.Source)
	case len(d.Text) > MaxDesiredText:
		return fmt.Errorf("%w: desired entry %q: a file of %d bytes (at most %d)", ErrTooLarge, d.Name, len(d.Text), MaxDesiredText)
	}
	for _, a := range d.Allocs {
		if a.ID == "" || a.Index < 0 || a.Generation < 0 || a.Restarts < 0 || a.Reschedules < 0 ||
			a.Index > maxRestarts || a.Generation > maxRestarts || a.Restarts > maxRestarts || a.Reschedules > maxRestarts {
			return fmt.Errorf("store: desired entry %q: allocation %q: a count out of range or no id", d.Name, a.ID)
		}
	}
	if d.Spec != nil {
		if err := d.Spec.Validate(); err != nil {
			return fmt.Errorf("store: desired entry %q: %w", d.Name, err)
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
			d := cloneDesired(c.Desired)
			d.Rev = rev + 1
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

// cloneDesired is a deep copy of a record, so that a record written is
// not changed under the store by its caller.
func cloneDesired(d Desired) Desired {
	d.Text = slices.Clone(d.Text)
	d.Inputs.Vars, d.Inputs.Env, d.Inputs.Meta = maps.Clone(d.Inputs.Vars), maps.Clone(d.Inputs.Env), maps.Clone(d.Inputs.Meta)
	d.Inputs.VarFiles = slices.Clone(d.Inputs.VarFiles)
	d.Allocs = slices.Clone(d.Allocs)
	for i := range d.Allocs {
		d.Allocs[i].Tasks = slices.Clone(d.Allocs[i].Tasks)
	}
	if d.Spec != nil {
		d.Spec = cloneSpec(d.Spec)
	}
	return d
}

// cloneSpec is a deep copy of a spec.
func cloneSpec(s *fsm.Spec) *fsm.Spec {
	c := *s
	c.Args = slices.Clone(s.Args)
	c.CapAdd = slices.Clone(s.CapAdd)
	c.CapDrop = slices.Clone(s.CapDrop)
	c.Env = maps.Clone(s.Env)
	if s.Restart != nil {
		r := *s.Restart
		c.Restart = &r
	}
	if s.OOMScoreAdj != nil {
		a := *s.OOMScoreAdj
		c.OOMScoreAdj = &a
	}
	c.Alloc = s.Alloc.Copy()
	return &c
}

// desiredTasks returns the set of tasks the desired records name as their
// allocations' current copies, for Remove to keep (an entry whose copy is
// gone is a creation the agent still owes: removing a stopped one would
// start it again).
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
		for _, a := range d.Allocs {
			for _, id := range a.Tasks {
				keep[id] = true
			}
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
