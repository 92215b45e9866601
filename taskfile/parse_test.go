package taskfile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/fsm"
)

func parseOK(t *testing.T, src string) (*File, hcl.Diagnostics) {
	t.Helper()
	tf, diags := Parse("t.hcl", []byte(src), Options{})
	if diags.HasErrors() {
		t.Fatalf("ParseTaskFile: %v", diags)
	}
	return tf, diags
}

func parseErr(t *testing.T, src string) string {
	t.Helper()
	tf, diags := Parse("t.hcl", []byte(src), Options{})
	if !diags.HasErrors() {
		t.Fatalf("ParseTaskFile succeeded (%+v); want an error", tf)
	}
	var lines []string
	for _, d := range diags {
		lines = append(lines, FormatDiag(d))
	}
	return strings.Join(lines, "\n")
}

func TestParseTaskFile_AllFields(t *testing.T) {
	tf, diags := parseOK(t, `
task "web" {
  driver       = "exec"
  user         = "nobody"
  kill_timeout = "10s"
  kill_signal  = "SIGINT"
  readiness    = "notify"
  watchdog     = "30s"
  config {
    command  = "/usr/bin/python3"
    args     = ["-m", "http.server"]
    cap_add  = ["net_bind_service"]
    cap_drop = ["all"]
    work_dir = "/srv"
  }
  env {
    A = "1"
    B = "two"
  }
}
`)
	if len(diags) != 0 {
		t.Errorf("unexpected diagnostics: %v", diags)
	}
	want := fsm.Spec{
		Name: "web", Driver: "exec", Command: "/usr/bin/python3", Args: []string{"-m", "http.server"},
		Env: map[string]string{"A": "1", "B": "two"}, Dir: "/srv", User: "nobody",
		CapAdd: []string{"net_bind_service"}, CapDrop: []string{"all"},
		KillSignal: 2, KillTimeout: 10 * time.Second,
		Readiness: fsm.ReadinessNotify, Watchdog: 30 * time.Second,
	}
	if len(tf.Tasks) != 1 || !reflect.DeepEqual(tf.Tasks[0].Spec, want) {
		t.Fatalf("got %+v\nwant %+v", tf.Tasks, want)
	}
}

func TestParseTaskFile_NomadJob(t *testing.T) {
	tf, diags := parseOK(t, `
job "example" {
  datacenters = ["dc1"]
  group "g" {
    count = 1
    network { mode = "host" }
    task "a" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      resources { cpu = 100 }
    }
    task "b" {
      driver = "exec"
      config {
        command = "/bin/false"
        volumes = ["x"]
      }
    }
  }
}
`)
	if got := tf.addresses(false); !reflect.DeepEqual(got, []string{"g.a", "g.b"}) {
		t.Fatalf("tasks = %v", got)
	}
	var warned []string
	for _, d := range diags {
		if d.Severity != hcl.DiagWarning {
			t.Errorf("unexpected error: %v", d)
		}
		warned = append(warned, FormatDiag(d))
	}
	text := strings.Join(warned, "\n")
	if !strings.Contains(text, `t.hcl:16:9: warning: Unsupported attribute: tether ignores the attribute "volumes"`) {
		t.Errorf("no warning names volumes with its file:line:col:\n%s", text)
	}
	for _, name := range []string{`"count"`, `"network"`, `"datacenters"`} {
		if strings.Contains(text, name) {
			t.Errorf("a warning names %s, which tether reads (count, network) or notes once (datacenters):\n%s", name, text)
		}
	}
	if len(tf.Notices) != 1 || tf.Notices[0].String() != `ignores the "datacenters" attribute (a scheduler concern)` {
		t.Errorf("notices = %v", tf.Notices)
	}
	if _, err := tf.Find(""); err == nil || !strings.Contains(err.Error(), "--task") {
		t.Errorf("Find without a name in a two-task file: %v", err)
	}
	if d, err := tf.Find("b"); err != nil || d.Spec.Command != "/bin/false" {
		t.Errorf("Find b = %+v, %v", d, err)
	}
	if _, err := tf.Find("zzz"); err == nil || !strings.Contains(err.Error(), "g.a, g.b") {
		t.Errorf("Find of a missing task: %v", err)
	}
	a, _ := tf.Find("a")
	if a.Spec.Resources.CPU != 100 || a.Spec.Job != "example" || a.Spec.Group != "g" {
		t.Errorf("task a: resources %+v job %q group %q", a.Spec.Resources, a.Spec.Job, a.Spec.Group)
	}
	// No restart block in a job: Nomad's default for a service job.
	if a.Spec.Restart == nil || *a.Spec.Restart != fsm.DefaultServiceRestart {
		t.Errorf("task a's restart policy %+v, want the service default", a.Spec.Restart)
	}
}

