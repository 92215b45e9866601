package job

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskfile"
)

// The operator's word on what a file may ask, whoever wrote the file: the
// drivers its tasks may use, the namespaces an exec task may share with
// the host, and how many copies of a group it may ask for. A file of any
// source is judged by them while it is planned (Vet, which Read runs
// first), before any check of the host, so that a refusal is the same on
// every host; the path checks each spec again as it is made (Check), after
// the command line's overrides (a --driver).

// Drivers are the drivers tether runs: the values AllowDrivers and
// AllowRemoteDrivers may list.
var Drivers = []string{executor.ModeExec, executor.ModeRawExec}

// DefaultDrivers are the drivers a node allows a file when its operator
// names none (--allow-drivers): both, as tether always ran them.
var DefaultDrivers = []string{executor.ModeExec, executor.ModeRawExec}

// DefaultRemoteDrivers are the drivers a node allows a spec from etcd
// when its operator names none (--allow-remote-drivers): exec alone, in
// its sandbox. Whoever can write one etcd key is trusted less than a local
// file: raw_exec would run their command as the agent's user (root).
var DefaultRemoteDrivers = []string{executor.ModeExec}

// NoDriver, alone in AllowRemoteDrivers (--allow-remote-drivers none),
// allows a spec from etcd no driver: the node runs nothing it is told
// through etcd (an empty list is no list: the default).
const NoDriver = "none"

// HostNamespaces are the namespaces an exec task may share with the host,
// by the operator's word (AllowHostNamespaces): "pid" (pid_mode = "host")
// and "ipc" (ipc_mode = "host"). Nomad's exec driver has these two modes
// and no other; the network namespace is the network block's (mode
// "host", the default, or "none"), and a task shares no other.
var HostNamespaces = []string{"pid", "ipc"}

// ForRemote is the policy a spec from etcd is read with (a node's desired
// state, a placement): the same lists, but its tasks may use only
// AllowRemoteDrivers. It narrows the drivers and nothing else, so a job
// read under it is one the policy itself allows too.
func (p Policy) ForRemote() Policy {
	p.Remote = true
	return p
}

// drivers are the drivers the policy allows a task: AllowDrivers (or
// DefaultDrivers), and for a remote spec those of AllowRemoteDrivers (or
// DefaultRemoteDrivers) that are among them.
func (p Policy) drivers() []string {
	local := p.AllowDrivers
	if local == nil {
		local = DefaultDrivers
	}
	if !p.Remote {
		return local
	}
	remote := p.AllowRemoteDrivers
	if remote == nil {
		remote = DefaultRemoteDrivers
	}
	out := []string{}
	for _, d := range remote {
		if slices.Contains(local, d) {
			out = append(out, d)
		}
	}
	return out
}

// RemoteDrivers are the drivers a spec from etcd may use under the policy
// (what a node offers the fleet's scheduler): AllowRemoteDrivers (or
// DefaultRemoteDrivers) that AllowDrivers allows too; empty, never nil,
// for none.
func (p Policy) RemoteDrivers() []string { return p.ForRemote().drivers() }

// maxCount is the bound on a group's count.
func (p Policy) maxCount() int {
	if p.MaxCount > 0 {
		return p.MaxCount
	}
	return taskfile.DefaultMaxCount
}

// list prints a list for a message: "exec,raw_exec", or "none".
func list(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ",")
}

// validateTrust checks the drivers, host namespaces and count bound: every
// driver one tether runs, every remote driver among the drivers (a spec
// from etcd may never use what a local file may not), every namespace one
// of HostNamespaces, a count bound that is not negative.
func (p Policy) validateTrust() error {
	for _, d := range p.AllowDrivers {
		if !slices.Contains(Drivers, d) {
			return fmt.Errorf("%w: --allow-drivers %q: tether runs %s", ErrBadInput, d, strings.Join(Drivers, " and "))
		}
	}
	local := p.AllowDrivers
	if local == nil {
		local = DefaultDrivers
	}
	for _, d := range p.AllowRemoteDrivers {
		if d == NoDriver && len(p.AllowRemoteDrivers) == 1 {
			continue
		}
		if !slices.Contains(Drivers, d) {
			return fmt.Errorf("%w: --allow-remote-drivers %q: tether runs %s", ErrBadInput, d, strings.Join(Drivers, " and "))
		}
		if !slices.Contains(local, d) {
			return fmt.Errorf("%w: --allow-remote-drivers lists %s, which --allow-drivers (%s) does not: a spec from etcd may use only a driver a local file may; add it to --allow-drivers too, or leave it out of --allow-remote-drivers",
				ErrBadInput, d, list(local))
		}
	}
	for _, n := range p.AllowHostNamespaces {
		if !slices.Contains(HostNamespaces, n) {
			return fmt.Errorf("%w: --allow-host-namespaces %q: give %s (pid_mode and ipc_mode = \"host\" of exec tasks; the network is the network block's, and no other namespace is shared)",
				ErrBadInput, n, strings.Join(HostNamespaces, ", "))
		}
	}
	if p.MaxCount < 0 {
		return fmt.Errorf("%w: --max-count %d: give a positive number of copies", ErrBadInput, p.MaxCount)
	}
	return nil
}

