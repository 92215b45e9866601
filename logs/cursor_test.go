package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/testproc"
)

// lastLines is what tail -n n prints of data.
func lastLines(data []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if n--; n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

func TestCursor_TailAcrossRotatedFiles(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
	// 3.5 MB of lines: four files, and a last line without its newline.
	data, nlines := linesOf(0, 3*MB+MB/2)
	data = append(data, "no newline yet"...)
	mustWrite(t, w, data)
	if n := len(logFiles(t, dir, "stdout.log")); n != 4 {
		t.Fatalf("%d files, want 4", n)
	}
	for _, n := range []int{0, 1, 2, 10, 5000, 20000, nlines, nlines + 1, nlines + 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var b bytes.Buffer
			if _, err := Tail(dir, "stdout.log", n, &b); err != nil {
				t.Fatal(err)
			}
			if want := lastLines(data, n); !bytes.Equal(b.Bytes(), want) {
				t.Errorf("Tail(%d): %d bytes, want %d", n, b.Len(), len(want))
			}
		})
	}
	// A trailing newline ends the last line rather than starting one.
	mustWrite(t, w, []byte("\n"))
	data = append(data, '\n')
	var b bytes.Buffer
	if _, err := Tail(dir, "stdout.log", 2, &b); err != nil {
		t.Fatal(err)
	}
	if want := lastLines(data, 2); !bytes.Equal(b.Bytes(), want) {
		t.Errorf("Tail(2) = %q, want %q", b.Bytes(), want)
	}
	if _, err := Tail(dir, "stdout.log", -1, &b); !errors.Is(err, ErrBadLines) {
		t.Errorf("Tail(-1): %v, want ErrBadLines", err)
	}
}

// TestCursor_TailReadsOnlyTheEnd checks that the last lines of a large
// stream are found without reading all of it.
func TestCursor_TailReadsOnlyTheEnd(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
	data, _ := linesOf(0, 8*MB)
	mustWrite(t, w, data)
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SeekLines(10); err != nil {
		t.Fatal(err)
	}
	// Ten lines of at most 121 bytes lie within one 64 KiB block of the
	// end, or two when the live file holds fewer than ten.
	if c.scanned > 2*64<<10 {
		t.Errorf("read %d bytes to find 10 lines of an 8 MB stream", c.scanned)
	}
	var b bytes.Buffer
	if _, err := c.Copy(&b); err != nil {
		t.Fatal(err)
	}
	if want := lastLines(data, 10); !bytes.Equal(b.Bytes(), want) {
		t.Errorf("got %q, want %q", b.Bytes(), want)
	}
}

// TestCursor_ReadsInIndexOrder reads past stdout.log.9 into .10 and .11,
// which sort before it as strings.
func TestCursor_ReadsInIndexOrder(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 20, MaxFileSizeMB: 1})
	data, _ := linesOf(0, 11*MB+MB/3)
	for off := 0; off < len(data); off += 32 << 10 {
		mustWrite(t, w, data[off:min(off+32<<10, len(data))])
	}
	files := logFiles(t, dir, "stdout.log")
	if _, ok := files["stdout.log.11"]; !ok || len(files) != 12 {
		t.Fatalf("files %v, want stdout.log.1 to .11 and stdout.log", files)
	}
	if got := readAll(t, dir); !bytes.Equal(got, data) {
		t.Errorf("ReadAll: %d bytes, not the %d written in order", len(got), len(data))
	}
	// Starting at the end gives only what comes next.
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SeekEnd(); err != nil {
		t.Fatal(err)
	}
	more, _ := linesOf(1<<20, MB) // a whole file more: crosses a rotation
	mustWrite(t, w, more)
	var b bytes.Buffer
	if _, err := c.Copy(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), more) {
		t.Errorf("after SeekEnd: %d bytes, want the %d written since", b.Len(), len(more))
	}
}

// TestCursor_GapReported lets a reader fall behind by more than the
// retained files: it is told which files it missed, then goes on.
func TestCursor_GapReported(t *testing.T) {
	testproc.Parallel(t)
	for _, tc := range []struct {
		maxFiles    int
		first, last uint64
	}{
		{maxFiles: 1, first: 2, last: 4},
		{maxFiles: 3, first: 2, last: 2},
	} {
		t.Run(fmt.Sprintf("max_files=%d", tc.maxFiles), func(t *testing.T) {
			dir := t.TempDir()
			w := openWriter(t, dir, Config{MaxFiles: tc.maxFiles, MaxFileSizeMB: 1})
			head := testLines(0, 10)
			mustWrite(t, w, head)
			c, err := NewCursor(dir, "stdout.log")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var b bytes.Buffer
			if _, err := c.Copy(&b); err != nil || !bytes.Equal(b.Bytes(), head) {
				t.Fatalf("first Copy: %q, %v", b.Bytes(), err)
			}
			// Four rotations while the reader looks away: file 1 (which
			// the reader holds open) is still read to its end.
			rest, _ := linesOf(10, 4*MB)
			mustWrite(t, w, rest)
			_, err = c.Copy(&b)
			var gap *GapError
			if !errors.As(err, &gap) || !errors.Is(err, ErrGap) {
				t.Fatalf("Copy after falling behind: %v, want a *GapError", err)
			}
			if gap.First != tc.first || gap.Last != tc.last || gap.Reset {
				t.Errorf("gap %+v, want files %d to %d", gap, tc.first, tc.last)
			}
			if !strings.Contains(err.Error(), "max_files") {
				t.Errorf("the gap error does not say why: %v", err)
			}
			lost := b.Len()
			if _, err := c.Copy(&b); err != nil {
				t.Fatalf("Copy after the gap: %v", err)
			}
			all := append(append([]byte{}, head...), rest...)
			kept := readAll(t, dir)
			// What the reader got: file 1 whole, then the retained files.
			if !bytes.HasPrefix(b.Bytes(), all[:lost]) || !bytes.HasSuffix(b.Bytes(), kept) ||
				b.Len() != lost+len(kept) || lost < len(head) {
				t.Errorf("got %d bytes (%d before the gap), want %d then the %d retained", b.Len(), lost, lost, len(kept))
			}
		})
	}
}