func TestParseTaskFile_ServiceBlocks(t *testing.T) {
	tf, diags := parseOK(t, `
job "j" {
  type = "batch"
  group "g" {
    restart { attempts = 1 }
    task "inherits" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
    task "own" {
      driver = "exec"
      config {
        command       = "/bin/true"
        pid_mode      = "host"
        ipc_mode      = "host"
        oom_score_adj = 500
      }
      resources {
        memory     = 64
        memory_max = 128
        cores      = 1
        pids       = 20
      }
      logs {
        max_files     = 2
        max_file_size = 1
      }
      restart {
        attempts = 3
        interval = "1m"
        delay    = "2s"
        mode     = "delay"
      }
    }
  }
}
`)
	if len(diags) != 0 {
		t.Errorf("unexpected diagnostics: %v", diags)
	}
	in, _ := tf.Find("inherits")
	want := fsm.DefaultBatchRestart
	want.Attempts = 1
	if in.Spec.Restart == nil || *in.Spec.Restart != want {
		t.Errorf("inherited restart %+v, want the group's over the batch default %+v", in.Spec.Restart, want)
	}
	own, _ := tf.Find("own")
	s := own.Spec
	if s.Resources != (fsm.Resources{MemoryMB: 64, MemoryMaxMB: 128, Cores: 1, PIDs: 20}) {
		t.Errorf("resources %+v", s.Resources)
	}
	if s.Logs != (fsm.LogConfig{MaxFiles: 2, MaxFileSizeMB: 1}) {
		t.Errorf("logs %+v", s.Logs)
	}
	if s.Restart == nil || *s.Restart != (fsm.RestartPolicy{Attempts: 3, Interval: time.Minute, Delay: 2 * time.Second, Mode: fsm.RestartDelay}) {
		t.Errorf("restart %+v (a batch job's task does not restart a successful exit)", s.Restart)
	}
	if s.PIDMode != "host" || s.IPCMode != "host" || s.OOMScoreAdj == nil || *s.OOMScoreAdj != 500 {
		t.Errorf("modes %q %q oom_score_adj %v", s.PIDMode, s.IPCMode, s.OOMScoreAdj)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("the parsed spec does not validate: %v", err)
	}
	// A task file without a job restarts only with a restart block.
	tf, _ = parseOK(t, `task "x" {
  driver = "raw_exec"
  config { command = "/bin/true" }
}`)
	if tf.Tasks[0].Spec.Restart != nil {
		t.Errorf("a bare task got a restart policy: %+v", tf.Tasks[0].Spec.Restart)
	}
	for name, src := range map[string]string{
		"negative memory": `resources { memory = -1 }`,
		"memory over max": `resources { memory = 256
  memory_max = 128 }`,
		"fractional cpu":   `resources { cpu = 1.5 }`,
		"zero log files":   `logs { max_files = 0 }`,
		"bad restart mode": `restart { mode = "sometimes" }`,
		"bad interval":     `restart { interval = "soon" }`,
	} {
		msg := parseErr(t, "task \"x\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  "+src+"\n}\n")
		if !strings.Contains(msg, "t.hcl:") {
			t.Errorf("%s: the error does not say where: %s", name, msg)
		}
	}
}

func TestParseTaskFile_UnknownAttributeWarns(t *testing.T) {
	_, diags := parseOK(t, `
task "x" {
  driver = "raw_exec"
  leeder = true
  config { command = "/bin/true" }
}
`)
	if len(diags) != 1 || diags[0].Severity != hcl.DiagWarning || !strings.Contains(FormatDiag(diags[0]), `t.hcl:4:3: warning: Unsupported attribute: tether ignores the attribute "leeder"`) {
		t.Fatalf("diags = %v", diags)
	}
}

