package job

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/taskfile"
)

// testNode is a node on a fresh state directory: its host, an allocator
// in it, no base environment.
func testNode(t *testing.T) Node {
	t.Helper()
	dir := t.TempDir()
	host := &taskfile.Host{Attrs: map[string]string{"kernel.name": "linux"}, Node: map[string]string{"datacenter": "dc1"}, Meta: map[string]string{}, IP: "127.0.0.1"}
	return Node{StateDir: dir, Host: host, Ports: &taskfile.Allocator{Dir: dir, IP: "127.0.0.1"}}
}

func mustRead(t *testing.T, text string, in Inputs, node Node) *Job {
	t.Helper()
	j, err := Read(Source{File: "test.hcl", Text: []byte(text)}, in, node)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return j
}

func instantiate(t *testing.T, j *Job, node Node, ov Overrides) *Run {
	t.Helper()
	var ids []IDs
	for _, s := range j.Shapes() {
		ids = append(ids, NewIDs(s))
	}
	run, err := j.Instantiate(context.Background(), node, ids, ov)
	if err != nil {
		t.Fatalf("Instantiate: %v", err)
	}
	return run
}

const webJob = `job "web" {
  group "app" {
    count = 2
    network {
      port "http" {}
    }
    task "init" {
      driver = "raw_exec"
      lifecycle { hook = "prestart" }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo ready > ${NOMAD_ALLOC_DIR}/data/ready"]
      }
    }
    task "proxy" {
      driver = "raw_exec"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { command = "/bin/sleep" }
    }
    task "server" {
      driver = "raw_exec"
      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}"]
      }
      service {
        provider = "nomad"
        port     = "http"
        check {
          type     = "http"
          path     = "/"
          interval = "1s"
          timeout  = "1s"
        }
      }
      readiness = "http"
    }
  }
}
`

// A job with a prestart task, a sidecar and a main task, two copies of
// it: every copy an allocation of its own, each task's spec naming the
// allocation, its ids, its hook, its port and its reschedule policy.
func TestRead_AJobOfHooksPortsAndCopies(t *testing.T) {
	node := testNode(t)
	j := mustRead(t, webJob, Inputs{}, node)
	if j.Name != "web" || len(j.Groups) != 1 || j.Groups[0].Count != 2 || j.Batch || j.Tasks() != 6 {
		t.Fatalf("job %q: %d groups, batch %v, %d tasks", j.Name, len(j.Groups), j.Batch, j.Tasks())
	}
	shapes := j.Shapes()
	if len(shapes) != 2 || !slices.Equal(shapes[1].Names, []string{"init[1]", "proxy[1]", "server[1]"}) {
		t.Fatalf("shapes %+v", shapes)
	}
	run := instantiate(t, j, node, Overrides{})
	if len(run.Allocs) != 2 || run.Allocs[0].ID == run.Allocs[1].ID {
		t.Fatalf("allocs %+v", run.Allocs)
	}
	seen := map[string]bool{}
	for i, a := range run.Allocs {
		for k, task := range a.Tasks {
			s := task.Spec
			switch {
			case s.Alloc == nil || s.Alloc.ID != a.ID || s.Alloc.Index != i || !slices.Equal(s.Alloc.Tasks, a.IDs()):
				t.Errorf("%s: alloc %+v, want %s index %d tasks %v", task.ID, s.Alloc, a.ID, i, a.IDs())
			case s.Alloc.Hook != []fsm.Hook{fsm.HookPrestart, fsm.HookPrestart, fsm.HookMain}[k] || s.Alloc.Sidecar != (k == 1):
				t.Errorf("%s: hook %s sidecar %v", task.ID, s.Alloc.Hook, s.Alloc.Sidecar)
			case s.Alloc.Reschedule == nil || *s.Alloc.Reschedule != fsm.DefaultServiceReschedule:
				t.Errorf("%s: reschedule %+v, want the service default", task.ID, s.Alloc.Reschedule)
			case s.Dir != filepath.Join(node.StateDir, "allocs", a.ID, []string{"init", "proxy", "server"}[k]):
				t.Errorf("%s: starts in %s", task.ID, s.Dir)
			case s.Env["NOMAD_ALLOC_INDEX"] != []string{"0", "1"}[i] || s.Env["NOMAD_ALLOC_ID"] != a.ID:
				t.Errorf("%s: env %v", task.ID, s.Env)
			}
			if err := s.Validate(); err != nil {
				t.Errorf("%s: %v", task.ID, err)
			}
		}
		server := a.Tasks[2].Spec
		port := server.Env["NOMAD_PORT_http"]
		if port == "" || seen[port] || server.Args[2] != port || server.Check == nil || server.Check.PortLabel != "http" || server.Check.Path != "/" {
			t.Errorf("server of alloc %d: port %q args %v check %+v", i, port, server.Args, server.Check)
		}
		seen[port] = true
		if !strings.Contains(a.Tasks[0].Spec.Args[1], filepath.Join(node.StateDir, "allocs", a.ID, "alloc")+"/data/ready") {
			t.Errorf("init's args: %v", a.Tasks[0].Spec.Args)
		}
	}
	held, err := node.Ports.Held()
	if err != nil || len(held) != 2 {
		t.Errorf("ports held: %v %v, want the two allocations'", held, err)
	}
}

