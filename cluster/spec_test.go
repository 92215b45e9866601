package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/taskfile"
)

// ParseDesired is the one reading of a desired file, by the CLI before it
// writes and by the node after it reads: what each case gives is what
// both do.
func TestParseDesired_AcceptsWhatANodeCanRunAndNamesWhatItCannot(t *testing.T) {
	task := func(name, body string) string {
		return `task "` + name + `" {
  driver = "raw_exec"
  config {
` + body + `
  }
}
`
	}
	job := `job "shop" {
  group "front" {
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/sleep" }
    }
    task "log" {
      driver = "raw_exec"
      config { command = "/bin/cat" }
      env { SECRET = "x" }
    }
  }
  group "back" {
    task "web" {
      driver = "docker"
      config { image = "x" }
    }
  }
}
`
	for _, tc := range []struct {
		what, sel, src string
		name           string // accepted with this name
		err            error
		says           string
	}{
		{what: "a plain task", src: task("web", `command = "/bin/sleep"`), name: "web"},
		{what: "a bare command name", src: task("web", `command = "sleep"`), name: "web"},
		{what: "a job's task by its unique name", sel: "log", src: job, name: "log"},
		{what: "a job's task by GROUP.TASK, named as its node will name it", sel: "front.web", src: job, name: "front.web"},
		{what: "a job with several tasks and no selection: the whole job", src: job, name: "shop"},
		{what: "a job by its own name", sel: "shop", src: job, name: "shop"},
		{what: "a task that does not exist", sel: "nope", src: job, err: taskfile.ErrNoTask, says: `no task "nope"`},
		{what: "another driver", sel: "back.web", src: job, err: taskfile.ErrNotRunnable, says: "docker"},
		{what: "a relative command", src: task("web", `command = "./server"`), err: ErrRelativePath, says: `command "./server"`},
		{what: "a relative command in a directory", src: task("web", `command = "bin/server"`), err: ErrRelativePath},
		{what: "a relative work_dir", src: task("web", "command = \"/bin/sleep\"\n    work_dir = \"data\""), err: ErrRelativePath, says: "work_dir"},
		{what: "a name that cannot be a key", src: task("my web", `command = "/bin/sleep"`), err: ErrInvalidSpec, says: "rename the task"},
		{what: "a command under the task's directory", src: task("web", `command = "${NOMAD_TASK_DIR}/run.sh"`), name: "web"},
		{what: "a variable without a value (no -var on a node)", src: "variable \"v\" {}\n" + task("web", `command = var.v`), err: ErrInvalidSpec, says: "Missing variable value"},
		{what: "broken syntax", src: `task "web" {`, err: ErrInvalidSpec, says: "not an HCL task file"},
		{what: "a NUL byte", src: task("web", "command = \"/bin/sleep\"") + "\x00", err: ErrInvalidSpec, says: "NUL"},
		{what: "too large", src: task("web", `command = "/bin/sleep"`) + "#" + strings.Repeat("x", MaxSpecBytes), err: ErrInvalidSpec, says: "at most"},
		{what: "no driver", src: "task \"web\" {\n  config { command = \"/bin/true\" }\n}\n", err: ErrInvalidSpec},
	} {
		p, err := ParseDesired("f.hcl", tc.sel, []byte(tc.src))
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("%s: refused: %v", tc.what, err)
		case tc.err == nil && p.Name != tc.name:
			t.Errorf("%s: named %q, want %q", tc.what, p.Name, tc.name)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%s: %v, want %v", tc.what, err, tc.err)
		case tc.err != nil && !strings.Contains(err.Error(), tc.says):
			t.Errorf("%s: %v does not say %q", tc.what, err, tc.says)
		case tc.err != nil && !errors.Is(err, ErrInvalidSpec):
			t.Errorf("%s: %v is not an ErrInvalidSpec", tc.what, err)
		}
	}
}
