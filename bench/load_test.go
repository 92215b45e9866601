package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/internal/benchkit"
)

var (
	cliTasks  = flag.Int("cli.tasks", 200, "how many `tether start` (and runc run -d) BenchmarkCLIParallel runs at once")
	liveTasks = flag.Int("cli.live", 1000, "how many live tasks BenchmarkCLILiveTasks keeps in its big store")
	cliDir    = flag.String("cli.dir", "", "where the CLI benchmarks make their state directories (default: a temporary directory)")
)

// cliBase is a fresh directory for a CLI benchmark's state directories,
// removed at the end.
func cliBase(b *testing.B) string {
	if *cliDir == "" {
		return b.TempDir()
	}
	d, err := os.MkdirTemp(*cliDir, "tether-bench-cli-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// cliResult is one tether (or runc) command's outcome.
type cliResult struct {
	out, errOut string
	code        int
	secs        float64
	cpu         float64 // the process's user + system CPU, seconds
}

func (r cliResult) failed() bool { return r.code != 0 }

// runCmd runs cmd, with its output captured unless cmd already sends it
// somewhere, and times it from fork to exit.
func runCmd(cmd *exec.Cmd) cliResult {
	var out, errOut bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout, cmd.Stderr = &out, &errOut
	}
	t0 := time.Now()
	err := cmd.Run()
	r := cliResult{out: out.String(), errOut: errOut.String(), secs: since(t0)}
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	var xe *exec.ExitError
	switch {
	case errors.As(err, &xe):
		r.code = xe.ExitCode()
	case err != nil:
		r.code, r.errOut = -1, err.Error()
	}
	return r
}

// tetherCmd is the tether CLI on stateDir.
func tetherCmd(tether, stateDir string, args ...string) *exec.Cmd {
	cmd := exec.Command(tether, append([]string{"--state-dir", stateDir}, args...)...)
	cmd.Dir = root
	return cmd
}

// fanOut runs f(0..n-1), width at a time (n when width <= 0), and returns
// the wall time of the whole batch.
func fanOut(n, width int, f func(i int)) float64 {
	if width <= 0 || width > n {
		width = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range width {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
	return since(t0)
}

// batch is what a batch of commands did.
type batch struct {
	ids      []string // the ids `tether start` printed, in order of i
	failures int
	firstErr string
	secs     float64
	lat      []float64
	cpu      float64 // the commands' CPU, seconds, summed
	lockBusy float64 // share of the batch's time the store's lock was held
	waiters  float64 // mean number of commands waiting for it
	hostBusy float64 // share of the host's CPU time busy during the batch (everyone's)
}

// hostCPU reads the host's busy and total CPU time from /proc/stat, in
// clock ticks.
func hostCPU() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

func (bt *batch) rate() float64 { return float64(len(bt.lat)-bt.failures) / bt.secs }

// runBatch runs n commands made by mk, width at a time (all at once when
// width is 0, one by one when 1).
func runBatch(n, width int, mk func(i int) *exec.Cmd) *batch {
	bt := &batch{ids: make([]string, n), lat: make([]float64, n)}
	var mu sync.Mutex
	bt.secs = fanOut(n, width, func(i int) {
		r := runCmd(mk(i))
		mu.Lock()
		defer mu.Unlock()
		bt.lat[i] = r.secs
		bt.cpu += r.cpu
		if r.failed() {
			bt.failures++
			if bt.firstErr == "" {
				bt.firstErr = fmt.Sprintf("exit %d: %s", r.code, firstLineOf(r.errOut))
			}
			return
		}
		bt.ids[i] = strings.TrimSpace(r.out)
	})
	return bt
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// lockSampler samples /proc/locks (which reading does not disturb) every
// period for the store's lock file (tether.db.lock in stateDir): how often
// some command held it, and how many waited for it.
type lockSampler struct {
	stop    chan struct{}
	done    chan struct{}
	held    int // samples in which the lock was held
	total   int // samples taken once the lock file existed
	waiters int // waiters summed over the samples
}

func sampleLock(stateDir string, period time.Duration) *lockSampler {
	ls := &lockSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		ino := ""
		for {
			select {
			case <-ls.stop:
				return
			case <-tick.C:
			}
			if ino == "" {
				var st syscall.Stat_t
				if syscall.Stat(filepath.Join(stateDir, "tether.db.lock"), &st) != nil {
					continue
				}
				ino = ":" + strconv.FormatUint(st.Ino, 10) + " "
			}
			data, err := os.ReadFile("/proc/locks")
			if err != nil {
				continue
			}
			ls.total++
			held := false
			for l := range strings.SplitSeq(string(data), "\n") {
				if !strings.Contains(l, ino) {
					continue
				}
				if strings.Contains(l, "->") {
					ls.waiters++
				} else {
					held = true
				}
			}
			if held {
				ls.held++
			}
		}
	}()
	return ls
}

// end stops sampling and returns the share of samples with the lock held
// and the mean number of waiters.
func (ls *lockSampler) end() (busy, waiters float64) {
	close(ls.stop)
	<-ls.done
	if ls.total == 0 {
		return 0, 0
	}
	return float64(ls.held) / float64(ls.total), float64(ls.waiters) / float64(ls.total)
}

// liveIDs are the ids of the tasks that `tether status` lists as live.
func liveIDs(b *testing.B, tether, stateDir string) []string {
	r := runCmd(tetherCmd(tether, stateDir, "status", "--json"))
	if r.failed() {
		b.Fatalf("tether status --json: exit %d: %s", r.code, r.errOut)
	}
	var rows []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(r.out), &rows); err != nil {
		b.Fatalf("tether status --json: %v: %s", err, r.out)
	}
	var ids []string
	for _, row := range rows {
		// A desired entry with no task (a config dir's file whose task
		// was stopped) is a row with no id: nothing is live of it.
		if row.ID != "" {
			ids = append(ids, row.ID)
		}
	}
	return ids
}

// leftovers scans /proc once for anything of stateDir's tasks still alive:
// a process whose command line names the state directory (an executor),
// or one in a task cgroup of one of ids (a task, or anything it started).
func leftovers(stateDir string, ids []string) []string {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	ents, _ := os.ReadDir("/proc")
	var left []string
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' || pid == self {
			continue
		}
		if cl, err := os.ReadFile("/proc/" + pid + "/cmdline"); err == nil && bytes.Contains(cl, []byte(stateDir+"/")) {
			left = append(left, pid+" "+strings.ReplaceAll(string(cl), "\x00", " "))
			continue
		}
		f, err := os.Open("/proc/" + pid + "/cgroup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			leaf := filepath.Base(sc.Text())
			if task, _, err := cgroup.ParseLeaf(leaf); err == nil && want[task] {
				left = append(left, pid+" in cgroup "+leaf)
				break
			}
		}
		f.Close()
	}
	return left
}

