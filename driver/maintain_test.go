package driver

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// newSharedDriver opens a driver over a store.Shared (as the CLI does: the
// store held only while an operation is in flight), so that a maintenance
// in the same process can take the store's lock between its operations.
func newSharedDriver(t testing.TB, dir string, hooks Hooks) (*Driver, *store.Shared) {
	t.Helper()
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	sh, err := store.OpenShared(statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{StateDir: dir, Store: sh, ExecutorCommand: []string{self(t), modeExecutor}, KillTimeout: 2 * time.Second, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(); _ = sh.Close() })
	return d, sh
}

// dropTask deletes a task from the store file behind every driver's back,
// as a maintenance that put a store without it in place would have.
func dropTask(t testing.TB, dir, id string) {
	t.Helper()
	m, err := store.BeginMaintenance(context.Background(), statedir.Layout{Dir: dir}.Store(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	db, err := bolt.Open(m.Path(), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("tasks")).DeleteBucket([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket([]byte("live")).Delete([]byte(id))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStartTask_VanishedFromTheStoreKillsWhatItSpawned: a start whose task
// is taken out of the store after its spawn was recorded (what a salvage
// that installed a stale copy did) finds its next append refused as an
// unknown task. No Recover can reconcile a task the store does not hold,
// so the start kills its executor and task itself and says so
// (ErrVanished), instead of "Recover will reconcile it"; nothing is left.
func TestStartTask_VanishedFromTheStoreKillsWhatItSpawned(t *testing.T) {
	for _, point := range []string{crashAfterAppend + "spawn-intent", crashAfterAppend + "launch-intent"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			dir := stateDir(t)
			var once sync.Once
			d, _ := newSharedDriver(t, dir, Hooks{Crash: func(p, task string) {
				if p == point {
					once.Do(func() { dropTask(t, dir, task) })
				}
			}})
			_, err := d.StartTask(ctxT(t), "gone", escapingSpec(t, dir))
			if !errors.Is(err, ErrVanished) || !errors.Is(err, store.ErrUnknownTask) {
				t.Fatalf("start of a task taken out of the store: %v, want ErrVanished", err)
			}
			if !strings.Contains(err.Error(), "killed") && !strings.Contains(err.Error(), "nothing of it was alive") {
				t.Errorf("the error does not say what became of the task's processes: %v", err)
			}
			for _, p := range testproc.Marked(dir) {
				if testproc.Alive(p.PID) {
					t.Errorf("left alive after the start gave up: %s", p)
				}
			}
		})
	}
}

// TestSalvageStore_BesideStartsLosesNothing: SalvageStore under a
// maintenance, beside starts of the same process's driver (a Shared
// store): every start that returned is in the installed store, running,
// and stops.
func TestSalvageStore_BesideStartsLosesNothing(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d, _ := newSharedDriver(t, dir, Hooks{})
	if _, err := d.StartTask(ctx, "pre", taskSpec(t, dir, "sleep")); err != nil {
		t.Fatal(err)
	}
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = "s" + string(rune('a'+i))
		wg.Go(func() { _, errs[i] = d.StartTask(ctx, ids[i], taskSpec(t, dir, "sleep")) })
	}
	m, err := store.BeginMaintenance(ctx, statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := SalvageStore(ctx, m, &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}, Hooks{})
	if rerr := m.Release(); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || !rep.Done() {
		t.Fatalf("salvage: %v %+v", err, rep)
	}
	wg.Wait()
	for i, id := range append(ids, "pre") {
		if i < n && errs[i] != nil {
			t.Errorf("start %s beside the salvage: %v", id, errs[i])
			continue
		}
		st, err := d.InspectTask(ctx, id)
		if err != nil || st.State != fsm.StateRunning {
			t.Errorf("acknowledged task %s after the salvage: %v %v", id, st.State, err)
			continue
		}
		final, err := d.StopTask(ctx, id, syscall.SIGKILL, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		checkReaped(t, d, final)
	}
}
