package logs

import (
	"errors"
	"fmt"

	"github.com/tether-fsm/tether/fsm"
)

// Configuration and names.
var (
	// ErrInvalidConfig reports a logs block that cannot be used: it is
	// fsm.ErrInvalidSpec, which Config.Validate wraps.
	ErrInvalidConfig = fsm.ErrInvalidSpec
	// ErrBadName reports a stream name that is not a plain file name.
	ErrBadName = errors.New("logs: invalid stream name")
	// ErrBadLines reports a negative line count for a tail.
	ErrBadLines = errors.New("logs: line count must be 0 or more")
)

// Files.
var (
	// ErrNotRegular reports a log path that holds something other than a
	// regular file of its own (a symlink, a directory, a file with other
	// hard links): tether refuses to write or read through it.
	ErrNotRegular = errors.New("logs: not a plain regular file")
	// ErrRotate reports a rotation that could not be done; the output it
	// held back is dropped and counted.
	ErrRotate = errors.New("logs: rotation failed")
)

// Writing.
var (
	// ErrClosed reports a write to a closed Writer.
	ErrClosed = errors.New("logs: writer closed")
)

// The journal.
var (
	// ErrNoJournal reports a host where no journal listens at
	// JournalSocket: a task's output is kept in its files only.
	ErrNoJournal = errors.New("logs: no systemd journal on this host")
)

// Reading.
var (
	// ErrGap reports output that rotation deleted before a reader got to it.
	ErrGap = errors.New("logs: output lost to rotation")
	// ErrUnsettled reports a live file that kept changing under a reader
	// trying to find out which index it has.
	ErrUnsettled = errors.New("logs: the live file kept changing while it was opened")
)

// GapError reports rotated files that were deleted before a reader read
// them: the reader fell behind by more than the retained files. The cursor
// has moved past the gap; reading again continues after it.
type GapError struct {
	Stream string // the stream's live file name, e.g. stdout.log
	// First and Last are the indexes of the files that were lost. When Reset
	// is set, the stream's numbering went back (its files were removed or
	// replaced) and the extent of the loss is unknown; Last is then 0.
	First, Last uint64
	Reset       bool
	Next        string // the file reading continues with
}

func (e *GapError) Error() string {
	if e.Reset {
		return fmt.Sprintf("logs: %s: the stream's files were replaced after %s.%d was read; output may be missing, reading continues with %s",
			e.Stream, e.Stream, e.First-1, e.Next)
	}
	files := fmt.Sprintf("file %s.%d was", e.Stream, e.First)
	if e.Last > e.First {
		files = fmt.Sprintf("%d files (%s.%d to %s.%d) were", e.Last-e.First+1, e.Stream, e.First, e.Stream, e.Last)
	}
	return fmt.Sprintf("logs: %s: %s deleted by rotation before it could be read (the reader fell behind by more than max_files); reading continues with %s",
		e.Stream, files, e.Next)
}

// Unwrap makes errors.Is(err, ErrGap) true.
func (e *GapError) Unwrap() error { return ErrGap }
