package driver

// The driver's benchmarks, each measured against its floor in the same run,
// interleaved (the two sides alternate, and which one goes first alternates
// too), and reported as the median of the paired ratios: this machine is
// noisy, so only ratios taken side by side mean anything. b.N is the number
// of rounds.
//
//	go test -run '^$' -bench . -benchtime 50x ./driver/
//
// make bench gathers them (with bench/) into BENCHMARKS.md.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
	"github.com/tether-fsm/tether/internal/proc"
	"github.com/tether-fsm/tether/store"
)

// taskBinary is the task both sides start: a real program that stays up.
const taskBinary = "/bin/sleep"

var taskArgs = []string{"3600"}

// benchBinaries builds the standalone executor and the minimal Go helper
// (net/rpc on a unix socket; the executor package's floor) without cgo,
// as they would ship.
func benchBinaries(b *testing.B) (executorBin, helperBin string) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "state")
	for _, p := range []struct{ out, pkg string }{
		{"tether-executor", "github.com/tether-fsm/tether/cmd/tether-executor"},
		{"minhelper", "github.com/tether-fsm/tether/executor/internal/minhelper"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, p.out), p.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", p.pkg, err, out)
		}
	}
	return filepath.Join(dir, "tether-executor"), filepath.Join(dir, "minhelper")
}

// paired holds the two sides' samples of an interleaved benchmark.
type paired struct{ a, b []float64 }

func (p *paired) add(a, b float64) { p.a, p.b = append(p.a, a), append(p.b, b) }

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

// ratio is the median of the paired ratios a/b.
func (p *paired) ratio() float64 {
	r := make([]float64, len(p.a))
	for i := range p.a {
		r[i] = p.a[i] / p.b[i]
	}
	return quantile(r, 0.5)
}

// report emits the medians (and p99 when withP99) of both sides in ms and
// the median paired ratio. Durations are in seconds.
func (p *paired) report(b *testing.B, aName, bName string, withP99 bool) {
	b.ReportMetric(quantile(p.a, 0.5)*1e3, aName+"-p50-ms")
	b.ReportMetric(quantile(p.b, 0.5)*1e3, bName+"-p50-ms")
	if withP99 {
		b.ReportMetric(quantile(p.a, 0.99)*1e3, aName+"-p99-ms")
		b.ReportMetric(quantile(p.b, 0.99)*1e3, bName+"-p99-ms")
		// The ratio of the tails: p99 over p99 (tails do not pair).
		b.ReportMetric(quantile(p.a, 0.99)/quantile(p.b, 0.99), "p99-ratio")
	}
	b.ReportMetric(p.ratio(), "ratio")
}

// interleave runs b.N rounds of a and f, alternating which goes first, and
// returns their samples in seconds.
func interleave(b *testing.B, a, f func(round int) time.Duration) *paired {
	p := &paired{}
	for i := 0; i < b.N; i++ {
		var da, df time.Duration
		if i%2 == 0 {
			da, df = a(i), f(i)
		} else {
			df, da = f(i), a(i)
		}
		p.add(da.Seconds(), df.Seconds())
	}
	return p
}

