package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/docfields"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The desired state runs what tether start runs: whole job files (groups,
// lifecycle hooks, ports, NOMAD_* variables, templates), from the agent's
// config dir, from tether enable and from etcd (cluster/spec_test.go and
// cmd/tether-fleet's tests), through the one instantiation path (package
// job); a task whose policies are spent is rescheduled by its reschedule
// block; status shows every entry where it stands.

// webJob is a web service on its named port (python3 -m http.server),
// ready once its http check passes, restarted at once when killed.
const webJob = `job "web" {
  group "site" {
    network {
      port "http" {}
    }
    task "server" {
      driver    = "raw_exec"
      readiness = "http"
      config {
        command = %q
        args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--bind", "${NOMAD_IP_http}"]
      }
      env {
        TETHER_TEST_MARKER = %q
        PYTHONUNBUFFERED   = "1"
      }
      service {
        name = "web"
        port = "http"
        check {
          type     = "http"
          path     = "/"
          interval = "500ms"
          timeout  = "1s"
        }
      }
      restart {
        attempts = 3
        interval = "1h"
        delay    = "0s"
        mode     = "fail"
      }
    }
  }
}
`

// httpGet fetches a URL, failing the test on an error or a status other
// than 200.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// (a) A web service with an http check on its named port, from the config
// dir: it runs on its port and is ready; SIGKILL of the server: it is back
// on the same port.
func TestDesired_WebServiceWithItsCheckRunsAndComesBack(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3 (python3 -m http.server) on PATH")
	}
	e := newAgentEnv(t)
	dir := e.configDir()
	writeFile(t, dir, "web.nomad", fmt.Sprintf(webJob, py, e.dir))
	e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	en := awaitEntry(t, c, "web", "running", running)
	if en.Origin != "dir" || len(en.Tasks) != 1 {
		t.Fatalf("web: %+v; want one task, declared by the config dir", en)
	}
	info, err := c.InspectTask(context.Background(), en.Task)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Spec.Ports) != 1 || info.Spec.Ports[0].Label != "http" || info.Spec.Readiness != fsm.ReadinessHTTP {
		t.Fatalf("server's spec: ports %+v, readiness %q", info.Spec.Ports, info.Spec.Readiness)
	}
	addr := net.JoinHostPort(info.Spec.Ports[0].IP, strconv.Itoa(info.Spec.Ports[0].Value))
	e.logsUntil(en.Task, "Serving HTTP", 1)
	httpGet(t, "http://"+addr+"/")
	// SIGKILL of the server: its executor restarts it, on the same port.
	if err := syscall.Kill(info.TaskPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.logsUntil(en.Task, "Serving HTTP", 2)
	back, err := c.InspectTask(context.Background(), en.Task)
	if err != nil {
		t.Fatal(err)
	}
	if back.State != fsm.StateRunning || back.TaskPID == info.TaskPID || back.Restarts != 1 {
		t.Errorf("after SIGKILL: %s, pid %d (was %d), %d restarts; want its task restarted once", back.State, back.TaskPID, info.TaskPID, back.Restarts)
	}
	httpGet(t, "http://"+addr+"/")
	// It is ready (its check passed: its executor records it, with no CLI
	// waiting), and status says so.
	awaitEntry(t, c, "web", "ready", func(en agent.Entry) bool { return en.Standing == agent.StandingReady })
	var rows []taskJSON
	if err := json.Unmarshal([]byte(e.must("status", "--json").stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Ready == nil || !*rows[0].Ready || rows[0].Desired == nil || rows[0].Desired.Standing != "ready" {
		t.Fatalf("status --json: %+v; want the server ready, of the desired entry web", rows)
	}
}

// logsUntil follows a task's output (tether logs -f) until n of its lines
// hold want.
func (e *env) logsUntil(id, want string, n int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, nil, "logs", "-f", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			if n--; n == 0 {
				return
			}
		}
	}
	e.t.Fatalf("task %s never printed %q", id, want)
}

