package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// Helper processes: the test binary re-executed with helperEnv set.
//
//	hold-lock PATH        open the store, print "locked", hold it until
//	                      stdin closes.
//	hold-lock-ro PATH     hold-lock with a read-only open.
//	append PATH N PREFIX  append to N tasks (PREFIX-task-NNN) concurrently, printing
//	                      "ack TASK SEQ" once each Append returns; runs
//	                      until killed.
//	cycle PATH PREFIX N TIMEOUT
//	                      N times: open the store, create the task
//	                      PREFIX-NNN (six events), print "ack TASK 6",
//	                      close; as a CLI command does. Each open has the
//	                      lock timeout TIMEOUT.
func runHelper(name string) int {
	args := strings.Fields(os.Getenv(helperEnv + "_ARGS"))
	var err error
	switch name {
	case "hold-lock":
		err = helperHoldLock(args[0], Options{})
	case "hold-lock-ro":
		err = helperHoldLock(args[0], Options{ReadOnly: true})
	case "append":
		n, _ := strconv.Atoi(args[1])
		err = helperAppend(args[0], n, args[2])
	case "cycle":
		n, _ := strconv.Atoi(args[2])
		timeout, _ := time.ParseDuration(args[3])
		err = helperCycle(args[0], args[1], n, timeout)
	default:
		err = fmt.Errorf("unknown helper %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

func helperHoldLock(path string, opts Options) error {
	s, err := Open(path, opts)
	if err != nil {
		return err
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return s.Close()
}

func helperAppend(path string, writers int, prefix string) error {
	s, err := Open(path, Options{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	ack := func(task string, v uint64) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, "ack %s %d\n", task, v)
	}
	errc := make(chan error, writers)
	for w := range writers {
		go func() {
			task := fmt.Sprintf("%s-task-%03d", prefix, w)
			ctx := context.Background()
			v := uint64(0)
			for _, e := range runningLog(0) {
				nv, err := s.Append(ctx, task, v, e)
				if err != nil {
					errc <- err
					return
				}
				v = nv
				ack(task, v)
			}
			for i := 0; ; i++ {
				nv, err := s.Append(ctx, task, v, fsm.Event{Type: fsm.EventReattached, Time: at(10 + i)})
				if err != nil {
					errc <- err
					return
				}
				v = nv
				ack(task, v)
			}
		}()
	}
	return <-errc
}

func helperCycle(path, prefix string, n int, timeout time.Duration) error {
	for i := range n {
		s, err := Open(path, Options{LockTimeout: timeout})
		if err != nil {
			return err
		}
		task := fmt.Sprintf("%s-%03d", prefix, i)
		if _, err := s.Append(context.Background(), task, 0, runningLog(0)...); err != nil {
			s.Close()
			return err
		}
		fmt.Printf("ack %s 6\n", task)
		if err := s.Close(); err != nil {
			return err
		}
	}
	return nil
}

// helper starts the test binary as helper name with args.
func helper(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+name, helperEnv+"_ARGS="+strings.Join(args, " "),
		// The race detector sleeps a second at exit by default.
		"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Stderr = os.Stderr
	return cmd
}

func TestOpen_LockedByAnotherProcess(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{})
	mustAppend(t, s, "a", 0, runningLog(0)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	holdLock(t, path)

	const timeout = 200 * time.Millisecond
	_, err := Open(path, Options{LockTimeout: timeout})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a locked store: %v, want ErrLocked", err)
	}
	// The holder is named: the helper process, by its pid and command.
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "has held it") || !strings.Contains(msg, "(store.test)") {
		t.Errorf("error %q does not name the path and the holder", msg)
	}
	// Compact takes the same lock.
	if _, _, err := Compact(path, Options{LockTimeout: timeout}); !errors.Is(err, ErrLocked) {
		t.Errorf("Compact of a locked store: %v, want ErrLocked", err)
	}
	// So does a read-only open: the holder is a writer.
	if _, err := Open(path, Options{ReadOnly: true, LockTimeout: timeout}); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Open beside a writer: %v, want ErrLocked", err)
	}
}

func TestAppend_AcknowledgedSurvivesKill(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	// Create the store (and its directory) first so that the child only
	// appends.
	s := openTest(t, path, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		acked := map[string]uint64{}
		cmd := helper(t, "append", path, "8", fmt.Sprintf("r%d", round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := 20 + rand.IntN(300)
		sc := bufio.NewScanner(stdout)
		for n := 0; n < killAfter && sc.Scan(); n++ {
			var task string
			var v uint64
			if _, err := fmt.Sscanf(sc.Text(), "ack %s %d", &task, &v); err != nil {
				t.Fatalf("child said %q: %v", sc.Text(), err)
			}
			acked[task] = max(acked[task], v)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, stdout) // acks in flight were not read: not counted
		_ = cmd.Wait()
		if len(acked) == 0 {
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}

		s := openTest(t, path, Options{})
		for task, v := range acked {
			tk, err := s.LoadTask(context.Background(), task)
			if err != nil {
				t.Fatalf("round %d: LoadTask(%s): %v", round, task, err)
			}
			if tk.Version < v {
				t.Errorf("round %d: task %s has version %d after the kill, but %d was acknowledged", round, task, tk.Version, v)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
