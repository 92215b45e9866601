package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// JournalSocket is where systemd's journal takes entries in its native
// protocol (systemd-journald.socket).
const JournalSocket = "/run/systemd/journal/socket"

// maxJournalLine is the longest line sent as one entry: journald's own
// LineMax for a stream (48K); a longer line is sent as several entries.
const maxJournalLine = 48 << 10

// Priorities of the two streams (syslog's): info for stdout, err for
// stderr.
const (
	priorityStdout = 6
	priorityStderr = 3
)

// JournalFields are what each entry of a task's stream carries beside its
// MESSAGE: the task's id and name (TETHER_TASK_ID, TETHER_TASK_NAME, and
// the name as SYSLOG_IDENTIFIER, which journalctl -t selects) and the
// stream (TETHER_STREAM, stdout or stderr, and PRIORITY: 6 or 3).
type JournalFields struct {
	TaskID, TaskName string
	Stream           string // statedir.StdoutFile or StderrFile, or "stdout"/"stderr"
}

// Journal forwards a task's stream to the journal, one entry a line, in
// journald's native protocol (datagrams on JournalSocket). It never
// blocks and never fails its writer: an entry the journal does not take
// at once (its socket's queue full, journald gone) is dropped and
// counted, so the task's output to its files, and the task itself, never
// wait on the journal. A Journal is written by one goroutine (the stream's
// copier); Dropped may be read from any.
type Journal struct {
	fd      int
	head    []byte // the fixed fields, encoded
	partial []byte // the line begun and not ended yet
	sent    atomic.Int64
	dropped atomic.Int64
}

// OpenJournal connects to the journal at socket (JournalSocket but in
// tests) for one stream's entries. A host without a journal listening
// there is ErrNoJournal, naming the socket.
func OpenJournal(socket string, f JournalFields) (*Journal, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("logs: journal socket: %w", err)
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: socket}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: nothing listens at %s (%v)", ErrNoJournal, socket, err)
		}
		return nil, fmt.Errorf("logs: connecting to the journal at %s: %w", socket, err)
	}
	stream, prio := "stdout", priorityStdout
	if f.Stream == "stderr" || f.Stream == "stderr.log" {
		stream, prio = "stderr", priorityStderr
	}
	var head []byte
	head = appendField(head, "PRIORITY", []byte{byte('0' + prio)})
	head = appendField(head, "SYSLOG_IDENTIFIER", []byte(f.TaskName))
	head = appendField(head, "TETHER_TASK_ID", []byte(f.TaskID))
	head = appendField(head, "TETHER_TASK_NAME", []byte(f.TaskName))
	head = appendField(head, "TETHER_STREAM", []byte(stream))
	return &Journal{fd: fd, head: head}, nil
}

// appendField encodes one field in the native protocol: KEY=VALUE and a
// newline, or, for a value holding a newline, KEY, a newline, the value's
// length as 64-bit little endian, the value and a newline.
func appendField(b []byte, key string, value []byte) []byte {
	if bytes.IndexByte(value, '\n') < 0 {
		b = append(b, key...)
		b = append(b, '=')
		b = append(b, value...)
		return append(b, '\n')
	}
	b = append(b, key...)
	b = append(b, '\n')
	b = binary.LittleEndian.AppendUint64(b, uint64(len(value)))
	b = append(b, value...)
	return append(b, '\n')
}

// Write sends each line p ends (a line begun in an earlier write
// included) as an entry; what follows the last newline waits for the
// next write or Close. It always returns len(p), nil.
func (j *Journal) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			j.partial = append(j.partial, p...)
			for len(j.partial) >= maxJournalLine {
				j.send(j.partial[:maxJournalLine])
				j.partial = append(j.partial[:0], j.partial[maxJournalLine:]...)
			}
			break
		}
		line := p[:i]
		if len(j.partial) > 0 {
			line = append(j.partial, line...)
			j.partial = j.partial[:0]
		}
		for len(line) > maxJournalLine {
			j.send(line[:maxJournalLine])
			line = line[maxJournalLine:]
		}
		j.send(line)
		p = p[i+1:]
	}
	return n, nil
}

// send sends one entry, or counts it dropped.
func (j *Journal) send(line []byte) {
	msg := appendField(append([]byte(nil), j.head...), "MESSAGE", line)
	if _, err := unix.Write(j.fd, msg); err != nil {
		j.dropped.Add(1)
		return
	}
	j.sent.Add(1)
}

// Sent and Dropped count the entries the journal took and those it did
// not.
func (j *Journal) Sent() int64    { return j.sent.Load() }
func (j *Journal) Dropped() int64 { return j.dropped.Load() }

// Close sends the line the stream ended without a newline, if any, and
// closes the socket.
func (j *Journal) Close() error {
	if len(j.partial) > 0 {
		j.send(j.partial)
		j.partial = nil
	}
	return unix.Close(j.fd)
}