// checkDriver refuses a task whose driver the policy does not allow,
// naming the driver, the list and its flag.
func (p Policy) checkDriver(task, driver string) error {
	allowed := p.drivers()
	if slices.Contains(allowed, driver) || !slices.Contains(Drivers, driver) {
		return nil // a driver tether does not run is the plan's to refuse (named there)
	}
	if p.Remote {
		return fmt.Errorf("%w: task %q: driver %q is not allowed for a spec from etcd on this node: its --allow-remote-drivers is %s (TETHER_ALLOW_REMOTE_DRIVERS; whoever writes to etcd gets no more unless the node's operator says so)",
			ErrNotAllowed, task, driver, list(allowed))
	}
	return fmt.Errorf("%w: task %q: driver %q is not allowed on this node: its --allow-drivers is %s (TETHER_ALLOW_DRIVERS); use a driver it lists, or ask its operator",
		ErrNotAllowed, task, driver, list(allowed))
}

// checkNamespaces refuses an exec task that shares a namespace with the
// host (pid_mode, ipc_mode = "host") the policy does not allow. A
// raw_exec task shares every namespace anyway; fsm.Spec.Validate refuses
// the modes there.
func (p Policy) checkNamespaces(task string, s fsm.Spec) error {
	if s.Driver != executor.ModeExec {
		return nil
	}
	for _, m := range []struct{ attr, v, ns, what string }{
		{"pid_mode", s.PIDMode, "pid", "the host's processes: it could read other tasks' environments in /proc and signal them"},
		{"ipc_mode", s.IPCMode, "ipc", "the host's System V IPC and POSIX message queues"},
	} {
		if m.v == "" || slices.Contains(p.AllowHostNamespaces, m.ns) {
			continue
		}
		return fmt.Errorf("%w: task %q: %s = %q shares %s; the node's operator allows it with --allow-host-namespaces %s (TETHER_ALLOW_HOST_NAMESPACES; this node allows %s)",
			ErrNotAllowed, task, m.attr, m.v, m.what, m.ns, list(p.AllowHostNamespaces))
	}
	return nil
}

// checkSpec is Check's part of the drivers and namespaces, on a spec as
// made (the command line's overrides applied).
func (p Policy) checkSpec(s fsm.Spec) error {
	if err := p.checkDriver(s.Name, s.Driver); err != nil {
		return err
	}
	return p.checkNamespaces(s.Name, s)
}

// CheckJob refuses a planned job any of whose tasks asks what the policy
// does not allow: a driver (AllowDrivers, or AllowRemoteDrivers for a
// remote policy), a namespace shared with the host (AllowHostNamespaces),
// or a group of more copies than MaxCount. It reads the file as planned,
// nothing of the host: Read runs it before any host check.
func (p Policy) CheckJob(j *Job) error {
	for _, g := range j.Groups {
		if g.Count > p.maxCount() {
			return fmt.Errorf("%w: group %q has count = %d; this node runs at most %d copies of a group (--max-count, TETHER_MAX_COUNT)", ErrNotAllowed, g.Name, g.Count, p.maxCount())
		}
		for _, t := range g.Tasks {
			if err := p.checkDriver(t.Address(), t.Driver); err != nil {
				return err
			}
			s := t.Spec
			s.Driver = t.Driver
			if err := p.checkNamespaces(t.Address(), s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Vet is the part of Read that depends on no host: src parsed with in,
// under the policy's bound on count (a file past it, or past any of the
// parser's limits, is a *ParseError naming the limit), its groups
// planned, and the policy's drivers and host namespaces applied
// (CheckJob). What passes Vet is judged the same on every host; a node
// keeps a spec from etcd only once it passed (the fleet's local copy).
func Vet(src Source, in Inputs, p Policy) (*Job, error) {
	j, err := parse(src, in, p.maxCount())
	if err != nil {
		return j, err
	}
	return j, p.CheckJob(j)
}