// groupJob is a job with a prestart task, a poststart sidecar and a main
// task sharing the allocation's directory: the prestart writes pre, the
// sidecar sidecar, and the main task, once both are there, writes what it
// saw to main.
const groupJob = `job "trio" {
  group "g" {
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo pre from $NOMAD_TASK_NAME > $NOMAD_ALLOC_DIR/data/pre"]
      }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo sidecar > $NOMAD_ALLOC_DIR/data/sidecar; exec sleep 1000"]
      }
      env {
        TETHER_TEST_MARKER = %[1]q
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "d=$NOMAD_ALLOC_DIR/data; while [ ! -f $d/sidecar ]; do sleep 0.05; done; cat $d/pre $d/sidecar > $d/main.tmp; mv $d/main.tmp $d/main; exec sleep 1000"]
      }
      env {
        TETHER_TEST_MARKER = %[1]q
      }
    }
  }
}
`

// (b) A job with a prestart task, a sidecar and a main task sharing
// alloc/: through tether enable and through the config dir, all three run
// as tether start runs them.
func TestDesired_PrestartSidecarMainAsStartRunsThem(t *testing.T) {
	check := func(t *testing.T, e *env, ids []string) {
		t.Helper()
		byName := map[string]taskJSON{}
		var all []taskJSON
		if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &all); err != nil {
			t.Fatal(err)
		}
		for _, ts := range all {
			if ts.ID != "" && (ids == nil || slices.Contains(ids, ts.ID)) {
				byName[ts.Name] = ts
			}
		}
		main := byName["main"]
		got := waitFor(t, filepath.Join(e.dir, "allocs", main.Alloc, "alloc", "data", "main"), func(l []string) bool { return len(l) >= 4 })
		if strings.Join(got, " ") != "pre from init sidecar" {
			t.Errorf("main saw %q", got)
		}
		st := map[string]taskJSON{}
		if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &all); err != nil {
			t.Fatal(err)
		}
		for _, ts := range all {
			if ts.ID != "" {
				st[ts.Name] = ts
			}
		}
		for name, want := range map[string]string{"init": "exited", "side": "running", "main": "running"} {
			ts := st[name]
			if ts.State != want || ts.Alloc != main.Alloc {
				t.Errorf("%s: %s in alloc %s; want %s in alloc %s", name, ts.State, ts.Alloc, want, main.Alloc)
			}
		}
		if st["init"].Hook != "prestart" || st["side"].Hook != "poststart" || st["main"].Hook != "main" {
			t.Errorf("hooks: %s %s %s", st["init"].Hook, st["side"].Hook, st["main"].Hook)
		}
	}
	t.Run("start", func(t *testing.T) {
		e := newEnv(t)
		file := writeFile(t, t.TempDir(), "trio.nomad", fmt.Sprintf(groupJob, e.dir))
		ids := strings.Fields(e.must("start", "--min-uptime", "0", file).stdout)
		check(t, e, ids)
		e.must("stop", "main")
	})
	t.Run("enable", func(t *testing.T) {
		e := newAgentEnv(t)
		file := writeFile(t, t.TempDir(), "trio.nomad", fmt.Sprintf(groupJob, e.dir))
		e.startAgent(nil, true)
		c := e.client()
		if r := e.must("enable", file); !strings.Contains(r.stdout+r.stderr, "trio") {
			t.Errorf("enable: %s", r)
		}
		en := awaitEntry(t, c, "trio", "running", running)
		if en.Origin != "enable" || len(en.Tasks) != 3 {
			t.Errorf("trio: %+v; want three tasks, enabled", en)
		}
		check(t, e, nil)
		e.must("disable", "trio")
		await(t, c, "trio disabled", func(s agent.Status) bool { _, ok := s.Entry("trio"); return !ok })
	})
	t.Run("config-dir", func(t *testing.T) {
		e := newAgentEnv(t)
		dir := e.configDir()
		writeFile(t, dir, "trio.nomad", fmt.Sprintf(groupJob, e.dir))
		e.startAgent(nil, true, "--config-dir", dir)
		c := e.client()
		en := awaitEntry(t, c, "trio", "running", running)
		if en.Origin != "dir" || len(en.Tasks) != 3 {
			t.Errorf("trio: %+v; want three tasks, from the config dir", en)
		}
		check(t, e, nil)
	})
}

