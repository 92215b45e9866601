package crashfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// ---- the model, driven directly (no FUSE needed) ----

// states returns the crash states of what rec logged.
func states(rec *recorder, opts StateOptions) []*CrashState {
	return crashStates(rec.initial, rec.snapshot(), opts)
}

// contents maps each state's name to the content of path in it ("-" for
// absent).
func contents(t *testing.T, sts []*CrashState, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, st := range sts {
		b, err := st.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[st.Name] = "-"
		case err != nil:
			t.Fatalf("%s: %v", st.Name, err)
		default:
			out[st.Name] = string(b)
		}
	}
	return out
}

func values(m map[string]string) []string {
	var vs []string
	for _, v := range m {
		if !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

func TestCrashStates_UnsyncedWriteDropped(t *testing.T) {
	rec := newRecorder()
	const f ino = 2
	rec.create(rootIno, "f", "f", f, kindFile, 0o644, "")
	rec.write(f, "f", 0, []byte("one"))
	rec.sync(f, "f", false, false)
	rec.sync(rootIno, "", true, false)
	rec.write(f, "f", 0, []byte("two"))
	m := rec.mark("after two (never synced)")
	sts := states(rec, StateOptions{})
	got := contents(t, sts, "f")
	if got["b2"] != "one" {
		t.Errorf("at boundary 2 (file and directory synced, second write not): %q, want \"one\"", got["b2"])
	}
	if v := values(got); !slices.Equal(v, []string{"", "-", "one", "two"}) {
		t.Errorf("contents over all states: %q, want absent, empty, one and two", v)
	}
	for _, st := range sts {
		if st.After == 2 && !st.Before(m) {
			t.Errorf("%s: the mark made in its interval is not Before it", st.Name)
		}
	}
}

func TestCrashStates_NewNameNeedsDirectoryFsync(t *testing.T) {
	rec := newRecorder()
	const d, f ino = 2, 3
	rec.create(rootIno, "d", "d", d, kindDir, 0o755, "")
	rec.sync(rootIno, "", true, false) // b1: d is durable
	rec.create(d, "d/f", "f", f, kindFile, 0o644, "")
	rec.write(f, "d/f", 0, []byte("data"))
	rec.sync(f, "d/f", false, false) // b2: f's data, not its name
	synced := rec.mark("file synced")
	rec.sync(d, "d", true, false) // b3: the name
	named := rec.mark("dir synced")
	for _, st := range states(rec, StateOptions{}) {
		b, err := st.ReadFile("d/f")
		if st.AtBoundary() && st.After == 2 && err == nil {
			t.Errorf("%s: d/f exists (%q) though its directory was never synced", st.Name, b)
		}
		if st.Before(named) && string(b) != "data" {
			t.Errorf("%s: after the directory fsync d/f is %q, %v; want \"data\"", st.Name, b, err)
		}
		_ = synced
	}
}

func TestCrashStates_RenameBringsTheCreateItMoved(t *testing.T) {
	rec := newRecorder()
	const a, b, f ino = 2, 3, 4
	rec.create(rootIno, "a", "a", a, kindDir, 0o755, "")
	rec.create(rootIno, "b", "b", b, kindDir, 0o755, "")
	rec.sync(rootIno, "", true, false)
	rec.create(a, "a/tmp", "tmp", f, kindFile, 0o644, "")
	rec.write(f, "a/tmp", 0, []byte("x"))
	rec.sync(f, "a/tmp", false, false)
	rec.rename(a, "a/tmp", "tmp", b, "b/final", "final", f)
	rec.sync(b, "b", true, false) // b/final durable; a's create comes with it
	rec.sync(a, "a", true, false) // must not bring a/tmp back
	for _, st := range states(rec, StateOptions{Subsets: 8}) {
		_, tmpErr := st.ReadFile("a/tmp")
		final, finalErr := st.ReadFile("b/final")
		if tmpErr == nil && finalErr == nil {
			t.Errorf("%s: both a/tmp and b/final exist: a rename persisted without its create's removal", st.Name)
		}
		if st.After >= 5 && st.AtBoundary() && (finalErr != nil || string(final) != "x") {
			t.Errorf("%s: b/final is %q, %v after b's fsync; want \"x\"", st.Name, final, finalErr)
		}
	}
}

func TestCrashStates_Deterministic(t *testing.T) {
	build := func() *recorder {
		rec := newRecorder()
		const f ino = 2
		rec.create(rootIno, "f", "f", f, kindFile, 0o644, "")
		rec.sync(rootIno, "", true, false)
		for i := range 6 {
			rec.write(f, "f", int64(i)*pageSize, bytes.Repeat([]byte{byte('a' + i)}, pageSize))
		}
		rec.sync(f, "f", true, false)
		return rec
	}
	names := func(seed uint64) []string {
		var ns []string
		for _, st := range states(build(), StateOptions{Seed: seed, Subsets: 4}) {
			ns = append(ns, st.Name+" "+fmt.Sprint(len(st.Kept)))
		}
		return ns
	}
	if a, b := names(7), names(7); !slices.Equal(a, b) {
		t.Errorf("same seed, different states:\n%q\n%q", a, b)
	}
	n := len(names(7))
	// b1 alone, six singles, prefixes of 2..6 pages (the first is a
	// single), random subsets, and the synced file.
	if n < 12 {
		t.Errorf("%d states for six unsynced page writes, want at least 12", n)
	}
}

// ---- the filesystem (FUSE) ----

func syncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

// replace writes data to dir/name the way executor.writeFileAtomic does:
// a temporary file, fsync, rename, fsync of the directory; each step can be
// left out.
func replace(t *testing.T, dir, name string, data []byte, inPlace, noDirSync bool) {
	t.Helper()
	target := filepath.Join(dir, name)
	p := target
	if !inPlace {
		p = filepath.Join(dir, "."+name+".tmp")
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !inPlace {
		if err := os.Rename(p, target); err != nil {
			t.Fatal(err)
		}
	}
	if !noDirSync {
		syncPath(t, dir)
	}
}

// checkVersions checks name in every crash state against the versions
// written to it in order, each acknowledged at acks[i]: absent or one whole
// version, and never older than the last version acknowledged before the
// crash. It returns the problems found.
func checkVersions(sts []*CrashState, name string, versions []string, acks []Mark) []string {
	var problems []string
	for _, st := range sts {
		b, err := st.ReadFile(name)
		got := -1
		if err == nil {
			got = slices.Index(versions, string(b))
			if got < 0 {
				problems = append(problems, fmt.Sprintf("%s: %s is %q, not a whole version", st, name, b))
				continue
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("%s: %v", st, err))
			continue
		}
		for i := len(acks) - 1; i >= 0; i-- {
			if st.Before(acks[i]) {
				if got < i {
					problems = append(problems, fmt.Sprintf("%s: %s holds version %d, but version %d was acknowledged before the crash", st, name, got+1, i+1))
				}
				break
			}
		}
	}
	return problems
}

func versions(n int) []string {
	var vs []string
	for i := range n {
		vs = append(vs, fmt.Sprintf(`{"version":%d,"pad":%q}`, i+1, strings.Repeat("x", 100*i)))
	}
	return vs
}

func TestFS_AtomicReplaceIsWholeAndDurable(t *testing.T) {
	f := Mount(t, "", Options{})
	vs := versions(4)
	var acks []Mark
	for i, v := range vs {
		replace(t, f.Dir(), "id.json", []byte(v), false, false)
		acks = append(acks, f.Mark(fmt.Sprintf("version %d written", i+1)))
	}
	sts := f.CrashStates(StateOptions{})
	for _, p := range checkVersions(sts, "id.json", vs, acks) {
		t.Error(p)
	}
	if len(f.Boundaries()) != 8 {
		t.Errorf("%d boundaries, want 8 (a file and a directory fsync per version):\n%v", len(f.Boundaries()), f.Boundaries())
	}
	t.Logf("%d crash states over %d boundaries", len(sts), len(f.Boundaries()))
}

// The harness must find what the planted bugs of the executor's side files
// do: an in-place write leaves a state with an empty file, and a rename
// without a directory fsync loses an acknowledged version.
func TestFS_FindsInPlaceAndUnsyncedRename(t *testing.T) {
	for _, c := range []struct {
		name               string
		inPlace, noDirSync bool
		want               string
	}{
		{"in place", true, false, "not a whole version"},
		{"no directory fsync", false, true, "was acknowledged before the crash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := Mount(t, "", Options{})
			vs := versions(3)
			var acks []Mark
			for i, v := range vs {
				replace(t, f.Dir(), "id.json", []byte(v), c.inPlace, c.noDirSync)
				acks = append(acks, f.Mark(fmt.Sprintf("version %d written", i+1)))
			}
			problems := checkVersions(f.CrashStates(StateOptions{}), "id.json", vs, acks)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("no crash state shows the bug (want a problem saying %q); found: %q", c.want, problems)
			}
		})
	}
}

func TestFS_BoundaryKinds(t *testing.T) {
	f := Mount(t, "", Options{})
	p := f.Path("f")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(fh.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir())
	var got []string
	for _, b := range f.Boundaries() {
		got = append(got, b.Op.String())
	}
	want := []string{"#3 fdatasync f", "#4 fsync f", "#5 fsyncdir ."}
	if !slices.Equal(got, want) {
		t.Errorf("boundaries %q, want %q", got, want)
	}
}

// flock is kept by the kernel (locks are not forwarded): two descriptors of
// one file on the mount exclude each other, as bbolt's lock needs.
func TestFS_FlockExcludes(t *testing.T) {
	f := Mount(t, "", Options{})
	p := f.Path("lock")
	a, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := syscall.Flock(int(a.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("first flock: %v", err)
	}
	if err := syscall.Flock(int(b.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Errorf("second flock of a locked file: %v, want EWOULDBLOCK", err)
	}
	if err := syscall.Flock(int(a.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(b.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("flock after unlock: %v", err)
	}
}

func TestFS_MmapSeesWrites(t *testing.T) {
	f := Mount(t, "", Options{})
	fh, err := os.Create(f.Path("m"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(fh.Fd()), 0, 2*pageSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if _, err := fh.WriteAt([]byte("hello"), pageSize+3); err != nil {
		t.Fatal(err)
	}
	if got := string(m[pageSize+3 : pageSize+8]); got != "hello" {
		t.Errorf("mapped page reads %q after pwrite, want \"hello\"", got)
	}
}

func TestFS_MaterializeTree(t *testing.T) {
	f := Mount(t, "", Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(f.Path("d"), 0o750))
	must(os.WriteFile(f.Path("d", "a"), []byte("A"), 0o640))
	must(os.Link(f.Path("d", "a"), f.Path("b")))
	must(os.Symlink("d/a", f.Path("s")))
	must(unix.Mkfifo(f.Path("p"), 0o600))
	syncPath(t, f.Path("d", "a"))
	syncPath(t, f.Path("d"))
	syncPath(t, f.Dir())
	sts := f.CrashStates(StateOptions{Subsets: -1})
	last := sts[len(sts)-1]
	dir := filepath.Join(t.TempDir(), "state")
	must(last.Materialize(dir))
	if b, err := os.ReadFile(filepath.Join(dir, "b")); err != nil || string(b) != "A" {
		t.Errorf("hard link b: %q, %v", b, err)
	}
	var sa, sb syscall.Stat_t
	must(syscall.Stat(filepath.Join(dir, "d", "a"), &sa))
	must(syscall.Stat(filepath.Join(dir, "b"), &sb))
	if sa.Ino != sb.Ino {
		t.Errorf("d/a and b are different inodes in %s", last.Name)
	}
	if st, err := os.Stat(filepath.Join(dir, "d")); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("d: %v, %v; want mode 0750", st.Mode(), err)
	}
	if tgt, err := os.Readlink(filepath.Join(dir, "s")); err != nil || tgt != "d/a" {
		t.Errorf("symlink s: %q, %v", tgt, err)
	}
	if st, err := os.Lstat(filepath.Join(dir, "p")); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("fifo p: %v", err)
	}
	if err := last.Materialize(dir); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("materialize into a non-empty directory: %v, want ErrNotEmpty", err)
	}
}

// bbolt on the mount: every crash state opens, passes bbolt's own check,
// and holds every key whose transaction had committed before the crash.
func TestFS_BboltEveryStateConsistent(t *testing.T) {
	f := Mount(t, "", Options{})
	path := f.Path("b.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir()) // bbolt does not sync the directory of a new file
	since := f.Mark("created")
	type ack struct {
		key string
		at  Mark
	}
	var acks []ack
	for i := range 12 {
		k := fmt.Sprintf("k%02d", i)
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), bytes.Repeat([]byte{byte(i)}, 1000*i))
		}); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack{k, f.Mark("committed " + k)})
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sts := f.CrashStates(StateOptions{Since: since})
	for i, st := range sts {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := st.Materialize(dir); err != nil {
			t.Fatal(err)
		}
		sdb, err := bolt.Open(filepath.Join(dir, "b.db"), 0o600, nil)
		if err != nil {
			t.Errorf("%s: bolt.Open: %v", st, err)
			continue
		}
		err = sdb.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("%s: bbolt check: %v", st, err)
			}
			for _, a := range acks {
				if !st.Before(a.at) {
					continue
				}
				if b := tx.Bucket([]byte("b")); b == nil || b.Get([]byte(a.key)) == nil {
					t.Errorf("%s: key %s committed at %s is missing", st, a.key, a.at)
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		sdb.Close()
	}
	t.Logf("%d crash states over %d boundaries", len(sts), len(f.Boundaries()))
}
