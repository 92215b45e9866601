package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"
)

func enabledRecord(name string) Desired {
	return Desired{Name: name, Source: SourceEnabled, File: "/etc/tether/" + name + ".hcl",
		Text: []byte("task \"" + name + "\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/sleep\" }\n}\n"),
		Inputs: DesiredInputs{Vars: map[string]string{"v": "1"}, VarFiles: []NamedText{{Name: "f.hcl", Text: []byte("w = 2")}},
			Env: map[string]string{"NOMAD_VAR_x": "3"}, Meta: map[string]string{"k": "m"}, Task: name},
		Digest: "d-" + name}
}

// legacyRecord is a record as version 1 held it: a registration's spec.
func legacyRecord(name string) Desired {
	spec := *fullEvents()[0].Spec
	spec.Name = name
	spec.Resources.Cores = 0 // every field of the record (cores beside cpu) is more than a valid spec holds
	spec.Alloc, spec.Templates, spec.Artifacts, spec.Ports = nil, nil, nil, nil
	return Desired{Name: name, Source: SourceEnabled, File: "/etc/tether/" + name + ".hcl", Spec: &spec, Task: name + "-1"}
}

func schemaOf(t *testing.T, path string) uint32 {
	t.Helper()
	var v uint32
	rawView(t, path, func(tx *bolt.Tx) error {
		v = binary.BigEndian.Uint32(tx.Bucket(bucketMeta).Get(keySchema))
		return nil
	})
	return v
}

func rawView(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("raw open: %v", err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		t.Fatalf("raw view: %v", err)
	}
}

func TestChangeDesired_RoundTripRaisesSchema(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	ctx := context.Background()
	if got, err := s.Desired(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Desired of a new store = %v, %v; want none", got, err)
	}
	dir := Desired{Name: "web", Source: SourceDir, File: "/etc/tether/web.hcl", Digest: "abc",
		Allocs: []DesiredAlloc{{Group: "web", ID: "a1", Tasks: []string{"web-1a2b3c"}, Generation: 2, NotBefore: at(20), Kind: "reschedule",
			Restarts: 1, Reschedules: 1}, {Group: "web", Index: 1, ID: "a2", Tasks: []string{"web-1a2b3d", "web-1a2b3e"}}},
		Reason: "exceeded 2 restart attempts", Retiring: true}
	en := enabledRecord("api")
	en.Disabled = true
	written, err := s.ChangeDesired(ctx, DesiredChange{Desired: dir}, DesiredChange{Desired: en}, DesiredChange{Desired: legacyRecord("old")})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 3 || written[0].Rev != 1 || written[1].Rev != 1 {
		t.Fatalf("written = %+v; want three records at revision 1", written)
	}
	got, err := s.Desired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := legacyRecord("old")
	dir.Rev, en.Rev, old.Rev = 1, 1, 1
	if want := []Desired{en, old, dir}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Desired = %+v\nwant %+v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := schemaOf(t, path); v != schemaDesired {
		t.Fatalf("schema after the first desired record = %d, want %d", v, schemaDesired)
	}
	s = openTest(t, path, Options{NoSync: true})
	rep, err := s.Check(ctx)
	if err != nil || !rep.OK() || rep.Desired != 3 {
		t.Fatalf("Check = %s, %v; want clean with 3 desired records", rep, err)
	}
}

func TestChangeDesired_StaleRevisionWritesNothing(t *testing.T) {
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	w, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("a")})
	if err != nil {
		t.Fatal(err)
	}
	a := w[0]
	a.Allocs = []DesiredAlloc{{ID: "x", Tasks: []string{"a-1"}}}
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: a}); err != nil {
		t.Fatal(err)
	}
	// a is at revision 2 now: a change expecting 1 (with a new record
	// beside it) is refused whole.
	stale := a
	stale.Allocs = []DesiredAlloc{{ID: "x", Tasks: []string{"a-2"}}}
	_, err = s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("b")}, DesiredChange{Desired: stale})
	var ce *DesiredConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Name != "a" || ce.Expected != 1 || ce.Actual != 2 {
		t.Fatalf("stale change = %v; want a conflict on a (expected 1, actual 2)", err)
	}
	got, _ := s.Desired(ctx)
	if len(got) != 1 || got[0].Allocs[0].Tasks[0] != "a-1" || got[0].Rev != 2 {
		t.Fatalf("after the refused change: %+v; want a alone, at a-1, revision 2", got)
	}
	// A new record over an existing name is a conflict too.
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("a")}); !errors.As(err, &ce) {
		t.Fatalf("new record over an existing one = %v; want a conflict", err)
	}
	// Delete takes the revision too.
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: Desired{Name: "a", Rev: 1}, Delete: true}); !errors.As(err, &ce) {
		t.Fatalf("stale delete = %v; want a conflict", err)
	}
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: Desired{Name: "a", Rev: 2}, Delete: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Desired(ctx); len(got) != 0 {
		t.Fatalf("after delete: %+v", got)
	}
}

