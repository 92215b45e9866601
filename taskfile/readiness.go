package taskfile

import (
	"fmt"
	"strconv"

	"github.com/tether-fsm/tether/fsm"
)

// Readiness checks.
//
// A task whose readiness is "tcp", "http" or "exec" is checked by its
// executor with the one check of that type among its services (the
// group's services that name it or no task, and its own), whatever their
// provider: Nomad's check type "tcp", "http" or "script". A task that
// sets no readiness (readiness = "none" is one that says it has none) runs
// the check of its service of provider "nomad" as
// Nomad's client would (Nomad runs those checks itself, with their
// check_restart): the first such check of a type tether runs (http, tcp,
// script) becomes its readiness, with its check_restart, and no
// tether-only attribute is needed; a group's service that names no task
// is the group's one main task's (one without a lifecycle hook). A check
// of provider "consul" is Consul's to run: ignored unless the task's
// readiness names its type. The file's notices say, check by check, which
// runs and which is ignored and why (noticeChecks). The check's port (or
// its service's) is a port label of the task's network blocks, resolved
// at instantiation to the allocated host port and address, or a number;
// check_restart is the check's, over its service's (Nomad's merge).

// providerNomad is the provider of a service whose checks Nomad itself
// runs.
const providerNomad = "nomad"

// checkType is the Nomad check type of a checked readiness.
func checkType(r fsm.Readiness) string {
	if r == fsm.ReadinessExec {
		return "script"
	}
	return string(r)
}

// readinessOfCheck is the readiness that runs a check of Nomad type typ,
// or ReadinessNone for a type tether does not run.
func readinessOfCheck(typ string) fsm.Readiness {
	switch typ {
	case "http":
		return fsm.ReadinessHTTP
	case "tcp":
		return fsm.ReadinessTCP
	case "script":
		return fsm.ReadinessExec
	}
	return fsm.ReadinessNone
}

// mainOfGroup reports whether t is its group's one task without a
// lifecycle hook (a group's service that names no task is its).
func (t *Task) mainOfGroup() bool {
	if t.Group == nil {
		return true
	}
	n := 0
	for _, o := range t.Group.Tasks {
		if o.Lifecycle.Hook == HookMain {
			n++
		}
	}
	return n == 1 && t.Lifecycle.Hook == HookMain
}

// nomadChecked reports whether s is a service of provider "nomad" whose
// checks tether runs for t when t sets no readiness: t's own, a group's
// that names it, or a group's that names no task when t is the group's
// main task.
func (t *Task) nomadChecked(s Service, own bool) bool {
	return s.Provider == providerNomad && (own || s.Task == t.Name || s.Task == "" && t.mainOfGroup())
}

// impliedCheck is the first check tether runs, of a service of provider
// "nomad" of t's (see nomadChecked), of a type it runs.
func (t *Task) impliedCheck() (Check, bool) {
	var group []Service
	if t.Group != nil {
		group = t.Group.Services
	}
	for i, list := range [][]Service{group, t.Services} {
		for _, s := range list {
			if !t.nomadChecked(s, i == 1) || s.Task != "" && s.Task != t.Name {
				continue
			}
			for _, c := range s.Checks {
				if readinessOfCheck(c.Type) != fsm.ReadinessNone {
					return c, true
				}
			}
		}
	}
	return Check{}, false
}

// readinessCheck finds the check t's readiness runs, and its service;
// err says why there is none: no check of the readiness's type, several
// (for a readiness the task sets: a readiness implied by a service of
// provider "nomad" runs its first), or one that lacks what it needs (an
// interval and timeout, a port label of the task's, a command).
func (t *Task) readinessCheck() (svc Service, ck Check, err error) {
	svc, ck, err = t.findReadinessCheck()
	if err != nil && t.readinessImplied {
		err = fmt.Errorf("the check of its service of provider %q, which tether runs as its readiness: %w", providerNomad, err)
	}
	return svc, ck, err
}