// Read's dry run allocates nothing and writes nothing.
func TestRead_WritesNothing(t *testing.T) {
	node := testNode(t)
	mustRead(t, webJob, Inputs{}, node)
	if ents, _ := os.ReadDir(node.StateDir); len(ents) != 0 {
		t.Errorf("Read left %d entries in the state directory", len(ents))
	}
}

// The entry name: the selection's, the job's, a task file's only task's,
// the file's stem.
func TestRead_Names(t *testing.T) {
	node := testNode(t)
	task := func(n string) string {
		return "task \"" + n + "\" {\n  driver = \"raw_exec\"\n  config { command = \"/bin/true\" }\n}\n"
	}
	for _, tc := range []struct {
		what, src string
		in        Inputs
		name      string
		tasks     int
	}{
		{"a job", webJob, Inputs{}, "web", 6},
		{"a task of a job", webJob, Inputs{Task: "server"}, "server", 2},
		{"a task of a job by GROUP.TASK", webJob, Inputs{Task: "app.init"}, "init", 2},
		{"a group", webJob, Inputs{Group: "app"}, "app", 6},
		{"a task file of one task", task("svc"), Inputs{}, "svc", 1},
		{"a task file of two tasks: the file's stem", task("a") + task("b"), Inputs{}, "test", 2},
		{"a task file's task", task("a") + task("b"), Inputs{Task: "b"}, "b", 1},
	} {
		j, err := Read(Source{File: "/etc/tether/test.hcl", Text: []byte(tc.src)}, tc.in, node)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		if j.Name != tc.name || j.Tasks() != tc.tasks {
			t.Errorf("%s: named %q with %d tasks, want %q with %d", tc.what, j.Name, j.Tasks(), tc.name, tc.tasks)
		}
	}
	// A task run alone is a group of its own: main, no sidecar.
	run := instantiate(t, mustRead(t, webJob, Inputs{Task: "proxy"}, node), node, Overrides{})
	if a := run.Allocs[0].Tasks[0].Spec.Alloc; a.Hook != fsm.HookMain || a.Sidecar || len(a.Tasks) != 1 {
		t.Errorf("a task run alone: %+v", a)
	}
}

