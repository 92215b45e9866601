package store

import (
	"encoding/binary"
	"hash/crc32"
	"io/fs"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// Record layout (every version shares the 6-byte header):
//
//	[0:4]  CRC32C (Castagnoli, little endian) of bytes [4:]
//	[4]    record schema version (1 to 4; recordVersion is written)
//	[5]    event type (fsm.EventType)
//	[6:]   body
//
// Body, in order (the parts marked v2 are version 2's, v3 version 3's, v4
// version 4's; a
// record of an earlier version is the same form without the later parts,
// so it decodes by the same code with the later field bits refused, its
// new fields zero; then fsm.Event.Upgrade reads what the earlier version
// held in other fields: a restart-intent's delay in its grace, a launch's
// warnings in its reason, a failure's cause in its reason's text):
//
//	seq      uvarint (must equal the record's key)
//	time     8 bytes little endian (Unix ns, two's complement)
//	fields   uvarint bit set of the optional parts that follow
//	spec     name, driver, command, args, env, dir, user, cap_add,
//	         cap_drop, kill_signal, kill_timeout;
//	         v2 (fSpecExt): a uvarint bit set of the spec's optional
//	         parts, then those present: resources (memory, memory_max,
//	         cpu, cores, pids), oom_score_adj, logs (max_files,
//	         max_file_size, disabled), restart (attempts, interval, delay,
//	         mode, on_success), pid_mode, ipc_mode, job, group,
//	         network, seccomp; alloc (id, index, dir, task dir, tasks,
//	         hook, sidecar, leader), templates (a count, then each:
//	         source, data, destination, perms, a flag byte for uid, gid,
//	         env and error_on_missing_key, uid and gid when set,
//	         change_mode, change_signal, delimiters), artifacts (a count,
//	         then each: source, destination, mode, options, headers,
//	         chown), ports (a count, then each: label, value, to, ip, task),
//	         readiness (a string), watchdog (varint ns), check, and
//	         copy (with alloc: an allocation's copy: generation, due
//	         time, a presence byte then the reschedule policy (attempts,
//	         interval, delay, delay function, max delay, unlimited), a
//	         count then each past reschedule (at, delay), the restart
//	         count (window start, count, attempts)), and journald (no
//	         bytes: the logs block's journald = true)
//	nonce    string
//	executor pid, start_time, boot_id, nonce, socket; v2 (fCgroup): cgroup
//	task_pid varint; task_start uvarint
//	exit     code varint, signal varint (v2 fOOM: OOM set, no bytes)
//	signal   varint; grace varint
//	reason   string; target byte
//	attempt  v2: varint
//	delay    v3: varint (a restart-intent's delay)
//	cause    v3: byte (fsm.Cause, with a reason)
//	warnings v3: uvarint count, then a kind byte and a text string each
//	replaces v3: string (a task-created's Replaces)
//	replaced v3: string (a stop-requested's ReplacedBy)
//	recorded v4: varint (Unix ns: the append time, when later than time)
//	exit_at  v4: varint (Exit.At: when the task exited, Unix ns; with exit)
//	peak     v4: uvarint (Exit.PeakMemory, bytes; with exit)
//
// Strings are a uvarint length then bytes; lists a uvarint count then
// strings; env a uvarint count then key/value pairs in strictly increasing
// key order; booleans one byte, 0 or 1. Integers are minimal (u)varints. An
// optional part is present exactly when its value is not the zero value
// (a pointer: when it is not nil). The form is canonical: a record that
// decodes re-encodes to the same bytes (in its own version), which the
// fuzz test holds the decoder to.
const (
	recordVersion = 4
	headerLen     = 6
)

// Field bits of the record body.
const (
	fSpec = 1 << iota
	fNonce
	fExecutor
	fTaskPID
	fTaskStart
	fExit
	fSignal
	fGrace
	fReason
	fTarget
	fCgroup  // v2: Executor.Cgroup (with fExecutor)
	fOOM     // v2: Exit.OOM (with fExit)
	fAttempt // v2: Attempt
	fSpecExt // v2: the spec's optional parts (with fSpec)

	fDelay      // v3: Delay
	fCause      // v3: Cause
	fWarnings   // v3: Warnings
	fReplaces   // v3: Replaces
	fReplacedBy // v3: ReplacedBy

	fRecorded // v4: Recorded
	fExitAt   // v4: Exit.At (with fExit)
	fPeak     // v4: Exit.PeakMemory (with fExit)

	fAllV1 = fTarget<<1 - 1
	fAllV2 = fSpecExt<<1 - 1
	fAllV3 = fReplacedBy<<1 - 1
	fAllV4 = fPeak<<1 - 1
)

// Bits of a version-2 spec's optional parts.
const (
	sxResources = 1 << iota
	sxOOMScoreAdj
	sxLogs
	sxRestart
	sxPIDMode
	sxIPCMode
	sxJob
	sxGroup
	sxNetwork
	sxSeccomp
	sxAlloc
	sxTemplates
	sxArtifacts
	sxPorts
	sxReadiness
	sxWatchdog
	sxCheck
	sxCopy     // an Alloc's copy: its generation, due time, reschedule policy and history, restart count
	sxJournald // Logs.Journald (no bytes)
	sxAll      = 1<<iota - 1
)

// Bits of a template's flag byte.
const (
	tfUID = 1 << iota
	tfGID
	tfEnv
	tfMissingKey
	tfAll = 1<<iota - 1
)

// maxRecord bounds one encoded record. fsm.Spec.Validate refuses a spec
// over 512 KiB up front; the store is the last line, so that a runaway
// event never reaches bbolt (whose values may be far larger) or a reader.
const maxRecord = 1 << 20

// castagnoliTable is hash/crc32's CRC32C table, built on first use:
// building it (its SSE 4.2 shift tables) costs a fifth of a millisecond,
// which a process that links the store but never sums a record (a CLI
// that goes through an agent) should not pay at start.
var castagnoliTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoliTable()) }

