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
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// Damage of real store files, page by page: garbage written into the
// freelist page, a branch page of the task index, a task's leaf page, a
// task's head. Every store operation must end with a clean error naming the
// file (and the task and sequence where known), never hang and never
// panic; Check must say where; Salvage must copy the rest and report what
// it could read of the damaged.

// bounded runs fn and fails the test if it does not return: the damage
// this file plants used to make bbolt wait for ever (in Close, holding the
// lock). The bound only catches a hang; nothing is timed.
func bounded(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s hung", what)
	}
}

// fileMeta reads the current meta of a bbolt file, independently of the
// store's reader: the page size, the freelist page and the high water
// mark.
func fileMeta(t *testing.T, path string) (pageSize int, freelist, hwm uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	ps := int(le.Uint32(b[16+8:]))
	best := -1
	for i, off := range []int{0, ps} {
		m := b[off+16:]
		if le.Uint32(m) == 0xED0CDAED && (best < 0 || le.Uint64(m[48:]) > le.Uint64(b[[]int{0, ps}[best]+16+48:])) {
			best = i
		}
	}
	m := b[[]int{0, ps}[best]+16:]
	return ps, le.Uint64(m[32:]), le.Uint64(m[40:])
}

// boltView reads the file through bbolt (the store must be closed).
func boltView(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}

// branchChildren reads the child page ids of a branch page.
func branchChildren(t *testing.T, path string, page uint64) []uint64 {
	t.Helper()
	ps, _, _ := fileMeta(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := b[int(page)*ps:]
	if flags := binary.LittleEndian.Uint16(p[8:]); flags != 0x01 {
		t.Fatalf("page %d is not a branch page (flags %#x)", page, flags)
	}
	var out []uint64
	for i := range int(binary.LittleEndian.Uint16(p[10:])) {
		out = append(out, binary.LittleEndian.Uint64(p[16+16*i+8:]))
	}
	return out
}

// scribble overwrites page's bytes from offset from to its end with
// garbage.
func scribble(t *testing.T, path string, page uint64, from int) {
	t.Helper()
	ps, _, _ := fileMeta(t, path)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, ps-from)
	for i := range junk {
		junk[i] = byte(i*7 + 13)
	}
	if _, err := f.WriteAt(junk, int64(page)*int64(ps)+int64(from)); err != nil {
		t.Fatal(err)
	}
}

// damagedStore builds a store, lets damage spoil it, and returns its path.
func damagedStore(t *testing.T, build func(s *Store), damage func(path string)) string {
	t.Helper()
	path := testPath(t)
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	build(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damage(path)
	return path
}

// exercise runs every store operation on a damaged file, each bounded,
// and requires each to succeed or fail with an error in the corruption
// categories naming the file (or, for a task, a CorruptError naming it).
func exercise(t *testing.T, path string, tasks []string) {
	t.Helper()
	ctx := context.Background()
	named := func(op string, err error) {
		t.Helper()
		if err == nil {
			return
		}
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
		case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotStore):
			if !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %v does not name the file", op, err)
			}
		default:
			t.Errorf("%s: %v is not a corruption error", op, err)
		}
	}
	for _, ro := range []bool{true, false} {
		bounded(t, fmt.Sprintf("open (read-only %v), use and close", ro), func() {
			s, err := Open(path, Options{ReadOnly: ro, LockTimeout: 5 * time.Second})
			named("Open", err)
			if err != nil {
				return
			}
			for _, id := range tasks {
				_, err := s.LoadTask(ctx, id)
				named("LoadTask("+id+")", err)
				_, err = s.Load(ctx, id)
				named("Load("+id+")", err)
			}
			_, err = s.LoadTasks(ctx, AllTasks)
			named("LoadTasks", err)
			_, err = s.Check(ctx)
			named("Check", err)
			if !ro {
				_, err = s.Append(ctx, "newcomer", 0, runningLog(0)...)
				named("Append", err)
				_, err = s.Append(ctx, "newcomer-2", 0, runningLog(0)...)
				named("Append after", err)
				_, err = s.Remove(ctx, baseTime.Add(time.Hour))
				named("Remove", err)
				_, err = s.Check(ctx)
				named("Check after writes", err)
			}
			named("Close", s.Close())
		})
	}
	// The lock is free again: a later open is not kept waiting.
	lk, err := lockStore(ctx, path, true, time.Second)
	if err != nil {
		t.Fatalf("the store's lock after the damaged opens: %v", err)
	}
	lk.release()
}

