package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/job"
)

// rootShell is the attack of issue 32: a raw_exec spec under the node's
// desired prefix, which would run its command as the agent's user.
const rootShell = `task "pwn" {
  driver = "raw_exec"
  config {
    command = "/bin/sh"
    args    = ["-c", "id > /tmp/pwned"]
  }
}
`

// bombSpec is the compute bomb of issue 32: 230 bytes whose setproduct
// would allocate 24 GiB.
const bombSpec = `task "bomb" {
  driver = "exec"
  config {
    command = "/bin/true"
    args    = [format("%d", length(setproduct(range(1024), range(1024), range(1024))))]
  }
}
`

// hostPID is an exec task sharing the host's PID namespace.
const hostPID = `task "peek" {
  driver = "exec"
  config {
    command  = "/bin/true"
    pid_mode = "host"
  }
}
`

// okSpec is an exec task any node runs from etcd.
const okSpec = `task "ok" {
  driver = "exec"
  config {
    command = "/bin/true"
  }
}
`

// copyNames reads the names the local copy keeps.
func copyNames(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, desiredCopy))
	if err != nil {
		t.Fatal(err)
	}
	var f copyFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, task := range f.Tasks {
		names = append(names, task.Name)
	}
	return names
}

// A spec from etcd is judged under the node's policy for remote specs
// before it is kept: raw_exec (by default), a host namespace the node does
// not allow, the compute bomb: each refused by name (the driver and
// --allow-remote-drivers, the namespace and its flag, the parse limit),
// neither kept in the local copy nor delivered to the agent; the exec
// sibling is both. The operator's --allow-remote-drivers raw_exec admits
// raw_exec, and nothing else.
func TestDesired_RemoteSpecJudgedByTheNodesPolicyBeforeItIsKept(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	for _, tc := range []struct {
		what     string
		policy   job.Policy
		refused  map[string][]string // name: what its refusal names
		accepted []string
	}{
		{"the default", job.Policy{}, map[string][]string{
			"pwn":  {`driver "raw_exec"`, "--allow-remote-drivers"},
			"peek": {"pid_mode", "--allow-host-namespaces pid"},
			"bomb": {"setproduct", "limit"},
		}, []string{"ok"}},
		{"raw_exec and pid allowed", job.Policy{AllowRemoteDrivers: []string{"exec", "raw_exec"}, AllowHostNamespaces: []string{"pid"}}, map[string][]string{
			"bomb": {"setproduct", "limit"},
		}, []string{"ok", "peek", "pwn"}},
		{"raw_exec allowed locally only", job.Policy{AllowDrivers: []string{"exec", "raw_exec"}}, map[string][]string{
			"pwn": {`driver "raw_exec"`, "--allow-remote-drivers"},
		}, nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			node := strings.ReplaceAll(strings.ToLower(tc.what), " ", "-")
			node = strings.ReplaceAll(node, "_", "-")
			dir := filepath.Join(t.TempDir(), "cluster")
			w := newWatcher(cli, mustKeys(t), node, dir, tc.policy, nopLog(), Hooks{})
			if err := privateDir(w.dir); err != nil {
				t.Fatal(err)
			}
			for name, spec := range map[string]string{"pwn": rootShell, "peek": hostPID, "bomb": bombSpec,
				"ok": okSpec} {
				if _, err := cli.Put(ctxT(t), "/tether/desired/"+node+"/"+name, spec); err != nil {
					t.Fatal(err)
				}
			}
			set, err := w.list(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.commit(set); err != nil {
				t.Fatal(err)
			}
			kept := copyNames(t, dir)
			for name, words := range tc.refused {
				err := set.Invalid[name]
				if !errors.Is(err, ErrInvalidSpec) {
					t.Errorf("%s: %v, want it refused", name, err)
					continue
				}
				for _, w := range words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %v, want it naming %s", name, err, w)
					}
				}
				if _, ok := set.Tasks[name]; ok {
					t.Errorf("%s refused and delivered", name)
				}
				for _, k := range kept {
					if k == name {
						t.Errorf("%s refused and kept in the local copy (%v)", name, kept)
					}
				}
			}
			for _, name := range tc.accepted {
				if _, ok := set.Tasks[name]; !ok {
					t.Errorf("%s not delivered: %v", name, set.Invalid[name])
				}
			}
			if len(kept) != len(set.Tasks) {
				t.Errorf("local copy keeps %v, want the %d delivered", kept, len(set.Tasks))
			}
		})
	}
}

// A local copy holding what the node's policy refuses now (a bomb written
// by hand, a raw_exec spec kept under wider flags) is judged at start: the
// refused entries are dropped from the copy, with why, and the rest
// delivered; read again, nothing of them is left to judge.
func TestDesired_CopyThatFailsIsDroppedNotReadAgain(t *testing.T) {
	dir := t.TempDir()
	set := DesiredSet{Node: "n1", Revision: 9, Tasks: map[string]Desired{
		"bomb": {Name: "bomb", Spec: []byte(bombSpec), ModRevision: 3},
		"pwn":  {Name: "pwn", Spec: []byte(rootShell), ModRevision: 4},
		"ok":   {Name: "ok", Spec: []byte(okSpec), ModRevision: 5},
	}}
	if err := saveDesiredCopy(dir, set); err != nil {
		t.Fatal(err)
	}
	got, err := LoadDesiredCopy(dir, "n1", job.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Tasks) != 1 || got.Tasks["ok"].Spec == nil || !errors.Is(got.Invalid["bomb"], ErrInvalidSpec) ||
		!strings.Contains(got.Invalid["pwn"].Error(), "--allow-remote-drivers") {
		t.Fatalf("copy judged: tasks %v, invalid %v", sortedKeys(got.Tasks), got.Invalid)
	}
	// The watcher's start drops them from the file: a node without etcd
	// never reads the bomb again.
	cli := dial(t, "http://127.0.0.1:"+itoa(etcdtest.FreePort(t)))
	w := newWatcher(cli, mustKeys(t), "n1", dir, job.Policy{}, nopLog(), Hooks{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	select {
	case s := <-w.out:
		if !s.FromCopy || len(s.Tasks) != 1 || len(s.Invalid) != 2 {
			t.Errorf("set from the copy: tasks %v, invalid %v", sortedKeys(s.Tasks), s.Invalid)
		}
	case <-ctxT(t).Done():
		t.Fatal("no set from the copy")
	}
	cancel()
	<-done
	if kept := copyNames(t, dir); len(kept) != 1 || kept[0] != "ok" {
		t.Errorf("local copy after start keeps %v, want only ok", kept)
	}
}
