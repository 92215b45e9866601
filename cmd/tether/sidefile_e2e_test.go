package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/statedir"
)

// waitGone waits, through a pidfd, until process pid has exited (a
// deadline of a minute).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 60_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("process %d did not exit within a minute: %v", pid, err)
		}
		return
	}
}

// startOrphaned starts a sleeping helper task and kills its executor
// (SIGKILL): the log says running, the executor is gone without an exit
// record (its task dies with it), as after a crash of the executor. It
// returns the task's id and the launch record its executor wrote.
func (e *env) startOrphaned(name string) (string, executor.LaunchRecord) {
	e.t.Helper()
	id := strings.TrimSpace(e.must(e.runArgs("start", []string{"--name", name}, "sleep")...).stdout)
	st := e.status(id)[0]
	rec, ok, err := executor.SideFiles(filepath.Join(e.dir, "tasks", id)).LaunchRecord()
	if err != nil || !ok {
		e.t.Fatalf("the launch record of %s: %v %v", id, ok, err)
	}
	if err := syscall.Kill(st.ExecutorPID, syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	waitGone(e.t, st.ExecutorPID)
	return id, rec
}

// lostReason returns a task's state and the reason the store records.
func (e *env) lostReason(id string) (string, string) {
	e.t.Helper()
	r := e.must("status", "--json", id)
	var out []struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out) != 1 {
		e.t.Fatalf("status --json %s: %v\n%s", id, err, r)
	}
	return out[0].State, out[0].Reason
}

