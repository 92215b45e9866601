package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// What status shows of an entry (statusOf, pure): each allocation's copy
// stands where its tasks and its policies put it, and the entry where its
// worst copy does.

func TestStatus_CopyStandings(t *testing.T) {
	noReschedule := func(t *fsm.Task) { t.Spec.Alloc.Reschedule = &fsm.ReschedulePolicy{} }
	spent := func(t *fsm.Task) { t.Restarts = 2 }
	readiness := func(ready bool) func(*fsm.Task) {
		return func(t *fsm.Task) { t.Spec.Readiness, t.Ready = fsm.ReadinessHTTP, ready }
	}
	due := func(at int64) func(*fsm.Task) { return func(t *fsm.Task) { t.Spec.Alloc.NotBefore = at } }
	cases := []struct {
		name   string
		cv     CopyView
		want   Standing
		reason string // a word of its reason
		since  bool   // since set (down)
		next   bool   // next attempt set (restarting)
	}{
		{"not recorded", CopyView{IDs: []string{"web-1"}}, StandingStarting, "", false, false},
		{"recorded in part", func() CopyView {
			c := copyIn("web-1", fsm.StateRunning)
			c.IDs, c.Missing = []string{"web-1", "side-1"}, []string{"side-1"}
			return c
		}(), StandingStarting, "", false, false},
		{"due later", copyIn("web-1", fsm.StateCreated, due(now+int64(time.Minute))), StandingRestarting, "", false, true},
		{"due now", copyIn("web-1", fsm.StateCreated, due(now)), StandingStarting, "", false, false},
		{"due a moment ago", copyIn("web-1", fsm.StateCreated, due(now-1)), StandingStarting, "", false, false},
		{"launching", copyIn("web-1", fsm.StateLaunching), StandingStarting, "", false, false},
		{"running", copyIn("web-1", fsm.StateRunning), StandingRunning, "", false, false},
		{"running, not ready", copyIn("web-1", fsm.StateRunning, readiness(false)), StandingRunning, "", false, false},
		{"ready", copyIn("web-1", fsm.StateRunning, readiness(true)), StandingReady, "", false, false},
		{"failed, restarts spent, rescheduled later", copyIn("web-1", fsm.StateExited, spent), StandingRestarting, "exited with code 3", false, true},
		{"failed, nothing to follow", copyIn("web-1", fsm.StateExited, spent, noReschedule), StandingDown, "allows no reschedule", true, false},
		{"stopped on request", copyIn("web-1", fsm.StateStopped), StandingStopped, "", false, false},
		{"completed", copyIn("web-1", fsm.StateExited, func(t *fsm.Task) { t.Exit.Code, t.Spec.Restart.OnSuccess = 0, false }), StandingCompleted, "", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := view([]Declared{webDecl("d1")}, []store.Desired{webRecord("d1", c.cv.IDs...)}, copies(c.cv))
			st := statusOf(v, Decide(v))
			e, ok := st.Entry("web")
			if !ok {
				t.Fatalf("no entry: %+v", st)
			}
			if e.Standing != c.want || !strings.Contains(e.Reason, c.reason) || e.Since.IsZero() == c.since || e.NextAttempt.IsZero() == c.next {
				t.Errorf("%+v\nwant %s, reason with %q, since %v, next attempt %v", e, c.want, c.reason, c.since, c.next)
			}
			if c.next && !e.NextAttempt.After(time.Unix(0, now)) {
				t.Errorf("next attempt %v is not after now", e.NextAttempt)
			}
			if e.Origin != "dir" || e.Task != "web-1" {
				t.Errorf("origin %q, task %q", e.Origin, e.Task)
			}
		})
	}
}

// An entry stands where its worst copy does: refused, down, starting,
// restarting, running, ready, stopped, completed, in that order.
func TestStatus_EntryStandsWhereItsWorstCopyDoes(t *testing.T) {
	spent := func(t *fsm.Task) { t.Restarts = 2 }
	noReschedule := func(t *fsm.Task) { t.Spec.Alloc.Reschedule = &fsm.ReschedulePolicy{} }
	in := func(alloc string, cv CopyView) CopyView {
		for i := range cv.Tasks {
			cv.Tasks[i].Spec.Alloc.ID = alloc
		}
		return cv
	}
	down := copyIn("web-1", fsm.StateExited, spent, noReschedule)
	restarting := copyIn("web-1", fsm.StateExited, spent)
	running := copyIn("web-2", fsm.StateRunning)
	starting := copyIn("web-2", fsm.StateLaunching)
	for _, c := range []struct {
		name string
		a, b CopyView
		want Standing
	}{
		{"down and running", down, running, StandingDown},
		{"running and down", running, down, StandingDown},
		{"restarting and running", restarting, running, StandingRestarting},
		{"starting and restarting", restarting, starting, StandingStarting},
		{"running and running", running, copyIn("web-1", fsm.StateRunning), StandingRunning},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := in("a1", c.a), in("a2", c.b)
			rec := webRecord("d1", a.IDs...)
			rec.Allocs = append(rec.Allocs, store.DesiredAlloc{Group: "web", Index: 1, ID: "a2", Tasks: b.IDs})
			v := view([]Declared{webDecl("d1")}, []store.Desired{rec}, map[string]CopyView{"a1": a, "a2": b})
			e, _ := statusOf(v, Decide(v)).Entry("web")
			if e.Standing != c.want {
				t.Errorf("%s: %+v, want %s", c.name, e, c.want)
			}
			if (e.Standing == StandingDown) == e.Since.IsZero() || (e.Standing == StandingRestarting) == e.NextAttempt.IsZero() {
				t.Errorf("since %v, next attempt %v for %s", e.Since, e.NextAttempt, e.Standing)
			}
		})
	}
}

