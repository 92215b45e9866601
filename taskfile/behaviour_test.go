package taskfile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
)

func parseJob(t *testing.T, src string, opts Options) *File {
	t.Helper()
	f, diags := Parse("j.nomad", []byte(src), opts)
	if diags.HasErrors() {
		t.Fatalf("Parse: %v", diags)
	}
	return f
}

func parseFails(t *testing.T, src string, opts Options) string {
	t.Helper()
	f, diags := Parse("j.nomad", []byte(src), opts)
	if !diags.HasErrors() {
		t.Fatalf("Parse succeeded (%+v); want an error", f)
	}
	var l []string
	for _, d := range diags {
		l = append(l, FormatDiag(d))
	}
	return strings.Join(l, "\n")
}

func testHost() *Host {
	return &Host{
		Attrs: map[string]string{"kernel.name": "linux", "kernel.version": "6.1.0", "cpu.arch": "amd64", "cpu.numcores": "8",
			"os.signals": "SIGHUP,SIGINT,SIGTERM", "unique.hostname": "box"},
		Node: map[string]string{"unique.name": "box", "datacenter": "dc1", "class": "web"},
		Meta: map[string]string{"rack": "r1", "shared": "node"},
		IP:   "127.0.0.1",
	}
}

func instantiate(t *testing.T, f *File, sel string, a Alloc) (*Instance, error) {
	t.Helper()
	task, err := f.Find(sel)
	if err != nil {
		return nil, err
	}
	if a.Host == nil {
		a.Host = testHost()
	}
	layout := taskdir.Layout{TaskDir: "/state/a1/" + task.Name, AllocDir: "/state/a1/alloc", Chroot: task.Driver == "exec"}
	return f.Instantiate(task, a, layout)
}

