package artifact

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/taskdir"
)

// sandbox is a Nomad-shaped alloc directory inside a parent that also
// holds an "outside" directory nothing may be written to.
type sandbox struct {
	parent, outside string
	layout          taskdir.Layout
	planted         map[string]bool
}

// plant writes a file the test itself puts outside (with its directories).
func (s *sandbox) plant(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o640); err != nil {
		t.Fatal(err)
	}
	for p := path; p != s.parent && p != "/"; p = filepath.Dir(p) {
		s.planted[p] = true
	}
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	parent := t.TempDir()
	s := &sandbox{parent: parent, outside: filepath.Join(parent, "outside"),
		layout:  taskdir.Layout{TaskDir: filepath.Join(parent, "a1", "web"), AllocDir: filepath.Join(parent, "a1", "alloc")},
		planted: map[string]bool{}}
	for _, d := range []string{s.outside, filepath.Join(s.layout.TaskDir, "local"), s.layout.AllocDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { s.assertOutsideUntouched(t) })
	return s
}

// assertOutsideUntouched fails if anything was written outside the task
// and alloc directories.
func (s *sandbox) assertOutsideUntouched(t *testing.T) {
	t.Helper()
	filepath.WalkDir(s.parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		switch {
		case p == s.parent, p == s.outside, p == filepath.Dir(s.layout.TaskDir), s.planted[p]:
			return nil
		case strings.HasPrefix(p+"/", s.layout.TaskDir+"/"), strings.HasPrefix(p+"/", s.layout.AllocDir+"/"):
			return nil
		}
		t.Errorf("something was written outside the task and alloc directories: %s", p)
		return nil
	})
}

type entry struct {
	name, body, link string
	typ              byte
}