func TestFollow_WithoutInotify(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 3, MaxFileSizeMB: 1})
	data, _ := linesOf(0, 2*MB+MB/2)
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seen := newProgress(data)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- follow(ctx, c, func() error {
			_, err := c.Copy(seen)
			return err
		}, false)
	}()
	// Write in two halves, the second only once the first was followed, so
	// that the polling follower crosses the rotations as it goes.
	half := len(data) / 2
	mustWrite(t, w, data[:half])
	seen.waitFor(t, half, done)
	mustWrite(t, w, data[half:])
	seen.waitFor(t, len(data), done)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := seen.result(); err != nil || got != len(data) {
		t.Fatalf("followed %d bytes (%v), want %d", got, err, len(data))
	}
}

// TestFollow_StopCopiesWhatIsLeft: a follower told to stop right after the
// writer finished still copies everything.
func TestFollow_StopCopiesWhatIsLeft(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := openWriter(t, dir, Config{MaxFiles: 5, MaxFileSizeMB: 1})
	data, _ := linesOf(0, 3*MB)
	mustWrite(t, w, data)
	var b bytes.Buffer
	if err := Follow(ctx, c, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), data) {
		t.Errorf("got %d bytes, want %d", b.Len(), len(data))
	}
}

// TestWriter_TailFFollowsRotation runs GNU tail -F on the live file while
// the writer rotates: it prints everything, in order, once.
func TestWriter_TailFFollowsRotation(t *testing.T) {
	testproc.Parallel(t)
	tailPath, err := exec.LookPath("tail")
	if err != nil {
		t.Skip("tail(1) is not installed")
	}
	if out, err := exec.Command(tailPath, "--version").Output(); err != nil || !bytes.Contains(out, []byte("GNU coreutils")) {
		t.Skip("tail(1) is not GNU coreutils' (its -F is what this checks)")
	}
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
	first := testLines(0, 1)
	mustWrite(t, w, first)

	cmd := exec.Command(tailPath, "-F", "-n", "+1", "-s", "0.05", filepath.Join(dir, "stdout.log"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// Once tail printed the first line it is following the file.
	got := make([]byte, len(first))
	if _, err := readFullBy(out, got, 20*time.Second); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("tail -F printed %q (%v), want %q", got, err, first)
	}
	// tail -F follows a name: it can follow one rotation at a time, not
	// several that come before it looks. So write in chunks smaller than a
	// file, each once tail printed the one before. (tether's own follower
	// has no such limit: see TestWriter_FastWriterWithFollower.)
	rest, _ := linesOf(1, 3*MB)
	const chunk = 200 << 10
	for off := 0; off < len(rest); off += chunk {
		p := rest[off:min(off+chunk, len(rest))]
		mustWrite(t, w, p)
		got := make([]byte, len(p))
		// The deadline only turns a tail that lost output into a failure
		// instead of a hang; it synchronises nothing.
		if n, err := readFullBy(out, got, 20*time.Second); err != nil || !bytes.Equal(got, p) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("tail -F printed %d of the %d bytes at offset %d after %d rotations, equal %v (%v); it said: %s",
				n, len(p), off, w.Stats().Rotations, bytes.Equal(got, p), err, stderr.String())
		}
	}
	if r := w.Stats().Rotations; r < 2 {
		t.Fatalf("only %d rotations", r)
	}
}

func readFullBy(f interface {
	Read([]byte) (int, error)
}, b []byte, d time.Duration) (int, error) {
	if dl, ok := f.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = dl.SetReadDeadline(time.Now().Add(d))
	}
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

var _ = os.Getpid

