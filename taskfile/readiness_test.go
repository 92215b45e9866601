package taskfile

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// checkJob is a job whose task "t" has readiness r and a service whose
// body is svc (the group's network has ports "http" and "admin").
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
      readiness = "` + r + `"
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