// What the file cannot do is refused by Read, by name, with the error its
// cause names.
func TestRead_Refusals(t *testing.T) {
	node := testNode(t)
	docker := `job "j" {
  group "d" {
    task "x" {
      driver = "docker"
      config { image = "x" }
    }
  }
}`
	for _, tc := range []struct {
		what string
		src  string
		in   Inputs
		err  error
		says string
	}{
		{"broken syntax", `task "x" {`, Inputs{}, ErrParse, "test.hcl"},
		{"a missing variable", "variable \"v\" {}\ntask \"x\" {\n driver = \"raw_exec\"\n config { command = var.v }\n}", Inputs{}, ErrParse, `"v"`},
		{"a task that does not exist", webJob, Inputs{Task: "nope"}, taskfile.ErrNoTask, `no task "nope"`},
		{"a group that does not exist", webJob, Inputs{Group: "nope"}, taskfile.ErrNoTask, `no group "nope"`},
		{"--task and --group", webJob, Inputs{Task: "init", Group: "app"}, ErrBadInput, "give one"},
		{"nothing tether runs", docker, Inputs{}, ErrNothingToRun, `group "d" has no main task tether runs`},
		{"an unknown run-time reference", "task \"x\" {\n driver = \"raw_exec\"\n config { command = \"${NOMAD_NOPE}\" }\n}", Inputs{}, taskfile.ErrUnknownReference, "NOMAD_NOPE"},
		{"a constraint the host does not meet", "task \"x\" {\n driver = \"raw_exec\"\n constraint {\n attribute = \"${attr.kernel.name}\"\n value = \"windows\"\n }\n config { command = \"/bin/true\" }\n}", Inputs{}, taskfile.ErrConstraint, "windows"},
		{"a dispatch meta of a job that is not parameterized", webJob, Inputs{Meta: map[string]string{"k": "v"}}, ErrParse, "parameterized"},
		{"a NOMAD_VAR_ input that is not one", webJob, Inputs{Env: map[string]string{"PATH": "/bin"}}, ErrBadInput, "NOMAD_VAR_"},
		{"an invalid spec", "task \"x\" {\n driver = \"raw_exec\"\n config { command = \"/bin/true\" }\n readiness = \"http\"\n}", Inputs{}, ErrParse, "readiness"},
	} {
		_, err := Read(Source{File: "test.hcl", Text: []byte(tc.src)}, tc.in, node)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %v saying %q", tc.what, err, tc.err, tc.says)
		}
	}
	var pe *ParseError
	if _, err := Read(Source{File: "test.hcl", Text: []byte(`task "x" {`)}, Inputs{}, node); !errors.As(err, &pe) || len(pe.Lines) == 0 || !strings.HasPrefix(pe.Lines[0], "test.hcl:") {
		t.Errorf("a parse error's lines: %#v", err)
	}
	// One group runs, the other is named.
	both := strings.Replace(webJob, "  group \"app\" {", strings.TrimPrefix(strings.TrimSuffix(docker, "}"), "job \"j\" {\n")+"  group \"app\" {", 1)
	j := mustRead(t, both, Inputs{}, node)
	if len(j.Groups) != 1 || len(j.Skipped) != 1 || !strings.Contains(j.Skipped[0], `group "d"`) {
		t.Errorf("a file with a docker group: groups %d, skipped %v", len(j.Groups), j.Skipped)
	}
}

// Inputs reach the file: -var, -var-file (the later wins), NOMAD_VAR_
// (the weakest), dispatch meta.
func TestRead_Inputs(t *testing.T) {
	node := testNode(t)
	src := `variable "a" {}
variable "b" { default = "b0" }
variable "c" { default = "c0" }
task "x" {
  driver = "raw_exec"
  config {
    command = "/bin/echo"
    args    = ["${var.a}", "${var.b}", "${var.c}"]
  }
}`
	in := Inputs{Vars: map[string]string{"a": "from-var"}, VarFiles: []VarFile{{Name: "1.hcl", Text: []byte(`b = "file1"`)}, {Name: "2.hcl", Text: []byte(`b = "file2"`)}},
		Env: map[string]string{"NOMAD_VAR_c": "from-env", "NOMAD_VAR_a": "weaker"}}
	run := instantiate(t, mustRead(t, src, in, node), node, Overrides{})
	if args := run.Allocs[0].Tasks[0].Spec.Args; !slices.Equal(args, []string{"from-var", "file2", "from-env"}) {
		t.Errorf("args %v", args)
	}
	if got := VarEnv(map[string]string{"NOMAD_VAR_x": "1", "PATH": "/bin", "NOMAD_ADDR": "a"}); len(got) != 1 || got["NOMAD_VAR_x"] != "1" {
		t.Errorf("VarEnv kept %v", got)
	}
}

