package taskfile

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/template"
)

// nomadJobs is the folder of real Nomad job files, beside the repository.
const nomadJobs = "../../shared/nomad-jobs"

// remote serves, on 127.0.0.1, what the job files fetch from the
// internet: every request, whatever its host, reaches it.
type remote struct {
	srv    *httptest.Server
	client *http.Client
	goMod  []byte
	hits   map[string]int
}

func newRemote(t *testing.T) *remote {
	t.Helper()
	r := &remote{goMod: []byte("module github.com/hashicorp/go-set\n\ngo 1.20\n"), hits: map[string]int{}}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, body := range map[string][]byte{"go-set-main/go.mod": r.goMod, "go-set-main/set.go": []byte("package set\n")} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	hello := []byte("#!/bin/sh\necho hello\n")
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits[req.URL.Path]++
		switch req.URL.Path {
		case "/hashicorp/go-set/main/go.mod":
			w.Write(r.goMod)
		case "/hashicorp/go-set/archive/refs/heads/main.zip":
			w.Write(zbuf.Bytes())
		case "/hellov1":
			w.Write(hello)
		default:
			http.NotFound(w, req)
		}
	}))
	t.Cleanup(r.srv.Close)
	target, _ := url.Parse(r.srv.URL)
	r.client = &http.Client{Transport: rewrite{target: target}}
	return r
}

// rewrite sends every request to the test server, keeping its path.
type rewrite struct{ target *url.URL }

func (rw rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = rw.target.Scheme, rw.target.Host, rw.target.Host
	return http.DefaultTransport.RoundTrip(r)
}

// prepared is a task instance made ready as a runner would: directories,
// templates rendered, artifacts fetched.
type prepared struct {
	inst      *Instance
	artifacts []error // one per artifact
}

