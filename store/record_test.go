package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// genStrings draws a list, nil when empty (the decoder's form).
func genStrings(t *rapid.T, label string) []string {
	l := rapid.SliceOfN(rapid.String(), 0, 4).Draw(t, label)
	if len(l) == 0 {
		return nil
	}
	return l
}

func genSpec(t *rapid.T) *fsm.Spec {
	s := &fsm.Spec{
		Name: rapid.String().Draw(t, "name"), Driver: rapid.String().Draw(t, "driver"),
		Command: rapid.String().Draw(t, "command"), Args: genStrings(t, "args"),
		Dir: rapid.String().Draw(t, "dir"), User: rapid.String().Draw(t, "user"),
		CapAdd: genStrings(t, "cap_add"), CapDrop: genStrings(t, "cap_drop"),
		KillSignal:  rapid.Int().Draw(t, "kill_signal"),
		KillTimeout: time.Duration(rapid.Int64().Draw(t, "kill_timeout")),
		PIDMode:     rapid.String().Draw(t, "pid_mode"), IPCMode: rapid.String().Draw(t, "ipc_mode"),
		Job: rapid.String().Draw(t, "job"), Group: rapid.String().Draw(t, "group"),
		Network: fsm.NetworkMode(rapid.String().Draw(t, "network")), Seccomp: rapid.String().Draw(t, "seccomp"),
	}
	if env := rapid.MapOfN(rapid.String(), rapid.String(), 0, 4).Draw(t, "env"); len(env) > 0 {
		s.Env = env
	}
	small := rapid.IntRange(0, 3) // often zero, so that each part is also absent
	if rapid.Bool().Draw(t, "resources") {
		s.Resources = fsm.Resources{
			MemoryMB: small.Draw(t, "memory"), MemoryMaxMB: rapid.Int().Draw(t, "memory_max"),
			CPU: small.Draw(t, "cpu"), Cores: small.Draw(t, "cores"), PIDs: small.Draw(t, "pids"),
		}
	}
	if rapid.Bool().Draw(t, "oom_score_adj") {
		adj := rapid.Int().Draw(t, "adj")
		s.OOMScoreAdj = &adj
	}
	if rapid.Bool().Draw(t, "logs") {
		s.Logs = fsm.LogConfig{MaxFiles: small.Draw(t, "max_files"), MaxFileSizeMB: rapid.Int().Draw(t, "max_file_size"),
			Disabled: rapid.Bool().Draw(t, "disabled")}
	}
	s.Logs.Journald = rapid.Bool().Draw(t, "journald") // with a logs part or alone
	if rapid.Bool().Draw(t, "restart") {
		s.Restart = &fsm.RestartPolicy{
			Attempts: rapid.Int().Draw(t, "attempts"), Interval: time.Duration(rapid.Int64().Draw(t, "interval")),
			Delay: time.Duration(rapid.Int64().Draw(t, "delay")), Mode: fsm.RestartMode(rapid.String().Draw(t, "mode")),
			OnSuccess: rapid.Bool().Draw(t, "on_success"),
		}
	}
	if rapid.Bool().Draw(t, "alloc") {
		s.Alloc = &fsm.Alloc{ID: rapid.String().Draw(t, "alloc_id"), Index: rapid.Int().Draw(t, "alloc_index"),
			Dir: rapid.String().Draw(t, "alloc_dir"), TaskDir: rapid.String().Draw(t, "task_dir"), Tasks: genStrings(t, "alloc_tasks"),
			Hook: fsm.Hook(rapid.IntRange(0, int(fsm.HookPoststop)).Draw(t, "hook")), Sidecar: rapid.Bool().Draw(t, "sidecar"),
			Leader: rapid.Bool().Draw(t, "leader")}
		if rapid.Bool().Draw(t, "copy") {
			a := s.Alloc
			a.Generation, a.NotBefore = rapid.IntRange(0, 1000).Draw(t, "generation"), rapid.Int64().Draw(t, "not_before")
			if rapid.Bool().Draw(t, "reschedule") {
				a.Reschedule = &fsm.ReschedulePolicy{Attempts: rapid.Int().Draw(t, "rattempts"), Interval: time.Duration(rapid.Int64().Draw(t, "rinterval")),
					Delay: time.Duration(rapid.Int64().Draw(t, "rdelay")), DelayFunction: fsm.DelayFunction(rapid.String().Draw(t, "rfn")),
					MaxDelay: time.Duration(rapid.Int64().Draw(t, "rmax")), Unlimited: rapid.Bool().Draw(t, "unlimited")}
			}
			for range small.Draw(t, "rescheduled") {
				a.Rescheduled = append(a.Rescheduled, fsm.RescheduleEvent{At: rapid.Int64().Draw(t, "at"), Delay: time.Duration(rapid.Int64().Draw(t, "edelay"))})
			}
			a.Restarts = fsm.RestartState{WindowStart: rapid.Int64().Draw(t, "window"), Count: rapid.IntRange(0, 100).Draw(t, "count"),
				Attempts: rapid.IntRange(0, 100).Draw(t, "rsattempts")}
			if a.Generation == 0 && a.NotBefore == 0 && a.Reschedule == nil && len(a.Rescheduled) == 0 && a.Restarts == (fsm.RestartState{}) {
				a.Generation = 1
			}
		}
	}
	for range small.Draw(t, "templates") {
		tm := fsm.Template{Source: rapid.String().Draw(t, "source"), Data: rapid.String().Draw(t, "data"),
			Destination: rapid.String().Draw(t, "destination"), Perms: fs.FileMode(rapid.IntRange(0, 0o777).Draw(t, "perms")),
			Env: rapid.Bool().Draw(t, "tenv"), ChangeMode: fsm.ChangeMode(rapid.IntRange(0, int(fsm.ChangeScript)).Draw(t, "change_mode")),
			ChangeSignal: rapid.Int().Draw(t, "change_signal"), LeftDelim: rapid.String().Draw(t, "left"),
			RightDelim: rapid.String().Draw(t, "right"), ErrMissingKey: rapid.Bool().Draw(t, "missing_key")}
		if rapid.Bool().Draw(t, "uid") {
			uid := rapid.Int().Draw(t, "uid_value")
			tm.UID = &uid
		}
		if rapid.Bool().Draw(t, "gid") {
			gid := rapid.Int().Draw(t, "gid_value")
			tm.GID = &gid
		}
		s.Templates = append(s.Templates, tm)
	}
	for range small.Draw(t, "artifacts") {
		a := fsm.Artifact{Source: rapid.String().Draw(t, "asource"), Destination: rapid.String().Draw(t, "adest"),
			Mode: fsm.ArtifactMode(rapid.IntRange(0, int(fsm.ArtifactDir)).Draw(t, "amode")), Chown: rapid.Bool().Draw(t, "chown")}
		if m := rapid.MapOfN(rapid.String(), rapid.String(), 0, 3).Draw(t, "options"); len(m) > 0 {
			a.Options = m
		}
		if m := rapid.MapOfN(rapid.String(), rapid.String(), 0, 3).Draw(t, "headers"); len(m) > 0 {
			a.Headers = m
		}
		s.Artifacts = append(s.Artifacts, a)
	}
	for range small.Draw(t, "ports") {
		s.Ports = append(s.Ports, fsm.Port{Label: rapid.String().Draw(t, "label"), Value: rapid.Int().Draw(t, "value"),
			To: rapid.Int().Draw(t, "to"), IP: rapid.String().Draw(t, "ip"), Task: rapid.String().Draw(t, "ptask")})
	}
	s.Readiness = fsm.Readiness(rapid.SampledFrom([]string{"", "notify", "none"}).Draw(t, "readiness"))
	s.Watchdog = time.Duration(rapid.Int64().Draw(t, "watchdog"))
	if rapid.Bool().Draw(t, "check") {
		c := &fsm.Check{Name: rapid.String().Draw(t, "cname"), PortLabel: rapid.String().Draw(t, "clabel"),
			Address: rapid.String().Draw(t, "caddr"), Port: rapid.Int().Draw(t, "cport"), Path: rapid.String().Draw(t, "cpath"),
			Command: rapid.String().Draw(t, "ccmd"), Interval: time.Duration(rapid.Int64().Draw(t, "cint")),
			Timeout: time.Duration(rapid.Int64().Draw(t, "ctimeout"))}
		if a := rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, "cargs"); len(a) > 0 {
			c.Args = a
		}
		if rapid.Bool().Draw(t, "crestart") {
			c.Restart = &fsm.CheckRestart{Limit: rapid.Int().Draw(t, "limit"), Grace: time.Duration(rapid.Int64().Draw(t, "grace")),
				IgnoreWarnings: rapid.Bool().Draw(t, "ignore")}
		}
		s.Check = c
	}
	return s
}

