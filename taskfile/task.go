package taskfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/template"
)

var ctyString = cty.String

// task reads a task block into g. job is nil in a task file, where a
// driver tether does not run is an error; in a job file it is a notice,
// and the task is kept (not run) so another can be selected.
func (p *parser) task(b *hclsyntax.Block, g *Group, job *Job) *Task {
	name, ok := p.label(b)
	if !ok {
		return nil
	}
	t := &Task{Name: name, Group: g, Range: b.TypeRange}
	t.Spec = fsm.Spec{Name: name}
	if job != nil {
		t.Spec.Job, t.Spec.Group, t.Spec.Restart = job.Name, g.Name, g.Restart
	}
	where := fmt.Sprintf("task %q", name)
	var driverRange, watchdogRange hcl.Range
	for _, a := range sortedAttrs(b.Body) {
		switch a.Name {
		case "driver":
			t.Driver, _ = p.lit(a)
			driverRange = a.Expr.Range()
		case "user":
			t.Spec.User, _ = p.lit(a)
		case "kill_timeout":
			if s, ok := p.lit(a); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < 0 {
					p.errorf(a.Expr.Range(), "Bad kill_timeout", "%q is not a duration: use a value like \"5s\" or \"1m30s\".", s)
				}
				t.Spec.KillTimeout = d
			}
		case "kill_signal":
			if s, ok := p.lit(a); ok {
				sig, err := ParseSignal(s)
				if err != nil {
					p.errorf(a.Expr.Range(), "Bad kill_signal", "%v.", err)
				}
				t.Spec.KillSignal = int(sig)
			}
		case "readiness":
			if v, ok := p.lit(a); ok {
				switch r := fsm.Readiness(v); r {
				case fsm.ReadinessNone, fsm.ReadinessNotify, fsm.ReadinessTCP, fsm.ReadinessHTTP, fsm.ReadinessExec:
					t.Spec.Readiness = r
				default:
					p.errorf(a.Expr.Range(), "Bad readiness", `readiness is %q; use "notify" (the task sends READY=1 on NOTIFY_SOCKET, the sd_notify protocol), "tcp", "http" or "exec" (its service's check of that type, "script" for exec), or "none".`, v)
				}
			}
		case "watchdog":
			if s, ok := p.lit(a); ok {
				d, err := time.ParseDuration(s)
				switch {
				case err != nil || d <= 0:
					p.errorf(a.Expr.Range(), "Bad watchdog", "%q is not a positive duration: use a value like \"30s\".", s)
				case d < fsm.MinWatchdog:
					p.errorf(a.Expr.Range(), "Bad watchdog", "%q is shorter than the %s minimum.", s, fsm.MinWatchdog)
				default:
					t.Spec.Watchdog = d
				}
				watchdogRange = a.Expr.Range()
			}
		case "leader":
			t.Leader, _ = p.bool(a)
		case "meta":
			t.Meta = p.mapAttr(a)
		case "shutdown_delay", "kind":
			p.ignore(a.Name, "attribute", a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in %s.", a.Name, where)
		}
	}
	if t.Spec.Watchdog > 0 && !t.Spec.Readiness.Notify() {
		p.errorf(watchdogRange, "Watchdog without notify", `Task %q sets watchdog but not readiness = "notify": the task pings the watchdog with WATCHDOG=1 on NOTIFY_SOCKET, which only a notify task has.`, name)
	}
	runnable := t.Driver == "exec" || t.Driver == "raw_exec"
	if job != nil && t.Driver != "" && !runnable {
		// Another driver's task: kept, named, not read further.
		p.notices.add(NoticeNotRun, t.Driver, fmt.Sprintf("%q", t.Address()), "", b.TypeRange)
		g.Tasks = append(g.Tasks, t)
		return t
	}
	// A task's restart block is merged over its group's (Nomad's rule):
	// what it leaves out is the group's, which the job type's default
	// filled in. A task file has no group block: the service default.
	restartDef := restartDefault(job)
	if job != nil && g.Restart != nil {
		restartDef = *g.Restart
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
			hasCommand = p.config(c, name, &t.Spec)
		case "env":
			if t.Spec.Env != nil {
				p.errorf(c.TypeRange, "Duplicate env block", "Task %q already has an env block.", name)
				continue
			}
			for _, nb := range c.Body.Blocks {
				p.warnf(nb.TypeRange, "Unsupported block", "An env block holds only NAME = \"value\" attributes; tether ignores the %q block.", nb.Type)
			}
			t.Spec.Env = p.stringMap(c, "env")
		case "resources":
			t.Spec.Resources = p.resources(c, t)
		case "logs":
			t.Spec.Logs = p.logs(c, name)
		case "restart":
			t.Spec.Restart = p.restart(c, restartDef)
		case "lifecycle":
			t.Lifecycle = p.lifecycle(c)
		case "template":
			if tm, ok := p.template(c); ok {
				t.Templates = append(t.Templates, tm)
			}
		case "artifact":
			if ar, ok := p.artifact(c); ok {
				t.Artifacts = append(t.Artifacts, ar)
			}
		case "service":
			if s, ok := p.service(c); ok {
				t.Services = append(t.Services, s)
			}
		case "meta":
			t.Meta = p.stringMap(c, "meta")
		case "network":
			// The group's network block, accepted in a task too (a
			// task file's task is its own group).
			if t.Network != nil {
				p.errorf(c.TypeRange, "Duplicate network block", "Task %q already has a network block at %s.", name, pos(t.Network.Range))
				continue
			}
			t.Network = p.network(c, t.Name, &t.Refusals)
		case "constraint":
			if con, ok := p.constraint(c); ok {
				t.Constraints = append(t.Constraints, con)
			}
		case "dispatch_payload":
			p.noLabels(c)
			for _, a := range p.attrs(c.Body, "a dispatch_payload block", "file") {
				t.DispatchPayload, _ = p.lit(a)
			}
		case "vault":
			t.Refusals = append(t.Refusals, Refusal{What: `the "vault" block`, Why: "it needs a Vault token from a Nomad server; tether has none", Range: c.TypeRange})
		case "volume_mount":
			t.Refusals = append(t.Refusals, Refusal{What: `the "volume_mount" block`, Why: "host and CSI volumes need a Nomad client's configuration; tether mounts none", Range: c.TypeRange})
		case "csi_plugin":
			t.Refusals = append(t.Refusals, Refusal{What: `the "csi_plugin" block`, Why: "CSI plugins need a Nomad client", Range: c.TypeRange})
		case "affinity", "spread":
			p.placementBlock(c, &t.Placement)
		case "reschedule":
			// A task file's task is its own group: its reschedule block is
			// its group's (a job file's is the job's or the group's).
			if job != nil {
				p.errorf(c.TypeRange, "Misplaced reschedule block", "A reschedule block belongs to the job or the group of task %q, not to the task.", name)
				continue
			}
			g.Reschedule = p.groupReschedule(nil, c, c.TypeRange)
		case "scaling", "identity", "consul":
			p.ignore(c.Type, "block", c.TypeRange)
		default:
			p.warnf(c.TypeRange, "Unsupported block", "tether ignores the %q block in task %q.", c.Type, name)
		}
	}
	switch t.Driver {
	case "exec", "raw_exec":
		t.Spec.Driver = t.Driver
	case "":
		p.errorf(b.TypeRange, "Missing driver", `Task %q needs driver = "exec" or driver = "raw_exec".`, name)
	default:
		p.errorf(driverRange, "Unsupported driver", `Task %q has driver %q; tether runs only "exec" and "raw_exec".`, name, t.Driver)
	}
	if config == nil {
		p.errorf(b.TypeRange, "Missing config block", `Task %q needs a config { command = "..." } block.`, name)
	} else if !hasCommand {
		p.errorf(config.TypeRange, "Missing command", `The config block of task %q needs command = "...".`, name)
	}
	if config != nil && t.Driver == "raw_exec" && t.Spec.Seccomp != "" && t.Spec.Seccomp != fsm.SeccompDefault {
		p.errorf(config.TypeRange, "Seccomp for raw_exec", `Task %q uses raw_exec, which runs unfiltered; seccomp applies only to driver = "exec".`, name)
	}
	if config != nil && t.Driver == "raw_exec" && (len(t.Spec.CapAdd) > 0 || len(t.Spec.CapDrop) > 0) {
		p.warnf(config.TypeRange, "Capabilities ignored", `Task %q uses raw_exec, which runs the command as is; cap_add and cap_drop apply only to driver = "exec".`, name)
	}
	if r := t.Spec.Restart; r != nil && r.OnSuccess && t.Lifecycle.Hook != HookMain && !t.Lifecycle.Sidecar {
		// A lifecycle task that is no sidecar runs to completion, as
		// Nomad's: its successful exit is its end, not a failure to
		// restart, whatever the job's type.
		x := *r
		x.OnSuccess = false
		t.Spec.Restart = &x
	}
	g.Tasks = append(g.Tasks, t)
	return t
}

