package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// journalEntry parses one datagram of journald's native protocol: KEY=VALUE
// lines, and KEY\n<le64 length><value>\n for a binary value.
func journalEntry(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			t.Fatalf("an entry's field without its newline: %q", b)
		}
		field := b[:nl]
		if k, v, ok := bytes.Cut(field, []byte("=")); ok {
			out[string(k)] = string(v)
			b = b[nl+1:]
			continue
		}
		rest := b[nl+1:]
		if len(rest) < 8 {
			t.Fatalf("binary field %q without its length", field)
		}
		n := binary.LittleEndian.Uint64(rest)
		if uint64(len(rest)) < 8+n+1 || rest[8+n] != '\n' {
			t.Fatalf("binary field %q of length %d malformed: %q", field, n, rest)
		}
		out[string(field)] = string(rest[8 : 8+n])
		b = rest[8+n+1:]
	}
	return out
}

// fakeJournal is a datagram socket where a journal's would be: what a
// Journal sends is read back as entries (the protocol, not a journal).
func fakeJournal(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "socket")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return path, c
}

// receive reads n entries (each within a generous bound: they were sent
// before receive is called).
func receive(t *testing.T, c *net.UnixConn, n int) []map[string]string {
	t.Helper()
	var out []map[string]string
	buf := make([]byte, 256<<10)
	for range n {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("entry %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, journalEntry(t, buf[:k]))
	}
	return out
}

// TestJournal_OneEntryALineWithTheTasksFields: each line written, split
// across writes or several in one, is one entry whose MESSAGE is the line
// without its newline, with the task's id, name and stream and the
// stream's priority; a line the stream ends without a newline is sent at
// Close; a line longer than journald's LineMax is sent in pieces.
func TestJournal_OneEntryALineWithTheTasksFields(t *testing.T) {
	path, c := fakeJournal(t)
	j, err := OpenJournal(path, JournalFields{TaskID: "web-a1b2c3", TaskName: "web", Stream: "stderr.log"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxJournalLine+10)
	for _, w := range []string{"first li", "ne\nsecond\n", "", "\n", "bin\x00ary é\n", long + "\n", "no newline"} {
		if n, err := j.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"first line", "second", "", "bin\x00ary é", long[:maxJournalLine], long[maxJournalLine:], "no newline"}
	got := receive(t, c, len(want))
	for i, e := range got {
		if e["MESSAGE"] != want[i] {
			t.Errorf("entry %d: MESSAGE %q, want %q", i, trim(e["MESSAGE"]), trim(want[i]))
		}
		for k, v := range map[string]string{"PRIORITY": "3", "SYSLOG_IDENTIFIER": "web", "TETHER_TASK_ID": "web-a1b2c3",
			"TETHER_TASK_NAME": "web", "TETHER_STREAM": "stderr"} {
			if e[k] != v {
				t.Errorf("entry %d: %s=%q, want %q", i, k, e[k], v)
			}
		}
	}
	if j.Sent() != int64(len(want)) || j.Dropped() != 0 {
		t.Errorf("sent %d dropped %d, want %d and 0", j.Sent(), j.Dropped(), len(want))
	}

	// stdout: priority 6; a value holding a newline (a name cannot, but
	// the encoding must not break) goes as a binary field.
	j, err = OpenJournal(path, JournalFields{TaskID: "a-1", TaskName: "a\nb", Stream: "stdout.log"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = j.Write([]byte("hello\n"))
	_ = j.Close()
	e := receive(t, c, 1)[0]
	if e["MESSAGE"] != "hello" || e["PRIORITY"] != "6" || e["TETHER_STREAM"] != "stdout" || e["TETHER_TASK_NAME"] != "a\nb" {
		t.Errorf("stdout entry: %q", e)
	}
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:20] + "…" + s[len(s)-20:]
	}
	return s
}

// TestJournal_NeverBlocksDropsAndCounts: a journal that takes nothing (its
// queue full) neither blocks the writer nor fails it: the entries it does
// not take are counted dropped.
func TestJournal_NeverBlocksDropsAndCounts(t *testing.T) {
	path, _ := fakeJournal(t) // never read: its queue fills
	j, err := OpenJournal(path, JournalFields{TaskID: "w-1", TaskName: "w", Stream: "stdout.log"})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	line := []byte(strings.Repeat("y", 1000) + "\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10000 {
			if n, err := j.Write(line); n != len(line) || err != nil {
				t.Errorf("Write = %d, %v", n, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Write blocked on a journal that takes nothing")
	}
	if j.Dropped() == 0 || j.Sent()+j.Dropped() != 10000 {
		t.Errorf("sent %d dropped %d of 10000, want some dropped and every one counted", j.Sent(), j.Dropped())
	}
}

// TestOpenJournal_NoJournalIsErrNoJournal: no socket there, or one nobody
// listens on, is ErrNoJournal naming the socket.
func TestOpenJournal_NoJournalIsErrNoJournal(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	_, err := OpenJournal(missing, JournalFields{TaskID: "a-1", TaskName: "a"})
	if !errors.Is(err, ErrNoJournal) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing socket: %v, want ErrNoJournal naming it", err)
	}
	path, c := fakeJournal(t)
	c.Close() // its file stays, nobody listens
	if _, err := OpenJournal(path, JournalFields{TaskID: "a-1", TaskName: "a"}); !errors.Is(err, ErrNoJournal) {
		t.Errorf("a socket nobody listens on: %v, want ErrNoJournal", err)
	}
}