// bigLog is a running task's log of n events.
func bigLog(n int) []fsm.Event { return runningLog(n - 6) }

func TestDamage_FreelistPage(t *testing.T) {
	testproc.Parallel(t)
	build := func(s *Store) {
		for i := range 30 {
			mustAppend(t, s, fmt.Sprintf("t%02d", i), 0, runningLog(20)...)
			if i%3 == 0 {
				mustAppend(t, s, fmt.Sprintf("t%02d", i), 26, finishLog(100)...) // frees pages
			}
		}
	}
	for name, damage := range map[string]func(path string){
		"whole page": func(path string) {
			_, fl, _ := fileMeta(t, path)
			scribble(t, path, fl, 0)
		},
		"ids": func(path string) {
			_, fl, _ := fileMeta(t, path)
			scribble(t, path, fl, 16)
		},
		"count": func(path string) {
			ps, fl, _ := fileMeta(t, path)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xfe, 0xff}, int64(fl)*int64(ps)+10); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := damagedStore(t, build, damage)
			_, fl, _ := fileMeta(t, path)
			_, err := Open(path, Options{})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "freelist") {
				t.Fatalf("writable Open with a damaged freelist: %v, want ErrCorrupt naming the file and the freelist", err)
			}
			// Reading works: every task is there.
			r, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			scan, err := r.LoadTasks(context.Background(), AllTasks)
			r.Close()
			if err != nil || len(scan.Tasks) != 30 || len(scan.Unreadable) != 0 {
				t.Fatalf("read-only listing: %d tasks, %v, %v", len(scan.Tasks), scan.Unreadable, err)
			}
			// CheckFile names the freelist's page; Check of a read-only open too.
			rep, err := CheckFile(context.Background(), path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(rep.Problems, func(p Problem) bool { return p.Page == fl && p.Task == "" }) {
				t.Errorf("CheckFile does not name freelist page %d:\n%s", fl, rep)
			}
			// Compact rebuilds the freelist: the store takes writes again.
			if _, _, err := Compact(path, Options{}); err != nil {
				t.Fatal(err)
			}
			s := openDamaged(t, path, Options{}, func(testing.TB, Report) {}) // damaged again below
			mustAppend(t, s, "t01", 26, finishLog(200)...)
			if r, err := s.Check(context.Background()); err != nil || !r.OK() {
				t.Errorf("Check after Compact: %s %v", r, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			damage(path)
			exercise(t, path, []string{"t00", "t01"})
		})
	}
}

// A freelist that lists pages in use passes the cheap check at Open (only
// a walk of the whole tree finds it): the append that allocates one of them
// fails with a clean error, the store refuses further writes, and Close
// returns (it used to wait for ever for the lock bbolt's failed commit
// held).
func TestDamage_FreelistListsPagesInUse(t *testing.T) {
	testproc.Parallel(t)
	path := damagedStore(t, func(s *Store) {
		for i := range 30 {
			mustAppend(t, s, fmt.Sprintf("t%02d", i), 0, runningLog(30)...)
		}
	}, func(path string) {
		ps, fl, hwm := fileMeta(t, path)
		var inUse []uint64
		boltView(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTasks).ForEachBucket(func(k []byte) error {
				if r := uint64(tx.Bucket(bucketTasks).Bucket(k).Root()); r != 0 {
					inUse = append(inUse, r)
				}
				return nil
			})
		})
		slices.Sort(inUse)
		inUse = inUse[:min(len(inUse), 8)]
		if len(inUse) == 0 || hwm == 0 {
			t.Fatal("no task with pages of its own")
		}
		b := make([]byte, 16+8*len(inUse))
		binary.LittleEndian.PutUint64(b, fl)
		binary.LittleEndian.PutUint16(b[8:], 0x10)
		binary.LittleEndian.PutUint16(b[10:], uint16(len(inUse)))
		for i, id := range inUse {
			binary.LittleEndian.PutUint64(b[16+8*i:], id)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, int64(fl)*int64(ps)); err != nil {
			t.Fatal(err)
		}
	})
	exercise(t, path, []string{"t00", "t29"})
	rep, err := CheckFile(context.Background(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Problems, func(p Problem) bool { return strings.Contains(p.Err.Error(), "in use and listed as free") }) {
		t.Errorf("CheckFile does not find pages in use listed as free:\n%s", rep)
	}
}

