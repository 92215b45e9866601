package cluster

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// parseJob parses a job file's text for placement, failing the test on
// an error.
func parseJob(t testing.TB, text string) *Job {
	t.Helper()
	j, err := ParseJob(JobSpec{File: "job.nomad", Text: text})
	if err != nil {
		t.Fatalf("ParseJob: %v", err)
	}
	return j
}

// jobText is a job of one group of count copies of an exec task asking
// cpu and memory, with extra (constraints, affinities...) in the group.
func jobText(name string, count, cpu, mem int, extra string) string {
	return fmt.Sprintf(`job %q {
  group "g" {
    count = %d
    %s
    task "t" {
      driver = "exec"
      config { command = "/bin/sleep" }
      resources {
        cpu    = %d
        memory = %d
      }
    }
  }
}
`, name, count, extra, cpu, mem)
}

// cand is a live node offering cpu and memory, allowing exec, with meta.
func cand(name string, cpu, mem int, meta ...string) Candidate {
	m := map[string]string{}
	for i := 0; i+1 < len(meta); i += 2 {
		m[meta[i]] = meta[i+1]
	}
	return Candidate{Name: name, Info: NodeInfo{
		Node: name, Attrs: map[string]string{"kernel.name": "linux", "cpu.arch": "amd64", "driver.exec": "1"},
		NodeAttrs: map[string]string{"unique.name": name, "datacenter": "dc1"}, Meta: m,
		Capacity: Resources{CPU: cpu, MemoryMB: mem, Cores: 4}, Drivers: []string{"exec"},
	}}
}

// allCopies lists every copy of every group of j.
func allCopies(j *Job) []CopyID {
	var out []CopyID
	for _, g := range j.Groups {
		for i := range g.Count {
			out = append(out, CopyID{Job: j.Name, Group: g.Group, Index: i})
		}
	}
	return out
}

// perNode counts the choices by node.
func perNode(r Result) map[string]int {
	out := map[string]int{}
	for _, c := range r.Placed {
		out[c.Node]++
	}
	return out
}

func TestPlace_ConstraintOnMetaLandsOnlyOnMatchingNodes(t *testing.T) {
	j := parseJob(t, jobText("web", 6, 100, 100, `constraint {
      attribute = "${meta.tier}"
      value     = "gold"
    }`))
	nodes := []Candidate{cand("n1", 4000, 4000, "tier", "gold"), cand("n2", 4000, 4000, "tier", "silver"), cand("n3", 4000, 4000, "tier", "gold")}
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	if len(r.Unplaced) != 0 {
		t.Fatalf("unplaced %v", r.Unplaced)
	}
	if got := perNode(r); !reflect.DeepEqual(got, map[string]int{"n1": 3, "n3": 3}) {
		t.Errorf("copies per node %v: want 3 on each gold node and none on silver", got)
	}
}

func TestPlace_ReasonNamesTheConstraintAndTheResource(t *testing.T) {
	j := parseJob(t, jobText("big", 3, 100, 3000, `constraint {
      attribute = "${meta.tier}"
      value     = "gold"
    }`))
	nodes := []Candidate{cand("n1", 4000, 4000, "tier", "gold"), cand("n2", 4000, 2000, "tier", "gold"), cand("n3", 4000, 8000, "tier", "silver")}
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n1" {
		t.Fatalf("placed %v: want one copy on n1, the only gold node with 3000 MB", r.Placed)
	}
	if len(r.Unplaced) != 2 {
		t.Fatalf("unplaced %v, want 2", r.Unplaced)
	}
	want := `no node of 3 can hold it: constraint ${meta.tier} = "gold" not met on 1 node; memory exhausted on 2 nodes`
	for _, u := range r.Unplaced {
		if u.Reason != want {
			t.Errorf("%s: reason %q\nwant %q", u.Copy, u.Reason, want)
		}
	}
}

func TestPlace_DriverNotAllowedIsTheReason(t *testing.T) {
	j := parseJob(t, strings.Replace(jobText("raw", 1, 100, 100, ""), `driver = "exec"`, `driver = "raw_exec"`, 1))
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), cand("n2", 4000, 4000)}, Place: allCopies(j)})
	if len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, `driver "raw_exec" not allowed for remote specs on 2 nodes`) {
		t.Fatalf("result %+v: want raw_exec refused on both nodes (they allow exec only)", r)
	}
	n := cand("n3", 4000, 4000)
	n.Info.Drivers = []string{"exec", "raw_exec"}
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), n}, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n3" {
		t.Errorf("placed %v: want n3, which allows raw_exec", r.Placed)
	}
}

