package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/tether-fsm/tether/fsm"
)

// A task file holds one or more `task "name" { ... }` blocks, or a Nomad
// job file (job > group > task). Only the fields below are understood;
// everything else is reported as a warning naming it, never silently
// dropped.
//
//	task "web" {
//	  driver       = "raw_exec"          # or "exec"
//	  user         = "nobody"
//	  kill_timeout = "10s"
//	  kill_signal  = "SIGINT"
//	  config {
//	    command       = "/usr/bin/python3"
//	    args          = ["-m", "http.server"]
//	    cap_add       = ["net_bind_service"]  # exec only
//	    cap_drop      = ["all"]               # exec only
//	    work_dir      = "/srv"
//	    pid_mode      = "host"                # exec only: share the host's PID namespace
//	    ipc_mode      = "host"                # exec only
//	    oom_score_adj = 500                   # default 0, whatever the agent's is
//	  }
//	  env { GREETING = "hello" }
//	  resources {
//	    memory     = 256   # MB, the hard limit (the soft one when memory_max is set)
//	    memory_max = 512   # MB
//	    cpu        = 500   # MHz, a relative share
//	    cores      = 1     # CPUs the task is pinned to
//	    pids       = 100   # most processes (tether's addition)
//	  }
//	  logs {
//	    max_files     = 10   # Nomad's defaults
//	    max_file_size = 10   # MB; disabled = true discards the output
//	  }
//	  restart {
//	    attempts = 2
//	    interval = "30m"
//	    delay    = "15s"
//	    mode     = "fail"    # or "delay"
//	  }
//	}
//
// In a Nomad job file (job "j" { type = "service" group "g" { task ... } }),
// a restart block may sit in the group (its tasks inherit it) or the task;
// with none, Nomad's default for the job's type applies (service: 2
// attempts in 30m, 15s apart, mode fail, successful exits restarted too;
// batch: 3 in 24h, successful exits not restarted). A task file without a
// job restarts a task only when it has a restart block (service semantics).

// TaskDef is one task read from a task file.
type TaskDef struct {
	Spec  fsm.Spec
	Range hcl.Range // the task block's header
}

// TaskFile is what ParseTaskFile read.
type TaskFile struct {
	Tasks []TaskDef
}

// Find returns the task named name, or the only task when name is empty.
func (f *TaskFile) Find(filename, name string) (TaskDef, error) {
	if name == "" {
		if len(f.Tasks) == 1 {
			return f.Tasks[0], nil
		}
		return TaskDef{}, fmt.Errorf("%s holds %d tasks (%s): pick one with --task NAME", filename, len(f.Tasks), strings.Join(f.names(), ", "))
	}
	for _, t := range f.Tasks {
		if t.Spec.Name == name {
			return t, nil
		}
	}
	return TaskDef{}, fmt.Errorf("%s has no task %q (it has: %s)", filename, name, strings.Join(f.names(), ", "))
}

func (f *TaskFile) names() []string {
	var out []string
	for _, t := range f.Tasks {
		out = append(out, t.Spec.Name)
	}
	return out
}

// ParseTaskFile parses a task file. Errors and warnings both come back as
// diagnostics, each with its file:line:column; the file is usable only if
// none is an error.
func ParseTaskFile(filename string, src []byte) (*TaskFile, hcl.Diagnostics) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok { // hclsyntax always returns its own body
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unexpected file body"})
	}
	p := &parser{}
	p.top(body)
	diags = append(diags, p.diags...)
	if diags.HasErrors() {
		return nil, diags
	}
	if len(p.file.Tasks) == 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "No task in file",
			Detail:   `Declare at least one task "name" { ... } block, at the top level or inside job > group.`,
			Subject:  body.SrcRange.Ptr(),
		})
		return nil, diags
	}
	return &p.file, diags
}

type parser struct {
	file  TaskFile
	diags hcl.Diagnostics
	seen  map[string]hcl.Range
}

func (p *parser) errorf(rng hcl.Range, summary, format string, args ...any) {
	p.diags = append(p.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(format, args...), Subject: rng.Ptr()})
}

func (p *parser) warnf(rng hcl.Range, summary, format string, args ...any) {
	p.diags = append(p.diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: summary, Detail: fmt.Sprintf(format, args...), Subject: rng.Ptr()})
}

// attrs warns about every attribute of body not in known, and returns
// the known ones in source order.
func (p *parser) attrs(body *hclsyntax.Body, where string, known ...string) []*hclsyntax.Attribute {
	var out []*hclsyntax.Attribute
	for _, a := range sortedAttrs(body) {
		if contains(known, a.Name) {
			out = append(out, a)
			continue
		}
		p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in %s.", a.Name, where)
	}
	return out
}