// templateTask is a task file whose env template (its source at src) sets
// GREETING, which the task writes to its allocation's directory.
const templateTask = `task %q {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "echo \"$GREETING\" > $NOMAD_ALLOC_DIR/greeting; exec sleep 1000"]
  }
  env {
    TETHER_TEST_MARKER = %q
  }
  template {
    source      = %q
    destination = "local/greeting.env"
    env         = true
  }
}
`

// (c) An env template through the agent sets its variable; a template the
// agent may not read (outside its --allow-read, whatever the caller's) is
// refused naming --allow-read, from tether enable and from the config dir,
// and nothing of it is recorded.
func TestDesired_EnvTemplateAndTheAgentsAllowRead(t *testing.T) {
	e := newAgentEnv(t)
	readable, secret, dir := t.TempDir(), t.TempDir(), e.configDir()
	src := writeFile(t, readable, "greeting.tpl", "GREETING=hello from {{ env \"NOMAD_TASK_NAME\" }}\n")
	hidden := writeFile(t, secret, "secret.tpl", "GREETING=secret\n")
	writeFile(t, dir, "hello.hcl", fmt.Sprintf(templateTask, "hello", e.dir, src))
	writeFile(t, dir, "sneaky.hcl", fmt.Sprintf(templateTask, "sneaky", e.dir, hidden))
	cmd := e.command(context.Background(), nil)
	cmd.Args = []string{tetherBin, "--state-dir", e.dir, "--allow-read", readable, "agent", "--config-dir", dir}
	e.runAgent(cmd, true)
	c := e.client()
	en := awaitEntry(t, c, "hello", "running", running)
	info, err := c.InspectTask(context.Background(), en.Task)
	if err != nil {
		t.Fatal(err)
	}
	got := waitLines(t, filepath.Join(e.dir, "allocs", info.Spec.Alloc.ID, "alloc", "greeting"), 3)
	if strings.Join(got, " ") != "hello from hello" {
		t.Errorf("the task's GREETING: %q", got)
	}
	sneaky := awaitEntry(t, c, "sneaky", "refused", func(en agent.Entry) bool { return en.Standing == agent.StandingRefused })
	if !strings.Contains(sneaky.Reason, "--allow-read") || !strings.Contains(sneaky.Reason, hidden) || len(sneaky.Tasks) != 0 {
		t.Errorf("sneaky: %+v; want refused naming its source and --allow-read, no task", sneaky)
	}
	// tether enable: refused at once, by the agent's list (the caller's
	// own reading rights do not count), and nothing recorded.
	other := writeFile(t, t.TempDir(), "other.hcl", fmt.Sprintf(templateTask, "other", e.dir, hidden))
	r := e.tether("enable", other)
	if r.code == 0 || !strings.Contains(r.stderr, "--allow-read") || !strings.Contains(r.stderr, "nothing was enabled") {
		t.Errorf("enable of a template the agent may not read: %s", r)
	}
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Entry("other"); ok {
		t.Errorf("a refused enable was recorded: %+v", st)
	}
	// The table says the same.
	out := e.must("status").stdout
	if !strings.Contains(out, "sneaky") || !strings.Contains(out, "refused") || !strings.Contains(out, "--allow-read") {
		t.Errorf("status does not show sneaky refused:\n%s", out)
	}
}

