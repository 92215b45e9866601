package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/tether-fsm/tether/fsm"
)

// helperEnv makes the test binary act as a helper process (see helpers in
// process_test.go) instead of running tests.
const helperEnv = "TETHER_STORE_TEST_HELPER"

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		os.Exit(runHelper(name))
	}
	code := m.Run()
	removeBenchFixtures()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// baseTime is the wall clock of the events tests write.
var baseTime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func at(sec int) int64 { return baseTime.Add(time.Duration(sec) * time.Second).UnixNano() }

func testSpec() *fsm.Spec {
	return &fsm.Spec{
		Name: "web", Driver: "exec", Command: "/bin/sleep", Args: []string{"30"},
		Env: map[string]string{"A": "1", "B": "two"}, CapAdd: []string{"net_raw"},
		KillSignal: 15, KillTimeout: 5 * time.Second,
	}
}

// runningLog returns the events that take a new task to running, then
// extra reattached self-loops.
func runningLog(extra int) []fsm.Event {
	evs := []fsm.Event{
		{Type: fsm.EventCreated, Time: at(0), Spec: testSpec()},
		{Type: fsm.EventSpawnIntent, Time: at(1), Nonce: "n1"},
		{Type: fsm.EventExecutorUp, Time: at(2), Executor: &fsm.Identity{PID: 100, StartTime: 7, BootID: "b", Nonce: "n1", Socket: "/s"}},
		{Type: fsm.EventLaunchIntent, Time: at(3)},
		{Type: fsm.EventLaunched, Time: at(4), TaskPID: 101, TaskStartTime: 8},
		{Type: fsm.EventRunning, Time: at(5)},
	}
	for i := range extra {
		evs = append(evs, fsm.Event{Type: fsm.EventReattached, Time: at(6 + i)})
	}
	return evs
}

// finishLog returns the events that take a running task to exited.
func finishLog(sec int) []fsm.Event {
	return []fsm.Event{
		{Type: fsm.EventTaskExited, Time: at(sec), Exit: &fsm.ExitStatus{Code: 0}},
		{Type: fsm.EventExecutorReaped, Time: at(sec + 1), Target: fsm.StateExited},
	}
}

// withSeq returns evs with sequence numbers from first.
func withSeq(first uint64, evs []fsm.Event) []fsm.Event {
	out := make([]fsm.Event, len(evs))
	for i, e := range evs {
		e.Seq = first + uint64(i)
		out[i] = e
	}
	return out
}

// testPath returns a fresh store path inside a directory the store must
// create.
func testPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "state", "tether.db")
}

// openTest opens a store at path. At cleanup it runs Check and fails the
// test on any problem.
func openTest(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	return openChecked(t, path, opts, func(t testing.TB, r Report) {
		if !r.OK() {
			t.Errorf("store check at cleanup: %s", r)
		}
	})
}

// openDamaged opens a store the test means to damage; at cleanup its
// Check report is given to want instead of being required clean.
func openDamaged(t testing.TB, path string, opts Options, want func(testing.TB, Report)) *Store {
	t.Helper()
	return openChecked(t, path, opts, want)
}

func openChecked(t testing.TB, path string, opts Options, verify func(testing.TB, Report)) *Store {
	t.Helper()
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 5 * time.Second
	}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		c := s
		s.mu.RLock()
		closed := s.closed
		s.mu.RUnlock()
		if closed {
			var err error
			if c, err = Open(path, Options{ReadOnly: true, LockTimeout: 5 * time.Second}); err != nil {
				t.Errorf("reopen for the cleanup check: %v", err)
				return
			}
		}
		r, err := c.Check(context.Background())
		if err != nil {
			t.Errorf("store check at cleanup: %v", err)
		}
		verify(t, r)
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// rawUpdate changes the file behind the store's back, through bbolt
// itself. The store must be closed.
func rawUpdate(t testing.TB, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("raw open: %v", err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatalf("raw update: %v", err)
	}
}

// rawTask returns the bucket of task in a raw transaction.
func rawTask(tx *bolt.Tx, task string) (*bolt.Bucket, error) {
	b := tx.Bucket(bucketTasks).Bucket([]byte(task))
	if b == nil {
		return nil, errors.New("no bucket for " + task)
	}
	return b, nil
}

func mustAppend(t testing.TB, s *Store, task string, expected uint64, evs ...fsm.Event) uint64 {
	t.Helper()
	v, err := s.Append(context.Background(), task, expected, evs...)
	if err != nil {
		t.Fatalf("Append(%q, %d, %d events): %v", task, expected, len(evs), err)
	}
	if want := expected + uint64(len(evs)); v != want {
		t.Fatalf("Append(%q) = version %d, want %d", task, v, want)
	}
	return v
}

func ids(t testing.TB, each func(context.Context, func(string) error) error) []string {
	t.Helper()
	var out []string
	if err := each(context.Background(), func(id string) error {
		out = append(out, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
