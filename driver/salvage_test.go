package driver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// plantIdentity writes an executor identity file into task's directory,
// as an executor would (or a task that writes in its own directory).
func plantIdentity(t *testing.T, dir, task string, id fsm.Identity) {
	t.Helper()
	td := statedir.Layout{Dir: dir}.Task(task)
	if err := os.MkdirAll(td.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(td.File(statedir.IdentityFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTaskClaims_LiveOnlyByTheirOwnExecutor: TaskClaims claims every task
// directory with an executor identity, and calls live only the one whose
// executor proves itself (its pid, start time, boot id, and its nonce on
// its command line): an identity naming another live process (this test's)
// with a nonce it does not carry is not live, nor one naming a dead
// process; a directory without an identity is listed and not claimed; an
// identity file that is a link is neither; a world that keeps no
// directories lists none.
func TestTaskClaims_LiveOnlyByTheirOwnExecutor(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d, _ := newSharedDriver(t, dir, Hooks{})
	live, err := d.StartTask(ctx, "live", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.StopTask(context.Background(), "live", syscall.SIGKILL, time.Second) })
	boot, err := proc.BootID()
	if err != nil {
		t.Fatal(err)
	}
	start, ok := proc.Live(os.Getpid())
	if !ok {
		t.Fatal("this process is not alive")
	}
	plantIdentity(t, dir, "stranger", fsm.Identity{PID: os.Getpid(), StartTime: start, BootID: boot, Nonce: "n-stranger"})
	plantIdentity(t, dir, "dead", fsm.Identity{PID: 1 << 22, StartTime: 1, BootID: boot, Nonce: "n-dead"})
	if err := os.MkdirAll(statedir.Layout{Dir: dir}.Task("unspawned").Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	link := statedir.Layout{Dir: dir}.Task("link")
	if err := os.MkdirAll(link.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(statedir.Layout{Dir: dir}.Task("live").File(statedir.IdentityFile), link.File(statedir.IdentityFile)); err != nil {
		t.Fatal(err)
	}
	world := &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}
	claims, dirs, err := TaskClaims(ctx, world)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]store.Claim{}
	for _, c := range claims {
		byID[c.ID] = c
	}
	want := map[string]store.Claim{
		"live":     {ID: "live", Nonce: live.Nonce, Live: true},
		"stranger": {ID: "stranger", Nonce: "n-stranger"},
		"dead":     {ID: "dead", Nonce: "n-dead"},
	}
	if len(byID) != len(want) {
		t.Errorf("claims %+v, want %+v", claims, want)
	}
	for id, w := range want {
		if byID[id] != w {
			t.Errorf("claim of %s: %+v, want %+v", id, byID[id], w)
		}
	}
	var listed []string
	for id := range dirs {
		listed = append(listed, id)
	}
	slices.Sort(listed)
	if !slices.Equal(listed, []string{"dead", "live", "stranger", "unspawned"}) {
		t.Errorf("directories listed: %v", listed)
	}
	other := struct{ executor.World }{world} // not the real world's own type: no directories
	if claims, dirs, err := TaskClaims(ctx, other); claims != nil || dirs != nil || err != nil {
		t.Errorf("a world without directories: %v %v %v", claims, dirs, err)
	}
}

// TestSalvageStore_KillsAndRecordsALiveExecutorTheStoreLost: a store that
// lost a running task's every record (while its executor runs on) is
// salvaged: the executor, proven by its directory's identity, is killed
// with its task, and the task recorded lost in the new store; the other
// task is carried and still stops; the salvage is done.
func TestSalvageStore_KillsAndRecordsALiveExecutorTheStoreLost(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d, sh := newSharedDriver(t, dir, Hooks{})
	for _, id := range []string{"kept", "gone"} {
		if _, err := d.StartTask(ctx, id, taskSpec(t, dir, "sleep")); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := d.InspectTask(ctx, "gone")
	if err != nil || gone.Executor == nil {
		t.Fatalf("gone: %+v %v", gone, err)
	}
	execStart, _ := proc.Live(gone.Executor.PID)
	dropTask(t, dir, "gone")
	m, err := store.BeginMaintenance(ctx, statedir.Layout{Dir: dir}.Store(), store.Options{LockTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := SalvageStore(ctx, m, &executor.Real{StateDir: dir, Command: []string{self(t), modeExecutor}}, Hooks{})
	if rerr := m.Release(); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil || !rep.Done() || !rep.Listed || rep.Claims != 2 {
		t.Fatalf("salvage: %v %+v", err, rep)
	}
	if !slices.Equal(rep.Copied, []string{"kept"}) || !slices.Equal(rep.Recorded, []string{"gone"}) {
		t.Fatalf("copied %v, recorded lost %v; want kept copied and gone recorded lost", rep.Copied, rep.Recorded)
	}
	if s, ok := proc.Live(gone.Executor.PID); ok && s == execStart {
		t.Errorf("the executor of the lost task is alive")
	}
	if st, err := sh.LoadTask(ctx, "gone"); err != nil || st.State != fsm.StateLost {
		t.Errorf("the lost task in the new store: %v %v, want lost", st.State, err)
	}
	final, err := d.StopTask(ctx, "kept", syscall.SIGKILL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkReaped(t, d, final)
	if _, err := os.Stat(filepath.Join(dir, filepath.Base(rep.Aside))); err != nil {
		t.Errorf("the old store is not kept beside: %v", err)
	}
}
