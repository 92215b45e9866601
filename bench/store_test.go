package bench

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

	"github.com/tether-fsm/tether/bench/internal/crc32c"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// reattached is the event the write benchmarks append: a legal self-loop
// of a running task.
var reattached = fsm.Event{Type: fsm.EventReattached, Time: 60}

func runningLog(extra int) []fsm.Event {
	evs := []fsm.Event{
		{Type: fsm.EventCreated, Time: 1, Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/sleep", Args: []string{"30"}}},
		{Type: fsm.EventSpawnIntent, Time: 2, Nonce: "nonce0001"},
		{Type: fsm.EventExecutorUp, Time: 3, Executor: &fsm.Identity{PID: 100, StartTime: 7, BootID: "b", Nonce: "nonce0001", Socket: "/s"}},
		{Type: fsm.EventLaunchIntent, Time: 4},
		{Type: fsm.EventLaunched, Time: 5, TaskPID: 101, TaskStartTime: 8},
		{Type: fsm.EventRunning, Time: 6},
	}
	for i := range extra {
		evs = append(evs, fsm.Event{Type: fsm.EventReattached, Time: int64(7 + i)})
	}
	return evs
}

// recordSize is the size of the value the store writes for reattached,
// read back from a scratch store, so that bare bbolt writes as much.
func recordSize(b *testing.B) int {
	path := filepath.Join(b.TempDir(), "size.db")
	s, err := store.Open(path, store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	evs := append(runningLog(0), reattached)
	if _, err := s.Append(context.Background(), "t", 0, evs...); err != nil {
		b.Fatal(err)
	}
	s.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	size := 0
	_ = db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte("tasks")).Bucket([]byte("t")).Get(binary.BigEndian.AppendUint64(nil, uint64(len(evs))))
		size = len(v)
		return nil
	})
	if size == 0 {
		b.Fatal("no record 7 in the scratch store")
	}
	return size
}

func openBare(b *testing.B, dir string, buckets ...string) *bolt.DB {
	db, err := bolt.Open(filepath.Join(dir, "bare.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, n := range buckets {
			if _, err := tx.CreateBucket([]byte(n)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return db
}

// appendsPerRound is the single-writer round: this many appends a side.
const appendsPerRound = 25

// BenchmarkAppendSingleWriter: one writer's durable Append against a bare
// bbolt Update of a record of the same size, same disk, same directory.
// Target: ratio (time per append) <= 1.2.
func BenchmarkAppendSingleWriter(b *testing.B) {
	dir := b.TempDir()
	size := recordSize(b)
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	v, err := s.Append(ctx, "bench", 0, runningLog(0)...)
	if err != nil {
		b.Fatal(err)
	}
	db := openBare(b, dir, "bench")
	value := make([]byte, size)
	seq := uint64(0)
	tether := func(int) float64 {
		t0 := time.Now()
		for range appendsPerRound {
			if v, err = s.Append(ctx, "bench", v, reattached); err != nil {
				b.Fatal(err)
			}
		}
		return since(t0) / appendsPerRound
	}
	bare := func(int) float64 {
		t0 := time.Now()
		for range appendsPerRound {
			seq++
			if err := db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte("bench")).Put(binary.BigEndian.AppendUint64(nil, seq), value)
			}); err != nil {
				b.Fatal(err)
			}
		}
		return since(t0) / appendsPerRound
	}
	tether(0)
	bare(0)
	b.ResetTimer()
	p := interleave(b, tether, bare)
	p.reportMs(b, "tether", "bolt", false)
}

const (
	writers        = 256
	eventsPerRound = 4096
)

// runWriters makes eventsPerRound calls of write spread over writers
// goroutines (each with its own index, one call at a time) and returns
// events/s.
func runWriters(b *testing.B, write func(w int) error) float64 {
	var left atomic.Int64
	left.Store(eventsPerRound)
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range writers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := write(w); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	el := since(t0)
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return eventsPerRound / el
}

