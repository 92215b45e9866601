//go:build linux

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/crashfs"
	"github.com/tether-fsm/tether/statedir"
)

func journalEntries(n int) []fsm.Event {
	var out []fsm.Event
	for i := 1; i <= n; i++ {
		out = append(out,
			fsm.Event{Type: fsm.EventRestartIntent, Time: int64(i * 10), Attempt: i, Exit: &fsm.ExitStatus{Code: i}, Delay: time.Second},
			fsm.Event{Type: fsm.EventLaunched, Time: int64(i*10 + 1), TaskPID: 100 + i, TaskStartTime: uint64(1000 + i)})
	}
	return out
}

func TestJournal_RoundTrip(t *testing.T) {
	dir := t.TempDir()
	id := fsm.Identity{Nonce: "journal-nonce-1", BootID: "boot"}
	j, err := createJournal(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	want := journalEntries(3)
	want = append(want, fsm.Event{Type: fsm.EventRestartIntent, Time: 40, Attempt: 4, Exit: &fsm.ExitStatus{Signal: 9}},
		fsm.Event{Type: fsm.EventLaunchFailed, Time: 41, Reason: "command not found"})
	for _, e := range want {
		if err := j.append(e); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	got, ok, err := wire.ReadJournal(dir)
	if err != nil || !ok || got.Torn {
		t.Fatalf("ReadJournal: %+v %v %v", got, ok, err)
	}
	if !reflect.DeepEqual(got.Entries, want) {
		t.Fatalf("entries:\n got %v\nwant %v", got.Entries, want)
	}
	if err := got.Match(id); err != nil {
		t.Fatal(err)
	}
	if err := got.Match(fsm.Identity{Nonce: "another-nonce", BootID: "boot"}); !errors.Is(err, wire.ErrSideFileMismatch) {
		t.Fatalf("a journal of another nonce matched: %v", err)
	}
	if err := got.Match(fsm.Identity{Nonce: id.Nonce, BootID: "other-boot"}); !errors.Is(err, wire.ErrSideFileMismatch) {
		t.Fatalf("a journal of another boot matched: %v", err)
	}
	if _, ok, err := wire.ReadJournal(t.TempDir()); ok || err != nil {
		t.Fatalf("no journal: %v %v", ok, err)
	}
}

// A frame cut short at the end is a torn tail (never durable, ignored); a
// damaged frame before the end is an error; a symlink is not followed.
func TestJournal_TornTailDamageAndLinks(t *testing.T) {
	dir := t.TempDir()
	j, err := createJournal(dir, fsm.Identity{Nonce: "journal-nonce-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range journalEntries(2) {
		if err := j.append(e); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	path := filepath.Join(dir, statedir.JournalFile)
	whole, _ := os.ReadFile(path)
	for cut := 1; cut < 8; cut++ {
		if err := os.WriteFile(path, whole[:len(whole)-cut], 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, err := wire.ReadJournal(dir)
		if err != nil || !got.Torn || len(got.Entries) != 3 {
			t.Fatalf("cut %d bytes: %d entries, torn %v, %v; want the 3 whole entries and a torn tail", cut, len(got.Entries), got.Torn, err)
		}
	}
	damaged := append([]byte(nil), whole...)
	damaged[20] ^= 0xff // inside the header or the first entry
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wire.ReadJournal(dir); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("a damaged frame before the end: %v, want ErrProtocol", err)
	}
	other := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(other, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(path)
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wire.ReadJournal(dir); !errors.Is(err, wire.ErrSideFileMismatch) {
		t.Fatalf("a symlinked journal: %v, want ErrSideFileMismatch", err)
	}
}

// Power loss: every entry whose append returned is in the journal in every
// crash state, and nothing else is (a torn tail at most).
func TestPowerLoss_RestartJournal(t *testing.T) {
	fsys := crashfs.Mount(t, "", crashfs.Options{})
	dir := fsys.Path("task")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, _ := os.Open(fsys.Dir())
	_ = d.Sync() // the task directory's own name (the driver creates it durably)
	d.Close()
	begun := fsys.Mark("task directory durable")
	j, err := createJournal(dir, fsm.Identity{Nonce: "journal-nonce-1"})
	if err != nil {
		t.Fatal(err)
	}
	created := fsys.Mark("journal created")
	entries := journalEntries(4)
	var acks []crashfs.Mark
	for i, e := range entries {
		if err := j.append(e); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, fsys.Mark(fmt.Sprintf("entry %d acknowledged", i+1)))
	}
	j.close()
	states := fsys.CrashStates(crashfs.StateOptions{Subsets: 4, Seed: 1, Since: begun})
	for _, st := range states {
		out := t.TempDir()
		if err := st.Materialize(out); err != nil {
			t.Fatal(err)
		}
		got, ok, err := wire.ReadJournal(filepath.Join(out, "task"))
		if err != nil {
			t.Errorf("crash state %s: %v", st.Name, err)
			continue
		}
		if st.Before(created) && !ok {
			t.Errorf("crash state %s: the journal is gone after createJournal returned", st.Name)
		}
		want := 0
		for i, m := range acks {
			if st.Before(m) {
				want = i + 1
			}
		}
		if len(got.Entries) < want || len(got.Entries) > 0 && !reflect.DeepEqual(got.Entries, entries[:len(got.Entries)]) {
			t.Errorf("crash state %s: %d entries (torn %v), want the first %d acknowledged ones in order", st.Name, len(got.Entries), got.Torn, want)
		}
	}
	t.Logf("%d crash states", len(states))
}

// TestJournal_OldExecutorsEntriesReadTyped: an executor of protocol 5
// journalled a restart-intent's delay as its Grace; read now, it is the
// entry's Delay (fsm.Event.Upgrade), as the log records it.
func TestJournal_OldExecutorsEntriesReadTyped(t *testing.T) {
	dir := t.TempDir()
	j, err := createJournal(dir, fsm.Identity{Nonce: "journal-nonce-1"})
	if err != nil {
		t.Fatal(err)
	}
	old := fsm.Event{Type: fsm.EventRestartIntent, Time: 10, Attempt: 1, Exit: &fsm.ExitStatus{Code: 2}, Grace: 3 * time.Second}
	if err := j.append(old); err != nil {
		t.Fatal(err)
	}
	j.close()
	got, ok, err := wire.ReadJournal(dir)
	if err != nil || !ok || len(got.Entries) != 1 {
		t.Fatalf("ReadJournal: %+v %v %v", got, ok, err)
	}
	if e := got.Entries[0]; e.Delay != 3*time.Second || e.Grace != 0 {
		t.Fatalf("an old restart-intent read with delay %s grace %s, want the delay 3s", e.Delay, e.Grace)
	}
}

// A version-2 journal holds its runs' ready entries among the restarts,
// each at its place (its number in the journal) and naming its run; a
// version-1 journal (an executor before protocol 10: no version in its
// header) reads as before, and a ready entry in it, or a ready out of its
// place or naming no run, is damage.
func TestJournal_ReadyEntriesByVersion(t *testing.T) {
	ready := func(place, pid int) fsm.Event {
		return fsm.Event{Type: fsm.EventReady, Time: int64(place), Attempt: place, TaskPID: pid, TaskStartTime: 7}
	}
	restarts := journalEntries(1)
	write := func(t *testing.T, header wire.JournalHeader, entries ...fsm.Event) string {
		t.Helper()
		dir := t.TempDir()
		var b []byte
		for _, v := range append([]any{header}, anys(entries)...) {
			f, err := wire.JournalFrame(v)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, f...)
		}
		if err := os.WriteFile(filepath.Join(dir, statedir.JournalFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	v2 := wire.JournalHeader{Nonce: "n", Version: wire.JournalVersion}
	good := []fsm.Event{ready(1, 50), restarts[0], restarts[1], ready(4, 101)}
	j, ok, err := wire.ReadJournal(write(t, v2, good...))
	if err != nil || !ok || j.Version != 2 || !reflect.DeepEqual(j.Entries, good) {
		t.Fatalf("version 2: %+v %v %v", j, ok, err)
	}
	old, ok, err := wire.ReadJournal(write(t, wire.JournalHeader{Nonce: "n"}, restarts...))
	if err != nil || !ok || old.Version != 1 || !reflect.DeepEqual(old.Entries, restarts) {
		t.Fatalf("version 1: %+v %v %v", old, ok, err)
	}
	for name, c := range map[string]struct {
		h  wire.JournalHeader
		es []fsm.Event
	}{
		"a ready in a version-1 journal": {wire.JournalHeader{Nonce: "n"}, []fsm.Event{ready(1, 50)}},
		"a ready out of its place":       {v2, []fsm.Event{restarts[0], ready(1, 50)}},
		"a ready naming no place":        {v2, []fsm.Event{{Type: fsm.EventReady, TaskPID: 50}}},
		"a ready naming no run":          {v2, []fsm.Event{{Type: fsm.EventReady, Attempt: 1}}},
		"an event that is no entry":      {v2, []fsm.Event{{Type: fsm.EventRunning}}},
	} {
		if _, _, err := wire.ReadJournal(write(t, c.h, c.es...)); !errors.Is(err, wire.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func anys(es []fsm.Event) []any {
	out := make([]any, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