// crashTask is a task file of a service that exits 3 at once: one restart,
// then its reschedule block (one attempt, after 5 s: Nomad's least delay).
const crashTask = `task "crashy" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "exit 3"]
  }
  restart {
    attempts = 1
    interval = "1h"
    delay    = "0s"
    mode     = "fail"
  }
  reschedule {
    attempts       = 1
    interval       = "1h"
    delay          = "5s"
    delay_function = "constant"
    unlimited      = false
  }
}
`

// (d) A crash-looping service: once its restarts are spent it is down for
// its reschedule delay (restarting, with the failure and the next
// attempt's time), then started again as a new task of the same name
// linked to the one it replaces, not before that time; once its reschedule
// attempts are spent it is down for good, with its reason and since when.
// status --json's desired object is checked against docs/cli.md.
func TestDesired_CrashLoopIsRescheduledThenDown(t *testing.T) {
	e := newAgentEnv(t)
	file := writeFile(t, t.TempDir(), "crashy.hcl", crashTask)
	e.startAgent(nil, true)
	c := e.client()
	e.must("enable", file)
	var desired []map[string]json.RawMessage
	collect := func(out string) {
		for _, o := range docfields.Objects(t, out) {
			var d map[string]json.RawMessage
			if raw, ok := o["desired"]; ok && json.Unmarshal(raw, &d) == nil {
				desired = append(desired, d)
			}
		}
	}
	wait := awaitEntry(t, c, "crashy", "waiting for its reschedule", func(en agent.Entry) bool {
		return en.Standing == agent.StandingRestarting && en.Reschedules == 1
	})
	collect(e.must("status", "--all", "--json").stdout)
	if !strings.Contains(wait.Reason, "exited with code 3") || !strings.Contains(wait.Reason, "reschedule 1 of 1") || wait.NextAttempt.IsZero() {
		t.Errorf("restarting: %+v; want the failure, the reschedule and its time", wait)
	}
	down := awaitEntry(t, c, "crashy", "down", func(en agent.Entry) bool { return en.Standing == agent.StandingDown })
	if !strings.Contains(down.Reason, "exited with code 3") || !strings.Contains(down.Reason, "attempts in 1h0m0s are spent") || down.Since.IsZero() || down.Reschedules != 1 {
		t.Errorf("down: %+v; want the failure, the spent policy, since when", down)
	}
	collect(e.must("status", "--json").stdout) // its tasks ended: its row has no id
	collect(e.must("status", "--all", "--json").stdout)
	docfields.Check(t, "status --json's desired", docfields.Table(t, filepath.Join(repoRoot, "docs", "cli.md"), "### `desired` in `tether status --json"), desired)

	// The copy that was rescheduled: linked to the task it replaced, due
	// 5 s after that task ended, started no earlier.
	second := down.Task
	evs := e.events(second)
	if len(evs) == 0 || evs[0].Event != "task-created" || evs[0].Replaces == "" {
		t.Fatalf("%s's log: %+v; want its task-created to name the task it replaces", second, evs)
	}
	var spec fsm.Spec
	if err := json.Unmarshal(evs[0].Spec, &spec); err != nil || spec.Alloc == nil {
		t.Fatalf("%s's spec: %v", second, err)
	}
	first := evs[0].Replaces
	firstInfo, err := c.InspectTask(context.Background(), first)
	if err != nil {
		t.Fatal(err)
	}
	if firstInfo.Spec.Name != "crashy" || firstInfo.Restarts != 1 || firstInfo.Spec.Alloc.ID != spec.Alloc.ID || spec.Alloc.Generation != firstInfo.Spec.Alloc.Generation+1 || len(spec.Alloc.Rescheduled) != 1 || spec.Alloc.Rescheduled[0].Delay != 5*time.Second {
		t.Errorf("first %s (restarts %d, alloc %+v), second %s (alloc %+v): want one alloc, the second rescheduled once", first, firstInfo.Restarts, firstInfo.Spec.Alloc, second, spec.Alloc)
	}
	ended := time.Unix(0, firstInfo.UpdatedAt)
	due := time.Unix(0, spec.Alloc.NotBefore)
	if d := due.Sub(ended); d < 5*time.Second || d > 5*time.Second+2*time.Second {
		t.Errorf("the reschedule is due %v after the first task ended, want its 5s delay", d)
	}
	secondInfo, err := c.InspectTask(context.Background(), second)
	if err != nil {
		t.Fatal(err)
	}
	if secondInfo.State != fsm.StateExited || secondInfo.Restarts != 1 {
		t.Errorf("second: %s after %d restarts", secondInfo.State, secondInfo.Restarts)
	}
	var launched []struct {
		Event string    `json:"event"`
		Time  time.Time `json:"time"`
	}
	if err := json.Unmarshal([]byte(e.must("events", "--json", second).stdout), &launched); err != nil {
		t.Fatal(err)
	}
	for _, ev := range launched {
		if ev.Event == "spawn-intent" && ev.Time.Before(due) {
			t.Errorf("the rescheduled copy spawned at %v, before its time %v", ev.Time, due)
		}
	}
	// disable takes the entry by the name status shows.
	e.must("disable", "crashy")
	await(t, c, "crashy disabled", func(s agent.Status) bool { _, ok := s.Entry("crashy"); return !ok })
}

