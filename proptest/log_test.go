package proptest

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// TestMemLog_LoadTasksAsTheStore: MemLog's LoadTasks gives what the bbolt
// store's gives for the same appends: the live tasks, or all of them, in
// id order, folded.
func TestMemLog_LoadTasksAsTheStore(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "tether.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mem := NewMemLog()
	created := func(name string) fsm.Event {
		return fsm.Event{Type: fsm.EventCreated, Time: 1, Spec: &fsm.Spec{Name: name, Driver: "raw_exec", Command: "/bin/true"}}
	}
	appends := []struct {
		task string
		evs  []fsm.Event
	}{
		{"web-2", []fsm.Event{created("web")}},
		{"web-1", []fsm.Event{created("web"), {Type: fsm.EventConfigRejected, Time: 2, Reason: "no", Cause: fsm.CauseInvalidSpec}}},
		{"db-1", []fsm.Event{created("db")}},
	}
	for _, l := range []store.Log{st, mem} {
		for _, a := range appends {
			if _, err := l.Append(ctx, a.task, 0, a.evs...); err != nil {
				t.Fatalf("%T: append %s: %v", l, a.task, err)
			}
		}
	}
	for which, want := range map[store.Selection][]string{store.LiveTasks: {"db-1", "web-2"}, store.AllTasks: {"db-1", "web-1", "web-2"}} {
		fromStore, err := st.LoadTasks(ctx, which)
		if err != nil {
			t.Fatal(err)
		}
		fromMem, err := mem.LoadTasks(ctx, which)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range fromMem.Tasks {
			ids = append(ids, x.ID)
		}
		if !reflect.DeepEqual(ids, want) {
			t.Errorf("MemLog.LoadTasks(%d): %v, want %v", which, ids, want)
		}
		if !reflect.DeepEqual(fromMem, fromStore) {
			t.Errorf("LoadTasks(%d): MemLog\n %+v\nstore\n %+v", which, fromMem, fromStore)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := mem.LoadTasks(cancelled, store.AllTasks); err == nil {
		t.Error("MemLog.LoadTasks with a cancelled context: no error")
	}
}
