// Command report runs tether's benchmark rows, each in one `go test -bench`
// process (the pairs inside a row are interleaved and reduced to the median
// of paired ratios by the benchmark itself), and renders one markdown
// table: figure | tether | comparison | ratio | target | met?
//
//	go run ./cmd/report -root .. -out ../BENCHMARKS.md   # make bench
//	go run ./cmd/report -root .. -quick                  # make bench-quick
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// metrics are one benchmark's reported values by unit.
type metrics map[string]float64

// job is one `go test` process.
type job struct {
	dir    string // relative to the root module
	bench  string // -bench regexp
	rounds [2]int // -benchtime Nx: full, quick
}

func main() {
	rootFlag := flag.String("root", "..", "tether's module root")
	out := flag.String("out", "", "write the report (markdown) to this file")
	quick := flag.Bool("quick", false, "fewer rounds (under a minute)")
	flag.Parse()
	root, err := filepath.Abs(*rootFlag)
	if err != nil {
		fatal(err)
	}
	mode := 0
	if *quick {
		mode = 1
	}
	began := time.Now()

	jobs := map[string]job{
		"start":   {"driver", "^BenchmarkStartTask$", [2]int{200, 30}},
		"goplug":  {"bench", "^BenchmarkStartVsGoPlugin$", [2]int{100, 10}},
		"memory":  {"bench", "^BenchmarkIdleMemory$", [2]int{8, 1}},
		"single":  {"bench", "^BenchmarkAppendSingleWriter$", [2]int{40, 6}},
		"many":    {"bench", "^BenchmarkAppend256Writers$", [2]int{10, 2}},
		"replay":  {"bench", "^BenchmarkReplay1M$", [2]int{20, 4}},
		"recover": {"driver", "^BenchmarkRecover$", [2]int{6, 2}},
		"kill":    {"driver", "^BenchmarkKill$", [2]int{100, 20}},
		"cli":     {"bench", "^BenchmarkCLISeed$", [2]int{30, 4}},
		"fold":    {"fsm", "^BenchmarkFoldVsSwitch$", [2]int{20, 5}},
		"isolate": {"bench", "^BenchmarkExec(Launch|Start)VsRunc$", [2]int{60, 10}},
		"contain": {"bench", "^BenchmarkStartCgroupVsNone$", [2]int{60, 10}},
	}
	order := []string{"start", "goplug", "memory", "single", "many", "replay", "recover", "kill", "cli", "fold", "isolate", "contain"}

	// Each package's test binary is built once; each row then runs in a
	// process of its own.
	tmp, err := os.MkdirTemp("", "tether-report-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(tmp)
	testBins := map[string]string{}
	for _, dir := range []string{"driver", "bench", "fsm", "proptest"} {
		out := filepath.Join(tmp, dir+".test")
		cmd := exec.Command("go", "test", "-c", "-o", out, ".")
		cmd.Dir = filepath.Join(root, dir)
		if msg, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "report: go test -c ./%s: %v\n%s\n", dir, err, msg)
			continue
		}
		testBins[dir] = out
	}
	results := map[string]map[string]metrics{}
	failed := map[string]string{}
	for _, name := range order {
		j := jobs[name]
		n := j.rounds[mode]
		fmt.Fprintf(os.Stderr, "report: %-8s go test -bench '%s' -benchtime %dx ./%s", name, j.bench, n, j.dir)
		t0 := time.Now()
		res, err := runBench(root, testBins[j.dir], j, n)
		fmt.Fprintf(os.Stderr, " (%s)\n", time.Since(t0).Round(100*time.Millisecond))
		if err != nil {
			failed[name] = err.Error()
			fmt.Fprintf(os.Stderr, "report: %s failed: %v\n", name, err)
			continue
		}
		results[name] = res
	}
	checks := [2]int{200, 30}[mode]
	fmt.Fprintf(os.Stderr, "report: proptest go test -run TestDriver_Properties -rapid.checks=%d ./proptest\n", checks)
	propRate, propErr := runProptest(root, testBins["proptest"], checks)

	t := &table{}
	rows(t, results, failed, propRate, propErr)

	var buf bytes.Buffer
	header(&buf, root, *quick, time.Since(began))
	buf.WriteString(t.String())
	phaseNotes(&buf, results)
	notes(&buf, *quick)
	fmt.Print(buf.String())
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fatal(err)
		}
		fmt.Fprintf(os.Stderr, "report: wrote %s\n", *out)
	}
	if len(failed) > 0 || propErr != nil {
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

// runBench runs one job and parses every benchmark line of its output.
func runBench(root, testBin string, j job, rounds int) (map[string]metrics, error) {
	if testBin == "" {
		return nil, fmt.Errorf("the test binary of ./%s did not build", j.dir)
	}
	cmd := exec.Command(testBin, "-test.run", "^$", "-test.bench", j.bench, "-test.benchtime", fmt.Sprintf("%dx", rounds), "-test.count", "1", "-test.timeout", "30m")
	cmd.Dir = filepath.Join(root, j.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := map[string]metrics{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		mt := metrics{}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				mt[f[i+1]] = v
			}
		}
		res[m[1]] = mt
	}
	if err != nil || len(res) == 0 {
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("%v\n%s", err, tail)
	}
	return res, nil
}