func TestParseTaskFile_Errors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"syntax", "task \"x\" {\n  driver = \n}\n", "t.hcl:2:"},
		{"bad driver", `task "x" {
  driver = "docker"
  config { command = "/bin/true" }
}`, `t.hcl:2:12: error: Unsupported driver: Task "x" has driver "docker"`},
		{"no driver", `task "x" {
  config { command = "/bin/true" }
}`, "Missing driver"},
		{"no config", `task "x" { driver = "exec" }`, "Missing config block"},
		{"no command", `task "x" {
  driver = "exec"
  config { args = ["a"] }
}`, "Missing command"},
		{"empty command", `task "x" {
  driver = "exec"
  config { command = "" }
}`, "Empty command"},
		{"wrong type", `task "x" {
  driver = "exec"
  config {
    command = "/bin/true"
    args = "notalist"
  }
}`, "t.hcl:5:12: error: Wrong type"},
		{"bad timeout", `task "x" {
  driver = "exec"
  kill_timeout = "soon"
  config { command = "/bin/true" }
}`, "t.hcl:3:18: error: Bad kill_timeout"},
		{"bad readiness", `task "x" {
  driver = "exec"
  readiness = "grpc"
  config { command = "/bin/true" }
}`, `t.hcl:3:15: error: Bad readiness: readiness is "grpc"`},
		{"bad watchdog", `task "x" {
  driver = "exec"
  readiness = "notify"
  watchdog = "often"
  config { command = "/bin/true" }
}`, `t.hcl:4:14: error: Bad watchdog: "often" is not a positive duration`},
		{"short watchdog", `task "x" {
  driver = "exec"
  readiness = "notify"
  watchdog = "1ms"
  config { command = "/bin/true" }
}`, `Bad watchdog: "1ms" is shorter than the 100ms minimum`},
		{"watchdog without notify", `task "x" {
  driver = "exec"
  watchdog = "30s"
  config { command = "/bin/true" }
}`, `t.hcl:3:14: error: Watchdog without notify: Task "x" sets watchdog but not readiness = "notify"`},
		{"bad signal", `task "x" {
  driver = "exec"
  kill_signal = "SIGNOPE"
  config { command = "/bin/true" }
}`, "Bad kill_signal"},
		{"variables", `task "x" {
  driver = "exec"
  config { command = var.x }
}`, "t.hcl:3:22: error: Undeclared variable: var.x is not declared in this file"},
		{"duplicate task", `task "x" {
  driver = "exec"
  config { command = "/bin/true" }
}
task "x" {
  driver = "exec"
  config { command = "/bin/true" }
}`, `t.hcl:5:6: error: Duplicate task: A task named "x" is already declared at t.hcl:1:6`},
		{"no label", `task {
  driver = "exec"
  config { command = "/bin/true" }
}`, "Bad task block"},
		{"empty file", ``, "No task in file"},
		{"null", `task "x" {
  driver = null
  config { command = "/bin/true" }
}`, "Missing value"},
		{"null in list", `task "x" {
  driver = "exec"
  config {
    command = "/bin/true"
    args = ["a", null]
  }
}`, "must not hold null"},
		{"negative count", `job "j" {
  group "g" {
    count = -1
    task "x" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`, "t.hcl:3:13: error: Bad count: count is -1; it must not be negative."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErr(t, tc.src)
			if !strings.Contains(got, tc.want) {
				t.Fatalf("diagnostics do not contain %q:\n%s", tc.want, got)
			}
		})
	}
}

func TestParseTaskFile_Examples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.hcl")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tf, diags := Parse(f, src, Options{})
		if len(diags) != 0 {
			t.Errorf("%s: %v", f, diags)
			continue
		}
		if len(tf.Tasks) != 1 {
			t.Errorf("%s: %d tasks", f, len(tf.Tasks))
		}
	}
}

func TestParseSignal_NamesAndNumbers(t *testing.T) {
	for in, want := range map[string]int{"SIGTERM": 15, "term": 15, "INT": 2, "9": 9, "SIGKILL": 9} {
		got, err := ParseSignal(in)
		if err != nil || int(got) != want {
			t.Errorf("ParseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "SIGFOO", "0", "-1", "99"} {
		if _, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) succeeded", in)
		}
	}
}

