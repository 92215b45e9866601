package logs

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCopy measures a task's output going through a pipe into files,
// 1 MiB per op, four ways in one run:
//
//	splice       io.Copy from the pipe into one file (the kernel moves the
//	             pages: what a plain redirect costs at best)
//	read-write   a user-space copy loop into one file (64 KiB reads)
//	rotating-*   Copy into a Writer rotating at 1 MB (keeping 3 files),
//	             at Nomad's default 10 MB (keeping 10), and at 1 MB
//	             keeping every file (as much on disk as the plain rows:
//	             deleted files' dirty pages are never written back, which
//	             flatters the rows that delete on a disk)
//
// The files are on a tmpfs when the benchmark runs as root (see benchDir).
// Each rotating row reports its time per op as a multiple of the plain
// rows (x-splice, x-read-write).
func BenchmarkCopy(b *testing.B) {
	chunk, _ := linesOf(0, 64<<10)
	chunk = chunk[:64<<10]
	perOp := map[string]float64{}
	run := func(name string, sink func(b *testing.B, dir string) (io.Writer, func())) {
		b.Run(name, func(b *testing.B) {
			dir := benchDir(b)
			dst, done := sink(b, dir)
			r, w, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer w.Close()
				for range b.N * (MB / len(chunk)) {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			}()
			b.SetBytes(MB)
			b.ResetTimer()
			var n int64
			if f, ok := dst.(*os.File); ok && name == "splice" {
				n, err = io.Copy(f, r)
			} else if name == "read-write" {
				n, err = io.CopyBuffer(onlyWriter{dst}, onlyReader{r}, make([]byte, copyChunk))
			} else {
				n, err = Copy(dst, r)
			}
			b.StopTimer()
			r.Close()
			done()
			if err != nil || n != int64(b.N)*MB {
				b.Fatalf("copied %d bytes (%v), want %d", n, err, int64(b.N)*MB)
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			perOp[name] = ns
			for _, base := range []string{"splice", "read-write"} {
				if p, ok := perOp[base]; ok && name != base && p > 0 {
					b.ReportMetric(ns/p, "x-"+base)
				}
			}
		})
	}
	file := func(b *testing.B, dir string) (io.Writer, func()) {
		f, err := os.OpenFile(filepath.Join(dir, "stdout.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		return f, func() { f.Close() }
	}
	rotating := func(cfg Config) func(b *testing.B, dir string) (io.Writer, func()) {
		return func(b *testing.B, dir string) (io.Writer, func()) {
			w, err := Open(dir, "stdout.log", cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			return w, func() {
				if st := w.Stats(); st.Dropped != 0 {
					b.Errorf("dropped %d bytes", st.Dropped)
				}
				w.Close()
			}
		}
	}
	run("splice", file)
	run("read-write", file)
	run("rotating-1MB", rotating(Config{MaxFiles: 3, MaxFileSizeMB: 1}))
	run("rotating-10MB", rotating(DefaultConfig()))
	run("rotating-1MB-keep-all", rotating(Config{MaxFiles: 1 << 30, MaxFileSizeMB: 1}))
}

// benchDir is a tmpfs when one can be mounted, so that the rows measure
// the copy and not the disk's writeback (which, on a shared machine,
// varies tenfold from run to run).
func benchDir(b *testing.B) string {
	if os.Geteuid() == 0 {
		dir := filepath.Join(b.TempDir(), "disk")
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4g,mode=0700"); err == nil {
			b.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
			return dir
		}
	}
	b.Log("no tmpfs (needs root): measuring on the temporary directory's file system")
	return b.TempDir()
}

// onlyReader and onlyWriter hide ReadFrom and WriteTo, so that io.Copy
// copies through user space.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// BenchmarkTimes measures what keeping times (times.go) costs a task's
// output, each shape untimed and timed in one run, the timed row reported
// as a multiple of its untimed one (x-untimed):
//
//	pipe-64KiB     1 MiB per op through a pipe and Copy, 64 KiB a read
//	               (a task writing in bulk): a record a millisecond
//	lines-80B      80-byte lines, one Write each, straight to the Writer
//	               (a chatty task whose every line is read alone), with
//	               the real clock: a record a millisecond at most
//	lines-80B-1ms  the same with a clock that moves a millisecond at
//	               each Write: a record every line, the worst case (its
//	               cost per line is what a line read alone, a millisecond
//	               after the one before, pays)
//
// Files on a tmpfs when the benchmark runs as root (benchDir), 10 files of
// 10 MB.
func BenchmarkTimes(b *testing.B) {
	chunk, _ := linesOf(0, 64<<10)
	chunk = chunk[:64<<10]
	line := []byte(strings.Repeat("l", 79) + "\n")
	perOp := map[string]float64{}
	open := func(b *testing.B, untimed bool) *Writer {
		w, err := Open(benchDir(b), "stdout.log", DefaultConfig(), Options{Untimed: untimed})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { w.Close() })
		return w
	}
	report := func(b *testing.B, shape string, untimed bool) {
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if untimed {
			perOp[shape] = ns
		} else if base := perOp[shape]; base > 0 {
			b.ReportMetric(ns/base, "x-untimed")
		}
	}
	for _, untimed := range []bool{true, false} {
		name := map[bool]string{true: "untimed", false: "timed"}[untimed]
		b.Run("pipe-64KiB/"+name, func(b *testing.B) {
			w := open(b, untimed)
			r, pw, err := os.Pipe()
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer pw.Close()
				for range b.N * (MB / len(chunk)) {
					if _, err := pw.Write(chunk); err != nil {
						return
					}
				}
			}()
			b.SetBytes(MB)
			b.ResetTimer()
			n, err := Copy(w, r)
			b.StopTimer()
			r.Close()
			if err != nil || n != int64(b.N)*MB {
				b.Fatalf("copied %d bytes (%v)", n, err)
			}
			report(b, "pipe", untimed)
		})
	}
	for _, stepped := range []bool{false, true} {
		shape := "lines-80B"
		if stepped {
			shape += "-1ms"
		}
		for _, untimed := range []bool{true, false} {
			name := map[bool]string{true: "untimed", false: "timed"}[untimed]
			b.Run(shape+"/"+name, func(b *testing.B) {
				w := open(b, untimed)
				if stepped {
					t := time.Now()
					w.now = func() time.Time { t = t.Add(time.Millisecond); return t }
				}
				b.SetBytes(int64(len(line)))
				b.ResetTimer()
				for range b.N {
					if _, err := w.Write(line); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				report(b, shape, untimed)
			})
		}
	}
}
