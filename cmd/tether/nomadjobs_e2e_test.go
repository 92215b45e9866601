package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tether-fsm/tether/fsm"
)

// The real Nomad job files (../shared/nomad-jobs beside the repository,
// twelve files of hashicorp/nomad v1.6.0) run through the tether binary,
// real executors and real tasks, each checked against what its README
// calls behaving: run as Nomad would run it (its working directory, its
// NOMAD_* variables and interpolations, templates rendered, artifacts
// fetched), or refused with an error naming what tether does not run;
// and nothing left running after its stop.

// nomadJobsDir is the folder of the real job files.
var nomadJobsDir = filepath.Join(repoRoot, "..", "shared", "nomad-jobs")

// fakeInternet serves what the job files fetch from the internet
// (raw.githubusercontent.com, github.com, an S3 bucket) on 127.0.0.1,
// through an HTTPS proxy: tether's executors fetch with Go's client, which
// honours HTTPS_PROXY, and verify the TLS certificate the proxy presents
// for each host against a CA of the test's (SSL_CERT_FILE). A job file's
// https:// URL is fetched as it is written, TLS verified and all.
type fakeInternet struct {
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caFile  string
	proxy   string
	mu      sync.Mutex
	certs   map[string]*tls.Certificate
	content map[string][]byte // by host and path: "github.com/x"
	hits    []string
}

func newFakeInternet(t *testing.T) *fakeInternet {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tether test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeInternet{ca: ca, caKey: key, certs: map[string]*tls.Certificate{}, content: map[string][]byte{}}
	f.caFile = writeFile(t, t.TempDir(), "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	srv := httptest.NewServer(http.HandlerFunc(f.connect))
	t.Cleanup(srv.Close)
	f.proxy = srv.URL
	return f
}

// env is what a tether process needs to fetch through the fake internet.
func (f *fakeInternet) env() []string {
	return []string{"HTTPS_PROXY=" + f.proxy, "https_proxy=" + f.proxy, "SSL_CERT_FILE=" + f.caFile, "NO_PROXY=", "no_proxy="}
}

func (f *fakeInternet) serve(hostPath string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.content[hostPath] = body
}

func (f *fakeInternet) fetched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hits)
}

// cert makes (once per host) a certificate the test CA signs.
func (f *fakeInternet) cert(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.certs[hello.ServerName]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: hello.ServerName}, DNSNames: []string{hello.ServerName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.ca, &key.PublicKey, f.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	f.certs[hello.ServerName] = c
	return c, nil
}

// connect answers a CONNECT by terminating TLS for the host asked and
// serving its content over HTTP/1.1.
func (f *fakeInternet) connect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "this proxy only tunnels (CONNECT)", http.StatusMethodNotAllowed)
		return
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	tc := tls.Server(conn, &tls.Config{GetCertificate: f.cert})
	br := bufio.NewReader(tc)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		f.mu.Lock()
		body, ok := f.content[host+req.URL.Path]
		f.hits = append(f.hits, host+req.URL.Path)
		f.mu.Unlock()
		resp := &http.Response{StatusCode: http.StatusOK, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Request: req}
		if !ok {
			resp.StatusCode, body = http.StatusNotFound, []byte("not found\n")
		}
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if err := resp.Write(tc); err != nil {
			return
		}
	}
}

// goSet is what the job files fetch of hashicorp/go-set: its go.mod, and
// its main branch as a zip holding go-set-main/go.mod.
func (f *fakeInternet) serveGoSet(t *testing.T) []byte {
	t.Helper()
	goMod := []byte("module github.com/hashicorp/go-set\n\ngo 1.20\n")
	f.serve("raw.githubusercontent.com/hashicorp/go-set/main/go.mod", goMod)
	var zbuf bytes.Buffer
	writeZip(t, &zbuf, map[string]string{"go-set-main/go.mod": string(goMod), "go-set-main/set.go": "package set\n"})
	f.serve("github.com/hashicorp/go-set/archive/refs/heads/main.zip", zbuf.Bytes())
	return goMod
}