func TestPlace_NoNodeUpSaysSo(t *testing.T) {
	j := parseJob(t, jobText("j", 1, 100, 100, ""))
	r := Place(Problem{Job: j, Place: allCopies(j)})
	if len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "no node is up") {
		t.Errorf("result %+v", r)
	}
}

func TestPlace_IneligibleNodeGetsNothingAndIsTheReason(t *testing.T) {
	j := parseJob(t, jobText("j", 2, 100, 100, ""))
	n2 := cand("n2", 4000, 4000)
	n2.Ineligible = "back from lost, held off"
	r := Place(Problem{Job: j, Nodes: []Candidate{n2}, Place: allCopies(j)})
	if len(r.Placed) != 0 || len(r.Unplaced) != 2 || !strings.Contains(r.Unplaced[0].Reason, "back from lost, held off (1 node)") {
		t.Errorf("result %+v", r)
	}
	r = Place(Problem{Job: j, Nodes: []Candidate{n2, cand("n1", 4000, 4000)}, Place: allCopies(j)})
	if got := perNode(r); !reflect.DeepEqual(got, map[string]int{"n1": 2}) {
		t.Errorf("copies per node %v: the held-off node must get none", got)
	}
}

func TestPlace_CapacityCountsEveryJobsPlacedCopies(t *testing.T) {
	j := parseJob(t, jobText("j", 2, 1000, 1000, ""))
	other := Placed{Job: "other", Group: "g", Index: 0, Node: "n1", Use: Resources{CPU: 3500, MemoryMB: 100}}
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), cand("n2", 1500, 1500)}, Placed: []Placed{other}, Place: allCopies(j)})
	if got := perNode(r); !reflect.DeepEqual(got, map[string]int{"n2": 1}) || len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "cpu exhausted on 2 nodes") {
		t.Errorf("placed %v unplaced %v: n1 has 500 MHz left (another job holds 3500), n2 fits one copy", r.Placed, r.Unplaced)
	}
}

func TestPlace_ExactFitIsFeasibleOneMoreIsNot(t *testing.T) {
	j := parseJob(t, jobText("j", 2, 1000, 500, ""))
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 2000, 1000)}, Place: allCopies(j)})
	if len(r.Placed) != 2 {
		t.Errorf("placed %v: two copies fit a node exactly (2000 MHz, 1000 MB)", r.Placed)
	}
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 1999, 1000)}, Place: allCopies(j)})
	if len(r.Placed) != 1 || len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "cpu exhausted") {
		t.Errorf("result %+v: 1 MHz short is exhausted", r)
	}
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 2000, 999)}, Place: allCopies(j)})
	if len(r.Placed) != 1 || len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "memory exhausted") {
		t.Errorf("result %+v: 1 MB short is exhausted", r)
	}
}

func TestPlace_NomadDefaultsForATaskWithoutResources(t *testing.T) {
	j := parseJob(t, `job "j" {
  group "g" {
    task "a" {
      driver = "exec"
      config { command = "/bin/true" }
    }
    task "b" {
      driver = "exec"
      config { command = "/bin/true" }
      resources {
        cores = 2
      }
    }
  }
}`)
	if got, want := j.Groups[0].Ask, (Resources{CPU: DefaultTaskCPU, MemoryMB: 2 * DefaultTaskMemory, Cores: 2}); got != want {
		t.Fatalf("ask %v, want %v: a task with no cpu and no cores asks 100 MHz, one without memory 300 MB", got, want)
	}
	// Cores are their share of the node's CPU too: 2 of 4 cores of 4000 MHz
	// is 2000 MHz, plus the other task's 100.
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000)}, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Use != (Resources{CPU: 2100, MemoryMB: 600, Cores: 2}) {
		t.Errorf("placed %+v", r.Placed)
	}
	// 2 of 4 cores of 198 MHz are 99 MHz: with the other task's 100, one
	// MHz too many; of 199 MHz, an exact fit.
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 198, 4000)}, Place: allCopies(j)})
	if len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "cpu exhausted") {
		t.Errorf("result %+v: 2 cores of 4 of 198 MHz leave too little for the other task", r)
	}
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 199, 4000)}, Place: allCopies(j)})
	if len(r.Placed) != 1 {
		t.Errorf("result %+v: 2 cores of 4 of 199 MHz and the other task's 100 fit exactly", r)
	}
	n := cand("n1", 8000, 4000)
	n.Info.Capacity.Cores = 1
	r = Place(Problem{Job: j, Nodes: []Candidate{n}, Place: allCopies(j)})
	if len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "cores exhausted") {
		t.Errorf("result %+v: 2 cores do not fit a 1-core node", r)
	}
}