// encodeRecord appends the record form of e, with sequence number seq, to
// dst, in the current record version.
func encodeRecord(dst []byte, seq uint64, e *fsm.Event) []byte {
	return appendRecord(dst, recordVersion, seq, e)
}

// appendRecord encodes e in the given record version. An earlier version
// is the same form without the later parts (and with what fsm.Event's
// Downgrade puts back where that version held it): it is used only to
// hold the decoder of old records to canonical form (an event that sets a
// field an old version cannot carry does not round-trip through it).
func appendRecord(dst []byte, version uint8, seq uint64, e *fsm.Event) []byte {
	if version < 4 {
		old := *e
		old.Recorded = 0
		if old.Exit != nil {
			x := *old.Exit
			x.At, x.PeakMemory = 0, 0
			old.Exit = &x
		}
		if version < 3 {
			old.Downgrade()
		}
		e = &old
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, version, byte(e.Type))
	dst = binary.AppendUvarint(dst, seq)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Time))
	f := fieldsOf(e)
	dst = binary.AppendUvarint(dst, f)
	if s := e.Spec; s != nil {
		dst = appendSpec(dst, s, f&fSpecExt != 0)
	}
	if f&fNonce != 0 {
		dst = appendString(dst, e.Nonce)
	}
	if x := e.Executor; x != nil {
		dst = binary.AppendVarint(dst, int64(x.PID))
		dst = binary.AppendUvarint(dst, x.StartTime)
		dst = appendString(dst, x.BootID)
		dst = appendString(dst, x.Nonce)
		dst = appendString(dst, x.Socket)
		if f&fCgroup != 0 {
			dst = appendString(dst, x.Cgroup)
		}
	}
	if f&fTaskPID != 0 {
		dst = binary.AppendVarint(dst, int64(e.TaskPID))
	}
	if f&fTaskStart != 0 {
		dst = binary.AppendUvarint(dst, e.TaskStartTime)
	}
	if x := e.Exit; x != nil {
		dst = binary.AppendVarint(dst, int64(x.Code))
		dst = binary.AppendVarint(dst, int64(x.Signal))
	}
	if f&fSignal != 0 {
		dst = binary.AppendVarint(dst, int64(e.Signal))
	}
	if f&fGrace != 0 {
		dst = binary.AppendVarint(dst, int64(e.Grace))
	}
	if f&fReason != 0 {
		dst = appendString(dst, e.Reason)
	}
	if f&fTarget != 0 {
		dst = append(dst, byte(e.Target))
	}
	if f&fAttempt != 0 {
		dst = binary.AppendVarint(dst, int64(e.Attempt))
	}
	if f&fDelay != 0 {
		dst = binary.AppendVarint(dst, int64(e.Delay))
	}
	if f&fCause != 0 {
		dst = append(dst, byte(e.Cause))
	}
	if f&fWarnings != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(e.Warnings)))
		for _, w := range e.Warnings {
			dst = append(dst, byte(w.Kind))
			dst = appendString(dst, w.Text)
		}
	}
	if f&fReplaces != 0 {
		dst = appendString(dst, e.Replaces)
	}
	if f&fReplacedBy != 0 {
		dst = appendString(dst, e.ReplacedBy)
	}
	if f&fRecorded != 0 {
		dst = binary.AppendVarint(dst, e.Recorded)
	}
	if f&fExitAt != 0 {
		dst = binary.AppendVarint(dst, e.Exit.At)
	}
	if f&fPeak != 0 {
		dst = binary.AppendUvarint(dst, e.Exit.PeakMemory)
	}
	binary.LittleEndian.PutUint32(dst[start:], checksum(dst[start:]))
	return dst
}