// TestInstantiate_RunTimeReferences: what Nomad interpolates when the
// task runs reaches Instantiate as text and is resolved there; "$${" stays
// a literal "${".
func TestInstantiate_RunTimeReferences(t *testing.T) {
	f := parseJob(t, `
variable "port" {
  type    = number
  default = 8080
}
job "j" {
  meta { owner = "ops" }
  group "g" {
    meta { shared = "group" }
    network {
      port "http" {}
    }
    task "t" {
      driver = "raw_exec"
      meta { level = "${node.class}-x" }
      env {
        HOMEDIR = "${env["HOME"]}"
        LIT     = "$${HOME}"
        PORT    = "${NOMAD_PORT_http}"
      }
      config {
        command = "${NOMAD_TASK_DIR}/bin/app"
        args = ["--dc=${node.datacenter}", "--arch", attr.cpu.arch, "--meta=${meta.owner}/${meta.shared}/${meta.level}/${meta.rack}",
                "--port=${var.port}", "--env=${env.HOMEDIR}", "${upper("x")}", "--alloc=${NOMAD_ALLOC_DIR}", "--lit=${LIT}"]
      }
      template {
        data        = "port={{ env \"NOMAD_PORT_http\" }} literal=${NOMAD_TASK_DIR}"
        destination = "${NOMAD_SECRETS_DIR}/app.conf"
      }
      artifact {
        source      = "https://example.com/${attr.cpu.arch}/app.tgz"
        destination = "${NOMAD_ALLOC_DIR}/app"
      }
    }
  }
}`, Options{})
	in, err := instantiate(t, f, "t", Alloc{ID: "0123456789abcdef", BaseEnv: map[string]string{"HOME": "/home/task", "PATH": "/bin"},
		Ports: []Port{{Label: "http", Value: 23456, IP: "127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := in.Spec
	want := []string{"--dc=dc1", "--arch", "amd64", "--meta=ops/group/web-x/r1", "--port=8080", "--env=/home/task", "X", "--alloc=/state/a1/alloc", "--lit=${HOME}"}
	if s.Command != "/state/a1/t/local/bin/app" || strings.Join(s.Args, " ") != strings.Join(want, " ") {
		t.Errorf("command %q args %q\nwant args %q", s.Command, s.Args, want)
	}
	for k, v := range map[string]string{"HOMEDIR": "/home/task", "LIT": "${HOME}", "PORT": "23456", "NOMAD_META_owner": "ops", "NOMAD_META_OWNER": "ops",
		"NOMAD_META_shared": "group", "NOMAD_ALLOC_ID": "0123456789abcdef", "NOMAD_SHORT_ALLOC_ID": "01234567", "NOMAD_ADDR_http": "127.0.0.1:23456",
		"NOMAD_ALLOC_NAME": "j.g[0]", "NOMAD_DC": "dc1", "NOMAD_REGION": "global", "NOMAD_NAMESPACE": "default"} {
		if s.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, s.Env[k], v)
		}
	}
	if _, ok := s.Env["PATH"]; ok {
		t.Errorf("the base environment leaked into the spec's env: %v", s.Env)
	}
	if s.Dir != "/state/a1/t" {
		t.Errorf("working directory %q: Nomad starts a raw_exec task in its task directory", s.Dir)
	}
	if in.Templates[0].Destination != "/state/a1/t/secrets/app.conf" || in.Templates[0].Data != `port={{ env "NOMAD_PORT_http" }} literal=${NOMAD_TASK_DIR}` {
		t.Errorf("template %+v", in.Templates[0])
	}
	if a := in.Artifacts[0]; a.Source != "https://example.com/amd64/app.tgz" || a.Destination != "/state/a1/alloc/app" {
		t.Errorf("artifact %+v", a)
	}
}

// TestInstantiate_UnknownReferenceNamed: a reference nothing resolves is
// an error naming it, never left in place nor HCL's error.
func TestInstantiate_UnknownReferenceNamed(t *testing.T) {
	for ref, says := range map[string]string{
		`${attr.no.such}`:     `this host has no attribute "no.such"`,
		`${node.nope}`:        "tether knows no node.nope",
		`${meta.missing}`:     `no meta key "missing"`,
		`${NOMAD_PORT_http}`:  "the task's environment has no NOMAD_PORT_http",
		`${env["UNSET"]}`:     "the task's environment has no UNSET",
		`${foo.bar}`:          `"foo" is not something tether interpolates`,
		`${NOMAD_UPSTREAM_X}`: "has no NOMAD_UPSTREAM_X",
	} {
		f := parseJob(t, `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = ["`+ref+`"]
      }
    }
  }
}`, Options{})
		_, err := instantiate(t, f, "t", Alloc{})
		if !errors.Is(err, ErrUnknownReference) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), `task "g.t"`) {
			t.Errorf("%s: %v; want %q", ref, err, says)
		}
	}
}

func TestParse_ParseTimeErrorsNamed(t *testing.T) {
	for src, says := range map[string]string{
		`command = upper(NOMAD_TASK_DIR)`:      "Run-time value in a parse-time expression: NOMAD_TASK_DIR is known only when the task runs",
		`command = "${var.nope}"`:              `Undeclared variable: var.nope is not declared in this file`,
		`command = "${local.nope}"`:            "Undeclared local value",
		`command = "${attr.x == "a" ? 1 : 2}"`: "Run-time value in a parse-time expression: attr.x",
	} {
		msg := parseFails(t, `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { `+src+` }
    }
  }
}`, Options{})
		if !strings.Contains(msg, says) || strings.Contains(msg, "Variables not allowed") {
			t.Errorf("%s:\n%s\nwant %q", src, msg, says)
		}
	}
	msg := parseFails(t, `job "j" {
  group "g" {
    task "t" {
      driver = "${NOMAD_DRIVER}"
      config { command = "x" }
    }
  }
}`, Options{})
	if !strings.Contains(msg, "driver is not interpolated when the task runs, so ${NOMAD_DRIVER} cannot be used in it") {
		t.Errorf("a reference where Nomad does not interpolate:\n%s", msg)
	}
}

