package logs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// clock is a writer's injected time: each write reads it.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func (c *clock) set(t time.Time) { c.t = t }

func timedWriter(t *testing.T, dir string, cfg Config) (*Writer, *clock) {
	t.Helper()
	w := openWriter(t, dir, cfg)
	ck := &clock{t: time.UnixMilli(1_700_000_000_000)}
	w.now = ck.now
	return w, ck
}

// timedLine is a line as a test compares it: its text and its time in
// milliseconds (0: none).
type timedLine struct {
	text string
	ms   int64
}

func (l timedLine) String() string { return fmt.Sprintf("%q@%d", l.text, l.ms) }

func linesAt(t *testing.T, dir string) []timedLine {
	t.Helper()
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out []timedLine
	collect := func(l Line) error {
		ms := int64(0)
		if !l.Time.IsZero() {
			ms = l.Time.UnixMilli()
		}
		out = append(out, timedLine{string(l.Text), ms})
		return nil
	}
	if err := c.ReadLines(collect); err != nil {
		t.Fatal(err)
	}
	if err := c.FlushLine(collect); err != nil {
		t.Fatal(err)
	}
	return out
}

// Each line has the time its first byte was written at (the copier's
// read), to the millisecond: a line written in pieces keeps its first
// piece's; lines of one write share it; a clock stepped back is kept as
// it was read; a last line not ended is held until flushed.
func TestLines_EachLineHasTheTimeItsFirstByteWasRead(t *testing.T) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, DefaultConfig())
	base := ck.t.UnixMilli()
	step := func(ms int64, s string) {
		ck.set(time.UnixMilli(base + ms).Add(123 * time.Microsecond))
		mustWrite(t, w, []byte(s))
	}
	step(0, "a\n")
	step(5, "b\nc\n")   // two lines, one read
	step(9, "d-")       // a line begun...
	step(12, "still-")  // ...goes on...
	step(20, "done\ne") // ...and ends; e begins in the same read
	step(30, "\n")
	step(30, "f\n")  // the same millisecond as the line before: its record serves
	step(25, "g\n")  // the clock stepped back
	step(40, "tail") // not ended
	want := []timedLine{
		{"a\n", base}, {"b\n", base + 5}, {"c\n", base + 5}, {"d-still-done\n", base + 9},
		{"e\n", base + 20}, {"f\n", base + 30}, {"g\n", base + 25}, {"tail", base + 40},
	}
	if got := linesAt(t, dir); !slices.Equal(got, want) {
		t.Fatalf("lines:\n%v\nwant:\n%v", got, want)
	}
}

// Across rotations every line keeps its time, a line cut by a rotation
// its first byte's; the times of the files rotation deletes go with them,
// and a writer reopened continues the live file's times.
func TestLines_TimesFollowRotationAndReopen(t *testing.T) {
	for _, maxFiles := range []int{1, 2} {
		t.Run(fmt.Sprintf("max_files=%d", maxFiles), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{MaxFiles: maxFiles, MaxFileSizeMB: 1}
			w, ck := timedWriter(t, dir, cfg)
			base := ck.t.UnixMilli()
			// 1 MiB lines of 64 KiB, less a byte (a reader's longest):
			// each write at its own millisecond, rotating twice.
			line := strings.Repeat("x", 64<<10-2) + "\n"
			n := 2*16 + 3
			for i := range n {
				ck.set(time.UnixMilli(base + int64(i)))
				mustWrite(t, w, []byte(line))
			}
			// A rotation deletes the times of the file it deletes.
			if got := timesFiles(t, dir); len(got) != maxFiles {
				t.Errorf("times files after the rotations %v, want one for each of the %d files kept", got, maxFiles)
			}
			w.Close()
			// Times of a file long gone (a crash between the two deletes)
			// are deleted when the writer opens again.
			stray := filepath.Join(dir, ".stdout.log.1.time")
			if err := os.WriteFile(stray, []byte(timesHeader), 0o600); err != nil {
				t.Fatal(err)
			}
			w, ck = timedWriter(t, dir, cfg)
			ck.set(time.UnixMilli(base + 1000))
			mustWrite(t, w, []byte("after reopen\n"))
			got := linesAt(t, dir)
			if len(got) < 2 || got[len(got)-1] != (timedLine{"after reopen\n", base + 1000}) {
				t.Fatalf("last line: %v", got[len(got)-1:])
			}
			// Every line kept has the millisecond it was written at.
			first := n - (len(got) - 1)
			for i, l := range got[:len(got)-1] {
				if l.ms != base+int64(first+i) {
					t.Fatalf("line %d of the kept output has time %d, want %d", first+i, l.ms, base+int64(first+i))
				}
			}
			// The times of the deleted files are gone, the kept ones' are
			// there, private.
			times := timesFiles(t, dir)
			if len(times) != maxFiles {
				t.Errorf("times files %v, want one for each of the %d files kept", times, maxFiles)
			}
		})
	}
}

