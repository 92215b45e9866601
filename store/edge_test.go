package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The store's edge rules (issue 36): each damage is named by every reader
// of the store, at its task and sequence number, never skipped silently.

// readerFinding is what one reader of the store said of one task.
type readerFinding struct {
	reader string
	err    error // the task's error; nil: read as sound
}

// everyReader reads task in the store at path with each reader a caller
// has (Load, LoadTask, LoadFrom, LoadTasks of all and of the live ones,
// Check, CheckFile and Salvage), and returns what each said of it.
func everyReader(t *testing.T, path, task string) []readerFinding {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []readerFinding
	add := func(reader string, err error) { out = append(out, readerFinding{reader, err}) }
	_, err = s.Load(ctx, task)
	add("Load", err)
	_, err = s.LoadTask(ctx, task)
	add("LoadTask", err)
	_, err = s.LoadFrom(ctx, task, 1, 0)
	add("LoadFrom", err)
	for _, sel := range []Selection{AllTasks, LiveTasks} {
		name := map[Selection]string{AllTasks: "LoadTasks(AllTasks)", LiveTasks: "LoadTasks(LiveTasks)"}[sel]
		sc, err := s.LoadTasks(ctx, sel)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = nil
		if i := slices.IndexFunc(sc.Unreadable, func(e TaskError) bool { return e.Task == task }); i >= 0 {
			err = sc.Unreadable[i].Err
		} else if !slices.ContainsFunc(sc.Tasks, func(tk fsm.Task) bool { return tk.ID == task }) {
			err = fmt.Errorf("%s lists task %s nowhere", name, task)
		}
		add(name, err)
	}
	checks := map[string]func() (Report, error){
		"Check":     func() (Report, error) { return s.Check(ctx) },
		"CheckFile": func() (Report, error) { return CheckFile(ctx, path, Options{}) },
	}
	for _, name := range []string{"Check", "CheckFile"} {
		rep, err := checks[name]()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = nil
		if i := slices.IndexFunc(rep.Problems, func(p Problem) bool { return p.Task == task }); i >= 0 {
			err = rep.Problems[i].Err
			if p := rep.Problems[i]; !errors.Is(p.Err, ErrCorrupt) && !errors.Is(p.Err, ErrVersion) {
				err = fmt.Errorf("%s's problem %s is neither ErrCorrupt nor ErrVersion", name, p)
			}
		}
		add(name, err)
	}
	srep, err := Salvage(ctx, path, filepath.Join(t.TempDir(), "salvaged.db"), Options{})
	if err != nil {
		t.Fatalf("Salvage: %v", err)
	}
	err = nil
	if i := slices.IndexFunc(srep.Lost, func(l LostTask) bool { return l.ID == task }); i >= 0 {
		err = srep.Lost[i].Err
	} else if !slices.Contains(srep.Copied, task) {
		err = fmt.Errorf("Salvage reports task %s neither copied nor lost", task)
	}
	add("Salvage", err)
	return out
}

// requireNamed requires every finding to be a *CorruptError naming task
// and seq.
func requireNamed(t *testing.T, findings []readerFinding, task string, seq uint64) {
	t.Helper()
	for _, f := range findings {
		var ce *CorruptError
		switch {
		case f.err == nil:
			t.Errorf("%s reads task %s as sound; want corruption at seq %d", f.reader, task, seq)
		case !errors.As(f.err, &ce) || !errors.Is(f.err, ErrCorrupt):
			t.Errorf("%s of task %s: %v; want a CorruptError at seq %d", f.reader, task, f.err, seq)
		case ce.Task != task || ce.Seq != seq:
			t.Errorf("%s of task %s: %v names task %q seq %d; want seq %d", f.reader, task, f.err, ce.Task, ce.Seq, seq)
		}
	}
}