func tarball(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func zipball(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.link != "" {
			h.SetMode(fs.ModeSymlink | 0o777)
			w, _ := zw.CreateHeader(h)
			w.Write([]byte(e.link))
			continue
		}
		h.SetMode(0o644)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	zw.Close()
	return buf.Bytes()
}

// serve serves files by path on 127.0.0.1.
func serve(t *testing.T, files map[string][]byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func sum(b []byte) string { h := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(h[:]) }

func TestFetch_HTTPFileAndArchives(t *testing.T) {
	s := newSandbox(t)
	tgz := tarball(t, true, entry{name: "app/", typ: tar.TypeDir}, entry{name: "app/run.sh", body: "echo hi\n"},
		entry{name: "app/link", link: "run.sh", typ: tar.TypeSymlink}, entry{name: "app/hard", link: "app/run.sh", typ: tar.TypeLink})
	zp := zipball(t, entry{name: "z/a.txt", body: "a"}, entry{name: "z/l", link: "a.txt"})
	var gzOne bytes.Buffer
	gw := gzip.NewWriter(&gzOne)
	gw.Write([]byte("plain\n"))
	gw.Close()
	srv := serve(t, map[string][]byte{"/f/go.mod": []byte("module x\n"), "/app.tar.gz": tgz, "/z.zip": zp, "/one.txt.gz": gzOne.Bytes(), "/keep.tar.gz": tgz})
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir()}
	ctx := context.Background()
	for _, a := range []Artifact{
		{Source: srv.URL + "/f/go.mod", Options: map[string]string{"checksum": sum([]byte("module x\n"))}},
		{Source: srv.URL + "/f/go.mod?checksum=" + sum([]byte("module x\n")), Destination: "local/q"},
		{Source: srv.URL + "/app.tar.gz", Destination: "local/x"},
		{Source: srv.URL + "/z.zip"},
		{Source: srv.URL + "/one.txt.gz"},
		{Source: srv.URL + "/keep.tar.gz", Options: map[string]string{"archive": "false"}},
		{Source: srv.URL + "/f/go.mod", Destination: "../alloc/data/go.mod", Mode: ModeFile},
	} {
		if err := f.Fetch(ctx, a); err != nil {
			t.Fatalf("%+v: %v", a, err)
		}
	}
	local := filepath.Join(s.layout.TaskDir, "local")
	for p, want := range map[string]string{
		"go.mod": "module x\n", "q/go.mod": "module x\n", "x/app/run.sh": "echo hi\n", "x/app/link": "echo hi\n",
		"x/app/hard": "echo hi\n", "z/a.txt": "a", "z/l": "a", "one.txt": "plain\n",
	} {
		b, err := os.ReadFile(filepath.Join(local, p))
		if err != nil || string(b) != want {
			t.Errorf("local/%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(local, "keep.tar.gz")); !bytes.Equal(b, tgz) {
		t.Errorf("archive = false did not keep the archive as is")
	}
	if b, _ := os.ReadFile(filepath.Join(s.layout.AllocDir, "data", "go.mod")); string(b) != "module x\n" {
		t.Errorf("../alloc/data/go.mod = %q", b)
	}
}

// TestFetch_Hostile: each hostile artifact is refused with a named error
// and nothing lands outside the task and alloc directories (the sandbox
// checks at cleanup).
func TestFetch_Hostile(t *testing.T) {
	s := newSandbox(t)
	escTar := tarball(t, false, entry{name: "ok.txt", body: "fine"}, entry{name: "../../../outside/pwned", body: "x"})
	absTar := tarball(t, false, entry{name: s.outside + "/pwned", body: "x"})
	symOut := tarball(t, false, entry{name: "evil", link: s.outside, typ: tar.TypeSymlink}, entry{name: "evil/pwned", body: "x"})
	symRel := tarball(t, false, entry{name: "evil", link: "../../../../outside", typ: tar.TypeSymlink}, entry{name: "evil/pwned", body: "x"})
	symIn := tarball(t, false, entry{name: "d/", typ: tar.TypeDir}, entry{name: "in", link: "d", typ: tar.TypeSymlink}, entry{name: "in/pwned", body: "x"})
	hardOut := tarball(t, false, entry{name: "h", link: "../../../outside/secret", typ: tar.TypeLink})
	dev := tarball(t, false, entry{name: "null", typ: tar.TypeChar})
	fifo := tarball(t, false, entry{name: "p", typ: tar.TypeFifo})
	zipEsc := zipball(t, entry{name: "../../outside/pwned", body: "x"})
	zipSym := zipball(t, entry{name: "l", link: "/etc"}, entry{name: "l/pwned", body: "x"})
	s.plant(t, filepath.Join(s.outside, "secret"), "secret")
	srv := serve(t, map[string][]byte{"/esc.tar": escTar, "/abs.tar": absTar, "/symout.tar": symOut, "/symrel.tar": symRel,
		"/symin.tar": symIn, "/hard.tar": hardOut, "/dev.tar": dev, "/fifo.tar": fifo, "/esc.zip": zipEsc, "/sym.zip": zipSym, "/f": []byte("data")})
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir()}
	for _, tc := range []struct {
		name string
		a    Artifact
		want error
		says string
	}{
		{"dotdot entry", Artifact{Source: srv.URL + "/esc.tar"}, ErrOutside, `climbs out with ".."`},
		{"absolute entry", Artifact{Source: srv.URL + "/abs.tar"}, ErrOutside, "absolute path"},
		{"symlink out then a file through it", Artifact{Source: srv.URL + "/symout.tar"}, ErrOutside, "points outside"},
		{"relative symlink out", Artifact{Source: srv.URL + "/symrel.tar"}, ErrOutside, "points outside"},
		{"a file through a symlink that stays inside", Artifact{Source: srv.URL + "/symin.tar"}, ErrOutside, "symbolic link"},
		{"hard link out", Artifact{Source: srv.URL + "/hard.tar"}, ErrOutside, "hard link"},
		{"device node", Artifact{Source: srv.URL + "/dev.tar"}, ErrArchive, "character device"},
		{"fifo", Artifact{Source: srv.URL + "/fifo.tar"}, ErrArchive, "fifo"},
		{"zip dotdot", Artifact{Source: srv.URL + "/esc.zip"}, ErrOutside, `".."`},
		{"zip symlink out", Artifact{Source: srv.URL + "/sym.zip"}, ErrOutside, "points outside"},
		{"checksum mismatch", Artifact{Source: srv.URL + "/f", Options: map[string]string{"checksum": "sha256:" + strings.Repeat("0", 64)}}, ErrChecksum, "sha256 is"},
		{"checksum query mismatch", Artifact{Source: srv.URL + "/f?checksum=md5:" + strings.Repeat("a", 32)}, ErrChecksum, "md5 is"},
		{"bad checksum type", Artifact{Source: srv.URL + "/f", Options: map[string]string{"checksum": "crc32:00"}}, ErrChecksum, "crc32"},
		{"destination out", Artifact{Source: srv.URL + "/f", Destination: "../../outside/x", Mode: ModeFile}, ErrOutside, "outside"},
		{"absolute destination out", Artifact{Source: srv.URL + "/f", Destination: s.outside + "/x", Mode: ModeFile}, ErrOutside, "outside"},
		{"local source outside", Artifact{Source: filepath.Join(s.outside, "secret")}, ErrOutside, "outside"},
		{"file:// source outside", Artifact{Source: "file://" + filepath.Join(s.outside, "secret")}, ErrOutside, "outside"},
		{"local source up and out", Artifact{Source: "../../outside/secret"}, ErrOutside, "outside"},
		{"git", Artifact{Source: "git::https://example.com/r"}, ErrSource, `"git" getter`},
		{"github shorthand", Artifact{Source: "github.com/hashicorp/go-set"}, ErrSource, "git (GitHub shorthand)"},
		{"s3", Artifact{Source: "s3::https://s3.amazonaws.com/b/k"}, ErrSource, `"s3" getter`},
		{"unreachable", Artifact{Source: "http://127.0.0.1:1/x"}, ErrSource, "cannot reach"},
		{"not found", Artifact{Source: srv.URL + "/missing"}, ErrSource, "404"},
		{"mode file for a tarball", Artifact{Source: srv.URL + "/esc.tar", Mode: ModeFile, Destination: "local/t"}, ErrMode, "archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := f.Fetch(context.Background(), tc.a)
			var ae *Error
			if !errors.Is(err, tc.want) || !errors.As(err, &ae) || ae.Source != tc.a.Source || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Fetch = %v; want %v naming the source and saying %q", err, tc.want, tc.says)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(s.outside, "secret")); string(b) != "secret" {
		t.Errorf("the file outside changed: %q", b)
	}
}

func TestFetch_LocalSources(t *testing.T) {
	s := newSandbox(t)
	allowed := filepath.Join(s.parent, "outside", "shared")
	s.plant(t, filepath.Join(allowed, "sub", "f.txt"), "shared")
	os.WriteFile(filepath.Join(s.layout.AllocDir, "in-alloc.txt"), []byte("alloc"), 0o644)
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir()}
	if err := f.Fetch(context.Background(), Artifact{Source: allowed}); !errors.Is(err, ErrOutside) {
		t.Fatalf("a directory nobody allowed: %v", err)
	}
	f.AllowRead = []string{allowed}
	ctx := context.Background()
	if err := f.Fetch(ctx, Artifact{Source: allowed, Destination: "local/copy"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(s.layout.TaskDir, "local", "copy", "sub", "f.txt")); err != nil || string(b) != "shared" {
		t.Errorf("copied tree: %q %v", b, err)
	}
	if err := f.Fetch(ctx, Artifact{Source: "file://" + filepath.Join(s.layout.AllocDir, "in-alloc.txt")}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.layout.TaskDir, "local", "in-alloc.txt")); string(b) != "alloc" {
		t.Errorf("file:// from the alloc dir: %q", b)
	}
}

// FuzzUnpack unpacks arbitrary tar and zip bytes: it never panics, and
// never writes outside the destination.
func FuzzUnpack(f *testing.F) {
	t := &testing.T{}
	f.Add(tarball(t, false, entry{name: "a/b", body: "x"}), false)
	f.Add(tarball(t, false, entry{name: "../x", body: "x"}), false)
	f.Add(tarball(t, false, entry{name: "l", link: "/", typ: tar.TypeSymlink}, entry{name: "l/x", body: "y"}), false)
	f.Add(zipball(t, entry{name: "z/../../x", body: "x"}), true)
	f.Add(zipball(t, entry{name: "ok", body: "x"}, entry{name: "s", link: "ok"}), true)
	f.Fuzz(func(t *testing.T, data []byte, isZip bool) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "root", "dest")
		if err := os.MkdirAll(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := taskdir.OpenRoot(filepath.Join(parent, "root"))
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		u := &Unpacker{Root: root, Dest: "dest", Limits: Limits{MaxBytes: 1 << 20, MaxFiles: 64}, Owner: taskdir.Keep}
		format := FormatTar
		if isZip {
			format = FormatZip
		}
		_ = u.Unpack(context.Background(), bytes.NewReader(data), int64(len(data)), format)
		filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err == nil && p != parent && p != filepath.Join(parent, "root") && !strings.HasPrefix(p+"/", dest+"/") {
				t.Fatalf("unpacked outside the destination: %s", p)
			}
			return nil
		})
	})
}

