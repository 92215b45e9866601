package taskdir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