// writeIdentity is the executor's identity write: temporary file, fsync,
// rename, fsync of the directory.
func writeIdentity(b *testing.B, dir string, pid int) {
	data, _ := json.Marshal(map[string]int{"pid": pid})
	tmp := filepath.Join(dir, ".identity.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "identity.json")); err != nil {
		b.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	d.Close()
}

// phases records when the driver passes its crash points (used here as
// probes, never crashing), so a benchmark can say where its time goes.
type phases struct {
	mu sync.Mutex
	at map[string]time.Time
	// sums holds each named phase's samples in seconds.
	sums map[string][]float64
}

func newPhases() *phases { return &phases{at: map[string]time.Time{}, sums: map[string][]float64{}} }

func (p *phases) hit(point, _ string) {
	p.mu.Lock()
	p.at[point] = time.Now()
	p.mu.Unlock()
}

// span adds, under name, the time from point a to point b of this round.
func (p *phases) span(name, a, b string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ta, okA := p.at[a]
	tb, okB := p.at[b]
	if okA && okB {
		p.sums[name] = append(p.sums[name], tb.Sub(ta).Seconds())
	}
}

// appends adds, under "appends", the time this round spent in the appends
// of events (from before-append to after-append of each).
func (p *phases) appends(events ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0.0
	for _, e := range events {
		total += p.at["after-append:"+e].Sub(p.at["before-append:"+e]).Seconds()
	}
	p.sums["appends"] = append(p.sums["appends"], total)
}

func (p *phases) reset() {
	p.mu.Lock()
	clear(p.at)
	p.mu.Unlock()
}

func (p *phases) report(b *testing.B) {
	for name, xs := range p.sums {
		b.ReportMetric(quantile(xs, 0.5)*1e3, "phase-"+name+"-ms")
	}
}

func benchDriver(b *testing.B, dir string, executorBin string, hooks Hooks) *Driver {
	d, err := Open(Config{StateDir: dir, ExecutorCommand: []string{executorBin}, KillTimeout: time.Second, Hooks: hooks})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

func destroy(b *testing.B, d *Driver, id string) {
	if err := d.DestroyTask(context.Background(), id, true); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStartTask: StartTask -> running on real executors (the
// standalone tether-executor) against the floor: the minimal Go helper
// spawned with one RPC over its unix socket, a fork/exec of the same task
// binary, and the same fsyncs as tether's start path (6 bbolt Updates for
// task-created, spawn-intent, executor-up, launch-intent, launched and
// running, plus the executor's identity file: fsync of file and directory).
// Target: ratio <= 1.5.
func BenchmarkStartTask(b *testing.B) {
	executorBin, helperBin := benchBinaries(b)
	dir := filepath.Join(b.TempDir(), "state")
	ph := newPhases()
	d := benchDriver(b, dir, executorBin, Hooks{Crash: ph.hit})
	steps := benchkit.OpenBoltSteps(b, dir, "floor.db")
	spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
	ctx := context.Background()
	tether := func(i int) time.Duration {
		id := "start-" + strconv.Itoa(i)
		ph.reset()
		t0 := time.Now()
		st, err := d.StartTask(ctx, id, spec)
		el := time.Since(t0)
		if err != nil || st.State != fsm.StateRunning {
			b.Fatalf("StartTask: %v (%s)", err, st.State)
		}
		ph.appends("task-created", "spawn-intent", "executor-up", "launch-intent", "launched", "running")
		ph.span("spawn", "before-effect:spawn-executor", "after-effect:spawn-executor")
		ph.span("launch", "before-effect:launch-task", "after-effect:launch-task")
		ph.span("attach", "before-effect:attach", "after-effect:attach")
		destroy(b, d, id)
		return el
	}
	floor := func(i int) time.Duration {
		hdir := filepath.Join(dir, "floor", strconv.Itoa(i))
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		steps.Append(b) // task-created
		steps.Append(b) // spawn-intent
		t1 := time.Now()
		h := benchkit.StartHelper(b, helperBin, hdir)
		writeIdentity(b, hdir, h.Cmd.Process.Pid)
		t2 := time.Now()
		steps.Append(b) // executor-up
		steps.Append(b) // launch-intent
		t3 := time.Now()
		task := exec.Command(taskBinary, taskArgs...)
		task.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := task.Start(); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		steps.Append(b) // launched
		steps.Append(b) // running
		el := time.Since(t0)
		ph.mu.Lock()
		ph.sums["floor-spawn"] = append(ph.sums["floor-spawn"], t2.Sub(t1).Seconds())
		ph.sums["floor-fork"] = append(ph.sums["floor-fork"], t4.Sub(t3).Seconds())
		ph.sums["floor-appends"] = append(ph.sums["floor-appends"], (el - t4.Sub(t3) - t2.Sub(t1)).Seconds())
		ph.mu.Unlock()
		_ = task.Process.Kill()
		_ = task.Wait()
		h.Stop()
		return el
	}
	floor(-1) // warm both paths (page cache, first bbolt growth)
	tether(-1)
	b.ResetTimer()
	p := interleave(b, tether, floor)
	p.report(b, "tether", "floor", true)
	ph.report(b)
}

// BenchmarkKill: from a failure after executor-up (a fault injected into
// the launch-task effect) to StartTask's return, which happens once the
// driver has recorded launch-failed, stopped and killed the executor by its
// proven identity, confirmed it dead and recorded executor-reaped; against
// SIGKILL -> wait of the minimal Go helper. Target: ratio <= 2.
func BenchmarkKill(b *testing.B) {
	executorBin, helperBin := benchBinaries(b)
	dir := filepath.Join(b.TempDir(), "state")
	var faultAt time.Time
	errFault := errors.New("bench: launch fails")
	ph := newPhases()
	d := benchDriver(b, dir, executorBin, Hooks{Crash: ph.hit, Fault: func(point, _ string) error {
		if point == "effect:launch-task" {
			faultAt = time.Now()
			ph.hit("fault", "")
			return errFault
		}
		return nil
	}})
	spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
	ctx := context.Background()
	tether := func(i int) time.Duration {
		ph.reset()
		st, err := d.StartTask(ctx, "kill-"+strconv.Itoa(i), spec)
		el := time.Since(faultAt)
		if !errors.Is(err, errFault) || st.State != fsm.StateFailed {
			b.Fatalf("StartTask = %s, %v; want failed with the injected fault", st.State, err)
		}
		ph.span("append-launch-failed", "before-append:launch-failed", "after-append:launch-failed")
		ph.span("kill-effect", "before-effect:kill-executor", "after-effect:kill-executor")
		ph.span("append-executor-reaped", "before-append:executor-reaped", "after-append:executor-reaped")
		return el
	}
	floor := func(i int) time.Duration {
		hdir := filepath.Join(dir, "floor", strconv.Itoa(i))
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			b.Fatal(err)
		}
		h := benchkit.StartHelper(b, helperBin, hdir)
		t0 := time.Now()
		_ = h.Cmd.Process.Kill()
		_ = h.Cmd.Wait()
		el := time.Since(t0)
		h.RPC.Close()
		return el
	}
	floor(-1)
	tether(-1)
	b.ResetTimer()
	p := interleave(b, tether, floor)
	p.report(b, "tether", "floor", true)
	ph.report(b)
}

// simWorld is a process world whose executors are simulated but whose
// identity checks are real: Reattach opens a pidfd on the recorded pid and
// compares the live process's start time (/proc/PID/stat) with the recorded
// one, as the real executor client does before it connects.
type simWorld struct{}

var _ executor.World = simWorld{}

var errSim = errors.New("bench: not simulated")

func (simWorld) Spawn(context.Context, string, string) (executor.Conn, error) { return nil, errSim }

func (simWorld) Reattach(_ context.Context, _ string, id fsm.Identity) (executor.Conn, error) {
	if err := checkIdentity(id.PID, id.StartTime); err != nil {
		return nil, err
	}
	return simExecutor{id}, nil
}

func (simWorld) FindByNonce(context.Context, string, string) (fsm.Identity, bool, error) {
	return fsm.Identity{}, false, nil
}
func (simWorld) Kill(context.Context, string, fsm.Identity) error               { return errSim }
func (simWorld) KillTask(context.Context, string, fsm.Identity, fsm.Proc) error { return errSim }
func (simWorld) Alive(context.Context, string, fsm.Identity) (bool, error)      { return true, nil }
func (simWorld) ExitStatus(context.Context, string, fsm.Identity, fsm.Proc) (fsm.ExitStatus, bool, error) {
	return fsm.ExitStatus{}, false, nil
}
func (simWorld) LaunchRecord(context.Context, string, fsm.Identity) (fsm.Proc, bool, error) {
	return fsm.Proc{}, false, nil
}
func (simWorld) Journal(context.Context, string, fsm.Identity) ([]fsm.Event, error) { return nil, nil }
func (simWorld) CheckSpec(fsm.Spec) error                                           { return nil }
func (simWorld) DiscardTask(string)                                                 {}

// checkIdentity is the floor's unit of work, and the simulated Reattach's:
// pidfd_open, read /proc/PID/stat, compare the start time.
func checkIdentity(pid int, start uint64) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	defer unix.Close(fd)
	got, err := proc.StartTime(pid)
	if err != nil {
		return err
	}
	if got != start {
		return ErrNotOurs
	}
	return nil
}

type simExecutor struct{ id fsm.Identity }

func (e simExecutor) Identity() fsm.Identity { return e.id }
func (simExecutor) Launch(context.Context, fsm.Spec) (executor.Status, error) {
	return executor.Status{}, errSim
}
func (simExecutor) Status(context.Context) (executor.Status, error) {
	return executor.Status{Launched: true, PID: 2, StartTime: 1}, nil
}
func (simExecutor) Watch(ctx context.Context, _ int) (executor.Status, []fsm.Event, error) {
	<-ctx.Done()
	return executor.Status{}, nil, context.Cause(ctx)
}
func (simExecutor) WaitReady(context.Context) (executor.Status, error) {
	return executor.Status{}, errSim
}
func (simExecutor) Signal(context.Context, syscall.Signal, bool) error { return errSim }
func (simExecutor) Stats(context.Context) (cgroup.Stats, error)        { return cgroup.Stats{}, errSim }
func (simExecutor) Exec(context.Context, executor.ExecSpec) (*executor.ExecProcess, error) {
	return nil, errSim
}
func (simExecutor) Stop(context.Context, syscall.Signal, time.Duration) (executor.Status, error) {
	return executor.Status{}, errSim
}
func (simExecutor) Shutdown(context.Context) error { return errSim }
func (simExecutor) Dismiss(context.Context) error  { return errSim }
func (simExecutor) Close() error                   { return nil }

// recoverTasks is the number of live tasks BenchmarkRecover replays.
const recoverTasks = 10_000

// BenchmarkRecover: a new driver's Recover of 10,000 running tasks (real
// store; simulated executors whose identity check is real, against one
// live process), time per task, against the floor of opening a pidfd and
// reading /proc/PID/stat for one process. Target: ratio <= 3.
func BenchmarkRecover(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "state")
	live := exec.Command(taskBinary, taskArgs...)
	if err := live.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	pid := live.Process.Pid
	start, err := proc.StartTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	boot, err := proc.BootID()
	if err != nil {
		b.Fatal(err)
	}
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < recoverTasks; i += 8 {
				nonce := fmt.Sprintf("nonce%08d", i)
				id := fmt.Sprintf("task-%05d", i)
				evs := []fsm.Event{
					{Type: fsm.EventCreated, Time: 1, Spec: &fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}},
					{Type: fsm.EventSpawnIntent, Time: 2, Nonce: nonce},
					{Type: fsm.EventExecutorUp, Time: 3, Executor: &fsm.Identity{PID: pid, StartTime: start, BootID: boot, Nonce: nonce, Socket: filepath.Join(dir, "tasks", id, "executor.sock")}},
					{Type: fsm.EventLaunchIntent, Time: 4},
					{Type: fsm.EventLaunched, Time: 5, TaskPID: pid, TaskStartTime: start},
					{Type: fsm.EventRunning, Time: 6},
				}
				if _, err := s.Append(ctx, id, 0, evs...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	tether := func(int) time.Duration {
		d, err := Open(Config{StateDir: dir, Store: s, World: simWorld{}})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		rep, err := d.Recover(ctx)
		el := time.Since(t0)
		if err != nil || len(rep.Tasks) != recoverTasks {
			b.Fatalf("Recover: %d tasks, %v", len(rep.Tasks), err)
		}
		if r := rep.Tasks[0]; r.To != fsm.StateRunning {
			b.Fatalf("Recover left %s in %s: %s", r.ID, r.To, r.Action)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		return el / recoverTasks
	}
	floor := func(int) time.Duration {
		t0 := time.Now()
		for range recoverTasks {
			if err := checkIdentity(pid, start); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0) / recoverTasks
	}
	b.ResetTimer()
	p := interleave(b, tether, floor)
	b.ReportMetric(quantile(p.a, 0.5)*1e6, "tether-us/task")
	b.ReportMetric(quantile(p.b, 0.5)*1e6, "floor-us/task")
	b.ReportMetric(p.ratio(), "ratio")
}

func (simWorld) LockTask(string) (func(), int, error) { return func() {}, 0, nil }
func (simWorld) WaitLockTask(context.Context, string) (func(), error) {
	return func() {}, nil
}
