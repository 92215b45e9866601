package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/job"
)

// webHCL is a task file a node runs (its key's name its task's): the
// node judges every spec before it keeps it.
const webHCL = `task "web" {
  driver = "raw_exec"
  config {
    command = "/bin/sleep"
    args    = ["300"]
  }
}
`

// nextSet waits for the next desired set the node delivers.
func nextSet(t *testing.T, n *Node) DesiredSet {
	t.Helper()
	select {
	case s := <-n.Desired():
		return s
	case <-ctxT(t).Done():
		t.Fatal("no desired set delivered")
	}
	return DesiredSet{}
}

// setWith waits until the node delivers a set for which ok holds.
func setWith(t *testing.T, n *Node, ok func(DesiredSet) bool) DesiredSet {
	t.Helper()
	for {
		if s := nextSet(t, n); ok(s) {
			return s
		}
	}
}

func TestDesired_StartChangeStopAreDelivered(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir))
	runNode(t, n)
	f, _ := NewFleet(cli, "")
	if s := setWith(t, n, func(s DesiredSet) bool { return !s.FromCopy }); len(s.Tasks) != 0 {
		t.Fatalf("first set %+v, want empty", s)
	}
	rev, err := f.Start(ctxT(t), "n1", "web", []byte(webHCL), false)
	if err != nil {
		t.Fatal(err)
	}
	s := setWith(t, n, func(s DesiredSet) bool { return s.Revision >= rev })
	if d, ok := s.Tasks["web"]; !ok || string(d.Spec) != webHCL || d.ModRevision != rev {
		t.Fatalf("set after start: %+v", s)
	}
	// The same file again is no change; another file needs replace.
	if _, err := f.Start(ctxT(t), "n1", "web", []byte(webHCL), false); err != nil {
		t.Errorf("start of the same file again: %v", err)
	}
	changed := strings.Replace(webHCL, "300", "400", 1)
	if _, err := f.Start(ctxT(t), "n1", "web", []byte(changed), false); !errors.Is(err, ErrDesiredExists) {
		t.Errorf("start of another file under a desired name: %v, want ErrDesiredExists", err)
	}
	rev2, err := f.Start(ctxT(t), "n1", "web", []byte(changed), true)
	if err != nil {
		t.Fatal(err)
	}
	s = setWith(t, n, func(s DesiredSet) bool { return s.Revision >= rev2 })
	if d := s.Tasks["web"]; string(d.Spec) != changed || d.ModRevision != rev2 {
		t.Fatalf("set after replace: %+v", s)
	}
	if err := f.Stop(ctxT(t), "n1", "web"); err != nil {
		t.Fatal(err)
	}
	s = setWith(t, n, func(s DesiredSet) bool { _, ok := s.Tasks["web"]; return !ok })
	if len(s.Tasks) != 0 {
		t.Fatalf("set after stop: %+v", s)
	}
	if err := f.Stop(ctxT(t), "n1", "web"); !errors.Is(err, ErrNotDesired) {
		t.Errorf("stop of a task not desired: %v, want ErrNotDesired", err)
	}
}

func TestDesired_LocalCopyRunsWhatTheNodeWasLastToldWithoutEtcd(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := t.TempDir()
	src := openStore(t, dir)
	n := newTestNode(t, cli, "n1", dir, src)
	stop := runNode(t, n)
	f, _ := NewFleet(cli, "")
	rev, err := f.Start(ctxT(t), "n1", "web", []byte(webHCL), false)
	if err != nil {
		t.Fatal(err)
	}
	setWith(t, n, func(s DesiredSet) bool { return s.Revision >= rev })
	stop()
	path := filepath.Join(dir, "cluster", desiredCopy)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("local copy %s: %v, %v; want a 0600 file", path, st, err)
	}
	// A node that boots while etcd is unreachable.
	down := dial(t, "http://127.0.0.1:"+itoa(etcdtest.FreePort(t)))
	n2 := newTestNode(t, down, "n1", dir, src)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = n2.Run(ctx) }()
	s := nextSet(t, n2)
	if !s.FromCopy || string(s.Tasks["web"].Spec) != webHCL || s.Revision < rev {
		t.Fatalf("set at boot without etcd: %+v, want the copy with web", s)
	}
}

