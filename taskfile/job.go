package taskfile

import (
	"fmt"
	"maps"
	"regexp"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/tether-fsm/tether/fsm"
)

// job reads a job block.
func (p *parser) job(b *hclsyntax.Block) {
	name, ok := p.label(b)
	if !ok {
		return
	}
	job := &Job{Name: name, Region: "global", Namespace: "default", Range: b.TypeRange}
	p.file.Job = job
	for _, a := range sortedAttrs(b.Body) {
		switch a.Name {
		case "type":
			if v, ok := p.lit(a); ok {
				switch v {
				case "service":
					job.Type = JobService
				case "batch":
					job.Type = JobBatch
				case "system":
					job.Type = JobSystem
					p.notices.add(NoticeIgnored, "system", "job type", "one node: it runs as a service job", a.NameRange)
				case "sysbatch":
					job.Type = JobSysbatch
					p.notices.add(NoticeIgnored, "sysbatch", "job type", "one node: it runs as a batch job", a.NameRange)
				default:
					p.errorf(a.Expr.Range(), "Unsupported job type", "Job %q has type %q; use \"service\", \"batch\", \"system\" or \"sysbatch\".", name, v)
				}
			}
		case "datacenters":
			job.Datacenters = p.litList(a)
			p.ignore(a.Name, "attribute", a.NameRange)
		case "region":
			job.Region, _ = p.lit(a)
			p.ignore(a.Name, "attribute", a.NameRange)
		case "namespace":
			job.Namespace, _ = p.lit(a)
			p.ignore(a.Name, "attribute", a.NameRange)
		case "meta":
			job.Meta = p.mapAttr(a)
		case "priority", "all_at_once", "node_pool", "id", "name", "vault_token", "consul_token", "consul_namespace":
			p.ignore(a.Name, "attribute", a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a job.", a.Name)
		}
	}
	var refusals []Refusal
	var groups []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		switch c.Type {
		case "group", "task":
			groups = append(groups, c)
		case "meta":
			job.Meta = p.stringMap(c, "meta")
		case "constraint":
			if con, ok := p.constraint(c); ok {
				job.Constraints = append(job.Constraints, con)
			}
		case "parameterized":
			job.Parameterized = p.parameterized(c)
		case "vault":
			refusals = append(refusals, Refusal{What: `the "vault" block`, Why: "it needs a Vault token from a Nomad server; tether has none", Range: c.TypeRange})
		case "update", "spread", "affinity":
			p.placementBlock(c, &job.Placement)
		case "reschedule":
			r := p.reschedule(c, rescheduleDefault(job))
			job.Reschedule = &r
		case "migrate", "multiregion", "periodic", "consul", "ui":
			p.ignore(c.Type, "block", c.TypeRange)
		default:
			p.warnf(c.TypeRange, "Unsupported block", "tether ignores the %q block in a job.", c.Type)
		}
	}
	if job.Parameterized != nil {
		p.dispatch(job, b)
	} else if len(p.opts.DispatchMeta) > 0 {
		p.errorf(b.TypeRange, "Not a parameterized job", "Dispatch meta was given, but job %q has no parameterized block.", name)
	}
	seen := map[string]hcl.Range{}
	for _, c := range groups {
		var g *Group
		if c.Type == "task" {
			tname, ok := p.label(c)
			if !ok {
				continue
			}
			g = &Group{Name: tname, Job: job, Implicit: true, Count: 1, Range: c.TypeRange}
			def := restartDefault(job)
			g.Restart = &def
			g.Reschedule = p.groupReschedule(job, nil, c.TypeRange)
			if p.task(c, g, job) == nil {
				continue
			}
		} else {
			g = p.group(c, job)
			if g == nil {
				continue
			}
		}
		if prev, dup := seen[g.Name]; dup {
			p.errorf(c.LabelRanges[0], "Duplicate group", "A group (or a task directly under the job) named %q is already declared at %s.", g.Name, pos(prev))
			continue
		}
		seen[g.Name] = c.LabelRanges[0]
		g.Refusals = append(g.Refusals, refusals...)
		p.addGroup(g)
	}
}