func TestParse_Variables(t *testing.T) {
	src := `
variable "name" { type = string }
variable "n" {
  type    = number
  default = 1
  validation {
    condition     = var.n < 10
    error_message = "n must be below 10."
  }
}
variable "on" { type = bool }
variable "list" {
  type    = list(string)
  default = []
}
locals {
  greeting = "${local.prefix} ${var.name}"
  prefix   = upper("hi")
}
job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = concat([local.greeting, "${var.n}", "${var.on}"], var.list)
      }
    }
  }
}`
	f := parseJob(t, src, Options{
		Env:      map[string]string{"NOMAD_VAR_name": "env", "NOMAD_VAR_on": "false"},
		VarFiles: []VarFile{{Name: "v.hcl", Src: []byte("name = \"file\"\nlist = [\"x\", \"y\"]\n")}},
		Vars:     map[string]string{"n": "7", "on": "true"},
	})
	if got := strings.Join(f.Tasks[0].Spec.Args, "|"); got != "HI file|7|true|x|y" {
		t.Errorf("args %q: want -var over the var file over NOMAD_VAR_", got)
	}
	// The environment alone gives a value, over a default.
	f = parseJob(t, src, Options{Env: map[string]string{"NOMAD_VAR_name": "env", "NOMAD_VAR_on": "false", "NOMAD_VAR_n": "3"}})
	if got := strings.Join(f.Tasks[0].Spec.Args, "|"); got != "HI env|3|false" {
		t.Errorf("args %q: want the NOMAD_VAR_ values, over n's default", got)
	}
	for _, tc := range []struct {
		opts Options
		says string
	}{
		{Options{Vars: map[string]string{"on": "true"}}, `Variable "name" has no default and no value was given: set it with -var name=VALUE`},
		{Options{Vars: map[string]string{"name": "x", "on": "maybe"}}, `Variable "on" must be a bool; -var gave "maybe"`},
		{Options{Vars: map[string]string{"name": "x", "on": "true", "n": "12"}}, `Variable "n": n must be below 10.`},
		{Options{Vars: map[string]string{"name": "x", "on": "true", "zzz": "1"}}, `-var zzz=...: the file declares no variable "zzz"`},
	} {
		if msg := parseFails(t, src, tc.opts); !strings.Contains(msg, tc.says) {
			t.Errorf("%+v:\n%s\nwant %q", tc.opts, msg, tc.says)
		}
	}
	if msg := parseFails(t, `locals {
  a = local.b
  b = local.a
}
task "t" {
  driver = "raw_exec"
  config { command = local.a }
}`, Options{}); !strings.Contains(msg, "depends on itself") {
		t.Errorf("a cycle of locals:\n%s", msg)
	}
}