func TestPlace_AntiAffinitySpreadsCopiesOverEqualNodes(t *testing.T) {
	j := parseJob(t, jobText("j", 3, 100, 100, ""))
	nodes := []Candidate{cand("n1", 4000, 4000), cand("n2", 4000, 4000), cand("n3", 4000, 4000)}
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	if got := perNode(r); !reflect.DeepEqual(got, map[string]int{"n1": 1, "n2": 1, "n3": 1}) {
		t.Errorf("copies per node %v: three copies on three equal nodes go one each", got)
	}
}

func TestPlace_BinPackingPrefersTheFullerNode(t *testing.T) {
	j := parseJob(t, jobText("j", 1, 500, 500, ""))
	busy := Placed{Job: "other", Group: "g", Node: "n2", Use: Resources{CPU: 2000, MemoryMB: 2000}}
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), cand("n2", 4000, 4000)}, Placed: []Placed{busy}, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n2" {
		t.Errorf("placed %v: bin packing puts it on n2, which another job already half fills", r.Placed)
	}
}

func TestPlace_DistinctHostsJobAndGroupScopes(t *testing.T) {
	j := parseJob(t, jobText("j", 3, 100, 100, `constraint {
      distinct_hosts = true
    }`))
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), cand("n2", 4000, 4000)}, Place: allCopies(j)})
	if len(r.Placed) != 2 || len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "distinct_hosts (group g) excluded 2 nodes") {
		t.Errorf("result %+v: two nodes hold two distinct copies; the third has none", r)
	}
	// At the job's level it counts every group's copies.
	jj := parseJob(t, `job "jj" {
  constraint {
    distinct_hosts = true
  }
  group "a" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
  group "b" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
	r = Place(Problem{Job: jj, Nodes: []Candidate{cand("n1", 4000, 4000)}, Place: allCopies(jj)})
	if len(r.Placed) != 1 || len(r.Unplaced) != 1 || !strings.Contains(r.Unplaced[0].Reason, "distinct_hosts (job jj)") {
		t.Errorf("result %+v: the job's distinct_hosts keeps group b off the node holding group a", r)
	}
}

func TestPlace_DistinctPropertyLimit(t *testing.T) {
	j := parseJob(t, jobText("j", 4, 100, 100, `constraint {
      operator  = "distinct_property"
      attribute = "${meta.rack}"
      value     = "2"
    }`))
	nodes := []Candidate{cand("n1", 4000, 4000, "rack", "r1"), cand("n2", 4000, 4000, "rack", "r1"), cand("n3", 4000, 4000, "rack", "r2"), cand("n4", 4000, 4000)}
	r := Place(Problem{Job: j, Nodes: nodes, Place: append(allCopies(j), CopyID{Job: "j", Group: "g", Index: 4})})
	racks := map[string]int{}
	for _, c := range r.Placed {
		racks[map[string]string{"n1": "r1", "n2": "r1", "n3": "r2"}[c.Node]]++
	}
	if !reflect.DeepEqual(racks, map[string]int{"r1": 2, "r2": 2}) || len(r.Unplaced) != 1 {
		t.Errorf("per rack %v, unplaced %v: at most 2 copies a rack, none on the node without one", racks, r.Unplaced)
	}
}

func TestPlace_AffinityPrefersAndAntiAffinityAvoids(t *testing.T) {
	nodes := []Candidate{cand("n1", 4000, 4000, "ssd", "no"), cand("n2", 4000, 4000, "ssd", "yes")}
	j := parseJob(t, jobText("j", 1, 100, 100, `affinity {
      attribute = "${meta.ssd}"
      value     = "yes"
      weight    = 100
    }`))
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n2" {
		t.Errorf("placed %v: the affinity prefers n2", r.Placed)
	}
	j = parseJob(t, jobText("j", 1, 100, 100, `affinity {
      attribute = "${meta.ssd}"
      value     = "no"
      weight    = -100
    }`))
	r = Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n2" {
		t.Errorf("placed %v: a negative weight avoids n1", r.Placed)
	}
}

func TestPlace_SpreadByTargetPercentages(t *testing.T) {
	j := parseJob(t, jobText("j", 10, 10, 10, `spread {
      attribute = "${meta.rack}"
      weight    = 100
      target "r1" {
        percent = 70
      }
      target "r2" {
        percent = 30
      }
    }`))
	nodes := []Candidate{cand("a", 8000, 8000, "rack", "r1"), cand("b", 8000, 8000, "rack", "r2"), cand("c", 8000, 8000, "rack", "r2")}
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	got := perNode(r)
	if got["a"] != 7 || got["b"]+got["c"] != 3 {
		t.Errorf("copies per node %v: want 7 on rack r1 and 3 on r2", got)
	}
}

func TestPlace_EvenSpreadOverDatacenters(t *testing.T) {
	j := parseJob(t, jobText("j", 6, 10, 10, `spread {
      attribute = "${node.datacenter}"
    }`))
	nodes := []Candidate{cand("a1", 8000, 8000), cand("a2", 8000, 8000), cand("b1", 8000, 8000)}
	nodes[2].Info.NodeAttrs = map[string]string{"unique.name": "b1", "datacenter": "dc2"}
	r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
	got := perNode(r)
	if got["a1"]+got["a2"] != 3 || got["b1"] != 3 {
		t.Errorf("copies per node %v: want 3 in dc1 (two nodes) and 3 in dc2 (one node)", got)
	}
}

func TestPlace_FailedCopyAvoidsItsPreviousNode(t *testing.T) {
	j := parseJob(t, jobText("j", 1, 100, 100, ""))
	id := CopyID{Job: "j", Group: "g", Index: 0}
	r := Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000), cand("n2", 4000, 4000)}, Place: []CopyID{id}, Avoid: map[CopyID][]string{id: {"n1"}}})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n2" {
		t.Errorf("placed %v: the copy failed on n1 and goes to n2", r.Placed)
	}
	// Where it is the only node, it goes back there.
	r = Place(Problem{Job: j, Nodes: []Candidate{cand("n1", 4000, 4000)}, Place: []CopyID{id}, Avoid: map[CopyID][]string{id: {"n1"}}})
	if len(r.Placed) != 1 || r.Placed[0].Node != "n1" {
		t.Errorf("placed %v: avoiding is a preference, not a filter", r.Placed)
	}
}

func TestParseJob_RefusesWhatTheSchedulerDoesNotPlace(t *testing.T) {
	for name, c := range map[string]struct{ text, want string }{
		"task file":     {"task \"t\" {\ndriver = \"exec\"\nconfig { command = \"/bin/true\" }\n}", "a task file has no job to place"},
		"system job":    {strings.Replace(jobText("j", 1, 1, 10, ""), `job "j" {`, "job \"j\" {\n  type = \"system\"", 1), `job type "system" runs a copy on every node`},
		"bad job name":  {jobText("a b", 1, 1, 10, ""), `job "a b"`},
		"canary":        {jobText("j", 1, 1, 10, "update {\ncanary = 1\n}"), "update canary"},
		"too many":      {jobText("j", MaxJobCopies+1, 1, 10, ""), fmt.Sprintf("count = %d", MaxJobCopies+1)},
		"nothing to do": {strings.Replace(jobText("j", 1, 1, 10, ""), `driver = "exec"`, `driver = "docker"`, 1), "no group tether can run"},
		"parse error":   {`job "j" { group "g" { count = "x" } }`, "job.nomad:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseJob(JobSpec{File: "job.nomad", Text: c.text})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseJob = %v, want an error saying %q", err, c.want)
			}
		})
	}
	if _, err := ParseJob(JobSpec{File: "job.nomad", Text: jobText("j", MaxJobCopies, 1, 10, "")}); err != nil {
		t.Errorf("ParseJob of %d copies: %v (the bound itself is allowed)", MaxJobCopies, err)
	}
}

func TestParseJob_InputsAreThoseStored(t *testing.T) {
	text := `variable "n" {
  type = number
}
job "j" {
  group "g" {
    count = var.n
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`
	for name, in := range map[string]JobInputs{
		"var":      {Vars: map[string]string{"n": "3"}},
		"var file": {VarFiles: []JobVarFile{{Name: "v.hcl", Text: "n = 3\n"}}},
		"env":      {Env: map[string]string{"NOMAD_VAR_n": "3"}},
	} {
		j, err := ParseJob(JobSpec{File: "j.nomad", Text: text, Inputs: in})
		if err != nil || j.Groups[0].Count != 3 {
			t.Errorf("%s: job %+v, %v: want count 3 from the stored input", name, j, err)
		}
	}
	if got := OnlyNomadVars(map[string]string{"NOMAD_VAR_n": "3", "HOME": "/root", "SECRET": "x"}); !reflect.DeepEqual(got, map[string]string{"NOMAD_VAR_n": "3"}) {
		t.Errorf("OnlyNomadVars kept %v", got)
	}
}

// The properties of Place over generated fleets and jobs.

type genFleet struct {
	job    *Job
	nodes  []Candidate
	placed []Placed
}

var racks = []string{"r1", "r2", "r3"}

func drawFleet(t *rapid.T) genFleet {
	n := rapid.IntRange(0, 8).Draw(t, "nodes")
	var nodes []Candidate
	for i := range n {
		c := cand(fmt.Sprintf("n%d", i), rapid.IntRange(0, 4000).Draw(t, "cpu"), rapid.IntRange(0, 4000).Draw(t, "mem"),
			"rack", rapid.SampledFrom(racks).Draw(t, "rack"), "tier", rapid.SampledFrom([]string{"gold", "silver"}).Draw(t, "tier"))
		if rapid.IntRange(0, 5).Draw(t, "raw") == 0 {
			c.Info.Drivers = append(c.Info.Drivers, "raw_exec")
		}
		if rapid.IntRange(0, 6).Draw(t, "held") == 0 {
			c.Ineligible = "held off"
		}
		nodes = append(nodes, c)
	}
	var extra []string
	if rapid.Bool().Draw(t, "constraint") {
		extra = append(extra, "constraint {\nattribute = \"${meta.tier}\"\nvalue = \"gold\"\n}")
	}
	if rapid.Bool().Draw(t, "distinct") {
		extra = append(extra, "constraint {\ndistinct_hosts = true\n}")
	}
	if rapid.Bool().Draw(t, "spread") {
		extra = append(extra, "spread {\nattribute = \"${meta.rack}\"\n}")
	}
	if rapid.Bool().Draw(t, "affinity") {
		extra = append(extra, "affinity {\nattribute = \"${meta.rack}\"\nvalue = \"r2\"\nweight = -50\n}")
	}
	text := jobText("j", rapid.IntRange(1, 12).Draw(t, "count"), rapid.IntRange(1, 1500).Draw(t, "askcpu"), rapid.IntRange(10, 1500).Draw(t, "askmem"), strings.Join(extra, "\n"))
	if rapid.IntRange(0, 4).Draw(t, "rawjob") == 0 {
		text = strings.Replace(text, `driver = "exec"`, `driver = "raw_exec"`, 1)
	}
	j, err := ParseJob(JobSpec{File: "j.nomad", Text: text})
	if err != nil {
		t.Fatalf("ParseJob: %v\n%s", err, text)
	}
	// Another job already holds some of the nodes.
	var placed []Placed
	for i, c := range nodes {
		if rapid.Bool().Draw(t, "busy") {
			placed = append(placed, Placed{Job: "other", Group: "g", Index: i, Node: c.Name,
				Use: Resources{CPU: rapid.IntRange(0, c.Info.Capacity.CPU).Draw(t, "usedcpu"), MemoryMB: rapid.IntRange(0, c.Info.Capacity.MemoryMB).Draw(t, "usedmem")}})
		}
	}
	return genFleet{job: j, nodes: nodes, placed: placed}
}

// feasible reports whether node may hold one more copy of g given used.
func feasibleOn(g *GroupAsk, c Candidate, used Resources, copiesThere int) bool {
	if c.Ineligible != "" {
		return false
	}
	for _, d := range g.Drivers {
		if !slices.Contains(c.Info.Drivers, d) {
			return false
		}
	}
	for _, k := range g.Constraints {
		if k.Operator == "distinct_hosts" {
			if copiesThere > 0 {
				return false
			}
			continue
		}
		if k.Check(c.Info.Host()) != nil {
			return false
		}
	}
	ask := g.Ask
	return len(exhausted(c.Info.Capacity, used, ask)) == 0
}

func TestPlace_Properties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := drawFleet(t)
		g := f.job.Groups[0]
		p := Problem{Job: f.job, Nodes: f.nodes, Placed: f.placed, Place: allCopies(f.job)}
		r := Place(p)
		// Every copy is answered once: placed or unplaced with a reason.
		if len(r.Placed)+len(r.Unplaced) != g.Count {
			t.Fatalf("%d placed + %d unplaced for %d copies", len(r.Placed), len(r.Unplaced), g.Count)
		}
		for _, u := range r.Unplaced {
			if u.Reason == "" {
				t.Fatalf("%s unplaced without a reason", u.Copy)
			}
		}
		// Every placement is feasible when it is made, and no node ends
		// over its capacity.
		used := map[string]Resources{}
		for _, pl := range f.placed {
			used[pl.Node] = used[pl.Node].Add(pl.Use)
		}
		byName := map[string]Candidate{}
		for _, c := range f.nodes {
			byName[c.Name] = c
		}
		here := map[string]int{}
		for _, c := range r.Placed {
			n, ok := byName[c.Node]
			if !ok {
				t.Fatalf("%s placed on unknown node %s", c.Copy, c.Node)
			}
			if !feasibleOn(g, n, used[c.Node], here[c.Node]) {
				t.Fatalf("%s placed on %s, which cannot hold it (used %v of %v, ineligible %q, drivers %v)", c.Copy, c.Node, used[c.Node], n.Info.Capacity, n.Ineligible, n.Info.Drivers)
			}
			used[c.Node] = used[c.Node].Add(c.Use)
			here[c.Node]++
		}
		for name, u := range used {
			if c := byName[name].Info.Capacity; u.CPU > c.CPU || u.MemoryMB > c.MemoryMB {
				if here[name] > 0 {
					t.Fatalf("node %s over capacity: %v of %v", name, u, c)
				}
			}
		}
		// Count honoured when feasible: a copy goes unplaced only when no
		// node could take one more at the end.
		if len(r.Unplaced) > 0 {
			for _, c := range f.nodes {
				if feasibleOn(g, c, used[c.Name], here[c.Name]) {
					t.Fatalf("%d copies unplaced (%s) while %s could still hold one (used %v of %v)", len(r.Unplaced), r.Unplaced[0].Reason, c.Name, used[c.Name], c.Info.Capacity)
				}
			}
		}
		// Deterministic: the same problem, with its nodes in another order,
		// gets the same answer.
		shuffled := slices.Clone(f.nodes)
		slices.Reverse(shuffled)
		p2 := p
		p2.Nodes = shuffled
		if r2 := Place(p2); !reflect.DeepEqual(r, r2) {
			t.Fatalf("two answers to one problem:\n%+v\n%+v", r, r2)
		}
	})
}

// Over equal nodes (same capacity, same attributes, nothing else placed)
// with no spread or affinity, a count no larger than the nodes goes one
// copy a node; a larger count differs by at most one copy between nodes
// while each copy asks little of a node.
func TestPlace_AntiAffinityProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "nodes")
		count := rapid.IntRange(1, 3*n).Draw(t, "count")
		capacity := rapid.IntRange(1000, 100000).Draw(t, "capacity")
		var nodes []Candidate
		for i := range n {
			nodes = append(nodes, cand(fmt.Sprintf("n%d", i), capacity, capacity))
		}
		// Each copy asks at most a hundredth of a node.
		j, err := ParseJob(JobSpec{File: "j.nomad", Text: jobText("j", count, rapid.IntRange(1, capacity/100).Draw(t, "cpu"), rapid.IntRange(10, capacity/100).Draw(t, "mem"), "")})
		if err != nil {
			t.Fatal(err)
		}
		r := Place(Problem{Job: j, Nodes: nodes, Place: allCopies(j)})
		if len(r.Unplaced) != 0 {
			t.Fatalf("unplaced %v", r.Unplaced)
		}
		got := perNode(r)
		lo, hi := count, 0
		for _, c := range nodes {
			lo, hi = min(lo, got[c.Name]), max(hi, got[c.Name])
		}
		if count <= n && hi > 1 {
			t.Fatalf("%d copies on %d equal nodes: %v, want at most one a node", count, n, got)
		}
		if hi-lo > 1 {
			t.Fatalf("%d copies on %d equal nodes: %v, want them within one of each other", count, n, got)
		}
	})
}

func TestReason_String(t *testing.T) {
	r := Reason{Nodes: 4, Ineligible: map[string]int{"held off": 1}, Drivers: map[string]int{"raw_exec": 1}, Constraints: map[string]int{`${meta.a} = "b"`: 1}, Exhausted: map[string]int{"memory": 1, "cpu": 1}}
	want := `no node of 4 can hold it: held off (1 node); driver "raw_exec" not allowed for remote specs on 1 node (the nodes' --allow-remote-drivers); constraint ${meta.a} = "b" not met on 1 node; cpu exhausted on 1 node; memory exhausted on 1 node`
	if got := r.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