func genEvent(t *rapid.T) fsm.Event {
	e := fsm.Event{
		Type: rapid.SampledFrom(fsm.EventTypes()).Draw(t, "type"),
		Time: rapid.Int64().Draw(t, "time"),
	}
	if rapid.Bool().Draw(t, "spec") {
		e.Spec = genSpec(t)
	}
	e.Nonce = rapid.String().Draw(t, "nonce")
	if rapid.Bool().Draw(t, "executor") {
		e.Executor = &fsm.Identity{
			PID: rapid.Int().Draw(t, "pid"), StartTime: rapid.Uint64().Draw(t, "start"),
			BootID: rapid.String().Draw(t, "boot"), Nonce: rapid.String().Draw(t, "xnonce"),
			Socket: rapid.String().Draw(t, "socket"), Cgroup: rapid.String().Draw(t, "cgroup"),
		}
	}
	e.TaskPID = rapid.Int().Draw(t, "task_pid")
	e.TaskStartTime = rapid.Uint64().Draw(t, "task_start")
	if rapid.Bool().Draw(t, "exit") {
		e.Exit = &fsm.ExitStatus{Code: rapid.Int().Draw(t, "code"), Signal: rapid.Int().Draw(t, "exit_signal"),
			OOM: rapid.Bool().Draw(t, "oom"), At: rapid.Int64().Draw(t, "exit_at"), PeakMemory: rapid.Uint64().Draw(t, "peak")}
	}
	e.Recorded = rapid.Int64().Draw(t, "recorded")
	e.Signal = rapid.Int().Draw(t, "signal")
	e.Grace = time.Duration(rapid.Int64().Draw(t, "grace"))
	e.Reason = rapid.String().Draw(t, "reason")
	e.Target = rapid.SampledFrom(append([]fsm.State{fsm.StateNone}, fsm.States()...)).Draw(t, "target")
	e.Attempt = rapid.Int().Draw(t, "attempt")
	e.Delay = time.Duration(rapid.Int64().Draw(t, "delay"))
	e.Cause = fsm.Cause(rapid.IntRange(0, int(fsm.CauseHostFeature)).Draw(t, "cause"))
	for range rapid.IntRange(0, 2).Draw(t, "warnings") {
		e.Warnings = append(e.Warnings, fsm.Warning{Kind: fsm.WarningKind(rapid.IntRange(0, int(fsm.WarnLimitAboveHost)).Draw(t, "warning_kind")),
			Text: rapid.String().Draw(t, "warning_text")})
	}
	e.Replaces = rapid.String().Draw(t, "replaces")
	e.ReplacedBy = rapid.String().Draw(t, "replaced_by")
	return e
}