// BenchmarkAppend256Writers: 256 concurrent writers, events/s through the
// store's group commit against bare bbolt Batch. Target: ratio >= 0.9.
func BenchmarkAppend256Writers(b *testing.B) {
	dir := b.TempDir()
	size := recordSize(b)
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	versions := make([]uint64, writers)
	names := make([]string, writers)
	for w := range writers {
		names[w] = fmt.Sprintf("w%03d", w)
		if versions[w], err = s.Append(ctx, names[w], 0, runningLog(0)...); err != nil {
			b.Fatal(err)
		}
	}
	db := openBare(b, dir, names...)
	value := make([]byte, size)
	seqs := make([]uint64, writers)
	tether := func(int) float64 {
		return runWriters(b, func(w int) error {
			v, err := s.Append(ctx, names[w], versions[w], reattached)
			versions[w] = v
			return err
		})
	}
	bare := func(int) float64 {
		return runWriters(b, func(w int) error {
			seqs[w]++
			key := binary.BigEndian.AppendUint64(nil, seqs[w])
			return db.Batch(func(tx *bolt.Tx) error { return tx.Bucket([]byte(names[w])).Put(key, value) })
		})
	}
	tether(0)
	bare(0)
	b.ResetTimer()
	p := interleave(b, tether, bare)
	b.ReportMetric(quantile(p.a, 0.5), "tether-events/s")
	b.ReportMetric(quantile(p.b, 0.5), "bolt-events/s")
	b.ReportMetric(p.ratio(), "ratio")
}

// The replay fixture: replayTasks tasks of replayPerTask events each,
// built once per run through the store's own Append.
const (
	replayTasks   = 1000
	replayPerTask = 1000
	replayEvents  = replayTasks * replayPerTask
)

var replayFixture = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tether-bench-replay-")
	if err != nil {
		return "", err
	}
	replayDir = dir
	path := filepath.Join(dir, "replay.db")
	s, err := store.Open(path, store.Options{NoSync: true})
	if err != nil {
		return "", err
	}
	log := runningLog(replayPerTask - 6)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < replayTasks; i += 4 {
				if _, err := s.Append(context.Background(), fmt.Sprintf("task-%04d", i), 0, log...); err != nil {
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		return "", err
	}
	if err := failed.Load(); err != nil {
		return "", *err
	}
	return path, nil
})

// replayDir is removed by TestMain after the run.
var replayDir string