// taskIndexStore holds enough tasks (inline buckets, six events each) for
// the task index to have branch pages below its root.
func taskIndexStore(t *testing.T, damage func(path string)) string {
	return damagedStore(t, func(s *Store) {
		ctx := context.Background()
		log := runningLog(0)
		for i := range 1500 {
			id := fmt.Sprintf("task-%04d", i)
			if _, err := s.Append(ctx, id, 0, log...); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 { // half of them terminal
				if _, err := s.Append(ctx, id, 6, finishLog(9)...); err != nil {
					t.Fatal(err)
				}
			}
		}
	}, damage)
}

func TestDamage_TaskIndexBranchPage(t *testing.T) {
	testproc.Parallel(t)
	var victim uint64
	path := taskIndexStore(t, func(path string) {
		var root uint64
		boltView(t, path, func(tx *bolt.Tx) error {
			root = uint64(tx.Bucket(bucketTasks).Root())
			return nil
		})
		kids := branchChildren(t, path, root) // fails unless the root is a branch
		victim = kids[len(kids)/2]
		if f := pageFlags(t, path, victim); f != 0x01 {
			t.Fatalf("child page %d has flags %#x; want a branch (the index needs a third level)", victim, f)
		}
		scribble(t, path, victim, 0)
	})
	ctx := context.Background()

	rep, err := CheckFile(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fileLevel []Problem
	namedLive := 0
	for _, p := range rep.Problems {
		if p.Task == "" {
			fileLevel = append(fileLevel, p)
		} else if p.Page == victim {
			namedLive++
		}
	}
	if len(fileLevel) == 0 || fileLevel[0].Page != victim || !strings.Contains(fileLevel[0].Err.Error(), "(tasks from \"task-") {
		t.Fatalf("Check does not say which page and which tasks it could not read:\n%s", rep)
	}
	if namedLive == 0 {
		t.Errorf("Check names none of the live tasks on the damaged page:\n%s", rep)
	}
	if rep.Tasks == 0 || rep.Tasks >= 1500 {
		t.Errorf("Check read %d tasks; want those off the damaged page", rep.Tasks)
	}
	t.Logf("%d tasks read, %d live ones on the damaged page named; %s", rep.Tasks, namedLive, fileLevel[0])

	// A listing shows every readable task and marks the live ones it
	// cannot read.
	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	scan, err := r.LoadTasks(ctx, LiveTasks)
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Tasks)+len(scan.Unreadable) != 750 || len(scan.Unreadable) != namedLive {
		t.Errorf("live listing: %d readable and %d unreadable, want 750 in all and %d unreadable", len(scan.Tasks), len(scan.Unreadable), namedLive)
	}
	// All of them: bbolt's cursor stops at the damaged page, the store's
	// own reader lists past it, so every task off the damaged page is
	// listed readable.
	all, err := r.LoadTasks(ctx, AllTasks)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Tasks) != rep.Tasks || len(all.Unreadable) != namedLive || all.Incomplete == nil ||
		!strings.Contains(all.Incomplete.Error(), fmt.Sprintf("page %d", victim)) {
		t.Errorf("listing: %d readable (want %d), %d unreadable (want %d), incomplete %v", len(all.Tasks), rep.Tasks, len(all.Unreadable), namedLive, all.Incomplete)
	}

	// Salvage copies every task off the damaged page and reports the live
	// ones on it.
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	srep, err := Salvage(ctx, path, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(srep.Copied) != rep.Tasks || len(srep.Lost) != namedLive || len(srep.Damage) == 0 {
		t.Errorf("Salvage copied %d, lost %d, %d damage; want %d, %d, some", len(srep.Copied), len(srep.Lost), len(srep.Damage), rep.Tasks, namedLive)
	}
	for _, lt := range srep.Lost {
		if !lt.Live || !errors.Is(lt.Err, ErrCorrupt) {
			t.Errorf("lost task %+v", lt)
		}
	}
	checkSalvaged(t, dst, srep)
	exercise(t, path, []string{"task-0000", "task-0749", "task-1499"})
}

