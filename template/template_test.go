package template

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-fsm/tether/taskdir"
)

// newTask lays out a task directory and its alloc directory inside a
// parent that also holds "outside", which nothing may touch.
func newTask(t *testing.T, chroot bool) (*Renderer, string) {
	t.Helper()
	parent := t.TempDir()
	l := taskdir.Layout{TaskDir: filepath.Join(parent, "a1", "web"), AllocDir: filepath.Join(parent, "a1", "alloc"), Chroot: chroot}
	for _, d := range []string{filepath.Join(l.TaskDir, "local"), filepath.Join(l.TaskDir, "secrets"), l.AllocDir, filepath.Join(parent, "outside")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Renderer{Layout: l, Env: map[string]string{"NOMAD_PORT_http": "8080", "GREETING": "hello"}, Owner: taskdir.Keep}, parent
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRender_FunctionsAndEnv(t *testing.T) {
	r, _ := newTask(t, false)
	t.Setenv("TETHER_RENDERER_ONLY", "leak")
	os.WriteFile(filepath.Join(r.Layout.TaskDir, "local", "in.json"), []byte(`{"a":[1,2],"b":"x"}`), 0o644)
	tm := Template{Destination: "local/out.conf", Perms: 0o600, Data: `port={{ env "NOMAD_PORT_http" }}
leak=[{{ env "TETHER_RENDERER_ONLY" }}]
def={{ envOrDefault "NOPE" "d" }}
{{ with $j := file "local/in.json" | parseJSON }}b={{ $j.b }} n={{ len $j.a }}{{ end }}
up={{ "abc" | toUpper }} split={{ "a,b,c" | split "," | join ";" }} b64={{ "hi" | base64Encode }}/{{ "aGk=" | base64Decode }}
sum={{ 2 | add 3 }} json={{ toJSON (parseJSON "[1]") }} repl={{ "a-b" | replaceAll "-" "+" }} t={{ trimSpace "  x " }}
in={{ if "a,b" | split "," | contains "b" }}yes{{ end }} loop={{ range loop 3 }}{{ . }}{{ end }} bool={{ parseBool "true" }}
`}
	res, err := r.Render(context.Background(), tm)
	if err != nil {
		t.Fatal(err)
	}
	want := `port=8080
leak=[]
def=d
b=x n=2
up=ABC split=a;b;c b64=aGk=/hi
sum=5 json=[1] repl=a+b t=x
in=yes loop=012 bool=true
`
	if got := read(t, res.Path); got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if fi, _ := os.Stat(res.Path); fi.Mode().Perm() != 0o600 || !res.Changed {
		t.Errorf("mode %v changed %v", fi.Mode(), res.Changed)
	}
	if len(res.Deps) != 1 || res.Deps[0] != filepath.Join(r.Layout.TaskDir, "local", "in.json") {
		t.Errorf("deps %v", res.Deps)
	}
	if res, err = r.Render(context.Background(), tm); err != nil || res.Changed {
		t.Errorf("a second render of the same output: changed %v, %v", res.Changed, err)
	}
}

func TestRender_DelimitersEnvFileAndSource(t *testing.T) {
	r, _ := newTask(t, true) // exec: destinations as the task sees them
	os.WriteFile(filepath.Join(r.Layout.TaskDir, "local", "app.tpl"), []byte(`A=<< env "GREETING" >>{{ not a template }}`), 0o644)
	res, err := r.Render(context.Background(), Template{Source: "local/app.tpl", Destination: "/secrets/app.env", LeftDelim: "<<", RightDelim: ">>", Env: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != filepath.Join(r.Layout.TaskDir, "secrets", "app.env") || res.Env["A"] != "hello{{ not a template }}" {
		t.Errorf("path %s env %v", res.Path, res.Env)
	}
	env, err := ParseEnvFile([]byte("# c\nexport X=1\nY=\"a\\nb\"\nZ='q r'\n\n"))
	if err != nil || env["X"] != "1" || env["Y"] != "a\nb" || env["Z"] != "q r" {
		t.Errorf("env %v %v", env, err)
	}
	if _, err := ParseEnvFile([]byte("A=1\nB=\"x\\x00y\"\n")); !errors.Is(err, ErrEnvFile) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("a value with a NUL byte: %v; want ErrEnvFile naming line 2 and the NUL", err)
	}
	if _, err := ParseEnvFile([]byte("not a pair\n")); !errors.Is(err, ErrEnvFile) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad env file: %v", err)
	}
}

// TestRender_ServerFunctionsNamed: a template that needs Consul, Vault or
// Nomad is refused before anything is written, naming the function, even
// in a branch that would not run.
func TestRender_ServerFunctionsNamed(t *testing.T) {
	r, _ := newTask(t, false)
	for fn, needs := range map[string]string{
		`{{ key "app/port" }}`:                          `"key" needs Consul's KV store`,
		`{{ keyOrDefault "a" "b" }}`:                    `"keyOrDefault" needs Consul's KV store`,
		`{{ range ls "x" }}{{ end }}`:                   `"ls" needs`,
		`{{ range tree "x" }}{{ end }}`:                 `"tree" needs`,
		`{{ with secret "kv/x" }}{{ .Data }}{{ end }}`:  `"secret" needs Vault`,
		`{{ range secrets "kv/" }}{{ end }}`:            `"secrets" needs Vault`,
		`{{ range service "db" }}{{ .Address }}{{end}}`: `"service" needs Consul's catalog`,
		`{{ range services }}{{ end }}`:                 `"services" needs`,
		`{{ if false }}{{ nomadVar "x" }}{{ end }}`:     `"nomadVar" needs Nomad's variables API`,
		`{{ nomadVarList }}`:                            `"nomadVarList" needs`,
		`{{ range nomadService "x" }}{{ end }}`:         `"nomadService" needs Nomad's service discovery`,
		// Refused where they would never run too: an else branch, a
		// template defined and never called.
		`{{ if true }}a{{ else }}{{ key "app/port" }}{{ end }}`:       `"key" needs Consul's KV store`,
		`{{ with "v" }}{{ . }}{{ else }}{{ secret "kv/x" }}{{ end }}`: `"secret" needs Vault`,
		`{{ define "never" }}{{ service "db" }}{{ end }}ok`:           `"service" needs Consul's catalog`,
	} {
		_, err := r.Render(context.Background(), Template{Data: fn, Destination: "local/x"})
		if !errors.Is(err, ErrServerFunction) || !strings.Contains(err.Error(), needs) {
			t.Errorf("%s: %v; want %q", fn, err, needs)
		}
	}
	for fn, why := range map[string]string{`{{ plugin "rm" }}`: "host command", `{{ sockaddr "GetPrivateIP" }}`: "go-sockaddr", `{{ "x" | writeToFile "/etc/x" "" "" "" }}`: "writes files"} {
		if _, err := r.Render(context.Background(), Template{Data: fn, Destination: "local/x"}); !errors.Is(err, ErrUnsupportedFunction) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v", fn, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.Layout.TaskDir, "local", "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused template wrote its destination: %v", err)
	}
}

// TestRender_Hostile: destinations and reads outside the task and alloc
// directories are refused, through a path or a planted link, and nothing
// outside is written.
func TestRender_Hostile(t *testing.T) {
	r, parent := newTask(t, false)
	outside := filepath.Join(parent, "outside")
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600)
	local := filepath.Join(r.Layout.TaskDir, "local")
	if err := os.Symlink(outside, filepath.Join(local, "planted")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(local, "target")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tm   Template
		want error
	}{
		{"dotdot destination", Template{Data: "x", Destination: "../../etc/x"}, ErrWrite},
		{"far dotdot destination", Template{Data: "x", Destination: "local/../../../outside/x"}, ErrWrite},
		{"absolute destination", Template{Data: "x", Destination: filepath.Join(outside, "x")}, ErrWrite},
		{"through a planted link", Template{Data: "x", Destination: "local/planted/x"}, ErrWrite},
		{"source outside", Template{Source: filepath.Join(outside, "secret"), Destination: "local/x"}, ErrRead},
		{"source through a link", Template{Source: "local/target", Destination: "local/x"}, ErrRead},
		{"file outside", Template{Data: `{{ file "` + filepath.Join(outside, "secret") + `" }}`, Destination: "local/x"}, ErrRead},
		{"file through a planted dir link", Template{Data: `{{ file "local/planted/secret" }}`, Destination: "local/x"}, ErrRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Render(context.Background(), tc.tm); !errors.Is(err, tc.want) {
				t.Fatalf("Render = %v, want %v", err, tc.want)
			}
		})
	}
	// A link at the destination itself is replaced, never followed.
	if _, err := r.Render(context.Background(), Template{Data: "mine", Destination: "local/target"}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(outside, "secret")); got != "secret" {
		t.Errorf("the file outside was written through a link: %q", got)
	}
	if fi, _ := os.Lstat(filepath.Join(local, "target")); fi.Mode()&fs.ModeSymlink != 0 {
		t.Errorf("the link was followed, not replaced")
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Errorf("outside holds %v", ents)
	}
	// An allowed directory may be read.
	r.AllowRead = []string{outside}
	if _, err := r.Render(context.Background(), Template{Source: filepath.Join(outside, "secret"), Destination: "local/copy"}); err != nil {
		t.Errorf("an allowed source: %v", err)
	}
}