// TestFetch_Limits: an archive of exactly MaxFiles entries and a download
// of exactly MaxBytes are taken; one entry or one byte more is refused,
// naming the limit, and a download over the limit is never placed cut.
func TestFetch_Limits(t *testing.T) {
	s := newSandbox(t)
	three := tarball(t, false, entry{name: "a", body: "1"}, entry{name: "b", body: "2"}, entry{name: "c", body: "3"})
	four := tarball(t, false, entry{name: "a", body: "1"}, entry{name: "b", body: "2"}, entry{name: "c", body: "3"}, entry{name: "d", body: "4"})
	exact, over := bytes.Repeat([]byte("x"), 100), bytes.Repeat([]byte("x"), 101)
	srv := serve(t, map[string][]byte{"/three.tar": three, "/four.tar": four, "/exact": exact, "/over": over})
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir(), Limits: Limits{MaxFiles: 3, MaxBytes: 1 << 20}}
	ctx := context.Background()
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/three.tar", Destination: "local/three"}); err != nil {
		t.Fatalf("an archive of MaxFiles entries: %v", err)
	}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/four.tar", Destination: "local/four"}); !errors.Is(err, ErrArchive) || !strings.Contains(err.Error(), "more than 3 entries") {
		t.Errorf("an archive of MaxFiles+1 entries: %v; want ErrArchive saying more than 3 entries", err)
	}
	if _, err := os.Stat(filepath.Join(s.layout.TaskDir, "local", "four", "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the entry over the limit was unpacked: %v", err)
	}
	f.Limits = Limits{MaxFiles: 3, MaxBytes: 100}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/exact"}); err != nil {
		t.Fatalf("a download of MaxBytes: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.layout.TaskDir, "local", "exact")); len(b) != 100 {
		t.Errorf("local/exact holds %d bytes, want 100", len(b))
	}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/over"}); !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "larger than 100 bytes") {
		t.Errorf("a download of MaxBytes+1: %v; want ErrSource saying larger than 100 bytes", err)
	}
	if _, err := os.Stat(filepath.Join(s.layout.TaskDir, "local", "over")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a download over the limit was placed: %v", err)
	}
}

