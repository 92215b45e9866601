package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// testRead is a readFunc over the job path with a node on a state
// directory of the test's.
func testRead(t *testing.T) readFunc {
	t.Helper()
	node := job.Node{StateDir: t.TempDir()}
	return func(file, name string, text []byte, in job.Inputs) Declared {
		src := job.Source{File: file, Text: text}
		d := Declared{Name: name, File: file, Text: text, Inputs: in, Digest: job.Digest(src, in), Source: store.SourceDir}
		j, err := job.Read(src, in, node)
		if err != nil {
			d.Err = err.Error()
			return d
		}
		if d.Name == "" {
			d.Name = j.Name
		}
		d.Shapes = j.Shapes()
		return d
	}
}

func configDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func problemOf(probs []FileProblem, file string) error {
	for _, p := range probs {
		if filepath.Base(p.File) == file {
			return p.Err
		}
	}
	return nil
}

func TestScanConfigDir_ReadsTaskFilesRefusesUnsafeOnes(t *testing.T) {
	dir := configDir(t)
	outside := filepath.Join(t.TempDir(), "outside.hcl")
	writeTaskFile(t, outside, taskHCL("evil", "m", 0, ""))
	writeTaskFile(t, filepath.Join(dir, "web.hcl"), taskHCL("web", "m", 0, "")+taskHCL("worker", "m", 0, ""))
	writeTaskFile(t, filepath.Join(dir, "job.nomad"), "job \"shop\" {\n"+taskHCL("cart", "m", 0, "")+"}\n")
	writeTaskFile(t, filepath.Join(dir, "group.hcl"), taskHCL("group", "m", 0, ""))
	if err := os.Chmod(filepath.Join(dir, "group.hcl"), 0o664); err != nil {
		t.Fatal(err)
	}
	writeTaskFile(t, filepath.Join(dir, "world.hcl"), taskHCL("world", "m", 0, ""))
	if err := os.Chmod(filepath.Join(dir, "world.hcl"), 0o646); err != nil {
		t.Fatal(err)
	}
	writeTaskFile(t, filepath.Join(dir, "nobody.hcl"), taskHCL("nobody", "m", 0, ""))
	if err := os.Chown(filepath.Join(dir, "nobody.hcl"), 65534, 65534); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "escape.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../"+filepath.Base(filepath.Dir(outside))+"/outside.hcl", filepath.Join(dir, "relescape.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("web.hcl", filepath.Join(dir, "alias.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.hcl"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A link into a subdirectory others may write to: refused.
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	writeTaskFile(t, filepath.Join(shared, "x.json"), taskHCL("x", "m", 0, ""))
	if err := os.Symlink("shared/x.json", filepath.Join(dir, "viashared.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.hcl"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeTaskFile(t, filepath.Join(dir, "template.hcl"), taskHCL("tpl", "m", 0, "template {\n source = \"/etc/hostname\"\n destination = \"local/h\"\n}"))
	if err := os.WriteFile(filepath.Join(dir, ".hidden.hcl"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	decl, probs, err := scanConfigDir(dir, testRead(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range decl {
		got = append(got, filepath.Base(d.File)+":"+d.Name)
	}
	if want := "alias.hcl:alias job.nomad:shop web.hcl:web"; strings.Join(got, " ") != want {
		t.Errorf("declared: %s\nwant %s", strings.Join(got, " "), want)
	}
	for file, want := range map[string]string{
		"group.hcl":     "writable by its group or by others (mode 0664)",
		"world.hcl":     "writable by its group or by others (mode 0646)",
		"escape.hcl":    "symbolic link out of",
		"relescape.hcl": "symbolic link out of",
		"sub.hcl":       "not a regular file",
		"viashared.hcl": "its directory " + shared + " is writable by its group or by others (mode 0777)",
		"bad.hcl":       "bad.hcl is not a valid task file",
		"template.hcl":  "--allow-read",
		"nobody.hcl":    "owned by uid 65534, neither root nor the agent's user",
		".hidden.hcl":   "",
		"notes.txt":     "",
		"web.hcl":       "",
		"outside.hcl":   "",
		"alias.hcl":     "",
	} {
		err := problemOf(probs, file)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", file, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v; want it refused: %s", file, err, want)
		case want != "" && file != "bad.hcl" && file != "template.hcl" && !errors.Is(err, ErrConfigDir):
			t.Errorf("%s: %v; want ErrConfigDir", file, err)
		}
	}
}

func TestOpenConfigDir_RefusesASharedDir(t *testing.T) {
	dir := configDir(t)
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenConfigDir(dir); !errors.Is(err, ErrConfigDir) || !strings.Contains(err.Error(), "mode 0775") {
		t.Fatalf("OpenConfigDir of a group-writable dir = %v", err)
	}
	if _, _, err := scanConfigDir(dir, testRead(t)); !errors.Is(err, ErrConfigDir) {
		t.Fatalf("a scan of a dir that became group-writable = %v; want it refused whole", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenConfigDir(dir); !errors.Is(err, ErrConfigDir) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("OpenConfigDir of nobody's dir = %v", err)
		}
		if err := os.Chown(dir, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The dir itself may be a link: its files are resolved in the real one.
	link := filepath.Join(filepath.Dir(dir), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	real, err := OpenConfigDir(link)
	if err != nil || real != dir {
		t.Fatalf("OpenConfigDir(link) = %q, %v; want %q", real, err, dir)
	}
	if _, err := OpenConfigDir(filepath.Join(dir, "missing")); !errors.Is(err, ErrConfigDir) {
		t.Fatalf("a missing config dir = %v", err)
	}
}
