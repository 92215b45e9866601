//go:build linux

package executor

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// allocOf lays out an allocation of two tasks below a fresh directory as a
// state directory does (allocs/ALLOC/alloc and allocs/ALLOC/TASK), and
// returns the alloc for task name.
func allocOf(t *testing.T, name string) *fsm.Alloc {
	t.Helper()
	root := filepath.Join(t.TempDir(), "allocs", "a1")
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		t.Fatal(err)
	}
	return &fsm.Alloc{ID: "a1", Dir: filepath.Join(root, "alloc"), TaskDir: filepath.Join(root, name), Tasks: []string{name, "other"}}
}

// shellTask is a raw_exec (or exec) task running script with /bin/sh.
func shellTask(m marker, driver, script string) wire.Launch {
	return wire.Launch{Spec: fsm.Spec{Driver: driver, Command: "/bin/sh", Args: []string{"-c", script},
		Env: map[string]string{"TETHER_TEST_MARKER": string(m)}}}
}

// runToEnd launches l on a fresh executor, waits for its end and returns
// its exit status and stdout.
func runToEnd(t *testing.T, m marker, l wire.Launch) (fsm.ExitStatus, string) {
	t.Helper()
	ctx := testCtx(t)
	c := spawn(t, m, "")
	if _, err := c.Launch(ctx, l); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	st, err := c.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st, readFileString(t, filepath.Join(filepath.Dir(c.Identity().Socket), statedir.StdoutFile))
}

