package proptest

import (
	"reflect"
	"slices"
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

// TestEqualTask_EveryField: equalTask tells apart two tasks that differ in
// any one field but the spec (compared by sameTask), so a field added to
// fsm.Task cannot slip past the fold == live check unnoticed.
func TestEqualTask_EveryField(t *testing.T) {
	base := fsm.Task{ID: "a", State: fsm.StateRunning, Version: 6, CreatedAt: 1, UpdatedAt: 2, Nonce: "n",
		Executor: &fsm.Identity{PID: 10, StartTime: 20, BootID: "b", Nonce: "n", Socket: "s", Cgroup: "c"},
		TaskPID:  11, TaskStartTime: 21, Exit: &fsm.ExitStatus{Code: 1}, Target: fsm.StateExited, Reason: "r",
		Cause: fsm.CauseOther, Warnings: []fsm.Warning{{Kind: fsm.WarnUncontained, Text: "w"}},
		StopSignal: 15, StopGrace: 5, Restarts: 1}
	if !equalTask(base, base) {
		t.Fatal("a task differs from itself")
	}
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "Spec" {
			continue
		}
		other := base
		v := reflect.ValueOf(&other).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint8, reflect.Uint64:
			v.SetUint(v.Uint() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Slice: // of warnings
			w := slices.Clone(base.Warnings)
			w[0].Text += "x"
			v.Set(reflect.ValueOf(w))
		case reflect.Pointer:
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(v.Elem())
			p.Elem().Field(0).SetInt(p.Elem().Field(0).Int() + 1)
			v.Set(p)
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, v.Kind())
		}
		if equalTask(base, other) {
			t.Errorf("equalTask does not compare fsm.Task.%s", f.Name)
		}
	}
}