var propLine = regexp.MustCompile(`(\d+) checks, (\d+) steps in \S+: ([\d.]+) checks/s, ([\d.]+) steps/s`)

// runProptest runs the property suite's state-machine test and returns
// the checks/s and steps/s it logs.
func runProptest(root, testBin string, checks int) ([2]float64, error) {
	if testBin == "" {
		return [2]float64{}, fmt.Errorf("the test binary of ./proptest did not build")
	}
	cmd := exec.Command(testBin, "-test.run", "^TestDriver_Properties$", "-test.v", "-test.count", "1", fmt.Sprintf("-rapid.checks=%d", checks))
	cmd.Dir = filepath.Join(root, "proptest")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return [2]float64{}, fmt.Errorf("%v", err)
	}
	m := propLine.FindSubmatch(out)
	if m == nil {
		return [2]float64{}, fmt.Errorf("no checks/s line in the output of TestDriver_Properties")
	}
	c, _ := strconv.ParseFloat(string(m[3]), 64)
	s, _ := strconv.ParseFloat(string(m[4]), 64)
	return [2]float64{c, s}, nil
}

type table struct{ rows [][6]string }

func (t *table) add(r ...string) {
	var row [6]string
	copy(row[:], r)
	t.rows = append(t.rows, row)
}

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| figure | tether | comparison | ratio | target | met? |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r[:], " | ") + " |\n")
	}
	return b.String()
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func rate(v float64) string { return fmt.Sprintf("%s/s", human(v)) }

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratioCell(r float64) string { return fmt.Sprintf("%.2fx", r) }

// met renders whether r meets "<= lim" (le) or ">= lim".
func met(r, lim float64, le bool) string {
	if le && r <= lim || !le && r >= lim {
		return "yes"
	}
	return "**NO**"
}