// timesFiles lists the times files in dir, each checked private.
func timesFiles(t *testing.T, dir string) []string {
	t.Helper()
	var times []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".time") {
			times = append(times, e.Name())
			if fi, err := e.Info(); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, %v", e.Name(), fi.Mode(), err)
			}
		}
	}
	return times
}

// A line cut by a rotation (begun in one file, ended in the next) keeps
// the time of its first byte.
func TestLines_LineCutByRotationKeepsItsFirstTime(t *testing.T) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, Config{MaxFiles: 3, MaxFileSizeMB: 1})
	base := ck.t.UnixMilli()
	fill := strings.Repeat(strings.Repeat("f", 1023)+"\n", MB/1024-1)
	mustWrite(t, w, []byte(fill+strings.Repeat("f", 1020)+"\nbegin-")) // 4 bytes of room left
	ck.set(time.UnixMilli(base + 7))
	mustWrite(t, w, []byte("end\nnext\n")) // no newline fits: a fresh file
	got := linesAt(t, dir)
	tail := got[len(got)-2:]
	if len(got) != MB/1024+2 || tail[0] != (timedLine{"begin-end\n", base}) || tail[1] != (timedLine{"next\n", base + 7}) {
		t.Fatalf("lines: %d of them, ending %v", len(got), tail)
	}
	if _, err := os.Stat(filepath.Join(dir, "stdout.log.1")); err != nil {
		t.Fatalf("no rotation: %v", err)
	}
}

// A torn record at the end of the times (a crash mid-write) is cut off
// when the writer opens again, and the stamps go on after it; a times
// file of something else is started again.
func TestLines_TornTimesCutOnReopen(t *testing.T) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, DefaultConfig())
	base := ck.t.UnixMilli()
	mustWrite(t, w, []byte("one\n"))
	w.Close()
	path := filepath.Join(dir, ".stdout.log.1.time")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0x85}); err != nil { // a varint cut short
		t.Fatal(err)
	}
	f.Close()
	w, ck = timedWriter(t, dir, DefaultConfig())
	ck.set(time.UnixMilli(base + 3))
	mustWrite(t, w, []byte("two\n"))
	want := []timedLine{{"one\n", base}, {"two\n", base + 3}}
	if got := linesAt(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after a torn record: %v, want %v", got, want)
	}
	w.Close()
	if err := os.WriteFile(path, []byte("not times at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, ck = timedWriter(t, dir, DefaultConfig())
	ck.set(time.UnixMilli(base + 9))
	mustWrite(t, w, []byte("three\n"))
	want = []timedLine{{"one\n", 0}, {"two\n", 0}, {"three\n", base + 9}}
	if got := linesAt(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after a foreign times file: %v, want %v", got, want)
	}
}

// Output without times (written before times were kept, or untimed):
// its lines have none, and a line after a timed one inherits its time.
func TestLines_UntimedOutputHasNoTime(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "stdout.log", DefaultConfig(), Options{Untimed: true})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, []byte("old\n"))
	w.Close()
	if matches, _ := filepath.Glob(filepath.Join(dir, ".*.time")); len(matches) != 0 {
		t.Fatalf("an untimed writer left times: %v", matches)
	}
	w, ck := timedWriter(t, dir, DefaultConfig())
	mustWrite(t, w, []byte("new\n"))
	want := []timedLine{{"old\n", 0}, {"new\n", ck.t.UnixMilli()}}
	if got := linesAt(t, dir); !slices.Equal(got, want) {
		t.Fatalf("lines: %v, want %v", got, want)
	}
}