func sortedAttrs(body *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SrcRange.Start.Byte < out[j].SrcRange.Start.Byte })
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// label checks that block has exactly one label and returns it.
func (p *parser) label(b *hclsyntax.Block) (string, bool) {
	if len(b.Labels) != 1 {
		p.errorf(b.TypeRange, fmt.Sprintf("Bad %s block", b.Type), `A %s block needs exactly one name label: %s "name" { ... }.`, b.Type, b.Type)
		return "", false
	}
	if b.Labels[0] == "" {
		p.errorf(b.LabelRanges[0], fmt.Sprintf("Bad %s block", b.Type), "The %s name is empty.", b.Type)
		return "", false
	}
	return b.Labels[0], true
}

func (p *parser) top(body *hclsyntax.Body) {
	p.attrs(body, "the file")
	for _, b := range body.Blocks {
		switch b.Type {
		case "task":
			p.task(b, nil)
		case "job":
			job, ok := p.label(b)
			if !ok {
				continue
			}
			jobType := "service"
			for _, a := range p.attrs(b.Body, "a job", "type") {
				if v, ok := p.str(a); ok {
					switch v {
					case "service", "batch":
						jobType = v
					default:
						p.errorf(a.Expr.Range(), "Unsupported job type", "Job %q has type %q; tether runs \"service\" and \"batch\" jobs.", job, v)
					}
				}
			}
			for _, g := range b.Body.Blocks {
				if g.Type != "group" {
					p.warnf(g.TypeRange, "Unsupported block", "tether ignores the %q block in a job.", g.Type)
					continue
				}
				group, ok := p.label(g)
				if !ok {
					continue
				}
				p.attrs(g.Body, "a group")
				ctx := jobContext{job: job, group: group, typ: jobType}
				def := fsm.DefaultServiceRestart
				if jobType == "batch" {
					def = fsm.DefaultBatchRestart
				}
				ctx.restart = &def
				for _, rb := range g.Body.Blocks {
					if rb.Type == "restart" {
						ctx.restart = p.restart(rb, def)
					}
				}
				for _, t := range g.Body.Blocks {
					switch t.Type {
					case "task":
						p.task(t, &ctx)
					case "restart":
					default:
						p.warnf(t.TypeRange, "Unsupported block", "tether ignores the %q block in a group.", t.Type)
					}
				}
			}
		default:
			p.warnf(b.TypeRange, "Unsupported block", "tether ignores the %q block at the top level; it reads task blocks, or job > group > task.", b.Type)
		}
	}
}

// jobContext is what a task inside a Nomad job inherits: the job and
// group names, the job's type and the group's restart policy.
type jobContext struct {
	job, group, typ string
	restart         *fsm.RestartPolicy
}

