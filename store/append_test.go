package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// An event over the record bound is refused by name and size, and nothing
// of its Append is written.
func TestAppend_RecordTooLarge(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	huge := &fsm.Spec{Driver: "raw_exec", Command: "/bin/echo", Args: []string{strings.Repeat("x", maxRecord)}}
	_, err := s.Append(ctx, "big", 0, fsm.Event{Type: fsm.EventCreated, Time: at(0), Spec: huge})
	var se *SizeError
	if !errors.As(err, &se) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append of a %d-byte argument: %v, want a SizeError", maxRecord, err)
	}
	if se.Task != "big" || se.Seq != 1 || se.Size <= maxRecord || se.Limit != maxRecord {
		t.Errorf("SizeError %+v", se)
	}
	for _, want := range []string{`"big"`, "seq 1", fmt.Sprint(se.Size), "task-created"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := s.Load(ctx, "big"); !errors.Is(err, ErrUnknownTask) {
		t.Fatalf("a refused append was written: %v", err)
	}
	// Just under the bound is fine.
	ok := &fsm.Spec{Driver: "raw_exec", Command: "/bin/echo", Args: []string{strings.Repeat("x", maxRecord-100)}}
	mustAppend(t, s, "big", 0, fsm.Event{Type: fsm.EventCreated, Time: at(0), Spec: ok})
}

// The restart count lives in the head, so that Append validates a
// restart-intent's attempt against the log without reading it.
func TestAppend_RestartAttemptsThroughHead(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	v := mustAppend(t, s, "r", 0, runningLog(0)...)
	for attempt := 1; attempt <= 3; attempt++ {
		intent := fsm.Event{Type: fsm.EventRestartIntent, Time: at(10 * attempt), Attempt: attempt, Exit: &fsm.ExitStatus{Code: 1}}
		v = mustAppend(t, s, "r", v, intent)
		// A repeated attempt number is refused.
		again := fsm.Event{Type: fsm.EventRestartIntent, Time: at(10*attempt + 1), Attempt: attempt, Exit: &fsm.ExitStatus{Code: 1}}
		if _, err := s.Append(ctx, "r", v, again); err == nil {
			t.Fatalf("attempt %d accepted twice", attempt)
		}
		v = mustAppend(t, s, "r", v, fsm.Event{Type: fsm.EventLaunched, Time: at(10*attempt + 2), TaskPID: 200 + attempt, TaskStartTime: 9})
		v = mustAppend(t, s, "r", v, fsm.Event{Type: fsm.EventRunning, Time: at(10*attempt + 3)})
	}
	task, err := s.LoadTask(ctx, "r")
	if err != nil || task.Restarts != 3 || task.State != fsm.StateRunning {
		t.Fatalf("LoadTask: %d restarts, %s, %v", task.Restarts, task.State, err)
	}
}

// genInput draws an event that may or may not be legal next for task:
// mostly a type the table allows from its state, and nonces, targets and
// attempts from small sets around the right ones, so that long legal walks
// (through several restarts) are common and near misses too.
func genInput(t *rapid.T, task fsm.Task) fsm.Event {
	var legal []fsm.EventType
	for _, typ := range fsm.EventTypes() {
		for _, to := range append([]fsm.State{fsm.StateNone}, fsm.States()...) {
			if next, err := fsm.Next(task.State, fsm.Event{Type: typ, Target: to}); err == nil {
				legal = append(legal, typ)
				if next != fsm.StateReaping && !next.Terminal() {
					legal = append(legal, typ, typ, typ) // keep walks going
				}
				break
			}
		}
	}
	types := fsm.EventTypes()
	if len(legal) > 0 && rapid.IntRange(0, 9).Draw(t, "legal") > 0 {
		types = legal
	}
	e := fsm.Event{Type: rapid.SampledFrom(types).Draw(t, "type"), Time: 1}
	nonce := rapid.SampledFrom([]string{"n1", "n2"})
	switch e.Type {
	case fsm.EventCreated:
		e.Spec = &fsm.Spec{Driver: "raw_exec", Command: "/bin/true"}
	case fsm.EventSpawnIntent:
		e.Nonce = nonce.Draw(t, "nonce")
	case fsm.EventExecutorUp:
		e.Executor = &fsm.Identity{PID: 10, Nonce: rapid.SampledFrom([]string{"", "n1", "n2"}).Draw(t, "xnonce")}
	case fsm.EventLaunched:
		e.TaskPID = 11
	case fsm.EventTaskExited:
		e.Exit = &fsm.ExitStatus{Code: 1}
	case fsm.EventRestartIntent:
		e.Exit = &fsm.ExitStatus{Code: 1}
		e.Attempt = task.Restarts + rapid.SampledFrom([]int{1, 1, 1, 0, 2}).Draw(t, "attempt")
	case fsm.EventExecutorReaped:
		e.Target = rapid.SampledFrom([]fsm.State{fsm.StateFailed, fsm.StateExited, fsm.StateStopped, fsm.StateLost}).Draw(t, "target")
	}
	return e
}

// Append, which validates against the head alone, accepts exactly the
// events that folding the whole log accepts: the head carries everything
// fsm's legality check reads.
func TestAppend_HeadValidatesLikeTheFold(t *testing.T) {
	testproc.Parallel(t)
	s := openTest(t, testPath(t), Options{NoSync: true})
	ctx := context.Background()
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		id := fmt.Sprintf("t%05d", n)
		task := fsm.Task{ID: id}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			batch := make([]fsm.Event, rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("batch%d", step)))
			next := task
			for i := range batch {
				batch[i] = genInput(rt, next)
				if n, err := fsm.Fold(next, batch[i]); err == nil {
					next = n
				}
			}
			folded, foldErr := fsm.FoldAll(task, batch...)
			v, err := s.Append(ctx, id, task.Version, batch...)
			if (err == nil) != (foldErr == nil) {
				rt.Fatalf("step %d at %s: Append said %v, the fold said %v", step, task.State, err, foldErr)
			}
			if err != nil {
				continue
			}
			if v != folded.Version {
				rt.Fatalf("Append gave version %d, the fold %d", v, folded.Version)
			}
			task = folded
			got, err := s.LoadTask(ctx, id)
			if err != nil || got.State != task.State || got.Restarts != task.Restarts {
				rt.Fatalf("LoadTask: %s %d, %v; the fold: %s %d", got.State, got.Restarts, err, task.State, task.Restarts)
			}
		}
	})
}
