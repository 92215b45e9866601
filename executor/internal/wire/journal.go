//go:build linux

package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// The restart journal.
//
// The executor is the process that is there when a task exits, so it
// performs the task's restarts (fsm.RestartPolicy), whether a driver is
// attached or not. It writes each restart ahead, in statedir.JournalFile in the task
// directory: the restart intent (a restart-intent event: the attempt, the
// exit status of the run that ended, the delay), fsynced before it waits
// and relaunches, then the outcome (launched, with the new task process, or
// launch-failed). The entries are fsm events with the executor's time; the
// driver folds those its log lacks into the log, in order, on its next
// contact (a watch of the live executor, or this file once the executor is
// gone). Each restart is one intent and one outcome, so the number of
// entries the log holds follows from the task's state alone
// (fsm.Task.RestartEvents), and folding is idempotent.
//
// From JournalVersion 2 (protocol 10), the journal records each run's
// readiness too: a ready event naming the run (its task process) with the
// time it became ready, fsynced before anything is told of it (a ready
// request's answer, a watch). It is a fact of the run like its exit, so
// whoever supervises the task records it from here, with the time it
// happened, whether or not a client waited for it; a ready event folded
// from the journal names its run (fsm.Event.Journalled), and the log's
// count of them is part of how far into the journal it is. A journal of
// an older executor (version 1: no version in its header) holds restart
// entries alone, and reads as before; its task's readiness is recorded by
// the driver that waits for it, as a ready event naming no run.
//
// The file is a header (the spawn nonce and boot id of the executor that
// writes it, so that the driver matches it against the log before
// believing it), then one frame per entry: a 4-byte big-endian length, a
// 4-byte CRC32C of the JSON that follows, and the JSON. A frame cut short
// at the end (a crash while appending) is a torn tail: the entry was not
// durable, so its restart never went ahead; it is ignored. A frame that
// fails its checksum before the end is damage, reported.

// maxJournal bounds what is read of a journal (a task restarted that many
// times has long exhausted any sane policy).
const MaxJournal = 4 << 20

// journalCRC is the CRC32C table, built on first use: building it costs a
// fifth of a millisecond that a process linking this package but writing
// no journal (every CLI) should not pay at start.
var journalCRC = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// JournalFrame is v as one frame of a restart journal: a 4-byte
// big-endian length, a 4-byte CRC32C of the JSON that follows, and the
// JSON.
func JournalFrame(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("executor: restart journal: encode: %w", err)
	}
	buf := make([]byte, 8, 8+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(b, journalCRC()))
	return append(buf, b...), nil
}

// JournalVersion is the version of the journal this executor writes: 2
// journals each run's readiness (ready entries) besides its restarts.
const JournalVersion = 2

// JournalHeader is the first frame of a journal.
type JournalHeader struct {
	Nonce  string `json:"nonce"`
	BootID string `json:"boot_id"`
	// Version is the journal's version (JournalVersion); 0 in a journal
	// of an executor before protocol 10, which is version 1.
	Version int `json:"version,omitempty"`
}

// Journal is a restart journal as read from a task directory.
type Journal struct {
	Nonce, BootID string
	// Version is the journal's version: 1 for one of an executor before
	// protocol 10 (restart entries only), JournalVersion for this one's.
	Version int
	// Entries are the restart-intent, launched and launch-failed events
	// the executor recorded, and (version 2) the ready events of its
	// runs, in order.
	Entries []fsm.Event
	// Torn is set when the last frame was cut short (ignored: it was
	// never durable).
	Torn bool
}

// Match checks the journal against the log's executor identity (nonce,
// and boot id when the log has one): ErrSideFileMismatch otherwise.
func (j Journal) Match(want fsm.Identity) error {
	switch {
	case j.Nonce != want.Nonce:
		return fmt.Errorf("%w: %s names nonce %q, the log's executor has %q", ErrSideFileMismatch, statedir.JournalFile, j.Nonce, want.Nonce)
	case want.BootID != "" && j.BootID != want.BootID:
		return fmt.Errorf("%w: %s is from boot %q, the log's executor ran in %q", ErrSideFileMismatch, statedir.JournalFile, j.BootID, want.BootID)
	}
	return nil
}

// ReadJournal reads the restart journal in taskDir (never through a
// symbolic link, at most maxJournal bytes). ok is false when there is none.
func ReadJournal(taskDir string) (j Journal, ok bool, err error) {
	path := filepath.Join(taskDir, statedir.JournalFile)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return j, false, nil
	case errors.Is(err, unix.ELOOP):
		return j, false, fmt.Errorf("%w: %s is a symbolic link; not followed", ErrSideFileMismatch, path)
	case err != nil:
		return j, false, fmt.Errorf("executor: read %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return j, false, fmt.Errorf("%w: %s is not a regular file (%v)", ErrSideFileMismatch, path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxJournal+1))
	if err != nil {
		return j, false, fmt.Errorf("executor: read %s: %w", path, err)
	}
	if len(b) > MaxJournal {
		return j, false, fmt.Errorf("%w: %s is larger than %d bytes", ErrSideFileMismatch, path, MaxJournal)
	}
	j, err = ParseJournal(b)
	if err != nil {
		return j, false, fmt.Errorf("%w: %s: %w", ErrProtocol, path, err)
	}
	return j, true, nil
}

// parseJournal decodes a journal's bytes. A frame cut short at the end is
// a torn tail; an empty file is a header that never made it (torn too).
func ParseJournal(b []byte) (Journal, error) {
	var j Journal
	first := true
	for len(b) > 0 {
		if len(b) < 8 {
			j.Torn = true
			break
		}
		n := int(binary.BigEndian.Uint32(b))
		sum := binary.BigEndian.Uint32(b[4:])
		if n > len(b)-8 {
			j.Torn = true
			break
		}
		body := b[8 : 8+n]
		b = b[8+n:]
		if crc32.Checksum(body, journalCRC()) != sum {
			if len(b) == 0 {
				j.Torn = true // a last frame whose bytes did not all land
				break
			}
			return j, errors.New("an entry's checksum does not match")
		}
		if first {
			var h JournalHeader
			if err := json.Unmarshal(body, &h); err != nil || h.Nonce == "" {
				return j, fmt.Errorf("bad header: %v", err)
			}
			j.Nonce, j.BootID, j.Version, first = h.Nonce, h.BootID, max(h.Version, 1), false
			continue
		}
		var ev fsm.Event
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			return j, fmt.Errorf("entry %d: %w", len(j.Entries)+1, err)
		}
		switch {
		case ev.Type == fsm.EventRestartIntent, ev.Type == fsm.EventLaunched, ev.Type == fsm.EventLaunchFailed:
		case ev.Type == fsm.EventReady && j.Version >= 2 && ev.Journalled() && ev.Attempt == len(j.Entries)+1:
			// A run's readiness (version 2), naming its run and its place.
		default:
			return j, fmt.Errorf("entry %d: %s is not an entry of a version %d journal", len(j.Entries)+1, ev.Type, j.Version)
		}
		ev.Upgrade() // an entry of an executor of protocol 5 (its restart-intent's delay in Grace)
		if err := ev.Validate(); err != nil {
			return j, fmt.Errorf("entry %d: %w", len(j.Entries)+1, err)
		}
		j.Entries = append(j.Entries, ev)
	}
	if first && !j.Torn {
		j.Torn = true // empty: the header never made it
	}
	return j, nil
}

// syncDirOf fsyncs the directory holding path.
func SyncDirOf(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
