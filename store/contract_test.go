package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/tether-fsm/tether/fsm"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The store's lock and maintenance promises, and its edge rules (issue
// 36), each with the test that holds it (the record, append and damage
// promises are in the other files):
//
//	one writer at a time, readers share,
//	  across processes: a contender waits
//	  or fails naming the holder, never
//	  holds beside a writer              TestLock_TwoProcesses, TestOpen_LockedByAnotherProcess
//	a waiter gets the lock when the
//	  holder lets go, gives up only when
//	  the lock has not moved for the
//	  timeout, and then holds nothing    TestOpen_WaiterGetsTheLockWhenReleased, TestOpen_WaiterWaitsWhileTheLockMoves, TestOpen_TimedOutWaiterLetsGo
//	Compact beside writers loses no
//	  acknowledged append                TestCompact_WaiterOpensTheNewFile, TestCompact_LoopBesideWriterProcesses
//	Remove: terminal tasks whose last
//	  event is older than the cutoff,
//	  never a live one, ids in order     TestRemove_WhatItRemoves, TestRemove_OldTerminalTasksOnly
//	Compact keeps every event and the
//	  live index, reports the sizes      TestCompact_KeepsEverything, TestCompact_ShrinksAndKeepsData
//	Check names each problem's task and
//	  sequence; counts what it read      TestSalvage_PartialResultReportedAsSuch, TestCheck_DamagedStore
//	Salvage: every task copied whole or
//	  reported lost (a partial result
//	  reported as such), the source
//	  never written, no overwrite        TestSalvage_PartialResultReportedAsSuch, TestDamage_EveryShapeNamed, TestSalvage_ReadsOnlyAndOverwritesNothing
//	Salvage past a gone structure: every
//	  live claim copied (a prefix of its
//	  own log, its nonce) or lost with
//	  its nonce, at every page boundary  TestSalvage_TruncatedAtEveryPageAccountsForEveryLiveClaim, TestSalvage_EmptyFileLosesEveryLiveClaim
//	the scan believes only what proves
//	  itself: checksums, the claim's
//	  nonce, the longest legal copy      TestSalvage_ScanTakesOnlyRecordsThatProveThemselves, TestSalvage_ScanSkipsARecordWhoseChecksumFails, TestSalvage_ScanGivesOrphanRecordsByNonce
//	RecordLost: each loss recorded as
//	  ended lost, the new store sound    TestSalvage_TruncatedAtEveryPageAccountsForEveryLiveClaim
//	an empty store file is refused,
//	  never opened as a new store        TestSalvage_EmptyFileLosesEveryLiveClaim
//	and so is a bbolt file without a
//	  bucket (a copy renamed before its
//	  content reached the disk)          TestOpen_EmptyBoltFileRefused
//	a maintenance's steps in order: a
//	  power loss anywhere in gc (Remove,
//	  Compact), Salvage and Install, an
//	  agent's Suspend and Reopen around
//	  them, leaves a store that checks
//	  clean with every append acknowledged
//	  before it (the file synced before
//	  its rename, the directory after),
//	  a lost task recorded lost, and the
//	  old store kept aside               TestPowerLoss_Compact, TestPowerLoss_SalvageInstall, TestPowerLoss_SuspendReopen
//	a crash at each maintenance point
//	  leaves a whole store under its
//	  name, the copy or aside the next
//	  step needs, and the maintenance
//	  runs again on what it left         TestMaintenance_EveryCrashPointLeavesAWholeStore
//	Reopen after a failed maintenance
//	  opens the file in place and keeps
//	  the lock; a Reopen that fails lets
//	  it go                              TestMaintenance_ReopenAfterAFailureBothWays
//	a gap in a task's sequence numbers
//	  (first, middle, last) named by
//	  every reader at the missing seq    TestLoad_GapNamedByEveryReader
//	a log's end against its head's
//	  version, shorter and longer, named
//	  by every reader (LoadFrom too)     TestLoad_LogEndAgainstTheHeadBothWays
//	any single bit flipped in a record
//	  is a checksum mismatch, never a
//	  newer version; on disk, in each
//	  field of a record or a head, named
//	  by every reader                    TestDecodeRecord_EveryBitFlipIsAChecksumMismatch, TestLoad_FlippedBitNamedByEveryReader
//	a record of a version past this
//	  tether's (the next, 255): a
//	  VersionError from every reader;
//	  version 0: corruption              TestLoad_RecordVersionNamedByEveryReader
//	the live index against a log, each
//	  way (ended but listed, live but
//	  missing, an entry without a task),
//	  named by every reader that folds;
//	  every task is a superset of the
//	  live ones                          TestLiveIndex_DisagreementNamedByEveryReader
//	an append whose context ends: before
//	  the committer claims it, ctx.Err()
//	  and nothing written, a retry
//	  commits it once; after, the
//	  commit's outcome, a retry conflicts TestAppend_ContextEndsAroundTheClaim
//	an append's expected version and
//	  its events' seq, behind or ahead:
//	  refused, nothing written           TestAppend_ExpectedVersionBothWays

// holdWith starts helper mode ("hold-lock", "hold-lock-ro") holding the
// store at path open, and returns its pid and a function that makes it
// close the store and exit (also run at cleanup).
func holdWith(t *testing.T, mode, path string) (pid int, release func()) {
	t.Helper()
	cmd := helper(t, mode, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("lock holder: %v", err)
			}
		})
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q, %v", line, err)
	}
	return cmd.Process.Pid, release
}

// holdLockRO is holdWith for a read-only open.
func holdLockRO(t *testing.T, path string) (pid int, release func()) {
	t.Helper()
	return holdWith(t, "hold-lock-ro", path)
}

// flockMode returns the mode ("READ", "WRITE") of the flock process pid
// holds on the file with inode ino, from the kernel's lock table, or "".
func flockMode(t *testing.T, pid int, ino uint64) string {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skipf("needs /proc/locks to see which lock a process holds: %v", err)
	}
	suffix := fmt.Sprintf(":%d", ino)
	for line := range strings.SplitSeq(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->" after the number.
		f := strings.Fields(line)
		if len(f) >= 6 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) && strings.HasSuffix(f[5], suffix) {
			return f[3]
		}
	}
	return ""
}

// TestLock_TwoProcesses: a writer's lock is exclusive and a reader's
// shared, as the kernel's lock table shows them; a second process that
// wants what the holder's lock excludes fails after its timeout with
// ErrLocked naming the holder (it never holds the store beside it), and
// readers open beside a reader.
func TestLock_TwoProcesses(t *testing.T) {
	testproc.Parallel(t)
	type how int
	const (
		writer how = iota
		reader
		compact
	)
	name := map[how]string{writer: "writer", reader: "reader", compact: "Compact"}
	for _, tc := range []struct {
		holder, contender how
		shares            bool
	}{
		{writer, writer, false},
		{writer, reader, false},
		{writer, compact, false},
		{reader, writer, false},
		{reader, compact, false},
		{reader, reader, true},
	} {
		t.Run(name[tc.holder]+" then "+name[tc.contender], func(t *testing.T) {
			testproc.Parallel(t)
			path := testPath(t)
			s := openTest(t, path, Options{})
			mustAppend(t, s, "a", 0, runningLog(0)...)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			var pid int
			var mode string
			switch tc.holder {
			case writer:
				pid, _ = holdWith(t, "hold-lock", path)
				mode = "WRITE"
			case reader:
				pid, _ = holdLockRO(t, path)
				mode = "READ"
			}
			if got := flockMode(t, pid, inode(t, path+lockSuffix)); got != mode {
				t.Fatalf("the %s (pid %d) holds the lock file in mode %q, want %s", name[tc.holder], pid, got, mode)
			}
			const timeout = 150 * time.Millisecond
			var err error
			switch tc.contender {
			case writer:
				var c *Store
				if c, err = Open(path, Options{LockTimeout: timeout}); err == nil {
					c.Close()
				}
			case reader:
				var c *Store
				if c, err = Open(path, Options{ReadOnly: true, LockTimeout: timeout}); err == nil {
					if _, lerr := c.LoadTask(context.Background(), "a"); lerr != nil {
						t.Errorf("a reader beside a reader: %v", lerr)
					}
					c.Close()
				}
			case compact:
				_, _, err = Compact(path, Options{LockTimeout: timeout})
			}
			if tc.shares {
				if err != nil {
					t.Fatalf("a %s beside a %s: %v, want it to share the store", name[tc.contender], name[tc.holder], err)
				}
				return
			}
			if !errors.Is(err, ErrLocked) {
				t.Fatalf("a %s beside a %s: %v, want ErrLocked", name[tc.contender], name[tc.holder], err)
			}
			if want := fmt.Sprintf("process %d (", pid); !strings.Contains(err.Error(), want) {
				t.Errorf("%v does not name the holder, %s...)", err, want)
			}
		})
	}
}