func rows(t *table, res map[string]map[string]metrics, failed map[string]string, prop [2]float64, propErr error) {
	get := func(job, bench string) (metrics, bool) {
		if _, bad := failed[job]; bad {
			return nil, false
		}
		m, ok := res[job][bench]
		return m, ok
	}
	missing := func(figure, job, target string) {
		t.add(figure, "not measured: "+firstLine(failed[job]), "", "", target, "**NO**")
	}

	if m, ok := get("start", "BenchmarkStartTask"); ok {
		t.add("1. Task start, StartTask → running, p50", ms(m["tether-p50-ms"]),
			"floor "+ms(m["floor-p50-ms"])+": minimal Go helper + 1 RPC (unix socket) + fork/exec of the task + 6 bbolt Updates + identity fsync",
			ratioCell(m["ratio"]), "≤ 1.5x", met(m["ratio"], 1.5, true))
		t.add("1. Task start, p99", ms(m["tether-p99-ms"]), "floor p99 "+ms(m["floor-p99-ms"]),
			ratioCell(m["p99-ratio"])+" (p99/p99)", "≤ 1.5x", met(m["p99-ratio"], 1.5, true))
	} else {
		missing("1. Task start, StartTask → running", "start", "≤ 1.5x")
	}
	if m, ok := get("goplug", "BenchmarkStartVsGoPlugin"); ok {
		t.add("2. Task start vs go-plugin, p50", ms(m["tether-p50-ms"]),
			"go-plugin (gRPC executor plugin, same task, same fsyncs) "+ms(m["goplugin-p50-ms"]),
			ratioCell(m["ratio"]), "≤ 0.6x", met(m["ratio"], 0.6, true))
		t.add("2. Task start vs go-plugin, p99", ms(m["tether-p99-ms"]), "go-plugin p99 "+ms(m["goplugin-p99-ms"]),
			ratioCell(m["p99-ratio"])+" (p99/p99)", "≤ 0.6x", met(m["p99-ratio"], 0.6, true))
	} else {
		missing("2. Task start vs go-plugin", "goplug", "≤ 0.6x")
	}
	if m, ok := get("memory", "BenchmarkIdleMemory"); ok {
		mb := func(k string) string { return fmt.Sprintf("%.1f MB", m[k]) }
		t.add("3. Idle RSS, 10 standalone executors (cmd/tether-executor)", mb("standalone-rss-MB"),
			"10 minimal Go helpers "+mb("helper-rss-MB"), ratioCell(m["rss-ratio-helper"]), "≤ 1.1x", met(m["rss-ratio-helper"], 1.1, true))
		t.add("3. Idle PSS, 10 standalone executors", mb("standalone-pss-MB"),
			"10 minimal Go helpers "+mb("helper-pss-MB"), ratioCell(m["pss-ratio-helper"]), "≤ 1.1x", met(m["pss-ratio-helper"], 1.1, true))
		t.add("3. Idle RSS, 10 standalone executors vs go-plugin", mb("standalone-rss-MB"),
			"10 go-plugin helpers "+mb("goplugin-rss-MB"), ratioCell(m["rss-ratio-goplugin"]), "≤ 0.5x", met(m["rss-ratio-goplugin"], 0.5, true))
		t.add("3. Idle PSS, 10 standalone executors vs go-plugin", mb("standalone-pss-MB"),
			"10 go-plugin helpers "+mb("goplugin-pss-MB"), ratioCell(m["pss-ratio-goplugin"]), "≤ 0.5x", met(m["pss-ratio-goplugin"], 0.5, true))
		t.add("3. Idle RSS / PSS, 10 embedded executors (`tether executor`)", mb("embedded-rss-MB")+" / "+mb("embedded-pss-MB"),
			"10 minimal Go helpers "+mb("helper-rss-MB")+" / "+mb("helper-pss-MB"),
			ratioCell(m["embedded-rss-ratio-helper"])+" / "+ratioCell(m["embedded-pss-ratio-helper"]), "(info)", "—")
	} else {
		missing("3. Idle RSS and PSS, 10 executors", "memory", "≤ 1.1x, ≤ 0.5x")
	}
	if m, ok := get("single", "BenchmarkAppendSingleWriter"); ok {
		t.add("4. Durable append, single writer (time per append)", ms(m["tether-p50-ms"]),
			"bare bbolt Update, same record size "+ms(m["bolt-p50-ms"]), ratioCell(m["ratio"]), "≤ 1.2x", met(m["ratio"], 1.2, true))
	} else {
		missing("4. Durable append, single writer", "single", "≤ 1.2x")
	}
	if m, ok := get("many", "BenchmarkAppend256Writers"); ok {
		t.add("4. Durable append, 256 concurrent writers", rate(m["tether-events/s"])+" events",
			"bare bbolt Batch "+rate(m["bolt-events/s"])+" events", ratioCell(m["ratio"]), "≥ 0.9x", met(m["ratio"], 0.9, false))
	} else {
		missing("4. Durable append, 256 writers", "many", "≥ 0.9x")
	}
	if m, ok := get("replay", "BenchmarkReplay1M"); ok {
		t.add("5. Replay of 1,000,000 events (decode + fold), speed", rate(m["replay-events/s"])+" events",
			"bare bbolt cursor iteration of the same file "+rate(m["cursor-events/s"])+" events", ratioCell(m["ratio"]), "≥ 0.5x", met(m["ratio"], 0.5, false))
	} else {
		missing("5. Replay of 1,000,000 events", "replay", "≥ 0.5x")
	}
	if m, ok := get("recover", "BenchmarkRecover"); ok {
		t.add("6. Recover of 10,000 live tasks, per task (simulated executors, real identity check, real store)",
			fmt.Sprintf("%.1f µs", m["tether-us/task"]),
			fmt.Sprintf("pidfd_open + read /proc/PID/stat: %.1f µs", m["floor-us/task"]), ratioCell(m["ratio"]), "≤ 3x", met(m["ratio"], 3, true))
	} else {
		missing("6. Recover of 10,000 live tasks", "recover", "≤ 3x")
	}
	if m, ok := get("kill", "BenchmarkKill"); ok {
		t.add("7. Kill: fault after executor-up → executor confirmed dead, p50", ms(m["tether-p50-ms"]),
			"SIGKILL → wait of a Go helper "+ms(m["floor-p50-ms"]), ratioCell(m["ratio"]), "≤ 2x", met(m["ratio"], 2, true))
	} else {
		missing("7. Kill", "kill", "≤ 2x")
	}
	if m, ok := get("cli", "BenchmarkCLISeed/netraw"); ok {
		t.add("8. Seed via CLI: `tether run examples/net_raw.hcl` (refused before spawn), p50 / p99",
			ms(m["seed-p50-ms"])+" / "+ms(m["seed-p99-ms"]), "`tether run -- /bin/true` "+ms(m["true-p50-ms"]),
			ratioCell(m["ratio"]), "p99 < 1 s", met(m["seed-p99-ms"], 1000, true))
	} else {
		missing("8. Seed via CLI (net_raw)", "cli", "< 1 s")
	}
	if m, ok := get("cli", "BenchmarkCLISeed/after-executor-up"); ok {
		t.add("8. Seed via CLI, failure after executor-up (`TETHER_FAULT=effect:launch-task:1 tether run -- /bin/true`), through reaping, p50 / p99",
			ms(m["seed-p50-ms"])+" / "+ms(m["seed-p99-ms"]), "`tether run -- /bin/true` "+ms(m["true-p50-ms"]),
			ratioCell(m["ratio"]), "p99 < 1 s", met(m["seed-p99-ms"], 1000, true))
	} else {
		missing("8. Seed via CLI (after executor-up)", "cli", "< 1 s")
	}
	if propErr == nil {
		t.add("8. Property suite (TestDriver_Properties, simulated world)", fmt.Sprintf("%.0f checks/s (%.0f steps/s)", prop[0], prop[1]), "", "", "(info)", "—")
	} else {
		t.add("8. Property suite (TestDriver_Properties)", "not measured: "+firstLine(propErr.Error()), "", "", "(info)", "—")
	}
	isolated(t, get, failed)
	if m, ok := get("fold", "BenchmarkFoldVsSwitch"); ok {
		t.add("fsm: fold (Table.Apply) per event", fmt.Sprintf("%.0f ns", m["table-ns/event"]),
			fmt.Sprintf("hand-written switch %.0f ns", m["switch-ns/event"]), ratioCell(m["ratio"]), "(info)", "—")
	}
}