// jobsEnv is one test's state directory with the fake internet in every
// tether's environment and a marker in every task's (the leak check reads
// environments: an exec task's paths do not name the state directory).
type jobsEnv struct {
	*env
	net *fakeInternet
}

func newJobsEnv(t *testing.T) *jobsEnv {
	e := &jobsEnv{env: newEnv(t), net: newFakeInternet(t)}
	// Through an agent, the executors it spawns fetch with its
	// environment (an operator's proxy is the agent's, as a service's
	// environment), not a command's.
	e.restartAgent(e.net.env())
	return e
}

// newDaemonlessJobsEnv is newJobsEnv that no agent serves (see
// newDaemonlessEnv).
func newDaemonlessJobsEnv(t *testing.T, why string) *jobsEnv {
	return &jobsEnv{env: newDaemonlessEnv(t, why), net: newFakeInternet(t)}
}

// tether runs a tether command with the fake internet; run and start get
// the leak marker into each task's environment.
func (e *jobsEnv) tether(args ...string) result {
	e.t.Helper()
	if len(args) > 0 && (args[0] == "run" || args[0] == "start") {
		args = append(slices.Clone(args), "--env", "TETHER_TEST_MARKER="+e.dir)
	}
	return e.tetherEnv(e.net.env(), args...)
}

func (e *jobsEnv) must(args ...string) result {
	e.t.Helper()
	r := e.tether(args...)
	if r.code != 0 {
		e.t.Fatalf("tether %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// jobFile is a file of nomadJobsDir.
func jobFile(name string) string { return filepath.Join(nomadJobsDir, name) }

// statusOf is status --json of every task, by id.
func (e *jobsEnv) statusOf() map[string]taskJSON {
	e.t.Helper()
	var ts []taskJSON
	if err := json.Unmarshal([]byte(e.must("status", "--all", "--json").stdout), &ts); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]taskJSON{}
	for _, t := range ts {
		out[t.ID] = t
	}
	return out
}

// byName is the tasks of a status listing named name.
func byName(ts map[string]taskJSON, name string) []taskJSON {
	var out []taskJSON
	for _, t := range ts {
		if t.Name == name {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b taskJSON) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// taskDirOf is the host path of a task's directory in its allocation.
func (e *jobsEnv) taskDirOf(t taskJSON, dir string) string {
	return filepath.Join(e.dir, "allocs", t.Alloc, dir)
}

// noneLive checks that no task is live and no group driver runs: every
// task ended (the leak check at the end looks for processes).
func (e *jobsEnv) noneLive() {
	e.t.Helper()
	for _, t := range e.statusOf() {
		if s, err := fsm.ParseState(t.State); err != nil || !s.Terminal() {
			e.t.Errorf("task %s (%s) is %s after its stop", t.ID, t.Name, t.State)
		}
	}
}

// followLogs reads a task's output (tether logs -f) until a line holds
// want.
func (e *jobsEnv) followLogs(id, want string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := e.command(ctx, e.net.env(), "logs", "-f", id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return sc.Text()
		}
	}
	e.t.Fatalf("task %s never printed %q", id, want)
	return ""
}

// waitLines waits (inotify, bounded) until the file at path holds n lines.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	return waitFor(t, path, func(lines []string) bool { return len(lines) >= n })
}

// waitFor waits (inotify, bounded) until the lines of the file at path
// satisfy done.
func waitFor(t *testing.T, path string, done func([]string) bool) []string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		if b, err := os.ReadFile(path); err == nil {
			if lines := strings.Fields(string(b)); done(lines) {
				return lines
			}
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			t.Fatal(err)
		case <-deadline:
			b, _ := os.ReadFile(path)
			t.Fatalf("%s holds %q, still not what the test waits for", path, b)
		}
	}
}