func TestChangeDesired_BadInput(t *testing.T) {
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	bad := legacyRecord("x")
	bad.Spec.Driver = "docker"
	for name, c := range map[string]DesiredChange{
		"no name":        {Desired: Desired{Source: SourceDir}},
		"no source":      {Desired: Desired{Name: "x"}},
		"bad spec":       {Desired: bad},
		"long name":      {Desired: Desired{Name: strings.Repeat("n", maxDesiredName+1), Source: SourceDir}},
		"negative count": {Desired: Desired{Name: "x", Source: SourceDir, Allocs: []DesiredAlloc{{ID: "a", Restarts: -1}}}},
		"alloc no id":    {Desired: Desired{Name: "x", Source: SourceDir, Allocs: []DesiredAlloc{{Tasks: []string{"t"}}}}},
		"text too large": {Desired: Desired{Name: "x", Source: SourceEnabled, Text: make([]byte, MaxDesiredText+1)}},
		"delete name":    {Delete: true},
	} {
		if _, err := s.ChangeDesired(ctx, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("x")}, DesiredChange{Desired: enabledRecord("x")}); err == nil {
		t.Error("the same name twice in one commit: accepted")
	}
}

func TestDesired_DamagedRecordNamedByReadCheckAndSalvage(t *testing.T) {
	path := testPath(t)
	ctx := context.Background()
	var rep Report
	s := openDamaged(t, path, Options{NoSync: true}, func(_ testing.TB, r Report) { rep = r })
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("good")}, DesiredChange{Desired: enabledRecord("hurt")}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "t1", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDesired)
		v := slices.Clone(b.Get([]byte("hurt")))
		v[len(v)-1] ^= 0x10
		return b.Put([]byte("hurt"), v)
	})
	s = openDamaged(t, path, Options{NoSync: true}, func(_ testing.TB, r Report) { rep = r })
	_, err := s.Desired(ctx)
	var de *DesiredError
	if !errors.As(err, &de) || de.Name != "hurt" || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Desired of a damaged record = %v; want a DesiredError naming hurt, checksum mismatch", err)
	}
	r, err := s.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0].String(), `desired task "hurt": checksum mismatch`) || r.Desired != 1 {
		t.Fatalf("Check = %s; want one problem naming desired task hurt", r)
	}
	_ = rep
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(filepath.Dir(path), "salvaged.db")
	srep, err := Salvage(ctx, path, dst, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(srep.Desired, []string{"good"}) || len(srep.Damage) != 1 || !strings.Contains(srep.Damage[0].Error(), `"hurt"`) {
		t.Fatalf("Salvage: desired %v, damage %v; want good copied and hurt reported", srep.Desired, srep.Damage)
	}
	out := openTest(t, dst, Options{NoSync: true})
	got, err := out.Desired(ctx)
	if err != nil || len(got) != 1 || got[0].Name != "good" || !bytes.Equal(got[0].Text, enabledRecord("good").Text) {
		t.Fatalf("salvaged Desired = %+v, %v", got, err)
	}
}

func TestCheck_DesiredBucketAgreesWithSchema(t *testing.T) {
	path := testPath(t)
	ctx := context.Background()
	var rep Report
	s := openDamaged(t, path, Options{NoSync: true}, func(_ testing.TB, r Report) { rep = r })
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("a")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error { // a schema-1 store with a desired bucket
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaNoDesired))
	})
	r, err := CheckFile(ctx, path, Options{})
	if err != nil || r.OK() || !strings.Contains(r.String(), "desired bucket in a store of schema version 1") {
		t.Fatalf("CheckFile = %s, %v; want the stray desired bucket reported", r, err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error { // schema 2, its bucket gone
		if err := tx.DeleteBucket(bucketDesired); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaDesired))
	})
	if _, err := Open(path, Options{}); !errors.Is(err, ErrNotStore) {
		t.Fatalf("Open of schema 2 without its bucket = %v; want ErrNotStore", err)
	}
	rawUpdate(t, path, func(tx *bolt.Tx) error { // restore, for the cleanup
		return tx.Bucket(bucketMeta).Put(keySchema, binary.BigEndian.AppendUint32(nil, schemaNoDesired))
	})
	_ = rep
}

