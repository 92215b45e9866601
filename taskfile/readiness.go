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
// group's services that name it or no task, and its own): Nomad's check
// type "tcp", "http" or "script". The check's port (or its service's) is a
// port label of the task's network blocks, resolved at instantiation to
// the allocated host port and address, or a number; check_restart is the
// check's, over its service's (Nomad's merge).

// checkType is the Nomad check type of a checked readiness.
func checkType(r fsm.Readiness) string {
	if r == fsm.ReadinessExec {
		return "script"
	}
	return string(r)
}

// readinessCheck finds the check t's readiness runs, and its service;
// err says why there is none: no check of the readiness's type, several,
// or one that lacks what it needs (an interval and timeout, a port label
// of the task's, a command).
func (t *Task) readinessCheck() (svc Service, ck Check, err error) {
	r := t.Spec.Readiness
	want := checkType(r)
	var services []Service
	if t.Group != nil {
		for _, s := range t.Group.Services {
			if s.Task == "" || s.Task == t.Name {
				services = append(services, s)
			}
		}
	}
	services = append(services, t.Services...)
	n := 0
	var other []string
	for _, s := range services {
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
	switch {
	case n == 0 && len(other) > 0:
		return svc, ck, fmt.Errorf(`readiness = %q runs a check of type %q, and the task's checks are of type %v: set readiness to the check's type ("script" is readiness = "exec"), or add a check of type %q`, r, want, other, want)
	case n == 0:
		return svc, ck, fmt.Errorf(`readiness = %q needs a check: add a service block with a check { type = %q, interval, timeout%s } to the task (or to its group)`, r, want, map[bool]string{true: ", command", false: ", port"}[r == fsm.ReadinessExec])
	case n > 1:
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

// checkReadiness reports the problems of t's readiness check as
// diagnostics at the task, at parse time (its ports are not allocated
// yet: only labels are checked).
func (p *parser) checkReadiness(t *Task) {
	if !t.Spec.Readiness.Checked() {
		return
	}
	if _, _, err := t.readinessCheck(); err != nil {
		p.errorf(t.Range, "Bad readiness check", "Task %q: %v.", t.Name, err)
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