// TestRender_HardLinkNotRead: a renderer acting for a task (Owner set)
// does not read a file the task hard-linked into its directory unless the
// task owns it.
func TestRender_HardLinkNotRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a renderer acting for another user needs root")
	}
	r, parent := newTask(t, false)
	secret := filepath.Join(parent, "outside", "shadow")
	os.WriteFile(secret, []byte("secret"), 0o600)
	if err := os.Link(secret, filepath.Join(r.Layout.TaskDir, "local", "linked")); err != nil {
		t.Skipf("hard links here: %v", err)
	}
	r.Owner = taskdir.Owner{UID: 65534, GID: 65534}
	_, err := r.Render(context.Background(), Template{Data: `{{ file "local/linked" }}`, Destination: "local/out"})
	if !errors.Is(err, ErrRead) || !strings.Contains(err.Error(), "hard links") {
		t.Fatalf("Render = %v; want the hard link refused", err)
	}
	if _, err := os.Stat(filepath.Join(r.Layout.TaskDir, "local", "out")); err == nil {
		t.Errorf("the secret was rendered")
	}
}

func TestRender_OwnerAndPerms(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	r, _ := newTask(t, false)
	uid, gid := 65534, 65534
	res, err := r.Render(context.Background(), Template{Data: "x", Destination: "local/owned", Perms: 0o640, UID: &uid, GID: &gid})
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(res.Path)
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 65534 || st.Gid != 65534 || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %v", st.Uid, st.Gid, fi.Mode())
	}
}

