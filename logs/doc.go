// Package logs keeps a task's output: a rotating writer for each stream
// (stdout, stderr) that the executor copies the task's pipes into, and a
// cursor that reads a stream in order, its last lines, or follows it as
// it grows (tether logs [-n N] [-f]).
//
// # Files
//
// A stream named stdout.log in a directory is:
//
//	stdout.log           the live file; it keeps this name, so tail -F and
//	                     tether logs -f follow it across a rotation
//	stdout.log.1, .2 ... rotated files, numbered in the order written; a
//	                     file keeps its number until it is deleted
//	.stdout.log.live     a symlink naming the live file's number and inode
//	.stdout.log.new      the next live file, during a rotation
//	.stdout.log.N.time   when the lines of file N (rotated, or live: its
//	                     number is the one it will have) were read
//
// At most max_files files are kept, the live file included: a rotation
// deletes the oldest beyond that. A rotation links the live file to its
// number, then renames a fresh file over the live name, so the live name
// never disappears (on a file system without hard links it is renamed
// away first, and is missing for a moment). Files are created 0600, owned
// by the task's user when Options.Chown says so. Numbers continue across
// executor restarts, and Open undoes or completes a rotation that a crash
// cut short. Names sort in order by number (ls -v, sort -V).
//
// # The size bound
//
// No file is ever larger than max_file_size (in MB, 1 MB = 1 MiB). A write
// that fits in the live file is written whole. One that does not is cut
// after its last newline that still fits, the rest going to a fresh file;
// if no newline fits, it goes whole into a fresh file; only a write larger
// than max_file_size with no newline in its first max_file_size bytes is
// cut at exactly that size. So a rotated file ends with a newline unless
// the write before the rotation ended mid-line (a line split between two
// reads of the task's pipe) and the next write had no newline within the
// room left, or unless a single line is longer than max_file_size.
//
// # A full disk
//
// Write never fails for an I/O error, so a full disk kills neither the
// copier nor the task: output that cannot be written is dropped and
// counted (Stats.Dropped), and when writing works again a line
//
//	[tether: N bytes of output were dropped here: no space left on device]
//
// is written where the output went missing. The writer never deletes
// retained output to make room.
//
// # Times
//
// The writer records when each line was read from the task's pipe: the
// time its first byte reached Write (the copier's read), to the
// millisecond, in the sidecar of the file it went to (times.go has the
// format). A record is written only where a line starts in another
// millisecond than the last record's, ahead of the output it stamps, so
// that a reader that sees a line sees its time: a task writing in bulk
// pays nothing measurable, one whose every line is read alone a
// millisecond apart one small write per line (BenchmarkTimes). A sidecar
// goes with its file when rotation deletes it.
//
// # Reading
//
// A Cursor reads a stream's files in order, holding the file it reads
// open, so that a file rotated (or deleted) under it is still read to its
// end before it moves on: no line is lost or read twice at a rotation. A
// reader that falls behind by more than the retained files gets a
// *GapError naming the files it missed, then goes on after them.
//
// # Usage
//
// In the executor, one writer and one copier per stream; the task gets the
// write end of the pipe, and the executor closes its own copy:
//
//	w, err := logs.Open(taskDir, "stdout.log", cfg, logs.Options{Chown: true, UID: uid, GID: gid, Logger: log})
//	r, pw, err := os.Pipe()
//	// start the task with pw as its stdout, then:
//	pw.Close()
//	c := logs.StartCopy(w, r)
//	// in the main loop: case <-c.Done(): n, err := c.Wait(); r.Close(); w.Close()
//
// In a reader:
//
//	c, err := logs.NewCursor(taskDir, "stdout.log")
//	defer c.Close()
//	err = c.SeekLines(10)                       // tail -n 10
//	err = logs.Follow(ctx, c, os.Stdout)        // until ctx is done
//
// Line by line, each with the time it was read (tether logs --timestamps,
// and the merge of several streams in time order):
//
//	err = logs.FollowLines(ctx, c, func(l logs.Line) error {
//		fmt.Printf("%s %s", l.Time.Format(time.RFC3339Nano), l.Text)
//		return nil
//	})
//
// A disabled Config (logs { disabled = true }) makes a Writer that
// discards everything; an executor may as well give the task /dev/null.
package logs