// The digest changes with the text and with every input, and only then.
func TestDigest(t *testing.T) {
	src := Source{File: "a.hcl", Text: []byte("x")}
	base := Digest(src, Inputs{})
	if Digest(Source{File: "b.hcl", Text: []byte("x")}, Inputs{}) != base {
		t.Errorf("the digest depends on the file's name")
	}
	for what, in := range map[string]Inputs{
		"var":      {Vars: map[string]string{"a": "1"}},
		"var file": {VarFiles: []VarFile{{Name: "f", Text: []byte("a=1")}}},
		"env":      {Env: map[string]string{"NOMAD_VAR_a": "1"}},
		"meta":     {Meta: map[string]string{"a": "1"}},
		"task":     {Task: "a"},
		"group":    {Group: "a"},
	} {
		if Digest(src, in) == base {
			t.Errorf("%s does not change the digest", what)
		}
	}
	if Digest(Source{Text: []byte("y")}, Inputs{}) == base {
		t.Errorf("the text does not change the digest")
	}
	// A var file's text, and the files' order (a later one wins).
	f1, f2 := VarFile{Name: "f", Text: []byte("a=1")}, VarFile{Name: "f", Text: []byte("a=2")}
	g := VarFile{Name: "g", Text: []byte("a=3")}
	if Digest(src, Inputs{VarFiles: []VarFile{f1}}) == Digest(src, Inputs{VarFiles: []VarFile{f2}}) {
		t.Errorf("a var file's text does not change the digest")
	}
	if Digest(src, Inputs{VarFiles: []VarFile{f1, g}}) == Digest(src, Inputs{VarFiles: []VarFile{g, f1}}) {
		t.Errorf("the var files' order does not change the digest")
	}
	if Digest(src, Inputs{Vars: map[string]string{"a": "1", "b": "2"}}) != Digest(src, Inputs{Vars: map[string]string{"b": "2", "a": "1"}}) {
		t.Errorf("the digest depends on map order")
	}
}

// The command line's overrides: every task's, and the one task's name and
// directory.
func TestInstantiate_Overrides(t *testing.T) {
	node := testNode(t)
	one := mustRead(t, "task \"x\" {\n driver = \"raw_exec\"\n config { command = \"/bin/true\" }\n}", Inputs{}, node)
	run := instantiate(t, one, node, Overrides{Name: "renamed", Dir: "/srv", User: "nobody", Env: []string{"K=V"}, CapAdd: []string{"chown"},
		KillSignal: 2, KillTimeout: time.Minute})
	s := run.Allocs[0].Tasks[0].Spec
	if s.Name != "renamed" || s.Dir != "/srv" || s.User != "nobody" || s.Env["K"] != "V" || !slices.Equal(s.CapAdd, []string{"chown"}) || s.KillSignal != 2 || s.KillTimeout != time.Minute {
		t.Errorf("overridden spec %+v", s)
	}
	many := mustRead(t, webJob, Inputs{}, node)
	ids := []IDs{NewIDs(many.Shapes()[0]), NewIDs(many.Shapes()[1])}
	if _, err := many.Instantiate(context.Background(), node, ids, Overrides{Name: "x"}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "--task") {
		t.Errorf("--name of a job of six tasks: %v", err)
	}
	if held, _ := node.Ports.Held(); len(held) != 0 {
		t.Errorf("a refused instantiation left ports held: %v", held)
	}
	if _, err := one.Instantiate(context.Background(), node, []IDs{NewIDs(one.Shapes()[0])}, Overrides{Env: []string{"=x"}}); !errors.Is(err, ErrBadInput) {
		t.Errorf("--env =x: %v", err)
	}
	if _, err := one.Instantiate(context.Background(), node, []IDs{NewIDs(one.Shapes()[0])}, Overrides{Driver: "docker"}); !errors.Is(err, ErrBadInput) {
		t.Errorf("--driver docker: %v", err)
	}
	exec := instantiate(t, one, node, Overrides{Driver: "exec"})
	if s := exec.Allocs[0].Tasks[0].Spec; s.Driver != "exec" || s.Dir != "/" {
		t.Errorf("--driver exec: driver %s starts in %s, want / of its root", s.Driver, s.Dir)
	}
}