// helloScript is what the fake internet serves for 09-helloworld's
// hellov1: a web server on the task's port (NOMAD_ADDR_web) that says
// which copy of the group it is and where it runs.
func helloScript(t *testing.T, stateDir string) []byte {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, "#!/bin/sh\nexec %s %s serve-http %s\n", self, helperArg, stateDir)
}

// TestNomadJobs_Behave runs every real job file of ../shared/nomad-jobs
// through tether and checks each as its README defines behaving. A file
// this test has no case for is started (with no inputs) and stopped, and
// must run or be refused by name, never with HCL's "Variables not allowed",
// and leave nothing behind.
func TestNomadJobs_Behave(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(nomadJobsDir, "*.nomad*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		if _, err := os.Stat(nomadJobsDir); errors.Is(err, os.ErrNotExist) {
			t.Skipf("%s is absent (the shared folder of real Nomad job files beside the repository)", nomadJobsDir)
		}
		t.Fatalf("no job file in %s", nomadJobsDir)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			e := newJobsEnv(t)
			check, known := jobChecks[name]
			if !known {
				genericJob(t, e, path)
				return
			}
			check(t, e)
			e.noneLive()
		})
	}
}

// noBareHCL fails for HCL's bare interpolation error.
func noBareHCL(t *testing.T, r result) {
	t.Helper()
	for _, s := range []string{"Variables not allowed", "Variables may not be used here", "panic:"} {
		if strings.Contains(r.stderr, s) {
			t.Errorf("%q in:\n%s", s, r)
		}
	}
}

// genericJob starts a file with no inputs, stops what it started.
func genericJob(t *testing.T, e *jobsEnv, path string) {
	r := e.tether("start", "--min-uptime", "0", path)
	noBareHCL(t, r)
	if r.code != 0 {
		if !strings.Contains(r.stderr, "tether:") {
			t.Errorf("refused without naming why:\n%s", r)
		}
		t.Logf("no case for %s: refused as %s", filepath.Base(path), r.stderr)
	}
	for _, id := range strings.Fields(r.stdout) {
		e.tether("stop", id)
	}
	e.noneLive()
}

