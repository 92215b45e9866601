package taskfile

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// The reschedule block as Nomad reads it: the job type's defaults, the
// job's block over them, the group's over that; validated once merged.
func TestParse_Reschedule(t *testing.T) {
	group := func(typ, jobBlock, groupBlock string) string {
		return `job "j" {
  type = "` + typ + `"
  ` + jobBlock + `
  group "g" {
    ` + groupBlock + `
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}`
	}
	for _, tc := range []struct {
		what string
		src  string
		want fsm.ReschedulePolicy
	}{
		{"a service job's default", group("service", "", ""), fsm.DefaultServiceReschedule},
		{"a system job runs as a service", group("system", "", ""), fsm.DefaultServiceReschedule},
		{"a batch job's default", group("batch", "", ""), fsm.DefaultBatchReschedule},
		{"a sysbatch job runs as a batch", group("sysbatch", "", ""), fsm.DefaultBatchReschedule},
		{"the job's block over the defaults", group("service", `reschedule { delay = "10s" }`, ""),
			fsm.ReschedulePolicy{Delay: 10 * time.Second, DelayFunction: fsm.DelayExponential, MaxDelay: time.Hour, Unlimited: true}},
		{"the group's block over the job's", group("service", `reschedule { delay = "10s" }`, `reschedule {
      delay_function = "fibonacci"
      max_delay      = "2m"
    }`), fsm.ReschedulePolicy{Delay: 10 * time.Second, DelayFunction: fsm.DelayFibonacci, MaxDelay: 2 * time.Minute, Unlimited: true}},
		{"limited attempts", group("service", "", `reschedule {
      attempts  = 3
      interval  = "1h"
      unlimited = false
      delay     = "5s"
      delay_function = "constant"
    }`), fsm.ReschedulePolicy{Attempts: 3, Interval: time.Hour, Delay: 5 * time.Second, DelayFunction: fsm.DelayConstant, MaxDelay: time.Hour}},
		{"stays down", group("service", "", "reschedule {\n attempts = 0\n unlimited = false\n}"),
			fsm.ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: fsm.DelayExponential, MaxDelay: time.Hour}},
	} {
		f := parseJob(t, tc.src, Options{})
		if r := f.Groups[0].Reschedule; r == nil || *r != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.what, r, tc.want)
		}
		if strings.Contains(noticesText(f), "reschedule") {
			t.Errorf("%s: a notice names the reschedule block, which tether reads: %s", tc.what, noticesText(f))
		}
	}
	// A task directly under the job takes the job's block.
	f := parseJob(t, `job "j" {
  reschedule {
    unlimited = false
    attempts  = 1
    interval  = "1h"
  }
  task "t" {
    driver = "raw_exec"
    config { command = "/bin/true" }
  }
}`, Options{})
	if r := f.Groups[0].Reschedule; r == nil || r.Attempts != 1 || r.Unlimited {
		t.Errorf("a task under the job: %+v", r)
	}
	// A task file's task is its own group: no block, the service default
	// applies (nil here); its reschedule block is its group's.
	tf := parseJob(t, "task \"t\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n}", Options{})
	if tf.Groups[0].Reschedule != nil {
		t.Errorf("a task file's group: %+v, want nil (the service default applies)", tf.Groups[0].Reschedule)
	}
	tf = parseJob(t, "task \"t\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  reschedule {\n attempts = 0\n unlimited = false\n }\n}", Options{})
	if r := tf.Groups[0].Reschedule; r == nil || r.Enabled() {
		t.Errorf("a task file's task's reschedule block: %+v", r)
	}
	inTask := `job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
      reschedule { delay = "10s" }
    }
  }
}`
	if msg := parseFails(t, inTask, Options{}); !strings.Contains(msg, "belongs to the job or the group") {
		t.Errorf("a reschedule block in a job's task: %s", msg)
	}
	for src, says := range map[string]string{
		group("service", "", `reschedule { attempts = 1 }`):                        "ambiguous",
		group("service", "", "reschedule {\n delay = \"4s\"\n}"):                   "delay cannot be less than 5s",
		group("service", "", "reschedule {\n delay_function = \"linear\"\n}"):      `invalid delay_function "linear"`,
		group("service", "", "reschedule {\n max_delay = \"10s\"\n}"):              "max_delay 10s cannot be less than delay 30s",
		group("batch", "", "reschedule {\n interval = \"10s\"\n}"):                 "interval cannot be less than 15s",
		group("batch", "", "reschedule {\n attempts = 10\n interval = \"20s\"\n}"): "attempts fit",
		group("service", "", "reschedule {\n delay = \"soon\"\n}"):                 `"soon" is not a duration`,
	} {
		if msg := parseFails(t, src, Options{}); !strings.Contains(msg, says) {
			t.Errorf("%s\nwant %q", msg, says)
		}
	}
}
