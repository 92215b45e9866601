package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

const feedDir = "etcd:/tether/desired/n1"

func feedRecord(task string) store.Desired {
	r := webRecord(task)
	r.File = feedDir + "/web"
	return r
}

func feedView(files []Declared, recs []store.Desired, tasks ...TaskView) View {
	v := view(files, recs, tasks...)
	v.FeedDir = feedDir
	return v
}

func TestDecide_FeedNotKnownYetLeavesItsTasksAlone(t *testing.T) {
	v := feedView(nil, []store.Desired{feedRecord("web-1")}, taskIn("web-1", fsm.StateRunning))
	v.FeedErr = "the desired state of " + feedDir + " is not known yet"
	p := Decide(v)
	if len(p.Changes)+len(p.Effects) != 0 || !strings.Contains(p.Notes["web"], "left as it is") || len(p.Watch) != 1 {
		t.Fatalf("plan = %+v; want web left running (and watched) with a note", p)
	}
}

func TestDecide_FeedRecordStopsWhenTheFeedNoLongerDeclaresIt(t *testing.T) {
	e := oneEffect(t, Decide(feedView(nil, []store.Desired{feedRecord("web-1")}, taskIn("web-1", fsm.StateRunning))))
	if e.Kind != EffectStop || e.Task != "web-1" {
		t.Fatalf("effect = %+v; want web-1 stopped", e)
	}
}

func TestDecide_FeedRecordIsReplacedWhenItsSpecChanges(t *testing.T) {
	d := Declared{Name: "web", Source: store.SourceDir, File: feedDir + "/web", Spec: webSpec()}
	d.Spec.Args = []string{"--new"}
	e := oneEffect(t, Decide(feedView([]Declared{d}, []store.Desired{feedRecord("web-1")}, taskIn("web-1", fsm.StateRunning))))
	if e.Kind != EffectStop || !strings.Contains(e.Reason, "replaced") {
		t.Fatalf("effect = %+v; want web-1 stopped to be replaced", e)
	}
}

func TestDecide_FeedAndConfigDirRecordsAreEachTheirOwn(t *testing.T) {
	// The feed declares nothing and its state is not known: the config
	// dir's record converges as ever; the feed's is left alone.
	api := webRecord("api-1")
	api.Name, api.File = "api", cfgDir+"/api.hcl"
	apiFile := webFile()
	apiFile.Name, apiFile.File = "api", cfgDir+"/api.hcl"
	api1 := taskIn("api-1", fsm.StateRunning)
	v := feedView([]Declared{apiFile}, []store.Desired{api, feedRecord("web-1")}, api1, taskIn("web-1", fsm.StateRunning))
	v.FeedErr = "not known yet"
	if p := Decide(v); len(p.Changes)+len(p.Effects) != 0 || p.Notes["api"] != "" || p.Notes["web"] == "" {
		t.Fatalf("plan = %+v; want both left running, a note for web only", p)
	}
	// A config dir that is refused leaves its records alone, not the
	// feed's: the feed's record whose declaration is gone is stopped.
	v = feedView(nil, []store.Desired{api, feedRecord("web-1")}, api1, taskIn("web-1", fsm.StateRunning))
	v.DirErr = "agent: unsafe config directory"
	p := Decide(v)
	if len(p.Effects) != 1 || p.Effects[0].Task != "web-1" || p.Effects[0].Kind != EffectStop {
		t.Fatalf("plan = %+v; want web-1 stopped and api-1 left", p)
	}
}

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
	a := openAgent(t, Config{StateDir: dir, Feed: feed, Appended: func(task string) {
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

	spec := sleeper("web", dir)
	feed.Set(map[string]fsm.Spec{"web": spec}, nil)
	first := await("web running", func(e Entry, ok bool) bool { return ok && e.State == fsm.StateRunning && !e.Pending })
	if first.File != feedDir+"/web" || first.Source != store.SourceDir {
		t.Errorf("entry = %+v; want it declared by %s/web", first, feedDir)
	}

	spec.Args = append(spec.Args, "changed")
	feed.Set(map[string]fsm.Spec{"web": spec}, nil)
	second := await("web replaced", func(e Entry, ok bool) bool {
		return ok && e.Task != first.Task && e.State == fsm.StateRunning && !e.Pending
	})
	if old, err := a.InspectTask(ctx, first.Task); err != nil || old.Task.State != fsm.StateStopped {
		t.Errorf("the replaced task %s: %+v, %v; want stopped", first.Task, old.Task.State, err)
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