// edgeStore makes a store of tasks, each with a running log of 10 events
// (six, then four reattached self-loops: removing one keeps the walk
// legal, so only the check of sequence numbers can tell), damages it with
// damage, and returns its path.
func edgeStore(t *testing.T, tasks []string, damage func(tx *bolt.Tx) error) string {
	t.Helper()
	return damagedStore(t, func(s *Store) {
		for _, id := range tasks {
			mustAppend(t, s, id, 0, runningLog(4)...)
		}
	}, func(path string) { rawUpdate(t, path, damage) })
}

// A gap in a task's sequence numbers, at its first record, in its middle
// (a reattached: the rest is still a legal walk) and at its end (the head
// still counting the lost record), is named by every reader at the
// missing sequence number; the sound task beside it reads whole.
func TestLoad_GapNamedByEveryReader(t *testing.T) {
	testproc.Parallel(t)
	gaps := map[string]uint64{"gap-first": 1, "gap-middle": 8, "gap-last": 10}
	path := edgeStore(t, []string{"gap-first", "gap-middle", "gap-last", "sound"}, func(tx *bolt.Tx) error {
		for id, seq := range gaps {
			b, err := rawTask(tx, id)
			if err != nil {
				return err
			}
			if err := b.Delete(seqKey(seq)); err != nil {
				return err
			}
		}
		return nil
	})
	for id, seq := range gaps {
		t.Run(id, func(t *testing.T) { requireNamed(t, everyReader(t, path, id), id, seq) })
	}
	for _, f := range everyReader(t, path, "sound") {
		if f.err != nil {
			t.Errorf("%s of the sound task: %v", f.reader, f.err)
		}
	}
}

// A log's end against its head's version, both ways: a log shorter than
// its head says (its last record lost) and a log longer (a record past the
// head's version, the rest agreeing with the head: only the version
// tells). Every reader names the first sequence number the two disagree
// on.
func TestLoad_LogEndAgainstTheHeadBothWays(t *testing.T) {
	testproc.Parallel(t)
	path := edgeStore(t, []string{"head-ahead", "head-behind", "sound"}, func(tx *bolt.Tx) error {
		ahead, err := rawTask(tx, "head-ahead")
		if err != nil {
			return err
		}
		if err := ahead.Delete(seqKey(10)); err != nil {
			return err
		}
		behind, err := rawTask(tx, "head-behind")
		if err != nil {
			return err
		}
		h, err := decodeHead("head-behind", behind.Get(headKey))
		if err != nil {
			return err
		}
		h.version = 9 // the fold of the first nine is in the same state
		return behind.Put(headKey, encodeHead(h))
	})
	for id, seq := range map[string]uint64{"head-ahead": 10, "head-behind": 10} {
		t.Run(id, func(t *testing.T) { requireNamed(t, everyReader(t, path, id), id, seq) })
	}
	for _, f := range everyReader(t, path, "sound") {
		if f.err != nil {
			t.Errorf("%s of the sound task: %v", f.reader, f.err)
		}
	}
}

// Every single-bit flip of a record, in every byte (every field: the
// checksum, the version, the type, the sequence, the time, the field set
// and each part), is a checksum mismatch: never a record that decodes,
// never a record "from a newer tether" (a flipped version byte is damage,
// not an upgrade to make), never another reason that would hide the check
// that failed.
func TestDecodeRecord_EveryBitFlipIsAChecksumMismatch(t *testing.T) {
	testproc.Parallel(t)
	evs := append(runningLog(1), finishLog(9)...)
	evs = append(evs, fullEvents()...)
	for _, e := range evs {
		rec := encodeRecord(nil, 3, &e)
		for i := range rec {
			for bit := range 8 {
				bad := slices.Clone(rec)
				bad[i] ^= 1 << bit
				var got fsm.Event
				_, derr := decodeRecord(bad, &got)
				if derr == nil || derr.version != 0 || derr.reason != "checksum mismatch" {
					t.Fatalf("%s with bit %d of byte %d (of %d) flipped: %+v, want a checksum mismatch", e.Type, bit, i, len(rec), derr)
				}
			}
		}
	}
}

