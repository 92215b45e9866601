package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/internal/testproc"
	"github.com/tether-fsm/tether/taskdir"
)

const modeRenderAs = "template-render-as"

func TestMain(m *testing.M) {
	testproc.Dispatch(map[string]func([]string) int{modeRenderAs: renderAs})
	os.Exit(m.Run())
}

// renderAs renders, as whoever runs it, a template into the task
// directory args[0] (alloc directory args[1]); then it tries what a
// non-root renderer must not manage: giving the file to root, and reading
// a file it has no permission to. Exit 0: all as expected.
func renderAs(args []string) int {
	r := &Renderer{Layout: taskdir.Layout{TaskDir: args[0], AllocDir: args[1]}, Env: map[string]string{"WHO": "task"}, Owner: taskdir.Keep}
	ctx := context.Background()
	if _, err := r.Render(ctx, Template{Data: `{{ env "WHO" }}`, Destination: "local/out", Perms: 0o600}); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		return 1
	}
	root := 0
	if _, err := r.Render(ctx, Template{Data: "x", Destination: "local/root-owned", UID: &root, GID: &root}); !errors.Is(err, ErrWrite) || !errors.Is(err, syscall.EPERM) {
		fmt.Fprintln(os.Stderr, "chown to root by a non-root renderer:", err)
		return 2
	}
	if _, err := r.Render(ctx, Template{Source: "local/root-only", Destination: "local/copy"}); !errors.Is(err, ErrRead) || !errors.Is(err, syscall.EACCES) {
		fmt.Fprintln(os.Stderr, "reading a root-only file:", err)
		return 3
	}
	return 0
}

// TestRender_NonRoot runs the renderer as nobody, as the executor renders
// a non-root task's templates: it writes into a task directory that user
// owns, and fails with a clear error where the user has no right.
func TestRender_NonRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to nobody needs root")
	}
	base := t.TempDir()
	for p := base; p != filepath.Dir(os.TempDir()) && p != "/"; p = filepath.Dir(p) {
		if strings.HasPrefix(p, os.TempDir()+"/") {
			os.Chmod(p, 0o755) // t.TempDir's directories are 0700: nobody must reach the binary
		}
	}
	bin := filepath.Join(base, "template.test")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := os.Open(self)
	out, _ := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	io.Copy(out, in)
	in.Close()
	out.Close()
	taskDir, allocDir := filepath.Join(base, "a1", "web"), filepath.Join(base, "a1", "alloc")
	for _, d := range []string{filepath.Join(taskDir, "local"), allocDir} {
		os.MkdirAll(d, 0o755)
	}
	for _, d := range []string{taskDir, filepath.Join(taskDir, "local"), allocDir} {
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(taskDir, "local", "root-only"), []byte("secret"), 0o600)
	cmd := exec.Command(bin, modeRenderAs, taskDir, allocDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the renderer as nobody: %v\n%s", err, b)
	}
	fi, err := os.Stat(filepath.Join(taskDir, "local", "out"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 65534 || fi.Mode().Perm() != 0o600 {
		t.Errorf("rendered as nobody: owner %d mode %v", st.Uid, fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(taskDir, "local", "out")); string(b) != "task" {
		t.Errorf("rendered %q", b)
	}
}