// taskCPU sums the CPU (user + system, seconds) used so far by the
// executors and the tasks of stateDir's live tasks, from /proc/PID/stat
// (which keeps the time of threads that exited, and of the init shim the
// task's process was before its exec). The task is idle, so this is what
// its start cost.
func taskCPU(b *testing.B, tether, stateDir string) float64 {
	r := runCmd(tetherCmd(tether, stateDir, "status", "--json"))
	if r.failed() {
		b.Fatalf("tether status --json: %s", r.errOut)
	}
	var rows []struct {
		PID      int `json:"pid"`
		Executor int `json:"executor_pid"`
	}
	if err := json.Unmarshal([]byte(r.out), &rows); err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, row := range rows {
		total += procCPU(row.PID) + procCPU(row.Executor)
	}
	return total
}

// procCPU is pid's utime + stime in seconds (0 when it is gone).
func procCPU(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	ut, _ := strconv.ParseFloat(f[11], 64)                   // field 14
	st, _ := strconv.ParseFloat(f[12], 64)                   // field 15
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// mustBeClean checks, after every task of stateDir was stopped, that
// `tether check` passes, no task is live, and nothing of ids is alive.
func mustBeClean(b *testing.B, tether, stateDir string, ids []string) {
	if r := runCmd(tetherCmd(tether, stateDir, "check")); r.failed() {
		b.Errorf("tether check: exit %d:\n%s%s", r.code, r.out, r.errOut)
	}
	if live := liveIDs(b, tether, stateDir); len(live) > 0 {
		b.Errorf("%d tasks still live after the stops, e.g. %s", len(live), live[0])
	}
	if left := leftovers(stateDir, ids); len(left) > 0 {
		b.Errorf("%d processes left after the stops, e.g. %s", len(left), left[0])
	}
}

// stopAll stops every live task of stateDir, width at a time, and fails
// the benchmark if any stop fails or anything is left.
func stopAll(b *testing.B, tether, stateDir string, width int) {
	ids := liveIDs(b, tether, stateDir)
	bt := runBatch(len(ids), width, func(i int) *exec.Cmd { return tetherCmd(tether, stateDir, "stop", ids[i]) })
	if bt.failures > 0 {
		b.Errorf("cleanup: %d of %d stops failed: %s", bt.failures, len(ids), bt.firstErr)
	}
	mustBeClean(b, tether, stateDir, ids)
}

// runcPlain writes a plain OCI bundle for the static sleeper (runc spec's
// defaults: PID, mount, IPC, UTS and network namespaces, a read-only root
// holding only the binary, runc's own cgroup, no limits) and returns its
// directory.
func runcPlain(b *testing.B, runc, dir, sleeper string, args ...string) string {
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(dir, "rootfs", "sleeper")
	if err := os.Link(sleeper, dst); err != nil && !errors.Is(err, os.ErrExist) {
		data, rerr := os.ReadFile(sleeper)
		if rerr != nil {
			b.Fatal(rerr)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v: %s", err, out)
	}
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		b.Fatal(err)
	}
	proc := cfg["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = append([]string{"/sleeper"}, args...)
	if raw, err = json.Marshal(cfg); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// runcCmd is runc with its state in stateRoot; the container's stdio (and
// runc's) go to a file, so that -d returns without waiting for it.
func runcCmd(b *testing.B, runc, stateRoot, logFile string, args ...string) *exec.Cmd {
	f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(runc, append([]string{"--root", stateRoot}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	b.Cleanup(func() { f.Close() })
	return cmd
}

// BenchmarkCLIParallel: many CLIs at once on one store. Each round, in a
// rotating order and each on a fresh state directory:
//
//   - parallel: cli.tasks `tether start --min-uptime 0 -- SLEEPER` at once;
//   - sequential: cli.tasks of the same, one after another;
//   - runc: cli.tasks `runc run -d` of a plain bundle of the same static
//     binary at once (skipped, saying why, where runc cannot be had);
//
// then the parallel batch's tasks are stopped, cli.tasks `tether stop ID`
// at once, and the store must check clean with nothing left alive (the
// sequential batch is stopped the same way, untimed; runc's containers
// are deleted). Reported: starts/s and failures of each, stops/s and
// failures, and the parallel speedup over sequential. Targets: 0 failures;
// parallel >= 2x sequential.
func BenchmarkCLIParallel(b *testing.B) {
	if sizingRun(b) {
		return
	}
	n := *cliTasks
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	runc, why := "", "needs root"
	if os.Geteuid() == 0 {
		runc, why = findRunc(b)
	}
	base := cliBase(b)
	round := 0
	var par, seq, rc, stops []*batch
	dirOf := func(kind string) string {
		d := filepath.Join(base, fmt.Sprintf("%s-%d", kind, round))
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
		return d
	}
	start := func(width int) func() *batch {
		return func() *batch {
			dir := dirOf(fmt.Sprintf("w%d", width))
			ls := sampleLock(dir, time.Millisecond)
			b0, t0 := hostCPU()
			bt := runBatch(n, width, func(int) *exec.Cmd { return tetherCmd(tether, dir, "start", "--min-uptime", "0", "--", sleeper) })
			b1, t1 := hostCPU()
			bt.lockBusy, bt.waiters = ls.end()
			bt.hostBusy = (b1 - b0) / (t1 - t0)
			bt.cpu += taskCPU(b, tether, dir)
			return bt
		}
	}
	var bundle string
	if runc != "" {
		bundle = runcPlain(b, runc, filepath.Join(base, "bundle"), sleeper)
	}
	runcBatch := func() *batch {
		dir := dirOf("runc")
		logf := filepath.Join(dir, "runc.log")
		bt := runBatch(n, 0, func(i int) *exec.Cmd {
			return runcCmd(b, runc, dir, logf, "run", "-d", "--bundle", bundle, fmt.Sprintf("c%d-%d", round, i))
		})
		del := runBatch(n, 0, func(i int) *exec.Cmd {
			return runcCmd(b, runc, dir, logf, "delete", "-f", fmt.Sprintf("c%d-%d", round, i))
		})
		if bt.failures > 0 {
			msg, _ := os.ReadFile(logf)
			bt.firstErr += ": " + lastLine(msg)
		}
		if del.failures > 0 && bt.failures == 0 {
			b.Errorf("runc delete failed %d times", del.failures)
		}
		return bt
	}
	sides := []func(){
		func() { par = append(par, start(0)()) },
		func() { seq = append(seq, start(1)()) },
	}
	if runc != "" {
		sides = append(sides, func() { rc = append(rc, runcBatch()) })
	}
	b.ResetTimer()
	for round = 0; round < b.N; round++ {
		for j := range sides {
			sides[(round+j)%len(sides)]()
		}
		// The parallel batch's stops, timed; the sequential one's, not.
		pdir := filepath.Join(base, fmt.Sprintf("w0-%d", round))
		ids := liveIDs(b, tether, pdir)
		st := runBatch(len(ids), 0, func(i int) *exec.Cmd { return tetherCmd(tether, pdir, "stop", ids[i]) })
		stops = append(stops, st)
		mustBeClean(b, tether, pdir, ids)
		stopAll(b, tether, filepath.Join(base, fmt.Sprintf("w1-%d", round)), 0)
	}
	b.StopTimer()
	med := func(bs []*batch, f func(*batch) float64) float64 {
		xs := make([]float64, len(bs))
		for i, bt := range bs {
			xs[i] = f(bt)
		}
		return quantile(xs, 0.5)
	}
	sum := func(bs []*batch) (n int, first string) {
		for _, bt := range bs {
			n += bt.failures
			if first == "" {
				first = bt.firstErr
			}
		}
		return n, first
	}
	rate := func(bt *batch) float64 { return bt.rate() }
	p50 := func(bt *batch) float64 { return quantile(bt.lat, 0.5) * 1e3 }
	b.ReportMetric(float64(n), "tasks")
	b.ReportMetric(med(par, rate), "parallel-starts/s")
	b.ReportMetric(med(seq, rate), "sequential-starts/s")
	b.ReportMetric(med(stops, rate), "parallel-stops/s")
	b.ReportMetric(med(par, p50), "parallel-start-p50-ms")
	b.ReportMetric(med(seq, p50), "sequential-start-p50-ms")
	speed := make([]float64, len(par))
	for i := range par {
		speed[i] = par[i].rate() / seq[i].rate()
	}
	b.ReportMetric(quantile(speed, 0.5), "speedup")
	cpu := func(bt *batch) float64 { return bt.cpu / float64(len(bt.lat)) * 1e3 }
	b.ReportMetric(med(par, cpu), "parallel-cpu-ms/start")
	b.ReportMetric(med(seq, cpu), "sequential-cpu-ms/start")
	// On this many CPUs, no batch can start tasks faster than this.
	b.ReportMetric(float64(runtime.NumCPU())/(med(par, cpu)/1e3), "cpu-bound-starts/s")
	// The store's lock: the share of the batch it was held, what that is
	// per start, and the rate it allows (one holder at a time).
	held := func(bt *batch) float64 { return bt.lockBusy * bt.secs / float64(len(bt.lat)) * 1e3 }
	b.ReportMetric(med(par, func(bt *batch) float64 { return bt.lockBusy }), "parallel-lock-busy")
	b.ReportMetric(med(par, func(bt *batch) float64 { return bt.waiters }), "parallel-lock-waiters")
	b.ReportMetric(med(par, held), "parallel-lock-ms/start")
	b.ReportMetric(med(seq, held), "sequential-lock-ms/start")
	b.ReportMetric(1e3/med(seq, held), "lock-bound-starts/s")
	b.ReportMetric(med(par, func(bt *batch) float64 { return bt.hostBusy }), "parallel-host-cpu-busy")
	b.ReportMetric(med(seq, func(bt *batch) float64 { return bt.hostBusy }), "sequential-host-cpu-busy")
	// What the sequential batch kept busy: CPUs' worth of work.
	b.ReportMetric(med(seq, rate)*med(seq, cpu)/1e3, "sequential-cpus")
	pf, pe := sum(par)
	sf, se := sum(seq)
	xf, xe := sum(stops)
	b.ReportMetric(float64(pf), "parallel-failures")
	b.ReportMetric(float64(sf), "sequential-failures")
	b.ReportMetric(float64(xf), "stop-failures")
	for _, e := range []string{pe, se, xe} {
		if e != "" {
			b.Logf("first failure: %s", e)
		}
	}
	if runc != "" {
		rf, re := sum(rc)
		b.ReportMetric(med(rc, rate), "runc-starts/s")
		b.ReportMetric(float64(rf), "runc-failures")
		r := make([]float64, len(par))
		for i := range par {
			r[i] = par[i].rate() / rc[i].rate()
		}
		b.ReportMetric(quantile(r, 0.5), "ratio-runc")
		if re != "" {
			b.Logf("first runc failure: %s", re)
		}
	} else {
		b.Logf("runc unavailable, so its side is skipped: %s", why)
	}
}

// BenchmarkCLILiveTasks: a command's cost with 1 live task in its store
// against cli.live live tasks (cheap sleeps, each with its executor), in
// the same round, the order alternating: `tether status ID` of one live
// task, `tether start --min-uptime 0 -- SLEEPER`, and `tether stop ID` of the task that
// start started. Target: each ratio (many / one) <= 1.2. The memory the
// live tasks hold (their executors' RSS and PSS) is reported, and all of
// it is stopped and checked clean at the end.
func BenchmarkCLILiveTasks(b *testing.B) {
	if sizingRun(b) {
		return
	}
	many := *liveTasks
	tether, sleeper := bin(b, "tether"), bin(b, "sleeper")
	base := cliBase(b)
	one, big := filepath.Join(base, "one"), filepath.Join(base, "many")
	for _, d := range []string{one, big} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	startIn := func(dir string) string {
		r := runCmd(tetherCmd(tether, dir, "start", "--min-uptime", "0", "--", sleeper))
		if r.failed() {
			b.Fatalf("tether start: exit %d: %s", r.code, r.errOut)
		}
		return strings.TrimSpace(r.out)
	}
	memBefore := memAvailable(b)
	t0 := time.Now()
	bt := runBatch(many, 8, func(int) *exec.Cmd { return tetherCmd(tether, big, "start", "--min-uptime", "0", "--", sleeper) })
	setup := since(t0)
	defer stopAll(b, tether, big, 16)
	if bt.failures > 0 {
		b.Fatalf("%d of %d starts of the big store failed: %s", bt.failures, many, bt.firstErr)
	}
	startIn(one)
	defer stopAll(b, tether, one, 0)
	bigStatus := bt.ids[many/2]
	oneStatus := liveIDs(b, tether, one)[0]
	rss, pss := executorMemory(b, tether, big)
	b.Logf("%d live tasks started in %.1fs; their executors hold %.0f MB RSS, %.0f MB PSS; MemAvailable fell %.0f MB",
		many, setup, rss/1024, pss/1024, (memBefore-memAvailable(b))/1024)

	status := func(dir, id string) func(int) float64 {
		return func(int) float64 {
			r := runCmd(tetherCmd(tether, dir, "status", id))
			if r.failed() || !strings.Contains(r.out, id) {
				b.Fatalf("tether status %s: exit %d: %s%s", id, r.code, r.out, r.errOut)
			}
			return r.secs
		}
	}
	started := map[string][]string{}
	start := func(dir string) func(int) float64 {
		return func(int) float64 {
			r := runCmd(tetherCmd(tether, dir, "start", "--min-uptime", "0", "--", sleeper))
			if r.failed() {
				b.Fatalf("tether start: exit %d: %s", r.code, r.errOut)
			}
			started[dir] = append(started[dir], strings.TrimSpace(r.out))
			return r.secs
		}
	}
	stop := func(dir string) func(int) float64 {
		return func(i int) float64 {
			id := started[dir][i]
			r := runCmd(tetherCmd(tether, dir, "stop", id))
			if r.failed() {
				b.Fatalf("tether stop %s: exit %d: %s", id, r.code, r.errOut)
			}
			return r.secs
		}
	}
	b.ResetTimer()
	ps := interleave(b, status(big, bigStatus), status(one, oneStatus))
	pst := interleave(b, start(big), start(one))
	psp := interleave(b, stop(big), stop(one))
	b.StopTimer()
	b.ReportMetric(float64(many), "live")
	ps.reportMs(b, "status-many", "status-one", false)
	b.ReportMetric(ps.ratio(), "ratio-status")
	pst.reportMs(b, "start-many", "start-one", false)
	b.ReportMetric(pst.ratio(), "ratio-start")
	psp.reportMs(b, "stop-many", "stop-one", false)
	b.ReportMetric(psp.ratio(), "ratio-stop")
	b.ReportMetric(rss/1024, "executors-rss-MB")
	b.ReportMetric(pss/1024, "executors-pss-MB")
	b.ReportMetric(setup, "setup-s")
}

// executorMemory sums VmRSS and Pss (kB) of the executors of stateDir's
// live tasks.
func executorMemory(b *testing.B, tether, stateDir string) (rss, pss float64) {
	r := runCmd(tetherCmd(tether, stateDir, "status", "--json"))
	if r.failed() {
		b.Fatalf("tether status --json: %s", r.errOut)
	}
	var rows []struct {
		PID int `json:"executor_pid"`
	}
	if err := json.Unmarshal([]byte(r.out), &rows); err != nil {
		b.Fatal(err)
	}
	for _, row := range rows {
		r, p := benchkit.MemOf(b, row.PID)
		rss, pss = rss+r, pss+p
	}
	return rss, pss
}

// memAvailable is MemAvailable from /proc/meminfo, in kB.
func memAvailable(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for l := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return n
		}
	}
	b.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