// fieldsOf is the bit set of e's optional parts that are present.
func fieldsOf(e *fsm.Event) uint64 {
	var f uint64
	if e.Spec != nil {
		f |= fSpec
		if specExtOf(e.Spec) != 0 {
			f |= fSpecExt
		}
	}
	if e.Nonce != "" {
		f |= fNonce
	}
	if e.Executor != nil {
		f |= fExecutor
		if e.Executor.Cgroup != "" {
			f |= fCgroup
		}
	}
	if e.TaskPID != 0 {
		f |= fTaskPID
	}
	if e.TaskStartTime != 0 {
		f |= fTaskStart
	}
	if e.Exit != nil {
		f |= fExit
		if e.Exit.OOM {
			f |= fOOM
		}
		if e.Exit.At != 0 {
			f |= fExitAt
		}
		if e.Exit.PeakMemory != 0 {
			f |= fPeak
		}
	}
	if e.Recorded != 0 {
		f |= fRecorded
	}
	if e.Signal != 0 {
		f |= fSignal
	}
	if e.Grace != 0 {
		f |= fGrace
	}
	if e.Reason != "" {
		f |= fReason
	}
	if e.Target != fsm.StateNone {
		f |= fTarget
	}
	if e.Attempt != 0 {
		f |= fAttempt
	}
	if e.Delay != 0 {
		f |= fDelay
	}
	if e.Cause != fsm.CauseNone {
		f |= fCause
	}
	if len(e.Warnings) > 0 {
		f |= fWarnings
	}
	if e.Replaces != "" {
		f |= fReplaces
	}
	if e.ReplacedBy != "" {
		f |= fReplacedBy
	}
	return f
}

// appendSpec appends the record form of a spec: its base fields, then,
// with ext (version 2, and only when specExtOf(s) is not 0), its optional
// parts. The desired-state records (desired.go) carry a spec in the same
// form.
func appendSpec(dst []byte, s *fsm.Spec, ext bool) []byte {
	dst = appendString(dst, s.Name)
	dst = appendString(dst, s.Driver)
	dst = appendString(dst, s.Command)
	dst = appendList(dst, s.Args)
	dst = binary.AppendUvarint(dst, uint64(len(s.Env)))
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = appendString(dst, k)
		dst = appendString(dst, s.Env[k])
	}
	dst = appendString(dst, s.Dir)
	dst = appendString(dst, s.User)
	dst = appendList(dst, s.CapAdd)
	dst = appendList(dst, s.CapDrop)
	dst = binary.AppendVarint(dst, int64(s.KillSignal))
	dst = binary.AppendVarint(dst, int64(s.KillTimeout))
	if ext {
		dst = appendSpecExt(dst, s)
	}
	return dst
}

func specExtOf(s *fsm.Spec) uint64 {
	var x uint64
	if !s.Resources.IsZero() {
		x |= sxResources
	}
	if s.OOMScoreAdj != nil {
		x |= sxOOMScoreAdj
	}
	if l := s.Logs; l.MaxFiles != 0 || l.MaxFileSizeMB != 0 || l.Disabled {
		x |= sxLogs
	}
	if s.Logs.Journald {
		x |= sxJournald
	}
	if s.Restart != nil {
		x |= sxRestart
	}
	if s.PIDMode != "" {
		x |= sxPIDMode
	}
	if s.IPCMode != "" {
		x |= sxIPCMode
	}
	if s.Job != "" {
		x |= sxJob
	}
	if s.Group != "" {
		x |= sxGroup
	}
	if s.Network != "" {
		x |= sxNetwork
	}
	if s.Seccomp != "" {
		x |= sxSeccomp
	}
	if s.Alloc != nil {
		x |= sxAlloc
	}
	if len(s.Templates) > 0 {
		x |= sxTemplates
	}
	if len(s.Artifacts) > 0 {
		x |= sxArtifacts
	}
	if len(s.Ports) > 0 {
		x |= sxPorts
	}
	if s.Readiness != "" {
		x |= sxReadiness
	}
	if s.Watchdog != 0 {
		x |= sxWatchdog
	}
	if s.Check != nil {
		x |= sxCheck
	}
	if a := s.Alloc; a != nil && (a.Generation != 0 || a.NotBefore != 0 || a.Reschedule != nil || len(a.Rescheduled) > 0 || a.Restarts != (fsm.RestartState{})) {
		x |= sxCopy
	}
	return x
}