func TestDesired_UntrustedKeysAreRefusedNotRun(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	n := newTestNode(t, cli, "n1", dir, openStore(t, dir))
	runNode(t, n)
	bad := map[string]string{
		"../escape": webHCL,
		".hidden":   webHCL,
		"nul":       "task \"x\" {\x00}",
		"binary":    "\xff\xfe",
		"not-hcl":   "task web { driver = ",
		"empty":     "",
		"too-big":   strings.Repeat("#", MaxSpecBytes+1),
		"sub/dir":   webHCL,
		"web":       webHCL,
	}
	var rev int64
	for name, v := range bad {
		resp, err := cli.Put(ctxT(t), "/tether/desired/n1/"+name, v)
		if err != nil {
			t.Fatal(err)
		}
		rev = max(rev, resp.Header.Revision)
	}
	s := setWith(t, n, func(s DesiredSet) bool { return s.Revision >= rev })
	if len(s.Tasks) != 1 || s.Tasks["web"].Spec == nil {
		t.Errorf("tasks %v, want only web", sortedKeys(s.Tasks))
	}
	if len(s.Invalid) != len(bad)-1 {
		t.Errorf("refused %v, want every other key", sortedKeys(s.Invalid))
	}
	for name, err := range s.Invalid {
		if !errors.Is(err, ErrInvalidSpec) && !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q refused with %v, want ErrInvalidSpec or ErrInvalidName", name, err)
		}
	}
}

func TestDesired_CompactedWatchIsListedAgain(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	w := newWatcher(cli, mustKeys(t), "n1", filepath.Join(dir, "cluster"), rawExecAllowed, nopLog(), Hooks{})
	if err := privateDir(w.dir); err != nil {
		t.Fatal(err)
	}
	// The watcher lists at a revision, then (before its watch starts)
	// the history it would resume from is compacted away.
	gate, reached := make(chan struct{}), make(chan int64, 1)
	held := false
	w.hooks.Crash = func(p string) {
		if p == CrashDesiredAfterCopy && !held {
			held = true
			set, err := loadDesiredCopy(w.dir, "n1", rawExecAllowed)
			if err != nil {
				t.Error(err)
			}
			reached <- set.Revision
			<-gate
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx)
	listed := <-reached
	var rev int64
	for i := range 5 {
		resp, err := cli.Put(ctxT(t), "/tether/desired/n1/web", strings.Replace(webHCL, "300", itoa(i), 1))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctxT(t), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	close(gate)
	for {
		select {
		case s := <-w.out:
			if s.Revision >= rev {
				if !strings.Contains(string(s.Tasks["web"].Spec), `"4"`) {
					t.Fatalf("set after compaction: %q", s.Tasks["web"].Spec)
				}
				return
			}
		case <-ctxT(t).Done():
			t.Fatalf("no set past the compaction (listed at %d)", listed)
		}
	}
}

func TestValidateSpec_Rules(t *testing.T) {
	for _, c := range []struct {
		name, spec string
		ok         bool
	}{
		{"web", webHCL, true},
		{"web", "", false},
		{"we b", webHCL, false},
		{"web", "task {", false},
		{"web", "a = \"\x00\"", false},
		{"web", strings.Repeat(" ", MaxSpecBytes+1), false},
	} {
		if err := ValidateSpec(c.name, []byte(c.spec)); (err == nil) != c.ok {
			t.Errorf("ValidateSpec(%q, %.20q) = %v, want ok %v", c.name, c.spec, err, c.ok)
		}
	}
}

func TestLoadDesiredCopy_RefusesAnotherNodesOrAnUnsafeCopy(t *testing.T) {
	dir := t.TempDir()
	set := DesiredSet{Node: "n1", Revision: 7, Tasks: map[string]Desired{"web": {Name: "web", Spec: []byte(webHCL), ModRevision: 5}}}
	if err := saveDesiredCopy(dir, set); err != nil {
		t.Fatal(err)
	}
	got, err := loadDesiredCopy(dir, "n1", rawExecAllowed)
	if err != nil || got.Revision != 7 || string(got.Tasks["web"].Spec) != webHCL || !got.FromCopy {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if _, err := loadDesiredCopy(dir, "n2", rawExecAllowed); !errors.Is(err, ErrLocalCopy) {
		t.Errorf("another node's copy: %v, want ErrLocalCopy", err)
	}
	if err := os.Chmod(filepath.Join(dir, desiredCopy), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := loadDesiredCopy(dir, "n1", rawExecAllowed); !errors.Is(err, ErrLocalCopy) {
		t.Errorf("a world-writable copy: %v, want ErrLocalCopy", err)
	}
	_ = time.Second
}

// rawExecAllowed is a node's policy that lets etcd's specs use raw_exec,
// as these tests' specs do.
var rawExecAllowed = job.Policy{AllowRemoteDrivers: []string{"exec", "raw_exec"}}
