package taskfile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// NoticeKind says what a Notice is about.
type NoticeKind uint8

const (
	// NoticeIgnored: a Nomad stanza tether parses and does not act on.
	NoticeIgnored NoticeKind = iota
	// NoticeNotRun: tasks of the file tether does not run (their driver).
	NoticeNotRun
	// NoticeCheck: what tether does with one check of a service: runs
	// it (the task's readiness, with its check_restart), or ignores it
	// and why (see readiness.go).
	NoticeCheck
)

// Notice is one line naming what tether does not do of a file, once per
// file however often it occurs: `ignores the "reschedule" block (a
// scheduler concern)`. The parser returns notices; it prints nothing.
type Notice struct {
	Kind   NoticeKind
	Name   string // the block or attribute, or the driver for NoticeNotRun
	What   string // "block" or "attribute"; the task addresses for NoticeNotRun
	Reason string
	Count  int
	First  hcl.Range
}

func (n Notice) String() string {
	if n.Kind == NoticeNotRun {
		return fmt.Sprintf("does not run %s (driver %q: tether runs exec and raw_exec)", n.What, n.Name)
	}
	if n.Kind == NoticeCheck {
		return fmt.Sprintf("%s %s: %s", n.What, n.Name, n.Reason)
	}
	return fmt.Sprintf("ignores the %q %s (%s)", n.Name, n.What, n.Reason)
}

// Reasons shared by several stanzas.
const (
	reasonScheduler = "a scheduler concern"
	reasonServer    = "it needs a Nomad server"
)

// ignoredStanzas are Nomad stanzas tether parses and ignores, with why.
// The key is the block or attribute name.
var ignoredStanzas = map[string]string{
	"datacenters": reasonScheduler, "reschedule": reasonScheduler, "update": reasonScheduler,
	"spread": reasonScheduler, "affinity": reasonScheduler, "migrate": reasonScheduler,
	"priority": reasonScheduler, "all_at_once": reasonScheduler, "node_pool": reasonScheduler,
	"region": "a scheduler concern; NOMAD_REGION is set from it", "namespace": "a scheduler concern; NOMAD_NAMESPACE is set from it",
	"multiregion": reasonScheduler, "scaling": "a scheduler concern: count is what runs",
	"ephemeral_disk": reasonScheduler, "stop_after_client_disconnect": reasonScheduler,
	"max_client_disconnect": reasonScheduler, "prevent_reschedule_on_lost": reasonScheduler,
	"disconnect": reasonScheduler,
	"periodic":   "a scheduler concern: tether runs the job once, now",
	"disk":       "resources.disk: a scheduler concern", "iops": "resources.iops: removed in Nomad", "mbits": "network bandwidth: a scheduler concern",
	"ui": "the Nomad UI's", "consul_token": reasonServer, "vault_token": reasonServer, "consul_namespace": reasonServer,
	"consul": "tether registers nothing in Consul", "identity": "workload identity needs a Nomad server",
	"shutdown_delay": "it delays a service deregistration tether does not do",
	"kind":           "Consul Connect's",
	"csi_plugin":     "CSI plugins need a Nomad client",
	"service":        "registration needs Consul or a Nomad server; what tether does with each of its checks is said apart",
	"dns":            "tether leaves the host's resolver in place",
	"hostname":       "only a bridge network has a hostname of its own",
	"splay":          "a template re-render delay", "wait": "a template re-render delay", "vault_grace": reasonServer,
	"change_script": "change_mode \"script\" is reported, not run",
	"id":            "the job's label names it", "name": "the job's label names it",
	"leader": "kept for the group runner",
}

// notices collects notices, one per name.
type notices struct {
	byKey map[string]*Notice
	order []string
}

func (ns *notices) add(kind NoticeKind, name, what, reason string, rng hcl.Range) {
	if ns.byKey == nil {
		ns.byKey = map[string]*Notice{}
	}
	key := fmt.Sprint(kind) + "\x00" + name + "\x00" + what
	if kind == NoticeNotRun {
		key = fmt.Sprint(kind) + "\x00" + name
	}
	if n, ok := ns.byKey[key]; ok {
		n.Count++
		if kind == NoticeNotRun {
			n.What += ", " + what
		}
		return
	}
	ns.byKey[key] = &Notice{Kind: kind, Name: name, What: what, Reason: reason, Count: 1, First: rng}
	ns.order = append(ns.order, key)
}

func (ns *notices) list() []Notice {
	out := make([]Notice, 0, len(ns.order))
	for _, k := range ns.order {
		n := *ns.byKey[k]
		if n.Kind == NoticeNotRun {
			tasks := strings.Split(n.What, ", ")
			sort.Strings(tasks)
			word := "task "
			if len(tasks) > 1 {
				word = "tasks "
			}
			n.What = word + strings.Join(tasks, ", ")
		}
		out = append(out, n)
	}
	return out
}
