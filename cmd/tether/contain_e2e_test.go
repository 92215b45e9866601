package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
)

// containHelperArg makes the test binary act as a task of this file's
// tests, dispatched by TestMain:
//
//	alloc MB MARKER    map and touch MB megabytes, then exit 0
//	print BYTES MARKER print BYTES of numbered lines, then exit 0
//	sleep MARKER       block until killed
//	count FILE CODE MARKER  append a line to FILE, print "run K" (K: the
//	                   lines FILE has now), exit CODE
const containHelperArg = "tether-contain-helper"

func containHelper(args []string) int {
	switch args[0] {
	case "alloc":
		mb, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return 2
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		fmt.Println("survived")
		return 0
	case "alloc-child":
		// alloc-child MB MARKER: a child allocates MB (and is OOM killed
		// under a smaller limit); the main process waits for it and exits
		// 0 whatever became of it.
		c := exec.Command(os.Args[0], containHelperArg, "alloc", args[1], args[len(args)-1])
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		err := c.Run()
		fmt.Println("child:", err)
		return 0
	case "note-exit":
		// note-exit FIFO FILE MARKER: read FIFO to its end, then write the
		// time now (Unix ns) to FILE and exit 0: the task's own record of
		// when it ended.
		if _, err := os.ReadFile(args[1]); err != nil {
			return 2
		}
		if err := os.WriteFile(args[2], []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o600); err != nil {
			return 2
		}
		return 0
	case "print":
		n, _ := strconv.Atoi(args[1])
		w := bufio.NewWriterSize(os.Stdout, 64<<10)
		for i, written := 0, 0; written < n; i++ {
			k, _ := fmt.Fprintf(w, "line %09d %s\n", i, strings.Repeat("x", 50))
			written += k
		}
		if err := w.Flush(); err != nil {
			return 3
		}
		return 0
	case "sleep":
		for {
			_ = unix.Pause()
		}
	case "count":
		f, err := os.OpenFile(args[1], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return 2
		}
		_, err = f.WriteString("ran\n")
		if cerr := f.Close(); err != nil || cerr != nil {
			return 2
		}
		b, _ := os.ReadFile(args[1])
		fmt.Printf("run %d\n", strings.Count(string(b), "\n"))
		code, _ := strconv.Atoi(args[2])
		return code
	}
	return 100
}

func needTaskCgroups(t *testing.T) cgroup.Host {
	t.Helper()
	h, err := cgroup.Probe()
	if err == nil {
		err = h.Usable()
	}
	if err != nil {
		t.Skipf("needs task cgroups (root, or a delegated cgroup): %v", err)
	}
	return h
}

// containTask is a task file running the test binary as a raw_exec task
// in mode args, with extra blocks.
func containTask(t *testing.T, e *env, name, blocks string, args ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	quoted := []string{strconv.Quote(containHelperArg)}
	for _, a := range append(args, e.dir) {
		quoted = append(quoted, strconv.Quote(a))
	}
	return writeFile(t, t.TempDir(), name+".hcl", fmt.Sprintf(`task %q {
  driver = "raw_exec"
  config {
    command = %q
    args    = [%s]
  }
%s
}
`, name, self, strings.Join(quoted, ", "), blocks))
}

// TestRun_OOMKilledTask: `tether run` of a task file with resources {
// memory = 64 } whose task touches 400 MB: the kernel kills it, run exits
// 137, and status, status --json and events say it was OOM killed.
func TestRun_OOMKilledTask(t *testing.T) {
	h := needTaskCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	e := newEnv(t)
	file := containTask(t, e, "hog", "  resources {\n    memory = 64\n  }", "alloc", "400")
	r := e.tether("run", file)
	if r.code != 137 {
		t.Fatalf("run of a task over its memory limit: want exit 137\n%s", r)
	}
	if strings.Contains(r.stdout, "survived") {
		t.Fatalf("the task survived touching 400 MB under memory = 64:\n%s", r)
	}
	if st := e.must("status", "--all", "hog"); !strings.Contains(st.stdout, "OOM killed") {
		t.Errorf("status does not say OOM killed:\n%s", st)
	}
	var tasks []taskJSON
	js := e.must("status", "--all", "--json", "hog")
	if err := json.Unmarshal([]byte(js.stdout), &tasks); err != nil || len(tasks) != 1 {
		t.Fatalf("status --json: %v\n%s", err, js)
	}
	if !tasks[0].OOMKilled || tasks[0].ExitSignal == nil || *tasks[0].ExitSignal != 9 {
		t.Errorf("status --json: %+v, want oom_killed and signal 9", tasks[0])
	}
	if ev := e.must("events", "hog"); !strings.Contains(ev.stdout, "OOM killed") {
		t.Errorf("events do not say OOM killed:\n%s", ev)
	}
}

