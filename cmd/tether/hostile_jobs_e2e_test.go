package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarGz is a tar.gz of entries, in order.
type tarEntry struct {
	name, body, link string
	typ              byte
}

func tarGz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: e.typ, Linkname: e.link}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostileJob is a job of one raw_exec task (root, host paths: the
// strongest case) with extra blocks, and a main task that would write a
// marker if it ever ran.
func hostileJob(driver, blocks string) string {
	return fmt.Sprintf(`job "hostile" {
  type = "batch"
  group "g" {
    task "victim" {
      driver = %q
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ran > local/ran"]
      }
%s
    }
  }
}
`, driver, blocks)
}

// escapes lists what a hostile input managed to write: any file named
// escaped* under the state directory or outside, and anything in outside.
func escapes(t *testing.T, roots ...string) []string {
	t.Helper()
	var out []string
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if strings.HasPrefix(d.Name(), "escaped") {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// TestJobFile_HostileInputs: an artifact archive with ../ entries, one
// with a symbolic link pointing out (and a file written through it), an
// absolute entry, a checksum mismatch, templates writing outside the task
// directory (relative, absolute, through a link a sibling task planted in
// the shared alloc directory), a template reading outside, a server
// function, and interpolations of unknown variables and attributes: each
// is refused with an error naming it, the task never runs, and nothing is
// written outside the task directory or its group's alloc directory.
func TestJobFile_HostileInputs(t *testing.T) {
	needRoot(t)
	outside := t.TempDir() // where every escape aims
	up := strings.Repeat("../", 40) + strings.TrimPrefix(outside, "/")
	good := []byte("good content\n")
	sum := sha256.Sum256(good)
	files := map[string][]byte{
		"/dotdot.tar.gz":   tarGz(t, tarEntry{name: "ok.txt", body: "ok"}, tarEntry{name: up + "/escaped-dotdot", body: "x"}),
		"/abs.tar.gz":      tarGz(t, tarEntry{name: outside + "/escaped-abs", body: "x"}),
		"/symlink.tar.gz":  tarGz(t, tarEntry{name: "link", typ: tar.TypeSymlink, link: outside}, tarEntry{name: "link/escaped-through-link", body: "x"}),
		"/relink.tar.gz":   tarGz(t, tarEntry{name: "up", typ: tar.TypeSymlink, link: "../../../../../../../../../../.."}, tarEntry{name: "up" + outside + "/escaped-relink", body: "x"}),
		"/hardlink.tar.gz": tarGz(t, tarEntry{name: "shadow", typ: tar.TypeLink, link: "/etc/shadow"}),
		"/good.txt":        good,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	cases := []struct {
		name, driver, blocks string
		says                 []string
	}{
		{"archive entry with ..", "raw_exec", fmt.Sprintf(`artifact {
  source      = "%s/dotdot.tar.gz"
  destination = "local/unpacked"
}`, srv.URL), []string{srv.URL + "/dotdot.tar.gz", ".."}},
		{"absolute archive entry", "raw_exec", fmt.Sprintf(`artifact { source = "%s/abs.tar.gz" }`, srv.URL),
			[]string{srv.URL + "/abs.tar.gz"}},
		{"symbolic link out of the destination", "raw_exec", fmt.Sprintf(`artifact { source = "%s/symlink.tar.gz" }`, srv.URL),
			[]string{srv.URL + "/symlink.tar.gz", "link"}},
		{"relative link climbing out", "raw_exec", fmt.Sprintf(`artifact { source = "%s/relink.tar.gz" }`, srv.URL),
			[]string{srv.URL + "/relink.tar.gz"}},
		{"hard link to a host file", "raw_exec", fmt.Sprintf(`artifact { source = "%s/hardlink.tar.gz" }`, srv.URL),
			[]string{srv.URL + "/hardlink.tar.gz"}},
		{"checksum mismatch", "raw_exec", fmt.Sprintf(`artifact {
  source = "%s/good.txt"
  options {
    checksum = "sha256:%s"
  }
}`, srv.URL, strings.Repeat("0", 64)), []string{srv.URL + "/good.txt", "checksum", hex.EncodeToString(sum[:])}},
		{"template writing up and out", "raw_exec", fmt.Sprintf(`template {
  data        = "x"
  destination = "%s/escaped-template"
}`, up), []string{"escaped-template", "outside"}},
		{"template writing to an absolute host path", "raw_exec", fmt.Sprintf(`template {
  data        = "x"
  destination = "%s/escaped-abs-template"
}`, outside), []string{"escaped-abs-template", "outside"}},
		{"exec template writing to /etc", "exec", `template {
  data        = "x"
  destination = "/etc/escaped-exec"
}`, []string{"/etc/escaped-exec", "/local, /secrets, /tmp and /alloc"}},
		{"template reading a host file", "raw_exec", `template {
  data        = "{{ file \"/etc/shadow\" }}"
  destination = "local/shadow"
}`, []string{"/etc/shadow", "outside"}},
		{"template source outside", "raw_exec", `template {
  source      = "/etc/shadow"
  destination = "local/shadow"
}`, []string{"/etc/shadow", "outside"}},
		{"server function", "raw_exec", `template {
  data        = "{{ key \"db/password\" }}"
  destination = "local/db"
}`, []string{`"key"`, "Consul"}},
		{"unknown NOMAD variable", "raw_exec", `env {
  X = "${NOMAD_NO_SUCH_THING}"
}`, []string{"NOMAD_NO_SUCH_THING"}},
		{"unknown attribute", "raw_exec", `meta {
  where = "${attr.no.such.attribute}"
}`, []string{"attr.no.such.attribute", "no attribute"}},
		{"unknown input variable", "raw_exec", `env {
  X = "${var.nope}"
}`, []string{"nope"}},
		{"artifact from a local path outside", "raw_exec", `artifact { source = "/etc/passwd" }`,
			[]string{"/etc/passwd", "outside"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobsEnv(t)
			job := writeFile(t, t.TempDir(), "hostile.nomad", hostileJob(tc.driver, tc.blocks))
			r := e.tether("run", job)
			noBareHCL(t, r)
			if r.code == 0 {
				t.Fatalf("a hostile job ran:\n%s", r)
			}
			for _, s := range tc.says {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("the refusal does not say %q:\n%s", s, r.stderr)
				}
			}
			if got := escapes(t, outside, e.dir, "/etc"); len(got) > 0 {
				t.Errorf("written outside: %v", got)
			}
			if ents, _ := os.ReadDir(outside); len(ents) > 0 {
				t.Errorf("%s holds %v", outside, ents)
			}
			for _, st := range e.statusOf() {
				if ran, _ := filepath.Glob(filepath.Join(e.dir, "allocs", st.Alloc, "*", "local", "ran")); len(ran) > 0 {
					t.Errorf("the task ran: %v", ran)
				}
			}
		})
	}
}

// TestJobFile_LinkPlantedBySiblingRefused: a prestart task plants a
// symbolic link to a host directory in the group's shared alloc directory;
// the main task's template written through it, and its artifact placed
// through it, are refused (nothing follows a link below a task's
// directories), the main task never runs, poststop does.
func TestJobFile_LinkPlantedBySiblingRefused(t *testing.T) {
	needRoot(t)
	outside := t.TempDir()
	for _, what := range []string{"template", "artifact"} {
		t.Run(what, func(t *testing.T) {
			e := newJobsEnv(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("x")) }))
			defer srv.Close()
			block := `template {
        data        = "x"
        destination = "../alloc/data/link/escaped-planted"
      }`
			if what == "artifact" {
				block = fmt.Sprintf(`artifact {
        source      = "%s/escaped-planted"
        destination = "../alloc/data/link"
      }`, srv.URL)
			}
			job := writeFile(t, t.TempDir(), "planted.nomad", fmt.Sprintf(`job "planted" {
  type = "batch"
  group "g" {
    task "plant" {
      driver = "raw_exec"
      lifecycle { hook = "prestart" }
      config {
        command = "/bin/ln"
        args    = ["-s", %q, "${NOMAD_ALLOC_DIR}/data/link"]
      }
    }
    task "main" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
      %s
    }
    task "clean" {
      driver = "raw_exec"
      lifecycle { hook = "poststop" }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo cleaned > ${NOMAD_ALLOC_DIR}/data/cleaned"]
      }
    }
  }
}
`, outside, block))
			r := e.tether("run", job)
			if r.code != exitStartFail || !strings.Contains(r.stderr, "symbolic link") {
				t.Errorf("want main's start refused for the link:\n%s", r)
			}
			if got := escapes(t, outside); len(got) > 0 {
				t.Errorf("written through the planted link: %v", got)
			}
			ts := e.statusOf()
			m := byName(ts, "main")
			if len(m) != 1 || m[0].State != "failed" {
				t.Errorf("main: %+v, want failed", m)
			}
			if c := byName(ts, "clean"); len(c) != 1 || c[0].State != "exited" {
				t.Errorf("poststop: %+v, want it run", c)
			} else if _, err := os.Stat(filepath.Join(e.dir, "allocs", c[0].Alloc, "alloc", "data", "cleaned")); err != nil {
				t.Errorf("poststop did not run: %v", err)
			}
		})
	}
}