// roundTrip encodes e at seq, decodes it and checks that it is e again and
// that the bytes are canonical.
func roundTrip(t interface{ Fatalf(string, ...any) }, e fsm.Event, seq uint64) {
	e.Seq = 0
	rec := encodeRecord(nil, seq, &e)
	var got fsm.Event
	gotSeq, derr := decodeRecord(rec, &got)
	if derr != nil {
		t.Fatalf("decode of a fresh encoding: %+v\nevent %#v", derr, e)
	}
	if gotSeq != seq || !reflect.DeepEqual(got, e) {
		t.Fatalf("decode(encode(e)):\n got %#v seq %d\nwant %#v seq %d", got, gotSeq, e, seq)
	}
	if again := encodeRecord(nil, gotSeq, &got); !bytes.Equal(again, rec) {
		t.Fatalf("encode(decode(x)) != x:\n% x\n% x", again, rec)
	}
}

func TestRecord_RoundTrip(t *testing.T) {
	testproc.Parallel(t)
	rapid.Check(t, func(t *rapid.T) {
		roundTrip(t, genEvent(t), rapid.Uint64().Draw(t, "seq"))
	})
}

// TestRecord_EveryFieldEncoded fills fsm.Event by reflection, every field
// reachable from it (through pointers, structs, slices and maps) set to a
// value that is not its zero value, first all at once and then one at a
// time: a field added to fsm that the record does not carry fails here,
// without anyone having to remember to add it to a generator.
func TestRecord_EveryFieldEncoded(t *testing.T) {
	testproc.Parallel(t)
	typ := reflect.TypeFor[fsm.Event]()
	all := reflect.New(typ).Elem()
	paths := fill(all, "Event")
	if len(paths) < 40 {
		t.Fatalf("found only %d fields by reflection; the walker is broken", len(paths))
	}
	e := all.Interface().(fsm.Event)
	roundTrip(t, e, 9)
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			one := reflect.New(typ).Elem()
			fillOnly(one, "Event", p)
			e := one.Interface().(fsm.Event)
			e.Type = fsm.EventCreated // the header's field: always present
			roundTrip(t, e, 9)
		})
	}
}

// fill sets every leaf field under v to a non-zero value and returns the
// paths of the leaves.
func fill(v reflect.Value, path string) []string {
	var paths []string
	walkLeaves(v, path, func(leaf reflect.Value, p string) {
		setNonZero(leaf, p)
		paths = append(paths, p)
	})
	return paths
}

// fillOnly sets the leaf at want (and what holds it) and nothing else.
func fillOnly(v reflect.Value, path, want string) {
	walkLeaves(v, path, func(leaf reflect.Value, p string) {
		if p == want {
			setNonZero(leaf, p)
		}
	})
	prune(v)
}

// walkLeaves calls fn with every leaf under v, allocating the structs
// that pointers point to on the way. A pointer to anything else (*int) is a
// leaf itself.
func walkLeaves(v reflect.Value, path string, fn func(reflect.Value, string)) {
	switch {
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			walkLeaves(v.Field(i), path+"."+v.Type().Field(i).Name, fn)
		}
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		v.Set(reflect.New(v.Type().Elem()))
		walkLeaves(v.Elem(), path, fn)
	default:
		fn(v, path)
	}
}

