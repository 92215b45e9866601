package proptest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/proptest/linearize"
	"github.com/tether-fsm/tether/store"
)

var linChecks = flag.Int("proptest.linchecks", 0, "checks of TestDriver_Linearizable (0: 5 x rapid.checks, at most 2000)")

// linCall is one drawn driver call.
type linCall struct {
	Op   string // start, stop, inspect, wait, recover (Task unused)
	Task int
}

func (c linCall) String() string { return fmt.Sprintf("%s t%d", c.Op, c.Task) }

// linStats accumulates what the linearizability test ran.
type linStats struct {
	histories, ops int
	check          time.Duration
	results        map[string]int // step/result -> count, to show what the histories reached
}

// runHistory runs one drawn program against one driver over a fresh
// simulated world: every client is a goroutine issuing its calls in order,
// all released at once; a wait runs in a goroutine of its own (it returns
// when its task ends). When the clients are done, a last client stops every
// task, which ends the waits. It returns the recorded operations, and an
// error if a call did not return in time.
func runHistory(t *rapid.T, dir string, clients [][]linCall, tasks int) ([]porcupine.Operation, error) {
	w := NewWorld()
	var clock, nonces int64
	var cmu sync.Mutex
	d, err := driver.Open(driver.Config{
		StateDir:     dir,
		StoreOptions: store.Options{NoSync: true},
		World:        w.View(w.NewGeneration(1)),
		Now: func() time.Time {
			cmu.Lock()
			defer cmu.Unlock()
			clock++
			return time.Unix(1_700_000_000, 0).Add(time.Duration(clock) * time.Millisecond)
		},
		NewNonce: func() string {
			cmu.Lock()
			defer cmu.Unlock()
			nonces++
			return fmt.Sprintf("nonce-%04d", nonces)
		},
	})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	// No call may hang: ten seconds is a liveness failure, not a wait (a
	// history takes milliseconds). A call cut short returns the context's
	// error, which the model refuses.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := &linearize.History{}
	spec := SpecFor("run")
	id := func(i int) string { return fmt.Sprintf("t%d", i) }

	var calls, waits sync.WaitGroup
	waitClient := len(clients) + 1
	var wmu sync.Mutex
	go1 := make(chan struct{})
	for c, prog := range clients {
		calls.Add(1)
		go func() {
			defer calls.Done()
			<-go1
			for _, call := range prog {
				switch call.Op {
				case "start":
					_, _ = h.StartTask(ctx, d, c, id(call.Task), spec)
				case "stop":
					_, _ = h.StopTask(ctx, d, c, id(call.Task), 0, 0)
				case "inspect":
					_, _ = h.InspectTask(ctx, d, c, id(call.Task))
				case "recover":
					_, _ = h.Recover(ctx, d, c)
				case "wait":
					wmu.Lock()
					wc := waitClient
					waitClient++
					wmu.Unlock()
					waits.Add(1)
					go func() {
						defer waits.Done()
						_, _ = h.WaitTask(ctx, d, wc, id(call.Task))
					}()
				}
			}
		}()
	}
	close(go1)
	calls.Wait()
	for i := range tasks {
		_, _ = h.StopTask(ctx, d, len(clients), id(i), 0, 0)
	}
	waits.Wait()
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	var hung error
	if err := ctx.Err(); err != nil {
		hung = fmt.Errorf("liveness: a driver call did not return within 10s: %w", err)
	}
	return h.Operations(), hung
}

// checkHistory checks ops against the model; on a violation it writes
// porcupine's visualization to a file it names in the failure.
func checkHistory(t *rapid.T, model porcupine.Model, ops []porcupine.Operation, st *linStats) {
	began := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	st.check += time.Since(began)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		t.Fatalf("linearizability: porcupine timed out on %d operations", len(ops))
	}
	var lines []string
	for _, op := range ops {
		lines = append(lines, fmt.Sprintf("  client %d [%d,%d] %s", op.ClientId, op.Call, op.Return,
			model.DescribeOperation(op.Input, op.Output)))
	}
	f, err := os.CreateTemp("", "tether-linearizability-*.html")
	where := "could not write the visualization: "
	if err == nil {
		where = f.Name()
		if err = porcupine.Visualize(model, info, f); err != nil {
			where += " (incomplete: " + err.Error() + ")"
		}
		_ = f.Close()
	} else {
		where += err.Error()
	}
	t.Fatalf("linearizability: the history of %d operations is not linearizable against linearize.Model; visualization: %s\n%s",
		len(ops), where, strings.Join(lines, "\n"))
}