// TestRun_ChildOOMKilledMainExits0: a task whose child the OOM killer
// kills while its main process exits 0 has one truth, the main process's:
// run exits 0 and says on stderr that a process was OOM killed; status
// and events say exit 0 with the OOM kill. (It exited 137 while the record
// said exited 0.) run's end summary names the peak memory too.
func TestRun_ChildOOMKilledMainExits0(t *testing.T) {
	h := needTaskCgroups(t)
	if _, why, ok := h.For(cgroup.Memory); !ok {
		t.Skipf("needs the memory controller: %s", why)
	}
	e := newEnv(t)
	file := containTask(t, e, "parent", "  resources {\n    memory = 64\n  }", "alloc-child", "400")
	r := e.tether("run", file)
	if r.code != 0 || !strings.Contains(r.stderr, "exited with code 0, another process of the task OOM killed (memory limit 64 MB)") {
		t.Fatalf("run of a task whose child is OOM killed and whose main process exits 0: want exit 0 and the OOM kill said\n%s", r)
	}
	if !strings.Contains(r.stderr, ", peak memory ") {
		t.Errorf("run's end summary does not give the peak memory:\n%s", r)
	}
	var tasks []taskJSON
	js := e.must("status", "--all", "--json", "parent")
	if err := json.Unmarshal([]byte(js.stdout), &tasks); err != nil || len(tasks) != 1 {
		t.Fatalf("status --json: %v\n%s", err, js)
	}
	if !tasks[0].OOMKilled || tasks[0].ExitCode == nil || *tasks[0].ExitCode != 0 || tasks[0].ExitSignal != nil {
		t.Errorf("status --json: %+v, want exit code 0 with oom_killed", tasks[0])
	}
	if ev := e.must("events", "parent"); !strings.Contains(ev.stdout, "exit code 0; another process of the task was OOM killed") {
		t.Errorf("events do not say exit 0 with another process OOM killed:\n%s", ev)
	}
}