// Entries of every origin, and of files refused before their name was
// read, each once.
func TestStatus_OriginsAndRefusals(t *testing.T) {
	enabled := store.Desired{Name: "api", Source: store.SourceEnabled, File: "/home/me/api.hcl", Digest: "e1",
		Allocs: []store.DesiredAlloc{{Group: "api", ID: "a9", Tasks: []string{"api-1"}}}}
	fed := store.Desired{Name: "batch", Source: store.SourceDir, File: feedDir + "/batch", Digest: "f1"}
	v := view([]Declared{webDecl("d1")}, []store.Desired{enabled, fed}, nil)
	v.FeedDir = feedDir
	v.Enabled = map[string]Declared{"api": {Name: "api", Source: store.SourceEnabled, File: enabled.File, Digest: "e1", Err: "template source /etc/x is outside ... --allow-read"}}
	v.Files = append(v.Files, Declared{Name: "batch", Source: store.SourceDir, File: fed.File, Digest: "f1"})
	v.Problems = []FileProblem{{File: cfgDir + "/broken.nomad", Err: errString("broken.nomad:3: error")}}
	st := statusOf(v, Decide(v))
	want := map[string][2]string{"web": {"dir", string(StandingStarting)}, "api": {"enable", string(StandingRefused)},
		"batch": {"etcd", string(StandingStarting)}, "broken": {"dir", string(StandingRefused)}}
	if len(st.Entries) != len(want) {
		t.Fatalf("%d entries: %+v", len(st.Entries), st.Entries)
	}
	for _, e := range st.Entries {
		w, ok := want[e.Name]
		if !ok || e.Origin != w[0] || string(e.Standing) != w[1] {
			t.Errorf("%s: %s, %s; want %v", e.Name, e.Origin, e.Standing, w)
		}
		if e.Standing == StandingRefused && e.Reason == "" {
			t.Errorf("%s refused with no reason", e.Name)
		}
	}
}

// An entry of several copies says the soonest of their next attempts
// (restarting: when something of it starts again) and the latest of their
// ends (down: since when nothing of it runs), whichever copy comes first.
func TestStatus_EntryTimesAreItsCopiesSoonestAndLatest(t *testing.T) {
	spent := func(t *fsm.Task) { t.Restarts = 2 }
	noReschedule := func(t *fsm.Task) { t.Spec.Alloc.Reschedule = &fsm.ReschedulePolicy{} }
	endedAgo := func(d time.Duration) func(*fsm.Task) {
		return func(t *fsm.Task) { t.UpdatedAt, t.Exit.At = now-int64(d), now-int64(d) }
	}
	in := func(alloc string, cv CopyView) CopyView {
		for i := range cv.Tasks {
			cv.Tasks[i].Spec.Alloc.ID = alloc
		}
		return cv
	}
	for _, c := range []struct {
		name   string
		a, b   CopyView
		want   Standing
		latest bool // the entry's time is the later of the two copies' (else the sooner)
	}{
		{"restarting: the soonest next attempt", copyIn("web-1", fsm.StateExited, spent, endedAgo(time.Second)), copyIn("web-2", fsm.StateExited, spent, endedAgo(20*time.Second)), StandingRestarting, false},
		{"restarting, the other order", copyIn("web-1", fsm.StateExited, spent, endedAgo(20*time.Second)), copyIn("web-2", fsm.StateExited, spent, endedAgo(time.Second)), StandingRestarting, false},
		{"down: the latest end", copyIn("web-1", fsm.StateExited, spent, noReschedule, endedAgo(time.Second)), copyIn("web-2", fsm.StateExited, spent, noReschedule, endedAgo(20*time.Second)), StandingDown, true},
		{"down, the other order", copyIn("web-1", fsm.StateExited, spent, noReschedule, endedAgo(20*time.Second)), copyIn("web-2", fsm.StateExited, spent, noReschedule, endedAgo(time.Second)), StandingDown, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := in("a1", c.a), in("a2", c.b)
			rec := webRecord("d1", a.IDs...)
			rec.Allocs = append(rec.Allocs, store.DesiredAlloc{Group: "web", Index: 1, ID: "a2", Tasks: b.IDs})
			v := view([]Declared{webDecl("d1")}, []store.Desired{rec}, map[string]CopyView{"a1": a, "a2": b})
			e, _ := statusOf(v, Decide(v)).Entry("web")
			if e.Standing != c.want {
				t.Fatalf("%+v, want %s", e, c.want)
			}
			_, _, sinceA, nextA := copyStanding(a, v)
			_, _, sinceB, nextB := copyStanding(b, v)
			got, ta, tb := e.NextAttempt, nextA, nextB
			if c.want == StandingDown {
				got, ta, tb = e.Since, sinceA, sinceB
			}
			if ta.Equal(tb) || ta.IsZero() || tb.IsZero() {
				t.Fatalf("the copies' times do not tell the rule: %v and %v", ta, tb)
			}
			want := ta
			if ta.After(tb) != c.latest {
				want = tb
			}
			if !got.Equal(want) {
				t.Errorf("the entry's time %v, want %v (of the copies' %v and %v)", got, want, ta, tb)
			}
		})
	}
}