var jobChecks = map[string]func(t *testing.T, e *jobsEnv){
	"01-sleeper.nomad": func(t *testing.T, e *jobsEnv) {
		// A raw_exec task directly under the job starts in its task
		// directory, where its `echo $$ >> pid` lands (Nomad's).
		r := e.must("start", jobFile("01-sleeper.nomad"))
		if !strings.Contains(r.stderr, `ignores the "datacenters" attribute (a scheduler concern)`) {
			t.Errorf("the datacenters notice: %s", r.stderr)
		}
		ids := strings.Fields(r.stdout)
		if len(ids) != 1 {
			t.Fatalf("start printed %q", r.stdout)
		}
		st := e.statusOf()[ids[0]]
		pids := waitLines(t, filepath.Join(e.taskDirOf(st, "sleeper"), "pid"), 1)
		if pids[0] != fmt.Sprint(st.PID) {
			t.Errorf("the task's pid file says %s, status %d", pids[0], st.PID)
		}
		stop := e.must("stop", ids[0])
		if !strings.Contains(stop.stdout, "stopped") {
			t.Errorf("stop: %s", stop)
		}
	},
	"02-restarter.nomad": func(t *testing.T, e *jobsEnv) {
		// The group's restart block over the service default: it exits 99
		// and is restarted (after its 3s delay); each run appends its pid.
		ids := strings.Fields(e.must("start", "--min-uptime", "0", jobFile("02-restarter.nomad")).stdout)
		st := e.statusOf()[ids[0]]
		pids := waitLines(t, filepath.Join(e.taskDirOf(st, "restarter"), "pid"), 2)
		if pids[0] == pids[1] {
			t.Errorf("the same pid twice: %v", pids)
		}
		if st := e.statusOf()[ids[0]]; st.Restarts < 1 || st.State == "exited" {
			t.Errorf("after its second run began: %s with %d restarts, want restarted", st.State, st.Restarts)
		}
		e.must("stop", ids[0])
		if st := e.statusOf()[ids[0]]; st.State != "stopped" {
			t.Errorf("after its stop: %s, want stopped", st.State)
		}
	},
	"03-failed_sibling.nomad": func(t *testing.T, e *jobsEnv) {
		// failure exits 99 (restart attempts 0): the group fails and its
		// sibling, which would sleep 1000 s, is stopped.
		r := e.tether("run", jobFile("03-failed_sibling.nomad"))
		if r.code != 99 {
			t.Fatalf("run: want the failed task's exit 99\n%s", r)
		}
		ts := e.statusOf()
		if f := byName(ts, "failure"); len(f) != 1 || f[0].State != "exited" || *f[0].ExitCode != 99 {
			t.Errorf("failure: %+v", f)
		}
		if s := byName(ts, "failed_sibling"); len(s) != 1 || s[0].State != "stopped" {
			t.Errorf("failed_sibling: %+v, want stopped by its group", s)
		}
	},
	"04-isolation-exec.nomad.hcl": func(t *testing.T, e *jobsEnv) {
		needRoot(t)
		// exec: the template renders local/pid.sh (perms 755) and the task,
		// started in / of its root, runs `bash -c local/pid.sh`: pid 1 of
		// its PID namespace.
		r := e.tether("run", jobFile("04-isolation-exec.nomad.hcl"))
		if r.code != 0 || r.stdout != "my pid is 1\n" {
			t.Fatalf("run: want \"my pid is 1\"\n%s", r)
		}
		bash := byName(e.statusOf(), "bash")[0]
		fi, err := os.Stat(filepath.Join(e.taskDirOf(bash, "bash"), "local", "pid.sh"))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("the rendered template: %v %v", fi, err)
		}
	},
	"05-chroot_exec.nomad": func(t *testing.T, e *jobsEnv) {
		needRoot(t)
		r := e.tether("run", jobFile("05-chroot_exec.nomad"))
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 4 || lines[0] != "/alloc" || lines[1] != "/local" || lines[2] != "/secrets" || !strings.Contains(lines[3], "/usr/bin") {
			t.Fatalf("run: want Nomad's exec paths\n%s", r)
		}
	},
	"07-artifact_linux.nomad": func(t *testing.T, e *jobsEnv) {
		needRoot(t)
		goMod := e.net.serveGoSet(t)
		path := jobFile("07-artifact_linux.nomad")
		for _, group := range []string{"rawexec", "exec"} {
			for _, task := range []string{"file_default", "file_custom", "zip_default", "zip_custom"} {
				// Each task alone: it cats the file its artifact placed.
				r := e.tether("run", "--task", group+"."+group+"_"+task, path)
				if r.code != 0 || r.stdout != string(goMod) {
					t.Errorf("%s.%s: want the fetched go.mod on stdout\n%s", group, task, r)
				}
				noBareHCL(t, r)
			}
			alloc := map[string]string{"rawexec": "rawexec_file_alloc_dots", "exec": "exec_file_alloc"}[group]
			if r := e.tether("run", "--task", group+"."+alloc, path); r.code != 0 || r.stdout != string(goMod) {
				t.Errorf("%s.%s: want the go.mod fetched into the alloc directory\n%s", group, alloc, r)
			}
			git := e.tether("run", "--task", group+"."+group+"_git_custom", path)
			if git.code != exitStartFail || !strings.Contains(git.stderr, `the "git" getter is not supported`) || !strings.Contains(git.stderr, "git::https://github.com/hashicorp/go-set") {
				t.Errorf("%s git: want the named refusal\n%s", group, git)
			}
		}
		if r := e.tether("run", "--task", "rawexec.rawexec_file_alloc_env", path); r.code != 0 || r.stdout != string(goMod) {
			t.Errorf("rawexec_file_alloc_env: %s", r)
		}
		// The docker group is named, not run, and selecting it says why.
		d := e.tether("run", "--group", "docker", path)
		if d.code == 0 || !strings.Contains(d.stderr, `driver "docker"`) {
			t.Errorf("the docker group: %s", d)
		}
		// The file whole: every group tether can run, the docker one named;
		// the git tasks fail their group, which ends.
		all := e.tether("run", path)
		if all.code == 0 || !strings.Contains(all.stderr, `does not run tasks "docker.docker_file_alloc"`) ||
			!strings.Contains(all.stderr, "git") {
			t.Errorf("the whole file: %s", all)
		}
		hits := e.net.fetched()
		for _, want := range []string{"raw.githubusercontent.com/hashicorp/go-set/main/go.mod", "github.com/hashicorp/go-set/archive/refs/heads/main.zip"} {
			if !slices.Contains(hits, want) {
				t.Errorf("nothing fetched %s over https: %v", want, hits)
			}
		}
	},
	"09-helloworld.nomad": func(t *testing.T, e *jobsEnv) {
		e.net.serve("nomad-community-demo.s3.amazonaws.com/hellov1", helloScript(t, e.dir))
		r := e.must("start", jobFile("09-helloworld.nomad"))
		if !strings.Contains(r.stderr, `ignores the "service" block`) {
			t.Errorf("the service notice: %s", r.stderr)
		}
		ids := strings.Fields(r.stdout)
		if len(ids) != 3 {
			t.Fatalf("count = 3: start printed %q", r.stdout)
		}
		ts := e.statusOf()
		seen := map[string]bool{}
		for i := range 3 {
			hello := byName(ts, fmt.Sprintf("hello[%d]", i))
			if len(hello) != 1 || len(hello[0].Ports) != 1 || hello[0].Ports[0].Label != "web" {
				t.Fatalf("hello[%d]: %+v", i, hello)
			}
			p := hello[0].Ports[0]
			addr := net.JoinHostPort(p.IP, fmt.Sprint(p.Value))
			if seen[addr] {
				t.Errorf("two copies hold %s", addr)
			}
			seen[addr] = true
			e.followLogs(hello[0].ID, "listening")
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				t.Fatalf("hello[%d] on %s: %v", i, addr, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := fmt.Sprintf("hello from copy %d in %s\n", i, e.taskDirOf(hello[0], "hello"))
			if string(body) != want {
				t.Errorf("hello[%d] answered %q, want %q", i, body, want)
			}
		}
		list := e.must("status").stdout
		if !strings.Contains(list, "PORTS") || !strings.Contains(list, "web=") {
			t.Errorf("status shows no ports:\n%s", list)
		}
		for _, id := range ids {
			e.must("stop", id)
		}
	},
	"11-simple_lb_replicas.nomad": func(t *testing.T, e *jobsEnv) {
		r := e.tether("run", jobFile("11-simple_lb_replicas.nomad"))
		if r.code == 0 || !strings.Contains(r.stderr, `network mode "bridge"`) || !strings.Contains(r.stderr, "db_replica_1") {
			t.Errorf("want the bridge network refused by name\n%s", r)
		}
		if r := e.tether("run", "--task", "db", jobFile("11-simple_lb_replicas.nomad")); r.code == 0 || !strings.Contains(r.stderr, "db_replica_1.db, db_replica_2.db, db_replica_3.db") {
			t.Errorf("--task db: want the three GROUP.TASK names\n%s", r)
		}
		if n := len(e.statusOf()); n != 0 {
			t.Errorf("%d tasks recorded for a refused file", n)
		}
	},
	"13-env.nomad.hcl": func(t *testing.T, e *jobsEnv) {
		needRoot(t)
		r := e.tether("run", jobFile("13-env.nomad.hcl"))
		if r.code != 0 {
			t.Fatalf("run: %s", r)
		}
		task := byName(e.statusOf(), "task")[0]
		env := map[string]string{}
		for _, l := range strings.Split(r.stdout, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		}
		for k, want := range map[string]string{
			"NOMAD_TASK_DIR": e.taskDirOf(task, "task/local"), "NOMAD_ALLOC_DIR": e.taskDirOf(task, "alloc"),
			"NOMAD_SECRETS_DIR": e.taskDirOf(task, "task/secrets"), "NOMAD_JOB_NAME": "env", "NOMAD_GROUP_NAME": "group",
			"NOMAD_TASK_NAME": "task", "NOMAD_ALLOC_INDEX": "0", "NOMAD_ALLOC_ID": task.Alloc, "NOMAD_MEMORY_LIMIT": "10", "NOMAD_CPU_LIMIT": "10",
		} {
			if env[k] != want {
				t.Errorf("%s=%q, want %q", k, env[k], want)
			}
		}
	},
	"14-xyz-variables.nomad.hcl": func(t *testing.T, e *jobsEnv) {
		path := jobFile("14-xyz-variables.nomad.hcl")
		r := e.tether("run", path)
		if r.code == 0 || !strings.Contains(r.stderr, `Variable "X"`) {
			t.Errorf("without -var: want the missing variables named\n%s", r)
		}
		varFile := writeFile(t, t.TempDir(), "z.hcl", "Z = true\n")
		r = e.tether("run", "--var", "X=foo", "--var", "Y=3", "--var-file", varFile, path)
		if r.code != 0 || r.stdout != "X foo, Y 3, Z true\n" {
			t.Errorf("with -var and -var-file: %s", r)
		}
	},
	"18-large-job.nomad": func(t *testing.T, e *jobsEnv) {
		r := e.must("start", jobFile("18-large-job.nomad"))
		ids := strings.Fields(r.stdout)
		if len(ids) != 3 {
			t.Fatalf("count = 3: start printed %q", r.stdout)
		}
		ts := e.statusOf()
		allocs := map[string]bool{}
		for i := range 3 {
			one := byName(ts, fmt.Sprintf("one[%d]", i))
			if len(one) != 1 || one[0].State != "running" {
				t.Fatalf("one[%d]: %+v", i, one)
			}
			allocs[one[0].Alloc] = true
		}
		if len(allocs) != 3 {
			t.Errorf("the three copies share allocations: %v", allocs)
		}
		// Each copy is an allocation of its own: stopping one stops it alone.
		e.must("stop", "one[1]")
		if st := e.statusOf(); byName(st, "one[0]")[0].State != "running" || byName(st, "one[1]")[0].State != "stopped" {
			t.Errorf("after stopping one[1]: %+v", st)
		}
		e.must("stop", "one[0]")
		e.must("stop", "one[2]")
	},
	"20-docs-parameterized-email.nomad": func(t *testing.T, e *jobsEnv) {
		path := jobFile("20-docs-parameterized-email.nomad")
		r := e.tether("run", path)
		if r.code == 0 || !strings.Contains(r.stderr, "CAMPAIGN_ID") {
			t.Errorf("without dispatch meta: %s", r)
		}
		// With it the task is interpolated and runs: there is no emailer
		// on this host, which it says as a missing command (127).
		needRoot(t)
		r = e.tether("run", "--meta", "CAMPAIGN_ID=42", path)
		if r.code != exitNotFound || !strings.Contains(r.stderr, `"emailer"`) {
			t.Errorf("with --meta: want emailer not found\n%s", r)
		}
		ev := e.must("events", "--json", byName(e.statusOf(), "emailer")[0].ID).stdout
		if !strings.Contains(ev, `-campaign=42`) || !strings.Contains(ev, `NOMAD_META_CAMPAIGN_ID`) {
			t.Errorf("the recorded spec lacks the interpolated meta: %s", ev)
		}
	},
}

// needRoot skips a check that needs exec isolation (root) or runs a task
// as another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("exec tasks and tasks of another user need root")
	}
}

// writeZip writes a zip archive of files (name to content) to w.
func writeZip(t *testing.T, w io.Writer, files map[string]string) {
	t.Helper()
	zw := zip.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(f, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}