// TestDriver_Linearizable checks that concurrent StartTask, StopTask,
// InspectTask, WaitTask and Recover calls on a few task ids of ONE driver (over the
// simulated world, no faults, tasks that run until stopped) form histories
// that porcupine can linearize against linearize.Model, partitioned by task
// id: one claim per id, ErrTaskExists and ErrUnknownTask only when the id
// is claimed and unclaimed, stops that end in stopped, every snapshot a
// step forward along the lifecycle, and a Recover beside them that fails
// no start in progress. -proptest.linchecks sets the number of
// checks (default 5 x rapid.checks, at most 2000).
func TestDriver_Linearizable(t *testing.T) {
	n := *linChecks
	if n == 0 {
		n = min(5*rapidChecks(), 2000) // a history costs a few ms
	}
	defer setFlag(t, "rapid.checks", strconv.Itoa(n))()
	dir := scratch(t)
	// Strict: between StartTask's claim of an id and its task-created
	// append, other calls wait for the record (TestDriver_ClaimWindow).
	model := linearize.Model(linearize.Options{StopsOnly: true})
	st := linStats{results: map[string]int{}}
	began := time.Now()
	firstFailure, checks := 0, 0
	defer func() {
		if firstFailure > 0 {
			t.Logf("first failure at check %d", firstFailure)
		}
	}()
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		defer func() {
			if rt.Failed() && firstFailure == 0 {
				firstFailure = checks
			}
		}()
		tasks := rapid.IntRange(1, 3).Draw(rt, "tasks")
		call := rapid.Custom(func(t *rapid.T) linCall {
			return linCall{
				Op:   rapid.SampledFrom([]string{"start", "inspect", "stop", "wait", "recover"}).Draw(t, "op"),
				Task: rapid.IntRange(0, tasks-1).Draw(t, "task"),
			}
		})
		clients := rapid.SliceOfN(rapid.SliceOfN(call, 1, 8), 2, 5).Draw(rt, "clients")
		sub, err := os.MkdirTemp(dir, "lin")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(sub)
		ops, hung := runHistory(rt, sub, clients, tasks)
		st.histories++
		st.ops += len(ops)
		for _, op := range ops {
			st.results[op.Input.(linearize.Input).Step.String()+" "+op.Output.(linearize.Output).Result.String()]++
		}
		checkHistory(rt, model, ops, &st)
		if hung != nil {
			rt.Fatal(hung)
		}
	})
	el := time.Since(began)
	t.Logf("%d histories, %d operations in %s (porcupine %s): %.0f histories/s, %.0f operations/s",
		st.histories, st.ops, el.Round(time.Millisecond), st.check.Round(time.Millisecond),
		float64(st.histories)/el.Seconds(), float64(st.ops)/el.Seconds())
	var seen []string
	for _, k := range sortedKeys(st.results) {
		seen = append(seen, fmt.Sprintf("%s=%d", k, st.results[k]))
	}
	t.Logf("steps reached: %s", strings.Join(seen, " "))
}

// gatedLog holds StartTask's first append of one task (its task-created
// record, between its claim of the id and the record) until released, so
// that a test can act in that window.
type gatedLog struct {
	store.Log
	task     string
	once     sync.Once
	reached  chan struct{}
	released chan struct{}
}

// Append holds the task's first append until released. (The gate was on
// the start's read of the log before its append, which fb52fbe removed: the
// test then waited for ever.)
func (l *gatedLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	if task == l.task {
		l.once.Do(func() {
			close(l.reached)
			<-l.released
		})
	}
	return l.Log.Append(ctx, task, expected, events...)
}

// TestDriver_ClaimWindow is the regression test of what
// TestDriver_Linearizable found in the window between StartTask's claim of
// an id and its task-created append: a StopTask there failed with an
// illegal transition out of none, and a later fix answered ErrUnknownTask
// to InspectTask and StopTask while a second StartTask already got
// ErrTaskExists (not linearizable). Now calls in the window wait for the
// record: the history must satisfy the strict model, the inspect must see
// the task, and the stop must stop it.
func TestDriver_ClaimWindow(t *testing.T) {
	ctx := context.Background()
	dir := scratch(t)
	s, err := store.Open(filepath.Join(dir, "tether.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gate := &gatedLog{Log: s, task: "web", reached: make(chan struct{}), released: make(chan struct{})}
	w := NewWorld()
	d, err := driver.Open(driver.Config{StateDir: dir, Store: gate, World: w.View(w.NewGeneration(1)),
		NewNonce: func() string { return "nonce-1" }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var release sync.Once
	open := func() { release.Do(func() { close(gate.released) }) }
	defer open() // before Close, even on failure: Close waits for the start
	h := &linearize.History{}
	started := make(chan error, 1)
	go func() {
		_, err := h.StartTask(ctx, d, 0, "web", SpecFor("run"))
		started <- err
	}()
	<-gate.reached
	if _, err := h.StartTask(ctx, d, 1, "web", SpecFor("run")); linearize.Classify(err) != linearize.ResExists {
		t.Fatalf("second start in the claim window: %v; want ErrTaskExists", err)
	}
	// Issued in the window; they must wait for the record, not answer.
	inspected, stopped := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := h.InspectTask(ctx, d, 2, "web")
		inspected <- err
	}()
	go func() {
		_, err := h.StopTask(ctx, d, 3, "web", 0, 0)
		stopped <- err
	}()
	open()
	if err := <-inspected; err != nil {
		t.Errorf("inspect issued in the claim window: %v; want the task's state", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop issued in the claim window: %v; want the task stopped", err)
	}
	if err := <-started; err != nil && linearize.Classify(err) != linearize.ResStartFailed {
		t.Errorf("start: %v", err)
	}
	if !porcupine.CheckOperations(linearize.Model(linearize.Options{StopsOnly: true}), h.Operations()) {
		t.Fatalf("the claim-window history is not linearizable")
	}
}
