//go:build linux

package server

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// journal is the executor's open journal (statedir.JournalFile): its
// task's restarts and its runs' readiness, each entry fsynced before
// anything it announces happens or is told (see wire's journal doc).
type journal struct {
	f       *os.File
	entries []fsm.Event // the entries written, in order
	// broken is the error of a write that failed: what it left in the
	// file is not known, so nothing more is written (a restart is then
	// not made, a readiness not journalled).
	broken error
}

// createJournal starts a new journal in dir for the executor with id,
// replacing any earlier executor's; the file (mode 0600 whatever the
// umask) and its name are made durable before it returns.
func createJournal(dir string, id fsm.Identity) (*journal, error) {
	path := filepath.Join(dir, statedir.JournalFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("executor: journal: %w", err)
	}
	if err := f.Chmod(0o600); err != nil { // an earlier file's mode is kept by O_CREAT
		f.Close()
		return nil, fmt.Errorf("executor: journal: %w", err)
	}
	j := &journal{f: f}
	if err := j.frame(wire.JournalHeader{Nonce: id.Nonce, BootID: id.BootID, Version: wire.JournalVersion}); err != nil {
		f.Close()
		return nil, err
	}
	if err := wire.SyncDirOf(path); err != nil {
		f.Close()
		return nil, fmt.Errorf("executor: journal: %w", err)
	}
	return j, nil
}

// append writes ev durably (fsync) before it returns: nothing an entry
// announces may happen, and nobody may be told of it, before the entry is
// on disk.
func (j *journal) append(ev fsm.Event) error {
	if j.broken != nil {
		return fmt.Errorf("executor: journal: an earlier write failed: %w", j.broken)
	}
	if err := j.frame(ev); err != nil {
		j.broken = err
		return err
	}
	j.entries = append(j.entries, ev)
	return nil
}

func (j *journal) frame(v any) error {
	buf, err := wire.JournalFrame(v)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(buf); err != nil {
		return fmt.Errorf("executor: journal: write: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("executor: journal: fsync: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// journalLen is how many entries the journal holds (0 without one).
func (s *server) journalLen() int {
	if s.jn == nil {
		return 0
	}
	return len(s.jn.entries)
}

// journalReady journals the current run's readiness (at now) and reports
// whether it did: the entry is on disk before any waiter or watch is told.
// Without a journal, or when it fails, the run is ready all the same, and
// whoever waits records it (Status.ReadyJournalled is false).
func (s *server) journalReady(now time.Time) bool {
	if s.jn == nil {
		return false
	}
	ev := fsm.Event{Type: fsm.EventReady, Time: now.UnixNano(), Attempt: len(s.jn.entries) + 1, TaskPID: s.task.pid, TaskStartTime: s.task.start}
	crash(wire.CrashBeforeReadyEntry)
	if err := s.jn.append(ev); err != nil {
		s.log.Error("could not journal the run's readiness; a driver that waits for it records it", "err", err)
		return false
	}
	crash(wire.CrashAfterReadyEntry)
	return true
}