// prune sets back to nil every pointer under v to a struct that is all
// zero, so that fillOnly leaves only the chosen leaf's chain allocated.
func prune(v reflect.Value) (zero bool) {
	switch {
	case v.Kind() == reflect.Struct:
		zero = true
		for i := range v.NumField() {
			if !prune(v.Field(i)) {
				zero = false
			}
		}
		return zero
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		if v.IsNil() || prune(v.Elem()) {
			v.Set(reflect.Zero(v.Type()))
			return true
		}
		return false
	default:
		return v.IsZero()
	}
}

// setNonZero gives a leaf a value that is not its zero value and that the
// record form can carry (a valid state for a state, a string for a string
// list or map).
func setNonZero(v reflect.Value, path string) {
	switch v.Type() {
	case reflect.TypeFor[fsm.EventType]():
		v.Set(reflect.ValueOf(fsm.EventCreated))
		return
	case reflect.TypeFor[fsm.State]():
		v.Set(reflect.ValueOf(fsm.StateExited))
		return
	case reflect.TypeFor[fsm.Cause]():
		v.Set(reflect.ValueOf(fsm.CauseCommandNotFound))
		return
	case reflect.TypeFor[fsm.WarningKind]():
		v.Set(reflect.ValueOf(fsm.WarnUncontained))
		return
	case reflect.TypeFor[fsm.Hook]():
		v.Set(reflect.ValueOf(fsm.HookPoststop))
		return
	case reflect.TypeFor[fsm.ChangeMode]():
		v.Set(reflect.ValueOf(fsm.ChangeSignal))
		return
	case reflect.TypeFor[fsm.ArtifactMode]():
		v.Set(reflect.ValueOf(fsm.ArtifactDir))
		return
	case reflect.TypeFor[fs.FileMode]():
		v.Set(reflect.ValueOf(fs.FileMode(0o640)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("v-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-7 - int64(len(path)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7 + uint64(len(path)))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		setNonZero(p.Elem(), path)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		setNonZero(s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Struct: // a slice's element
		for i := range v.NumField() {
			setNonZero(v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, x := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		setNonZero(k, path+".key")
		setNonZero(x, path+".value")
		m.SetMapIndex(k, x)
		v.Set(m)
	default:
		panic(fmt.Sprintf("%s: no non-zero value for kind %s: teach setNonZero", path, v.Kind()))
	}
}

// Seq is the record's key, not a field of the body: roundTrip passes it
// separately, and the one-at-a-time pass must not count it.
func TestRecord_EveryFieldEncoded_SeqIsTheKey(t *testing.T) {
	testproc.Parallel(t)
	e := fsm.Event{Type: fsm.EventCreated, Seq: 5, Spec: &fsm.Spec{}}
	rec := encodeRecord(nil, 5, &e)
	var got fsm.Event
	if seq, derr := decodeRecord(rec, &got); derr != nil || seq != 5 {
		t.Fatalf("decode: seq %d, %+v", seq, derr)
	}
}

// v1Records are the events whose record-version-1 encodings, written by
// tether before version 2, are kept in testdata/v1/records.hex: together
// they set every field version 1 knows. testdata/v1/tether.db is a store
// written by that tether (head version 1) holding four tasks made of them.
func v1Records() []fsm.Event {
	spec := &fsm.Spec{
		Name: "web", Driver: "exec", Command: "/bin/sleep", Args: []string{"30", "x y"},
		Env: map[string]string{"A": "1", "PATH": "/bin"}, Dir: "/srv", User: "nobody",
		CapAdd: []string{"net_raw"}, CapDrop: []string{"all", "chown"},
		KillSignal: 2, KillTimeout: 7 * time.Second,
	}
	return []fsm.Event{
		{Type: fsm.EventCreated, Time: 1735786800000000000, Spec: spec},
		{Type: fsm.EventSpawnIntent, Time: 1735786801000000000, Nonce: "nonce-1"},
		{Type: fsm.EventExecutorUp, Time: 1735786802000000000, Executor: &fsm.Identity{PID: 4242, StartTime: 123456, BootID: "boot-1", Nonce: "nonce-1", Socket: "/run/t/s.sock"}},
		{Type: fsm.EventLaunchIntent, Time: 1735786803000000000},
		{Type: fsm.EventLaunched, Time: 1735786804000000000, TaskPID: 4243, TaskStartTime: 123460},
		{Type: fsm.EventRunning, Time: 1735786805000000000},
		{Type: fsm.EventStopRequested, Time: 1735786806000000000, Signal: 15, Grace: 30 * time.Second},
		{Type: fsm.EventKillFailed, Time: 1735786807000000000, Reason: "kill: permission denied"},
		{Type: fsm.EventExecutorReaped, Time: 1735786808000000000, Target: fsm.StateStopped, Exit: &fsm.ExitStatus{Code: -1, Signal: 9}},
		{Type: fsm.EventTaskExited, Time: -5, Exit: &fsm.ExitStatus{Code: 7}},
	}
}

// readV1Records reads testdata/v1/records.hex: lines of "seq hex".
func readV1Records(t *testing.T) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "v1", "records.hex"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		seqStr, hx, ok := strings.Cut(sc.Text(), " ")
		seq, err := strconv.Atoi(seqStr)
		if !ok || err != nil || seq != len(recs)+1 {
			t.Fatalf("records.hex line %q", sc.Text())
		}
		rec, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// Version-1 records, as an older tether wrote them, still decode (upcast:
// the fields version 2 added are zero), and re-encode in version 1 to the
// same bytes; encoded now they are version 2.
func TestDecodeRecord_Version1Upcast(t *testing.T) {
	testproc.Parallel(t)
	recs := readV1Records(t)
	want := v1Records()
	if len(recs) != len(want) {
		t.Fatalf("%d stored records, %d expected events", len(recs), len(want))
	}
	for i, rec := range recs {
		if rec[4] != 1 {
			t.Fatalf("stored record %d has version %d, not 1", i+1, rec[4])
		}
		var got fsm.Event
		seq, derr := decodeRecord(rec, &got)
		if derr != nil || seq != uint64(i+1) {
			t.Fatalf("v1 record %d: seq %d, %+v", i+1, seq, derr)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("v1 record %d:\n got %#v\nwant %#v", i+1, got, want[i])
		}
		if again := appendRecord(nil, 1, seq, &got); !bytes.Equal(again, rec) {
			t.Errorf("v1 record %d re-encodes in version 1 to other bytes:\n% x\n% x", i+1, again, rec)
		}
		if now := encodeRecord(nil, seq, &got); now[4] != recordVersion {
			t.Errorf("encoded now: version %d, want %d", now[4], recordVersion)
		}
	}
}

// A version-1 record cannot carry version 2's fields: their bits are
// refused in it, so an old record is never read as something it was not.
func TestDecodeRecord_Version1RefusesVersion2Bits(t *testing.T) {
	testproc.Parallel(t)
	for _, e := range []fsm.Event{
		{Type: fsm.EventRestartIntent, Attempt: 1, Exit: &fsm.ExitStatus{Code: 1}},
		{Type: fsm.EventExecutorUp, Executor: &fsm.Identity{PID: 1, Cgroup: "/tether/x"}},
		{Type: fsm.EventTaskExited, Exit: &fsm.ExitStatus{Code: -1, Signal: 9, OOM: true}},
		{Type: fsm.EventCreated, Spec: &fsm.Spec{Job: "j"}},
	} {
		rec := appendRecord(nil, 1, 1, &e)
		var got fsm.Event
		if _, derr := decodeRecord(rec, &got); derr == nil || derr.reason != "unknown field bits" {
			t.Errorf("%s with a version-2 field in a version-1 record: %+v", e.Type, derr)
		}
	}
}

// A version-2 record cannot carry version 3's fields (the links between a
// task and the one that replaced it).
func TestDecodeRecord_Version2RefusesVersion3Bits(t *testing.T) {
	for _, e := range []fsm.Event{
		{Type: fsm.EventCreated, Spec: &fsm.Spec{Name: "web"}, Replaces: "web-1"},
		{Type: fsm.EventStopRequested, Signal: 15, ReplacedBy: "web-2"},
	} {
		rec := appendRecord(nil, 2, 1, &e)
		var got fsm.Event
		if _, derr := decodeRecord(rec, &got); derr == nil || derr.reason != "unknown field bits" {
			t.Errorf("%s with a version-3 field in a version-2 record: %+v", e.Type, derr)
		}
		if rec := encodeRecord(nil, 1, &e); rec[4] != recordVersion {
			t.Errorf("%s is written as version %d, want %d", e.Type, rec[4], recordVersion)
		}
	}
}

// The stored version-1 store opens, folds, takes appends (its heads are
// rewritten in the current form) and checks clean.
func TestOpen_Version1Store(t *testing.T) {
	testproc.Parallel(t)
	good, err := os.ReadFile(filepath.Join("testdata", "v1", "tether.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := testPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path, Options{NoSync: true})
	ctx := context.Background()
	wantStates := map[string]fsm.State{"web": fsm.StateRunning, "stopped": fsm.StateStopped,
		"rejected": fsm.StateFailed, "exited": fsm.StateExited}
	for id, st := range wantStates {
		task, err := s.LoadTask(ctx, id)
		if err != nil || task.State != st {
			t.Fatalf("v1 task %s: %s, %v; want %s", id, task.State, err, st)
		}
	}
	web, err := s.LoadTask(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if want := v1Records()[2].Executor; !reflect.DeepEqual(web.Executor, want) || web.Spec.Name != "web" || web.TaskPID != 4243 {
		t.Errorf("v1 web task folded to %+v", web)
	}
	if got := ids(t, s.Live); !reflect.DeepEqual(got, []string{"web"}) {
		t.Errorf("Live = %v", got)
	}
	v := mustAppend(t, s, "web", 6, fsm.Event{Type: fsm.EventRestartIntent, Time: at(1), Attempt: 1, Exit: &fsm.ExitStatus{Code: 1, OOM: true}})
	mustAppend(t, s, "web", v, fsm.Event{Type: fsm.EventLaunched, Time: at(2), TaskPID: 5000, TaskStartTime: 9})
	if r, err := s.Check(ctx); err != nil || !r.OK() {
		t.Fatalf("Check of the upgraded v1 store: %s %v", r, err)
	}
}

func TestDecodeRecord_EveryTruncationIsCorrupt(t *testing.T) {
	testproc.Parallel(t)
	evs := append(runningLog(1), finishLog(9)...)
	evs = append(evs, fullEvents()...)
	for _, e := range evs {
		rec := encodeRecord(nil, 3, &e)
		for n := range len(rec) {
			var got fsm.Event
			if _, derr := decodeRecord(rec[:n], &got); derr == nil || derr.version != 0 {
				t.Fatalf("%s cut to %d of %d bytes decoded: %+v", e.Type, n, len(rec), derr)
			}
			// Even with a checksum that matches the cut record.
			if n >= headerLen {
				cut := bytes.Clone(rec[:n])
				binary.LittleEndian.PutUint32(cut, checksum(cut))
				if _, derr := decodeRecord(cut, &got); derr == nil {
					t.Fatalf("%s cut to %d bytes with a fixed checksum decoded", e.Type, n)
				}
			}
		}
		for i := range rec { // every single-bit flip is caught
			bad := bytes.Clone(rec)
			bad[i] ^= 1
			var got fsm.Event
			if _, derr := decodeRecord(bad, &got); derr == nil {
				t.Fatalf("%s with byte %d flipped decoded", e.Type, i)
			}
		}
	}
}

// fullEvents carry every version-2 part: they seed the fuzz corpus and the
// truncation test.
func fullEvents() []fsm.Event {
	adj := -500
	spec := &fsm.Spec{
		Name: "api", Driver: "exec", Command: "/usr/bin/api", Args: []string{"-p", "80"},
		Env: map[string]string{"A": "1"}, Dir: "/srv", User: "nobody", CapAdd: []string{"chown"}, CapDrop: []string{"all"},
		KillSignal: 2, KillTimeout: time.Second,
		Resources:   fsm.Resources{MemoryMB: 64, MemoryMaxMB: 128, CPU: 500, Cores: 1, PIDs: 100},
		OOMScoreAdj: &adj, Logs: fsm.LogConfig{MaxFiles: 3, MaxFileSizeMB: 5, Disabled: true},
		Restart: &fsm.RestartPolicy{Attempts: 2, Interval: time.Minute, Delay: time.Second, Mode: fsm.RestartDelay, OnSuccess: true},
		PIDMode: "host", IPCMode: "host", Job: "job", Group: "group",
		Network: fsm.NetworkNone, Seccomp: "/etc/tether/profile.json",
		Alloc: &fsm.Alloc{ID: "a1", Index: 2, Dir: "/s/allocs/a1/alloc", TaskDir: "/s/allocs/a1/api", Tasks: []string{"init", "api"},
			Hook: fsm.HookPrestart, Sidecar: true, Leader: true, Generation: 3, NotBefore: at(1),
			Reschedule:  &fsm.ReschedulePolicy{Attempts: 2, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: fsm.DelayFibonacci, MaxDelay: time.Minute},
			Rescheduled: []fsm.RescheduleEvent{{At: at(0), Delay: 5 * time.Second}}, Restarts: fsm.RestartState{WindowStart: at(0), Count: 1, Attempts: 4}},
		Templates: []fsm.Template{{Data: "x={{ env \"A\" }}", Destination: "local/x", Perms: 0o600, UID: &adj, GID: &adj, Env: true,
			ChangeMode: fsm.ChangeSignal, ChangeSignal: 1, LeftDelim: "[[", RightDelim: "]]", ErrMissingKey: true}},
		Artifacts: []fsm.Artifact{{Source: "http://127.0.0.1/a.tgz", Destination: "local/a", Mode: fsm.ArtifactDir,
			Options: map[string]string{"checksum": "sha256:00", "archive": "tgz"}, Headers: map[string]string{"X": "y"}, Chown: true}},
		Ports:     []fsm.Port{{Label: "http", Value: 20001, To: 8080, IP: "127.0.0.1", Task: "api"}},
		Readiness: fsm.ReadinessNotify, Watchdog: 30 * time.Second,
	}
	return []fsm.Event{
		{Type: fsm.EventCreated, Time: at(0), Spec: spec},
		{Type: fsm.EventReady, Time: at(1)},
		{Type: fsm.EventExecutorUp, Time: at(2), Executor: &fsm.Identity{PID: 9, StartTime: 1, BootID: "b", Nonce: "n", Socket: "/s", Cgroup: "/sys/fs/cgroup/tether/t-n"}},
		{Type: fsm.EventRestartIntent, Time: at(3), Attempt: 2, Grace: time.Second, Exit: &fsm.ExitStatus{Code: -1, Signal: 9, OOM: true}},
		{Type: fsm.EventExecutorReaped, Time: at(4), Target: fsm.StateExited, Exit: &fsm.ExitStatus{Code: 137, OOM: true}},
	}
}

// The spec's optional parts refuse non-canonical forms: a part present
// with the zero value, an empty extension, a boolean other than 0 or 1.
func TestDecodeRecord_SpecExtensionCanonical(t *testing.T) {
	testproc.Parallel(t)
	base := fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{Logs: fsm.LogConfig{Disabled: true}}}
	rec := encodeRecord(nil, 1, &base)
	// The last byte is the Disabled boolean; make it 2.
	bad := bytes.Clone(rec)
	bad[len(bad)-1] = 2
	binary.LittleEndian.PutUint32(bad, checksum(bad))
	var got fsm.Event
	if _, derr := decodeRecord(bad, &got); derr == nil || derr.reason != "invalid boolean" {
		t.Errorf("boolean 2: %+v", derr)
	}
	// Disabled false makes the logs part all zero: present but zero.
	bad[len(bad)-1] = 0
	binary.LittleEndian.PutUint32(bad, checksum(bad))
	if _, derr := decodeRecord(bad, &got); derr == nil || derr.reason != "zero value for a present field" {
		t.Errorf("zero logs part: %+v", derr)
	}
}

// A readiness check round-trips, check_restart included, and its
// presence byte is canonical (0 or 1).
func TestDecodeRecord_CheckRoundTrip(t *testing.T) {
	testproc.Parallel(t)
	c := &fsm.Check{Name: "api", PortLabel: "http", Address: "127.0.0.1", Port: 20001, Path: "/health",
		Interval: time.Second, Timeout: 2 * time.Second, Restart: &fsm.CheckRestart{Limit: 3, Grace: 10 * time.Second, IgnoreWarnings: true}}
	e := fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{Readiness: fsm.ReadinessHTTP, Check: c}}
	rec := encodeRecord(nil, 1, &e)
	var got fsm.Event
	if _, derr := decodeRecord(rec, &got); derr != nil || !reflect.DeepEqual(got.Spec.Check, c) {
		t.Fatalf("round trip: %+v, %+v", derr, got.Spec.Check)
	}
	bad := bytes.Clone(rec)
	bad[len(bad)-1] = 2 // ignore_warnings, last in the record
	binary.LittleEndian.PutUint32(bad, checksum(bad))
	if _, derr := decodeRecord(bad, &got); derr == nil || derr.reason != "invalid boolean" {
		t.Errorf("boolean 2: %+v", derr)
	}
}

// A watchdog part present with a zero interval is not canonical (the
// encoder leaves a zero watchdog out).
func TestDecodeRecord_WatchdogZeroRefused(t *testing.T) {
	testproc.Parallel(t)
	e := fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{Readiness: fsm.ReadinessNotify, Watchdog: 1}}
	rec := encodeRecord(nil, 1, &e)
	var got fsm.Event
	if _, derr := decodeRecord(rec, &got); derr != nil || got.Spec.Watchdog != 1 || got.Spec.Readiness != fsm.ReadinessNotify {
		t.Fatalf("round trip: %+v, %+v", derr, got.Spec)
	}
	bad := bytes.Clone(rec)
	bad[len(bad)-1] = 0 // the watchdog's varint, last in the record
	binary.LittleEndian.PutUint32(bad, checksum(bad))
	if _, derr := decodeRecord(bad, &got); derr == nil || derr.reason != "zero value for a present field" {
		t.Errorf("zero watchdog: %+v", derr)
	}
}

func TestDecodeRecord_UnknownType(t *testing.T) {
	testproc.Parallel(t)
	e := fsm.Event{Type: fsm.EventRunning}
	rec := encodeRecord(nil, 1, &e)
	rec[5] = 200
	binary.LittleEndian.PutUint32(rec, checksum(rec))
	var got fsm.Event
	if _, derr := decodeRecord(rec, &got); derr == nil || derr.reason != "unknown event type 200" {
		t.Fatalf("unknown type: %+v", derr)
	}
}

// Decoding into a reused event leaves nothing of the previous one.
func TestDecodeRecord_ReusedEventReset(t *testing.T) {
	testproc.Parallel(t)
	var e fsm.Event
	for _, prev := range append(fullEvents(), runningLog(0)...) {
		rec := encodeRecord(nil, 1, &prev)
		if _, derr := decodeRecord(rec, &e); derr != nil {
			t.Fatal(derr.reason)
		}
		next := fsm.Event{Type: fsm.EventReattached, Time: 5}
		if _, derr := decodeRecord(encodeRecord(nil, 2, &next), &e); derr != nil {
			t.Fatal(derr.reason)
		}
		if !reflect.DeepEqual(e, next) {
			t.Fatalf("after %s, decoding a bare reattached gave %#v", prev.Type, e)
		}
	}
}

// FuzzDecodeRecord holds the decoder to: never panic, and anything it
// accepts re-encodes (in its own record version) to the same bytes (the
// form is canonical). Each input is tried as is and with its checksum
// fixed, so the body parser is exercised too. The seed corpus is in
// testdata/fuzz/FuzzDecodeRecord (version-1 records of the first tether,
// and version-2 records with every new part).
func FuzzDecodeRecord(f *testing.F) {
	for i, e := range append(append(runningLog(1), finishLog(9)...), fullEvents()...) {
		f.Add(encodeRecord(nil, uint64(i+1), &e))
	}
	check := fsm.Event{Type: fsm.EventCreated, Spec: &fsm.Spec{Readiness: fsm.ReadinessExec, Check: &fsm.Check{Name: "c",
		Command: "/bin/check", Args: []string{"-q"}, Interval: time.Second, Timeout: time.Second,
		Restart: &fsm.CheckRestart{Limit: 3, Grace: time.Minute, IgnoreWarnings: true}}}}
	f.Add(encodeRecord(nil, 1, &check))
	f.Fuzz(func(t *testing.T, data []byte) {
		try := func(rec []byte) {
			var e fsm.Event
			seq, derr := decodeRecord(rec, &e)
			if derr != nil {
				return
			}
			if again := appendRecord(nil, rec[4], seq, &e); !bytes.Equal(again, rec) {
				t.Fatalf("accepted a non-canonical record:\n in % x\nout % x", rec, again)
			}
		}
		try(data)
		if len(data) >= headerLen {
			fixed := bytes.Clone(data)
			binary.LittleEndian.PutUint32(fixed, checksum(fixed))
			try(fixed)
		}
	})
}

// checksum agrees with hash/crc32 on every length and alignment.
func TestChecksum_AgreesWithHashCRC32(t *testing.T) {
	testproc.Parallel(t)
	buf := make([]byte, 1100)
	for i := range buf {
		buf[i] = byte(i*131 + 7)
	}
	for off := range 8 {
		for n := 4; off+n <= len(buf); n += 1 + n/40 {
			rec := buf[off : off+n]
			if got, want := checksum(rec), crc32.Checksum(rec[4:], castagnoliTable()); got != want {
				t.Fatalf("offset %d length %d: checksum %08x, hash/crc32 %08x", off, n, got, want)
			}
		}
	}
}

// TestDecodeRecord_Version2Upgrade: what version 2 held in other fields is
// read typed (fsm.Event.Upgrade), and written in version 2 again to the
// same bytes: a restart-intent's delay (its grace), a launch's warnings
// (its reason, "warning: ..."), a failure's cause (told from its reason).
func TestDecodeRecord_Version2Upgrade(t *testing.T) {
	for _, tc := range []struct {
		old, want fsm.Event
	}{
		{fsm.Event{Type: fsm.EventRestartIntent, Attempt: 1, Exit: &fsm.ExitStatus{Code: 3}, Grace: 2 * time.Second, Reason: "exited 3"},
			fsm.Event{Type: fsm.EventRestartIntent, Attempt: 1, Exit: &fsm.ExitStatus{Code: 3}, Delay: 2 * time.Second, Reason: "exited 3"}},
		{fsm.Event{Type: fsm.EventLaunched, TaskPID: 9, TaskStartTime: 4, Reason: "warning: no cgroup for this task; warning: no restarts"},
			fsm.Event{Type: fsm.EventLaunched, TaskPID: 9, TaskStartTime: 4, Warnings: []fsm.Warning{
				{Kind: fsm.WarnOther, Text: "no cgroup for this task"}, {Kind: fsm.WarnOther, Text: "no restarts"}}}},
		{fsm.Event{Type: fsm.EventLaunchFailed, Reason: `executor: command not found: "nope" not in PATH /bin`},
			fsm.Event{Type: fsm.EventLaunchFailed, Reason: `executor: command not found: "nope" not in PATH /bin`, Cause: fsm.CauseCommandNotFound}},
		{fsm.Event{Type: fsm.EventStopRequested, Signal: 15, Grace: time.Second},
			fsm.Event{Type: fsm.EventStopRequested, Signal: 15, Grace: time.Second}},
	} {
		rec := appendRecord(nil, 2, 3, &tc.old)
		var got fsm.Event
		if _, derr := decodeRecord(rec, &got); derr != nil {
			t.Fatalf("%s: %+v", tc.old.Type, derr)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("version-2 %s read as\n %#v\nwant %#v", tc.old.Type, got, tc.want)
		}
		if again := appendRecord(nil, 2, 3, &got); !bytes.Equal(again, rec) {
			t.Errorf("version-2 %s re-encodes in version 2 to other bytes", tc.old.Type)
		}
		if now := encodeRecord(nil, 3, &got); now[4] != recordVersion {
			t.Errorf("encoded now in version %d", now[4])
		}
	}
}