// parameterized reads a parameterized block.
func (p *parser) parameterized(c *hclsyntax.Block) *Parameterized {
	p.noLabels(c)
	pz := &Parameterized{Payload: "optional"}
	for _, a := range p.attrs(c.Body, "a parameterized block", "payload", "meta_required", "meta_optional") {
		switch a.Name {
		case "payload":
			if v, ok := p.lit(a); ok {
				switch v {
				case "optional", "required", "forbidden":
					pz.Payload = v
				default:
					p.errorf(a.Expr.Range(), "Bad payload", "payload is %q; use \"optional\", \"required\" or \"forbidden\".", v)
				}
			}
		case "meta_required":
			pz.MetaRequired = p.litList(a)
		case "meta_optional":
			pz.MetaOptional = p.litList(a)
		}
	}
	return pz
}

// dispatch checks the dispatch meta against a parameterized job, as
// nomad job dispatch does, and sets the job's meta from it.
func (p *parser) dispatch(job *Job, b *hclsyntax.Block) {
	pz := job.Parameterized
	if pz.Payload == "required" {
		p.errorf(b.TypeRange, "Payload required", "Job %q is parameterized with payload = \"required\": tether dispatches no payload (a Nomad server's job dispatch does); make the payload optional, or put the data in a file the task reads.", job.Name)
	}
	var missing []string
	for _, k := range pz.MetaRequired {
		if _, ok := p.opts.DispatchMeta[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		p.errorf(b.TypeRange, "Dispatch meta missing", "Job %q is parameterized and needs the dispatch meta %s: give each as KEY=VALUE (nomad job dispatch -meta; tether's dispatch meta).", job.Name, listOr(missing, ""))
	}
	for _, k := range sortedKeys(p.opts.DispatchMeta) {
		if !contains(pz.MetaRequired, k) && !contains(pz.MetaOptional, k) {
			p.errorf(b.TypeRange, "Unexpected dispatch meta", "Job %q does not take the dispatch meta %q (meta_required: %s; meta_optional: %s).", job.Name, k, listOr(pz.MetaRequired, "none"), listOr(pz.MetaOptional, "none"))
		}
	}
	job.DispatchMeta = maps.Clone(p.opts.DispatchMeta)
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	for k, v := range p.opts.DispatchMeta {
		job.Meta[k] = Escape(v)
	}
}

// group reads a group block.
func (p *parser) group(b *hclsyntax.Block, job *Job) *Group {
	name, ok := p.label(b)
	if !ok {
		return nil
	}
	g := &Group{Name: name, Job: job, Count: 1, Range: b.LabelRanges[0]}
	for _, a := range sortedAttrs(b.Body) {
		switch a.Name {
		case "count":
			if n, ok := p.int(a); ok {
				if n < 0 {
					p.errorf(a.Expr.Range(), "Bad count", "count is %d; it must not be negative.", n)
				}
				g.Count = n
			}
		case "meta":
			g.Meta = p.mapAttr(a)
		case "stop_after_client_disconnect", "max_client_disconnect":
			p.placementAttr(a, &g.Placement)
		case "shutdown_delay", "prevent_reschedule_on_lost":
			p.ignore(a.Name, "attribute", a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a group.", a.Name)
		}
	}
	def := restartDefault(job)
	g.Restart = &def
	var resched *hclsyntax.Block
	for _, c := range b.Body.Blocks {
		switch c.Type {
		case "restart":
			g.Restart = p.restart(c, def)
		case "reschedule":
			resched = c
		}
	}
	g.Reschedule = p.groupReschedule(job, resched, b.LabelRanges[0])
	seen := map[string]hcl.Range{}
	for _, c := range b.Body.Blocks {
		switch c.Type {
		case "task":
			tname, ok := p.label(c)
			if !ok {
				continue
			}
			if prev, dup := seen[tname]; dup {
				p.errorf(c.LabelRanges[0], "Duplicate task", "Group %q already has a task named %q at %s.", name, tname, pos(prev))
				continue
			}
			seen[tname] = c.LabelRanges[0]
			p.task(c, g, job)
		case "restart", "reschedule":
		case "meta":
			g.Meta = p.stringMap(c, "meta")
		case "network":
			if g.Network != nil {
				p.errorf(c.TypeRange, "Duplicate network block", "Group %q already has a network block at %s.", name, pos(g.Network.Range))
				continue
			}
			g.Network = p.network(c, "", &g.Refusals)
		case "service":
			if s, ok := p.service(c); ok {
				g.Services = append(g.Services, s)
			}
		case "constraint":
			if con, ok := p.constraint(c); ok {
				g.Constraints = append(g.Constraints, con)
			}
		case "volume":
			g.Refusals = append(g.Refusals, Refusal{What: `the "volume" block`, Why: "host and CSI volumes need a Nomad client's configuration; tether mounts none (bind what the task needs through its own directories)", Range: c.TypeRange})
		case "vault":
			g.Refusals = append(g.Refusals, Refusal{What: `the "vault" block`, Why: "it needs a Vault token from a Nomad server; tether has none", Range: c.TypeRange})
		case "update", "spread", "affinity":
			p.placementBlock(c, &g.Placement)
		case "ephemeral_disk":
			g.EphemeralDiskMB = p.ephemeralDisk(c)
		case "migrate", "scaling", "consul", "disconnect":
			p.ignore(c.Type, "block", c.TypeRange)
		default:
			p.warnf(c.TypeRange, "Unsupported block", "tether ignores the %q block in a group.", c.Type)
		}
	}
	if len(g.Tasks) == 0 && !p.diags.HasErrors() {
		p.errorf(b.TypeRange, "Empty group", "Group %q has no task.", name)
	}
	for _, t := range g.Tasks {
		p.checkReadiness(t) // the group's services are all read now
	}
	return g
}

// network reads a network block (a group's, or a task's resources.network).
func (p *parser) network(c *hclsyntax.Block, task string, refusals *[]Refusal) *Network {
	p.noLabels(c)
	n := &Network{Range: c.TypeRange}
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "mode":
			v, ok := p.lit(a)
			if !ok {
				continue
			}
			switch {
			case v == "" || v == "host":
				n.Mode = NetworkHost
			case v == "none":
				n.Mode = NetworkNone
			case v == "bridge":
				n.Mode = NetworkBridge
				*refusals = append(*refusals, Refusal{What: `network mode "bridge"`, Why: `tether has no bridge networking (CNI) yet: use mode = "host" (ports are then this host's) or "none"`, Range: a.Expr.Range()})
			default:
				n.Mode = NetworkOther
				*refusals = append(*refusals, Refusal{What: fmt.Sprintf("network mode %q", v), Why: `tether runs only "host" and "none" networks`, Range: a.Expr.Range()})
			}
		case "hostname", "mbits":
			p.ignore(a.Name, "attribute", a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a network block.", a.Name)
		}
	}
	labels := map[string]bool{}
	for _, pb := range c.Body.Blocks {
		switch pb.Type {
		case "port":
			label, ok := p.label(pb)
			if !ok {
				continue
			}
			if !portLabel.MatchString(label) {
				p.errorf(pb.LabelRanges[0], "Bad port label", "Port label %q: use letters, digits and '_' (it names NOMAD_PORT_%s).", label, label)
				continue
			}
			if labels[label] {
				p.errorf(pb.LabelRanges[0], "Duplicate port", "Port %q is already declared in this network block.", label)
				continue
			}
			labels[label] = true
			pr := PortRequest{Label: label, Task: task, Range: pb.LabelRanges[0]}
			for _, a := range p.attrs(pb.Body, fmt.Sprintf("port %q", label), "static", "to", "host_network") {
				switch a.Name {
				case "static":
					if v, ok := p.int(a); ok {
						if v < 1 || v > 65535 {
							p.errorf(a.Expr.Range(), "Bad static port", "static is %d; use 1 to 65535.", v)
						}
						pr.Static = v
					}
				case "to":
					if v, ok := p.int(a); ok {
						if v < -1 || v > 65535 {
							p.errorf(a.Expr.Range(), "Bad to", "to is %d; use -1 to 65535.", v)
						}
						pr.To = v
					}
				case "host_network":
					*refusals = append(*refusals, Refusal{What: fmt.Sprintf("port %q host_network", label), Why: "host networks are a Nomad client's configuration; tether uses this host's address", Range: a.NameRange})
				}
			}
			p.noBlocks(pb)
			n.Ports = append(n.Ports, pr)
		case "dns":
			p.ignore("dns", "block", pb.TypeRange)
		default:
			p.warnf(pb.TypeRange, "Unsupported block", "tether ignores the %q block in a network block.", pb.Type)
		}
	}
	if n.Mode == NetworkNone && len(n.Ports) > 0 {
		*refusals = append(*refusals, Refusal{What: `a port in network mode "none"`, Why: "a task with no network has no port to give: remove the ports or use mode = \"host\"", Range: n.Ports[0].Range})
	}
	return n
}

var portLabel = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// service reads a service block into its typed form.
func (p *parser) service(c *hclsyntax.Block) (Service, bool) {
	p.noLabels(c)
	p.ignore("service", "block", c.TypeRange)
	s := Service{Provider: "consul", Range: c.TypeRange}
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "name":
			s.Name, _ = p.str(a)
		case "port":
			if v, ok := p.value(a, ctyString); ok {
				s.Port = v.AsString()
			}
		case "provider":
			s.Provider, _ = p.lit(a)
		case "tags":
			s.Tags = p.list(a)
		case "address_mode":
			s.AddressMode, _ = p.lit(a)
		case "task":
			s.Task, _ = p.lit(a)
		case "meta":
			s.Meta = p.mapAttr(a)
		}
	}
	for _, b := range c.Body.Blocks {
		switch b.Type {
		case "check":
			if ck, ok := p.check(b); ok {
				s.Checks = append(s.Checks, ck)
			}
		case "meta":
			s.Meta = p.stringMap(b, "meta")
		case "check_restart":
			s.CheckRestart = p.checkRestart(b)
		}
	}
	return s, true
}