func appendSpecExt(dst []byte, s *fsm.Spec) []byte {
	x := specExtOf(s)
	dst = binary.AppendUvarint(dst, x)
	if x&sxResources != 0 {
		r := &s.Resources
		for _, v := range [...]int{r.MemoryMB, r.MemoryMaxMB, r.CPU, r.Cores, r.PIDs} {
			dst = binary.AppendVarint(dst, int64(v))
		}
	}
	if x&sxOOMScoreAdj != 0 {
		dst = binary.AppendVarint(dst, int64(*s.OOMScoreAdj))
	}
	if x&sxLogs != 0 {
		dst = binary.AppendVarint(dst, int64(s.Logs.MaxFiles))
		dst = binary.AppendVarint(dst, int64(s.Logs.MaxFileSizeMB))
		dst = appendBool(dst, s.Logs.Disabled)
	}
	if p := s.Restart; p != nil {
		dst = binary.AppendVarint(dst, int64(p.Attempts))
		dst = binary.AppendVarint(dst, int64(p.Interval))
		dst = binary.AppendVarint(dst, int64(p.Delay))
		dst = appendString(dst, string(p.Mode))
		dst = appendBool(dst, p.OnSuccess)
	}
	for _, v := range [...]struct {
		bit uint64
		s   string
	}{{sxPIDMode, s.PIDMode}, {sxIPCMode, s.IPCMode}, {sxJob, s.Job}, {sxGroup, s.Group},
		{sxNetwork, string(s.Network)}, {sxSeccomp, s.Seccomp}} {
		if x&v.bit != 0 {
			dst = appendString(dst, v.s)
		}
	}
	if a := s.Alloc; a != nil {
		dst = appendString(dst, a.ID)
		dst = binary.AppendVarint(dst, int64(a.Index))
		dst = appendString(dst, a.Dir)
		dst = appendString(dst, a.TaskDir)
		dst = appendList(dst, a.Tasks)
		dst = binary.AppendUvarint(dst, uint64(a.Hook))
		dst = appendBool(dst, a.Sidecar)
		dst = appendBool(dst, a.Leader)
	}
	if x&sxTemplates != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.Templates)))
		for i := range s.Templates {
			dst = appendTemplate(dst, &s.Templates[i])
		}
	}
	if x&sxArtifacts != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.Artifacts)))
		for _, a := range s.Artifacts {
			dst = appendString(dst, a.Source)
			dst = appendString(dst, a.Destination)
			dst = binary.AppendUvarint(dst, uint64(a.Mode))
			dst = appendMap(dst, a.Options)
			dst = appendMap(dst, a.Headers)
			dst = appendBool(dst, a.Chown)
		}
	}
	if x&sxPorts != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.Ports)))
		for _, p := range s.Ports {
			dst = appendString(dst, p.Label)
			dst = binary.AppendVarint(dst, int64(p.Value))
			dst = binary.AppendVarint(dst, int64(p.To))
			dst = appendString(dst, p.IP)
			dst = appendString(dst, p.Task)
		}
	}
	if x&sxReadiness != 0 {
		dst = appendString(dst, string(s.Readiness))
	}
	if x&sxWatchdog != 0 {
		dst = binary.AppendVarint(dst, int64(s.Watchdog))
	}
	if x&sxCheck != 0 {
		dst = appendCheck(dst, s.Check)
	}
	if x&sxCopy != 0 {
		dst = appendCopy(dst, s.Alloc)
	}
	return dst
}

// appendCopy encodes what an allocation's copy carries (with sxAlloc):
// its generation and due time, its reschedule policy behind a presence
// byte, its reschedule history, its restart count.
func appendCopy(dst []byte, a *fsm.Alloc) []byte {
	dst = binary.AppendVarint(dst, int64(a.Generation))
	dst = binary.AppendVarint(dst, a.NotBefore)
	dst = appendBool(dst, a.Reschedule != nil)
	if p := a.Reschedule; p != nil {
		dst = binary.AppendVarint(dst, int64(p.Attempts))
		dst = binary.AppendVarint(dst, int64(p.Interval))
		dst = binary.AppendVarint(dst, int64(p.Delay))
		dst = appendString(dst, string(p.DelayFunction))
		dst = binary.AppendVarint(dst, int64(p.MaxDelay))
		dst = appendBool(dst, p.Unlimited)
	}
	dst = binary.AppendUvarint(dst, uint64(len(a.Rescheduled)))
	for _, e := range a.Rescheduled {
		dst = binary.AppendVarint(dst, e.At)
		dst = binary.AppendVarint(dst, int64(e.Delay))
	}
	dst = binary.AppendVarint(dst, a.Restarts.WindowStart)
	dst = binary.AppendVarint(dst, int64(a.Restarts.Count))
	return binary.AppendVarint(dst, int64(a.Restarts.Attempts))
}

// appendCheck encodes a readiness check: its strings, port, durations,
// then its check_restart behind a presence byte.
func appendCheck(dst []byte, c *fsm.Check) []byte {
	dst = appendString(dst, c.Name)
	dst = appendString(dst, c.PortLabel)
	dst = appendString(dst, c.Address)
	dst = binary.AppendVarint(dst, int64(c.Port))
	dst = appendString(dst, c.Path)
	dst = appendString(dst, c.Command)
	dst = appendList(dst, c.Args)
	dst = binary.AppendVarint(dst, int64(c.Interval))
	dst = binary.AppendVarint(dst, int64(c.Timeout))
	dst = appendBool(dst, c.Restart != nil)
	if c.Restart != nil {
		dst = binary.AppendVarint(dst, int64(c.Restart.Limit))
		dst = binary.AppendVarint(dst, int64(c.Restart.Grace))
		dst = appendBool(dst, c.Restart.IgnoreWarnings)
	}
	return dst
}