// A line longer than maxLine is passed on in pieces; ReadLines holds a
// line not ended until its end comes.
func TestLines_HoldsALineUntilItEnds(t *testing.T) {
	dir := t.TempDir()
	w, _ := timedWriter(t, dir, DefaultConfig())
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	collect := func(l Line) error { got = append(got, string(l.Text)); return nil }
	mustWrite(t, w, []byte("par"))
	if err := c.ReadLines(collect); err != nil || len(got) != 0 {
		t.Fatalf("a line not ended: %q, %v", got, err)
	}
	mustWrite(t, w, []byte("tial\n"+strings.Repeat("L", maxLine+5)+"\n"))
	if err := c.ReadLines(collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != "partial\n" || len(got[1]) != maxLine || got[2] != "LLLLL\n" {
		t.Fatalf("lines: %d, first %q", len(got), got[0])
	}
}

// FollowLines passes on each line with its time as it is written, across
// rotations, and the last line not ended once told to stop.
func TestFollowLines_AsWritten(t *testing.T) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, Config{MaxFiles: 3, MaxFileSizeMB: 1})
	base := ck.t.UnixMilli()
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lines := make(chan timedLine, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	defer func() { cancel(); <-done }() // before the cursor is closed
	go func() {
		done <- FollowLines(ctx, c, func(l Line) error {
			lines <- timedLine{string(l.Text), l.Time.UnixMilli()}
			return nil
		})
	}()
	big := strings.Repeat("w", 60<<10-1) + "\n"
	for i := range 20 { // 1.2 MiB: a rotation
		ck.set(time.UnixMilli(base + int64(i)))
		mustWrite(t, w, []byte(big))
		if l := <-lines; l.ms != base+int64(i) || len(l.text) != len(big) {
			t.Fatalf("line %d followed at %d (%d bytes)", i, l.ms, len(l.text))
		}
	}
	ck.set(time.UnixMilli(base + 50))
	mustWrite(t, w, []byte("unended"))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	if l := <-lines; l != (timedLine{"unended", base + 50}) {
		t.Fatalf("the last line, flushed: %v", l)
	}
}

// A stream with more records than a reader decodes at a time (timesChunk):
// every line still has its own time.
func TestLines_ManyRecordsReadInChunks(t *testing.T) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, DefaultConfig())
	base := ck.t.UnixMilli()
	const n = 40000 // at least 2 bytes a record: past 64 KiB
	var b strings.Builder
	for i := range n {
		ck.set(time.UnixMilli(base + int64(i)))
		b.Reset()
		fmt.Fprintf(&b, "%d\n", i)
		mustWrite(t, w, []byte(b.String()))
	}
	if fi, err := os.Stat(filepath.Join(dir, ".stdout.log.1.time")); err != nil || fi.Size() <= timesChunk {
		t.Fatalf("the times: %v, %v; want more than a chunk", fi, err)
	}
	got := linesAt(t, dir)
	if len(got) != n {
		t.Fatalf("%d lines, want %d", len(got), n)
	}
	for i, l := range got {
		if l.ms != base+int64(i) {
			t.Fatalf("line %d has time %d, want %d", i, l.ms, base+int64(i))
		}
	}
}

// stampedSize is the size of the times of a stream written as writes of
// line each, at ms milliseconds apart.
func stampedSize(t *testing.T, writes int, line string, ms int64) (data, times int64) {
	dir := t.TempDir()
	w, ck := timedWriter(t, dir, DefaultConfig())
	base := ck.t
	for i := range writes {
		ck.set(base.Add(time.Duration(int64(i)*ms) * time.Millisecond))
		mustWrite(t, w, []byte(line))
	}
	w.Close()
	d, _ := os.Stat(filepath.Join(dir, "stdout.log"))
	tm, _ := os.Stat(filepath.Join(dir, ".stdout.log.1.time"))
	return d.Size(), tm.Size() - int64(len(timesHeader))
}

// The times cost a record only where a line starts in another
// millisecond, two bytes for short lines a millisecond apart: no more
// than the output itself for the shortest lines (a character and its
// newline, each in a millisecond of its own), and one record for lines
// read within one millisecond.
func TestLines_TimesStaySmall(t *testing.T) {
	data, times := stampedSize(t, 10000, "a\n", 1)
	if times > data+maxRecord {
		t.Errorf("one short line a millisecond: %d bytes of times for %d of output", times, data)
	}
	if _, times := stampedSize(t, 10000, "a\n", 0); times > 8 {
		t.Errorf("lines within one millisecond: %d bytes of times, want one record", times)
	}
	if _, times := stampedSize(t, 1000, "no newline ", 1); times > 8 {
		t.Errorf("one line written in pieces: %d bytes of times, want one record", times)
	}
}