func TestRemove_KeepsTheTasksDesiredRecordsName(t *testing.T) {
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	for _, id := range []string{"current", "settled", "orphan"} {
		mustAppend(t, s, id, 0, runningLog(0)...)
		mustAppend(t, s, id, 6, finishLog(10)...)
	}
	a := Desired{Name: "a", Source: SourceDir, Allocs: []DesiredAlloc{{ID: "x", Tasks: []string{"current", "current-unstarted"}}}}
	b := Desired{Name: "b", Source: SourceDir, Task: "settled", Reason: "stopped"}
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: a}, DesiredChange{Desired: b}); err != nil {
		t.Fatal(err)
	}
	removed, err := s.Remove(ctx, baseTime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"orphan"}) {
		t.Fatalf("Remove = %v; want only orphan (current and settled are named by desired records: an allocation's copy, a version-1 task)", removed)
	}
}

func genDesired(t *rapid.T) Desired {
	d := Desired{
		Name:   rapid.StringN(1, 20, -1).Draw(t, "name"),
		Source: DesiredSource(rapid.IntRange(1, int(numSources)-1).Draw(t, "source")),
		File:   rapid.String().Draw(t, "file"), Digest: rapid.String().Draw(t, "digest"),
		Reason:   rapid.String().Draw(t, "reason"),
		Disabled: rapid.Bool().Draw(t, "disabled"),
		Retiring: rapid.Bool().Draw(t, "retiring"),
		Task:     rapid.String().Draw(t, "task"),
		Rev:      rapid.Uint64Min(1).Draw(t, "rev"),
	}
	if b := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "text"); len(b) > 0 {
		d.Text = b
	}
	in := &d.Inputs
	nonEmptyMap := func(label string) map[string]string {
		if m := rapid.MapOfN(rapid.String(), rapid.String(), 0, 3).Draw(t, label); len(m) > 0 {
			return m
		}
		return nil
	}
	in.Vars, in.Env, in.Meta = nonEmptyMap("vars"), nonEmptyMap("env"), nonEmptyMap("meta")
	for range rapid.IntRange(0, 2).Draw(t, "var_files") {
		in.VarFiles = append(in.VarFiles, NamedText{Name: rapid.String().Draw(t, "vf_name"), Text: []byte(rapid.String().Draw(t, "vf_text"))})
	}
	for _, vf := range in.VarFiles {
		if len(vf.Text) == 0 {
			in.VarFiles = nil // an empty text decodes as nil: keep the draw canonical
		}
	}
	in.Task, in.Group = rapid.String().Draw(t, "sel_task"), rapid.String().Draw(t, "sel_group")
	for range rapid.IntRange(0, 3).Draw(t, "allocs") {
		a := DesiredAlloc{Group: rapid.String().Draw(t, "group"), Index: rapid.IntRange(0, maxRestarts).Draw(t, "index"),
			ID: rapid.StringN(1, 10, -1).Draw(t, "alloc_id"), Generation: rapid.IntRange(0, maxRestarts).Draw(t, "generation"),
			NotBefore: rapid.Int64().Draw(t, "not_before"), Kind: rapid.String().Draw(t, "kind"),
			Restarts: rapid.IntRange(0, maxRestarts).Draw(t, "restarts"), Reschedules: rapid.IntRange(0, maxRestarts).Draw(t, "reschedules")}
		if ts := rapid.SliceOfN(rapid.String(), 0, 3).Draw(t, "alloc_tasks"); len(ts) > 0 {
			a.Tasks = ts
		}
		d.Allocs = append(d.Allocs, a)
	}
	if rapid.Bool().Draw(t, "has_spec") {
		d.Spec = genSpec(t)
	}
	return d
}