func appendTemplate(dst []byte, t *fsm.Template) []byte {
	dst = appendString(dst, t.Source)
	dst = appendString(dst, t.Data)
	dst = appendString(dst, t.Destination)
	dst = binary.AppendUvarint(dst, uint64(t.Perms))
	var flags byte
	if t.UID != nil {
		flags |= tfUID
	}
	if t.GID != nil {
		flags |= tfGID
	}
	if t.Env {
		flags |= tfEnv
	}
	if t.ErrMissingKey {
		flags |= tfMissingKey
	}
	dst = append(dst, flags)
	if t.UID != nil {
		dst = binary.AppendVarint(dst, int64(*t.UID))
	}
	if t.GID != nil {
		dst = binary.AppendVarint(dst, int64(*t.GID))
	}
	dst = binary.AppendUvarint(dst, uint64(t.ChangeMode))
	dst = binary.AppendVarint(dst, int64(t.ChangeSignal))
	dst = appendString(dst, t.LeftDelim)
	return appendString(dst, t.RightDelim)
}

// appendMap appends m as a count then key/value pairs in strictly
// increasing key order (as env is).
func appendMap(dst []byte, m map[string]string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m)))
	if len(m) == 0 {
		return dst
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = appendString(dst, k)
		dst = appendString(dst, m[k])
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendList(dst []byte, l []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(l)))
	for _, s := range l {
		dst = appendString(dst, s)
	}
	return dst
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// decodeError is what the decoder reports; the caller adds the task.
type decodeError struct {
	version uint8 // non-zero: an unknown record version
	reason  string
}

// decodeRecord decodes rec into *e. It never panics and never trusts a
// length it has not checked against the bytes left. It returns the
// record's sequence number. A record of version 1 is upcast: the fields
// version 2 added are zero.
//
// It is replay's hot path. A record that carries no optional part (most of
// a long log: self-loops and intents) is decoded without a call beyond
// the checksum; the optional parts go through decodeFields.
func decodeRecord(rec []byte, e *fsm.Event) (uint64, *decodeError) {
	if len(rec) < headerLen {
		return 0, &decodeError{reason: "truncated record header"}
	}
	if binary.LittleEndian.Uint32(rec) != checksum(rec) {
		return 0, &decodeError{reason: "checksum mismatch"}
	}
	v := rec[4]
	switch {
	case v == 0:
		return 0, &decodeError{reason: "record version 0"}
	case v > recordVersion:
		return 0, &decodeError{version: v}
	}
	typ := fsm.EventType(rec[5])
	if !typ.Valid() {
		return 0, &decodeError{reason: "unknown event type " + strconv.Itoa(int(rec[5]))}
	}
	resetEvent(e, typ)
	b := rec[headerLen:]
	var seq uint64
	if len(b) > 0 && b[0] < 0x80 {
		seq, b = uint64(b[0]), b[1:]
	} else if len(b) > 1 && b[1] < 0x80 && b[1] != 0 {
		seq, b = uint64(b[0]&0x7f)|uint64(b[1])<<7, b[2:]
	} else {
		d := decoder{b: b}
		seq = d.uvarint()
		if d.err != "" {
			return 0, &decodeError{reason: d.err}
		}
		b = d.b
	}
	if len(b) < 9 {
		return 0, &decodeError{reason: "truncated time or fields"}
	}
	e.Time = int64(binary.LittleEndian.Uint64(b))
	if f := b[8]; f == 0 && len(b) == 9 {
		return seq, nil // no optional part
	}
	d := decoder{b: b[8:]}
	d.fields(e, v)
	if d.err != "" {
		return 0, &decodeError{reason: d.err}
	}
	return seq, nil
}

// resetEvent makes *e the zero event of type typ, writing only the fields
// that are set (replay decodes every record into one reused event, and
// most records leave its pointers nil).
func resetEvent(e *fsm.Event, typ fsm.EventType) {
	if e.Spec != nil || e.Executor != nil || e.Exit != nil || e.Nonce != "" || e.Reason != "" || e.Warnings != nil ||
		e.Replaces != "" || e.ReplacedBy != "" {
		*e = fsm.Event{Type: typ}
		return
	}
	e.Type, e.Seq, e.TaskPID, e.TaskStartTime = typ, 0, 0, 0
	e.Signal, e.Grace, e.Target, e.Attempt = 0, 0, fsm.StateNone, 0
	e.Delay, e.Cause, e.Recorded = 0, fsm.CauseNone, 0
}

