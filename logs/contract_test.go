package logs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// The package's documented promises, each with the test that holds it
// (tests in the other files are named where they already cover one):
//
//	the live file keeps its name: never
//	  moved away or deleted, tail -F and
//	  a follower by name see every line   TestWriter_LiveNameNeverMissing, TestWriter_TailFFollowsRotation
//	exactly max_files files, the newest,
//	  numbered in the order written       TestWriter_KeepsExactlyMaxFiles, TestCursor_ReadsInIndexOrder
//	no file above max_file_size; a line
//	  never split when a newline fits     TestWriter_LineNeverSplitWhenANewlineFits, TestWriter_RotationBoundary
//	numbers continue across restarts; a
//	  cut-short rotation is undone        TestWriter_ReopenContinuesIndex, TestWriter_ReopenAfterInterruptedRotation
//	files 0600, the task's user's         TestWriter_FileModesAndOwner
//	a cursor across rotations: no line
//	  lost or read twice, a file rotated
//	  or deleted under it read to its end TestCursor_AcrossRotationsEveryLineOnce, TestCursor_DrainsTheOldFileAfterRotation
//	a reader behind by more than the
//	  retained files: *GapError naming
//	  them, then on after them            TestCursor_GapReported, TestCursor_AcrossRotationsEveryLineOnce
//	tail -n semantics                     TestCursor_TailAcrossRotatedFiles
//	Follow: across rotations, stops with
//	  what was written, without inotify   TestWriter_FastWriterWithFollower, TestFollow_StopCopiesWhatIsLeft, TestFollow_WithoutInotify
//	a full disk drops and counts, never
//	  fails the copier, keeps retained
//	  output, notes the drop once it can  TestCopier_FullDisk, TestWriter_FullDiskKeepsWhatItWrote
//	Close writes a pending note; writes
//	  after Close are ErrClosed           TestWriter_FullDiskKeepsWhatItWrote, TestWriter_Disabled
//	refuses what is not its own file      TestWriter_RefusesWhatIsNotItsFile
//	each line the time its first byte
//	  was read, to the millisecond, across
//	  rotations and reopens; times go
//	  with their files                    TestLines_EachLineHasTheTimeItsFirstByteWasRead, TestLines_TimesFollowRotationAndReopen, TestLines_LineCutByRotationKeepsItsFirstTime
//	a torn record cut, output without
//	  times has none; times stay small    TestLines_TornTimesCutOnReopen, TestLines_UntimedOutputHasNoTime, TestLines_TimesStaySmall
//	lines held until ended, followed as
//	  written                             TestLines_HoldsALineUntilItEnds, TestFollowLines_AsWritten
//	config and names validated            TestConfig_Validate

// TestWriter_KeepsExactlyMaxFiles: after each rotation the stream has
// exactly min(rotations+1, max_files) files: the live one and the newest
// rotated ones, numbered consecutively in the order written, holding
// exactly the tail of the output (nothing of it twice, nothing missing
// from within).
func TestWriter_KeepsExactlyMaxFiles(t *testing.T) {
	testproc.Parallel(t)
	for _, maxFiles := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("max_files=%d", maxFiles), func(t *testing.T) {
			testproc.Parallel(t)
			dir := t.TempDir()
			w := openWriter(t, dir, Config{MaxFiles: maxFiles, MaxFileSizeMB: 1})
			var written []byte
			next := 0
			for rot := uint64(0); rot < uint64(maxFiles)+3; {
				chunk, n := linesOf(next, 300<<10)
				next += n
				mustWrite(t, w, chunk)
				written = append(written, chunk...)
				rot = w.Stats().Rotations
				want := []string{"stdout.log"}
				for i := rot; i >= 1 && len(want) < maxFiles; i-- {
					want = append(want, "stdout.log."+strconv.FormatUint(i, 10))
				}
				files := logFiles(t, dir, "stdout.log")
				got := make([]string, 0, len(files))
				for name := range files {
					got = append(got, name)
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("after %d rotations: files %v, want %v", rot, got, want)
				}
				kept := readAll(t, dir)
				if !bytes.HasSuffix(written, kept) {
					t.Fatalf("after %d rotations: the %d bytes retained are not the tail of what was written", rot, len(kept))
				}
				// The retained output starts at a file boundary: it is the
				// files' bytes, no more (nothing read twice).
				var sum int64
				for _, size := range files {
					sum += size
				}
				if int64(len(kept)) != sum {
					t.Fatalf("ReadAll gave %d bytes, the files hold %d", len(kept), sum)
				}
			}
		})
	}
}