// prepare instantiates copy index of t in a Nomad-shaped alloc directory
// below root, renders its templates and fetches its artifacts.
func prepare(t *testing.T, f *File, task *Task, root string, a Alloc, rem *remote) (*prepared, error) {
	t.Helper()
	allocDir := filepath.Join(root, a.ID, taskdir.Alloc)
	layout := taskdir.Layout{TaskDir: filepath.Join(root, a.ID, task.Name), AllocDir: allocDir, Chroot: task.Driver == "exec"}
	for _, d := range []string{taskdir.Local, taskdir.Secrets, taskdir.Tmp} {
		if err := os.MkdirAll(filepath.Join(layout.TaskDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{taskdir.AllocData, taskdir.AllocLogs, taskdir.AllocTmp} {
		if err := os.MkdirAll(filepath.Join(allocDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inst, err := f.Instantiate(task, a, layout)
	if err != nil {
		return nil, err
	}
	r := &template.Renderer{Layout: layout, Env: inst.Env, Owner: taskdir.Keep}
	if _, _, err := r.RenderAll(context.Background(), inst.Templates); err != nil {
		return nil, err
	}
	p := &prepared{inst: inst}
	fe := &artifact.Fetcher{Layout: layout, Client: rem.client, TempDir: t.TempDir()}
	for _, ar := range inst.Artifacts {
		p.artifacts = append(p.artifacts, fe.Fetch(context.Background(), ar))
	}
	return p, nil
}

// hostPath is where a path the task names (relative to its working
// directory) is on the host.
func (p *prepared) hostPath(t *testing.T, name string) string {
	t.Helper()
	if !filepath.IsAbs(name) {
		name = filepath.Join(p.inst.Spec.Dir, name)
	}
	tg, err := p.inst.Layout.Resolve(name)
	if err != nil {
		t.Fatalf("%s: %s does not resolve inside the task's directories: %v", p.inst.Name, name, err)
	}
	return tg.Host()
}

var noticeLine = regexp.MustCompile(`^(ignores the "[^"]+" [a-z ]+ \(.+\)|does not run tasks? ".+" \(driver "[^"]+": tether runs exec and raw_exec\)|task "[^"]+": check "[^"]+" \([a-z]+\) of service "[^"]*" \(provider "[^"]+"\): (runs it as the task's readiness|ignores it: ).+)$`)

// checkParse asserts what every file must show: no HCL "Variables not
// allowed", every notice one well-formed line, every diagnostic placed.
func checkParse(t *testing.T, name string, diags hcl.Diagnostics, f *File) {
	t.Helper()
	for _, d := range diags {
		s := FormatDiag(d)
		if strings.Contains(s, "Variables not allowed") || strings.Contains(s, "Variables may not be used here") {
			t.Errorf("%s: HCL's bare error: %s", name, s)
		}
		if d.Subject == nil {
			t.Errorf("%s: a diagnostic that does not say where: %s", name, s)
		}
	}
	if f == nil {
		return
	}
	seen := map[string]bool{}
	for _, n := range f.Notices {
		line := n.String()
		if !noticeLine.MatchString(line) {
			t.Errorf("%s: notice %q is not one line of the agreed form", name, line)
		}
		if seen[line] {
			t.Errorf("%s: notice %q twice", name, line)
		}
		seen[line] = true
	}
}

func noticesText(f *File) string {
	var l []string
	for _, n := range f.Notices {
		l = append(l, n.String())
	}
	return strings.Join(l, "\n")
}

// jobCase is what "behaves" means for one file (../shared/nomad-jobs/README.md).
type jobCase struct {
	opts  Options
	check func(t *testing.T, f *File, env *jobsEnv)
	// parseErr, when set, is what the file without opts must be refused with.
	parseErr []string
}

type jobsEnv struct {
	root  string
	host  *Host
	rem   *remote
	ports *Allocator
}

// run prepares every runnable task of f's group (all copies).
func (e *jobsEnv) runGroup(t *testing.T, f *File, group string) map[string]*prepared {
	t.Helper()
	gp, err := f.PlanGroup(group)
	if err != nil {
		t.Fatalf("PlanGroup(%q): %v", group, err)
	}
	if err := gp.Check(e.host); err != nil {
		t.Fatalf("constraints: %v", err)
	}
	out := map[string]*prepared{}
	for i := 0; i < gp.Group.Count; i++ {
		allocID := fmt.Sprintf("%s-%s-%d", f.Job.Name, group, i)
		ports, err := e.ports.Allocate(context.Background(), allocID, gp.PortRequests())
		if err != nil {
			t.Fatalf("ports: %v", err)
		}
		for _, task := range gp.Tasks() {
			p, err := prepare(t, f, task, e.root, Alloc{ID: allocID, Index: i, Host: e.host, Ports: ports, BaseEnv: map[string]string{"PATH": "/usr/bin:/bin"}}, e.rem)
			if err != nil {
				t.Fatalf("prepare %s[%d]: %v", task.Address(), i, err)
			}
			out[p.inst.Name] = p
		}
	}
	return out
}

func mustFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return b
}

var jobCases = map[string]jobCase{
	"01-sleeper.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		ps := e.runGroup(t, f, "sleeper")
		p := ps["sleeper"]
		if p == nil || p.inst.Spec.Command != "/bin/bash" || p.inst.Spec.Args[1] != "echo $$ >> pid && sleep 999999" {
			t.Fatalf("instances %v", ps)
		}
		if p.inst.Spec.Dir != p.inst.Layout.TaskDir {
			t.Errorf("a raw_exec task starts in %s, not its task directory %s (its pid file lands there in Nomad)", p.inst.Spec.Dir, p.inst.Layout.TaskDir)
		}
		if !strings.Contains(noticesText(f), `ignores the "datacenters" attribute (a scheduler concern)`) {
			t.Errorf("notices: %s", noticesText(f))
		}
	}},
	"02-restarter.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		p := e.runGroup(t, f, "restarter")["restarter"]
		r := p.inst.Spec.Restart
		if r == nil || r.Attempts != 100 || r.Delay.String() != "3s" || r.Mode != fsm.DefaultServiceRestart.Mode {
			t.Errorf("restart policy %+v: want the group's attempts and delay over the service default", r)
		}
	}},
	"03-failed_sibling.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		gp, err := f.PlanGroup("failed_sibling")
		if err != nil || len(gp.Main) != 2 || len(gp.Prestart)+len(gp.Poststart)+len(gp.Poststop) != 0 {
			t.Fatalf("plan %+v, %v", gp, err)
		}
		ps := e.runGroup(t, f, "failed_sibling")
		if ps["failure"].inst.Spec.Restart.Attempts != 0 || ps["failed_sibling"].inst.Spec.Args[0] != "1000" {
			t.Errorf("instances: %+v", ps)
		}
	}},
	"04-isolation-exec.nomad.hcl": {check: func(t *testing.T, f *File, e *jobsEnv) {
		p := e.runGroup(t, f, "group")["bash"]
		if p.inst.Spec.Dir != "/" {
			t.Errorf("an exec task starts in %q, not / of its root", p.inst.Spec.Dir)
		}
		script := p.hostPath(t, p.inst.Spec.Args[1]) // "local/pid.sh" from "/"
		if script != filepath.Join(p.inst.Layout.TaskDir, "local", "pid.sh") {
			t.Errorf("local/pid.sh resolves to %s", script)
		}
		fi, err := os.Stat(script)
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Fatalf("rendered script: %v, %v", fi, err)
		}
		if got := string(mustFile(t, script)); got != "#!/usr/bin/env bash\necho my pid is $BASHPID\n" {
			t.Errorf("rendered %q", got)
		}
		if p.inst.Templates[0].ChangeMode != template.ChangeNoop {
			t.Errorf("change_mode %v", p.inst.Templates[0].ChangeMode)
		}
		if r := f.Groups[0].Reschedule; r == nil || r.Enabled() {
			t.Errorf("reschedule { attempts = 0 unlimited = false }: %+v, want a policy that reschedules nothing", r)
		}
	}},
	"05-chroot_exec.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		p := e.runGroup(t, f, "print")["env"]
		for k, want := range map[string]string{"NOMAD_ALLOC_DIR": "/alloc", "NOMAD_TASK_DIR": "/local", "NOMAD_SECRETS_DIR": "/secrets", "NOMAD_TASK_NAME": "env", "NOMAD_GROUP_NAME": "print", "NOMAD_JOB_NAME": "chroot_exec", "NOMAD_ALLOC_INDEX": "0"} {
			if got := p.inst.Spec.Env[k]; got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
		if p.inst.Spec.Args[1] != "echo $NOMAD_ALLOC_DIR; echo $NOMAD_TASK_DIR; echo $NOMAD_SECRETS_DIR; echo $PATH" {
			t.Errorf("the shell's variables were touched: %q", p.inst.Spec.Args[1])
		}
	}},
	"07-artifact_linux.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		txt := noticesText(f)
		if !strings.Contains(txt, `does not run tasks "docker.docker_file_alloc", "docker.docker_file_custom"`) {
			t.Errorf("the docker tasks are not named as not run:\n%s", txt)
		}
		if _, err := f.Find("docker_file_default"); !errors.Is(err, ErrNotRunnable) {
			t.Errorf("selecting a docker task: %v", err)
		}
		if _, err := f.PlanGroup("docker"); !errors.Is(err, ErrNotRunnable) {
			t.Errorf("planning the docker group: %v", err)
		}
		for _, group := range []string{"rawexec", "exec"} {
			for name, p := range e.runGroup(t, f, group) {
				if strings.Contains(name, "git") {
					if err := p.artifacts[0]; !errors.Is(err, artifact.ErrSource) || !strings.Contains(err.Error(), `"git" getter`) || !strings.Contains(err.Error(), "git::https://github.com/hashicorp/go-set") {
						t.Errorf("%s: a git artifact gives %v, want the named refusal", name, err)
					}
					continue
				}
				if err := p.artifacts[0]; err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				// The task cats the file its artifact placed: it must be there.
				got := p.hostPath(t, p.inst.Spec.Args[0])
				if b := mustFile(t, got); !bytes.Equal(b, e.rem.goMod) {
					t.Errorf("%s: %s holds %q", name, got, b)
				}
				if strings.Contains(name, "alloc") && !strings.HasPrefix(got, p.inst.Layout.AllocDir+"/") {
					t.Errorf("%s: %s is not in the alloc directory %s", name, got, p.inst.Layout.AllocDir)
				}
			}
		}
	}},
	"09-helloworld.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		ps := e.runGroup(t, f, "hello")
		ports := map[string]bool{}
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("hello[%d]", i)
			p := ps[name]
			if p == nil {
				t.Fatalf("no instance %s in %v", name, ps)
			}
			env := p.inst.Spec.Env
			if env["NOMAD_ALLOC_INDEX"] != fmt.Sprint(i) || env["NOMAD_TASK_NAME"] != "hello" || env["NOMAD_ALLOC_NAME"] != fmt.Sprintf("helloworld.hello[%d]", i) {
				t.Errorf("%s: env %v", name, env)
			}
			port := env["NOMAD_PORT_web"]
			if port == "" || ports[port] || env["NOMAD_ADDR_web"] != "127.0.0.1:"+port || env["NOMAD_HOST_PORT_web"] != port || env["NOMAD_IP_web"] != "127.0.0.1" {
				t.Errorf("%s: port variables %q (taken: %v)", name, port, ports)
			}
			ports[port] = true
			if err := p.artifacts[0]; err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			cmd := p.hostPath(t, p.inst.Spec.Command)
			if cmd != filepath.Join(p.inst.Layout.TaskDir, "local", "hello") {
				t.Errorf("command local/hello resolves to %s", cmd)
			}
			if fi, err := os.Stat(cmd); err != nil || fi.Mode().Perm()&0o111 == 0 {
				t.Errorf("%s: the fetched command is not executable: %v %v", name, fi, err)
			}
			if len(p.inst.Services) != 1 || p.inst.Services[0].Port != "web" || len(p.inst.Services[0].Checks) != 1 || p.inst.Services[0].Checks[0].Type != "http" || p.inst.Services[0].Checks[0].Path != "/" {
				t.Errorf("%s: services %+v", name, p.inst.Services)
			}
		}
		if !strings.Contains(noticesText(f), `ignores the "service" block`) {
			t.Errorf("notices: %s", noticesText(f))
		}
	}},
	"11-simple_lb_replicas.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		if _, err := f.Find("db"); !errors.Is(err, ErrNoTask) || !strings.Contains(err.Error(), "db_replica_1.db, db_replica_2.db, db_replica_3.db") {
			t.Errorf("Find(db): %v", err)
		}
		for i := 1; i <= 3; i++ {
			g := fmt.Sprintf("db_replica_%d", i)
			if _, err := f.Find(g + ".db"); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `network mode "bridge"`) {
				t.Errorf("Find(%s.db): %v", g, err)
			}
			if _, err := f.PlanGroup(g); !errors.Is(err, ErrNotRunnable) || !strings.Contains(err.Error(), `network mode "bridge"`) {
				t.Errorf("PlanGroup(%s): %v", g, err)
			}
		}
		if n := f.Name(f.Tasks[0]); n != "db_replica_1.db" {
			t.Errorf("a repeated task name is named %q, want GROUP.TASK", n)
		}
	}},
	"13-env.nomad.hcl": {check: func(t *testing.T, f *File, e *jobsEnv) {
		p := e.runGroup(t, f, "group")["task"]
		if p.inst.Spec.User != "nobody" || p.inst.Spec.Command != "env" {
			t.Errorf("spec %+v", p.inst.Spec)
		}
	}},
	"14-xyz-variables.nomad.hcl": {
		parseErr: []string{`Missing variable value: Variable "X" has no default`, `Variable "Y"`, `Variable "Z"`},
		opts:     Options{Vars: map[string]string{"X": "foo", "Y": "3", "Z": "true"}},
		check: func(t *testing.T, f *File, e *jobsEnv) {
			p := e.runGroup(t, f, "group")["task"]
			if got := p.inst.Spec.Args[0]; got != "X foo, Y 3, Z true" {
				t.Errorf("args[0] = %q", got)
			}
		}},
	"18-large-job.nomad": {check: func(t *testing.T, f *File, e *jobsEnv) {
		ps := e.runGroup(t, f, "one")
		if len(ps) != 3 || ps["one[2]"] == nil || ps["one[2]"].inst.Spec.Env["version"] != "1" || ps["one[1]"].inst.Spec.Env["NOMAD_ALLOC_INDEX"] != "1" {
			t.Errorf("instances %v", ps)
		}
		if !strings.Contains(noticesText(f), `ignores the "update" block (a scheduler concern)`) {
			t.Errorf("notices: %s", noticesText(f))
		}
	}},
	"20-docs-parameterized-email.nomad": {
		parseErr: []string{"Dispatch meta missing", "CAMPAIGN_ID"},
		opts:     Options{DispatchMeta: map[string]string{"CAMPAIGN_ID": "42"}},
		check: func(t *testing.T, f *File, e *jobsEnv) {
			p := e.runGroup(t, f, "emails")["emailer"]
			if got := p.inst.Spec.Args[0]; got != "-campaign=42" || p.inst.Spec.Env["NOMAD_META_CAMPAIGN_ID"] != "42" {
				t.Errorf("args[0] = %q, env %v", got, p.inst.Spec.Env)
			}
		}},
}

