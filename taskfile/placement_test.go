package taskfile

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const placementJob = `
job "web" {
  affinity {
    attribute = "${node.datacenter}"
    value     = "dc2"
    weight    = 80
  }
  spread {
    attribute = "${node.datacenter}"
  }
  update {
    max_parallel = 3
  }
  group "api" {
    count                        = 4
    max_client_disconnect        = "2m"
    stop_after_client_disconnect = "90s"
    affinity {
      attribute = "${meta.rack}"
      operator  = "regexp"
      value     = "^r[12]$"
      weight    = -40
    }
    spread {
      attribute = "${meta.rack}"
      weight    = 30
      target "r1" {
        percent = 60
      }
      target "second" {
        value   = "r2"
        percent = 40
      }
    }
    update {
      max_parallel = 2
    }
    task "api" {
      driver = "exec"
      config { command = "/bin/sleep" }
      affinity {
        attribute = "${attr.cpu.arch}"
        value     = "amd64"
      }
    }
  }
  group "worker" {
    task "w" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
`

func TestPlacement_ParsedAtEveryLevelAndMerged(t *testing.T) {
	f, _ := parseOK(t, placementJob)
	api, worker := f.Groups[0].Rules(), f.Groups[1].Rules()
	wantAff := []struct {
		attr, op, val string
		weight        int
	}{
		{"${node.datacenter}", "=", "dc2", 80},
		{"${meta.rack}", "regexp", "^r[12]$", -40},
		{"${attr.cpu.arch}", "=", "amd64", 50},
	}
	if len(api.Affinities) != len(wantAff) {
		t.Fatalf("api affinities %v, want job's, group's and task's (%d)", api.Affinities, len(wantAff))
	}
	for i, w := range wantAff {
		a := api.Affinities[i]
		if a.Attribute != w.attr || a.Operator != w.op || a.Value != w.val || a.Weight != w.weight {
			t.Errorf("affinity %d = %+v, want %+v", i, a, w)
		}
	}
	if len(api.Spreads) != 2 || api.Spreads[0].Attribute != "${node.datacenter}" || api.Spreads[0].Weight != 50 || len(api.Spreads[0].Targets) != 0 {
		t.Fatalf("api spreads %+v: want the job's even spread (weight 50) first", api.Spreads)
	}
	if got, want := api.Spreads[1].Targets, []SpreadTarget{{"r1", 60}, {"r2", 40}}; !reflect.DeepEqual(got, want) || api.Spreads[1].Weight != 30 {
		t.Errorf("group spread targets %v weight %d, want %v weight 30 (a target's value defaults to its label)", got, api.Spreads[1].Weight, want)
	}
	if api.Update.MaxParallel != 2 || worker.Update.MaxParallel != 3 {
		t.Errorf("max_parallel api %d worker %d: want the group's 2 over the job's 3, and the job's 3 where the group says none", api.Update.MaxParallel, worker.Update.MaxParallel)
	}
	if api.MaxClientDisconnect != 2*time.Minute || api.StopAfterClientDisconnect != 90*time.Second {
		t.Errorf("disconnect settings %v / %v, want 2m / 90s", api.MaxClientDisconnect, api.StopAfterClientDisconnect)
	}
	if worker.MaxClientDisconnect != 0 || len(worker.Affinities) != 1 || len(worker.Spreads) != 1 {
		t.Errorf("worker rules %+v: want the job's affinity and spread only", worker)
	}
	if len(api.Refusals)+len(worker.Refusals) != 0 {
		t.Errorf("refusals %v %v for stanzas tether's scheduler does", api.Refusals, worker.Refusals)
	}
	// On one host they are scheduler concerns, named once each.
	text := noticesText(f)
	for _, name := range []string{"affinity", "spread", "update", "max_client_disconnect", "stop_after_client_disconnect"} {
		if !strings.Contains(text, `ignores the "`+name+`"`) {
			t.Errorf("notices %q do not name %q as ignored on one host", text, name)
		}
	}
}