// Issue 11, item 8 (side files): what a task (which may run in its task
// directory, as the executor's user) can plant among its executor's side
// files is refused before it is believed or costs anything. Planted, in
// four tasks whose executors are gone:
//
//   - over-cap: an exit record just over the 64 KiB cap (right nonce, boot
//     id and task process: believed, it would say exited 0);
//   - sparse: a 300 MB sparse exit record;
//   - symlink: a launch record that is a symbolic link to a record naming
//     a stranger (right nonce and boot id), in a task caught between its
//     launch intent and the record of its launch;
//   - fifo: a FIFO in place of the exit record (an open that follows it
//     blocks until a writer comes).
//
// `tether recover` returns promptly, its peak RSS stays far below the 300
// MB file, the stranger is not signalled, and every task is recorded lost
// with a reason saying the file did not match / was not believed, and why.
func TestRecover_PlantedSideFilesAreRefusedCheaply(t *testing.T) {
	e := newEnv(t)
	stranger := exec.Command(e.helper("sleep")[0], e.helper("sleep")[1:]...)
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }) // before the leak check
	strangerStart, err := proc.StartTime(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	// over-cap: a well-formed exit record that matches the log, padded to
	// one byte past the cap.
	overCap, rec := e.startOrphaned("over-cap")
	exitRec := func(rec executor.LaunchRecord, pad int) []byte {
		b, err := json.Marshal(map[string]any{"exit": map[string]int{"code": 0}, "nonce": rec.Nonce, "boot_id": rec.BootID,
			"pid": rec.PID, "start_time": rec.StartTime, "pad": strings.Repeat("x", pad)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const maxSideFile = 64 << 10 // executor's cap on a side file
	b := exitRec(rec, 0)
	b = exitRec(rec, maxSideFile+1-len(b))
	if len(b) != maxSideFile+1 {
		t.Fatalf("the over-cap record is %d bytes, want %d", len(b), maxSideFile+1)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "tasks", overCap, statedir.ExitStatusFile), b, 0o600); err != nil {
		t.Fatal(err)
	}

	// sparse: 300 MB, a record at its head and holes after.
	sparse, rec := e.startOrphaned("sparse")
	f, err := os.OpenFile(filepath.Join(e.dir, "tasks", sparse, statedir.ExitStatusFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(exitRec(rec, 0)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(300 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// fifo: a FIFO where the exit record goes.
	fifo, _ := e.startOrphaned("fifo")
	if err := unix.Mkfifo(filepath.Join(e.dir, "tasks", fifo, statedir.ExitStatusFile), 0o600); err != nil {
		t.Fatal(err)
	}

	// symlink: the CLI dies (its crash point) right after the executor is
	// recorded up with the launch intent; the executor, its lease gone,
	// exits without launching. Its launch record is then a symbolic link
	// to a record, right but for the process it names: the stranger.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crash := e.command(ctx, []string{"TETHER_CRASHPOINT=after-append:executor-up"}, e.runArgs("run", []string{"--name", "symlink"}, "sleep")...)
	if out, err := crash.CombinedOutput(); err == nil || crash.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the crash point did not fire: %v\n%s", err, out)
	}
	// No command may run before recover: one that lists a task whose
	// executor is gone reconciles it. The task's directory names it.
	dirs, err := filepath.Glob(filepath.Join(e.dir, "tasks", "symlink-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("the crashed start's task directory: %v %v", dirs, err)
	}
	symDir, symlink := dirs[0], filepath.Base(dirs[0])
	x, err := executor.SideFiles(symDir).Identity()
	if err != nil {
		t.Fatalf("the identity of the crashed start's executor: %v", err)
	}
	waitGone(t, x.PID)
	target := filepath.Join(t.TempDir(), "launch.json")
	lb, err := json.Marshal(executor.LaunchRecord{Nonce: x.Nonce, BootID: x.BootID, PID: stranger.Process.Pid, StartTime: strangerStart})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, lb, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(symDir, statedir.LaunchFile)); err != nil {
		t.Fatal(err)
	}

	// Reconcile everything, in a child born in a memory cgroup of its own,
	// whose peak (its memory and the page cache of what it read) the
	// kernel keeps. (Not ru_maxrss: a child os/exec starts with vfork has
	// its parent's high-water mark recorded at its exec, and a -race test
	// binary's is hundreds of MB.)
	out, peak, took := e.measuredRecover(t)
	t.Logf("tether recover took %s, memory peak %d MiB:\n%s", took.Round(time.Millisecond), peak>>20, out)
	if peak > 100<<20 {
		t.Errorf("tether recover peaked at %d MiB of memory: a planted 300 MB side file was read", peak>>20)
	}
	if took > 10*time.Second {
		t.Errorf("tether recover took %s, want promptly", took)
	}

	if !testproc.Alive(stranger.Process.Pid) {
		t.Error("the stranger named by the symlinked launch record was signalled")
	}
	for _, tc := range []struct{ id, file, why string }{
		{overCap, "exit status file", "larger than"},
		{sparse, "exit status file", "larger than"},
		{fifo, "exit status file", "not a regular file"},
		{symlink, "launch record", "symbolic link"},
	} {
		if tc.file == "exit status file" && !strings.Contains(string(out), tc.id) {
			t.Errorf("recover's report does not list %s", tc.id)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if tc.file == "exit status file" && strings.HasPrefix(line, tc.id) && !strings.Contains(line, "did not match the log (not believed)") {
				t.Errorf("recover's action for %s does not say its exit status was not believed: %s", tc.id, line)
			}
		}
		state, reason := e.lostReason(tc.id)
		want := fmt.Sprintf("the %s did not match the log, so it was not believed", tc.file)
		if state != "lost" || !strings.Contains(reason, want) || !strings.Contains(reason, tc.why) {
			t.Errorf("task %s: %s, reason %q; want lost, saying %q and %q", tc.id, state, reason, want, tc.why)
		}
	}
}

// measuredRecover runs `tether recover` born in a memory cgroup of its own
// (cgroup.ForkExec, as the executor starts a raw_exec task) and returns its
// output, the cgroup's memory peak and how long it took; it fails the test
// if recover does not end within 30 s.
func (e *env) measuredRecover(t *testing.T) (string, uint64, time.Duration) {
	t.Helper()
	h := needTaskCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller to measure recover's memory: %s", why)
	}
	loc, err := cgroup.LocationFor(h, "recover-measure", fmt.Sprintf("%016x", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.Create(h, loc, cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cg.Kill(ctx)
		_ = cg.Remove()
	}()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	cmd := e.command(context.Background(), nil, "recover")
	began := time.Now()
	pid, err := cg.ForkExec(h, cmd.Path, cmd.Args, &syscall.ProcAttr{Env: cmd.Env, Files: []uintptr{devnull.Fd(), w.Fd(), w.Fd()}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	var out []byte
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("tether recover did not return within 30s (a planted FIFO blocks an open that does not refuse it)")
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if ws.ExitStatus() != 0 {
		t.Logf("tether recover exited %d", ws.ExitStatus())
	}
	st, err := cg.Stats()
	if err != nil || st.MemoryPeakBytes == 0 {
		t.Fatalf("the memory cgroup's peak: %+v %v", st, err)
	}
	return string(out), st.MemoryPeakBytes, took
}