// BenchmarkReplay1M: decode and fold 1,000,000 events (every task's
// LoadTask, as recovery does) against bare bbolt cursor iteration of the
// same file touching every value. The ratio is replay's speed over bare
// iteration's. Target: ratio >= 0.5.
func BenchmarkReplay1M(b *testing.B) {
	path, err := replayFixture()
	if err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(path, store.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	replay := func(int) float64 {
		t0 := time.Now()
		events := uint64(0)
		if err := s.All(ctx, func(id string) error {
			t, err := s.LoadTask(ctx, id)
			events += t.Version
			return err
		}); err != nil {
			b.Fatal(err)
		}
		el := since(t0)
		if events != replayEvents {
			b.Fatalf("replayed %d events, want %d", events, replayEvents)
		}
		return replayEvents / el
	}
	cursor := func(int) float64 {
		t0 := time.Now()
		events, sum := 0, uint64(0)
		if err := db.View(func(tx *bolt.Tx) error {
			tasks := tx.Bucket([]byte("tasks"))
			return tasks.ForEachBucket(func(k []byte) error {
				c := tasks.Bucket(k).Cursor()
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
		el := since(t0)
		if events != replayEvents || sum == 0 {
			b.Fatalf("iterated %d records, want %d", events, replayEvents)
		}
		return replayEvents / el
	}
	// floor: the least a replay that keeps per-record corruption
	// detection does: the same cursors, every record's CRC32C checked
	// (SSE 4.2, directly), its sequence number read and compared with its
	// key, and its type applied to a state by a switch.
	floor := func(int) float64 {
		t0 := time.Now()
		events, states := 0, [256]int{}
		if err := db.View(func(tx *bolt.Tx) error {
			tasks := tx.Bucket([]byte("tasks"))
			return tasks.ForEachBucket(func(k []byte) error {
				c := tasks.Bucket(k).Cursor()
				state := byte(0)
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if len(k) != 8 {
						continue
					}
					if len(v) < 7 || crc32c.Sum(v[4:]) != binary.LittleEndian.Uint32(v) {
						return fmt.Errorf("record %x of task %s: bad checksum", k, k)
					}
					if seq, n := binary.Uvarint(v[6:]); n <= 0 || seq != binary.BigEndian.Uint64(k) {
						return fmt.Errorf("record %x: sequence %d", k, seq)
					}
					switch t := v[5]; {
					case t == 0:
						return fmt.Errorf("record %x: no type", k)
					case t < 8:
						state = t
					default:
						state++
					}
					events++
				}
				states[state]++
				return nil
			})
		}); err != nil {
			b.Fatal(err)
		}
		el := since(t0)
		if events != replayEvents {
			b.Fatalf("checked %d records, want %d", events, replayEvents)
		}
		return replayEvents / el
	}
	sides := []func(int) float64{replay, cursor, floor}
	for _, f := range sides {
		f(0)
	}
	b.ResetTimer()
	xs := rotate(b, sides...)
	b.ReportMetric(quantile(xs[0], 0.5), "replay-events/s")
	b.ReportMetric(quantile(xs[1], 0.5), "cursor-events/s")
	b.ReportMetric(quantile(xs[2], 0.5), "floor-events/s")
	b.ReportMetric(medianRatio(xs[0], xs[1]), "ratio")
	b.ReportMetric(medianRatio(xs[2], xs[1]), "floor-ratio")
	b.ReportMetric(medianRatio(xs[0], xs[2]), "ratio-floor")
}

// BenchmarkSharedAppend: one writer's durable Append through store.Shared,
// which opens the store for the call and closes it after (the CLI's way:
// nothing held between a command's reads and appends), against Append on
// a Store held open, same disk, same directory. The ratio (time per append)
// is the cost of an open and a close per idle-to-busy transition.
func BenchmarkSharedAppend(b *testing.B) {
	dir := b.TempDir()
	held, err := store.Open(filepath.Join(dir, "held.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	sh, err := store.OpenShared(filepath.Join(dir, "shared.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sh.Close()
	ctx := context.Background()
	logs := []store.Log{sh, held}
	versions := make([]uint64, 2)
	for i, l := range logs {
		if versions[i], err = l.Append(ctx, "bench", 0, runningLog(0)...); err != nil {
			b.Fatal(err)
		}
	}
	side := func(i int) func(int) float64 {
		return func(int) float64 {
			t0 := time.Now()
			for range appendsPerRound {
				if versions[i], err = logs[i].Append(ctx, "bench", versions[i], reattached); err != nil {
					b.Fatal(err)
				}
			}
			return since(t0) / appendsPerRound
		}
	}
	shared, direct := side(0), side(1)
	shared(0)
	direct(0)
	b.ResetTimer()
	p := interleave(b, shared, direct)
	p.reportMs(b, "shared", "held", false)
}

// BenchmarkShared256Writers: 256 goroutines appending through one
// store.Shared against the same on a Store held open: overlapping
// operations share the open store and its group commit, so the ratio
// (events/s) stays near 1.
func BenchmarkShared256Writers(b *testing.B) {
	dir := b.TempDir()
	held, err := store.Open(filepath.Join(dir, "held.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer held.Close()
	sh, err := store.OpenShared(filepath.Join(dir, "shared.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer sh.Close()
	ctx := context.Background()
	logs := []store.Log{sh, held}
	versions := [2][]uint64{make([]uint64, writers), make([]uint64, writers)}
	names := make([]string, writers)
	for w := range writers {
		names[w] = fmt.Sprintf("w%03d", w)
		for i, l := range logs {
			if versions[i][w], err = l.Append(ctx, names[w], 0, runningLog(0)...); err != nil {
				b.Fatal(err)
			}
		}
	}
	side := func(i int) func(int) float64 {
		return func(int) float64 {
			return runWriters(b, func(w int) error {
				v, err := logs[i].Append(ctx, names[w], versions[i][w], reattached)
				versions[i][w] = v
				return err
			})
		}
	}
	shared, direct := side(0), side(1)
	shared(0)
	direct(0)
	b.ResetTimer()
	p := interleave(b, shared, direct)
	b.ReportMetric(quantile(p.a, 0.5), "shared-events/s")
	b.ReportMetric(quantile(p.b, 0.5), "held-events/s")
	b.ReportMetric(p.ratio(), "ratio")
}