// checkRestart reads a check_restart block (a check's or a service's).
func (p *parser) checkRestart(b *hclsyntax.Block) *CheckRestart {
	p.noLabels(b)
	cr := &CheckRestart{Grace: DefaultCheckGrace}
	for _, a := range p.attrs(b.Body, "a check_restart block", "limit", "grace", "ignore_warnings") {
		switch a.Name {
		case "limit":
			if v, ok := p.int(a); ok {
				if v < 0 {
					p.errorf(a.Expr.Range(), "Bad limit", "limit is %d; use 0 (never restart) or more.", v)
				}
				cr.Limit = v
			}
		case "grace":
			if s, ok := p.lit(a); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.errorf(a.Expr.Range(), "Bad grace", "%q is not a duration: use a value like \"10s\".", s)
				}
				cr.Grace, cr.graceSet = d, true
			}
		case "ignore_warnings":
			cr.IgnoreWarnings, _ = p.bool(a)
		}
	}
	p.noBlocks(b)
	return cr
}

// check reads a service's check block.
func (p *parser) check(c *hclsyntax.Block) (Check, bool) {
	p.noLabels(c)
	ck := Check{Range: c.TypeRange}
	dur := func(a *hclsyntax.Attribute) time.Duration {
		s, ok := p.lit(a)
		if !ok {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			p.errorf(a.Expr.Range(), "Bad "+a.Name, "%q is not a duration: use a value like \"10s\".", s)
		}
		return d
	}
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "name":
			ck.Name, _ = p.str(a)
		case "type":
			if v, ok := p.lit(a); ok {
				switch v {
				case "http", "tcp", "script", "grpc":
					ck.Type = v
				default:
					p.errorf(a.Expr.Range(), "Bad check type", "type is %q; use \"http\", \"tcp\", \"script\" or \"grpc\".", v)
				}
			}
		case "path":
			ck.Path, _ = p.str(a)
		case "method":
			ck.Method, _ = p.lit(a)
		case "protocol":
			ck.Protocol, _ = p.lit(a)
		case "port":
			if v, ok := p.value(a, ctyString); ok {
				ck.Port = v.AsString()
			}
		case "command":
			ck.Command, _ = p.str(a)
		case "args":
			ck.Args = p.list(a)
		case "task":
			ck.Task, _ = p.lit(a)
		case "interval":
			ck.Interval = dur(a)
		case "timeout":
			ck.Timeout = dur(a)
		case "body":
			ck.Body, _ = p.str(a)
		case "initial_status":
			ck.InitialStatus, _ = p.lit(a)
		case "success_before_passing":
			ck.SuccessBeforePassing, _ = p.int(a)
		case "failures_before_critical":
			ck.FailuresBeforeCritical, _ = p.int(a)
		case "tls_skip_verify":
			ck.TLSSkipVerify, _ = p.bool(a)
		}
	}
	for _, b := range c.Body.Blocks {
		switch b.Type {
		case "check_restart":
			ck.CheckRestart = p.checkRestart(b)
		case "header":
			ck.Header = map[string][]string{}
			for _, a := range sortedAttrs(b.Body) {
				ck.Header[a.Name] = p.list(a)
			}
		}
	}
	if ck.Type == "" {
		p.errorf(c.TypeRange, "Missing check type", "A check needs type = \"http\", \"tcp\", \"script\" or \"grpc\".")
		return ck, false
	}
	return ck, true
}

