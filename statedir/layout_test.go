package statedir_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/statedir"
)

func ExampleLayout() {
	l := statedir.Layout{Dir: "/var/lib/tether"}
	t := l.Task("web-1a2b3c")
	fmt.Println(l.Store())
	fmt.Println(t.Dir())
	fmt.Println(t.File(statedir.ExitStatusFile))
	// Output:
	// /var/lib/tether/tether.db
	// /var/lib/tether/tasks/web-1a2b3c
	// /var/lib/tether/tasks/web-1a2b3c/exit.json
}

// TestLayout_Prepare_CreatesPrivateAndRefusesShared: a missing state
// directory is made 0700 with tasks/ in it; one that others can read is
// refused, named, and left as it was.
func TestLayout_Prepare_CreatesPrivateAndRefusesShared(t *testing.T) {
	l := statedir.Layout{Dir: filepath.Join(t.TempDir(), "a", "state")}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{l.Dir, l.Tasks()} {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v", d, fi.Mode(), err)
		}
	}
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	err := statedir.Layout{Dir: shared}.Prepare()
	if !errors.Is(err, statedir.ErrStateDir) {
		t.Fatalf("Prepare of a 0755 directory = %v, want ErrStateDir", err)
	}
	if fi, _ := os.Stat(shared); fi.Mode().Perm() != 0o755 {
		t.Fatalf("Prepare changed the mode of a directory it refused: %v", fi.Mode())
	}
}

// TestValidateTaskID_RefusesEscapes: no id names a path outside tasks/.
func TestValidateTaskID_RefusesEscapes(t *testing.T) {
	for _, id := range []string{"", ".", "..", "../x", "a/b", ".hidden", "-x", string(make([]byte, 64))} {
		if err := statedir.ValidateTaskID(id); !errors.Is(err, statedir.ErrInvalidTaskID) {
			t.Errorf("ValidateTaskID(%q) = %v, want ErrInvalidTaskID", id, err)
		}
	}
	for _, id := range []string{"a", "web-1a2b3c", "A.b_c-9"} {
		if err := statedir.ValidateTaskID(id); err != nil {
			t.Errorf("ValidateTaskID(%q) = %v", id, err)
		}
	}
}

// TestLayout_NameLock_OneEntryOfNamesPerName: every name, however it is
// spelled (a slash, "..", a long one), has one lock file directly in
// names/, and two names never share one.
func TestLayout_NameLock_OneEntryOfNamesPerName(t *testing.T) {
	l := statedir.Layout{Dir: "/var/lib/tether"}
	seen := map[string]string{}
	for _, name := range []string{"web", "Web", "web ", "../../etc/passwd", "a/b", "..", "", string(make([]byte, 4096)), "日本"} {
		p := l.NameLock(name)
		if filepath.Dir(p) != l.Names() || filepath.Ext(p) != ".lock" {
			t.Errorf("NameLock(%q) = %s: not a .lock file directly in %s", name, p, l.Names())
		}
		if other, dup := seen[p]; dup {
			t.Errorf("NameLock(%q) = NameLock(%q) = %s", name, other, p)
		}
		seen[p] = name
		if again := l.NameLock(name); again != p {
			t.Errorf("NameLock(%q) is %s, then %s", name, p, again)
		}
	}
}

// TestValidateTaskID_LengthBound: 63 characters is the longest id (a DNS
// label's), 64 is refused.
func TestValidateTaskID_LengthBound(t *testing.T) {
	if err := statedir.ValidateTaskID(strings.Repeat("a", 63)); err != nil {
		t.Errorf("an id of 63 characters: %v", err)
	}
	if err := statedir.ValidateTaskID(strings.Repeat("a", 64)); !errors.Is(err, statedir.ErrInvalidTaskID) {
		t.Errorf("an id of 64 characters: %v, want ErrInvalidTaskID", err)
	}
}

// TestLayout_Prepare_RefusesWhatIsNotPrivate: a state directory the group
// can reach (0750, 0770), one another user owns, one whose tasks/ or
// allocs/ is a link or readable by others, is refused with ErrStateDir
// naming it, and left as it was.
func TestLayout_Prepare_RefusesWhatIsNotPrivate(t *testing.T) {
	for _, mode := range []os.FileMode{0o750, 0o770, 0o701} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := (statedir.Layout{Dir: dir}).Prepare(); !errors.Is(err, statedir.ErrStateDir) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Prepare of a %v directory = %v, want ErrStateDir naming it", mode, err)
		}
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != mode {
			t.Errorf("Prepare changed a refused %v directory to %v", mode, fi.Mode().Perm())
		}
	}
	for _, sub := range []string{statedir.TasksDir, statedir.AllocsDir} {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		shared := t.TempDir()
		if err := os.Symlink(shared, filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
		if err := (statedir.Layout{Dir: dir}).Prepare(); !errors.Is(err, statedir.ErrStateDir) || !strings.Contains(err.Error(), sub) {
			t.Errorf("Prepare with %s a link = %v, want ErrStateDir naming it", sub, err)
		}
		if err := os.Remove(filepath.Join(dir, sub)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := (statedir.Layout{Dir: dir}).Prepare(); !errors.Is(err, statedir.ErrStateDir) || !strings.Contains(err.Error(), sub) {
			t.Errorf("Prepare with a 0755 %s = %v, want ErrStateDir naming it", sub, err)
		}
	}
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: making a directory another user owns takes chown")
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := (statedir.Layout{Dir: dir}).Prepare(); !errors.Is(err, statedir.ErrStateDir) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("Prepare of a directory uid 65534 owns = %v, want ErrStateDir naming the owner", err)
		}
	})
}

// TestValidateTaskDirName_RefusesTheAllocationsNames: a task of a group
// may not be named like the allocation's own entries (its shared alloc/
// directory, its lock and its log), nor like an invalid id.
func TestValidateTaskDirName_RefusesTheAllocationsNames(t *testing.T) {
	for _, name := range []string{statedir.SharedDir, statedir.GroupLockFile, statedir.GroupLogFile, "..", "a/b"} {
		if err := statedir.ValidateTaskDirName(name); !errors.Is(err, statedir.ErrInvalidTaskID) {
			t.Errorf("ValidateTaskDirName(%q) = %v, want ErrInvalidTaskID", name, err)
		}
	}
	for _, name := range []string{"web", "allocator", "alloc2"} {
		if err := statedir.ValidateTaskDirName(name); err != nil {
			t.Errorf("ValidateTaskDirName(%q) = %v", name, err)
		}
	}
}