// TestParse_Structure: a task directly under job, one task name in
// several groups, a docker task elsewhere, count, lifecycle.
func TestParse_Structure(t *testing.T) {
	f := parseJob(t, `job "j" {
  task "solo" {
    driver = "raw_exec"
    config { command = "/bin/true" }
  }
  group "a" {
    count = 2
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
    task "init" {
      driver = "exec"
      lifecycle { hook = "prestart" }
      config { command = "/bin/true" }
    }
    task "log" {
      driver = "raw_exec"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config { command = "/bin/true" }
    }
    task "cleanup" {
      driver = "raw_exec"
      lifecycle { hook = "poststop" }
      config { command = "/bin/true" }
    }
    task "dock" {
      driver = "docker"
      config { image = "redis" }
    }
  }
  group "b" {
    task "web" {
      driver = "exec"
      leader = true
      config { command = "/bin/true" }
    }
  }
}`, Options{})
	if got := strings.Join(f.addresses(false), ","); got != "solo.solo,a.web,a.init,a.log,a.cleanup,a.dock,b.web" {
		t.Errorf("tasks %s", got)
	}
	solo, err := f.Find("solo")
	if err != nil || f.Name(solo) != "solo" || f.InstanceName(solo, 0) != "solo" {
		t.Errorf("a task directly under job: %v %v", solo, err)
	}
	if _, err := f.Find("web"); !errors.Is(err, ErrNoTask) || !strings.Contains(err.Error(), "a.web, b.web") {
		t.Errorf("an ambiguous name: %v", err)
	}
	aweb, err := f.Find("a.web")
	if err != nil || f.Name(aweb) != "a.web" || f.InstanceName(aweb, 1) != "a.web[1]" {
		t.Errorf("a.web: %v %v", aweb, err)
	}
	if init, _ := f.Find("init"); f.InstanceName(init, 0) != "init[0]" {
		t.Errorf("a unique name in a counted group: %s", f.InstanceName(init, 0))
	}
	if _, err := f.Find("dock"); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `driver "docker"`) {
		t.Errorf("a docker task: %v", err)
	}
	gp, err := f.PlanGroup("a")
	if err != nil {
		t.Fatal(err)
	}
	names := func(ts []*Task) string {
		var l []string
		for _, t := range ts {
			l = append(l, t.Name)
		}
		return strings.Join(l, ",")
	}
	if names(gp.Prestart) != "init" || names(gp.Main) != "web" || names(gp.Poststart) != "log" || names(gp.Poststop) != "cleanup" || names(gp.NotRun) != "dock" || !gp.Poststart[0].Lifecycle.Sidecar {
		t.Errorf("plan: prestart %s main %s poststart %s poststop %s not run %s", names(gp.Prestart), names(gp.Main), names(gp.Poststart), names(gp.Poststop), names(gp.NotRun))
	}
	if names(gp.Tasks()) != "init,web,log,cleanup" {
		t.Errorf("start order %s", names(gp.Tasks()))
	}
	bweb, _ := f.Find("b.web")
	if !bweb.Leader {
		t.Errorf("leader not kept")
	}
	for i := 0; i < 2; i++ {
		in, err := instantiate(t, f, "a.web", Alloc{Index: i})
		if err != nil || in.Spec.Env["NOMAD_ALLOC_INDEX"] != strconv.Itoa(i) || in.Spec.Env["NOMAD_TASK_NAME"] != "web" || in.Spec.Name != fmt.Sprintf("a.web[%d]", i) {
			t.Errorf("copy %d: %+v %v", i, in, err)
		}
	}
	if _, err := instantiate(t, f, "a.web", Alloc{Index: 2}); err == nil {
		t.Errorf("an index past count was instantiated")
	}
	if !strings.Contains(noticesText(f), `does not run task "a.dock" (driver "docker": tether runs exec and raw_exec)`) {
		t.Errorf("notices: %s", noticesText(f))
	}
	for src, says := range map[string]string{
		`group "g" {
    task "x" {
      driver = "raw_exec"
      config { command = "a" }
    }
    task "x" {
      driver = "raw_exec"
      config { command = "a" }
    }
  }`: `Duplicate task: Group "g" already has a task named "x"`,
		`group "g" {
    task "x" {
      driver = "raw_exec"
      lifecycle { hook = "sometime" }
      config { command = "a" }
    }
  }`: `hook is "sometime"`,
	} {
		if msg := parseFails(t, "job \"j\" {\n  "+src+"\n}", Options{}); !strings.Contains(msg, says) {
			t.Errorf("%s\nwant %q", msg, says)
		}
	}
	f = parseJob(t, `job "j" {
  group "g" {
    task "p" {
      driver = "raw_exec"
      lifecycle { hook = "prestart" }
      config { command = "a" }
    }
  }
}`, Options{})
	if _, err := f.PlanGroup("g"); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), "no main task") {
		t.Errorf("a group of hooks only: %v", err)
	}
}