func TestDesiredRecord_RoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := genDesired(t)
		rec := encodeDesired(&d)
		got, why := decodeDesired(rec)
		if why != "" {
			t.Fatalf("decode: %s", why)
		}
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, d)
		}
	})
}

func TestDesiredRecord_NewerVersionRefused(t *testing.T) {
	d := enabledRecord("a")
	d.Rev = 1
	rec := encodeDesired(&d)
	rec[4] = desiredRecordVersion + 1
	binary.LittleEndian.PutUint32(rec, checksum(rec))
	if _, why := decodeDesired(rec); !strings.Contains(why, "version 3") {
		t.Fatalf("decode of a newer record: %q; want it refused naming its version", why)
	}
}

func FuzzDecodeDesired(f *testing.F) {
	for _, d := range []Desired{enabledRecord("a"), legacyRecord("l"), {Name: "b", Source: SourceDir, Task: "b-1", Rev: 3, Disabled: true}} {
		if d.Rev == 0 {
			d.Rev = 1
		}
		f.Add(encodeDesired(&d))
	}
	for _, rec := range v1DesiredRecords(f) {
		f.Add(rec)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		try := func(rec []byte) {
			d, why := decodeDesired(rec)
			if why != "" || rec[4] != desiredRecordVersion {
				return // a version-1 record is upcast: not written back as it was
			}
			if again := encodeDesired(&d); !bytes.Equal(again, rec) {
				t.Fatalf("accepted a non-canonical record:\n in % x\nout % x", rec, again)
			}
		}
		try(data)
		if len(data) >= 5 {
			fixed := bytes.Clone(data)
			binary.LittleEndian.PutUint32(fixed, checksum(fixed))
			try(fixed)
		}
	})
}

// v1DesiredRecords are records version 1 wrote (tether f79d79a's encoder,
// testdata/v1/desired.hex): an enabled task with its spec, task, due
// time, restart count and settling; a config dir task being disabled.
func v1DesiredRecords(t testing.TB) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "v1", "desired.hex"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range strings.Fields(string(b)) {
		rec, err := hex.DecodeString(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// Version-1 records are read and upcast: the registration's spec and its
// task are kept, its file, reason and disable too; the restart count and
// the settling of the one task are dropped.
func TestDesiredRecord_V1Upcast(t *testing.T) {
	recs := v1DesiredRecords(t)
	if len(recs) != 2 {
		t.Fatalf("%d version-1 records in testdata", len(recs))
	}
	en, why := decodeDesired(recs[0])
	if why != "" {
		t.Fatal(why)
	}
	want := &fsm.Spec{Name: "legacy", Driver: "raw_exec", Command: "/bin/sleep", Args: []string{"1000"}, Env: map[string]string{"A": "1"},
		Restart: &fsm.RestartPolicy{Attempts: 3, Interval: time.Hour, Delay: time.Second, Mode: fsm.RestartFail, OnSuccess: true}}
	if en.Name != "legacy" || en.Source != SourceEnabled || en.File != "/etc/tether/legacy.hcl" || en.Task != "legacy-abc123" ||
		en.Reason != "gave up" || en.Rev != 4 || !reflect.DeepEqual(en.Spec, want) || en.Text != nil || en.Allocs != nil {
		t.Errorf("the enabled record upcast: %+v", en)
	}
	dir, why := decodeDesired(recs[1])
	if why != "" || dir.Name != "dirtask" || dir.Source != SourceDir || dir.Task != "dirtask-def456" || !dir.Disabled || dir.Rev != 2 || dir.Spec != nil {
		t.Errorf("the config dir record upcast: %+v %s", dir, why)
	}
	// A store holding them serves them, and writes them back as version 2.
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("seed")}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDesired)
		if err := b.Put([]byte("legacy"), recs[0]); err != nil {
			return err
		}
		return b.Put([]byte("dirtask"), recs[1])
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Desired(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("Desired: %+v, %v", got, err)
	}
	if rep, err := s.Check(ctx); err != nil || !rep.OK() || rep.Desired != 3 {
		t.Fatalf("Check of a store with version-1 records: %s, %v", rep, err)
	}
	legacy := got[1]
	legacy.Reason = "carried on"
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: legacy}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketDesired).Get([]byte("legacy")); v[4] != desiredRecordVersion {
			t.Errorf("a changed version-1 record is written as version %d", v[4])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
