// Package taskdir is Nomad's task directory layout as tether lays it out,
// and the only way the job-file packages (template, artifact) touch it:
// every write and every contained read goes through openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS below a directory opened once, so a
// path ("../../etc/x"), a symbolic link planted by the task, or an archive
// entry can never reach outside it.
//
// # The layout
//
// A task directory holds local/ (NOMAD_TASK_DIR), secrets/
// (NOMAD_SECRETS_DIR, 0700) and tmp/; the tasks of one group share an alloc
// directory (NOMAD_ALLOC_DIR) holding data/, logs/ and tmp/. As in Nomad, a
// raw_exec task starts in its task directory and sees host paths; an exec
// task starts in "/" of its root, where the task directory's local/,
// secrets/ and tmp/ are /local, /secrets and /tmp and the alloc directory is
// /alloc.
//
// # Usage
//
//	l := taskdir.Layout{TaskDir: "/var/lib/tether/allocs/a1/web", AllocDir: "/var/lib/tether/allocs/a1/alloc", Chroot: true}
//	t, err := l.Resolve("local/pid.sh") // as the task names it: relative to its working directory
//	// t.Root is l.TaskDir, t.Rel is "local/pid.sh"
//	r, err := taskdir.OpenRoot(t.Root)
//	defer r.Close()
//	err = r.WriteFile(t.Rel, data, 0o755, taskdir.Owner{UID: -1, GID: -1})
package taskdir