// checkSalvaged opens the new store: it checks clean and holds every
// copied task, with the live index rebuilt.
func checkSalvaged(t *testing.T, dst string, srep SalvageReport) {
	t.Helper()
	s, err := Open(dst, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	scan, err := s.LoadTasks(context.Background(), AllTasks)
	if err != nil || len(scan.Unreadable) != 0 || len(scan.Tasks) != len(srep.Copied) {
		t.Fatalf("the salvaged store: %d tasks, %v unreadable, %v; want %d", len(scan.Tasks), scan.Unreadable, err, len(srep.Copied))
	}
	if r, err := s.Check(context.Background()); err != nil || !r.OK() {
		t.Fatalf("the salvaged store does not check clean: %s %v", r, err)
	}
}

// pageFlags reads a page's type flags from the file.
func pageFlags(t *testing.T, path string, page uint64) uint16 {
	t.Helper()
	ps, _, _ := fileMeta(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[int(page)*ps+8:])
}

// A task whose log spans several pages, one of them damaged: Check names
// the task and the first seq of the damaged page; LoadTask gives a
// CorruptError naming the task; Salvage reports it with what its readable
// prefix or head says (state, nonce, executor), and copies the others.
func TestDamage_TaskLeafPage(t *testing.T) {
	testproc.Parallel(t)
	for _, which := range []string{"first", "last"} {
		t.Run(which, func(t *testing.T) {
			var victim uint64
			path := damagedStore(t, func(s *Store) {
				mustAppend(t, s, "big", 0, bigLog(400)...)
				mustAppend(t, s, "small", 0, runningLog(2)...)
				mustAppend(t, s, "other", 0, bigLog(100)...)
			}, func(path string) {
				var root uint64
				boltView(t, path, func(tx *bolt.Tx) error {
					root = uint64(tx.Bucket(bucketTasks).Bucket([]byte("big")).Root())
					return nil
				})
				kids := branchChildren(t, path, root)
				victim = kids[0]
				if which == "last" {
					victim = kids[len(kids)-1]
				}
				scribble(t, path, victim, 0)
			})
			ctx := context.Background()
			r, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.LoadTask(ctx, "big")
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Task != "big" || !strings.Contains(err.Error(), path) {
				t.Errorf("LoadTask of the damaged task: %v, want a CorruptError naming it and the file", err)
			}
			for _, id := range []string{"small", "other"} {
				if _, err := r.LoadTask(ctx, id); err != nil {
					t.Errorf("LoadTask(%s) beside the damage: %v", id, err)
				}
			}
			r.Close()

			rep, err := CheckFile(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(rep.Problems, func(p Problem) bool { return p.Task == "big" && p.Page == victim })
			if i < 0 {
				t.Fatalf("Check does not name task big and page %d:\n%s", victim, rep)
			}
			if p := rep.Problems[i]; which == "first" && p.Seq != 1 || which == "last" && p.Seq < 300 {
				t.Errorf("Check names seq %d for the %s page: %s", p.Seq, which, p)
			}
			for _, p := range rep.Problems {
				if p.Task == "small" || p.Task == "other" {
					t.Errorf("Check blames an undamaged task: %s", p)
				}
			}

			dst := filepath.Join(t.TempDir(), "salvaged.db")
			srep, err := Salvage(ctx, path, dst, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(srep.Copied, []string{"other", "small"}) || len(srep.Lost) != 1 || srep.Lost[0].ID != "big" {
				t.Fatalf("Salvage: copied %v, lost %+v", srep.Copied, srep.Lost)
			}
			lt := srep.Lost[0]
			if !lt.Live || lt.State != fsm.StateRunning || lt.Nonce != "n1" {
				t.Errorf("lost task: live %v, state %s, nonce %q; want live, running, n1", lt.Live, lt.State, lt.Nonce)
			}
			if which == "last" && (lt.Prefix.Executor == nil || lt.Prefix.Executor.PID != 100 || lt.Prefix.Version < 300) {
				t.Errorf("lost task's readable prefix: %+v; want the executor's identity from its first 300 records", lt.Prefix)
			}
			if !errors.Is(lt.Err, ErrCorrupt) {
				t.Errorf("lost task's error: %v", lt.Err)
			}
			checkSalvaged(t, dst, srep)
			exercise(t, path, []string{"big", "small", "other"})
		})
	}
}

// The shapes of damage within a task's log and the indexes (issue 15):
// each is named by Check with its task and seq, makes LoadTask give a
// CorruptError with the same, and is not copied by Salvage.
func TestDamage_EveryShapeNamed(t *testing.T) {
	testproc.Parallel(t)
	type shape struct {
		task   string
		seq    uint64
		damage func(tx *bolt.Tx) error
	}
	flip := func(task string, seq uint64) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b, err := rawTask(tx, task)
			if err != nil {
				return err
			}
			v := slices.Clone(b.Get(seqKey(seq)))
			v[len(v)/2] ^= 0x10
			return b.Put(seqKey(seq), v)
		}
	}
	for name, sh := range map[string]shape{
		"record removed from the middle": {"t", 3, func(tx *bolt.Tx) error {
			b, err := rawTask(tx, "t")
			if err != nil {
				return err
			}
			return b.Delete(seqKey(3))
		}},
		"record bytes flipped": {"t", 4, flip("t", 4)},
		"head damaged": {"t", 0, func(tx *bolt.Tx) error {
			b, err := rawTask(tx, "t")
			if err != nil {
				return err
			}
			v := slices.Clone(b.Get(headKey))
			v[3] ^= 0x01
			return b.Put(headKey, v)
		}},
		"illegal record appended": {"t", 9, func(tx *bolt.Tx) error {
			b, err := rawTask(tx, "t")
			if err != nil {
				return err
			}
			e := fsm.Event{Type: fsm.EventCreated, Time: at(40), Spec: testSpec()}
			return b.Put(seqKey(9), encodeRecord(nil, 9, &e))
		}},
		"record of another seq": {"t", 5, func(tx *bolt.Tx) error {
			b, err := rawTask(tx, "t")
			if err != nil {
				return err
			}
			return b.Put(seqKey(5), slices.Clone(b.Get(seqKey(6))))
		}},
		"live entry missing": {"t", 0, func(tx *bolt.Tx) error { return tx.Bucket(bucketLive).Delete([]byte("t")) }},
		"live entry stray":   {"done", 0, func(tx *bolt.Tx) error { return tx.Bucket(bucketLive).Put([]byte("done"), liveMark) }},
		"live entry of no task": {"ghost", 0, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketLive).Put([]byte("ghost"), liveMark)
		}},
		"task key not a bucket": {"plain", 0, func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTasks).Put([]byte("plain"), []byte("x"))
		}},
	} {
		t.Run(name, func(t *testing.T) {
			path := damagedStore(t, func(s *Store) {
				mustAppend(t, s, "t", 0, runningLog(2)...) // 8 events
				mustAppend(t, s, "done", 0, runningLog(0)...)
				mustAppend(t, s, "done", 6, finishLog(10)...)
				mustAppend(t, s, "fine", 0, runningLog(1)...)
			}, func(path string) { rawUpdate(t, path, sh.damage) })
			ctx := context.Background()
			for _, check := range []func() (Report, error){
				func() (Report, error) { return CheckFile(ctx, path, Options{}) },
				func() (Report, error) {
					s, err := Open(path, Options{})
					if err != nil {
						return Report{}, err
					}
					defer s.Close()
					return s.Check(ctx)
				},
			} {
				rep, err := check()
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Problems) == 0 || rep.Problems[0].Task != sh.task || rep.Problems[0].Seq != sh.seq {
					t.Errorf("Check: want the first problem at task %q seq %d:\n%s", sh.task, sh.seq, rep)
				}
				for _, p := range rep.Problems {
					if p.Task != sh.task {
						t.Errorf("Check blames another task: %s", p)
					}
					if !errors.Is(p.Err, ErrCorrupt) {
						t.Errorf("problem %s is not ErrCorrupt", p)
					}
				}
			}
			s := openDamaged(t, path, Options{ReadOnly: true}, func(testing.TB, Report) {})
			_, err := s.LoadTask(ctx, sh.task)
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Task != sh.task || ce.Seq != sh.seq {
				t.Errorf("LoadTask(%s): %v; want a CorruptError at seq %d", sh.task, err, sh.seq)
			}
			for _, id := range []string{"fine"} {
				if _, err := s.LoadTask(ctx, id); err != nil {
					t.Errorf("LoadTask(%s): %v", id, err)
				}
			}
			dst := filepath.Join(t.TempDir(), "salvaged.db")
			srep, err := Salvage(ctx, path, dst, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A task whose log is whole is copied (its head and index entry
			// rebuilt from the fold); one whose log is damaged is not.
			logWhole := map[string]bool{"head damaged": true, "live entry missing": true, "live entry stray": true}[name]
			if !slices.Contains(srep.Copied, "fine") || slices.Contains(srep.Copied, sh.task) != logWhole {
				t.Errorf("Salvage copied %v, lost %+v", srep.Copied, srep.Lost)
			}
			if !logWhole && !slices.ContainsFunc(srep.Lost, func(lt LostTask) bool { return lt.ID == sh.task && errors.Is(lt.Err, ErrCorrupt) }) {
				t.Errorf("Salvage does not report %s as lost: %+v", sh.task, srep.Lost)
			}
			checkSalvaged(t, dst, srep)
		})
	}
}

