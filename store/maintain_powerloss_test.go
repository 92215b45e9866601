package store_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/internal/crashfs"
	"github.com/tether-fsm/tether/store"

	"github.com/tether-fsm/tether/internal/testproc"
)

// Power loss during a maintenance (issue 36). Each of Remove, Compact,
// Salvage with its Install, and an agent's Suspend and Reopen around them
// runs on a crashfs mount, between appends acknowledged before it and
// appends acknowledged in the file it put in place. Every state the disk
// may hold after a power loss anywhere in it (at and between every fsync)
// must hold a whole store that passes Check (invariant 8) and every append
// acknowledged before that crash (invariant 7), whichever file the store's
// name holds: so no step may be durable before the one it depends on.
//
// The steps, in their order (a crash state lies between every two):
//
//	Compact  1. write the copy beside the store (bbolt, unsynced)
//	         2. fsync the copy
//	         3. rename it over the store
//	         4. fsync the directory
//	         5. let the lock go (the next append is in the new file)
//	Salvage  1. create the new store (PATH.new, fsync, rename, fsync dir)
//	         2. copy the tasks into it, each transaction fsynced
//	         3. RecordLost: the lost tasks' records into it, fsynced
//	Install  4. link the old store to its aside name
//	         5. rename the new store over the store
//	         6. fsync the directory (the link and the rename)
//	         7. let the lock go, or Reopen (the next append is in the new file)
//	Remove   1. one transaction, fsynced (the next Compact reads it)
//	Suspend  1. the queued appends committed (each fsynced), the file closed
//	         2. the maintenance above, the lock held throughout
//	Reopen   3. the file in place opened with that lock; appends go on
//
// Besides the crash states, each test checks the protocol in the log of
// operations itself: the file renamed over the store had no write pending
// when it was renamed, and the directory was synced after the rename
// before the maintenance returned (a Mark). A planted bug that drops or
// moves an fsync fails both ways.

// plReplaced checks the operations logged between index from and the mark
// end: newFile (relative to the mount) is renamed over the store once,
// with no write of it pending (every write before an fsync of it), after
// the link to aside when aside is set, and the store's directory is
// synced after the rename, before end.
func (run *plRun) plReplaced(t *testing.T, from int, end crashfs.Mark, newFile, aside string) {
	t.Helper()
	dir := path.Dir(run.db)
	pending, renamed, linked, dirSynced := 0, false, false, false
	for _, op := range run.fs.Ops()[from:] {
		if op.Seq >= end.Seq {
			break
		}
		switch {
		case renamed:
			if op.Kind == crashfs.OpSyncDir && op.Path == dir {
				dirSynced = true
			}
		case (op.Kind == crashfs.OpWrite || op.Kind == crashfs.OpTruncate) && op.Path == newFile:
			pending++
		case op.Kind == crashfs.OpSync && op.Path == newFile:
			pending = 0
		case op.Kind == crashfs.OpLink && aside != "" && op.Path == aside:
			linked = true
		case op.Kind == crashfs.OpRename && op.Path == newFile && op.To == run.db:
			renamed = true
			if pending > 0 {
				t.Errorf("%s: %s renamed over the store with %d writes of it not synced", op, newFile, pending)
			}
			if aside != "" && !linked {
				t.Errorf("%s: %s renamed over the store before the old store was linked to %s", op, newFile, aside)
			}
		}
	}
	switch {
	case !renamed:
		t.Errorf("%s was never renamed over %s before %s", newFile, run.db, end)
	case !dirSynced:
		t.Errorf("the directory %s was not synced after %s was renamed over the store, before %s: the rename is not durable when the maintenance returns", dir, newFile, end)
	}
}

// plTask is a log of a task the workloads below append in two parts:
// before the maintenance (to version mid) and after it.
type plTask struct {
	id  string
	mid int
}

// plBefore sets up the tasks' logs and appends each to its mid, n events
// an append. A task whose mid is its whole log ends before the
// maintenance.
func (run *plRun) plBefore(t *testing.T, s *store.Store, tasks []plTask, n int) {
	t.Helper()
	for _, tk := range tasks {
		run.logs[tk.id] = plLifecycle(tk.id, 4)
		if _, err := run.appendTo(s, tk.id, 0, tk.mid, n); err != nil {
			t.Fatal(err)
		}
	}
}