// fields decodes the field bit set and the optional parts it names.
func (d *decoder) fields(e *fsm.Event, version uint8) {
	f := d.uvarint()
	known := uint64(fAllV4)
	switch version {
	case 1:
		known = fAllV1
	case 2:
		known = fAllV2
	case 3:
		known = fAllV3
	}
	switch {
	case f&^known != 0:
		d.fail("unknown field bits")
	case f&fCgroup != 0 && f&fExecutor == 0, f&(fOOM|fExitAt|fPeak) != 0 && f&fExit == 0, f&fSpecExt != 0 && f&fSpec == 0:
		d.fail("field bits without their part")
	}
	if d.err == "" && f&fSpec != 0 {
		e.Spec = d.spec(f&fSpecExt != 0)
	}
	if f&fNonce != 0 {
		e.Nonce = d.nonEmpty()
	}
	if d.err == "" && f&fExecutor != 0 {
		x := &fsm.Identity{}
		x.PID = d.int()
		x.StartTime = d.uvarint()
		x.BootID = d.str()
		x.Nonce = d.str()
		x.Socket = d.str()
		if f&fCgroup != 0 {
			x.Cgroup = d.nonEmpty()
		}
		e.Executor = x
	}
	if f&fTaskPID != 0 {
		e.TaskPID = d.nonZero()
	}
	if f&fTaskStart != 0 {
		if e.TaskStartTime = d.uvarint(); e.TaskStartTime == 0 {
			d.fail("zero value for a present field")
		}
	}
	if d.err == "" && f&fExit != 0 {
		e.Exit = &fsm.ExitStatus{Code: d.int(), Signal: d.int(), OOM: f&fOOM != 0}
	}
	if f&fSignal != 0 {
		e.Signal = d.nonZero()
	}
	if f&fGrace != 0 {
		if e.Grace = time.Duration(d.varint()); e.Grace == 0 {
			d.fail("zero value for a present field")
		}
	}
	if f&fReason != 0 {
		e.Reason = d.nonEmpty()
	}
	if f&fTarget != 0 {
		if len(d.b) < 1 {
			d.fail("truncated target")
		} else if e.Target = fsm.State(d.b[0]); !e.Target.Valid() {
			d.fail("invalid target state")
		} else {
			d.b = d.b[1:]
		}
	}
	if f&fAttempt != 0 {
		e.Attempt = d.nonZero()
	}
	if f&fDelay != 0 {
		if e.Delay = time.Duration(d.varint()); e.Delay == 0 {
			d.fail("zero value for a present field")
		}
	}
	if f&fCause != 0 {
		if len(d.b) < 1 {
			d.fail("truncated cause")
		} else if e.Cause = fsm.Cause(d.b[0]); e.Cause == fsm.CauseNone || !e.Cause.Valid() {
			d.fail("invalid cause")
		} else {
			d.b = d.b[1:]
		}
	}
	if d.err == "" && f&fWarnings != 0 {
		n := d.uvarint()
		if n == 0 || n > uint64(len(d.b)) {
			d.fail("bad warning count")
		}
		for i := uint64(0); d.err == "" && i < n; i++ {
			if len(d.b) < 1 {
				d.fail("truncated warning")
				break
			}
			k := fsm.WarningKind(d.b[0])
			d.b = d.b[1:]
			if !k.Valid() {
				d.fail("invalid warning kind")
				break
			}
			e.Warnings = append(e.Warnings, fsm.Warning{Kind: k, Text: d.str()})
		}
	}
	if f&fReplaces != 0 {
		e.Replaces = d.nonEmpty()
	}
	if f&fReplacedBy != 0 {
		e.ReplacedBy = d.nonEmpty()
	}
	if f&fRecorded != 0 {
		if e.Recorded = d.varint(); e.Recorded == 0 {
			d.fail("zero value for a present field")
		}
	}
	if d.err == "" && f&fExitAt != 0 {
		if e.Exit.At = d.varint(); e.Exit.At == 0 {
			d.fail("zero value for a present field")
		}
	}
	if d.err == "" && f&fPeak != 0 {
		if e.Exit.PeakMemory = d.uvarint(); e.Exit.PeakMemory == 0 {
			d.fail("zero value for a present field")
		}
	}
	if d.err == "" && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == "" && version < 3 {
		e.Upgrade()
	}
}