// TestWriter_LiveNameNeverMissing: through many rotations, with and
// without rotated files kept, the live name is never the source of a
// rename and never deleted: a fresh file is renamed over it, so a reader
// that opens it by name at any moment finds a file.
func TestWriter_LiveNameNeverMissing(t *testing.T) {
	testproc.Parallel(t)
	for _, maxFiles := range []int{1, 3} {
		t.Run(fmt.Sprintf("max_files=%d", maxFiles), func(t *testing.T) {
			testproc.Parallel(t)
			dir := t.TempDir()
			w := openWriter(t, dir, Config{MaxFiles: maxFiles, MaxFileSizeMB: 1})
			stop := watchLiveName(t, dir, "stdout.log")
			data, _ := linesOf(0, 5*MB)
			for off := 0; off < len(data); off += 200 << 10 {
				mustWrite(t, w, data[off:min(off+200<<10, len(data))])
			}
			if rot := w.Stats().Rotations; rot < 4 {
				t.Fatalf("%d rotations, want at least 4", rot)
			}
			gone, replaced, err := stop()
			if err != nil {
				t.Fatal(err)
			}
			if len(gone) > 0 {
				t.Errorf("the live name went away: %v", gone)
			}
			if replaced < 4 {
				t.Errorf("a fresh file was renamed over the live name %d times, want one per rotation", replaced)
			}
		})
	}
}

// watchLiveName watches dir with inotify until the returned function is
// called, which reads every event queued by then (the kernel queues them
// as the changes happen) and reports each one that took the name away (a
// rename from it, its deletion) and how many renames landed on it.
func watchLiveName(t *testing.T, dir, name string) func() ([]string, int, error) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Skipf("needs inotify to watch the directory: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return func() (gone []string, replaced int, err error) {
		defer unix.Close(fd)
		buf := make([]byte, 64<<10)
		for {
			n, rerr := unix.Read(fd, buf)
			if errors.Is(rerr, unix.EAGAIN) {
				return gone, replaced, err
			}
			if rerr != nil {
				return gone, replaced, rerr
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
					err = errors.New("the inotify queue overflowed")
					continue
				}
				if string(bytes.TrimRight(raw, "\x00")) != name {
					continue
				}
				switch {
				case ev.Mask&unix.IN_MOVED_FROM != 0:
					gone = append(gone, "renamed away")
				case ev.Mask&unix.IN_DELETE != 0:
					gone = append(gone, "deleted")
				case ev.Mask&unix.IN_MOVED_TO != 0:
					replaced++
				}
			}
		}
	}
}

// TestWriter_LineNeverSplitWhenANewlineFits: writes of whole lines of
// random lengths (each write smaller than a file) never leave a line split
// between two files, and no file is ever larger than max_file_size.
func TestWriter_LineNeverSplitWhenANewlineFits(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 100, MaxFileSizeMB: 1})
	rng := rand.New(rand.NewPCG(3, 4))
	var written bytes.Buffer
	for written.Len() < 6*MB {
		var chunk []byte
		for n := 1 + rng.IntN(8); n > 0; n-- {
			line := bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, rng.IntN(64<<10))
			chunk = append(append(chunk, line...), '\n')
		}
		mustWrite(t, w, chunk)
		written.Write(chunk)
	}
	files := logFiles(t, dir, "stdout.log")
	if len(files) < 6 {
		t.Fatalf("%d files, want at least 6", len(files))
	}
	for name, size := range files {
		if size > MB {
			t.Errorf("%s: %d bytes, more than max_file_size", name, size)
		}
		if name == "stdout.log" {
			continue
		}
		if b := readFile(t, filepath.Join(dir, name)); len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("%s does not end a line: a line was split at the rotation", name)
		}
	}
	if got := readAll(t, dir); !bytes.Equal(got, written.Bytes()) {
		t.Errorf("ReadAll: %d bytes, not the %d written", len(got), written.Len())
	}
}

// TestCursor_AcrossRotationsEveryLineOnce: a cursor that reads between
// writes gets every line exactly once and in order, however many rotations
// came in between, as long as it is not behind by more than the retained
// files; once it is, it gets a *GapError naming exactly the files it
// missed, and every line it does get is in order and once.
func TestCursor_AcrossRotationsEveryLineOnce(t *testing.T) {
	testproc.Parallel(t)
	for _, tc := range []struct {
		name     string
		maxFiles int
		between  []int // KB written between two reads of the cursor
		gap      bool
	}{
		{"no rotation between reads", 5, []int{10, 20, 30, 40}, false},
		{"one rotation between reads", 5, []int{700, 700, 700, 700}, false},
		{"rotations up to the retained files", 5, []int{3500, 100, 3900}, false},
		{"a file rotated and deleted under the cursor", 2, []int{900, 1500}, false},
		{"behind by more than the retained files", 2, []int{100, 4000, 100}, true},
		{"max_files = 1", 1, []int{300, 2500, 300}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testproc.Parallel(t)
			dir := t.TempDir()
			w := openWriter(t, dir, Config{MaxFiles: tc.maxFiles, MaxFileSizeMB: 1})
			c, err := NewCursor(dir, "stdout.log")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			next := 0
			var got bytes.Buffer
			var gaps []*GapError
			for _, kb := range tc.between {
				chunk, n := linesOf(next, kb<<10)
				next += n
				mustWrite(t, w, chunk)
				for {
					_, err := c.Copy(&got)
					var gap *GapError
					if errors.As(err, &gap) {
						gaps = append(gaps, gap)
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					break
				}
			}
			lines := numberedLines(t, got.Bytes())
			if tc.gap != (len(gaps) > 0) {
				t.Fatalf("gaps %v, want a gap: %v", gaps, tc.gap)
			}
			if !tc.gap {
				if len(lines) != next || (len(lines) > 0 && (lines[0] != 0 || lines[len(lines)-1] != next-1)) {
					t.Fatalf("got %d lines, want all %d written, in order, each once", len(lines), next)
				}
				return
			}
			// With a gap: in order, each once (numberedLines checked), and
			// the last line written is there: reading went on after it.
			if len(lines) == 0 || lines[len(lines)-1] != next-1 {
				t.Fatalf("the cursor did not go on after the gap: last line %v of %d", lines[len(lines)-1:], next)
			}
			for _, g := range gaps {
				if g.Reset || g.First == 0 || g.Last < g.First {
					t.Errorf("gap %+v does not name the files missed", g)
				}
			}
		})
	}
}