// rescheduleDefault is Nomad's reschedule policy for a job's type: a
// system job runs as a service on this one node, a sysbatch job as a batch.
func rescheduleDefault(job *Job) fsm.ReschedulePolicy {
	if job != nil && job.Type.Batch() {
		return fsm.DefaultBatchReschedule
	}
	return fsm.DefaultServiceReschedule
}

// groupReschedule is a group's reschedule policy as Nomad merges it: its
// job type's defaults, under the job's block, under the group's own
// (block, if any); checked once merged, as Nomad checks it.
func (p *parser) groupReschedule(job *Job, block *hclsyntax.Block, rng hcl.Range) *fsm.ReschedulePolicy {
	r := rescheduleDefault(job)
	if job != nil && job.Reschedule != nil {
		r = *job.Reschedule
	}
	if block != nil {
		r = p.reschedule(block, r)
		rng = block.TypeRange
	}
	if err := r.Validate(); err != nil {
		p.errorf(rng, "Bad reschedule block", "%v.", err)
	}
	return &r
}

// reschedule reads a reschedule block over base: each attribute it sets
// replaces base's.
func (p *parser) reschedule(c *hclsyntax.Block, base fsm.ReschedulePolicy) fsm.ReschedulePolicy {
	r := base
	p.noLabels(c)
	p.noBlocks(c)
	for _, a := range p.attrs(c.Body, "a reschedule block", "attempts", "interval", "delay", "delay_function", "max_delay", "unlimited") {
		switch a.Name {
		case "attempts":
			if v, ok := p.int(a); ok {
				r.Attempts = v
			}
		case "interval", "delay", "max_delay":
			if s, ok := p.lit(a); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.errorf(a.Expr.Range(), "Bad "+a.Name, "%q is not a duration: use a value like \"30s\" or \"1h\".", s)
				}
				switch a.Name {
				case "interval":
					r.Interval = d
				case "delay":
					r.Delay = d
				default:
					r.MaxDelay = d
				}
			}
		case "delay_function":
			if s, ok := p.lit(a); ok {
				r.DelayFunction = fsm.DelayFunction(s)
			}
		case "unlimited":
			if v, ok := p.bool(a); ok {
				r.Unlimited = v
			}
		}
	}
	return r
}
