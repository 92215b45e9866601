package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/tether-fsm/tether/bench/internal/gpexec"
	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/benchkit"
)

// The task every start benchmark starts: a real program that stays up.
const taskBinary = "/bin/sleep"

var taskArgs = []string{"3600"}

// contained reports whether this host gives tasks cgroups (root, a usable
// layout), and the probed host.
func contained() (cgroup.Host, bool) {
	if os.Geteuid() != 0 {
		return cgroup.Host{}, false
	}
	h, err := cgroup.Probe()
	if err != nil || h.Usable() != nil {
		return cgroup.Host{}, false
	}
	return h, true
}

// gpStart is the start path built on go-plugin, as Nomad's drivers do it:
// six durable appends (bare bbolt Updates: task-created, spawn-intent,
// executor-up, launch-intent, launched, running), the plugin process
// started by go-plugin (handshake on stdout, gRPC over a unix socket), the
// helper's durable identity file, one Launch RPC that fork/execs the task
// (and, with a cgroup, creates it and moves the task in). It returns the
// plugin client and the task's pid, and adds its phases to ph.
func gpStart(b *testing.B, steps *benchkit.BoltSteps, helper string, args []string, ph *probes, prefix string) (*plugin.Client, int) {
	steps.Append(b) // task-created
	steps.Append(b) // spawn-intent
	t0 := time.Now()
	cmd := exec.Command(helper, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  gpexec.Handshake,
		Plugins:          gpexec.Plugins(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	rc, err := c.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := rc.Dispense(gpexec.Name)
	if err != nil {
		b.Fatal(err)
	}
	ph.add(prefix+"spawn", since(t0))
	steps.Append(b) // executor-up
	steps.Append(b) // launch-intent
	t1 := time.Now()
	pid, err := raw.(gpexec.Executor).Launch(context.Background(), taskBinary, taskArgs)
	if err != nil {
		b.Fatal(err)
	}
	ph.add(prefix+"launch", since(t1))
	steps.Append(b) // launched
	steps.Append(b) // running
	return c, pid
}

// BenchmarkStart: a task start, four ways, interleaved (the order rotates
// round by round):
//
//   - tether: the driver's StartTask -> running (real store, the standalone
//     tether-executor, the task in a cgroup of its own where the host has
//     them, which it does here).
//   - floor: the irreducible work of such a start: 3 bare bbolt Updates
//     (the fewest durable commits the write-ahead rule allows a start: the
//     spawn intent before the spawn; executor-up with the launch intent
//     before the launch; launched and running after it); the minimal Go helper spawned the way the executor is
//     (Setsid, ready pipe) answering one net/rpc call on its unix socket;
//     its identity file (fsync of file and directory); and the task
//     fork/exec'd and moved into a new cgroup (benchkit.StartContained: one
//     cgroup migration, which on a v1 or hybrid host waits for an RCU grace
//     period). Without cgroups, the plain fork/exec.
//   - goplugin: the same start built on go-plugin (gpStart), the task
//     uncontained, as the plugin alone gives it.
//   - goplugin-cgroup: the same, with the plugin's Launch creating the
//     task's cgroup and moving the task in, as Nomad's executor does.
//   - floor-overlapped: the floor with the cgroup made, and the migration's
//     grace period started, at the start's beginning (in a goroutine), so
//     that it overlaps the spawn and the commits: the best the kernel allows.
//
// Targets: tether <= 1.5x the floor; tether vs go-plugin, see the report.
func BenchmarkStart(b *testing.B) {
	host, cg := contained()
	exe, gph, helper := bin(b, "tether-executor"), bin(b, "gphelper"), bin(b, "minhelper")
	dir := filepath.Join(b.TempDir(), "state")
	ph := newProbes()
	d, err := driver.Open(driver.Config{StateDir: dir, ExecutorCommand: []string{exe}, KillTimeout: time.Second, Hooks: driver.Hooks{Crash: ph.hit}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	steps := benchkit.OpenBoltSteps(b, dir, "peer.db")
	floorSteps := benchkit.OpenBoltSteps(b, dir, "floor.db")
	spec := fsm.Spec{Driver: "raw_exec", Command: taskBinary, Args: taskArgs}
	ctx := context.Background()
	tether := func(i int) float64 {
		id := "start-" + strconv.Itoa(i+2)
		ph.reset()
		t0 := time.Now()
		st, err := d.StartTask(ctx, id, spec)
		el := since(t0)
		if err != nil || st.State != fsm.StateRunning {
			b.Fatalf("StartTask: %v (%s)", err, st.State)
		}
		if got := st.Executor != nil && st.Executor.Cgroup != ""; got != cg {
			b.Fatalf("task in a cgroup: %v, but the host gives tasks cgroups: %v", got, cg)
		}
		spawn := ph.span("spawn", "before-effect:spawn-executor", "after-effect:spawn-executor")
		launch := ph.span("launch", "before-effect:launch-task", "after-effect:launch-task")
		attach := ph.span("attach", "before-effect:attach", "after-effect:attach")
		ph.add("rest", el-spawn-launch-attach)
		if err := d.DestroyTask(ctx, id, true); err != nil {
			b.Fatal(err)
		}
		return el
	}
	floor := func(i int) float64 {
		hdir := filepath.Join(dir, "floor", strconv.Itoa(i+2))
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		floorSteps.Append(b) // task-created + spawn-intent
		t1 := time.Now()
		h := benchkit.StartHelper(b, helper, hdir)
		id, _ := json.Marshal(map[string]int{"pid": h.Cmd.Process.Pid})
		benchkit.WriteIdentity(b, hdir, id)
		t2 := time.Now()
		floorSteps.Append(b) // executor-up + launch-intent
		t3 := time.Now()
		var task *benchkit.Contained
		var plain *exec.Cmd
		if cg {
			task = benchkit.StartContained(b, host, "floor-"+strconv.Itoa(i+2), fmt.Sprintf("floor%08d", i+2), append([]string{taskBinary}, taskArgs...)...)
		} else {
			plain = exec.Command(taskBinary, taskArgs...)
			plain.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := plain.Start(); err != nil {
				b.Fatal(err)
			}
		}
		t4 := time.Now()
		floorSteps.Append(b) // launched + running
		el := since(t0)
		ph.add("floor-spawn", t2.Sub(t1).Seconds())
		ph.add("floor-launch", t4.Sub(t3).Seconds())
		ph.add("floor-appends", el-t4.Sub(t3).Seconds()-t2.Sub(t1).Seconds())
		if task != nil {
			task.Kill(b)
		} else {
			_ = plain.Process.Kill()
			_ = plain.Wait()
		}
		h.Stop()
		return el
	}
	// The same floor with the migration's grace period overlapped: at the
	// start's beginning a goroutine creates the task's cgroup and primes
	// the migration lock (benchkit.PrimeMigration), so the move after the
	// fork finds the grace period passed or under way. What the kernel
	// allows a contained start at best.
	overlapped := func(i int) float64 {
		hdir := filepath.Join(dir, "floor-overlapped", strconv.Itoa(i+2))
		if err := os.MkdirAll(hdir, 0o700); err != nil {
			b.Fatal(err)
		}
		type made struct {
			cg  *cgroup.Cgroup
			err error
		}
		created := make(chan made, 1)
		t0 := time.Now()
		go func() {
			c, err := benchkit.CreateCgroup(host, "floorx-"+strconv.Itoa(i+2), fmt.Sprintf("floorx%08d", i+2))
			created <- made{c, err}
			if err == nil {
				_ = benchkit.PrimeMigration(host)
			}
		}()
		floorSteps.Append(b) // task-created + spawn-intent
		h := benchkit.StartHelper(b, helper, hdir)
		id, _ := json.Marshal(map[string]int{"pid": h.Cmd.Process.Pid})
		benchkit.WriteIdentity(b, hdir, id)
		floorSteps.Append(b) // executor-up + launch-intent
		m := <-created
		if m.err != nil {
			b.Fatal(m.err)
		}
		t3 := time.Now()
		task := benchkit.StartIn(b, m.cg, append([]string{taskBinary}, taskArgs...)...)
		ph.add("floor-overlapped-launch", since(t3))
		floorSteps.Append(b) // launched + running
		el := since(t0)
		task.Kill(b)
		h.Stop()
		return el
	}
	goplugin := func(withCgroup bool) func(int) float64 {
		prefix := "goplugin-"
		if withCgroup {
			prefix = "goplugin-cgroup-"
		}
		return func(i int) float64 {
			hdir := filepath.Join(dir, "peer", fmt.Sprintf("%d-%v", i+2, withCgroup))
			if err := os.MkdirAll(hdir, 0o700); err != nil {
				b.Fatal(err)
			}
			args := []string{hdir}
			task, nonce := "gp-"+strconv.Itoa(i+2), fmt.Sprintf("goplugin%08d", i+2)
			if withCgroup {
				args = append(args, task, nonce)
			}
			t0 := time.Now()
			c, pid := gpStart(b, steps, gph, args, ph, prefix)
			el := since(t0)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			c.Kill()
			if withCgroup {
				loc, err := cgroup.LocationFor(host, task, nonce)
				if err != nil {
					b.Fatal(err)
				}
				killCgroup(b, host, loc)
			}
			return el
		}
	}
	sides := []func(int) float64{tether, floor, goplugin(false)}
	if cg {
		sides = append(sides, goplugin(true), overlapped)
	}
	for _, s := range sides {
		s(-1) // warm every path (page cache, the first bbolt growth)
	}
	ph.clear()
	b.ResetTimer()
	xs := rotateSettled(b, sides...)
	b.StopTimer()
	names := []string{"tether", "floor", "goplugin", "goplugin-cgroup", "floor-overlapped"}
	for k := range xs {
		b.ReportMetric(quantile(xs[k], 0.5)*1e3, names[k]+"-p50-ms")
		b.ReportMetric(quantile(xs[k], 0.99)*1e3, names[k]+"-p99-ms")
	}
	b.ReportMetric(medianRatio(xs[0], xs[1]), "ratio-floor")
	b.ReportMetric(quantile(xs[0], 0.99)/quantile(xs[1], 0.99), "p99-ratio-floor")
	b.ReportMetric(medianRatio(xs[0], xs[2]), "ratio-goplugin")
	b.ReportMetric(medianRatio(xs[1], xs[2]), "floor-ratio-goplugin")
	if cg {
		b.ReportMetric(medianRatio(xs[0], xs[3]), "ratio-goplugin-cgroup")
		b.ReportMetric(medianRatio(xs[1], xs[3]), "floor-ratio-goplugin-cgroup")
		b.ReportMetric(quantile(xs[0], 0.99)/quantile(xs[3], 0.99), "p99-ratio-goplugin-cgroup")
		b.ReportMetric(medianRatio(xs[4], xs[3]), "overlapped-ratio-goplugin-cgroup")
		b.ReportMetric(medianRatio(xs[0], xs[4]), "ratio-floor-overlapped")
		b.ReportMetric(1, "contained")
	}
	ph.report(b)
}

// killCgroup kills and removes the cgroup at loc on h.
func killCgroup(b *testing.B, h cgroup.Host, loc cgroup.Location) {
	c, err := cgroup.Open(h, loc)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Kill(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.Remove(); err != nil {
		b.Fatal(err)
	}
}