func TestParse_NetworkAndNotices(t *testing.T) {
	f := parseJob(t, `job "j" {
  datacenters = ["dc1"]
  migrate { max_parallel = 1 }
  group "a" {
    migrate { max_parallel = 1 }
    update { canary = 1 }
    network {
      mode = "bridge"
      port "x" {}
    }
    task "t" {
      driver = "raw_exec"
      config { command = "a" }
    }
  }
  group "b" {
    migrate { max_parallel = 2 }
    network {
      mode = "none"
      port "y" { static = 8080 }
    }
    task "t" {
      driver = "raw_exec"
      config { command = "a" }
    }
  }
  group "c" {
    network {
      port "s" {
        static = 9999
        to     = 80
      }
    }
    task "t" {
      driver = "raw_exec"
      resources {
        disk = 100
        network {
          port "own" {}
        }
      }
      config { command = "a" }
    }
  }
}`, Options{})
	n := 0
	for _, x := range f.Notices {
		if x.Name == "migrate" {
			n++
			if x.Count != 3 || x.String() != `ignores the "migrate" block (a scheduler concern)` {
				t.Errorf("notice %+v", x)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d migrate notices, want one for the file:\n%s", n, noticesText(f))
	}
	if _, err := f.PlanGroup("a"); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `network mode "bridge": tether has no bridge networking`) {
		t.Errorf("bridge: %v", err)
	}
	if _, err := f.PlanGroup("b"); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `a port in network mode "none"`) {
		t.Errorf("a port with mode none: %v", err)
	}
	gp, err := f.PlanGroup("c")
	if err != nil {
		t.Fatal(err)
	}
	reqs := gp.PortRequests()
	if len(reqs) != 2 || reqs[0].Label != "s" || reqs[0].Static != 9999 || reqs[0].To != 80 || reqs[1].Label != "own" || reqs[1].Task != "t" {
		t.Errorf("port requests %+v", reqs)
	}
	in, err := instantiate(t, f, "c.t", Alloc{Ports: []Port{{Label: "s", Value: 9999, To: 80, IP: "127.0.0.1"}, {Label: "own", Value: 20001, IP: "127.0.0.1", Task: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"NOMAD_PORT_s": "80", "NOMAD_HOST_PORT_s": "9999", "NOMAD_ADDR_s": "127.0.0.1:9999", "NOMAD_PORT_own": "20001", "NOMAD_IP_own": "127.0.0.1"} {
		if in.Spec.Env[k] != v {
			t.Errorf("%s = %q, want %q", k, in.Spec.Env[k], v)
		}
	}
	if _, err := instantiate(t, f, "c.t", Alloc{}); !errors.Is(err, ErrPorts) {
		t.Errorf("instantiating without the ports: %v", err)
	}
}

func TestConstraint_Operators(t *testing.T) {
	h := testHost()
	for _, tc := range []struct {
		c  Constraint
		ok bool
	}{
		{Constraint{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"}, true},
		{Constraint{Attribute: "${attr.kernel.name}", Operator: "=", Value: "windows"}, false},
		{Constraint{Attribute: "${attr.kernel.name}", Operator: "!=", Value: "windows"}, true},
		{Constraint{Attribute: "${attr.missing}", Operator: "!=", Value: "x"}, true},
		{Constraint{Attribute: "${attr.missing}", Operator: "=", Value: "x"}, false},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: ">=", Value: "4"}, true},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: "<", Value: "10"}, true},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: ">", Value: "10"}, false},
		// At the bound (numcores is 8): each operator's side of equality.
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: "<=", Value: "8"}, true},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: "<=", Value: "7"}, false},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: ">=", Value: "8"}, true},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: ">=", Value: "9"}, false},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: "<", Value: "8"}, false},
		{Constraint{Attribute: "${attr.cpu.numcores}", Operator: ">", Value: "8"}, false},
		{Constraint{Attribute: "${attr.kernel.name}", Operator: "<=", Value: "linux"}, true},
		{Constraint{Attribute: "${attr.kernel.name}", Operator: ">=", Value: "linux"}, true},
		{Constraint{Attribute: "${attr.kernel.version}", Operator: "version", Value: ">= 5.4, < 7"}, true},
		{Constraint{Attribute: "${attr.kernel.version}", Operator: "version", Value: "< 5"}, false},
		{Constraint{Attribute: "${attr.kernel.version}", Operator: "semver", Value: "~> 6.1"}, true},
		{Constraint{Attribute: "${attr.unique.hostname}", Operator: "regexp", Value: "^b.x$"}, true},
		{Constraint{Attribute: "${attr.os.signals}", Operator: "set_contains", Value: "SIGHUP,SIGTERM"}, true},
		{Constraint{Attribute: "${attr.os.signals}", Operator: "set_contains", Value: "SIGHUP,SIGUSR1"}, false},
		{Constraint{Attribute: "${attr.os.signals}", Operator: "set_contains_any", Value: "SIGUSR1,SIGINT"}, true},
		{Constraint{Attribute: "${attr.cpu.arch}", Operator: "is_set"}, true},
		{Constraint{Attribute: "${attr.gpu}", Operator: "is_set"}, false},
		{Constraint{Attribute: "${attr.gpu}", Operator: "is_not_set"}, true},
		{Constraint{Attribute: "${node.class}", Operator: "=", Value: "web"}, true},
		{Constraint{Attribute: "${meta.rack}", Operator: "=", Value: "r1"}, true},
		{Constraint{Attribute: "${node.datacenter}", Operator: "=", Value: "${node.datacenter}"}, true},
		{Constraint{Operator: "distinct_hosts"}, true},
	} {
		err := tc.c.Check(h)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConstraint)) {
			t.Errorf("%s: %v, want ok=%v", tc.c, err, tc.ok)
		}
	}
	f := parseJob(t, `job "j" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "windows"
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "a" }
    }
  }
}`, Options{})
	gp, _ := f.PlanGroup("g")
	err := gp.Check(testHost())
	if !errors.Is(err, ErrConstraint) || !strings.Contains(err.Error(), `j.nomad:2:3: ${attr.kernel.name} = "windows": this host has "linux"`) {
		t.Errorf("an unmet constraint: %v", err)
	}
	if _, err := f.Instantiate(f.Tasks[0], Alloc{Host: testHost()}, taskdir.Layout{TaskDir: "/x/t", AllocDir: "/x/alloc"}); !errors.Is(err, ErrConstraint) {
		t.Errorf("Instantiate past an unmet constraint: %v", err)
	}
}

