package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/testproc"
)

// TestLoadLive_HandsOnWhatLoadTasksReads: LoadLive hands on, in one read
// and in id order, exactly what LoadTasks(LiveTasks) reads: every live
// task's fold (an ended one is not live), and every live task it cannot
// read with the same error (a damaged record, an entry of the live index
// the store does not hold) while it goes on to the others; through a
// Shared log too, which opens the store for the call. A done context
// reads nothing.
func TestLoadLive_HandsOnWhatLoadTasksReads(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openDamaged(t, path, Options{NoSync: true}, func(testing.TB, Report) {})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		mustAppend(t, s, id, 0, runningLog(1)...)
	}
	mustAppend(t, s, "d", 7, finishLog(20)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageRecord(t, path, "b", 3)
	rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketLive).Put([]byte("ghost"), liveMark) })
	r := openDamaged(t, path, Options{ReadOnly: true}, func(testing.TB, Report) {})
	ctx := context.Background()
	want, err := r.LoadTasks(ctx, LiveTasks)
	if err != nil || want.Incomplete != nil {
		t.Fatal(err, want.Incomplete)
	}
	type got struct {
		tasks   []fsm.Task
		errs    []TaskError
		order   []string
		inc, er error
	}
	read := func(l LiveLoader) got {
		var g got
		g.inc, g.er = l.LoadLive(ctx, func(tk fsm.Task, err error) {
			g.order = append(g.order, tk.ID)
			if err != nil {
				g.errs = append(g.errs, TaskError{Task: tk.ID, Err: err})
				return
			}
			g.tasks = append(g.tasks, tk)
		})
		return g
	}
	sh, err := OpenShared(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	for name, l := range map[string]LiveLoader{"Store": r, "Shared": sh} {
		g := read(l)
		if g.er != nil || g.inc != nil {
			t.Fatalf("%s.LoadLive: %v, incomplete %v", name, g.er, g.inc)
		}
		if !slices.EqualFunc(g.tasks, want.Tasks, func(a, b fsm.Task) bool { return a.ID == b.ID && a.State == b.State && a.Version == b.Version }) || len(g.tasks) != len(want.Tasks) {
			t.Errorf("%s.LoadLive's tasks %v, want LoadTasks' %v", name, g.tasks, want.Tasks)
		}
		if len(g.errs) != len(want.Unreadable) {
			t.Fatalf("%s.LoadLive's unreadable %v, want %v", name, g.errs, want.Unreadable)
		}
		for i, e := range g.errs {
			var ce, we *CorruptError
			if e.Task != want.Unreadable[i].Task || !errors.As(e.Err, &ce) || !errors.As(want.Unreadable[i].Err, &we) || ce.Error() != we.Error() {
				t.Errorf("%s.LoadLive's unreadable %d: %v, want %v", name, i, e, want.Unreadable[i])
			}
		}
		if w := []string{"a", "b", "c", "e", "ghost"}; !slices.Equal(g.order, w) {
			t.Errorf("%s.LoadLive handed on %v, want %v (id order)", name, g.order, w)
		}
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	n := 0
	if _, err := r.LoadLive(done, func(fsm.Task, error) { n++ }); !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("LoadLive with a done context: %v after %d tasks, want context.Canceled and none", err, n)
	}
}