func (p *parser) task(b *hclsyntax.Block, job *jobContext) {
	name, ok := p.label(b)
	if !ok {
		return
	}
	if p.seen == nil {
		p.seen = map[string]hcl.Range{}
	}
	if prev, dup := p.seen[name]; dup {
		p.errorf(b.LabelRanges[0], "Duplicate task", "A task named %q is already declared at %s.", name, pos(prev))
		return
	}
	p.seen[name] = b.LabelRanges[0]
	spec := fsm.Spec{Name: name}
	restartDefault := fsm.DefaultServiceRestart
	if job != nil {
		spec.Job, spec.Group, spec.Restart = job.job, job.group, job.restart
		if job.typ == "batch" {
			restartDefault = fsm.DefaultBatchRestart
		}
	}
	var driverRange hcl.Range
	for _, a := range p.attrs(b.Body, fmt.Sprintf("task %q", name), "driver", "user", "kill_timeout", "kill_signal") {
		switch a.Name {
		case "driver":
			spec.Driver, _ = p.str(a)
			driverRange = a.Expr.Range()
		case "user":
			spec.User, _ = p.str(a)
		case "kill_timeout":
			if s, ok := p.str(a); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.errorf(a.Expr.Range(), "Bad kill_timeout", "%q is not a duration: use a value like \"5s\" or \"1m30s\".", s)
				}
				spec.KillTimeout = d
			}
		case "kill_signal":
			if s, ok := p.str(a); ok {
				sig, err := parseSignal(s)
				if err != nil {
					p.errorf(a.Expr.Range(), "Bad kill_signal", "%v.", err)
				}
				spec.KillSignal = int(sig)
			}
		}
	}
	var config *hclsyntax.Block
	hasCommand := false
	for _, c := range b.Body.Blocks {
		switch c.Type {
		case "config":
			if config != nil {
				p.errorf(c.TypeRange, "Duplicate config block", "Task %q already has a config block at %s.", name, pos(config.TypeRange))
				continue
			}
			config = c
			hasCommand = p.config(c, name, &spec)
		case "env":
			if spec.Env != nil {
				p.errorf(c.TypeRange, "Duplicate env block", "Task %q already has an env block.", name)
				continue
			}
			spec.Env = map[string]string{}
			for _, nb := range c.Body.Blocks {
				p.warnf(nb.TypeRange, "Unsupported block", "An env block holds only NAME = \"value\" attributes; tether ignores the %q block.", nb.Type)
			}
			for _, a := range sortedAttrs(c.Body) {
				if v, ok := p.str(a); ok {
					spec.Env[a.Name] = v
				}
			}
		case "resources":
			spec.Resources = p.resources(c, name)
		case "logs":
			spec.Logs = p.logs(c, name)
		case "restart":
			spec.Restart = p.restart(c, restartDefault)
		default:
			p.warnf(c.TypeRange, "Unsupported block", "tether ignores the %q block in task %q.", c.Type, name)
		}
	}
	switch spec.Driver {
	case "exec", "raw_exec":
	case "":
		p.errorf(b.TypeRange, "Missing driver", `Task %q needs driver = "exec" or driver = "raw_exec".`, name)
	default:
		p.errorf(driverRange, "Unsupported driver", `Task %q has driver %q; tether runs only "exec" and "raw_exec".`, name, spec.Driver)
	}
	if config == nil {
		p.errorf(b.TypeRange, "Missing config block", `Task %q needs a config { command = "..." } block.`, name)
	} else if !hasCommand {
		p.errorf(config.TypeRange, "Missing command", `The config block of task %q needs command = "...".`, name)
	}
	if config != nil && spec.Driver == "raw_exec" && (len(spec.CapAdd) > 0 || len(spec.CapDrop) > 0) {
		p.warnf(config.TypeRange, "Capabilities ignored", `Task %q uses raw_exec, which runs the command as is; cap_add and cap_drop apply only to driver = "exec".`, name)
	}
	p.file.Tasks = append(p.file.Tasks, TaskDef{Spec: spec, Range: b.TypeRange})
}

// config reads a task's config block; it reports whether it has a command.
func (p *parser) config(c *hclsyntax.Block, name string, spec *fsm.Spec) (hasCommand bool) {
	if len(c.Labels) > 0 {
		p.errorf(c.LabelRanges[0], "Bad config block", "A config block takes no label.")
	}
	for _, nb := range c.Body.Blocks {
		p.warnf(nb.TypeRange, "Unsupported block", "tether ignores the %q block in the config of task %q.", nb.Type, name)
	}
	for _, a := range p.attrs(c.Body, fmt.Sprintf("the config of task %q", name), "command", "args", "cap_add", "cap_drop", "work_dir", "pid_mode", "ipc_mode", "oom_score_adj") {
		switch a.Name {
		case "command":
			hasCommand = true
			var ok bool
			if spec.Command, ok = p.str(a); ok && spec.Command == "" {
				p.errorf(a.Expr.Range(), "Empty command", "The command of task %q is empty.", name)
			}
		case "args":
			spec.Args = p.list(a)
		case "cap_add":
			spec.CapAdd = p.list(a)
		case "cap_drop":
			spec.CapDrop = p.list(a)
		case "work_dir":
			spec.Dir, _ = p.str(a)
		case "pid_mode":
			spec.PIDMode = p.mode(a)
		case "ipc_mode":
			spec.IPCMode = p.mode(a)
		case "oom_score_adj":
			if v, ok := p.int(a); ok {
				if v < -1000 || v > 1000 {
					p.errorf(a.Expr.Range(), "Bad oom_score_adj", "oom_score_adj is %d; use -1000 to 1000.", v)
				}
				spec.OOMScoreAdj = &v
			}
		}
	}
	return hasCommand
}

// mode reads pid_mode or ipc_mode: "host", or unset for the task's own.
func (p *parser) mode(a *hclsyntax.Attribute) string {
	v, ok := p.str(a)
	if ok && v != "" && v != "host" {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s is %q; use \"host\" to share the host's, or leave it out for the task's own.", a.Name, v)
	}
	return v
}

// resources reads a resources block, with Nomad's names and units.
func (p *parser) resources(c *hclsyntax.Block, name string) fsm.Resources {
	var r fsm.Resources
	p.noLabels(c)
	for _, a := range p.attrs(c.Body, fmt.Sprintf("the resources of task %q", name), "memory", "memory_max", "cpu", "cores", "pids") {
		v, ok := p.int(a)
		if !ok {
			continue
		}
		if v < 0 {
			p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s must not be negative.", a.Name)
		}
		switch a.Name {
		case "memory":
			r.MemoryMB = v
		case "memory_max":
			r.MemoryMaxMB = v
		case "cpu":
			r.CPU = v
		case "cores":
			r.Cores = v
		case "pids":
			r.PIDs = v
		}
	}
	if r.MemoryMaxMB > 0 && r.MemoryMB > r.MemoryMaxMB {
		p.errorf(c.TypeRange, "Bad resources", "memory (%d MB) is above memory_max (%d MB) in task %q.", r.MemoryMB, r.MemoryMaxMB, name)
	}
	return r
}

