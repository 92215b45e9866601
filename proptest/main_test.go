package proptest

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/internal/testproc"
)

// TestMain dispatches the test binary's helper modes: the real executor
// (server.Serve) and the real tasks of TestDriver_RealProperties.
func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{modeExecutor: server.Serve, modeTask: runTask})
	// Helper processes of a -race binary would each sleep 1 s at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { rapidChecksGiven = rapidChecksGiven || f.Name == "rapid.checks" })
	goleak.VerifyTestMain(m)
}

// rapidChecksGiven is whether -rapid.checks was on the command line (the
// tests that set their own counts set the flag too).
var rapidChecksGiven bool

func getenv(k string) string { return os.Getenv(k) }

// scratch returns a fresh directory for store files, on tmpfs when the
// machine has one: bbolt's init and grow fdatasync a new file, which costs
// milliseconds a run on a disk and nothing on tmpfs. What is tested (a
// commit survives the close and reopen of the file) is the same.
func scratch(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "proptest-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}
