package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
)

func TestFleet_StatusShowsADownNodesTasksUnknown(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	f, _ := NewFleet(cli, "")
	// n1 up with two tasks, n2 down with one, n3 up with none.
	dir1, dir2, dir3 := t.TempDir(), t.TempDir(), t.TempDir()
	s1, s2 := openStore(t, dir1), openStore(t, dir2)
	appendAll(t, s1, "a1", lifecycle("web", 0, 0)...)
	appendAll(t, s1, "a2", append(lifecycle("batch", 10, 0), finish(20)...)...)
	appendAll(t, s2, "b1", lifecycle("db", 0, 0)...)
	appendAll(t, s2, "b2", append(lifecycle("migrate", 10, 0), finish(20)...)...)
	runNode(t, newTestNode(t, cli, "n1", dir1, s1))
	n2 := newTestNode(t, cli, "n2", dir2, s2)
	stop2 := runNode(t, n2)
	runNode(t, newTestNode(t, cli, "n3", dir3, openStore(t, dir3)))
	waitMirrored(t, cli, "n1", s1)
	waitMirrored(t, cli, "n2", s2)
	waitStatus(t, cli, "n2")
	lease := n2.Stats(ctxT(t)).Lease
	stop2()
	if _, err := cli.Revoke(ctxT(t), clientv3.LeaseID(lease)); err != nil { // its lease lapses
		t.Fatal(err)
	}
	rows, err := f.Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		id, name := "-", "-"
		if r.Task != nil {
			id, name = r.Task.ID, r.Task.Name
		}
		state := r.StateText()
		if strings.HasPrefix(state, "unknown (node down since ") {
			state = "unknown (node down since …)"
		}
		got = append(got, fmt.Sprintf("%s %s %s %s %s", r.Node, r.Liveness, id, name, state))
	}
	want := []string{
		"n1 up a2 batch exited",
		"n1 up a1 web running",
		"n2 down b1 db unknown (node down since …)",
		"n2 down b2 migrate exited", // a terminal state is final: known even with its node down
		"n3 up - - ",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	if err := json.Unmarshal(b, &objs); err != nil {
		t.Fatal(err)
	}
	down := objs[2]
	if down["node"] != "n2" || down["liveness"] != "down" || down["state"] != "unknown" || down["last_state"] != "running" ||
		down["id"] != "b1" || down["name"] != "db" || down["since"] == nil {
		t.Errorf("down node's task as JSON: %v", down)
	}
	if ended := objs[3]; ended["state"] != "exited" || ended["last_state"] != nil || ended["liveness"] != "down" {
		t.Errorf("down node's ended task as JSON: %v", ended)
	}
	if objs[4]["node"] != "n3" || objs[4]["liveness"] != "up" || objs[4]["id"] != nil || objs[4]["since"] == nil {
		t.Errorf("node without a task as JSON: %v", objs[4])
	}
	if objs[1]["state"] != "running" || objs[1]["liveness"] != "up" {
		t.Errorf("up node's task as JSON: %v", objs[1])
	}
}

// waitStatus waits until node has written its status once.
func waitStatus(t *testing.T, cli *clientv3.Client, node string) {
	t.Helper()
	key := "/tether/node/" + node
	resp, err := cli.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		return
	}
	for wr := range cli.Watch(ctxT(t), key, clientv3.WithRev(resp.Header.Revision+1)) {
		if len(wr.Events) > 0 {
			return
		}
	}
	t.Fatalf("%s wrote no status", node)
}