// One bit flipped on disk in each field of a record (task-created, with
// its spec) and of a head: every reader names the task and the record's
// sequence number (a head: the task, seq 0). A salvage loses the task
// whose record is damaged, and copies the one whose head is (its log is
// whole: the head is folded anew).
func TestLoad_FlippedBitNamedByEveryReader(t *testing.T) {
	testproc.Parallel(t)
	rec := encodeRecord(nil, 1, &runningLog(0)[0])
	// The checksum, the version, the type, the sequence, the time, the
	// field set, the spec's first and last bytes.
	recAt := []int{0, 3, 4, 5, 6, 7, 14, 15, 16, len(rec) - 1}
	hd := encodeHead(head{version: 10, state: fsm.StateRunning, nonce: "n1"})
	// The version, the state, the target, the version (first and last
	// byte), the nonce's length and a byte of it, the restart count, the
	// checksum.
	headAt := []int{0, 1, 2, 3, 10, 11, 12, len(hd) - 5, len(hd) - 1}
	var tasks []string
	for _, i := range recAt {
		tasks = append(tasks, fmt.Sprintf("record-%02d", i))
	}
	for _, i := range headAt {
		tasks = append(tasks, fmt.Sprintf("head-%02d", i))
	}
	path := edgeStore(t, tasks, func(tx *bolt.Tx) error {
		for _, id := range tasks {
			b, err := rawTask(tx, id)
			if err != nil {
				return err
			}
			key, want, at := seqKey(1), rec, strings.TrimPrefix(id, "record-")
			if after, ok := strings.CutPrefix(id, "head-"); ok {
				key, want, at = headKey, hd, after
			}
			i, err := strconv.Atoi(at)
			if err != nil {
				return err
			}
			v := slices.Clone(b.Get(key))
			if !slices.Equal(v, want) {
				return fmt.Errorf("task %s: the bytes on disk are not the ones the test flips", id)
			}
			v[i] ^= 1 << (i % 8)
			if err := b.Put(key, v); err != nil {
				return err
			}
		}
		return nil
	})
	for _, id := range tasks {
		t.Run(id, func(t *testing.T) {
			findings := everyReader(t, path, id)
			if strings.HasPrefix(id, "record-") {
				requireNamed(t, findings, id, 1)
				return
			}
			last := len(findings) - 1
			if findings[last].reader != "Salvage" || findings[last].err != nil {
				t.Errorf("%s of a task whose head is damaged and log whole: %v, want it copied", findings[last].reader, findings[last].err)
			}
			requireNamed(t, findings[:last], id, 0)
		})
	}
}