// atState returns the events that take a new task to state, the last of
// them at second last.
func atState(state fsm.State, last int) []fsm.Event {
	run := runningLog(0)
	var evs []fsm.Event
	switch state {
	case fsm.StateCreated:
		evs = run[:1]
	case fsm.StateSpawning:
		evs = run[:2]
	case fsm.StateExecutorUp:
		evs = run[:3]
	case fsm.StateLaunching:
		evs = run[:4]
	case fsm.StateLaunched:
		evs = run[:5]
	case fsm.StateRunning:
		evs = run
	case fsm.StateReaping:
		evs = append(run, fsm.Event{Type: fsm.EventTaskExited, Exit: &fsm.ExitStatus{Code: 3}})
	case fsm.StateExited:
		evs = append(run, finishLog(0)...)
	case fsm.StateFailed:
		evs = append(run[:1:1], fsm.Event{Type: fsm.EventConfigRejected, Reason: "bad"})
	case fsm.StateStopped:
		evs = append(run[:1:1], fsm.Event{Type: fsm.EventStopRequested})
	case fsm.StateLost:
		evs = append(run, fsm.Event{Type: fsm.EventExecutorLost, Reason: "gone"},
			fsm.Event{Type: fsm.EventExecutorReaped, Target: fsm.StateLost})
	default:
		panic("no log for state " + state.String())
	}
	evs = slices.Clone(evs)
	for i := range evs {
		evs[i].Time = at(last - len(evs) + 1 + i)
	}
	return evs
}