func (d *decoder) spec(ext bool) *fsm.Spec {
	s := &fsm.Spec{}
	s.Name = d.str()
	s.Driver = d.str()
	s.Command = d.str()
	s.Args = d.list()
	if n := d.count(2); n > 0 {
		s.Env = make(map[string]string, n)
		prev := ""
		for i := range n {
			k, v := d.str(), d.str()
			if i > 0 && k <= prev {
				d.fail("env keys out of order")
				break
			}
			s.Env[k], prev = v, k
		}
	}
	s.Dir = d.str()
	s.User = d.str()
	s.CapAdd = d.list()
	s.CapDrop = d.list()
	s.KillSignal = d.int()
	s.KillTimeout = time.Duration(d.varint())
	if !ext || d.err != "" {
		return s
	}
	x := d.uvarint()
	switch {
	case x == 0:
		d.fail("empty spec extension")
	case x&^sxAll != 0:
		d.fail("unknown spec field bits")
	}
	if x&sxResources != 0 {
		r := &s.Resources
		r.MemoryMB, r.MemoryMaxMB, r.CPU, r.Cores, r.PIDs = d.int(), d.int(), d.int(), d.int(), d.int()
		if r.IsZero() {
			d.fail("zero value for a present field")
		}
	}
	if x&sxOOMScoreAdj != 0 {
		adj := d.int()
		s.OOMScoreAdj = &adj
	}
	if x&sxLogs != 0 {
		s.Logs = fsm.LogConfig{MaxFiles: d.int(), MaxFileSizeMB: d.int(), Disabled: d.bool()}
		if s.Logs == (fsm.LogConfig{}) {
			d.fail("zero value for a present field")
		}
	}
	s.Logs.Journald = x&sxJournald != 0
	if x&sxRestart != 0 {
		s.Restart = &fsm.RestartPolicy{
			Attempts: d.int(), Interval: time.Duration(d.varint()), Delay: time.Duration(d.varint()),
			Mode: fsm.RestartMode(d.str()), OnSuccess: d.bool(),
		}
	}
	if x&sxPIDMode != 0 {
		s.PIDMode = d.nonEmpty()
	}
	if x&sxIPCMode != 0 {
		s.IPCMode = d.nonEmpty()
	}
	if x&sxJob != 0 {
		s.Job = d.nonEmpty()
	}
	if x&sxGroup != 0 {
		s.Group = d.nonEmpty()
	}
	if x&sxNetwork != 0 {
		s.Network = fsm.NetworkMode(d.nonEmpty())
	}
	if x&sxSeccomp != 0 {
		s.Seccomp = d.nonEmpty()
	}
	if d.err == "" && x&sxAlloc != 0 {
		a := &fsm.Alloc{ID: d.str(), Index: d.int(), Dir: d.str(), TaskDir: d.str(), Tasks: d.list()}
		h := d.uvarint()
		if h >= 1<<8 || !fsm.Hook(h).Valid() {
			d.fail("invalid hook")
		}
		a.Hook, a.Sidecar, a.Leader = fsm.Hook(h), d.bool(), d.bool()
		s.Alloc = a
	}
	if d.err == "" && x&sxTemplates != 0 {
		n := d.count(9) // three strings, perms, flags, mode, signal, two strings
		if n == 0 {
			d.fail("zero value for a present field")
		}
		s.Templates = make([]fsm.Template, n)
		for i := 0; d.err == "" && i < n; i++ {
			s.Templates[i] = d.template()
		}
	}
	if d.err == "" && x&sxArtifacts != 0 {
		n := d.count(6)
		if n == 0 {
			d.fail("zero value for a present field")
		}
		s.Artifacts = make([]fsm.Artifact, n)
		for i := 0; d.err == "" && i < n; i++ {
			a := &s.Artifacts[i]
			a.Source, a.Destination = d.str(), d.str()
			m := d.uvarint()
			if m >= 1<<8 || !fsm.ArtifactMode(m).Valid() {
				d.fail("invalid artifact mode")
			}
			a.Mode, a.Options, a.Headers, a.Chown = fsm.ArtifactMode(m), d.strMap(), d.strMap(), d.bool()
		}
	}
	if d.err == "" && x&sxPorts != 0 {
		n := d.count(5)
		if n == 0 {
			d.fail("zero value for a present field")
		}
		s.Ports = make([]fsm.Port, n)
		for i := 0; d.err == "" && i < n; i++ {
			s.Ports[i] = fsm.Port{Label: d.str(), Value: d.int(), To: d.int(), IP: d.str(), Task: d.str()}
		}
	}
	if x&sxReadiness != 0 {
		s.Readiness = fsm.Readiness(d.nonEmpty())
	}
	if x&sxWatchdog != 0 {
		if s.Watchdog = time.Duration(d.varint()); s.Watchdog == 0 {
			d.fail("zero value for a present field")
		}
	}
	if x&sxCheck != 0 {
		s.Check = d.check()
	}
	if d.err == "" && x&sxCopy != 0 {
		if s.Alloc == nil {
			d.fail("an allocation's copy without its allocation")
			return s
		}
		d.copyOf(s.Alloc)
	}
	return s
}

