package crashfs_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tether-fsm/tether/internal/crashfs"
)

// A file replaced atomically (temporary file, fsync, rename, fsync of the
// directory) is, in every crash state, absent or one whole version, and
// once its write returned, there. (No Output: it needs FUSE and root.)
func ExampleNew() {
	backing, _ := os.MkdirTemp("", "backing")
	mnt, _ := os.MkdirTemp("", "mnt")
	fsys, err := crashfs.New(backing, mnt, crashfs.Options{})
	if err != nil {
		fmt.Println(err) // errors.Is(err, crashfs.ErrNoFUSE): skip
		return
	}
	tmp := fsys.Path(".id.tmp")
	f, _ := os.Create(tmp)
	f.WriteString(`{"pid":42}`)
	f.Sync()
	f.Close()
	os.Rename(tmp, fsys.Path("id.json"))
	d, _ := os.Open(fsys.Dir())
	d.Sync()
	d.Close()
	written := fsys.Mark("id.json written")
	fsys.Unmount()

	for _, st := range fsys.CrashStates(crashfs.StateOptions{}) {
		dir := filepath.Join(os.TempDir(), "state-"+st.Name)
		if err := st.Materialize(dir); err != nil {
			fmt.Println(err)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "id.json"))
		if st.Before(written) && string(b) != `{"pid":42}` {
			fmt.Printf("%s: id.json lost: %q %v\n", st, b, err)
		}
		os.RemoveAll(dir)
	}
}