// TestRemove_WhatItRemoves: Remove takes exactly the tasks in a terminal
// state whose last event is older than the cutoff (strictly), whatever the
// terminal state; never a task in any other state however old; returns
// their ids in order; takes them out of the live index too; and on a
// read-only, closed or cancelled store removes nothing.
func TestRemove_WhatItRemoves(t *testing.T) {
	testproc.Parallel(t)
	terminal := []fsm.State{fsm.StateExited, fsm.StateFailed, fsm.StateStopped, fsm.StateLost}
	live := []fsm.State{fsm.StateCreated, fsm.StateSpawning, fsm.StateExecutorUp, fsm.StateLaunching,
		fsm.StateLaunched, fsm.StateRunning, fsm.StateReaping}
	const cutoff = 100
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	var want []string
	var all []string
	add := func(id string, st fsm.State, last int) {
		mustAppend(t, s, id, 0, atState(st, last)...)
		all = append(all, id)
	}
	for _, st := range terminal {
		add("old-"+st.String(), st, cutoff-10)
		add("at-cutoff-"+st.String(), st, cutoff)
		add("new-"+st.String(), st, cutoff+10)
		want = append(want, "old-"+st.String())
	}
	for _, st := range live {
		add("ancient-"+st.String(), st, 10)
	}
	slices.Sort(want)
	ctx := context.Background()
	before := ids(t, s.Live)

	// A cancelled Remove removes nothing.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := s.Remove(cancelled, baseTime.Add(cutoff*time.Second)); err == nil || len(got) != 0 {
		t.Errorf("Remove with a cancelled context: %v, %v; want an error and nothing removed", got, err)
	}
	if got := ids(t, s.All); len(got) != len(all) {
		t.Fatalf("a refused Remove removed tasks: %d left of %d", len(got), len(all))
	}

	removed, err := s.Remove(ctx, baseTime.Add(cutoff*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, want) {
		t.Fatalf("Remove = %v, want %v", removed, want)
	}
	left := ids(t, s.All)
	for _, id := range all {
		if slices.Contains(want, id) == slices.Contains(left, id) {
			t.Errorf("task %s: removed %v, still there %v", id, slices.Contains(removed, id), slices.Contains(left, id))
		}
	}
	if got := ids(t, s.Live); !slices.Equal(got, before) {
		t.Errorf("the live index changed: %v, was %v", got, before)
	}
	for _, id := range removed {
		if _, err := s.LoadTask(ctx, id); !errors.Is(err, ErrUnknownTask) {
			t.Errorf("removed task %s: LoadTask %v, want ErrUnknownTask", id, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove(ctx, baseTime.Add(time.Hour)); !errors.Is(err, ErrClosed) {
		t.Errorf("Remove on a closed store: %v, want ErrClosed", err)
	}
	r := openTest(t, path, Options{ReadOnly: true})
	if got, err := r.Remove(ctx, baseTime.Add(time.Hour)); !errors.Is(err, ErrReadOnly) || len(got) != 0 {
		t.Errorf("Remove on a read-only store: %v, %v; want ErrReadOnly", got, err)
	}
}

// TestCompact_KeepsEverything: every task's events, its folded state and
// the live index are the same after Compact, which reports the file's
// sizes before and after, and the store checks clean.
func TestCompact_KeepsEverything(t *testing.T) {
	testproc.Parallel(t)
	path := testPath(t)
	s := openTest(t, path, Options{NoSync: true})
	ctx := context.Background()
	for i, st := range []fsm.State{fsm.StateRunning, fsm.StateExited, fsm.StateReaping, fsm.StateFailed, fsm.StateSpawning} {
		for j := range 20 {
			mustAppend(t, s, fmt.Sprintf("t%d-%02d", i, j), 0, atState(st, 50)...)
		}
	}
	if _, err := s.Remove(ctx, baseTime.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	before, err := s.LoadTasks(ctx, AllTasks)
	if err != nil {
		t.Fatal(err)
	}
	events := map[string][]fsm.Event{}
	for _, tk := range before.Tasks {
		if events[tk.ID], err = s.Load(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
	}
	liveBefore := ids(t, s.Live)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sizeBefore, sizeAfter, err := Compact(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if sizeBefore != st.Size() || sizeAfter != st2.Size() {
		t.Errorf("Compact reported %d -> %d bytes, the file was %d and is %d", sizeBefore, sizeAfter, st.Size(), st2.Size())
	}
	c := openTest(t, path, Options{ReadOnly: true})
	after, err := c.LoadTasks(ctx, AllTasks)
	if err != nil || len(after.Unreadable) != 0 {
		t.Fatal(err, after.Unreadable)
	}
	if len(after.Tasks) != len(before.Tasks) {
		t.Fatalf("%d tasks after Compact, %d before", len(after.Tasks), len(before.Tasks))
	}
	for i, tk := range after.Tasks {
		if b := before.Tasks[i]; tk.ID != b.ID || tk.State != b.State || tk.Version != b.Version {
			t.Errorf("task %s after Compact: %s v%d, was %s %s v%d", tk.ID, tk.State, tk.Version, b.ID, b.State, b.Version)
		}
		got, err := c.Load(ctx, tk.ID)
		if err != nil || len(got) != len(events[tk.ID]) {
			t.Errorf("task %s: %d events after Compact (%v), %d before", tk.ID, len(got), err, len(events[tk.ID]))
		}
	}
	if got := ids(t, c.Live); !slices.Equal(got, liveBefore) {
		t.Errorf("live index after Compact %v, before %v", got, liveBefore)
	}
}

// TestSalvage_PartialResultReportedAsSuch: a store with sound tasks and
// damaged ones (a record's checksum broken, the tail of a log lost with the
// head intact, in live and ended tasks): Check names each damaged task and
// sequence; Salvage succeeds, and every task of the store is in exactly one
// of its lists: Copied (the new store holds exactly those, whole), or Lost
// with its liveness, state, nonce and the readable prefix; no damaged task
// is copied as if whole.
func TestSalvage_PartialResultReportedAsSuch(t *testing.T) {
	testproc.Parallel(t)
	type want struct {
		lost  bool
		live  bool
		state fsm.State
		seq   uint64 // the sequence Check names (0: the task as a whole)
	}
	tasks := map[string]want{
		"sound-live":      {state: fsm.StateRunning},
		"sound-ended":     {state: fsm.StateExited},
		"flipped-live":    {lost: true, live: true, state: fsm.StateRunning, seq: 4},
		"flipped-ended":   {lost: true, state: fsm.StateExited, seq: 2},
		"short-tail-live": {lost: true, live: true, state: fsm.StateRunning},
	}
	path := damagedStore(t, func(s *Store) {
		for id, w := range tasks {
			evs := atState(w.state, 30)
			if id == "short-tail-live" {
				evs = append(evs, fsm.Event{Type: fsm.EventReattached, Time: at(31)}, fsm.Event{Type: fsm.EventReattached, Time: at(32)})
			}
			mustAppend(t, s, id, 0, evs...)
		}
	}, func(path string) {
		rawUpdate(t, path, func(tx *bolt.Tx) error {
			for id, w := range tasks {
				b, err := rawTask(tx, id)
				if err != nil {
					return err
				}
				switch {
				case id == "short-tail-live":
					// The last record gone, the head still counting it: a
					// log whose end was lost, in the same state.
					n := uint64(len(atState(w.state, 30)) + 2)
					if err := b.Delete(seqKey(n)); err != nil {
						return err
					}
				case w.seq > 0:
					v := slices.Clone(b.Get(seqKey(w.seq)))
					v[len(v)/2] ^= 0x10
					if err := b.Put(seqKey(w.seq), v); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
	ctx := context.Background()
	rep, err := CheckFile(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range tasks {
		named := slices.ContainsFunc(rep.Problems, func(p Problem) bool { return p.Task == id && (w.seq == 0 || p.Seq == w.seq) })
		if w.lost != named {
			t.Errorf("Check names %s (seq %d): %v, want %v:\n%s", id, w.seq, named, w.lost, rep)
		}
	}
	if rep.Tasks != len(tasks) || rep.OK() {
		t.Errorf("Check read %d tasks (want %d), OK = %v", rep.Tasks, len(tasks), rep.OK())
	}

	dst := filepath.Join(t.TempDir(), "salvaged.db")
	srep, err := Salvage(ctx, path, dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wantCopied, gotAll []string
	for id, w := range tasks {
		if !w.lost {
			wantCopied = append(wantCopied, id)
		}
	}
	slices.Sort(wantCopied)
	if !slices.Equal(srep.Copied, wantCopied) {
		t.Errorf("Copied %v, want %v", srep.Copied, wantCopied)
	}
	gotAll = append(gotAll, srep.Copied...)
	for _, l := range srep.Lost {
		gotAll = append(gotAll, l.ID)
		w, ok := tasks[l.ID]
		if !ok || !w.lost {
			t.Errorf("Lost has %s, which is sound", l.ID)
			continue
		}
		if l.Live != w.live || l.State != w.state || l.Nonce != "n1" || l.Err == nil {
			t.Errorf("lost %s: live %v state %s nonce %q err %v; want live %v, %s, n1, a reason", l.ID, l.Live, l.State, l.Nonce, l.Err, w.live, w.state)
		}
		if w.live && l.Prefix.Executor == nil {
			t.Errorf("lost live %s: no executor identity from its readable prefix (%s v%d): its processes cannot be found", l.ID, l.Prefix.State, l.Prefix.Version)
		}
	}
	slices.Sort(gotAll)
	if len(gotAll) != len(tasks) || len(slices.Compact(slices.Clone(gotAll))) != len(tasks) {
		t.Errorf("Copied and Lost together: %v; want each of the %d tasks exactly once", gotAll, len(tasks))
	}
	if !slices.IsSortedFunc(srep.Lost, func(a, b LostTask) int { return strings.Compare(a.ID, b.ID) }) {
		t.Errorf("Lost is not in id order: %v", srep.Lost)
	}
	checkSalvaged(t, dst, srep)
	n := openTest(t, dst, Options{ReadOnly: true})
	if got := ids(t, n.All); !slices.Equal(got, wantCopied) {
		t.Errorf("the salvaged store holds %v, want %v", got, wantCopied)
	}
	if got := ids(t, n.Live); !slices.Equal(got, []string{"sound-live"}) {
		t.Errorf("the salvaged live index %v, want [sound-live]", got)
	}
}
