// Package job is tether's one path from a task or job file to tasks ready
// to record: every source of work goes through it (tether run and start
// with a file, a file of the agent's --config-dir, tether enable, a
// node's desired state from etcd), and differs only in who asks and who
// drives what it makes.
//
// # The path
//
//  1. Read: the file's text with its inputs (-var, -var-file, NOMAD_VAR_
//     variables, dispatch meta, the --task or --group selection) is
//     parsed (taskfile.Parse), its groups planned (every group tether can
//     run, or the one selected; the others named in Job.Skipped), checked
//     against the host (constraints) and, by a dry run of the whole
//     instantiation with stand-in ids and ports, against everything that
//     does not depend on which allocation it becomes: every run-time
//     reference resolves, every spec is valid (fsm.Spec.Validate), the
//     node's Policy allows it, and the node's own check of a spec
//     (Node.CheckSpec: the driver's, which an agent gives for a desired
//     source) passes. Nothing is written: a file refused is refused
//     here, by name, with all of it.
//  2. Shapes: the allocations the job makes (each group, count copies,
//     each copy its tasks' names in start order), for a caller that draws
//     (and records, ahead) the ids of each: NewIDs.
//  3. Instantiate: each allocation with its ids is made ready: its ports
//     allocated (Node.Ports, keyed by the allocation's id), each task's
//     directories laid out under the state directory's allocs/ALLOC,
//     Nomad's NOMAD_* variables and the executor's base environment
//     (Node.BaseEnv) set, every run-time reference resolved, the command
//     line's Overrides applied, the group's reschedule policy carried in
//     each spec's Alloc, and the Policy checked again on the result. On
//     failure the ports it allocated are let go of.
//  4. The caller records the tasks (driver.CreateGroup, or StartNamed
//     for a run of one task) and drives them (driver.RunGroup).
//
// What a source cannot honour is refused by name before anything is
// written (the dry run of Read), and nothing is dropped silently: the
// notices and warnings of the parse come back in Job.Notes, and a group
// not run in Job.Skipped.
//
// # Policy
//
// Policy holds the node's allow lists: the capabilities and seccomp
// profiles an exec task may ask for, its chroot, the sandbox parts it may
// run without (the driver and the executor apply those: Policy.Executor),
// and the host directories a template's source or a local artifact may be
// read from (--allow-read), which Policy.Check applies here, before
// anything runs, with the same resolution the executor renders with
// (taskdir.Layout.ResolveRead). A template is read with the allow list of
// the process that instantiates it: through an agent, the agent's, never
// the caller's.
//
// Policy holds the operator's word on what a file may ask too (policy.go),
// judged while the file is planned (Vet, Read's first step), before any
// check of the host, so that a refusal is the same on every host: the
// drivers its tasks may use (AllowDrivers, default both; a spec from
// etcd, read under ForRemote, only AllowRemoteDrivers, default exec), the
// namespaces an exec task may share with the host (AllowHostNamespaces:
// pid_mode, ipc_mode = "host"; default none) and the copies of a group
// (MaxCount, default 1,000). Check applies the drivers and namespaces
// again to each spec as made (after a --driver override), and the
// executor once more at launch (executor.Policy).
//
// # Usage
//
//	j, err := job.Read(job.Source{File: path, Text: text}, job.Inputs{Vars: vars}, node)
//	if err != nil { ... } // *ParseError (its lines), ErrNothingToRun, taskfile's ErrNoTask...
//	var ids []job.IDs
//	for _, s := range j.Shapes() {
//		ids = append(ids, job.NewIDs(s))
//	}
//	run, err := j.Instantiate(ctx, node, ids, job.Overrides{})
//	for _, a := range run.Allocs { ... a.Tasks: id and spec, to record ... }
package job