// TestLaunch_NomadLayout_RawExec: a task with an alloc starts in its task
// directory (Nomad's), reaches its group's alloc directory as ../alloc,
// and finds data/, logs/ and tmp/ made there, writable by another user.
func TestLaunch_NomadLayout_RawExec(t *testing.T) {
	m := newMarker(t)
	a := allocOf(t, "web")
	l := shellTask(m, wire.ModeRawExec, `pwd; echo shared > ../alloc/data/f && cat local/../../alloc/data/f; echo $NOMAD_ALLOC_DIR $TETHER_TASK_DIR`)
	l.Alloc = a
	st, out := runToEnd(t, m, l)
	if st.Code != 0 {
		t.Fatalf("exit %+v, stdout %q", st, out)
	}
	want := fmt.Sprintf("%s\nshared\n%s %s\n", a.TaskDir, a.Dir, filepath.Join(a.TaskDir, "local"))
	if out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if got := readFileString(t, filepath.Join(a.Dir, "data", "f")); got != "shared\n" {
		t.Errorf("alloc/data/f holds %q", got)
	}
	for name, mode := range map[string]os.FileMode{"data": 0o777, "logs": 0o777, "tmp": 0o777 | os.ModeSticky} {
		fi, err := os.Lstat(filepath.Join(a.Dir, name))
		if err != nil || !fi.IsDir() || fi.Mode()&(os.ModePerm|os.ModeSticky) != mode {
			t.Errorf("alloc/%s: %v %v, want a directory of mode %v", name, fi.Mode(), err, mode)
		}
	}
	for _, name := range []string{"local", "secrets", "tmp"} {
		if fi, err := os.Lstat(filepath.Join(a.TaskDir, name)); err != nil || !fi.IsDir() {
			t.Errorf("task dir's %s: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(a.TaskDir, "alloc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the task directory has an alloc/ of its own (%v): the group's is its sibling", err)
	}
}

// TestLaunch_NomadLayout_Exec: an exec task with an alloc starts in "/" of
// its root, where /local is its task directory's and /alloc its group's
// alloc directory, and its work_dir is relative to "/".
func TestLaunch_NomadLayout_Exec(t *testing.T) {
	needIsolation(t)
	m := newMarker(t)
	a := allocOf(t, "web")
	l := shellTask(m, wire.ModeExec, `pwd; echo from-exec > /alloc/data/g; ls local; echo $NOMAD_TASK_DIR $HOME`)
	l.Alloc = a
	l.Chroot = testChroot(t)
	if err := os.MkdirAll(filepath.Join(a.TaskDir, "local", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.Env["NOMAD_TASK_DIR"] = "/local"
	st, out := runToEnd(t, m, l)
	if st.Code != 0 || out != "/\nsub\n/local /local\n" {
		t.Fatalf("exit %+v, stdout %q, want / then sub then /local /local", st, out)
	}
	if got := readFileString(t, filepath.Join(a.Dir, "data", "g")); got != "from-exec\n" {
		t.Errorf("/alloc/data/g on the host holds %q", got)
	}
	l.Dir = "local/sub"
	l.Args = []string{"-c", "pwd"}
	if st, out := runToEnd(t, m, l); st.Code != 0 || out != "/local/sub\n" {
		t.Errorf("work_dir local/sub: exit %+v, stdout %q, want /local/sub", st, out)
	}
}

// artifactServer serves, on 127.0.0.1, a tar.gz holding app/run.sh and
// conf/value, and blocks /slow until the test ends.
type artifactServer struct {
	url, sum string
	hits     chan string
}

func newArtifactServer(t *testing.T) *artifactServer {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range map[string]string{"app/run.sh": "#!/bin/sh\ncat local/app/conf.txt\necho \"secret=$SECRET\"\n", "conf/value": "from-artifact"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	sum := sha256.Sum256(buf.Bytes())
	release := make(chan struct{})
	s := &artifactServer{sum: hex.EncodeToString(sum[:]), hits: make(chan string, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.hits <- r.URL.Path:
		default:
		}
		switch r.URL.Path {
		case "/app.tar.gz":
			w.Write(buf.Bytes())
		case "/slow":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select { // until the client gives up or the test ends
			case <-r.Context().Done():
			case <-release:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	s.url = srv.URL
	return s
}

// TestLaunch_PreparesArtifactsThenTemplates: before the first launch the
// executor fetches the artifact (checksum verified, archive unpacked) and
// then renders the templates (one reads what the artifact placed, as
// Nomad's order allows; an env = true one sets the task's environment).
func TestLaunch_PreparesArtifactsThenTemplates(t *testing.T) {
	m := newMarker(t)
	srv := newArtifactServer(t)
	a := allocOf(t, "web")
	l := shellTask(m, wire.ModeRawExec, "local/app/app/run.sh")
	l.Alloc = a
	l.Env["NOMAD_ALLOC_DIR"] = a.Dir
	l.Env["SECRET"] = "the-job-files" // an env = true template's variable wins over the env block (Nomad's order)
	l.Artifacts = []fsm.Artifact{{Source: srv.url + "/app.tar.gz", Destination: "local/app", Options: map[string]string{"checksum": "sha256:" + srv.sum}}}
	l.Templates = []fsm.Template{
		{Data: `value={{ file "local/app/conf/value" }} alloc={{ env "NOMAD_ALLOC_DIR" }}
`, Destination: "local/app/conf.txt"},
		{Data: "SECRET=s3cr3t\n", Destination: "secrets/env", Env: true},
	}
	st, out := runToEnd(t, m, l)
	want := fmt.Sprintf("value=from-artifact alloc=%s\nsecret=s3cr3t\n", a.Dir)
	if st.Code != 0 || out != want {
		t.Fatalf("exit %+v, stdout %q, want %q", st, out, want)
	}
	fi, err := os.Stat(filepath.Join(a.TaskDir, "local", "app", "conf.txt"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("rendered template: %v %v, want mode 0644", fi, err)
	}
}

// TestLaunch_PreparationFailures: an artifact or template that cannot be
// prepared fails the launch with ErrArtifact or ErrTemplate naming it, and
// nothing of the task is started.
func TestLaunch_PreparationFailures(t *testing.T) {
	srv := newArtifactServer(t)
	cases := []struct {
		name string
		mod  func(*wire.Launch)
		want error
		says []string
	}{
		{"not found", func(l *wire.Launch) { l.Artifacts = []fsm.Artifact{{Source: srv.url + "/nothing.bin"}} },
			wire.ErrArtifact, []string{srv.url + "/nothing.bin", "404"}},
		{"checksum mismatch", func(l *wire.Launch) {
			l.Artifacts = []fsm.Artifact{{Source: srv.url + "/app.tar.gz", Options: map[string]string{"checksum": "sha256:" + strings.Repeat("0", 64)}}}
		}, wire.ErrArtifact, []string{srv.url + "/app.tar.gz", "checksum"}},
		{"unreachable", func(l *wire.Launch) { l.Artifacts = []fsm.Artifact{{Source: "http://127.0.0.1:1/x"}} },
			wire.ErrArtifact, []string{"http://127.0.0.1:1/x", "cannot reach"}},
		{"server function", func(l *wire.Launch) {
			l.Templates = []fsm.Template{{Data: `{{ key "db/url" }}`, Destination: "local/x"}}
		},
			wire.ErrTemplate, []string{"local/x", `"key"`, "Consul"}},
		{"writes outside", func(l *wire.Launch) {
			l.Templates = []fsm.Template{{Data: "x", Destination: "../../../../etc/tether-escape"}}
		},
			wire.ErrTemplate, []string{"etc/tether-escape", "outside"}},
		{"reads outside", func(l *wire.Launch) {
			l.Templates = []fsm.Template{{Data: `{{ file "/etc/hostname" }}`, Destination: "local/x"}}
		},
			wire.ErrTemplate, []string{"/etc/hostname", "outside"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMarker(t)
			ctx := testCtx(t)
			c := spawn(t, m, "")
			l := shellTask(m, wire.ModeRawExec, "echo ran > ran")
			l.Alloc = allocOf(t, "web")
			tc.mod(&l)
			_, err := c.Launch(ctx, l)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Launch: %v, want %v", err, tc.want)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q: %v", s, err)
				}
			}
			if st, err := c.Status(ctx); err != nil || st.Launched {
				t.Errorf("status after a failed preparation: %+v %v, want not launched", st, err)
			}
			if _, err := os.Stat(filepath.Join(l.Alloc.TaskDir, "ran")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the task ran: %v", err)
			}
			if _, err := os.Stat("/etc/tether-escape"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("something was written outside: %v", err)
			}
		})
	}
}

// TestLaunch_PreparationCancelledByShutdown: a shutdown while an artifact
// downloads ends the executor at once (the download is cancelled, the
// launch answered with an error); nothing is started.
func TestLaunch_PreparationCancelledByShutdown(t *testing.T) {
	m := newMarker(t)
	srv := newArtifactServer(t)
	ctx := testCtx(t)
	c := spawn(t, m, "")
	l := shellTask(m, wire.ModeRawExec, "echo ran > ran")
	l.Alloc = allocOf(t, "web")
	l.Artifacts = []fsm.Artifact{{Source: srv.url + "/slow", Destination: "local/slow", Mode: fsm.ArtifactFile}}
	launched := make(chan error, 1)
	go func() {
		_, err := c.Launch(ctx, l)
		launched <- err
	}()
	for p := range srv.hits { // the download has begun
		if p == "/slow" {
			break
		}
	}
	sctx := testCtx(t)
	if err := c.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-launched; err == nil {
		t.Fatal("the launch succeeded after a shutdown during its preparation")
	}
	if err := c.WaitDead(sctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Alloc.TaskDir, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the task ran: %v", err)
	}
}

// TestTemplate_ChangeModes: once the task runs, a change of a template's
// source re-renders it; change_mode signal sends the task its signal, and
// change_mode restart restarts it through the restart journal (a restart
// intent naming the template, then the relaunch), outside its policy.
func TestTemplate_ChangeModes(t *testing.T) {
	for _, mode := range []fsm.ChangeMode{fsm.ChangeSignal, fsm.ChangeRestart} {
		t.Run(mode.String(), func(t *testing.T) {
			m := newMarker(t)
			ctx := testCtx(t)
			c := spawn(t, m, "")
			a := allocOf(t, "web")
			src := filepath.Join(a.TaskDir, "local", "conf.tpl")
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(src, []byte("v1"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, readyF := execFifo(t, a.TaskDir, "ready")
			l := m.taskSpec(t, "serve", "-ready", filepath.Join(a.TaskDir, "local", "ready"), "-on-usr1", "42", "-on-term", "0")
			l.Alloc = a
			l.Templates = []fsm.Template{{Source: "local/conf.tpl", Destination: "local/conf", ChangeMode: mode, ChangeSignal: int(syscall.SIGUSR1)}}
			if _, err := c.Launch(ctx, l); err != nil {
				t.Fatalf("Launch: %v", err)
			}
			if line := readLine(t, readyF); !strings.HasPrefix(line, "ready ") {
				t.Fatalf("ready: %q", line)
			}
			if err := os.WriteFile(src, []byte("v2"), 0o644); err != nil {
				t.Fatal(err)
			}
			switch mode {
			case fsm.ChangeSignal:
				st, err := c.Wait(ctx)
				if err != nil || st.Code != 42 {
					t.Fatalf("after the change: %+v %v, want the task's exit 42 on SIGUSR1", st, err)
				}
			case fsm.ChangeRestart:
				if line := readLine(t, readyF); !strings.HasPrefix(line, "ready ") {
					t.Fatalf("no relaunch after the change: %q", line)
				}
				st, entries, err := c.Watch(ctx, 0)
				if err != nil || len(entries) < 2 || entries[0].Type != fsm.EventRestartIntent || entries[1].Type != fsm.EventLaunched ||
					entries[0].Attempt != 1 || !strings.Contains(entries[0].Reason, "local/conf.tpl") {
					t.Fatalf("journal %+v (%+v, %v): want a restart intent naming the template, then launched", entries, st, err)
				}
				if st.Exited {
					t.Errorf("the task is not running after its restart: %+v", st)
				}
			}
			if got := readFileString(t, filepath.Join(a.TaskDir, "local", "conf")); got != "v2" {
				t.Errorf("rendered %q after the change", got)
			}
		})
	}
}

// TestLaunch_WithoutPreparerRefused: an executor served without a
// Preparer (the standalone binary) refuses a launch that has artifacts or
// templates, saying what to use; nothing is prepared or started.
func TestLaunch_WithoutPreparerRefused(t *testing.T) {
	m := newMarker(t)
	ctx := testCtx(t)
	dir := filepath.Join(t.TempDir(), "task")
	c, err := Spawn(ctx, SpawnConfig{Command: []string{testBinary(t), "executor-lean", m.arg()}, TaskDir: dir, Nonce: randHex(t, 12)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Shutdown(ctx)
		c.Close()
		waitDead(t, c.Identity())
	}()
	l := shellTask(m, wire.ModeRawExec, "echo ran > ran")
	l.Alloc = allocOf(t, "web")
	l.Templates = []fsm.Template{{Data: "x", Destination: "local/x"}}
	_, err = c.Launch(ctx, l)
	if !errors.Is(err, wire.ErrLaunch) || !strings.Contains(err.Error(), "cannot prepare") {
		t.Fatalf("Launch: %v, want the refusal naming why", err)
	}
	if _, err := os.Stat(filepath.Join(l.Alloc.TaskDir, "local", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("something was prepared: %v", err)
	}
}

// TestLaunch_PreparedForTheTasksUser: a task run as a user has its
// templates rendered as that user's files, and a template's source in its
// directory read for that user: a hard link it planted to a root-only file
// is refused (ErrTemplate naming the links), never rendered.
func TestLaunch_PreparedForTheTasksUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a task run as another user (nobody)")
	}
	m := newMarker(t)
	ctx := testCtx(t)
	// Its alloc is below a private (0700) directory, as in a state
	// directory: the task starts in its task directory all the same.
	l := shellTask(m, wire.ModeRawExec, "id -u > local/whoami")
	l.User = "nobody"
	l.Alloc = allocOf(t, "web")
	l.Templates = []fsm.Template{{Data: "x\n", Destination: "local/out"}}
	c := spawn(t, m, "")
	if _, err := c.Launch(ctx, l); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if st, err := c.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	fi, err := os.Stat(filepath.Join(l.Alloc.TaskDir, "local", "out"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 {
		t.Errorf("the template of a task run as nobody belongs to uid %d, want 65534", st.Uid)
	}
	if got := readFileString(t, filepath.Join(l.Alloc.TaskDir, "local", "whoami")); got != "65534\n" {
		t.Errorf("the task wrote %q in local/, want 65534", got)
	}

	l = shellTask(m, wire.ModeRawExec, "true")
	l.User = "nobody"
	l.Alloc = allocOf(t, "web")
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(l.Alloc.TaskDir, "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(l.Alloc.TaskDir, "local", "linked")); err != nil {
		t.Skipf("hard links across these directories: %v", err)
	}
	l.Templates = []fsm.Template{{Source: "local/linked", Destination: "local/leak"}}
	c = spawn(t, m, "")
	if _, err := c.Launch(ctx, l); !errors.Is(err, wire.ErrTemplate) || !strings.Contains(err.Error(), "hard links") {
		t.Fatalf("Launch with a template whose source is a planted hard link: %v, want ErrTemplate naming the hard links", err)
	}
	if _, err := os.Stat(filepath.Join(l.Alloc.TaskDir, "local", "leak")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the linked secret was rendered: %v", err)
	}
}
