// Package taskfile reads tether task files and Nomad job files, and makes
// a task of them ready to run as Nomad would run it on one node.
//
// A task file holds task "name" { ... } blocks at the top level; a job
// file holds one job (job > group > task, or a task directly under the
// job). Both take Nomad's task stanzas (driver exec or raw_exec, config,
// env, resources, logs, restart, lifecycle, template, artifact, meta,
// constraint, service...). What tether does with each Nomad stanza is in
// docs/jobfiles.md: run, ignored with a one-line Notice, or refused by
// name.
//
// # Two steps, as Nomad
//
//  1. Parse evaluates what Nomad evaluates while parsing: var.* (variable
//     blocks, with Options.Vars, VarFiles and NOMAD_VAR_ inputs), local.*
//     and HCL's functions. Every other ${...} is a run-time reference
//     (NOMAD_* variables, env["X"], attr.*, node.*, meta.*): it stays in
//     its string as "${ref}". Parse reads nothing but its inputs.
//  2. Instantiate makes one copy of a task ready in a taskdir.Layout: it
//     checks the constraints against the Host (DetectHost), sets Nomad's
//     NOMAD_* variables (directories, alloc id and index, job, group and
//     task names, limits, meta, ports), and resolves every run-time
//     reference in config, env, meta, templates, artifacts and services
//     (Scope.Interpolate). A reference nothing resolves is an
//     ErrUnknownReference naming it.
//
// # Limits
//
// Reading a file is bounded (Limits, Options.MaxCount; docs/jobfiles.md
// lists them), whatever its source, so that no file can exhaust the memory
// or the time of the process that reads it: its size, its tokens, the
// nesting of its brackets and the cost of its strings' pieces are checked
// before HCL parses it; every expression is evaluated through a meter
// that bounds each value's size, each collection's length and the work of
// the whole file; every function that can make more than it is given is
// costed from its arguments before it runs. A file past a limit is
// refused with a diagnostic naming where and which limit (IsLimit).
// CheckSyntax is the same front door for text a caller keeps without
// evaluating it. Instantiate's run-time interpolation is bounded too
// (ErrLimit).
//
// # Usage
//
//	f, diags := taskfile.Parse("web.nomad", src, taskfile.Options{Vars: vars})
//	for _, d := range diags { fmt.Println(taskfile.FormatDiag(d)) }
//	for _, n := range f.Notices { fmt.Println("web.nomad:", n) } // ignores the "update" block (a scheduler concern)
//	gp, err := f.PlanGroup("web")                 // prestart, main, poststart, poststop
//	host := taskfile.DetectHost(taskfile.HostConfig{})
//	err = gp.Check(host)                          // constraints
//	alloc := &taskfile.Allocator{Dir: stateDir, IP: host.IP}
//	ports, err := alloc.Allocate(ctx, allocID, gp.PortRequests())
//	for i := 0; i < gp.Group.Count; i++ {
//		for _, t := range gp.Tasks() {
//			in, err := f.Instantiate(t, taskfile.Alloc{ID: allocID, Index: i, Host: host, Ports: ports, BaseEnv: base}, layout)
//			// in.Spec carries its Alloc (fill in Alloc.Tasks: the group's
//			// task ids), Templates, Artifacts and Ports: record every task
//			// of the copy (driver.CreateGroup), then run it
//			// (driver.RunGroup); the executor fetches and renders.
//		}
//	}
//
// # Names
//
// A task is addressed as GROUP.TASK, or by its name when no other task of
// the file has it (File.Find). tether names it the same way (File.Name),
// with "[i]" for each copy when its group's count is above one
// (File.InstanceName); NOMAD_TASK_NAME stays the bare task name.
package taskfile