// isolated adds the containment and isolation rows (issues 12 and 13).
func isolated(t *table, get func(job, bench string) (metrics, bool), failed map[string]string) {
	skipped := func(figure, job, target string) {
		t.add(figure, "not measured: "+skipReason(failed[job]), "", "", target, "**NO**")
	}
	if m, ok := get("isolate", "BenchmarkExecLaunchVsRunc"); ok {
		t.add("9. Isolated exec start (launch: shim, cgroup with memory = 64, PID/mount/IPC/UTS namespaces, read-only root, pivot_root, nobody) → running, p50",
			ms(m["tether-p50-ms"]), "`runc run -d` of the same static binary, same namespaces, root, user, capabilities and limit "+ms(m["runc-p50-ms"]),
			ratioCell(m["ratio"]), "≤ 1x", met(m["ratio"], 1, true))
		t.add("9. Isolated exec start, p99", ms(m["tether-p99-ms"]), "runc p99 "+ms(m["runc-p99-ms"]),
			ratioCell(m["p99-ratio"])+" (p99/p99)", "(info)", "—")
	} else {
		skipped("9. Isolated exec start vs runc", "isolate", "≤ 1x")
	}
	if m, ok := get("isolate", "BenchmarkExecStartVsRunc"); ok {
		t.add("9. Whole isolated task start, StartTask → running (6 appends, executor spawn, launch), p50",
			ms(m["tether-p50-ms"]), "`runc run -d` "+ms(m["runc-p50-ms"]), ratioCell(m["ratio"]), "(info)", "—")
	}
	if m, ok := get("contain", "BenchmarkStartCgroupVsNone"); ok {
		t.add("10. Task start (executor spawn + launch, raw_exec) in a cgroup with memory = 64, pids = 100, p50",
			ms(m["cgroup-p50-ms"]), "the same executor and task without a cgroup (its mount namespace has none) "+ms(m["none-p50-ms"]),
			ratioCell(m["ratio"]), "(info)", "—")
	} else {
		skipped("10. Task start with a cgroup and limits vs without", "contain", "(info)")
	}
}

