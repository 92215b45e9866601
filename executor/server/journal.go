//go:build linux

package server

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// journal is the executor's open restart journal.
type journal struct {
	f *os.File
	n int // entries written
}

// createJournal starts a new journal in dir for the executor with id,
// replacing any earlier executor's; the file and its name are made durable
// before it returns.
func createJournal(dir string, id fsm.Identity) (*journal, error) {
	path := filepath.Join(dir, statedir.JournalFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("executor: restart journal: %w", err)
	}
	j := &journal{f: f}
	if err := j.frame(wire.JournalHeader{Nonce: id.Nonce, BootID: id.BootID}); err != nil {
		f.Close()
		return nil, err
	}
	if err := wire.SyncDirOf(path); err != nil {
		f.Close()
		return nil, fmt.Errorf("executor: restart journal: %w", err)
	}
	return j, nil
}

// append writes ev durably (fsync) before it returns: nothing an entry
// announces may happen before the entry is on disk.
func (j *journal) append(ev fsm.Event) error {
	if err := j.frame(ev); err != nil {
		return err
	}
	j.n++
	return nil
}

func (j *journal) frame(v any) error {
	buf, err := wire.JournalFrame(v)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(buf); err != nil {
		return fmt.Errorf("executor: restart journal: write: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("executor: restart journal: fsync: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }
