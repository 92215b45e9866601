package taskdir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLayout_Resolve(t *testing.T) {
	raw := Layout{TaskDir: "/s/a1/web", AllocDir: "/s/a1/alloc"}
	exec := Layout{TaskDir: "/s/a1/web", AllocDir: "/s/a1/alloc", Chroot: true}
	for _, tc := range []struct {
		l        Layout
		in       string
		root, rl string
	}{
		{raw, "local/x", "/s/a1/web", "local/x"},
		{raw, "x", "/s/a1/web", "x"},
		{raw, "../alloc/go.mod", "/s/a1/alloc", "go.mod"},
		{raw, "/s/a1/alloc/data/f", "/s/a1/alloc", "data/f"},
		{raw, "/s/a1/web/local", "/s/a1/web", "local"},
		{exec, "local/pid.sh", "/s/a1/web", "local/pid.sh"},
		{exec, "/local/pid.sh", "/s/a1/web", "local/pid.sh"},
		{exec, "/alloc/go.mod", "/s/a1/alloc", "go.mod"},
		{exec, "/secrets/t", "/s/a1/web", "secrets/t"},
		{exec, "local/../tmp/x", "/s/a1/web", "tmp/x"},
	} {
		got, err := tc.l.Resolve(tc.in)
		if err != nil || got.Root != tc.root || got.Rel != tc.rl {
			t.Errorf("Resolve(%q, chroot %v) = %+v, %v; want %s + %s", tc.in, tc.l.Chroot, got, err, tc.root, tc.rl)
		}
	}
	for _, tc := range []struct {
		l  Layout
		in string
	}{
		{raw, "../../etc/x"}, {raw, "/etc/passwd"}, {raw, "../other/x"}, {raw, "local/../../x"}, {raw, ""},
		{exec, "/etc/passwd"}, {exec, "../../etc/x"}, {exec, "/bin/sh"}, {exec, "x"},
	} {
		if got, err := tc.l.Resolve(tc.in); !errors.Is(err, ErrOutside) {
			t.Errorf("Resolve(%q, chroot %v) = %+v, %v; want ErrOutside", tc.in, tc.l.Chroot, got, err)
		}
	}
	if env := exec.Env(); env["NOMAD_TASK_DIR"] != "/local" || env["NOMAD_ALLOC_DIR"] != "/alloc" || env["NOMAD_SECRETS_DIR"] != "/secrets" {
		t.Errorf("exec env %v", env)
	}
	if env := raw.Env(); env["NOMAD_TASK_DIR"] != "/s/a1/web/local" || env["NOMAD_ALLOC_DIR"] != "/s/a1/alloc" || env["NOMAD_SECRETS_DIR"] != "/s/a1/web/secrets" {
		t.Errorf("raw_exec env %v", env)
	}
	if raw.WorkDir() != "/s/a1/web" || exec.WorkDir() != "/" {
		t.Errorf("work dirs %s %s", raw.WorkDir(), exec.WorkDir())
	}
	if got, err := raw.ResolveRead("/opt/shared/x", []string{"/opt/shared"}); err != nil || got.Root != "/opt/shared" || got.Rel != "x" {
		t.Errorf("an allowed read: %+v %v", got, err)
	}
	if _, err := raw.ResolveRead("/opt/sharedx/x", []string{"/opt/shared"}); !errors.Is(err, ErrOutside) {
		t.Errorf("a sibling of an allowed directory: %v", err)
	}
}

// TestRoot_NeverLeaves: writes, reads, links and directories through a
// Root refuse every way out: "..", absolute paths, a link in the way, a
// link out; the directory outside stays as it was.
func TestRoot_NeverLeaves(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside := filepath.Join(parent, "outside")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.Symlink(outside, filepath.Join(root, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "file-out"))
	r, err := OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, err := range map[string]error{
		"write ..":             r.WriteFile("../outside/x", []byte("x"), 0o644, Keep),
		"write absolute":       r.WriteFile(filepath.Join(outside, "x"), []byte("x"), 0o644, Keep),
		"write through a link": r.WriteFile("out/x", []byte("x"), 0o644, Keep),
		"mkdir through a link": r.MkdirAll("out/d", 0o755, Keep),
		"symlink out":          r.Symlink("../outside", "l"),
		"symlink absolute":     r.Symlink(outside, "l2"),
		"hard link a link":     r.Link("file-out", "h"),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := r.Open("file-out"); !errors.Is(err, ErrSymlink) {
		t.Errorf("open through a final link: %v", err)
	}
	if _, err := r.Open("out/secret"); !errors.Is(err, ErrSymlink) {
		t.Errorf("open through a link: %v", err)
	}
	if _, err := r.Create("out/y", 0o644); !errors.Is(err, ErrSymlink) {
		t.Errorf("create through a link: %v", err)
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
	// What stays inside works.
	if err := r.WriteFile("a/b/c", []byte("ok"), 0o640, Keep); err != nil {
		t.Fatal(err)
	}
	if err := r.Symlink("b/c", "a/l"); err != nil {
		t.Fatal(err)
	}
	if err := r.Link("a/b/c", "a/h"); err != nil {
		t.Fatal(err)
	}
	if b, err := r.ReadFile("a/h", 0); err != nil || string(b) != "ok" {
		t.Errorf("read back %q %v", b, err)
	}
	if fi, err := r.Lstat("a/b/c"); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("lstat %v %v", fi, err)
	}
	// A file in place of a directory the path needs.
	if err := r.WriteFile("a/b/c/d", []byte("x"), 0o644, Keep); !errors.Is(err, ErrNotDir) {
		t.Errorf("write below a file: %v", err)
	}
}

// TestRoot_EnsureDirAndOpenDir: a directory is made (or kept) with its
// mode and owner set through a descriptor; a symbolic link or a file
// where it should be is an error and its target untouched; OpenDir never
// follows a link either.
func TestRoot_EnsureDirAndOpenDir(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.EnsureDir("tmp", 0o777|os.ModeSticky, Keep); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(base, "tmp")); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
		t.Errorf("tmp: %v %v, want drwxrwxrwt", fi.Mode(), err)
	}
	if err := os.Symlink(outside, filepath.Join(base, "local")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secrets"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.EnsureDir("local", 0o755, Keep); !errors.Is(err, ErrSymlink) {
		t.Errorf("a link at local: %v, want ErrSymlink", err)
	}
	if err := r.EnsureDir("secrets", 0o700, Keep); !errors.Is(err, ErrNotDir) {
		t.Errorf("a file at secrets: %v, want ErrNotDir", err)
	}
	if fi, _ := os.Stat(outside); fi.Mode().Perm() != 0o700 {
		t.Errorf("the link's target was changed to %v", fi.Mode())
	}
	if f, err := r.OpenDir("local"); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDir through a link: %v %v, want ErrSymlink", f, err)
	}
	f, err := r.OpenDir("tmp")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestRoot_OpenRegularFilesOnly: Open and ReadFile take a regular file
// only; a fifo (which would block its reader for ever), a directory and a
// device planted at the path are ErrNotRegular, found without blocking.
func TestRoot_OpenRegularFilesOnly(t *testing.T) {
	base := t.TempDir()
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := unix.Mkfifo(filepath.Join(base, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	planted := []string{"fifo", "dir"}
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(base, "null"), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		planted = append(planted, "null")
	}
	for _, name := range planted {
		if f, err := r.Open(name); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open(%s) = %v, want ErrNotRegular", name, err)
		}
		if b, err := r.ReadFile(name, 0); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(%s) = %q, %v; want ErrNotRegular", name, b, err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "plain"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := r.ReadFile("plain", 0); err != nil || string(b) != "ok" {
		t.Errorf("ReadFile(plain) = %q, %v", b, err)
	}
}

