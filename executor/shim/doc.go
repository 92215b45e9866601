// Package shim is the init shim: the executor's binary again, re-executed
// by the executor process between the clone of a task and the task's exec,
// in the task's new namespaces. It joins the task's cgroup, builds an exec
// task's root (bind mounts, a proc and a minimal /dev of its own,
// pivot_root), changes to the working directory, switches user, sets the
// capabilities and no_new_privs, and execs the task (Run, with Flag); in
// join mode (RunJoin, with JoinFlag) it joins a running task through a
// pidfd to start a `tether exec` command inside it.
//
// It is code of the task's own process: nothing of it is linked by a
// driver (package executor), only by the executor process (package
// executor/server), whose Serve dispatches the shim's modes.
package shim
