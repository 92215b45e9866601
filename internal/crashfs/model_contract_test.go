package crashfs

import (
	"errors"
	"io/fs"
	"testing"
)

// The model's rules (doc.go), each driven directly, without FUSE: the
// crash states at the boundary right after the persistence point named,
// where every operation not made durable by then is dropped.

// boundaryState returns the crash state at boundary k with every pending
// operation dropped.
func boundaryState(t *testing.T, rec *recorder, k int) *CrashState {
	t.Helper()
	for _, st := range states(rec, StateOptions{}) {
		if st.AtBoundary() && st.After == k {
			return st
		}
	}
	t.Fatalf("no state at boundary %d", k)
	return nil
}

func readState(t *testing.T, st *CrashState, path string) string {
	t.Helper()
	b, err := st.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// An fsync makes durable the pending writes of the file synced, and of no
// other file.
func TestCrashStates_FsyncIsPerFile(t *testing.T) {
	rec := newRecorder()
	const f, g ino = 2, 3
	rec.create(rootIno, "f", "f", f, kindFile, 0o644, "")
	rec.create(rootIno, "g", "g", g, kindFile, 0o644, "")
	rec.sync(rootIno, "", true, false) // b1: both names, empty
	rec.write(f, "f", 0, []byte("F"))
	rec.write(g, "g", 0, []byte("G"))
	rec.sync(g, "g", false, false) // b2: g's write only
	st := boundaryState(t, rec, 2)
	if got := readState(t, st, "g"); got != "G" {
		t.Errorf("%s: g is %q after its fsync, want \"G\"", st.Name, got)
	}
	if got := readState(t, st, "f"); got != "" {
		t.Errorf("%s: f is %q; its write was never synced, want it empty", st.Name, got)
	}
}

// A directory's fsync makes durable the entries renamed into it, and with
// them the create of the name they moved.
func TestCrashStates_DirFsyncPersistsRenamesIntoIt(t *testing.T) {
	rec := newRecorder()
	const a, b, f ino = 2, 3, 4
	rec.create(rootIno, "a", "a", a, kindDir, 0o755, "")
	rec.create(rootIno, "b", "b", b, kindDir, 0o755, "")
	rec.sync(rootIno, "", true, false) // b1
	rec.create(a, "a/tmp", "tmp", f, kindFile, 0o644, "")
	rec.write(f, "a/tmp", 0, []byte("x"))
	rec.sync(f, "a/tmp", false, false) // b2: the data
	rec.rename(a, "a/tmp", "tmp", b, "b/final", "final", f)
	rec.sync(b, "b", true, false) // b3: the rename into b
	st := boundaryState(t, rec, 3)
	if got := readState(t, st, "b/final"); got != "x" {
		t.Errorf("%s: b/final is %s after b's fsync, want \"x\"", st.Name, got)
	}
	if got := readState(t, st, "a/tmp"); got == "x" {
		t.Errorf("%s: a/tmp is still there beside b/final", st.Name)
	}
}

// A file truncated and then extended reads zeros where its old bytes were,
// in every crash state that has both operations.
func TestCrashStates_TruncateThenExtendReadsZeros(t *testing.T) {
	rec := newRecorder()
	const f ino = 2
	rec.create(rootIno, "f", "f", f, kindFile, 0o644, "")
	rec.write(f, "f", 0, []byte("abcdefgh"))
	rec.sync(f, "f", false, false)
	rec.sync(rootIno, "", true, false) // b2: "abcdefgh"
	rec.truncate(f, "f", 2)
	rec.write(f, "f", 6, []byte("XY"))
	rec.sync(f, "f", false, false) // b3
	st := boundaryState(t, rec, 3)
	if got := readState(t, st, "f"); got != "ab\x00\x00\x00\x00XY" {
		t.Errorf("%s: f is %q after truncate to 2 and a write at 6, want \"ab\\0\\0\\0\\0XY\"", st.Name, got)
	}
}

// A link is a directory entry like a create: durable at its directory's
// fsync and not before, and a later rename in that directory never
// persists without it. (A store's Install links the old store to its
// aside name, then renames the new one over it: the old store must never
// lose its last name while the new one has none.)
func TestCrashStates_LinkNeedsItsDirectoryAndPrecedesARename(t *testing.T) {
	rec := newRecorder()
	const store, fresh ino = 2, 3
	rec.create(rootIno, "store", "store", store, kindFile, 0o644, "")
	rec.write(store, "store", 0, []byte("old"))
	rec.sync(store, "store", false, false) // b1
	rec.create(rootIno, "new", "new", fresh, kindFile, 0o644, "")
	rec.write(fresh, "new", 0, []byte("new"))
	rec.sync(fresh, "new", false, false) // b2
	rec.sync(rootIno, "", true, false)   // b3: store and new named
	rec.link(rootIno, "aside", "aside", store)
	rec.rename(rootIno, "new", "new", rootIno, "store", "store", fresh)
	rec.sync(rootIno, "", true, false) // b4: the link and the rename
	sts := states(rec, StateOptions{Subsets: 8})
	linkedAlone := false
	for _, st := range sts {
		s, a := readState(t, st, "store"), readState(t, st, "aside")
		switch {
		case s == "new" && a != "old":
			t.Errorf("%s: the store is the new file and aside is %s: a rename persisted without the link before it", st.Name, a)
		case s == "old" && a == "old":
			linkedAlone = true
		}
		if _, err := st.ReadFile("aside"); st.AtBoundary() && st.After == 3 && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: aside is %s before its directory's fsync, want it absent", st.Name, a)
		}
	}
	if !linkedAlone {
		t.Error("no state keeps the link without the rename: the states between the two fsyncs are not explored")
	}
	st := boundaryState(t, rec, 4)
	if s, a, n := readState(t, st, "store"), readState(t, st, "aside"), readState(t, st, "new"); s != "new" || a != "old" || n == "new" {
		t.Errorf("%s: store %s, aside %s, new %s after the directory's fsync; want new, old, absent", st.Name, s, a, n)
	}
}