// TestRoot_WriteFromLimit: WriteFrom writes a source of exactly limit
// bytes whole, and refuses one of a byte more, leaving neither the file
// nor its temporary file behind (never a file cut at the limit).
func TestRoot_WriteFromLimit(t *testing.T) {
	base := t.TempDir()
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const limit = 4096
	full := bytes.Repeat([]byte("x"), limit)
	if n, err := r.WriteFrom("d/exact", bytes.NewReader(full), limit, 0o644, Keep); err != nil || n != limit {
		t.Fatalf("WriteFrom of %d bytes, limit %d = %d, %v", limit, limit, n, err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "d", "exact")); err != nil || len(b) != limit {
		t.Errorf("d/exact holds %d bytes (%v), want %d", len(b), err, limit)
	}
	over := append(bytes.Clone(full), 'y')
	if _, err := r.WriteFrom("d/over", bytes.NewReader(over), limit, 0o644, Keep); err == nil || !strings.Contains(err.Error(), "more than 4096 bytes") {
		t.Errorf("WriteFrom of %d bytes, limit %d = %v; want an error saying more than %d bytes", len(over), limit, err, limit)
	}
	ents, err := os.ReadDir(filepath.Join(base, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "exact" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("d holds %v after a refused write, want [exact]", names)
	}
}

// TestRoot_OpenAsRefusesAnotherUsersLinkedFile: a reader acting for a user
// is refused a file of another owner with a second hard link (a task's
// link to a file it could not read), and given its own such file and a
// singly linked one.
func TestRoot_OpenAsRefusesAnotherUsersLinkedFile(t *testing.T) {
	base := t.TempDir()
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	owner := os.Geteuid()
	other := owner + 1
	if err := os.WriteFile(filepath.Join(base, "single"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(base, "secret"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if b, err := r.ReadFileAs("link", 0, other); !errors.Is(err, ErrOutside) || b != nil {
		t.Errorf("ReadFileAs(link, uid %d) of uid %d's file with 2 links = %q, %v; want ErrOutside", other, owner, b, err)
	}
	if f, err := r.OpenAs("secret", other); !errors.Is(err, ErrOutside) {
		if f != nil {
			f.Close()
		}
		t.Errorf("OpenAs(secret, uid %d) = %v, want ErrOutside", other, err)
	}
	if b, err := r.ReadFileAs("link", 0, owner); err != nil || string(b) != "k" {
		t.Errorf("ReadFileAs(link) for its owner = %q, %v", b, err)
	}
	if b, err := r.ReadFileAs("single", 0, other); err != nil || string(b) != "s" {
		t.Errorf("ReadFileAs(single) for uid %d = %q, %v", other, b, err)
	}
}

// TestRoot_WriteModeIsTheOneAsked: a file, and a directory made for it or
// by MkdirAll, has exactly the mode asked for, whatever the process's
// umask took away at its creation (the executor's is 077: a 0755
// directory of an artifact left 0700 is one its task, run as nobody,
// cannot enter; a 0666 template, a 0777 binary of an archive).
func TestRoot_WriteModeIsTheOneAsked(t *testing.T) {
	old := unix.Umask(0o077)
	t.Cleanup(func() { unix.Umask(old) })
	base := t.TempDir()
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, perm := range map[string]os.FileMode{"shared": 0o666, "tool": 0o777, "private": 0o600} {
		if err := r.WriteFile(name, []byte(name), perm, Keep); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(base, name)); err != nil || fi.Mode().Perm() != perm {
			t.Errorf("%s written %v under umask 077: %v, %v", name, perm, fi.Mode().Perm(), err)
		}
	}
	if err := r.MkdirAll("made/by/mkdirall", 0o755, Keep); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile("parents/of/a/file", []byte("x"), 0o644, Keep); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"made", "made/by", "made/by/mkdirall", "parents", "parents/of", "parents/of/a"} {
		if fi, err := os.Stat(filepath.Join(base, d)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("directory %s made under umask 077: %v, %v; want 0755", d, fi.Mode().Perm(), err)
		}
	}
}

// The directories MkdirAll and WriteFile make have the mode asked for,
// whatever the process's umask (an executor runs with 077: a fetched
// artifact's directories were root's 0700, and the task's user could not
// read what was fetched for it), and the owner asked for.
func TestRoot_MadeDirectoriesHaveTheirModeUnderAnyUmask(t *testing.T) {
	base := t.TempDir()
	r, err := OpenRoot(base)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	owner := Keep
	if os.Geteuid() == 0 {
		owner = Owner{UID: 65534, GID: 65534}
	}
	if err := r.MkdirAll("a/b", 0o755, owner); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile("c/d/f", []byte("x"), 0o644, Keep); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]os.FileMode{"a": 0o755, "a/b": 0o755, "c": 0o755, "c/d": 0o755, "c/d/f": 0o644} {
		fi, err := os.Stat(filepath.Join(base, rel))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", rel, fi.Mode(), err, want)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); owner != Keep && (rel == "a" || rel == "a/b") && int(st.Uid) != owner.UID {
			t.Errorf("%s: uid %d, want %d", rel, st.Uid, owner.UID)
		}
	}
}
