package logs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// countingReader publishes how far a copier got in the task's output,
// whatever its writer did with it: at each read, how much it had read
// before (Copy hands each read to its writer before it reads again, so
// that much has been through the writer).
type countingReader struct {
	r    io.Reader
	n    int64
	seen chan int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n > 0 {
		c.seen <- c.n
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// startHelper starts the helper with its stdout on a new pipe and returns
// the pipe's read end; the parent's copy of the write end is closed, so
// the reader sees EOF when the helper's output is closed.
func startHelper(t *testing.T, stdin io.Reader, args ...string) (*os.File, func() error) {
	t.Helper()
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := helperCmd(t, args...)
	cmd.Stdout, cmd.Stdin, cmd.Stderr = wp, stdin, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wp.Close()
	t.Cleanup(func() {
		r.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return r, cmd.Wait
}

// TestCopier_CopiesAProcessOutput copies a real process's output through
// a pipe into rotated files: everything arrives in order, and the copy
// ends when the process closes its end.
func TestCopier_CopiesAProcessOutput(t *testing.T) {
	testproc.Parallel(t)
	dir := t.TempDir()
	w := openWriter(t, dir, Config{MaxFiles: 10, MaxFileSizeMB: 1})
	const lines = 40000 // about 2.5 MB
	r, wait := startHelper(t, nil, "lines", fmt.Sprint(lines))
	c := StartCopy(w, r)
	if err := wait(); err != nil {
		t.Fatalf("the writing process: %v", err)
	}
	<-c.Done()
	n, err := c.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := testLines(0, lines)
	if n != int64(len(want)) {
		t.Errorf("copied %d bytes, want %d", n, len(want))
	}
	if got := readAll(t, dir); !bytes.Equal(got, want) {
		t.Errorf("the files hold %d bytes, not the %d written in order", len(got), len(want))
	}
	if st := w.Stats(); st.Rotations != 2 || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want 2 rotations and nothing dropped", st)
	}
}

// TestCopier_KeepsDrainingAfterWriteErrors: a writer that fails does not
// stop the copy, so the process is never blocked on a full pipe.
func TestCopier_KeepsDrainingAfterWriteErrors(t *testing.T) {
	testproc.Parallel(t)
	r, wait := startHelper(t, nil, "lines", "20000")
	n, err := Copy(failingWriter{}, r)
	if werr := wait(); werr != nil {
		t.Fatalf("the writing process: %v", werr)
	}
	if !errors.Is(err, errFailing) {
		t.Errorf("Copy: %v, want the writer's error", err)
	}
	if want := len(testLines(0, 20000)); n != int64(want) {
		t.Errorf("read %d bytes, want all %d", n, want)
	}
}

var errFailing = errors.New("failing writer")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errFailing }

// mountTmpfs mounts a tmpfs of size bytes. It skips only where mounting
// is not permitted (EPERM: no CAP_SYS_ADMIN) or the kernel has no tmpfs
// (ENODEV), naming which; any other mount error fails the test.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	switch err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); {
	case errors.Is(err, unix.EPERM):
		t.Skipf("mounting a small tmpfs for the full-disk test needs CAP_SYS_ADMIN: %v", err)
	case errors.Is(err, unix.ENODEV):
		t.Skipf("the full-disk test needs a kernel with tmpfs: %v", err)
	case err != nil:
		t.Fatalf("mount a tmpfs for the full-disk test: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// TestCopier_FullDisk fills a real tmpfs under a task's output: the
// writer drops and counts, the copier keeps draining the pipe (the writing
// process neither blocks nor dies), and once space is back a note says
// how much was dropped, followed by the new output.
func TestCopier_FullDisk(t *testing.T) {
	testproc.Parallel(t)
	const page = 4096
	disk := mountTmpfs(t, 64*page)
	// Leave 16 pages free.
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, make([]byte, 48*page), 0o600); err != nil {
		t.Fatal(err)
	}
	w := openWriter(t, disk, Config{MaxFiles: 2, MaxFileSizeMB: 1})

	const phase1, phase2 = 10000, 500 // about 640 KB, then 30 KB
	before := testLines(0, phase1)
	after := testLines(phase1, phase2)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinR.Close()
	defer stdinW.Close()
	r, wait := startHelper(t, stdinR, "phases", fmt.Sprint(phase1), fmt.Sprint(phase2))
	stdinR.Close()
	cr := &countingReader{r: r, seen: make(chan int64, 1024)}
	c := StartCopy(w, cr)

	// The process wrote ten times what fits; the copier read it all and
	// gave it to the writer.
	for n := int64(0); n < int64(len(before)); {
		select {
		case n = <-cr.seen:
		case <-c.Done():
			_, err := c.Wait()
			t.Fatalf("the copier stopped during the full disk: %v", err)
		}
	}
	st := w.Stats()
	if st.Dropped == 0 || st.Written == 0 || st.Written+st.Dropped != uint64(len(before)) {
		t.Fatalf("Stats = %+v: want some of the %d bytes written, the rest dropped", st, len(before))
	}
	if st.Written > 16*page {
		t.Fatalf("wrote %d bytes on a disk with %d free", st.Written, 16*page)
	}

	// Space comes back; the process writes again and exits.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := stdinW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("the writing process did not end well: %v", err)
	}
	if _, err := c.Wait(); err != nil {
		t.Fatalf("copier: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, disk)
	kept := before[:st.Written]
	if !bytes.HasPrefix(got, kept) || !bytes.HasSuffix(got, after) {
		t.Fatalf("the log is not what fit, a note, then the new output: %d bytes", len(got))
	}
	note := string(got[len(kept) : len(got)-len(after)])
	pat := fmt.Sprintf(`^\n?\[tether: %d bytes of output were dropped here: no space left on device\]\n$`, st.Dropped)
	if !regexp.MustCompile(pat).MatchString(note) {
		t.Errorf("note %q, want one matching %q", note, pat)
	}
	if kept[len(kept)-1] != '\n' && note[0] != '\n' {
		t.Errorf("the note %q does not start on a line of its own", note)
	}
	if final := w.Stats(); final.Dropped != st.Dropped || final.Written != st.Written+uint64(len(after)) {
		t.Errorf("final Stats = %+v, want %d dropped and %d written", final, st.Dropped, st.Written+uint64(len(after)))
	}
}