// zombies are the children of pid the kernel holds as zombies.
func zombies(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, d := range dirs {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// (e) The agent reaps every executor it spawned, whoever kills it: 50
// SIGKILLs of its executors (and their tasks) leave no zombie.
func TestDesired_KilledExecutorsLeaveNoZombie(t *testing.T) {
	e := newAgentEnv(t)
	dir := e.configDir()
	e.serviceFile(dir, "svc", 1000, "")
	a := e.startAgent(nil, true, "--config-dir", dir)
	c := e.client()
	prev := ""
	spawned := 0
	for i := range 50 {
		en := awaitEntry(t, c, "svc", "running again", func(en agent.Entry) bool { return running(en) && en.Task != prev })
		info, err := c.InspectTask(context.Background(), en.Task)
		if err != nil {
			t.Fatal(err)
		}
		if parentOf(info.Executor.PID) == a.pid() {
			spawned++
		}
		if err := syscall.Kill(info.Executor.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
		prev = en.Task
	}
	awaitEntry(t, c, "svc", "running after the last kill", func(en agent.Entry) bool { return running(en) && en.Task != prev })
	if spawned < 49 {
		t.Fatalf("only %d of 50 executors were the agent's children", spawned)
	}
	if z := zombies(t, a.pid()); len(z) > 0 {
		t.Errorf("the agent leaves %d zombies after 50 SIGKILLs of its executors: %v", len(z), z)
	}
}

// An old store's registrations still run: testdata/v1-desired.db is a
// store tether f79d79a wrote (desired records version 1, a lone task's
// spec each): "ran" enabled and started by that version's agent, then a
// power cut (agent, executor and task SIGKILLed); "legacy" enabled after,
// never started. A new agent records ran's old task lost and runs both,
// keeps them running, and disable stops them.
func TestDesired_V1StoreRegistrationsRun(t *testing.T) {
	e := newAgentEnv(t)
	old, err := os.ReadFile(filepath.Join("testdata", "v1-desired.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "tether.db"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	e.startAgent(nil, true)
	c := e.client()
	ctx := context.Background()
	tasks := map[string]string{}
	for _, name := range []string{"legacy", "ran"} {
		en := awaitEntry(t, c, name, "running", running)
		info, err := c.InspectTask(ctx, en.Task)
		if err != nil {
			t.Fatal(err)
		}
		if info.Spec.Name != name || info.Spec.Command != "/bin/sleep" || info.Spec.Env["TETHER_TEST_MARKER"] != "v1-store" || en.Origin != "enable" {
			t.Errorf("%s: %+v from %s; want the recorded spec's task", name, info.Spec, en.Origin)
		}
		tasks[name] = en.Task
	}
	if old, err := c.InspectTask(ctx, "ran-eef0f2"); err != nil || old.State != fsm.StateLost || tasks["ran"] == "ran-eef0f2" {
		t.Errorf("ran's task of the old agent: %s, %v; want it lost and a new one (%s)", old.State, err, tasks["ran"])
	}
	// Kept running: its task killed, it comes back.
	info, err := c.InspectTask(ctx, tasks["legacy"])
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(info.Executor.PID, syscall.SIGKILL)
	_ = syscall.Kill(info.TaskPID, syscall.SIGKILL)
	awaitEntry(t, c, "legacy", "back", func(en agent.Entry) bool { return running(en) && en.Task != tasks["legacy"] })
	for _, name := range []string{"legacy", "ran"} {
		e.must("disable", name)
	}
	await(t, c, "both disabled", func(s agent.Status) bool { return len(s.Entries) == 0 })
	for _, ts := range e.status() {
		t.Errorf("task %s (%s) is %s after its entry was disabled", ts.ID, ts.Name, ts.State)
	}
}

// flakyJob is a service whose task main exits 3 at once, never restarted,
// beside a task that sleeps: its group is rescheduled once, 5 s after it
// failed.
const flakyJob = `job "flaky" {
  group "g" {
    reschedule {
      attempts       = 1
      interval       = "1h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exit 3"]
      }
      env {
        TETHER_TEST_MARKER = %[1]q
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "other" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["1000"]
      }
      env {
        TETHER_TEST_MARKER = %[1]q
      }
    }
  }
}
`

// Daemonless, the detached tether drive-group of tether start reschedules
// its group: it lives on while the reschedule is pending, starts the new
// copy (linked to the task it replaces) no earlier than its delay, and
// exits once nothing follows.
func TestStart_DaemonlessDriveGroupReschedules(t *testing.T) {
	e := newDaemonlessEnv(t, "the detached drive-group of a daemonless start")
	file := writeFile(t, t.TempDir(), "flaky.nomad", fmt.Sprintf(flakyJob, e.dir))
	r := e.tether("start", "--min-uptime", "0", file)
	ids := strings.Fields(r.stdout)
	if len(ids) != 2 {
		t.Fatalf("start: %s", r)
	}
	var driver []int
	for _, p := range testproc.Marked(e.dir) {
		if slices.Contains(p.Args, groupDriverArg) {
			driver = append(driver, p.PID)
		}
	}
	if len(driver) != 1 {
		t.Fatalf("%d group drivers after the start, want one", len(driver))
	}
	waitExit(t, driver[0]) // the reschedule, its copy's end, nothing after
	var rows []taskJSON
	if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("want the first copy and its reschedule, two tasks each: %+v", rows)
	}
	var first, second taskJSON
	for _, row := range rows {
		switch {
		case row.Name != "main":
		case slices.Contains(ids, row.ID):
			first = row
		default:
			second = row
		}
	}
	evs := e.events(second.ID)
	var spec fsm.Spec
	if err := json.Unmarshal(evs[0].Spec, &spec); err != nil || spec.Alloc == nil {
		t.Fatalf("%s's spec: %v", second.ID, err)
	}
	if evs[0].Replaces != first.ID || second.Alloc != first.Alloc || spec.Alloc.Generation != 1 || second.State != "exited" {
		t.Errorf("the second copy's main %s (%s, replaces %q, alloc %s, generation %d): want exited, replacing %s in alloc %s",
			second.ID, second.State, evs[0].Replaces, second.Alloc, spec.Alloc.Generation, first.ID, first.Alloc)
	}
	if due := time.Unix(0, spec.Alloc.NotBefore); due.Sub(first.CreatedAt) < 5*time.Second {
		t.Errorf("the reschedule was due %v after the first copy was created, before its 5s delay", due.Sub(first.CreatedAt))
	}
}