// config reads a task's config block; it reports whether it has a command.
func (p *parser) config(c *hclsyntax.Block, name string, spec *fsm.Spec) (hasCommand bool) {
	if len(c.Labels) > 0 {
		p.errorf(c.LabelRanges[0], "Bad config block", "A config block takes no label.")
	}
	for _, nb := range c.Body.Blocks {
		p.warnf(nb.TypeRange, "Unsupported block", "tether ignores the %q block in the config of task %q.", nb.Type, name)
	}
	for _, a := range p.attrs(c.Body, fmt.Sprintf("the config of task %q", name), "command", "args", "cap_add", "cap_drop", "work_dir", "pid_mode", "ipc_mode", "oom_score_adj", "seccomp") {
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
			spec.CapAdd = p.litList(a)
		case "cap_drop":
			spec.CapDrop = p.litList(a)
		case "work_dir":
			spec.Dir, _ = p.str(a)
		case "pid_mode":
			spec.PIDMode = p.mode(a)
		case "ipc_mode":
			spec.IPCMode = p.mode(a)
		case "seccomp":
			if v, ok := p.lit(a); ok {
				switch {
				case v == fsm.SeccompDefault, v == fsm.SeccompUnconfined, filepath.IsAbs(v):
					spec.Seccomp = v
				default:
					p.errorf(a.Expr.Range(), "Bad seccomp", `seccomp is %q; use "default", "unconfined" or the absolute path of a Docker/OCI profile (anything but "default" needs the operator's --allow-seccomp).`, v)
				}
			}
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

// networkMode sets the task's spec's network from its own network block,
// else its group's (Nomad's place for it); "none" for a raw_exec task,
// which shares the host's network whatever it says, is refused.
func (t *Task) networkMode() {
	n := t.Network
	if n == nil && t.Group != nil {
		n = t.Group.Network
	}
	if n == nil || n.Mode != NetworkNone {
		return
	}
	if t.Driver == "raw_exec" {
		t.Refusals = append(t.Refusals, Refusal{What: `network mode "none" for a raw_exec task`,
			Why: `raw_exec shares the host's network; use driver = "exec" for a task with loopback alone, or mode = "host"`, Range: n.Range})
		return
	}
	t.Spec.Network = fsm.NetworkNone
}

// mode reads pid_mode or ipc_mode: "host", or unset for the task's own.
func (p *parser) mode(a *hclsyntax.Attribute) string {
	v, ok := p.lit(a)
	if ok && v != "" && v != "host" {
		p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s is %q; use \"host\" to share the host's, or leave it out for the task's own.", a.Name, v)
	}
	return v
}

// resources reads a resources block, with Nomad's names and units.
// zeroMeans says why a resource of 0 is refused.
var zeroMeans = map[string]string{
	"memory":     "is below Nomad's minimum of 10 MB",
	"memory_max": "is below memory (memory_max is the hard limit when memory is the soft one)",
	"cpu":        "is below Nomad's minimum of 1 MHz",
	"cores":      "would pin the task to no CPU",
	"pids":       "would let the task run no process",
}

func (p *parser) resources(c *hclsyntax.Block, t *Task) fsm.Resources {
	var r fsm.Resources
	errsBefore := len(p.diags.Errs())
	p.noLabels(c)
	for _, nb := range c.Body.Blocks {
		switch nb.Type {
		case "network":
			t.Network = p.network(nb, t.Name, &t.Refusals)
		case "device":
			t.Refusals = append(t.Refusals, Refusal{What: `the "device" block`, Why: "device plugins need a Nomad client", Range: nb.TypeRange})
		case "numa":
			p.ignore("numa", "block", nb.TypeRange)
		default:
			p.warnf(nb.TypeRange, "Unsupported block", "tether ignores the %q block in a resources block.", nb.Type)
		}
	}
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "disk", "iops", "mbits":
			p.ignore(a.Name, "attribute", a.NameRange)
			continue
		case "memory", "memory_max", "cpu", "cores", "pids":
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in the resources of task %q.", a.Name, t.Name)
			continue
		}
		v, ok := p.int(a)
		if !ok {
			continue
		}
		switch {
		case v < 0:
			p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s must not be negative.", a.Name)
		case v == 0:
			// Nomad refuses a memory of 0 (its minimum is 10 MB) and a
			// cpu of 0 (its minimum is 1 MHz); tether refuses every
			// explicit 0 alike: an unset attribute is no limit.
			p.errorf(a.Expr.Range(), "Bad "+a.Name, "%s = 0 %s; leave %s out for no limit.", a.Name, zeroMeans[a.Name], a.Name)
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
		p.errorf(c.TypeRange, "Bad resources", "memory (%d MB) is above memory_max (%d MB) in task %q.", r.MemoryMB, r.MemoryMaxMB, t.Name)
	}
	if r.CPU > 0 && r.Cores > 0 {
		p.errorf(c.TypeRange, "Bad resources", "Task %q can only ask for cpu or cores, not both: cores pins it to whole CPUs, cpu is a share of them.", t.Name)
	}
	if len(p.diags.Errs()) == errsBefore {
		// The values' other rules (Nomad's minimum memory, the kernel's
		// ranges: fsm.Spec.Validate's), said where the block is.
		if err := (&fsm.Spec{Driver: "exec", Command: "x", Resources: r}).Validate(); err != nil {
			p.errorf(c.TypeRange, "Bad resources", "%s.", strings.TrimPrefix(err.Error(), fsm.ErrInvalidSpec.Error()+": "))
		}
	}
	return r
}