// TestAllocator_NoSharedPorts: allocators on one state directory (each
// its own lock descriptor, as separate processes have) never give one
// port twice while it is held; a static port held or bound is refused by
// name; Release and Live free ports.
func TestAllocator_NoSharedPorts(t *testing.T) {
	dir := t.TempDir()
	lo := 41000 + 40*(os.Getpid()%200) // concurrent runs of this test use other ranges
	var mu sync.Mutex
	seen := map[int]string{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			a := &Allocator{Dir: dir, IP: "127.0.0.1", Min: lo, Max: lo + 39}
			ports, err := a.Allocate(context.Background(), fmt.Sprintf("task-%d", w), []PortRequest{{Label: "a"}, {Label: "b"}, {Label: "c"}})
			if err != nil {
				t.Errorf("worker %d: %v", w, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ports {
				if prev, dup := seen[p.Value]; dup {
					t.Errorf("port %d given to %s and task-%d", p.Value, prev, w)
				}
				seen[p.Value] = fmt.Sprintf("task-%d", w)
			}
		}(w)
	}
	wg.Wait()
	a := &Allocator{Dir: dir, IP: "127.0.0.1", Min: lo, Max: lo + 39}
	held, err := a.Held()
	if err != nil || len(held) != 8 {
		t.Fatalf("held %v %v", held, err)
	}
	var taken int
	for p, o := range seen {
		if o == "task-0" {
			taken = p
		}
	}
	if _, err := a.Allocate(context.Background(), "x", []PortRequest{{Label: "s", Static: taken}}); !errors.Is(err, ErrPorts) || !strings.Contains(err.Error(), "held by task-0") {
		t.Errorf("a static port another task holds: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	if _, err := a.Allocate(context.Background(), "x", []PortRequest{{Label: "s", Static: busy}}); !errors.Is(err, ErrPorts) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a static port another program holds: %v", err)
	}
	if err := a.Release("task-0"); err != nil {
		t.Fatal(err)
	}
	if ps, err := a.Allocate(context.Background(), "x", []PortRequest{{Label: "s", Static: taken}}); err != nil || ps[0].Value != taken {
		t.Errorf("a released port: %v %v", ps, err)
	}
	a.Live = func(owner string) bool { return owner == "x" }
	if held, _ := a.Held(); len(held) != 1 {
		t.Errorf("Live did not prune the dead owners: %v", held)
	}
}

// FuzzParse feeds the job-file decoder arbitrary text: it never panics,
// an accepted file has a task, every runnable task has what running needs,
// and instantiating it never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`job "j" { group "g" { task "t" { driver = "exec" config { command = "x" } } } }`,
		`task "t" { driver = "raw_exec" config { command = "x" args = ["a", "b"] } env { A = "b" } }`,
		`job "j" { task "t" { driver = "raw_exec" config { command = "${NOMAD_TASK_DIR}/x" args = ["${attr.kernel.name}", "$${x}", "${env["A"]}"] } } }`,
		`variable "x" { default = 1 } job "j" { group "g" { count = 2 network { port "p" {} } task "t" { driver = "raw_exec" config { command = "${var.x}" } } } }`,
		`job "j" { group "g" { task "t" { driver = "docker" config { image = "x" } } task "u" { driver = "exec" lifecycle { hook = "prestart" } config { command = "x" } } } }`,
		`job "j" { constraint { attribute = "${attr.kernel.name}" operator = "regexp" value = "[" } group "g" { task "t" { driver = "exec" config { command = "x" } template { data = "{{ env \"A\" }}" destination = "local/x" } artifact { source = "http://x/y.tgz" } } } }`,
		`task "t" { kill_timeout = "1s" kill_signal = "TERM" }`,
		`task "t" { config { command = "${x}" } }`,
		`task "a" {} task "a" {}`,
		`locals { a = "${NOMAD_X}" } task "t" { driver = "exec" config { command = local.a } }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		file, diags := Parse("fuzz.nomad", src, Options{Vars: map[string]string{"x": "1"}})
		for _, d := range diags {
			_ = FormatDiag(d)
		}
		if diags.HasErrors() {
			if file != nil {
				t.Fatalf("errors but a file: %v", diags)
			}
			return
		}
		if file == nil || len(file.Tasks) == 0 {
			t.Fatalf("no error and no task")
		}
		for _, n := range file.Notices {
			if s := n.String(); strings.Contains(s, "\n") {
				t.Fatalf("a notice of several lines: %q", s)
			}
		}
		host := testHost()
		for _, task := range file.Tasks {
			if !task.Runnable() {
				continue
			}
			s := task.Spec
			if s.Name == "" || s.Command == "" || (s.Driver != "exec" && s.Driver != "raw_exec") || s.KillTimeout < 0 {
				t.Fatalf("accepted an unusable spec: %+v", s)
			}
			var ports []Port
			for i, pr := range task.PortRequests() {
				ports = append(ports, Port{Label: pr.Label, Value: 20000 + i, IP: "127.0.0.1", Task: pr.Task})
			}
			_, _ = file.Instantiate(task, Alloc{ID: "a", Host: host, Ports: ports}, taskdir.Layout{TaskDir: "/s/a/t", AllocDir: "/s/a/alloc", Chroot: task.Driver == "exec"})
			_, _ = task.StaticSpec()
		}
		for _, g := range file.Groups {
			_, _ = file.PlanGroup(g.Name)
		}
	})
}

// TestParse_NetworkModeAndSeccomp: a network block's mode "none" reaches
// the task's spec from the task's own block (a task file) or its group's
// (a job file), the task's own winning; a raw_exec task in a group of
// mode "none" is refused by name; seccomp is read from the config, and a
// value that is neither a choice nor an absolute path is an error.
func TestParse_NetworkModeAndSeccomp(t *testing.T) {
	tf, _ := parseOK(t, `
task "web" {
  driver = "exec"
  network {
    mode = "none"
  }
  config {
    command = "/bin/true"
    seccomp = "/etc/tether/web.json"
  }
}
task "plain" {
  driver = "exec"
  config { command = "/bin/true" }
}
`)
	if s := tf.Tasks[0].Spec; s.Network != fsm.NetworkNone || s.Seccomp != "/etc/tether/web.json" {
		t.Errorf("web: network %q seccomp %q", s.Network, s.Seccomp)
	}
	if s := tf.Tasks[1].Spec; s.Network != "" || s.Seccomp != "" {
		t.Errorf("plain: network %q seccomp %q, want the defaults", s.Network, s.Seccomp)
	}
	f := parseJob(t, `job "j" {
  group "g" {
    network { mode = "none" }
    task "isolated" {
      driver = "exec"
      config { command = "/bin/true" }
    }
    task "own" {
      driver = "exec"
      network { mode = "host" }
      config { command = "/bin/true" }
    }
    task "raw" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}`, Options{})
	byName := map[string]*Task{}
	for _, tk := range f.Tasks {
		byName[tk.Name] = tk
	}
	if got := byName["isolated"].Spec.Network; got != fsm.NetworkNone {
		t.Errorf("isolated: network %q, want the group's none", got)
	}
	if got := byName["own"].Spec.Network; got != "" {
		t.Errorf("own: network %q, want its own host", got)
	}
	if err := byName["raw"].CheckRunnable(); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `network mode "none" for a raw_exec task`) {
		t.Errorf("raw_exec in a group of mode none: %v", err)
	}
	msg := parseErr(t, `task "x" {
  driver = "exec"
  config {
    command = "/bin/true"
    seccomp = "profile.json"
  }
}`)
	if !strings.Contains(msg, "Bad seccomp") || !strings.Contains(msg, "--allow-seccomp") {
		t.Errorf("a relative profile: %s", msg)
	}
	msg = parseErr(t, `task "x" {
  driver = "raw_exec"
  config {
    command = "/bin/true"
    seccomp = "unconfined"
  }
}`)
	if !strings.Contains(msg, "raw_exec") {
		t.Errorf("seccomp on raw_exec: %s", msg)
	}
}

// TestInstantiate_TaskPortsAreTheTasksOwn: a group's ports reach each of
// its tasks, a port of a task's own network block reaches that task only:
// a sibling never gets NOMAD_PORT_ of a port that is not its own.
func TestInstantiate_TaskPortsAreTheTasksOwn(t *testing.T) {
	f := parseJob(t, `job "j" {
  group "d" {
    network {
      port "g" {}
    }
    task "t" {
      driver = "raw_exec"
      resources {
        network {
          port "tp" {}
        }
      }
      config { command = "a" }
    }
    task "u" {
      driver = "raw_exec"
      resources {
        network {
          port "up" {}
        }
      }
      config { command = "a" }
    }
  }
}`, Options{})
	ports := []Port{{Label: "g", Value: 20000, IP: "127.0.0.1"}, {Label: "tp", Value: 20001, IP: "127.0.0.1", Task: "t"}, {Label: "up", Value: 20002, IP: "127.0.0.1", Task: "u"}}
	for task, want := range map[string]struct{ own, other string }{"t": {"tp", "up"}, "u": {"up", "tp"}} {
		in, err := instantiate(t, f, "d."+task, Alloc{Ports: ports})
		if err != nil {
			t.Fatal(err)
		}
		if in.Spec.Env["NOMAD_PORT_g"] != "20000" || in.Spec.Env["NOMAD_PORT_"+want.own] == "" {
			t.Errorf("task %s: NOMAD_PORT_g = %q, NOMAD_PORT_%s = %q; want the group's port and its own", task, in.Spec.Env["NOMAD_PORT_g"], want.own, in.Spec.Env["NOMAD_PORT_"+want.own])
		}
		for k, v := range in.Spec.Env {
			if strings.HasSuffix(k, "_"+want.other) {
				t.Errorf("task %s has %s = %q, a port of task %s", task, k, v, strings.TrimSuffix(want.other, "p"))
			}
		}
		if len(in.Ports) != 2 {
			t.Errorf("task %s holds ports %+v, want the group's and its own", task, in.Ports)
		}
	}
}

// TestAllocator_RangeBounds: a dynamic range of one port (min = max) gives
// that port, and a second owner none (named); a range with max below min
// is refused as empty.
func TestAllocator_RangeBounds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	a := &Allocator{Dir: t.TempDir(), IP: "127.0.0.1", Min: p, Max: p}
	ctx := context.Background()
	ps, err := a.Allocate(ctx, "one", []PortRequest{{Label: "http"}})
	if err != nil || len(ps) != 1 || ps[0].Value != p {
		t.Fatalf("a range of the one port %d: %+v, %v; want that port", p, ps, err)
	}
	if _, err := a.Allocate(ctx, "two", []PortRequest{{Label: "http"}}); !errors.Is(err, ErrPorts) || !strings.Contains(err.Error(), "no free dynamic port") {
		t.Errorf("a second owner of a one-port range: %v; want ErrPorts saying no free dynamic port", err)
	}
	b := &Allocator{Dir: t.TempDir(), IP: "127.0.0.1", Min: p, Max: p - 1}
	if _, err := b.Allocate(ctx, "one", []PortRequest{{Label: "http"}}); !errors.Is(err, ErrPorts) || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("a range with max below min: %v; want ErrPorts saying it is empty", err)
	}
}
