// Package crashfs simulates power loss: a FUSE filesystem that keeps writes
// that are not yet durable apart from durable state, in the manner of ALICE
// and CrashMonkey (crash at every persistence point, unsynced writes
// dropped) and of LazyFS as Jepsen uses it.
//
// A test mounts it, runs real code on the mount (bbolt, renames, fsyncs of
// files and directories, mmap'd reads, flock: it is a loopback over a
// backing directory), marks the moments that code acknowledged something,
// and then asks for the crash states: every state the disk may be in
// after a power loss at some moment, each materialised as a plain directory
// the test opens normally, with the marks that came before that crash.
//
// # The model
//
// The rules are POSIX's as ALICE models them for an ordered-mode journal,
// taken strictly:
//
//   - a file's content (writes, truncates, size changes) becomes durable at
//     fsync or fdatasync of that file, and not before;
//   - a directory's entries (create, mkdir, link, unlink, rmdir, rename)
//     become durable at fsync of that directory: a new file's name is not
//     durable until its directory is synced, however often the file is;
//   - a rename is atomic, and a directory's entry operations persist in
//     the order they were made (a rename is never durable without the
//     create of the name it moved);
//   - anything not yet durable may persist in any subset: the kernel may
//     write back any dirty page at any time. Writes persist in whole pages
//     (4 KiB, each page of a larger write on its own), never torn within a
//     page.
//
// Every fsync, fdatasync and directory fsync is a numbered boundary. For
// each interval between two boundaries (and after the last one),
// CrashStates returns the durable image with every unsynced operation
// dropped ("at boundary k", Name "bk"), and with deterministic subsets of
// the pending operations ("between k and k+1"): each single operation
// issued since boundary k, each prefix of them, all pending operations, and
// a few seeded random subsets. Each stands for a crash at the last moment
// of its interval, so every mark made in that interval counts as
// acknowledged before it. States with the same content are returned once.
// Modes are taken as durable at once; ownership, times and xattrs are not
// modelled; device nodes, O_TMPFILE and hole punching are refused.
//
// # Usage
//
//	fsys := crashfs.Mount(t, "", crashfs.Options{}) // skips without FUSE
//	db := fsys.Path("tether.db")
//	... run the code under test on db ...
//	ack := fsys.Mark("append t1 v3")                 // right after it returned
//	fsys.Unmount()                                   // or keep it mounted
//	for _, st := range fsys.CrashStates(crashfs.StateOptions{}) {
//		dir := t.TempDir()
//		if err := st.Materialize(dir); err != nil { ... }
//		... open dir/tether.db normally; if st.Before(ack), t1 v3 must be there ...
//	}
//
// Boundaries lists the persistence points and Ops the whole log, for tests
// that want to say where a state lies (st.After, st.Kept).
//
// # The server process
//
// The filesystem is served by a child process: the test binary itself,
// re-executed with an environment variable that crashfs's init reads before
// main (or TestMain) runs, so any test package that imports crashfs can
// mount one without a TestMain of its own. It is never served in the test's
// process: a Go thread blocked in the kernel on a FUSE request (a page fault
// on a mapped file of the mount, as bbolt's reads are, or a vfork child
// whose chdir touches the mount) cannot be stopped for a garbage
// collection, and a stopped world never answers it. The child keeps the
// log; Mark, Ops and CrashStates ask it over a socket, so marks and
// operations are ordered as they happened. If the test process dies, the
// child unmounts and exits.
//
// Mounting needs root (mount(2) directly, no fusermount) and /dev/fuse;
// Mount skips the test with ErrNoFUSE's message where either is missing.
package crashfs