// Salvage never writes to the store it reads, and refuses to overwrite.
func TestSalvage_ReadsOnlyAndOverwritesNothing(t *testing.T) {
	testproc.Parallel(t)
	path := damagedStore(t, func(s *Store) {
		mustAppend(t, s, "a", 0, runningLog(3)...)
	}, func(string) {})
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dst := filepath.Join(t.TempDir(), "new.db")
	rep, err := Salvage(ctx, path, dst, Options{})
	if err != nil || !slices.Equal(rep.Copied, []string{"a"}) || len(rep.Lost) != 0 {
		t.Fatalf("Salvage of a sound store: %+v, %v", rep, err)
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatal("Salvage changed the store it read")
	}
	if _, err := Salvage(ctx, path, dst, Options{}); err == nil || !strings.Contains(err.Error(), "overwrites nothing") {
		t.Errorf("Salvage into an existing file: %v", err)
	}
	if _, err := Salvage(ctx, path, path, Options{}); err == nil {
		t.Error("Salvage into itself succeeded")
	}
	checkSalvaged(t, dst, rep)
	s := openTest(t, dst, Options{})
	if got := ids(t, s.Live); !slices.Equal(got, []string{"a"}) {
		t.Errorf("the salvaged live index: %v", got)
	}
	mustAppend(t, s, "a", 9, finishLog(30)...)
}