// copyOf reads what appendCopy wrote into a.
func (d *decoder) copyOf(a *fsm.Alloc) {
	a.Generation = d.int()
	a.NotBefore = d.varint()
	if d.bool() {
		a.Reschedule = &fsm.ReschedulePolicy{Attempts: d.int(), Interval: time.Duration(d.varint()), Delay: time.Duration(d.varint()),
			DelayFunction: fsm.DelayFunction(d.str()), MaxDelay: time.Duration(d.varint()), Unlimited: d.bool()}
	}
	if n := d.count(2); n > 0 {
		a.Rescheduled = make([]fsm.RescheduleEvent, n)
		for i := 0; d.err == "" && i < n; i++ {
			a.Rescheduled[i] = fsm.RescheduleEvent{At: d.varint(), Delay: time.Duration(d.varint())}
		}
	}
	a.Restarts = fsm.RestartState{WindowStart: d.varint(), Count: d.int(), Attempts: d.int()}
	if a.Generation == 0 && a.NotBefore == 0 && a.Reschedule == nil && len(a.Rescheduled) == 0 && a.Restarts == (fsm.RestartState{}) {
		d.fail("zero value for a present field")
	}
}

func (d *decoder) check() *fsm.Check {
	c := &fsm.Check{Name: d.str(), PortLabel: d.str(), Address: d.str(), Port: d.int(), Path: d.str(), Command: d.str()}
	c.Args = d.list()
	c.Interval, c.Timeout = time.Duration(d.varint()), time.Duration(d.varint())
	if d.bool() {
		c.Restart = &fsm.CheckRestart{Limit: d.int(), Grace: time.Duration(d.varint()), IgnoreWarnings: d.bool()}
	}
	return c
}

func (d *decoder) template() fsm.Template {
	t := fsm.Template{Source: d.str(), Data: d.str(), Destination: d.str()}
	perms := d.uvarint()
	if perms > 0o777 {
		d.fail("invalid template perms")
	}
	t.Perms = fs.FileMode(perms)
	if len(d.b) < 1 {
		d.fail("truncated template flags")
		return t
	}
	flags := d.b[0]
	d.b = d.b[1:]
	if flags&^tfAll != 0 {
		d.fail("unknown template flag bits")
		return t
	}
	if flags&tfUID != 0 {
		uid := d.int()
		t.UID = &uid
	}
	if flags&tfGID != 0 {
		gid := d.int()
		t.GID = &gid
	}
	t.Env, t.ErrMissingKey = flags&tfEnv != 0, flags&tfMissingKey != 0
	m := d.uvarint()
	if m >= 1<<8 || !fsm.ChangeMode(m).Valid() {
		d.fail("invalid change mode")
	}
	t.ChangeMode = fsm.ChangeMode(m)
	t.ChangeSignal = d.int()
	t.LeftDelim, t.RightDelim = d.str(), d.str()
	return t
}

// strMap reads a map written by appendMap (nil when empty).
func (d *decoder) strMap() map[string]string {
	n := d.count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	prev := ""
	for i := 0; d.err == "" && i < n; i++ {
		k, v := d.str(), d.str()
		if i > 0 && k <= prev {
			d.fail("map keys out of order")
			break
		}
		m[k], prev = v, k
	}
	return m
}

// decoder reads a record body. The first failure sticks; later reads
// return zero values.
type decoder struct {
	b   []byte
	err string
}

func (d *decoder) fail(reason string) {
	if d.err == "" {
		d.err = reason
	}
	d.b = nil
}

// uvarint reads a minimal unsigned varint.
func (d *decoder) uvarint() uint64 {
	b := d.b
	if len(b) > 0 && b[0] < 0x80 {
		d.b = b[1:]
		return uint64(b[0])
	}
	var v uint64
	for i := 0; i < len(b) && i < binary.MaxVarintLen64; i++ {
		c := b[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			break // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.fail("non-minimal integer")
				return 0
			}
			d.b = b[i+1:]
			return v
		}
	}
	d.fail("truncated or overlong integer")
	return 0
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

// int reads a varint that must fit an int.
func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.fail("integer out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) nonZero() int {
	v := d.int()
	if v == 0 {
		d.fail("zero value for a present field")
	}
	return v
}

func (d *decoder) bool() bool {
	if len(d.b) < 1 {
		d.fail("truncated boolean")
		return false
	}
	c := d.b[0]
	if c > 1 {
		d.fail("invalid boolean")
		return false
	}
	d.b = d.b[1:]
	return c == 1
}

// count reads an element count, each element at least minBytes long, and
// refuses counts the remaining bytes cannot hold.
func (d *decoder) count(minBytes int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minBytes) {
		d.fail("count exceeds record")
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string exceeds record")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) nonEmpty() string {
	s := d.str()
	if s == "" {
		d.fail("empty value for a present field")
	}
	return s
}

func (d *decoder) list() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	l := make([]string, n)
	for i := range l {
		l[i] = d.str()
	}
	return l
}