// The live index against a task's log, each way it can disagree: a task
// the index lists although its log ended, a live task the index misses,
// and an entry for a task the store does not hold. Every reader that folds
// a task (LoadTask, LoadTasks, Check, CheckFile) names it (seq 0: the task
// as a whole); Load and LoadFrom return the events, which are whole; a
// salvage copies the task with its entry rebuilt from its state (or, for
// an entry without a task, reports it lost and live, so that its
// executor is looked for). LoadTasks(AllTasks) lists an entry without a
// task too (every task is a superset of the live ones: it once listed the
// task index alone). LoadTasks(LiveTasks) reads the live index alone, as
// recovery does: a live task the index misses is not in it (Check is what
// finds that one).
func TestLiveIndex_DisagreementNamedByEveryReader(t *testing.T) {
	testproc.Parallel(t)
	path := damagedStore(t, func(s *Store) {
		mustAppend(t, s, "ended-listed", 0, append(runningLog(0), finishLog(10)...)...)
		mustAppend(t, s, "live-missing", 0, runningLog(2)...)
		mustAppend(t, s, "sound", 0, runningLog(2)...)
	}, func(path string) {
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			live := tx.Bucket(bucketLive)
			if err := live.Put([]byte("ended-listed"), liveMark); err != nil {
				return err
			}
			if err := live.Put([]byte("no-task"), liveMark); err != nil {
				return err
			}
			return live.Delete([]byte("live-missing"))
		})
	})
	for _, id := range []string{"ended-listed", "live-missing", "no-task"} {
		t.Run(id, func(t *testing.T) {
			for _, f := range everyReader(t, path, id) {
				var ce *CorruptError
				named := errors.As(f.err, &ce) && ce.Task == id && ce.Seq == 0
				switch {
				case f.reader == "Load" || f.reader == "LoadFrom":
					if id == "no-task" && !named {
						t.Errorf("%s of an index entry without a task: %v, want a CorruptError naming it", f.reader, f.err)
					}
					if id != "no-task" && f.err != nil {
						t.Errorf("%s of a whole log: %v", f.reader, f.err)
					}
				case f.reader == "Salvage":
					if lost := f.err != nil; lost != (id == "no-task") || lost && !named {
						t.Errorf("Salvage of %s: %v; want the task copied (its entry rebuilt), an entry without a task lost", id, f.err)
					}
				case f.reader == "LoadTasks(LiveTasks)" && id == "live-missing":
					if f.err == nil || errors.As(f.err, &ce) {
						t.Errorf("LoadTasks(LiveTasks) of a live task the index misses: %v, want it listed nowhere", f.err)
					}
				case !named:
					t.Errorf("%s of %s: %v, want a CorruptError naming the task (seq 0)", f.reader, id, f.err)
				}
			}
		})
	}
	for _, f := range everyReader(t, path, "sound") {
		if f.err != nil {
			t.Errorf("%s of the sound task: %v", f.reader, f.err)
		}
	}
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	if _, err := Salvage(context.Background(), path, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	n := openTest(t, dst, Options{ReadOnly: true})
	if got := ids(t, n.Live); !slices.Equal(got, []string{"live-missing", "sound"}) {
		t.Errorf("the salvaged store's live index: %v, want [live-missing sound]", got)
	}
}

// A record's version, both ways past what this tether reads: a newer one
// (the next, and the largest a byte holds) is a *VersionError naming the
// task, the sequence and the version, from every reader, and not
// corruption (an upgrade reads it); version 0, below the first, is
// corruption. The checksum is right in each: only the version tells.
func TestLoad_RecordVersionNamedByEveryReader(t *testing.T) {
	testproc.Parallel(t)
	versions := map[string]uint8{"next": recordVersion + 1, "max": 255, "zero": 0}
	path := edgeStore(t, []string{"next", "max", "zero"}, func(tx *bolt.Tx) error {
		for id, ver := range versions {
			b, err := rawTask(tx, id)
			if err != nil {
				return err
			}
			v := slices.Clone(b.Get(seqKey(4)))
			v[4] = ver
			binary.LittleEndian.PutUint32(v, checksum(v))
			if err := b.Put(seqKey(4), v); err != nil {
				return err
			}
		}
		return nil
	})
	for id, ver := range versions {
		t.Run(id, func(t *testing.T) {
			findings := everyReader(t, path, id)
			if ver == 0 {
				requireNamed(t, findings, id, 4)
				return
			}
			for _, f := range findings {
				var ve *VersionError
				switch {
				case !errors.As(f.err, &ve) || !errors.Is(f.err, ErrVersion) || errors.Is(f.err, ErrCorrupt):
					t.Errorf("%s of a record of version %d: %v, want a VersionError (not corruption)", f.reader, ver, f.err)
				case ve.Task != id || ve.Seq != 4 || ve.Version != ver:
					t.Errorf("%s: %v names task %q seq %d version %d; want %s seq 4 version %d", f.reader, f.err, ve.Task, ve.Seq, ve.Version, id, ver)
				}
			}
		})
	}
}
