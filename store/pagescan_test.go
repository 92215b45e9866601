package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// liveLog is the log of a running task whose executor has nonce, with
// extra reattached events (a long log spans several pages).
func liveLog(nonce string, extra int) []fsm.Event {
	evs := runningLog(extra)
	evs[1].Nonce = nonce
	x := *evs[2].Executor
	x.Nonce = nonce
	evs[2].Executor = &x
	return evs
}

// scanStore builds a store of live and ended tasks, appended a few events
// at a time so that bbolt copies and frees pages as it goes (old copies of
// pages stay in the file), and returns its path, the claims its tasks'
// executors would make, and every task's log as written.
func scanStore(t *testing.T) (string, []Claim, map[string][]fsm.Event) {
	t.Helper()
	path := testPath(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string][]fsm.Event{}
	var claims []Claim
	for i := range 24 {
		id := fmt.Sprintf("task-%02d", i)
		nonce := fmt.Sprintf("nonce-%02d", i)
		extra := 0
		if i%5 == 0 {
			extra = 60 // a log of several pages
		}
		evs := liveLog(nonce, extra)
		live := i%3 != 0
		if !live {
			evs = append(evs, finishLog(100)...)
		}
		logs[id] = evs
		claims = append(claims, Claim{ID: id, Nonce: nonce, Live: live})
	}
	// Round-robin, three events at a time.
	next := map[string]int{}
	for more := true; more; {
		more = false
		for _, c := range claims {
			evs := logs[c.ID]
			n := next[c.ID]
			if n == len(evs) {
				continue
			}
			end := min(n+3, len(evs))
			if _, err := s.Append(context.Background(), c.ID, uint64(n), evs[n:end]...); err != nil {
				t.Fatal(err)
			}
			next[c.ID] = end
			more = true
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path, claims, logs
}

// TestSalvage_TruncatedAtEveryPageAccountsForEveryLiveClaim: a store with
// live tasks, cut at every page boundary (its structure gone from some
// point on), salvaged with the claims of its tasks' executors: every live
// claim is copied (its log a prefix of the one written, its spawn nonce
// the claim's, not ended) or lost with the claim's nonce (so that its
// executor can be killed by proven identity); no task is copied with a
// log that is not its own; the new store is sound, and the lost tasks
// recorded lost are in it, ended lost.
func TestSalvage_TruncatedAtEveryPageAccountsForEveryLiveClaim(t *testing.T) {
	testproc.Parallel(t)
	path, claims, logs := scanStore(t)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	for cut := 0; cut <= len(good); cut += ps {
		t.Run(fmt.Sprintf("cut-%d", cut), func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "tether.db")
			if err := os.WriteFile(src, good[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := BeginMaintenance(context.Background(), src, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			dst := filepath.Join(dir, "tether.db.salvaged")
			rep, err := m.Salvage(context.Background(), dst, claims...)
			if err != nil {
				t.Fatalf("salvage: %v", err)
			}
			salvagedTasks := readAll(t, dst)
			lost := map[string]LostTask{}
			for _, l := range rep.Lost {
				lost[l.ID] = l
			}
			for id, t2 := range salvagedTasks {
				if !isPrefixLog(t2, logs[id]) {
					t.Errorf("task %s was copied with a log that is not its own: %d events", id, len(t2))
				}
			}
			var losses []Loss
			for _, c := range claims {
				if !c.Live {
					continue
				}
				evs, copied := salvagedTasks[c.ID]
				l, isLost := lost[c.ID]
				switch {
				case copied:
					ft := fold(t, c.ID, evs)
					if ft.Nonce != c.Nonce || ft.State.Terminal() {
						t.Errorf("live task %s copied as %s with nonce %q", c.ID, ft.State, ft.Nonce)
					}
				case isLost:
					if l.Nonce != c.Nonce && (l.Prefix.Executor == nil || l.Prefix.Executor.Nonce != c.Nonce) {
						t.Errorf("live task %s lost without its nonce: %+v", c.ID, l)
					}
					losses = append(losses, Loss{ID: c.ID, Nonce: c.Nonce, Executor: &fsm.Identity{PID: 100, Nonce: c.Nonce}, Reason: "test"})
				default:
					t.Errorf("live task %s is neither copied nor lost (report %+v)", c.ID, rep)
				}
			}
			if err := m.RecordLost(dst, losses, time.Now()); err != nil {
				t.Fatalf("RecordLost: %v", err)
			}
			ns, err := Open(dst, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			crep, err := ns.Check(context.Background())
			if err != nil || !crep.OK() {
				t.Fatalf("the new store: %v %s", err, crep)
			}
			for _, l := range losses {
				tk, err := ns.LoadTask(context.Background(), l.ID)
				if err != nil || tk.State != fsm.StateLost {
					t.Errorf("lost task %s recorded as %+v, %v; want lost", l.ID, tk.State, err)
				}
			}
		})
	}
}

// readAll reads every task's events from the store at path.
func readAll(t *testing.T, path string) map[string][]fsm.Event {
	t.Helper()
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string][]fsm.Event{}
	err = s.All(context.Background(), func(id string) error {
		evs, err := s.Load(context.Background(), id)
		out[id] = evs
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// isPrefixLog reports whether got is the first events of want (sequence
// numbers aside).
func isPrefixLog(got, want []fsm.Event) bool {
	if len(got) > len(want) {
		return false
	}
	for i := range got {
		a, b := got[i], want[i]
		a.Seq, b.Seq = 0, 0
		if a.Type != b.Type || a.Time != b.Time || a.Nonce != b.Nonce || (a.Executor == nil) != (b.Executor == nil) ||
			(a.Executor != nil && *a.Executor != *b.Executor) {
			return false
		}
	}
	return true
}

func fold(t *testing.T, id string, evs []fsm.Event) fsm.Task {
	t.Helper()
	tk := fsm.Task{ID: id}
	for i := range evs {
		if err := fsm.Lifecycle.FoldInPlace(&tk, &evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return tk
}

// cutStructure makes the store at path lose its structure: its root page
// and its task index's root are overwritten, so that only a scan of its
// pages finds its tasks.
func cutStructure(t *testing.T, path string) {
	t.Helper()
	var pages []uint64
	boltView(t, path, func(tx *bolt.Tx) error {
		pages = append(pages, uint64(tx.Bucket(bucketTasks).Root()))
		return nil
	})
	_, _, hwm := fileMeta(t, path)
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, raw.meta.root)
	raw.close()
	for _, p := range pages {
		if p >= hwm {
			t.Fatalf("page %d past %d", p, hwm)
		}
		if p >= 2 { // an inline bucket's root is 0: the metas are kept
			scribble(t, path, p, 0)
		}
	}
}

// spoilInPlace flips a bit of task's record seq where it lies in the file
// (every copy of it), without a transaction: no intact copy is left on a
// freed page.
func spoilInPlace(t *testing.T, path, task string, seq uint64) {
	t.Helper()
	var rec []byte
	boltView(t, path, func(tx *bolt.Tx) error {
		b, err := rawTask(tx, task)
		if err != nil {
			return err
		}
		rec = slices.Clone(b.Get(seqKey(seq)))
		return nil
	})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := bytes.Index(data, rec); i >= 0; {
		data[i+len(rec)-1] ^= 0x40
		n++
		j := bytes.Index(data[i+1:], rec)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if n == 0 {
		t.Fatalf("record %d of %s not found in the file", seq, task)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSalvage_ScanTakesOnlyRecordsThatProveThemselves: with the structure
// gone, a live task whose records are found only by the scan is copied
// when its records check out; a record whose checksum fails is not taken
// (the log stops before it, and the task is lost with its nonce, never
// copied with the damaged record); a task whose index entry the scan finds
// but whose executor's directory holds another nonce is not copied under
// that id, live or not.
func TestSalvage_ScanTakesOnlyRecordsThatProveThemselves(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "good", 0, liveLog("n-good", 0)...)
	mustAppend(t, s, "bad", 0, liveLog("n-bad", 0)...)
	mustAppend(t, s, "other", 0, liveLog("n-other", 0)...)
	for i := range 40 { // enough tasks that the index has pages of its own
		mustAppend(t, s, fmt.Sprintf("z-%02d", i), 0, liveLog(fmt.Sprintf("n-z%02d", i), 0)...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	spoilInPlace(t, path, "bad", 3) // its executor-up: the one record that is its alone
	cutStructure(t, path)
	m, err := BeginMaintenance(context.Background(), path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	dst := filepath.Join(filepath.Dir(path), "salvaged.db")
	claims := []Claim{{ID: "good", Nonce: "n-good", Live: true}, {ID: "bad", Nonce: "n-bad", Live: true},
		{ID: "other", Nonce: "n-somebody-else", Live: true}, {ID: "z-00", Nonce: "n-not-its-own"}}
	rep, err := m.Salvage(context.Background(), dst, claims...)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Scanned {
		t.Fatalf("the structure was gone but the pages were not scanned: %+v", rep)
	}
	got := readAll(t, dst)
	if evs, ok := got["good"]; !ok || len(evs) != 6 || !slices.Contains(rep.Found, "good") {
		t.Errorf("the sound task found by the scan: copied %v (found %v)", len(evs), rep.Found)
	}
	if _, ok := got["bad"]; ok {
		t.Errorf("the task with a damaged record was copied")
	}
	if _, ok := got["other"]; ok {
		t.Errorf("a log was copied under an id whose executor has another nonce")
	}
	for _, want := range []struct {
		id, nonce string
		version   uint64
	}{{"bad", "n-bad", 2}, {"other", "n-somebody-else", 0}} {
		i := slices.IndexFunc(rep.Lost, func(l LostTask) bool { return l.ID == want.id })
		if i < 0 {
			t.Errorf("%s is not among the lost: %+v", want.id, rep.Lost)
			continue
		}
		l := rep.Lost[i]
		if l.Nonce != want.nonce || !l.Live || l.Prefix.Version != want.version {
			t.Errorf("%s lost as %+v, want nonce %s and a prefix of %d records", want.id, l, want.nonce, want.version)
		}
	}
	for _, id := range []string{"z-00", "z-39"} {
		if _, ok := got[id]; ok {
			t.Errorf("%s, which no claim proves, was copied from the scan", id)
		}
	}
}

// TestSalvage_EmptyFileLosesEveryLiveClaim: a store cut to nothing (or to
// its first page) has no record left: Open refuses it (an empty store file
// is never a new one), and its salvage reports every live claim lost with
// its nonce, and only the live ones.
func TestSalvage_EmptyFileLosesEveryLiveClaim(t *testing.T) {
	testproc.Parallel(t)
	for _, size := range []int{0, os.Getpagesize()} {
		dir := t.TempDir()
		src := filepath.Join(dir, "tether.db")
		if err := os.WriteFile(src, bytes.Repeat([]byte{0}, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(src, Options{}); !errors.Is(err, ErrNotStore) {
			t.Fatalf("Open of a %d-byte store: %v, want ErrNotStore", size, err)
		}
		m, err := BeginMaintenance(context.Background(), src, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := m.Salvage(context.Background(), filepath.Join(dir, "new.db"),
			Claim{ID: "a", Nonce: "na", Live: true}, Claim{ID: "b", Nonce: "nb"})
		m.Release()
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Lost) != 1 || rep.Lost[0].ID != "a" || rep.Lost[0].Nonce != "na" || !rep.Lost[0].Live {
			t.Errorf("%d bytes: lost %+v, want only a, live, with its nonce", size, rep.Lost)
		}
	}
}

// TestSalvage_ScanGivesOrphanRecordsByNonce: with the root, every page of
// the task index and the branch pages of the logs gone, only the logs'
// leaf pages are left, naming no task: a live claim gets the log whose
// records carry its spawn nonce, with the pages that go on from it (one
// page, several, or a copy), and is copied whole; a claim whose nonce no
// record carries is lost with it.
func TestSalvage_ScanGivesOrphanRecordsByNonce(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string][]fsm.Event{}
	for i, extra := range []int{0, 30, 90} {
		id := fmt.Sprintf("t%d", i)
		evs := liveLog("n-"+id, extra)
		for j := range evs {
			evs[j].Time += int64(i) * 1e6 // no two tasks' records alike
		}
		logs[id] = evs
		for n := 0; n < len(evs); n += 7 {
			mustAppend(t, s, id, uint64(n), evs[n:min(n+7, len(evs))]...)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	w := newRawWalk(raw)
	var tasks []byte
	w.root(func(e rawElem) bool {
		if string(e.key) == string(bucketTasks) {
			tasks = e.value
		}
		return true
	}, func(rawDamage) {})
	var bucketRoots []uint64
	w.bucket(tasks, "", func(e rawElem) bool {
		if root := binary.LittleEndian.Uint64(e.value); root != 0 {
			bucketRoots = append(bucketRoots, root)
		}
		return true
	}, func(rawDamage) {})
	gone := []uint64{raw.meta.root}
	for p := range w.reachable {
		gone = append(gone, p)
	}
	for _, p := range bucketRoots {
		if buf, err := raw.page(p, 0); err == nil && binary.LittleEndian.Uint16(buf[8:]) == rawBranch {
			gone = append(gone, p)
		}
	}
	raw.close()
	for _, p := range gone {
		scribble(t, path, p, 0)
	}
	m, err := BeginMaintenance(context.Background(), path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	dst := filepath.Join(filepath.Dir(path), "salvaged.db")
	rep, err := m.Salvage(context.Background(), dst, Claim{ID: "t0", Nonce: "n-t0", Live: true},
		Claim{ID: "t1", Nonce: "n-t1", Live: true}, Claim{ID: "t2", Nonce: "n-t2", Live: true},
		Claim{ID: "t3", Nonce: "n-t3", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, dst)
	for _, id := range []string{"t0", "t1", "t2"} {
		if len(got[id]) != len(logs[id]) || !isPrefixLog(got[id], logs[id]) || !slices.Contains(rep.Found, id) {
			t.Errorf("%s: copied %d of its %d events (found %v, lost %+v)", id, len(got[id]), len(logs[id]), rep.Found, rep.Lost)
		}
	}
	if len(rep.Lost) != 1 || rep.Lost[0].ID != "t3" || rep.Lost[0].Nonce != "n-t3" {
		t.Errorf("lost %+v, want t3 alone, with its nonce", rep.Lost)
	}
}

// scribbleBuckets overwrites every leaf page of the file that holds a
// bucket (the root's, the task index's, and their old copies): only the
// logs' own pages are left, naming no task.
func scribbleBuckets(t *testing.T, path string) {
	t.Helper()
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	var pages []uint64
	for id := uint64(2); id < raw.meta.hwm; id++ {
		buf, err := raw.page(id, rawLeaf)
		if err != nil {
			continue
		}
		if _, elems, err := parseNode(buf, ""); err == nil && slices.ContainsFunc(elems, func(e rawElem) bool { return e.bucket }) {
			pages = append(pages, id)
		}
	}
	raw.close()
	for _, p := range pages {
		scribble(t, path, p, 0)
	}
}

// TestSalvage_ScanSkipsARecordWhoseChecksumFails: of a log's two copies
// among the pages no structure names (an old page of its first records,
// and the current one, in which a record is damaged; every page holding a
// bucket is gone), the scan takes only records whose checksums hold: the
// damaged record is left out of its page, the old copy gives it back, and
// the log is copied whole. A scan that took the damaged record would find
// the copies disagreeing, and the log cut short.
func TestSalvage_ScanSkipsARecordWhoseChecksumFails(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	evs := liveLog("n-t", 100) // its first 70 records are too many to sit inline in the index
	mustAppend(t, s, "t", 0, evs[:70]...)
	mustAppend(t, s, "t", 70, evs[70:]...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The current copy of record 10 is on a page the task's bucket
	// reaches now; the old one on a page it reached before.
	var rec []byte
	boltView(t, path, func(tx *bolt.Tx) error {
		b, err := rawTask(tx, "t")
		if err != nil {
			return err
		}
		rec = slices.Clone(b.Get(seqKey(10)))
		return nil
	})
	raw, err := openRaw(path)
	if err != nil {
		t.Fatal(err)
	}
	w := newRawWalk(raw)
	w.root(func(e rawElem) bool {
		if string(e.key) == string(bucketTasks) {
			w.bucket(e.value, "", func(e rawElem) bool {
				if string(e.key) == "t" {
					w.bucket(e.value, "", func(rawElem) bool { return true }, func(rawDamage) {})
				}
				return true
			}, func(rawDamage) {})
		}
		return true
	}, func(rawDamage) {})
	raw.close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	page, in := -1, -1
	for i := bytes.Index(data, rec); i >= 0; {
		if w.reachable[uint64(i/ps)] && page < 0 {
			page, in = i/ps, i%ps
		}
		j := bytes.Index(data[i+1:], rec)
		if j < 0 {
			break
		}
		i += 1 + j
	}
	if page < 2 || bytes.Count(data, rec) < 2 {
		t.Fatalf("the store's layout is not the test's: record 10 on page %d, %d copies", page, bytes.Count(data, rec))
	}
	data[page*ps+in+len(rec)-1] ^= 0x40
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	scribbleBuckets(t, path)
	m, err := BeginMaintenance(context.Background(), path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	dst := filepath.Join(filepath.Dir(path), "salvaged.db")
	rep, err := m.Salvage(context.Background(), dst, Claim{ID: "t", Nonce: "n-t", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, dst)["t"]; len(got) != len(evs) || !isPrefixLog(got, evs) {
		t.Fatalf("copied %d of the %d events (lost %+v)", len(got), len(evs), rep.Lost)
	}
}