// TestParse_RestartRulesAfterTheJobTypesDefaults: a restart block is held
// to Nomad's rules once the defaults of its job type are merged in: a
// block that sets only attempts and delay takes the default interval (30m
// for a service, 24h for a batch job) and is valid when they fit in it;
// the policies issue 27 found restarting without bound are refused, with
// the reason and the place in the file.
func TestParse_RestartRulesAfterTheJobTypesDefaults(t *testing.T) {
	job := func(typ, restart string) string {
		return `job "j" {
  type = "` + typ + `"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      ` + restart + `
    }
  }
}
`
	}
	for name, tc := range map[string]struct{ src, want string }{
		"interval 1ns": {job("service", `restart {
        attempts = 2
        mode     = "fail"
        interval = "1ns"
        delay    = "100ms"
      }`), "interval can not be less than 5s (got 1ns)"},
		"interval 1s": {job("service", `restart {
        interval = "1s"
        delay    = "600ms"
      }`), "interval can not be less than 5s (got 1s)"},
		"attempts x delay past the default interval": {job("service", `restart {
        attempts = 40
        delay    = "1m"
      }`), "can't restart the task 40 times in an interval of 30m0s with a delay of 1m0s"},
		"delay mode, no attempts": {job("batch", `restart {
        attempts = 0
        mode     = "delay"
      }`), `restart policy "delay" with 0 attempts is ambiguous`},
	} {
		msg := parseErr(t, tc.src)
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "t.hcl:") {
			t.Errorf("%s: %s; want %q and where", name, msg, tc.want)
		}
	}
	for name, tc := range map[string]struct {
		src  string
		want fsm.RestartPolicy
	}{
		"service, attempts and delay": {job("service", `restart {
        attempts = 10
        delay    = "1m"
      }`), fsm.RestartPolicy{Attempts: 10, Interval: 30 * time.Minute, Delay: time.Minute, Mode: fsm.RestartFail, OnSuccess: true}},
		"batch, attempts and delay": {job("batch", `restart {
        attempts = 100
        delay    = "10m"
      }`), fsm.RestartPolicy{Attempts: 100, Interval: 24 * time.Hour, Delay: 10 * time.Minute, Mode: fsm.RestartFail}},
	} {
		tf, _ := parseOK(t, tc.src)
		if got := tf.Tasks[0].Spec.Restart; got == nil || *got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}

// TestSniff_TaskOrJobBlockAtTheTop: a file is a task file by its form (a
// task or job block at its top level), even when what is in it is wrong,
// and no other file is one.
func TestSniff_TaskOrJobBlockAtTheTop(t *testing.T) {
	for src, want := range map[string]bool{
		"task \"web\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n}\n": true,
		"job \"j\" {\n  group \"g\" {\n    task \"t\" {}\n  }\n}\n":                          true,
		"task \"web\" {\n  driver = \"docker\"\n  no_such = 1\n}\n":                          true, // Parse refuses it, by name
		"variable \"v\" {}\ngroup \"g\" {}\n":                                                false,
		"name = \"web\"\n":                                                                   false,
		"# A README\n\nRun `tether run web.hcl`.\n":                                          false,
		"{\"task\": {\"web\": {}}}\n":                                                        false,
		"task \"web\" {\n":                                                                   false, // not HCL
		"":                                                                                   false,
		"  task  \"x\"  {  }  ":                                                              true,
		"\xff\xfe task \"x\" {}":                                                             false,
		"locals {\n  a = 1\n}\njob \"j\" {\n  task \"t\" {}\n}\n":                            true,
		"resource \"task\" \"x\" {}\n":                                                       false,
		"task_name = \"x\"\n":                                                                false,
		"job = \"x\"\n":                                                                      false,
		"jobs \"x\" {}\n":                                                                    false,
		"Task \"x\" {}\n":                                                                    false,
	} {
		if got := Sniff("f", []byte(src)); got != want {
			t.Errorf("Sniff(%q) = %v, want %v", src, got, want)
		}
	}
}