func TestFleet_NodesShowLivenessAndMirrorLag(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 0)...)
	n := newTestNode(t, cli, "n1", dir, src)
	runNode(t, n)
	waitMirrored(t, cli, "n1", src)
	waitStatus(t, cli, "n1")
	f, _ := NewFleet(cli, "")
	rows, err := f.Nodes(ctxT(t))
	if err != nil || len(rows) != 1 {
		t.Fatalf("nodes: %+v, %v", rows, err)
	}
	r := rows[0]
	if r.Node != "n1" || r.Liveness != Up || r.Tasks != 1 || r.Since.IsZero() || r.Seen.IsZero() {
		t.Errorf("row %+v", r)
	}
	b, _ := json.Marshal(r)
	for _, k := range []string{`"mirror_lag_events":`, `"mirror_lag_seconds":`, `"liveness":"up"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("nodes --json %s lacks %s", b, k)
		}
	}
}

func TestFleet_EventsAndFollowGiveTheNodesEventsOnce(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	dir := t.TempDir()
	src := openStore(t, dir)
	appendAll(t, src, "t1", lifecycle("web", 0, 0)...)
	runNode(t, newTestNode(t, cli, "n1", dir, src))
	waitMirrored(t, cli, "n1", src)
	f, _ := NewFleet(cli, "")
	evs, _, err := f.Events(ctxT(t), "n1", "t1")
	if err != nil || len(evs) != 6 || evs[0].Seq != 1 || evs[0].Spec.Env["TOKEN"] != Redacted {
		t.Fatalf("events: %v, %v", evs, err)
	}
	got := make(chan fsm.Event, 100)
	ended := make(chan error, 1)
	go func() {
		for e, err := range f.Follow(ctxT(t), "n1", "t1", 4) {
			if err != nil {
				ended <- err
				return
			}
			got <- e
		}
		ended <- nil
	}()
	// Follow starts after seq 4, streams what comes, and ends at the
	// terminal state.
	for _, seq := range []uint64{5, 6} {
		if e := <-got; e.Seq != seq {
			t.Fatalf("followed seq %d, want %d", e.Seq, seq)
		}
	}
	appendAll(t, src, "t1", fsm.Event{Type: fsm.EventReattached, Time: t0.UnixNano()})
	appendAll(t, src, "t1", finish(100)...)
	// The stream ends after seq 9: everything it yielded is in got.
	if err := <-ended; err != nil {
		t.Fatalf("follow ended with %v, want the end at the terminal state", err)
	}
	close(got)
	var rest []uint64
	for e := range got {
		rest = append(rest, e.Seq)
	}
	if fmt.Sprint(rest) != "[7 8 9]" {
		t.Fatalf("followed %v after seq 6, want [7 8 9]", rest)
	}
	if _, _, err := f.Events(ctxT(t), "n1", "nope"); !errors.Is(err, ErrUnknownTask) {
		t.Errorf("events of an unknown task: %v", err)
	}
}

func TestResolve_NameRules(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tasks := []TaskRef{
		{Node: "n1", ID: "a1", Name: "web", State: fsm.StateExited, Created: at(1)},
		{Node: "n1", ID: "a2", Name: "web", State: fsm.StateRunning, Created: at(2)},
		{Node: "n1", ID: "a3", Name: "web", State: fsm.StateFailed, Created: at(3)},
		{Node: "n1", ID: "b1", Name: "job", State: fsm.StateExited, Created: at(1)},
		{Node: "n1", ID: "b2", Name: "job", State: fsm.StateFailed, Created: at(5)},
		{Node: "n2", ID: "c1", Name: "web", State: fsm.StateRunning, Created: at(1)},
		{Node: "n2", ID: "c2", Name: "db", State: fsm.StateRunning, Created: at(1)},
		{Node: "n2", ID: "c3", Name: "db", State: fsm.StateRunning, Created: at(2)},
	}
	for _, c := range []struct {
		ref, node, want string
		err             error
	}{
		{"web", "n1", "a2", nil},          // its one live task, not the newer ended one
		{"job", "n1", "b2", nil},          // none live: the most recent
		{"web", "", "", ErrAmbiguous},     // on two nodes
		{"web", "n2", "c1", nil},          // --node picks
		{"db", "n2", "", ErrAmbiguous},    // two live on one node
		{"a1", "", "a1", nil},             // an id
		{"nope", "", "", ErrUnknownTask},  // nothing
		{"web", "n3", "", ErrUnknownTask}, // not on that node
	} {
		got, err := resolve(tasks, c.ref, c.node)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("resolve(%q, %q) = %v, %v; want %v", c.ref, c.node, got.ID, err, c.err)
			}
			continue
		}
		if err != nil || got.ID != c.want {
			t.Errorf("resolve(%q, %q) = %v, %v; want %s", c.ref, c.node, got.ID, err, c.want)
		}
	}
	_, err := resolve(tasks, "web", "")
	if !strings.Contains(fmt.Sprint(err), "a2 on n1") || !strings.Contains(fmt.Sprint(err), "c1 on n2") {
		t.Errorf("ambiguous error %v does not list the candidates", err)
	}
}

func TestFleet_StartRefusesAnUnknownNodeAndBadInput(t *testing.T) {
	cli := dial(t, etcdtest.Embedded(t))
	f, _ := NewFleet(cli, "")
	if _, err := f.Start(ctxT(t), "ghost", "web", []byte(webHCL), false); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("start on a node never seen: %v, want ErrUnknownNode", err)
	}
	if _, err := f.Start(ctxT(t), "../x", "web", []byte(webHCL), false); !errors.Is(err, ErrInvalidNode) {
		t.Errorf("start on a bad node name: %v, want ErrInvalidNode", err)
	}
	if _, err := f.Start(ctxT(t), "n1", "web", []byte("task {"), false); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("start of a broken file: %v, want ErrInvalidSpec", err)
	}
}

func TestLiveRows_EndedTasksOutANodeLeftWithNoneKeepsARow(t *testing.T) {
	row := func(node, id string, st fsm.State) StatusRow {
		r := StatusRow{Node: node, Liveness: Up}
		if id != "" {
			r.Task = &TaskRef{Node: node, ID: id, State: st}
		}
		return r
	}
	rows := []StatusRow{
		row("n1", "a", fsm.StateExited), row("n1", "b", fsm.StateRunning), row("n1", "c", fsm.StateFailed),
		row("n2", "d", fsm.StateExited), row("n2", "e", fsm.StateStopped),
		row("n3", "", 0),
		row("n4", "f", fsm.StateLaunching),
	}
	var got []string
	for _, r := range LiveRows(rows) {
		id := "-"
		if r.Task != nil {
			id = r.Task.ID
		}
		got = append(got, r.Node+":"+id)
	}
	if want := []string{"n1:b", "n2:-", "n3:-", "n4:f"}; !reflect.DeepEqual(got, want) {
		t.Errorf("LiveRows = %v, want %v", got, want)
	}
}
