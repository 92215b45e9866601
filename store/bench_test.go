package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
)

// Benchmarks come in pairs measured in the same run on the same disk: the
// store next to bare bbolt doing the same amount of work.
//
//	go test -bench . -run '^$' ./store/

// reattached is the event the write benchmarks append: a legal self-loop
// of a running task.
var reattached = fsm.Event{Type: fsm.EventReattached, Time: at(60)}

// recordSize is the size of the value the store writes for it, which the
// bare benchmarks write too.
var recordSize = len(encodeRecord(nil, 1000, &reattached))

func BenchmarkAppend_SingleWriter(b *testing.B) {
	s, err := Open(testPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	v, err := s.Append(ctx, "bench", 0, runningLog(0)...)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if v, err = s.Append(ctx, "bench", v, reattached); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkBboltUpdate_SingleWriter(b *testing.B) {
	db := openBareBolt(b)
	value := make([]byte, recordSize)
	seq := uint64(0)
	for b.Loop() {
		seq++
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("bench")).Put(seqKey(seq), value)
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkAppend_256Writers(b *testing.B) {
	s, err := Open(testPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const writers = 256
	versions := make([]uint64, writers)
	for w := range writers {
		if versions[w], err = s.Append(ctx, fmt.Sprintf("w%03d", w), 0, runningLog(0)...); err != nil {
			b.Fatal(err)
		}
	}
	runWriters(b, writers, func(w int) error {
		v, err := s.Append(ctx, fmt.Sprintf("w%03d", w), versions[w], reattached)
		versions[w] = v
		return err
	})
}

func BenchmarkBboltBatch_256Writers(b *testing.B) {
	db := openBareBolt(b)
	const writers = 256
	value := make([]byte, recordSize)
	seqs := make([]uint64, writers)
	if err := db.Update(func(tx *bolt.Tx) error {
		for w := range writers {
			if _, err := tx.CreateBucket(fmt.Appendf(nil, "w%03d", w)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	runWriters(b, writers, func(w int) error {
		seqs[w]++
		key, name := seqKey(seqs[w]), fmt.Appendf(nil, "w%03d", w)
		return db.Batch(func(tx *bolt.Tx) error {
			return tx.Bucket(name).Put(key, value)
		})
	})
}

// runWriters runs b.N calls of write spread over writers goroutines (each
// calling it with its own index, one call at a time) and reports events/s.
func runWriters(b *testing.B, writers int, write func(w int) error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := write(w); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

func openBareBolt(b *testing.B) *bolt.DB {
	path := filepath.Join(b.TempDir(), "bare.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("bench"))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return db
}

// The replay fixture: replayTasks tasks of replayPerTask events each
// (created through running, then reattached self-loops), built once per
// test binary and shared by the replay and cursor benchmarks.
const (
	replayTasks   = 1000
	replayPerTask = 1000
	replayEvents  = replayTasks * replayPerTask
)

var replayFixture struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func replayStore(b *testing.B) string {
	f := &replayFixture
	f.once.Do(func() {
		if f.dir, f.err = os.MkdirTemp("", "tether-store-bench-"); f.err != nil {
			return
		}
		f.path = filepath.Join(f.dir, "replay.db")
		s, err := Open(f.path, Options{NoSync: true})
		if err != nil {
			f.err = err
			return
		}
		log := runningLog(replayPerTask - 6)
		for i := range replayTasks {
			if _, err := s.Append(context.Background(), fmt.Sprintf("task-%04d", i), 0, log...); err != nil {
				f.err = err
				break
			}
		}
		if err := s.Close(); err != nil && f.err == nil {
			f.err = err
		}
	})
	if f.err != nil {
		b.Fatal(f.err)
	}
	return f.path
}

func removeBenchFixtures() {
	if replayFixture.dir != "" {
		os.RemoveAll(replayFixture.dir)
	}
}

// BenchmarkReplay_1M decodes and folds 1,000,000 events: every task's
// LoadTask, as recovery does.
func BenchmarkReplay_1M(b *testing.B) {
	path := replayStore(b)
	s, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		events := uint64(0)
		if err := s.All(ctx, func(id string) error {
			t, err := s.LoadTask(ctx, id)
			events += t.Version
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if events != replayEvents {
			b.Fatalf("replayed %d events, want %d", events, replayEvents)
		}
	}
	b.ReportMetric(float64(b.N)*replayEvents/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkCursor_1M iterates the same file's 1,000,000 records with bare
// bbolt cursors, touching each value.
func BenchmarkCursor_1M(b *testing.B) {
	path := replayStore(b)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for b.Loop() {
		events, sum := 0, uint64(0)
		if err := db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketTasks).ForEachBucket(func(k []byte) error {
				c := tx.Bucket(bucketTasks).Bucket(k).Cursor()
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if len(k) == 8 {
						events++
						sum += uint64(v[len(v)-1]) + binary.BigEndian.Uint64(k)
					}
				}
				return nil
			})
		}); err != nil {
			b.Fatal(err)
		}
		if events != replayEvents || sum == 0 {
			b.Fatalf("iterated %d records, want %d", events, replayEvents)
		}
	}
	b.ReportMetric(float64(b.N)*replayEvents/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDecodeRecord decodes the record the replay fixture holds most
// of (a reattached self-loop), without bbolt: the decoder's share of
// replay.
func BenchmarkDecodeRecord(b *testing.B) {
	rec := encodeRecord(nil, 1000, &reattached)
	var e fsm.Event
	for b.Loop() {
		if _, derr := decodeRecord(rec, &e); derr != nil {
			b.Fatal(derr.reason)
		}
	}
}

// BenchmarkDecodeFold decodes and folds a running task's reattached
// records, without bbolt: replay's work per record beyond the cursor.
func BenchmarkDecodeFold(b *testing.B) {
	log := runningLog(994)
	recs := make([][]byte, len(log))
	for i := range log {
		recs[i] = encodeRecord(nil, uint64(i+1), &log[i])
	}
	var e fsm.Event
	for b.Loop() {
		t := fsm.Task{ID: "bench"}
		for i, rec := range recs {
			if err := decodeAt("bench", uint64(i+1), rec, &e); err != nil {
				b.Fatal(err)
			}
			if err := fsm.Lifecycle.FoldInPlace(&t, &e); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkShared_Append is one writer appending through Shared: every
// Append opens the store (lock, bbolt open, schema check) and closes it
// again, as a CLI command between a spawn and a wait does. Compare with
// BenchmarkAppend_SingleWriter, the same appends on a Store held open.
func BenchmarkShared_Append(b *testing.B) {
	sh, err := OpenShared(testPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sh.Close()
	ctx := context.Background()
	v, err := sh.Append(ctx, "bench", 0, runningLog(0)...)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if v, err = sh.Append(ctx, "bench", v, reattached); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkShared_Append64 is 64 goroutines appending through one Shared:
// overlapping operations share the open store and its group commit, so
// the opens are paid once per busy stretch, not per append. Compare with
// BenchmarkAppend_64Writers, on a Store held open.
func BenchmarkShared_Append64(b *testing.B) {
	sh, err := OpenShared(testPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sh.Close()
	benchWriters(b, sh)
	sh.mu.Lock()
	b.ReportMetric(float64(sh.opens)/float64(b.N), "opens/event")
	sh.mu.Unlock()
}

func BenchmarkAppend_64Writers(b *testing.B) {
	s, err := Open(testPath(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchWriters(b, s)
}

func benchWriters(b *testing.B, l Log) {
	ctx := context.Background()
	const writers = 64
	versions := make([]uint64, writers)
	for w := range writers {
		var err error
		if versions[w], err = l.Append(ctx, fmt.Sprintf("w%03d", w), 0, runningLog(0)...); err != nil {
			b.Fatal(err)
		}
	}
	runWriters(b, writers, func(w int) error {
		v, err := l.Append(ctx, fmt.Sprintf("w%03d", w), versions[w], reattached)
		versions[w] = v
		return err
	})
}
