package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/cluster"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/etcdtest"
	"github.com/tether-fsm/tether/internal/testproc"
)

// The attacks of issue 32 from etcd: a raw_exec spec (which ran its
// command as root) and the 230-byte compute bomb (which killed the agent,
// and again at every start from its local copy).
func trustAttacks(t *testing.T, marker string) map[string]string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"pwn": fmt.Sprintf("task \"pwn\" {\n  driver = \"raw_exec\"\n  config {\n    command = %q\n    args = [%q, %q]\n  }\n}\n", self, sleeperArg, marker),
		"bomb": "task \"bomb\" {\n  driver = \"exec\"\n  config {\n    command = \"/bin/true\"\n" +
			"    args = [format(\"%d\", length(setproduct(range(1024), range(1024), range(1024))))]\n  }\n}\n",
	}
}

// awaitRefused waits until the agent of dir shows every named entry
// refused, from etcd, with no task, and its reason holding what each
// must name.
func awaitRefused(t *testing.T, dir string, ag *runningAgent, want map[string][]string) {
	t.Helper()
	c, err := agent.Dial(ctxT(t), dir, agent.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last agent.Status
	err = c.WatchStatus(ctxT(t), func(st agent.Status) bool {
		last = st
		for name := range want {
			if e, ok := st.Entry(name); !ok || e.Standing != agent.StandingRefused {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("waiting for %v refused: %v; last status %+v; the agent's log:\n%s", want, err, last, ag.log)
	}
	for name, words := range want {
		e, _ := last.Entry(name)
		if e.Origin != "etcd" || len(e.Tasks) != 0 {
			t.Errorf("%s: %+v, want a refusal from etcd with no task", name, e)
		}
		for _, w := range words {
			if !strings.Contains(e.Reason, w) {
				t.Errorf("%s refused for %q, want it naming %q", name, e.Reason, w)
			}
		}
	}
}

// TestAgent_RemoteDriversByTheOperatorsWord: whoever writes a key under a
// node's desired prefix gets no raw_exec unless the node's operator says
// so (--allow-remote-drivers), and no crash of the agent: the raw_exec
// spec is refused naming its driver and the flag, the bomb naming the
// parser's limit; nothing runs, nothing of them is kept in the local
// copy, and the agent keeps serving. A local copy holding both (written
// before, or by hand) is judged again at start, etcd down: the agent
// serves, refuses both, and drops them from the copy. With
// --allow-remote-drivers exec,raw_exec the raw_exec spec runs.
func TestAgent_RemoteDriversByTheOperatorsWord(t *testing.T) {
	ep := etcdtest.Embedded(t)
	cli := dial(t, ep)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testproc.CheckNoLeak(t, dir) })
	marker := fmt.Sprintf("fleet-trust-%d", time.Now().UnixNano())
	t.Cleanup(func() { testproc.CheckNoLeak(t, marker) })
	refusals := map[string][]string{"pwn": {`driver "raw_exec"`, "--allow-remote-drivers"}, "bomb": {"setproduct", "Parse limit exceeded"}}

	// The default: exec alone from etcd (the env's empty value is no list).
	ag := startAgent(t, ep, "n1", dir, []string{"TETHER_ALLOW_REMOTE_DRIVERS="})
	ag.waitRegistered(cli, "n1")
	ag.waitServing()
	prefix := cluster.DefaultPrefix + "desired/n1/"
	for name, spec := range trustAttacks(t, marker) {
		if _, err := cli.Put(ctxT(t), prefix+name, spec); err != nil {
			t.Fatal(err)
		}
	}
	awaitRefused(t, dir, ag, refusals)
	if p := testproc.Marked(marker); len(p) != 0 {
		t.Errorf("a refused spec runs: %v", p)
	}
	copyPath := filepath.Join(dir, "cluster", "desired.json")
	if b, err := os.ReadFile(copyPath); err == nil && (strings.Contains(string(b), "setproduct") || strings.Contains(string(b), marker)) {
		t.Errorf("the local copy keeps a refused spec:\n%s", b)
	}
	ag.stop()
	if tasks := localLog(t, dir); len(tasks) != 0 {
		t.Errorf("refused specs recorded tasks: %v", tasks)
	}

	// Both in the local copy (as an older agent, or a hand, left them),
	// etcd unreachable: the agent judges the copy, serves, drops them.
	var copied struct {
		Node     string           `json:"node"`
		Revision int64            `json:"revision"`
		Tasks    []map[string]any `json:"tasks"`
	}
	copied.Node, copied.Revision = "n1", 1
	for name, spec := range trustAttacks(t, marker) {
		copied.Tasks = append(copied.Tasks, map[string]any{"name": name, "spec": spec, "mod_revision": 1})
	}
	b, err := json.Marshal(copied)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	down := "http://127.0.0.1:" + fmt.Sprint(etcdtest.FreePort(t))
	ag = startAgent(t, down, "n1", dir, []string{"TETHER_ALLOW_REMOTE_DRIVERS="})
	ag.waitServing()
	awaitRefused(t, dir, ag, refusals)
	b, err = os.ReadFile(copyPath)
	if err != nil || strings.Contains(string(b), "setproduct") || strings.Contains(string(b), marker) {
		t.Errorf("the local copy after a start that judged it: %s, %v; want neither spec", b, err)
	}
	if !strings.Contains(ag.log.String(), "dropped from the local copy") {
		t.Errorf("the agent's log does not say why it dropped them:\n%s", ag.log)
	}
	ag.stop()
	if p := testproc.Marked(marker); len(p) != 0 {
		t.Errorf("a refused spec runs: %v", p)
	}

	// The operator's word: raw_exec from etcd, and nothing else changes.
	ag = startAgent(t, ep, "n1", dir, nil, "--allow-remote-drivers", "exec,raw_exec")
	ag.waitRegistered(cli, "n1")
	ag.waitServing()
	mirrored(t, cli, "n1", "pwn", fsm.StateRunning, ag.log)
	awaitRefused(t, dir, ag, map[string][]string{"bomb": refusals["bomb"]})
	if _, err := cli.Delete(ctxT(t), prefix+"pwn"); err != nil {
		t.Fatal(err)
	}
	mirrored(t, cli, "n1", "pwn", fsm.StateStopped, ag.log)
	testproc.CheckGone(t, marker, time.Minute)
	ag.stop()
}

// TestAgent_RemoteDriversFlagRefusedOutsideAllowDrivers: a remote list
// wider than the local one is a usage error naming both flags.
func TestAgent_RemoteDriversFlagRefusedOutsideAllowDrivers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	r := tether(t, "agent", "--node", "n1", "--cluster", "http://127.0.0.1:1", "--state-dir", dir,
		"--allow-drivers", "exec", "--allow-remote-drivers", "raw_exec")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--allow-remote-drivers") || !strings.Contains(r.stderr, "--allow-drivers") {
		t.Errorf("want a usage error naming both flags: %+v", r)
	}
}