// plAfter appends the rest of each task's log after the maintenance, one
// event an append, in the store that is in place now, and a new task
// whole.
func (run *plRun) plAfter(t *testing.T, s store.Log, tasks []plTask) {
	t.Helper()
	for _, tk := range tasks {
		if tk.mid == len(run.logs[tk.id]) {
			continue
		}
		if _, err := run.appendTo(s, tk.id, uint64(tk.mid), len(run.logs[tk.id]), 1); err != nil {
			t.Fatal(err)
		}
	}
	run.logs["after"] = plLifecycle("after", 1)
	if _, err := run.appendTo(s, "after", 0, len(run.logs["after"]), 2); err != nil {
		t.Fatal(err)
	}
}

// TestPowerLoss_Compact: `tether gc` (Remove, then Compact) between
// appends. A power loss anywhere leaves the store before or after each
// step: every task Remove took is gone once it returned, every other
// acknowledged append is there, in the old file or the new one, and the
// compaction can run again on what the crash left (a copy beside the
// store included).
func TestPowerLoss_Compact(t *testing.T) {
	testproc.Parallel(t)
	run, s := plOpen(t, crashfs.Options{})
	ctx := context.Background()
	tasks := []plTask{{"ended-0", 12}, {"ended-1", 12}, {"live-0", 8}, {"live-1", 10}}
	run.plBefore(t, s, tasks, 3)

	begun := run.fs.Mark("Remove begins")
	removed, err := s.Remove(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	run.removals = append(run.removals, plRemoval{ids: removed, begun: begun, done: run.fs.Mark("Remove returned")})
	if !slices.Equal(removed, []string{"ended-0", "ended-1"}) {
		t.Fatalf("Remove took %v, want the two ended tasks", removed)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	from := len(run.fs.Ops())
	db := run.fs.Path(run.db)
	if _, _, err := store.Compact(db, store.Options{LockTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	run.plReplaced(t, from, run.fs.Mark("Compact returned"), run.db+".compact", "")

	s2, err := store.Open(db, store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run.plAfter(t, s2, tasks)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	leftovers := 0
	run.again = func(p string) error {
		if _, err := os.Lstat(p + ".compact"); err != nil {
			return nil
		}
		leftovers++
		_, _, err := store.Compact(p, store.Options{NoSync: true})
		return err
	}
	n := run.check(t)
	if leftovers == 0 {
		t.Error("no crash state left the compaction's copy beside the store: the states do not reach into the compaction")
	}
	t.Logf("%d crash states over %d boundaries (%d with the copy left beside the store)", n, len(run.fs.Boundaries()), leftovers)
}

// plDamage flips a byte of task's record seq in the closed store at path
// (behind the store's back, through bbolt), so that a salvage loses it.
func plDamage(t *testing.T, path, task string, seq uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("tasks")).Bucket([]byte(task))
		key := binary.BigEndian.AppendUint64(nil, seq)
		v := slices.Clone(b.Get(key))
		v[len(v)-1] ^= 0x40
		return b.Put(key, v)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPowerLoss_SalvageInstall: a salvage of a store with a damaged live
// task, the record of that task as lost (RecordLost) and the install,
// under one maintenance, between appends. A power loss anywhere leaves the
// old store or the whole salvaged one under the store's name, every
// acknowledged append in it; once Install has returned, the damaged task
// reads as ended lost and the old store is kept under its aside name.
func TestPowerLoss_SalvageInstall(t *testing.T) {
	testproc.Parallel(t)
	run, s := plOpen(t, crashfs.Options{})
	ctx := context.Background()
	tasks := []plTask{{"ended-0", 12}, {"live-0", 8}, {"live-1", 10}}
	run.plBefore(t, s, tasks, 3)
	run.plBefore(t, s, []plTask{{"damaged", 8}}, 8)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := run.fs.Path(run.db)
	plDamage(t, db, "damaged", 4)
	before := run.acked()

	from := len(run.fs.Ops())
	m, err := store.BeginMaintenance(ctx, db, store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dst, aside := path.Join(path.Dir(run.db), "salvaged.db"), path.Join(path.Dir(run.db), "aside.db")
	rep, err := m.Salvage(ctx, run.fs.Path(dst))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Copied) != len(tasks) || len(rep.Lost) != 1 || rep.Lost[0].ID != "damaged" {
		t.Fatalf("salvage: copied %v, lost %v; want every task but the damaged one copied", rep.Copied, rep.Lost)
	}
	l := rep.Lost[0]
	if err := m.RecordLost(run.fs.Path(dst), []store.Loss{{ID: l.ID, Nonce: l.Nonce, Executor: l.Prefix.Executor, Reason: "killed"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := m.Install(run.fs.Path(dst), run.fs.Path(aside)); err != nil {
		t.Fatal(err)
	}
	installed := run.fs.Mark("Install returned")
	run.lost = map[string]crashfs.Mark{"damaged": installed}
	if err := m.Release(); err != nil {
		t.Fatal(err)
	}
	run.plReplaced(t, from, installed, dst, aside)
	run.kept = append(run.kept, plKept{file: aside, from: installed, acks: before})

	s2, err := store.Open(db, store.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	run.plAfter(t, s2, tasks)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	n := run.check(t)
	t.Logf("%d crash states over %d boundaries", n, len(run.fs.Boundaries()))
}

// TestPowerLoss_SuspendReopen: an agent holds the store open with writers
// appending; it suspends the store (the appends in flight commit, the
// lock passes to the maintenance), compacts or salvages and installs,
// reopens, and the writers go on in the store in place. A power loss
// anywhere loses no append any writer was told had returned.
func TestPowerLoss_SuspendReopen(t *testing.T) {
	testproc.Parallel(t)
	for _, how := range []string{"compact", "salvage"} {
		t.Run(how, func(t *testing.T) {
			testproc.Parallel(t)
			// Each fsync takes a millisecond, so that appends queue behind
			// a commit when Suspend comes.
			run, s := plOpen(t, crashfs.Options{SyncLatency: time.Millisecond})
			ctx := context.Background()
			const writers = 4
			versions := make([]uint64, writers)
			started := make(chan struct{}, writers)
			var wg sync.WaitGroup
			for w := range writers {
				task := fmt.Sprintf("w%d", w)
				run.logs[task] = plLifecycle(task, 8)
			}
			for w := range writers {
				task := fmt.Sprintf("w%d", w)
				n := len(run.logs[task])
				wg.Go(func() {
					for v := uint64(0); int(v) < n; {
						nv, err := run.appendTo(s, task, v, int(v)+1, 1)
						versions[w] = nv
						if v == 2 {
							started <- struct{}{}
						}
						if errors.Is(err, store.ErrClosed) {
							return
						}
						if err != nil {
							t.Errorf("writer %s: %v", task, err)
							return
						}
						v = nv
					}
				})
			}
			for range writers {
				<-started
			}
			from := len(run.fs.Ops())
			m, err := s.Suspend()
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			dir := path.Dir(run.db)
			switch how {
			case "compact":
				if _, _, err := m.Compact(); err != nil {
					t.Fatal(err)
				}
				run.plReplaced(t, from, run.fs.Mark("Compact returned"), run.db+".compact", "")
			case "salvage":
				dst, aside := path.Join(dir, "salvaged.db"), path.Join(dir, "aside.db")
				if _, err := m.Salvage(ctx, run.fs.Path(dst)); err != nil {
					t.Fatal(err)
				}
				if err := m.Install(run.fs.Path(dst), run.fs.Path(aside)); err != nil {
					t.Fatal(err)
				}
				run.plReplaced(t, from, run.fs.Mark("Install returned"), dst, aside)
			}
			s2, err := m.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			for w, v := range versions {
				task := fmt.Sprintf("w%d", w)
				if tk, err := s2.LoadTask(ctx, task); err != nil || tk.Version != v {
					t.Fatalf("task %s in the reopened store: version %d (%v), its writer was told %d", task, tk.Version, err, v)
				}
				if _, err := run.appendTo(s2, task, v, len(run.logs[task]), 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			n := run.check(t)
			t.Logf("%d crash states over %d boundaries; versions at the suspend %v", n, len(run.fs.Boundaries()), versions)
		})
	}
}