// TestParse_ResourceValues: the values issue 27 found misread: a number
// past the parser's range is refused as out of range (not "must be a whole
// number"), an explicit 0 is refused as Nomad refuses memory and cpu of 0
// (an attribute left out is no limit), and the rules of Nomad and of the
// kernel (minimum memory, cpu or cores, the kernel's ranges) are said
// where the block is.
func TestParse_ResourceValues(t *testing.T) {
	for name, tc := range map[string]struct{ res, want string }{
		"memory past the range": {"memory = 1000000000000", "memory = 1000000000000 is out of range: it must be between -2147483648 and 2147483647"},
		"fractional":            {"cpu = 1.5", "cpu = 1.5: it must be a whole number"},
		"memory 0":              {"memory = 0", "memory = 0 is below Nomad's minimum of 10 MB; leave memory out for no limit"},
		"cpu 0":                 {"cpu = 0", "cpu = 0 is below Nomad's minimum of 1 MHz; leave cpu out for no limit"},
		"cores 0":               {"cores = 0", "cores = 0 would pin the task to no CPU"},
		"pids 0":                {"pids = 0", "pids = 0 would let the task run no process"},
		"memory_max 0":          {"memory = 64\n  memory_max = 0", "memory_max = 0 is below memory"},
		"memory 5":              {"memory = 5", "resources.memory = 5 MB is below Nomad's minimum of 10 MB"},
		"cpu and cores":         {"cpu = 100\n  cores = 1", "can only ask for cpu or cores, not both"},
		"cpu past the kernel":   {"cpu = 300000", "resources.cpu = 300000 MHz is more than 262144"},
		"pids past the kernel":  {"pids = 5000000", "resources.pids = 5000000 is more than the kernel allows"},
	} {
		msg := parseErr(t, "task \"x\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  resources {\n  "+tc.res+"\n  }\n}\n")
		if !strings.Contains(msg, tc.want) || !strings.Contains(msg, "t.hcl:") {
			t.Errorf("%s: %s\nwant %q and where", name, msg, tc.want)
		}
	}
	tf, _ := parseOK(t, "task \"x\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  resources {\n  memory = 2000000\n  }\n}\n")
	if got := tf.Tasks[0].Spec.Resources.MemoryMB; got != 2000000 {
		t.Errorf("memory = 2000000 (2 TB) parsed as %d: it is valid (the host's RAM is the launch's to warn of)", got)
	}
}

// TestJobType_Batch: batch and sysbatch jobs run to completion; service
// and system jobs do not.
func TestJobType_Batch(t *testing.T) {
	for typ, want := range map[JobType]bool{JobService: false, JobBatch: true, JobSystem: false, JobSysbatch: true} {
		if typ.Batch() != want {
			t.Errorf("%s.Batch() = %v, want %v", typ, !want, want)
		}
	}
}

// A lifecycle task that is no sidecar runs to completion even in a
// service job (whose default restarts a successful exit): a prestart task
// that exits 0 is done, as in Nomad; a sidecar and a main task keep the
// job's default.
func TestParse_LifecycleTasksRunToCompletion(t *testing.T) {
	src := `job "j" {
  group "g" {
    task "init" {
      driver = "raw_exec"
      lifecycle { hook = "prestart" }
      config { command = "/bin/true" }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { command = "/bin/true" }
    }
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
    task "clean" {
      driver = "raw_exec"
      lifecycle { hook = "poststop" }
      restart { attempts = 5 }
      config { command = "/bin/true" }
    }
  }
}`
	f, diags := Parse("j.nomad", []byte(src), Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := map[string]bool{"init": false, "side": true, "web": true, "clean": false}
	for _, task := range f.Tasks {
		r := task.Spec.Restart
		if r == nil || r.OnSuccess != want[task.Name] {
			t.Errorf("%s: restart %+v, want on_success %v", task.Name, r, want[task.Name])
		}
	}
	if r := f.Tasks[3].Spec.Restart; r.Attempts != 5 {
		t.Errorf("clean's own restart block was lost: %+v", r)
	}
}

// TestParse_TaskRestartMergedOverTheGroups: a task's restart block is
// merged over its group's (Nomad's restart docs, their example): what the
// task's block leaves out is the group's, not the job type's default; a
// task without a block takes the group's whole.
func TestParse_TaskRestartMergedOverTheGroups(t *testing.T) {
	tf, _ := parseOK(t, `job "j" {
  group "g" {
    restart {
      interval = "10m"
      attempts = 2
      delay    = "5s"
      mode     = "delay"
    }
    task "own" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      restart {
        attempts = 5
      }
    }
    task "inherits" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
`)
	group := fsm.RestartPolicy{Attempts: 2, Interval: 10 * time.Minute, Delay: 5 * time.Second, Mode: fsm.RestartDelay, OnSuccess: true}
	own := group
	own.Attempts = 5
	for name, want := range map[string]fsm.RestartPolicy{"own": own, "inherits": group} {
		task, err := tf.Find(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := task.Spec.Restart; got == nil || *got != want {
			t.Errorf("task %s: restart %+v, want %+v", name, got, want)
		}
	}
	// Merged, the policy is held to Nomad's rules: 5 attempts of the
	// group's 5s delay fit its 10m, 200 of them do not.
	msg := parseErr(t, `job "j" {
  group "g" {
    restart {
      interval = "10m"
      delay    = "5s"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      restart {
        attempts = 200
      }
    }
  }
}
`)
	if !strings.Contains(msg, "can't restart the task 200 times in an interval of 10m0s with a delay of 5s") {
		t.Errorf("200 attempts over the group's 10m and 5s: %s", msg)
	}
}