// TestWatcher_SourceChange: a change to a source re-renders the template
// and reports its change mode; a change that leaves the output as it was
// reports nothing.
func TestWatcher_SourceChange(t *testing.T) {
	r, _ := newTask(t, false)
	src := filepath.Join(r.Layout.TaskDir, "local", "app.tpl")
	os.WriteFile(src, []byte("v1"), 0o644)
	dep := filepath.Join(r.Layout.AllocDir, "value")
	os.WriteFile(dep, []byte("a"), 0o644)
	ts := []Template{
		{Source: "local/app.tpl", Destination: "local/app.conf", ChangeMode: ChangeSignal, ChangeSignal: int(syscall.SIGHUP)},
		{Data: `{{ file "../alloc/value" }}`, Destination: "local/value", ChangeMode: ChangeRestart},
		{Data: "static", Destination: "local/static", ChangeMode: ChangeNoop},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results, _, err := r.RenderAll(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(r, ts, results)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	next := func() Change {
		t.Helper()
		select {
		case c := <-w.Changes():
			return c
		case <-time.After(30 * time.Second): // a guard against a hang, not a timing
			t.Fatal("no change reported")
		}
		return Change{}
	}
	// Replace the source atomically, as an editor or a deploy does.
	tmp := src + ".new"
	os.WriteFile(tmp, []byte("v2"), 0o644)
	os.Rename(tmp, src)
	c := next()
	if c.Index != 0 || c.Mode != ChangeSignal || c.Signal != syscall.SIGHUP || c.Err != nil || read(t, c.Result.Path) != "v2" {
		t.Errorf("change %+v", c)
	}
	// A write in place may be seen truncated first (an empty render), then
	// written: the last change holds the new value.
	os.WriteFile(dep, []byte("b"), 0o644)
	for i := 0; ; i++ {
		c = next()
		if c.Index != 1 || c.Mode != ChangeRestart || c.Err != nil {
			t.Fatalf("change %+v", c)
		}
		if read(t, c.Result.Path) == "b" {
			break
		}
		if i == 3 {
			t.Fatalf("no change carried the new value")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	if _, ok := <-w.Changes(); ok {
		t.Errorf("Changes is not closed after Run")
	}
}

func TestTemplate_Check(t *testing.T) {
	for _, tm := range []Template{
		{Destination: "x"},
		{Data: "a", Source: "b", Destination: "x"},
		{Data: "a"},
		{Data: "a", Destination: "x", ChangeMode: ChangeSignal},
	} {
		if err := Check(tm); !errors.Is(err, ErrBadTemplate) {
			t.Errorf("%+v: %v", tm, err)
		}
	}
	if _, err := ParseChangeMode("sometimes"); !errors.Is(err, ErrBadTemplate) {
		t.Errorf("ParseChangeMode: %v", err)
	}
}

// TestRender_OutputLimit: an output of exactly MaxBytes is written; one a
// byte longer is refused, in one piece or in several, and nothing is
// written for it.
func TestRender_OutputLimit(t *testing.T) {
	r, _ := newTask(t, false)
	r.MaxBytes = 16
	ctx := context.Background()
	if _, err := r.Render(ctx, Template{Data: strings.Repeat("x", 16), Destination: "local/exact"}); err != nil {
		t.Fatalf("an output of exactly MaxBytes: %v", err)
	}
	if got := read(t, filepath.Join(r.Layout.TaskDir, "local", "exact")); len(got) != 16 {
		t.Errorf("local/exact holds %d bytes, want 16", len(got))
	}
	for name, data := range map[string]string{
		"one piece": strings.Repeat("x", 17),
		"several":   strings.Repeat("x", 10) + `{{ "yyyyyyy" }}`,
	} {
		_, err := r.Render(ctx, Template{Data: data, Destination: "local/over"})
		if !errors.Is(err, ErrBadTemplate) || !strings.Contains(err.Error(), "larger than 16 bytes") {
			t.Errorf("%s: an output of 17 bytes with MaxBytes 16: %v; want ErrBadTemplate saying larger than 16 bytes", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.Layout.TaskDir, "local", "over")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an output over the limit was written: %v", err)
	}
}

// TestRender_DefaultPermsAndRerenderRestores: a template without perms is
// written 0644 (Nomad's default); a re-render with the same text rewrites
// a file whose mode (or, for root, owner) was changed since, and leaves
// one as it was written unchanged.
func TestRender_DefaultPermsAndRerenderRestores(t *testing.T) {
	r, _ := newTask(t, false)
	ctx := context.Background()
	tm := Template{Data: "v=1\n", Destination: "local/app.conf"}
	res, err := r.Render(ctx, tm)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(res.Path); err != nil || fi.Mode().Perm() != DefaultPerms || DefaultPerms != 0o644 {
		t.Fatalf("a template without perms is %v (%v), want 0644", fi.Mode().Perm(), err)
	}
	if res, err := r.Render(ctx, tm); err != nil || res.Changed {
		t.Errorf("a re-render of the same text: changed %v, %v; want unchanged", res.Changed, err)
	}
	if err := os.Chmod(res.Path, 0o666); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Render(ctx, tm); err != nil || !res.Changed {
		t.Errorf("a re-render after a chmod: changed %v, %v; want rewritten", res.Changed, err)
	}
	if fi, _ := os.Stat(res.Path); fi.Mode().Perm() != 0o644 {
		t.Errorf("after the re-render the mode is %v, want 0644", fi.Mode().Perm())
	}
	if os.Geteuid() != 0 {
		t.Skip("the owner half needs root: chown to another user")
	}
	if err := os.Chown(res.Path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Render(ctx, tm); err != nil || !res.Changed {
		t.Errorf("a re-render after a chown: changed %v, %v; want rewritten", res.Changed, err)
	}
	fi, _ := os.Stat(res.Path)
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
		t.Errorf("after the re-render the file belongs to uid %d, want %d", st.Uid, os.Geteuid())
	}
}

// TestWatcher_RenderFailureReported: a source replaced by one that does
// not render is reported as a change with its error (the caller logs it),
// and the output rendered before stays as it was.
func TestWatcher_RenderFailureReported(t *testing.T) {
	r, _ := newTask(t, false)
	src := filepath.Join(r.Layout.TaskDir, "local", "app.tpl")
	if err := os.WriteFile(src, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := []Template{{Source: "local/app.tpl", Destination: "local/app.conf", ChangeMode: ChangeRestart}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results, _, err := r.RenderAll(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(r, ts, results)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	tmp := src + ".new"
	if err := os.WriteFile(tmp, []byte(`{{ key "db/url" }}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, src); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-w.Changes():
		if c.Index != 0 || !errors.Is(c.Err, ErrServerFunction) {
			t.Errorf("change %+v, want template 0 with ErrServerFunction", c)
		}
	case <-time.After(10 * time.Second): // a guard against a hang, not a timing: an inotify event takes microseconds
		t.Fatal("a source that no longer renders was not reported")
	}
	if got := read(t, filepath.Join(r.Layout.TaskDir, "local", "app.conf")); got != "v1" {
		t.Errorf("the output is %q after a failed render, want the previous v1", got)
	}
	cancel()
	<-done
}