// skipReason is the line of a benchmark's output that says why it did not
// run (a skip naming what the host lacks), else its first line.
func skipReason(out string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, "unavailable") || strings.Contains(l, "needs") {
			return firstLine(strings.TrimSpace(l))
		}
	}
	return firstLine(out)
}

// phaseNotes renders where the start and kill paths spend their time, from
// the phase metrics the benchmarks report (medians, ms).
func phaseNotes(b *bytes.Buffer, res map[string]map[string]metrics) {
	f := func(m metrics, k string) string { return fmt.Sprintf("%.2f", m["phase-"+k+"-ms"]) }
	b.WriteString("\nWhere the time goes (medians in ms, from probes at the driver's named crash points, which the benchmarks use as timestamps and never crash at):\n\n")
	if m, ok := res["start"]["BenchmarkStartTask"]; ok {
		fmt.Fprintf(b, "- Start (row 1): tether spawn-executor effect %s, launch-task effect %s, attach effect %s, 6 appends %s; "+
			"floor: helper spawn + RPC + identity fsync %s, fork/exec %s, 6 bbolt Updates %s.\n",
			f(m, "spawn"), f(m, "launch"), f(m, "attach"), f(m, "appends"), f(m, "floor-spawn"), f(m, "floor-fork"), f(m, "floor-appends"))
	}
	if m, ok := res["goplug"]["BenchmarkStartVsGoPlugin"]; ok {
		fmt.Fprintf(b, "- Start (row 2): go-plugin spawn (process, stdout handshake, gRPC dial, Dispense) %s, Launch RPC with fork/exec %s.\n",
			f(m, "goplugin-spawn"), f(m, "goplugin-launch"))
	}
	if m, ok := res["isolate"]["BenchmarkExecStartVsRunc"]; ok {
		fmt.Fprintf(b, "- Isolated start (row 9, StartTask): spawn-executor effect %s, launch-task effect (shim, cgroup join, namespaces, root, exec) %s.\n",
			f(m, "spawn"), f(m, "launch"))
	}
	if m, ok := res["kill"]["BenchmarkKill"]; ok {
		fmt.Fprintf(b, "- Kill (row 7): append launch-failed %s, kill-executor effect (stop RPC, shutdown RPC, executor exit, pidfd wait, identity kill) %s, append executor-reaped %s.\n",
			f(m, "append-launch-failed"), f(m, "kill-effect"), f(m, "append-executor-reaped"))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.ReplaceAll(s, "|", "/")
}

func header(b *bytes.Buffer, root string, quick bool, took time.Duration) {
	goVersion := strings.TrimSpace(cmdOut(root, "go", "version"))
	kernel := strings.TrimSpace(cmdOut(root, "uname", "-r"))
	commit := strings.TrimSpace(cmdOut(root, "git", "rev-parse", "--short", "HEAD"))
	cpu := "unknown"
	if f, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.SplitSeq(string(f), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mode := "full (`make bench`)"
	if quick {
		mode = "quick (`make bench-quick`: fewer rounds, rougher figures)"
	}
	fmt.Fprintf(b, "# tether benchmarks\n\n")
	fmt.Fprintf(b, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(b, "- %s; kernel %s; %d CPUs (%s)\n", goVersion, kernel, runtime.NumCPU(), cpu)
	fmt.Fprintf(b, "- commit %s; mode %s; took %s\n\n", commit, mode, took.Round(time.Second))
	b.WriteString("Every row is one `go test -bench` process in which the two sides alternate round by round " +
		"(and which goes first alternates too); **ratio is the median of the paired ratios** " +
		"(tether / comparison; for rates, tether's rate / the comparison's), so machine noise shared by a pair cancels. " +
		"Absolute times on this shared machine drift by up to 2x between runs; the ratios are the figures.\n\n")
}

func notes(b *bytes.Buffer, quick bool) {
	b.WriteString(`
How each row is measured (run one alone with the command given; b.N is the number of rounds):

1. ` + "`go test -run '^$' -bench '^BenchmarkStartTask$' -benchtime 200x ./driver/`" + `: a real driver
   (real bbolt store, the standalone ` + "`tether-executor`" + `) starts ` + "`/bin/sleep 3600`" + ` (raw_exec) and
   returns at running: 6 durable appends, the executor's identity file (fsync of file and directory),
   hello + launch + status RPCs. Floor: the same 6 appends as bare bbolt Updates in the same directory,
   the minimal Go helper (` + "`executor/internal/minhelper`" + `) spawned the way the executor is (Setsid, ready
   pipe) and answering one net/rpc call on its unix socket, the same identity write, fork/exec of the
   same task in its own process group.
2. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkStartVsGoPlugin$' -benchtime 100x .`" + `: the same
   StartTask against a go-plugin v1.8.0 gRPC executor plugin (` + "`bench/internal/gphelper`" + `) started by
   ` + "`plugin.NewClient`" + ` + ` + "`Client()`" + ` + ` + "`Dispense`" + `, which writes its identity file durably and
   fork/execs the task in a Launch RPC, with the same 6 bbolt Updates.
3. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkIdleMemory$' -benchtime 8x .`" + `: ten of each kind
   alive at once, read as soon as the tenth answered a request, VmRSS and Pss (smaps_rollup) summed; the four kinds
   rotate within each round. The target rows use the standalone executor (` + "`cmd/tether-executor`" + `);
   the embedded row is the ` + "`tether`" + ` CLI binary in executor mode.
4. ` + "`cd bench && go test -run '^$' -bench 'BenchmarkAppend' -benchtime 40x .`" + `: store.Append of one
   event against bbolt Update of a value of the same size (read back from the store file); 256 goroutines
   on 256 tasks (4,096 events a round) against bbolt Batch.
5. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkReplay1M$' -benchtime 20x .`" + `: 1,000 tasks of
   1,000 events, every task's LoadTask (decode, checksum, fold) against bare cursors over the same
   file's records.
6. ` + "`go test -run '^$' -bench '^BenchmarkRecover$' -benchtime 6x ./driver/`" + `: 10,000 running tasks in a
   real store; a new driver's Recover with an Executors whose Reattach does the real identity check
   (pidfd_open + /proc/PID/stat start time) against one live process; per task, against that check alone.
7. ` + "`go test -run '^$' -bench '^BenchmarkKill$' -benchtime 100x ./driver/`" + `: a fault injected into the
   launch-task effect (after executor-up); timed from the fault to StartTask's return, after
   launch-failed, the executor stopped, killed by identity and confirmed dead, and executor-reaped
   recorded. Against SIGKILL → wait of the minimal Go helper.
8. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkCLISeed$' -benchtime 30x .`" + `: wall time of the
   ` + "`tether`" + ` process. net_raw is refused before anything is spawned (exec mode's allow list), so the
   seed's real path (a failure once the executor is up, then reaping) is measured with TETHER_FAULT.
   The property suite figure comes from ` + "`go test -run TestDriver_Properties -v ./proptest/ -rapid.checks=200`" + `.
- fsm: ` + "`go test -run '^$' -bench . ./fsm/`" + `.
9. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkExec(Launch|Start)VsRunc$' -benchtime 60x .`" + ` (root, task
   cgroups; runc is installed with apt-get when absent, and the row is skipped, saying why, when it cannot be):
   a spawned executor launches a static binary as an exec task (the init shim, its cgroup with memory = 64,
   new PID, mount, IPC and UTS namespaces, read-only binds of the chroot_env directories plus the binary's,
   the task's writable directories, /proc and a minimal /dev, pivot_root, nobody, Nomad's capabilities, no
   new privileges) until it runs, against ` + "`runc run -d`" + ` of an OCI bundle with the same root, mounts,
   masked and read-only paths, namespaces, user, capabilities and memory limit. The whole StartTask (with
   its durable appends and the executor's spawn, which runc has no counterpart for) is for information.
10. ` + "`cd bench && go test -run '^$' -bench '^BenchmarkStartCgroupVsNone$' -benchtime 60x .`" + `: executor
   spawn + raw_exec launch of the same binary, in a cgroup with memory = 64 and pids = 100, against the same
   executor spawned from a thread whose mount namespace has no cgroup hierarchy (so it runs the task
   uncontained, through the same shim). On cgroup v1 and hybrid hosts most of the difference is the kernel's
   cgroup migration, which waits for an RCU grace period (cgroup_threadgroup_rwsem); runc pays it too.
`)
	if quick {
		b.WriteString("\nQuick mode: fewer rounds of the same; p99 figures from so few rounds are close to the maximum.\n")
	}
}

func cmdOut(dir string, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, _ := cmd.Output()
	return string(out)
}