// logs reads a logs block; what it leaves out keeps Nomad's default.
func (p *parser) logs(c *hclsyntax.Block, name string) fsm.LogConfig {
	l := fsm.LogConfig{}.WithDefaults()
	p.noLabels(c)
	for _, a := range p.attrs(c.Body, fmt.Sprintf("the logs of task %q", name), "max_files", "max_file_size", "disabled") {
		if a.Name == "disabled" {
			if v, ok := p.value(a, cty.Bool); ok {
				l.Disabled = v.True()
			}
			continue
		}
		v, ok := p.int(a)
		if !ok {
			continue
		}
		if v < 1 {
			p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s must be at least 1.", a.Name)
		}
		if a.Name == "max_files" {
			l.MaxFiles = v
		} else {
			l.MaxFileSizeMB = v
		}
	}
	return l
}

// restart reads a restart block; what it leaves out keeps def's value.
func (p *parser) restart(c *hclsyntax.Block, def fsm.RestartPolicy) *fsm.RestartPolicy {
	r := def
	p.noLabels(c)
	for _, a := range p.attrs(c.Body, "a restart block", "attempts", "interval", "delay", "mode") {
		switch a.Name {
		case "attempts":
			if v, ok := p.int(a); ok {
				r.Attempts = v
			}
		case "interval", "delay":
			if s, ok := p.str(a); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.errorf(a.Expr.Range(), "Bad "+a.Name, "%q is not a duration: use a value like \"15s\" or \"30m\".", s)
				}
				if a.Name == "interval" {
					r.Interval = d
				} else {
					r.Delay = d
				}
			}
		case "mode":
			if s, ok := p.str(a); ok {
				r.Mode = fsm.RestartMode(s)
			}
		}
	}
	if err := r.Validate(); err != nil {
		p.errorf(c.TypeRange, "Bad restart block", "%v.", err)
	}
	return &r
}

func (p *parser) noLabels(c *hclsyntax.Block) {
	if len(c.Labels) > 0 {
		p.errorf(c.LabelRanges[0], fmt.Sprintf("Bad %s block", c.Type), "A %s block takes no label.", c.Type)
	}
	for _, nb := range c.Body.Blocks {
		p.warnf(nb.TypeRange, "Unsupported block", "tether ignores the %q block in a %s block.", nb.Type, c.Type)
	}
}

// int reads a whole number.
func (p *parser) int(a *hclsyntax.Attribute) (int, bool) {
	v, ok := p.value(a, cty.Number)
	if !ok {
		return 0, false
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	if !bf.IsInt() || acc != 0 || i < -1<<31 || i > 1<<31-1 {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s must be a whole number.", a.Name)
		return 0, false
	}
	return int(i), true
}

// value evaluates an attribute without variables or functions: task files
// are data.
func (p *parser) value(a *hclsyntax.Attribute, want cty.Type) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	p.diags = append(p.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if v.IsNull() || !v.IsWhollyKnown() {
		p.errorf(a.Expr.Range(), "Missing value", "%s must have a value.", a.Name)
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, want)
	if err != nil {
		p.errorf(a.Expr.Range(), "Wrong type", "%s must be a %s: %v.", a.Name, want.FriendlyName(), err)
		return cty.NilVal, false
	}
	return cv, true
}

func (p *parser) str(a *hclsyntax.Attribute) (string, bool) {
	v, ok := p.value(a, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (p *parser) list(a *hclsyntax.Attribute) []string {
	v, ok := p.value(a, cty.List(cty.String))
	if !ok {
		return nil
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			p.errorf(a.Expr.Range(), "Missing value", "%s must not hold null.", a.Name)
			return nil
		}
		out = append(out, e.AsString())
	}
	return out
}

// pos prints where a range starts as file:line:column.
func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// formatDiag prints a diagnostic as "file:line:col: error: summary: detail".
func formatDiag(d *hcl.Diagnostic) string {
	sev := "error"
	if d.Severity == hcl.DiagWarning {
		sev = "warning"
	}
	var b strings.Builder
	if d.Subject != nil {
		b.WriteString(pos(*d.Subject))
		b.WriteString(": ")
	}
	b.WriteString(sev)
	b.WriteString(": ")
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString(": ")
		b.WriteString(d.Detail)
	}
	return b.String()
}