// numberedLines parses testLine output and fails unless the line numbers
// strictly increase (no line twice, none out of order); it returns them.
func numberedLines(t *testing.T, b []byte) []int {
	t.Helper()
	var nums []int
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.Fatalf("output ends mid-line: %q", clip(b))
		}
		line := b[:i+1]
		b = b[i+1:]
		n, err := strconv.Atoi(string(line[:7]))
		if err != nil || string(line) != testLine(n) {
			t.Fatalf("not a whole test line: %q", clip(line))
		}
		if len(nums) > 0 && n <= nums[len(nums)-1] {
			t.Fatalf("line %d after line %d: read twice or out of order", n, nums[len(nums)-1])
		}
		nums = append(nums, n)
	}
	return nums
}

// TestWriter_FullDiskKeepsWhatItWrote: on a real full disk (a small tmpfs)
// every Write returns all its bytes and no error; what did not fit is
// dropped and counted exactly; the files already written are left whole
// (nothing retained is deleted to make room); and once there is room
// again, Close writes the note that says how much was dropped.
func TestWriter_FullDiskKeepsWhatItWrote(t *testing.T) {
	testproc.Parallel(t)
	const page = 4096
	disk := mountTmpfs(t, 1*MB+64*page)
	w, err := Open(disk, "stdout.log", Config{MaxFiles: 3, MaxFileSizeMB: 1}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// A full first file, rotated, and a few pages of the second.
	first, n := linesOf(0, MB-200)
	mustWrite(t, w, first)
	more, m := linesOf(n, 16*page)
	mustWrite(t, w, more)
	if w.Stats().Rotations != 1 || w.Stats().Dropped != 0 {
		t.Fatalf("before the disk filled: %+v, want one rotation and nothing dropped", w.Stats())
	}
	rotated := readFile(t, filepath.Join(disk, "stdout.log.1"))
	liveBefore := readFile(t, filepath.Join(disk, "stdout.log"))
	// Fill what is left, then write ten times that: every byte dropped.
	filler := filepath.Join(disk, "filler")
	fillDisk(t, filler)
	lost, _ := linesOf(n+m, 200*page)
	for off := 0; off < len(lost); off += 8 * page {
		p := lost[off:min(off+8*page, len(lost))]
		if k, err := w.Write(p); k != len(p) || err != nil {
			t.Fatalf("Write on a full disk = %d, %v; want %d, nil", k, err, len(p))
		}
	}
	// What fit in the last page the live file already had was written (a
	// page at most: tmpfs allocates whole pages); the rest was dropped.
	st := w.Stats()
	before := uint64(len(first) + len(more))
	extra := st.Written - before
	if st.Written < before || extra >= page || st.Dropped != uint64(len(lost))-extra {
		t.Fatalf("Stats %+v: want the %d bytes written before, at most a page more, and the rest of the %d after dropped", st, before, len(lost))
	}
	if got := readFile(t, filepath.Join(disk, "stdout.log.1")); !bytes.Equal(got, rotated) {
		t.Fatalf("the rotated file changed on a full disk: %d bytes, was %d", len(got), len(rotated))
	}
	kept := append(liveBefore, lost[:extra]...)
	if got := readFile(t, filepath.Join(disk, "stdout.log")); !bytes.Equal(got, kept) {
		t.Fatalf("the live file on a full disk: %d bytes, want the %d that fit", len(got), len(kept))
	}
	// Room again: Close notes the drop after the last byte written, on a
	// line of its own.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("late\n")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	live := readFile(t, filepath.Join(disk, "stdout.log"))
	note, ok := bytes.CutPrefix(live, kept)
	nl := ""
	if kept[len(kept)-1] != '\n' {
		nl = `\n`
	}
	pat := fmt.Sprintf(`^%s\[tether: %d bytes of output were dropped here: no space left on device\]\n$`, nl, st.Dropped)
	if !ok || !regexp.MustCompile(pat).Match(note) {
		t.Errorf("after Close the live file ends %q, want a note matching %q", clip(note), pat)
	}
}

// fillDisk writes path until the file system it is on is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}
