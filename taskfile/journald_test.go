package taskfile

import (
	"strings"
	"testing"

	"github.com/tether-fsm/tether/fsm"
)

// TestParse_LogsJournald: logs { journald = true } forwards the task's
// output to the journal beside its files (the rotation keeps its
// defaults); false and absent do not; with disabled = true it is refused,
// naming both and what to do; a value that is no bool is refused.
func TestParse_LogsJournald(t *testing.T) {
	file := func(logs string) string {
		return "task \"x\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n  logs {\n" + logs + "\n  }\n}\n"
	}
	for _, tc := range []struct {
		logs string
		want fsm.LogConfig
	}{
		{"    journald = true", fsm.LogConfig{MaxFiles: fsm.DefaultLogMaxFiles, MaxFileSizeMB: fsm.DefaultLogMaxFileSizeMB, Journald: true}},
		{"    journald = false\n    max_files = 3", fsm.LogConfig{MaxFiles: 3, MaxFileSizeMB: fsm.DefaultLogMaxFileSizeMB}},
		{"    max_files = 2", fsm.LogConfig{MaxFiles: 2, MaxFileSizeMB: fsm.DefaultLogMaxFileSizeMB}},
	} {
		tf, _ := parseOK(t, file(tc.logs))
		x, _ := tf.Find("x")
		if x.Spec.Logs != tc.want {
			t.Errorf("logs {%s }: %+v, want %+v", tc.logs, x.Spec.Logs, tc.want)
		}
	}
	got := parseErr(t, file("    journald = true\n    disabled = true"))
	if !strings.Contains(got, "disabled") || !strings.Contains(got, "journald") || !strings.Contains(got, "leave one out") {
		t.Errorf("journald with disabled: %s", got)
	}
	if got := parseErr(t, file(`    journald = "yes"`)); !strings.Contains(got, "journald") {
		t.Errorf("journald = \"yes\": %s", got)
	}
}