// Ids that do not fit the shapes are refused; a port that cannot be had
// fails the instantiation and lets go of the ports taken before it.
func TestInstantiate_IDsAndPorts(t *testing.T) {
	node := testNode(t)
	j := mustRead(t, webJob, Inputs{}, node)
	s := j.Shapes()
	if _, err := j.Instantiate(context.Background(), node, []IDs{NewIDs(s[0])}, Overrides{}); !errors.Is(err, ErrShape) {
		t.Errorf("one set of ids for two allocations: %v", err)
	}
	short := NewIDs(s[1])
	short.Tasks = short.Tasks[:2]
	if _, err := j.Instantiate(context.Background(), node, []IDs{NewIDs(s[0]), short}, Overrides{}); !errors.Is(err, ErrShape) {
		t.Errorf("two ids for three tasks: %v", err)
	}
	bad := NewIDs(s[1])
	bad.Alloc = "../x"
	if _, err := j.Instantiate(context.Background(), node, []IDs{NewIDs(s[0]), bad}, Overrides{}); !errors.Is(err, ErrShape) {
		t.Errorf("an allocation id that is a path: %v", err)
	}
	static := strings.Replace(webJob, `port "http" {}`, `port "http" { static = 23456 }`, 1)
	js := mustRead(t, static, Inputs{}, node)
	if _, err := js.Instantiate(context.Background(), node, []IDs{NewIDs(js.Shapes()[0]), NewIDs(js.Shapes()[1])}, Overrides{}); !errors.Is(err, taskfile.ErrPorts) {
		t.Errorf("two copies of a static port: %v", err)
	}
	if held, _ := node.Ports.Held(); len(held) != 0 {
		t.Errorf("the failed instantiation left %v held", held)
	}
	noPorts := node
	noPorts.Ports = nil
	if _, err := j.Instantiate(context.Background(), noPorts, []IDs{NewIDs(s[0]), NewIDs(s[1])}, Overrides{}); !errors.Is(err, taskfile.ErrPorts) {
		t.Errorf("a node that allocates no ports: %v", err)
	}
}