func TestPlacement_DefaultsWithoutBlocks(t *testing.T) {
	f, _ := parseOK(t, `job "j" {
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
	r := f.Groups[0].Rules()
	if r.Update.MaxParallel != DefaultMaxParallel || r.MaxClientDisconnect != 0 || r.StopAfterClientDisconnect != 0 || len(r.Affinities)+len(r.Spreads)+len(r.Refusals) != 0 {
		t.Errorf("rules of a job without placement stanzas: %+v", r)
	}
}

func TestPlacement_MaxParallelZeroIsAllAtOnce(t *testing.T) {
	f, _ := parseOK(t, `job "j" {
  update { max_parallel = 0 }
  group "g" {
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
	if u := f.Groups[0].Rules().Update; u.MaxParallel != 0 || !u.Set {
		t.Errorf("update %+v: max_parallel = 0 must be kept (all at once), not taken as unset", u)
	}
}

func TestPlacement_UpdateDeploymentSettingsRefusedByNameForTheFleetOnly(t *testing.T) {
	f, _ := parseOK(t, `job "j" {
  update {
    max_parallel     = 1
    canary           = 2
    auto_promote     = true
    auto_revert      = false
    min_healthy_time = "1s"
  }
  group "g" {
    update { canary = 0 }
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
	r := f.Groups[0].Rules()
	var names []string
	for _, x := range r.Refusals {
		names = append(names, x.What)
	}
	slices.Sort(names)
	if got := strings.Join(names, ","); got != "update auto_promote,update canary,update min_healthy_time" {
		t.Errorf("refused %q: want canary, auto_promote and min_healthy_time named (auto_revert = false and canary = 0 ask for nothing)", got)
	}
	// The group still runs on one host: these are placement refusals only.
	if _, err := f.PlanGroup("g"); err != nil {
		t.Errorf("PlanGroup: %v: an update block must not keep a job from running on one host", err)
	}
}

func TestPlacement_BadValuesAreErrorsNamingThem(t *testing.T) {
	for name, c := range map[string]struct{ block, want string }{
		"affinity weight 0": {`affinity {
attribute = "${meta.a}"` + "\n" + `weight = 0
}`, "affinity weight is 0"},
		"affinity weight 101": {`affinity {
attribute = "${meta.a}"` + "\n" + `weight = 101
}`, "affinity weight is 101"},
		"affinity weight -101": {`affinity {
attribute = "${meta.a}"` + "\n" + `weight = -101
}`, "affinity weight is -101"},
		"affinity distinct_hosts": {`affinity {
attribute = "${meta.a}"` + "\n" + `operator = "distinct_hosts"
}`, `affinity operator "distinct_hosts"`},
		"affinity no attribute": {`affinity { value = "x" }`, "An affinity needs an attribute"},
		"spread no attribute": {`spread {
weight = 10
}`, "A spread needs an attribute"},
		"spread weight 101": {`spread {
attribute = "${meta.a}"` + "\n" + `weight = 101
}`, "spread weight is 101"},
		"spread weight -1": {`spread {
attribute = "${meta.a}"` + "\n" + `weight = -1
}`, "spread weight is -1"},
		"spread over 100%":         {"spread {\nattribute = \"${meta.a}\"\ntarget \"x\" {\npercent = 60\n}\ntarget \"y\" {\npercent = 41\n}\n}", "add up to 101%"},
		"spread target percent":    {"spread {\nattribute = \"${meta.a}\"\ntarget \"x\" {\npercent = 101\n}\n}", "percent 101"},
		"spread duplicate target":  {"spread {\nattribute = \"${meta.a}\"\ntarget \"x\" {\npercent = 10\n}\ntarget \"y\" {\nvalue = \"x\"\npercent = 10\n}\n}", `already has a target for "x"`},
		"max_parallel negative":    {`update { max_parallel = -1 }`, "max_parallel is -1"},
		"max_client_disconnect":    {`max_client_disconnect = "soon"`, `max_client_disconnect = "soon"`},
		"max_client_disconnect 0s": {`max_client_disconnect = "0s"`, `max_client_disconnect = "0s"`},
		"stop_after negative":      {`stop_after_client_disconnect = "-1s"`, `stop_after_client_disconnect = "-1s"`},
	} {
		t.Run(name, func(t *testing.T) {
			msg := parseErr(t, `job "j" {
  group "g" {
    `+c.block+`
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
			if !strings.Contains(msg, c.want) {
				t.Errorf("error %q does not say %q", msg, c.want)
			}
		})
	}
}

func TestPlacement_WeightsAtTheirBoundsAccepted(t *testing.T) {
	f, _ := parseOK(t, `job "j" {
  group "g" {
    affinity {
      attribute = "${meta.a}"
      weight    = -100
    }
    affinity {
      attribute = "${meta.b}"
      weight    = 100
    }
    spread {
      attribute = "${meta.c}"
      weight    = 0
      target "x" {
        percent = 100
      }
    }
    spread {
      attribute = "${meta.d}"
      weight    = 100
    }
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}`)
	r := f.Groups[0].Rules()
	if len(r.Affinities) != 2 || r.Affinities[0].Weight != -100 || r.Affinities[1].Weight != 100 || len(r.Spreads) != 2 || r.Spreads[0].Weight != 0 || r.Spreads[1].Weight != 100 {
		t.Errorf("rules %+v: the bounds -100, 100 (affinity) and 0, 100 (spread) and a 100%% target are valid", r)
	}
}

func TestGroupPlan_ConstraintsOfEveryLevel(t *testing.T) {
	f, _ := parseOK(t, `job "j" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "g" {
    constraint {
      distinct_hosts = true
    }
    task "t" {
      driver = "exec"
      config { command = "/bin/true" }
      constraint {
        attribute = "${meta.tier}"
        value     = "gold"
      }
    }
    task "other" {
      driver = "docker"
      config { image = "x" }
      constraint {
        attribute = "${meta.never}"
        operator  = "is_set"
      }
    }
  }
}`)
	gp, err := f.PlanGroup("g")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range gp.Constraints() {
		got = append(got, c.String())
	}
	want := `${attr.kernel.name} = "linux"|${}distinct_hosts|${meta.tier} = "gold"`
	if strings.Join(got, "|") != strings.ReplaceAll(want, "${}", " ") {
		t.Errorf("constraints %q: want the job's, the group's and the planned task's (not the task tether does not run)", strings.Join(got, "|"))
	}
}
