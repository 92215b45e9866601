package driver

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// appendLog records events for a task straight into the store at dir, as a
// driver that then crashed would have left them.
func appendLog(t *testing.T, dir, id string, inputs ...fsm.Event) fsm.Task {
	t.Helper()
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := fsm.Task{ID: id}
	for _, in := range inputs {
		evs, _, err := fsm.Step(task, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Append(ctxT(t), id, task.Version, evs...); err != nil {
			t.Fatal(err)
		}
		task, _ = fsm.FoldAll(task, evs...)
	}
	return task
}

// startStranger starts a process of ours that no task owns, leading its
// own process group, and returns its pid and start time.
func startStranger(t *testing.T, marker string) (*exec.Cmd, uint64) {
	t.Helper()
	c := exec.Command(self(t), modeTask, "sleep", marker)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	start, err := proc.StartTime(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return c, start
}

func strangerAlive(t *testing.T, c *exec.Cmd) bool {
	t.Helper()
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
	return err == nil && pid == 0
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Issue 11, item 2: a task caught between its launch intent and the record
// of its launch, whose executor is gone, with a launch.json planted in its
// directory that names another process (right pid, start time and boot
// id; another nonce). Recover must not signal that process (its whole
// process group was SIGKILLed before the launch record was matched against
// the log), and records the task lost saying the file did not match.
func TestRecover_PlantedLaunchRecordNeverKillsAStranger(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	const id, nonce = "planted", "planted-nonce-1"
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	c, err := executor.Spawn(ctx, executor.SpawnConfig{Command: []string{self(t), modeExecutor}, TaskDir: filepath.Join(dir, "tasks", id), Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	x := c.Identity()
	spec := taskSpec(t, dir, "sleep")
	appendLog(t, dir, id, fsm.Event{Type: fsm.EventCreated, Spec: &spec},
		fsm.Event{Type: fsm.EventSpawnIntent, Nonce: nonce}, fsm.Event{Type: fsm.EventExecutorUp, Executor: &x})
	if err := proc.Kill(ctx, x); err != nil { // the executor is gone, never having launched
		t.Fatal(err)
	}
	_ = c.Close()
	stranger, start := startStranger(t, dir+"-stranger")
	writeJSON(t, filepath.Join(dir, "tasks", id, statedir.LaunchFile), executor.LaunchRecord{
		Nonce: "someone-elses-nonce", BootID: x.BootID, PID: stranger.Process.Pid, StartTime: start})

	d := newDriver(t, dir, Hooks{})
	defer d.Close()
	if _, err := d.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := d.WaitTask(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !strangerAlive(t, stranger) {
		t.Fatal("the process named by a launch record that does not match the log was signalled")
	}
	if final.State != fsm.StateLost || !strings.Contains(final.Reason, "launch record did not match") {
		t.Fatalf("task %s, reason %q; want lost, saying the launch record did not match", final.State, final.Reason)
	}
}

// Issue 11, item 2: an exit.json of another executor (another nonce and
// task pid) is not taken for the task's exit: while the executor is alive
// it is asked, and once it is gone the forged file makes the task lost,
// not "exited, code 0".
func TestRecover_ForgedExitRecordIsNotBelieved(t *testing.T) {
	dir := stateDir(t)
	ctx := ctxT(t)
	d1 := newDriver(t, dir, Hooks{})
	st, err := d1.StartTask(ctx, "forged", taskSpec(t, dir, "sleep"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	forged := executor.ExitRecord{Exit: fsm.ExitStatus{Code: 0}, Nonce: "forged-nonce-00", BootID: st.Executor.BootID, PID: st.TaskPID + 1, StartTime: 1}
	exitPath := filepath.Join(dir, "tasks", "forged", statedir.ExitStatusFile)
	writeJSON(t, exitPath, forged)

	// The executor is alive: it is asked, the file is not read.
	d2 := newDriver(t, dir, Hooks{})
	if _, err := d2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := d2.InspectTask(ctx, "forged"); err != nil || info.State != fsm.StateRunning || !info.ExecutorAlive {
		t.Fatalf("with a forged exit.json and the executor alive: %s alive=%v %v; want running", info.State, info.ExecutorAlive, err)
	}
	if err := d2.Close(); err != nil {
		t.Fatal(err)
	}
	// The executor dies (its task with it, by the parent-death signal)
	// without writing an exit status: the forged one is all there is.
	if err := proc.Kill(ctx, *st.Executor); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, exitPath, forged)
	d3 := newDriver(t, dir, Hooks{})
	defer d3.Close()
	if _, err := d3.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := d3.WaitTask(ctx, "forged")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != fsm.StateLost || final.Exit != nil && final.Exit.Code == 0 || !strings.Contains(final.Reason, "did not match the log") {
		t.Fatalf("task %s exit %v reason %q; want lost, saying the exit file did not match", final.State, final.Exit, final.Reason)
	}
	checkReaped(t, d3, final)
}

// Issue 11, item 6: an existing state directory is used as it is only if
// it is private and the caller's; it is never chmodded.
func TestOpen_StateDirIsNeverChmodded(t *testing.T) {
	for name, mode := range map[string]os.FileMode{"world-writable sticky": 0o777 | os.ModeSticky, "group-readable": 0o750} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "shared")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			_, err := Open(Config{StateDir: dir})
			if err == nil || !strings.Contains(err.Error(), "private") {
				t.Fatalf("Open on a %s dir: %v, want a refusal saying it must be private", name, err)
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != mode {
				t.Fatalf("mode after Open: %v %v, want %v unchanged", fi.Mode(), err, mode)
			}
		})
	}
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown a directory to another user")
		}
		dir := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Config{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("Open on another user's dir: %v", err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil || st.Uid != 65534 {
			t.Fatalf("owner after Open: %d %v, want 65534 unchanged", st.Uid, err)
		}
	})
	t.Run("missing: created private", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		d, err := Open(Config{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("created %v %v, want 0700", fi.Mode(), err)
		}
	})
}