// TestFollow_JoinsDuringRotations starts followers at the end of the
// stream while a fast writer rotates under them: each gets exactly the
// rest of the stream from where it joined, whichever file it first opened
// and whatever the rotation was doing then.
func TestFollow_JoinsDuringRotations(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 50, MaxFileSizeMB: 1})
	data, _ := linesOf(0, 5*MB)
	ctx, cancel := context.WithCancel(context.Background())
	type follower struct {
		out  bytes.Buffer
		done chan error
	}
	var fs []*follower
	for off := 0; off < len(data); {
		if off%(MB/3) < 16<<10 {
			c, err := NewCursor(dir, "stdout.log")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SeekEnd(); err != nil {
				t.Fatal(err)
			}
			f := &follower{done: make(chan error, 1)}
			fs = append(fs, f)
			go func() { f.done <- Follow(ctx, c, &f.out) }()
		}
		n := min(16<<10, len(data)-off)
		mustWrite(t, w, data[off:off+n])
		off += n
	}
	cancel()
	for i, f := range fs {
		if err := <-f.done; err != nil {
			t.Errorf("follower %d: %v", i, err)
			continue
		}
		if got := f.out.Bytes(); len(got) == 0 || !bytes.HasSuffix(data, got) {
			t.Errorf("follower %d: %d bytes, not the rest of the stream", i, len(got))
		}
	}
	if len(fs) < 12 {
		t.Errorf("only %d followers joined", len(fs))
	}
}

// TestFollow_StreamAppearsLater follows a stream that has no file yet.
func TestFollow_StreamAppearsLater(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SeekLines(5); err != nil {
		t.Fatal(err)
	}
	data := testLines(0, 100)
	seen := newProgress(data)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, c, seen) }()
	w := openWriter(t, dir, DefaultConfig())
	mustWrite(t, w, data)
	seen.waitFor(t, len(data), done)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := seen.result(); err != nil || got != len(data) {
		t.Errorf("followed %d bytes (%v), want %d", got, err, len(data))
	}
}

// TestCursor_DrainsTheOldFileAfterRotation: output appended to the live
// file after the reader reached its end, just before a rotation, is read
// before the reader moves on to the new live file.
func TestCursor_DrainsTheOldFileAfterRotation(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 5, MaxFileSizeMB: 1})
	head, n := linesOf(0, MB-4096)
	mustWrite(t, w, head)
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Right after the reader's first read to the end: more lines, the last
	// of which no longer fits, so the file is rotated.
	late, _ := linesOf(n, 8192)
	c.hook = func(at string) {
		if at == "check" {
			c.hook = nil
			mustWrite(t, w, late)
		}
	}
	var b bytes.Buffer
	if _, err := c.Copy(&b); err != nil {
		t.Fatal(err)
	}
	if w.Stats().Rotations != 1 {
		t.Fatalf("%d rotations, want 1", w.Stats().Rotations)
	}
	if want := append(append([]byte{}, head...), late...); !bytes.Equal(b.Bytes(), want) {
		t.Errorf("got %d bytes, want %d", b.Len(), len(want))
	}
}

// TestCursor_OpensLiveWhileMarkerLags opens the live file in the moment
// after a rotation's rename and before its marker update (the marker still
// names the old live file): the reader counts the live file as the next
// index, so that after the next rotation it neither rereads nor skips.
func TestCursor_OpensLiveWhileMarkerLags(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	s := stream{dir: dir, name: "stdout.log"}
	w := openWriter(t, dir, Config{MaxFiles: 5, MaxFileSizeMB: 1})
	first, n := linesOf(0, MB+MB/2) // one rotation: stdout.log.1 and a live file
	mustWrite(t, w, first)
	if w.Stats().Index != 2 {
		t.Fatalf("index %d, want 2", w.Stats().Index)
	}
	current, ok := s.readMarker()
	setMarker(t, s, 1, s.rotated(1))
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SeekEnd(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no marker")
	}
	if err := s.writeMarker(current, owner{}); err != nil { // the rotation's marker update lands
		t.Fatal(err)
	}
	more, _ := linesOf(n, MB) // another rotation
	mustWrite(t, w, more)
	var b bytes.Buffer
	if _, err := c.Copy(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), more) {
		t.Errorf("got %d bytes, want the %d written since", b.Len(), len(more))
	}
}

// TestCursor_RotationWhileFindingTheOldest rotates between the cursor's
// opening the live file and its listing the rotated ones: it still starts
// at the oldest output. (Listing first once lost the file rotated
// meanwhile: found by TestFollow_WithoutInotify.)
func TestCursor_RotationWhileFindingTheOldest(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 5, MaxFileSizeMB: 1})
	head, n := linesOf(0, MB/2)
	mustWrite(t, w, head)
	c, err := NewCursor(dir, "stdout.log")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	more, _ := linesOf(n, MB)
	c.hook = func(at string) {
		if at == "oldest" {
			c.hook = nil
			mustWrite(t, w, more)
		}
	}
	var b bytes.Buffer
	if _, err := c.Copy(&b); err != nil {
		t.Fatal(err)
	}
	if w.Stats().Rotations != 1 {
		t.Fatalf("%d rotations, want 1", w.Stats().Rotations)
	}
	if want := append(append([]byte{}, head...), more...); !bytes.Equal(b.Bytes(), want) {
		t.Errorf("got %d bytes, want %d", b.Len(), len(want))
	}
}
