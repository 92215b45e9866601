package taskfile

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// checkJob is a job whose task "t" has readiness r (none set for "") and a
// service whose body is svc (the group's network has ports "http" and "admin").
func checkJob(r, svc string) string {
	return `job "j" {
  group "g" {
    network {
      port "http" {}
      port "admin" {}
    }
    service {
      name = "api"
      port = "http"
` + svc + `
    }
    task "t" {
      driver    = "raw_exec"
      ` + map[bool]string{true: "", false: `readiness = "` + r + `"`}[r == ""] + `
      config { command = "/bin/true" }
    }
  }
}`
}

var checkPorts = []Port{{Label: "http", Value: 20001, IP: "10.0.0.5"}, {Label: "admin", Value: 20002, IP: "10.0.0.5"}}

// TestInstantiate_ReadinessCheck: a tcp, http or script check of the
// task's service becomes the spec's check, its port label resolved to the
// allocated port and address (the check's own label over its service's),
// check_restart the check's merged over its service's; the spec is valid.
func TestInstantiate_ReadinessCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		r, svc string
		want   fsm.Check
	}{
		"tcp on the service's port": {"tcp", `check {
        type     = "tcp"
        interval = "5s"
        timeout  = "1s"
      }`, fsm.Check{PortLabel: "http", Address: "10.0.0.5", Port: 20001, Interval: 5 * time.Second, Timeout: time.Second}},
		"http on the check's port, restart merged": {"http", `check_restart {
        limit = 2
        grace = "30s"
      }
      check {
        name     = "health"
        type     = "http"
        port     = "admin"
        path     = "/health"
        interval = "1s"
        timeout  = "500ms"
        check_restart {
          limit = 5
        }
      }`, fsm.Check{Name: "health", PortLabel: "admin", Address: "10.0.0.5", Port: 20002, Path: "/health", Interval: time.Second,
			Timeout: 500 * time.Millisecond, Restart: &fsm.CheckRestart{Limit: 5, Grace: 30 * time.Second}}},
		"http path defaults to /": {"http", `check {
        type     = "http"
        interval = "1s"
        timeout  = "1s"
      }`, fsm.Check{PortLabel: "http", Address: "10.0.0.5", Port: 20001, Path: "/", Interval: time.Second, Timeout: time.Second}},
		"script is exec": {"exec", `check {
        type     = "script"
        command  = "/bin/check"
        args     = ["-q", "${NOMAD_TASK_NAME}"]
        interval = "2s"
        timeout  = "1s"
        check_restart {
          limit           = 3
          ignore_warnings = true
        }
      }`, fsm.Check{Command: "/bin/check", Args: []string{"-q", "t"}, Interval: 2 * time.Second, Timeout: time.Second,
			Restart: &fsm.CheckRestart{Limit: 3, Grace: time.Second, IgnoreWarnings: true}}},
	} {
		t.Run(name, func(t *testing.T) {
			f := parseJob(t, checkJob(tc.r, tc.svc), Options{})
			in, err := instantiate(t, f, "g.t", Alloc{ID: "a1", Ports: checkPorts})
			if err != nil {
				t.Fatal(err)
			}
			if in.Spec.Check == nil || !reflect.DeepEqual(*in.Spec.Check, tc.want) {
				t.Fatalf("check = %+v; want %+v", in.Spec.Check, tc.want)
			}
			spec := in.Spec
			spec.Alloc = nil // the group's runner fills its task ids
			if err := spec.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestParse_ReadinessCheckErrors: a readiness with no check of its type,
// a check of another type only, a port label the task does not have, a
// check without interval, an exec check without command: each an error
// at parse time naming the problem and the fix.
func TestParse_ReadinessCheckErrors(t *testing.T) {
	for name, tc := range map[string]struct{ r, svc, want string }{
		"no check": {"tcp", ``, `readiness = "tcp" needs a check: add a service block with a check { type = "tcp"`},
		"another type": {"tcp", `check {
        type     = "http"
        interval = "1s"
        timeout  = "1s"
      }`, `readiness = "tcp" runs a check of type "tcp", and the task's checks are of type ["http"]`},
		"unknown port": {"http", `check {
        type     = "http"
        port     = "metrics"
        interval = "1s"
        timeout  = "1s"
      }`, `the http check's port "metrics" is not a port label of the task's network blocks`},
		"no interval": {"tcp", `check {
        type    = "tcp"
        timeout = "1s"
      }`, `the tcp check needs an interval and a timeout`},
		"exec without command": {"exec", `check {
        type     = "script"
        interval = "1s"
        timeout  = "1s"
      }`, `the script check needs a command`},
		"two checks": {"tcp", `check {
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
      }
      check {
        type     = "tcp"
        port     = "admin"
        interval = "1s"
        timeout  = "1s"
      }`, `readiness = "tcp" runs one check, and the task has 2 of type "tcp"`},
		"negative limit": {"tcp", `check {
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
        check_restart {
          limit = -1
        }
      }`, `Bad limit: limit is -1`},
	} {
		t.Run(name, func(t *testing.T) {
			got := parseFails(t, checkJob(tc.r, tc.svc), Options{})
			if !strings.Contains(got, tc.want) {
				t.Errorf("error:\n%s\nwant it to contain %q", got, tc.want)
			}
		})
	}
}

// TestParse_ReadinessCheckTaskFile: a task file's own service check (its
// network block's port) is found at parse time too.
func TestParse_ReadinessCheckTaskFile(t *testing.T) {
	got := parseErr(t, `task "x" {
  driver    = "raw_exec"
  readiness = "tcp"
  config { command = "/bin/true" }
  service {
    port = "web"
    check {
      type     = "tcp"
      interval = "1s"
      timeout  = "1s"
    }
  }
}`)
	if !strings.Contains(got, `the tcp check's port "web" is not a port label`) {
		t.Errorf("error: %s", got)
	}
}

// checkNotices are the file's notices about checks, as printed.
func checkNotices(f *File) []string {
	var out []string
	for _, n := range f.Notices {
		if n.Kind == NoticeCheck {
			out = append(out, n.String())
		}
	}
	return out
}

// TestParse_NomadProviderChecksRun: a check of a service of provider
// "nomad" runs, with its check_restart, on a task that sets no readiness
// (Nomad runs those checks itself); a Consul one does not, unless the
// task's readiness names its type, whatever the provider; and the notices
// say, check by check, which runs and which is ignored, and why.
func TestParse_NomadProviderChecksRun(t *testing.T) {
	http := func(name, port string) string {
		return `check {
        name     = "` + name + `"
        type     = "http"
        port     = "` + port + `"
        path     = "/` + name + `"
        interval = "1s"
        timeout  = "1s"
        check_restart {
          limit = 3
          grace = "5s"
        }
      }`
	}
	tcp := `check {
        name     = "conn"
        type     = "tcp"
        interval = "2s"
        timeout  = "1s"
      }`
	for name, tc := range map[string]struct {
		r, svc  string
		want    *fsm.Check
		ready   fsm.Readiness
		notices []string
	}{
		"nomad provider, no readiness: its check runs": {"", `provider = "nomad"
` + http("health", "http"), &fsm.Check{Name: "health", PortLabel: "http", Address: "10.0.0.5", Port: 20001, Path: "/health", Interval: time.Second, Timeout: time.Second,
			Restart: &fsm.CheckRestart{Limit: 3, Grace: 5 * time.Second}}, fsm.ReadinessHTTP, []string{
			`task "g.t": check "health" (http) of service "api" (provider "nomad"): runs it as the task's readiness, as Nomad runs a check of provider "nomad" (start waits for it to pass), with its check_restart`}},
		"nomad provider, two checks: the first runs": {"", `provider = "nomad"
` + tcp + "\n" + http("health", "http"), &fsm.Check{Name: "conn", PortLabel: "http", Address: "10.0.0.5", Port: 20001, Interval: 2 * time.Second, Timeout: time.Second},
			fsm.ReadinessTCP, []string{
				`task "g.t": check "conn" (tcp) of service "api" (provider "nomad"): runs it as the task's readiness, as Nomad runs a check of provider "nomad" (start waits for it to pass), with its check_restart`,
				`task "g.t": check "health" (http) of service "api" (provider "nomad"): ignores it: tether runs one check per task, and runs "conn"`}},
		"consul provider, no readiness: ignored": {"", http("health", "http"), nil, "", []string{
			`task "g.t": check "health" (http) of service "api" (provider "consul"): ignores it: a check of provider "consul" is Consul's to run, and tether registers nothing there (readiness = "http" on the task runs it)`}},
		"consul provider, readiness http: it runs": {"http", http("health", "admin"), &fsm.Check{Name: "health", PortLabel: "admin", Address: "10.0.0.5", Port: 20002, Path: "/health", Interval: time.Second, Timeout: time.Second,
			Restart: &fsm.CheckRestart{Limit: 3, Grace: 5 * time.Second}}, fsm.ReadinessHTTP, []string{
			`task "g.t": check "health" (http) of service "api" (provider "consul"): runs it as the task's readiness (readiness = "http"), with its check_restart`}},
		"nomad provider, readiness tcp picks the tcp check": {"tcp", `provider = "nomad"
` + http("health", "http") + "\n" + tcp, &fsm.Check{Name: "conn", PortLabel: "http", Address: "10.0.0.5", Port: 20001, Interval: 2 * time.Second, Timeout: time.Second},
			fsm.ReadinessTCP, []string{
				`task "g.t": check "health" (http) of service "api" (provider "nomad"): ignores it: tether runs one check per task, and runs "conn"`,
				`task "g.t": check "conn" (tcp) of service "api" (provider "nomad"): runs it as the task's readiness (readiness = "tcp"), with its check_restart`}},
		"nomad provider, readiness notify: ignored": {"notify", `provider = "nomad"
` + http("health", "http"), nil, fsm.ReadinessNotify, []string{
			`task "g.t": check "health" (http) of service "api" (provider "nomad"): ignores it: the task's readiness is "notify" (READY=1)`}},
		"nomad provider, a type tether does not run": {"", `provider = "nomad"
      check {
        type     = "grpc"
        interval = "1s"
        timeout  = "1s"
      }`, nil, "", []string{
			`task "g.t": check "grpc" (grpc) of service "api" (provider "nomad"): ignores it: tether runs http, tcp and script checks`}},
		"nomad provider, readiness none: ignored": {"none", `provider = "nomad"
` + http("health", "http"), nil, fsm.ReadinessNone, []string{
			`task "g.t": check "health" (http) of service "api" (provider "nomad"): ignores it: the task's readiness is "none"`}},
	} {
		t.Run(name, func(t *testing.T) {
			f := parseJob(t, checkJob(tc.r, tc.svc), Options{})
			if got := checkNotices(f); !reflect.DeepEqual(got, tc.notices) {
				t.Errorf("notices:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.notices, "\n"))
			}
			in, err := instantiate(t, f, "g.t", Alloc{ID: "a1", Ports: checkPorts})
			if err != nil {
				t.Fatal(err)
			}
			if in.Spec.Readiness != tc.ready || !reflect.DeepEqual(in.Spec.Check, tc.want) {
				t.Fatalf("readiness %q check %+v; want %q %+v", in.Spec.Readiness, in.Spec.Check, tc.ready, tc.want)
			}
			spec := in.Spec
			spec.Alloc = nil
			if err := spec.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// TestParse_NomadGroupServiceIsTheMainTasks: a group's service of provider
// "nomad" that names no task is the group's main task's: its check runs
// for the task without a lifecycle hook, not for a prestart or sidecar
// task beside it; one that names a task is that task's.
func TestParse_NomadGroupServiceIsTheMainTasks(t *testing.T) {
	job := func(task string) string {
		return `job "j" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name     = "api"
      port     = "http"
      provider = "nomad"
      ` + task + `
      check {
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
      }
    }
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook = "prestart"
      }
      config { command = "/bin/true" }
    }
    task "side" {
      driver = "raw_exec"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config { command = "/bin/true" }
    }
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}`
	}
	for _, tc := range []struct {
		task  string
		ready string // the task that runs the check
	}{{"", "g.web"}, {`task = "side"`, "g.side"}} {
		f := parseJob(t, job(tc.task), Options{})
		for _, addr := range []string{"g.init", "g.side", "g.web"} {
			in, err := instantiate(t, f, addr, Alloc{ID: "a1", Ports: checkPorts})
			if err != nil {
				t.Fatal(err)
			}
			if runs := in.Spec.Readiness == fsm.ReadinessTCP && in.Spec.Check != nil; runs != (addr == tc.ready) {
				t.Errorf("service %q: task %s runs the check: %v (readiness %q), want %v", tc.task, addr, runs, in.Spec.Readiness, addr == tc.ready)
			}
		}
	}
}