// logs reads a logs block; what it leaves out keeps Nomad's default.
func (p *parser) logs(c *hclsyntax.Block, name string) fsm.LogConfig {
	l := fsm.LogConfig{}.WithDefaults()
	p.noLabels(c)
	p.noBlocks(c)
	for _, a := range p.attrs(c.Body, fmt.Sprintf("the logs of task %q", name), "max_files", "max_file_size", "disabled", "journald") {
		switch a.Name {
		case "disabled":
			if v, ok := p.bool(a); ok {
				l.Disabled = v
			}
			continue
		case "journald":
			if v, ok := p.bool(a); ok {
				l.Journald = v
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
	if l.Disabled && l.Journald {
		p.errorf(c.TypeRange, "Bad logs", "disabled = true discards the task's output and journald = true forwards it; leave one out.")
	}
	return l
}

// restart reads a restart block; what it leaves out keeps def's value.
func (p *parser) restart(c *hclsyntax.Block, def fsm.RestartPolicy) *fsm.RestartPolicy {
	r := def
	p.noLabels(c)
	p.noBlocks(c)
	for _, a := range p.attrs(c.Body, "a restart block", "attempts", "interval", "delay", "mode", "render_templates") {
		switch a.Name {
		case "attempts":
			if v, ok := p.int(a); ok {
				r.Attempts = v
			}
		case "interval", "delay":
			if s, ok := p.lit(a); ok {
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
			if s, ok := p.lit(a); ok {
				r.Mode = fsm.RestartMode(s)
			}
		case "render_templates":
			p.ignore("render_templates", "attribute", a.NameRange)
		}
	}
	if err := r.Validate(); err != nil {
		p.errorf(c.TypeRange, "Bad restart block", "%v.", err)
	}
	return &r
}

// lifecycle reads a lifecycle block.
func (p *parser) lifecycle(c *hclsyntax.Block) Lifecycle {
	p.noLabels(c)
	p.noBlocks(c)
	var l Lifecycle
	hasHook := false
	for _, a := range p.attrs(c.Body, "a lifecycle block", "hook", "sidecar") {
		switch a.Name {
		case "hook":
			hasHook = true
			if v, ok := p.lit(a); ok {
				switch v {
				case "prestart":
					l.Hook = HookPrestart
				case "poststart":
					l.Hook = HookPoststart
				case "poststop":
					l.Hook = HookPoststop
				default:
					p.errorf(a.Expr.Range(), "Bad hook", "hook is %q; use \"prestart\", \"poststart\" or \"poststop\".", v)
				}
			}
		case "sidecar":
			l.Sidecar, _ = p.bool(a)
		}
	}
	if !hasHook {
		p.errorf(c.TypeRange, "Missing hook", "A lifecycle block needs hook = \"prestart\", \"poststart\" or \"poststop\".")
	}
	if l.Sidecar && l.Hook == HookPoststop {
		p.errorf(c.TypeRange, "Bad lifecycle", "A poststop task cannot be a sidecar.")
	}
	return l
}

// template reads a template block; source and destination keep their
// run-time references.
func (p *parser) template(c *hclsyntax.Block) (template.Template, bool) {
	p.noLabels(c)
	t := template.Template{ChangeMode: template.ChangeRestart}
	for _, a := range sortedAttrs(c.Body) {
		switch a.Name {
		case "data":
			// Not interpolated at run time: its text is the template's.
			if s, ok := p.str(a); ok {
				t.Data = Unescape(s)
			}
		case "source":
			t.Source, _ = p.str(a)
		case "destination":
			t.Destination, _ = p.str(a)
		case "perms":
			if s, ok := p.lit(a); ok {
				v, err := strconv.ParseUint(s, 8, 32)
				if err != nil || v > 0o7777 {
					p.errorf(a.Expr.Range(), "Bad perms", "perms %q is not an octal mode like \"644\".", s)
				}
				t.Perms = os.FileMode(v) & os.ModePerm
			}
		case "uid", "gid":
			if v, ok := p.int(a); ok {
				if a.Name == "uid" {
					t.UID = &v
				} else {
					t.GID = &v
				}
			}
		case "env":
			t.Env, _ = p.bool(a)
		case "change_mode":
			if s, ok := p.lit(a); ok {
				m, err := template.ParseChangeMode(s)
				if err != nil {
					p.errorf(a.Expr.Range(), "Bad change_mode", "%v.", err)
				}
				t.ChangeMode = m
			}
		case "change_signal":
			if s, ok := p.lit(a); ok {
				sig, err := ParseSignal(s)
				if err != nil {
					p.errorf(a.Expr.Range(), "Bad change_signal", "%v.", err)
				}
				t.ChangeSignal = int(sig)
			}
		case "left_delimiter":
			t.LeftDelim, _ = p.lit(a)
		case "right_delimiter":
			t.RightDelim, _ = p.lit(a)
		case "error_on_missing_key":
			t.ErrMissingKey, _ = p.bool(a)
		case "splay", "vault_grace":
			p.ignore(a.Name, "attribute", a.NameRange)
		default:
			p.warnf(a.NameRange, "Unsupported attribute", "tether ignores the attribute %q in a template block.", a.Name)
		}
	}
	for _, b := range c.Body.Blocks {
		switch b.Type {
		case "wait", "change_script":
			p.ignore(b.Type, "block", b.TypeRange)
		default:
			p.warnf(b.TypeRange, "Unsupported block", "tether ignores the %q block in a template block.", b.Type)
		}
	}
	if err := template.Check(t); err != nil {
		p.errorf(c.TypeRange, "Bad template block", "%v.", err)
		return t, false
	}
	return t, true
}

// artifact reads an artifact block; source, destination, options and
// headers keep their run-time references.
func (p *parser) artifact(c *hclsyntax.Block) (artifact.Artifact, bool) {
	p.noLabels(c)
	a := artifact.Artifact{}
	for _, at := range sortedAttrs(c.Body) {
		switch at.Name {
		case "source":
			a.Source, _ = p.str(at)
		case "destination":
			a.Destination, _ = p.str(at)
		case "mode":
			if s, ok := p.lit(at); ok {
				m, err := artifact.ParseMode(s)
				if err != nil {
					p.errorf(at.Expr.Range(), "Bad mode", "%v.", err)
				}
				a.Mode = m
			}
		case "chown":
			a.Chown, _ = p.bool(at)
		case "options":
			a.Options = p.mapAttr(at)
		case "headers":
			a.Headers = p.mapAttr(at)
		default:
			p.warnf(at.NameRange, "Unsupported attribute", "tether ignores the attribute %q in an artifact block.", at.Name)
		}
	}
	for _, b := range c.Body.Blocks {
		switch b.Type {
		case "options":
			a.Options = p.stringMap(b, "options")
		case "headers":
			a.Headers = p.stringMap(b, "headers")
		default:
			p.warnf(b.TypeRange, "Unsupported block", "tether ignores the %q block in an artifact block.", b.Type)
		}
	}
	if a.Source == "" {
		p.errorf(c.TypeRange, "Missing source", "An artifact block needs source = \"...\".")
		return a, false
	}
	return a, true
}