func (t *Task) findReadinessCheck() (svc Service, ck Check, err error) {
	r := t.Spec.Readiness
	want := checkType(r)
	var group []Service
	if t.Group != nil {
		group = t.Group.Services
	}
	n := 0
	var other []string
	for i, list := range [][]Service{group, t.Services} {
		for _, s := range list {
			switch {
			case i == 0 && s.Task != "" && s.Task != t.Name:
				continue // another task's
			case t.readinessImplied && !t.nomadChecked(s, i == 1):
				continue
			}
			for _, c := range s.Checks {
				if c.Type != want {
					other = append(other, strconv.Quote(c.Type))
					continue
				}
				if n == 0 {
					svc, ck = s, c
				}
				n++
			}
		}
	}
	switch {
	case n == 0 && len(other) > 0:
		return svc, ck, fmt.Errorf(`readiness = %q runs a check of type %q, and the task's checks are of type %v: set readiness to the check's type ("script" is readiness = "exec"), or add a check of type %q`, r, want, other, want)
	case n == 0:
		return svc, ck, fmt.Errorf(`readiness = %q needs a check: add a service block with a check { type = %q, interval, timeout%s } to the task (or to its group)`, r, want, map[bool]string{true: ", command", false: ", port"}[r == fsm.ReadinessExec])
	case n > 1 && !t.readinessImplied:
		return svc, ck, fmt.Errorf(`readiness = %q runs one check, and the task has %d of type %q: keep one`, r, n, want)
	}
	if ck.Interval <= 0 || ck.Timeout <= 0 {
		return svc, ck, fmt.Errorf("the %s check needs an interval and a timeout (as in Nomad): add interval = \"10s\" and timeout = \"2s\"", want)
	}
	if ck.Interval < fsm.MinCheckInterval {
		return svc, ck, fmt.Errorf("the %s check's interval %s is shorter than the %s minimum", want, ck.Interval, fsm.MinCheckInterval)
	}
	if r == fsm.ReadinessExec {
		if ck.Command == "" {
			return svc, ck, fmt.Errorf("the script check needs a command (run inside the task's sandbox; exit 0 is ready)")
		}
		return svc, ck, nil
	}
	if ck.Port == "" {
		ck.Port = svc.Port
	}
	if ck.Port == "" {
		return svc, ck, fmt.Errorf("the %s check needs a port: a port label of the task's network block, in the check or its service", want)
	}
	if _, err := strconv.Atoi(ck.Port); err != nil {
		found := false
		for _, p := range t.PortRequests() {
			found = found || p.Label == ck.Port
		}
		if !found {
			return svc, ck, fmt.Errorf("the %s check's port %q is not a port label of the task's network blocks (declare port %q in the group's network block)", want, ck.Port, ck.Port)
		}
	}
	return svc, ck, nil
}

// checkReadiness settles t's readiness once its group's services are all
// read: a task that sets none runs the check of its service of provider
// "nomad" (impliedCheck); the file's notices say what is done with each
// check; the problems of the readiness check are diagnostics at the task,
// at parse time (its ports are not allocated yet: only labels are
// checked).
func (p *parser) checkReadiness(t *Task) {
	if t.Spec.Readiness == "" && t.Runnable() { // unset ("none" says: no readiness)
		if c, ok := t.impliedCheck(); ok {
			t.Spec.Readiness, t.readinessImplied = readinessOfCheck(c.Type), true
		}
	}
	if t.Runnable() {
		p.noticeChecks(t)
	}
	if !t.Spec.Readiness.Checked() {
		return
	}
	if _, _, err := t.readinessCheck(); err != nil {
		p.errorf(t.Range, "Bad readiness check", "Task %q: %v.", t.Name, err)
	}
}