// TestEvents_UnwatchedExitStampedWhenItHappened: a task started in the
// background exits (writing the time first) with nothing watching it;
// a command that looks at it later (300 ms on: the lateness is the point)
// records its end stamped with when it happened, within 100 ms of the
// time the task wrote, and the append time beside it. Before, the end was
// stamped when a command next looked, and events alone showed it running.
func TestEvents_UnwatchedExitStampedWhenItHappened(t *testing.T) {
	e := newDaemonlessEnv(t, "an exit no process watches: an agent watches every task it starts, and records its end at once")
	dir := t.TempDir()
	note, fifo := filepath.Join(dir, "exited-at"), filepath.Join(dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// (A -race helper would sleep a second at exit, after noting the time.)
	id := strings.TrimSpace(e.must("start", containTask(t, e, "brief", "  env {\n    GORACE = \"atexit_sleep_ms=0\"\n  }", "note-exit", fifo, note)).stdout)
	st := e.status(id)
	if len(st) != 1 || st[0].State != "running" || st[0].ExecutorPID == 0 {
		t.Fatalf("after start: %+v", st)
	}
	if err := os.WriteFile(fifo, nil, 0); err != nil { // the task exits now, unwatched
		t.Fatal(err)
	}
	waitExit(t, st[0].ExecutorPID) // it has recorded the exit on disk and ended
	b, err := os.ReadFile(note)
	if err != nil {
		t.Fatalf("the task did not note its exit: %v", err)
	}
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	exitedAt := time.Unix(0, ns)
	<-time.After(time.Until(exitedAt.Add(300 * time.Millisecond))) // a user looks later
	var evs []struct {
		Event    string     `json:"event"`
		Time     time.Time  `json:"time"`
		Recorded *time.Time `json:"recorded"`
	}
	r := e.must("events", "--json", id)
	if err := json.Unmarshal([]byte(r.stdout), &evs); err != nil {
		t.Fatalf("events --json: %v\n%s", err, r)
	}
	found := false
	for _, ev := range evs {
		if ev.Event != "task-exited" {
			continue
		}
		found = true
		if d := ev.Time.Sub(exitedAt).Abs(); d > 100*time.Millisecond {
			t.Errorf("task-exited stamped %s, the task exited at %s: %s apart", ev.Time, exitedAt, d)
		}
		if ev.Recorded == nil || ev.Recorded.Before(exitedAt.Add(250*time.Millisecond)) {
			t.Errorf("task-exited's append time %v: want it kept, at least 250 ms after the exit", ev.Recorded)
		}
	}
	if !found {
		t.Fatalf("events of an ended task have no task-exited:\n%s", r.stdout)
	}
	if st := e.status("--all", id); len(st) != 1 || st[0].State != "exited" {
		t.Errorf("status after events: %+v, want exited", st)
	}
}

// TestLogs_RotatedTail: a task printing 8 MB with logs { max_files = 2,
// max_file_size = 1 } leaves at most two files of at most 1 MB, and
// `tether logs -n 5` prints its last five lines across them.
func TestLogs_RotatedTail(t *testing.T) {
	e := newEnv(t)
	const total = 8 << 20
	file := containTask(t, e, "chatty", "  logs {\n    max_files     = 2\n    max_file_size = 1\n  }", "print", strconv.Itoa(total))
	r := e.tether("run", file)
	if r.code != 0 {
		t.Fatalf("run: %s", r.String()[:min(len(r.String()), 2000)])
	}
	var tasks []taskJSON
	js := e.must("status", "--all", "--json", "chatty")
	if err := json.Unmarshal([]byte(js.stdout), &tasks); err != nil || len(tasks) != 1 {
		t.Fatalf("status --json: %v\n%s", err, js)
	}
	dir := filepath.Join(e.dir, "tasks", tasks[0].ID)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, ent := range ents {
		if n := ent.Name(); n == stdoutFile || strings.HasPrefix(n, stdoutFile+".") {
			fi, _ := ent.Info()
			if fi.Size() > 1<<20 {
				t.Errorf("%s is %d bytes, over max_file_size = 1 MB", n, fi.Size())
			}
			files = append(files, n)
		}
	}
	if len(files) == 0 || len(files) > 2 {
		t.Fatalf("stdout files %v, want at most max_files = 2", files)
	}
	lines := strings.Split(strings.TrimSuffix(e.must("logs", "-n", "5", "chatty").stdout, "\n"), "\n")
	last := total/len("line 000000000 "+strings.Repeat("x", 50)+"\n") - 1
	if total%len("line 000000000 "+strings.Repeat("x", 50)+"\n") != 0 {
		last++
	}
	if len(lines) != 5 {
		t.Fatalf("logs -n 5 printed %d lines: %q", len(lines), lines)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("line %09d ", last-4+i); !strings.HasPrefix(l, want) {
			t.Errorf("logs -n 5 line %d is %q, want it to start %q (files %v)", i+1, l, want, files)
		}
	}
}

// TestStats_RunningTask: `tether stats` of a running task in a cgroup, in
// text and JSON; `tether debug host` says what the host supports.
func TestStats_RunningTask(t *testing.T) {
	needTaskCgroups(t)
	e := newEnv(t)
	file := containTask(t, e, "idle", "  resources {\n    memory = 64\n    pids   = 50\n  }", "sleep")
	e.must("start", file)
	defer e.tether("stop", "--signal", "SIGKILL", "idle")
	txt := e.must("stats", "idle")
	for _, want := range []string{"Memory", "CPU", "Tasks", "OOM kills"} {
		if !strings.Contains(txt.stdout, want) {
			t.Errorf("stats lacks %q:\n%s", want, txt)
		}
	}
	var st statsJSON
	js := e.must("stats", "--json", "idle")
	if err := json.Unmarshal([]byte(js.stdout), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, js)
	}
	if st.Pids < 1 || st.MemoryBytes == 0 || st.ID == "" {
		t.Errorf("stats --json: %+v", st)
	}
	e.must("stop", "--signal", "SIGKILL", "idle")
	if r := e.tether("stats", "idle"); r.code == 0 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("stats of a stopped task: %s", r)
	}
	host := e.must("debug", "host")
	if !strings.Contains(host.stdout, "cgroup layout") || !strings.Contains(host.stdout, "task cgroups: yes") {
		t.Errorf("debug host:\n%s", host)
	}
}
