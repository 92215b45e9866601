package proc_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/internal/proc"
)

// refStat is the plain reading of /proc/PID/stat: fields split on white
// space from the last ')', parsed with strconv.
func refStat(b []byte) (proc.Stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return proc.Stat{}, false
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return proc.Stat{}, false
	}
	var s proc.Stat
	var e1, e2, e3, e4 error
	s.State = f[0][0]
	s.PPID, e1 = strconv.Atoi(f[1])
	s.PGID, e2 = strconv.Atoi(f[2])
	s.SID, e3 = strconv.Atoi(f[3])
	s.StartTime, e4 = strconv.ParseUint(f[19], 10, 64)
	return s, e1 == nil && e2 == nil && e3 == nil && e4 == nil
}

// TestParseStat_AsThePlainReading: ParseStat reads every live process's
// stat (and the edge cases: the trailing newline, a field short, a
// number that is none, a state of two characters, a name holding ')')
// as the plain reading does: the same fields, the same refusals.
func TestParseStat_AsThePlainReading(t *testing.T) {
	const tail = " S 77 4242 4243 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0 0"
	cases := []string{
		"1 (init)" + tail + "\n",
		"1 (init)" + tail,
		"1 (a) b) c)" + tail + "\n",
		"1 (x)" + " S 77 4242 4243 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0\n", // starttime missing
		"1 (x)" + " S 77 4242 4243 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98x\n",
		"1 (x)" + " SS 77 4242 4243 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654\n",
		"1 (x)" + " S seven 4242 4243 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654\n",
		"1 (x)",
		"no parenthesis at all",
		"",
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			cases = append(cases, string(b))
		}
	}
	for _, c := range cases {
		want, ok := refStat([]byte(c))
		got, err := proc.ParseStat([]byte(c))
		switch {
		case ok && (err != nil || got != want):
			t.Errorf("ParseStat(%q) = %+v, %v; want %+v", c, got, err, want)
		case !ok && err == nil:
			t.Errorf("ParseStat(%q) = %+v; want an error", c, got)
		}
	}
	self, err := proc.ReadStat(os.Getpid())
	if err != nil || self.PPID != os.Getppid() {
		t.Fatalf("ReadStat of this process: %+v, %v; want ppid %d", self, err, os.Getppid())
	}
}