// TestNomadJobs_Behave parses every real job file in ../shared/nomad-jobs,
// and prepares every task tether runs as a runner would (directories,
// NOMAD_* variables, templates rendered, artifacts fetched from a server
// on 127.0.0.1), asserting per file what its README calls behaving.
func TestNomadJobs_Behave(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(nomadJobs, "*.nomad*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(nomadJobs); errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s is absent (the shared folder beside the repository)", nomadJobs)
		}
		t.Fatalf("no job file in %s", nomadJobs)
	}
	host := DetectHost(HostConfig{IP: "127.0.0.1"})
	if host.Attrs["kernel.name"] != "linux" {
		t.Fatalf("kernel.name = %q", host.Attrs["kernel.name"])
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			src := mustFile(t, path)
			jc, known := jobCases[name]
			f, diags := Parse(name, src, Options{})
			checkParse(t, name, diags, f)
			if len(jc.parseErr) > 0 {
				if f != nil {
					t.Fatalf("parsed without the inputs it needs")
				}
				var all []string
				for _, d := range diags {
					all = append(all, FormatDiag(d))
				}
				for _, want := range jc.parseErr {
					if !strings.Contains(strings.Join(all, "\n"), want) {
						t.Errorf("the refusal does not say %q:\n%s", want, strings.Join(all, "\n"))
					}
				}
				f, diags = Parse(name, src, jc.opts)
				checkParse(t, name, diags, f)
			}
			if diags.HasErrors() {
				t.Fatalf("%v", diags)
			}
			e := &jobsEnv{root: t.TempDir(), host: host, rem: newRemote(t),
				ports: &Allocator{Dir: t.TempDir(), IP: "127.0.0.1"}}
			if !known {
				// A file this test has no case for: every task tether runs
				// must prepare or be refused by name.
				for _, task := range f.Tasks {
					if _, err := f.Find(task.Address()); err != nil {
						if !errors.Is(err, ErrNotRunnable) {
							t.Errorf("%s: %v", task.Address(), err)
						}
						continue
					}
				}
				t.Logf("no per-file case for %s: parsed and checked generically", name)
				return
			}
			jc.check(t, f, e)
		})
	}
}

// BenchmarkParse_ArtifactJob parses the largest real job file (18 tasks).
func BenchmarkParse_ArtifactJob(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(nomadJobs, "07-artifact_linux.nomad"))
	if err != nil {
		b.Skipf("%s is absent: %v", nomadJobs, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, diags := Parse("07.nomad", src, Options{}); diags.HasErrors() {
			b.Fatal(diags)
		}
	}
}