// The node's policy: a template's source and a local artifact are read
// from the task's directories, its group's, or --allow-read; anything
// else is refused by Read, naming --allow-read.
func TestPolicy_AllowRead(t *testing.T) {
	node := testNode(t)
	shared := t.TempDir()
	file := func(block string) string {
		return "task \"x\" {\n driver = \"raw_exec\"\n config { command = \"/bin/true\" }\n " + block + "\n}"
	}
	for _, tc := range []struct {
		what, block string
		allow       []string
		refused     bool
	}{
		{"an inline template", `template {
 data = "x"
 destination = "local/x"
}`, nil, false},
		{"a source in the task's directory", `template {
 source = "local/in.tpl"
 destination = "local/x"
}`, nil, false},
		{"a source in the alloc directory", `template {
 source = "${NOMAD_ALLOC_DIR}/in.tpl"
 destination = "local/x"
}`, nil, false},
		{"a host source outside the allow list", `template {
 source = "` + shared + `/in.tpl"
 destination = "local/x"
}`, nil, true},
		{"a host source in the allow list", `template {
 source = "` + shared + `/in.tpl"
 destination = "local/x"
}`, []string{shared}, false},
		{"a host source beside the allow list", `template {
 source = "` + shared + `x/in.tpl"
 destination = "local/x"
}`, []string{shared}, true},
		{"a local artifact outside", `artifact { source = "` + shared + `/a.txt" }`, nil, true},
		{"a file:// artifact outside", `artifact { source = "file://` + shared + `/a.txt" }`, nil, true},
		{"a local artifact inside", `artifact { source = "` + shared + `/a.txt" }`, []string{shared}, false},
		{"an https artifact", `artifact { source = "https://example.com/a.txt" }`, nil, false},
		{"an artifact of the alloc directory", `artifact { source = "../alloc/data/a.txt" }`, nil, false},
	} {
		n := node
		n.Policy.AllowRead = tc.allow
		_, err := Read(Source{File: "t.hcl", Text: []byte(file(tc.block))}, Inputs{}, n)
		switch {
		case tc.refused && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--allow-read") || !strings.Contains(err.Error(), shared)):
			t.Errorf("%s: %v, want a refusal naming --allow-read and the path", tc.what, err)
		case !tc.refused && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	for src, local := range map[string]string{"/a/b": "/a/b", "file:///a/b": "/a/b", "file::/a/b": "/a/b", "https://h/a": "", "git::https://h/a": "",
		"github.com/a/b": "", "s3.amazonaws.com/b/k": "", "rel/x?archive=false": "rel/x"} {
		got, ok := localSource(src)
		if got != local || ok != (local != "") {
			t.Errorf("localSource(%q) = %q %v, want %q", src, got, ok, local)
		}
	}
}

// The node's check of a spec (the driver's, for a desired source) runs on
// Read's dry run: its refusal refuses the file.
func TestRead_NodeCheckSpec(t *testing.T) {
	node := testNode(t)
	var checked []string
	node.CheckSpec = func(s fsm.Spec) error {
		checked = append(checked, s.Name)
		if slices.Contains(s.CapAdd, "net_raw") {
			return executor.ErrCapNotAllowed
		}
		return nil
	}
	src := "task \"x\" {\n driver = \"exec\"\n config {\n command = \"/bin/true\"\n cap_add = [\"net_raw\"]\n }\n}"
	if _, err := Read(Source{File: "t.hcl", Text: []byte(src)}, Inputs{}, node); !errors.Is(err, executor.ErrCapNotAllowed) || !strings.Contains(err.Error(), `task "x"`) {
		t.Errorf("net_raw: %v", err)
	}
	mustRead(t, webJob, Inputs{}, node)
	if len(checked) != 1+6 {
		t.Errorf("checked %v, want every task of every copy", checked)
	}
}

// Ids: drawn ones are valid task ids; a copy's are derived (the same for
// the same allocation and generation, another for another).
func TestIDs(t *testing.T) {
	ids := NewIDs(Shape{Names: []string{"web[0]", "a b", ""}})
	for _, id := range append([]string{ids.Alloc}, ids.Tasks...) {
		if err := statedir.ValidateTaskID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	if !strings.HasPrefix(ids.Tasks[0], "web-0-") && !strings.HasPrefix(ids.Tasks[0], "web-0") {
		t.Errorf("task id %q does not start with its name", ids.Tasks[0])
	}
	a := NewAllocID()
	one, again, next := CopyTaskID("web[0]", a, 1), CopyTaskID("web[0]", a, 1), CopyTaskID("web[0]", a, 2)
	if one != again || one == next || CopyTaskID("web[0]", NewAllocID(), 1) == one || statedir.ValidateTaskID(one) != nil {
		t.Errorf("copy ids %q %q %q", one, again, next)
	}
}

// A batch job runs to completion; its reschedule policy is the batch
// default.
func TestRead_Batch(t *testing.T) {
	node := testNode(t)
	j := mustRead(t, "job \"b\" {\n type = \"batch\"\n task \"x\" {\n driver = \"raw_exec\"\n config { command = \"/bin/true\" }\n }\n}", Inputs{}, node)
	run := instantiate(t, j, node, Overrides{})
	if !j.Batch || !run.Batch || *run.Allocs[0].Tasks[0].Spec.Alloc.Reschedule != fsm.DefaultBatchReschedule {
		t.Errorf("batch %v %v, reschedule %+v", j.Batch, run.Batch, run.Allocs[0].Tasks[0].Spec.Alloc.Reschedule)
	}
}

// A version-1 registration's spec runs as a file of that one task would:
// its strings taken as they are, a "${" in them kept.
func TestFromSpec(t *testing.T) {
	node := testNode(t)
	spec := fsm.Spec{Name: "old", Driver: "raw_exec", Command: "/bin/echo", Args: []string{"${NOT_A_REF}", "x"}, Env: map[string]string{"A": "$${B}"}}
	j, src := FromSpec("/etc/tether/old.hcl", "old", spec)
	again, src2 := FromSpec("/etc/tether/old.hcl", "old", spec)
	if Digest(src, Inputs{}) != Digest(src2, Inputs{}) || j.Name != "old" || again.Tasks() != 1 {
		t.Fatalf("FromSpec is not stable: %q %q", src.Text, src2.Text)
	}
	run := instantiate(t, j, node, Overrides{})
	s := run.Allocs[0].Tasks[0].Spec
	if s.Command != "/bin/echo" || !slices.Equal(s.Args, []string{"${NOT_A_REF}", "x"}) || s.Env["A"] != "$${B}" || s.Alloc == nil || s.Dir == "" {
		t.Errorf("the spec run: %+v", s)
	}
	if *s.Alloc.Reschedule != fsm.DefaultServiceReschedule {
		t.Errorf("reschedule %+v", s.Alloc.Reschedule)
	}
}
