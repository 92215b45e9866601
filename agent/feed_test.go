package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

func TestNewFeed_RefusesANameThatCouldBeAHostDirectory(t *testing.T) {
	for _, dir := range []string{"/etc/tether", "etcd:/a/", "etcd:/a/../b", ""} {
		if _, err := NewFeed(dir); err == nil {
			t.Errorf("NewFeed(%q) accepted", dir)
		}
	}
	if f, err := NewFeed(feedDir); err != nil || f.File("web") != feedDir+"/web" {
		t.Fatalf("NewFeed(%q) = %v, %v", feedDir, f, err)
	}
}

// An agent with a feed converges it as it converges its config dir, with
// real executors and tasks: a task set starts, a changed spec replaces it,
// a task no longer set stops; and every append its driver makes is told
// to Config.Appended.
func TestAgent_FeedConvergesAsTheConfigDirDoes(t *testing.T) {
	dir := stateDir(t)
	feed, err := NewFeed(feedDir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	appended := map[string]int{}
	// (raw_exec from the feed by the operator's word: these are raw_exec
	// tasks; TestAgent_FeedHoldsTheNodesRemoteDrivers is the default's.)
	a := openAgent(t, Config{StateDir: dir, Feed: feed, AllowRemoteDrivers: []string{"exec", "raw_exec"}, Appended: func(task string) {
		mu.Lock()
		appended[task]++
		mu.Unlock()
	}})
	c := serveAgent(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	await := func(what string, ok func(Entry, bool) bool) Entry {
		t.Helper()
		var last Entry
		err := c.WatchStatus(ctx, func(s Status) bool {
			e, found := s.Entry("web")
			last = e
			return ok(e, found)
		})
		if err != nil {
			t.Fatalf("waiting for %s: %v (last %+v)", what, err, last)
		}
		return last
	}
	// Before the feed is set its state is unknown: the first round's
	// status says so.
	var before Status
	err = c.WatchStatus(ctx, func(s Status) bool {
		before = s
		return s.Generation > 0
	})
	if err != nil || !strings.Contains(strings.Join(before.Problems, "\n"), "not known yet") {
		t.Errorf("status before the feed is set: %+v, %v", before, err)
	}

	text := []byte(taskHCL("web", dir, 3, ""))
	feed.Set(map[string]FeedEntry{"web": {Text: text}}, nil)
	first := await("web running", func(e Entry, ok bool) bool { return ok && e.State == fsm.StateRunning && !e.Pending })
	if first.File != feedDir+"/web" || first.Source != store.SourceDir || first.Origin != "etcd" {
		t.Errorf("entry = %+v; want it declared by %s/web", first, feedDir)
	}

	feed.Set(map[string]FeedEntry{"web": {Text: []byte(taskHCL("web", dir, 3, `env { V = "2" }`))}}, nil)
	second := await("web replaced", func(e Entry, ok bool) bool {
		return ok && e.Task != first.Task && e.State == fsm.StateRunning && !e.Pending
	})
	if old, err := a.InspectTask(ctx, first.Task); err != nil || old.Task.State != fsm.StateStopped {
		t.Errorf("the replaced task %s: %+v, %v; want stopped", first.Task, old.Task.State, err)
	}
	// A file the agent refuses (it reads with its own allow lists) is
	// shown refused, and what runs is left as it is.
	feed.Set(map[string]FeedEntry{"web": {Text: []byte(taskHCL("web", dir, 3, "template {\n source = \"/etc/hostname\"\n destination = \"local/h\"\n}"))}}, nil)
	refused := await("web refused", func(e Entry, ok bool) bool { return ok && e.Standing == StandingRefused })
	if !strings.Contains(refused.Reason, "--allow-read") || refused.Task != second.Task {
		t.Errorf("a refused file: %+v", refused)
	}
	if t2, err := a.InspectTask(ctx, second.Task); err != nil || t2.Task.State != fsm.StateRunning {
		t.Errorf("the task of a refused file: %+v, %v; want it left running", t2.Task.State, err)
	}

	feed.Set(nil, nil)
	await("web forgotten", func(_ Entry, ok bool) bool { return !ok })
	if t2, err := a.InspectTask(ctx, second.Task); err != nil || t2.Task.State != fsm.StateStopped {
		t.Errorf("the task %s no longer declared: %+v, %v; want stopped", second.Task, t2.Task.State, err)
	}
	vs, err := a.Versions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range vs {
		if appended[v.Task] == 0 {
			t.Errorf("task %s has %d events, and none was told to Appended", v.Task, v.Version)
		}
		evs, err := a.LoadFrom(ctx, v.Task, 1, 1000)
		if err != nil || uint64(len(evs)) != v.Version {
			t.Errorf("LoadFrom(%s) = %d events, %v; want %d", v.Task, len(evs), err, v.Version)
		}
	}
	if len(vs) != 2 {
		t.Errorf("the store holds %d tasks, want 2 (the first and its replacement)", len(vs))
	}
}

// A feed's entry (a spec from etcd) is read under the node's policy for
// remote specs by the agent itself, whatever its feed checked before: a
// raw_exec spec is refused naming its driver and --allow-remote-drivers
// by default, and runs nothing; an exec task's pid_mode = "host" is
// refused naming --allow-host-namespaces. The same raw_exec text from the
// config dir (the operator's own file) runs.
func TestAgent_FeedHoldsTheNodesRemoteDrivers(t *testing.T) {
	dir := stateDir(t)
	conf := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTaskFile(t, filepath.Join(conf, "local.hcl"), taskHCL("local", dir, 3, ""))
	feed, err := NewFeed(feedDir)
	if err != nil {
		t.Fatal(err)
	}
	a := openAgent(t, Config{StateDir: dir, ConfigDir: conf, Feed: feed})
	c := serveAgent(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	peek := "task \"peek\" {\n  driver = \"exec\"\n  config {\n    command = \"/bin/true\"\n    pid_mode = \"host\"\n  }\n}\n"
	feed.Set(map[string]FeedEntry{"web": {Text: []byte(taskHCL("web", dir, 3, ""))}, "peek": {Text: []byte(peek)}}, nil)
	var last Status
	err = c.WatchStatus(ctx, func(s Status) bool {
		last = s
		w, _ := s.Entry("web")
		p, _ := s.Entry("peek")
		l, _ := s.Entry("local")
		if w.Task != "" || p.Task != "" {
			return true // one of them was started: the checks below say so at once
		}
		return w.Standing == StandingRefused && p.Standing == StandingRefused && l.State == fsm.StateRunning && !l.Pending
	})
	if err != nil {
		t.Fatalf("waiting for web and peek refused, local running: %v (last %+v)", err, last)
	}
	w, _ := last.Entry("web")
	if !strings.Contains(w.Reason, `driver "raw_exec"`) || !strings.Contains(w.Reason, "--allow-remote-drivers") || w.Task != "" {
		t.Errorf("web: %+v; want it refused naming raw_exec and --allow-remote-drivers, no task", w)
	}
	p, _ := last.Entry("peek")
	if !strings.Contains(p.Reason, "pid_mode") || !strings.Contains(p.Reason, "--allow-host-namespaces pid") || p.Task != "" {
		t.Errorf("peek: %+v; want it refused naming pid_mode and --allow-host-namespaces pid, no task", p)
	}
	l, _ := last.Entry("local")
	if _, err := a.StopTask(ctx, l.Task, 0, time.Second); err != nil {
		t.Fatal(err)
	}
}