// TestFetch_LocalChecksum: a local source is checked against its checksum
// as a download is: a match is placed, a mismatch refused with ErrChecksum
// and nothing placed.
func TestFetch_LocalChecksum(t *testing.T) {
	s := newSandbox(t)
	src := filepath.Join(s.layout.AllocDir, "bin.sh")
	if err := os.WriteFile(src, []byte("echo ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir()}
	ctx := context.Background()
	if err := f.Fetch(ctx, Artifact{Source: "file://" + src, Destination: "local/good", Options: map[string]string{"checksum": sum([]byte("echo ok\n"))}}); err != nil {
		t.Fatalf("a local source with its checksum: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.layout.TaskDir, "local", "good", "bin.sh")); string(b) != "echo ok\n" {
		t.Errorf("local/good/bin.sh = %q", b)
	}
	for _, a := range []Artifact{
		{Source: "file://" + src, Destination: "local/bad", Options: map[string]string{"checksum": sum([]byte("echo evil\n"))}},
		{Source: src + "?checksum=" + sum([]byte("echo evil\n")), Destination: "local/bad"},
	} {
		if err := f.Fetch(ctx, a); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "sha256 is") {
			t.Errorf("%s with a checksum it does not match: %v; want ErrChecksum", a.Source, err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.layout.TaskDir, "local", "bad")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a local source with a wrong checksum was placed: %v", err)
	}
}

// TestFetch_ArchiveLinkStaysInItsDestination: an archive's symbolic link
// must resolve inside the destination it is unpacked into, not merely
// inside the task directory: a link from local/app to the task's secrets
// or to a sibling of the destination is refused.
func TestFetch_ArchiveLinkStaysInItsDestination(t *testing.T) {
	s := newSandbox(t)
	toSecrets := tarball(t, false, entry{name: "token", link: "../../secrets/token", typ: tar.TypeSymlink})
	toSibling := tarball(t, false, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/up", link: "../../other", typ: tar.TypeSymlink})
	zipSecrets := zipball(t, entry{name: "token", link: "../../secrets/token"})
	inside := tarball(t, false, entry{name: "d/", typ: tar.TypeDir}, entry{name: "d/f", body: "f"}, entry{name: "l", link: "d/f", typ: tar.TypeSymlink})
	srv := serve(t, map[string][]byte{"/secrets.tar": toSecrets, "/sibling.tar": toSibling, "/secrets.zip": zipSecrets, "/inside.tar": inside})
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir()}
	ctx := context.Background()
	for _, p := range []string{"/secrets.tar", "/sibling.tar", "/secrets.zip"} {
		a := Artifact{Source: srv.URL + p, Destination: "local/app"}
		if err := f.Fetch(ctx, a); !errors.Is(err, ErrOutside) || !strings.Contains(err.Error(), "points outside local/app") {
			t.Errorf("%s: %v; want ErrOutside saying the link points outside local/app", p, err)
		}
	}
	for _, p := range []string{"token", "d/up"} {
		if _, err := os.Lstat(filepath.Join(s.layout.TaskDir, "local", "app", p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("local/app/%s was made: %v", p, err)
		}
	}
	if err := f.Fetch(ctx, Artifact{Source: srv.URL + "/inside.tar", Destination: "local/in"}); err != nil {
		t.Fatalf("a link inside its destination: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(s.layout.TaskDir, "local", "in", "l")); err != nil || string(b) != "f" {
		t.Errorf("local/in/l = %q, %v", b, err)
	}
}

// TestFetch_ChownOnlyWhenAsked: an artifact's files stay the executor's
// (root's) unless the artifact sets chown, and then are the task user's,
// archives' entries and directories included.
func TestFetch_ChownOnlyWhenAsked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: giving files to another user takes chown")
	}
	s := newSandbox(t)
	tgz := tarball(t, true, entry{name: "app/", typ: tar.TypeDir}, entry{name: "app/run.sh", body: "echo hi\n"})
	srv := serve(t, map[string][]byte{"/app.tar.gz": tgz, "/f": []byte("data")})
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir(), Owner: taskdir.Owner{UID: 65534, GID: 65534}}
	ctx := context.Background()
	for _, a := range []Artifact{
		{Source: srv.URL + "/f", Destination: "local/kept"},
		{Source: srv.URL + "/app.tar.gz", Destination: "local/kept"},
		{Source: srv.URL + "/f", Destination: "local/given", Chown: true},
		{Source: srv.URL + "/app.tar.gz", Destination: "local/given", Chown: true},
	} {
		if err := f.Fetch(ctx, a); err != nil {
			t.Fatalf("%+v: %v", a, err)
		}
	}
	for dir, uid := range map[string]int{"kept": os.Geteuid(), "given": 65534} {
		for _, p := range []string{"f", "app", "app/run.sh"} {
			fi, err := os.Lstat(filepath.Join(s.layout.TaskDir, "local", dir, p))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != uid {
				t.Errorf("local/%s/%s belongs to %d:%d, want %d:%d", dir, p, st.Uid, st.Gid, uid, uid)
			}
		}
	}
}

// TestFetch_CopiedTreeLimits: a local directory of exactly max_files
// entries is copied; one of an entry more is refused, naming the limit.
func TestFetch_CopiedTreeLimits(t *testing.T) {
	s := newSandbox(t)
	for _, dir := range []string{"three", "four"} {
		n := 3
		if dir == "four" {
			n = 4
		}
		for i := range n {
			if err := os.MkdirAll(filepath.Join(s.layout.AllocDir, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.layout.AllocDir, dir, fmt.Sprint(i)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := &Fetcher{Layout: s.layout, TempDir: t.TempDir(), Limits: Limits{MaxFiles: 3, MaxBytes: 1 << 20}}
	ctx := context.Background()
	if err := f.Fetch(ctx, Artifact{Source: filepath.Join(s.layout.AllocDir, "three"), Destination: "local/three"}); err != nil {
		t.Fatalf("a directory of max_files entries: %v", err)
	}
	if err := f.Fetch(ctx, Artifact{Source: filepath.Join(s.layout.AllocDir, "four"), Destination: "local/four"}); !errors.Is(err, ErrArchive) || !strings.Contains(err.Error(), "more than 3 files") {
		t.Errorf("a directory of max_files+1 entries: %v; want ErrArchive saying more than 3 files", err)
	}
}
