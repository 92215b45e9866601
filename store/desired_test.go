package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
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
	spec := *fullEvents()[0].Spec
	spec.Name = name
	spec.Resources.Cores = 0 // every field of the record (cores beside cpu) is more than a valid spec holds
	return Desired{Name: name, Source: SourceEnabled, File: "/etc/tether/" + name + ".hcl", Spec: &spec}
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
	dir := Desired{Name: "web", Source: SourceDir, File: "/etc/tether/web.hcl", Task: "web-1a2b3c",
		NotBefore: at(20), Restart: fsm.RestartState{WindowStart: at(1), Count: 2, Attempts: 3},
		Settled: "web-000000", Reason: "exceeded 2 restart attempts"}
	en := enabledRecord("api")
	en.Disabled = true
	written, err := s.ChangeDesired(ctx, DesiredChange{Desired: dir}, DesiredChange{Desired: en})
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 2 || written[0].Rev != 1 || written[1].Rev != 1 {
		t.Fatalf("written = %+v; want two records at revision 1", written)
	}
	got, err := s.Desired(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir.Rev, en.Rev = 1, 1
	if want := []Desired{en, dir}; !reflect.DeepEqual(got, want) {
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
	if err != nil || !rep.OK() || rep.Desired != 2 {
		t.Fatalf("Check = %s, %v; want clean with 2 desired records", rep, err)
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
	a.Task = "a-1"
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: a}); err != nil {
		t.Fatal(err)
	}
	// a is at revision 2 now: a change expecting 1 (with a new record
	// beside it) is refused whole.
	stale := a
	stale.Task = "a-2"
	_, err = s.ChangeDesired(ctx, DesiredChange{Desired: enabledRecord("b")}, DesiredChange{Desired: stale})
	var ce *DesiredConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Name != "a" || ce.Expected != 1 || ce.Actual != 2 {
		t.Fatalf("stale change = %v; want a conflict on a (expected 1, actual 2)", err)
	}
	got, _ := s.Desired(ctx)
	if len(got) != 1 || got[0].Task != "a-1" || got[0].Rev != 2 {
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
	bad := enabledRecord("x")
	bad.Spec.Driver = "docker"
	for name, c := range map[string]DesiredChange{
		"no name":     {Desired: Desired{Source: SourceDir}},
		"no source":   {Desired: Desired{Name: "x"}},
		"bad spec":    {Desired: bad},
		"long name":   {Desired: Desired{Name: strings.Repeat("n", maxDesiredName+1), Source: SourceDir}},
		"negative":    {Desired: Desired{Name: "x", Source: SourceDir, Restart: fsm.RestartState{Count: -1}}},
		"delete name": {Delete: true},
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
	if err != nil || len(got) != 1 || got[0].Name != "good" || !reflect.DeepEqual(got[0].Spec, enabledRecord("good").Spec) {
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
	a := Desired{Name: "a", Source: SourceDir, Task: "current"}
	b := Desired{Name: "b", Source: SourceDir, Task: "current-unstarted", Settled: "settled", Reason: "stopped"}
	if _, err := s.ChangeDesired(ctx, DesiredChange{Desired: a}, DesiredChange{Desired: b}); err != nil {
		t.Fatal(err)
	}
	removed, err := s.Remove(ctx, baseTime.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"orphan"}) {
		t.Fatalf("Remove = %v; want only orphan (current and settled are named by desired records)", removed)
	}
}

func genDesired(t *rapid.T) Desired {
	d := Desired{
		Name:   rapid.StringN(1, 20, -1).Draw(t, "name"),
		Source: DesiredSource(rapid.IntRange(1, int(numSources)-1).Draw(t, "source")),
		File:   rapid.String().Draw(t, "file"), Task: rapid.String().Draw(t, "task"),
		NotBefore: rapid.Int64().Draw(t, "not_before"),
		Restart: fsm.RestartState{WindowStart: rapid.Int64().Draw(t, "window"),
			Count: rapid.IntRange(0, maxRestarts).Draw(t, "count"), Attempts: rapid.IntRange(0, maxRestarts).Draw(t, "attempts")},
		Settled: rapid.String().Draw(t, "settled"), Reason: rapid.String().Draw(t, "reason"),
		Disabled: rapid.Bool().Draw(t, "disabled"),
		Rev:      rapid.Uint64Min(1).Draw(t, "rev"),
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
	if _, why := decodeDesired(rec); !strings.Contains(why, "version 2") {
		t.Fatalf("decode of a newer record: %q; want it refused naming its version", why)
	}
}

func FuzzDecodeDesired(f *testing.F) {
	for _, d := range []Desired{enabledRecord("a"), {Name: "b", Source: SourceDir, Task: "b-1", Rev: 3, Disabled: true}} {
		if d.Rev == 0 {
			d.Rev = 1
		}
		f.Add(encodeDesired(&d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		try := func(rec []byte) {
			d, why := decodeDesired(rec)
			if why != "" {
				return
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