// noticeChecks says, for each check of t's services, whether tether runs
// it (as t's readiness, with its check_restart) or ignores it, and why.
func (p *parser) noticeChecks(t *Task) {
	var runs *Check
	if t.Spec.Readiness.Checked() {
		if _, ck, err := t.findReadinessCheck(); err == nil {
			runs = &ck
		}
	}
	var group []Service
	if t.Group != nil {
		group = t.Group.Services
	}
	who := fmt.Sprintf("task %q:", t.Address())
	for i, list := range [][]Service{group, t.Services} {
		for _, s := range list {
			if i == 0 && s.Task != "" && s.Task != t.Name || i == 0 && s.Task == "" && !t.mainOfGroup() && runs == nil {
				continue // another task's (a group's service naming none is its main task's)
			}
			for _, c := range s.Checks {
				name := c.Name
				if name == "" {
					name = c.Type
				}
				what := fmt.Sprintf("check %q (%s) of service %q (provider %q)", name, c.Type, s.Name, s.Provider)
				var why string
				switch {
				case runs != nil && c.Range == runs.Range && c.Name == runs.Name && c.Type == runs.Type:
					why = fmt.Sprintf("runs it as the task's readiness (readiness = %q), with its check_restart", t.Spec.Readiness)
					if t.readinessImplied {
						why = fmt.Sprintf("runs it as the task's readiness, as Nomad runs a check of provider %q (start waits for it to pass), with its check_restart", providerNomad)
					}
				case readinessOfCheck(c.Type) == fsm.ReadinessNone:
					why = "ignores it: tether runs http, tcp and script checks"
				case t.Spec.Readiness.Notify():
					why = `ignores it: the task's readiness is "notify" (READY=1)`
				case t.Spec.Readiness == fsm.ReadinessNone:
					why = `ignores it: the task's readiness is "none"`
				case runs != nil:
					why = fmt.Sprintf("ignores it: tether runs one check per task, and runs %q", runs.Name)
				case s.Provider != providerNomad:
					why = fmt.Sprintf(`ignores it: a check of provider %q is Consul's to run, and tether registers nothing there (readiness = %q on the task runs it)`, s.Provider, readinessOfCheck(c.Type))
				default:
					why = "ignores it: the task's readiness check is not runnable (see the error)"
				}
				p.notices.add(NoticeCheck, what, who, why, c.Range)
			}
		}
	}
}

// readinessSpec is the fsm.Check of t's readiness, its port resolved
// against the allocated ports, its strings interpolated as the services'
// (checks are the interpolated services' ones).
func readinessSpec(t *Task, services []Service, ports []fsm.Port) (*fsm.Check, error) {
	if !t.Spec.Readiness.Checked() {
		return nil, nil
	}
	tt := *t
	tt.Group, tt.Services = nil, nil // the services are the instance's: the group's for t, and t's
	for _, s := range services {
		if s.Task == "" || s.Task == t.Name {
			if s.Task == "" && t.readinessImplied && s.Provider == providerNomad && !t.mainOfGroup() {
				continue // the group's main task's
			}
			s.Task = t.Name // (t stands alone here: its own)
			tt.Services = append(tt.Services, s)
		}
	}
	svc, ck, err := tt.withPorts(t).readinessCheck()
	if err != nil {
		return nil, err
	}
	c := &fsm.Check{Name: ck.Name, Path: ck.Path, Command: ck.Command, Args: ck.Args, Interval: ck.Interval, Timeout: ck.Timeout}
	if t.Spec.Readiness == fsm.ReadinessHTTP && c.Path == "" {
		c.Path = "/"
	}
	if cr := mergeCheckRestart(svc.CheckRestart, ck.CheckRestart); cr != nil {
		c.Restart = &fsm.CheckRestart{Limit: cr.Limit, Grace: cr.Grace, IgnoreWarnings: cr.IgnoreWarnings}
	}
	if t.Spec.Readiness == fsm.ReadinessExec {
		return c, nil
	}
	if n, err := strconv.Atoi(ck.Port); err == nil {
		c.Port, c.Address = n, "127.0.0.1"
		return c, nil
	}
	for _, p := range ports {
		if p.Label == ck.Port {
			c.PortLabel, c.Port, c.Address = p.Label, p.Value, p.IP
			if c.Address == "" || c.Address == "0.0.0.0" {
				c.Address = "127.0.0.1"
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("the check's port %q was not allocated", ck.Port)
}

// withPorts is tt with t's network blocks (the port labels it may name).
func (tt Task) withPorts(t *Task) *Task {
	if t.Group != nil && t.Group.Network != nil {
		tt.Network = &Network{Ports: append(append([]PortRequest{}, t.Group.Network.Ports...), netPorts(t.Network)...)}
	}
	return &tt
}

func netPorts(n *Network) []PortRequest {
	if n == nil {
		return nil
	}
	return n.Ports
}

// mergeCheckRestart is the check's check_restart over its service's:
// what the check sets wins (Nomad's merge); a grace neither sets is the
// default.
func mergeCheckRestart(svc, ck *CheckRestart) *CheckRestart {
	switch {
	case svc == nil:
		return ck
	case ck == nil:
		return svc
	}
	m := *svc
	if ck.Limit != 0 {
		m.Limit = ck.Limit
	}
	if ck.graceSet || !svc.graceSet {
		m.Grace = ck.Grace
	}
	m.IgnoreWarnings = m.IgnoreWarnings || ck.IgnoreWarnings
	return &m
}
